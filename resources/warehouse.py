"""The warehouse: the catalogue's tables and folders under one root, written by crash-safe commits.

`identifiable/` is restricted; `deidentified/` must be safe to publish (see imaging/catalogue.py).
A run stages everything it writes, then commits it through the journal of `imaging/commit.py`:
its outputs become visible together or not at all, and each covered partition is replaced whole
(an empty result leaves the partition empty, not stale). The first thing a run does with the
warehouse is `recover`, which finishes or undoes whatever a dead run left.
"""

from __future__ import annotations

from typing import Sequence

from dagster import ConfigurableResource, InitResourceContext

from imaging import fs as fsx
from imaging.catalogue import IDENTIFIABLE, ZONES, Folder, Table, partition_dir
from imaging.commit import CommitBuilder, Recovery, recover
from resources.spark import spark_schema

# The concurrency pool of every asset that writes the warehouse: one writer at a time, which the
# commit recovery relies on (anything staged at start belongs to a dead run). See platform/dagster.yaml.
WAREHOUSE_POOL = "imaging_warehouse"


class Warehouse(ConfigurableResource):
    root: str

    def setup_for_execution(self, context: InitResourceContext) -> None:
        done = self.recover()
        if done.rolled_forward or done.staging_removed:
            context.log.warning(f"warehouse recovery: {done.rolled_forward} interrupted commits rolled forward, "
                                f"{done.staging_removed} abandoned staging folders removed")

    def zone(self, zone: str) -> str:
        if zone not in ZONES:
            raise ValueError(f"unknown zone {zone!r}")
        return f"{self.root}/{zone}"

    def url(self, entry: Table | Folder, *parts: str) -> str:
        return "/".join([self.root, entry.path, *parts])

    def relative(self, url: str) -> str:
        """A warehouse URL relative to the root: what metadata shows (never a landing path)."""
        return url[len(self.root) + 1:] if url.startswith(self.root + "/") else url

    def recover(self) -> Recovery:
        return recover(self._journal, [self.zone(z) for z in ZONES])

    def begin(self, label: str) -> CommitBuilder:
        """Start collecting one asset run's outputs; `commit.build().apply()` makes them visible."""
        return CommitBuilder.start(label, self._journal, [self.zone(z) for z in ZONES])

    @property
    def _journal(self) -> str:
        return f"{self.zone(IDENTIFIABLE)}/_journal"

    def stage(self, commit: CommitBuilder, df, table: Table, partitions: Sequence) -> None:
        """Write `df` (outcome rows) as the whole content of `partitions` of `table`, staged in `commit`.

        Rows are projected to the table's columns, clustered by partition and sorted by the
        table's key, so unchanged input gives byte-identical files.
        """
        zone = self.zone(table.zone)
        staged = f"{commit.staging(zone)}/{table.name}"
        from pyspark.sql import functions as F  # the driver's Spark; kept out of import time

        columns = table.partition_by
        rows = df.select(*[F.col(table.source_of(c)).alias(c) for c in table.columns])
        (rows.repartition(*columns).sortWithinPartitions(*columns, *table.sort_by)
             .write.mode("overwrite").partitionBy(*columns).parquet(staged))
        for key in partitions:
            sub = partition_dir(table, key)
            if fsx.exists(f"{staged}/{sub}"):
                _rename_parts(f"{staged}/{sub}", "parquet")
            commit.replace(zone, f"{table.name}/{sub}")

    def stage_folders(self, commit: CommitBuilder, folder: Folder, subfolders: Sequence[str]) -> None:
        """Swap in `<staging>/<folder>/<sub>` for each sub-folder (staged by the executors)."""
        for sub in subfolders:
            commit.replace(self.zone(folder.zone), f"{folder.name}/{sub}")

    def staged_url(self, commit: CommitBuilder, entry: Table | Folder, *parts: str) -> str:
        return "/".join([commit.staging(self.zone(entry.zone)), entry.name, *parts])

    def read(self, session, table: Table, partitions: Sequence | None = None):
        """The rows of `partitions` (or of the whole table) as a DataFrame with the table's schema."""
        schema = spark_schema(table.schema)
        base = self.url(table)
        if partitions is None:
            paths = [base] if fsx.exists(base) else []
        else:
            paths = [p for p in (f"{base}/{partition_dir(table, k)}" for k in partitions) if fsx.exists(p)]
        if not paths:
            return session.createDataFrame([], schema)
        return session.read.schema(schema).option("basePath", base).parquet(*paths).select(*schema.fieldNames())


def _rename_parts(folder: str, suffix: str) -> None:
    """Spark names part files with a random id; give them stable names and drop its markers."""
    fs, path = fsx.filesystem(folder)
    for entry in fs.ls(path, detail=False):
        name = entry.rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            fs.rm(entry)
    parts = sorted(e for e in fs.ls(path, detail=False) if e.rsplit("/", 1)[-1].startswith("part-"))
    for number, entry in enumerate(parts):
        fs.mv(entry, f"{path}/part-{number:05d}.{suffix}")
