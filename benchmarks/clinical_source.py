"""A clinical source on PostgreSQL (loopback): reading its eye observations, and the whole eye-level link.

    .venv/bin/python benchmarks/clinical_source.py                      # 1,000,000 eye observations of 10,000 patients
    .venv/bin/python benchmarks/clinical_source.py --rows 50000 --patients 1000 --images 2000   # a quick look

Starts a PostgreSQL server (tests/services.py: Debian's postgresql, on loopback), loads `--patients` patients and
`--rows` eye observations (generate_series, deterministic: eyes R/L/B, an acuity and a pressure a row, a free-text
remark, a timestamp) and one diagnosis a patient, then, in this process (one Spark session, the platform's own
configuration, `local[2]`), times, alternately, `--repeat` times each:

  read, one query     the platform's read of `eye_observations` (resources/clinical_source.py, assets/clinical_read.py:
                      the contract's columns checked, eyes normalised, rows set aside by reason, persisted and
                      repartitioned by patient, figures and digest in one aggregate) without a partition_column
  read, partitioned   the same with partition_column exam_no: clinical_read_partitions (platform/platform.yaml) queries
                      over ranges of it, bounds from the database
  read, baseline      a one-query PySpark script: spark.read.jdbc of the same query, repartitioned by patient,
                      persisted and counted (the same rows kept, no checks, no digest)
  link, platform      the whole eye-level link of `--images` images (random patients, days and eyes): the three queries
                      read (partitioned), the patient as-of join and the eye as-of join of assets/linkage.py, counted
  link, baseline      a one-query PySpark script doing the same read and as-of join: the observations read in one
                      query, joined to the images on patient and eye, the latest of each field on or before the image's
                      day by a window (row_number), counted

Reports each time (best and all runs), the ratios to the baselines measured in the same run, and the machine's load
(`uptime`) before and after. Figures: benchmarks/RESULTS.md, "Issue 45".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

PG_JAR = "/usr/share/java/postgresql.jar"
OBSERVATIONS = ("SELECT mrn AS patient_id, seen_at AS observed_at, side AS eye, va AS visual_acuity_logmar, "
                "pressure AS iop_mmhg, remarks, exam_no FROM exam")
SOURCE = """
name: benchmark-epr
jdbc_url: {url}
user: {user}
password_env: BENCHMARK_EPR_PASSWORD
driver_jars: [{jar}]
patients:
  query: SELECT mrn AS patient_id, born AS birth_date, sex FROM people
eye_observations:
  query: {observations}
{partition}diagnoses:
  query: SELECT mrn AS patient_id, onset AS diagnosed_on, side AS eye, icd AS diagnosis_code FROM problem
"""


def load(pg, patients: int, rows: int) -> None:
    pg.execute(f"""
        CREATE TABLE people AS SELECT 'P' || lpad(g::text, 7, '0') AS mrn, DATE '1940-01-01' + (g * 37 % 20000) AS born,
            CASE WHEN g % 2 = 0 THEN 'F' ELSE 'M' END AS sex FROM generate_series(1, {patients}) g;
        CREATE TABLE exam AS SELECT g::bigint AS exam_no, 'P' || lpad((1 + (g::bigint * 7919 % {patients}))::text, 7, '0') AS mrn,
            TIMESTAMP '2019-01-01 08:00' + (g % 1826) * INTERVAL '1 day' + (g % 600) * INTERVAL '1 minute' AS seen_at,
            (ARRAY['R', 'L', 'B'])[1 + g % 3] AS side, ((g * 31) % 150) / 100.0 AS va, 8 + (g * 13) % 25 AS pressure,
            'remark ' || g AS remarks FROM generate_series(1, {rows}) g;
        ALTER TABLE exam ADD PRIMARY KEY (exam_no);
        CREATE TABLE problem AS SELECT mrn, DATE '2018-06-01' + (length(mrn) * 0) AS onset,
            CASE WHEN right(mrn, 1) < '5' THEN 'R' ELSE 'L' END AS side, 'H35.32' AS icd FROM people;
        ANALYZE;""")


def timed(label: str, work, runs: dict) -> None:
    start = time.perf_counter()
    work()
    runs.setdefault(label, []).append(time.perf_counter() - start)
    print(f"  {label}: {runs[label][-1]:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    from services import postgres_server

    os.environ.setdefault("IMAGING_PSEUDONYM_KEY", "benchmark-key-" + "x" * 24)
    with postgres_server("epr") as pg, tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        load(pg, args.patients, args.rows)
        print(f"loaded {args.rows} eye observations of {args.patients} patients in {time.perf_counter() - started:.1f} s")
        os.environ["BENCHMARK_EPR_PASSWORD"] = pg.password
        url = f"jdbc:postgresql://{pg.host}:{pg.port}/{pg.database}"
        files = {}
        for name, partition in (("one_query", ""), ("partitioned", "  partition_column: exam_no\n")):
            files[name] = Path(work) / f"{name}.yaml"
            files[name].write_text(SOURCE.format(url=url, user=pg.user, jar=PG_JAR, observations=OBSERVATIONS,
                                                 partition=partition))
        return measure(args, files, url, pg)


def measure(args, files: dict, url: str, pg) -> int:
    from pyspark.sql import SparkSession, Window, functions as F

    from assets.clinical_read import read_source
    from assets.linkage import as_of_join, with_eyes
    from imaging.clinical_source import SOURCE_ORIGIN
    from imaging.driver.config import load_settings
    from imaging.driver.platform_files import load_clinical_policy
    from resources.clinical_source import ClinicalSourceResource, reader
    from resources.spark import spark_config

    settings = load_settings()
    policy = load_clinical_policy()
    fields = sorted(policy.eye_aliases - set(policy.eye_diagnosis_rule.aliases))
    config = spark_config("local[2]", jars=(PG_JAR,))
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    shuffle = int(session.conf.get("spark.sql.shuffle.partitions"))
    resources = {name: ClinicalSourceResource(file=str(path), partitions=settings.clinical_read_partitions,
                                              fetch_size=settings.clinical_fetch_size) for name, path in files.items()}
    print(f"numPartitions {settings.clinical_read_partitions}, fetchsize {settings.clinical_fetch_size}, "
          f"shuffle partitions {shuffle}")

    def platform_read(name):
        def run():
            source = reader(resources[name], session)
            raw = source.read("eye_observations")
            from assets.clinical_read import _figures  # the read's action, as read_source runs it
            frame = raw.repartition(shuffle, "patient_id").persist()
            _figures(source, "eye_observations", frame.withColumn("reason", F.lit(None).cast("string")), [])
            frame.unpersist()
        return run

    def baseline_read():  # the same rows read and kept, repartitioned by patient: no checks, no digest
        frame = session.read.jdbc(url, f"({OBSERVATIONS}) q", properties={
            "user": pg.user, "password": pg.password, "driver": "org.postgresql.Driver"})
        frame = frame.repartition(shuffle, "patient_id").persist()
        frame.count()
        frame.unpersist()

    rng_images = session.range(args.images).select(
        F.format_string("%s", F.expr("date_add(DATE'2021-01-01', CAST(id * 97 % 1400 AS INT))")).alias("date"),
        F.lit("site-x").alias("site"),
        F.format_string("P%07d", (F.col("id") * 104729 % args.patients + 1).cast("int")).alias("patient_id"),
        F.when(F.col("id") % 2 == 0, "R").otherwise("L").alias("laterality"),
        F.format_string("image-%d.dcm", F.col("id")).alias("source_path")).persist()
    rng_images.count()

    def platform_link():
        source = reader(resources["partitioned"], session)
        read = read_source(source, ["site-x"], ["", "UNKNOWN"], shuffle)
        linked = with_eyes(as_of_join(rng_images, read.patients), read.observations, read.diagnoses,
                           F.lit(SOURCE_ORIGIN), fields)
        linked.count()
        read.release()

    def baseline_link():
        props = {"user": pg.user, "password": pg.password, "driver": "org.postgresql.Driver"}
        obs = session.read.jdbc(url, f"({OBSERVATIONS}) q", properties=props)
        obs = obs.withColumn("eye", F.explode(F.when(F.col("eye") == "B", F.array(F.lit("R"), F.lit("L")))
                                              .otherwise(F.array("eye"))))
        images = rng_images.withColumnRenamed("laterality", "eye")
        joined = images.join(obs, ["patient_id", "eye"]).where(F.to_date("observed_at") <= F.to_date("date"))
        latest = []
        for field in ("visual_acuity_logmar", "iop_mmhg"):
            window = Window.partitionBy("source_path").orderBy(F.desc("observed_at"))
            latest.append(joined.where(F.col(field).isNotNull())
                          .withColumn("n", F.row_number().over(window)).where("n = 1")
                          .select("source_path", F.col(field).alias(f"latest_{field}")))
        images.join(latest[0], "source_path", "left").join(latest[1], "source_path", "left").count()

    runs: dict[str, list[float]] = {}
    print("warm-up (not counted)")
    timed("warm-up", platform_read("partitioned"), {})
    for i in range(args.repeat):
        print(f"round {i + 1}")
        timed("read, one query", platform_read("one_query"), runs)
        timed("read, partitioned", platform_read("partitioned"), runs)
        timed("read, baseline", baseline_read, runs)
        timed("link, platform", platform_link, runs)
        timed("link, baseline", baseline_link, runs)
    best = {k: min(v) for k, v in runs.items()}
    print(f"\n{args.rows} eye observations of {args.patients} patients, {args.images} images; best of {args.repeat}:")
    for label, seconds in best.items():
        print(f"  {label:20s} {seconds:7.1f} s   ({', '.join(f'{s:.1f}' for s in runs[label])})")
    print(f"  partitioned / one query        {best['read, partitioned'] / best['read, one query']:.2f}")
    print(f"  partitioned / baseline read    {best['read, partitioned'] / best['read, baseline']:.2f}")
    print(f"  link platform / baseline       {best['link, platform'] / best['link, baseline']:.2f}")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    session.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
