"""A deterministic synthetic eye hospital: DICOM landing zone plus clinical extracts.

Used by the demo, the tests and the benchmarks. `generate_hospital` writes

    <landing>/images/<site>/<YYYY-MM-DD>/<any depth>/<file>   DICOM Part 10 (+ some junk)
    <landing>/clinical/<site>/<YYYY-MM-DD>.csv                 that site-day's clinical extract

and returns a `HospitalSummary` with the ground truth (patients, instances, follow-up
references, broken files, as-of clinical records, every identifying string planted).
Same seed, byte-identical tree: no clock, no uuid4; UIDs and pixels derive from the seed.

Per site, given >= 2 patients and >= 2 dates, the plan guarantees:
  * slot 0 is seen on several dates; its second visit's extract omits it, so its as-of
    record for that image comes from an earlier day's extract;
  * the last slot is imaged once and has no record on or before that date (its record
    arrives in the next day's extract, if any);
  * records change between days (acuity, notes, sometimes the diagnosis);
  * extracts also hold patients who are never imaged;
  * from the second site on, two slots are the same people (same NHS number) as two
    slots of the previous site.
"""

from __future__ import annotations

import argparse
import csv
import random
from dataclasses import dataclass, field
from datetime import date as Date, timedelta
from pathlib import Path

from imaging import synth_dicom as sd

SITE_A_COLUMNS = ["patient_id", "nhs_number", "full_name", "date_of_birth", "sex", "postcode",
                  "address", "diagnosis_code", "visual_acuity_logmar", "notes"]
SITE_B_COLUMNS = ["patient_id", "surname", "forename", "dob", "gender", "diagnosis_code",
                  "iop_mmhg", "clinician_notes"]
IDENTIFYING_COLUMNS = {"patient_id", "nhs_number", "full_name", "date_of_birth", "postcode", "address",
                       "surname", "forename", "dob"}
DIAGNOSES = ["H35.31", "H35.32", "E11.3", "H40.1", "H33.0"]
DIAGNOSIS_WEIGHTS = [3, 3, 2, 2, 1]  # a medical-retina clinic: mostly AMD
SURNAMES = ["Ashdown", "Blackwood", "Carrow", "Dunmore", "Everleigh", "Fairbairn", "Greyling",
            "Hollinrake", "Inchbald", "Jessop", "Kettleborough", "Lumsden", "Marchbank",
            "Nettleship", "O'Callaghan", "Pennefather", "Quarrington", "Rutherglen", "Sowerby",
            "Threlfall", "Underhill", "Vavasour", "Wetherall", "Yardley"]
FORENAMES = {"F": ["Aurelia", "Cressida", "Eulalia", "Gwendolyn", "Imogen", "Leonora",
                   "Marguerite", "Philippa", "Rosalind", "Theodora", "Wilhelmina", "Henrietta"],
             "M": ["Bartholomew", "Desmond", "Fenwick", "Horatio", "Jasper", "Lancelot",
                   "Montague", "Percival", "Rupert", "Sebastian", "Tobias", "Ambrose"]}
STREETS = ["Larkspur Lane", "Mallow Close", "Quince Avenue", "Tansy Road", "Yarrow Crescent",
           "Foxglove Way", "Heather Mews", "Juniper Drive"]


# ----------------------------------------------------------------------------- truth


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
        """The as-of clinical row (as written to the CSV) for an image, or None."""
        day = self.expected_clinical_date(date, site, patient_id)
        if day is None:
            return None
        return next(r for r in self.clinical_records[(day, site)] if r["patient_id"] == patient_id)

    @property
    def unmatched_images(self) -> list[InstanceTruth]:
        """Images with no clinical record on or before their date at their site."""
        return [i for i in self.instances if self.expected_clinical_date(i.date, i.site, i.patient_id) is None]

    @property
    def earlier_day_matches(self) -> list[InstanceTruth]:
        """Images whose as-of record comes from an earlier day's extract."""
        return [i for i in self.instances
                if (self.expected_clinical_date(i.date, i.site, i.patient_id) or i.date) < i.date]


# ----------------------------------------------------------------------------- people


def _nhs_number(rng: random.Random, used: set[str]) -> str:
    """A 999-prefixed (test range) number with a valid NHS mod-11 check digit."""
    while True:
        digits = [9, 9, 9] + [rng.randrange(10) for _ in range(6)]
        check = (11 - sum(d * w for d, w in zip(digits, range(10, 1, -1))) % 11) % 11
        number = "".join(map(str, digits)) + str(check)
        if check != 10 and number not in used:
            used.add(number)
            return number


def _make_person(rng: random.Random, used: set[str], site_index: int) -> PatientTruth:
    sex = rng.choice("FM")
    for attempt in range(100):  # unique full names keep greps and joins unambiguous
        family, given = rng.choice(SURNAMES), rng.choice(FORENAMES[sex])
        if attempt > 50:
            family = f"{family}-{rng.choice(SURNAMES)}"
        if (family, given) not in used:
            used.add((family, given))
            break
    _, _, town, area, _ = sd.site_profile(site_index)
    postcode = f"{area}{rng.randrange(1, 20)} {rng.randrange(1, 10)}{rng.choice('ABDEHJLNPRSTUWXY')}{rng.choice('ABDEHJLNPRSTUWXY')}"
    born = Date(1936, 1, 1) + timedelta(days=rng.randrange(36 * 365))  # aged ~50-88 in 2024
    return PatientTruth(_nhs_number(rng, used), "NHS", family, given, born.isoformat(), sex,
                        f"{rng.randrange(2, 180)} {rng.choice(STREETS)}", town, postcode)


# ----------------------------------------------------------------------------- clinical


def _clinical_row(rng: random.Random, site_index: int, p: PatientTruth, day: str,
                  state: dict | None) -> tuple[dict[str, str], dict]:
    """One extract row plus the evolved state. Each appearance changes the record (the
    notes are dated, acuity/IOP drift, AMD may progress dry -> wet)."""
    if state is None:
        state = {"dx": rng.choices(DIAGNOSES, DIAGNOSIS_WEIGHTS)[0], "va": rng.choice([0.0, 0.1, 0.2, 0.3, 0.5]),
                 "iop": rng.randrange(12, 24)}
    else:
        state = dict(state, va=round(state["va"] + rng.choice([0.1, 0.2]), 2),
                     iop=state["iop"] + rng.choice([-2, -1, 1, 2]))
        if state["dx"] == "H35.31" and rng.random() < 0.5:
            state["dx"] = "H35.32"
    title = "Mrs" if p.sex == "F" else "Mr"
    if site_index == 1:
        dmy = f"{day[8:]}/{day[5:7]}/{day[:4]}"
        notes = (f"{title} {p.family_name} seen {dmy}; IOP {state['iop']} mmHg. "
                 f"{rng.choice(['Continue drops.', 'Review 3/12.', 'Refer for fields.'])}")
        b = p.birth_date
        row = {"patient_id": p.patient_id, "surname": p.family_name, "forename": p.given_name,
               "dob": f"{b[8:]}/{b[5:7]}/{b[:4]}", "gender": "Female" if p.sex == "F" else "Male",
               "diagnosis_code": state["dx"], "iop_mmhg": str(state["iop"]), "clinician_notes": notes}
    else:
        notes = (f"{p.full_name} reviewed {day}: "
                 f"{rng.choice(['stable, continue monitoring', 'new drusen noted', 'fluid reduced after injection'])}.")
        pid = p.patient_id
        row = {"patient_id": pid, "nhs_number": f"{pid[:3]} {pid[3:6]} {pid[6:]}",
               "full_name": p.full_name, "date_of_birth": p.birth_date, "sex": p.sex,
               "postcode": p.postcode, "address": f"{p.address}, {p.town}",
               "diagnosis_code": state["dx"], "visual_acuity_logmar": f"{state['va']:.2f}", "notes": notes}
    return row, state


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


# ----------------------------------------------------------------------------- plan


def _visit_days(slot: int, site_index: int, n: int, m: int) -> list[int]:
    """Date indexes a slot is imaged on: slot 0 always starts on day 0 and returns; even
    slots return (every 4th twice); the last slot comes once."""
    first = 0 if slot == 0 else (slot + site_index) % m
    count = 1 if (slot == n - 1 and n > 1) else 3 if slot % 4 == 0 else 2 if slot % 2 == 0 else 1
    return list(range(first, min(m, first + count)))


def _extract_members(site_slots, visits, only, n, m) -> dict[int, list[PatientTruth]]:
    """Who is in each day's extract: the day's imaged patients, minus the designed gaps,
    plus the late-arriving record and the never-imaged patients."""
    members: dict[int, list[PatientTruth]] = {d: [] for d in range(m)}
    for slot, person in enumerate(site_slots):
        days = visits[slot]
        for k, d in enumerate(days):
            if n > 1 and slot == n - 1:
                if d + 1 < m:
                    members[d + 1].append(person)  # record arrives the day after the image
            elif not (slot == 0 and k == 1):  # slot 0's second visit: no same-day record
                members[d].append(person)
    for j, person in enumerate(only):
        for d in range(m):
            if (d + j) % 2 == 0 or m == 1:
                members[d].append(person)
    return members


# ----------------------------------------------------------------------------- generate


def _image_path(style: int, study_no: int, series_no: int, n: int, modality: str, eye: str) -> str:
    """Varied export layouts: DICOMDIR-like nesting, per-study folders, or flat files."""
    if style == 0:
        return f"DICOM/ST{study_no:06d}/SE{series_no:06d}/IM{n:06d}"
    if style == 1:
        return f"export_{study_no:03d}/{modality.lower()}/scan_{n}.dcm"
    return f"{modality}_{eye}_{n:04d}.dcm"


class _Writer:
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
        code, hh, mm = sd.site_profile(si)[1], 8 + rng.randrange(9), rng.randrange(60)
        study = sd.StudyHeader(
            sd.derive_uid(self.seed, "study", site, day, person.patient_id), day.replace("-", ""),
            f"{hh:02d}{mm:02d}00", f"{code}{day[2:4]}{rng.randrange(10**6):06d}", f"ST{rng.randrange(10**6):06d}",
            f"Retina clinic {person.dicom_name}" if study_no % 2 else "Retina clinic imaging",
            f"RP{rng.randrange(10**7):07d}", f"SPS{rng.randrange(10**7):07d}")
        patient = sd.PatientHeader(person.dicom_name, person.patient_id, person.issuer,
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
        uid = lambda kind: sd.derive_uid(self.seed, kind, study.uid, modality, eye)  # noqa: E731
        sop, series, frame_ref, dim = uid("sop"), uid("series"), uid("for"), uid("dim")
        baseline = self.baselines.setdefault((site, person.patient_id, modality, eye), sop)
        reference = (sd.SOP_CLASS[modality], baseline) if baseline != sop else None
        label = "OCT macular cube 6x6" if modality == "OPT" else "Colour fundus 45"
        described = f"{label} {eye} {person.full_name}" if series_no == 2 else f"{label} {eye}"
        minutes = int(study.time[2:4]) + 2 * series_no
        acquired = f"{int(study.time[:2]) + minutes // 60:02d}{minutes % 60:02d}{rng.randrange(60):02d}"
        spec = sd.ImageSpec(modality, eye, patient, site_hdr, study, series, series_no, described, sop,
                            frame_ref, dim, acquired, self.shapes[modality],
                            sd.derive_int(self.seed, "pixels", sop), round(rng.uniform(40, 99), 1), reference)
        data = sd.encode_part10(sd.build_dataset(spec))
        self.write(rel, data)
        self.first_file.setdefault((day, site), data)
        self.summary._identifiers |= {sop, series, frame_ref} | ({dim} if modality == "OPT" else set())
        if person.full_name in described:
            self.summary._identifiers.add(person.full_name)
        self.summary.dicom_files.setdefault((day, site), []).append(rel)
        self.summary.instances.append(InstanceTruth(
            rel, day, site, person.patient_id, modality, eye, sd.SOP_CLASS[modality], sop, study.uid, series,
            reference[1] if reference else None, self.shapes[modality][0] if modality == "OPT" else 1))

    def junk(self, day: str, site: str) -> None:
        """notes.txt, an empty file, DICM-prefixed garbage and a truncated real file."""
        base, key = f"images/{site}/{day}", (day, site)
        files = {f"{base}/notes.txt": ("notes", sd.notes_bytes(f"{site} {day}")),
                 f"{base}/IM000000": ("empty", b""),
                 f"{base}/DICOM/ST999999/SE000001/IM000001":
                     ("garbage", sd.garbage_bytes(sd.derive_int(self.seed, "junk", site, day)))}
        if key in self.first_file:  # only partitions with images have something to truncate
            files[f"{base}/export_partial/scan_0.dcm"] = ("truncated", sd.truncated_bytes(self.first_file[key]))
        for rel, (kind, data) in files.items():
            self.write(rel, data)
            self.summary.broken_files.setdefault(key, []).append(rel)
            self.summary.broken_kinds[rel] = kind


def _cast(rng, sites, n, summary) -> tuple[list[list[PatientTruth]], list[list[PatientTruth]]]:
    """Each site's imaged patients (slots) and never-imaged patients. From the second site
    on, slots 0 and 1 are the same people as slots n-2 and n-3 of the previous site."""
    used: set = set()
    slots: list[list[PatientTruth]] = []
    others: list[list[PatientTruth]] = []
    for si, site in enumerate(sites):
        slots.append([slots[si - 1][n - 2 - k] if (si > 0 and n >= 3 and k < 2) else _make_person(rng, used, si)
                      for k in range(n)])
        others.append([_make_person(rng, used, si) for _ in range(max(1, n // 3))])
        for person in slots[si] + others[si]:
            if not any(p is person for p in summary.patients):
                summary.patients.append(person)
            person.sites.append(site)
            person.hospital_numbers[site] = f"{sd.site_profile(si)[1]}{rng.randrange(10**6, 10**7)}"
    return slots, others


def _write_clinical(rng, root, summary, si, site, slots, visits, others) -> None:
    columns = SITE_B_COLUMNS if si == 1 else SITE_A_COLUMNS
    summary.clinical_columns[site] = columns
    states: dict[str, dict] = {}
    for d, members in _extract_members(slots, visits, others, len(slots), len(summary.dates)).items():
        day, rows = summary.dates[d], []
        for person in members:
            row, states[person.patient_id] = _clinical_row(rng, si, person, day, states.get(person.patient_id))
            rows.append(row)
            summary._identifiers |= {person.family_name, person.given_name} | {
                v for k, v in row.items() if k in IDENTIFYING_COLUMNS}
            if "address" in row:
                summary._identifiers.add(person.address)
        rng.shuffle(rows)  # real extracts come in no particular order
        _write_csv(root / "clinical" / site / f"{day}.csv", columns, rows)
        summary.clinical_records[(day, site)] = rows
        summary.clinical_rows[(day, site)] = len(rows)


def generate_hospital(landing, *, seed=7, sites=("site-a", "site-b"),
                      dates=("2024-03-01", "2024-03-02", "2024-03-03"), patients_per_site=6,
                      oct_shape=(8, 64, 64), fundus_shape=(64, 64),
                      broken_per_partition=True) -> HospitalSummary:
    """Write a synthetic eye hospital under `landing` and return its ground truth.

    Overwrites the files it writes but deletes nothing: use a fresh directory when
    byte-identical trees matter. Dates are ISO strings, processed in sorted order.
    """
    root, sites, dates = Path(landing), list(sites), sorted(dates)
    rng, n, m = random.Random(seed), patients_per_site, len(dates)
    summary = HospitalSummary(str(root), seed, sites, dates)
    for key in ((day, site) for day in dates for site in sites):  # every partition, even if empty
        summary.dicom_files[key], summary.broken_files[key] = [], []
    slots, others = _cast(rng, sites, n, summary)
    headers = [sd.SiteHeader.for_site(seed, si) for si in range(len(sites))]
    for h in headers:
        staff = (h.referring, h.performing, h.operator)
        summary._identifiers |= {h.institution, h.address, h.station, h.serial, *staff}
        summary._identifiers |= {pn.split("^")[0] for pn in staff}

    writer = _Writer(root, seed, summary, oct_shape, fundus_shape)
    visits = [[_visit_days(k, si, n, m) for k in range(n)] for si in range(len(sites))]
    plans: dict[tuple[int, int], dict] = {}  # drawn at the first visit, repeated at follow-ups
    for d, day in enumerate(dates):
        for si, site in enumerate(sites):
            for k, person in enumerate(slots[si]):
                if d in visits[si][k]:
                    if (si, k) not in plans:
                        plans[(si, k)] = {"eyes": rng.choice([("R", "L"), ("R", "L"), ("R",), ("L",)]),
                                          "modalities": ("OPT", "OP") if rng.random() < 0.6 else ("OPT",)}
                        person.imaged_sites.append(site)
                    writer.visit(rng, site, si, headers[si], day, person, plans[(si, k)])
            if broken_per_partition:
                writer.junk(day, site)
    for si, site in enumerate(sites):
        _write_clinical(rng, root, summary, si, site, slots[si], visits[si], others[si])
    for files in (*summary.dicom_files.values(), *summary.broken_files.values()):
        files.sort()
    return summary


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m imaging.synth", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="landing directory to write")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sites", default="site-a,site-b", help="comma-separated site names")
    parser.add_argument("--dates", default="2024-03-01,2024-03-02,2024-03-03", help="comma-separated ISO dates")
    parser.add_argument("--patients", type=int, default=6, help="patients per site")
    parser.add_argument("--oct-shape", default="8,64,64", help="frames,rows,cols")
    parser.add_argument("--fundus-shape", default="64,64", help="rows,cols")
    parser.add_argument("--no-broken", action="store_true", help="skip the junk files")
    args = parser.parse_args(argv)
    split = lambda text: [t.strip() for t in text.split(",") if t.strip()]  # noqa: E731
    summary = generate_hospital(
        args.out, seed=args.seed, sites=split(args.sites), dates=split(args.dates),
        patients_per_site=args.patients, oct_shape=tuple(map(int, split(args.oct_shape))),
        fundus_shape=tuple(map(int, split(args.fundus_shape))), broken_per_partition=not args.no_broken)
    # Counts only: never print identifiers.
    by_modality = {m: sum(i.modality == m for i in summary.instances) for m in ("OPT", "OP")}
    print(f"wrote {len(summary.instances)} DICOM files ({by_modality['OPT']} OPT, {by_modality['OP']} OP), "
          f"{sum(map(len, summary.broken_files.values()))} broken files, "
          f"{sum(summary.clinical_rows.values())} clinical rows in {len(summary.clinical_rows)} extracts")
    print(f"{len(summary.patients)} patients, {len(summary.sites)} sites x {len(summary.dates)} dates, "
          f"{sum(i.referenced_sop_instance_uid is not None for i in summary.instances)} follow-up images, "
          f"{len(summary.unmatched_images)} images without an as-of clinical record -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
