"""Test session set-up: one generated hospital, one warehouse, one Spark session for all tests.

The data contract's environment variables are set before any platform module is imported,
because the definitions read them at import time, as a deployment does.

The suite runs on parallel workers (pytest-xdist, `--dist loadgroup`; platform/test.sh turns it on): see
"Parallel runs" below for how tests are grouped onto workers, and `build_once` for a world that all
workers share.
"""

import fcntl
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Callable

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
# Two approvers with real OpenSSH keys: every publication in the suite needs their two signed approvals.
from approvers import make_approvers  # noqa: E402 - after the environment: it imports the platform

APPROVERS = make_approvers(ROOT / "approvers", seeded=True)  # the same keys on every worker
os.environ["IMAGING_APPROVERS"] = str(APPROVERS.signers)
os.environ["IMAGING_TEST_APPROVER_KEYS"] = os.pathsep.join(str(k) for k in APPROVERS.keys.values())

# A run started in the background of a non-interactive shell (CI scripts, `... &`) inherits SIGINT ignored,
# and after Dagster's first in-process run SIGTERM is ignored too (dagster._utils.interrupts gives SIGTERM
# SIGINT's handler). Every server a test starts afterwards would inherit both, ignore its stop signal, and
# each stop would wait out its timeout (30 s a server) or fail. The tests start from Python's defaults.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session")
def hospital():
    """The synthetic hospital in the landing zone, with its ground truth."""
    from synth import generate_hospital

    return generate_hospital(ROOT / "landing", seed=11, sites=SITES, dates=DATES)


@pytest.fixture(scope="session")
def defs():
    from definitions import defs

    return defs


def run_assets(defs, selection, partition_range=None, instance=None, must_succeed=True):
    """Materialize `selection` in-process, as one run (a single-run backfill when given a range).

    On `instance` when given (runs that must see each other's records), else a fresh ephemeral one. A run
    that fails raises, unless `must_succeed` is false: then its result says so.
    """
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    tags = {}
    if partition_range is None and "published_cohort" in selection:
        partition_range = every_cohort()
    if partition_range:
        tags = {"dagster/asset_partition_range_start": partition_range[0],
                "dagster/asset_partition_range_end": partition_range[1]}
    job = define_asset_job("test_job", selection=AssetSelection.assets(*selection))
    # With the table-wide checks (multi-asset checks): a job selecting their assets runs them, as deployed.
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    result = resolved.resolve_job_def("test_job").execute_in_process(
        instance=instance or DagsterInstance.ephemeral(), tags=tags, raise_on_error=must_succeed)
    assert result.success or not must_succeed
    return result


def every_cohort() -> tuple[str, str]:
    """published_cohort's partition range over every cohort definition (one partition a cohort file): as the
    README builds every cohort at once, one run."""
    from assets.partitions import COHORTS

    keys = COHORTS.get_partition_keys()
    return keys[0], keys[-1]


def rooted(defs, landing, warehouse, checks: bool = True):
    """`defs` on a test's own landing zone and warehouse, with the table-wide asset checks as deployed (a job
    selecting their assets runs them) unless `checks` is false. Its partitions are the session's."""
    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    resources = {**defs.resources, "warehouse": Warehouse(root=str(warehouse)),
                 "landing": LandingZone(root=str(landing), files_per_task=defs.resources["landing"].files_per_task)}
    return type(defs)(assets=defs.assets, asset_checks=defs.asset_checks if checks else None, resources=resources,
                      executor=defs.executor)


def publish_cohorts(defs, warehouse_root, instance=None):
    """published_cohort as an operator runs it: a run holds each release, every held one is approved
    by the session's two approvers (signed, as `imaging-review approve` records it), and the next run
    publishes what was approved."""
    from approvers import approve_all
    from imaging.governance.approval import list_held

    run_assets(defs, ["published_cohort"], instance=instance)
    for held in list_held(str(warehouse_root)):
        approve_all(held.path)
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


@pytest.fixture(scope="session")
def hostile_and_fuzzed(tmp_path_factory, defs):
    """One landing zone and warehouse, materialized in one run and its cohorts published, for two modules that
    each built a world of their own for it: test_hostile's files in the first site's first two days, and
    test_fuzz_pipeline's mutants in the second site's (each module asserts on its own site's files). Their tests
    share one xdist group. (test_leak_free's world cannot join them: its copies of pydicom's files and the mutants
    share SOP Instance UIDs, and the index would quarantine one site's as indexed in another site-day.)"""
    from types import SimpleNamespace

    from test_fuzz_pipeline import land_mutants
    from test_hostile import land_hostile

    root = tmp_path_factory.mktemp("hostile-and-fuzzed")
    hostile, fuzzed = land_hostile(root / "landing"), land_mutants(root / "landing")
    before = {str(p) for p in root.parent.rglob("*")}  # test_hostile: nothing written outside the warehouse
    scoped = rooted(defs, root / "landing", root / "warehouse", checks=False)
    run_assets(scoped, ["raw_image_index", "linked_patient_metadata", "anonymized_images"],
               (f"{DATES[0]}|{SITES[0]}", f"{DATES[1]}|{SITES[1]}"))  # asserts the run succeeded
    publish_cohorts(scoped, root / "warehouse")
    return SimpleNamespace(root=root, before=before, hostile=hostile, fuzzed=fuzzed)


@pytest.fixture(scope="session")
def pydicom_deidentified(tmp_path_factory):
    """pydicom's and pydicom-data's files de-identified once a profile (tests/pydicom_sweep.py), for the sweeps
    that check the outputs (test_deid_sweep, test_deid_dciodvfy: one xdist group)."""
    from pydicom_sweep import Deidentified

    return Deidentified(tmp_path_factory.mktemp("pydicom-deidentified"))


# --- Parallel runs (pytest-xdist) -----------------------------------------------------------------
#
# platform/test.sh runs the suite on two workers with `--dist loadgroup`: the tests of one xdist_group
# run on one worker, in file order. Every test gets a group here unless its module names one itself:
# - SESSION_WORLD: the tests on this file's session world (the hospital, the warehouse materialized from
#   it, its instance and the Spark session the assets started). Each worker process builds its own world
#   (ROOT is per process), so the tests that read it share one worker and it is built once.
# - "dagster-ui": the tests on the shared `dagster dev` (browser and proxy tests, fixture `dagster_ui`).
# - otherwise its module: module-scoped worlds and tests that build on each other stay on one worker.
# Groups are handed out heaviest first (GROUP_SECONDS), so the long ones start at once and the many
# short ones fill in at the end; any group not listed comes after them, in file order.

SESSION_WORLD = "session-world"
# Fixtures of this file whose tests share a worker: the session world's, and the UI tests' `dagster dev`.
WORLD_FIXTURES = {"hospital": SESSION_WORLD, "warehouse": SESSION_WORLD, "instance": SESSION_WORLD,
                  "spark": SESSION_WORLD, "dagster_ui": "dagster-ui"}
# Seconds each group took in a run of the whole suite on this 2-core machine (--durations=0, summed by group):
# heaviest first, so the few long groups start at once and the many short ones fill in at the end, where the two
# workers should finish together. Measured 2026-11-27 (issue: the suite over 10 minutes) at a load of 8-11 from
# other jobs, and divided by 1.94: what the tests of untouched groups took there against the last quiet-ish run
# (load ~4), so the figures read as seconds of a quiet run. Groups under 4 s are left out (they come last, in file
# order). In that run the two workers' test seconds summed to 1,635 and 1,648.
GROUP_SECONDS = {
    "dagster-ui": 205,
    "test_crash_safety": 155,
    SESSION_WORLD: 150,
    "pydicom-sweeps": 116,  # test_deid_sweep and test_deid_dciodvfy: pydicom's files de-identified once a profile
    "test_leak_free": 111,
    "deployments-standalone": 109,
    "test_clinical_database": 76,
    "test_ui_automation": 72,
    "test_optout_pipeline": 69,
    "deployments-connect": 50,
    "deployments-gcs": 46,
    "test_quality_gate": 44,
    "test_pacs_dimse": 43,
    "test_pacs": 40,
    "test_quality_checks": 35,
    "test_worker_daemon": 34,
    "test_redact": 32,
    "hostile-and-fuzzed": 31,  # test_hostile and test_fuzz_pipeline: one world
    "test_cli": 29,
    "test_fuzz_files": 25,
    "test_part10": 22,
    "test_pixel_text": 21,
    "test_signed_approvals": 20,
    "test_text_detector": 20,
    "test_deid_differential": 18,
    "test_text_screening": 14,
    "test_progress_spark": 13,
    "test_review": 13,
    "test_dg": 12,
    "test_codecs": 11,
    "test_stream_memory": 8,
    "test_empty_site_day": 6,
    "test_deid_synthetic": 5,
    "test_key_protection": 4,
    "test_contact_sheet": 4,
    "test_review_browser": 4,
}


def _group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))
    # A world fixture of this file's, not one the module defines under the same name.
    for name, group in WORLD_FIXTURES.items():
        if name in item.fixturenames and not hasattr(item.module, name):
            return group
    return item.module.__name__


def pytest_configure(config):
    # Work is handed out in the order pytest_collection_modifyitems leaves it (heaviest group first), not
    # re-sorted by the number of tests in a group (xdist's default for loadscope and loadgroup).
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Before the other hooks (xdist's reads the groups): every test gets its group, and on a worker of
    `--dist loadgroup` the tests are ordered heaviest group first. After them: each test's node id ends
    in `@<group>`, the key xdist's loadgroup scheduler groups by."""
    groups = {}
    for item in items:
        groups[item] = _group(item)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    grouping = hasattr(config, "workerinput") and config.getoption("loadgroup", False)
    if grouping:
        first = {}
        for item in items:
            first.setdefault(groups[item], len(first))
        items.sort(key=lambda item: (-GROUP_SECONDS.get(groups[item], 0), first[groups[item]]))
    result = yield
    if grouping:
        # xdist 3.8 appends the suffix by setting `item._nodeid`, which pytest 9.2 no longer reads (an item's
        # node id is `item._id`): without this every test would be scheduled alone, groups ignored.
        from _pytest.nodeid import NodeId

        for item in items:
            if not item.nodeid.endswith("@" + groups[item]):
                item._id = NodeId.parse(f"{item.nodeid}@{groups[item]}")
    return result


def shared_folder(tmp_path_factory) -> Path:
    """A folder every worker of this run sees: the run's base temporary folder (this process's own when
    the tests run in one process)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory, name: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
    """A world made once per run whichever workers ask for it: `build(folder)` makes it in `folder` and
    returns facts about it (JSON); the first worker to ask builds it under a file lock, the others wait for
    it and get the same folder and facts. A build that fails leaves nothing, and the next asker tries again."""
    folder = shared_folder(tmp_path_factory) / name
    done = folder.with_name(name + ".json")
    with open(folder.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                import shutil

                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                done.write_text(json.dumps(build(folder)))
            return folder, json.loads(done.read_text())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --- Servers shared by a group of tests, stopped after its last test ---------------------------------
#
# A session fixture stays up until the run ends; these register how to stop them in STOP_AFTER_LAST, and
# pytest_runtest_teardown stops each once the next test does not use it (on a parallel run its tests run
# one after the other, in one xdist group), rather than leave it idling, and polling, until the end of the
# run. In one process a selection can put other tests between them, so each starts again when a later test
# asks (`dagster_ui.get()`, `spark_connect`): a stopped server is never handed out.

STOP_AFTER_LAST: dict[str, Callable[[], None]] = {}  # fixture name -> stop


@pytest.fixture(scope="session")
def dagster_ui(tmp_path_factory):
    """One `dagster dev` for the browser steps (test_ui_browser) and the proxy (test_ui_proxy): started
    by the first test that asks (`dagster_ui.get()`)."""
    from dagster_server import SharedDagsterDev

    shared = SharedDagsterDev(tmp_path_factory.mktemp("dagster-ui"))
    STOP_AFTER_LAST["dagster_ui"] = shared.stop
    yield shared
    shared.stop()


@pytest.fixture(scope="session")
def shared_spark_connect():
    """One Spark Connect server (tests/services.py) for the tests of xdist group "deployments-connect":
    the pipeline on Connect (test_deployments) and Connect's progress lines (test_progress_spark)."""
    from services import SharedSparkConnect, java_available, skip_unless

    skip_unless(java_available(), "Java is not installed: no Spark Connect server")
    shared = SharedSparkConnect()
    STOP_AFTER_LAST["spark_connect"] = shared.stop
    yield shared
    shared.stop()


@pytest.fixture
def spark_connect(shared_spark_connect):
    """The shared Connect server, running: started again when other tests ran since the last test that used
    it (a selection in one process does not keep a group's tests together)."""
    return shared_spark_connect.get()


def pytest_runtest_teardown(item, nextitem):
    for name, stop in list(STOP_AFTER_LAST.items()):
        if name in item.fixturenames and (nextitem is None or name not in nextitem.fixturenames):
            stop()  # idempotent; `dagster_ui` and `spark_connect` start again if a later test asks
