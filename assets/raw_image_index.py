"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only."""

import math

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql import Window, functions as F

from assets.governance import CODE_VERSIONS, OWNERS, definition_metadata, tags
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.catalogue import INDEX_QUARANTINE, RAW_IMAGE_INDEX
from imaging.index import DUPLICATES, INDEX, LIST, site_day_url
from imaging.records import QUARANTINED, SiteDayFolder, schema_of
from resources.landing import LandingZone
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


@asset(
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    owners=OWNERS,
    tags=tags("identifiable"),
    code_version=CODE_VERSIONS["raw_image_index"],
    metadata=definition_metadata("raw_image_index"),
    pool=WAREHOUSE_POOL,
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files and duplicate instances go to quarantine/raw_image_index with the reason.",
)
def raw_image_index(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                    warehouse: Warehouse) -> MaterializeResult:
    session = spark.spark_session
    keys = site_days(context)

    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    folders = [SiteDayFolder(k.date, k.site, site_day_url(landing.root, k.site, k.date)) for k in keys]
    listing = map_batches(frame_of(session, folders, schema_of(SiteDayFolder)).repartition(len(folders)),
                          LIST).persist()
    listed = listing.count()
    tasks = max(1, math.ceil(listed / landing.files_per_task))
    outcomes = map_batches(listing.repartition(tasks), INDEX)

    # The duplicate rule (imaging/index.py) as a window: the first file by path keeps the instance.
    first = Window.partitionBy(*DUPLICATES.key).orderBy(*DUPLICATES.keep_first_by)
    duplicate = F.col("reason").isNull() & (F.row_number().over(first) > 1)
    outcomes = outcomes.withColumn("reason", F.when(duplicate, F.lit(DUPLICATES.reason))
                                   .otherwise(F.col("reason"))).persist()

    commit = warehouse.begin("raw_image_index")
    warehouse.stage(commit, outcomes.where(~F.expr(QUARANTINED)), RAW_IMAGE_INDEX, keys)
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
    return MaterializeResult(metadata={
        "partitions": len(keys), "files_listed": listed, "instances_indexed": indexed,
        "files_quarantined": quarantined, "quarantine_reasons": tally, "spark_tasks": tasks,
        "table": warehouse.relative(warehouse.url(RAW_IMAGE_INDEX)),
    })
