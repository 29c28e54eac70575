"""The data contract's command line, exactly as other tools run it, configured by environment only."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads

from imaging.catalogue import LINKED, RAW_IMAGE_INDEX, partition_dir
from imaging.records import SiteDay
from synth import generate_hospital

REPO = Path(__file__).resolve().parents[1]


def test_materialize_command_for_a_partition_of_env_configured_sites(tmp_path):
    sites, dates = ("north", "south"), ("2025-01-06", "2025-01-07")
    hospital = generate_hospital(tmp_path / "landing", seed=5, sites=sites, dates=dates, patients_per_site=3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGING_")}
    env.update(IMAGING_LANDING=str(tmp_path / "landing"), IMAGING_WAREHOUSE=str(tmp_path / "warehouse"),
               IMAGING_SITES=",".join(sites), IMAGING_START_DATE=dates[0], IMAGING_PSEUDONYM_KEY="cli-test-key-" + "c" * 20,
               IMAGING_SPARK_MASTER="local[2]", DAGSTER_HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    dagster = Path(sys.executable).with_name("dagster")
    result = subprocess.run([str(dagster), "asset", "materialize", "-m", "definitions", "--select", "raw_image_index+",
                             "--partition", f"{dates[1]}|south"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for table in (RAW_IMAGE_INDEX, LINKED):
        folder = tmp_path / "warehouse" / table.path / partition_dir(table, SiteDay(dates[1], "south"))
        rows = pads.dataset(folder, format="parquet").count_rows()
        assert rows == len(hospital.dicom_files[(dates[1], "south")]) > 0
    # Only the asked partition was touched.
    assert [p.name for p in (tmp_path / "warehouse" / RAW_IMAGE_INDEX.path).iterdir()] == [f"date={dates[1]}"]
    # The secret never reaches the run's output.
    assert "cli-test-key" not in result.stdout + result.stderr
