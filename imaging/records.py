"""Named records: what each step reads and yields, with the Arrow schema derived from the same fields.

A record is a frozen dataclass; its type hints are the one field list from which both the row
(`to_batch`) and the schema (`schema_of`, and from it the Spark schema) are made, so a column can
never be read by position or drift from its type. Every step's outcome is its own record or a
`Quarantined` one, the single quarantine shape of every stage.

Executor work is a `BatchStep`: Spark hands it Arrow batches (`mapInArrow`), it turns each row
into the input record, calls the step (set up once per partition, never per record) and turns
what the step yields back into one Arrow batch per input batch. Pure Python and pyarrow only.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Iterator, Mapping, Union

import pyarrow as pa

# Type hints with an Arrow type attached; plain `int` is int64, `float` double, `bool` boolean.
Int32 = Annotated[int, pa.int32()]
TextMap = Annotated[dict, pa.map_(pa.string(), pa.string())]
IntMap = Annotated[dict, pa.map_(pa.string(), pa.int32())]
TextList = Annotated[list, pa.list_(pa.string())]

_PLAIN = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def _arrow_type(hint) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of one field's type hint."""
    nullable = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"unsupported union {hint!r}")
        hint = args[0]
    if typing.get_origin(hint) is Annotated:
        return typing.get_args(hint)[1], nullable
    if hint in _PLAIN:
        return _PLAIN[hint], nullable
    raise TypeError(f"no Arrow type for {hint!r}")


@functools.cache
def fields_of(record_type: type) -> tuple[pa.Field, ...]:
    """The record's fields as Arrow fields, in declaration order (flattened fields excluded)."""
    hints = typing.get_type_hints(record_type, include_extras=True)
    out = []
    for f in dataclasses.fields(record_type):
        if f.metadata.get("flatten"):
            continue
        kind, nullable = _arrow_type(hints[f.name])
        out.append(pa.field(f.name, kind, nullable))
    return tuple(out)


def schema_of(record_type: type, extra: pa.Schema | None = None) -> pa.Schema:
    """Arrow schema of a record type, plus the columns of its flattened mapping field (`extra`)."""
    return pa.schema(list(fields_of(record_type)) + list(extra or []))


def outcome_schema(ok_type: type, extra: pa.Schema | None = None) -> pa.Schema:
    """One schema for a step's outcome, `ok_type | Quarantined`: every column of both, nullable.

    A row is quarantined exactly when `reason` is set (see `QUARANTINED`).
    """
    seen: dict[str, pa.Field] = {}
    for f in list(schema_of(ok_type, extra)) + list(schema_of(Quarantined)):
        seen.setdefault(f.name, f.with_nullable(True))
    return pa.schema(list(seen.values()))


# The Spark SQL condition that tells a quarantined outcome row from a usable one.
QUARANTINED = "reason IS NOT NULL"


def _flat(record) -> dict:
    row = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.metadata.get("flatten"):
            row.update(value or {})
        else:
            row[f.name] = value
    return row


def to_batch(records: Iterable, schema: pa.Schema) -> pa.RecordBatch:
    """Records (of any types whose fields are in `schema`) as one Arrow batch; absent columns null."""
    rows = [_flat(r) for r in records]
    arrays = []
    for f in schema:
        values = [row.get(f.name) for row in rows]
        if pa.types.is_map(f.type):
            values = [None if v is None else list(v.items()) for v in values]
        arrays.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def from_row(record_type: type, row: Mapping[str, Any]):
    """A record from a row that has (at least) its fields; map columns come back as dicts."""
    maps = _map_fields(record_type)
    values = {}
    for f in dataclasses.fields(record_type):
        if f.metadata.get("flatten"):
            continue
        value = row.get(f.name)
        if f.name in maps and isinstance(value, list):  # Arrow hands a map back as a list of (key, value) pairs
            value = dict(value)
        values[f.name] = value
    return record_type(**values)


@functools.cache
def _map_fields(record_type: type) -> frozenset[str]:
    return frozenset(f.name for f in fields_of(record_type) if pa.types.is_map(f.type))


@dataclass(frozen=True)
class BatchStep:
    """A per-partition step for `DataFrame.mapInArrow`: Arrow batches in, Arrow batches out.

    `setup()` runs once per Spark partition and returns the per-record function, which maps one
    input record to an output record or an iterable of them (zero, one or many). Picklable when
    `setup` is (a frozen dataclass instance such as `Stateless(function)`).
    """

    setup: Callable[[], Callable[[Any], Iterable]]
    input_type: type
    output: pa.Schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from imaging.deid.quiet import quiet

        step = self.setup()
        # Executors handle identifiable files: pydicom's warnings quote header values, so they
        # are silenced for the whole partition, never let into executor logs.
        try:
            with quiet():
                for batch in batches:
                    out = []
                    for row in batch.to_pylist():
                        result = step(from_row(self.input_type, row))
                        out.extend((result,) if dataclasses.is_dataclass(result) else result)
                    yield to_batch(out, self.output)
        finally:
            close = getattr(step, "close", None)  # a step holding resources (an OCR model) frees them
            if close is not None:
                close()


@dataclass(frozen=True)
class Stateless:
    """The `setup` of a step that needs no set-up: hands back the same module-level function."""

    function: Callable

    def __call__(self) -> Callable:
        return self.function


# ---------------------------------------------------------------------------------------------
# The records. Partition columns (`date`, `site`) come first in each record; the catalogue puts
# them last in a table, where hive partitioning keeps them.


@dataclass(frozen=True)
class SiteDay:
    """One partition of the image assets: a site's images of one day."""

    date: str
    site: str


@dataclass(frozen=True)
class SiteDayFolder:
    """Where a site-day's images landed: the input of the listing step."""

    date: str
    site: str
    url: str


@dataclass(frozen=True)
class ListedFile:
    """A file found under a site-day's landing folder."""

    date: str
    site: str
    source_path: str
    size_bytes: int


@dataclass(frozen=True, kw_only=True)
class Quarantined:
    """An input that could not be used, with the reason (a fixed phrase, never a value from it).

    Keywords only: six fields, two of them optional strings, read wrongly when given by position.
    """

    date: str
    site: str
    source_path: str
    size_bytes: int | None
    sha256: str | None
    reason: str


@dataclass(frozen=True)
class IndexedImage:
    """One DICOM instance, read from its header (no pixels)."""

    date: str
    site: str
    source_path: str
    size_bytes: int | None
    sha256: str | None
    sop_instance_uid: str | None
    study_instance_uid: str | None
    series_instance_uid: str | None
    sop_class_uid: str | None
    modality: str | None
    laterality: str | None
    patient_id: str | None
    issuer_of_patient_id: str | None
    study_date: str | None
    study_time: str | None
    manufacturer: str | None
    model: str | None
    rows: Int32 | None
    columns: Int32 | None
    number_of_frames: Int32 | None
    transfer_syntax_uid: str | None


@dataclass(frozen=True)
class LinkedImage(IndexedImage):
    """An indexed image with its patient's as-of clinical record (columns as the site names them) and, for the eye
    the image shows, each eye field's latest value on or before the image's day (imaging/clinical_source.py)."""

    has_clinical_record: bool = False
    clinical_extract_date: str | None = None
    clinical: TextMap | None = None
    eye: str | None = None  # R or L: the eye the image shows (ImageLaterality, else Laterality)
    eye_reason: str | None = None  # why the image has no eye fields (imaging.clinical_source.EYE_REASONS)
    eye_clinical: TextMap | None = None  # eye field -> its latest value for that eye (names as the source gives them)
    eye_days_before: IntMap | None = None  # eye field -> days between that observation's day and the image's
    eye_diagnoses: TextList | None = None  # diagnosis codes in force for that eye (or both) on the image's day


@dataclass(frozen=True)
class ClinicalExtract:
    """A site's dated clinical extract that a run reads."""

    site: str
    extract_date: str
    url: str


@dataclass(frozen=True)
class ClinicalRow:
    """One patient row of an extract; `row_number` orders rows within it (a later one supersedes)."""

    site: str
    extract_date: str
    row_number: Int32
    patient_id: str
    clinical: TextMap
    # R, L or B: the row is an observation of that eye (its eye fields, names without a per-eye suffix); None: the
    # patient's own record.
    eye: str | None = None


@dataclass(frozen=True)
class PublishedImage:
    """A de-identified image written to staging, as the manifest and the ledger describe it.

    `output_*` describe the written file; `source_*` stay in the identifiable ledger. The clinical
    fields the policy releases are flattened into columns of their own.
    """

    date: str
    site: str
    source_path: str
    source_sha256: str
    source_uid_hash: str  # keyed hash of the source SOP Instance UID (imaging.provenance)
    batch: str
    output_path: str
    output_sha256: str
    output_size_bytes: int
    patient_pseudonym: str | None
    study_instance_uid: str | None
    series_instance_uid: str | None
    sop_instance_uid: str | None
    sop_class_uid: str | None
    modality: str | None
    laterality: str | None
    study_date: str | None
    manufacturer: str | None
    model: str | None
    rows: Int32 | None
    columns: Int32 | None
    number_of_frames: Int32 | None
    has_clinical_record: bool
    # What the burned-in text check did to the pixels: "not read", "clean" or "redacted"
    # (imaging.deid.engine), and the boxes a redaction covered (imaging.deid.redact.Redaction.regions: JSON).
    pixel_text: str | None = None
    redacted_regions: str | None = None
    clinical: dict = dataclasses.field(default_factory=dict, metadata={"flatten": True})


@dataclass(frozen=True)
class OptOutApplied:
    """Which opt-out list applied to a site-day's de-identification: one row per site's list in force then
    (an opt-out is a person's, so every site's list applies to every site-day of its namespace)."""

    date: str
    site: str
    list_site: str
    list_version: str  # keyed digest of the list's patients (imaging.optout.list_version)
    list_received: str  # the date of the newest list file applied: the day it was received
    list_patients: int  # patients on that list


@dataclass(frozen=True)
class ReleaseFile:
    """A file copied into a release, with the checksum it was verified against (imaging/steps/release.py)."""

    path: str
    sha256: str
    content_key: str | None = None  # what decided its bytes (imaging.steps.release.HeaderPlan.content_key)
    written: int = 0  # bytes written for it: 0 when its bytes were shared from the object store
    object_identity: str | None = None  # the stored object's identity once hashed (the store's index keeps it)
    identity: str | None = None  # the release file's identity as placed (what the release's verification trusts)


@dataclass(frozen=True)
class StoredObject:
    """One row of the release object store's index (imaging/steps/objects.py): the object holding a content
    key's released bytes, and its identity when it was last hashed. Partitioned by the cohort whose latest
    build listed it."""

    cohort: str
    content_key: str
    object_sha256: str
    object_identity: str


@dataclass(frozen=True)
class PacsListed:
    """One instance of a site-day as its PACS lists it (QIDO-RS or C-FIND): its UIDs, the listing's change
    marker (a digest of what the listing says of it, imaging/pacs/) and `file_name`, the landed file's name (a
    digest of its UIDs: no value from the server names a file)."""

    date: str
    site: str
    study_instance_uid: str
    series_instance_uid: str
    sop_instance_uid: str
    marker: str
    file_name: str

    def listed(self) -> dict:
        """The listed instance's own fields, by name (what an outcome of it carries over)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(PacsListed)}


@dataclass(frozen=True)
class PacsInstance(PacsListed):
    """A listed instance planned for retrieval: the driver's listing, joined to what the last run landed
    (`previous_*`, null when it landed nothing for this instance)."""

    previous_marker: str | None = None
    previous_sha256: str | None = None
    pixel_bytes: int | None = None  # Rows x Columns x frames x BitsAllocated / 8 from the listing: a progress estimate
    sop_class_uid: str | None = None  # from the listing: the storage context a C-GET must accept (DIMSE)


@dataclass(frozen=True)
class PacsOutcome(PacsListed):
    """What became of one listed instance: `fetched` (retrieved now), `unchanged` (the last run's file, same
    listing marker and sha256, kept) or `failed` (nothing landed; `reason` says why, a fixed phrase)."""

    outcome: str
    size_bytes: int | None = None
    sha256: str | None = None
    attempts: int = 0
    reason: str | None = None
