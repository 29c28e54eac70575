"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only."""

import math

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql import Window, functions as F

from assets import schemas
from assets.partitions import PARTITIONS, SINGLE_RUN, partition_pairs
from imaging.index import index_partition, list_site_days
from resources.landing import LandingZone
from resources.spark import SparkResource
from resources.warehouse import IDENTIFIABLE, Warehouse

TABLE = "raw_image_index"
QUARANTINE = "quarantine/raw_image_index"


@asset(
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files and duplicate instances go to quarantine/raw_image_index with the reason.",
)
def raw_image_index(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                    warehouse: Warehouse) -> MaterializeResult:
    session = spark.spark_session
    pairs = partition_pairs(context)

    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    site_days = session.sparkContext.parallelize([(d, s, landing.root) for d, s in pairs], len(pairs))
    listing = session.createDataFrame(site_days.mapPartitions(list_site_days), schemas.LISTING).persist()
    listed = listing.count()
    tasks = max(1, math.ceil(listed / landing.files_per_task))
    records = session.createDataFrame(
        listing.repartition(tasks).rdd.mapPartitions(index_partition), schemas.INDEX_RECORD)

    # Two files holding the same instance in one site-day: keep the first path, quarantine the rest.
    first = Window.partitionBy("date", "site", "sop_instance_uid").orderBy("source_path")
    records = (records.withColumn("_n", F.when(F.col("status") == "indexed", F.row_number().over(first)))
               .withColumn("reason", F.when(F.col("_n") > 1, F.lit("duplicate SOP Instance UID in this site-day"))
                           .otherwise(F.col("reason")))
               .withColumn("status", F.when(F.col("_n") > 1, F.lit("quarantined")).otherwise(F.col("status")))
               .drop("_n").persist())

    index = records.where("status = 'indexed'").select(*schemas.RAW_IMAGE_INDEX.fieldNames())
    quarantine = records.where("status = 'quarantined'").select(*schemas.QUARANTINE.fieldNames())
    warehouse.replace_partitions(index, IDENTIFIABLE, TABLE, ("date", "site"), pairs, ["source_path"])
    warehouse.replace_partitions(quarantine, IDENTIFIABLE, QUARANTINE, ("date", "site"), pairs, ["source_path"])

    # One pass for both figures: (status, reason) has a handful of values whatever the input size.
    tally = records.groupBy("status", "reason").count().collect()
    reasons = {r["reason"]: r["count"] for r in tally if r["status"] == "quarantined"}
    indexed = sum(r["count"] for r in tally if r["status"] == "indexed")
    quarantined = sum(reasons.values())
    listing.unpersist()
    records.unpersist()
    if indexed + quarantined != listed:  # every file is indexed or quarantined, never lost
        raise RuntimeError(f"{listed} files listed but {indexed} indexed + {quarantined} quarantined")
    context.log.info(f"{len(pairs)} site-days: {listed} files, {indexed} indexed, {quarantined} quarantined")
    return MaterializeResult(metadata={
        "partitions": len(pairs), "files_listed": listed, "instances_indexed": indexed,
        "files_quarantined": quarantined, "quarantine_reasons": reasons, "spark_tasks": tasks,
        "table": warehouse.url(IDENTIFIABLE, TABLE),
    })
