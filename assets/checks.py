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
"""

from __future__ import annotations

from typing import Iterable, Sequence

from dagster import (AssetCheckKey, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey,
                     DagsterInstance, multi_asset_check)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from assets import quality as q
from imaging.catalogue import LEDGER, RAW_IMAGE_INDEX, manifest
from imaging.clinical import load_policy
from imaging.quality import (ERROR, CheckEvaluation, CheckOutcome, QualityRules, blocking_message, latest_by_partition,
                             load_quality_rules, publication_blockers)
from resources.deid import Deidentifier
from resources.spark import SparkResource
from resources.warehouse import Warehouse

RULES: QualityRules = load_quality_rules()
# Checks that read every partition of their table: evaluated by the table-wide checks below.
TABLE_WIDE = {q.RAW: ("scans_per_patient", "sop_instance_uid_in_one_partition"),
              q.ANONYMIZED: ("pseudonyms_per_patient", "patients_per_pseudonym")}
UPSTREAM = (q.RAW, q.LINKED, q.ANONYMIZED)
HISTORY = 500  # evaluations read per check when folding per-partition state (newest first)


def _spec(rule) -> AssetCheckSpec:
    return AssetCheckSpec(rule.name, asset=rule.asset, blocking=rule.blocking,
                          description=f"[{rule.severity}] {rule.description}")


def check_specs(asset: str) -> list[AssetCheckSpec]:
    """The specs evaluated with `asset`'s materialization (its rules minus the table-wide ones)."""
    return [_spec(r) for r in RULES.for_asset(asset) if r.name not in TABLE_WIDE.get(asset, ())]


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
                                     warehouse.read(session, manifest(load_policy())), ctx)
    yield from _selected(context, check_results(outcomes, context.log, q.ANONYMIZED), q.ANONYMIZED)


TABLE_CHECKS = [raw_image_index_table_checks, anonymized_images_table_checks]


# --- across runs: the publication gate -----------------------------------------------------------------

def _evaluation(asset: str, check: str, severity: str, record) -> CheckEvaluation | None:
    if record.status == AssetCheckExecutionRecordStatus.PLANNED or record.event is None:
        return None
    data = record.event.dagster_event.event_specific_data if record.event.dagster_event else None
    if data is None or not hasattr(data, "passed"):
        return None
    meta = {k: getattr(v, "value", v) for k, v in (data.metadata or {}).items()}
    return CheckEvaluation(asset, check, bool(data.passed), severity, tuple(meta.get("partitions") or ()),
                           tuple(meta.get("failed_partitions") or ()))


def current_evaluations(instance: DagsterInstance, assets: Sequence[str] = UPSTREAM) -> list[CheckEvaluation]:
    """The current state of every ERROR check of `assets`, folded per partition from the check records."""
    storage = instance.event_log_storage
    states = []
    for asset in assets:
        for rule in RULES.for_asset(asset):
            if not rule.blocking:
                continue
            records = storage.get_asset_check_execution_history(AssetCheckKey(AssetKey(asset), rule.name),
                                                                limit=HISTORY)
            history = [e for e in (_evaluation(asset, rule.name, rule.severity, r) for r in records) if e]
            state = latest_by_partition(history)
            if state is not None:
                states.append(state)
    return states


def publication_refusal(instance: DagsterInstance, partitions_read: Iterable[str] | None = None) -> str | None:
    """Why publication must wait (naming checks and partitions), or None when no ERROR check fails."""
    blockers = publication_blockers(current_evaluations(instance), partitions_read)
    return blocking_message(blockers) if blockers else None
