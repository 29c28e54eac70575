"""Publication is held by failed ERROR checks, across runs, through the command line and a real instance."""

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from approvers import session_keys
from imaging.catalogue import COHORTS
from synth import generate_hospital

REPO = Path(__file__).resolve().parents[1]
SITE, DATES = "north", ("2025-01-06", "2025-01-07")
KEY = "gate-test-key-" + "y" * 20


def snapshot(folder: Path) -> dict:
    """Every file under `folder` with its sha256 (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_error_check_on_a_partition_holds_publication_in_later_runs(tmp_path):
    landing, warehouse, home = tmp_path / "landing", tmp_path / "warehouse", tmp_path / "home"
    hospital = generate_hospital(landing, seed=5, sites=(SITE,), dates=DATES, patients_per_site=3)
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGING_")}
    env.update(IMAGING_LANDING=str(landing), IMAGING_WAREHOUSE=str(warehouse), IMAGING_SITES=SITE,
               IMAGING_START_DATE=DATES[0], IMAGING_PSEUDONYM_KEY=KEY, IMAGING_SPARK_MASTER="local[2]",
               IMAGING_MIN_K="1",  # a three-patient hospital: no cohort reaches the default k
               DAGSTER_HOME=str(home), IMAGING_APPROVERS=os.environ["IMAGING_APPROVERS"])
    dagster = Path(sys.executable).with_name("dagster")

    def materialize(select, *partition):
        result = subprocess.run([str(dagster), "asset", "materialize", "-m", "definitions", "--select", select,
                                 *partition], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        return result.returncode, result.stdout + result.stderr

    images = "raw_image_index,linked_patient_metadata,anonymized_images"
    both_days = ["--partition-range", f"{DATES[0]}|{SITE}...{DATES[1]}|{SITE}"]
    code, out = materialize(images, *both_days)
    assert code == 0, out[-3000:]
    code, out = materialize("published_cohort")
    assert code == 0, out[-3000:]  # clean data: every ERROR check passed (WARN checks may show)
    review = Path(sys.executable).with_name("imaging-review")

    def pending() -> list[str]:
        listed = subprocess.run([str(review), "pending"], env=env, capture_output=True, text=True, check=True)
        return [line.split("\t")[0] for line in listed.stdout.splitlines() if line.strip()]

    held = pending()
    assert held  # built and held, waiting for an approval
    for path in held:  # the session's two approvers sign, as reviewers do
        for key in session_keys():
            subprocess.run([str(review), "approve", path, "--key", key], env=env, check=True, capture_output=True)
    # Approved, not yet published: the next cohort run would publish these (test_pipeline shows it does).
    releases = warehouse / COHORTS.path
    published = snapshot(releases)
    held_files = {path: snapshot(Path(path)) for path in held}
    assert all(held_files.values())

    # Plant a systemic fault, the kind blocking checks exist for: a linkage key gone wrong. The second
    # day's extract files two different people under one patient's id, so that patient's images of the
    # day would be joined to more than one person (records_per_image). Only the second day is re-run.
    plant_two_people_under_one_id(landing, hospital, DATES[1])
    code, out = materialize(images, "--partition", f"{DATES[1]}|{SITE}")
    assert code != 0  # the blocking check failed: downstream assets of this run did not run
    assert "records_per_image" in out
    assert "Somebody Else" not in out and str(landing) not in out and KEY not in out

    # A later run of the cohort alone refuses, naming the check and the partition; nothing changes.
    code, out = materialize("published_cohort")
    assert code != 0
    assert "publication refused" in out and "linked_patient_metadata:records_per_image" in out
    assert f"{DATES[1]}|{SITE}" in out
    # Not even the approved releases went out: nothing under the releases changed, the approved ones wait.
    assert snapshot(releases) == published
    assert pending() == held and {path: snapshot(Path(path)) for path in held} == held_files


def plant_two_people_under_one_id(landing: Path, hospital, date: str) -> None:
    """Append to `date`'s extract a second, different person (other name, birth date and number) under
    the id of a patient imaged that day, after a copy of that patient's own latest record."""
    import pydicom

    with pydicom.config.disable_value_validation():
        imaged = pydicom.dcmread(landing / sorted(hospital.dicom_files[(date, SITE)])[0], stop_before_pixels=True)
    patient = str(imaged.PatientID)
    extracts = sorted((landing / "clinical" / SITE).glob("*.csv"))
    rows, header = [], None
    for extract in extracts:
        with extract.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames
            rows += [r for r in reader if r["patient_id"] == patient and extract.stem <= date]
    own = dict(rows[-1])
    other = {**own, **{c: v for c, v in {"full_name": "Somebody Else", "surname": "Else", "forename": "Somebody",
                                         "nhs_number": "9999999999", "date_of_birth": "1931-01-01",
                                         "dob": "01/01/1931"}.items() if c in header}}
    target = landing / "clinical" / SITE / f"{date}.csv"
    existing = target.read_text() if target.exists() else ",".join(header) + "\n"
    with target.open("w", newline="") as handle:
        handle.write(existing)
        csv.DictWriter(handle, fieldnames=header).writerows([own, other])
