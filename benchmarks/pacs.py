"""The PACS ingest against a real Orthanc: throughput, and a site-day held only in the PACS taken to a release.

    .venv/bin/python benchmarks/pacs.py [--patients 40] [--oct 16x256x256]   # throughput
    .venv/bin/python benchmarks/pacs.py --release                             # PACS -> approved release, by CLI
    .venv/bin/python benchmarks/pacs.py --protocols [--patients 20]           # DICOMweb vs DIMSE vs dcmtk

Throughput: generates one site-day of a PACS site with `synth` (OPT volumes and fundus photographs), uploads it
to a fresh Orthanc (Debian's `orthanc` + `orthanc-dicomweb`, loopback, a login) and, in this process (one Spark
session, `local[2]`, warmed up on a small site-day first), times:
  - `pacs_landing` fetching the site-day (QIDO-RS listing + WADO-RS retrievals): files/s and MB/s;
  - `pacs_landing` again (nothing changed: every instance kept, each landed copy re-hashed);
  - reading the same files from a landing folder: a plain read of every file (sha256, the floor, from the
    page cache), and `raw_image_index` on the file landing vs on the PACS landing (the same files, the same
    step; alternately, best of two each).

`--protocols`: one site-day in one Orthanc with its DICOM port on (loopback), fetched by `pacs_landing` over
DICOMweb (QIDO-RS + WADO-RS), DIMSE C-GET and DIMSE C-MOVE (to `imaging-receive`, started as deployed), each
into a fresh warehouse (first fetch, every instance retrieved; `max_connections` 2, Spark local[2], warmed up
on another site-day first), against dcmtk doing the same by hand: `getscu` and `movescu` (its own port as the
move destination), bit-preserving, one process per study as an engineer's script would. Instances/s and MB/s
of each (MB: the files landed).

`--release`: the same Orthanc holds a small hospital's site-b for two days, the landing folder holds only its
clinical extracts; then, as an operator would, with the CLIs only: `dagster asset materialize` of pacs_landing and
the three image assets over both days (one run), `published_cohort` (held), `imaging-review approve` by two
approvers (throwaway keys made here), `published_cohort` again (published), and `imaging-review` of each
published release (VERIFIED).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

SITE, DAY, WARM_DAY = "site-b", "2024-03-02", "2024-03-01"
MB = 1 << 20


def upload(orthanc, files: list[Path]) -> list[Path]:
    """POST every file to Orthanc's REST API; the ones it stored."""
    import requests

    stored = []
    with requests.Session() as session:
        session.auth = (orthanc.user, orthanc.password)
        for path in files:
            if session.post(f"{orthanc.rest}/instances", data=path.read_bytes()).status_code == 200:
                stored.append(path)
    return stored


def pacs_env(orthanc, root: Path) -> dict[str, str]:
    return {"IMAGING_LANDING": str(root / "pacs-landing"), "IMAGING_WAREHOUSE": str(root / "warehouse"),
            "IMAGING_SITES": SITE, "IMAGING_START_DATE": WARM_DAY, "IMAGING_END_DATE": DAY,
            "IMAGING_PSEUDONYM_KEY": "benchmark-key-not-secret-" + "b" * 8, "IMAGING_SPARK_MASTER": "local[2]",
            "SPARK_LOCAL_IP": "127.0.0.1", "IMAGING_MIN_K": "1", "IMAGING_PACS_SITE_B_URL": orthanc.dicomweb,
            "IMAGING_PACS_SITE_B_USER": orthanc.user, "IMAGING_PACS_SITE_B_PASSWORD": orthanc.password}


def throughput(args) -> None:
    from services import orthanc_server
    from synth import generate_hospital

    shape = tuple(int(x) for x in args.oct.split("x"))
    root = Path(tempfile.mkdtemp(prefix="pacs-bench-"))
    with orthanc_server() as orthanc:
        hand = root / "hand-landing"
        generate_hospital(hand, seed=3, sites=(SITE,), dates=(WARM_DAY,), patients_per_site=2, broken_per_partition=False)
        summary = generate_hospital(hand, seed=3, sites=(SITE,), dates=(DAY,), patients_per_site=args.patients,
                                    oct_shape=shape, broken_per_partition=False)
        files = sorted(p for p in (hand / "images").rglob("*") if p.is_file())
        stored = upload(orthanc, files)
        for path in set(files) - set(stored):
            path.unlink()
        (root / "pacs-landing").mkdir()
        shutil.copytree(hand / "clinical", root / "pacs-landing" / "clinical")
        os.environ.update(pacs_env(orthanc, root))
        day_files = [p for p in stored if f"/{DAY}/" in str(p)]
        size = sum(p.stat().st_size for p in day_files)
        print(f"site-day {DAY}: {len(day_files)} files, {size / MB:.1f} MB in Orthanc "
              f"({len(summary.dicom_files[(DAY, SITE)])} generated)")

        from dagster import AssetSelection, DagsterInstance, define_asset_job

        from definitions import defs
        from resources.landing import LandingZone
        from resources.warehouse import Warehouse

        def run(definitions, asset: str, key: str) -> float:
            job = define_asset_job("bench", selection=AssetSelection.assets(asset))
            scoped = type(definitions)(assets=definitions.assets, resources=definitions.resources, jobs=[job],
                                       executor=definitions.executor)
            start = time.perf_counter()
            result = scoped.resolve_job_def("bench").execute_in_process(
                instance=DagsterInstance.ephemeral(), partition_key=key)
            assert result.success
            return time.perf_counter() - start

        file_defs = type(defs)(assets=defs.assets, executor=defs.executor, resources={
            **defs.resources, "landing": LandingZone(root=str(hand), files_per_task=defs.resources["landing"].files_per_task),
            "warehouse": Warehouse(root=str(root / "file-warehouse"))})
        warm, key = f"{WARM_DAY}|{SITE}", f"{DAY}|{SITE}"
        for definitions, asset in ((defs, "pacs_landing"), (defs, "raw_image_index"), (file_defs, "raw_image_index")):
            run(definitions, asset, warm)  # session start-up and first-use costs
        start = time.perf_counter()
        for path in day_files:
            hashlib.sha256(path.read_bytes()).hexdigest()
        plain = time.perf_counter() - start
        timings = {
            "pacs_landing, first fetch": run(defs, "pacs_landing", key),
            "pacs_landing, again (unchanged)": run(defs, "pacs_landing", key),
            "read + sha256 of the landed files": plain,
        }
        # The index on both landings, alternately and twice each (the best of two): the order of runs in one
        # process (warm-up, page cache) must not decide the comparison.
        index = {"raw_image_index on the file landing": [], "raw_image_index on the PACS landing": []}
        for _ in range(2):
            index["raw_image_index on the file landing"].append(run(file_defs, "raw_image_index", key))
            index["raw_image_index on the PACS landing"].append(run(defs, "raw_image_index", key))
        timings.update({name: min(times) for name, times in index.items()})
        print(f"{'step':40s} {'s':>7s} {'files/s':>8s} {'MB/s':>7s}")
        for name, seconds in timings.items():
            print(f"{name:40s} {seconds:7.2f} {len(day_files) / seconds:8.1f} {size / MB / seconds:7.1f}")
    shutil.rmtree(root, ignore_errors=True)


def release(args) -> None:
    from approvers import make_approvers
    from services import orthanc_server
    from synth import generate_hospital

    root = Path(tempfile.mkdtemp(prefix="pacs-release-"))
    bin_ = Path(sys.executable).parent
    with orthanc_server() as orthanc:
        hand = root / "generated"
        generate_hospital(hand, seed=11, sites=(SITE,), dates=(WARM_DAY, DAY), patients_per_site=6)
        stored = upload(orthanc, sorted(p for p in (hand / "images").rglob("*") if p.is_file()))
        (root / "pacs-landing").mkdir()
        shutil.copytree(hand / "clinical", root / "pacs-landing" / "clinical")  # the PACS holds the images alone
        print(f"Orthanc holds {len(stored)} instances of {SITE}, {WARM_DAY}..{DAY}; the landing folder only the "
              f"clinical extracts")
        approvers = make_approvers(root / "approvers")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "DAGSTER_"))}
        env.update(pacs_env(orthanc, root), IMAGING_APPROVERS=str(approvers.signers), DAGSTER_HOME=str(root / "home"))
        (root / "home").mkdir()

        def cli(*argv: str, check: bool = True) -> str:
            started = time.perf_counter()
            done = subprocess.run(list(argv), cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
            shown = " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))
            print(f"$ {shown}   [{time.perf_counter() - started:.1f} s, exit {done.returncode}]")
            if check and done.returncode:
                raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
            return done.stdout

        cli(str(bin_ / "dagster"), "asset", "materialize", "-m", "definitions", "--select",
            "pacs_landing,raw_image_index,linked_patient_metadata,anonymized_images",
            "--partition-range", f"{WARM_DAY}|{SITE}...{DAY}|{SITE}")
        cli(str(bin_ / "dagster"), "asset", "materialize", "-m", "definitions", "--select", "published_cohort")
        pending = [line.split()[0] for line in cli(str(bin_ / "imaging-review"), "pending").splitlines() if line.strip()]
        print(f"  {len(pending)} held releases")
        for held in pending:
            for key in approvers.keys.values():
                cli(str(bin_ / "imaging-review"), "approve", held, "--key", str(key), "--note", "benchmarks/pacs.py")
        cli(str(bin_ / "dagster"), "asset", "materialize", "-m", "definitions", "--select", "published_cohort")
        published = sorted((root / "warehouse" / "deidentified" / "cohorts").glob("*/v*"))
        for folder in published:
            out = cli(str(bin_ / "imaging-review"), str(folder))
            verdict = next((line for line in out.splitlines() if "VERIFIED" in line), out.splitlines()[-1:])
            images = len(list((folder / "images").rglob("*.dcm")))
            print(f"  {folder.relative_to(root / 'warehouse')}: {images} images; {verdict}")
        instances = json.loads(subprocess.run(
            ["curl", "-s", "-u", f"{orthanc.user}:{orthanc.password}", f"{orthanc.rest}/statistics"],
            capture_output=True, text=True).stdout)["CountInstances"]
        print(f"published {len(published)} releases from a site-day held only in Orthanc ({instances} instances)")
    shutil.rmtree(root, ignore_errors=True)


def protocols(args) -> None:
    import pydicom
    import yaml

    from services import free_port, orthanc_server, port_open, wait_until
    from synth import generate_hospital

    shape = tuple(int(x) for x in args.oct.split("x"))
    root = Path(tempfile.mkdtemp(prefix="pacs-protocols-"))
    receiver_port, movescu_port = free_port(), free_port()
    peers = {"platform": ("IMAGING", "127.0.0.1", 104), "receiver": ("IMAGING-RECV", "127.0.0.1", receiver_port),
             "getscu": ("HAND", "127.0.0.1", 104), "movescu": ("MOVESCU", "127.0.0.1", movescu_port)}
    with orthanc_server(dicom_modalities=peers) as orthanc:
        hand = root / "generated"
        generate_hospital(hand, seed=3, sites=(SITE,), dates=(WARM_DAY,), patients_per_site=2, broken_per_partition=False)
        generate_hospital(hand, seed=3, sites=(SITE,), dates=(DAY,), patients_per_site=args.patients, oct_shape=shape,
                          broken_per_partition=False)
        stored = upload(orthanc, sorted(p for p in (hand / "images").rglob("*") if p.is_file()))
        day_files = [p for p in stored if f"/{DAY}/" in str(p)]
        studies = sorted({str(pydicom.dcmread(p, stop_before_pixels=True).StudyInstanceUID) for p in day_files})
        (root / "pacs-landing").mkdir()
        shutil.copytree(hand / "clinical", root / "pacs-landing" / "clinical")
        os.environ.update(pacs_env(orthanc, root))
        print(f"site-day {DAY}: {len(day_files)} instances in {len(studies)} studies, "
              f"{sum(p.stat().st_size for p in day_files) / MB:.1f} MB uploaded to Orthanc")

        # imaging-receive, as deployed (its console script), for the C-MOVE runs.
        platform = root / "platform"
        shutil.copytree(REPO / "platform", platform)
        config = yaml.safe_load((platform / "pacs.yaml").read_text())
        config["servers"] = {SITE: {"protocol": "dimse", "host": "127.0.0.1", "port": orthanc.dicom_port,
                                    "called_ae": orthanc.aet, "calling_ae": "IMAGING", "retrieve": "c-move",
                                    "move_destination": "IMAGING-RECV"}}
        config["receiver"] = {"ae_title": "IMAGING-RECV", "host": "127.0.0.1", "port": receiver_port,
                              "senders": [{"ae_title": orthanc.aet, "addresses": ["127.0.0.1"]}]}
        (platform / "pacs.yaml").write_text(yaml.safe_dump(config))
        move_warehouse = root / "warehouse-c-move"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("IMAGING_PACS_")},
               "IMAGING_PLATFORM_DIR": str(platform), "IMAGING_WAREHOUSE": str(move_warehouse)}
        receiver = subprocess.Popen([str(Path(sys.executable).parent / "imaging-receive")], env=env,
                                    stdout=open(root / "receive.log", "wb"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            wait_until(lambda: port_open(receiver_port), "imaging-receive", 60, [root / "receive.log"])
            from dagster import AssetSelection, DagsterInstance, define_asset_job

            from definitions import defs
            from resources.landing import LandingZone
            from resources.pacs import DimseSite, PacsServers
            from resources.warehouse import Warehouse

            def landing_run(warehouse: Path, pacs, key: str) -> float:
                pacs_root = f"{warehouse}/identifiable/pacs_landing"
                resources = {**defs.resources, "warehouse": Warehouse(root=str(warehouse)),
                             "landing": LandingZone(root=str(root / "pacs-landing"), files_per_task=64,
                                                    pacs_root=pacs_root, pacs_sites=[SITE]), "pacs": pacs}
                job = define_asset_job("bench", selection=AssetSelection.assets("pacs_landing"))
                scoped = type(defs)(assets=defs.assets, resources=resources, jobs=[job], executor=defs.executor)
                start = time.perf_counter()
                result = scoped.resolve_job_def("bench").execute_in_process(instance=DagsterInstance.ephemeral(),
                                                                             partition_key=key)
                assert result.success
                took = time.perf_counter() - start
                for event in result.all_events:  # the asset's own time from its retrievals' start to the commit
                    if event.is_step_materialization:
                        retrieval[warehouse] = event.step_materialization_data.materialization.metadata[
                            "run/seconds"].value
                return took

            retrieval: dict[Path, float] = {}

            def dimse(retrieve: str, warehouse: Path):
                site = DimseSite(host="127.0.0.1", port=orthanc.dicom_port, called_ae=orthanc.aet, calling_ae="IMAGING",
                                 retrieve=retrieve, move_destination="IMAGING-RECV" if retrieve == "c-move" else "",
                                 spool=f"{warehouse}/identifiable/pacs_spool" if retrieve == "c-move" else "")
                return PacsServers(dimse={SITE: site}, max_connections={SITE: 2}, retries=2, backoff_seconds=0.5,
                                   timeout_seconds=30, sensor_days=7, landing=f"{warehouse}/identifiable/pacs_landing")

            web = defs.resources["pacs"]
            warm, key = f"{WARM_DAY}|{SITE}", f"{DAY}|{SITE}"
            landing_run(root / "warm-web", web, warm)
            landing_run(root / "warm-get", dimse("c-get", root / "warm-get"), warm)
            landing_run(move_warehouse, dimse("c-move", move_warehouse), warm)
            timings, sizes, phases = {}, {}, {}
            for name, warehouse, pacs in (("pacs_landing, DICOMweb", root / "warehouse-web", web),
                                          ("pacs_landing, DIMSE C-GET", root / "warehouse-c-get",
                                           dimse("c-get", root / "warehouse-c-get")),
                                          ("pacs_landing, DIMSE C-MOVE", move_warehouse,
                                           dimse("c-move", move_warehouse))):
                timings[name] = landing_run(warehouse, pacs, key)
                phases[name] = retrieval[warehouse]
                folder = warehouse / "identifiable" / "pacs_landing" / "images" / SITE / DAY
                sizes[name] = [p.stat().st_size for p in folder.iterdir()]
        finally:
            receiver.terminate()
            receiver.wait(30)

        def dcmtk(name: str, argv: list[str]) -> None:
            out = root / name.split()[1]
            out.mkdir()
            start = time.perf_counter()
            for study in studies:  # in `out` (movescu writes to its working folder whatever -od says)
                subprocess.run([*argv, "+B", "-od", str(out), "-k", "QueryRetrieveLevel=STUDY",
                                "-k", f"StudyInstanceUID={study}"], check=True, capture_output=True, timeout=600,
                               cwd=out)
            timings[name] = time.perf_counter() - start
            sizes[name] = [p.stat().st_size for p in out.iterdir()]

        target = ["-aec", orthanc.aet, "127.0.0.1", str(orthanc.dicom_port), "-S"]
        dcmtk("dcmtk getscu (one per study)", ["getscu", "-aet", "HAND", *target])
        dcmtk("dcmtk movescu (one per study)", ["movescu", "-aet", "MOVESCU", "-aem", "MOVESCU", "+P",
                                                str(movescu_port), *target])
    # s: the whole run (the asset: listing, Spark job, commit; dcmtk: every process); retrieval s: the asset's
    # retrievals and commit alone (its `run/seconds`), the figure to set against dcmtk's.
    print(f"{'retrieval of the site-day':34s} {'s':>6s} {'files':>6s} {'inst/s':>7s} {'MB/s':>6s}   "
          f"{'retrieval s':>11s} {'inst/s':>7s} {'MB/s':>6s}")
    for name, seconds in timings.items():
        files, size = len(sizes[name]), sum(sizes[name])
        line = f"{name:34s} {seconds:6.2f} {files:6d} {files / seconds:7.1f} {size / MB / seconds:6.1f}"
        if name in phases:
            line += f"   {phases[name]:11.2f} {files / phases[name]:7.1f} {size / MB / phases[name]:6.1f}"
        print(line)
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=40, help="patients of the timed site-day")
    parser.add_argument("--oct", default="16x256x256", help="OPT volume shape, frames x rows x columns")
    parser.add_argument("--release", action="store_true", help="take a PACS-only site-day to a release by CLI")
    parser.add_argument("--protocols", action="store_true", help="DICOMweb vs DIMSE C-GET / C-MOVE vs dcmtk")
    args = parser.parse_args()
    release(args) if args.release else protocols(args) if args.protocols else throughput(args)


if __name__ == "__main__":
    main()
