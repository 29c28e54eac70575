"""What one synthetic image is made of: seeded ids, site profiles and the header records.

`synth.images` fills an `ImageSpec` per planned image; `synth.dicom`
turns it into a dataset. Everything derives from the seed: no clock, no uuid4.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def derive_uid(seed: int, *parts: object) -> str:
    """A `2.25.` UID derived from the seed and a label, so reruns reproduce every UID."""
    text = "\x1f".join(["synth", str(seed), *map(str, parts)])
    return "2.25." + str(int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big"))


def derive_int(seed: int, *parts: object) -> int:
    """A 64-bit integer derived like `derive_uid`, for seeding per-image pixel noise."""
    text = "\x1f".join(["synth-int", str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


# Sites by index: (institution, org code, town, postcode area, street address).
SITE_PROFILES = [("Synthtown Eye Hospital", "SEH", "Synthtown", "ST", "1 Lantern Row"),
                 ("Northbridge Ophthalmic Centre", "NOC", "Northbridge", "NB", "22 Weir Street"),
                 ("Easthaven Eye Clinic", "EEC", "Easthaven", "EH", "5 Quayside"),
                 ("Westmoor Retina Unit", "WRU", "Westmoor", "WM", "90 Fell Road")]
STAFF = ["Featherby^Oswin^^Dr", "Kingsmill^Edmund", "Pilbeam^Tamsin", "Ravensworth^Clemency^^Dr",
         "Abernethy^Lucius", "Gosforth^Petronella", "Mortlake^Ignatius^^Dr", "Tregarthen^Saffron",
         "Wolstenholme^Bede"]


def site_profile(index: int) -> tuple[str, str, str, str, str]:
    """Site `index`'s profile; sites past the list get a generated one."""
    if index < len(SITE_PROFILES):
        return SITE_PROFILES[index]
    return (f"Synthetic Eye Unit {index + 1}", f"SU{index + 1}", f"Synthford {index + 1}", "SF",
            f"{index + 1} Market Street")


@dataclass(frozen=True)
class PatientHeader:
    name: str  # DICOM PN, e.g. "ASHDOWN^AURELIA"
    patient_id: str
    issuer: str
    birth_date: str  # YYYYMMDD
    sex: str
    address: str
    other_id: str  # the site's local hospital number
    other_issuer: str


@dataclass(frozen=True)
class SiteHeader:
    institution: str
    address: str
    station: str
    serial: str
    referring: str
    performing: str
    operator: str

    @classmethod
    def for_site(cls, seed: int, index: int) -> "SiteHeader":
        name, code, town, area, street = site_profile(index)
        staff = [STAFF[(3 * index + k) % len(STAFF)].upper() for k in range(3)]
        return cls(name, f"{street}, {town}, {area}1 1AA", f"{code}-OCT-{index + 1:02d}",
                   f"SN{derive_int(seed, 'serial', index) % 10**8:08d}", *staff)


@dataclass(frozen=True)
class StudyHeader:
    uid: str
    date: str  # YYYYMMDD
    time: str  # HHMMSS
    accession: str
    study_id: str
    description: str
    requested_procedure_id: str
    scheduled_step_id: str


@dataclass(frozen=True)
class ImageSpec:
    modality: str  # "OPT" or "OP"
    laterality: str  # "R" or "L"
    patient: PatientHeader
    site: SiteHeader
    study: StudyHeader
    series_uid: str
    series_number: int
    series_description: str
    sop_instance_uid: str
    frame_of_reference_uid: str
    dimension_uid: str
    acquisition_time: str  # HHMMSS
    shape: tuple[int, ...]  # OPT (frames, rows, cols); OP (rows, cols)
    pixel_seed: int
    scan_quality: float
    reference: tuple[str, str] | None = None  # (SOP class, SOP instance) of the baseline
