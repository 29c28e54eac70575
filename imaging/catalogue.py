"""The table catalogue: every table and folder the platform writes, in one place.

Each table says its zone, its path below the zone, the record its rows come from, its partition
columns and its sort key. Warehouse reads and writes, the report command and the tests all go
through these entries; nothing else spells a table's path or columns.

Zones: `identifiable/` is restricted (real paths, dates, sites, ids); `deidentified/` must be safe
to publish. The manifest is the one table whose columns depend on configuration (the clinical
fields the policy releases), so it is made by `manifest(policy)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

import pyarrow as pa

from imaging.provenance import RUN_COLUMNS
from imaging.records import (IndexedImage, LinkedImage, OptOutApplied, PacsOutcome, PublishedImage, Quarantined,
                             StoredObject, fields_of)

IDENTIFIABLE = "identifiable"
DEIDENTIFIED = "deidentified"
ZONES = (IDENTIFIABLE, DEIDENTIFIED)
SITE_DAY = ("date", "site")

# Clinical policy output types -> Arrow types of the manifest's clinical columns.
CLINICAL_TYPES = {"int": pa.int32(), "double": pa.float64(), "string": pa.string()}


@dataclass(frozen=True)
class Table:
    """A hive-partitioned Parquet table; rows are projections of `record`."""

    zone: str
    name: str
    record: type
    partition_by: tuple[str, ...]
    sort_by: tuple[str, ...]
    description: str
    # Table column -> record field, for the few columns named differently from their field.
    renamed: Mapping[str, str] = field(default_factory=dict)
    # The record fields kept (as table column names); None keeps them all.
    keep: tuple[str, ...] | None = None
    # Columns beyond the record's fields (the manifest's clinical fields).
    extra: pa.Schema | None = None

    @property
    def path(self) -> str:
        """Path below the warehouse root."""
        return f"{self.zone}/{self.name}"

    @property
    def schema(self) -> pa.Schema:
        """Columns in file order, partition columns last (where hive partitioning keeps them)."""
        by_field = {f.name: f for f in fields_of(self.record)}
        source = {v: k for k, v in self.renamed.items()}
        names = self.keep or tuple(source.get(f, f) for f in by_field)
        columns = [by_field[self.renamed.get(n, n)].with_name(n) for n in names] + list(self.extra or [])
        data = [c for c in columns if c.name not in self.partition_by]
        parts = {c.name: c for c in columns if c.name in self.partition_by}
        return pa.schema(data + [parts[p] for p in self.partition_by])

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.schema.names)

    def source_of(self, column: str) -> str:
        """The outcome column a table column is read from."""
        return self.renamed.get(column, column)


@dataclass(frozen=True)
class Folder:
    """A folder of files (not a table), below a zone."""

    zone: str
    name: str
    description: str

    @property
    def path(self) -> str:
        return f"{self.zone}/{self.name}"


RAW_IMAGE_INDEX = Table(
    IDENTIFIABLE, "raw_image_index", IndexedImage, SITE_DAY, ("source_path",),
    "one row per DICOM instance, from its header; sha256 of the whole file")
INDEX_QUARANTINE = Table(
    IDENTIFIABLE, "quarantine/raw_image_index", Quarantined, SITE_DAY, ("source_path",),
    "landing files that are not usable DICOM instances, and second copies of an instance, with the reason")
CLINICAL_QUARANTINE = Table(
    IDENTIFIABLE, "quarantine/clinical_extracts", Quarantined, SITE_DAY, ("source_path",),
    "clinical extracts that cannot be read, and extract rows keyed by an empty or placeholder patient_id or with an "
    "eye that is none, accounted to their own day; a clinical source's unusable rows (source "
    "clinical_source:<name>/<query>), in each site-day holding images of their patient")
LINKED = Table(
    IDENTIFIABLE, "linked_patient_metadata", LinkedImage, SITE_DAY, ("source_path",),
    "each indexed image with its patient's latest clinical record dated on or before the image's day and, for the "
    "eye it shows, each eye field's latest value on or before that day and the diagnoses in force for that eye")
LINK_QUARANTINE = Table(
    IDENTIFIABLE, "quarantine/linked_patient_metadata", Quarantined, SITE_DAY, ("source_path",),
    "indexed images that cannot be linked (a study date before the linked record's birth date), with the reason")
LEDGER = Table(
    IDENTIFIABLE, "anonymization_ledger", PublishedImage, SITE_DAY, ("source_path",),
    "the provenance ledger: one row per published image, landing file -> de-identified output with both "
    "checksums, a keyed hash of the source SOP Instance UID, and the run, code version, profile and options",
    keep=("source_path", "source_sha256", "source_uid_hash", "batch", "output_path", "output_sha256", "date", "site"),
    extra=RUN_COLUMNS)
# A released copy of an image withdrawn afterwards (its patient opted out) must stay traceable: its ledger row
# moves here when its site-day is materialized again, and leaves again if the image is de-identified anew.
WITHDRAWN = Table(
    IDENTIFIABLE, "withdrawn_images", PublishedImage, SITE_DAY, ("source_path",),
    "provenance ledger rows of images withdrawn from the de-identified zone because their patient opted out after "
    "they were de-identified: released copies of them stay traceable to their landing files",
    keep=LEDGER.keep, extra=RUN_COLUMNS)
ANONYMIZE_QUARANTINE = Table(
    IDENTIFIABLE, "quarantine/anonymized_images", Quarantined, SITE_DAY, ("source_path",),
    "linked images that could not be published, with the reason")

OPTOUT_APPLIED = Table(
    IDENTIFIABLE, "optout_applied", OptOutApplied, SITE_DAY, ("list_site",),
    "which opt-out list versions applied to each site-day's de-identification (one row per site's list in force "
    "then; the images of its patients are quarantined as 'patient opted out')")
OPTOUT_QUARANTINE = Table(
    IDENTIFIABLE, "quarantine/optout_lists", Quarantined, SITE_DAY, ("source_path",),
    "opt-out list files that cannot be read (or are not named by a date) and list rows keyed by an empty or "
    "placeholder patient_id or with an unknown action, with the reason, accounted to the file's own day")

ANONYMIZED_FILES = Folder(
    DEIDENTIFIED, "anonymized_images/files",
    "de-identified DICOM files, <batch>/<new SOP Instance UID>.dcm; a batch is a keyed token of a site-day")
COHORTS = Folder(DEIDENTIFIED, "cohorts", "published releases, <cohort>/v<version>/")
HELD = Folder(IDENTIFIABLE, "held", "built releases waiting for approval, <cohort>/<release id>/")
APPROVALS = Folder(IDENTIFIABLE, "approvals",
                   "signed approvals and rejections of exact release content, <release id>/<kind>-<signer>.json, "
                   "with the review report each signer saw (write once)")
AUDIT = Folder(IDENTIFIABLE, "audit", "the release audit log: one write-once, chained JSON file per hold, approval, "
                                      "rejection and publication")
# Images retrieved from a site's PACS (assets/pacs_landing.py), in the landing layout: the platform's own
# landing root for PACS sites (the hospital's landing folder stays read-only), committed per site-day.
PACS_LANDING = Folder(IDENTIFIABLE, "pacs_landing",
                      "DICOM Part 10 files retrieved from the sites' PACS, images/<site>/<date>/<digest of UIDs>.dcm")
PACS_INSTANCES = Table(
    IDENTIFIABLE, "pacs_instances", PacsOutcome, SITE_DAY, ("file_name",),
    "every instance a site's PACS listed for a site-day and what became of it: fetched, unchanged (kept) or "
    "failed with the reason; sha256 of each landed file")
# A released data card names each site's opt-out list by a keyed token; the review (which has no key) maps a token
# back to its site here, to re-read exactly the files that were in force for that site when the release was built.
OPTOUT_SITES = Folder(IDENTIFIABLE, "optout_sites", "<token>: the site a data card's opt-out list token stands for "
                                                    "(written once by published_cohort)")
# Each distinct released image once, named by its sha256: versions hard-link (or, on an object store, copy
# server-side) their images from here instead of writing them again (imaging/steps/objects.py).
RELEASE_OBJECTS = Folder(DEIDENTIFIED, "release_objects",
                         "each distinct released image once, <ab>/<sha256>.dcm, read-only; versions share them")
RELEASE_INDEX = Table(
    DEIDENTIFIED, "release_objects/_index", StoredObject, ("cohort",), ("content_key",),
    "the object store's index: per content key (what decides a released image's bytes) the object holding them "
    "and its identity when last hashed, as each cohort's latest kept build listed them")
REVIEWS = Folder(IDENTIFIABLE, "reviews", "review reports of releases (imaging-review's HTML), <cohort>-<release id>.html")
# The key of the landing files' tokens (imaging/quarantine.py): derived from the pseudonym key, written by the runs,
# read by whoever may read this zone (imaging-quarantine, imaging-review) to name a landing file without its path.
KEYS = Folder(IDENTIFIABLE, "keys", "landing_file_token: the key of the landing files' tokens (derived from the "
                                    "pseudonym key)")

_MANIFEST_FIELDS = (
    "output_path", "sha256", "size_bytes", "patient_pseudonym", "study_instance_uid", "series_instance_uid",
    "sop_instance_uid", "sop_class_uid", "modality", "laterality", "study_date", "manufacturer", "model",
    "rows", "columns", "number_of_frames", "has_clinical_record", "pixel_text", "redacted_regions", "batch",
)


def manifest(policy) -> Table:
    """The de-identified manifest: file facts, pseudonymous ids and the policy's clinical fields."""
    extra = pa.schema([pa.field(c, CLINICAL_TYPES[t]) for c, t in policy.output_types.items()])
    return Table(
        DEIDENTIFIED, "anonymized_images/manifest", PublishedImage, ("batch",), ("output_path",),
        "one row per de-identified file: pseudonymous ids, de-identified header facts, released clinical fields",
        renamed={"sha256": "output_sha256", "size_bytes": "output_size_bytes"}, keep=_MANIFEST_FIELDS,
        extra=extra)


# Every table whose shape does not depend on configuration, in data-flow order.
TABLES = (RAW_IMAGE_INDEX, INDEX_QUARANTINE, CLINICAL_QUARANTINE, LINKED, LINK_QUARANTINE, LEDGER,
          ANONYMIZE_QUARANTINE, WITHDRAWN, OPTOUT_APPLIED, OPTOUT_QUARANTINE)


def partition_dir(table: Table, values) -> str:
    """The hive folder of one partition, e.g. `date=2024-03-01/site=north`.

    `values` is a record with the partition fields (a `SiteDay`), a mapping or a tuple in order.
    """
    if dataclasses.is_dataclass(values):
        values = dataclasses.asdict(values)
    elif not isinstance(values, Mapping):
        values = dict(zip(table.partition_by, values))
    return "/".join(f"{c}={values[c]}" for c in table.partition_by)


# --- Columns: what each means, and which identify someone ------------------------------------------------

# Column tags (`privacy`): how a value relates to a person. Identifiers and quasi-identifiers are the clinical
# policy's (platform/clinical_policy.yaml, `identifiers:` and `quasi_identifiers:`); the hospital's own DICOM
# UIDs and record map are identifiers wherever they are kept as read (the identifiable zone).
IDENTIFIER, QUASI_IDENTIFIER, PSEUDONYM = "identifier", "quasi-identifier", "pseudonym"
_AS_READ = ("study_instance_uid", "series_instance_uid", "sop_instance_uid", "clinical")

COLUMN_DESCRIPTIONS = {
    "date": "the site-day's date (partition)",
    "site": "the site's key (partition)",
    "source_path": "the landed file, as the landing zone names it",
    "size_bytes": "the file's size in bytes",
    "sha256": "sha256 of the whole file",
    "reason": "why the input was held back: a fixed phrase, never a value from it",
    "sop_instance_uid": "DICOM SOPInstanceUID",
    "study_instance_uid": "DICOM StudyInstanceUID",
    "series_instance_uid": "DICOM SeriesInstanceUID",
    "sop_class_uid": "DICOM SOPClassUID (the kind of image)",
    "modality": "DICOM Modality (OPT, OP, ...)",
    "laterality": "DICOM ImageLaterality or Laterality (R, L)",
    "patient_id": "DICOM PatientID as the site assigned it",
    "issuer_of_patient_id": "DICOM IssuerOfPatientID as the file says (the site's configured namespace is used)",
    "study_date": "DICOM StudyDate",
    "study_time": "DICOM StudyTime",
    "manufacturer": "DICOM Manufacturer",
    "model": "DICOM ManufacturerModelName",
    "rows": "DICOM Rows (pixels)",
    "columns": "DICOM Columns (pixels)",
    "number_of_frames": "DICOM NumberOfFrames",
    "transfer_syntax_uid": "DICOM TransferSyntaxUID of the file",
    "has_clinical_record": "whether a clinical record dated on or before the image was found",
    "pixel_text": "what the burned-in text check did to the pixels: not read, clean (read, no text) or redacted",
    "redacted_regions": "the boxes a redaction covered (JSON: 1-based frame ranges, [top, left, height, width] "
                        "in pixels); empty unless redacted",
    "clinical_extract_date": "the date of the extract the record came from (empty for a clinical source's patient)",
    "clinical": "the patient's as-of clinical record, columns as the site names them",
    # Eye-level linkage (assets/linkage.py eye_as_of): the eye the image shows, and that eye's clinical fields.
    "eye": "the eye the image shows, R or L (ImageLaterality, else Laterality); empty for both eyes or none, and then "
           "every eye-level field is empty",
    "eye_reason": "why the image has no eye-level fields: no laterality, both eyes, or no observation of that eye on "
                  "or before its day (counted per site-day)",
    "eye_clinical": "each eye field's latest value for the imaged eye observed on or before the image's day "
                    "(observations of both eyes count), names as the source gives them",
    "eye_days_before": "for each eye field, whole days between that observation's day and the image's",
    "eye_diagnoses": "diagnosis codes in force for the imaged eye (or both eyes) on the image's day",
    "eye_diagnosis_codes": "the released diagnosis codes in force for the imaged eye (or both eyes) on the scan's "
                           "day, ';'-separated, each through the policy's diagnosis_code rule",
    "source_sha256": "sha256 of the landed file",
    "source_uid_hash": "keyed hash of the source SOP Instance UID (links a published file to its source)",
    "batch": "the opaque batch folder of the site-day (a keyed token, names no date or site)",
    "output_path": "the de-identified file, relative to the de-identified zone",
    "output_sha256": "sha256 of the de-identified file",
    "output_size_bytes": "size of the de-identified file in bytes",
    "patient_pseudonym": "keyed pseudonym of the patient, stable across sites and runs",
    "run_id": "the Dagster run that wrote the row",
    "run_started_at": "when that run started (UTC)",
    "code_version": "the asset's code version that wrote the row",
    "deid_profile": "the de-identification profile",
    "deid_options": "the de-identification options",
    "marker": "the PACS listing's change marker of the instance (a digest of its QIDO-RS attributes)",
    "file_name": "the landed file's name under pacs_landing/images/<site>/<date>/ (a digest of its UIDs)",
    "outcome": "fetched, unchanged (the last run's copy kept) or failed",
    "attempts": "requests the retrieval took (retries of transient errors included)",
    "list_site": "the site whose opt-out list this is (optouts/<site>/)",
    "list_version": "keyed digest of the opt-out list's patients (never the ids)",
    "list_received": "the date of the newest opt-out list file applied (the day it was received)",
    "list_patients": "patients on that opt-out list",
    "cohort": "the cohort definition's name",
    "content_key": "sha256 of what decides a released image's bytes: its source's sha256, its header values, the "
                   "header plan and the rewrite's code version",
    "object_sha256": "sha256 of the released image's bytes: its name in the release object store",
    "object_identity": "the object's identity when it was last hashed (device, inode, size, modification time; or "
                       "size and generation on an object store)",
}


def column_privacy(column: str, zone: str, identifiers, quasi_identifiers) -> str | None:
    """The `privacy` tag of `column` in a table of `zone`: IDENTIFIER, QUASI_IDENTIFIER, PSEUDONYM or None.

    `identifiers` and `quasi_identifiers` are the clinical policy's column names (a quasi-identifier under its
    own name and the name it is released as)."""
    if column == "patient_pseudonym":
        return PSEUDONYM
    if column in identifiers or (zone == IDENTIFIABLE and column in _AS_READ):
        return IDENTIFIER
    if column in quasi_identifiers:
        return QUASI_IDENTIFIER
    return None


def describe_column(column: str) -> str:
    """A column's description for the catalogue (a manifest's clinical column: the policy names it). The eye-level
    columns are named `eye_<field>` and `eye_<field>_days_before` (a policy column marked `eye: true`)."""
    if column in COLUMN_DESCRIPTIONS:
        return COLUMN_DESCRIPTIONS[column]
    if column.startswith("eye_") and column.endswith("_days_before"):
        return (f"whole days between the imaged eye's latest {column[4:-12]} observation (on or before the scan) and "
                f"the scan")
    if column.startswith("eye_"):
        return (f"the imaged eye's latest {column[4:]} observed on or before the scan (an observation of both eyes "
                f"counts), through the clinical policy's rule for {column[4:]}")
    return "a clinical field the clinical policy releases"


def markdown_safe(text: str) -> str:
    """`text` for a field the UI renders as Markdown: `<site>`-style placeholders escaped, so they are shown
    rather than swallowed as HTML tags."""
    return text.replace("<", "\\<").replace(">", "\\>")
