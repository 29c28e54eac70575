"""A cohort's review as Markdown, for its materialization in the Dagster UI (published_cohort, one partition a cohort).

What a reviewer reads first in `imaging-review` (verdict, flags, approvals) and a link to the whole review (the HTML
the run wrote for this exact release: contact sheet, opt-outs, evidence, audit, provenance; served by the proxy
behind the same login), then the counts, the opt-out table, the burned-in text counts, the disclosure control, the
quarantine of the inputs and the upstream checks, and the site-days the release read: one row each, linked to that
site-day's page in the UI (Dagster's own asset-partition URL, from the host's root so it works through the
authenticating proxy) and to the run whose materialization this version read. Nothing here is a link that only
works on the server: folders are shown as warehouse-relative paths in code spans.

Pure: rendered from a `Review` (imaging.governance.review) when the release is held or published, and from the
build's own facts otherwise (blocked, rejected, empty). No values from files: counts, reason phrases, check
names, principals who signed, digests, partition keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from imaging.governance.optout_table import OptOutTable
from imaging.governance.review import Review


@dataclass(frozen=True)
class SiteDayRead:
    """One site-day a release read: its partition key, its opaque batch token and the images it gave the release."""

    site_day: str  # date|site, as Dagster names the partition
    batch: str
    images: int


@dataclass(frozen=True)
class CohortState:
    """What the run did with the cohort (imaging.governance.approval: held, publish, unchanged, blocked, ...)."""

    cohort: str
    version: int
    action: str
    reason: str
    release_id: str
    images: int
    min_k: int
    smallest_class: int | None  # None: not computed (nothing selected)
    path: str | None  # warehouse-relative folder of the release, held or published


def _cell(text: object) -> str:
    """A table cell: no pipe or line break can break the table, no HTML is interpreted."""
    return (str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def _checks_by_batch(card: dict | None) -> dict[str, dict[str, int]]:
    """Per batch token: how many upstream checks' latest results passed, failed, or were not evaluated there."""
    out: dict[str, dict[str, int]] = {}
    for c in (card or {}).get("checks", []):
        if c.get("asset") == "published_cohort":
            continue
        for batch in c.get("partitions") or ():
            tally = out.setdefault(batch, {})
            tally[c["result"]] = tally.get(c["result"], 0) + 1
    return out


def render_markdown(state: CohortState, review: Review | None, site_days: Sequence[SiteDayRead],
                    link: Callable[[str, str], str], *, full_review: str | None = None,
                    optouts: OptOutTable | None = None, run_link: Callable[[str], str] | None = None) -> str:
    """The review of one cohort's release as Markdown. `link(asset, partition)` gives the UI's page of a
    partition (a root-relative URL); the site-days are linked to their `anonymized_images` and
    `raw_image_index` pages, where their materializations and checks are, and (`run_link(run_id)`) to the run
    whose materialization the release read. `full_review`: the address of the whole review (HTML)."""
    verdict = review.verdict if review is not None else state.action.upper()
    lines = [f"## {_cell(state.cohort)} v{state.version}: {_cell(state.action)}", "",
             f"**Verdict: {_cell(verdict)}**" + (f" ({_cell(state.reason)})" if state.reason else ""), ""]
    if full_review:
        lines += [f"**[The whole review of this release]({full_review})**: contact sheet, opt-outs, per-attribute "
                  "evidence, audit log, provenance (the run's HTML report of exactly this release id).", ""]
    if review is not None:
        for problem in review.all_problems:
            lines.append(f"- **problem**: {_cell(problem)}")
        for flag in review.all_flags:
            lines.append(f"- **FLAG**: {_cell(flag)}")
        if review.all_problems or review.all_flags:
            lines.append("")
    lines += ["| | |", "|---|---|", f"| release id | `{state.release_id or '-'}` |",
              f"| state | {_cell(state.action)} |"]
    if state.path:
        lines.append(f"| folder (warehouse-relative) | `{_cell(state.path)}` |")
    lines.append(f"| images | {state.images} |")
    if review is not None and review.counts is not None:
        c = review.counts
        lines += [f"| patients | {c.patients} |", f"| studies | {c.studies} |", f"| series | {c.series} |"]
    lines.append("")

    lines += ["### Approvals", ""]
    standing = review.standing if review is not None else None
    if standing is None:
        lines.append("none readable" if review is not None else "no release to approve")
    else:
        lines.append(f"{len(standing.approvals)} of {standing.required} signed approvals required "
                     f"(signatures verified against the allowed signers)")
        decisions = (*standing.approvals, *standing.rejections)
        if decisions:
            lines += ["", "| decision | who | when | key | review report sha256 |", "|---|---|---|---|---|"]
            lines += [f"| {t.kind} | {_cell(t.principal)} | {t.signed_at} | `{t.key_fingerprint}`"
                      f"{' (DEMO KEY)' if d.demo_key else ''} | `{t.review_sha256}` |"
                      for d in decisions for t in (d.text,)]
        if review.state == "held" and not standing.rejected and not standing.approved:
            lines += ["", "Waiting for listed approvers: `imaging-review approve <held folder> --key KEY`, each after "
                          "reading `imaging-review <held folder>`."]
    lines.append("")

    if optouts is not None:
        lines += optouts.markdown()
    text = review.text if review is not None else None
    if text is not None:
        lines += ["### Burned-in text", "", "| image type | screened | clean | redacted | quarantined | not read |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {_cell(name)} | {v.screened} | {v.clean} | {v.redacted} | "
                  f"{'not read' if v.quarantined is None else v.quarantined} | {v.not_read} |"
                  for name, v in text.counts.items()]
        lines.append("")

    lines += ["### Disclosure control", ""]
    if review is not None and review.k is not None:
        k = review.k
        agree = "the headers agree with the metadata" if k.same_as_metadata else "the headers DIFFER from the metadata"
        lines.append(f"k-anonymity recomputed from the released files (metadata and DICOM headers) over "
                     f"{', '.join(k.quasi_identifiers)}: smallest class **{k.smallest}**, {len(k.class_sizes)} "
                     f"classes, minimum k {state.min_k}, policy minimum {review.policy_min_k}; {agree}.")
    elif state.smallest_class is not None:
        lines.append(f"smallest equivalence class {state.smallest_class}, minimum k {state.min_k}")
    else:
        lines.append("nothing selected: nothing disclosed")
    lines.append("")

    if review is not None and review.quarantine is not None:
        lines += ["### Quarantine of the inputs", "", "Files held back in the site-days the release read (their own "
                  "pages list each file by token; `patient opted out`: the opt-out table above counts them over every "
                  "site-day):", "",
                  "| table | reason | files |", "|---|---|---:|"]
        lines += [f"| {_cell(q.table)} | {_cell(q.reason)} | {q.files} |" for q in review.quarantine] or [
            "| (none) | | 0 |"]
        lines.append("")

    card = review.card if review is not None else None
    if card:
        failed = [c for c in card.get("checks", []) if c.get("result") == "failed"]
        unevaluated = [c for c in card.get("checks", []) if c.get("result") == "not evaluated"]
        lines += ["### Checks", "",
                  f"{len(card.get('checks', []))} results recorded in the data card: {len(failed)} failed, "
                  f"{len(unevaluated)} not evaluated."]
        where: dict[tuple[str, str, str], int] = {}
        for c in failed:
            key = (c["asset"], c["check"], c.get("severity", ""))
            where[key] = where.get(key, 0) + (len(c.get("partitions") or ()) or 1)
        lines += [f"- failed: {_cell(a)}:{_cell(n)} ({_cell(sev)}) on {count} site-day{'s' if count != 1 else ''}"
                  for (a, n, sev), count in sorted(where.items())]
        lines.append("")

    checks = _checks_by_batch(card)
    runs = {p["batch"]: p["run_id"] for p in (card or {}).get("inputs", [])}
    lines += ["### Site-days read", "",
              "Each site-day's page shows its materializations and its own checks; its run is the one whose "
              "materialization this release read.", "",
              "| site-day | images | upstream checks (passed / failed / not evaluated) | index | run read | batch |",
              "|---|---:|---|---|---|---|"]
    for s in sorted(site_days, key=lambda s: s.site_day):
        tally = checks.get(s.batch, {})
        run = runs.get(s.batch)
        shown = f"[{run[:8]}]({run_link(run)})" if run and run_link and run != "unknown" else "-"
        lines.append(f"| [{_cell(s.site_day)}]({link('anonymized_images', s.site_day)}) | {s.images} | "
                     f"{tally.get('passed', 0)} / {tally.get('failed', 0)} / {tally.get('not evaluated', 0)} | "
                     f"[raw_image_index]({link('raw_image_index', s.site_day)}) | {shown} | `{_cell(s.batch)}` |")
    if not site_days:
        lines.append("| (none) | 0 | | | | |")
    return "\n".join(lines) + "\n"
