"""Automation in a running `dagster dev` (webserver + daemon), as an operator turns it on.

The landing zone starts empty: with the landing sensor on, ticks request nothing (no landed files,
nothing requested). A site-day is then dropped into the landing zone (moved in whole, as a landing
job should); the next tick requests exactly that site-day, one run materializes its three
partitioned assets and nothing else, and later ticks request nothing again.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from dagster_server import DagsterProcess, graphql, platform_env

SITES = ("site-a", "site-b")
START = "2024-03-01"
DROPPED = ("2024-03-02", "site-b")
CHAIN = {"raw_image_index", "linked_patient_metadata", "anonymized_images"}
TICK = 3  # IMAGING_LANDING_SENSOR_SECONDS for this test; production ticks every 60 s
RUN_WAIT = 600  # two cores shared with other work: a Spark run takes one to two minutes here
WORKSPACE = os.environ.get("UI_TEST_WORKSPACE", "workspace.yaml")

TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status ticks(limit: 50) { status timestamp runIds skipReason error { message } } } }
  ... on PythonError { message } } }"""
RUNS = """{ runsOrError { ... on Runs { results { runId status tags { key value }
  assetMaterializations { assetKey { path } partition } } } } }"""


def _selector() -> dict:
    return {"repositoryLocationName": "imaging_platform", "repositoryName": "__repository__",
            "sensorName": "landing_sensor"}


def _ticks(server) -> list[dict]:
    sensor = graphql(server.url, TICKS, {"s": _selector()})["sensorOrError"]
    assert sensor["__typename"] == "Sensor", sensor
    return sorted(sensor["sensorState"]["ticks"], key=lambda t: t["timestamp"])


def _ticks_after(server, since: float, count: int) -> list[dict] | None:
    """The finished ticks after `since` (epoch seconds) once there are at least `count` of them. A tick still
    under way (STARTED) has not decided yet whether to request a run."""
    ticks = [t for t in _ticks(server) if t["timestamp"] > since and t["status"] != "STARTED"]
    return ticks if len(ticks) >= count else None


def _runs(server) -> list[dict]:
    return graphql(server.url, RUNS)["runsOrError"]["results"]


def _wait(predicate, what: str, timeout: float, server):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{server.log_tail(3000)}")


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("automation")
    (root / "landing").mkdir()
    env = platform_env(root, sites=SITES, start_date=START, key="automation-test-key-not-secret-long")
    env["IMAGING_LANDING_SENSOR_SECONDS"] = str(TICK)
    server = DagsterProcess.start("dev", env, root / "dagster-dev.log", workspace=WORKSPACE)
    try:
        yield server, root
    finally:
        server.stop()


def test_the_landing_sensor_is_off_until_turned_on(dev):
    server, _ = dev
    sensor = graphql(server.url, TICKS, {"s": _selector()})["sensorOrError"]
    assert sensor["sensorState"]["status"] == "STOPPED" and sensor["sensorState"]["ticks"] == []
    started = graphql(server.url, """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
        __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                      {"s": _selector()})["startSensor"]
    assert started["__typename"] == "Sensor" and started["sensorState"]["status"] == "RUNNING", started


def test_an_empty_landing_zone_requests_nothing(dev):
    server, _ = dev
    ticks = _wait(lambda: _ticks_after(server, 0, 2), "two sensor ticks", 6 * TICK + 120, server)
    assert all(t["status"] == "SKIPPED" and not t["runIds"] for t in ticks), ticks
    assert "0 landed site-days" in ticks[-1]["skipReason"]
    assert _runs(server) == []


def test_a_dropped_site_day_runs_alone_and_then_nothing_more(dev, tmp_path):
    from synth import generate_hospital

    server, root = dev
    date, site = DROPPED
    staging = tmp_path / "staging"
    generate_hospital(staging, seed=9, sites=(site,), dates=(date,), patients_per_site=2)
    # Moved in whole (a rename per folder), so no tick sees a half-written site-day.
    for area, name in (("images", date), ("clinical", f"{date}.csv")):
        (root / "landing" / area / site).mkdir(parents=True, exist_ok=True)
        shutil.move(staging / area / site / name, root / "landing" / area / site / name)
    dropped_at = time.time()

    runs = _wait(lambda: [r for r in _runs(server) if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")],
                 "the site-day's run to finish", RUN_WAIT, server)
    assert len(runs) == 1, runs
    run = runs[0]
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert run["status"] == "SUCCESS", server.log_tail(4000)
    assert tags["dagster/partition"] == f"{date}|{site}" and tags["imaging/trigger"] == "landing_sensor"
    assert tags["dagster/sensor_name"] == "landing_sensor"
    materialized = {("/".join(m["assetKey"]["path"]), m["partition"]) for m in run["assetMaterializations"]}
    assert materialized == {(asset, f"{date}|{site}") for asset in CHAIN}

    # Touching nothing requests nothing: two more ticks after the run, both skipped.
    finished = time.time()
    later = _wait(lambda: _ticks_after(server, finished, 2), "two ticks after the run", 6 * TICK + 120, server)
    assert all(t["status"] == "SKIPPED" and not t["runIds"] for t in later), later
    assert "1 landed site-days, 0 new or changed" in later[-1]["skipReason"]
    requesting = [t for t in _ticks(server) if t["runIds"]]
    assert len(requesting) == 1 and requesting[0]["timestamp"] >= dropped_at - 1
    assert len(_runs(server)) == 1, "no other run was launched"
