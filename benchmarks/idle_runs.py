"""Runs of a long-lived process: CPU per run, cold and after Spark's idle minute, by Python daemon.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python benchmarks/idle_runs.py [--runs 4] [--idle 70]

A long-lived process (a code server, a pytest worker, a sensor's runs) keeps its Spark session, but
Spark stops a Python worker after a minute idle, so its next run starts new workers. For each daemon
(Spark's own `pyspark.daemon`, then the platform's `imaging.worker_daemon`) a fresh process
materializes the three image assets on one small generated site-day `--runs` times, `--idle` seconds
apart, and prints each run's wall time and CPU seconds by role (as `benchmarks/pipeline.py` names them:
the driver's Python and JVM, the executors' Python workers and their daemon) for the whole process tree. Both variants
run in one invocation, one after the other, so their ratio is from the same machine state.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from pipeline import Sampler

REPO = Path(__file__).resolve().parents[1]
SELECT = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
DAY, SITE = "2024-03-01", "site-a"
DAEMONS = ("pyspark.daemon", "imaging.worker_daemon")


def cpu_by_role(root: psutil.Process) -> dict[str, float]:
    """CPU seconds of `root`'s process tree by role (`pipeline.Sampler.role`), workers already reaped
    included: Spark's idle timeout ends them between runs, and their parent's children times keep them."""
    out: dict[str, float] = defaultdict(float)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            role = "driver Python" if proc.pid == root.pid else Sampler.role(proc)
        except psutil.Error:
            continue
        out[role] += times.user + times.system + times.children_user + times.children_system
    return dict(out)


def cpu(run: dict[str, float]) -> float:
    """A run's CPU seconds over every role."""
    return sum(v for k, v in run.items() if k != "wall")


def one_process(daemon: str, root: Path, runs: int, idle: float) -> list[dict]:
    """In the child: `runs` in-process materializations of SELECT on this process's one session."""
    sys.path.insert(0, str(REPO))
    os.environ.update(IMAGING_LANDING=str(root / "landing"), IMAGING_WAREHOUSE=str(root / f"warehouse-{daemon}"),
                      IMAGING_SITES=SITE, IMAGING_START_DATE=DAY, IMAGING_SPARK_MASTER="local[2]",
                      IMAGING_PSEUDONYM_KEY="benchmark-key-not-secret-" + "b" * 8, IMAGING_MIN_K="1")
    import resources.spark as spark

    chosen = spark.session_config

    def session_config(config, env=None):  # the daemon under test, whatever the default
        return {**chosen(config, env), spark.DAEMON_CONF: daemon}

    spark.session_config = session_config
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    from definitions import defs

    # As the code server runs a launched job: in this process, on the one session of its resource.
    job = define_asset_job("idle_runs", selection=AssetSelection.assets(*SELECT))
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor).resolve_job_def("idle_runs")
    me, figures = psutil.Process(), []
    for index in range(runs):
        if index:
            time.sleep(idle)
        before, start = cpu_by_role(me), time.monotonic()
        result = resolved.execute_in_process(instance=DagsterInstance.ephemeral(), partition_key=f"{DAY}|{SITE}")
        if not result.success or not result.get_asset_materialization_events():
            raise SystemExit("the run failed or materialized nothing")
        after = cpu_by_role(me)
        figures.append({"wall": time.monotonic() - start,
                        **{k: v - before.get(k, 0.0) for k, v in after.items()}})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per process, the first one cold")
    parser.add_argument("--idle", type=float, default=70.0, help="seconds between runs: Spark's idle limit is 60, and at 65 its workers sometimes survived")
    parser.add_argument("--child", nargs=2, metavar=("DAEMON", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.child[0], Path(args.child[1]), args.runs, args.idle)))
        return

    sys.path.insert(0, str(REPO))
    from synth import generate_hospital

    root = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    generate_hospital(root / "landing", seed=3, sites=(SITE,), dates=(DAY,), patients_per_site=4)
    print(f"{len(SELECT)} image assets, one site-day, {args.runs} runs per process, {args.idle:.0f} s idle between")
    totals = {}
    for daemon in DAEMONS:
        done = subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--idle", str(args.idle),
                               "--child", daemon, str(root)], cwd=REPO, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr[-4000:])
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"\n{daemon}")
        for index, run in enumerate(figures):
            roles = ", ".join(f"{k} {v:.1f}" for k, v in sorted(run.items()) if k != "wall")
            print(f"  {'cold' if index == 0 else 'after idle'}: wall {run['wall']:5.1f} s, CPU {cpu(run):5.1f} s ({roles})")
        after_idle = [cpu(run) for run in figures[1:]]
        totals[daemon] = (cpu(figures[0]), sum(after_idle) / len(after_idle) if after_idle else float("nan"))
    (spark_cold, spark_idle), (ours_cold, ours_idle) = (totals[d] for d in DAEMONS)
    print(f"\nplatform daemon / Spark's: cold {ours_cold / spark_cold:.2f}x, after idle {ours_idle / spark_idle:.2f}x CPU")


if __name__ == "__main__":
    main()
