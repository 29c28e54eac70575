"""The clinical extracts of the synthetic eye hospital: one CSV per site and day.

Each site has its own header (site-b spells names and dates differently), records evolve
from day to day, and the extracts leave designed gaps so the as-of join has work to do
(see the plan in `synth`).
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from synth.truth import HospitalSummary, PatientTruth

SITE_A_COLUMNS = ["patient_id", "nhs_number", "full_name", "date_of_birth", "sex", "postcode",
                  "address", "diagnosis_code", "visual_acuity_logmar", "notes"]
SITE_B_COLUMNS = ["patient_id", "surname", "forename", "dob", "gender", "diagnosis_code",
                  "iop_mmhg", "clinician_notes"]
IDENTIFYING_COLUMNS = {"patient_id", "nhs_number", "full_name", "date_of_birth", "postcode", "address",
                       "surname", "forename", "dob"}
DIAGNOSES = ["H35.31", "H35.32", "E11.3", "H40.1", "H33.0"]
DIAGNOSIS_WEIGHTS = [3, 3, 2, 2, 1]  # a medical-retina clinic: mostly AMD


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
