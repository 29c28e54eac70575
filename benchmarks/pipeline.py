"""The platform against the script a user would write: fixed cost, marginal cost per GB, memory.

    .venv/bin/python benchmarks/pipeline.py [--files 150,300,600 | --gb 0.5,1.0] [--shape 16x256x256]
                                            [--small-files 2000] [--against CHECKOUT]
                                            [--profile DIR] [--jfr DIR] [--assets A,B] [--keep]

Generates its own deterministic corpus with `synth` (one site-day per size: OCT-like multi-frame
files of about 1 MB, 16 x 256 x 256 8-bit with BurnedInAnnotation NO, plus the small fundus photos
the generator adds; and a many-small-files variant, 1 x 64 x 64 volumes), then measures, in the same
run and on the same trees (page cache warm: every tree is read once before anything is timed):

  cp -r      a copy of the site-day's tree (the machine's limit)
  loop       a plain one-process pydicom read-modify-write loop (read, blank five attributes, write)
  ocr loop   the same loop doing the same job as the platform: Tesseract on three frames a file
             (first, middle, last) at native size, one pass, the model loaded once
  header     a one-process header-only read loop (`stop_before_pixels`)
  sha256     the sha256 of every byte, one process (what hashing costs on its own)
  spark script  the plain loop as a one-query PySpark script in a fresh process (local[2]): what any
             cold Spark process pays (its intercept), beside the platform's; `spark index script` the
             same for a header-only index (headers and sha256 into a table), beside raw_image_index
  platform loop  the platform's own per-file work in one process, no Spark (index_file, then the
             anonymize step with the burned-in text OCR of platform/pixel_text.yaml), and the CPU of
             the OCR check alone (`ocr`): what the executors do per file, and what bounds it
  platform   `dagster asset materialize` of raw_image_index, linked_patient_metadata and
             anonymized_images through the CLI (IMAGING_SPARK_MASTER=local[2]) on an empty site-day
             (the fixed cost) and on each corpus size (marginal cost per GB = the slope of the least-squares
             line through the sizes, two or more; the intercept, what a run with data pays before
             its first file, = where that line meets zero bytes)

For each platform run it prints the wall time, the step times from the run's event log
(STEP_START -> STEP_SUCCESS), the time before the run started (process start, code loading),
Spark's jobs and stages and the executors' run and CPU time (from Spark's own event log), and the
peak RSS of the driver (the CLI's Python process and the JVM) and of the executors' Python
workers, sampled over the process tree. Figures are also given as ratios to `cp -r` and to the loop.

`--against CHECKOUT` runs the same platform runs from another checkout too (before/after, same
corpus, same run). `--profile DIR` runs the largest corpus once more under `py-spy record --subprocesses` and writes
the collapsed stacks (`DIR/pipeline.txt`) and a summary of the hottest functions. `--jfr DIR` runs it
once more with Java Flight Recorder on the driver JVM (`DIR/driver.jfr`) and prints where the JVM's CPU goes:
by thread (query planning in the threads that run Python's DataFrame calls and actions, the JIT compilers,
the garbage collector, task threads) and by what the sampled Java stacks are doing. `--assets` measures
another selection (e.g. `raw_image_index` alone, at sizes where its marginal cost is above the noise).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform as host
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

SELECT = "raw_image_index,linked_patient_metadata,anonymized_images"
SITE = "site-a"
EMPTY_DAY, DAY = "2024-03-01", "2024-03-02"  # the empty site-day comes first: it has no folder at all
OCT_SHAPE = (16, 256, 256)  # 1 MB of 8-bit pixels: an OCT-like volume of 16 B-scans (issue 21's corpus)
SMALL_SHAPE = (1, 64, 64)
FILES_PER_PATIENT = 2.4  # synth: 1-2 eyes x OPT (+ OP photo 60% of the time); measured counts are printed
MEAN_FILE_BYTES = 0.69e6  # OCT volumes of 1 MB and fundus photos of 14 kB, as synth mixes them
BLANKED = ("PatientName", "PatientID", "PatientBirthDate", "AccessionNumber", "InstitutionName")
ASSETS = SELECT.split(",")


# ------------------------------------------------------------------------------------------ corpus

def generate(landing: Path, files: int, shape: tuple[int, int, int], seed: int = 12) -> Path:
    """One site-day of about `files` files; returns the site-day folder.

    The OCT pixel cube of a seed is drawn once per (shape, seed mod 16) and reused, with the seed
    written into each frame's first pixels: the generator's speckle costs more than anything measured
    here, and a few pixels do not change the work, yet no two frames are alike (the platform keeps text
    verdicts by pixel hash; repeated frames would flatter it). Same arguments, same bytes.
    """
    import numpy as np
    import synth.dicom
    from synth import generate_hospital
    from synth.pixels import oct_volume

    original = synth.dicom.oct_volume
    cube = functools.lru_cache(maxsize=32)(lambda s, seed: oct_volume(s, seed % 16))

    def unique(s, seed):
        # Every frame of every file different (its first eight pixels hold the seed): the platform keeps text
        # verdicts by pixel hash, and 16 repeated cubes would let it skip Tesseract where the loops do not.
        out = cube(s, seed).copy()
        out[:, 0, :8] = np.frombuffer((int(seed) % (1 << 64)).to_bytes(8, "little"), dtype=np.uint8)
        return out

    synth.dicom.oct_volume = unique
    try:
        generate_hospital(landing, seed=seed, sites=(SITE,), dates=(DAY,),
                          patients_per_site=max(2, round(files / FILES_PER_PATIENT)), oct_shape=shape,
                          fundus_shape=(64, 64), broken_per_partition=False)
    finally:
        synth.dicom.oct_volume = original
    return landing / "images" / SITE / DAY


@dataclass
class Tree:
    label: str
    landing: Path
    folder: Path
    files: list[Path]

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    @property
    def gb(self) -> float:
        return self.bytes / 1e9


def tree(label: str, landing: Path, files: int, shape, seed: int = 12) -> Tree:
    folder = generate(landing, files, shape, seed)
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    for p in paths:  # warm the page cache: every figure below reads from memory
        p.read_bytes()
    return Tree(label, landing, folder, paths)


# ------------------------------------------------------------------------------------------ baselines

CPU: dict[str, float] = {}  # CPU seconds of the last `timed` call, by label


def timed(work, label: str = "") -> float:
    """Wall seconds of `work()`; its CPU seconds (this process and waited-for children) go to CPU[label]."""
    before, children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    work()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[label] = time.process_time() - before + (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    return wall


def cp_r(t: Tree, scratch: Path) -> float:
    out = scratch / f"cp-{t.label}"
    seconds = timed(lambda: subprocess.run(["cp", "-r", str(t.folder), str(out)], check=True), "cp -r")
    shutil.rmtree(out)
    return seconds


def blank_and_save(ds, path: Path) -> None:
    """The loops' de-identification: blank five attributes, write the file."""
    for keyword in BLANKED:
        if keyword in ds:
            setattr(ds, keyword, "")
    ds.save_as(path)


def plain_loop(t: Tree, scratch: Path) -> float:
    """What a user would write: read each file, blank five attributes, write it."""
    import pydicom

    out = scratch / f"loop-{t.label}"
    out.mkdir()

    def work():
        for i, path in enumerate(t.files):
            blank_and_save(pydicom.dcmread(path), out / f"{i}.dcm")

    seconds = timed(work, "loop")
    shutil.rmtree(out)
    return seconds


def ocr_loop(t: Tree, scratch: Path) -> float:
    """The plain loop plus what a user would add for burned-in text: Tesseract (tesserocr, the model
    loaded once) on three frames of each file (first, middle, last) at native size, one pass with its
    defaults, before the attributes are blanked and the file written."""
    import numpy as np
    import pydicom
    import tesserocr
    from PIL import Image

    from imaging.deid.pixel_text import find_tessdata

    out = scratch / f"ocr-loop-{t.label}"
    out.mkdir()

    def work():
        with tesserocr.PyTessBaseAPI(path=find_tessdata()) as api:
            for i, path in enumerate(t.files):
                ds = pydicom.dcmread(path)
                pixels = ds.pixel_array
                frames = pixels if pixels.ndim == 3 and int(ds.get("NumberOfFrames", 1) or 1) > 1 else pixels[None]
                for index in sorted({0, len(frames) // 2, len(frames) - 1}):
                    frame = frames[index]
                    if frame.ndim == 3:  # colour: PIL reads RGB as it is
                        image = Image.fromarray(frame.astype(np.uint8))
                    else:
                        grey = frame.astype(np.float32)
                        span = float(grey.max() - grey.min()) or 1.0
                        image = Image.fromarray(((grey - grey.min()) * (255.0 / span)).astype(np.uint8))
                    api.SetImage(image)
                    api.GetUTF8Text()
                blank_and_save(ds, out / f"{i}.dcm")

    seconds = timed(work, "ocr loop")
    shutil.rmtree(out)
    return seconds


def header_loop(t: Tree) -> float:
    import pydicom

    return timed(lambda: [pydicom.dcmread(p, stop_before_pixels=True) for p in t.files], "header")


def sha256_loop(t: Tree) -> float:
    def work():
        for p in t.files:
            digest = hashlib.sha256()
            with open(p, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return timed(work, "sha256")


def platform_loop(t: Tree, scratch: Path) -> float:
    """The platform's own per-file work in one process, no Spark: `index_file` then the anonymize
    step (hash check, de-identification with the burned-in text OCR of platform/pixel_text.yaml,
    write, output hash) on each file. CPU["ocr"] is the CPU spent in the OCR check alone."""
    import dataclasses

    from imaging.deid.pixel_text import PixelTextDetector
    from imaging.driver.config import load_settings
    from imaging.records import IndexedImage, LinkedImage, ListedFile
    from imaging.steps.anonymize import AnonymizeJob
    from imaging.driver.platform_files import load_clinical_policy
    from imaging.steps.index import index_file
    from resources.deid import Deidentifier

    settings = load_settings({**os.environ, "IMAGING_PSEUDONYM_KEY": "benchmark-key-not-a-secret-" + "b" * 8})
    deid = Deidentifier(pseudonym_key="benchmark-key-not-a-secret-" + "b" * 8, options=list(settings.deid_options),
                        issuers=settings.issuers, pixel_text=settings.pixel_text)
    out = scratch / f"platform-loop-{t.label}"
    job = AnonymizeJob(deid.pseudonym_key, tuple(deid.options), load_clinical_policy(), deid.issuer_policy(),
                       deid.pixel_text_settings(), staging=str(out))
    ocr = [0.0]
    check = PixelTextDetector.check

    def timed_check(self, *args, **kwargs):
        before = time.process_time()
        try:
            return check(self, *args, **kwargs)
        finally:
            ocr[0] += time.process_time() - before

    indexing = [0.0]

    def work():
        anonymizer = job()
        for path in t.files:
            before = time.process_time()
            record = index_file(ListedFile(DAY, SITE, str(path), path.stat().st_size))
            indexing[0] += time.process_time() - before
            if isinstance(record, IndexedImage):
                fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(IndexedImage)}
                anonymizer(LinkedImage(**fields))

    PixelTextDetector.check = timed_check
    try:
        seconds = timed(work, "platform loop")
    finally:
        PixelTextDetector.check = check
    CPU["ocr"], CPU["index"] = ocr[0], indexing[0]
    shutil.rmtree(out, ignore_errors=True)
    return seconds


SPARK_SCRIPT = r"""
import hashlib, os, sys
import pyarrow as pa
from pyspark.sql import SparkSession

job, folder, out = sys.argv[1], sys.argv[2], sys.argv[3]
BLANKED = {blanked!r}

def loop(batches):  # the plain loop: blank five attributes, write the file
    import pydicom
    for batch in batches:
        names = []
        for path in batch.column("path").to_pylist():
            ds = pydicom.dcmread(path)
            for keyword in BLANKED:
                if keyword in ds:
                    setattr(ds, keyword, "")
            name = os.path.join(out, "files", os.path.basename(path))
            ds.save_as(name)
            names.append(name)
        yield pa.RecordBatch.from_pydict({{"path": names}})

def index(batches):  # the header-only index: a few header values and the file's sha256
    import pydicom
    for batch in batches:
        rows = {{"path": [], "sop_instance_uid": [], "patient_id": [], "sha256": []}}
        for path in batch.column("path").to_pylist():
            ds = pydicom.dcmread(path, stop_before_pixels=True)
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            for key, value in (("path", path), ("sop_instance_uid", str(ds.get("SOPInstanceUID", ""))),
                               ("patient_id", str(ds.get("PatientID", ""))), ("sha256", digest.hexdigest())):
                rows[key].append(value)
        yield pa.RecordBatch.from_pydict(rows)

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
os.makedirs(os.path.join(out, "files"))
paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)
frame = spark.createDataFrame([(p,) for p in paths], "path string").repartition(8)
if job == "loop":
    frame.mapInArrow(loop, "path string").write.parquet(os.path.join(out, "table"))
else:
    frame.mapInArrow(index, "path string, sop_instance_uid string, patient_id string, sha256 string") \
        .write.parquet(os.path.join(out, "table"))
rows = spark.read.parquet(os.path.join(out, "table")).count()
assert rows == len(paths), (rows, len(paths))
spark.stop()
""".format(blanked=BLANKED)


def spark_script(t: Tree, scratch: Path, job: str = "loop") -> float:
    """A one-query PySpark script in a fresh process (local[2], Spark's defaults): list the files on the
    driver, repartition, then in a `mapInArrow` either the plain loop (`loop`: blank, write each file) or a
    header-only index (`index`: a few header values and each file's sha256), and write a table of the rows.
    Its intercept is what any cold Spark process pays before its first file; its slope what Spark adds to
    the per-file work at its simplest. Wall time only (its JVM's CPU is not counted by this process)."""
    out = scratch / f"spark-{job}-{t.label}"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    label = "spark script" if job == "loop" else "spark index script"
    seconds = timed(lambda: subprocess.run([sys.executable, "-c", SPARK_SCRIPT, job, str(t.folder), str(out)],
                                           check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                    label)
    if job == "loop" and len(list((out / "files").iterdir())) != len(t.files):
        raise SystemExit(f"spark script: {len(t.files)} files in, another number out")
    shutil.rmtree(out)
    return seconds


def baselines(t: Tree, scratch: Path) -> dict[str, float]:
    import warnings

    warnings.filterwarnings("ignore")
    wall = {"cp -r": cp_r(t, scratch), "loop": plain_loop(t, scratch), "header": header_loop(t),
            "sha256": sha256_loop(t)}
    if t.label != "small":  # the OCR baseline is for the OCT corpus (issue 21's targets)
        wall["ocr loop"] = ocr_loop(t, scratch)
    if "anonymized_images" in ASSETS:  # its OCR costs ~800 CPU-s/GB: only when the platform runs it too
        wall["platform loop"] = platform_loop(t, scratch)
    cpu = {f"{k} CPU": CPU[k] for k in wall}
    wall["spark script"] = spark_script(t, scratch)  # wall only (see its docstring)
    if "raw_image_index" in ASSETS:
        wall["spark index script"] = spark_script(t, scratch, "index")
    return {**wall, **cpu, **({"ocr CPU": CPU["ocr"], "index CPU": CPU["index"]} if "ocr" in CPU else {})}


# ------------------------------------------------------------------------------------------ the platform

@dataclass
class Sampler:
    """Peak RSS and CPU time of a process tree by role, sampled every `every` seconds.

    CPU time is what a loaded machine cannot inflate much (wall time there is mostly waiting
    for a core): each process's last sampled user + system time, summed by role, and the
    tree's total over time (`series`), from which each step's CPU is read.
    """

    pid: int
    every: float = 0.2
    peaks: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    process_peaks: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # role -> largest one process's RSS
    series: list[tuple[float, float]] = field(default_factory=list)  # (time, CPU seconds of the tree so far)
    _cpu: dict[tuple[int, float], tuple[str, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def processes(self, role: str) -> int:
        """How many processes of `role` ran (each new Python worker pays its imports)."""
        return sum(1 for r, _ in self._cpu.values() if r == role)

    def cpu(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for role, seconds in self._cpu.values():
            out[role] += seconds
        return dict(out)

    @staticmethod
    def role(proc: psutil.Process) -> str:
        try:
            name, cmd = proc.name(), " ".join(proc.cmdline())
        except psutil.Error:
            return "gone"
        if "java" in name:
            return "driver JVM"
        if any(m in cmd for m in ("pyspark.daemon", "pyspark.worker", "pyspark/daemon", "imaging.worker_daemon")):
            return "executor Python"
        if "py-spy" in name:
            return "profiler"
        return "driver Python"

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            now: dict[str, int] = defaultdict(int)
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for proc in procs:
                try:
                    key = (proc.pid, proc.create_time())
                    role = self.role(proc)  # again each time: spark-submit's shell becomes the JVM by exec
                    if role == "gone":
                        continue
                    with proc.oneshot():
                        rss = proc.memory_info().rss
                        now[role] += rss
                        self.process_peaks[role] = max(self.process_peaks[role], rss)
                        times = proc.cpu_times()
                        self._cpu[key] = (role, times.user + times.system)
                except psutil.Error:
                    pass
            for role, rss in now.items():
                self.peaks[role] = max(self.peaks[role], rss)
            self.series.append((time.time(), sum(c for _, c in self._cpu.values())))
            time.sleep(self.every)

    def __enter__(self):
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@dataclass
class PlatformRun:
    label: str
    wall: float
    steps: dict[str, float]
    before_run: float  # CLI start -> RUN_START: interpreter, Dagster, code loading
    after_run: float  # RUN_SUCCESS -> process exit
    memory: dict[str, int]
    spark: dict[str, float]
    cpu: dict[str, float]  # CPU seconds by role (sampled), see Sampler
    step_cpu: dict[str, float]  # CPU seconds of the whole tree during each step
    process_memory: dict[str, int] = field(default_factory=dict)  # role -> the largest RSS of one process

    @property
    def total_cpu(self) -> float:
        return sum(v for k, v in self.cpu.items() if k != "profiler")


def spark_log_summary(folder: Path) -> dict[str, float]:
    """Jobs, stages, tasks and executor time from Spark's event log (JSON lines)."""
    out = Counter()
    for path in (p for p in folder.rglob("*") if p.is_file()):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerJobStart":
                    out["jobs"] += 1
                elif kind == "SparkListenerStageCompleted":
                    out["stages"] += 1
                elif kind == "SparkListenerTaskEnd":
                    out["tasks"] += 1
                    metrics = event.get("Task Metrics") or {}
                    out["executor run s"] += metrics.get("Executor Run Time", 0) / 1e3
                    out["executor CPU s"] += metrics.get("Executor CPU Time", 0) / 1e9
                    out["JVM GC s"] += metrics.get("JVM GC Time", 0) / 1e3
                    out["deserialize s"] += metrics.get("Executor Deserialize Time", 0) / 1e3
                elif kind == "SparkListenerApplicationStart":
                    out["app start ms"] = event.get("Timestamp", 0)
    out.pop("app start ms", None)
    return dict(out)


def cpu_between(series: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds the tree used between two times, from the sampled series."""
    def at(t: float) -> float:
        before = [c for when, c in series if when <= t]
        return before[-1] if before else 0.0
    return at(end) - at(start)


def step_times(home: Path) -> tuple[dict[str, float], float, float, dict[str, tuple[float, float]]]:
    """Step durations and the run's start/end from the instance's event log (latest run)."""
    from dagster import DagsterEventType, DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    try:
        (record,) = instance.get_run_records(limit=1)
        starts, steps, run, windows = {}, {}, {}, {}
        for entry in instance.all_logs(record.dagster_run.run_id):
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.STEP_START:
                starts[entry.step_key] = entry.timestamp
            elif event.event_type == DagsterEventType.STEP_SUCCESS:
                steps[entry.step_key] = entry.timestamp - starts[entry.step_key]
                windows[entry.step_key] = (starts[entry.step_key], entry.timestamp)
            elif event.event_type in (DagsterEventType.RUN_START, DagsterEventType.RUN_SUCCESS):
                run[event.event_type] = entry.timestamp
        return steps, run[DagsterEventType.RUN_START], run[DagsterEventType.RUN_SUCCESS], windows
    finally:
        instance.dispose()


def materialize(label: str, landing: Path, work: Path, day: str, profile: Path | None = None,
                repo: Path = REPO, jfr: Path | None = None) -> PlatformRun:
    """One `dagster asset materialize` of the three image assets on `day`, in a fresh warehouse.

    The Dagster home is kept between runs of a checkout (an operator's instance exists already;
    a first run also creates its SQLite storage, which is not what is measured here).
    """
    home, events = work / f"home-{repo.name}", work / f"spark-events-{label}"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir(parents=True)
    home.mkdir(exist_ok=True)
    shutil.copy(REPO / "platform" / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGING_")}
    env.update(IMAGING_LANDING=str(landing), IMAGING_WAREHOUSE=str(work / f"warehouse-{label}"),
               IMAGING_SITES=SITE, IMAGING_START_DATE=EMPTY_DAY, IMAGING_PSEUDONYM_KEY="benchmark-key-not-a-secret-" + "b" * 8,
               IMAGING_SPARK_MASTER="local[2]", SPARK_LOCAL_IP="127.0.0.1", DAGSTER_HOME=str(home),
               # Spark's own event log, for jobs/stages/executor CPU (a classic session reads this).
               PYSPARK_SUBMIT_ARGS=f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events} "
                                   "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false "
                                   + (f"--driver-java-options '{driver_java_options(repo)} "
                                      f"-XX:StartFlightRecording=filename={jfr},settings=profile' " if jfr else "")
                                   + "pyspark-shell")
    command = [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m", "definitions",
               "--select", ",".join(ASSETS), "--partition", f"{day}|{SITE}"]
    if profile is not None:
        command = [str(Path(sys.executable).with_name("py-spy")), "record", "--subprocesses", "--rate", "50",
                   "--format", "raw", "--output", str(profile), "--"] + command
    start = time.time()
    with open(work / f"{label}.log", "w") as log:
        proc = subprocess.Popen(command, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)
        with Sampler(proc.pid) as sampler:
            code = proc.wait()
    end = time.time()
    if code:
        raise SystemExit(f"{label}: dagster exited {code}; see {work / f'{label}.log'}:\n"
                         + (work / f"{label}.log").read_text()[-3000:])
    steps, run_start, run_end, windows = step_times(home)
    step_cpu = {k: cpu_between(sampler.series, a, b) for k, (a, b) in windows.items()}
    spark = spark_log_summary(events)
    if spark:  # a run that started Spark: how many Python worker processes it started
        spark["Python worker processes"] = sampler.processes("executor Python")
    return PlatformRun(label, end - start, steps, run_start - start, end - run_end, dict(sampler.peaks),
                       spark, sampler.cpu(), step_cpu, dict(sampler.process_peaks))


# ------------------------------------------------------------------------------------------ profile summary

def driver_java_options(repo: Path) -> str:
    """The checkout's own driver JVM options (platform/spark.yaml): `--driver-java-options` replaces them."""
    import yaml

    return str(yaml.safe_load((repo / "platform" / "spark.yaml").read_text()).get("spark.driver.extraJavaOptions", ""))


# What a sampled Java stack is doing, by the first of these found anywhere in it (most specific first).
JVM_WORK = (("codehaus", "compiling generated code (Janino)"), ("expressions.codegen", "generating code"),
            ("catalyst.analysis", "analysing plans"), ("catalyst.optimizer", "optimising plans"),
            ("adaptive", "adaptive execution"), ("SparkStrategies", "physical planning"),
            ("QueryPlanner", "physical planning"), ("parquet", "Parquet"), ("arrow", "Arrow"),
            ("execution.python", "Python UDF/mapInArrow plumbing"), ("GeneratedClass", "running generated code"),
            ("Executor$TaskRunner", "running tasks (other)"), ("scheduler", "scheduling"),
            ("catalyst.trees", "plan tree walks"), ("py4j", "py4j calls"), ("ZipFile", "class loading"))


def summarize_jfr(recording: Path, top: int = 12) -> str:
    """CPU by thread (jdk.ThreadCPULoad) and the sampled stacks by kind of work (jdk.ExecutionSample)."""
    tool = shutil.which("jfr") or str(Path(os.environ.get("JAVA_HOME", "/usr")) / "bin" / "jfr")

    def events(name: str) -> list[dict]:
        out = subprocess.run([tool, "print", "--json", "--stack-depth", "128", "--events", name, str(recording)],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)["recording"]["events"]

    def group(thread: str) -> str:
        for prefix, name in (("serve-", "actions (collect/first: plan, optimise, run)"),
                             ("Thread-", "py4j calls (DataFrame API: analysis)"), ("C2 Compiler", "JIT C2"),
                             ("C1 Compiler", "JIT C1"), ("GC Thread", "garbage collector"), ("G1", "garbage collector"),
                             ("Executor task", "task threads"), ("shuffle-exchange", "adaptive shuffle stages"),
                             ("ResultQueryStage", "adaptive result stages")):
            if thread.startswith(prefix):
                return name
        return "other"

    load: Counter = Counter()
    for e in events("jdk.ThreadCPULoad"):
        v = e["values"]
        load[group(v["eventThread"]["javaName"] or v["eventThread"]["osName"] or "")] += v["user"] + v["system"]
    samples = events("jdk.ExecutionSample")
    kinds: Counter = Counter()
    for e in samples:
        stack = e["values"]["stackTrace"]
        text = " ".join(f["method"]["type"]["name"] + "." + f["method"]["name"] for f in (stack or {}).get("frames", []))
        kinds[next((name for key, name in JVM_WORK if key in text), "other")] += 1
    total = sum(load.values()) or 1
    lines = ["driver JVM CPU by thread (share of the JVM's sampled CPU load):"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in load.most_common(top)]
    lines.append(f"Java stacks by kind of work ({len(samples)} samples; JIT and GC threads are not sampled):")
    lines += [f"  {100 * v / max(len(samples), 1):5.1f}%  {k}" for k, v in kinds.most_common(top)]
    return "\n".join(lines)


def summarize_profile(raw: Path, top: int = 25) -> str:
    """Self and inclusive sample counts per function from py-spy's collapsed stacks."""
    own, inclusive, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"{total} samples"]
    lines += ["self:"] + [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["inclusive:"] + [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ report

def mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def print_run(r: PlatformRun) -> None:
    steps = ", ".join(f"{k} {v:.1f}" for k, v in r.steps.items())
    print(f"  {r.label:10s} wall {r.wall:6.1f} s, CPU {r.total_cpu:6.1f} s | before run {r.before_run:4.1f} s, after {r.after_run:4.1f} s | "
          f"steps: {steps}")
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in r.step_cpu.items())
    print(f"  {'':10s} CPU s by step: {cpu}; by process: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.cpu.items())))
    mem = ", ".join(f"{k} {mb(v)}" for k, v in sorted(r.memory.items()) if k != "gone")
    spark = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.spark.items())
    print(f"  {'':10s} peak RSS: {mem}")
    print(f"  {'':10s} spark: {spark or 'no Spark application'}")


def init_home(home: Path) -> None:
    """Create the instance's storage once, as an operator's existing instance has it."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "platform" / "dagster.yaml", home / "dagster.yaml")
    DagsterInstance.from_ref(InstanceRef.from_dir(str(home))).dispose()


def platform_runs(repo: Path, trees: list[Tree], work: Path) -> dict[str, PlatformRun]:
    init_home(work / f"home-{repo.name}")
    runs = [materialize("empty", trees[0].landing, work, EMPTY_DAY, repo=repo)]
    runs += [materialize(t.label, t.landing, work, DAY, repo=repo) for t in trees]
    for r in runs:
        shutil.rmtree(work / f"warehouse-{r.label}", ignore_errors=True)
    return {r.label: r for r in runs}


@dataclass(frozen=True)
class Line:
    """A least-squares line through (GB, seconds) points: the marginal cost and the fixed one."""

    slope: float
    intercept: float


def fit(gbs: list[float], seconds: list[float]) -> Line:
    mean_x, mean_y = sum(gbs) / len(gbs), sum(seconds) / len(seconds)
    sxx = sum((x - mean_x) ** 2 for x in gbs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(gbs, seconds)) / sxx
    return Line(slope, mean_y - slope * mean_x)


def report(title: str, runs: dict[str, PlatformRun], trees: list[Tree], best: dict[str, dict[str, float]],
           small_files: Tree | None = None) -> None:
    """`trees`: the corpus sizes (two or more; the costs are lines fitted through them)."""
    print(f"\n# {title}")
    print("\n## Platform runs")
    for r in runs.values():
        print_run(r)
    small, large = trees[0], trees[-1]
    gbs = [t.gb for t in trees]

    def slope(value) -> float:  # value(tree) -> seconds
        return fit(gbs, [value(t) for t in trees]).slope

    marginal = {k: slope(lambda t: best[t.label][k]) for k in best[large.label]}
    wall_line = fit(gbs, [runs[t.label].wall for t in trees])
    platform = wall_line.slope
    per_step = {a: slope(lambda t: runs[t.label].steps.get(a, 0)) for a in ASSETS}
    fixed = runs["empty"]
    print(f"\n## Fixed cost (empty site-day, CLI wall time): {fixed.wall:.1f} s (target <= 12 s), CPU {fixed.total_cpu:.1f} s; "
          f"before the run {fixed.before_run:.1f} s, steps " + ", ".join(f"{k} {v:.1f}" for k, v in fixed.steps.items()))
    print(f"\n## Marginal cost per GB (least squares over {', '.join(t.label for t in trees)}: "
          f"{small.gb:.3f} to {large.gb:.3f} GB)")
    for k, v in marginal.items():
        print(f"  {k:10s} {v:6.2f} s/GB")
    print(f"  {'platform':10s} {platform:6.2f} s/GB  = {platform / marginal['cp -r']:.2f}x cp -r, "
          f"{platform / marginal['loop']:.2f}x the plain loop (target <= 2.5)" + (
              f", {platform / marginal['ocr loop']:.2f}x the OCR loop (target <= 0.3)" if "ocr loop" in marginal else ""))
    # What a run with data pays before its first file: the fitted line at zero bytes.
    intercept = wall_line.intercept
    if len(trees) > 2:
        print("  residuals of the platform's line: " + ", ".join(
            f"{t.label} {runs[t.label].wall - (intercept + platform * t.gb):+.1f} s" for t in trees))
    print(f"  intercept (a run with data, before its first file): {intercept:.1f} s; "
          f"the empty site-day: {fixed.wall:.1f} s")
    script = fit(gbs, [best[t.label]["spark script"] for t in trees])
    print(f"  the one-query Spark script: intercept {script.intercept:.1f} s (any cold Spark process), "
          f"{script.slope:.2f} s/GB; the platform's intercept is {intercept - script.intercept:.1f} s more = "
          f"{intercept / script.intercept if script.intercept > 0 else float('inf'):.2f}x (target <= 1.5)")
    for a, v in per_step.items():
        print(f"    {a:24s} {v:6.2f} s/GB = {v / marginal['cp -r']:.2f}x cp -r, "
              f"{marginal['loop'] / v if v > 0 else float('inf'):.2f}x faster than the loop")
    index = per_step.get("raw_image_index", 0)
    print(f"  raw_image_index vs header-only loop: {marginal['header'] / index if index > 0 else float('inf'):.2f}x "
          f"faster (target >= 1.2); sha256 alone costs {marginal['sha256']:.2f} s/GB on one core")
    if "spark index script" in marginal:
        best_spark = marginal["spark index script"]
        print(f"  the one-query Spark index script (headers + sha256 to a table): {best_spark:.2f} s/GB = "
              f"{marginal['header'] / best_spark if best_spark > 0 else float('inf'):.2f}x faster than the header loop")

    # The same in CPU seconds, which load inflates far less than wall time. A one-process loop's
    # wall time on an idle core is its CPU time; the platform's on two idle cores is at best half
    # its CPU time (both executors busy), which is what "idle 2-core estimate" means below.
    cpu = {k[:-4]: v for k, v in marginal.items() if k.endswith(" CPU")}
    cpu_line = fit(gbs, [runs[t.label].total_cpu for t in trees])
    p_cpu = cpu_line.slope
    s_cpu = {a: slope(lambda t: runs[t.label].step_cpu.get(a, 0)) for a in ASSETS}
    print("\n## Marginal CPU per GB (CPU seconds; load-resistant)")
    print("  " + "  ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    print(f"  platform {p_cpu:.2f} CPU-s/GB (idle 2-core estimate {p_cpu / 2:.2f} s/GB = "
          f"{cpu['loop'] / (p_cpu / 2):.2f}x faster than the loop, {p_cpu / 2 / cpu['cp -r']:.2f}x cp -r)")
    for a, v in s_cpu.items():
        print(f"    {a:24s} {v:6.2f} CPU-s/GB (idle 2-core estimate {v / 2:.2f} s/GB)")
    if "platform loop" in cpu:
        pl, ocr, idx = cpu["platform loop"], cpu["ocr"], cpu.get("index", 0.0)
        deid = pl - ocr - idx
        print(f"  the platform's per-file work in one process (index + anonymize, no Spark): {pl:.2f} CPU-s/GB, of "
              f"which the index {idx:.2f}, the burned-in text check {ocr:.2f} ({100 * ocr / pl if pl > 0 else 0:.0f}%) "
              f"and the de-identification without the text check {deid:.2f} CPU-s/GB = "
              f"{deid / cpu['loop'] if cpu['loop'] > 0 else float('inf'):.2f}x the plain loop (target <= 1.5)")
    print(f"  CPU intercept (a run with data, before its first file): {cpu_line.intercept:.1f} CPU-s")
    roles = {r: slope(lambda t: runs[t.label].cpu.get(r, 0)) for r in ("driver Python", "driver JVM", "executor Python")}
    print("  by process: " + ", ".join(f"{k} {v:.2f} CPU-s/GB" for k, v in roles.items()))
    e = roles["executor Python"]
    if "platform loop" in cpu and cpu["platform loop"] > 0:
        print(f"  the executors' Python against the same per-file work in one process: {e:.2f} / "
              f"{cpu['platform loop']:.2f} CPU-s/GB = {e / cpu['platform loop']:.2f}x (target: no dearer, 1.0x)")
    print(f"  the per-file work alone (executor Python): {e:.2f} CPU-s/GB, idle 2-core estimate {e / 2:.2f} s/GB = "
          f"{cpu['loop'] / (e / 2) if e > 0 else float('inf'):.2f}x faster than the loop (target >= 2), "
          f"{e / 2 / cpu['cp -r']:.2f}x cp -r (target <= 3)")
    i_cpu = s_cpu.get("raw_image_index", 0)
    print(f"  raw_image_index: {i_cpu:.2f} CPU-s/GB vs header loop {cpu['header']:.2f} + sha256 {cpu['sha256']:.2f}; idle "
          f"2-core estimate {cpu['header'] / (i_cpu / 2) if i_cpu > 0 else float('inf'):.2f}x faster than the header loop")
    print(f"  fixed cost CPU (empty site-day): {fixed.total_cpu:.1f} s; "
          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(fixed.cpu.items())))
    print("\n## Peak RSS by size")
    for r in runs.values():
        print(f"  {r.label:10s} driver Python {mb(r.memory.get('driver Python', 0))}, "
              f"driver JVM {mb(r.memory.get('driver JVM', 0))}, executor Python {mb(r.memory.get('executor Python', 0))}")
    if small_files is not None:
        s = small_files
        run = runs[s.label].wall - fixed.wall
        print(f"\n## Many small files ({len(s.files)} files, {s.bytes / len(s.files) / 1e3:.0f} kB each): platform "
              f"{runs[s.label].wall:.1f} s, {run:.1f} s over the fixed cost = {1e3 * run / len(s.files):.2f} ms/file; "
              f"loop {1e3 * best[s.label]['loop'] / len(s.files):.2f} ms/file, "
              f"header {1e3 * best[s.label]['header'] / len(s.files):.2f} ms/file, "
              f"cp -r {1e3 * best[s.label]['cp -r'] / len(s.files):.2f} ms/file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", default="0.5,1.0", help="corpus sizes (two or more) of ~1 MB OCT files, in GB")
    parser.add_argument("--files", help="corpus sizes in files instead (e.g. 150,300,600); overrides --gb")
    parser.add_argument("--shape", default="x".join(map(str, OCT_SHAPE)),
                        help="frames x rows x columns of the OCT volumes (8-bit), default %(default)s")
    parser.add_argument("--small-files", type=int, default=2000, help="files in the many-small-files variant (0: skip)")
    parser.add_argument("--against", type=Path, help="also run the platform from this other checkout (before/after)")
    parser.add_argument("--profile", type=Path, help="also run the largest corpus under py-spy, into this folder")
    parser.add_argument("--jfr", type=Path, help="also run the largest corpus with Java Flight Recorder, into this folder")
    parser.add_argument("--assets", default=SELECT, help="the assets materialized (default: the three image assets)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--seed", type=int, default=12,
                        help="the generator's seed (another than 12: a held-out corpus nothing was tuned on)")
    args = parser.parse_args()
    ASSETS[:] = args.assets.split(",")
    shape = tuple(int(x) for x in args.shape.split("x"))
    if args.files:
        counts = sorted(int(x) for x in args.files.split(","))
        labels = [f"{n}files" for n in counts]
    else:
        gbs = sorted(float(x) for x in args.gb.split(","))
        counts, labels = [round(gb * 1e9 / MEAN_FILE_BYTES) for gb in gbs], [f"{gb:g}GB" for gb in gbs]
    if len(counts) < 2:
        raise SystemExit("--gb and --files take two sizes or more")

    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    scratch = work / "scratch"
    scratch.mkdir()
    try:
        t0 = time.perf_counter()
        sized = [tree(label, work / f"landing-{label}", n, shape, args.seed) for label, n in zip(labels, counts)]
        small_files = tree("small", work / "landing-small", args.small_files, SMALL_SHAPE) if args.small_files else None
        trees = sized + ([small_files] if small_files else [])
        print(f"# {host.node()}: {os.cpu_count()} CPUs, {mb(psutil.virtual_memory().total)} RAM, "
              f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, Python {host.python_version()}")
        print(f"# corpus generated in {time.perf_counter() - t0:.0f} s: " + "; ".join(
            f"{t.label} {len(t.files)} files {t.gb:.3f} GB" for t in trees))

        best = {t.label: baselines(t, scratch) for t in trees}
        print("\n## Baselines (one process each), seconds (wall, then CPU)")
        for t in trees:
            print(f"  {t.label:10s} " + "  ".join(f"{k} {v:6.2f}" for k, v in best[t.label].items()))
        checkouts = [REPO] + ([args.against.resolve()] if args.against else [])
        results = {repo: platform_runs(repo, trees, work) for repo in checkouts}
        for repo, runs in results.items():
            report(f"platform from {repo}", runs, sized, best, small_files)
        print(f"\n# load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            raw = args.profile / "pipeline.txt"
            r = materialize("profiled", sized[-1].landing, work, DAY, profile=raw)
            summary = summarize_profile(raw)
            (args.profile / "summary.txt").write_text(summary + "\n")
            print(f"\n## py-spy profile of {sized[-1].label} (wall {r.wall:.1f} s under the profiler): {raw}")
            print(summary)
        if args.jfr:
            args.jfr.mkdir(parents=True, exist_ok=True)
            recording = (args.jfr / "driver.jfr").resolve()
            r = materialize("jfr", sized[-1].landing, work, DAY, jfr=recording)
            print(f"\n## Java Flight Recorder, {sized[-1].label} (wall {r.wall:.1f} s, driver JVM "
                  f"{r.cpu.get('driver JVM', 0):.1f} CPU-s, {r.spark.get('jobs', 0):.0f} Spark jobs): {recording}")
            print(summarize_jfr(recording))
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
