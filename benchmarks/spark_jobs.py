"""The Spark jobs and SQL executions of one run of the three image assets, and where in the code each comes from.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python benchmarks/spark_jobs.py [--patients 4] [--runs 2] [--detail]

A generated hospital (one site, one day, `--patients` patients: about ten files) is materialized by the three
image assets in one run, in this process, on a fresh warehouse and Dagster instance (as tests/pipeline_runner.py
runs them), `--runs` times (the later runs re-materialize the same site-day: a warm session). Spark's own event
log (one per run) says which jobs and SQL executions ran: each job is counted under the Python line that started
it (PySpark names it as the job's call site), each SQL execution under its description. Printed per run: jobs,
SQL executions, seconds; with `--detail`, the count per call site.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def summary(folder: Path) -> tuple[collections.Counter, collections.Counter]:
    """(jobs by call site, SQL executions by description) from the Spark event logs in `folder`."""
    jobs, sql = collections.Counter(), collections.Counter()
    for log in sorted(folder.iterdir()):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event.get("Event", "")
            if kind == "SparkListenerJobStart":
                properties = event.get("Properties") or {}
                stages = event.get("Stage Infos") or [{}]
                site = properties.get("callSite.short") or stages[-1].get("Stage Name") or "?"
                jobs[site] += 1
            elif kind.endswith("SparkListenerSQLExecutionStart"):
                sql[(event.get("description") or "?")[:80]] += 1
    return jobs, sql


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--detail", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spark-jobs-"))
    events = root / "events"
    events.mkdir()
    day, site = "2024-03-01", "site-a"
    os.environ.update(IMAGING_LANDING=str(root / "landing"), IMAGING_WAREHOUSE=str(root / "warehouse"),
                      IMAGING_SITES=site, IMAGING_START_DATE=day, IMAGING_PSEUDONYM_KEY="benchmark-key-" + "k" * 20,
                      IMAGING_SPARK_MASTER="local[2]", IMAGING_MIN_K="1", SPARK_LOCAL_IP="127.0.0.1",
                      PYSPARK_SUBMIT_ARGS=f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events} "
                                          "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false "
                                          "pyspark-shell")
    sys.path[:0] = [str(ROOT)]
    import logging

    logging.getLogger("dagster").setLevel(logging.WARNING)
    from synth import generate_hospital

    summary_ = generate_hospital(root / "landing", seed=7, sites=(site,), dates=(day,),
                                 patients_per_site=args.patients)
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    from definitions import defs

    assets = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
    job = define_asset_job("images", selection=AssetSelection.assets(*assets))
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    tags = {"dagster/asset_partition_range_start": f"{day}|{site}", "dagster/asset_partition_range_end": f"{day}|{site}"}
    print(f"{len(summary_.instances)} files in one site-day; Spark event log in {events}")
    seen_jobs, seen_sql = collections.Counter(), collections.Counter()
    with DagsterInstance.ephemeral() as instance:
        for number in range(1, args.runs + 1):
            start = time.perf_counter()
            assert resolved.resolve_job_def("images").execute_in_process(instance=instance, tags=tags).success
            seconds = time.perf_counter() - start
            jobs, sql = summary(events)
            run_jobs, run_sql = jobs - seen_jobs, sql - seen_sql
            seen_jobs, seen_sql = jobs, sql
            print(f"run {number}: {sum(run_jobs.values())} Spark jobs, {sum(run_sql.values())} SQL executions, "
                  f"{seconds:.1f} s")
            if args.detail:
                for site_, n in sorted(run_jobs.items(), key=lambda kv: (-kv[1], kv[0])):
                    print(f"  {n:3d} {site_}")


if __name__ == "__main__":
    main()
