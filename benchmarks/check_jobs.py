"""Spark jobs and seconds of the image assets' data-quality checks: the figures of a baseline commit
(`assets/quality.py` and `assets/expectations.py` as `git show REF:...` has them) against this tree's,
in one process, on the same warehouse, alternating run by run.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python benchmarks/check_jobs.py [--baseline REF] [--repeats N]

A tiny hospital (3 patients, 2 site-days of one site, as tests/test_quality_checks.py's probes) is
generated into a temp folder; the three image assets run once to warm Spark up, then `--repeats` times
with each module. Printed: per asset run (its checks and table-wide checks included) the Spark jobs
and seconds, and per figure (a `FIGURES` entry of the asset modules) the same, as averages; then
whether every check result recorded by the runs is the same with both modules (it must be).

Outcomes on failing data (hot keys, placeholders, fan-out, dates, missing attributes) are compared
by `--outcomes`: every figure of both modules on planted frames, with and without shared passes.
`--cold` times the first run of fresh processes with and without the background warm-up (Spark
session and GX import started once a run is known to have data).
Jobs are counted from the driver's DAG scheduler (a classic session: not over Spark Connect).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
KEYS = ("2025-01-06|north", "2025-01-07|north")


def _setup_environment() -> str:
    root = tempfile.mkdtemp(prefix="check-jobs-")
    os.environ.update(IMAGING_LANDING=f"{root}/landing", IMAGING_WAREHOUSE=f"{root}/warehouse",
                      IMAGING_SITES="north", IMAGING_START_DATE="2025-01-06", IMAGING_PSEUDONYM_KEY="k" * 32,
                      IMAGING_SPARK_MASTER=os.environ.get("IMAGING_SPARK_MASTER", "local[2]"), IMAGING_MIN_K="1")
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    return root


def baseline_ref(given: str | None) -> str:
    """The commit to compare with: given, else where this branch left `main`."""
    if given:
        return given
    found = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True)
    return found.stdout.strip() or "HEAD"


def load_baseline(ref: str):
    """`assets/quality.py` of `ref` as a module, its GX suites run by `assets/expectations.py` of `ref`."""
    def source(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, text=True,
                              check=True).stdout

    def module(name: str, text: str):
        spec = importlib.util.spec_from_loader(name, loader=None)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        exec(compile(text, f"<{ref}:{name}>", "exec"), mod.__dict__)
        return mod

    module("baseline_expectations", source("assets/expectations.py"))
    text = source("assets/quality.py").replace("from assets.expectations import", "from baseline_expectations import")
    return module("baseline_quality", text)


def jobs() -> int:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    return session.sparkContext._jsc.sc().dagScheduler().numTotalJobs() if session else 0


class Meter:
    """Jobs and seconds per (mode, label), summed over repeats."""

    def __init__(self):
        self.seconds = collections.Counter()
        self.jobs = collections.Counter()
        self.mode = "warm-up"

    def wrap(self, label: str, fn):
        def measured(*args, **kwargs):
            j, t = jobs(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[(self.mode, label)] += time.perf_counter() - t
                self.jobs[(self.mode, label)] += jobs() - j
        return measured


def check_evaluations(result) -> dict:
    """Every check evaluation of a run, by asset and check: passed and metadata values."""
    out = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            # Without when it was evaluated: the only value two runs of the same data may differ in.
            out[(ev.asset_key.path[-1], ev.check_name)] = (ev.passed, {k: getattr(v, "value", v)
                                                                       for k, v in ev.metadata.items()
                                                                       if k != "evaluated_at"})
    return out


def run_asset(defs, asset: str):
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    job = define_asset_job("check_jobs", selection=AssetSelection.assets(asset))
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    result = resolved.resolve_job_def("check_jobs").execute_in_process(
        instance=DagsterInstance.ephemeral(), tags={"dagster/asset_partition_range_start": KEYS[0],
                                                    "dagster/asset_partition_range_end": KEYS[1]})
    assert result.success
    return result


def runs(args) -> None:
    root = _setup_environment()
    from synth import generate_hospital

    generate_hospital(f"{root}/landing", seed=5, sites=("north",), dates=tuple(k.split("|")[0] for k in KEYS),
                      patients_per_site=3)
    baseline = load_baseline(baseline_ref(args.baseline))
    import assets.anonymized_images as anonymized
    import assets.checks as checks
    import assets.linked_patient_metadata as linked
    import assets.quality as current
    import assets.raw_image_index as raw
    from definitions import defs

    modules = {"raw_image_index": raw, "linked_patient_metadata": linked, "anonymized_images": anonymized}
    meter = Meter()
    for name, mod in modules.items():
        for key, fn in list(mod.FIGURES.items()):
            mod.FIGURES[key] = meter.wrap(f"{name}: {key if isinstance(key, str) else ' + '.join(key)}", fn)

    import assets.runner as runner

    # Before GX suites ran in one pass on the executors the runner could validate them beside the other
    # figures or in line (`_validates_suite`); today's runner has no such switch, so "new-seq" is then
    # not measured and the figures are reported from "new".
    beside, scope = getattr(runner, "_validates_suite", None), runner.figures_scope

    def use(quality, suites_beside: bool) -> None:
        """`quality`'s figures; the runner's shared passes and plain plans only with this tree's."""
        for mod in (*modules.values(), checks):
            mod.q = quality
        if beside is not None:
            runner._validates_suite = beside if suites_beside else (lambda run, key: False)
        runner.figures_scope = scope if quality is current else (lambda run: contextlib.nullcontext())

    recorded: dict[str, list[dict]] = collections.defaultdict(list)
    # "new" runs the GX suite beside the other figures (as deployed); "new-seq" in line, so that each
    # figure's jobs and seconds are its own (with "new" they overlap the suite's).
    modes = {"old": (baseline, False), "new-seq": (current, False), "new": (current, True)}
    if beside is None:
        del modes["new-seq"]
    seq = "new-seq" if "new-seq" in modes else "new"
    plan = [("warm-up", (current, True))] + [(m, modes[m]) for _ in range(args.repeats) for m in modes]
    for mode, (quality, suites_beside) in plan:
        meter.mode = mode
        use(quality, suites_beside)
        for asset in ASSETS:
            result = meter.wrap(f"asset run: {asset}", run_asset)(defs, asset)
            if mode != "warm-up":
                recorded[mode].append(check_evaluations(result))
    use(current, True)

    def line(label: str, new: str = "new") -> str:
        old_s, new_s = (meter.seconds[(m, label)] / args.repeats for m in ("old", new))
        old_j, new_j = (meter.jobs[(m, label)] / args.repeats for m in ("old", new))
        ratio = f"{old_s / new_s:5.1f}x" if new_s >= 0.005 else "    -"
        return f"{label:<62} {old_j:5.0f} {new_j:5.0f} jobs   {old_s:6.2f} {new_s:6.2f} s  {ratio}"

    labels = sorted({label for (_, label) in meter.seconds})
    print(f"\nbaseline {baseline_ref(args.baseline)[:12]} (old) vs this tree (new), mean of {args.repeats} warm runs,"
          f" alternating; first run (warm-up, new): "
          f"{sum(v for (m, _), v in meter.seconds.items() if m == 'warm-up' and _.startswith('asset run')):.1f} s")
    runs_ = [lab for lab in labels if lab.startswith("asset run")]
    figures = [lab for lab in labels if not lab.startswith("asset run")]
    print(f"{'Asset runs (checks and table-wide checks included)':<62} {'old':>5} {'new':>5}        "
          f"{'old':>6} {'new':>6}    old/new")
    for label in runs_:
        print(line(label))
    heading = "Figures (new-seq: the GX suite in line, not beside)" if seq == "new-seq" else "Figures"
    print(f"{heading:<62} {'old':>5} {seq:>5}")
    for label in figures:
        print(line(label, seq))
    for mode in modes:
        print(f"{mode:>8}: three asset runs {sum(meter.jobs[(mode, lab)] for lab in runs_) / args.repeats:.0f} jobs "
              f"{sum(meter.seconds[(mode, lab)] for lab in runs_) / args.repeats:.2f} s; their figures "
              f"{sum(meter.jobs[(mode, lab)] for lab in figures) / args.repeats:.0f} jobs "
              f"{sum(meter.seconds[(mode, lab)] for lab in figures) / args.repeats:.2f} s")
    same = all(recorded[m] == recorded["old"] for m in modes)
    print(f"check results recorded by the runs identical ({', '.join(modes)}): {same}")
    if not same:
        for old, new in zip(recorded["old"], recorded["new"]):
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    print("  differs:", key, old.get(key), new.get(key))
        sys.exit(1)


class Scenario:
    """Planted frames (tests/test_quality_checks.py's generated hospital) and every figure on them."""

    def __init__(self, hospital, listed_extra: dict | None = None, lost_batch: bool = False,
                 broken_files: bool = False):
        import test_quality_checks as t
        from resources.spark import SparkResource, spark_config

        self.t, self.policy, self.ctx = t, t.POLICY, t.CTX
        self.spark = SparkResource(spark_config=spark_config(os.environ["IMAGING_SPARK_MASTER"])).spark_session
        self.hospital, self.listed_extra, self.lost_batch = hospital, listed_extra or {}, lost_batch
        self.files = Path(tempfile.mkdtemp(prefix="check-jobs-files-"))
        self.manifest_rows, self.ledger_rows = t._anonymized(self.files, hospital)
        if broken_files:  # a file changed, another lost, and two patients published under one pseudonym
            (self.files / self.manifest_rows[0][1]).write_bytes(b"tampered")
            (self.files / self.manifest_rows[1][1]).unlink()
            last = next(r[3] for r in self.manifest_rows if r[3] != self.manifest_rows[0][3])
            self.manifest_rows = [r[:3] + (self.manifest_rows[0][3],) + r[4:] if r[3] == last else r
                                  for r in self.manifest_rows]

    def outcomes(self, q) -> dict:
        """check -> (passed, metadata) of every figure of `q` (a quality module) on this scenario's frames.
        The frames are made once per call and shared by the figures, as the runner shares its tables."""
        from assets.linkage import as_of_join

        t, ctx, h, spark = self.t, self.ctx, self.hospital, self.spark
        index, clinical = h.index(spark), h.extracts(spark)
        linked = as_of_join(index, clinical)
        held = index.limit(0)
        listed = collections.Counter(f"{r['date']}|{r['site']}" for r in h.images) + collections.Counter(
            self.listed_extra)
        manifest = spark.createDataFrame(self.manifest_rows, t.MANIFEST)
        batches = {f"{d}|{s}": t.PSEUDO.token("batch", d, s) for d in t.DAYS for s in t.SITES}
        published = manifest.where(f"batch != '{batches[f'{t.DAYS[0]}|{t.SITES[0]}']}'") if self.lost_batch else manifest
        ledger = spark.createDataFrame(self.ledger_rows, t.LEDGER)
        found = [
            q.scans_per_patient_site_day(index, ctx), q.instances_per_series(index, ctx),
            q.series_per_study(index, ctx), q.mandatory_attributes(index, ctx), q.study_date_in_future(index, ctx),
            q.files_accounted(dict(listed), index, held, ctx), *q.column_rules(index, q.RAW, ctx),
            q.scans_per_patient(index, ctx), q.sop_instance_uid_in_one_partition(index, ctx),
            q.images_linked_accounted(index, linked, held, ctx), *q.linkage_fan_out(index, clinical, self.policy, ctx),
            q.placeholder_keys(index, clinical, ctx), q.images_per_clinical_key(index, ctx),
            q.unlinked_share(linked, ctx), q.study_before_birth(linked, self.policy, ctx),
            q.images_accounted(linked, published, held, batches, ctx), q.manifest_files(published, str(self.files), ctx),
            *q.pseudonym_bijection(ledger, index, published, ctx)]
        return {o.check if o.check not in ("column_rules", "column_warnings") or i < 8 else f"{o.check} (2)":
                (o.passed, o.as_metadata()) for i, o in enumerate(found)}


def scenarios():
    """Clean data, then data failing each check (as tests/test_quality_checks.py plants it)."""
    import test_quality_checks as t

    yield "clean", Scenario(t.Hospital())

    hot = t.Hospital()
    # A hot patient (scans per day, per key, per record) with a huge series, and a study of 101 series.
    hot.scans("2024-03-02", "site-a", "4857773456", 2100, series_size=1100)
    hot.record("2024-03-02", "site-a", "4857773456", "Hot Patient", "1960-01-01")
    hot.scans("2024-03-01", "site-b", t.PATIENTS[0], 202, series_size=2)
    yield "hot keys, broken files and pseudonyms", Scenario(hot, broken_files=True)

    placeholder = t.Hospital()
    for n in range(6):  # six people under 'UNKNOWN' in the PACS and the extract: placeholders and fan-out
        placeholder.scans("2024-03-02", "site-b", "UNKNOWN", 2)
        placeholder.record("2024-03-02", "site-b", "UNKNOWN", f"Stranger {n}", f"19{40 + n}-01-0{n + 1}")
    placeholder.record("2024-03-02", "site-a", t.PATIENTS[1], "Somebody Else", "1987-02-03")  # two people, one key
    placeholder.scans("2024-03-01", "site-a", "4857773456", 40)  # a patient no extract knows: unlinked share
    yield "placeholders, fan-out, unlinked", Scenario(placeholder)

    dates = t.Hospital()
    dates.scans("2024-03-01", "site-a", t.PATIENTS[2], 1, study_date="20300101")
    dates.scans("2024-03-01", "site-b", t.PATIENTS[1], 1, study_date="19400101")  # born 1950
    dates.images[0]["modality"] = None
    dates.images[1]["sha256"] = "not-a-digest"
    dates.images[2]["laterality"] = "X"
    first = next(r for r in dates.images if r["date"] == t.DAYS[0] and r["site"] == "site-b")
    dates.images.append(dict(first, date=t.DAYS[1], source_path=first["source_path"].replace(t.DAYS[0], t.DAYS[1])))
    yield "dates, attributes, duplicate uid, lost files", Scenario(dates, listed_extra={"2024-03-02|site-a": 3},
                                                                   lost_batch=True)


def outcomes(args) -> None:
    """Every per-run figure of both modules on planted frames (clean and failing), compared."""
    _setup_environment()
    os.environ.setdefault("IMAGING_SPARK_MASTER", "local[2]")
    baseline = load_baseline(baseline_ref(args.baseline))
    import assets.quality as current

    differences = 0
    for name, scenario in scenarios():
        old = scenario.outcomes(baseline)
        new_alone = scenario.outcomes(current)
        with current.shared_passes(scenario.policy), current.plain_plans(scenario.spark):  # as the runner
            new_shared = scenario.outcomes(current)
        for label, new in (("new", new_alone), ("new, shared passes", new_shared)):
            if new != old:
                differences += 1
                for check in sorted(set(old) | set(new)):
                    if old.get(check) != new.get(check):
                        print(f"{name}: {check} differs ({label}):\n  old {old.get(check)}\n  new {new.get(check)}")
        failing = sorted(c for c, (passed, _) in old.items() if not passed)
        print(f"{name}: {len(old)} checks, failing {failing}: "
              f"{'identical' if new_alone == old and new_shared == old else 'DIFFERENT'}")
    sys.exit(1 if differences else 0)


def cold(args) -> None:
    """The first three-asset run of a fresh process (Spark not started, GX not imported), with the
    background warm-up and without it, each in its own process, alternating."""
    if args.cold_child is not None:
        root = _setup_environment()
        from synth import generate_hospital

        generate_hospital(f"{root}/landing", seed=5, sites=("north",), dates=tuple(k.split("|")[0] for k in KEYS),
                          patients_per_site=3)
        import assets.runner as runner
        from definitions import defs

        if args.cold_child == "off":
            runner.warm_up = lambda spark: None
        seconds = []
        for asset in ASSETS:
            start = time.perf_counter()
            run_asset(defs, asset)
            seconds.append(time.perf_counter() - start)
        print("COLD", " ".join(f"{v:.2f}" for v in seconds))
        return
    totals = collections.defaultdict(list)
    for _ in range(args.repeats):
        for mode in ("off", "on"):
            out = subprocess.run([sys.executable, __file__, "--cold", "--cold-child", mode], capture_output=True,
                                 text=True, check=True).stdout
            seconds = [float(v) for v in next(l for l in out.splitlines() if l.startswith("COLD")).split()[1:]]
            totals[mode].append(seconds)
    for mode in ("off", "on"):
        mean = [sum(run[i] for run in totals[mode]) / len(totals[mode]) for i in range(len(ASSETS))]
        print(f"first run, warm-up {mode:>3}: " + ", ".join(f"{a} {v:.1f} s" for a, v in zip(ASSETS, mean))
              + f"; total {sum(mean):.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="commit whose figures are 'old' (default: merge-base with main)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--outcomes", action="store_true", help="compare outcomes on planted data instead")
    parser.add_argument("--cold", action="store_true",
                        help="first runs of fresh processes, with and without the background warm-up, instead")
    parser.add_argument("--cold-child", choices=("on", "off"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.cold:
        cold(arguments)
    elif arguments.outcomes:
        outcomes(arguments)
    else:
        runs(arguments)
