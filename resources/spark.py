"""Spark, through dagster-pyspark: one session per run, shared by every asset in it.

The definitions use Dagster's in-process executor, so a run's steps share one process and
`getOrCreate` hands each the same session (a session per step costs seconds per asset).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from dagster import InitResourceContext
from dagster_pyspark import PySparkResource

from imaging.config import read_yaml

_SHIPPED: set[int] = set()


def spark_config(master: str) -> dict[str, str]:
    """Spark defaults from `platform/spark.yaml`, with the master from IMAGING_SPARK_MASTER."""
    config = {k: str(v) for k, v in read_yaml("spark.yaml").items()}
    config["spark.master"] = master
    return config


def ship_code(session) -> None:
    """Send the pure `imaging` package to executors once per session (needed on a remote cluster)."""
    context = session.sparkContext
    if id(context) in _SHIPPED:
        return
    package = Path(__file__).resolve().parents[1] / "imaging"
    target = Path(tempfile.mkdtemp(prefix="imaging-code-")) / "imaging"
    shutil.copytree(package, target / "imaging", ignore=shutil.ignore_patterns("__pycache__"))
    context.addPyFile(shutil.make_archive(str(target), "zip", target))
    _SHIPPED.add(id(context))


class SparkResource(PySparkResource):
    """PySparkResource that also ships the platform's code and keeps Spark quiet on loopback."""

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.spark_config.get("spark.master", "").startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers run the driver's interpreter (read by SparkContext when it starts), so
        # pydicom and the platform code are the same on both sides.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        super().setup_for_execution(context)
        self.spark_session.sparkContext.setLogLevel("WARN")
        ship_code(self.spark_session)
