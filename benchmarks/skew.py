"""Hot keys: the link step and the data-quality checks on an index where one patient holds most rows.

    .venv/bin/python benchmarks/skew.py                       # 1,000,000 rows, every strategy, both sizes
    .venv/bin/python benchmarks/skew.py --rows 200000 --strategies aqe --sizes 200000

Index rows are generated with Spark (no DICOM files) and written to Parquet, then read back as
the assets read their tables. Each measured case runs in its own process (a fresh JVM), so the
peak memory figures belong to that case alone:
- skewed: `--hot-share` of the rows (default 90%) belong to ONE patient in ONE site-day; the rest
  spread over 20,000 patients x 5 days x 2 sites;
- uniform: every row spread that way.
Timed (after a small warm-up): the as-of join the asset runs (`assets.linkage.as_of_join`, salted for
`salted`, written to Spark's `noop` sink so it runs in full) and the Spark checks of raw_image_index and linked_patient_metadata
(Great Expectations suites excluded: column rules have no key to be skewed on; `--gx` adds them).
Strategies for the image-to-record join: `aqe` (adaptive execution as configured in
platform/spark.yaml: skew-join splitting on, broadcast of the small side chosen at run time),
`salted` (AQE on, broadcast off, the join salted over 16 buckets), `sortmerge` (no AQE, no
broadcast, no salt: the trap, for reference).
Reported per case: seconds (link, checks, total), the skewed/uniform ratio (goal at most 1.2x),
the driver's peak memory (Python process and JVM, VmHWM; goal flat in the number of rows), and
the slowest stage's longest task against its median (a hot key gathered in one task shows here).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATIENTS, DAYS, SITES = 20_000, 5, 2
STRATEGIES = {
    "aqe": {},
    "salted": {"spark.sql.autoBroadcastJoinThreshold": "-1"},
    "sortmerge": {"spark.sql.adaptive.enabled": "false", "spark.sql.autoBroadcastJoinThreshold": "-1"},
}


def session(strategy: str):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from imaging.driver.config import read_yaml

    builder = SparkSession.builder.appName(f"skew-{strategy}")
    config = {k: str(v) for k, v in read_yaml("spark.yaml").items()}
    config.update({"spark.master": os.environ.get("IMAGING_SPARK_MASTER", "local[2]"), "spark.ui.enabled": "true"})
    config.update(STRATEGIES[strategy])
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def generate(spark, rows: int, hot_share: float, folder: str):
    """Index and clinical rows written as Parquet, then read back (the assets read tables)."""
    from pyspark.sql import functions as F

    from imaging.catalogue import RAW_IMAGE_INDEX
    from imaging.records import ClinicalRow, schema_of
    from resources.spark import spark_schema

    index_schema, clinical_schema = spark_schema(RAW_IMAGE_INDEX.schema), spark_schema(schema_of(ClinicalRow))
    ids = spark.range(rows).withColumnRenamed("id", "n")
    hot = F.col("n") < F.lit(int(rows * hot_share))
    patient = F.col("n") % PATIENTS
    day = (F.col("n") / PATIENTS).cast("long") % DAYS
    site = (F.col("n") / (PATIENTS * DAYS)).cast("long") % SITES
    date = F.when(hot, F.lit("2024-03-01")).otherwise(F.date_format(F.date_add(F.lit("2024-03-01"), day.cast("int")),
                                                                     "yyyy-MM-dd"))
    site_name = F.when(hot, F.lit("site-a")).otherwise(F.concat(F.lit("site-"), site.cast("string")))
    pid = F.when(hot, F.lit("9999000001")).otherwise(F.format_string("94%08d", patient))
    study = F.concat(F.lit("1.2.826.0.1.3680043.20."), F.when(hot, F.lit(0)).otherwise(patient + 1).cast("string"),
                     F.lit("."), date.substr(9, 2))
    columns = {
        "source_path": F.concat(F.lit("/landing/images/"), site_name, F.lit("/"), date, F.lit("/"), F.col("n"),
                                F.lit(".dcm")),
        "size_bytes": F.lit(1_000_000).cast("long"), "sha256": F.sha2(F.col("n").cast("string"), 256),
        "sop_instance_uid": F.concat(F.lit("1.2.826.0.1.3680043.21."), F.col("n")),
        "study_instance_uid": study,
        "series_instance_uid": F.concat(study, F.lit("."), (F.col("n") % 7).cast("string")),
        "sop_class_uid": F.lit("1.2.840.10008.5.1.4.1.1.77.1.5.4"), "modality": F.lit("OPT"),
        "laterality": F.when(F.col("n") % 2 == 0, "R").otherwise("L"), "patient_id": pid,
        "issuer_of_patient_id": F.lit(None).cast("string"), "study_date": F.regexp_replace(date, "-", ""),
        "study_time": F.lit("101500"), "manufacturer": F.lit("Example"), "model": F.lit("OCT-1"),
        "rows": F.lit(496), "columns": F.lit(512), "number_of_frames": F.lit(49),
        "transfer_syntax_uid": F.lit("1.2.840.10008.1.2.1"), "date": date, "site": site_name,
    }
    index = ids.select(*[columns[f.name].cast(f.dataType).alias(f.name) for f in index_schema.fields])
    index.write.mode("overwrite").partitionBy("date", "site").parquet(f"{folder}/index")

    # One record per patient per site on the first and third day, plus the hot patient's.
    people = spark.range(PATIENTS + 1).withColumnRenamed("id", "p")
    clinical = (people.crossJoin(spark.createDataFrame([("site-0",), ("site-1",), ("site-a",)], "site string"))
                .crossJoin(spark.createDataFrame([("2024-03-01",), ("2024-03-03",)], "extract_date string"))
                .select("site", "extract_date", F.lit(1).alias("row_number"),
                        F.when(F.col("p") == PATIENTS, F.lit("9999000001"))
                        .otherwise(F.format_string("94%08d", F.col("p"))).alias("patient_id"),
                        F.create_map(F.lit("full_name"), F.concat(F.lit("Person "), F.col("p").cast("string")),
                                     F.lit("date_of_birth"), F.lit("1950-06-15"), F.lit("sex"), F.lit("F"))
                        .alias("clinical")))
    clinical.write.mode("overwrite").parquet(f"{folder}/clinical")
    return (spark.read.schema(index_schema).option("basePath", f"{folder}/index")
            .parquet(f"{folder}/index").select(*index_schema.fieldNames()),
            spark.read.schema(clinical_schema).parquet(f"{folder}/clinical"))


def run_checks(index, clinical, linked, gx: bool) -> dict:
    from assets import quality as q
    from imaging.driver.config import read_yaml
    from imaging.pseudonym import Pseudonymizer
    from imaging.driver.platform_files import load_quality_rules
    from imaging.steps.clinical import ClinicalPolicy

    ctx = q.QualityContext(load_quality_rules(), Pseudonymizer("benchmark-key-not-secret"), {}, "NHS",
                           today=dt.date(2024, 6, 1))
    policy = ClinicalPolicy.from_dict(read_yaml("clinical_policy.yaml"))
    outcomes = [q.scans_per_patient_site_day(index, ctx), q.scans_per_patient(index, ctx),
                q.instances_per_series(index, ctx), q.series_per_study(index, ctx),
                q.sop_instance_uid_in_one_partition(index, ctx), q.mandatory_attributes(index, ctx),
                q.study_date_in_future(index, ctx), *q.linkage_fan_out(index, clinical, policy, ctx),
                q.placeholder_keys(index, clinical, ctx), q.images_per_clinical_key(index, ctx),
                q.unlinked_share(linked, ctx), q.study_before_birth(linked, policy, ctx)]
    if gx:
        outcomes += q.column_rules(index, "raw_image_index", ctx)
    return {o.check: o.passed for o in outcomes}


def stage_skew(spark) -> dict:
    """The stage whose longest task is furthest above its median (Spark's own task metrics)."""
    base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    worst = {"stage": None, "max_task_s": 0.0, "median_task_s": 0.0}
    try:
        stages = json.load(urllib.request.urlopen(f"{base}/stages?status=complete", timeout=120))
        for st in stages:
            if st.get("numTasks", 0) < 2:
                continue
            url = f"{base}/stages/{st['stageId']}/{st['attemptId']}/taskSummary?quantiles=0.5,1.0"
            summary = json.load(urllib.request.urlopen(url, timeout=120))
            median, top = (v / 1000 for v in summary["executorRunTime"])
            if top - median > worst["max_task_s"] - worst["median_task_s"]:
                worst = {"stage": st["stageId"], "max_task_s": top, "median_task_s": median}
    except OSError as error:  # the UI is a convenience: the timings stand without it
        worst["error"] = type(error).__name__
    return worst


def peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def jvm_pid() -> int | None:
    import psutil

    for child in psutil.Process().children(recursive=True):
        if "java" in child.name():
            return child.pid
    return None


def one_case(args) -> dict:
    """Runs in its own process: generate, warm up, time link + checks, report memory."""
    sys.path.insert(0, str(REPO))
    from assets.linkage import as_of_join

    spark = session(args.strategy)
    salt = 16 if args.strategy == "salted" else 0

    def link(index, clinical):  # the asset's own join (salted for the `salted` strategy)
        return as_of_join(index, clinical, salt_buckets=salt)

    folder = tempfile.mkdtemp(prefix="bench-skew-")
    try:
        warm_index, warm_clinical = generate(spark, 20_000, args.hot_share if args.skewed else 0.0, f"{folder}/warm")
        link(warm_index, warm_clinical).write.format("noop").mode("overwrite").save()
        index, clinical = generate(spark, args.rows, args.hot_share if args.skewed else 0.0, f"{folder}/data")

        start = time.perf_counter()
        linked = link(index, clinical)
        linked.write.format("noop").mode("overwrite").save()
        link_s = time.perf_counter() - start
        start = time.perf_counter()
        passed = run_checks(index, clinical, linked, args.gx)
        checks_s = time.perf_counter() - start
        worst = stage_skew(spark)
        pid = jvm_pid()
        return {"rows": args.rows, "skewed": args.skewed, "strategy": args.strategy, "link_s": link_s,
                "checks_s": checks_s, "total_s": link_s + checks_s, "failed_checks": sorted(k for k, v in passed.items()
                                                                                           if not v),
                "python_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "jvm_peak_mib": peak_kib(pid) / 1024 if pid else None, "worst_stage": worst}
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)


def spawn(rows: int, skewed: bool, strategy: str, hot_share: float, gx: bool) -> dict:
    command = [sys.executable, __file__, "--case", "--rows", str(rows), "--strategy", strategy,
               "--hot-share", str(hot_share)] + (["--skewed"] if skewed else []) + (["--gx"] if gx else [])
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    if result.returncode:
        raise SystemExit(result.stderr[-4000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="250000,1000000", help="row counts for the memory comparison (aqe)")
    parser.add_argument("--strategies", default="aqe,salted,sortmerge")
    parser.add_argument("--hot-share", type=float, default=0.9)
    parser.add_argument("--gx", action="store_true", help="also run the raw_image_index GX suite")
    parser.add_argument("--case", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skewed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="aqe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(one_case(args)))
        return

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"master {os.environ.get('IMAGING_SPARK_MASTER', 'local[2]')}")
    results = []
    for strategy in args.strategies.split(","):
        pair = {}
        for skewed in (False, True):
            case = spawn(args.rows, skewed, strategy, args.hot_share, args.gx)
            results.append(case)
            pair[skewed] = case
            print(f"{strategy:9s} {'skewed ' if skewed else 'uniform'} {args.rows:>9,} rows: link {case['link_s']:6.1f} s"
                  f"  checks {case['checks_s']:6.1f} s  total {case['total_s']:6.1f} s  python peak "
                  f"{case['python_peak_mib']:5.0f} MiB  jvm peak {case['jvm_peak_mib'] or 0:5.0f} MiB  slowest task "
                  f"{case['worst_stage']['max_task_s']:.1f} s vs median {case['worst_stage']['median_task_s']:.1f} s"
                  f"  failed: {', '.join(case['failed_checks']) or 'none'}", flush=True)
        print(f"{strategy:9s} skewed/uniform: link {pair[True]['link_s'] / pair[False]['link_s']:.2f}x, "
              f"total {pair[True]['total_s'] / pair[False]['total_s']:.2f}x (goal <= 1.20x)", flush=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        strategy = args.strategies.split(",")[0]
        for rows in sizes:
            case = next((r for r in results if r["rows"] == rows and r["skewed"] and r["strategy"] == strategy), None)
            case = case or spawn(rows, True, strategy, args.hot_share, args.gx)
            print(f"memory {strategy} skewed {rows:>9,} rows: python peak {case['python_peak_mib']:5.0f} MiB, "
                  f"jvm peak {case['jvm_peak_mib'] or 0:5.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
