"""Ground truth of a synthetic eye hospital: who was imaged, what was written, what is identifying.

`synth.generate_hospital` fills a `HospitalSummary`; tests and benchmarks read it
to check a pipeline's output against what the landing zone really holds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass
class PatientTruth:
    patient_id: str  # 10-digit NHS-number-like (999 test range, valid mod-11 check digit)
    issuer: str
    family_name: str
    given_name: str
    birth_date: str  # ISO YYYY-MM-DD
    sex: str  # "F" / "M"
    address: str  # house and street, e.g. "12 Larkspur Lane"
    town: str
    postcode: str
    sites: list[str] = field(default_factory=list)  # every site that holds this person
    imaged_sites: list[str] = field(default_factory=list)
    hospital_numbers: dict[str, str] = field(default_factory=dict)  # site -> local MRN

    @property
    def dicom_name(self) -> str:
        return f"{self.family_name.upper()}^{self.given_name.upper()}"

    @property
    def full_name(self) -> str:
        return f"{self.given_name} {self.family_name}"


@dataclass(frozen=True)
class InstanceTruth:
    rel_path: str  # relative to the landing root
    date: str  # ISO partition date
    site: str
    patient_id: str
    modality: str  # "OPT" / "OP"
    laterality: str  # "R" / "L"
    sop_class_uid: str
    sop_instance_uid: str
    study_uid: str
    series_uid: str
    referenced_sop_instance_uid: str | None  # the baseline (same modality/eye, earlier date)
    frames: int


@dataclass(frozen=True)
class EyeObservationTruth:
    """What one extract row says of one eye (R, L or B: both): its values (names as written, without a per-eye
    suffix), or one diagnosis code (`{"diagnosis_code": code}`, in `HospitalSummary.eye_diagnoses`)."""

    site: str
    date: str
    patient_id: str
    eye: str
    values: dict


@dataclass(frozen=True)
class EyeTruth:
    """What the link step should find for the eye an image shows: each field's latest value on or before the
    image's day and how many days before, and the diagnosis codes in force (that eye's or both eyes')."""

    values: dict
    days_before: dict
    diagnoses: tuple


@dataclass
class HospitalSummary:
    landing: str
    seed: int
    sites: list[str]
    dates: list[str]
    dicom_files: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (date, site)
    broken_files: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    broken_kinds: dict[str, str] = field(default_factory=dict)  # rel path -> notes|empty|truncated|garbage
    patients: list[PatientTruth] = field(default_factory=list)
    instances: list[InstanceTruth] = field(default_factory=list)
    clinical_rows: dict[tuple[str, str], int] = field(default_factory=dict)
    clinical_records: dict[tuple[str, str], list[dict[str, str]]] = field(default_factory=dict)
    clinical_columns: dict[str, list[str]] = field(default_factory=dict)  # site -> header
    patient_columns: dict[str, list[str]] = field(default_factory=dict)  # site -> the header's patient (not eye) columns
    eye_observations: list[EyeObservationTruth] = field(default_factory=list)
    eye_diagnoses: list[EyeObservationTruth] = field(default_factory=list)
    opted_out: list[str] = field(default_factory=list)  # patient ids on the generated opt-out list, if any
    _identifiers: set[str] = field(default_factory=set, repr=False)

    def identifying_strings(self) -> list[str]:
        """Every identifying string actually written (patient names in each spelling used,
        ids, NHS numbers, MRNs, addresses, postcodes, birth dates in each format used,
        staff, institutions, stations, serials, accession/study/request ids, source UIDs).
        Names appear in upper and mixed case: compare case-insensitively."""
        return sorted(self._identifiers)

    def expected_clinical_date(self, date: str, site: str, patient_id: str) -> str | None:
        """Date of the extract the as-of rule picks: the latest of that site's extracts dated
        on or before `date` that holds the patient."""
        for day in sorted((d for d in self.dates if d <= date), reverse=True):
            if any(r["patient_id"] == patient_id for r in self.clinical_records.get((day, site), [])):
                return day
        return None

    def expected_clinical(self, date: str, site: str, patient_id: str) -> dict[str, str] | None:
        """The as-of clinical row for an image, or None: the patient's own columns of its latest row in the latest
        extract holding it (a row per eye repeats them), as written to the CSV."""
        day = self.expected_clinical_date(date, site, patient_id)
        if day is None:
            return None
        row = [r for r in self.clinical_records[(day, site)] if r["patient_id"] == patient_id][-1]
        return {k: v for k, v in row.items() if k in self.patient_columns[site]}

    def expected_eye(self, date: str, site: str, patient_id: str, eye: str) -> EyeTruth:
        """The eye-level fields of an image of `eye` (R or L) taken on `date`: from the site's extracts dated on or
        before it, observations of that eye or of both."""
        latest: dict[str, tuple[str, str]] = {}
        for o in self.eye_observations:
            if o.site == site and o.patient_id == patient_id and o.eye in (eye, "B") and o.date <= date:
                for name, value in o.values.items():
                    if name not in latest or latest[name][0] <= o.date:
                        latest[name] = (o.date, value)
        codes = {o.values["diagnosis_code"] for o in self.eye_diagnoses if o.site == site and
                 o.patient_id == patient_id and o.eye in (eye, "B") and o.date <= date}
        days = {name: (dt.date.fromisoformat(date) - dt.date.fromisoformat(day)).days
                for name, (day, _) in latest.items()}
        return EyeTruth({name: value for name, (_, value) in latest.items()}, days, tuple(sorted(codes)))

    @property
    def unmatched_images(self) -> list[InstanceTruth]:
        """Images with no clinical record on or before their date at their site."""
        return [i for i in self.instances if self.expected_clinical_date(i.date, i.site, i.patient_id) is None]

    @property
    def earlier_day_matches(self) -> list[InstanceTruth]:
        """Images whose as-of record comes from an earlier day's extract."""
        return [i for i in self.instances
                if (self.expected_clinical_date(i.date, i.site, i.patient_id) or i.date) < i.date]
