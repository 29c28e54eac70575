"""The pipeline on other deployments, configured by environment only, equal to a local run.

One tiny hospital (1 site x 1 day), run once locally (the reference, in this process) and once per backend, each in a
fresh process whose working directory is an empty folder: a Spark standalone cluster (master and
worker from pyspark's `bin/spark-class`), a Spark Connect server (pyspark's `start-connect-server.sh`),
and landing plus output files on a GCS emulator. Outputs are compared with the reference: files by
bytes, tables by rows (tests/compare.py).

The hospital and the local reference run are made once per test run (`build_once`, tests/conftest.py),
so the backends can run on different workers; the reference is made in process (the session's partitions
and key) by the first backend test to finish its own run, while the others still run theirs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from compare import collect, rewritten, versions_masked
from conftest import build_once, publish_cohorts, rooted, run_assets
from services import gcs, spark_cluster  # noqa: F401 - pytest fixtures (spark_connect: conftest.py)

REPO = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).resolve().parent / "pipeline_runner.py"
SITE, DATE = "site-a", "2024-03-01"
PAIRS = [(DATE, SITE)]


@dataclass(frozen=True)
class PipelineRun:
    """Where one run of the pipeline left its outputs, and what its executors imported."""

    warehouse: str
    tables: str
    landing: str
    executor_imaging: str
    security: dict  # the driver session's spark.authenticate / spark.network.crypto.enabled


def run_pipeline(tmp: Path, landing: str, master: str, warehouse: str | None = None, tables: str | None = None,
                 extra_env: dict[str, str] | None = None) -> PipelineRun:
    """The runner in a fresh process, from an empty working directory, configured by environment only."""
    cwd = tmp / "cwd"
    cwd.mkdir(parents=True)
    warehouse = warehouse or str(tmp / "warehouse")
    env = {**os.environ, **(extra_env or {}),
           "IMAGING_LANDING": landing, "IMAGING_WAREHOUSE": warehouse, "IMAGING_SITES": SITE,
           "IMAGING_START_DATE": DATE, "IMAGING_SPARK_MASTER": master}
    if tables:
        env["IMAGING_TABLES"] = tables
    done = subprocess.run([sys.executable, str(RUNNER), str(REPO), f"{DATE}|{SITE}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return PipelineRun(warehouse=warehouse, tables=tables or warehouse, landing=landing,
                       executor_imaging=report["executor_imaging"], security=report["security"])


@pytest.fixture(scope="module")
def tiny_landing(tmp_path_factory) -> Path:
    from synth import generate_hospital

    def generate(folder: Path) -> dict:
        generate_hospital(folder / "landing", seed=23, sites=(SITE,), dates=(DATE,), patients_per_site=4)
        return {}

    folder, _ = build_once(tmp_path_factory, "deployments-tiny", generate)
    return folder / "landing"


@pytest.fixture(scope="module")
def local_run(tiny_landing, tmp_path_factory, defs) -> PipelineRun:
    """The reference: the runner's runs (the image assets on the site-day, then the cohorts held, approved and
    published) on this worker's local session, in process: what is under test is each backend's run in a
    fresh process. A test asks for it after its own run (`request.getfixturevalue`), so the backends' runs
    do not wait for it."""
    def build(folder: Path) -> dict:
        from dagster import DagsterInstance

        warehouse = folder / "warehouse"
        ours = rooted(defs, tiny_landing, warehouse)
        with DagsterInstance.ephemeral() as instance:  # one instance: the cohort runs see the image runs' checks
            run_assets(ours, ["raw_image_index", "linked_patient_metadata", "anonymized_images"],
                       (f"{DATE}|{SITE}", f"{DATE}|{SITE}"), instance=instance)
            publish_cohorts(ours, warehouse, instance=instance)
        return dataclasses.asdict(PipelineRun(warehouse=str(warehouse), tables=str(warehouse), landing=str(tiny_landing),
                                              executor_imaging="", security={}))

    _, facts = build_once(tmp_path_factory, "deployments-local-run", build)
    return PipelineRun(**facts)


def assert_equal_to_local(run: PipelineRun, local: PipelineRun) -> None:
    """Every output of the run's site-day and its cohort releases equals the local run's."""
    got = collect(run.warehouse, PAIRS, cohorts=True, tables_root=run.tables)
    if run.tables != run.warehouse:
        got.update(collect(run.tables, PAIRS))
    want = collect(local.warehouse, PAIRS, cohorts=True)
    if run.landing != local.landing:  # the identifiable tables record where each source file was
        got = {name: versions_masked(rewritten(output, {run.landing: local.landing})) for name, output in got.items()}
        want = {name: versions_masked(output) for name, output in want.items()}
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))[:10]
    differing = [name for name in got if got[name] != want[name]]
    assert differing == [], _first_difference(got[differing[0]], want[differing[0]])
    assert any(k.endswith(".dcm") and "files" in k.split("/") for k in got), "no de-identified image"
    assert any(k.endswith("SHA256SUMS") for k in got), "no cohort release"
    assert any(o.kind == "rows" and o.value for o in got.values()), "no table rows"


def _first_difference(got, want) -> str:
    """Where two outputs first differ (a text's lines, else the values)."""
    if got.kind == want.kind == "text":
        import difflib

        return "\n".join(list(difflib.unified_diff(want.value.splitlines(), got.value.splitlines(), lineterm=""))[:30])
    return f"{str(got)[:500]} != {str(want)[:500]}"


@pytest.mark.xdist_group("deployments-standalone")
def test_standalone_cluster_equals_local(spark_cluster, tiny_landing, tmp_path, request):  # noqa: F811
    """Over a cluster whose master and worker require authentication and encrypt RPC and block transfers
    (the pseudonym key rides in every de-identification task): the driver authenticates with the shared
    secret from IMAGING_SPARK_AUTH_SECRET, its executors (started by the worker with that secret) run the
    tasks, and the outputs equal the local run's."""
    # The operator names the executors' interpreter (the project's environment on the workers); the
    # driver no longer lends its own to a cluster. Here the workers share this machine's venv.
    run = run_pipeline(tmp_path, str(tiny_landing), spark_cluster.master_url,
                       extra_env={"PYSPARK_PYTHON": sys.executable,
                                  "IMAGING_SPARK_AUTH_SECRET": spark_cluster.auth_secret})
    assert run.security == {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    assert ".zip" in run.executor_imaging, run.executor_imaging  # the shipped code, not the driver's tree
    assert_equal_to_local(run, request.getfixturevalue("local_run"))


@pytest.mark.xdist_group("deployments-connect")
def test_spark_connect_equals_local(spark_connect, tiny_landing, tmp_path, request):
    run = run_pipeline(tmp_path, str(tiny_landing), spark_connect.remote)
    assert ".zip" in run.executor_imaging, run.executor_imaging  # shipped with addArtifacts
    assert_equal_to_local(run, request.getfixturevalue("local_run"))


def test_a_connect_server_that_does_not_answer_fails_at_the_start_with_its_address():
    """Not after pyspark's Connect client has retried the closed port for ten minutes (a run that seems to hang)."""
    import time

    from resources.spark import SparkResource, spark_config
    from services import free_port

    port = free_port()  # nothing listens there
    resource = SparkResource(spark_config=spark_config(f"sc://127.0.0.1:{port}", env={}, archive=None))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"Spark Connect server at 127.0.0.1:{port} does not answer"):
        resource.spark_session
    assert time.monotonic() - started < 60


@pytest.mark.xdist_group("deployments-gcs")
def test_gcs_landing_and_images_equal_local(gcs, tiny_landing, tmp_path, monkeypatch, request):  # noqa: F811
    """Landing in one bucket, output files in another; Spark's tables on a local root (no GCS connector)."""
    for key, value in gcs.environment().items():
        monkeypatch.setenv(key, value)  # the comparison below reads the buckets too
    landing, warehouse = gcs.make_bucket("hospital-landing") + "/landing", gcs.make_bucket("research-warehouse")
    gcs.filesystem().put(str(tiny_landing), landing.removeprefix("gs://"), recursive=True)
    run = run_pipeline(tmp_path, landing, "local[2]", warehouse=f"{warehouse}/warehouse",
                       tables=str(tmp_path / "tables"), extra_env=gcs.environment())
    published = gcs.filesystem().find(f"{warehouse.removeprefix('gs://')}/warehouse/deidentified")
    assert any(p.endswith(".dcm") for p in published), "no de-identified image in the bucket"
    assert_equal_to_local(run, request.getfixturevalue("local_run"))


@pytest.mark.xdist_group("deployments-gcs")
def test_missing_bucket_fails_at_the_start_with_its_name(gcs, monkeypatch):  # noqa: F811
    from dagster import Failure

    from resources.gcs import check_buckets

    for key, value in gcs.environment().items():
        monkeypatch.setenv(key, value)
    gcs.make_bucket("present-bucket")
    check_buckets(["gs://present-bucket/warehouse", "/local/path"])
    with pytest.raises(Failure, match="absent-bucket"):
        check_buckets(["gs://present-bucket/x", "gs://absent-bucket/landing"])
