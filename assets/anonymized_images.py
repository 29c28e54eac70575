"""anonymized_images: every linked image rewritten de-identified (PS3.15 Annex E), with a manifest."""

import datetime as dt
import math

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql import functions as F

from assets.governance import CODE_VERSIONS, OWNERS, definition_metadata, tags
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.anonymize import AnonymizeJob, batch_name
from imaging.catalogue import ANONYMIZE_QUARANTINE, ANONYMIZED_FILES, DEIDENTIFIED, LEDGER, LINKED, manifest
from imaging.clinical import load_policy
from imaging.datacard import DeidSummary
from imaging.records import QUARANTINED
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


def _started(context: AssetExecutionContext) -> str:
    """When this run started (ISO 8601, UTC), from the instance's run record; now if it has none."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    start = record.start_time if record is not None and record.start_time else None
    start = start or dt.datetime.now(dt.timezone.utc).timestamp()
    return dt.datetime.fromtimestamp(start, dt.timezone.utc).replace(microsecond=0).isoformat()


@asset(
    deps=["linked_patient_metadata"],
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "dicom", "parquet"},
    group_name="imaging",
    owners=OWNERS,
    tags=tags("deidentified"),
    code_version=CODE_VERSIONS["anonymized_images"],
    metadata=definition_metadata("anonymized_images"),
    pool=WAREHOUSE_POOL,
    description="De-identified zone. Every linked image de-identified to DICOM PS3.15 Annex E under keyed "
                "pseudonyms, in an opaque batch folder per site-day, with a manifest; the source-to-output "
                "ledger and quarantined files stay in the identifiable zone.",
)
def anonymized_images(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                      warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    session = spark.spark_session
    keys = site_days(context)
    policy = load_policy()
    linked = warehouse.read(session, LINKED, keys)

    commit = warehouse.begin("anonymized_images")
    job = AnonymizeJob(deid.pseudonym_key, deid.default_issuer, tuple(deid.options), policy,
                       staging=commit.staging(warehouse.zone(DEIDENTIFIED)))
    images = linked.count()
    tasks = max(1, math.ceil(images / landing.files_per_task))
    outcomes = map_batches(linked.repartition(tasks), job.step()).persist()
    outcomes.count()  # run the writes exactly once; every table below reads the persisted outcome

    published = outcomes.where(~F.expr(QUARANTINED))
    pseudonymizer = deid.pseudonymizer()
    batches = [batch_name(pseudonymizer, k.date, k.site) for k in keys]
    warehouse.stage_folders(commit, ANONYMIZED_FILES, batches)
    warehouse.stage(commit, published, manifest(policy), [{"batch": b} for b in batches])
    # The provenance ledger: each published image with the run, code and profile that made it.
    provenance = {"deid_profile": DeidSummary.from_options(deid.options).label,
                  "deid_options": ",".join(deid.options), "code_version": CODE_VERSIONS["anonymized_images"],
                  "run_id": context.run.run_id, "run_started_at": _started(context)}
    warehouse.stage(commit, published.withColumns({k: F.lit(v) for k, v in provenance.items()}), LEDGER, keys)
    warehouse.stage(commit, outcomes.where(QUARANTINED), ANONYMIZE_QUARANTINE, keys)
    commit.build().apply()

    # One pass: the reasons are a handful of fixed phrases whatever the input size.
    tally = {r["reason"]: r["count"] for r in outcomes.groupBy("reason").count().collect()}
    outcomes.unpersist()
    done = tally.pop(None, 0)
    held = sum(tally.values())
    if done + held != images:
        raise RuntimeError(f"{images} images in but {done} published + {held} quarantined")
    context.log.info(f"{images} images: {done} published de-identified, {held} quarantined")
    return MaterializeResult(metadata={
        "images_in": images, "images_published": done, "images_quarantined": held, "quarantine_reasons": tally,
        "deid_options": ", ".join(deid.options) or "basic profile only", "spark_tasks": tasks,
        "manifest": warehouse.relative(warehouse.url(manifest(policy))),
    })
