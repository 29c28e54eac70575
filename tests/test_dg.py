"""The `dg` CLI (dagster-dg-cli) sees the project: `dg check defs` and `dg list defs` from the root."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DG = Path(sys.executable).with_name("dg")
ASSETS = {"raw_image_index", "linked_patient_metadata", "anonymized_images", "published_cohort"}


def _dg(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path), IMAGING_PSEUDONYM_KEY="dg-test-key-not-secret-" + "d" * 10)
    return subprocess.run([str(DG), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_dg_check_defs_loads_the_code_location(tmp_path):
    result = _dg("check", "defs", tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "All definitions loaded successfully" in result.stdout + result.stderr


def test_dg_list_defs_shows_the_assets_and_resources(tmp_path):
    result = _dg("list", "defs", "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    listing = json.loads(result.stdout)
    assets = {a["asset_key"]: a for a in listing["assets"]}
    assert ASSETS <= set(assets)
    # The link step reads the index and the landing zone's extracts.
    assert sorted(assets["linked_patient_metadata"]["dependency_keys"]) == ["landing_zone", "raw_image_index"]
    assert {r["name"] for r in listing["resources"]} >= {"spark", "landing", "warehouse", "deid", "progress", "pacs"}
    # No PACS site here: the index reads the landing zone only (tests/test_pacs.py has one that also reads pacs_landing).
    assert "landing_zone" in assets and assets["raw_image_index"]["dependency_keys"] == ["landing_zone"]
    assert {s["name"] for s in listing["sensors"]} >= {"landing_sensor", "downstream_automation", "notify_run_failures",
                                                       "notify_failed_checks"}
    assert {j["name"] for j in listing.get("jobs", [])} >= {"site_day_pipeline", "publish"}
    # The key is configured through an environment variable: its value never appears in a listing.
    assert "dg-test-key-not-secret" not in result.stdout + result.stderr
