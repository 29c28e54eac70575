"""The warehouse: two zones of partitioned Parquet tables and files, replaced never appended.

`identifiable/` is restricted; `deidentified/` must be safe to publish. Every write goes to a
staging folder first; each materialized partition's folder is then removed and the staged one
renamed into place, so a re-run replaces exactly the partitions it covers (an empty result
leaves the partition empty, not stale) and files get deterministic names.
"""

from __future__ import annotations

import uuid
from typing import Sequence

from dagster import ConfigurableResource

from imaging import fs as fsx

IDENTIFIABLE = "identifiable"
DEIDENTIFIED = "deidentified"


def partition_dir(columns: Sequence[str], values: Sequence[str]) -> str:
    return "/".join(f"{c}={v}" for c, v in zip(columns, values))


class Warehouse(ConfigurableResource):
    root: str

    def url(self, zone: str, *parts: str) -> str:
        if zone not in (IDENTIFIABLE, DEIDENTIFIED):
            raise ValueError(f"unknown zone {zone!r}")
        return "/".join([self.root, zone, *parts])

    def staging(self, zone: str) -> str:
        """A fresh staging folder inside the zone (so its rename stays on one filesystem)."""
        return self.url(zone, "_staging", uuid.uuid4().hex)

    def replace_partitions(self, df, zone: str, table: str, columns: Sequence[str],
                           keys: Sequence[Sequence[str]], sort_by: Sequence[str]) -> None:
        """Write `df` as the whole content of partitions `keys` of `table` (Parquet)."""
        staging = self.staging(zone)
        (df.repartition(*columns).sortWithinPartitions(*columns, *sort_by)
           .write.mode("overwrite").partitionBy(*columns).parquet(staging))
        try:
            self.swap_in(staging, self.url(zone, table), [partition_dir(columns, k) for k in keys], "parquet")
        finally:
            fsx.remove(staging)

    def swap_in(self, staging: str, target: str, subdirs: Sequence[str], suffix: str | None = None) -> None:
        """Replace each `target/sub` by `staging/sub` (or remove it when nothing was staged)."""
        for sub in subdirs:
            fsx.remove(f"{target}/{sub}")
            if fsx.exists(f"{staging}/{sub}"):
                fsx.move(f"{staging}/{sub}", f"{target}/{sub}")
                if suffix:
                    _rename_parts(f"{target}/{sub}", suffix)

    def read_partitions(self, spark, zone: str, table: str, schema, columns: Sequence[str],
                        keys: Sequence[Sequence[str]] | None = None):
        """The rows of `keys` (or of the whole table), as a DataFrame with `schema`."""
        base = self.url(zone, table)
        if keys is None:
            paths = [base] if fsx.exists(base) else []
        else:
            paths = [p for p in (f"{base}/{partition_dir(columns, k)}" for k in keys) if fsx.exists(p)]
        if not paths:
            return spark.createDataFrame([], schema)
        return spark.read.schema(schema).option("basePath", base).parquet(*paths).select(*schema.fieldNames())


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
