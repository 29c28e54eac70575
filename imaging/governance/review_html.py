"""The review report as one self-contained HTML file: no server, no network, the graph as inline SVG.

What a reviewer needs to sign comes first: the verdict, the problems and flags, the signed approvals.
Then the evidence the review recomputed (exact counts and class sizes, per-attribute counts, the
quarantine of the partitions read), then the column lineage drawn from the lineage the release
carries (`datacard.json`): identifiable sources, de-identified manifest, release. Source nodes are
the clinical columns that actually arrived when the identifiable zone was read (otherwise one node
per policy column, naming its aliases); columns dropped on the way are listed under the drawing,
not drawn as edges; the legend says what each edge colour means, and an edge table repeats every
edge in words so the meaning survives printing. The report holds checksums, runs and versions,
never a landing path, a real date or a site.
"""

from __future__ import annotations

from html import escape

from imaging.governance.lineage import LINKED, MANIFEST, RELEASE

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


def _graph(lineage: list[dict], arrived: set[str] | None) -> str:
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
    height = TOP + max(len(c) for c in columns.values()) * ROW + 20
    width = x[RELEASE] + NODE_W + 10
    parts = [f'<svg id="lineage-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="column lineage graph">']
    for table, left in x.items():
        parts.append(f'<text class="title" x="{left}" y="{TOP - 25}">{escape(TITLES[table])}</text>')
    for sources, e in drawn:
        target = (e["table"], e["column"])
        colour = COLOURS[e["transform"]]
        dash = ' stroke-dasharray="4 3"' if e["transform"] == "dropped" else ""
        for source in sources:
            x1, y1 = x[source[0]] + NODE_W, y[source] + ROW / 2 - 2
            x2, y2 = x[target[0]], y[target] + ROW / 2 - 2
            mid = (x1 + x2) / 2
            label = f'{source[0]}.{source[1]} -> {target[0]}.{target[1]}: {e["transform"]}'
            parts.append(f'<path class="edge {e["transform"]}" data-masked="{str(e["masked"]).lower()}" '
                         f'd="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.4"{dash}><title>{escape(label)}</title></path>')
    for (table, column), top in y.items():
        parts.append(f'<g class="node" data-table="{table}" data-column="{escape(column)}">'
                     f'<rect x="{x[table]}" y="{top}" width="{NODE_W}" height="{ROW - 4}" rx="3" fill="#f7f9fc" '
                     f'stroke="#9aa7b8"/><text x="{x[table] + 6}" y="{top + ROW - 9}">{escape(column)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


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


def _rows(header: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table{f' class={chr(34)}{cls}{chr(34)}' if cls else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = ("body{font:14px system-ui,sans-serif;margin:24px;color:#1b2733}"
         "table{border-collapse:collapse;margin:6px 0 16px}td,th{border:1px solid #ccd5df;padding:3px 8px;"
         "text-align:left;font-size:13px;overflow-wrap:anywhere}th{background:#eef2f6}.ok{color:#1e7d34}.bad{color:#b3261e}"
         ".wait{color:#8a5a00}.flag{color:#8a5a00;font-weight:600}"
         "code{font-size:12px}svg text{font:12px system-ui,sans-serif}svg .title{font-weight:600}"
         ".legend td:first-child{width:60px}.legend i{display:inline-block;width:40px;height:0;border-top:3px solid;"
         "vertical-align:middle}.legend i.dashed{border-top-style:dashed}"
         "@media print{*{-webkit-print-color-adjust:exact;print-color-adjust:exact}svg{max-width:100%;height:auto}}")


def render_html(review) -> str:
    """The report of a `imaging.governance.review.Review`: verdict, problems and approvals first."""
    card = review.card or {}
    verdict = review.verdict
    cls = {True: "ok", None: "wait", False: "bad"}[review.settled]
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>Release review: {escape(str(card.get('cohort', '')))} {verdict}</title>",
           f"<style>{STYLE}</style></head><body>",
           f"<h1>Release review <span id=\"status\" class=\"{cls}\">{verdict}</span></h1>"]
    if review.all_problems:
        out.append("<h2>Problems</h2><ul id=\"problems\">"
                   + "".join(f"<li class=\"bad\">{escape(p)}</li>" for p in review.all_problems) + "</ul>")
    if review.all_flags:
        out.append("<h2>Flags</h2><ul id=\"flags\">"
                   + "".join(f"<li class=\"flag\">{escape(f)}</li>" for f in review.all_flags) + "</ul>")
    st = review.standing
    out.append("<h2>Approvals</h2>")
    if st is None:
        out.append("<p>none readable</p>")
    else:
        out.append(f"<p>{len(st.approvals)} of {st.required} required signed approvals, verified against the "
                   f"allowed signers (read from {escape(review.decisions_from)})"
                   + (": <b class=\"bad\">REJECTED</b>" if st.rejected else "") + "</p>")
        decisions = [[d.text.kind, d.text.principal, d.text.key_fingerprint + (" (DEMO KEY)" if d.demo_key else ""),
                      d.text.signed_at, d.text.review_sha256, d.text.note] for d in (*st.approvals, *st.rejections)]
        if decisions:
            out.append(_rows(["decision", "principal", "key", "signed at", "review report sha256", "note"], decisions))
    if review.notes:
        out.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in review.notes) + "</ul>")
    out.append(_rows(["", ""], [["state", review.state], ["release id (sha256 of SHA256SUMS)", review.release_id],
                                ["cohort", f"{card.get('cohort', '')} v{card.get('version', '')}"],
                                ["data digest (recomputed)", card.get("data_digest")],
                                ["files checked", f"{review.check.checked} of {review.check.listed} listed"],
                                ["reviewed file", review.file or "(whole release)"],
                                ["review report sha256 (what an approval signs)", review.sha256]]))
    if review.counts:
        c = review.counts
        out += ["<h2>Counts (exact)</h2>",
                _rows(["images", "patients", "studies", "series"], [[c.images, c.patients, c.studies, c.series]])]
    if review.k:
        k, declared = review.k, card.get("disclosure", {})
        out += ["<h2>Disclosure control, recomputed from the released files</h2>",
                _rows(["quasi-identifiers (metadata, headers)", "release min k", "policy min k", "classes", "smallest",
                       "headers read", "same as the metadata"],
                      [[", ".join(k.quasi_identifiers), declared.get("min_k"), review.policy_min_k, len(k.class_sizes),
                        k.smallest, k.headers_read, "yes" if k.same_as_metadata else "NO"]]),
                f"<p id=\"class-sizes\">Class sizes, exact (no values): {escape(', '.join(map(str, k.class_sizes)))}</p>"]
    if review.attributes:
        out += ["<h2>Per-attribute evidence: landing file to released file (files, no values)</h2>",
                _rows(["attribute", "removed", "replaced", "shifted", "kept", "added"],
                      [[a.attribute, a.removed, a.replaced, a.shifted, a.kept, a.added] for a in review.attributes])]
    if review.quarantine is not None:
        out += ["<h2>Quarantine of the partitions the release read</h2>",
                _rows(["table", "reason", "files"], [[q.table, q.reason, q.files] for q in review.quarantine])
                if review.quarantine else "<p>none</p>"]
    out += _optouts(card.get("optouts"), review.optouts)
    if card:
        d = card["deidentification"]
        lineage = card.get("lineage", [])
        legend = [[f'<i style="border-color:{c}"{" class=dashed" if t == "dropped" else ""}></i>', t, MEANINGS[t]]
                  for t, c in COLOURS.items()]
        out += ["<h2>Column lineage</h2>",
                "<p>" + ("Source nodes: the clinical columns that arrived in the partitions read."
                         if review.arrived is not None else
                         "Source nodes: one per policy column, naming the aliases it accepts (the identifiable zone "
                         "was not read, so which arrived is not known).") + "</p>",
                "<table class=\"legend\"><thead><tr><th>edge</th><th>transform</th><th>meaning</th></tr></thead><tbody>"
                + "".join(f"<tr><td>{swatch}</td><td>{escape(t)}</td><td>{escape(m)}</td></tr>" for swatch, t, m in legend)
                + "</tbody></table>",
                _graph(lineage, review.arrived),
                "<h3>Dropped on the way (not drawn)</h3>",
                _rows(["hop", "columns", "why"], _dropped(lineage, review.arrived), "dropped"),
                "<h3>Every edge, in words</h3>",
                _rows(["from", "to", "transform", "what is done"], _edges(lineage, review.arrived), "edges"),
                "<h2>Selection</h2>", f"<p><code>{escape(card['selection']['predicate'])}</code></p>",
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
    if review.audit_events:
        out += ["<h2>Audit log</h2>", _rows(["at", "event", "principal", "detail"],
                                            [[e.at, e.event, e.principal, e.detail] for e in review.audit_events])]
    if review.traces:
        out += ["<h2>Provenance</h2><p>Landing paths, dates and sites are in the terminal output only.</p>",
                _rows(["release file sha256", "landing sha256", "landing file", "run", "code version"],
                      [[t.sha256, t.record.source_sha256 if t.record else "NOT TRACED", t.landing,
                        t.record.run_id if t.record else "", t.record.code_version if t.record else ""]
                       for t in review.traces])]
    out.append("</body></html>\n")
    return "".join(out)


def _optouts(section, rc) -> list[str]:
    """The opt-out lists the card says were applied (site tokens, keyed versions, days received: no site, no id)
    and the review's re-check of the released patients."""
    if section is None and rc is None:
        return []
    out = ["<h2>Opt-outs</h2>"]
    if section is None:
        out.append("<p>The data card records no opt-out list.</p>")
    else:
        out.append(_rows(["list (site token)", "version (keyed digest)", "received"],
                         [[x["list"], x["version"], x["received"]] for x in section["lists"]], "optout-lists")
                   if section["lists"] else "<p>No opt-out list had been received when the release was built.</p>")
        at_build, before = section["excluded_at_build"], section["not_deidentified"]
        out.append(_rows(["held back (as the card publishes the counts)", "images", "patients"],
                         [["selected by the cohort, left out at the build", at_build["images"], at_build["patients"]],
                          ["never de-identified (every site-day)", before["images"], before["patients"]]]))
    if rc is not None:
        out.append(_rows(["re-checked from the identifiable zone (exact)", "count"], [
            ["released images walked back to their patient", rc.images],
            ["released images not walked back", rc.untraced],
            ["released images on the lists in force at the build", rc.on_list_at_build_images],
            ["released patients on the lists since", rc.since_patients],
            ["sites whose list changed since the build", rc.lists_changed]], "optout-recheck"))
    return out
