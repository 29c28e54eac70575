"""linked_patient_metadata: each indexed image with its patient's as-of clinical record."""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import functions as F

from assets import empty_day, quality as q
from assets.checks import check_results, check_specs, quality_context, summary
from assets.linkage import as_of_join
from assets.governance import CODE_VERSIONS, OWNERS, definition_metadata, tags
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.catalogue import CLINICAL_QUARANTINE, LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX
from imaging.driver.run_summary import StageClock, StepSummary
from imaging.quality.gate import covering
from imaging.records import QUARANTINED, ClinicalExtract, ClinicalRow, SiteDay, schema_of
from imaging.steps.clinical import PLACEHOLDER_ROW, STUDY_BEFORE_BIRTH, ExtractJob, extracts_needed, load_policy
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse

EXTRACTS_PER_TASK = 16  # extracts are small: a task reads several
KNOWN_REASONS = (STUDY_BEFORE_BIRTH, PLACEHOLDER_ROW)  # always in the metadata, 0 when absent


@asset(
    deps=["raw_image_index"],
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "parquet"},
    group_name="imaging",
    owners=OWNERS,
    tags=tags("identifiable"),
    code_version=CODE_VERSIONS["linked_patient_metadata"],
    metadata=definition_metadata("linked_patient_metadata"),
    pool=WAREHOUSE_POOL,
    check_specs=check_specs("linked_patient_metadata"),
    description="Identifiable zone. Each indexed image joined to its patient's latest clinical record "
                "dated on or before the image's date (site extracts); images with no record are kept "
                "with has_clinical_record = false.",
)
def linked_patient_metadata(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                            warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    keys = site_days(context)
    clock = StageClock(("read_extracts", "link", "commit"))
    extracts = extracts_needed(keys, landing.clinical_extracts)
    own_day = {(k.date, k.site) for k in keys}
    if not warehouse.present(RAW_IMAGE_INDEX, keys) and not any((e.extract_date, e.site) in own_day
                                                                for e in extracts):
        # No image indexed and no extract of these days to account for: no Spark (assets/empty_day.py).
        return nothing_indexed(context, keys, clock, warehouse, deid)
    session = spark.spark_session
    images = warehouse.read(session, RAW_IMAGE_INDEX, keys)
    policy, ctx = load_policy(), quality_context(deid)

    with clock.stage("read_extracts"):
        reader = ExtractJob(frozenset(ctx.rules.placeholder_list)).step()
        parsed = map_batches(frame_of(session, extracts, schema_of(ClinicalExtract))
                             .repartition(max(1, len(extracts) // EXTRACTS_PER_TASK + 1)), reader).persist()
        parsed.count()
    clinical = parsed.where(~F.expr(QUARANTINED)).select(*schema_of(ClinicalRow).names)
    # An extract is read for every later date but accounted (or quarantined) once, in its own day.
    bad = parsed.where(QUARANTINED).join(frame_of(session, keys, schema_of(SiteDay)), ["date", "site"], "left_semi")

    # The link step's rule (imaging/steps/clinical.py): an image dated before its record's birth is held back.
    joined = as_of_join(images, clinical).withColumn(
        "reason", F.when(q.study_date(F.col("study_date")) < q.birth_date(policy), F.lit(STUDY_BEFORE_BIRTH))).persist()
    linked = joined.where(~F.expr(QUARANTINED)).drop("reason")
    commit = warehouse.begin("linked_patient_metadata")
    with clock.stage("link"):
        warehouse.stage(commit, linked, LINKED, keys)
    with clock.stage("commit"):
        warehouse.stage(commit, joined.where(QUARANTINED), LINK_QUARANTINE, keys)
        warehouse.stage(commit, bad, CLINICAL_QUARANTINE, keys)
        commit.build().apply()

    stats = linked.agg(F.count("*").alias("images"),
                       F.sum(F.col("has_clinical_record").cast("int")).alias("linked")).first()
    images_n, linked_n = stats["images"], stats["linked"] or 0
    reasons = {r["reason"]: r["count"] for r in bad.groupBy("reason").count().collect()}
    held_images = {r["reason"]: r["count"] for r in joined.where(QUARANTINED).groupBy("reason").count().collect()}
    bad_n = sum(reasons.values())
    joined.unpersist()
    context.log.info(f"{images_n} images linked, {linked_n} with a clinical record, {sum(held_images.values())} "
                     f"images and {bad_n} extracts or extract rows quarantined")

    # Data quality: fan-out is measured on the join's inputs (the output keeps one record per image);
    # placeholder keys in the extracts accounted to this run's own site-days (each extract once).
    own_days = frame_of(session, keys, schema_of(SiteDay)).withColumnRenamed("date", "extract_date")
    own_rows = clinical.join(own_days, ["site", "extract_date"], "left_semi")
    committed = warehouse.read(session, LINKED, keys)
    checks = [q.images_linked_accounted(images, committed, warehouse.read(session, LINK_QUARANTINE, keys), ctx),
              *q.linkage_fan_out(images, clinical, policy, ctx), q.placeholder_keys(images, own_rows, ctx),
              q.images_per_clinical_key(images, ctx), q.unlinked_share(committed, ctx),
              q.study_before_birth(committed, policy, ctx), *q.column_rules(committed, "linked_patient_metadata", ctx)]
    parsed.unpersist()
    checks = [covering(o, [f"{k.date}|{k.site}" for k in keys]) for o in checks]

    read, written = warehouse.footprint(RAW_IMAGE_INDEX, keys), warehouse.footprint(LINKED, keys)
    step = StepSummary(
        partitions=len(keys), files_in=read.files + len(extracts), bytes_in=read.bytes, rows_out=images_n,
        files_out=written.files, bytes_out=written.bytes, quarantined={**reasons, **held_images},
        stage_seconds=clock.seconds, known_reasons=KNOWN_REASONS,
        outputs={"table": warehouse.relative(warehouse.url(LINKED)),
                 "quarantine": warehouse.relative(warehouse.url(LINK_QUARANTINE)),
                 "extract_quarantine": warehouse.relative(warehouse.url(CLINICAL_QUARANTINE))})
    return MaterializeResult(metadata={
        **step.values(), "images_with_clinical_record": linked_n,
        "images_without_clinical_record": images_n - linked_n, "extracts_read": len(extracts),
        "table_unchanged": False, **summary(checks), **deid.run_metadata(),
        "summary": MetadataValue.md(step.markdown("linked_patient_metadata")),
    }, check_results=check_results(checks, context.log))


def nothing_indexed(context: AssetExecutionContext, keys, clock: StageClock, warehouse: Warehouse,
                    deid: Deidentifier) -> MaterializeResult:
    """No index partition and no extract dated on these site-days: every partition is emptied
    (through the journal) and every check reports an empty site-day, with no Spark session. Earlier
    extracts are not read: with no image there is nothing to join them to."""
    with clock.stage("commit"):
        emptied = empty_day.commit_empty(warehouse, "linked_patient_metadata",
                                         [(LINKED, keys), (LINK_QUARANTINE, keys), (CLINICAL_QUARANTINE, keys)])
    outputs = {"table": warehouse.url(LINKED), "quarantine": warehouse.url(LINK_QUARANTINE),
               "extract_quarantine": warehouse.url(CLINICAL_QUARANTINE)}
    return empty_day.answer(context, "linked_patient_metadata", q.LINKED, keys, emptied, "nothing indexed", clock,
                            warehouse, deid, outputs,
                            {"images_with_clinical_record": 0, "images_without_clinical_record": 0, "extracts_read": 0},
                            known_reasons=KNOWN_REASONS)
