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
# (institution, org code, town, postcode area, street address) per site index.
SITES = [("Synthtown Eye Hospital", "SEH", "Synthtown", "ST", "1 Lantern Row"),
         ("Northbridge Ophthalmic Centre", "NOC", "Northbridge", "NB", "22 Weir Street"),
         ("Easthaven Eye Clinic", "EEC", "Easthaven", "EH", "5 Quayside"),
         ("Westmoor Retina Unit", "WRU", "Westmoor", "WM", "90 Fell Road")]
STAFF = ["Featherby^Oswin^^Dr", "Kingsmill^Edmund", "Pilbeam^Tamsin", "Ravensworth^Clemency^^Dr",
         "Abernethy^Lucius", "Gosforth^Petronella", "Mortlake^Ignatius^^Dr", "Tregarthen^Saffron",
         "Wolstenholme^Bede"]


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
    _, _, town, area, _ = _site_profile(site_index)
    postcode = f"{area}{rng.randrange(1, 20)} {rng.randrange(1, 10)}{rng.choice('ABDEHJLNPRSTUWXY')}{rng.choice('ABDEHJLNPRSTUWXY')}"
    born = Date(1935, 1, 1) + timedelta(days=rng.randrange(50 * 365))
    return PatientTruth(_nhs_number(rng, used), "NHS", family, given, born.isoformat(), sex,
                        f"{rng.randrange(2, 180)} {rng.choice(STREETS)}", town, postcode)


def _site_profile(index: int) -> tuple[str, str, str, str, str]:
    if index < len(SITES):
        return SITES[index]
    return (f"Synthetic Eye Unit {index + 1}", f"SU{index + 1}", f"Synthford {index + 1}", "SF",
            f"{index + 1} Market Street")


def _site_header(seed: int, index: int) -> sd.SiteHeader:
    name, code, town, area, street = _site_profile(index)
    staff = [STAFF[(3 * index + k) % len(STAFF)].upper() for k in range(3)]
    return sd.SiteHeader(name, f"{street}, {town}, {area}1 1AA", f"{code}-OCT-{index + 1:02d}",
                         f"SN{sd.derive_int(seed, 'serial', index) % 10**8:08d}", *staff)


# ----------------------------------------------------------------------------- clinical


def _clinical_row(rng: random.Random, site_index: int, p: PatientTruth, day: str,
                  state: dict | None) -> tuple[dict[str, str], dict]:
    """One extract row plus the evolved state. Each appearance changes the record (the
    notes are dated, acuity/IOP drift, AMD may progress dry -> wet)."""
    if state is None:
        state = {"dx": rng.choice(DIAGNOSES), "va": rng.choice([0.0, 0.1, 0.2, 0.3, 0.5]),
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
    """Writes one landing tree and fills the summary as it goes."""

    def __init__(self, root: Path, seed: int, summary: HospitalSummary, oct_shape, fundus_shape):
        self.root, self.seed, self.summary = root, seed, summary
        self.shapes = {"OPT": tuple(oct_shape), "OP": tuple(fundus_shape)}
        self.baselines: dict[tuple, str] = {}  # (site, patient, modality, eye) -> SOP UID
        self.first_file: dict[tuple[str, str], bytes] = {}  # partition -> a real file's bytes
        self.counters: dict[tuple[str, str], int] = {}

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def visit(self, rng, site, si, site_hdr, day, person, plan) -> None:
        """One study: an OPT volume and/or OP photo per planned eye."""
        key, ident, seed = (day, site), self.summary._identifiers, self.seed
        study_no = self.counters[key] = self.counters.get(key, 0) + 1
        uid = sd.derive_uid(seed, "study", site, day, person.patient_id)
        hh, mm = 8 + rng.randrange(9), rng.randrange(60)
        code = _site_profile(si)[1]
        study = sd.StudyHeader(
            uid, day.replace("-", ""), f"{hh:02d}{mm:02d}00", f"{code}{day[2:4]}{rng.randrange(10**6):06d}",
            f"ST{rng.randrange(10**6):06d}",
            f"Retina clinic {person.dicom_name}" if study_no % 2 else "Retina clinic imaging",
            f"RP{rng.randrange(10**7):07d}", f"SPS{rng.randrange(10**7):07d}")
        mrn = person.hospital_numbers[site]
        patient = sd.PatientHeader(person.dicom_name, person.patient_id, person.issuer,
                                   person.birth_date.replace("-", ""), person.sex,
                                   f"{person.address}, {person.town}, {person.postcode}", mrn, code)
        ident |= {uid, study.accession, study.study_id, study.requested_procedure_id,
                  study.scheduled_step_id, patient.address}
        style = (study_no + si) % 3
        series_no = 0
        for modality in plan["modalities"]:
            for eye in plan["eyes"]:
                series_no += 1
                self._image(rng, site, day, person, patient, site_hdr, study, modality, eye,
                            series_no, _image_path(style, study_no, series_no, self._next(key), modality, eye))

    def _next(self, key) -> int:
        self.counters[key + ("files",)] = n = self.counters.get(key + ("files",), 0) + 1
        return n

    def _image(self, rng, site, day, person, patient, site_hdr, study, modality, eye, series_no, name):
        seed, pid = self.seed, person.patient_id
        sop = sd.derive_uid(seed, "sop", study.uid, modality, eye)
        series = sd.derive_uid(seed, "series", study.uid, modality, eye)
        frame_ref = sd.derive_uid(seed, "for", study.uid, modality, eye)
        dim = sd.derive_uid(seed, "dim", study.uid, modality, eye)
        baseline = self.baselines.setdefault((site, pid, modality, eye), sop)
        reference = (sd.SOP_CLASS[modality], baseline) if baseline != sop else None
        label = "OCT macular cube 6x6" if modality == "OPT" else "Colour fundus 45"
        described = f"{label} {eye} {person.full_name}" if series_no == 2 else f"{label} {eye}"
        minutes = int(study.time[2:4]) + 2 * series_no
        acq = f"{int(study.time[:2]) + minutes // 60:02d}{minutes % 60:02d}{rng.randrange(60):02d}"
        spec = sd.ImageSpec(modality, eye, patient, site_hdr, study, series, series_no, described,
                            sop, frame_ref, dim, acq, self.shapes[modality],
                            sd.derive_int(seed, "pixels", sop), round(rng.uniform(40, 99), 1), reference)
        data = sd.encode_part10(sd.build_dataset(spec))
        rel = f"images/{site}/{day}/{name}"
        self.write(rel, data)
        self.first_file.setdefault((day, site), data)
        self.summary._identifiers.update({sop, series, frame_ref, patient.name, pid,
                                          patient.birth_date, person.family_name, person.given_name,
                                          patient.address, person.address, person.postcode, patient.other_id})
        if modality == "OPT":  # only the OPT dimension module carries this UID
            self.summary._identifiers.add(dim)
        if person.full_name in described:
            self.summary._identifiers.add(person.full_name)
        self.summary.dicom_files.setdefault((day, site), []).append(rel)
        self.summary.instances.append(InstanceTruth(
            rel, day, site, pid, modality, eye, sd.SOP_CLASS[modality], sop, study.uid, series,
            reference[1] if reference else None, self.shapes[modality][0] if modality == "OPT" else 1))

    def junk(self, day: str, site: str) -> None:
        """notes.txt, an empty file, a truncated real file, and DICM-prefixed garbage."""
        base = f"images/{site}/{day}"
        files = {f"{base}/notes.txt": ("notes", sd.notes_bytes(f"{site} {day}")),
                 f"{base}/IM000000": ("empty", b""),
                 f"{base}/DICOM/ST999999/SE000001/IM000001": ("garbage", sd.garbage_bytes(sd.derive_int(self.seed, "junk", site, day)))}
        if (day, site) in self.first_file:
            files[f"{base}/export_partial/scan_0.dcm"] = ("truncated", sd.truncated_bytes(self.first_file[(day, site)]))
        for rel, (kind, data) in files.items():
            self.write(rel, data)
            self.summary.broken_files.setdefault((day, site), []).append(rel)
            self.summary.broken_kinds[rel] = kind


def generate_hospital(landing, *, seed=7, sites=("site-a", "site-b"),
                      dates=("2024-03-01", "2024-03-02", "2024-03-03"), patients_per_site=6,
                      oct_shape=(8, 64, 64), fundus_shape=(64, 64),
                      broken_per_partition=True) -> HospitalSummary:
    """Write a synthetic eye hospital under `landing` and return its ground truth.

    Overwrites the files it writes but never deletes others: use a fresh directory when
    byte-identical trees matter. Dates are ISO strings; they are processed in sorted order.
    """
    root, sites, dates = Path(landing), list(sites), sorted(dates)
    rng, n, m = random.Random(seed), patients_per_site, len(dates)
    summary = HospitalSummary(str(root), seed, sites, dates)
    writer = _Writer(root, seed, summary, oct_shape, fundus_shape)
    used: set = set()

    slots: list[list[PatientTruth]] = []
    only: list[list[PatientTruth]] = []
    for si, site in enumerate(sites):
        row = []
        for k in range(n):
            shared = si > 0 and n >= 3 and k < 2  # the same two people seen at the previous site
            person = slots[si - 1][n - 2 - k] if shared else _make_person(rng, used, si)
            row.append(person)
        only.append([_make_person(rng, used, si) for _ in range(max(1, n // 3))])
        slots.append(row)
        code = _site_profile(si)[1]
        for person in row + only[si]:
            if person not in summary.patients:
                summary.patients.append(person)
            person.sites.append(site)
            person.hospital_numbers[site] = f"{code}{rng.randrange(10**6, 10**7)}"
    headers = [_site_header(seed, si) for si in range(len(sites))]
    for h in headers:
        summary._identifiers |= {h.institution, h.address, h.station, h.serial, h.referring,
                                 h.performing, h.operator}
        summary._identifiers |= {pn.split("^")[0] for pn in (h.referring, h.performing, h.operator)}

    visits = [[_visit_days(k, si, n, m) for k in range(n)] for si in range(len(sites))]
    plans: dict[tuple[int, int], dict] = {}
    for d, day in enumerate(dates):
        for si, site in enumerate(sites):
            for k, person in enumerate(slots[si]):
                if d not in visits[si][k]:
                    continue
                if (si, k) not in plans:  # decided at the first visit, repeated at follow-ups
                    plans[(si, k)] = {"eyes": rng.choice([("R", "L"), ("R", "L"), ("R",), ("L",)]),
                                      "modalities": ("OPT", "OP") if rng.random() < 0.6 else ("OPT",)}
                    person.imaged_sites.append(site)
                writer.visit(rng, site, si, headers[si], day, person, plans[(si, k)])
            if broken_per_partition:
                writer.junk(day, site)

    for si, site in enumerate(sites):
        columns = SITE_B_COLUMNS if si == 1 else SITE_A_COLUMNS
        summary.clinical_columns[site] = columns
        states: dict[str, dict] = {}
        for d, members in _extract_members(slots[si], visits[si], only[si], n, m).items():
            rows = []
            for person in members:
                row, states[person.patient_id] = _clinical_row(rng, si, person, dates[d],
                                                               states.get(person.patient_id))
                rows.append(row)
                summary._identifiers |= {person.family_name, person.given_name} | {
                    v for k, v in row.items() if k in IDENTIFYING_COLUMNS}
                if "address" in row:
                    summary._identifiers.add(person.address)
            rng.shuffle(rows)  # real extracts come in no particular order
            _write_csv(root / "clinical" / site / f"{dates[d]}.csv", columns, rows)
            summary.clinical_records[(dates[d], site)] = rows
            summary.clinical_rows[(dates[d], site)] = len(rows)
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
