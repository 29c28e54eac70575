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

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from imaging import fs as fsx
from imaging.governance.bundle import ManifestEntry, data_digest
from imaging.governance.disclosure import DisclosurePolicy

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

    quasi_identifiers: tuple[str, ...]  # metadata columns, then DICOM keywords
    class_sizes: tuple[int, ...]  # distinct patients per class of (metadata values, header values), ascending
    metadata_sizes: tuple[int, ...]  # the same over the metadata columns alone
    finer_headers: tuple[tuple[str, int], ...]  # (keyword, files whose header holds more than the metadata)
    headers_read: int

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


def k_from_files(root: str, table, disclosure: DisclosurePolicy, files: Iterable[str] | None = None) -> KFromFiles:
    """Classes over (metadata values, header values) per patient, read from the released files.

    `files` limits the headers read (one file under review); every image's otherwise.
    """
    from imaging.steps.release import header_values

    rules = disclosure.header_rules()
    columns = [q.released_as for q in disclosure.quasi_identifiers]
    keywords = [r.keyword for r in rules]
    wanted = None if files is None else set(files)
    combined, alone = defaultdict(set), defaultdict(set)
    finer: Counter = Counter()
    read = 0
    for row in table.select(["file", "patient_pseudonym", *columns]).to_pylist():
        values = tuple(row[c] for c in columns)
        alone[values].add(row["patient_pseudonym"])
        if wanted is not None and row["file"] not in wanted:
            # Not read (one file under review): counted as the release rule writes it.
            combined[values + tuple(r.header_value(row[r.column]) for r in rules)].add(row["patient_pseudonym"])
            continue
        with fsx.open_read(f"{root}/{row['file']}") as handle:  # the header only: pydicom stops before the pixels
            header = header_values(handle, keywords)
        read += 1
        for rule in rules:
            if header[rule.keyword] != rule.header_value(row[rule.column]):
                finer[rule.keyword] += 1
        combined[values + tuple(header[k] for k in keywords)].add(row["patient_pseudonym"])
    return KFromFiles((*columns, *keywords), _sizes(combined), _sizes(alone), tuple(sorted(finer.items())), read)


# --- With the identifiable zone ---------------------------------------------------------------------------

_DATE_VRS = frozenset({"DA", "DT", "TM"})


def _elements(path_or_bytes) -> dict[str, tuple[str, object]]:
    """Top-level header elements (up to the pixels): name -> (VR, comparable value)."""
    import io

    import pydicom

    source = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    dataset = pydicom.dcmread(source, stop_before_pixels=True, force=True)
    out = {}
    for element in dataset:
        name = element.keyword or f"({element.tag.group:04X},{element.tag.element:04X})"
        value = element.value
        if element.VR == "SQ":
            value = repr([[(e.tag, repr(e.value)) for e in item] for item in value])
        out[name] = (element.VR, None if value in (None, "", b"") else repr(value))
    return out


def attribute_evidence(pairs: Iterable[tuple[bytes, bytes]]) -> list[AttributeCount]:
    """Counts per attribute over (landing file bytes, released file bytes) pairs: never a value."""
    tally: dict[str, Counter] = defaultdict(Counter)
    for source, released in pairs:
        before, after = _elements(source), _elements(released)
        for name in set(before) | set(after):
            old, new = before.get(name, (None, None)), after.get(name, (None, None))
            if old[1] is None and new[1] is None:
                continue
            if new[1] is None:
                tally[name]["removed"] += 1
            elif old[1] is None:
                tally[name]["added"] += 1
            elif old[1] == new[1]:
                tally[name]["kept"] += 1
            elif (new[0] or old[0]) in _DATE_VRS:
                tally[name]["shifted"] += 1
            else:
                tally[name]["replaced"] += 1
    return [AttributeCount(name, **counts) for name, counts in sorted(tally.items())]


def quarantine_summary(warehouse: str, site_days: Iterable[tuple[str, str]]) -> list[QuarantineCount]:
    """Quarantined files by table and reason in the given (date, site) partitions (counts only)."""
    import pyarrow.dataset as ds

    from imaging.catalogue import ANONYMIZE_QUARANTINE, CLINICAL_QUARANTINE, INDEX_QUARANTINE, LINK_QUARANTINE

    wanted = sorted(set(site_days))
    out = []
    if not wanted:
        return out
    for table in (INDEX_QUARANTINE, CLINICAL_QUARANTINE, LINK_QUARANTINE, ANONYMIZE_QUARANTINE):
        url = f"{warehouse}/{table.path}"
        if not fsx.exists(url):
            continue
        filesystem, path = fsx.filesystem(url)
        dataset = ds.dataset(path, format="parquet", partitioning="hive", filesystem=filesystem)
        if not dataset.files:  # the table's folder without a file (an empty site-day's run emptied it): no rows
            continue
        rows = dataset.to_table(columns=["date", "site", "reason"]).to_pylist()
        counts = Counter(r["reason"] for r in rows if (str(r["date"]), str(r["site"])) in set(wanted))
        out += [QuarantineCount(table.name, reason, n) for reason, n in sorted(counts.items())]
    return out


def arrived_columns(warehouse: str, site_days: Iterable[tuple[str, str]]) -> set[str] | None:
    """The clinical extract columns that actually arrived in the partitions a release read (names only),
    from linked_patient_metadata's clinical map; None when that table is not there to read."""
    import pyarrow.dataset as ds

    from imaging.catalogue import LINKED

    url = f"{warehouse}/{LINKED.path}"
    wanted = set(site_days)
    if not fsx.exists(url) or not wanted:
        return None
    filesystem, path = fsx.filesystem(url)
    dataset = ds.dataset(path, format="parquet", partitioning="hive", filesystem=filesystem)
    names: set[str] = set()
    if not dataset.files:  # no file, no row: nothing arrived
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
