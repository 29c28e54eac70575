"""The warehouse: the catalogue's tables and folders under one root, written by crash-safe commits.

`identifiable/` is restricted; `deidentified/` must be safe to publish (see imaging/catalogue.py).
A run stages everything it writes, then commits it through the journal of `imaging/driver/commit.py`:
its outputs become visible together or not at all, and each covered partition is replaced whole
(an empty result leaves the partition empty, not stale). The first thing a run does with the
warehouse is `recover`, which finishes or undoes whatever a dead run left.
"""

from __future__ import annotations

from typing import Sequence

from dagster import ConfigurableResource, InitResourceContext

from imaging import fs as fsx
from imaging.catalogue import DEIDENTIFIED, IDENTIFIABLE, ZONES, Folder, Table, partition_dir
from imaging.driver.commit import CommitBuilder, Recovery, recover
from imaging.driver.run_summary import Footprint
from resources.gcs import check_buckets
from resources.spark import project, spark_schema

# The concurrency pool of every asset that writes the warehouse: one writer at a time, which the
# commit recovery relies on (anything staged at start belongs to a dead run). See platform/dagster.yaml.
WAREHOUSE_POOL = "imaging_warehouse"


class Warehouse(ConfigurableResource):
    """Files (de-identified DICOM, releases) under `root`; Spark's Parquet tables under `tables`.

    `tables` defaults to `root`. They differ when Spark cannot write the files' store: Spark's
    Parquet needs the Hadoop GCS connector for gs://, while files go through fsspec (gcsfs), so
    without the connector `root` may be gs:// and `tables` a cluster path (IMAGING_TABLES).
    """

    root: str
    tables: str | None = None

    @property
    def tables_root(self) -> str:
        return self.tables or self.root

    def setup_for_execution(self, context: InitResourceContext) -> None:
        check_buckets([self.root, self.tables_root])
        done = self.recover()
        if done.rolled_forward or done.staging_removed:
            context.log.warning(f"warehouse recovery: {done.rolled_forward} interrupted commits rolled forward, "
                                f"{done.staging_removed} abandoned staging folders removed")

    def zone(self, zone: str) -> str:
        """A zone's folder of files."""
        if zone not in ZONES:
            raise ValueError(f"unknown zone {zone!r}")
        return f"{self.root}/{zone}"

    def table_zone(self, zone: str) -> str:
        """A zone's folder of Spark tables (the files' zone unless `tables` is set)."""
        if zone not in ZONES:
            raise ValueError(f"unknown zone {zone!r}")
        return f"{self.tables_root}/{zone}"

    def url(self, entry: Table | Folder, *parts: str) -> str:
        base = self.tables_root if isinstance(entry, Table) else self.root
        return "/".join([base, entry.path, *parts])

    def relative(self, url: str) -> str:
        """A warehouse URL relative to its root: what metadata shows (never a landing path)."""
        for base in (self.root, self.tables_root):
            if url.startswith(base + "/"):
                return url[len(base) + 1:]
        return url

    def _zone_roots(self) -> list[str]:
        """Every folder a commit swaps within: the zones of the files and, if apart, of the tables."""
        roots = [self.zone(z) for z in ZONES]
        return roots + [r for r in (self.table_zone(z) for z in ZONES) if r not in roots]

    def recover(self) -> Recovery:
        return recover(self._journal, self._zone_roots())

    def begin(self, label: str) -> CommitBuilder:
        """Start collecting one asset run's outputs; `commit.build().apply()` makes them visible."""
        return CommitBuilder.start(label, self._journal, self._zone_roots())

    def scratch(self, commit: CommitBuilder, name: str) -> str:
        """A folder Spark may write (beside the tables) for a file that then moves into the files."""
        return f"{commit.staging(self.table_zone(DEIDENTIFIED))}/_scratch/{name}"

    @property
    def _journal(self) -> str:
        return f"{self.table_zone(IDENTIFIABLE)}/_journal"

    def stage(self, commit: CommitBuilder, df, table: Table, partitions: Sequence) -> None:
        """Write `df` (outcome rows) as the whole content of `partitions` of `table`, staged in `commit`.

        Rows are projected to the table's columns, clustered by partition and sorted by the
        table's key, so unchanged input gives byte-identical files. Rows of a single partition (a run of one
        site-day, the common case) are gathered into one task without a shuffle: the same file, one Spark
        job instead of two.
        """
        zone = self.table_zone(table.zone)
        staged = f"{commit.staging(zone)}/{table.name}"
        from pyspark.sql import functions as F  # the driver's Spark; kept out of import time

        columns = table.partition_by
        rows = df.select(*[F.col(table.source_of(c)).alias(c) for c in table.columns])
        clustered = rows.coalesce(1) if len(partitions) == 1 else rows.repartition(*columns)
        (clustered.sortWithinPartitions(*columns, *table.sort_by)
             .write.mode("overwrite").partitionBy(*columns).parquet(staged))
        for key in partitions:
            sub = partition_dir(table, key)
            if fsx.exists(f"{staged}/{sub}"):
                _rename_parts(f"{staged}/{sub}", "parquet")
            commit.replace(zone, f"{table.name}/{sub}")

    def stage_records(self, commit: CommitBuilder, records: Sequence, table: Table, partitions: Sequence) -> None:
        """`stage` for a few rows made on the driver (records of the table's record type): written as Parquet by
        pyarrow, one file per partition, in the layout Spark's writer gives (partition columns in the folder
        names, rows sorted by the table's key), without a Spark job."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from imaging.records import to_batch

        zone = self.table_zone(table.zone)
        staged = f"{commit.staging(zone)}/{table.name}"
        schema = table.schema
        data = pa.schema([f for f in schema if f.name not in table.partition_by])
        if records:
            rows = pa.Table.from_batches([to_batch(records, _record_schema(table))])
            rows = rows.rename_columns([_column_of(table, name) for name in rows.column_names])
            rows = rows.select(schema.names).sort_by([(c, "ascending") for c in (*table.partition_by, *table.sort_by)])
            by_partition: dict[str, list[int]] = {}
            for index, values in enumerate(zip(*(rows.column(c).to_pylist() for c in table.partition_by))):
                by_partition.setdefault(partition_dir(table, values), []).append(index)
            for sub, indices in by_partition.items():
                fs, path = fsx.filesystem(f"{staged}/{sub}/part-00000.parquet")
                fs.makedirs(fs._parent(path), exist_ok=True)
                with fs.open(path, "wb") as handle:
                    pq.write_table(rows.take(indices).select(data.names).cast(data), handle, compression="snappy")
        for key in partitions:
            commit.replace(zone, f"{table.name}/{partition_dir(table, key)}")

    def stage_empty(self, commit: CommitBuilder, table: Table, partitions: Sequence) -> None:
        """Stage `partitions` of `table` as empty, without Spark: what `stage` does for a partition
        without rows (nothing is staged for it, so the swap leaves the target empty)."""
        zone = self.table_zone(table.zone)
        for key in partitions:
            commit.replace(zone, f"{table.name}/{partition_dir(table, key)}")

    def present(self, table: Table, partitions: Sequence) -> list[str]:
        """The folders of `partitions` of `table` that exist (a partition without rows has none)."""
        base = self.url(table)
        return [p for p in (f"{base}/{partition_dir(table, k)}" for k in partitions) if fsx.exists(p)]

    def stage_folders(self, commit: CommitBuilder, folder: Folder, subfolders: Sequence[str]) -> None:
        """Swap in `<staging>/<folder>/<sub>` for each sub-folder (staged by the executors)."""
        for sub in subfolders:
            commit.replace(self.zone(folder.zone), f"{folder.name}/{sub}")

    def staged_url(self, commit: CommitBuilder, entry: Table | Folder, *parts: str) -> str:
        zone = self.table_zone(entry.zone) if isinstance(entry, Table) else self.zone(entry.zone)
        return "/".join([commit.staging(zone), entry.name, *parts])

    def footprint(self, table: Table, partitions: Sequence) -> Footprint:
        """Parquet files and bytes of `partitions` of `table` as committed (for the run's metadata)."""
        total = Footprint()
        for key in partitions:
            parts = [size for url, size in fsx.list_files(f"{self.url(table)}/{partition_dir(table, key)}")
                     if url.endswith(".parquet")]
            total += Footprint(len(parts), sum(parts))
        return total

    def read(self, session, table: Table, partitions: Sequence | None = None):
        """The rows of `partitions` (or of the whole table) as a DataFrame with the table's schema."""
        schema = spark_schema(table.schema)
        base = self.url(table)
        if partitions is None:
            paths = [base] if fsx.exists(base) else []
        else:
            paths = self.present(table, partitions)
        if not paths:
            return session.createDataFrame([], schema)
        # A DataFrame cached over this table (by anyone) would answer for these paths with rows from
        # before the latest commit: refresh, so reads always see what is committed now.
        session.catalog.refreshByPath(base)
        frame = session.read.schema(schema).option("basePath", base).parquet(*paths)
        # Spark puts partition columns last, as the catalogue's schemas do: a projection only when they differ.
        names = schema.fieldNames()
        return frame if frame.columns == names else project(frame, names)


def _record_schema(table: Table):
    from imaging.records import schema_of

    return schema_of(table.record)


def _column_of(table: Table, field: str) -> str:
    """The table column a record field is written to (the inverse of `Table.source_of`)."""
    return next((column for column, source in table.renamed.items() if source == field), field)


def _rename_parts(folder: str, suffix: str) -> None:
    """Spark names part files with a random id; give them stable names and drop its markers."""
    fs, path = fsx.filesystem(folder)
    for entry in fs.ls(path, detail=False):
        name = entry.rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            fs.rm(entry)
    parts = sorted(e for e in fs.ls(path, detail=False) if e.rsplit("/", 1)[-1].startswith("part-"))
    for number, entry in enumerate(parts):
        fsx.relocate(fs, entry, f"{path}/part-{number:05d}.{suffix}")
