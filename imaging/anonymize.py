"""Per-file de-identification on Spark executors: read, de-identify, write, describe.

Set-up (pseudonymizer, profile, clinical policy) happens once per partition. Output names are
the new SOP Instance UIDs, so a retried task rewrites the same files, never new ones.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
from dataclasses import dataclass

import pydicom

from imaging import fs as fsx
from imaging.clinical import ClinicalPolicy, parse_date
from imaging.deid import Quarantined, deidentify, load_profile, quiet, to_bytes
from imaging.index import header_int, header_text, laterality
from imaging.pseudonym import Pseudonymizer

# Manifest columns before the clinical ones; all published values are de-identified.
MANIFEST_FIELDS = (
    "output_path", "sha256", "size_bytes", "patient_pseudonym", "study_instance_uid", "series_instance_uid",
    "sop_instance_uid", "sop_class_uid", "modality", "laterality", "study_date", "manufacturer", "model",
    "rows", "columns", "number_of_frames", "has_clinical_record",
)
FILES = "anonymized_images/files"


@dataclass(frozen=True)
class AnonymizeJob:
    """Everything a task needs; picklable. The key travels inside the task, never into a log."""

    key: str
    default_issuer: str
    options: tuple[str, ...]
    policy: ClinicalPolicy
    staging: str  # where output files are written before the driver swaps them into place

    def batch(self, pseudonymizer: Pseudonymizer, date: str, site: str) -> str:
        """An opaque folder name for a site-day: real dates and sites never name de-identified files."""
        return pseudonymizer.token("batch", date, site)


def _iso(dicom_date):
    """A DICOM date (already shifted) as ISO 8601, the form researchers' tools read."""
    day = parse_date(dicom_date, ("%Y%m%d",))
    return day.isoformat() if day else None


def anonymize_partition(job: AnonymizeJob, rows):
    """Linked rows -> ('published', ...) or ('quarantined', ...) tuples (see assets/anonymized_images)."""
    pseudonymizer = Pseudonymizer(job.key)
    profile = load_profile(job.options)
    with quiet():  # pydicom's warnings quote header values: keep them out of executor logs
        for row in rows:
            base = (row["date"], row["site"], row["source_path"], row["sha256"])
            try:
                yield ("published", *base, *_publish(job, pseudonymizer, profile, row))
            except Quarantined as reason:
                yield ("quarantined", *base, str(reason))
            except Exception as error:  # noqa: BLE001 - one bad file never stops the partition
                yield ("quarantined", *base, f"de-identification failed ({type(error).__name__})")


def _publish(job, pseudonymizer, profile, row):
    fs, path = fsx.filesystem(row["source_path"])
    with fs.open(path, "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != row["sha256"]:
        raise Quarantined("source file changed since it was indexed")
    clinical = row["clinical"] or {}
    ds = pydicom.dcmread(io.BytesIO(data))
    known = job.policy.identifying_values({**clinical, "patient_id": row["patient_id"] or ""})
    out = deidentify(ds, pseudonymizer=pseudonymizer, profile=profile, issuer_default=job.default_issuer,
                     extra_identifiers=known)
    payload = to_bytes(out)
    batch = job.batch(pseudonymizer, row["date"], row["site"])
    relative = f"{FILES}/{batch}/{out.SOPInstanceUID}.dcm"
    fsx.write_bytes(f"{job.staging}/{relative}", payload)

    issuer = row["issuer_of_patient_id"] or job.default_issuer
    shift = pseudonymizer.date_shift_days(issuer, row["patient_id"] or "")
    scan = parse_date(row["study_date"], ("%Y%m%d",)) or dt.date.fromisoformat(row["date"])
    text = lambda keyword: header_text(out, keyword)  # noqa: E731
    described = (
        relative, hashlib.sha256(payload).hexdigest(), len(payload), text("PatientID"), text("StudyInstanceUID"),
        text("SeriesInstanceUID"), text("SOPInstanceUID"), text("SOPClassUID"), text("Modality"), laterality(out),
        _iso(text("StudyDate")), text("Manufacturer"), text("ManufacturerModelName"), header_int(out, "Rows"),
        header_int(out, "Columns"), header_int(out, "NumberOfFrames") or 1, bool(row["has_clinical_record"]),
    )
    fields = job.policy.apply(clinical, scan_date=scan, shift_days=shift,
                              token=lambda column, value: pseudonymizer.token("clinical", column, value))
    return (batch, *described, *(fields[c] for c in job.policy.output_columns))
