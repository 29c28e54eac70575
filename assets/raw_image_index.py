"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only."""

import math

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import Window, functions as F

from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.catalogue import INDEX_QUARANTINE, RAW_IMAGE_INDEX
from imaging.index import DUPLICATES, INDEX, LIST, site_day_url
from imaging.records import QUARANTINED, SiteDayFolder, schema_of
from imaging.run_summary import StageClock, StepSummary
from resources.landing import LandingZone
from resources.progress import SparkProgress
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


@asset(
    # The landing zone's site-day versions: a site-day whose files changed after this ran shows as stale.
    deps=["landing_zone"],
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    pool=WAREHOUSE_POOL,
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files and duplicate instances go to quarantine/raw_image_index with the reason.",
)
def raw_image_index(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                    warehouse: Warehouse, progress: SparkProgress) -> MaterializeResult:
    session = spark.spark_session
    keys = site_days(context)
    clock = StageClock(("list", "index", "commit"))

    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    with clock.stage("list"):
        folders = [SiteDayFolder(k.date, k.site, site_day_url(landing.root, k.site, k.date)) for k in keys]
        listing = map_batches(frame_of(session, folders, schema_of(SiteDayFolder)).repartition(len(folders)),
                              LIST).persist()
        sizes = listing.agg(F.count("*").alias("files"), F.sum("size_bytes").alias("bytes")).first()
        listed, listed_bytes = sizes["files"], sizes["bytes"] or 0
    tasks = max(1, math.ceil(listed / landing.files_per_task))
    outcomes = map_batches(listing.repartition(tasks), INDEX)

    # The duplicate rule (imaging/index.py) as a window: the first file by path keeps the instance.
    first = Window.partitionBy(*DUPLICATES.key).orderBy(*DUPLICATES.keep_first_by)
    duplicate = F.col("reason").isNull() & (F.row_number().over(first) > 1)
    outcomes = outcomes.withColumn("reason", F.when(duplicate, F.lit(DUPLICATES.reason))
                                   .otherwise(F.col("reason"))).persist()

    commit = warehouse.begin("raw_image_index")
    with clock.stage("index"), progress.track(context.log, session, label="raw_image_index", files=listed,
                                              bytes=listed_bytes):
        warehouse.stage(commit, outcomes.where(~F.expr(QUARANTINED)), RAW_IMAGE_INDEX, keys)
    with clock.stage("commit"):
        warehouse.stage(commit, outcomes.where(QUARANTINED), INDEX_QUARANTINE, keys)
        commit.build().apply()

    # One pass: the reasons are a handful of fixed phrases whatever the input size.
    tally = {r["reason"]: r["count"] for r in outcomes.groupBy("reason").count().collect()}
    listing.unpersist()
    outcomes.unpersist()
    indexed = tally.pop(None, 0)
    quarantined = sum(tally.values())
    if indexed + quarantined != listed:  # every file is indexed or quarantined, never lost
        raise RuntimeError(f"{listed} files listed but {indexed} indexed + {quarantined} quarantined")
    context.log.info(f"{len(keys)} site-days: {listed} files, {indexed} indexed, {quarantined} quarantined")
    written = warehouse.footprint(RAW_IMAGE_INDEX, keys)
    summary = StepSummary(
        partitions=len(keys), files_in=listed, bytes_in=listed_bytes, rows_out=indexed, files_out=written.files,
        bytes_out=written.bytes, quarantined=tally, stage_seconds=clock.seconds, known_reasons=(DUPLICATES.reason,),
        outputs={"table": warehouse.relative(warehouse.url(RAW_IMAGE_INDEX)),
                 "quarantine": warehouse.relative(warehouse.url(INDEX_QUARANTINE))})
    return MaterializeResult(metadata={
        **summary.values(), "spark_tasks": tasks,
        "summary": MetadataValue.md(summary.markdown("raw_image_index")),
    })
