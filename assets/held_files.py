"""A site-day's quarantined files, listed on its page: shared helper module of the image steps (not an asset).

After a run commits, the first `LISTED` files each site-day's quarantine tables hold (every table of the step: the
index's, the extracts', the de-identification's, the opt-out lists') reach the driver, at most `LISTED` rows a
site-day, and each becomes a row of the materialization's `quarantined_files` table: a keyed token of the landing
file, its size, sha256, the reason and the step that held it (imaging/quarantine.py). Site-days without a
quarantined file carry no table and cost no query.
"""

from __future__ import annotations

from functools import reduce
from typing import Mapping, Sequence

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema
from pyspark.sql import DataFrame, Window, functions as F

from imaging.quarantine import LISTED, STEP_TABLES, HeldFile, ensure_token_key, held, step_name


def held_files(run, quarantined: Mapping[str, int]) -> dict[str, list[HeldFile]]:
    """`date|site` -> its first `LISTED` quarantined files, for the site-days of `run` that have any."""
    if not any(quarantined.values()):
        return {}
    frames = [run.read(t).withColumn("step", F.lit(step_name(t))) for t in STEP_TABLES[run.step.asset]]
    rows = reduce(DataFrame.unionByName, frames)
    first = Window.partitionBy("date", "site").orderBy("step", "source_path")
    picked = (rows.withColumn("_n", F.row_number().over(first)).where(F.col("_n") <= LISTED)
              .select("date", "site", "source_path", "size_bytes", "sha256", "reason", "step").collect())
    token_key = ensure_token_key(run.warehouse.root, run.deid.key)
    out: dict[str, list[HeldFile]] = {}
    for row in picked:
        out.setdefault(f"{row['date']}|{row['site']}", []).append(held(token_key, row.asDict(), row["step"]))
    return out


def held_metadata(files: Sequence[HeldFile], total: int) -> dict:
    """The `quarantined_files` table of a site-day's page (and a line saying how many more there are)."""
    if not files:
        return {}
    table = MetadataValue.table(
        records=[TableRecord({"token": f.token, "bytes": f.bytes, "sha256": f.sha256, "reason": f.reason,
                              "step": f.step}) for f in files],
        schema=TableSchema(columns=[
            TableColumn("token", "string", description="keyed token of the landing file (imaging-quarantine TOKEN "
                                                       "gives its path to operators, from the identifiable zone)"),
            TableColumn("bytes", "int"), TableColumn("sha256", "string"),
            TableColumn("reason", "string", description="why it was held back: a fixed phrase"),
            TableColumn("step", "string", description="the step (its quarantine table) that held it")]))
    out = {"quarantined_files": table}
    if len(files) >= LISTED and total > len(files):
        out["quarantined_files_more"] = MetadataValue.text(
            f"first {len(files)} of {total} listed; imaging-quarantine DATE|SITE lists every one")
    return out
