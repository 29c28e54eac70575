"""`imaging-review`: what a governance reviewer runs, offline, on a release or one published file.

    imaging-review PATH [--html OUT]      verify and print the lineage of a release folder or one file
    imaging-review pending                held releases, one a line: path<TAB>cohort<TAB>version<TAB>id<TAB>status
    imaging-review approve PATH --by NAME [--note TEXT]

Reviewing verifies the checksums (the whole release, or for one file that file and the release's
description files), reads the data card and lineage the release carries, its approval, and, only
when `IMAGING_WAREHOUSE` is set, the identifiable zone: the approval store and the provenance ledger,
which trace every image back to its landing file, checksum, run and partition. Exit status 0 when
everything verified, 1 when anything did not, 2 on a usage error.

Landing paths, real dates and sites are printed to the terminal only (the reviewer has access to the
identifiable zone); the HTML report carries checksums, runs and versions, never those.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

from imaging import fs as fsx
from imaging.catalogue import COHORTS, HELD, LEDGER
from imaging.governance.approval import (Approval, ApprovalError, approval_copy, list_held, load_approval,
                                         record_approval)
from imaging.governance.bundle import BundleCheck, find_bundle_root, read_manifest, verify_bundle
from imaging.governance.datacard import NOT_EVALUATED, NOT_OBSERVED
from imaging.provenance import ProvenanceRecord, lookup


@dataclass(frozen=True)
class Trace:
    """One released image walked back through the provenance ledger."""

    file: str  # path inside the release
    sha256: str
    record: ProvenanceRecord | None
    landing: str  # "verified" | "absent" | "differs" | "not traced"


@dataclass
class Review:
    root: str
    file: str | None
    state: str  # published | held | unplaced
    check: BundleCheck
    card: dict | None = None
    row: dict | None = None  # the metadata row of the reviewed file
    approval: Approval | None = None  # the copy the release carries (published) or the store's (held)
    approval_record: Approval | None = None  # the authoritative record (identifiable zone), when readable
    warehouse: str | None = None
    traces: list[Trace] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def release_id(self) -> str | None:
        return self.check.release_id


def _state(root: str) -> str:
    if f"/{COHORTS.path}/" in root + "/":
        return "published"
    if f"/{HELD.path}/" in root + "/":
        return "held"
    return "unplaced"


def _read_json(url: str) -> dict | None:
    if not fsx.exists(url):
        return None
    fs, path = fsx.filesystem(url)
    with fs.open(path, "rb") as handle:
        return json.loads(handle.read())


def _metadata_row(root: str, file: str) -> dict | None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    url = f"{root}/metadata.parquet"
    if not fsx.exists(url):
        return None
    fs, path = fsx.filesystem(url)
    table = pq.read_table(path, filesystem=fs)
    rows = table.filter(pc.equal(table["file"], file)).to_pylist()
    return rows[0] if rows else None


def _landing_state(record: ProvenanceRecord) -> str:
    try:
        if not fsx.exists(record.source_path):
            return "absent"
        return "verified" if fsx.sha256_url(record.source_path) == record.source_sha256 else "differs"
    except OSError:
        return "absent"


def _scope(check: dict) -> str:
    """Where a card's check result applies: its partitions (a count), the whole table, or the release."""
    if check.get("partitions"):
        return f"[{len(check['partitions'])} partitions]"
    return {"whole table": "[whole table]", "release": "[this release]"}.get(check.get("scope", "release"), "")


@dataclass(frozen=True)
class CardFindings:
    """What a data card's checks mean for a review: problems fail it, notes are shown."""

    problems: list[str]
    notes: list[str]


def card_check_findings(card: dict) -> CardFindings:
    """What the card's checks mean for a review: problems and notes.

    A failed ERROR check is a problem (it should have blocked publication); a failed WARN check and
    a check with no evaluation on some input partitions are shown as notes. Input partitions whose
    landing site-day was never observed are a note too.
    """
    checks = card.get("checks", [])
    label = lambda c: f"{c['asset']}:{c['check']}" + (  # noqa: E731
        f" ({len(c['partitions'])} partitions)" if c.get("partitions") else "")
    problems, notes = [], []
    failed = [label(c) for c in checks if c["result"] == "failed" and c.get("severity", "ERROR") == "ERROR"]
    if failed:
        problems.append(f"failed ERROR checks recorded in the data card: {', '.join(failed)}")
    warned = [label(c) for c in checks if c["result"] == "failed" and c.get("severity") == "WARN"]
    if warned:
        notes.append(f"failed WARN checks recorded in the data card (shown, not blocking): {', '.join(warned)}")
    unknown = sorted({f"{c['asset']}:{c['check']}" for c in checks if c["result"] == NOT_EVALUATED})
    if unknown:
        notes.append(f"{len(unknown)} checks have no recorded evaluation on some input partitions "
                     f"(the data card says \"{NOT_EVALUATED}\")")
    unobserved = sum(1 for p in card.get("inputs", []) if p.get("landing_data_version") in (None, NOT_OBSERVED))
    if unobserved:
        notes.append(f"{unobserved} input partitions have no observed landing data version")
    return CardFindings(problems=problems, notes=notes)


def review(path: str, warehouse: str | None = None) -> Review:
    """Verify a release folder or one published file and gather its lineage."""
    location = find_bundle_root(path)
    root, inner = location.root, location.inner
    check = verify_bundle(root, only=inner)
    result = Review(root, inner, _state(root), check, warehouse=warehouse)
    result.problems += list(check.problems)
    result.card = _read_json(f"{root}/datacard.json")
    if result.card is None:
        result.problems.append("no data card (datacard.json)")
    else:
        if not result.card.get("disclosure", {}).get("passed", False):
            result.problems.append("the data card records a failed k-anonymity check")
        findings = card_check_findings(result.card)
        result.problems += findings.problems
        result.notes += findings.notes
    if inner is not None:
        if inner.startswith("images/"):
            result.row = _metadata_row(root, inner)
            if result.row is None:
                result.problems.append("the file has no row in metadata.parquet")

    # Approval: a published release must carry one naming its exact content.
    carried = approval_copy(root)
    if result.state == "published" and carried is None:
        result.problems.append("published without an approval (no APPROVAL.json)")
    if carried is not None and carried.release_id != check.release_id:
        result.problems.append("APPROVAL.json approves other content than this release")
    result.approval = carried
    if warehouse and check.release_id:
        result.approval_record = load_approval(warehouse, check.release_id)
        if result.state == "published" and result.approval_record is None:
            result.problems.append("no approval of this release id in the approval store")
        elif carried is not None and result.approval_record is not None and carried != result.approval_record:
            result.problems.append("APPROVAL.json differs from the approval store's record")
        if result.approval is None:
            result.approval = result.approval_record
    elif not warehouse:
        result.notes.append("IMAGING_WAREHOUSE not set: the identifiable zone (approval store, provenance ledger) "
                            "was not read; shown is what the release itself proves")

    if warehouse and check.release_id:
        images = [e for e in read_manifest(root).entries
                  if e.path.startswith("images/") and (inner is None or e.path == inner)]
        found = lookup(f"{warehouse}/{LEDGER.path}", [e.sha256 for e in images])
        for entry in images:
            records = found.get(entry.sha256) or [None]
            for record in records:
                state = _landing_state(record) if record else "not traced"
                result.traces.append(Trace(entry.path, entry.sha256, record, state))
        untraced = sum(1 for t in result.traces if t.record is None)
        differs = sum(1 for t in result.traces if t.landing == "differs")
        absent = sum(1 for t in result.traces if t.landing == "absent")
        if untraced:
            result.problems.append(f"{untraced} images have no provenance ledger row")
        if differs:
            result.problems.append(f"{differs} landing files no longer have the checksum the ledger recorded")
        if absent:
            result.notes.append(f"{absent} landing files are no longer in the landing zone (checksums from the ledger)")
    return result


def render_text(r: Review) -> str:
    card = r.card or {}
    lines = [f"Release   {r.root}", f"State     {r.state}",
             f"Release id {r.release_id or '(none)'}   (sha256 of SHA256SUMS)"]
    if r.file:
        lines.append(f"File      {r.file}")
    verdict = "VERIFIED" if r.ok else "FAILED"
    scope = "every file" if r.file is None else "this file and the release's description files"
    lines.append(f"Checksums {r.check.checked} of {r.check.listed} listed files recomputed ({scope}); "
                 f"{'no problems' if not r.check.problems else f'{len(r.check.problems)} problems'}")
    if card:
        lines += ["", f"Cohort    {card['cohort']} v{card['version']}: {card.get('description', '')}",
                  f"Selection {card['selection']['predicate']}",
                  f"Data digest {card['data_digest']}",
                  "Counts    " + ", ".join(f"{k} {card['counts'][k]}" for k in ("images", "patients", "studies", "series"))]
        k = card["disclosure"]
        lines.append(f"k-anonymity over ({', '.join(k['quasi_identifiers'])}): min k {k['min_k']}, "
                     f"smallest class {k['smallest_class']}, {'passed' if k['passed'] else 'FAILED'}")
        d = card["deidentification"]
        lines.append(f"Profile   {d['standard']}; engine {d['engine']}")
        lines.append("Options   " + ", ".join(f"{o['name']} ({o['code']})" for o in d["options"]))
        lines.append("Code      " + ", ".join(f"{a} {v}" for a, v in card["code_versions"].items()))
        lines += ["", "Checks (latest result of each):"]
        lines += [f"  {c['result']:13s} {c.get('severity', ''):5s} {c['asset']}:{c['check']} {_scope(c)} " + (
            f"run {c['run_id']} at {c['evaluated_at']}" if c["run_id"] else
            "(evaluated as the release was built)" if c.get("scope", "release") == "release" else "")
            for c in card["checks"]] or ["  (none recorded)"]
        lines += ["", "Inputs (partitions by batch token, data version, run, landing data version):"]
        lines += [f"  {p['asset']} {p['batch']} {p['data_version']} run {p['run_id']} at {p['materialized_at']}, "
                  f"landing data version {p.get('landing_data_version') or NOT_OBSERVED}" for p in card["inputs"]]
        lines += ["", "Runs:"] + [f"  {x['run_id']}: {'; '.join(x['did'])}" for x in card["runs"]]
    if r.row:
        lines += ["", "Metadata row of this file:"] + [f"  {k} = {v}" for k, v in r.row.items()]
    lines.append("")
    if r.approval:
        a = r.approval
        lines.append(f"Approval  by {a.approved_by} at {a.approved_at}" + (f": {a.note}" if a.note else ""))
        if r.approval_record:
            lines.append("          matches the approval store (identifiable zone)")
    else:
        lines.append("Approval  none" + (" (held: waiting for `imaging-review approve`)" if r.state == "held" else ""))
    if r.traces:
        lines += ["", "Provenance (identifiable zone): release file <- de-identified output <- landing file"]
        for t in r.traces:
            if t.record is None:
                lines.append(f"  {t.file}  sha256 {t.sha256}  NOT TRACED")
                continue
            p = t.record
            lines += [f"  {t.file}  sha256 {t.sha256}",
                      f"    output   {p.output_path}",
                      f"    landing  {p.source_path}  sha256 {p.source_sha256} ({t.landing})",
                      f"    run {p.run_id} (started {p.run_started_at})  partition {p.date}|{p.site}  "
                      f"code {p.code_version}",
                      f"    profile {p.deid_profile}; options {p.deid_options}"]
    if r.notes:
        lines += [""] + [f"Note: {n}" for n in r.notes]
    lines += ["", f"Result    {verdict}"] + [f"  problem: {p}" for p in r.problems]
    return "\n".join(lines) + "\n"


def _warehouse() -> str | None:
    value = os.environ.get("IMAGING_WAREHOUSE", "").strip()
    if not value:
        return None
    return value.rstrip("/") if "://" in value else os.path.abspath(os.path.expanduser(value))


def _local(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(os.path.expanduser(path))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pending"]:
        parser = argparse.ArgumentParser(prog="imaging-review pending",
                                         description="Held releases, one a line: path, cohort, version, id, status.")
        parser.add_argument("--warehouse", default=None, help="warehouse root [IMAGING_WAREHOUSE]")
        args = parser.parse_args(argv[1:])
        warehouse = _local(args.warehouse) if args.warehouse else _warehouse()
        if not warehouse:
            parser.error("set IMAGING_WAREHOUSE (held releases are in its identifiable zone) or pass --warehouse")
        for held in list_held(warehouse):
            print("\t".join([held.path, held.cohort, f"v{held.version}", held.release_id, held.status]))
        return 0
    if argv[:1] == ["approve"]:
        parser = argparse.ArgumentParser(prog="imaging-review approve",
                                         description="Record an approval of a held release's exact content.")
        parser.add_argument("path", help="a held release folder (from `imaging-review pending`)")
        parser.add_argument("--by", required=True, help="the approver's name")
        parser.add_argument("--note", default=None)
        args = parser.parse_args(argv[1:])
        try:
            approval = record_approval(_local(args.path), args.by, args.note)
        except (ApprovalError, FileNotFoundError) as error:
            print(f"imaging-review: {error}", file=sys.stderr)
            return 1
        print(f"approved {approval.cohort} v{approval.version} release {approval.release_id} "
              f"by {approval.approved_by} at {approval.approved_at}; "
              f"the next materialization of published_cohort publishes it")
        return 0
    parser = argparse.ArgumentParser(prog="imaging-review", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a release folder or one file of a release")
    parser.add_argument("--html", default=None, help="also write a self-contained HTML report here")
    args = parser.parse_args(argv)
    try:
        result = review(_local(args.path), _warehouse())
    except FileNotFoundError as error:
        print(f"imaging-review: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(render_text(result))
    if args.html:
        from imaging.governance.review_html import render_html

        os.makedirs(os.path.dirname(os.path.abspath(args.html)), exist_ok=True)
        with open(args.html, "w", encoding="utf-8") as handle:
            handle.write(render_html(result))
        print(f"HTML report: {args.html}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
