"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only."""

import math

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql import Window, functions as F

from assets import quality as q
from assets.checks import check_results, check_specs, quality_context, summary
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.catalogue import INDEX_QUARANTINE, RAW_IMAGE_INDEX
from imaging.index import DUPLICATES, INDEX, LIST, site_day_url
from imaging.quality import covering
from imaging.records import QUARANTINED, SiteDayFolder, schema_of
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


@asset(
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    pool=WAREHOUSE_POOL,
    check_specs=check_specs("raw_image_index"),
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files and duplicate instances go to quarantine/raw_image_index with the reason.",
)
def raw_image_index(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                    warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    session = spark.spark_session
    keys = site_days(context)

    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    folders = [SiteDayFolder(k.date, k.site, site_day_url(landing.root, k.site, k.date)) for k in keys]
    listing = map_batches(frame_of(session, folders, schema_of(SiteDayFolder)).repartition(len(folders)),
                          LIST).persist()
    listed = listing.count()
    listed_by_partition = {r["p"]: r["n"] for r in listing.groupBy(q.partition_key().alias("p"))
                           .agg(F.count(F.lit(1)).alias("n")).collect()}  # one row per site-day
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
    context.log.info(f"{len(keys)} site-days: {listed} files, {indexed} indexed, {quarantined} quarantined")

    # Data quality, on what was committed. `listed = indexed + quarantined` is the files_accounted
    # check (ERROR, blocking): a loss stops downstream and publication, and names the partitions.
    index = warehouse.read(session, RAW_IMAGE_INDEX, keys)
    held = warehouse.read(session, INDEX_QUARANTINE, keys)
    ctx = quality_context(deid)
    outcomes = [q.scans_per_patient_site_day(index, ctx), q.instances_per_series(index, ctx),
                q.series_per_study(index, ctx), q.mandatory_attributes(index, ctx), q.study_date_in_future(index, ctx),
                q.files_accounted(listed_by_partition, index, held, ctx), *q.column_rules(index, "raw_image_index", ctx)]
    partitions = [f"{k.date}|{k.site}" for k in keys]
    outcomes = [covering(o, partitions) for o in outcomes]
    return MaterializeResult(metadata={
        "partitions": len(keys), "files_listed": listed, "instances_indexed": indexed,
        "files_quarantined": quarantined, "quarantine_reasons": tally, "spark_tasks": tasks,
        "table": warehouse.relative(warehouse.url(RAW_IMAGE_INDEX)), **summary(outcomes),
    }, check_results=check_results(outcomes, context.log))
