"""Live progress from a real Spark session's status tracker (resources/progress.py).

Runs in its own process with its own small local session, so the test session's shared Spark
session (tests/conftest.py) keeps its configuration.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import time
from pyspark.sql import SparkSession
from resources.progress import SparkProgress

class Log:  # what the asset passes: context.log
    def info(self, message): print("INFO", message, flush=True)
    def debug(self, message): print("DEBUG", message, flush=True)

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def slow(batches):  # stands in for opening files: a steady pace per task
    import time
    for batch in batches:
        time.sleep(0.5)
        yield batch

frame = spark.range(0, 24, numPartitions=24)
start = time.monotonic()
with SparkProgress(interval_seconds=2, poll_seconds=0.2).track(
        Log(), spark, label="test_step", files=240, bytes=480_000_000):
    rows = frame.mapInArrow(slow, frame.schema).count()
print("ROWS", rows, "SECONDS", round(time.monotonic() - start, 1), flush=True)
print("GROUP", spark.sparkContext.getLocalProperty("spark.jobGroup.id"), flush=True)
"""


def test_progress_lines_from_the_status_tracker():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert "ROWS 24" in " ".join(out)
    seconds = float(re.search(r"SECONDS ([\d.]+)", result.stdout).group(1))
    lines = [line for line in out if line.startswith("INFO test_step:")]
    running = [line for line in lines if "ETA" in line]
    done = [int(m.group(1)) for line in running if (m := re.search(r": (\d+)/240 files", line))]
    # Several live lines, the file count only grows, rate and ETA appear once tasks finish...
    assert len(running) >= 2, lines
    assert done == sorted(done) and done[-1] > 0, lines
    assert any(re.search(r"\d+\.\d MB/s, ETA \d:\d\d:\d\d", line) for line in running), lines
    # ...at most one line per 2 s interval (plus the first), then one closing line.
    assert len(running) <= seconds / 2 + 2, (seconds, lines)
    assert re.fullmatch(r"INFO test_step: 240/240 files, 480\.0 MB in \d:\d\d:\d\d, [\d.]+ MB/s", lines[-1]), lines
    # The job group is the tracker's only for the block.
    assert "GROUP None" in out
