"""The image side of a synthetic landing zone: studies, DICOM files in varied layouts, junk.

`ImageWriter` turns each planned visit into `ImageSpec`s, writes the Part 10 files under
`images/<site>/<date>/` and records every instance and identifying string in the summary.
"""

from __future__ import annotations

from pathlib import Path

from synth.dicom import SOP_CLASS, build_dataset, encode_part10
from synth.junk import garbage_bytes, notes_bytes, truncated_bytes
from synth.spec import ImageSpec, PatientHeader, StudyHeader, derive_int, derive_uid, site_profile
from synth.truth import HospitalSummary, InstanceTruth


def _image_path(style: int, study_no: int, series_no: int, n: int, modality: str, eye: str) -> str:
    """Varied export layouts: DICOMDIR-like nesting, per-study folders, or flat files."""
    if style == 0:
        return f"DICOM/ST{study_no:06d}/SE{series_no:06d}/IM{n:06d}"
    if style == 1:
        return f"export_{study_no:03d}/{modality.lower()}/scan_{n}.dcm"
    return f"{modality}_{eye}_{n:04d}.dcm"


class ImageWriter:
    """Writes the image side of one landing tree, filling the summary as it goes."""

    def __init__(self, root: Path, seed: int, summary: HospitalSummary, oct_shape, fundus_shape):
        self.root, self.seed, self.summary = root, seed, summary
        self.shapes = {"OPT": tuple(oct_shape), "OP": tuple(fundus_shape)}
        self.baselines: dict[tuple, str] = {}  # (site, patient, modality, eye) -> SOP UID
        self.first_file: dict[tuple[str, str], bytes] = {}  # partition -> a real file's bytes
        self.studies: dict[tuple[str, str], int] = {}  # partition -> studies written
        self.files: dict[tuple[str, str], int] = {}  # partition -> images written

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def visit(self, rng, site, si, site_hdr, day, person, plan) -> None:
        """One study: an OPT volume and/or an OP photo for each planned eye."""
        key = (day, site)
        study_no = self.studies[key] = self.studies.get(key, 0) + 1
        code, hh, mm = site_profile(si)[1], 8 + rng.randrange(9), rng.randrange(60)
        study = StudyHeader(
            derive_uid(self.seed, "study", site, day, person.patient_id), day.replace("-", ""),
            f"{hh:02d}{mm:02d}00", f"{code}{day[2:4]}{rng.randrange(10**6):06d}", f"ST{rng.randrange(10**6):06d}",
            f"Retina clinic {person.dicom_name}" if study_no % 2 else "Retina clinic imaging",
            f"RP{rng.randrange(10**7):07d}", f"SPS{rng.randrange(10**7):07d}")
        patient = PatientHeader(person.dicom_name, person.patient_id, person.issuer,
                                person.birth_date.replace("-", ""), person.sex,
                                f"{person.address}, {person.town}, {person.postcode}",
                                person.hospital_numbers[site], code)
        self.summary._identifiers |= {
            study.uid, study.accession, study.study_id, study.requested_procedure_id, study.scheduled_step_id,
            patient.name, patient.patient_id, patient.birth_date, patient.address, patient.other_id,
            person.family_name, person.family_name.upper(), person.given_name, person.address, person.postcode}
        series_no = 0
        for modality in plan["modalities"]:
            for eye in plan["eyes"]:
                series_no += 1
                self.files[key] = self.files.get(key, 0) + 1
                name = _image_path((study_no + si) % 3, study_no, series_no, self.files[key], modality, eye)
                self._image(rng, f"images/{site}/{day}/{name}", site, day, person, patient, site_hdr,
                            study, modality, eye, series_no)

    def _image(self, rng, rel, site, day, person, patient, site_hdr, study, modality, eye, series_no):
        """One series of one file; a repeat of (patient, modality, eye) references the first."""
        uid = lambda kind: derive_uid(self.seed, kind, study.uid, modality, eye)  # noqa: E731
        sop, series, frame_ref, dim = uid("sop"), uid("series"), uid("for"), uid("dim")
        baseline = self.baselines.setdefault((site, person.patient_id, modality, eye), sop)
        reference = (SOP_CLASS[modality], baseline) if baseline != sop else None
        label = "OCT macular cube 6x6" if modality == "OPT" else "Colour fundus 45"
        described = f"{label} {eye} {person.full_name}" if series_no == 2 else f"{label} {eye}"
        minutes = int(study.time[2:4]) + 2 * series_no
        acquired = f"{int(study.time[:2]) + minutes // 60:02d}{minutes % 60:02d}{rng.randrange(60):02d}"
        spec = ImageSpec(modality, eye, patient, site_hdr, study, series, series_no, described, sop,
                         frame_ref, dim, acquired, self.shapes[modality],
                         derive_int(self.seed, "pixels", sop), round(rng.uniform(40, 99), 1), reference)
        data = encode_part10(build_dataset(spec))
        self.write(rel, data)
        self.first_file.setdefault((day, site), data)
        self.summary._identifiers |= {sop, series, frame_ref} | ({dim} if modality == "OPT" else set())
        if person.full_name in described:
            self.summary._identifiers.add(person.full_name)
        self.summary.dicom_files.setdefault((day, site), []).append(rel)
        self.summary.instances.append(InstanceTruth(
            rel, day, site, person.patient_id, modality, eye, SOP_CLASS[modality], sop, study.uid, series,
            reference[1] if reference else None, self.shapes[modality][0] if modality == "OPT" else 1))

    def junk(self, day: str, site: str) -> None:
        """notes.txt, an empty file, DICM-prefixed garbage and a truncated real file."""
        base, key = f"images/{site}/{day}", (day, site)
        files = {f"{base}/notes.txt": ("notes", notes_bytes(f"{site} {day}")),
                 f"{base}/IM000000": ("empty", b""),
                 f"{base}/DICOM/ST999999/SE000001/IM000001":
                     ("garbage", garbage_bytes(derive_int(self.seed, "junk", site, day)))}
        if key in self.first_file:  # only partitions with images have something to truncate
            files[f"{base}/export_partial/scan_0.dcm"] = ("truncated", truncated_bytes(self.first_file[key]))
        for rel, (kind, data) in files.items():
            self.write(rel, data)
            self.summary.broken_files.setdefault(key, []).append(rel)
            self.summary.broken_kinds[rel] = kind
