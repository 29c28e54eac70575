"""Live progress from real Spark (resources/progress.py): a classic local session's status tracker,
and a Spark Connect session's progress handler (Connect has no SparkContext, so no status tracker).

Each runs in its own process with its own small session, so the test session's shared Spark session
(tests/conftest.py) keeps its configuration. The Connect server is pyspark's own on a free loopback
port, shared with test_deployments (fixture `spark_connect`, tests/conftest.py).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from services import port_open, server_java_options

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import sys, time
from pyspark.sql import SparkSession
from resources.progress import SparkProgress, is_connect

class Log:  # what the asset passes: context.log
    def info(self, message): print("INFO", message, flush=True)
    def debug(self, message): print("DEBUG", message, flush=True)

remote = sys.argv[1]
if remote:
    spark = SparkSession.builder.remote(remote).getOrCreate()
else:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", sys.argv[2]).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
print("CONNECT", is_connect(spark), flush=True)

def slow(batches):  # stands in for opening files: a steady pace per task
    import time
    for batch in batches:
        time.sleep(0.5)
        yield batch

frame = spark.range(0, 16, numPartitions=16)
start = time.monotonic()
with SparkProgress(interval_seconds=2, poll_seconds=0.2).track(
        Log(), spark, label="test_step", files=240, bytes=480_000_000):
    rows = frame.mapInArrow(slow, frame.schema).count()
print("ROWS", rows, "SECONDS", round(time.monotonic() - start, 1), flush=True)
if not remote:
    print("GROUP", spark.sparkContext.getLocalProperty("spark.jobGroup.id"), flush=True)
"""


def _env():
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")


def _check_lines(result):
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert "ROWS 16" in " ".join(out)
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
    return out


def test_progress_lines_from_the_status_tracker():
    # The platform's driver options and class archive (tests/services.py): the session starts in half the time.
    result = subprocess.run([sys.executable, "-c", SCRIPT, "", server_java_options()], cwd=REPO, env=_env(),
                            capture_output=True, text=True, timeout=300)
    out = _check_lines(result)
    assert "CONNECT False" in out
    assert "GROUP None" in out, "the job group is the tracker's only inside the block"


@pytest.mark.xdist_group("deployments-connect")  # the Connect server of test_deployments, started once
def test_progress_lines_on_spark_connect(spark_connect):
    assert port_open(spark_connect.port), "the Spark Connect server is not running"  # else the child retries 10 min
    result = subprocess.run([sys.executable, "-c", SCRIPT, spark_connect.remote], cwd=REPO, env=_env(), capture_output=True,
                            text=True, timeout=300)
    out = _check_lines(result)
    assert "CONNECT True" in out
