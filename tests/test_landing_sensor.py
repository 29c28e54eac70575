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


def _versions(cursor) -> dict:
    from imaging.driver.landing import SensorCursor

    return SensorCursor.from_json(cursor).recent


def test_the_sensor_runs_the_named_job():
    from automation.landing_sensor import landing_sensor

    assert landing_sensor.job_name == "site_day_pipeline"


def test_first_tick_requests_every_landed_site_day_once(landing):
    instance = DagsterInstance.ephemeral()
    result = _tick(instance, landing)
    keys = sorted(r.partition_key for r in result.run_requests)
    assert keys == sorted(f"{d}|{s}" for d in DATES for s in SITES)
    for request in result.run_requests:
        assert request.run_key.startswith(f"{request.partition_key}@")
        # The named job's run (no ad-hoc asset selection), saying who launched it and why.
        assert request.asset_selection is None
        assert request.tags["imaging/launched_by"] == "landing_sensor" and request.tags["imaging/reason"]
    versions = {e.partition: e.tags["dagster/data_version"] for e in result.asset_events}
    assert versions == _versions(result.cursor)
    assert all(set(e.metadata) == {"files", "bytes", "newest_file"} for e in result.asset_events)
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
    assert f"{DATES[1]}|{SITES[1]}" not in _versions(result.cursor)


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
    assert done in _versions(result.cursor), "adopted into the cursor, so a later change is still seen"


def test_the_sensor_is_off_by_default_and_the_source_asset_observes_versions(landing):
    from dagster._core.definitions.observe import observe

    from assets.landing_zone import landing_zone
    from automation.landing_sensor import landing_sensor
    from resources.landing import LandingZone

    assert landing_sensor.default_status == DefaultSensorStatus.STOPPED
    instance = DagsterInstance.ephemeral()
    result = observe([landing_zone], instance=instance, resources={"landing": LandingZone(root=str(landing), files_per_task=64)})
    observations = [e.event_specific_data.asset_observation for e in result.all_events
                    if e.event_type_value == "ASSET_OBSERVATION"]
    observed = {o.partition: o.tags["dagster/data_version"] for o in observations}
    # Each observation says what the site-day holds: files, bytes and its newest file's time.
    assert len(observed) == len(observations) == 4
    assert all(o.metadata["files"].value > 0 and o.metadata["bytes"].value > 0 and o.metadata["newest_file"].value > 0
               for o in observations)
    assert observed == _versions(_tick(instance, landing).cursor)


def test_the_cursor_is_bounded_and_still_sees_an_old_change(tmp_path):
    """A year of daily landings: the cursor keeps the recent dates one by one and the rest as one digest; a
    change to an old site-day breaks the digest and that site-day alone is requested."""
    import datetime as dt

    from imaging.driver.landing import CURSOR_DAYS, SensorCursor, SiteDayLanding, bounded_cursor, plan_requests

    first = dt.date(2024, 1, 1)
    days = [(first + dt.timedelta(days=i)).isoformat() for i in range(365)]
    current = {f"{d}|{s}": SiteDayLanding(d, s, 3, 300, 1.0, f"v-{d}-{s}") for d in days for s in SITES}
    plan = plan_requests(current, {}, {})
    assert len(plan.requests) == 730
    cursor = bounded_cursor(plan.cursor, current)
    assert len(cursor.recent) == CURSOR_DAYS * len(SITES) and len(cursor.to_json()) < 10_000
    stored = SensorCursor.from_json(cursor.to_json())
    assert plan_requests(current, stored.known(current), {}).requests == [], "nothing changed, nothing requested"
    # An old site-day changes: only it is requested (the others of the old digest were materialized after their
    # files, as the instance says), and the cursor stays the same size.
    old = f"{days[10]}|{SITES[1]}"
    changed = dict(current, **{old: SiteDayLanding(days[10], SITES[1], 4, 400, 2.0, "v-new")})
    known = stored.known(changed)
    unseen = [k for k in changed if k not in known]
    assert old in unseen and len(unseen) == (365 - CURSOR_DAYS) * len(SITES)
    plan = plan_requests(changed, known, {k: 1.5 for k in unseen})
    assert [r.key for r in plan.requests] == [old]
    assert len(bounded_cursor(plan.cursor, changed).recent) == CURSOR_DAYS * len(SITES)
    # A cursor of the earlier format (every site-day's version) is read as it was.
    legacy = SensorCursor.from_json(json.dumps({k: d.version for k, d in current.items()}))
    assert plan_requests(current, legacy.known(current), {}).requests == []
