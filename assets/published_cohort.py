"""published_cohort: versioned, checksummed research releases chosen by cohort definitions."""

import json
import math

from dagster import AssetExecutionContext, Failure, MaterializeResult, asset
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from assets.anonymized_images import MANIFEST, load_policy, manifest_schema
from imaging import fs as fsx
from imaging.clinical import ClinicalPolicy
from imaging.cohort import CohortDefinition, load_cohorts
from imaging.config import PLATFORM_DIR
from imaging.release import copy_partition, sha256_file
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource
from resources.warehouse import DEIDENTIFIED, Warehouse

SUMS = StructType([StructField("path", StringType(), False), StructField("sha256", StringType(), False)])
# Manifest columns that describe the warehouse, not the research data: left out of a release.
INTERNAL = ("batch", "output_path", "size_bytes")


def _single_file(spark_dir: str, target: str, suffix: str) -> None:
    """Spark writes a folder of parts; a release wants one named file."""
    fs, path = fsx.filesystem(spark_dir)
    parts = sorted(p for p in fs.ls(path, detail=False) if p.rsplit("/", 1)[-1].startswith("part-")
                   and p.endswith(suffix))
    if len(parts) != 1:
        raise RuntimeError(f"expected one {suffix} part in {spark_dir}, found {len(parts)}")
    fsx.move(fsx.qualify(fs, parts[0]), target)
    fsx.remove(spark_dir)


def build_release(session, cohort: CohortDefinition, manifest, policy: ClinicalPolicy, warehouse: Warehouse,
                  deid: Deidentifier, files_per_task: int) -> dict:
    """Stage one cohort's release, then publish it, or confirm the published one is identical."""
    staging = warehouse.staging(DEIDENTIFIED)
    selected = manifest.where(cohort.sql_predicate()).persist()
    images = selected.count()
    source = warehouse.url(DEIDENTIFIED)
    tasks = max(1, math.ceil(images / files_per_task))
    copied = session.createDataFrame(
        selected.repartition(tasks).rdd.mapPartitions(lambda rows: copy_partition(source, staging, rows)), SUMS)

    file_col = F.concat_ws("/", F.lit("images"), "patient_pseudonym", "study_instance_uid",
                           F.concat("sop_instance_uid", F.lit(".dcm")))
    metadata = (selected.withColumn("file", file_col).drop(*INTERNAL)
                .select("file", *[c for c in selected.columns if c not in INTERNAL]).orderBy("file").coalesce(1))
    metadata.write.parquet(f"{staging}/_parquet")
    _single_file(f"{staging}/_parquet", f"{staging}/metadata.parquet", ".parquet")
    metadata.write.option("header", True).csv(f"{staging}/_csv")
    _single_file(f"{staging}/_csv", f"{staging}/metadata.csv", ".csv")

    patients = selected.select("patient_pseudonym").distinct().count()
    release = {
        "cohort": cohort.name, "release": cohort.release, "description": cohort.description,
        "selection": cohort.sql_predicate(), "images": images, "patients": patients,
        "deidentification": {"standard": "DICOM PS3.15 Annex E (Table E.1-1, 2024b)",
                             "options": sorted(deid.options)},
        "clinical_fields": list(policy.output_columns),
        "files": {"images": "images/<patient>/<study>/<instance>.dcm", "metadata": ["metadata.parquet", "metadata.csv"],
                  "checksums": "SHA256SUMS (sha256sum -c)"},
    }
    fsx.write_bytes(f"{staging}/release.json", json.dumps(release, indent=2, sort_keys=True).encode() + b"\n")
    extra = [(name, sha256_file(f"{staging}/{name}")) for name in ("metadata.parquet", "metadata.csv", "release.json")]
    sums = copied.unionByName(session.createDataFrame(extra, SUMS)).orderBy("path")
    sums.select(F.concat_ws("  ", "sha256", "path")).coalesce(1).write.text(f"{staging}/_sums")
    _single_file(f"{staging}/_sums", f"{staging}/SHA256SUMS", ".txt")
    selected.unpersist()

    target = warehouse.url(DEIDENTIFIED, "cohorts", cohort.name, cohort.release)
    try:
        if fsx.exists(target):
            if sha256_file(f"{target}/SHA256SUMS") != sha256_file(f"{staging}/SHA256SUMS"):
                raise Failure(f"cohort {cohort.name} release {cohort.release} is already published with other "
                              f"content; releases are immutable: raise `version` in its definition to publish anew")
            state = "unchanged"
        else:
            fsx.move(staging, target)
            state = "published"
    finally:
        fsx.remove(staging)
    return {"release": target, "state": state, "images": images, "patients": patients}


@asset(
    deps=["anonymized_images"],
    kinds={"spark", "dicom", "parquet"},
    group_name="imaging",
    description="De-identified zone. For each cohort definition in platform/cohorts/: "
                "deidentified/cohorts/<name>/v<version>/ with images, metadata.parquet, metadata.csv, "
                "release.json and SHA256SUMS. Published releases are immutable.",
)
def published_cohort(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                     warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    session = spark.spark_session
    policy = load_policy()
    manifest = warehouse.read_partitions(session, DEIDENTIFIED, MANIFEST, manifest_schema(policy), ("batch",))
    releases = {}
    for cohort in load_cohorts(PLATFORM_DIR / "cohorts"):
        releases[cohort.name] = build_release(session, cohort, manifest, policy, warehouse, deid,
                                               landing.files_per_task)
        context.log.info(f"cohort {cohort.name} {cohort.release}: {releases[cohort.name]['state']}, "
                         f"{releases[cohort.name]['images']} images")
    return MaterializeResult(metadata={
        "releases": {name: r["release"] for name, r in releases.items()},
        "images": {name: r["images"] for name, r in releases.items()},
        "patients": {name: r["patients"] for name, r in releases.items()},
        "states": {name: r["state"] for name, r in releases.items()},
    })
