"""The production Dagster instance (platform/dagster-production.yaml) on a real PostgreSQL server.

The instance file is used unchanged: PostgreSQL storage from DAGSTER_PG_* and compute logs to a GCS
bucket on the GCS emulator. The data contract's backfill command (a single run over a range of
partitions) runs through the `dagster` CLI with DAGSTER_HOME set, as an operator runs it; the run
must be recorded in PostgreSQL and the outputs must equal the local run's. (The contract's other
command, one partition, runs in tests/test_cli.py; on this instance it would exercise nothing more.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from compare import assert_same_outputs
from conftest import DATES, SITES
from services import gcs, postgres  # noqa: F401 - pytest fixtures

REPO = Path(__file__).resolve().parents[1]
INSTANCE = REPO / "platform" / "dagster-production.yaml"
DAGSTER = str(Path(sys.executable).parent / "dagster")
PARTITIONED = "raw_image_index,linked_patient_metadata,anonymized_images"


def dagster_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([DAGSTER, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


@dataclass(frozen=True)
class Production:
    env: dict[str, str]  # DAGSTER_HOME, DAGSTER_PG_*, the bucket: what the run was launched with
    sessions_opened: int  # PostgreSQL sessions started on the instance's database during the run


@pytest.fixture(scope="module")
def production(tmp_path_factory, postgres, gcs, hospital):  # noqa: F811 - fixtures by name
    """The range command run through the production instance: its environment, the sessions it opened."""
    home = tmp_path_factory.mktemp("dagster-production-home")
    shutil.copy(INSTANCE, home / "dagster.yaml")
    bucket = gcs.make_bucket("imaging-compute-logs")
    env = {**os.environ, **postgres.environment(), **gcs.environment(),
           "DAGSTER_HOME": str(home), "DAGSTER_COMPUTE_LOG_BUCKET": bucket.removeprefix("gs://"),
           "DAGSTER_COMPUTE_LOG_PREFIX": "dagster/compute-logs",
           "IMAGING_WAREHOUSE": str(tmp_path_factory.mktemp("production-warehouse")),
           "IMAGING_SPARK_MASTER": "local[2]"}
    site = SITES[0]
    dagster_cli(["instance", "migrate"], env)  # the tables made first, as at a deployment (not the run's sessions)
    opened = sessions(postgres)
    dagster_cli(["asset", "materialize", "-m", "definitions", "--select", PARTITIONED,
                 "--partition-range", f"{DATES[0]}|{site}...{DATES[1]}|{site}"], env)
    return Production(env, sessions(postgres) - opened - 1)  # less the count's own session


def sessions(postgres) -> int:  # noqa: F811 - the fixture's server
    """Sessions the server has started on the instance's database (PostgreSQL 14+ counts them)."""
    ((count,),) = postgres.query("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
    return count


def test_instance_file_declares_postgres_queue_and_gcs_logs():
    config = yaml.safe_load(INSTANCE.read_text())
    storage = config["storage"]["custom"]
    assert (storage["module"], storage["class"]) == ("imaging.driver.instance_storage", "PooledPostgresStorage")
    assert set(storage["config"]["postgres_db"]) >= {"hostname", "username", "password", "db_name"}
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["compute_logs"]["class"] == "GCSComputeLogManager"


def test_runs_and_materializations_are_recorded_in_postgres(production, postgres, monkeypatch):  # noqa: F811
    from dagster import DagsterInstance, DagsterRunStatus

    runs = postgres.query("SELECT status, run_body FROM runs ORDER BY create_timestamp")
    assert [status for status, _ in runs] == ["SUCCESS"]
    tags = dict(postgres.query("SELECT key, value FROM run_tags"))
    assert tags["dagster/asset_partition_range_start"] == f"{DATES[0]}|{SITES[0]}"
    assert tags["dagster/asset_partition_range_end"] == f"{DATES[1]}|{SITES[0]}"
    materialized = postgres.query(
        "SELECT asset_key, partition, count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' "
        "GROUP BY asset_key, partition ORDER BY asset_key, partition")
    recorded = {(key, partition) for key, partition, _ in materialized}
    for asset in PARTITIONED.split(","):
        for date in DATES[:2]:
            assert (f'["{asset}"]', f"{date}|{SITES[0]}") in recorded, (asset, date)

    # The run's checks were recorded against their partitions too (what blocks publication reads them).
    checked = postgres.query("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_CHECK_EVALUATION'")
    assert checked[0][0] > 0

    # Its events were written on connections kept open, a few per process, not one to three opened for each event:
    # dagster-postgres's own storage opened 2.8 sessions an event on a 3-site-day run (benchmarks/bookkeeping.py
    # --storage postgres-plain: 558 for 196 events), this one 22.
    ((events,),) = postgres.query("SELECT count(*) FROM event_logs")
    opened = production.sessions_opened
    assert 0 < opened <= events / 3, (opened, events)

    # The instance loaded from DAGSTER_HOME sees the same records, through the production yaml.
    for key in ("DAGSTER_HOME", *postgres.environment(), "STORAGE_EMULATOR_HOST", "DAGSTER_COMPUTE_LOG_BUCKET",
                "DAGSTER_COMPUTE_LOG_PREFIX", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"):
        monkeypatch.setenv(key, production.env[key])
    with DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage._engine.pool).__name__ == "QueuePool"  # noqa: SLF001 - pooled
        assert type(instance.event_log_storage).__name__ == "CompactPlannedEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.pool_granularity.value == "run"
        assert concurrency.pool_config.default_pool_limit == 1  # one Spark run (warehouse writer) at a time
        assert {"key": "dagster/backfill", "limit": 1} in concurrency.run_queue_config.tag_concurrency_limits
        runs = instance.get_runs()
        assert len(runs) == 1 and all(r.status == DagsterRunStatus.SUCCESS for r in runs)


def test_compute_logs_are_in_the_gcs_bucket(production, gcs):  # noqa: F811
    fs = gcs.filesystem()
    logs = fs.find(f"{production.env['DAGSTER_COMPUTE_LOG_BUCKET']}/{production.env['DAGSTER_COMPUTE_LOG_PREFIX']}")
    assert logs, "no compute log was uploaded to the bucket"
    assert any(path.endswith((".out", ".err", ".complete")) for path in logs), logs[:5]


def test_outputs_equal_the_local_run(production, warehouse):
    pairs = [(date, SITES[0]) for date in DATES[:2]]
    outputs = assert_same_outputs(production.env["IMAGING_WAREHOUSE"], str(warehouse), pairs)
    assert any(o.kind == "bytes" and k.endswith(".dcm") for k, o in outputs.items())
    assert any(o.kind == "rows" and o.value for o in outputs.values())


def test_a_planned_check_row_holds_its_own_partition_not_the_runs(tmp_path, postgres, gcs, monkeypatch):  # noqa: F811
    """Dagster writes a PLANNED row per check and partition when a run starts, then replaces it with the
    evaluation; dagster-postgres's rows each held the run's whole partition subset (8.5 KB at 365 site-days, left on
    disk as dead rows once replaced). This instance's rows hold their own partition (a planned event stored through
    the production instance's event log, as a run's start stores it); the event log keeps the run's subset."""
    import logging
    import time

    from dagster import AssetKey, DagsterEventType, DagsterInstance, StaticPartitionsDefinition
    from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationPlanned
    from dagster._core.events import DagsterEvent
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster._serdes import deserialize_value

    from imaging.driver.instance_storage import CompactPlannedEventLogStorage

    # The override names a private method of Dagster's SQL event log: an upgrade that renames it fails here.
    assert "_store_asset_check_evaluation_planned" in vars(SqlEventLogStorage)
    assert "_store_asset_check_evaluation_planned" in vars(CompactPlannedEventLogStorage)
    keys = [f"2024-01-{day:02d}|site-a" for day in range(1, 31)]
    planned = AssetCheckEvaluationPlanned(asset_key=AssetKey("planned_probe"), check_name="probe",
                                          partitions_subset=StaticPartitionsDefinition(keys).subset_with_partition_keys(keys))
    entry = EventLogEntry(error_info=None, level=logging.DEBUG, user_message="", run_id="planned-probe-run",
                          timestamp=time.time(), dagster_event=DagsterEvent(
                              DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED.value, "planned_probe_job",
                              event_specific_data=planned))
    shutil.copy(INSTANCE, tmp_path / "dagster.yaml")
    env = {**postgres.environment(), **gcs.environment(), "DAGSTER_HOME": str(tmp_path),
           "DAGSTER_COMPUTE_LOG_BUCKET": "imaging-compute-logs", "DAGSTER_COMPUTE_LOG_PREFIX": "dagster/compute-logs"}
    dagster_cli(["instance", "migrate"], {**os.environ, **env})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with DagsterInstance.get() as instance:
        instance.event_log_storage.store_event(entry)
    ((logged,),) = postgres.query("SELECT event FROM event_logs WHERE run_id = 'planned-probe-run'")
    assert set(deserialize_value(logged).dagster_event.event_specific_data.partitions_subset.get_partition_keys()) == \
        set(keys)
    rows = postgres.query("SELECT partition, execution_status, evaluation_event FROM asset_check_executions "
                          "WHERE run_id = 'planned-probe-run' ORDER BY partition")
    assert [(partition, status) for partition, status, _ in rows] == [(key, "PLANNED") for key in keys]
    for partition, _, body in rows:
        own = deserialize_value(body).dagster_event.event_specific_data
        assert (own.check_name, list(own.partitions_subset.get_partition_keys())) == ("probe", [partition])
        assert len(body) < len(logged)  # one key, not thirty
