"""anonymized_images: every linked image rewritten de-identified (PS3.15 Annex E), with a manifest."""

import math

from dagster import AssetExecutionContext, MaterializeResult, asset
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from assets import schemas
from assets.linked_patient_metadata import TABLE as LINKED_TABLE
from assets.partitions import PARTITIONS, SINGLE_RUN, partition_pairs
from imaging import fs as fsx
from imaging.anonymize import FILES, MANIFEST_FIELDS, AnonymizeJob, anonymize_partition
from imaging.clinical import ClinicalPolicy
from imaging.config import read_yaml
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource
from resources.warehouse import DEIDENTIFIED, IDENTIFIABLE, Warehouse

MANIFEST = "anonymized_images/manifest"
LEDGER = "anonymization_ledger"
QUARANTINE = "quarantine/anonymized_images"
_TYPES = {"rows": IntegerType(), "columns": IntegerType(), "number_of_frames": IntegerType(),
          "size_bytes": LongType(), "has_clinical_record": BooleanType()}


def manifest_schema(policy: ClinicalPolicy) -> StructType:
    """The de-identified manifest: file facts, pseudonymous ids, policy-approved clinical fields."""
    fields = [StructField(f, _TYPES.get(f, StringType()), True) for f in MANIFEST_FIELDS]
    fields += [StructField(c, schemas.SPARK_TYPES[t], True) for c, t in policy.output_types.items()]
    return StructType([StructField("batch", StringType(), False)] + fields)


def load_policy() -> ClinicalPolicy:
    return ClinicalPolicy.from_dict(read_yaml("clinical_policy.yaml"))


@asset(
    deps=["linked_patient_metadata"],
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "dicom", "parquet"},
    group_name="imaging",
    description="De-identified zone. Every linked image de-identified to DICOM PS3.15 Annex E under keyed "
                "pseudonyms, in an opaque batch folder per site-day, with a manifest; the source-to-output "
                "ledger and quarantined files stay in the identifiable zone.",
)
def anonymized_images(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                      warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    session = spark.spark_session
    pairs = partition_pairs(context)
    policy = load_policy()
    linked = warehouse.read_partitions(session, IDENTIFIABLE, LINKED_TABLE, schemas.LINKED, ("date", "site"), pairs)
    staging = warehouse.staging(DEIDENTIFIED)
    job = AnonymizeJob(deid.pseudonym_key, deid.default_issuer, tuple(deid.options), policy, staging)

    images = linked.count()
    tasks = max(1, math.ceil(images / landing.files_per_task))
    outcome = linked.repartition(tasks).rdd.mapPartitions(lambda rows: anonymize_partition(job, rows)).persist()
    outcome.count()  # run the writes exactly once; both tables below read the persisted outcome

    published = session.createDataFrame(
        outcome.filter(lambda r: r[0] == "published").map(lambda r: r[5:]), manifest_schema(policy))
    ledger = session.createDataFrame(
        outcome.filter(lambda r: r[0] == "published").map(lambda r: (r[3], r[4], r[5], r[6], r[7], r[1], r[2])),
        StructType([StructField(n, StringType(), False) for n in
                    ("source_path", "source_sha256", "batch", "output_path", "output_sha256", "date", "site")]))
    quarantine = session.createDataFrame(
        outcome.filter(lambda r: r[0] == "quarantined").map(lambda r: (r[3], None, r[4], r[5], r[1], r[2])),
        schemas.QUARANTINE)

    pseudonymizer = deid.pseudonymizer()
    batches = [(job.batch(pseudonymizer, d, s),) for d, s in pairs]
    try:
        warehouse.swap_in(f"{staging}/{FILES}", warehouse.url(DEIDENTIFIED, FILES), [b[0] for b in batches])
        warehouse.replace_partitions(published, DEIDENTIFIED, MANIFEST, ("batch",), batches, ["output_path"])
    finally:
        fsx.remove(staging)
    warehouse.replace_partitions(ledger, IDENTIFIABLE, LEDGER, ("date", "site"), pairs, ["source_path"])
    warehouse.replace_partitions(quarantine, IDENTIFIABLE, QUARANTINE, ("date", "site"), pairs, ["source_path"])

    # One pass: (status, reason) has a handful of values whatever the input size.
    tally = outcome.map(lambda r: ((r[0], r[5] if r[0] == "quarantined" else None), 1)) \
        .reduceByKey(lambda a, b: a + b).collect()
    outcome.unpersist()
    reasons = {reason: n for (status, reason), n in tally if status == "quarantined"}
    done, held = sum(n for (status, _), n in tally if status == "published"), sum(reasons.values())
    if done + held != images:
        raise RuntimeError(f"{images} images in but {done} published + {held} quarantined")
    context.log.info(f"{images} images: {done} published de-identified, {held} quarantined")
    return MaterializeResult(metadata={
        "images_in": images, "images_published": done, "images_quarantined": held, "quarantine_reasons": reasons,
        "deid_options": ", ".join(deid.options) or "basic profile only", "spark_tasks": tasks,
        "manifest": warehouse.url(DEIDENTIFIED, MANIFEST),
    })
