"""How a backfill's progress shows on its page, and what each way costs: Dagster 1.13's options, measured.

Each option runs the same backfill (the three image assets over every site-day of a small generated hospital,
launched as the UI launches it, an asset backfill) in a real `dagster dev` (webserver + daemon) on its own instance,
and polls what the backfill's page reads (the daemon's materialized counts per asset) every second:

* `single`: single-run backfill, one commit (what the platform did before issue 36: `files_per_commit: 0`);
* `parts`: single-run backfill, each site-day committed and materialized in turn (`files_per_commit: 1`; the
  shipped default commits about 5,000 landed files a part);
* `multi`: `BackfillPolicy.multi_run(max_partitions_per_run=1)`: a run per site-day (each a cold process and JVM).

    .venv/bin/python benchmarks/backfill_progress.py [--dates 4] [--sites 2] [--options single,parts,multi]

Prints, per option: runs, seconds from launch to the backfill's completion, seconds to the first progress shown,
and the distinct progress values the page showed (materialized asset-partitions of the total). Long: minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PIPELINE = ("raw_image_index", "linked_patient_metadata", "anonymized_images")

MULTI_RUN_LOCATION = '''
"""The platform's definitions with a multi-run backfill policy on the image assets (benchmarks only)."""
from dagster import BackfillPolicy, Definitions

import definitions as platform_definitions  # a module, not its Definitions: one Definitions at module scope

_IMAGES = {"raw_image_index", "linked_patient_metadata", "anonymized_images"}
_base = platform_definitions.defs
defs = Definitions(
    assets=[a.with_attributes(backfill_policy=BackfillPolicy.multi_run(1))
            if getattr(a, "key", None) is not None and a.key.to_user_string() in _IMAGES else a for a in _base.assets],
    asset_checks=_base.asset_checks, jobs=_base.jobs, sensors=_base.sensors, resources=_base.resources,
    executor=_base.executor)
del _base
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise RuntimeError(answer["errors"])
    return answer["data"]


LAUNCH = """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status
  assetBackfillData { assetBackfillStatuses { ... on AssetPartitionsStatusCounts { numPartitionsTargeted
  numPartitionsMaterialized } } } runs(limit: 100) { runId status } } } }"""


def measure(option: str, dates: list[str], sites: list[str], work: Path) -> dict:
    root = work / option
    platform = root / "platform"
    shutil.copytree(REPO / "platform", platform, ignore=shutil.ignore_patterns("*.sh", "proxy", "*.py", "*.lock"))
    text = (platform / "ui.yaml").read_text()
    per_commit = {"single": 0, "parts": 1, "multi": 0}[option]
    (platform / "ui.yaml").write_text(text.replace("files_per_commit: 5000", f"files_per_commit: {per_commit}"))
    from synth import generate_hospital

    generate_hospital(root / "landing", seed=5, sites=tuple(sites), dates=tuple(dates), patients_per_site=3)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "platform" / "dagster.yaml", home / "dagster.yaml")
    workspace = "workspace.yaml"
    if option == "multi":
        (root / "multi_run_location.py").write_text(MULTI_RUN_LOCATION)
        workspace = str(root / "workspace.yaml")
        (root / "workspace.yaml").write_text(f"load_from:\n  - python_module:\n      module_name: multi_run_location\n"
                                             f"      working_directory: {root}\n      location_name: imaging_platform\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "DAGSTER_"))}
    env.update(IMAGING_LANDING=str(root / "landing"), IMAGING_WAREHOUSE=str(root / "warehouse"),
               IMAGING_SITES=",".join(sites), IMAGING_START_DATE=dates[0], IMAGING_END_DATE=dates[-1],
               IMAGING_PSEUDONYM_KEY="benchmark-key-not-secret-" + "b" * 10, IMAGING_SPARK_MASTER="local[2]",
               SPARK_LOCAL_IP="127.0.0.1", DAGSTER_HOME=str(home), IMAGING_PLATFORM_DIR=str(platform),
               IMAGING_MIN_K="1", PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(root / "dagster-dev.log", "w")
    server = subprocess.Popen([str(BIN / "dagster"), "dev", "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if graphql(url, "{ assetNodes { assetKey { path } } }")["assetNodes"]:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"dagster dev did not start ({root / 'dagster-dev.log'})")
            time.sleep(1)
        partitions = [f"{d}|{s}" for d in dates for s in sites]
        started = time.monotonic()
        launched = graphql(url, LAUNCH, {"p": {"partitionNames": partitions,
                                               "assetSelection": [{"path": [a]} for a in PIPELINE]}})
        backfill = launched["launchPartitionBackfill"]["backfillId"]
        seen, first, runs = [], None, []
        while time.monotonic() - started < 1800:
            state = graphql(url, STATUS, {"id": backfill})["partitionBackfillOrError"]
            counts = state["assetBackfillData"]["assetBackfillStatuses"]
            done = sum(c["numPartitionsMaterialized"] for c in counts)
            total = sum(c["numPartitionsTargeted"] for c in counts)
            if not seen or seen[-1][1] != done:
                seen.append((round(time.monotonic() - started, 1), done, total))
                if done and first is None:
                    first = round(time.monotonic() - started, 1)
            runs = state["runs"]
            if state["status"] not in ("REQUESTED",):
                break
            time.sleep(1)
        return {"option": option, "site_days": len(partitions), "runs": len(runs),
                "seconds": round(time.monotonic() - started, 1), "first_progress_s": first,
                "status": state["status"], "progress": [f"{t}s:{d}/{n}" for t, d, n in seen]}
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def main() -> None:
    # Started in the background of a non-interactive shell, this process (and each `dagster dev` it starts) would
    # ignore SIGINT, the signal that stops dagster dev: back to Python's default first.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dates", type=int, default=4)
    parser.add_argument("--sites", type=int, default=2)
    parser.add_argument("--options", default="single,parts,multi")
    args = parser.parse_args()
    dates = [str(dt.date(2024, 3, 1) + dt.timedelta(days=i)) for i in range(args.dates)]
    sites = [f"site-{chr(97 + i)}" for i in range(args.sites)]
    work = Path(tempfile.mkdtemp(prefix="backfill-progress-"))
    print(f"{len(dates)} dates x {len(sites)} sites, three image assets; work in {work}")
    try:
        for option in args.options.split(","):
            result = measure(option, dates, sites, work)
            print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
