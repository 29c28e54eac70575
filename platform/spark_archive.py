"""Make the driver JVM's class-data-sharing archive: Spark's classes, parsed once, mapped by every run.

    .venv/bin/python platform/spark_archive.py        # platform/setup.sh runs it; safe to re-run

A local Spark session spends about half of its 6 s start loading and verifying the same ten
thousand classes from Spark's jars. The JVM can dump the classes one run loaded into an archive
(`-XX:ArchiveClassesAtExit`) that later JVMs map instead (`-XX:SharedArchiveFile`), which
`resources.spark.spark_config` adds to `spark.driver.extraJavaOptions` when the archive exists
(measured: session start 5.4-6.2 s -> 2.9-3.2 s, first query 2.8 -> 1.3 s; benchmarks/RESULTS.md).

The archive is made by a session that runs the kinds of query the assets run, is written under
a temporary name, checked by a JVM that maps it, and only then renamed into place: a JVM given a
truncated archive crashes, one given a missing or mismatched archive (another JDK, other jars)
ignores it and starts as before. It is remade when the JDK or pyspark changes (a stamp file).
It holds class metadata only, never data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def stamp_text() -> str:
    import pyspark

    from resources.spark import java

    version = subprocess.run([java(), "-version"], capture_output=True, text=True).stderr.strip()
    return f"pyspark {pyspark.__version__}\n{version}\n"


def workload(spark, scratch: Path) -> None:
    """Queries of the kinds the assets run (Arrow in and out, aggregations, joins, windows, Parquet)."""
    import pyarrow as pa
    from pyspark.sql import Window, functions as F

    frame = spark.createDataFrame(pa.table({"k": [1, 2, 2], "v": ["a", "b", "c"]}).to_pandas())
    rows = spark.range(2000).withColumn("k", F.col("id") % 7).withColumn("v", F.col("id").cast("string"))
    counts = rows.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.countDistinct("v").alias("d"))
    counts.agg(F.percentile_approx("n", [0.5, 0.99], 1000), F.max("n")).first()
    rows.join(frame, "k", "left_semi").count()
    rows.withColumn("r", F.row_number().over(Window.partitionBy("k").orderBy("id"))).where("r = 1").collect()
    rows.mapInArrow(lambda batches: batches, rows.schema).count()
    rows.write.mode("overwrite").partitionBy("k").parquet(str(scratch / "t"))
    spark.read.parquet(str(scratch / "t")).where(F.col("k") == 3).toArrow()


def make(archive: Path) -> bool:
    from pyspark.sql import SparkSession

    from resources.spark import DriverJvm, spark_config

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="spark-archive-") as scratch:
        partial = Path(scratch) / archive.name
        config = spark_config("local[2]", archive=None)
        # -Xlog:disable: the dump lists every class it skips (signed jars, generated classes) as a warning.
        options = (f"{config.get('spark.driver.extraJavaOptions', '')} -XX:ArchiveClassesAtExit={partial} "
                   "-Xlog:disable").strip()
        builder = SparkSession.builder.appName("class-archive")
        for key, value in {**config, "spark.driver.extraJavaOptions": options}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        workload(spark, Path(scratch))
        driver = DriverJvm.of(spark._jvm)  # read now: the check below runs after this JVM has exited
        process = spark.sparkContext._gateway.proc  # pyspark keeps the JVM's Popen here
        spark.stop()
        process.stdin.close()  # the JVM exits when its stdin closes, and writes the archive as it exits
        process.wait(timeout=300)
        if not partial.exists() or driver.maps(partial).returncode != 0:
            return False
        tmp = archive.with_name(archive.name + ".tmp")
        shutil.copyfile(partial, tmp)
        os.replace(tmp, archive)
        return True


def main() -> None:
    from resources.spark import DRIVER_ARCHIVE

    stamp = DRIVER_ARCHIVE.with_name(DRIVER_ARCHIVE.name + ".stamp")
    wanted = stamp_text()
    if DRIVER_ARCHIVE.exists() and stamp.exists() and stamp.read_text() == wanted:
        return
    DRIVER_ARCHIVE.unlink(missing_ok=True)
    stamp.unlink(missing_ok=True)
    if make(DRIVER_ARCHIVE):
        stamp.write_text(wanted)
        print(f"Spark driver class archive ready: {DRIVER_ARCHIVE}")
    else:  # setup.sh reports it and goes on: sessions start as before, only slower
        raise SystemExit("Spark driver class archive not made")


if __name__ == "__main__":
    main()
