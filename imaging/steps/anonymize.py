"""Per-file de-identification on Spark executors: read, de-identify, write to staging, describe.

`AnonymizeJob` is everything a task needs (picklable; the key travels inside the task, never
into a log). Its set-up (pseudonymizer, profile) happens once per Spark partition; the OCR detector
for burned-in text, the slow part, once per Python worker. Patients are keyed on the namespace their
site's configuration names (`platform/issuers.yaml`), whatever the file's IssuerOfPatientID says. Output
names are the new SOP Instance UIDs, so a retried task rewrites the same files, never new ones.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from imaging import fs as fsx
from imaging.catalogue import ANONYMIZED_FILES
from imaging.deid import NotDeidentifiable, load_profile
from imaging.deid.engine import deidentify_image
from imaging.deid.part10 import TRUNCATED, SourceImage, read_whole  # noqa: F401 - TRUNCATED: its reason
from imaging.deid.writer import write
from imaging.deid.pixel_text import PixelTextDetector, PixelTextSettings, shared_detector
from imaging.issuers import IssuerPolicy
from imaging.provenance import source_uid_hash
from imaging.pseudonym import Pseudonymizer
from imaging.records import BatchStep, LinkedImage, PublishedImage, Quarantined, outcome_schema
from imaging.steps.clinical import ClinicalPolicy, EyeRecord
from imaging.header import PUBLISHED, column_value, dicom_date, keyword, read_columns


def batch_name(pseudonymizer: Pseudonymizer, date: str, site: str) -> str:
    """An opaque folder name for a site-day: real dates and sites never name de-identified files."""
    return pseudonymizer.token("batch", date, site)


UNREADABLE_PAST_HEADER = "file reads differently past its header"
CHANGED = "source file changed since it was indexed"


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
    batches: dict = field(default_factory=dict)  # (date, site) -> batch folder, made once per site-day

    def batch(self, image: LinkedImage) -> str:
        key = (image.date, image.site)
        if key not in self.batches:
            self.batches[key] = batch_name(self.pseudonymizer, image.date, image.site)
        return self.batches[key]

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
        """Top-down: the source opened (imaging.deid.part10: read once, hashed on the way, its pixel data
        located), the engine (imaging.deid.engine: checks, text check, the walk), then the writer
        (imaging.deid.writer: the new header, the source's pixel data copied past it in chunks, the output
        hashed as it is written). Files that cannot be streamed are read whole (size-capped)."""
        with SourceImage(image.source_path) as source:
            try:
                result, relative, written = self._deidentify(image, source)
            except NotDeidentifiable:
                # A changed file is reported as changed, whatever else the new bytes would have caused.
                if source.sha256() != image.sha256:
                    raise NotDeidentifiable(CHANGED) from None
                raise
        return self._described(image, result, relative, written)

    def _deidentify(self, image: LinkedImage, source: SourceImage):
        job, pseudonymizer = self.job, self.pseudonymizer
        if source.streamed:
            ds = None  # the engine reads the header's elements (imaging.deid.part10)
        else:
            data = source.read_all()
            if source.sha256() != image.sha256:
                raise NotDeidentifiable(CHANGED)
            ds = read_whole(data)
        clinical = image.clinical or {}
        if column_value(source.values if source.streamed else ds, "sop_instance_uid") != image.sop_instance_uid:
            raise NotDeidentifiable(UNREADABLE_PAST_HEADER)
        known = job.policy.identifying_values({**clinical, "patient_id": image.patient_id or ""})
        # The patient's namespace comes from the site, never from the file's IssuerOfPatientID.
        namespace = job.issuers.resolve(image.site, image.issuer_of_patient_id).namespace
        result = deidentify_image(ds, pseudonymizer=pseudonymizer, namespace=namespace, profile=self.profile,
                                  extra_identifiers=known, pixel_text=self.detector,
                                  streamed=source if source.streamed else None)
        out = result.values  # the published values, as imaging.header reads them
        try:
            relative = f"{ANONYMIZED_FILES.name}/{self.batch(image)}/{output_name(out)}"
            url = fsx.under(job.staging, relative)  # checked once: the name is derived, never a value from the file
            try:
                with fsx.open_write(url) as handle:
                    target = fsx.HashingWriter(handle)
                    write(target, result.published)
                if source.sha256() != image.sha256:
                    raise NotDeidentifiable(CHANGED)
            except BaseException:
                fsx.remove(url)  # nothing half-written, nothing from a changed source, stays in staging
                raise
        finally:
            result.close()  # a redaction's spool
        return result, relative, target

    def _described(self, image: LinkedImage, result, relative: str, written) -> PublishedImage:
        job, pseudonymizer = self.job, self.pseudonymizer
        out = result.values
        clinical = image.clinical or {}
        namespace = job.issuers.resolve(image.site, image.issuer_of_patient_id).namespace
        batch = self.batch(image)
        shift = pseudonymizer.date_shift_days(namespace, image.patient_id or "")
        scan = dicom_date(image.study_date, lenient=True) or dt.date.fromisoformat(image.date)
        fields = job.policy.apply(clinical, scan_date=scan, shift_days=shift,
                                  token=lambda column, value: pseudonymizer.token("clinical", column, value),
                                  eye=EyeRecord.of(image))
        return PublishedImage(
            date=image.date, site=image.site, source_path=image.source_path, source_sha256=image.sha256,
            source_uid_hash=source_uid_hash(pseudonymizer, image.sop_instance_uid or ""), batch=batch,
            output_path=relative, output_sha256=written.hexdigest(), output_size_bytes=written.size,
            patient_pseudonym=column_value(out, "patient_id"),  # the pseudonym is the de-identified PatientID
            **{**read_columns(out, PUBLISHED), "study_date": _iso(column_value(out, "study_date"))},
            has_clinical_record=bool(image.has_clinical_record),
            pixel_text=result.pixel_text,
            redacted_regions=result.redaction.regions() if result.redaction is not None else None,
            clinical={c: fields[c] for c in job.policy.output_columns},
        )
