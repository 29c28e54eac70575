"""The production instance's PostgreSQL storage, with a connection kept open in each process.

dagster-postgres gives its storages a `NullPool` engine everywhere but in the webserver: every event a step
writes opens a connection (TCP, SCRAM authentication, a server process forked) and closes it, and an event
takes one to three of them (the event, its asset index rows, its check execution). A site-day writes ~30
events, so a year's backfill spent most of its bookkeeping seconds logging in (issue 48: 16 ms a connection
against 0.2 ms an insert on an open one, loopback). This is dagster-postgres's own storage with each of its
three storages given the pooled engine Dagster gives the webserver (`optimize_for_webserver`: one connection
held, more opened only while several threads write at once, and closed when they are done). The webserver
still applies its own settings on top (`dagster-webserver --db-statement-timeout ...`).

What it costs: each process that opens the instance (webserver, daemon, every run worker and step process)
holds one idle connection while it lives, so `max_connections` must cover them (docs/deployment.md).

Its event log also stores a check's planned rows compactly (`CompactPlannedEventLogStorage`): Dagster writes one
row per check and partition when a run starts, each holding the planned event with the run's whole partition subset
(8.5 KB at 365 site-days), then replaces it with the check's evaluation; a year's run left ~55 KB a site-day of
replaced rows on disk (issue 48). Each row now holds its own partition only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationPlanned
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._serdes import ConfigurableClassData, serialize_value
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

# A held connection is replaced after an hour (a server or proxy may drop idle ones), as the webserver's.
POOL_RECYCLE_SECONDS = 3600
# Extra connections while threads write at once (the run worker's and a step's event threads).
POOL_MAX_OVERFLOW = 10
# 0: no limit, as the NullPool engines have; a run's writes must not be cut short.
STATEMENT_TIMEOUT_MS = 0


class CompactPlannedEventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event log whose planned check rows each carry their own partition, not the run's.

    When a run starts, Dagster inserts a PLANNED row into `asset_check_executions` for every check and partition
    of the run, each holding the whole planned event (`AssetCheckEvaluationPlanned` with the run's partition
    subset: 8.5 KB at 365 site-days, the same for all 365 rows), and replaces the row's event with the
    evaluation when the check runs. PostgreSQL keeps each replaced version until vacuumed: 23 checks a site-day
    left ~55 KB a site-day on disk after a year's run. Here each row's planned event names only its partition;
    what reads a planned row (its status, its run, its partition column) is unchanged, and the event log's own
    copy of the planned event keeps the whole subset. (Overrides a private method of Dagster's SQL event log:
    tests/test_production_instance.py fails if an upgrade renames it.)"""

    def _store_asset_check_evaluation_planned(self, event, event_id):
        planned = event.dagster_event.event_specific_data
        subset = planned.partitions_subset
        if subset is None:
            return super()._store_asset_check_evaluation_planned(event, event_id)
        empty = subset.empty_subset()

        def own(partition: str) -> str:
            mine = AssetCheckEvaluationPlanned(asset_key=planned.asset_key, check_name=planned.check_name,
                                               partitions_subset=empty.with_partition_keys([partition]))
            return serialize_value(event._replace(dagster_event=event.dagster_event._replace(event_specific_data=mine)))

        with self.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.insert().values([
                dict(asset_key=planned.asset_key.to_string(), check_name=planned.check_name, partition=partition,
                     run_id=event.run_id, execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                     evaluation_event=own(partition), evaluation_event_timestamp=self._event_insert_timestamp(event),
                     evaluation_event_storage_id=event_id)
                for partition in subset.get_partition_keys()]))


class PooledPostgresStorage(DagsterPostgresStorage):
    """`DagsterPostgresStorage` whose run, event log and schedule storages keep a connection open.

    Configured as `storage: custom:` in the instance file (platform/dagster-production.yaml), with the same
    `postgres_db` / `postgres_url` settings as `storage: postgres:`.
    """

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider: Any = None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=token_provider)
        # The subclass adds a method and no state: the event log dagster-postgres just built (its engine, its
        # tables checked) becomes one, rather than a second being built and the first dropped.
        self._event_log_storage.__class__ = CompactPlannedEventLogStorage
        # Dagster starts step processes with `spawn` and the platform's own helpers with `subprocess`, so no
        # process forked from this one writes on its sockets (as with the webserver's pooled engine).
        for storage in (self.run_storage, self.event_log_storage, self.schedule_storage):
            storage.optimize_for_webserver(statement_timeout=STATEMENT_TIMEOUT_MS, pool_recycle=POOL_RECYCLE_SECONDS,
                                           max_overflow=POOL_MAX_OVERFLOW)

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> PooledPostgresStorage:
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))
