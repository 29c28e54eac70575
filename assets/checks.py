"""Data-quality checks in Dagster: check specs, results, table-wide checks and the publication gate.

Shared helper module (not an asset). Rules come from `platform/quality.yaml` through the pure
`imaging.quality`; figures from the Spark aggregates in `assets/quality.py`.

- Per-run checks are check specs on their asset, evaluated with the materialization and returned
  with its `MaterializeResult`; ERROR checks are `blocking=True`, so a failure stops downstream
  assets in the same run. Each evaluation records the partitions it covered and those it failed.
- Checks that read every partition (scans per patient, one SOP Instance UID per partition, the
  pseudonym bijection) are `@multi_asset_check`s, also blocking when ERROR.
- Across runs, `publication_refusal` reads the instance's asset-check records: for each ERROR check
  the newest evaluation covering each partition decides it, and any failure refuses publication
  with a message naming the check and the partitions. WARN checks are shown, never block.
- For a release's data card, `RecordedFacts` reads the same records for every check (ERROR and
  WARN) on the partitions the release read, with run id and time, and the landing zone's observed
  data version of each site-day.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Iterable, Sequence

from itertools import islice
from typing import Iterator

from dagster import (AssetCheckKey, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey,
                     AssetRecordsFilter, DagsterInstance, MetadataValue, Output, PartitionsDefinition,
                     multi_asset_check)
# A check's evaluation per partition, logged by the step itself (see `partition_check_events`); 1.13 exports
# neither name at the top level.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluation, AssetCheckEvaluationTargetMaterializationData)
# How an observation's data version is read back; Dagster 1.13 has no public name for it.
from dagster._core.definitions.data_version import extract_data_version_from_entry
from dagster._core.storage.asset_check_execution_record import (COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES,
                                                             AssetCheckExecutionRecordStatus)

from assets import quality as q
from imaging.catalogue import LEDGER, RAW_IMAGE_INDEX, manifest
from imaging.driver.platform_files import load_clinical_policy, load_quality_rules
from imaging.quality.gate import (CheckEvaluation, ReleaseCheck, blocking_message, latest_by_partition,
                                  publication_blockers, release_checks)
from imaging.quality.outcomes import CheckOutcome
from imaging.quality.rules import ERROR, CheckRule, QualityRules
from imaging.steps.declared import CHECKS, IMAGE_STEPS
from resources.deid import Deidentifier
from resources.spark import SparkResource
from resources.warehouse import Warehouse

RULES: QualityRules = load_quality_rules()
# Checks that read every partition of their table (declared with the steps): evaluated by the
# table-wide checks below.
TABLE_WIDE = {s.asset: s.table_wide for s in IMAGE_STEPS if s.table_wide}
UPSTREAM = (q.RAW, q.LINKED, q.ANONYMIZED)
LANDING_ZONE = "landing_zone"  # the observed source asset (assets/landing_zone.py: an asset, not imported)
HISTORY = 500  # evaluations read per check when folding per-partition state (newest first)


def _spec(rule, partitions_def: PartitionsDefinition | None = None) -> AssetCheckSpec:
    # The rule's severity and threshold, on the check's page.
    limit = "" if rule.maximum is None else f" (passes while at most {rule.maximum:g})"
    return AssetCheckSpec(rule.name, asset=rule.asset, blocking=rule.blocking, partitions_def=partitions_def,
                          description=f"[{rule.severity}] {rule.description}{limit}")


def check_specs(asset: str, partitions_def: PartitionsDefinition | None = None) -> list[AssetCheckSpec]:
    """The specs evaluated with `asset`'s materialization: its declared checks but the table-wide ones, in order.

    With `partitions_def` (the asset's), each check is recorded per partition: a site-day's (or a cohort's) page
    then shows its own checks and results (`partition_check_events`)."""
    return [_spec(RULES.rule(asset, c.name), partitions_def) for c in CHECKS[asset] if not c.table_wide]


def quality_context(deid: Deidentifier) -> q.QualityContext:
    issuers = deid.issuer_policy()
    return q.QualityContext(RULES, deid.pseudonymizer(), dict(issuers.sites), issuers.default_namespace or "")


def check_result(outcome: CheckOutcome, asset: str | None = None) -> AssetCheckResult:
    severity = AssetCheckSeverity.ERROR if outcome.severity == ERROR else AssetCheckSeverity.WARN
    return AssetCheckResult(check_name=outcome.check, passed=outcome.passed, severity=severity,
                            metadata=outcome.as_metadata(), asset_key=AssetKey(asset) if asset else None)


def check_results(outcomes: Iterable[CheckOutcome], log=None, asset: str | None = None) -> list[AssetCheckResult]:
    """Dagster results of the outcomes; failures are logged by check name and figures only."""
    results = []
    for outcome in outcomes:
        if not outcome.passed and log is not None:
            log.warning(outcome.summary_line())
        results.append(check_result(outcome, asset))
    return results


def _targets(instance: DagsterInstance, asset: str, partitions: Sequence[str], run_id: str
             ) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """Each partition's materialization by this run (logged just before its checks): what its check evaluates."""
    found: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    rest = iter(partitions)
    while chunk := list(islice(rest, 100)):
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=chunk), limit=2 * len(chunk)).records
        for record in records:  # newest first
            partition = record.event_log_entry.dagster_event.partition
            if record.run_id == run_id and partition not in found:
                found[partition] = AssetCheckEvaluationTargetMaterializationData(
                    storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    return found


def partition_check_events(context, outcomes: Sequence[CheckOutcome], partitions: Sequence[str], asset: str,
                           log=None) -> Iterator[AssetCheckEvaluation]:
    """One evaluation of each check per partition (Dagster 1.13 records a partitioned check's result per partition
    only from a single-partition run; a run over many partitions logs them itself, as the runner logs the
    partitions' materializations). Each points at that partition's materialization by this run and is logged
    after it, so a check's time is never before what it checks. Failures are logged by check name and figures.

    Followed by `check_outputs` once per run: the outputs Dagster's blocking in the same run waits for."""
    targets = _targets(context.instance, asset, partitions, context.run.run_id)
    specs = {spec.key: spec for spec in context.assets_def.check_specs_by_output_name.values()}
    last = partitions[-1] if partitions else None
    for outcome in outcomes:
        if not outcome.passed and log is not None:
            log.warning(outcome.summary_line())
        spec = specs[AssetCheckKey(AssetKey(asset), outcome.check)]
        severity = AssetCheckSeverity.ERROR if outcome.severity == ERROR else AssetCheckSeverity.WARN
        run_level = {"distribution", *outcome.details}  # the run's figures, the same for every site-day
        for partition in partitions:
            own = outcome.on_partition(partition)
            # What is the same for every site-day is not repeated on each: the description (the spec's), the
            # severity and the partition (the event's own fields), the run's distribution and details (said once,
            # on its last site-day); each keeps its verdict, the run's figure and threshold, the site-days it was
            # measured over and the offenders seen there. (Trimming these too was measured: on PostgreSQL it
            # costs more than it saves, benchmarks/RESULTS.md "Issue 48".)
            metadata = {k: v for k, v in own.as_metadata().items()
                        if k not in _EVENT_FIELDS and (k not in run_level or partition == last)}
            # When it was evaluated, shown beside Dagster's own "Timestamp" (when the check's run started).
            metadata["evaluated_at"] = MetadataValue.timestamp(time.time())
            yield AssetCheckEvaluation(asset_key=AssetKey(asset), check_name=own.check, passed=own.passed,
                                       metadata=metadata, target_materialization_data=targets.get(partition),
                                       severity=severity, blocking=spec.blocking, partition=partition)


# Metadata of a site-day's check evaluation the event already says, or its spec does.
_EVENT_FIELDS = frozenset({"description", "severity", "partitions"})


def checks_table(outcomes: Sequence[CheckOutcome], partition: str):
    """A partition's own check results as one table of its materialization's metadata: Dagster 1.13's partition
    page lists a partition's metadata but not its checks (they are on the asset's Checks tab, per partition),
    so the site-day's (or cohort's) page shows them here too, as they are recorded right after it.

    Each check's verdict on this partition (with its severity where it failed); its observed figure and threshold
    only where the figure is this partition's own (a run of one site-day, a cohort). A run over many site-days
    measures each figure over all of them: that figure is the same on each, and is on each site-day's check
    evaluation, not repeated in every site-day's table too (benchmarks/bookkeeping.py)."""
    from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

    figures = all(len(o.partitions) <= 1 for o in outcomes)
    rows = []
    for outcome in outcomes:
        own = outcome.on_partition(partition)
        row = {"check": own.check, "result": "passed" if own.passed else f"FAILED ({own.severity})"}
        if figures:
            row |= {"observed": float(own.observed), "threshold": "" if own.threshold is None else f"{own.threshold:g}"}
        rows.append(TableRecord(row))
    columns = [TableColumn("check", "string"), TableColumn("result", "string")]
    if figures:
        columns += [TableColumn("observed", "float"), TableColumn("threshold", "string")]
    return MetadataValue.table(records=rows, schema=TableSchema(columns=columns))


def check_outputs(context, asset: str, outcomes: Sequence[CheckOutcome]) -> Iterator[Output]:
    """The run's one output per evaluated check (no value): what a downstream step of the same run depends on.
    A failed blocking evaluation among the partitions' already fails the step (Dagster raises after it)."""
    names = {spec.key: name for name, spec in context.assets_def.check_specs_by_output_name.items()}
    selected = context.selected_asset_check_keys
    for check in sorted({o.check for o in outcomes}):
        key = AssetCheckKey(AssetKey(asset), check)
        if key in selected and key in names:
            yield Output(None, output_name=names[key])


def summary(outcomes: Sequence[CheckOutcome]) -> dict:
    """Materialization metadata: how many checks ran and which failed, by name."""
    return {"quality_checks": len(outcomes),
            "quality_checks_failed": sorted(f"{o.check} ({o.severity})" for o in outcomes if not o.passed)}


# --- checks that read every partition ------------------------------------------------------------------

def unchanged_by_run(context, owner: str, also: Sequence[str] = ()) -> bool:
    """Whether this run materialized `owner` and neither it nor any of `also` it materialized
    changed a row (each says so in its `table_unchanged` metadata: an empty site-day that emptied
    nothing). Only then is a table-wide check skipped: the run gave it nothing new to judge, and its
    previous evaluation stands (Dagster records this one as skipped; `can_subset` allows it)."""
    from dagster import DagsterEventType

    unchanged: dict[str, bool] = {}
    for record in context.instance.get_records_for_run(
            context.run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records:
        materialization = record.event_log_entry.asset_materialization
        name = materialization.asset_key.to_user_string()
        flag = materialization.metadata.get("table_unchanged")
        unchanged[name] = unchanged.get(name, True) and bool(getattr(flag, "value", False))
    return unchanged.get(owner, False) and all(unchanged.get(name, True) for name in also)


def _selected(context, results: Iterable[AssetCheckResult], asset: str) -> Iterable[AssetCheckResult]:
    """The results of the checks this run selected (a subsettable check may be asked for one)."""
    keys = context.selected_asset_check_keys
    return (r for r in results if AssetCheckKey(AssetKey(asset), r.check_name) in keys)


@multi_asset_check(specs=[_spec(RULES.rule(q.RAW, n)) for n in TABLE_WIDE[q.RAW]], name="raw_image_index_table_checks",
                   can_subset=True, description="Checks over every partition of raw_image_index.")
def raw_image_index_table_checks(context, spark: SparkResource, warehouse: Warehouse, deid: Deidentifier):
    if unchanged_by_run(context, q.RAW):
        context.log.info("raw_image_index_table_checks skipped: this run changed no row of raw_image_index")
        return
    index = warehouse.read(spark.spark_session, RAW_IMAGE_INDEX)
    ctx = quality_context(deid)
    outcomes = [q.scans_per_patient(index, ctx), q.sop_instance_uid_in_one_partition(index, ctx)]
    yield from _selected(context, check_results(outcomes, context.log, q.RAW), q.RAW)


@multi_asset_check(specs=[_spec(RULES.rule(q.ANONYMIZED, n)) for n in TABLE_WIDE[q.ANONYMIZED]],
                   name="anonymized_images_table_checks", can_subset=True,
                   description="One pseudonym per patient and one patient per pseudonym, over every partition "
                               "(ledger and index in the identifiable zone, manifest).")
def anonymized_images_table_checks(context, spark: SparkResource, warehouse: Warehouse, deid: Deidentifier):
    if unchanged_by_run(context, q.ANONYMIZED, also=(q.RAW,)):
        context.log.info("anonymized_images_table_checks skipped: this run changed no row of the ledger, "
                         "manifest or index")
        return
    session = spark.spark_session
    ctx = quality_context(deid)
    outcomes = q.pseudonym_bijection(warehouse.read(session, LEDGER), warehouse.read(session, RAW_IMAGE_INDEX),
                                     warehouse.read(session, manifest(load_clinical_policy())), ctx)
    yield from _selected(context, check_results(outcomes, context.log, q.ANONYMIZED), q.ANONYMIZED)


TABLE_CHECKS = [raw_image_index_table_checks, anonymized_images_table_checks]


# --- across runs: what the instance recorded (the publication gate, the release's data card) -----------

def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).replace(microsecond=0).isoformat()


def _evaluation(asset: str, check: str, severity: str, record) -> CheckEvaluation | None:
    if record.status == AssetCheckExecutionRecordStatus.PLANNED or record.event is None:
        return None
    return _from_event(asset, check, severity, record.event, getattr(record, "partition", None), record.run_id)


def _from_event(asset: str, check: str, severity: str, event, partition: str | None, run_id: str
                ) -> CheckEvaluation | None:
    """A recorded evaluation: one partition's (the check is partitioned), or the partitions its metadata names
    (a whole run's evaluation, as recorded before checks were per partition, or a table-wide one)."""
    data = event.dagster_event.event_specific_data if event.dagster_event else None
    if data is None or not hasattr(data, "passed"):
        return None
    if partition is not None:
        covered = (partition,)
        failed = () if data.passed else covered
    else:
        meta = {k: getattr(v, "value", v) for k, v in (data.metadata or {}).items()}
        covered, failed = tuple(meta.get("partitions") or ()), tuple(meta.get("failed_partitions") or ())
    return CheckEvaluation(asset, check, bool(data.passed), severity, covered, failed, run_id, _iso(event.timestamp))


def _run_check_times(instance: DagsterInstance, run_id: str) -> dict[tuple[str, str, str], str]:
    """When each per-partition check evaluation of one run was recorded: (asset, check, partition) -> ISO time."""
    from dagster import DagsterEventType

    times: dict[tuple[str, str, str], str] = {}
    cursor = None
    while True:
        page = instance.get_records_for_run(run_id, cursor=cursor, of_type=DagsterEventType.ASSET_CHECK_EVALUATION,
                                            limit=1000)
        for record in page.records:
            data = record.event_log_entry.dagster_event.event_specific_data
            if getattr(data, "partition", None) is not None:
                key = (data.asset_key.to_user_string(), data.check_name, data.partition)
                times[key] = _iso(record.event_log_entry.timestamp)
        if not page.has_more:
            return times
        cursor = page.cursor


def _latest_per_partition(instance: DagsterInstance, rule: CheckRule, runs: dict) -> list[CheckEvaluation]:
    """The newest evaluation of each partition of a partitioned check.

    From Dagster's per-partition check state (one query a check): its status, and the run that evaluated it;
    the time from that run's evaluation events (one read per run, shared through `runs`). So the evaluations
    read grow with the partitions, not with the runs. A partition whose newest execution is only planned (a
    run under way, or one that died) is decided by its newest actual evaluation.
    """
    from dagster._core.event_api import PartitionKeyFilter

    key = AssetCheckKey(AssetKey(rule.asset), rule.name)
    storage = instance.event_log_storage
    found: list[CheckEvaluation] = []
    for info in storage.get_asset_check_partition_info([key]):
        partition = info.partition_key
        if partition is None:
            continue
        if info.latest_execution_status in COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES:
            run_id = info.latest_planned_run_id
            if run_id not in runs:
                runs[run_id] = _run_check_times(instance, run_id)
            passed = info.latest_execution_status == AssetCheckExecutionRecordStatus.SUCCEEDED
            found.append(CheckEvaluation(rule.asset, rule.name, passed, rule.severity, (partition,),
                                         () if passed else (partition,), run_id,
                                         runs[run_id].get((rule.asset, rule.name, partition))))
            continue
        for record in storage.get_asset_check_execution_history(
                key, limit=HISTORY, partition_filter=PartitionKeyFilter(key=partition)):
            ev = _evaluation(rule.asset, rule.name, rule.severity, record)
            if ev is not None:
                found.append(ev)
                break
    return found


def check_history(instance: DagsterInstance, rule: CheckRule, runs: dict | None = None) -> list[CheckEvaluation]:
    """One check's recorded evaluations, newest first, with their run and time: the newest of each partition
    (a per-run check, recorded per partition), then at most `HISTORY` whole evaluations (a table-wide check's,
    or a run's as recorded before checks were per partition), newest first. The folds in `imaging.quality.gate`
    let the first evaluation that covers a partition decide it."""
    from dagster._core.event_api import PartitionKeyFilter

    records = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(rule.asset), rule.name), limit=HISTORY, partition_filter=PartitionKeyFilter(key=None))
    whole = [e for e in (_evaluation(rule.asset, rule.name, rule.severity, r) for r in records) if e]
    if rule.name in TABLE_WIDE.get(rule.asset, ()):
        return whole
    return _latest_per_partition(instance, rule, {} if runs is None else runs) + whole


def upstream_rules(assets: Sequence[str] = UPSTREAM, blocking_only: bool = False) -> list[CheckRule]:
    """Every check of `assets` (per-run and table-wide), or only the ERROR ones."""
    return [r for a in assets for r in RULES.for_asset(a) if r.blocking or not blocking_only]


def current_evaluations(instance: DagsterInstance, assets: Sequence[str] = UPSTREAM,
                        facts: "RecordedFacts | None" = None) -> list[CheckEvaluation]:
    """The current state of every ERROR check of `assets`, folded per partition from the check records (read
    through `facts` when given: the release's data cards then reuse the same histories)."""
    facts = facts if facts is not None else RecordedFacts(instance)
    states = (latest_by_partition(facts.history(rule)) for rule in upstream_rules(assets, blocking_only=True))
    return [s for s in states if s is not None]


def publication_refusal(instance: DagsterInstance, partitions_read: Iterable[str] | None = None,
                        facts: "RecordedFacts | None" = None) -> str | None:
    """Why publication must wait (naming checks and partitions), or None when no ERROR check fails."""
    blockers = publication_blockers(current_evaluations(instance, facts=facts), partitions_read)
    return blocking_message(blockers) if blockers else None


class RecordedFacts:
    """What the instance recorded, for release data cards: each read once per run, then reused.

    Check histories (one query per check) and landing versions (two per site-day) are the same for
    every cohort of a run; a run building several releases asks once.
    """

    def __init__(self, instance: DagsterInstance):
        self.instance = instance
        self._histories: dict[tuple[str, str], list[CheckEvaluation]] = {}
        self._landing: dict[str, str | None] = {}
        self._sources: dict = {}  # site-day -> its latest link's clinical source read (or None)
        self._runs: dict = {}  # run id -> when its per-partition check evaluations were recorded
        self._pending = None  # a Future of `prefetch`'s histories

    def prefetch(self, rules: Iterable[CheckRule]) -> None:
        """Read the histories of `rules` not read yet in a thread of its own, while the caller goes on (a release
        build waits on Spark meanwhile); the next `history` waits for them. The same reads, earlier."""
        from concurrent.futures import ThreadPoolExecutor

        wanted = [r for r in rules if (r.asset, r.name) not in self._histories]
        background = ThreadPoolExecutor(max_workers=1)
        try:
            self._pending = background.submit(
                lambda: {(r.asset, r.name): check_history(self.instance, r, self._runs) for r in wanted})
        finally:
            background.shutdown(wait=False)

    def history(self, rule: CheckRule) -> list[CheckEvaluation]:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._histories.update(pending.result())
        key = (rule.asset, rule.name)
        if key not in self._histories:
            self._histories[key] = check_history(self.instance, rule, self._runs)
        return self._histories[key]

    def release_checks(self, partitions_read: Iterable[str], assets: Sequence[str] = UPSTREAM) -> list[ReleaseCheck]:
        """The latest result of every check (ERROR and WARN) of `assets` on the partitions a release read.

        Per partition for per-run checks, one entry for a table-wide check, "not evaluated" where the
        instance holds no evaluation: see `imaging.quality.gate.release_checks`. Results, run ids and times
        only; no check metadata (offender pseudonyms stay in Dagster).
        """
        read = sorted(set(partitions_read))
        return [c for rule in upstream_rules(assets) for c in release_checks(rule, self.history(rule), read)]

    def landing_versions(self, partitions: Iterable[str]) -> dict[str, str | None]:
        """Per site-day (`date|site`), the data version of the landing zone the index read, or None.

        The latest observation of `landing_zone` recorded before the partition's latest
        materialization of `raw_image_index` (when the instance holds none, the latest observation):
        what the index read, not a later landing. None when no such observation is recorded: never
        invented.
        """
        wanted = sorted(set(partitions))
        for key in wanted:
            if key not in self._landing:
                self._landing[key] = _landing_version(self.instance, key)
        return {key: self._landing[key] for key in wanted}

    def clinical_sources(self, partitions: Iterable[str]) -> tuple:
        """The distinct clinical source reads (`ClinicalSourceRead`) the site-days' latest links recorded."""
        reads = {}
        for key in sorted(set(partitions)):
            if key not in self._sources:
                self._sources[key] = _clinical_source_read(self.instance, key)
            read = self._sources[key]
            if read is not None:
                reads[(read.name, read.data_version)] = read
        return tuple(reads[k] for k in sorted(reads))


def _clinical_source_read(instance: DagsterInstance, key: str):
    """The clinical source read the site-day's latest link recorded (its materialization's `clinical_source`), or
    None (linked from the landing zone's extracts)."""
    from imaging.governance.datacard import ClinicalSourceRead

    linked = next(iter(instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(q.LINKED), asset_partitions=[key]), limit=1).records), None)
    entry = linked.asset_materialization.metadata.get("clinical_source") if linked is not None else None
    read = getattr(entry, "value", None)
    if not isinstance(read, dict):
        return None
    return ClinicalSourceRead(read["name"], read["data_version"],
                              {name: query["query_sha256"] for name, query in read["queries"].items()})


def _landing_version(instance: DagsterInstance, key: str) -> str | None:
    indexed = next(iter(instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(q.RAW), asset_partitions=[key]), limit=1).records), None)
    record = instance.get_latest_data_version_record(
        AssetKey(LANDING_ZONE), is_source=True, partition_key=key,
        before_cursor=indexed.storage_id if indexed is not None else None)
    version = extract_data_version_from_entry(record.event_log_entry) if record is not None else None
    return version.value if version is not None else None

