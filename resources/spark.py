"""Spark, through dagster-pyspark: one session per run, shared by every asset in it.

The definitions use Dagster's in-process executor, so a run's steps share one process and
`getOrCreate` hands each the same session (a session per step costs seconds per asset).
Executor work goes through the DataFrame API only (`mapInArrow` over named records, see
imaging/records.py), and the code reaches executors with `addArtifacts`, both of which a Spark
Connect session supports as well as a classic one.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa
from dagster import InitResourceContext
from dagster_pyspark import PySparkResource

from imaging.config import read_yaml
from imaging.records import BatchStep, to_batch

_SHIPPED: set[int] = set()
PACKAGE = Path(__file__).resolve().parents[1] / "imaging"


def spark_config(master: str) -> dict[str, str]:
    """Spark defaults from `platform/spark.yaml`, with the master from IMAGING_SPARK_MASTER."""
    config = {k: str(v) for k, v in read_yaml("spark.yaml").items()}
    config["spark.master"] = master
    return config


def spark_schema(schema: pa.Schema):
    """The Spark schema of an Arrow schema (the catalogue and the records speak Arrow)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def frame_of(session, records, schema: pa.Schema):
    """A small driver-side list of records (partition keys, extract names) as a DataFrame."""
    table = pa.Table.from_batches([to_batch(records, schema)], schema=schema)
    return session.createDataFrame(table, schema=spark_schema(schema))


def map_batches(df, step: BatchStep):
    """Run a per-partition step on the executors over Arrow batches (no RDD, no row pickling)."""
    return df.mapInArrow(step, spark_schema(step.output))


def code_archive() -> str:
    """The pure `imaging` package as a zip named by its content (a changed package is a new name)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                info = zipfile.ZipInfo(str(path.relative_to(PACKAGE.parent)), date_time=(2000, 1, 1, 0, 0, 0))
                archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    target = Path(tempfile.gettempdir()) / f"imaging-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        target.write_bytes(data)
    return str(target)


def ship_code(session) -> None:
    """Send the pure `imaging` package to the executors once per session (classic or Connect)."""
    if id(session) in _SHIPPED:
        return
    session.addArtifacts(code_archive(), pyfile=True)
    _SHIPPED.add(id(session))


class SparkResource(PySparkResource):
    """PySparkResource that also ships the platform's code and keeps Spark quiet on loopback."""

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.spark_config.get("spark.master", "").startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # Local Python workers run the driver's interpreter (read when the session starts), so
            # pydicom and the platform code are the same on both sides. A cluster's executors
            # use their own (PYSPARK_PYTHON there, see README).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        super().setup_for_execution(context)
        self.spark_session.sparkContext.setLogLevel("WARN")
        ship_code(self.spark_session)
