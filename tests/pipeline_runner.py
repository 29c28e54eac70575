"""Run the whole pipeline once in a fresh process, configured by environment only, as a deployment runs it.

    python tests/pipeline_runner.py REPO PARTITION_KEY

Materializes the three image assets for one `date|site` partition (one run), then `published_cohort`
as an operator does (a run that holds each release, an approval of every held one, a run that
publishes what was approved), with the code location in REPO. The process's working directory is wherever the
caller puts it (the tests use an empty temporary folder): nothing may depend on it. Prints one JSON
line: where the executors imported the `imaging` package from (it must be the shipped copy).
"""

from __future__ import annotations

import json
import sys


def run(repo: str, partition: str) -> dict:
    sys.path.insert(0, repo)  # like an installed package: not the working directory
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    from definitions import defs
    from imaging.driver.config import load_settings
    from approvers import approve_all
    from imaging.governance.approval import list_held

    image_assets = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
    jobs = [define_asset_job("images", selection=AssetSelection.assets(*image_assets)),
            define_asset_job("cohort", selection=AssetSelection.assets("published_cohort"))]
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=jobs,
                          executor=defs.executor)
    tags = {"dagster/asset_partition_range_start": partition, "dagster/asset_partition_range_end": partition}

    with DagsterInstance.ephemeral() as instance:
        def execute(name: str, run_tags: dict) -> None:
            if not resolved.resolve_job_def(name).execute_in_process(instance=instance, tags=run_tags).success:
                raise SystemExit(f"run {name} failed")

        from assets.partitions import COHORTS

        cohorts = COHORTS.get_partition_keys()  # every cohort at once: one run over the range of cohort partitions
        every = {"dagster/asset_partition_range_start": cohorts[0], "dagster/asset_partition_range_end": cohorts[-1]}
        execute("images", tags)
        execute("cohort", every)  # holds each release
        for held in list_held(load_settings().warehouse):
            approve_all(held.path)  # the session's two approvers, as publish_cohorts (tests/conftest.py) signs
        execute("cohort", every)  # publishes what was approved
    return {"executor_imaging": executor_imaging_origin(defs), "security": security_settings(defs)}


def security_settings(defs) -> dict:
    """The session's authentication and encryption settings (a classic session's; a Connect server owns
    its own), values only for the two switches: never the secret."""
    import os

    if os.environ["IMAGING_SPARK_MASTER"].startswith("sc://"):
        return {}
    conf = _session(defs).sparkContext.getConf()
    return {name: conf.get(name, None) for name in ("spark.authenticate", "spark.network.crypto.enabled")}


def executor_imaging_origin(defs) -> str:
    """`imaging.__file__` as an executor sees it, through the same session the runs used."""
    import pyarrow as pa

    session = _session(defs)

    def probe(batches):
        import imaging

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"origin": imaging.__file__}])

    return session.range(1).mapInArrow(probe, "origin string").collect()[0]["origin"]


def _session(defs):
    """The runs' Spark session, from the same settings (getOrCreate returns it; nothing is shipped here)."""
    import os

    from pyspark.sql import SparkSession

    from resources.spark import session_config, spark_config

    builder = SparkSession.builder
    for key, value in session_config(spark_config(os.environ["IMAGING_SPARK_MASTER"])).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2])))
