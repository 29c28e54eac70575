"""landing_sensor and the landing_zone source asset, evaluated in-process against real files and a real
(ephemeral) instance. The same sensor running in `dagster dev` is tested in test_ui_automation.py."""

import json
import shutil

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterInstance, DefaultSensorStatus, build_sensor_context

from synth import generate_hospital

SITES = ("site-a", "site-b")  # as tests/conftest.py configures the partitions
DATES = ("2024-03-01", "2024-03-02")


@pytest.fixture
def landing(tmp_path):
    generate_hospital(tmp_path / "landing", seed=4, sites=SITES, dates=DATES, patients_per_site=2)
    return tmp_path / "landing"


def _tick(instance, root, cursor=None):
    from automation.landing_sensor import landing_sensor
    from resources.landing import LandingZone

    context = build_sensor_context(instance=instance, cursor=cursor, resources={"landing": LandingZone(root=str(root), files_per_task=64)})
    return landing_sensor(context)


def test_first_tick_requests_every_landed_site_day_once(landing):
    instance = DagsterInstance.ephemeral()
    result = _tick(instance, landing)
    keys = sorted(r.partition_key for r in result.run_requests)
    assert keys == sorted(f"{d}|{s}" for d in DATES for s in SITES)
    for request in result.run_requests:
        assert request.run_key.startswith(f"{request.partition_key}@")
        assert {k.to_user_string() for k in request.asset_selection} == {
            "raw_image_index", "linked_patient_metadata", "anonymized_images"}
    versions = {e.partition: e.tags["dagster/data_version"] for e in result.asset_events}
    assert versions == json.loads(result.cursor)
    assert all(e.asset_key == AssetKey("landing_zone") for e in result.asset_events)
    # Nothing touched: nothing requested, nothing observed again.
    again = _tick(instance, landing, result.cursor)
    assert again.run_requests == [] and again.asset_events == [] and again.skip_reason
    assert again.cursor == result.cursor


def test_a_new_and_a_changed_site_day_are_requested_and_nothing_else(landing):
    instance = DagsterInstance.ephemeral()
    cursor = _tick(instance, landing).cursor
    generate_hospital(landing, seed=4, sites=SITES[:1], dates=("2024-03-05",), patients_per_site=2)  # new day
    extract = landing / "clinical" / SITES[1] / f"{DATES[0]}.csv"
    extract.write_text(extract.read_text() + "\n")  # a corrected extract
    shutil.rmtree(landing / "images" / SITES[1] / DATES[1])  # removed files are not a request
    (landing / "clinical" / SITES[1] / f"{DATES[1]}.csv").unlink()
    result = _tick(instance, landing, cursor)
    assert sorted(r.partition_key for r in result.run_requests) == [f"{DATES[0]}|{SITES[1]}", f"2024-03-05|{SITES[0]}"]
    assert f"{DATES[1]}|{SITES[1]}" not in json.loads(result.cursor)


def test_site_days_already_materialized_after_their_files_are_not_rerun(landing):
    instance = DagsterInstance.ephemeral()
    done = f"{DATES[0]}|{SITES[0]}"
    for asset in ("raw_image_index", "linked_patient_metadata", "anonymized_images"):
        instance.report_runless_asset_event(AssetMaterialization(asset, partition=done))
    half = f"{DATES[1]}|{SITES[0]}"  # only the first asset of the chain: not done
    instance.report_runless_asset_event(AssetMaterialization("raw_image_index", partition=half))
    result = _tick(instance, landing)
    keys = {r.partition_key for r in result.run_requests}
    assert done not in keys and half in keys and len(keys) == 3
    assert done in json.loads(result.cursor), "adopted into the cursor, so a later change is still seen"


def test_the_sensor_is_off_by_default_and_the_source_asset_observes_versions(landing):
    from dagster._core.definitions.observe import observe

    from assets.landing_zone import landing_zone
    from automation.landing_sensor import landing_sensor
    from resources.landing import LandingZone

    assert landing_sensor.default_status == DefaultSensorStatus.STOPPED
    instance = DagsterInstance.ephemeral()
    result = observe([landing_zone], instance=instance, resources={"landing": LandingZone(root=str(landing), files_per_task=64)})
    observed = {e.partition: e.event_specific_data.asset_observation.tags["dagster/data_version"]
                for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"}
    assert observed == json.loads(_tick(instance, landing).cursor)
