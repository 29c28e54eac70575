"""The one runner of the image steps: a step's declaration and its Spark body become an asset.

Shared helper module (like `assets/checks.py`), not an asset. A step is declared in the core
(`imaging/steps/declared.py`: input, executor step, tables, stages, checks); its asset module adds only
what is its own: a `Body` (when the run has nothing to do, the Spark work, the extra metadata) and the
Spark figure of each declared check (`FIGURES`). The runner owns the rest, the same for every step:

1. the run's site-days (one partition, or many for a single-run backfill) and the stage clock;
2. the empty-day shortcut: when the body says there is nothing to do (nothing landed, indexed or linked),
   a Spark session and a dozen jobs over empty frames would only learn what is known without them. The
   runner empties every output partition through the journal instead (a partition a previous run filled
   is emptied, not left stale), and every check reports its declared empty-day figure: the values,
   thresholds, details and partitions `assets/quality.py` reports on empty frames
   (tests/test_empty_site_day.py holds the two equal), with no Spark session and no JVM;
3. otherwise the body's frames are staged into one journal commit (`imaging/driver/commit.py`) and
   applied; the quarantine reasons were tallied by the body in the action that ran its per-file work
   (`tally_of`: one aggregate for the work, the reasons and the bytes written);
4. the checks, on what was committed, each stamped with the partitions it covered: the figures share their
   passes over each table (`figures_scope`), and the Spark session was started in the background once the
   run was known to have data;
5. the `StepSummary`, then one materialization per site-day, each with its own counts, its quarantine and
   its checks as tables, its own data version and the versions of its own inputs (`assets/versions.py`), and
   (on the part's last site-day, once) the part's totals and times under `run/`; then each check's evaluation
   on each site-day, after it.

A run over many site-days does 2-5 in parts of about `files_per_commit` landed files (`platform/ui.yaml`; a
site-day never split): each part committed, materialized and checked before the next, in the same process and
Spark session, so a backfill's page advances part by part (benchmarks/RESULTS.md, "Issue 36").

Time is accounted in full: the wait for the Spark session (`spark_start`), each declared stage, the tally
(`count`), the checks and what falls between them (`other`) add up to the step's wall time, in the
metadata (`run/seconds/<stage>`) and as log lines.

Shared policies (owners, tags, code version, automation) are applied in `definitions.py`.
"""

from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator, Mapping, Sequence

from dagster import (AllPartitionMapping, AssetDep, AssetExecutionContext, AssetsDefinition, MaterializeResult,
                     MetadataValue, TableColumn, TableRecord, TableSchema, asset)
from pyspark.sql import DataFrame, functions as F

from assets.checks import (check_outputs, check_specs, checks_table, partition_check_events, quality_context,
                           summary)
from assets.quality import plain_plans, shared_passes
from assets.governance import definition_metadata
from assets.held_files import held_files, held_metadata
from assets.optouts import read_optouts
from assets.partitions import PARTITIONS, SETTINGS, SINGLE_RUN, UI, site_days
from assets.versions import (CLINICAL_SOURCE, EVENTS_LOGGED_BY_STEP, LANDING, OPTOUT, landing_read, landing_scan,
                             materialization, optout_read, partition_versions)
from assets.run_tags import label_run
from imaging.catalogue import Folder, Table
from imaging.driver.platform_files import load_clinical_policy
from imaging.driver.progress import commit_groups
from imaging.driver.run_summary import OTHER, Counts, QuarantineRow, StageClock, StepSummary
from imaging.optout import OptOutLists
from imaging.quarantine import HeldFile
from imaging.quality.gate import covering
from imaging.quality.outcomes import CheckOutcome
from imaging.quality.rules import QualityContext
from imaging.records import SiteDay, schema_of
from imaging.steps.anonymize import batch_name
from imaging.steps.clinical import ClinicalPolicy
from imaging.steps.declared import ImageStep, empty_outcomes
from resources.clinical_source import ClinicalSourceResource
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.progress import SparkProgress
from resources.spark import SparkResource, frame_of, start_session_in_background
from imaging import fs as fsx
from imaging.driver.commit import CommitBuilder
from imaging.driver.run_summary import Footprint
from resources.warehouse import WAREHOUSE_POOL, Warehouse

BATCH = ("batch",)  # the partitioning of what is written per opaque batch of a site-day


def stages(step: ImageStep) -> tuple[str, ...]:
    """Every stage a step's clock reports: the wait for Spark, the step's own, the tally, the checks, the rest."""
    return ("spark_start", *step.stages, "count", "checks", OTHER)


@dataclass
class StepRun:
    """One run of a step: its site-days, its clock and its resources, for the body and the figures."""

    context: AssetExecutionContext
    step: ImageStep
    keys: list[SiteDay]
    clock: StageClock
    spark: SparkResource
    landing: LandingZone
    warehouse: Warehouse
    deid: Deidentifier
    progress: SparkProgress
    clinical_source: ClinicalSourceResource
    commit: CommitBuilder | None = None  # the run's journal commit, begun before the body runs

    @cached_property
    def session(self):
        # The session was started in the background (`warm_up`): what is left of its start is waited here.
        with self.clock.stage("spark_start"):
            return self.spark.spark_session

    @cached_property
    def ctx(self) -> QualityContext:
        return quality_context(self.deid)

    @cached_property
    def policy(self) -> ClinicalPolicy:
        return load_clinical_policy()

    @cached_property
    def optouts(self) -> OptOutLists:
        """The opt-out lists in the landing zone, read once per run (by the steps that read `optout_list`)."""
        return read_optouts(self.landing.root)

    @property
    def partitions(self) -> list[str]:
        """The run's Dagster partition keys, `date|site`."""
        return [f"{k.date}|{k.site}" for k in self.keys]

    @cached_property
    def batch_of(self) -> dict[str, str]:
        """Each site-day's opaque batch folder: a keyed token, so no path names a real date or site."""
        pseudonymizer = self.deid.pseudonymizer()
        return {f"{k.date}|{k.site}": batch_name(pseudonymizer, k.date, k.site) for k in self.keys}

    def partitions_of(self, entry: Table | Folder) -> list:
        """The run's partitions of a table (site-days, or batches) or sub-folders of a folder (batches)."""
        if isinstance(entry, Folder):
            return list(self.batch_of.values())
        if entry.partition_by == BATCH:
            return [{"batch": b} for b in self.batch_of.values()]
        return list(self.keys)

    def read(self, table: Table) -> DataFrame:
        """The run's partitions of `table` as the warehouse holds them."""
        return self.warehouse.read(self.session, table, self.partitions_of(table))

    def site_days(self) -> DataFrame:
        """The run's site-days as a frame (date, site), for joins that keep a run to its own partitions."""
        return frame_of(self.session, self.keys, schema_of(SiteDay))


@dataclass
class StepOutput:
    """What a step's body hands the runner: its rows, what to tally, and what its check figures read."""

    # table name -> rows to write over the run's partitions: a DataFrame (written by Spark), a list of records made
    # on the driver (written without Spark), or None when the body's tally shows the table empty for the run
    # (staged empty, without Spark: a clean run's quarantine tables cost no query)
    rows: Mapping[str, DataFrame | list | None]
    tally: Mapping[str, Mapping[str | None, int]]  # partition key -> rows by reason (None: ok), `tally_of`
    read: Mapping[str, Footprint]            # partition key -> files and bytes read for it
    given: Mapping[str, object] = field(default_factory=dict)  # named inputs of the Spark figures
    metadata: Mapping[str, object] = field(default_factory=dict)
    written: Mapping[str, Footprint] | None = None  # partition key -> files and bytes written; None: the output table's
    release: Sequence[DataFrame] = ()        # persisted frames to unpersist once checked
    partition_metadata: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # partition key -> its own


@dataclass
class Figures:
    """What a step's Spark check figures read: the committed tables and what the body handed over."""

    run: StepRun
    given: Mapping[str, object]
    _read: dict[str, DataFrame] = field(default_factory=dict)

    @property
    def ctx(self) -> QualityContext:
        return self.run.ctx

    def committed(self, table: Table) -> DataFrame:
        """The run's partitions of `table` after the commit (one frame per table, shared by the figures)."""
        if table.name not in self._read:
            self._read[table.name] = self.run.read(table)
        return self._read[table.name]


# A figure computes one check, or several from one pass (named together in FIGURES' key).
Figure = Callable[[Figures], CheckOutcome | Sequence[CheckOutcome]]


@dataclass(frozen=True)
class Body:
    """A step's own part: when there is nothing to do, the Spark work, and the metadata of an idle run."""

    idle: Callable[[StepRun], bool]          # nothing to do: answer without Spark
    work: Callable[[StepRun], StepOutput]    # stage nothing itself: returns rows for the runner to commit
    idle_metadata: Callable[[StepRun], dict] = lambda run: {}
    partition_counts: tuple[str, ...] = ()   # the per-site-day counts of `StepOutput.partition_metadata` (0 when idle)


def _names(figures: Mapping[str | tuple[str, ...], Figure]) -> list[str]:
    return [n for key in figures for n in ((key,) if isinstance(key, str) else key)]


def image_asset(step: ImageStep, body: Body, figures: Mapping[str | tuple[str, ...], Figure]) -> AssetsDefinition:
    """The Dagster asset of `step`. Refuses figures that do not compute exactly the declared per-run checks."""
    declared, bound = [c.name for c in step.per_run], _names(figures)
    if sorted(bound) != sorted(declared):
        raise ValueError(f"{step.asset}: FIGURES compute {sorted(bound)}, the step declares {sorted(declared)}")

    @asset(
        name=step.asset,
        # Every site's opt-out list applies to every site-day (an opt-out is a person's, at every site).
        deps=[AssetDep(d, partition_mapping=AllPartitionMapping()) if d == OPTOUT else d for d in step.deps],
        partitions_def=PARTITIONS,
        backfill_policy=SINGLE_RUN,
        kinds=set(step.kinds),
        metadata=definition_metadata(step.asset),
        pool=WAREHOUSE_POOL,  # Dagster has no spec attribute for it, so it cannot be applied in definitions.py
        check_specs=check_specs(step.asset, PARTITIONS),
        description=step.description,
    )
    def _asset(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone, warehouse: Warehouse,
               deid: Deidentifier, progress: SparkProgress, clinical_source: ClinicalSourceResource):
        label_run(context)  # who launched the run and why, when its launcher did not say
        keys = site_days(context)
        landed = landing_scan(landing.root, keys) if LANDING in step.deps else {}
        if landed:  # the landing it reads, recorded before it reads it (yielded: stored at once)
            yield from landing_read(context.instance, landed)
        if OPTOUT in step.deps:  # the same for the opt-out lists it applies
            yield from optout_read(context.instance, read_optouts(landing.root), deid.key)
        # The site-days in parts of about `files_per_commit` landed files, each committed, materialized and
        # checked before the next one starts: a backfill's page advances part by part, in this one run.
        parts = commit_groups(keys, lambda k: getattr(landed.get(f"{k.date}|{k.site}"), "files", 0),
                              UI.files_per_commit)
        if len(parts) > 1:
            context.log.info(f"{len(keys)} site-days in {len(parts)} parts of about {UI.files_per_commit} landed "
                             f"files, each committed and materialized in turn")
        outcomes: dict[str, CheckOutcome] = {}
        for part in parts:
            clock = StageClock(stages(step), log=context.log.info, label=step.asset)
            run = StepRun(context, step, part, clock, spark, landing, warehouse, deid, progress, clinical_source)
            if body.idle(run):
                checks = yield from _idle(run, body)
            else:
                # This part needs Spark: start it now, in the background, so that the session is (being) made
                # while the driver prepares the run (a session already made is kept).
                warm_up(spark)
                checks = yield from _run(run, body, figures)
            outcomes.update({c.check: c for c in checks})
        # One output per check for the run (what Dagster's blocking in the same run waits for), then the asset's:
        # its events were logged part by part, so Dagster adds none of its own.
        yield from check_outputs(context, step.asset, list(outcomes.values()))
        yield MaterializeResult(metadata=EVENTS_LOGGED_BY_STEP)

    return _asset


@contextmanager
def figures_scope(run: StepRun) -> Iterator[None]:
    """Where a step's check figures run. Each Spark query costs a fixed ~0.1 s of driver work whatever
    the size of the data, so figures reading the same frame share its passes (one profile per table,
    one pass for its per-key counts), and the queries run without adaptive execution (`plain_plans`)."""
    with shared_passes(run.policy), plain_plans(run.session):
        yield


def warm_up(spark: SparkResource) -> None:
    """Start the Spark session in a background thread (it returns at once; the first use waits for
    what is still under way). Only for a run with data: an empty site-day stays free of any JVM."""
    start_session_in_background(spark)


def _run(run: StepRun, body: Body, figures: Mapping[str | tuple[str, ...], Figure]):
    step, warehouse = run.step, run.warehouse
    commit = run.commit = warehouse.begin(step.asset)  # the body may write files into its staging
    out = body.work(run)
    with run.clock.stage("commit"):
        for folder in step.folders:
            warehouse.stage_folders(commit, folder, run.partitions_of(folder))
        for table in step.tables(run.policy):
            rows, partitions = out.rows[table.name], run.partitions_of(table)
            if rows is None:
                warehouse.stage_empty(commit, table, partitions)
            elif isinstance(rows, list):
                warehouse.stage_records(commit, rows, table, partitions)
            else:
                warehouse.stage(commit, rows, table, partitions)
        commit.build().apply()

    # The body tallied its outcome in the action that computed it (`tally_of`): no query of its own here.
    with run.clock.stage("count"):
        tally = {p: dict(out.tally.get(p, {})) for p in run.partitions}
    written = out.written or {p: warehouse.footprint(step.output_table(run.policy), [k])
                              for p, k in zip(run.partitions, run.keys)}
    by_partition = {p: Counts(files_in=out.read.get(p, Footprint()).files, bytes_in=out.read.get(p, Footprint()).bytes,
                              rows_out=tally[p].pop(None, 0), files_out=written.get(p, Footprint()).files,
                              bytes_out=written.get(p, Footprint()).bytes, quarantined=tally[p])
                    for p in run.partitions}
    total = sum(by_partition.values(), Counts())
    run.context.log.info(f"{len(run.keys)} site-days: {total.files_in} in, {total.rows_out} out, "
                         f"{total.quarantined_total} quarantined")

    # Data quality on what was committed, in declared order.
    given = Figures(run, out.given)
    computed: dict[str, CheckOutcome] = {}
    with run.clock.stage("checks"), figures_scope(run):
        for figure in figures.values():
            result = figure(given)
            for outcome in ([result] if isinstance(result, CheckOutcome) else result):
                computed[outcome.check] = outcome
    checks = [covering(computed[c.name], run.partitions) for c in step.per_run]
    for frame in out.release:
        frame.unpersist()

    listed = held_files(run, {p: c.quarantined_total for p, c in by_partition.items()})
    yield from _result(run, checks, by_partition, {**out.metadata, "table_unchanged": False},
                       out.partition_metadata, listed)
    return checks


def tally_of(frame: DataFrame, *sums: str) -> tuple[dict[str, dict[str | None, int]], dict[str, dict[str, int]]]:
    """Rows of `frame` by reason (None: the row is ok) per partition key, and the sum of each of `sums`
    over its ok rows per partition key: one aggregate, a handful of fixed reason phrases per site-day
    whatever the input size. A body runs it as the action that computes (and persists) its outcome, so the
    work, the tally and the written bytes are one query rather than three."""
    aggregates = [F.count(F.lit(1)).alias("_n"), *(F.sum(c).alias(f"_s{i}") for i, c in enumerate(sums))]
    tally: dict[str, dict[str | None, int]] = {}
    totals: dict[str, dict[str, int]] = {}
    for row in frame.groupBy("date", "site", "reason").agg(*aggregates).collect():
        key = f"{row['date']}|{row['site']}"
        counts = tally.setdefault(key, {})
        counts[row["reason"]] = counts.get(row["reason"], 0) + row["_n"]
        if row["reason"] is None:
            totals[key] = {c: int(row[f"_s{i}"] or 0) for i, c in enumerate(sums)}
    return tally, totals


def held_back(*tallies: Mapping[str, Mapping[str | None, int]]) -> bool:
    """Whether any tally counts a row held back (a reason): only then has a quarantine table rows."""
    return any(reason is not None and n for tally in tallies for counts in tally.values() for reason, n in counts.items())


def merged(*tallies: Mapping[str, Mapping[str | None, int]]) -> dict[str, dict[str | None, int]]:
    """Several tallies as one (reasons of the same partition added up)."""
    out: dict[str, dict[str | None, int]] = {}
    for tally in tallies:
        for key, counts in tally.items():
            mine = out.setdefault(key, {})
            for reason, n in counts.items():
                mine[reason] = mine.get(reason, 0) + n
    return out


def _idle(run: StepRun, body: Body):
    """Nothing to do: every output partition emptied through the journal, every check its empty-day figure."""
    step = run.step
    with run.clock.stage("commit"):
        emptied = commit_empty(run)
    run.context.log.info(f"{len(run.keys)} site-days: {step.idle}, {emptied.partitions_emptied} partitions emptied")
    checks = [covering(o, run.partitions) for o in empty_outcomes(step, run.ctx)]
    yield from _result(run, checks, {p: Counts() for p in run.partitions},
                       {**body.idle_metadata(run), "table_unchanged": not emptied.changed},
                       {p: dict.fromkeys(body.partition_counts, 0) for p in run.partitions})
    return checks


@dataclass(frozen=True)
class Emptied:
    """What committing empty outputs did: partitions (and folders) that held something before."""

    partitions_emptied: int

    @property
    def changed(self) -> bool:
        """Whether any table (or folder) lost rows: only then can a table-wide figure move."""
        return self.partitions_emptied > 0


def commit_empty(run: StepRun) -> Emptied:
    """Commit every output partition (and batch folder) of the run's step as empty, through the journal."""
    warehouse, commit = run.warehouse, run.warehouse.begin(run.step.asset)
    emptied = 0
    for table in run.step.tables(run.policy):
        partitions = run.partitions_of(table)
        emptied += len(warehouse.present(table, partitions))
        warehouse.stage_empty(commit, table, partitions)
    for folder in run.step.folders:
        batches = run.partitions_of(folder)
        emptied += sum(1 for batch in batches if fsx.exists(warehouse.url(folder, batch)))
        warehouse.stage_folders(commit, folder, batches)
    commit.build().apply()
    return Emptied(emptied)


def _outputs(run: StepRun) -> dict[str, str]:
    return {label: run.warehouse.relative(run.warehouse.url(entry))
            for label, entry in run.step.outputs(run.policy).items()}


def _result(run: StepRun, checks: list[CheckOutcome], by_partition: dict[str, Counts], metadata: dict,
            own: Mapping[str, Mapping[str, object]], listed: Mapping[str, Sequence[HeldFile]] | None = None):
    """One materialization per site-day (its own counts and `own` metadata, its quarantine (where any) and checks as
    tables, its quarantined files (`listed`), data version and inputs' versions), then each check's result on each site-day,
    after the materialization it checks. What is the part's, not the site-day's (its totals and times under `run/`,
    the outputs' paths, the run's settings and check summary, the summary table), goes once, on the part's last
    site-day: the latest materialization, which the asset's page shows; a year of site-days in one run does not
    repeat it 365 times (benchmarks/bookkeeping.py)."""
    context, asset = run.context, run.step.asset
    wall = run.clock.finish()
    run.context.log.info(run.clock.breakdown() + f" (step {wall:.1f} s)")
    summary_ = StepSummary(by_partition=by_partition, stage_seconds=dict(run.clock.seconds),
                           known_reasons=run.step.known_reasons, outputs=_outputs(run))
    # Which key keyed the pseudonyms, batch tokens and offenders: its fingerprint, never the key.
    shared = {**metadata, **summary(checks), **run.deid.run_metadata()}
    versions = partition_versions(context.instance, run.partitions, code_version(context, asset), run.step.deps,
                                  observed=frozenset({LANDING, OPTOUT, CLINICAL_SOURCE}),
                                  whole={OPTOUT: SETTINGS.sites, CLINICAL_SOURCE: [None]})
    last = run.partitions[-1]
    for partition in run.partitions:
        held = by_partition[partition].quarantined_total
        # The reasons as a table where any file was held back (every known reason then, 0 where absent); on a clean
        # site-day `quarantined` 0 says it all, and a year of clean site-days does not repeat a table of zeros.
        mine = {**summary_.partition_numbers(partition), **own.get(partition, {}),
                **({"quarantine": quarantine_table(summary_.quarantine(partition))} if held else {}),
                **held_metadata((listed or {}).get(partition, ()), held),
                "checks": checks_table(checks, partition), "table_unchanged": metadata["table_unchanged"]}
        if partition == last:
            mine |= {**summary_.values(partition), **shared,
                     "summary": MetadataValue.md(summary_.markdown(asset, partition))}
        yield materialization(asset, versions[partition], mine)
    yield from partition_check_events(context, checks, run.partitions, asset, context.log)


def quarantine_table(rows: Sequence[QuarantineRow]) -> MetadataValue:
    """A site-day's quarantine as the UI shows a table: one row per reason phrase, with its files."""
    return MetadataValue.table(
        records=[TableRecord({"reason": r.reason, "files": r.files}) for r in rows],
        schema=TableSchema(columns=[TableColumn("reason", "string", description="why the files were held back"),
                                    TableColumn("files", "int")]))


def code_version(context: AssetExecutionContext, asset: str) -> str:
    """The asset's code version as deployed (definitions.py derives it); the run id if it has none, as Dagster does."""
    return context.assets_def.specs_by_key[context.assets_def.key].code_version or context.run.run_id
