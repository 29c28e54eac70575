"""anonymized_images: every linked image rewritten de-identified (PS3.15 Annex E), with a manifest."""

import datetime as dt
import math

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import functions as F

from assets import empty_day, quality as q
from assets.checks import check_results, check_specs, quality_context, summary
from assets.governance import CODE_VERSIONS, OWNERS, definition_metadata, tags
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from imaging.catalogue import ANONYMIZE_QUARANTINE, ANONYMIZED_FILES, DEIDENTIFIED, LEDGER, LINKED, manifest
from imaging.driver.run_summary import StageClock, StepSummary
from imaging.governance.datacard import DeidSummary
from imaging.issuers import SUSPECT, IssuerPolicy
from imaging.quality.gate import covering
from imaging.records import QUARANTINED
from imaging.steps.anonymize import AnonymizeJob, batch_name
from imaging.steps.clinical import load_policy
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.progress import SparkProgress
from resources.spark import SparkResource, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


def issuer_statuses(policy: IssuerPolicy, counted) -> dict[str, int]:
    """{status: images} from (site, issuer_of_patient_id, count) rows; every status present."""
    from imaging.issuers import STATUSES

    totals = dict.fromkeys(STATUSES, 0)
    for row in counted:
        totals[policy.resolve(row["site"], row["issuer_of_patient_id"]).status] += row["count"]
    return totals


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
    check_specs=check_specs("anonymized_images"),
    description="De-identified zone. Every linked image de-identified to DICOM PS3.15 Annex E under keyed "
                "pseudonyms, in an opaque batch folder per site-day, with a manifest; the source-to-output "
                "ledger and quarantined files stay in the identifiable zone.",
)
def anonymized_images(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                      warehouse: Warehouse, deid: Deidentifier, progress: SparkProgress) -> MaterializeResult:
    keys = site_days(context)
    clock = StageClock(("deidentify", "commit"))
    policy = load_policy()
    if not warehouse.present(LINKED, keys):  # no linked image: no Spark (assets/empty_day.py)
        return nothing_linked(context, keys, clock, policy, warehouse, deid)
    session = spark.spark_session
    linked = warehouse.read(session, LINKED, keys)

    commit = warehouse.begin("anonymized_images")
    job = AnonymizeJob(deid.key, tuple(deid.options), policy, deid.issuer_policy(),
                       deid.pixel_text_settings(), staging=commit.staging(warehouse.zone(DEIDENTIFIED)))
    sizes = linked.agg(F.count("*").alias("images"), F.sum("size_bytes").alias("bytes")).first()
    images, bytes_in = sizes["images"], sizes["bytes"] or 0
    tasks = max(1, math.ceil(images / landing.files_per_task))
    outcomes = map_batches(linked.repartition(tasks), job.step()).persist()
    with clock.stage("deidentify"), progress.track(context.log, session, label="anonymized_images", files=images,
                                                   bytes=bytes_in):
        outcomes.count()  # run the writes exactly once; every table below reads the persisted outcome

    published = outcomes.where(~F.expr(QUARANTINED))
    pseudonymizer = deid.pseudonymizer()
    batches = [batch_name(pseudonymizer, k.date, k.site) for k in keys]
    # The provenance ledger: each published image with the run, code and profile that made it.
    provenance = {"deid_profile": DeidSummary.from_options(deid.options).label,
                  "deid_options": ",".join(deid.options), "code_version": CODE_VERSIONS["anonymized_images"],
                  "run_id": context.run.run_id, "run_started_at": _started(context)}
    with clock.stage("commit"):
        warehouse.stage_folders(commit, ANONYMIZED_FILES, batches)
        warehouse.stage(commit, published, manifest(policy), [{"batch": b} for b in batches])
        warehouse.stage(commit, published.withColumns({k: F.lit(v) for k, v in provenance.items()}), LEDGER, keys)
        warehouse.stage(commit, outcomes.where(QUARANTINED), ANONYMIZE_QUARANTINE, keys)
        commit.build().apply()

    # One pass each: reasons are a handful of fixed phrases, and a site's devices write a handful of
    # IssuerOfPatientID values, whatever the input size.
    tally = {r["reason"]: r["count"] for r in outcomes.groupBy("reason").count().collect()}
    bytes_out = published.agg(F.sum("output_size_bytes").alias("bytes")).first()["bytes"] or 0
    issuers = issuer_statuses(job.issuers, linked.groupBy("site", "issuer_of_patient_id").count().collect())
    outcomes.unpersist()
    done = tally.pop(None, 0)
    held = sum(tally.values())
    context.log.info(f"{images} images: {done} published de-identified, {held} quarantined")
    suspect = sum(issuers[s] for s in SUSPECT)
    if suspect:
        context.log.warning(f"{suspect} images name an IssuerOfPatientID that is unknown or names another "
                            f"namespace; their site's configured namespace was used (platform/issuers.yaml)")

    # Data quality on what was committed: `linked = published + quarantined` is the images_accounted
    # check (ERROR, blocking); every manifest row of this run's batches has its file and sha256.
    ctx = quality_context(deid)
    by_partition = {f"{k.date}|{k.site}": b for k, b in zip(keys, batches)}
    published_rows = warehouse.read(session, manifest(policy), [{"batch": b} for b in batches])
    checks = [q.images_accounted(linked, published_rows, warehouse.read(session, ANONYMIZE_QUARANTINE, keys),
                                 by_partition, ctx),
              q.manifest_files(published_rows, warehouse.zone(DEIDENTIFIED), ctx),
              *q.column_rules(published_rows, "anonymized_images", ctx)]
    checks = [covering(o, by_partition) for o in checks]

    # Batch folders are keyed tokens of the site-day: the manifest's path names no real date or site.
    step = StepSummary(
        partitions=len(keys), files_in=images, bytes_in=bytes_in, rows_out=done, files_out=done, bytes_out=bytes_out,
        quarantined=tally, stage_seconds=clock.seconds,
        outputs={"files": warehouse.relative(warehouse.url(ANONYMIZED_FILES)),
                 "manifest": warehouse.relative(warehouse.url(manifest(policy)))})
    return MaterializeResult(metadata={
        **step.values(), "spark_tasks": tasks,
        "deid_options": ", ".join(deid.options) or "basic profile only",
        # How the files' IssuerOfPatientID compared with the sites' configured namespaces (counts only):
        # unknown or inconsistent values never split a patient, but an operator should know.
        "issuer_of_patient_id": issuers,
        **{f"issuer_of_patient_id/{status}": count for status, count in issuers.items()},
        "table_unchanged": False, **summary(checks),
        # Which key made these pseudonyms: its fingerprint, never the key (the data card records it too).
        **deid.run_metadata(),
        "summary": MetadataValue.md(step.markdown("anonymized_images")),
    }, check_results=check_results(checks, context.log))


def nothing_linked(context: AssetExecutionContext, keys, clock: StageClock, policy, warehouse: Warehouse,
                   deid: Deidentifier) -> MaterializeResult:
    """No linked partition: every batch folder, manifest, ledger and quarantine partition of these
    site-days is emptied (through the journal) and every check reports an empty site-day, with no
    Spark session."""
    batches = [batch_name(deid.pseudonymizer(), k.date, k.site) for k in keys]
    with clock.stage("commit"):
        emptied = empty_day.commit_empty(
            warehouse, "anonymized_images",
            [(manifest(policy), [{"batch": b} for b in batches]), (LEDGER, keys), (ANONYMIZE_QUARANTINE, keys)],
            folders=[(ANONYMIZED_FILES, batches)])
    issuers = issuer_statuses(deid.issuer_policy(), [])
    outputs = {"files": warehouse.url(ANONYMIZED_FILES), "manifest": warehouse.url(manifest(policy))}
    return empty_day.answer(context, "anonymized_images", q.ANONYMIZED, keys, emptied, "nothing linked", clock,
                            warehouse, deid, outputs,
                            {"spark_tasks": 0, "deid_options": ", ".join(deid.options) or "basic profile only",
                             "issuer_of_patient_id": issuers,
                             **{f"issuer_of_patient_id/{status}": count for status, count in issuers.items()}})
