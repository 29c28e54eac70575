"""One Spark session per run versus one per step: the same three assets, both executors.

    .venv/bin/python benchmarks/session_per_run.py

Both runs go through the `dagster asset materialize` CLI on the same generated site-day; the
only difference is the executor. Prints the wall time of each and their ratio, from one invocation.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(tempfile.mkdtemp(prefix="bench-session-"))
SELECT = "raw_image_index,linked_patient_metadata,anonymized_images"


def materialize(module: str, warehouse: str) -> float:
    env = dict(os.environ, IMAGING_LANDING=str(ROOT / "landing"), IMAGING_WAREHOUSE=str(ROOT / warehouse),
               IMAGING_PSEUDONYM_KEY="benchmark-key-not-secret-" + "b" * 8, IMAGING_SITES="site-a",
               IMAGING_START_DATE="2024-03-01", SPARK_LOCAL_IP="127.0.0.1", DAGSTER_HOME=str(ROOT / "home"),
               PYTHONPATH=f"{REPO}:{REPO / 'benchmarks'}")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "dagster", "asset", "materialize", "-m", module, "--select", SELECT,
                    "--partition", "2024-03-01|site-a"], env=env, cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(result.stderr[-4000:])
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from synth import generate_hospital

    (ROOT / "home").mkdir()
    generate_hospital(ROOT / "landing", seed=3, sites=("site-a",), dates=("2024-03-01",))
    per_step = materialize("benchmarks_multiprocess", "w1")
    per_run = materialize("definitions", "w2")
    print(f"session per step (multiprocess executor): {per_step:6.1f} s")
    print(f"session per run  (in-process executor):   {per_run:6.1f} s")
    print(f"ratio: {per_step / per_run:.2f}x")
