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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

# A held connection is replaced after an hour (a server or proxy may drop idle ones), as the webserver's.
POOL_RECYCLE_SECONDS = 3600
# Extra connections while threads write at once (the run worker's and a step's event threads).
POOL_MAX_OVERFLOW = 10
# 0: no limit, as the NullPool engines have; a run's writes must not be cut short.
STATEMENT_TIMEOUT_MS = 0


class PooledPostgresStorage(DagsterPostgresStorage):
    """`DagsterPostgresStorage` whose run, event log and schedule storages keep a connection open.

    Configured as `storage: custom:` in the instance file (platform/dagster-production.yaml), with the same
    `postgres_db` / `postgres_url` settings as `storage: postgres:`.
    """

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider: Any = None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=token_provider)
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
