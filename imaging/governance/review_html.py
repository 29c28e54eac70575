"""The review report as one self-contained HTML file: no server, no network, the graph as inline SVG.

Open-source Dagster stores column lineage but does not draw it; this draws it from the lineage the
release carries (`datacard.json`): identifiable sources, de-identified manifest, release, with one
edge per source column coloured by its transform, and dropped columns ending in a "dropped" node.
The report holds what the release proves plus checksums, runs and versions from the identifiable
zone, never a landing path, a real date or a site.
"""

from __future__ import annotations

from html import escape

from imaging.governance.lineage import LINKED, MANIFEST, RELEASE

COLOURS = {"kept": "#4a7fb5", "pseudonymised": "#8e44ad", "shifted": "#d35400", "generalised": "#16a085",
           "cleaned": "#7f8c8d", "derived": "#2c3e50", "dropped": "#c0392b"}
TITLES = {LINKED: "identifiable: linked_patient_metadata", MANIFEST: "de-identified: anonymized_images manifest",
          RELEASE: "release: metadata columns"}
ROW, NODE_W, GAP, TOP = 20, 230, 190, 60
DROPPED = "(dropped)"


def _graph(lineage: list[dict]) -> str:
    columns: dict[str, list[str]] = {LINKED: [], MANIFEST: [], RELEASE: []}

    def node(table: str, column: str) -> None:
        if column not in columns[table]:
            columns[table].append(column)

    for e in lineage:
        for s in e["sources"]:
            node(s["table"], s["column"])
        node(e["table"], e["column"] if e["column"] else DROPPED)
    for table in columns:  # keep "dropped" last in its column
        if DROPPED in columns[table]:
            columns[table].remove(DROPPED)
            columns[table].append(DROPPED)
    x = {LINKED: 10, MANIFEST: 10 + NODE_W + GAP, RELEASE: 10 + 2 * (NODE_W + GAP)}
    y = {(t, c): TOP + i * ROW for t, cols in columns.items() for i, c in enumerate(cols)}
    height = TOP + max(len(c) for c in columns.values()) * ROW + 20
    width = x[RELEASE] + NODE_W + 10
    parts = [f'<svg id="lineage-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="column lineage graph">']
    for table, left in x.items():
        parts.append(f'<text class="title" x="{left}" y="{TOP - 25}">{escape(TITLES[table])}</text>')
    for e in lineage:
        target = (e["table"], e["column"] or DROPPED)
        colour = COLOURS[e["transform"]]
        dash = ' stroke-dasharray="4 3"' if e["transform"] == "dropped" else ""
        for s in e["sources"]:
            x1, y1 = x[s["table"]] + NODE_W, y[(s["table"], s["column"])] + ROW / 2 - 2
            x2, y2 = x[target[0]], y[target] + ROW / 2 - 2
            mid = (x1 + x2) / 2
            label = f'{s["table"]}.{s["column"]} -> {target[0]}.{target[1]}: {e["transform"]}'
            parts.append(f'<path class="edge {e["transform"]}" data-masked="{str(e["masked"]).lower()}" '
                         f'd="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.4"{dash}><title>{escape(label)}</title></path>')
    for (table, column), top in y.items():
        fill = "#fdecea" if column == DROPPED else "#f7f9fc"
        parts.append(f'<g class="node" data-table="{table}" data-column="{escape(column)}">'
                     f'<rect x="{x[table]}" y="{top}" width="{NODE_W}" height="{ROW - 4}" rx="3" fill="{fill}" '
                     f'stroke="#9aa7b8"/><text x="{x[table] + 6}" y="{top + ROW - 9}">{escape(column)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _rows(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(review) -> str:
    """The report of a `imaging.governance.review.Review`."""
    card = review.card or {}
    status = "VERIFIED" if review.ok else "FAILED"
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>Release review: {escape(str(card.get('cohort', '')))} {status}</title>",
           "<style>body{font:14px system-ui,sans-serif;margin:24px;color:#1b2733}"
           "table{border-collapse:collapse;margin:6px 0 16px}td,th{border:1px solid #ccd5df;padding:3px 8px;"
           "text-align:left;font-size:13px;overflow-wrap:anywhere}th{background:#eef2f6}.ok{color:#1e7d34}.bad{color:#b3261e}"
           "code{font-size:12px}svg text{font:12px system-ui,sans-serif}svg .title{font-weight:600}"
           ".legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:18px;height:4px;"
           "margin-right:4px;vertical-align:middle}</style></head><body>",
           f"<h1>Release review <span id=\"status\" class=\"{'ok' if review.ok else 'bad'}\">{status}</span></h1>",
           _rows(["", ""], [["state", review.state], ["release id (sha256 of SHA256SUMS)", review.release_id],
                             ["cohort", f"{card.get('cohort', '')} v{card.get('version', '')}"],
                             ["data digest", card.get("data_digest")],
                             ["files checked", f"{review.check.checked} of {review.check.listed} listed"],
                             ["reviewed file", review.file or "(whole release)"]])]
    if review.problems:
        out.append("<h2>Problems</h2><ul>" + "".join(f"<li class=\"bad\">{escape(p)}</li>" for p in review.problems)
                   + "</ul>")
    if review.notes:
        out.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in review.notes) + "</ul>")
    if card:
        k, counts, d = card["disclosure"], card["counts"], card["deidentification"]
        out += ["<h2>Column lineage</h2><p class=\"legend\">"
                + "".join(f"<span><i style=\"background:{c}\"></i>{escape(t)}</span>" for t, c in COLOURS.items())
                + "</p>", _graph(card.get("lineage", [])),
                "<h2>Selection</h2>", f"<p><code>{escape(card['selection']['predicate'])}</code></p>",
                "<h2>Counts</h2>", _rows(["images", "patients", "studies", "series"],
                                         [[counts["images"], counts["patients"], counts["studies"], counts["series"]]]),
                "<h2>Disclosure control</h2>",
                _rows(["quasi-identifiers", "min k", "classes", "smallest", "below min k", "result"],
                      [[", ".join(k["quasi_identifiers"]), k["min_k"], k["equivalence_classes"], k["smallest_class"],
                        k["classes_below_min_k"], "passed" if k["passed"] else "FAILED"]]),
                f"<p>Class sizes (no values): {escape(', '.join(map(str, k['class_sizes'])))}</p>",
                "<h2>De-identification</h2>", f"<p>{escape(d['standard'])}; engine {escape(d['engine'])}</p>",
                _rows(["option", "code", "meaning"], [[o["name"], o["code"], o["meaning"]] for o in d["options"]]),
                "<h2>Checks</h2>", _rows(["asset", "check", "result", "severity", "on", "run", "evaluated"],
                                         [[c["asset"], c["check"], c["result"], c.get("severity"),
                                           ", ".join(c["partitions"]) if c.get("partitions") else
                                           {"whole table": "whole table"}.get(c.get("scope"), "this release"),
                                           c["run_id"], c["evaluated_at"]] for c in card["checks"]]),
                "<h2>Inputs</h2>", _rows(["asset", "batch", "data version", "run", "materialized",
                                          "landing data version"],
                                         [[p["asset"], p["batch"], p["data_version"], p["run_id"],
                                           p["materialized_at"], p.get("landing_data_version")]
                                          for p in card["inputs"]]),
                "<h2>Code versions</h2>", _rows(["asset", "version"], [[a, v] for a, v in card["code_versions"].items()])]
    a = review.approval
    out += ["<h2>Approval</h2>", _rows(["approved by", "at", "note", "in the approval store"],
                                       [[a.approved_by, a.approved_at, a.note,
                                         "yes" if review.approval_record else "not read"]]) if a else "<p>none</p>"]
    if review.traces:
        out += ["<h2>Provenance</h2><p>Landing paths, dates and sites are in the terminal output only.</p>",
                _rows(["release file sha256", "landing sha256", "landing file", "run", "code version"],
                      [[t.sha256, t.record.source_sha256 if t.record else "NOT TRACED", t.landing,
                        t.record.run_id if t.record else "", t.record.code_version if t.record else ""]
                       for t in review.traces])]
    out.append("</body></html>\n")
    return "".join(out)
