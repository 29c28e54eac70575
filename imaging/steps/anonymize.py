"""Per-file de-identification on Spark executors: read, de-identify, write to staging, describe.

`AnonymizeJob` is everything a task needs (picklable; the key travels inside the task, never
into a log). Its set-up (pseudonymizer, profile) happens once per Spark partition; the OCR detector
for burned-in text, the slow part, once per Python worker. Patients are keyed on the namespace their
site's configuration names (`platform/issuers.yaml`), whatever the file's IssuerOfPatientID says. Output
names are the new SOP Instance UIDs, so a retried task rewrites the same files, never new ones.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import re
import warnings
from dataclasses import dataclass

import pydicom

from imaging import fs as fsx
from imaging.catalogue import ANONYMIZED_FILES
from imaging.deid import NotDeidentifiable, deidentify, load_profile, to_bytes
from imaging.deid.pixel_text import PixelTextDetector, PixelTextSettings, shared_detector
from imaging.issuers import IssuerPolicy
from imaging.provenance import source_uid_hash
from imaging.pseudonym import Pseudonymizer
from imaging.records import BatchStep, LinkedImage, PublishedImage, Quarantined, outcome_schema
from imaging.steps.clinical import ClinicalPolicy
from imaging.header import PUBLISHED, column_value, dicom_date, keyword, read_columns


def batch_name(pseudonymizer: Pseudonymizer, date: str, site: str) -> str:
    """An opaque folder name for a site-day: real dates and sites never name de-identified files."""
    return pseudonymizer.token("batch", date, site)


TRUNCATED = "file ends inside an element (truncated)"
UNREADABLE_PAST_HEADER = "file reads differently past its header"
_EOF_WARNING = " in file <no filename>"  # how pydicom warns that an undefined length ran off the end


class _Reads(io.BytesIO):
    """A file in memory that notes every read returning fewer bytes than asked for. pydicom reads a
    value cut by the end of the file without a word (a defined length it cannot fill), and warns,
    without raising, when an undefined length runs off the end; a complete file has exactly one short
    read: the empty one after its last element."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.short, self.partial = 0, False

    def read(self, size: int | None = -1) -> bytes:
        out = super().read(size)
        if size is not None and size > 0 and len(out) < size:
            self.short += 1
            self.partial |= bool(out)
        return out


def read_whole(data: bytes) -> pydicom.Dataset:
    """The whole dataset of a Part 10 file in memory, or NotDeidentifiable when the file ends inside an
    element: a cut file must not be published as if it were complete. (A file cut exactly between two
    elements reads as a shorter complete file: nothing can tell it apart.)"""
    source = _Reads(data)
    with warnings.catch_warnings(record=True) as caught:  # inside quiet(): recorded, never shown
        warnings.simplefilter("always")
        ds = pydicom.dcmread(source)
    ran_off = any(str(w.message).endswith(_EOF_WARNING) for w in caught)
    if ran_off or source.partial or source.short > 1:
        raise NotDeidentifiable(TRUNCATED)
    return ds


# The name of every de-identified file: its new SOP Instance UID, a `2.25.` UID (a 128-bit integer).
OUTPUT_NAME = re.compile(r"2\.25\.[0-9]{1,39}")


def output_name(out) -> str:
    """The file name of a de-identified dataset, derived (never a raw value) and checked for its shape."""
    uid = str(out.get(keyword("sop_instance_uid"), "") or "")
    if not OUTPUT_NAME.fullmatch(uid):
        raise NotDeidentifiable("de-identified SOP Instance UID is not a 2.25 UID")
    return f"{uid}.dcm"


def _iso(text):
    """A DICOM date (already shifted) as ISO 8601, the form researchers' tools read."""
    day = dicom_date(text, lenient=True)
    return day.isoformat() if day else None


@dataclass(frozen=True)
class AnonymizeJob:
    """The de-identification of one run; `setup` for a `BatchStep` (called once per partition)."""

    key: str
    options: tuple[str, ...]
    policy: ClinicalPolicy
    issuers: IssuerPolicy
    pixel_text: PixelTextSettings
    staging: str  # the de-identified zone's staging folder: files are committed from there

    def __repr__(self) -> str:  # never show the key
        return f"AnonymizeJob(options={self.options!r})"

    def __call__(self) -> "_Anonymizer":
        # Once per partition: the pseudonymizer and the profile; Tesseract's model (the slow part) once per
        # Python worker, which runs task after task.
        return _Anonymizer(self, Pseudonymizer(self.key), load_profile(self.options), shared_detector(self.pixel_text))

    def step(self) -> BatchStep:
        extra = outcome_extra(self.policy)
        return BatchStep(self, LinkedImage, outcome_schema(PublishedImage, extra))


def outcome_extra(policy: ClinicalPolicy):
    """The released clinical fields as extra columns (their types from the catalogue's manifest)."""
    from imaging.catalogue import manifest

    return manifest(policy).extra


@dataclass(frozen=True)
class _Anonymizer:
    job: AnonymizeJob
    pseudonymizer: Pseudonymizer
    profile: object
    detector: PixelTextDetector

    def __call__(self, image: LinkedImage) -> PublishedImage | Quarantined:
        return self.publish(image)

    def publish(self, image: LinkedImage) -> PublishedImage | Quarantined:
        """One linked image -> its published description, or a quarantine record with the reason."""
        try:
            return self._publish(image)
        except NotDeidentifiable as reason:
            return self._held(image, str(reason))
        except Exception as error:  # noqa: BLE001 - one bad file never stops the partition
            return self._held(image, f"de-identification failed ({type(error).__name__})")

    def _held(self, image: LinkedImage, reason: str) -> Quarantined:
        return Quarantined(date=image.date, site=image.site, source_path=image.source_path, size_bytes=None,
                           sha256=image.sha256, reason=reason)

    def _publish(self, image: LinkedImage) -> PublishedImage:
        job, pseudonymizer = self.job, self.pseudonymizer
        data = fsx.read_bytes(image.source_path)
        if hashlib.sha256(data).hexdigest() != image.sha256:
            raise NotDeidentifiable("source file changed since it was indexed")
        clinical = image.clinical or {}
        ds = read_whole(data)
        if column_value(ds, "sop_instance_uid") != image.sop_instance_uid:
            raise NotDeidentifiable(UNREADABLE_PAST_HEADER)
        known = job.policy.identifying_values({**clinical, "patient_id": image.patient_id or ""})
        # The patient's namespace comes from the site, never from the file's IssuerOfPatientID.
        namespace = job.issuers.resolve(image.site, image.issuer_of_patient_id).namespace
        out = deidentify(ds, pseudonymizer=pseudonymizer, namespace=namespace, profile=self.profile,
                         extra_identifiers=known, pixel_text=self.detector)
        payload = to_bytes(out)
        batch = batch_name(pseudonymizer, image.date, image.site)
        relative = f"{ANONYMIZED_FILES.name}/{batch}/{output_name(out)}"
        fsx.write_under(job.staging, relative, payload)

        shift = pseudonymizer.date_shift_days(namespace, image.patient_id or "")
        scan = dicom_date(image.study_date, lenient=True) or dt.date.fromisoformat(image.date)
        fields = job.policy.apply(clinical, scan_date=scan, shift_days=shift,
                                  token=lambda column, value: pseudonymizer.token("clinical", column, value))
        return PublishedImage(
            date=image.date, site=image.site, source_path=image.source_path, source_sha256=image.sha256,
            source_uid_hash=source_uid_hash(pseudonymizer, image.sop_instance_uid or ""), batch=batch,
            output_path=relative, output_sha256=hashlib.sha256(payload).hexdigest(), output_size_bytes=len(payload),
            patient_pseudonym=column_value(out, "patient_id"),  # the pseudonym is the de-identified PatientID
            **{**read_columns(out, PUBLISHED), "study_date": _iso(column_value(out, "study_date"))},
            has_clinical_record=bool(image.has_clinical_record),
            clinical={c: fields[c] for c in job.policy.output_columns},
        )
