"""Crash-safe commits through the real assets: a crash at a commit point, then recovery and a re-run,
equals a clean run (Parquet compared by rows, every other file by bytes).

A small hospital of one site-day is materialized twice as a reference: first without one DICOM
file (the old state), then with it (the new state), asset by asset. Each case starts from the
reference state before an asset, crashes that asset at a named point (tests/crash.py, through
imaging/driver/commit.py's `on_step`), checks that recovery leaves a consistent warehouse (every manifest row's file
present with its checksum, no staging left) equal to the reference, and, after a roll-back and the first
roll-forward point of each asset, re-runs the asset and compares with the reference.
A second test SIGKILLs a real `dagster asset materialize` at several moments.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from conftest import DATES, ROOT, SITES, rooted, run_assets
from crash import SimulatedCrash, stopping_at
from imaging.catalogue import ANONYMIZED_FILES, AUDIT, DEIDENTIFIED, LEDGER, RELEASE_INDEX, REVIEWS, manifest
from imaging.driver.commit import recover
from imaging.driver.platform_files import load_clinical_policy

REPO = Path(__file__).resolve().parents[1]
CRASH_RUNNER = Path(__file__).resolve().with_name("crash.py")
KEY = f"{DATES[0]}|{SITES[0]}"
ASSETS = ("raw_image_index", "linked_patient_metadata", "anonymized_images", "published_cohort")
HERE = ROOT / "crash"


def swaps_of(asset):
    # anonymized_images: files, manifest, quarantine, ledger, then withdrawn_images, optout_applied and
    # quarantine/optout_lists (identifiable tables, like any other).
    return {"raw_image_index": 2, "linked_patient_metadata": 2, "anonymized_images": 7, "published_cohort": 2}[asset]


def points(asset):
    names = ["staged", "journal"]
    for number in range(swaps_of(asset)):
        names += [f"aside-{number}", f"swap-{number}"]
    return [f"{asset}:{n}" for n in names + ["swapped", "cleaned"]]


def scoped(defs, warehouse: Path):
    return rooted(defs, HERE / "landing", warehouse, checks=False)


def materialize(defs, warehouse, asset):
    run_assets(scoped(defs, warehouse), [asset], None if asset == "published_cohort" else (KEY, KEY))


RUN_FACTS = ["run_id", "run_started_at"]  # the ledger names the run that wrote a row: a re-run is a new run


def snapshot(root: Path) -> dict:
    """Parquet by rows (Spark's writer is not byte-stable across processes), other files by bytes;
    ledger rows without the run that wrote them."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        if rel.startswith(AUDIT.path + "/"):
            # An audit event names when it happened (and the run): compared by what it says happened.
            event = json.loads(path.read_bytes())
            said = {k: v for k, v in event.items() if k not in ("at", "previous")}
            said["detail"] = re.sub(r"\(run [0-9a-f-]+\)", "(run)", said.get("detail") or "")
            out.setdefault(AUDIT.path, []).append(said)
            out[AUDIT.path].sort(key=repr)
            continue
        if path.suffix != ".parquet":
            out[rel] = path.read_bytes()
            continue
        table = pq.read_table(path)
        # The ledger names the run that wrote a row, the release object store's index each object's identity (its
        # inode and time on this disk): not what was written.
        facts = RUN_FACTS if rel.startswith(LEDGER.path + "/") else ["object_identity"] if \
            rel.startswith(RELEASE_INDEX.path + "/") else []
        out[rel] = table.drop_columns(facts).to_pylist()
    return out


@pytest.fixture(scope="module")
def states(defs, tmp_path_factory):
    """Reference warehouses: `old` (all image assets without one file), then `new-<asset>` after each asset."""
    from synth import generate_hospital

    hospital = generate_hospital(HERE / "landing", seed=21, sites=[SITES[0]], dates=[DATES[0]], patients_per_site=2)
    held_back = HERE / "held-back.dcm"
    late = HERE / "landing" / hospital.dicom_files[(DATES[0], SITES[0])][-1]
    shutil.move(late, held_back)
    work = HERE / "reference"
    run_assets(scoped(defs, work), list(ASSETS[:3]), (KEY, KEY))  # the old state: one run, as an operator's
    refs = {"old": HERE / "state-old"}
    shutil.copytree(work, refs["old"])
    shutil.move(held_back, late)
    for asset in ASSETS:
        materialize(defs, work, asset)
        refs[asset] = HERE / f"state-{asset}"
        shutil.copytree(work, refs[asset])
    return refs


def committed(files: dict) -> dict:
    """A snapshot without the review reports: rendered after a commit from what it committed, each naming the
    run that rendered it."""
    return {path: value for path, value in files.items() if not path.startswith(REVIEWS.path + "/")}


def before(states, asset):
    index = ASSETS.index(asset)
    return states["old"] if index == 0 else states[ASSETS[index - 1]]


def assert_consistent(warehouse: Path):
    """What a reader may rely on after recovery: files and manifest agree, nothing staged."""
    table = manifest(load_clinical_policy())
    rows = pads.dataset(warehouse / table.path, format="parquet", partitioning="hive").to_table().to_pylist() \
        if (warehouse / table.path).exists() else []
    listed = {r["output_path"]: r["sha256"] for r in rows}
    present = {str(p.relative_to(warehouse / DEIDENTIFIED)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in (warehouse / ANONYMIZED_FILES.path).rglob("*.dcm")}
    assert listed == present
    assert not [p for p in warehouse.rglob("*") if p.name in ("_staging", "_journal")]


# Every commit point of anonymized_images around its files' and manifest's swaps (the two must never disagree;
# its later swaps are tables like the others'); two of each other asset (the intent, and a crash between swaps).
# tests/test_commit.py covers every point of the protocol itself without Spark.
CASES = [p for asset in ASSETS for p in points(asset)
         if (asset == "anonymized_images" and not re.search(r"-[2-9]$", p)) or p.endswith((":journal", ":swap-0"))]


@pytest.mark.parametrize("point", CASES)
def test_crash_at_a_commit_point_then_rerun_equals_a_clean_run(defs, states, tmp_path, monkeypatch, point):
    asset = point.split(":")[0]
    warehouse = tmp_path / "warehouse"
    shutil.copytree(before(states, asset), warehouse)
    stopping_at(monkeypatch, point)
    with pytest.raises(SimulatedCrash):
        materialize(defs, warehouse, asset)
    monkeypatch.undo()

    done = recover(str(warehouse / "identifiable/_journal"), [str(warehouse / z) for z in ("identifiable", DEIDENTIFIED)])
    assert done.rolled_forward == (0 if point.endswith(":staged") else 1)
    assert_consistent(warehouse)
    expected = before(states, asset) if point.endswith(":staged") else states[asset]
    # Rolled back, or rolled forward: all or nothing. A release's review report (identifiable/reviews/) is
    # rendered from the committed release after the commit, not part of it: the re-run renders it again.
    assert committed(snapshot(warehouse)) == committed(snapshot(expected))

    if point.endswith((":staged", ":journal")):
        # The re-run after a roll-back (`staged`) and after the first roll-forward (`journal`) of each asset.
        # After any later point the recovered warehouse already equals the clean state, file for file
        # (asserted above): re-running it is the idempotent re-run tests/test_pipeline.py shows.
        materialize(defs, warehouse, asset)
        # The review report is re-rendered by the re-run, stamped with its own run: compared without it.
        assert committed(snapshot(warehouse)) == committed(snapshot(states[asset]))


def test_sigkill_of_a_running_materialize_then_rerun_equals_a_clean_run(defs, states, tmp_path):
    """A real `dagster asset materialize`, SIGKILLed at two moments in a row (before its intent, and between two
    swaps of a rolled-forward commit), then a clean re-run."""
    warehouse = tmp_path / "warehouse"
    shutil.copytree(states["linked_patient_metadata"], warehouse)
    env = {**os.environ, "IMAGING_LANDING": str(HERE / "landing"), "IMAGING_WAREHOUSE": str(warehouse),
           "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    for moment in ("anonymized_images:staged", "anonymized_images:swap-1"):
        (tmp_path / "paused").unlink(missing_ok=True)
        # `dagster asset materialize ...`, through tests/crash.py: it pauses at `moment` until killed.
        process = subprocess.Popen(
            [sys.executable, str(CRASH_RUNNER), moment, "pause", str(tmp_path / "paused"), "--",
             "asset", "materialize", "-m", "definitions", "--select", "anonymized_images",
             "--partition", KEY], cwd=REPO, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not (tmp_path / "paused").exists():
            assert process.poll() is None, f"materialize ended before reaching {moment}"
            assert time.monotonic() < deadline, f"{moment} not reached in time"
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGKILL)  # the run and its Spark JVM, with no chance to clean up
        process.wait(timeout=60)
        assert process.returncode == -signal.SIGKILL

    materialize(defs, warehouse, "anonymized_images")
    assert snapshot(warehouse) == snapshot(states["anonymized_images"])
    assert_consistent(warehouse)
