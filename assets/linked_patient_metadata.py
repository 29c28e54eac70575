"""linked_patient_metadata: each indexed image with its patient's as-of clinical record."""

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql import functions as F

from assets import schemas
from assets.partitions import PARTITIONS, SINGLE_RUN, partition_pairs
from assets.raw_image_index import TABLE as INDEX_TABLE
from imaging.clinical import extract_date, extract_partition
from resources.landing import LandingZone
from resources.spark import SparkResource
from resources.warehouse import IDENTIFIABLE, Warehouse

TABLE = "linked_patient_metadata"
QUARANTINE = "quarantine/clinical_extracts"


def _extracts(landing: LandingZone, pairs) -> list[tuple[str, str, str]]:
    """(site, date, url) of every dated extract a site needs: those on or before its last date."""
    last = {}
    for date, site in pairs:
        last[site] = max(last.get(site, date), date)
    found = []
    for site, until in sorted(last.items()):
        for url in landing.clinical_extracts(site):
            day = extract_date(url)
            if day is not None and day <= until:
                found.append((site, day, url))
    return found


@asset(
    deps=["raw_image_index"],
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    description="Identifiable zone. Each indexed image joined to its patient's latest clinical record "
                "dated on or before the image's date (site extracts); images with no record are kept "
                "with has_clinical_record = false.",
)
def linked_patient_metadata(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                            warehouse: Warehouse) -> MaterializeResult:
    session = spark.spark_session
    pairs = partition_pairs(context)
    images = warehouse.read_partitions(session, IDENTIFIABLE, INDEX_TABLE, schemas.RAW_IMAGE_INDEX,
                                       ("date", "site"), pairs)

    extracts = _extracts(landing, pairs)
    parsed = session.sparkContext.parallelize(extracts, max(1, len(extracts) // 16 + 1)) \
        .mapPartitions(extract_partition).persist()
    clinical = session.createDataFrame(parsed.filter(lambda r: r[0] == "row").map(lambda r: r[1:]),
                                       schemas.CLINICAL_ROW)
    # Only the extract of a partition's own day is accounted to it, so each file counts once.
    wanted = set(pairs)
    bad = [(r[3], None, None, r[4], r[2], r[1]) for r in parsed.filter(lambda r: r[0] == "quarantined").collect()
           if (r[2], r[1]) in wanted]  # broken extracts: at most one per site-day

    # As-of join on the distinct (date, site, patient) keys, aggregated with max_by rather than
    # grouping whole keys: the latest extract on or before the date, the last row within it.
    keys = images.select("date", "site", "patient_id").where("patient_id IS NOT NULL").distinct()
    as_of = (keys.join(clinical, ["site", "patient_id"])
             .where(F.col("extract_date") <= F.col("date"))
             .groupBy("date", "site", "patient_id")
             .agg(F.max_by(F.struct("extract_date", "clinical"), F.struct("extract_date", "row_number")).alias("rec"))
             .select("date", "site", "patient_id", F.col("rec.extract_date").alias("clinical_extract_date"),
                     F.col("rec.clinical").alias("clinical")))
    linked = (images.join(as_of, ["date", "site", "patient_id"], "left")
              .withColumn("has_clinical_record", F.col("clinical_extract_date").isNotNull())
              .select(*schemas.LINKED.fieldNames()).persist())

    warehouse.replace_partitions(linked, IDENTIFIABLE, TABLE, ("date", "site"), pairs, ["source_path"])
    warehouse.replace_partitions(session.createDataFrame(bad, schemas.QUARANTINE), IDENTIFIABLE, QUARANTINE,
                                 ("date", "site"), pairs, ["source_path"])
    stats = linked.agg(F.count("*").alias("images"),
                       F.sum(F.col("has_clinical_record").cast("int")).alias("linked")).first()
    images_n, linked_n = stats["images"], stats["linked"] or 0
    linked.unpersist()
    parsed.unpersist()
    context.log.info(f"{images_n} images, {linked_n} with a clinical record, {len(bad)} extracts quarantined")
    return MaterializeResult(metadata={
        "images": images_n, "images_with_clinical_record": linked_n,
        "images_without_clinical_record": images_n - linked_n,
        "extracts_read": len(extracts), "extracts_quarantined": len(bad),
        "table": warehouse.url(IDENTIFIABLE, TABLE),
    })
