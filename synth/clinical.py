"""The clinical extracts of the synthetic eye hospital: one CSV per site and day.

Each site has its own header (site-b spells names and dates differently), records evolve
from day to day, and the extracts leave designed gaps so the as-of join has work to do
(see the plan in `synth`). Acuity, pressure and most diagnoses are each eye's: site-a writes them as per-eye
column pairs, site-b as a row per eye (`eye`: OD, OS, and OU for a diagnosis of both eyes).
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from synth.truth import EyeObservationTruth, HospitalSummary, PatientTruth

# Site-a spells its per-eye values as column pairs (two suffix styles); site-b writes a row per eye with an `eye`
# column (OD, OS; OU for a diagnosis of both eyes). Both layouts are what imaging/steps/clinical.py reads eye by eye.
SITE_A_COLUMNS = ["patient_id", "nhs_number", "full_name", "date_of_birth", "sex", "postcode", "address",
                  "diagnosis_code_right", "diagnosis_code_left", "visual_acuity_logmar_right",
                  "visual_acuity_logmar_left", "iop_od", "iop_os", "notes"]
SITE_B_COLUMNS = ["patient_id", "surname", "forename", "dob", "gender", "eye", "diagnosis_code", "va_logmar",
                  "iop_mmhg", "clinician_notes"]
# The patient's own columns of each layout (the others are an eye's).
PATIENT_COLUMNS = {0: ["patient_id", "nhs_number", "full_name", "date_of_birth", "sex", "postcode", "address", "notes"],
                   1: ["patient_id", "surname", "forename", "dob", "gender", "clinician_notes"]}
IDENTIFYING_COLUMNS = {"patient_id", "nhs_number", "full_name", "date_of_birth", "postcode", "address",
                       "surname", "forename", "dob"}
DIAGNOSES = ["H35.31", "H35.32", "E11.3", "H40.1", "H33.0"]
EYE_DIAGNOSES = ["H35.31", "H35.32", "H40.1", "H33.0", None]  # an eye's own diagnosis (None: that eye is well)
EYE_DIAGNOSIS_WEIGHTS = [3, 3, 2, 1, 1]  # a medical-retina clinic: mostly AMD
BOTH_EYES_DIAGNOSIS = "E11.3"  # diabetic retinopathy: a diagnosis of both eyes
EYES = ("R", "L")


def _evolve(rng: random.Random, state: dict | None) -> dict:
    """Each eye's record at a new appearance: acuity and pressure drift, AMD may progress dry -> wet, per eye."""
    if state is None:
        return {"both": BOTH_EYES_DIAGNOSIS if rng.random() < 0.25 else None,
                **{eye: {"dx": rng.choices(EYE_DIAGNOSES, EYE_DIAGNOSIS_WEIGHTS)[0],
                         "va": rng.choice([0.0, 0.1, 0.2, 0.3, 0.5]), "iop": rng.randrange(12, 24)} for eye in EYES}}
    out = dict(state)
    for eye in EYES:
        mine = dict(state[eye], va=round(state[eye]["va"] + rng.choice([0.1, 0.2]), 2),
                    iop=state[eye]["iop"] + rng.choice([-2, -1, 1, 2]))
        if mine["dx"] == "H35.31" and rng.random() < 0.5:
            mine["dx"] = "H35.32"
        out[eye] = mine
    return out


def _clinical_rows(rng: random.Random, site_index: int, p: PatientTruth, day: str,
                   state: dict) -> list[dict[str, str]]:
    """The patient's rows of one extract: site-a one row with per-eye pairs, site-b a row per eye (and one OU row
    for a diagnosis of both eyes). The notes are dated free text naming the patient."""
    title = "Mrs" if p.sex == "F" else "Mr"
    right, left = state["R"], state["L"]
    if site_index == 1:
        dmy = f"{day[8:]}/{day[5:7]}/{day[:4]}"
        notes = (f"{title} {p.family_name} seen {dmy}; IOP {right['iop']}/{left['iop']} mmHg. "
                 f"{rng.choice(['Continue drops.', 'Review 3/12.', 'Refer for fields.'])}")
        b = p.birth_date
        person = {"patient_id": p.patient_id, "surname": p.family_name, "forename": p.given_name,
                  "dob": f"{b[8:]}/{b[5:7]}/{b[:4]}", "gender": "Female" if p.sex == "F" else "Male",
                  "clinician_notes": notes}
        rows = [{**person, "eye": spelled, "diagnosis_code": eye["dx"] or "", "va_logmar": f"{eye['va']:.2f}",
                 "iop_mmhg": str(eye["iop"])} for spelled, eye in (("OD", right), ("OS", left))]
        if state["both"]:
            rows.append({**person, "eye": "OU", "diagnosis_code": state["both"], "va_logmar": "", "iop_mmhg": ""})
        return rows
    notes = (f"{p.full_name} reviewed {day}: "
             f"{rng.choice(['stable, continue monitoring', 'new drusen noted', 'fluid reduced after injection'])}.")
    pid = p.patient_id
    return [{"patient_id": pid, "nhs_number": f"{pid[:3]} {pid[3:6]} {pid[6:]}",
             "full_name": p.full_name, "date_of_birth": p.birth_date, "sex": p.sex,
             "postcode": p.postcode, "address": f"{p.address}, {p.town}",
             "diagnosis_code_right": right["dx"] or state["both"] or "",
             "diagnosis_code_left": left["dx"] or state["both"] or "",
             "visual_acuity_logmar_right": f"{right['va']:.2f}", "visual_acuity_logmar_left": f"{left['va']:.2f}",
             "iop_od": str(right["iop"]), "iop_os": str(left["iop"]), "notes": notes}]


def _eye_truth(summary: HospitalSummary, site_index: int, site: str, day: str, row: dict[str, str]) -> None:
    """What the row says of each eye, as the link step should find it (field names as the extract spells them,
    without a per-eye suffix; diagnoses apart)."""
    pid = row["patient_id"]
    if site_index == 1:
        eye = {"OD": "R", "OS": "L", "OU": "B"}[row["eye"]]
        values = {k: row[k] for k in ("va_logmar", "iop_mmhg") if row[k]}
        codes = [row["diagnosis_code"]] if row["diagnosis_code"] else []
        measured = [(eye, values, codes)]
    else:
        measured = [(eye, {"visual_acuity_logmar": row[f"visual_acuity_logmar_{side}"], "iop": row[f"iop_{short}"]},
                     [row[f"diagnosis_code_{side}"]] if row[f"diagnosis_code_{side}"] else [])
                    for eye, side, short in (("R", "right", "od"), ("L", "left", "os"))]
    for eye, values, codes in measured:
        if values:
            summary.eye_observations.append(EyeObservationTruth(site, day, pid, eye, values))
        summary.eye_diagnoses.extend(EyeObservationTruth(site, day, pid, eye, {"diagnosis_code": c}) for c in codes)


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


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


def write_clinical(rng, root: Path, summary: HospitalSummary, si, site, slots, visits, others) -> None:
    """Write site `si`'s extract for every date and record the rows in `summary`."""
    columns = SITE_B_COLUMNS if si == 1 else SITE_A_COLUMNS
    summary.clinical_columns[site] = columns
    summary.patient_columns[site] = PATIENT_COLUMNS[1 if si == 1 else 0]
    states: dict[str, dict] = {}
    for d, members in _extract_members(slots, visits, others, len(slots), len(summary.dates)).items():
        day, rows = summary.dates[d], []
        for person in members:
            states[person.patient_id] = _evolve(rng, states.get(person.patient_id))
            mine = _clinical_rows(rng, si, person, day, states[person.patient_id])
            rows.extend(mine)
            for row in mine:
                _eye_truth(summary, si, site, day, row)
                summary._identifiers |= {person.family_name, person.given_name} | {
                    v for k, v in row.items() if k in IDENTIFYING_COLUMNS}
                if "address" in row:
                    summary._identifiers.add(person.address)
        rng.shuffle(rows)  # real extracts come in no particular order
        _write_csv(root / "clinical" / site / f"{day}.csv", columns, rows)
        summary.clinical_records[(day, site)] = rows
        summary.clinical_rows[(day, site)] = len(rows)
