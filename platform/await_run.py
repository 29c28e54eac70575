"""Waits for a launched Dagster run to finish (demo.sh launches its runs through the instance, as the UI
does, rather than executing them in its own process). Exits 0 only if the run succeeded.

    .venv/bin/python platform/await_run.py RUN_ID [TIMEOUT_SECONDS]
"""

import sys
import time

from dagster import DagsterInstance, DagsterRunStatus

run_id, timeout = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3600
deadline = time.monotonic() + timeout
with DagsterInstance.get() as instance:
    run = instance.get_run_by_id(run_id)
    while time.monotonic() < deadline and (run is None or not run.is_finished):
        time.sleep(2)
        run = instance.get_run_by_id(run_id)
    if run is None or not run.is_finished:
        sys.exit(f"run {run_id} not finished after {timeout:.0f} s (is the daemon running? see data/dagster-daemon.log)")
    print(f"run {run_id} ({run.job_name}): {run.status.value}")
    if run.status != DagsterRunStatus.SUCCESS:
        sys.exit(f"run {run_id} did not succeed: open it in the UI (./platform/ui.sh) or read its events "
                 f"(.venv/bin/dagster debug export {run_id} run.gz)")
