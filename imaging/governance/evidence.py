"""What a review recomputes from a release's own files, rather than reading what its description says.

- `cross_check`: the data digest recomputed from SHA256SUMS against release.json and the data card;
  metadata.parquet against metadata.csv, row by row; each image's sha256 in the metadata against
  SHA256SUMS, and one metadata row per image. A forged copy with edited files and re-summed
  checksums fails here without the warehouse (and its signatures name another release id).
- `k_from_files`: exact counts and equivalence classes from the metadata rows and the released
  DICOM headers together (a patient's class is every quasi-identifier value released about them,
  in either place), the classes of the metadata alone, and the files whose header holds a
  quasi-identifier finer than the metadata (k would be overstated).
- `attribute_evidence`: per DICOM attribute, how many files had it removed, replaced, shifted, kept or
  added between the landing file and the released one (counts only, never a value).
- `quarantine_summary`: counts by reason in the quarantine tables of the partitions a release read.

Counts here are exact: they are the reviewer's evidence (identifiable zone access or not), not the
outward-facing data card, which suppresses small numbers.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from imaging import fs as fsx
from imaging.governance.bundle import ManifestEntry, data_digest
from imaging.governance.disclosure import DisclosurePolicy
from imaging.steps.objects import identity
from imaging.steps.stamp import (GROUP, StampPlan, expected_label, label_mismatches, label_tags, read_labels,
                                 undescribed_elements)

METADATA_PARQUET, METADATA_CSV = "metadata.parquet", "metadata.csv"


@dataclass(frozen=True)
class ExactCounts:
    images: int
    patients: int
    studies: int
    series: int


@dataclass(frozen=True)
class KFromFiles:
    """k-anonymity recomputed from the released files: sizes only, no values."""

    quasi_identifiers: tuple[str, ...]  # metadata columns, then DICOM keywords (and stamped quasi-identifiers)
    class_sizes: tuple[int, ...]  # distinct patients per class of (metadata values, header values), ascending
    metadata_sizes: tuple[int, ...]  # the same over the metadata columns alone
    finer_headers: tuple[tuple[str, int], ...]  # (keyword, files whose header holds more than the metadata)
    headers_read: int
    # (stamped column and its tag, files whose stamped value is not the metadata's): a label the card describes
    # that the header holds otherwise, or elements of the label block the card does not describe
    label_mismatches: tuple[tuple[str, int], ...] = ()

    @property
    def smallest(self) -> int:
        return self.class_sizes[0] if self.class_sizes else 0

    @property
    def same_as_metadata(self) -> bool:
        return self.class_sizes == self.metadata_sizes


@dataclass(frozen=True)
class AttributeCount:
    """One DICOM attribute across the traced files: how many had it removed, replaced, shifted, kept, added."""

    attribute: str  # keyword, or (gggg,eeee) for a private or unknown tag
    removed: int = 0
    replaced: int = 0
    shifted: int = 0
    kept: int = 0
    added: int = 0


@dataclass(frozen=True)
class QuarantineCount:
    table: str
    reason: str
    files: int


def read_metadata(root: str):
    """metadata.parquet as an Arrow table (None when absent)."""
    import pyarrow.parquet as pq

    url = f"{root}/{METADATA_PARQUET}"
    if not fsx.exists(url):
        return None
    fs, path = fsx.filesystem(url)
    return pq.read_table(path, filesystem=fs)


def _normal(value):
    return None if value == "" else value


def _csv_matches(root: str, table) -> bool:
    import pyarrow.csv as pacsv

    with fsx.open_read(f"{root}/{METADATA_CSV}") as handle:
        csv = pacsv.read_csv(handle, convert_options=pacsv.ConvertOptions(
            column_types={f.name: f.type for f in table.schema}, strings_can_be_null=True))
    if csv.column_names != table.column_names or csv.num_rows != table.num_rows:
        return False
    return all([_normal(v) for v in csv.column(c).to_pylist()] == [_normal(v) for v in table.column(c).to_pylist()]
               for c in table.column_names)


def cross_check(root: str, entries: Sequence[ManifestEntry], release_json: Mapping | None, card: Mapping | None,
                table) -> list[str]:
    """Problems found recomputing the data digest and cross-checking the metadata files and image checksums."""
    problems = []
    digest = data_digest(entries)
    for name, said in (("release.json", (release_json or {}).get("data_digest")),
                       ("datacard.json", (card or {}).get("data_digest"))):
        if said is not None and said != digest:
            problems.append(f"the data digest recomputed from SHA256SUMS differs from the one {name} states")
    if table is None:
        problems.append(f"no {METADATA_PARQUET}")
        return problems
    try:
        if not _csv_matches(root, table):
            problems.append(f"{METADATA_CSV} and {METADATA_PARQUET} do not hold the same rows")
    except (OSError, ValueError) as error:  # pyarrow's errors are ValueErrors (ArrowInvalid)
        problems.append(f"{METADATA_CSV} cannot be read against {METADATA_PARQUET}'s columns: "
                        f"{type(error).__name__}")
    if "file" not in table.column_names or "sha256" not in table.column_names:
        problems.append("the metadata has no file or sha256 column")
        return problems
    listed = {e.path: e.sha256 for e in entries if e.path.startswith("images/")}
    rows = dict(zip(table.column("file").to_pylist(), table.column("sha256").to_pylist()))
    if len(rows) != table.num_rows:
        problems.append("a file has more than one metadata row")
    if set(rows) != set(listed):
        problems.append(f"{len(set(listed) - set(rows))} images have no metadata row and "
                        f"{len(set(rows) - set(listed))} metadata rows name no image")
    differ = sum(1 for f, h in rows.items() if f in listed and listed[f] != h)
    if differ:
        problems.append(f"{differ} images' sha256 in the metadata differs from SHA256SUMS")
    return problems


def exact_counts(table) -> ExactCounts:
    def distinct(column):
        return len(set(table.column(column).to_pylist())) if column in table.column_names else 0
    return ExactCounts(table.num_rows, distinct("patient_pseudonym"), distinct("study_instance_uid"),
                       distinct("series_instance_uid"))


def _sizes(members: Mapping) -> tuple[int, ...]:
    return tuple(sorted(len(p) for p in members.values()))


def k_from_files(root: str, table, disclosure: DisclosurePolicy, files: Iterable[str] | None = None,
                 labels: StampPlan | None = None, cache: "EvidenceCache | None" = None,
                 sums: Mapping[str, str] | None = None) -> KFromFiles:
    """Classes over (metadata values, header values) per patient, read from the released files.

    `files` limits the headers read (one file under review); every image's otherwise. `labels` (the stamp the
    data card describes): each stamped column is read back from its tag and held to the metadata's value, and a
    stamped quasi-identifier joins the class as the header holds it, so k counts what the headers hold.
    `cache` (published_cohort's own review): the header values of a file whose sha256 (`sums`, SHA256SUMS) was
    read before are not read again.
    """
    rules = disclosure.header_rules()
    columns = [q.released_as for q in disclosure.quasi_identifiers]
    keywords = [r.keyword for r in rules]
    stamped = list(labels.columns) if labels else []
    stamped_qis = [c for c in stamped if c.column in columns and c.keyword not in keywords]
    wanted = None if files is None else set(files)
    combined, alone = defaultdict(set), defaultdict(set)
    finer: Counter = Counter()
    mismatched: Counter = Counter()
    read = 0
    for row in table.select(["file", "patient_pseudonym", *columns, *_label_columns(labels, table)]).to_pylist():
        values = tuple(row[c] for c in columns)
        alone[values].add(row["patient_pseudonym"])
        if wanted is not None and row["file"] not in wanted:
            # Not read (one file under review): counted as the release rule writes it.
            combined[values + tuple(r.header_value(row[r.column]) for r in rules)
                     + tuple(expected_label(c, row.get(c.column)) for c in stamped_qis)].add(row["patient_pseudonym"])
            continue
        header = _header(f"{root}/{row['file']}", keywords, labels, cache, (sums or {}).get(row["file"]))
        read += 1
        for rule in rules:
            if header[rule.keyword] != rule.header_value(row[rule.column]):
                finer[rule.keyword] += 1
        if labels is not None:
            for name in label_mismatches(header["labels"], labels, row):
                mismatched[name] += 1
            if header["undescribed"]:
                mismatched[f"({GROUP:04X}) elements the data card does not describe"] += 1
        combined[values + tuple(header[k] for k in keywords)
                 + tuple(header["labels"].get(c.column) for c in stamped_qis)].add(row["patient_pseudonym"])
    return KFromFiles((*columns, *keywords, *(f"{c.column} {c.tag}" for c in stamped_qis)), _sizes(combined),
                      _sizes(alone), tuple(sorted(finer.items())), read, tuple(sorted(mismatched.items())))


def stamp_of(card: Mapping | None) -> StampPlan | None:
    """The stamp a data card describes ("labels_in_images"), or None when its images carry no labels."""
    described = (card or {}).get("labels_in_images")
    return StampPlan.from_description(described) if described else None


def _label_columns(labels: StampPlan | None, table) -> list[str]:
    if labels is None:
        return []
    return [c for c in labels.value_columns if c in table.column_names and c not in ("patient_pseudonym",)]


def _header(url: str, keywords: Sequence[str], labels: StampPlan | None, cache: "EvidenceCache | None",
            sha256: str | None) -> dict:
    """What a released file's header holds of the quasi-identifier keywords and the stamped labels (through the
    cache when the file's sha256 was read before)."""
    def read() -> dict:
        import pydicom

        tags = list(keywords) + (label_tags(labels) if labels else [])
        with fsx.open_read(url) as handle:  # the header only: pydicom stops before the pixels
            dataset = pydicom.dcmread(handle, stop_before_pixels=True, specific_tags=tags)
        out = {}
        for keyword in keywords:
            value = dataset[keyword].value if keyword in dataset else None
            out[keyword] = str(value) if value not in (None, "") else None
        out["labels"] = read_labels(dataset, labels) if labels else {}
        out["undescribed"] = undescribed_elements(dataset, labels) if labels else 0
        return out
    if cache is None or sha256 is None:
        return read()
    variant = json.dumps([list(keywords), labels.describe() if labels else None], sort_keys=True)
    return cache.header(f"{sha256}:{hashlib.sha256(variant.encode()).hexdigest()[:16]}", read)


# --- With the identifiable zone ---------------------------------------------------------------------------

_DATE_VRS = frozenset({"DA", "DT", "TM"})


def _elements(source) -> dict[str, tuple[str, object]]:
    """Top-level header elements (up to the pixels): name -> (VR, comparable value). `source`: a file's bytes,
    an open binary file, or a URL (opened here: only its header is read, never its pixels)."""
    import io

    import pydicom

    if isinstance(source, str):
        with fsx.open_read(source) as handle:
            return _elements(handle)
    source = io.BytesIO(source) if isinstance(source, bytes) else source
    dataset = pydicom.dcmread(source, stop_before_pixels=True, force=True)
    out = {}
    for element in dataset:
        name = element.keyword or f"({element.tag.group:04X},{element.tag.element:04X})"
        value = element.value
        if element.VR == "SQ":
            value = repr([[(e.tag, repr(e.value)) for e in item] for item in value])
        out[name] = (element.VR, None if value in (None, "", b"") else repr(value))
    return out


def pair_outcomes(source, released) -> dict[str, str]:
    """What happened to each attribute between a landing file and its released file (removed, replaced,
    shifted, kept, added; attributes empty in both are left out): names and outcomes, never a value."""
    before, after = _elements(source), _elements(released)
    out = {}
    for name in set(before) | set(after):
        old, new = before.get(name, (None, None)), after.get(name, (None, None))
        if old[1] is None and new[1] is None:
            continue
        if new[1] is None:
            out[name] = "removed"
        elif old[1] is None:
            out[name] = "added"
        elif old[1] == new[1]:
            out[name] = "kept"
        elif (new[0] or old[0]) in _DATE_VRS:
            out[name] = "shifted"
        else:
            out[name] = "replaced"
    return out


def attribute_evidence(pairs: Iterable[tuple], cache: "EvidenceCache | None" = None) -> list[AttributeCount]:
    """Counts per attribute over (landing file, released file) pairs (bytes, or URLs whose headers alone are
    read): never a value. With a `cache`, pairs are (landing URL, released URL, landing sha256, released
    sha256) and a pair compared before (the same two contents) is not read again."""
    tally: dict[str, Counter] = defaultdict(Counter)
    for pair in pairs:
        outcomes = pair_outcomes(pair[0], pair[1]) if cache is None or len(pair) < 4 else cache.outcomes(*pair)
        for name, outcome in outcomes.items():
            tally[name][outcome] += 1
    return [AttributeCount(name, **counts) for name, counts in sorted(tally.items())]


class EvidenceCache:
    """What a review of unchanged files would compute again, kept between published_cohort's own reviews of a
    cohort (identifiable zone, `reviews/_cache/<cohort>.json`): each landing file's sha256 with its identity when
    hashed, each (landing, released) pair's per-attribute outcomes and each released file's header values, by
    the contents' sha256. A landing file is hashed again when its identity changed; the others are functions
    of the bytes their sha256 names, which the review verifies (SHA256SUMS) or has just hashed. So the run's
    review of a version that shares most of its images reads only what is new, and says the same as a full one.
    imaging-review never reads it: a reviewer's review reads every byte."""

    def __init__(self, data: Mapping | None = None):
        data = data or {}
        self._landing = dict(data.get("landing", {}))
        self._pairs = dict(data.get("pairs", {}))
        self._headers = dict(data.get("headers", {}))
        self._used: dict[str, set] = {"landing": set(), "pairs": set(), "headers": set()}

    @classmethod
    def load(cls, url: str) -> "EvidenceCache":
        try:
            return cls(json.loads(fsx.read_bytes(url)) if fsx.exists(url) else None)
        except (ValueError, OSError):  # unreadable: everything is read again
            return cls()

    def save(self, url: str) -> None:
        """Keep what this review used (so the cache follows the cohort's latest version, never grows)."""
        used = {name: {k: v for k, v in getattr(self, f"_{name}").items() if k in self._used[name]}
                for name in self._used}
        fsx.write_atomic(url, json.dumps(used, sort_keys=True, separators=(",", ":")).encode())

    def landing_sha256(self, url: str, hashed: Callable[[], str]) -> str:
        """A landing file's sha256: the cached one while its identity is unchanged, else `hashed()`."""
        now = identity(url)
        self._used["landing"].add(url)
        known = self._landing.get(url)
        if now is not None and known is not None and known[0] == now:
            return known[1]
        sha = hashed()
        self._landing[url] = [now, sha]
        return sha

    def outcomes(self, source: str, released: str, source_sha256: str, released_sha256: str) -> dict[str, str]:
        key = f"{source_sha256}:{released_sha256}"
        self._used["pairs"].add(key)
        if key not in self._pairs:
            self._pairs[key] = pair_outcomes(source, released)
        return self._pairs[key]

    def header(self, sha256: str, read: Callable[[], dict]) -> dict:
        self._used["headers"].add(sha256)
        if sha256 not in self._headers:
            self._headers[sha256] = read()
        return self._headers[sha256]


def quarantine_summary(warehouse: str, site_days: Iterable[tuple[str, str]]) -> list[QuarantineCount]:
    """Quarantined files by table and reason in the given (date, site) partitions (counts only)."""

    from imaging.catalogue import ANONYMIZE_QUARANTINE, CLINICAL_QUARANTINE, INDEX_QUARANTINE, LINK_QUARANTINE

    wanted = sorted(set(site_days))
    out = []
    if not wanted:
        return out
    for table in (INDEX_QUARANTINE, CLINICAL_QUARANTINE, LINK_QUARANTINE, ANONYMIZE_QUARANTINE):
        dataset = fsx.parquet_table(f"{warehouse}/{table.path}")
        if dataset is None:  # no folder, or one an empty site-day's run emptied: no rows
            continue
        rows = dataset.to_table(columns=["date", "site", "reason"]).to_pylist()
        counts = Counter(r["reason"] for r in rows if (str(r["date"]), str(r["site"])) in set(wanted))
        out += [QuarantineCount(table.name, reason, n) for reason, n in sorted(counts.items())]
    return out


def arrived_columns(warehouse: str, site_days: Iterable[tuple[str, str]]) -> set[str] | None:
    """The clinical extract columns that actually arrived in the partitions a release read (names only),
    from linked_patient_metadata's clinical map; None when that table is not there to read."""

    from imaging.catalogue import LINKED

    url = f"{warehouse}/{LINKED.path}"
    wanted = set(site_days)
    if not fsx.exists(url) or not wanted:
        return None
    dataset = fsx.parquet_table(url)
    names: set[str] = set()
    if dataset is None:  # no file, no row: nothing arrived
        return names
    for row in dataset.to_table(columns=["date", "site", "clinical"]).to_pylist():
        if (str(row["date"]), str(row["site"])) in wanted and row["clinical"]:
            names.update(k for k, _ in row["clinical"]) if isinstance(row["clinical"], list) \
                else names.update(row["clinical"])
    return names


def metadata_columns(root: str) -> list[str]:
    table = read_metadata(root)
    return [] if table is None else list(table.column_names)


def release_summary(root: str) -> dict:
    """What `imaging-review diff` compares: rows, patients, columns, options, code versions, selection."""
    table = read_metadata(root)
    info = json.loads(fsx.read_bytes(f"{root}/release.json")) if fsx.exists(f"{root}/release.json") else {}
    card = json.loads(fsx.read_bytes(f"{root}/datacard.json")) if fsx.exists(f"{root}/datacard.json") else {}
    patients = set(table.column("patient_pseudonym").to_pylist()) if table is not None and \
        "patient_pseudonym" in table.column_names else set()
    return {"cohort": info.get("cohort"), "release": info.get("release"), "rows": 0 if table is None else table.num_rows,
            "patients": patients, "columns": [] if table is None else list(table.column_names),
            "options": list(info.get("deidentification", {}).get("options", [])),
            "code_versions": dict(info.get("code_versions", {})), "selection": info.get("selection"),
            "data_digest": info.get("data_digest"), "min_k": card.get("disclosure", {}).get("min_k")}
