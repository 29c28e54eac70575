"""Publication is held by failed ERROR checks, across runs, on a real instance on disk: runs in this process
(the worker's Spark session, warm after its first run) and a later run through the command line, as an
operator's next run is a new process that knows only what the instance and the warehouse recorded."""

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from approvers import approve_all
from conftest import every_cohort, DATES as WORLD_DATES, SITES, rooted, run_assets
from imaging.catalogue import COHORTS
from synth import generate_hospital

REPO = Path(__file__).resolve().parents[1]
# The session's partitions (tests/conftest.py): the in-process definitions and the CLI's agree on them.
SITE, DATES = SITES[0], WORLD_DATES[:2]
IMAGES = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]


def snapshot(folder: Path) -> dict:
    """Every file under `folder` with its sha256 (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_error_check_on_a_partition_holds_publication_in_later_runs(defs, tmp_path, capfd):
    from dagster import DagsterInstance

    landing, warehouse, home = tmp_path / "landing", tmp_path / "warehouse", tmp_path / "home"
    hospital = generate_hospital(landing, seed=5, sites=(SITE,), dates=DATES, patients_per_site=3)
    home.mkdir()
    env = {**os.environ, "IMAGING_LANDING": str(landing), "IMAGING_WAREHOUSE": str(warehouse),
           "DAGSTER_HOME": str(home)}
    ours = rooted(defs, landing, warehouse)
    both_days = (f"{DATES[0]}|{SITE}", f"{DATES[1]}|{SITE}")
    review = Path(sys.executable).with_name("imaging-review")

    def pending() -> list[str]:
        listed = subprocess.run([str(review), "pending"], env=env, capture_output=True, text=True, check=True)
        return [line.split("\t")[0] for line in listed.stdout.splitlines() if line.strip()]

    with DagsterInstance.from_config(str(home)) as instance:  # the instance DAGSTER_HOME names
        run_assets(ours, IMAGES, both_days, instance=instance)
        run_assets(ours, ["published_cohort"], instance=instance)  # clean data: every ERROR check passed
        held = pending()
        assert held  # built and held, waiting for an approval
        for path in held:  # the session's two approvers sign, as `imaging-review approve` records it (in this
            approve_all(path)  # process: the command itself is test_review's and test_signed_approvals')
        # Approved, not yet published: the next cohort run would publish these (test_pipeline shows it does).
        releases = warehouse / COHORTS.path
        published = snapshot(releases)
        held_files = {path: snapshot(Path(path)) for path in held}
        assert all(held_files.values())

        # Plant a systemic fault, the kind blocking checks exist for: a linkage key gone wrong. The second
        # day's extract files two different people under one patient's id, so that patient's images of the
        # day would be joined to more than one person (records_per_image). Only the second day is re-run.
        plant_two_people_under_one_id(landing, hospital, DATES[1])
        capfd.readouterr()
        rerun = run_assets(ours, IMAGES, (both_days[1], both_days[1]), instance=instance, must_succeed=False)
        out = "".join(capfd.readouterr())
        assert not rerun.success  # the blocking check failed: downstream assets of this run did not run
        assert "records_per_image" in out
        assert "Somebody Else" not in out and str(landing) not in out and os.environ["IMAGING_PSEUDONYM_KEY"] not in out

    # A later run of the cohort alone, a new process, refuses, naming the check and the partition; nothing changes.
    dagster = Path(sys.executable).with_name("dagster")
    first, last = every_cohort()  # every cohort at once, as the README builds them: one run over their range
    later = subprocess.run([str(dagster), "asset", "materialize", "-m", "definitions", "--select", "published_cohort",
                            "--partition-range", f"{first}...{last}"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = later.stdout + later.stderr
    assert later.returncode != 0
    assert "publication refused" in out and "linked_patient_metadata:records_per_image" in out
    assert both_days[1] in out
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
