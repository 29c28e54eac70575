"""Test session set-up: one generated hospital, one warehouse, one Spark session for all tests.

The data contract's environment variables are set before any platform module is imported,
because the definitions read them at import time, as a deployment does.
"""

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(tempfile.mkdtemp(prefix="imaging-tests-"))
SITES = ("site-a", "site-b")
DATES = ("2024-03-01", "2024-03-02", "2024-03-03")
os.environ.update({
    "IMAGING_LANDING": str(ROOT / "landing"),
    "IMAGING_WAREHOUSE": str(ROOT / "warehouse"),
    "IMAGING_SITES": ",".join(SITES),
    "IMAGING_START_DATE": DATES[0],
    "IMAGING_PSEUDONYM_KEY": "test-key-" + "x" * 24,
    "IMAGING_SPARK_MASTER": os.environ.get("IMAGING_SPARK_MASTER", "local[2]"),
    "SPARK_LOCAL_IP": "127.0.0.1",
    # The test hospitals are a dozen patients: no cohort of them reaches the default k of 5.
    "IMAGING_MIN_K": "1",
})


@pytest.fixture(scope="session")
def hospital():
    """The synthetic hospital in the landing zone, with its ground truth."""
    from synth import generate_hospital

    return generate_hospital(ROOT / "landing", seed=11, sites=SITES, dates=DATES)


@pytest.fixture(scope="session")
def defs():
    from definitions import defs

    return defs


def run_assets(defs, selection, partition_range=None, instance=None):
    """Materialize `selection` in-process, as one run (a single-run backfill when given a range).

    On `instance` when given (runs that must see each other's records), else a fresh ephemeral one.
    """
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    tags = {}
    if partition_range:
        tags = {"dagster/asset_partition_range_start": partition_range[0],
                "dagster/asset_partition_range_end": partition_range[1]}
    job = define_asset_job("test_job", selection=AssetSelection.assets(*selection))
    # With the table-wide checks (multi-asset checks): a job selecting their assets runs them, as deployed.
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    result = resolved.resolve_job_def("test_job").execute_in_process(
        instance=instance or DagsterInstance.ephemeral(), tags=tags)
    assert result.success
    return result


def publish_cohorts(defs, warehouse_root, approver="test", instance=None):
    """published_cohort as an operator runs it: a run holds each release, every held one is approved
    (as `imaging-review approve` records it), and the next run publishes what was approved."""
    from imaging.governance.approval import list_held, record_approval

    run_assets(defs, ["published_cohort"], instance=instance)
    for held in list_held(str(warehouse_root)):
        record_approval(held.path, approver, "approved by the test suite")
    return run_assets(defs, ["published_cohort"], instance=instance)


def observe_landing(defs, instance):
    """Observe the landing zone as the sensor or the UI's "Observe" does: a data version per site-day."""
    from dagster._core.definitions.observe import observe

    from assets.landing_zone import landing_zone

    return observe([landing_zone], instance=instance, resources={"landing": defs.resources["landing"]})




@pytest.fixture(scope="session")
def instance():
    """One Dagster instance for the session warehouse's runs (in memory)."""
    from dagster import DagsterInstance

    with DagsterInstance.ephemeral() as shared:
        yield shared


@pytest.fixture(scope="session")
def warehouse(hospital, defs, instance):
    """The landing zone observed, then every asset materialized once over all test partitions
    (2 sites x 3 days) in one run, and the cohorts held, approved and published, on one instance."""
    partitioned = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]
    observe_landing(defs, instance)
    run_assets(defs, partitioned, (f"{DATES[0]}|{SITES[0]}", f"{DATES[-1]}|{SITES[-1]}"), instance=instance)
    publish_cohorts(defs, ROOT / "warehouse", instance=instance)
    return ROOT / "warehouse"


@pytest.fixture(scope="session")
def spark(warehouse):
    """The session the assets used (getOrCreate returns it): tests read outputs with it."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()
