"""Index and de-identification throughput of the platform's assets, optionally against another checkout.

    .venv/bin/python benchmarks/step_throughput.py [--patients 40] [--rounds 2] [--against /path/to/old/checkout]

Generates one site-day of OPT volumes (about 1 MB each) with `synth`, then, in a child process per
checkout (one Spark session each, `local[2]`, warmed up on a one-file site-day first), materializes
raw_image_index, linked_patient_metadata and anonymized_images in-process and times each asset.
With `--against`, the two checkouts run alternately for `--rounds` rounds on the same corpus and the
ratios (this checkout / the other) are printed, measured in one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAY, WARM_DAY, SITE = "2024-03-02", "2024-03-01", "site-a"
ASSETS = ("raw_image_index", "linked_patient_metadata", "anonymized_images")

CHILD = r"""
import json, sys, time
from dagster import AssetSelection, DagsterInstance, define_asset_job
from definitions import defs

def run(asset, key):
    job = define_asset_job("bench", selection=AssetSelection.assets(asset))
    scoped = type(defs)(assets=defs.assets, resources=defs.resources, jobs=[job], executor=defs.executor)
    start = time.perf_counter()
    result = scoped.resolve_job_def("bench").execute_in_process(
        instance=DagsterInstance.ephemeral(), partition_key=key)
    assert result.success
    return time.perf_counter() - start

for asset in %(assets)r:
    run(asset, "%(warm)s")                       # session start-up and first-use costs
print(json.dumps({asset: run(asset, "%(day)s") for asset in %(assets)r}))
"""


def child(checkout: Path, root: Path, tag: str) -> dict:
    env = dict(os.environ, IMAGING_LANDING=str(root / "landing"), IMAGING_WAREHOUSE=str(root / f"warehouse-{tag}"),
               IMAGING_PSEUDONYM_KEY="benchmark-key-not-secret-" + "b" * 8, IMAGING_SITES=SITE, IMAGING_START_DATE=WARM_DAY,
               IMAGING_SPARK_MASTER="local[2]", SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(checkout))
    code = CHILD % {"assets": ASSETS, "warm": f"{WARM_DAY}|{SITE}", "day": f"{DAY}|{SITE}"}
    result = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(result.stderr[-4000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", type=Path, help="another checkout of the project to compare with")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from synth import generate_hospital

    root = Path(tempfile.mkdtemp(prefix="bench-steps-"))
    generate_hospital(root / "landing", seed=5, sites=(SITE,), dates=(WARM_DAY,), patients_per_site=1,
                      broken_per_partition=False, oct_shape=(8, 64, 64))
    summary = generate_hospital(root / "corpus", seed=5, sites=(SITE,), dates=(DAY,),
                                patients_per_site=args.patients, broken_per_partition=False,
                                oct_shape=(16, 256, 128))
    (root / "corpus/images" / SITE / DAY).rename(root / "landing/images" / SITE / DAY)
    (root / "corpus/clinical" / SITE / f"{DAY}.csv").rename(root / "landing/clinical" / SITE / f"{DAY}.csv")
    files = list((root / "landing/images" / SITE / DAY).rglob("*"))
    size = sum(f.stat().st_size for f in files if f.is_file())
    print(f"corpus: {len(summary.instances)} DICOM files, {size / 1e6:.0f} MB, one site-day; local[2]")

    checkouts = {"this": REPO} | ({"other": args.against.resolve()} if args.against else {})
    times: dict[str, list[dict]] = {tag: [] for tag in checkouts}
    for round_number in range(args.rounds):
        for tag, checkout in checkouts.items():
            times[tag].append(child(checkout, root, f"{tag}-{round_number}"))
    for tag, runs in times.items():
        best = {a: min(r[a] for r in runs) for a in ASSETS}
        print(f"{tag:5s} ({checkouts[tag]}): " + ", ".join(
            f"{a} {best[a]:.1f} s ({size / 1e6 / best[a]:.0f} MB/s)" for a in ASSETS))
    if args.against:
        this = {a: min(r[a] for r in times["this"]) for a in ASSETS}
        other = {a: min(r[a] for r in times["other"]) for a in ASSETS}
        print("speed-up of this checkout (other time / this time): " + ", ".join(
            f"{a} {other[a] / this[a]:.2f}x" for a in ASSETS))


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"(benchmark wall time {time.perf_counter() - started:.0f} s)")
