"""raw_image_index: one row per DICOM instance in the landing zone, read from headers only (step: imaging/steps/declared.py INDEX)."""

import dataclasses
import math

from pyspark.sql import Column, DataFrame, Window, functions as F

from assets import quality as q
from assets.partitions import SETTINGS
from assets.runner import Body, StepOutput, StepRun, held_back, tally_of, image_asset
from imaging import fs as fsx
from imaging.catalogue import INDEX_QUARANTINE, RAW_IMAGE_INDEX
from imaging.driver.run_summary import Footprint
from imaging.records import QUARANTINED, SiteDayFolder, schema_of
from imaging.steps.declared import INDEX
from imaging.steps.index import DUPLICATES, ELSEWHERE, LIST, IndexJob, IndexRules, site_day_url
from resources.spark import frame_of, map_batches


def folders(run: StepRun) -> list[SiteDayFolder]:
    return [SiteDayFolder(k.date, k.site, site_day_url(run.landing.images_root(k.site), k.site, k.date)) for k in run.keys]


def nothing_landed(run: StepRun) -> bool:
    return not any(fsx.exists(f.url) for f in folders(run))


def index(run: StepRun) -> StepOutput:
    session, landing = run.session, run.landing
    # Listing fans out from a handful of site-days to many files: list in parallel, then
    # repartition so that opening files is spread over the cluster, not fused behind the listing.
    with run.clock.stage("list"):
        sites = folders(run)
        listing = map_batches(frame_of(session, sites, schema_of(SiteDayFolder)).repartition(len(sites)), LIST).persist()
        # One row per site-day: its files and bytes (the accounting check needs them per partition).
        per_partition = listing.groupBy(q.partition_key().alias("p")).agg(
            F.count(F.lit(1)).alias("n"), F.sum("size_bytes").alias("bytes")).collect()
        listed_by_partition = {r["p"]: r["n"] for r in per_partition}
        read = {r["p"]: Footprint(r["n"], r["bytes"] or 0) for r in per_partition}
        listed, listed_bytes = sum(listed_by_partition.values()), sum(r["bytes"] or 0 for r in per_partition)
    tasks = max(1, math.ceil(listed / landing.files_per_task))
    rules = IndexRules(placeholders=frozenset(run.ctx.rules.placeholder_list), today=run.ctx.today.isoformat())
    outcomes = map_batches(listing.repartition(tasks), IndexJob(rules).step())
    # Instances indexed in site-days outside this run (one column of the table, never on the driver).
    elsewhere = run.warehouse.read(session, RAW_IMAGE_INDEX).join(run.site_days(), ["date", "site"], "left_anti")
    outcomes = one_partition_per_instance(outcomes, elsewhere).persist()
    with run.clock.stage("index"), run.progress.track(run.context.log, session, label=INDEX.asset, files=listed,
                                                      bytes=listed_bytes):
        # Read every header exactly once (the tables below are written from the persisted rows), tallied on the way.
        tally, _ = tally_of(outcomes)
    return StepOutput(
        rows={RAW_IMAGE_INDEX.name: outcomes.where(~F.expr(QUARANTINED)),
              INDEX_QUARANTINE.name: outcomes.where(QUARANTINED) if held_back(tally) else None},
        tally=tally, read=read, given={"listed": listed_by_partition},
        metadata={"run/spark_tasks": tasks}, release=[listing, outcomes])


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


# Data quality, on what was committed. `listed = indexed + quarantined` is the files_accounted check
# (ERROR, blocking): a loss stops downstream and publication, and names the partitions.
FIGURES = {
    "scans_per_patient_site_day": lambda f: q.scans_per_patient_site_day(f.committed(RAW_IMAGE_INDEX), f.ctx),
    "instances_per_series": lambda f: q.instances_per_series(f.committed(RAW_IMAGE_INDEX), f.ctx),
    "series_per_study": lambda f: q.series_per_study(f.committed(RAW_IMAGE_INDEX), f.ctx),
    "mandatory_attributes": lambda f: q.mandatory_attributes(f.committed(RAW_IMAGE_INDEX), f.ctx),
    "study_date_in_future": lambda f: q.study_date_in_future(f.committed(RAW_IMAGE_INDEX), f.ctx),
    "files_accounted": lambda f: q.files_accounted(f.given["listed"], f.committed(RAW_IMAGE_INDEX),
                                                   f.committed(INDEX_QUARANTINE), f.ctx),
    ("column_rules", "column_warnings"): lambda f: q.column_rules(f.committed(RAW_IMAGE_INDEX), INDEX.asset, f.ctx),
}

PACS_LANDING = "pacs_landing"


def index_asset(pacs_sites: bool):
    """The asset; with PACS sites configured it also depends on `pacs_landing`, whose files it reads for them (the
    lineage, and each site-day's data version names the PACS listing it was made from). Without any, the graph
    stays as it was: a dependency on an asset never materialized would make the UI warn "upstream data missing"
    at every launch of a file site's site-days."""
    step = dataclasses.replace(INDEX, also_reads=(*INDEX.also_reads, PACS_LANDING)) if pacs_sites else INDEX
    return image_asset(step, Body(idle=nothing_landed, work=index, idle_metadata=lambda run: {"run/spark_tasks": 0}), FIGURES)


raw_image_index = index_asset(bool(SETTINGS.pacs_sites))
