"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only."""

import math

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import Column, DataFrame, Window, functions as F

from assets import empty_day, quality as q
from assets.checks import check_results, check_specs, quality_context, summary
from assets.governance import CODE_VERSIONS, OWNERS, definition_metadata, tags
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging import fs as fsx
from imaging.catalogue import INDEX_QUARANTINE, RAW_IMAGE_INDEX
from imaging.driver.run_summary import StageClock, StepSummary
from imaging.quality.gate import covering
from imaging.records import QUARANTINED, SiteDay, SiteDayFolder, schema_of
from imaging.steps.index import DUPLICATES, ELSEWHERE, LIST, IndexJob, IndexRules, site_day_url
from resources.deid import Deidentifier
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
    owners=OWNERS,
    tags=tags("identifiable"),
    code_version=CODE_VERSIONS["raw_image_index"],
    metadata=definition_metadata("raw_image_index"),
    pool=WAREHOUSE_POOL,
    check_specs=check_specs("raw_image_index"),
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files, instances missing a mandatory attribute (PatientID, a UID, Modality) and duplicate "
                "instances go to quarantine/raw_image_index with the reason.",
)
def raw_image_index(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                    warehouse: Warehouse, deid: Deidentifier, progress: SparkProgress) -> MaterializeResult:
    keys = site_days(context)
    clock = StageClock(("list", "index", "commit"))
    folders = [SiteDayFolder(k.date, k.site, site_day_url(landing.root, k.site, k.date)) for k in keys]
    if not any(fsx.exists(f.url) for f in folders):  # nothing landed: no Spark (assets/empty_day.py)
        return nothing_landed(context, keys, clock, warehouse, deid)
    session = spark.spark_session

    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    with clock.stage("list"):
        listing = map_batches(frame_of(session, folders, schema_of(SiteDayFolder)).repartition(len(folders)),
                              LIST).persist()
        # One row per site-day: its files and bytes (the accounting check needs them per partition).
        per_partition = listing.groupBy(q.partition_key().alias("p")).agg(
            F.count(F.lit(1)).alias("n"), F.sum("size_bytes").alias("bytes")).collect()
        listed_by_partition = {r["p"]: r["n"] for r in per_partition}
        listed, listed_bytes = sum(listed_by_partition.values()), sum(r["bytes"] or 0 for r in per_partition)
    tasks = max(1, math.ceil(listed / landing.files_per_task))
    ctx = quality_context(deid)
    rules = IndexRules(placeholders=frozenset(ctx.rules.placeholder_list), today=ctx.today.isoformat())
    outcomes = map_batches(listing.repartition(tasks), IndexJob(rules).step())
    # Instances indexed in site-days outside this run (one column of the table, never on the driver).
    elsewhere = warehouse.read(session, RAW_IMAGE_INDEX).join(frame_of(session, keys, schema_of(SiteDay)),
                                                              ["date", "site"], "left_anti")
    outcomes = one_partition_per_instance(outcomes, elsewhere).persist()

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
    context.log.info(f"{len(keys)} site-days: {listed} files, {indexed} indexed, {quarantined} quarantined")

    # Data quality, on what was committed. `listed = indexed + quarantined` is the files_accounted
    # check (ERROR, blocking): a loss stops downstream and publication, and names the partitions.
    index = warehouse.read(session, RAW_IMAGE_INDEX, keys)
    held = warehouse.read(session, INDEX_QUARANTINE, keys)
    checks = [q.scans_per_patient_site_day(index, ctx), q.instances_per_series(index, ctx),
              q.series_per_study(index, ctx), q.mandatory_attributes(index, ctx), q.study_date_in_future(index, ctx),
              q.files_accounted(listed_by_partition, index, held, ctx), *q.column_rules(index, "raw_image_index", ctx)]
    partitions = [f"{k.date}|{k.site}" for k in keys]
    checks = [covering(o, partitions) for o in checks]

    written = warehouse.footprint(RAW_IMAGE_INDEX, keys)
    step = StepSummary(
        partitions=len(keys), files_in=listed, bytes_in=listed_bytes, rows_out=indexed, files_out=written.files,
        bytes_out=written.bytes, quarantined=tally, stage_seconds=clock.seconds, known_reasons=(DUPLICATES.reason, ELSEWHERE.reason),
        outputs={"table": warehouse.relative(warehouse.url(RAW_IMAGE_INDEX)),
                 "quarantine": warehouse.relative(warehouse.url(INDEX_QUARANTINE))})
    return MaterializeResult(metadata={
        **step.values(), "spark_tasks": tasks, "table_unchanged": False, **summary(checks),
        **deid.run_metadata(),  # which key keyed the batch tokens and checks: its fingerprint, never the key
        "summary": MetadataValue.md(step.markdown("raw_image_index")),
    }, check_results=check_results(checks, context.log))


def one_partition_per_instance(outcomes: DataFrame, elsewhere: DataFrame) -> DataFrame:
    """The duplicate rules of imaging/steps/index.py as windows: a second file of an instance in one site-day
    (DUPLICATES), then one in another site-day of the run or already indexed in a site-day outside
    it (`elsewhere`, rows of the table; ELSEWHERE), is quarantined with the rule's reason."""
    def later_copy(rule) -> Column:
        first = Window.partitionBy(*rule.key, F.col("reason").isNull()).orderBy(*rule.keep_first_by)
        return F.col("reason").isNull() & (F.row_number().over(first) > 1)

    for rule in (DUPLICATES, ELSEWHERE):
        outcomes = outcomes.withColumn("reason", F.when(later_copy(rule), F.lit(rule.reason)).otherwise(F.col("reason")))
    indexed = elsewhere.select("sop_instance_uid").distinct().withColumn("_elsewhere", F.lit(True))
    return (outcomes.join(indexed, "sop_instance_uid", "left")
            .withColumn("reason", F.when(F.col("reason").isNull() & F.col("_elsewhere"), F.lit(ELSEWHERE.reason))
                        .otherwise(F.col("reason")))
            .select(*outcomes.columns))


def nothing_landed(context: AssetExecutionContext, keys, clock: StageClock, warehouse: Warehouse,
                   deid: Deidentifier) -> MaterializeResult:
    """No site-day folder in the landing zone: every partition is emptied (through the journal) and
    every check reports an empty site-day, with no Spark session."""
    with clock.stage("commit"):
        emptied = empty_day.commit_empty(warehouse, "raw_image_index",
                                         [(RAW_IMAGE_INDEX, keys), (INDEX_QUARANTINE, keys)])
    outputs = {"table": warehouse.url(RAW_IMAGE_INDEX), "quarantine": warehouse.url(INDEX_QUARANTINE)}
    return empty_day.answer(context, "raw_image_index", q.RAW, keys, emptied, "nothing landed", clock, warehouse,
                            deid, outputs, {"spark_tasks": 0}, known_reasons=(DUPLICATES.reason, ELSEWHERE.reason))
