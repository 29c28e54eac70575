"""The data card of a release (Markdown for people, JSON for tools), built from named records.

Pure: the asset passes what it knows (the cohort, counts it aggregated, the latest result of its own
checks and of every upstream check on the partitions it read, its input partitions with their data
versions and landing data versions, code versions, the k-anonymity result, the column lineage); the
builder sorts, suppresses small counts and renders. The same records give the same bytes, so a
rebuilt release has the same release id. What was not recorded is said ("not evaluated", "not
observed"), never invented.

The card is published inside the release, so it holds no identifying value: counts from 1 to 9 are
shown as "<10", equivalence classes as sizes only, input partitions (and the partitions a check
result is for) by their opaque batch token (never the real date or site: those stay in the
identifiable provenance ledger), checks by name, result, severity, run and time (no check metadata).
The pseudonym key appears as its fingerprint only (`imaging.pseudonym.key_fingerprint`), with a mark
when it is the demo's key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from imaging.governance.disclosure import KAnonymity, suppress
from imaging.governance.lineage import MANIFEST, RELEASE, ColumnLineage
from imaging.pseudonym import DEMO_KEY_FINGERPRINT
from imaging.steps.clinical import DEFAULT_SUPPRESS_BELOW

_TOKEN = re.compile(r"^[0-9a-f]{8,64}$")  # the opaque batch token of a site-day
_VERSIONISH = re.compile(r"^[0-9A-Za-z._:+-]{1,128}$")  # run ids, data and code versions: no free text
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
FORMAT = "imaging-datacard/1"


@dataclass(frozen=True)
class Selection:
    """Who is in the release: the cohort definition as data and the predicate Spark evaluated."""

    cohort: str
    version: int
    description: str
    criteria: Mapping[str, Any]
    predicate: str

    @classmethod
    def from_cohort(cls, cohort) -> "Selection":
        criteria = {"modalities": list(cohort.modalities), "lateralities": list(cohort.lateralities),
                    "diagnosis_code_prefixes": list(cohort.diagnosis_code_prefixes),
                    "age_at_scan_min": cohort.age_min, "age_at_scan_max": cohort.age_max,
                    "imaged_eye": list(cohort.eye_lateralities),
                    "imaged_eye_diagnosis_code_prefixes": list(cohort.eye_diagnosis_code_prefixes),
                    "imaged_eye_fields": {f: {"min": lo, "max": hi} for f, lo, hi in cohort.eye_fields} or None,
                    "imaged_eye_max_days_before": cohort.eye_max_days_before}
        return cls(cohort.name, cohort.version, cohort.description,
                   {k: v for k, v in criteria.items() if v not in (None, [])}, cohort.sql_predicate())


@dataclass(frozen=True)
class ReleaseCounts:
    """Counts of the release; `breakdowns` maps a released column to {value: count} (e.g. modality)."""

    images: int
    patients: int
    studies: int
    series: int
    breakdowns: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


BREAKDOWN_COLUMNS = ("modality", "laterality", "sex")  # released columns with a handful of values each
MISSING = "(missing)"


def counts_sql(table: str, columns=BREAKDOWN_COLUMNS, quasi_identifiers=(), listed: str | None = None) -> str:
    """Release counts over a selection (a Spark view of release rows), in one pass on the executors: a row of
    totals (`kind` 'total') and one row per combination of the low-cardinality released columns ('breakdown'; a
    handful of rows reach the driver: their values' product). With `quasi_identifiers` (released columns), also
    one row per equivalence class ('class': its distinct patients, the k-anonymity class sizes); with `listed` (a
    column, non-null on rows of a patient on an opt-out list), the totals count those rows (`listed`).
    `release_facts` (or `release_counts`) reads them."""
    values = ", ".join(f"coalesce(CAST(`{c}` AS STRING), '{MISSING}') AS `{c}`" for c in columns)
    keys = ", ".join(f"`{c}`" for c in columns)
    classes = [f"`q{i}`" for i in range(len(quasi_identifiers))]
    qis = "".join(f", `{c}` AS `q{i}`" for i, c in enumerate(quasi_identifiers))
    sets = f"(), ({keys})" + (f", ({', '.join(classes)})" if classes else "")
    every = (1 << (len(columns) + len(classes))) - 1  # grouping_id() of the totals: every column aggregated away
    return (f"SELECT {keys}{''.join(', ' + c for c in classes)}, count(*) AS images, "
            "count(DISTINCT patient_pseudonym) AS patients, count(DISTINCT study_instance_uid) AS studies, "
            "count(DISTINCT series_instance_uid) AS series, "
            f"{'count(`_listed`)' if listed else '0'} AS listed, "
            f"CASE WHEN grouping_id() = {every} THEN 'total' WHEN grouping(`{columns[0]}`) = 0 THEN 'breakdown' "
            f"ELSE 'class' END AS kind FROM (SELECT {values}{qis}, patient_pseudonym, study_instance_uid, "
            f"series_instance_uid{f', `{listed}` AS `_listed`' if listed else ''} FROM {table}) "
            f"GROUP BY GROUPING SETS ({sets})")


@dataclass(frozen=True)
class FactsCount:
    """`counts_sql`'s rows counted from release rows as they stream past (Arrow batches), by a pass that reads
    every released row anyway: the release copy's metadata writer (imaging.steps.release.WriteParquet), so the
    build needs no query of its own for them. The same rows as the query, for `release_facts`; breakdown
    values as strings (Arrow's cast), a missing value `MISSING`; classes keyed by the values as they are.
    `counter()` gives a fresh accumulator (one per task: the writer runs on one partition)."""

    columns: tuple[str, ...] = BREAKDOWN_COLUMNS
    quasi_identifiers: tuple[str, ...] = ()
    listed: str | None = None  # a column, non-null on rows of a patient on an opt-out list

    def counter(self) -> "FactsCounter":
        return FactsCounter(self)


@dataclass(frozen=True)
class CountedWrite:
    """A `mapInArrow` function: `write` (the release copy's metadata writer, imaging.steps.release.WriteParquet,
    whose batches carry rows of images no metadata row names, `file` null) with the metadata rows it is given
    counted as they pass (`facts`). Its output row gains `facts`: `counts_sql`'s rows as JSON, of exactly the rows
    the metadata holds. The rewrite's code (part of every content key) stays as it was."""

    write: object
    facts: FactsCount

    OUTPUT = "rows long, facts string"

    def __call__(self, batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        counter = self.facts.counter()

        def counted():
            for batch in batches:
                counter.add(batch.filter(pc.is_valid(batch.column("file"))))
                yield batch

        for out in self.write(counted()):
            yield out.append_column("facts", pa.array([json.dumps(counter.rows())] * out.num_rows, pa.string()))


class FactsCounter:
    """One pass's counts (`FactsCount`). It holds the release's distinct patients, studies and series (their ids:
    ~0.1 kB each, 60 MB for 600,000 series), each breakdown combination's images and each equivalence class's
    patients."""

    def __init__(self, spec: FactsCount):
        self.spec = spec
        self.images = self.listed = 0
        self.patients: set = set()
        self.studies: set = set()
        self.series: set = set()
        self.breakdowns: dict[tuple, int] = {}
        self.classes: dict[tuple, set] = {}

    def add(self, batch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if not batch.num_rows:
            return
        spec = self.spec
        patients = batch.column("patient_pseudonym").to_pylist()
        self.images += batch.num_rows
        self.patients.update(patients)
        self.studies.update(batch.column("study_instance_uid").to_pylist())
        self.series.update(batch.column("series_instance_uid").to_pylist())
        if spec.listed:
            self.listed += batch.num_rows - batch.column(spec.listed).null_count
        values = zip(*(pc.fill_null(pc.cast(batch.column(c), pa.string()), MISSING).to_pylist() for c in spec.columns))
        for key in values:
            self.breakdowns[key] = self.breakdowns.get(key, 0) + 1
        if spec.quasi_identifiers:
            for key, patient in zip(zip(*(batch.column(c).to_pylist() for c in spec.quasi_identifiers)), patients):
                self.classes.setdefault(key, set()).add(patient)

    def rows(self) -> list[dict]:
        """The rows `counts_sql` gives over the same rows: none when there were none."""
        if not self.images:
            return []
        empty = dict.fromkeys(self.spec.columns)
        out = [{**empty, "kind": "total", "images": self.images, "patients": len(self.patients - {None}),
                "studies": len(self.studies - {None}), "series": len(self.series - {None}), "listed": self.listed}]
        out += [{**dict(zip(self.spec.columns, key)), "kind": "breakdown", "images": images}
                for key, images in sorted(self.breakdowns.items())]
        out += [{**empty, "kind": "class", "patients": len(members - {None})} for members in self.classes.values()]
        return out


@dataclass(frozen=True)
class ReleaseFacts:
    """What `counts_sql` computed in its one pass: the counts, the equivalence classes' sizes (ascending) and the
    released images of listed patients."""

    counts: ReleaseCounts
    class_sizes: tuple[int, ...]
    listed: int


def release_facts(rows, columns=BREAKDOWN_COLUMNS, classes: bool = True) -> ReleaseFacts:
    """`ReleaseFacts` from `counts_sql`'s rows. Without quasi-identifiers (`classes` True: the query was asked
    for them, and there were none) every patient is in one class, as `DisclosurePolicy.class_sizes_sql` says."""
    breakdowns: dict[str, dict[str, int]] = {c: {} for c in columns}
    totals, sizes = None, []
    for row in rows:
        if row["kind"] == "total":
            totals = row
        elif row["kind"] == "class":
            sizes.append(row["patients"])
        else:
            for column in columns:
                breakdowns[column][row[column]] = breakdowns[column].get(row[column], 0) + row["images"]
    if totals is None:  # no row at all: nothing selected
        return ReleaseFacts(ReleaseCounts(0, 0, 0, 0, breakdowns), (), 0)
    if classes and not sizes:
        sizes = [totals["patients"]]
    return ReleaseFacts(ReleaseCounts(totals["images"], totals["patients"], totals["studies"], totals["series"],
                                      breakdowns), tuple(sorted(sizes)), totals["listed"])


def release_counts(rows, columns=BREAKDOWN_COLUMNS) -> ReleaseCounts:
    """`ReleaseCounts` from `counts_sql`'s rows: the totals, and each column's images per value."""
    return release_facts(rows, columns, classes=False).counts


@dataclass(frozen=True)
class DeidSummary:
    standard: str
    engine: str
    options: tuple[tuple[str, str, str], ...]  # (name, CID 7050 code, meaning), in declaration order

    @classmethod
    def from_options(cls, options) -> "DeidSummary":
        from imaging.deid import ENGINE_VERSION, load_profile
        from imaging.deid.options import BY_NAME, STANDARD_REVISION

        profile = load_profile(options)
        return cls(f"DICOM PS3.15 Annex E, Table E.1-1 rev {STANDARD_REVISION}", f"imaging.deid {ENGINE_VERSION}",
                   tuple((o, BY_NAME[o].code, BY_NAME[o].meaning) for o in profile.options))

    @property
    def label(self) -> str:
        """Profile and options in one line (as the provenance ledger stores them)."""
        return f"{self.standard} / {self.engine}"


@dataclass(frozen=True)
class CheckResult:
    """The latest evaluation of one asset check (its name and a fixed description, never values).

    `passed` None: no evaluation of the check covers these partitions ("not evaluated").
    `partitions`: the batch tokens of the input partitions this result is for; empty means the
    whole table (`whole_table`) or, for the release's own checks, the release itself.
    """

    asset: str
    name: str
    passed: bool | None
    severity: str = "ERROR"
    description: str = ""
    run_id: str | None = None
    evaluated_at: str | None = None  # ISO 8601, UTC
    partitions: tuple[str, ...] = ()
    whole_table: bool = False

    def __post_init__(self):
        if any(not _TOKEN.match(p) for p in self.partitions):
            raise ValueError("a check's partitions are named by their opaque batch tokens, never a date or site")
        for value in (self.run_id, self.evaluated_at):
            if value is not None and not _VERSIONISH.match(value):
                raise ValueError("run ids and times are identifiers, not free text")

    @property
    def result(self) -> str:
        return NOT_EVALUATED if self.passed is None else "passed" if self.passed else "failed"

    @property
    def scope(self) -> str:
        return ("partitions" if self.partitions else "whole table" if self.whole_table else "release")


NOT_EVALUATED = "not evaluated"
NOT_OBSERVED = "not observed"  # an input partition whose landing site-day has no recorded observation


@dataclass(frozen=True)
class InputPartition:
    """One partition the release read: its opaque batch token, data version and the run that wrote it."""

    asset: str
    batch: str
    data_version: str
    run_id: str
    materialized_at: str  # ISO 8601, UTC
    landing_data_version: str | None = None  # content hash of the site-day's landing listing

    def __post_init__(self):
        if not _TOKEN.match(self.batch):
            raise ValueError("an input partition is named by its opaque batch token, never a date or site")
        for value in (self.data_version, self.run_id, self.landing_data_version):
            if value is not None and not _VERSIONISH.match(value):
                raise ValueError("data versions and run ids are identifiers, not free text")


@dataclass(frozen=True)
class CodeVersion:
    asset: str
    version: str


@dataclass(frozen=True)
class OptOutList:
    """One site's opt-out list as a release applied it: the site by a keyed token (a released card names no site),
    the keyed digest of its patients, and the day the newest file of it was received."""

    list: str
    version: str
    received: str

    def __post_init__(self):
        # Exactly the shapes imaging.optout makes (16 and 32 hex digits): a site's name or a patient's id is neither.
        if not re.fullmatch(r"[0-9a-f]{16}", self.list) or not re.fullmatch(r"[0-9a-f]{32}", self.version):
            raise ValueError("an opt-out list is named by its keyed site token and keyed digest, never a site or an id")
        if not _DATE.match(self.received):
            raise ValueError("an opt-out list's received date is YYYY-MM-DD")


@dataclass(frozen=True)
class OptOutSection:
    """What the opt-out list did to a release (counts only, suppressed as every count of the card).

    `as_of`: the newest received date of the lists applied (None: no list); the lists in force at the build were
    each site's readable list files up to its own list's `received` day. `excluded_*`: images and patients the cohort selected that
    the build held back. `not_deidentified_*`: images (and their patients) never de-identified because their
    patient opted out, in every site-day (the cohort cannot be evaluated on images that were not de-identified).
    `follows`: the published version this one follows because its patients' opt-outs changed since (`left`
    patients of it have since opted out, `returned` held back from it may come back)."""

    lists: tuple[OptOutList, ...] = ()
    as_of: str | None = None
    excluded_images: int = 0
    excluded_patients: int = 0
    not_deidentified_images: int = 0
    not_deidentified_patients: int = 0
    follows: int | None = None
    left: int = 0
    returned: int = 0


@dataclass(frozen=True)
class ClinicalSourceRead:
    """A read of the clinical source that linked images of the release (IMAGING_CLINICAL_SOURCE): the source's name,
    the read's data version (a digest of the rows read) and each query's sha256. Never a value, a row or the URL."""

    name: str
    data_version: str
    queries: Mapping[str, str]  # query -> sha256 of its text

    def __post_init__(self):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", self.name) or not re.fullmatch(r"[0-9a-f]{32}", self.data_version):
            raise ValueError("a clinical source read is named by the source's name and its data version (hex)")
        if not all(re.fullmatch(r"[a-z_]+", q) and re.fullmatch(r"[0-9a-f]{64}", d) for q, d in self.queries.items()):
            raise ValueError("a clinical source's queries are recorded by their sha256 only")


@dataclass(frozen=True)
class DataCardInputs:
    selection: Selection
    counts: ReleaseCounts
    deid: DeidSummary
    checks: tuple[CheckResult, ...]
    inputs: tuple[InputPartition, ...]
    code_versions: tuple[CodeVersion, ...]
    disclosure: KAnonymity
    lineage: tuple[ColumnLineage, ...]
    data_digest: str
    suppress_below: int = DEFAULT_SUPPRESS_BELOW
    # `imaging.pseudonym.key_fingerprint` of the key the release was built under (never the key); None:
    # not recorded.
    key_fingerprint: str | None = None
    # The opt-out lists applied and what they held back; None: not recorded (a card made without them).
    optouts: OptOutSection | None = None
    # What burned-in text found in an image's pixels did, per image type (platform/pixel_text.yaml `on_text`:
    # "quarantine" or "redact"; `imaging.deid.pixel_text.image_type`); empty: not recorded.
    text_policy: Mapping[str, str] = field(default_factory=dict)
    # Where the clinical labels are in each image's header (imaging.steps.stamp.StampPlan.describe); None:
    # nothing stamped.
    stamp: Mapping[str, Any] | None = None
    # The clinical source reads the release's images were linked from; empty: the landing zone's extracts.
    clinical_sources: tuple[ClinicalSourceRead, ...] = ()


@dataclass(frozen=True)
class DataCard:
    content: dict

    def json_bytes(self) -> bytes:
        return json.dumps(self.content, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"

    def markdown_bytes(self) -> bytes:
        return render_markdown(self.content).encode()


def _chain(entry: ColumnLineage, manifest: Mapping[str, ColumnLineage]) -> list[dict]:
    """A release column's transforms back to the identifiable sources, newest first."""
    steps = [{"table": entry.table, "transform": entry.transform, "masked": entry.masked,
              "description": entry.description, "from": [f"{s.table}.{s.column}" for s in entry.sources]}]
    for source in entry.sources:
        upstream = manifest.get(source.column) if source.table == MANIFEST else None
        if upstream is not None and len(entry.sources) == 1:
            steps += _chain(upstream, {})
    return steps


DEMO_KEY_NOTE = "demo key: not for real data"


def key_section(fingerprint: str | None) -> dict:
    """The card's record of the pseudonym key: its fingerprint, and whether it is the demo's key."""
    if fingerprint is None:
        return {"fingerprint": NOT_RECORDED, "demo_key": None}
    if not _TOKEN.match(fingerprint):
        raise ValueError("a key fingerprint is hex digits (imaging.pseudonym.key_fingerprint), never a key")
    demo = fingerprint == DEMO_KEY_FINGERPRINT
    return {"fingerprint": fingerprint, "demo_key": demo, **({"note": DEMO_KEY_NOTE} if demo else {})}


NOT_RECORDED = "not recorded"


def optout_section(section: OptOutSection | None, below: int) -> dict | None:
    """The card's opt-out section: lists by token, counts suppressed like every other count."""
    if section is None:
        return None
    count = lambda n: suppress(n, below)  # noqa: E731
    return {
        "lists": [{"list": x.list, "version": x.version, "received": x.received}
                  for x in sorted(section.lists, key=lambda x: x.list)],
        "as_of": section.as_of,
        "excluded_at_build": {"images": count(section.excluded_images), "patients": count(section.excluded_patients)},
        "not_deidentified": {"images": count(section.not_deidentified_images),
                             "patients": count(section.not_deidentified_patients)},
        "follows": None if section.follows is None else {
            "version": section.follows, "left": count(section.left), "returned": count(section.returned)},
    }


def clinical_source_section(reads: tuple[ClinicalSourceRead, ...]) -> list[dict]:
    """Which clinical database the images were linked from: each read's source, data version and query digests."""
    return [{"source": r.name, "data_version": r.data_version, "queries": dict(sorted(r.queries.items()))}
            for r in sorted(reads, key=lambda r: (r.name, r.data_version))]


def build_datacard(inputs: DataCardInputs) -> DataCard:
    below = inputs.suppress_below
    count = lambda n: suppress(n, below)  # noqa: E731
    c = inputs.counts
    manifest = {e.column: e for e in inputs.lineage if e.table == MANIFEST and e.column}
    columns = [{"column": e.column, "steps": _chain(e, manifest)}
               for e in inputs.lineage if e.table == RELEASE and e.column]
    runs: dict[str, set[str]] = {}
    for p in inputs.inputs:
        runs.setdefault(p.run_id, set()).add(f"materialized {p.asset}")
    for check in inputs.checks:
        if check.run_id:
            runs.setdefault(check.run_id, set()).add(f"evaluated {check.asset} checks")
    content = {
        "format": FORMAT,
        "cohort": inputs.selection.cohort, "version": inputs.selection.version,
        "description": inputs.selection.description,
        "release_id": "sha256 of SHA256SUMS (not stated inside the release: run `sha256sum SHA256SUMS`)",
        "data_digest": inputs.data_digest,
        "selection": {"criteria": dict(sorted(inputs.selection.criteria.items())),
                      "predicate": inputs.selection.predicate},
        "counts": {
            "suppressed_below": below,
            "images": count(c.images), "patients": count(c.patients),
            "studies": count(c.studies), "series": count(c.series),
            "by": {column: {str(v): count(n) for v, n in sorted(values.items(), key=lambda kv: str(kv[0]))}
                   for column, values in sorted(c.breakdowns.items())},
        },
        "disclosure": inputs.disclosure.report(below),
        "deidentification": {"standard": inputs.deid.standard, "engine": inputs.deid.engine,
                             "options": [{"name": n, "code": code, "meaning": m} for n, code, m in inputs.deid.options],
                             **({"burned_in_text": dict(sorted(inputs.text_policy.items()))}
                                if inputs.text_policy else {})},
        # Which key made the pseudonyms, UIDs and date shifts: a keyed hash of a fixed string, never the key.
        "pseudonym_key": key_section(inputs.key_fingerprint),
        **({"optouts": optout_section(inputs.optouts, below)} if inputs.optouts is not None else {}),
        **({"labels_in_images": dict(inputs.stamp)} if inputs.stamp is not None else {}),
        **({"clinical_sources": clinical_source_section(inputs.clinical_sources)} if inputs.clinical_sources else {}),
        "columns": columns,
        # Every check of the release and of the upstream assets it read, per partition where the check
        # is per partition (batch tokens); ordered so the same results give the same bytes.
        "checks": [{"asset": k.asset, "check": k.name, "result": k.result, "severity": k.severity,
                    "description": k.description, "run_id": k.run_id, "evaluated_at": k.evaluated_at,
                    "scope": k.scope, "partitions": sorted(k.partitions)}
                   for k in sorted(inputs.checks, key=lambda k: (k.asset, k.name, sorted(k.partitions), k.result))],
        "inputs": [{"asset": p.asset, "batch": p.batch, "data_version": p.data_version, "run_id": p.run_id,
                    "materialized_at": p.materialized_at,
                    "landing_data_version": p.landing_data_version or NOT_OBSERVED}
                   for p in sorted(inputs.inputs, key=lambda p: (p.asset, p.batch))],
        "code_versions": {v.asset: v.version for v in sorted(inputs.code_versions, key=lambda v: v.asset)},
        "runs": [{"run_id": r, "did": sorted(did)} for r, did in sorted(runs.items())],
        # Every hop, dropped columns included: what the review report draws.
        "lineage": [{"table": e.table, "column": e.column, "transform": e.transform, "masked": e.masked,
                     "description": e.description, "sources": [{"table": s.table, "column": s.column}
                                                               for s in e.sources]} for e in inputs.lineage],
    }
    return DataCard(content)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    esc = lambda v: "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


SHOWN_PARTITIONS = 20  # batch tokens listed per check row in Markdown (the JSON lists every one)


def _scope(check: Mapping) -> str:
    partitions = check.get("partitions") or []
    if len(partitions) > SHOWN_PARTITIONS:
        return (", ".join(partitions[:SHOWN_PARTITIONS])
                + f" (+{len(partitions) - SHOWN_PARTITIONS} more: datacard.json lists every one)")
    if partitions:
        return ", ".join(partitions)
    return {"whole table": "whole table", "release": "this release"}.get(check.get("scope", "release"), "")


TEXT_POLICY = {"quarantine": "quarantined when text is found in its pixels",
               "redact": "text found in its pixels is covered (solid boxes), read again clean, then published with "
                         "Clean Pixel Data (113101); text still read: quarantined"}


def _text_policy(policy: Mapping[str, str] | None) -> str:
    if not policy:
        return ""
    return ("\nBurned-in text, per image type (the boxes covered are in the metadata's `redacted_regions`):\n\n"
            + _table(["image type", "on text", "what happens"],
                     [[t, p, TEXT_POLICY.get(p, p)] for t, p in policy.items()]))


def render_markdown(card: Mapping) -> str:
    counts, k = card["counts"], card["disclosure"]
    key = card.get("pseudonym_key") or key_section(None)
    out = [f"# Data card: {card['cohort']} v{card['version']}\n",
           f"**{DEMO_KEY_NOTE.upper()}**: pseudonymised with the demo's built-in key.\n\n" if key["demo_key"] else "",
           f"{card['description']}\n" if card["description"] else "",
           f"- Release id: {card['release_id']}\n- Data digest (images and metadata only): `{card['data_digest']}`\n",
           "\n## Selection\n\n", _table(["criterion", "value"],
                                       [[name, json.dumps(v)] for name, v in card["selection"]["criteria"].items()]),
           f"\nPredicate over the de-identified manifest:\n\n```sql\n{card['selection']['predicate']}\n```\n",
           f"\n## Counts\n\nCounts from 1 to {counts['suppressed_below'] - 1} are shown as "
           f"\"<{counts['suppressed_below']}\".\n\n",
           _table(["images", "patients", "studies", "series"],
                  [[counts["images"], counts["patients"], counts["studies"], counts["series"]]])]
    for column, values in counts["by"].items():
        out += [f"\nBy {column}:\n\n", _table([column, "images"], [[v, n] for v, n in values.items()])]
    verdict = "passed" if k["passed"] else "BLOCKED"
    out += ["\n## Disclosure control\n\n",
            f"k-anonymity over ({', '.join(k['quasi_identifiers'])}), distinct patients per combination: "
            f"minimum k {k['min_k']}, {k['equivalence_classes']} equivalence classes, smallest "
            f"{k['smallest_class']}, {k['classes_below_min_k']} below the minimum: **{verdict}**.\n\n",
            f"Class sizes (no values): {', '.join(str(s) for s in k['class_sizes']) or 'none'}\n",
            "\n## De-identification\n\n", f"{card['deidentification']['standard']}, engine "
            f"{card['deidentification']['engine']}.\n\n",
            _table(["option", "CID 7050 code", "meaning"],
                   [[o["name"], o["code"], o["meaning"]] for o in card["deidentification"]["options"]]),
            _text_policy(card["deidentification"].get("burned_in_text")),
            f"\nPseudonym key fingerprint: `{key['fingerprint']}` (HMAC-SHA256 of a fixed string under the key, "
            "first 16 hex digits: the same key gives the same fingerprint; the key is never recorded)"
            + (f". **{DEMO_KEY_NOTE}**" if key["demo_key"] else "") + ".\n",
            *_optout_markdown(card.get("optouts"), counts["suppressed_below"]),
            *labels_markdown(card.get("labels_in_images")),
            *_clinical_source_markdown(card.get("clinical_sources")),
            "\n## Released columns\n\nEach column's transforms, from the release back to the identifiable source.\n\n",
            _table(["column", "transforms (release <- manifest)", "from", "how"],
                   [[c["column"], " <- ".join(s["transform"] + (" (masked)" if s["masked"] else "") for s in c["steps"]),
                     ", ".join(c["steps"][-1]["from"]), c["steps"][-1]["description"]] for c in card["columns"]]),
            "\n## Checks (latest result of each)\n\nEvery check of the release and of the assets it read, on the "
            "partitions it read (by batch token; \"whole table\" for checks over every partition). ERROR checks "
            "block publication, WARN checks show.\n\n",
            _table(["asset", "check", "result", "severity", "on", "run", "evaluated"],
                   [[c["asset"], c["check"], c["result"], c["severity"], _scope(c), c["run_id"], c["evaluated_at"]]
                    for c in card["checks"]]),
            "\n## Inputs\n\nPartitions by opaque batch token; the provenance ledger (identifiable zone) maps them to "
            "landing days and sites. The landing data version is the content hash of the site-day's landing listing "
            f"as last observed before it was indexed (\"{NOT_OBSERVED}\" when no observation was recorded).\n\n",
            _table(["asset", "batch", "data version", "run", "materialized", "landing data version"],
                   [[p["asset"], p["batch"], p["data_version"], p["run_id"], p["materialized_at"],
                     p["landing_data_version"]] for p in card["inputs"]]),
            "\n## Code versions\n\n", _table(["asset", "code version"], [[a, v] for a, v in card["code_versions"].items()]),
            "\n## Runs\n\n", _table(["run", "did"], [[r["run_id"], "; ".join(r["did"])] for r in card["runs"]])]
    return "".join(out)


def _clinical_source_markdown(reads: list | None) -> list[str]:
    if not reads:
        return []
    return ["\n## Clinical source\n\n",
            "The images' clinical fields were linked from the hospital's database (IMAGING_CLINICAL_SOURCE), eye by "
            "eye. Each read is recorded by its data version (a digest of the rows read) and each query by the sha256 "
            "of its text; no value, row or address.\n\n",
            _table(["source", "data version", "query", "query sha256"],
                   [[r["source"], r["data_version"], q, d] for r in reads for q, d in r["queries"].items()])]


def _optout_markdown(section: Mapping | None, below: int) -> list[str]:
    if section is None:
        return []
    out = ["\n## Opt-outs\n\n",
           "Patients on a site's opt-out list (national data opt-out, local objections) are never released. "
           f"Counts from 1 to {below - 1} are shown as \"<{below}\".\n\n"]
    if section["lists"]:
        out += ["Lists in force at this build: each site's list files up to the day its newest was received "
                f"(below; the newest of them {section['as_of']}). Each site's list is named by a keyed token and "
                "versioned by a keyed digest of its patients (no site, no id):\n\n",
                _table(["list", "version", "received"], [[x["list"], x["version"], x["received"]] for x in section["lists"]])]
    else:
        out.append("No opt-out list had been received when this release was built.\n")
    at_build, before = section["excluded_at_build"], section["not_deidentified"]
    out += ["\n", _table(["held back", "images", "patients"], [
        ["selected by this cohort, left out at this build", at_build["images"], at_build["patients"]],
        ["never de-identified (every site-day, not only this cohort's)", before["images"], before["patients"]]])]
    follows = section.get("follows")
    if follows:
        out.append(f"\nThis version follows v{follows['version']} because opt-outs changed since it was built: "
                   f"{follows['left']} of its patients have since opted out and are left out here; "
                   f"{follows['returned']} patients held back from it whose opt-out was removed are back.\n")
    return out


def labels_markdown(labels: Mapping | None) -> list[str]:
    """Where a release's clinical labels are in each image's header, and how to read them (pydicom)."""
    if not labels:
        return []
    from pydicom.datadict import dictionary_VR, tag_for_keyword

    trial = labels["trial"]
    group, creator = int(labels["group"], 16), labels["private_creator"]
    private = [c for c in labels["columns"] if "element" in c]
    first = private[0]["element"] if private else 1
    columns = {"ClinicalTrialSubjectID", "ClinicalTrialTimePointID"}
    tag = lambda k: f"({tag_for_keyword(k) >> 16:04X},{tag_for_keyword(k) & 0xFFFF:04X})"  # noqa: E731
    rows = [[c["column"], c["tag"], c["vr"], c.get("keyword") or f"private block, element 0x{c['element']:02X}"]
            for c in labels["columns"]]
    rows += [[value if keyword in columns else f"(the same in every image: {value})", tag(keyword),
              dictionary_VR(keyword), keyword] for keyword, value in trial.items()]
    return ["\n## Labels in the images\n\n",
            "Each image's DICOM header carries the clinical labels below, the same values as metadata.parquet's row "
            "of that file: in standard attributes where DICOM has one (the Clinical Trial Subject, Study and Series "
            f"modules; sex in PatientSex), otherwise in one private block of group ({labels['group']}), private creator "
            f"\"{creator}\", one element per column (a null is an empty element). The time point is the study date as "
            "released: the labels are the latest clinical record on or before it. The cohort's version is not "
            "stamped: an image whose labels did not change is the same file in the next version.\n\n",
            _table(["column", "tag", "VR", "where"], rows),
            "\nRead them with pydicom:\n\n```python\nds = pydicom.dcmread(path)\n"
            f"labels = ds.private_block(0x{group:04X}, \"{creator}\")\n"
            f"labels[0x{first:02X}].value, ds.ClinicalTrialSubjectID, ds.ClinicalTrialTimePointID\n```\n"]
