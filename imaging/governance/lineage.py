"""Column lineage as data: each output column's source columns and transform, derived, not written.

`column_lineage(policy, options, disclosure)` reads the clinical policy and the de-identification
profile (Table E.1-1 resolved for the options) and says, for every column of the de-identified
manifest (`anonymized_images`) and of a release (`published_cohort`), where it comes from and what
was done to it; source columns that reach no output are listed as dropped. The same records feed
Dagster's `dagster/column_lineage` (`dagster_column_deps`), the OpenLineage column-lineage facet
(`imaging.governance.lineage_events`) and the graph of the review report (`imaging.governance.review_html`), so the three
can never disagree. Change an option or a policy action and the lineage changes with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from pydicom.datadict import dictionary_VR, tag_for_keyword

from imaging.deid import load_profile
from imaging.governance.disclosure import DisclosurePolicy
from imaging.steps.clinical import DAYS_BEFORE, EYE_DIAGNOSES, EYE_PREFIX, IMAGED_EYE, ClinicalPolicy
from imaging.header import COLUMNS as HEADER, PUBLISHED

# Tables, named by the Dagster asset that writes them.
LINKED = "linked_patient_metadata"  # identifiable: the source header index joined to clinical records
MANIFEST = "anonymized_images"  # de-identified manifest
RELEASE = "published_cohort"  # a release's metadata.parquet / metadata.csv

KEPT, PSEUDONYMISED, SHIFTED, GENERALISED, CLEANED, DERIVED, DROPPED = (
    "kept", "pseudonymised", "shifted", "generalised", "cleaned", "derived", "dropped")
TRANSFORMS = (KEPT, PSEUDONYMISED, SHIFTED, GENERALISED, CLEANED, DERIVED, DROPPED)

# Manifest columns that describe the warehouse, not the research data: never in a release.
INTERNAL = ("batch", "output_path", "size_bytes")
# Value representations the allow-list scrubs of the patient's own terms (codes and UIDs pass unchanged).
_TEXT_VRS = frozenset({"LO", "LT", "SH", "ST", "UT", "UC", "PN"})


@dataclass(frozen=True)
class ColumnRef:
    table: str
    column: str


@dataclass(frozen=True)
class ColumnLineage:
    """One output column (or, with `column` None, source columns dropped on the way to `table`)."""

    table: str
    column: str | None
    sources: tuple[ColumnRef, ...]
    transform: str
    masked: bool  # no original value survives (a keyed hash, a shift, a band, nothing at all)
    description: str

    def __post_init__(self):
        if self.transform not in TRANSFORMS:
            raise ValueError(f"unknown transform {self.transform!r}")


def _dicom(profile, keyword: str, column: str, sources: tuple[ColumnRef, ...]) -> ColumnLineage:
    """Lineage of a manifest column read back from a de-identified header attribute."""
    tag = tag_for_keyword(keyword)
    action = profile.actions.get(tag)
    where = f"DICOM {keyword}"
    if action == "U":
        return ColumnLineage(MANIFEST, column, sources, PSEUDONYMISED, True,
                             f"{where}: keyed 2.25 UID, the same in every file and reference")
    if action == "K":
        return ColumnLineage(MANIFEST, column, sources, KEPT, False, f"{where}: kept (option retains it)")
    if action == "C" and dictionary_VR(tag) in ("DA", "DT", "TM") and profile.dates == "modified":
        return ColumnLineage(MANIFEST, column, sources, SHIFTED, True,
                             f"{where}: shifted by the patient's keyed, non-zero shift")
    if action == "C":
        return ColumnLineage(MANIFEST, column, sources, CLEANED, False, f"{where}: cleaned of identifying text")
    if action in ("X", "Z", "D"):
        return ColumnLineage(MANIFEST, column, sources, DROPPED, True,
                             f"{where}: removed or emptied by the basic profile (column empty)")
    if tag in profile.allowlist and dictionary_VR(tag) in _TEXT_VRS:
        return ColumnLineage(MANIFEST, column, sources, CLEANED, False,
                             f"{where}: reviewed allow-list, the patient's own terms scrubbed")
    return ColumnLineage(MANIFEST, column, sources, KEPT, False, f"{where}: technical attribute, kept")


def _linked(*columns: str) -> tuple[ColumnRef, ...]:
    return tuple(ColumnRef(LINKED, c) for c in columns)


def _clinical(aliases: Iterable[str]) -> tuple[ColumnRef, ...]:
    return tuple(ColumnRef(LINKED, f"clinical.{a}") for a in aliases)


def manifest_lineage(policy: ClinicalPolicy, options: Iterable[str] | None) -> list[ColumnLineage]:
    """Lineage of every manifest column from `linked_patient_metadata`, and what is dropped."""
    profile = load_profile(options)
    out = [
        ColumnLineage(MANIFEST, "batch", _linked("date", "site"), DERIVED, True,
                      "keyed token of the site-day: no real date or site names a de-identified folder"),
        ColumnLineage(MANIFEST, "output_path", _linked("date", "site", "sop_instance_uid"), DERIVED, True,
                      "files/<batch>/<new SOP Instance UID>.dcm"),
        ColumnLineage(MANIFEST, "sha256", _linked("source_path"), DERIVED, True,
                      "sha256 of the de-identified file written from the source file"),
        ColumnLineage(MANIFEST, "size_bytes", _linked("source_path"), DERIVED, True,
                      "size of the de-identified file"),
        ColumnLineage(MANIFEST, "patient_pseudonym", _linked("patient_id", "issuer_of_patient_id"), PSEUDONYMISED,
                      True, "keyed pseudonym of (issuer, patient id): one per patient across sites and dates"),
        *(_dicom(profile, HEADER[column][0], column, _linked(column)) for column in PUBLISHED),
        ColumnLineage(MANIFEST, "has_clinical_record", _linked("has_clinical_record"), KEPT, False,
                      "whether a clinical record dated on or before the scan was found"),
        ColumnLineage(MANIFEST, "pixel_text", _linked("source_path"), DERIVED, False,
                      "the burned-in text check's outcome on the pixels: not read, clean, or redacted"),
        ColumnLineage(MANIFEST, "redacted_regions", _linked("source_path"), DERIVED, False,
                      "the boxes covered where burned-in text was found (geometry only, JSON)"),
    ]
    for rule in policy.rules:
        sources = _clinical(rule.aliases)
        if rule.action == "keep":
            check = f"pattern {rule.pattern}" if rule.pattern else f"range {rule.number[0]:g} to {rule.number[1]:g}"
            out.append(ColumnLineage(MANIFEST, rule.name, sources, KEPT, False,
                                     f"clinical policy: kept when it matches {check}, else empty"))
        elif rule.action == "generalise":
            out.append(ColumnLineage(MANIFEST, rule.name, sources, GENERALISED, True,
                                     f"clinical policy: mapped to {len(set(rule.values.values()))} codes"))
        elif rule.action == "age_at_scan":
            out.append(ColumnLineage(MANIFEST, rule.name, sources + _linked("study_date"), DERIVED, True,
                                     f"clinical policy: whole years at the scan, {rule.top_code}+ as {rule.top_code}; "
                                     f"the birth date never leaves"))
        elif rule.action == "shift_date":
            out.append(ColumnLineage(MANIFEST, rule.name, sources, SHIFTED, True,
                                     "clinical policy: shifted by the patient's own shift"))
        elif rule.action == "pseudonymise":
            out.append(ColumnLineage(MANIFEST, rule.name, sources, PSEUDONYMISED, True,
                                     "clinical policy: keyed token, stable across sites and runs"))
        else:
            out.append(ColumnLineage(MANIFEST, None, sources, DROPPED, True,
                                     f"clinical policy: {rule.name} dropped on purpose"))
    out.extend(_eye_lineage(policy))
    named = {a for rule in policy.rules for a in rule.aliases}
    identifiers = [i for i in policy.identifiers if i not in named]
    if identifiers:
        out.append(ColumnLineage(MANIFEST, None, _clinical(identifiers), DROPPED, True,
                                 "the patient's identifiers: dropped, and scrubbed from DICOM free text"))
    out.append(ColumnLineage(MANIFEST, None,
                             _linked("source_path", "size_bytes", "sha256", "clinical_extract_date", "study_time",
                                     "transfer_syntax_uid", "date", "site"), DROPPED, True,
                             "landing facts (paths, real dates, sites, source checksums) stay in the identifiable "
                             "zone's provenance ledger"))
    out.append(ColumnLineage(MANIFEST, None, (ColumnRef(LINKED, "clinical.*"),), DROPPED, True,
                             "every clinical column the policy does not name"))
    return out


def _kept_when(rule) -> str:
    if rule.action == "generalise":
        return f"mapped to {len(set(rule.values.values()))} codes"
    check = f"pattern {rule.pattern}" if rule.pattern else f"range {rule.number[0]:g} to {rule.number[1]:g}"
    return f"kept when it matches {check}, else empty"


def _eye_lineage(policy: ClinicalPolicy) -> list[ColumnLineage]:
    """The eye-level columns (the policy's `eye: true` columns): for the eye each image shows, each field's latest
    value on or before the scan through the field's own rule, how many days before, the diagnoses in force."""
    if not policy.eye_columns:
        return []
    out = [ColumnLineage(MANIFEST, IMAGED_EYE, _linked("laterality"), DERIVED, False,
                         "the eye the image shows (ImageLaterality, else Laterality): R or L; empty for both eyes or "
                         "none, and then every eye_ column is empty")]
    for rule in policy.eye_rules:
        values = tuple(ColumnRef(LINKED, f"eye_clinical.{a}") for a in rule.aliases)
        days = tuple(ColumnRef(LINKED, f"eye_days_before.{a}") for a in rule.aliases)
        out.append(ColumnLineage(MANIFEST, EYE_PREFIX + rule.name, values,
                                 GENERALISED if rule.action == "generalise" else KEPT, rule.action == "generalise",
                                 f"clinical policy, for the imaged eye: its latest {rule.name} observed on or before "
                                 f"the scan (an observation of both eyes counts), {_kept_when(rule)}"))
        out.append(ColumnLineage(MANIFEST, EYE_PREFIX + rule.name + DAYS_BEFORE, days, DERIVED, False,
                                 f"whole days between that {rule.name} observation and the scan"))
    rule = policy.eye_diagnosis_rule
    if rule is not None:
        out.append(ColumnLineage(MANIFEST, EYE_DIAGNOSES, _linked("eye_diagnoses"), KEPT, False,
                                 f"clinical policy, for the imaged eye: the diagnosis codes in force on the scan's day "
                                 f"(that eye's or both eyes'), each {_kept_when(rule)}; ';'-separated"))
    out.append(ColumnLineage(MANIFEST, None, (ColumnRef(LINKED, "eye_clinical.*"), *_linked("eye_reason")), DROPPED,
                             True, "eye fields the policy does not name, and why an image has no eye fields"))
    return out


def release_lineage(manifest: list[ColumnLineage], disclosure: DisclosurePolicy) -> list[ColumnLineage]:
    """Lineage of a release's metadata columns from the manifest (the `file` column first)."""
    qis = disclosure.by_column()
    out = [ColumnLineage(RELEASE, "file", (ColumnRef(MANIFEST, "patient_pseudonym"),
                                           ColumnRef(MANIFEST, "study_instance_uid"),
                                           ColumnRef(MANIFEST, "sop_instance_uid")), DERIVED, False,
                         "images/<patient>/<study>/<instance>.dcm inside the release")]
    for entry in manifest:
        if entry.column is None or entry.column in INTERNAL:
            continue
        source = (ColumnRef(MANIFEST, entry.column),)
        qi = qis.get(entry.column)
        if qi is not None and qi.band_years is not None:
            out.append(ColumnLineage(RELEASE, qi.released_as, source, GENERALISED, True,
                                     f"quasi-identifier: {qi.band_years}-year bands, {qi.top_code}+ at the top"
                                     + (f"; DICOM {qi.header} removed from the released files" if qi.header else "")))
        elif entry.column == "sha256":
            out.append(ColumnLineage(RELEASE, "sha256", source, DERIVED, True,
                                     "sha256 of the released file (its quasi-identifier attributes generalised "
                                     "as the metadata is): the release's SHA256SUMS lists the same"))
        elif qi is not None and qi.header:
            out.append(ColumnLineage(RELEASE, entry.column, source, KEPT, False,
                                     f"as in the manifest; DICOM {qi.header} in the released files holds the same"))
        else:
            out.append(ColumnLineage(RELEASE, entry.column, source, KEPT, False, "as in the manifest"))
    out.append(ColumnLineage(RELEASE, None, tuple(ColumnRef(MANIFEST, c) for c in INTERNAL), DROPPED, False,
                             "warehouse bookkeeping, not research data"))
    return out


def column_lineage(policy: ClinicalPolicy, options: Iterable[str] | None,
                   disclosure: DisclosurePolicy) -> list[ColumnLineage]:
    """Both hops: linked_patient_metadata -> anonymized_images -> published_cohort."""
    manifest = manifest_lineage(policy, options)
    return manifest + release_lineage(manifest, disclosure)


@dataclass(frozen=True)
class ReleaseColumn:
    """One column of a release's metadata: its name and the Spark SQL that computes it from the manifest."""

    name: str
    sql: str


def release_columns(lineage: list[ColumnLineage], disclosure: DisclosurePolicy) -> list[ReleaseColumn]:
    """The release's metadata columns in order, as SQL over manifest columns (the asset selects these)."""
    qis = {q.released_as: q for q in disclosure.quasi_identifiers}
    columns = []
    for entry in lineage:
        if entry.table != RELEASE or entry.column is None:
            continue
        if entry.column == "file":
            sql = ("concat_ws('/', 'images', patient_pseudonym, study_instance_uid, "
                   "concat(sop_instance_uid, '.dcm'))")
        elif entry.column in qis:
            sql = qis[entry.column].release_sql()
        else:
            sql = f"`{entry.column}`"
        columns.append(ReleaseColumn(entry.column, f"{sql} AS `{entry.column}`"))
    return columns


def release_row(row: Mapping, lineage: list[ColumnLineage], disclosure: DisclosurePolicy) -> dict:
    """The release row of one manifest row, in Python (the same as `release_columns`, for small inputs)."""
    qis = {q.released_as: q for q in disclosure.quasi_identifiers}
    out = {}
    for entry in lineage:
        if entry.table != RELEASE or entry.column is None:
            continue
        if entry.column == "file":
            out["file"] = f"images/{row['patient_pseudonym']}/{row['study_instance_uid']}/{row['sop_instance_uid']}.dcm"
        elif entry.column in qis:
            out[entry.column] = qis[entry.column].release_value(row.get(qis[entry.column].column))
        else:
            out[entry.column] = row.get(entry.column)
    return out


def dagster_column_deps(lineage: Iterable[ColumnLineage], table: str) -> dict[str, list[tuple[str, str]]]:
    """{output column: [(upstream asset key, column)]} for `dagster/column_lineage` of one asset.

    Dagster's `TableColumnLineage(deps_by_column={c: [TableColumnDep(AssetKey(a), col) ...]})` is
    built from this by the asset layer (the core imports no Dagster).
    """
    return {e.column: [(s.table, s.column) for s in e.sources]
            for e in lineage if e.table == table and e.column is not None}


def release_column_types(policy: ClinicalPolicy, options: Iterable[str] | None,
                         disclosure: DisclosurePolicy) -> dict[str, str]:
    """Each column of a release's metadata and its type as pyarrow names it (a banded quasi-identifier is a
    string): what a cohort may stamp into its images (imaging/steps/stamp.py)."""
    from imaging.catalogue import manifest

    types = {f.name: str(f.type) for f in manifest(policy).schema}
    banded = {q.released_as for q in disclosure.quasi_identifiers if q.band_years is not None}
    out = {}
    for entry in column_lineage(policy, options, disclosure):
        if entry.table == RELEASE and entry.column:
            out[entry.column] = "string" if entry.column in banded or entry.column == "file" else \
                types.get(entry.column, "string")
    return out


def stamp_problems(stamp: Iterable[str], types: Mapping[str, str], disclosure: DisclosurePolicy) -> list[str]:
    """Why a cohort's `stamp:` list cannot be written (empty when it can): a column the release does not hold,
    a quasi-identifier's source where the release holds it generalised (finer than the quasi-identifiers
    allow), a column with no VR."""
    from imaging.steps.stamp import VRS, UNSTAMPABLE

    coarser = {q.column: q.released_as for q in disclosure.quasi_identifiers if q.released_as != q.column}
    problems = []
    for column in stamp:
        if column in coarser:
            problems.append(f"{column!r} is released only as {coarser[column]!r} (a quasi-identifier): a stamp "
                            f"cannot be finer than the quasi-identifiers allow; stamp {coarser[column]!r}")
        elif column in UNSTAMPABLE or column not in types:
            problems.append(f"{column!r} is not a column of the release's metadata that can be stamped (columns: "
                            f"{', '.join(c for c in types if c not in UNSTAMPABLE)})")
        elif types[column] not in VRS:
            problems.append(f"{column!r} has type {types[column]}, which has no DICOM VR here")
    return problems
