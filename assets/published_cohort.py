"""published_cohort: versioned, checksummed research releases chosen by cohort definitions."""

import json
import math

from dagster import AssetExecutionContext, Failure, MaterializeResult, asset
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from imaging import fs as fsx
from imaging.catalogue import COHORTS, DEIDENTIFIED, manifest
from imaging.clinical import load_policy
from imaging.cohort import load_cohorts
from imaging.config import PLATFORM_DIR
from imaging.deid.options import STANDARD_REVISION
from imaging.records import ReleaseFile, schema_of
from imaging.release import CONFLICT, PUBLISH, CopyJob, WriteParquet, release_verdict, sha256_file
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse

# Manifest columns that describe the warehouse, not the research data: left out of a release.
INTERNAL = ("batch", "output_path", "size_bytes")


def _single_file(spark_dir: str, target: str, suffix: str) -> None:
    """Spark writes a folder of parts; a release wants one named file."""
    fs, path = fsx.filesystem(spark_dir)
    parts = sorted(p for p in fs.ls(path, detail=False) if p.rsplit("/", 1)[-1].startswith("part-")
                   and p.endswith(suffix))
    if len(parts) != 1:
        raise RuntimeError(f"expected one {suffix} part in {spark_dir}, found {len(parts)}")
    (part,) = parts
    fsx.move(fsx.qualify(fs, part), target)
    fsx.remove(spark_dir)


def stage_release(session, selected, staged: str, source_root: str, files_per_task: int,
                  release: dict) -> None:
    """Write one release under `staged`: images (checksums verified), metadata, release.json, SHA256SUMS."""
    tasks = max(1, math.ceil(release["images"] / files_per_task))
    copied = map_batches(selected.repartition(tasks), CopyJob(source_root, staged).step())

    file_col = F.concat_ws("/", F.lit("images"), "patient_pseudonym", "study_instance_uid",
                           F.concat("sop_instance_uid", F.lit(".dcm")))
    metadata = (selected.withColumn("file", file_col).drop(*INTERNAL)
                .select("file", *[c for c in selected.columns if c not in INTERNAL]).orderBy("file").coalesce(1))
    writer = WriteParquet(f"{staged}/metadata.parquet", to_arrow_schema(metadata.schema))
    metadata.mapInArrow(writer, "rows long").collect()  # one row: the count written
    metadata.write.option("header", True).csv(f"{staged}/_csv")
    _single_file(f"{staged}/_csv", f"{staged}/metadata.csv", ".csv")

    fsx.write_bytes(f"{staged}/release.json", json.dumps(release, indent=2, sort_keys=True).encode() + b"\n")
    extra = [ReleaseFile(name, sha256_file(f"{staged}/{name}"))
             for name in ("metadata.parquet", "metadata.csv", "release.json")]
    sums = copied.unionByName(frame_of(session, extra, schema_of(ReleaseFile))).orderBy("path")
    sums.select(F.concat_ws("  ", "sha256", "path")).coalesce(1).write.text(f"{staged}/_sums")
    _single_file(f"{staged}/_sums", f"{staged}/SHA256SUMS", ".txt")


@asset(
    deps=["anonymized_images"],
    kinds={"spark", "dicom", "parquet"},
    group_name="imaging",
    pool=WAREHOUSE_POOL,
    description="De-identified zone. For each cohort definition in platform/cohorts/: "
                "deidentified/cohorts/<name>/v<version>/ with images, metadata.parquet, metadata.csv, "
                "release.json and SHA256SUMS. Published releases are immutable.",
)
def published_cohort(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                     warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    session = spark.spark_session
    policy = load_policy()
    table = manifest(policy)
    rows = warehouse.read(session, table)
    commit = warehouse.begin("published_cohort")
    releases = {}
    for cohort in load_cohorts(PLATFORM_DIR / "cohorts"):
        selected = rows.where(cohort.sql_predicate()).persist()
        images = selected.count()
        patients = selected.select("patient_pseudonym").distinct().count()
        release = {
            "cohort": cohort.name, "release": cohort.release, "description": cohort.description,
            "selection": cohort.sql_predicate(), "images": images, "patients": patients,
            "deidentification": {"standard": f"DICOM PS3.15 Annex E (Table E.1-1, {STANDARD_REVISION})",
                                 "options": sorted(deid.options)},
            "clinical_fields": list(policy.output_columns),
            "files": {"images": "images/<patient>/<study>/<instance>.dcm",
                      "metadata": ["metadata.parquet", "metadata.csv"], "checksums": "SHA256SUMS (sha256sum -c)"},
        }
        relative = f"{cohort.name}/{cohort.release}"
        staged = warehouse.staged_url(commit, COHORTS, relative)
        stage_release(session, selected, staged, warehouse.zone(DEIDENTIFIED), landing.files_per_task,
                      release)
        selected.unpersist()
        target = warehouse.url(COHORTS, relative)
        published = sha256_file(f"{target}/SHA256SUMS") if fsx.exists(f"{target}/SHA256SUMS") else None
        state = release_verdict(published, sha256_file(f"{staged}/SHA256SUMS"))
        releases[cohort.name] = {"release": warehouse.relative(target), "folder": relative, "state": state,
                                 "images": images, "patients": patients}
        context.log.info(f"cohort {cohort.name} {cohort.release}: {state}, {images} images")

    conflicts = sorted(name for name, r in releases.items() if r["state"] == CONFLICT)
    if conflicts:  # nothing of this run is published: releases go out together or not at all
        raise Failure(f"cohort releases already published with other content: {', '.join(conflicts)}; releases "
                      f"are immutable: raise `version` in their definitions to publish anew")
    for name, r in releases.items():
        if r["state"] == PUBLISH:
            warehouse.stage_folders(commit, COHORTS, [r["folder"]])
    commit.build().apply()
    return MaterializeResult(metadata={
        "releases": {name: r["release"] for name, r in releases.items()},
        "images": {name: r["images"] for name, r in releases.items()},
        "patients": {name: r["patients"] for name, r in releases.items()},
        "states": {name: r["state"] for name, r in releases.items()},
    })
