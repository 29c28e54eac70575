"""The review report as one self-contained HTML file: no server, no network, the graph as inline SVG.

What a reviewer needs to sign comes first: the verdict, the problems and flags, the signed approvals.
Then the evidence the review recomputed (exact counts and class sizes, per-attribute counts, the
quarantine of the partitions read), then the column lineage drawn from the lineage the release
carries (`datacard.json`): identifiable sources, de-identified manifest, release. The run that builds a release
also writes this report into the identifiable zone, where the proxy serves it behind the UI's login: that copy adds
what was reviewed (the site-days read, each with the run whose materialization it read, linked into the UI) and the
cohort version's opt-out table, the same as its Markdown and metadata (`Served`). Source nodes are
the clinical columns that actually arrived when the identifiable zone was read (otherwise one node
per policy column, naming its aliases); columns dropped on the way are listed under the drawing,
not drawn as edges; the legend says what each edge colour means, and an edge table repeats every
edge in words so the meaning survives printing. The report holds checksums, tokens, runs and versions,
never a landing path (a landing file is named by its keyed token); only the served copy names site-days. Rendered from `templates/review.html` (jinja2, autoescape on);
this module only shapes the review into what the template draws (the lineage graph's geometry included).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from imaging.governance.lineage import LINKED, MANIFEST, RELEASE
from imaging.governance.optout_table import OptOutTable


@dataclass(frozen=True)
class SiteDayLink:
    """A site-day a release read, as the served review lists it: its page and the run whose materialization it read."""

    site_day: str
    images: int
    page: str  # the UI's page of the site-day (root-relative)
    run_id: str
    run_page: str  # the UI's page of that run ('' when unknown)


@dataclass(frozen=True)
class Served:
    """What the run adds to the copy it writes for the UI (identifiable zone, served behind the login)."""

    optouts: OptOutTable | None = None
    site_days: tuple[SiteDayLink, ...] = field(default_factory=tuple)
    cohort_page: str = ""  # the cohort's partition page in the UI
COLOURS = {"kept": "#4a7fb5", "pseudonymised": "#8e44ad", "shifted": "#d35400", "generalised": "#16a085",
           "cleaned": "#7f8c8d", "derived": "#2c3e50", "dropped": "#c0392b"}
MEANINGS = {"kept": "the value passes unchanged", "pseudonymised": "replaced by a keyed token or 2.25 UID",
            "shifted": "a date moved by the patient's keyed shift", "generalised": "coarsened (a band, a code)",
            "cleaned": "text with identifying terms scrubbed", "derived": "computed from the sources",
            "dropped": "the column exists, emptied (dashed)"}
TITLES = {LINKED: "identifiable: linked_patient_metadata", MANIFEST: "de-identified: anonymized_images manifest",
          RELEASE: "release: metadata columns"}
ROW, NODE_W, GAP, TOP = 20, 230, 190, 60
CLINICAL = "clinical."


def _sources(entry: dict, arrived: set[str] | None) -> list[tuple[str, str]]:
    """An edge's source nodes: clinical aliases as they arrived, or one node naming every alias."""
    plain = [(s["table"], s["column"]) for s in entry["sources"]
             if not (s["table"] == LINKED and s["column"].startswith(CLINICAL))]
    aliases = [s["column"][len(CLINICAL):] for s in entry["sources"]
               if s["table"] == LINKED and s["column"].startswith(CLINICAL)]
    if not aliases:
        return plain
    if arrived is not None:
        return [(LINKED, f"{CLINICAL}{a}") for a in aliases if a in arrived] + plain
    return [(LINKED, CLINICAL + (aliases[0] if len(aliases) == 1 else "{" + "|".join(aliases) + "}"))] + plain


def _drawn(lineage: list[dict], arrived: set[str] | None) -> list[tuple[list[tuple[str, str]], dict]]:
    return [(_sources(e, arrived), e) for e in lineage if e["column"]]


def _graph(lineage: list[dict], arrived: set[str] | None) -> dict:
    """The lineage drawing's geometry: titles, edges (paths) and nodes, for the template to draw."""
    columns: dict[str, list[str]] = {LINKED: [], MANIFEST: [], RELEASE: []}

    def node(table: str, column: str) -> None:
        if column not in columns[table]:
            columns[table].append(column)

    drawn = _drawn(lineage, arrived)
    for sources, e in drawn:
        for table, column in sources:
            node(table, column)
        node(e["table"], e["column"])
    x = {LINKED: 10, MANIFEST: 10 + NODE_W + GAP, RELEASE: 10 + 2 * (NODE_W + GAP)}
    y = {(t, c): TOP + i * ROW for t, cols in columns.items() for i, c in enumerate(cols)}
    edges = []
    for sources, e in drawn:
        target = (e["table"], e["column"])
        for source in sources:
            x1, y1 = x[source[0]] + NODE_W, y[source] + ROW / 2 - 2
            x2, y2 = x[target[0]], y[target] + ROW / 2 - 2
            mid = (x1 + x2) / 2
            edges.append({"transform": e["transform"], "masked": str(e["masked"]).lower(),
                          "d": f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}", "colour": COLOURS[e["transform"]],
                          "dashed": e["transform"] == "dropped",
                          "label": f'{source[0]}.{source[1]} -> {target[0]}.{target[1]}: {e["transform"]}'})
    return {"width": x[RELEASE] + NODE_W + 10, "height": TOP + max(len(c) for c in columns.values()) * ROW + 20,
            "titles": [{"x": left, "y": TOP - 25, "text": TITLES[table]} for table, left in x.items()],
            "edges": edges,
            "nodes": [{"table": table, "column": column, "x": x[table], "y": top, "w": NODE_W, "h": ROW - 4,
                       "ty": top + ROW - 9} for (table, column), top in y.items()]}


def _dropped(lineage: list[dict], arrived: set[str] | None) -> list[list]:
    """Columns dropped on the way (no output column): listed, one row per reason."""
    rows = []
    named = {s["column"][len(CLINICAL):] for e in lineage for s in e["sources"]
             if s["table"] == LINKED and s["column"].startswith(CLINICAL)}
    for e in lineage:
        if e["column"]:
            continue
        names = []
        for s in e["sources"]:
            if s["table"] == LINKED and s["column"] == f"{CLINICAL}*":
                names += [f"{CLINICAL}{a}" for a in sorted((arrived or set()) - named)] or [f"{CLINICAL}*"]
            elif s["table"] == LINKED and s["column"].startswith(CLINICAL) and arrived is not None:
                names += [s["column"]] if s["column"][len(CLINICAL):] in arrived else []
            else:
                names.append(s["column"])
        if names:
            rows.append([f"{e['sources'][0]['table']} -> {e['table']}", ", ".join(names), e["description"]])
    return rows


def _edges(lineage: list[dict], arrived: set[str] | None) -> list[list]:
    return [[", ".join(f"{t}.{c}" for t, c in sources) or "(no source column arrived)", f"{e['table']}.{e['column']}",
             e["transform"], e["description"]] for sources, e in _drawn(lineage, arrived)]


# Fits a 1,280 px window: captions (long release paths) and cells wrap anywhere, the lineage drawing scales down.
STYLE = ("#contact-sheet{display:flex;flex-wrap:wrap;gap:8px}.thumb{margin:0;font-size:11px;width:200px;min-width:0}"
         ".thumb figcaption,.thumb code{overflow-wrap:anywhere;word-break:break-all;white-space:normal}"
         ".thumb img{max-width:100%;height:auto}svg{max-width:100%;height:auto}table{max-width:100%}"
         ".thumb.redacted img{outline:2px solid #b3261e}"
         "body{font:14px system-ui,sans-serif;margin:24px;color:#1b2733}"
         "table{border-collapse:collapse;margin:6px 0 16px}td,th{border:1px solid #ccd5df;padding:3px 8px;"
         "text-align:left;font-size:13px;overflow-wrap:anywhere}th{background:#eef2f6}.ok{color:#1e7d34}.bad{color:#b3261e}"
         ".wait{color:#8a5a00}.flag{color:#8a5a00;font-weight:600}"
         "code{font-size:12px}svg text{font:12px system-ui,sans-serif}svg .title{font-weight:600}"
         ".legend td:first-child{width:60px}.legend i{display:inline-block;width:40px;height:0;border-top:3px solid;"
         "vertical-align:middle}.legend i.dashed{border-top-style:dashed}"
         "@media print{*{-webkit-print-color-adjust:exact;print-color-adjust:exact}svg{max-width:100%;height:auto}}")


@functools.lru_cache(maxsize=1)
def _environment():
    """One per process: it keeps the template compiled (~0.1 s a compile; it reloads a template whose file changed)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("imaging.governance", "templates"), autoescape=select_autoescape(["html"]),
                       undefined=StrictUndefined, trim_blocks=False)


def render_html(review, served: Served | None = None) -> str:
    """The report of a `imaging.governance.review.Review`: verdict, problems and approvals first, rendered from
    `templates/review.html` with autoescape (every value from a file or the card escaped). `served`: what the
    run's copy for the UI adds."""
    card = review.card or {}
    verdict = review.verdict
    st = review.standing
    standing = None if st is None else {
        "approvals": len(st.approvals), "required": st.required, "rejected": st.rejected,
        "decisions": [[d.text.kind, d.text.principal, d.text.key_fingerprint + (" (DEMO KEY)" if d.demo_key else ""),
                       d.text.signed_at, d.text.review_sha256, d.text.note] for d in (*st.approvals, *st.rejections)]}
    summary = [["state", review.state], ["release id (sha256 of SHA256SUMS)", review.release_id],
               ["cohort", f"{card.get('cohort', '')} v{card.get('version', '')}"],
               ["data digest (recomputed)", card.get("data_digest")],
               ["files checked", f"{review.check.checked} of {review.check.listed} listed"],
               ["reviewed file", review.file or "(whole release)"],
               ["review report sha256 (what an approval signs)", review.sha256]]
    c = review.counts
    k = review.k
    k_view = None
    if k:
        declared = card.get("disclosure", {})
        k_view = {"row": [", ".join(k.quasi_identifiers), declared.get("min_k"), review.policy_min_k, len(k.class_sizes),
                          k.smallest, k.headers_read, "yes" if k.same_as_metadata else "NO"],
                  "sizes": ", ".join(map(str, k.class_sizes))}
    text = None
    if review.text is not None:
        t = review.text
        text = {"quarantine_read": any(v.quarantined is not None for v in t.counts.values()),
                "rows": [[name, v.screened, v.clean, v.redacted, "not read" if v.quarantined is None else v.quarantined,
                          v.not_read] for name, v in t.counts.items()],
                "sheet": t.sheet, "others": sum(1 for x in t.sheet if not x.redacted)}
    card_view = None
    if card:
        d = card["deidentification"]
        lineage = card.get("lineage", [])
        card_view = {
            "sources_note": "Source nodes: the clinical columns that arrived in the partitions read."
            if review.arrived is not None else
            "Source nodes: one per policy column, naming the aliases it accepts (the identifiable zone was not read, "
            "so which arrived is not known).",
            "legend": [(t, colour, MEANINGS[t]) for t, colour in COLOURS.items()],
            "graph": _graph(lineage, review.arrived),
            "dropped": _dropped(lineage, review.arrived), "edges": _edges(lineage, review.arrived),
            "predicate": card["selection"]["predicate"], "standard": d["standard"], "engine": d["engine"],
            "options": [[o["name"], o["code"], o["meaning"]] for o in d["options"]],
            "text_policy": sorted((d.get("burned_in_text") or {}).items()),
            "checks": [[x["asset"], x["check"], x["result"], x.get("severity"),
                        ", ".join(x["partitions"]) if x.get("partitions") else
                        {"whole table": "whole table"}.get(x.get("scope"), "this release"),
                        x["run_id"], x["evaluated_at"]] for x in card["checks"]],
            "inputs": [[p["asset"], p["batch"], p["data_version"], p["run_id"], p["materialized_at"],
                        p.get("landing_data_version")] for p in card["inputs"]],
            "code_versions": [[a, v] for a, v in card["code_versions"].items()]}
    return _environment().get_template("review.html").render(
        cohort=str(card.get("cohort", "")), verdict=verdict,
        status_class={True: "ok", None: "wait", False: "bad"}[review.settled],
        style=STYLE, problems=review.all_problems, flags=review.all_flags, standing=standing,
        decisions_from=review.decisions_from, notes=review.notes, summary=summary,
        counts=[c.images, c.patients, c.studies, c.series] if c else None, text=text, k=k_view,
        attributes=[[a.attribute, a.removed, a.replaced, a.shifted, a.kept, a.added] for a in review.attributes],
        quarantine=None if review.quarantine is None else [[q.table, q.reason, q.files] for q in review.quarantine],
        optouts=_optouts(card.get("optouts"), review.optouts),
        card=card_view,
        audit=[[e.at, e.event, e.principal, e.detail] for e in review.audit_events],
        traces=[[t.sha256, t.token or "-", t.record.source_sha256 if t.record else "NOT TRACED",
                 t.landing + (", withdrawn since" if t.withdrawn else ""),
                 t.record.run_id if t.record else "", t.record.code_version if t.record else ""]
                for t in review.traces],
        served=served, optout_table=None if served is None or served.optouts is None else {
            "title": served.optouts.title, "rows": served.optouts.cells()}) + "\n"


def _optouts(section, rc) -> dict | None:
    """The opt-out lists the card says were applied (site tokens, keyed versions, days received: no site, no id)
    and the review's re-check of the released patients, for the template's "Opt-outs" section."""
    if section is None and rc is None:
        return None
    view: dict = {"recorded": section is not None, "lists": [], "held": [], "recheck": []}
    if section is not None:
        view["lists"] = [[x["list"], x["version"], x["received"]] for x in section["lists"]]
        at_build, before = section["excluded_at_build"], section["not_deidentified"]
        view["held"] = [["selected by the cohort, left out at the build", at_build["images"], at_build["patients"]],
                        ["never de-identified (every site-day)", before["images"], before["patients"]]]
    if rc is not None:
        view["recheck"] = [["released images walked back to their patient", rc.images],
                           ["released images not walked back", rc.untraced],
                           ["released images on the lists in force at the build", rc.on_list_at_build_images],
                           ["released patients on the lists since", rc.since_patients],
                           ["sites whose list changed since the build", rc.lists_changed]]
    return view
