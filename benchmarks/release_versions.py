"""Release versions that share what did not change, measured: v1, v2 after one opt-out, v3 after one patient's
clinical label changed (stamping on), v4 a full re-stamp after the stamp list changed; against `cp -r`.

    .venv/bin/python benchmarks/release_versions.py [--patients 200] [--oct 36x512x256] [--dates 2] [--keep DIR]
                                                    [--intercept 20] [--gcs 100] [--gcs-only DIR]

Generates its own hospital with `synth` (patients split over two sites, OCT volumes of the given shape and the
fundus photos the generator adds), runs the image pipeline once (raw_image_index, linked_patient_metadata,
anonymized_images: set-up, not measured), then, in the same process (one Spark session, warm), measures
published_cohort as an operator runs it, one cohort selecting every image with `stamp:` on:

  v1        the build that holds v1 (hold run), then the run that publishes it once approved (publish run)
  v2        the same after one patient opts out (published_cohort builds v2 without them; publishing v2 ends v1)
  v3        after one patient's clinical label (visual acuity) changed in their extracts (the upstream site-days
            materialized again, not measured); the cohort file's version raised to 3
  v4        after the stamp list changed (a column added): every image re-stamped; version 4

For each run: wall seconds, the copy step's seconds (the Spark job placing every image), images shared from
the object store and written, image bytes written, and the bytes the releases and the object store hold (each
inode once: what `du` counts). Against `cp -r` of the v3 release folder, right before and right after v4 (page
cache warm), wall and CPU seconds; and the re-stamp's per-file work again in one process, its CPU against cp's
(a ratio that holds whatever else the machine runs). The approvals between runs (two signed reviews, each
re-hashing every byte: a reviewer's `imaging-review`) are timed too, and left out of the runs' seconds.
`--intercept N` builds v1 and v2 again on a hospital of N patients: v2's cost at two sizes (its slope per
unchanged image, its intercept). `--gcs N` then places N images through the object store on the GCS emulator
(tests/services.py): bytes through the platform and stored, per version.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SITES = ("site-a", "site-b")
START = "2024-03-01"
COHORT = "bench-all"
# The eye's acuity (the per-eye linking's column): the patient-level visual_acuity_logmar is empty where the
# extracts are per eye, and a label change there changed no stamped value.
STAMP = ["age_band", "sex", "diagnosis_code", "eye_visual_acuity_logmar"]
ACUITY = ("visual_acuity_logmar", "va_logmar", "logmar")  # and per-eye columns, visual_acuity_logmar_right/_left


def environment(root: Path, dates: list[str]) -> None:
    """The data contract's variables, set before any platform module is imported; a platform folder of our own
    (one cohort: every image, stamped)."""
    platform = root / "platform"
    shutil.copytree(REPO / "platform", platform, ignore=shutil.ignore_patterns("cohorts", "proxy", "*.sh", "*.py"))
    (platform / "cohorts").mkdir()
    write_cohort(platform, 1, STAMP)
    os.environ.update({
        "IMAGING_PLATFORM_DIR": str(platform), "IMAGING_LANDING": str(root / "landing"),
        "IMAGING_WAREHOUSE": str(root / "warehouse"), "IMAGING_SITES": ",".join(SITES),
        "IMAGING_START_DATE": dates[0], "IMAGING_END_DATE": dates[-1], "IMAGING_MIN_K": "1",
        "IMAGING_PSEUDONYM_KEY": "demo-only-pseudonym-key-never-for-real-data",
        "IMAGING_SPARK_MASTER": "local[2]", "SPARK_LOCAL_IP": "127.0.0.1", "DAGSTER_HOME": str(root / "dagster"),
    })
    (root / "dagster").mkdir()
    from imaging.governance.signing import write_demo_keys

    os.environ["IMAGING_APPROVERS"] = str(write_demo_keys(str(root / "approvers")))


def write_cohort(platform: Path, version: int, stamp: list[str]) -> None:
    (platform / "cohorts" / "bench.yaml").write_text(
        f"name: {COHORT}\nversion: {version}\ndescription: every image\nstamp: [{', '.join(stamp)}]\n")


def rooted(landing: Path, warehouse: Path):
    """The code location's definitions on this benchmark's landing zone and warehouse."""
    from definitions import defs
    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    resources = {**defs.resources, "warehouse": Warehouse(root=str(warehouse)),
                 "landing": LandingZone(root=str(landing), files_per_task=defs.resources["landing"].files_per_task)}
    return type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=resources,
                      executor=defs.executor)


def run(defs, selection, partitions=None, instance=None):
    """`selection` materialized in this process, one run (a single-run backfill over `partitions`); every
    cohort when published_cohort is selected (one here)."""
    from dagster import AssetSelection, define_asset_job

    if partitions is None and "published_cohort" in selection:
        partitions = (COHORT, COHORT)
    tags = {"dagster/asset_partition_range_start": partitions[0],
            "dagster/asset_partition_range_end": partitions[1]} if partitions else {}
    job = define_asset_job("bench_job", selection=AssetSelection.assets(*selection))
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    result = resolved.resolve_job_def("bench_job").execute_in_process(instance=instance, tags=tags)
    assert result.success
    return result


def approve(root: Path) -> float:
    """Two demo approvers sign every held release (each signature reviews it in full first)."""
    from imaging.governance.approval import list_held
    from imaging.governance.review import sign_decision

    started = time.monotonic()
    for held in list_held(str(root / "warehouse")):
        for principal in ("demo-approver-1", "demo-approver-2"):
            sign_decision(held.path, "approve", str(root / "approvers" / principal), "benchmark")
    return time.monotonic() - started


def releases(root: Path) -> list[Path]:
    """Where released images are: published versions, held releases, the object store."""
    warehouse = root / "warehouse"
    return [warehouse / "deidentified" / "cohorts", warehouse / "identifiable" / "held",
            warehouse / "deidentified" / "release_objects"]


def stored_bytes(*folders: Path) -> int:
    """Bytes of the files under `folders`, each inode once (hard links count once, as du counts them)."""
    seen, total = set(), 0
    for dirpath, _, names in (entry for folder in folders for entry in os.walk(folder)):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def latest(instance) -> dict:
    from dagster import AssetKey

    record = instance.fetch_materializations(AssetKey("published_cohort"), limit=1).records[0]
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def measure(label: str, defs, instance, root: Path, rows: list) -> dict:
    started = time.monotonic()
    run(defs, ["published_cohort"], instance=instance)
    seconds = time.monotonic() - started
    meta = latest(instance)
    row = {"run": label, "state": meta["state"], "seconds": round(seconds, 2),
           "copy_seconds": meta.get("copy_seconds"), "images": meta["images"],
           "shared": meta.get("images_shared"), "written_bytes": meta.get("image_bytes_written"),
           "stored_bytes": stored_bytes(*releases(root))}
    rows.append(row)
    print(json.dumps(row), flush=True)
    return row


def change_label(landing: Path, patient: str, dry: bool = False) -> list[tuple[str, str]]:
    """Change one patient's visual acuity in every extract naming them (`dry`: only say which would change);
    returns the (date, site) of the extracts."""
    changed = []
    for path in sorted((landing / "clinical").glob("*/*.csv")):
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            fields, lines = reader.fieldnames, list(reader)
        columns = [c for c in fields if c.lower() in ACUITY or c.lower().startswith(f"{ACUITY[0]}_")]
        hit = False
        for line in lines:
            for column in columns:
                if line.get("patient_id") == patient and line[column]:
                    line[column] = "1.5" if line[column] != "1.5" else "1.4"
                    hit = True
        if hit and not dry:
            with path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
                writer.writeheader()
                writer.writerows(lines)
        if hit:
            changed.append((path.stem, path.parent.name))
    return changed


@dataclass(frozen=True)
class Timed:
    seconds: float
    cpu: float  # CPU seconds (user + system) of the work


def cp_r(source: Path, scratch: Path) -> Timed:
    """`cp -r` of a release folder, wall and CPU seconds (its process's), the page cache warm."""
    for dirpath, _, names in os.walk(source):  # warm the page cache, as the platform's reads are
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as handle:
                while handle.read(1 << 22):
                    pass
    target = scratch / "cp-r"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(target)
    return Timed(seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def restamp_in_process(root: Path, stamp: list[str], scratch: Path) -> Timed:
    """The executors' per-file work of a full re-stamp, in this one process (no Spark): every de-identified image
    of the warehouse rewritten with `stamp`, as CopyJob writes it (both checksums); wall and CPU seconds. What the
    copy costs per byte, against cp's, whatever else the machine runs."""
    import json as js

    import pyarrow.dataset as ds

    from imaging.steps.release import CopyJob, HeaderPlan, HeaderRule, ReleaseSource
    from imaging.steps.stamp import StampPlan

    warehouse = root / "warehouse"
    rows = ds.dataset(str(warehouse / "deidentified/anonymized_images/manifest"), format="parquet",
                      partitioning="hive").to_table().to_pylist()
    types = {f.name: str(f.type) for f in ds.dataset(str(warehouse / "deidentified/anonymized_images/manifest"),
                                                      format="parquet", partitioning="hive").schema}
    types["age_band"] = "string"
    plan = HeaderPlan((HeaderRule("PatientAge", "age_band", True), HeaderRule("PatientSex", "sex", False)),
                      StampPlan.build(COHORT, None, stamp, types), "in-process")
    job = CopyJob(str(warehouse / "deidentified"), str(scratch / "restamp"), plan.rules, plan.stamp, plan.code)
    cpu, started = time.process_time(), time.monotonic()
    for row in rows:
        values = {c: row.get(c) for c in plan.value_columns}
        values["age_band"] = "60-64"
        job.copy(ReleaseSource(row["output_path"], row["sha256"], row["patient_pseudonym"],
                               row["study_instance_uid"], row["sop_instance_uid"], js.dumps(values, default=str)))
    out = Timed(time.monotonic() - started, time.process_time() - cpu)
    shutil.rmtree(scratch / "restamp")
    return out


def gcs(root: Path, images: int) -> None:
    """The object-store layout on the GCS emulator (tests/services.py): `images` de-identified files of the
    benchmark's warehouse uploaded, then v1 (every image written into the store through the client, then placed
    by a server-side copy) and v2 (every image shared: server-side copies only). Prints seconds, bytes written
    through the platform and bytes the bucket stores. The emulator copies in its own memory: its seconds say
    nothing of GCS's, its byte counts say what passes through the platform."""
    import json as js

    import pyarrow.dataset as ds

    sys.path.insert(0, str(REPO / "tests"))
    from services import gcs_emulator
    from imaging.steps.release import CopyJob, HeaderPlan, ReleaseSource
    from imaging.steps.stamp import StampPlan

    warehouse = root / "warehouse"
    rows = ds.dataset(str(warehouse / "deidentified/anonymized_images/manifest"), format="parquet",
                      partitioning="hive").to_table().to_pylist()[:images]
    with gcs_emulator() as emulator:
        os.environ.update(emulator.environment())
        bucket = emulator.make_bucket("release-versions")
        fs = emulator.filesystem()
        from imaging import fs as fsx

        for row in rows:  # through gcsfs's writer, as the platform writes (the emulator's `put` can drop a byte)
            fsx.write_bytes(f"{bucket}/deidentified/{row['output_path']}",
                            (warehouse / "deidentified" / row["output_path"]).read_bytes())
        types = {"age_band": "string", "sex": "string", "diagnosis_code": "string"}
        plan = HeaderPlan((), StampPlan.build(COHORT, None, list(types), types), "gcs")
        index = {}
        for version in (1, 2):
            job = CopyJob(f"{bucket}/deidentified", f"{bucket}/deidentified/cohorts/{COHORT}/v{version}",
                          plan.rules, plan.stamp, plan.code, f"{bucket}/deidentified/release_objects")
            started, written = time.monotonic(), 0
            for row in rows:
                values = js.dumps({"patient_pseudonym": row["patient_pseudonym"], "study_date": row["study_date"],
                                   "age_band": None, "sex": row.get("sex"), "diagnosis_code": row.get("diagnosis_code")})
                key = plan.content_key(row["sha256"], values)
                out = job.copy(ReleaseSource(row["output_path"], row["sha256"], row["patient_pseudonym"],
                                             row["study_instance_uid"], row["sop_instance_uid"], values, key,
                                             *index.get(key, (None, None))))
                index[key] = (out.sha256, out.object_identity)
                written += out.written
            seconds = time.monotonic() - started
            stored = sum(int(i["size"]) for i in fs.find(f"{bucket[5:]}/deidentified", detail=True).values()
                         if "/cohorts/" in i["name"] or "/release_objects/" in i["name"])
            print(f"gcs emulator v{version}: {len(rows)} images, {seconds:.2f} s, {written / 1e6:.1f} MB written "
                  f"through the platform, {stored / 1e6:.1f} MB stored (objects and every version's copies)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=200)
    parser.add_argument("--oct", default="32x512x256", help="OCT volume shape, frames x rows x columns (8-bit)")
    parser.add_argument("--dates", type=int, default=3)
    parser.add_argument("--keep", default=None, help="work here and keep it (default: a temporary folder)")
    parser.add_argument("--gcs", type=int, default=0, metavar="IMAGES",
                        help="then measure the object-store layout on the GCS emulator with this many images")
    parser.add_argument("--intercept", type=int, default=0, metavar="PATIENTS",
                        help="then v1 and v2 again on a hospital of this many patients (same shapes): what a version "
                             "costs whatever its size")
    parser.add_argument("--gcs-only", default=None, metavar="DIR",
                        help="only the GCS measurement, on the warehouse a --keep run left in DIR")
    args = parser.parse_args()
    if args.gcs_only:
        gcs(Path(args.gcs_only), args.gcs or 100)
        return 0
    import datetime as dt

    dates = [str(dt.date.fromisoformat(START) + dt.timedelta(days=i)) for i in range(args.dates)]
    root = Path(args.keep or tempfile.mkdtemp(prefix="release-versions-"))
    root.mkdir(parents=True, exist_ok=True)
    environment(root, dates)
    from dagster import DagsterInstance

    from synth import generate_hospital
    from synth.optouts import write_list

    shape = tuple(int(x) for x in args.oct.split("x"))
    started = time.monotonic()
    hospital = generate_hospital(root / "landing", seed=46, sites=SITES, dates=dates,
                                 patients_per_site=args.patients // len(SITES), oct_shape=shape,
                                 fundus_shape=(512, 512), broken_per_partition=False)
    landed = sum(p.stat().st_size for p in (root / "landing" / "images").rglob("*") if p.is_file())
    print(f"hospital: {len(hospital.instances)} images, {landed / 1e9:.2f} GB, "
          f"{time.monotonic() - started:.0f} s to generate", flush=True)
    defs = rooted(root / "landing", root / "warehouse")
    every = (f"{dates[0]}|{SITES[0]}", f"{dates[-1]}|{SITES[-1]}")
    images = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]
    rows: list[dict] = []
    with DagsterInstance.ephemeral() as instance:
        started = time.monotonic()
        run(defs, images, every, instance=instance)
        print(f"image pipeline: {time.monotonic() - started:.0f} s (set-up, not measured)", flush=True)
        measure("v1 hold", defs, instance, root, rows)
        approvals = [approve(root)]
        measure("v1 publish", defs, instance, root, rows)
        release_bytes = stored_bytes(root / "warehouse" / "deidentified" / "cohorts" / COHORT / "v1")
        # v2: one imaged patient opts out (a change to site-b's list, received on the last day).
        fundus = sorted({i.patient_id for i in hospital.instances if i.site == SITES[1]})
        leaving = fundus[0]
        write_list(root / "landing", SITES[1], dates[-1], [(leaving, "add")])
        measure("v2 hold", defs, instance, root, rows)
        approvals.append(approve(root))
        measure("v2 publish", defs, instance, root, rows)
        # v3: a patient of site-a (whose extracts carry visual acuity) has it changed; their site-days are
        # materialized again (not measured).
        patient = next(p for p in sorted({i.patient_id for i in hospital.instances if i.site == SITES[0]})
                       if p != leaving and change_label(root / "landing", p, dry=True))
        touched = change_label(root / "landing", patient)
        days = sorted({(i.date, i.site) for i in hospital.instances if i.patient_id == patient} | set(touched))
        for date, site in days:
            run(defs, ["linked_patient_metadata", "anonymized_images"], (f"{date}|{site}", f"{date}|{site}"),
                instance=instance)
        write_cohort(Path(os.environ["IMAGING_PLATFORM_DIR"]), 3, STAMP)
        v3 = measure("v3 hold", defs, instance, root, rows)
        v3["patient_images"] = sum(1 for i in hospital.instances if i.patient_id == patient)
        approvals.append(approve(root))
        measure("v3 publish", defs, instance, root, rows)
        # v4: the stamp list changes: every image re-stamped. `cp -r` of v3 (v1 ended when v2 was published: it
        # held the patient who opted out) right before and after it.
        release = root / "warehouse" / "deidentified" / "cohorts" / COHORT / "v3"
        copies = [cp_r(release, root)]
        write_cohort(Path(os.environ["IMAGING_PLATFORM_DIR"]), 4, [*STAMP, "eye_iop_mmhg"])
        measure("v4 hold (full re-stamp)", defs, instance, root, rows)
        copies.append(cp_r(release, root))
        local = restamp_in_process(root, [*STAMP, "eye_iop_mmhg"], root)
        copies.append(cp_r(release, root))
        small = []
        if args.intercept:  # the same two builds on a small hospital, in the same process and session
            world = root / "small"
            summary = generate_hospital(world / "landing", seed=47, sites=SITES, dates=dates,
                                        patients_per_site=max(1, args.intercept // len(SITES)), oct_shape=shape,
                                        fundus_shape=(512, 512), broken_per_partition=False)
            other = rooted(world / "landing", world / "warehouse")
            run(other, images, every, instance=instance)
            write_cohort(Path(os.environ["IMAGING_PLATFORM_DIR"]), 1, STAMP)
            measure(f"v1 hold, {args.intercept} patients", other, instance, world, small)
            gone = sorted({i.patient_id for i in summary.instances if i.site == SITES[1]})[0]
            write_list(world / "landing", SITES[1], dates[-1], [(gone, "add")])
            measure(f"v2 hold, {args.intercept} patients", other, instance, world, small)
    load = os.getloadavg()
    copy = sum(c.seconds for c in copies[:2]) / 2
    cpu = sum(c.cpu for c in copies[1:]) / 2
    print()
    print(f"release v1: {rows[1]['images']} images, {release_bytes / 1e9:.3f} GB; cp -r of v3 {copies[0].seconds:.2f} s "
          f"before v4, {copies[1].seconds:.2f} s after (mean {copy:.2f} s), {cpu:.2f} CPU-s; "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'run':26s} {'state':9s} {'seconds':>8s} {'copy s':>7s} {'shared':>7s} {'written MB':>11s} "
          f"{'stored MB':>10s} {'x cp -r':>8s}")
    for r in rows:
        print(f"{r['run']:26s} {r['state']:9s} {r['seconds']:8.2f} {r['copy_seconds'] or 0:7.2f} {r['shared'] or 0:7d} "
              f"{(r['written_bytes'] or 0) / 1e6:11.1f} {r['stored_bytes'] / 1e6:10.1f} "
              f"{(r['copy_seconds'] or 0) / copy:8.2f}")
    for r in small:
        print(f"{r['run']:26s} {r['state']:9s} {r['seconds']:8.2f} {r['copy_seconds'] or 0:7.2f} {r['shared'] or 0:7d} "
              f"{(r['written_bytes'] or 0) / 1e6:11.1f} {r['stored_bytes'] / 1e6:10.1f}  ({r['images']} images)")
    v1, v2 = rows[0], rows[2]
    print(f"v2/v1: {v2['seconds'] / v1['seconds']:.3f} of the time, "
          f"{(v2['written_bytes'] or 0) / max(1, v1['written_bytes'] or 0):.4f} of the image bytes written")
    if small:
        slope = (v2["seconds"] - small[1]["seconds"]) / max(1, v2["images"] - small[1]["images"])
        print(f"v2 against its size: {small[1]['seconds']:.2f} s at {small[1]['images']} images, {v2['seconds']:.2f} s "
              f"at {v2['images']}: {slope * 1000:.2f} ms per unchanged image, intercept "
              f"{small[1]['seconds'] - slope * small[1]['images']:.2f} s")
    print(f"v3: {v3['images'] - (v3['shared'] or 0)} images written, the changed patient has {v3['patient_images']}")
    print(f"v4 re-stamp copy step {rows[-1]['copy_seconds']:.2f} s = {rows[-1]['copy_seconds'] / copy:.2f} x cp -r; "
          f"whole run {rows[-1]['seconds'] / copy:.2f} x cp -r")
    print(f"the same re-stamp's per-file work in one process: {local.seconds:.2f} s, {local.cpu:.2f} CPU-s = "
          f"{local.cpu / cpu:.2f} x cp -r's CPU ({cpu:.2f} CPU-s)")
    print(f"approvals (two full reviews each, reviewers' time): {', '.join(f'{a:.1f} s' for a in approvals)}")
    if args.gcs:
        gcs(root, args.gcs)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
