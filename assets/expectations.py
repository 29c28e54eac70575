"""Great Expectations 1.x suites run directly on Spark DataFrames (dagster-ge supports only GX < 1).

Suites are JSON in `platform/expectations/`: a name and a list of expectations, each a GX
expectation type and its kwargs, e.g. `{"type": "expect_column_values_to_not_be_null",
"kwargs": {"column": "sop_instance_uid"}}`. They run in an ephemeral context (nothing is
written, no GX cloud) with progress bars off. Results are counts only: GX is asked for no sample
of unexpected values (`RESULT_FORMAT`), which could be identifiers, so none reaches the driver.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Mapping

from pyspark.sql import DataFrame

_LOCK = threading.Lock()
_CONTEXT = None
# Counts only: BASIC reports each expectation's unexpected and element counts; with no partial list
# GX asks Spark for no sample of unexpected values (a `limit(0)` query Spark answers without a job),
# so no value ever reaches the driver and each map expectation costs one Spark job fewer.
RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": 0}


@dataclass(frozen=True)
class ExpectationResult:
    """One expectation's outcome as counts: `label` is its type and column, never a value."""

    label: str
    severity: str            # ERROR or WARN, from the suite (default ERROR)
    success: bool
    unexpected: int          # rows that broke it (0 for table-level expectations that passed)
    checked: int | None      # rows it looked at, when GX reports it


def _context():
    """One ephemeral GX context per process, with a Spark datasource and a whole-DataFrame batch."""
    global _CONTEXT
    with _LOCK:
        if _CONTEXT is None:
            import great_expectations as gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            for name in ("great_expectations", "great_expectations.core", "great_expectations.datasource"):
                logging.getLogger(name).setLevel(logging.WARNING)
            context = gx.get_context(mode="ephemeral")
            context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
            # persist=False: GX would otherwise cache every validated frame and never release it, and
            # Spark then answers a later read of the same table path from that cache, i.e. rows
            # from before the next commit replaced the partition.
            batch_definition = (context.data_sources.add_spark("imaging", persist=False)
                                .add_dataframe_asset("frame").add_batch_definition_whole_dataframe("whole"))
            _CONTEXT = (context, batch_definition)
        return _CONTEXT


def preload() -> threading.Thread | None:
    """Import GX and make the context in a daemon thread (seconds of imports), so that a step with data
    pays it while Spark starts and the step runs, not when its first suite is validated; that first
    validation waits for the thread (the context's lock). None when it is already made."""
    if _CONTEXT is not None:
        return None

    def make():
        try:
            _context()
        except Exception:  # noqa: BLE001 - the first validation makes it again and raises with its context
            pass

    thread = threading.Thread(target=make, name="gx-preload", daemon=True)
    thread.start()
    return thread


def _camel(expectation_type: str) -> str:
    return "".join(part.capitalize() for part in expectation_type.split("_"))


def build_suite(spec: Mapping):
    """A GX ExpectationSuite from a validated suite (`assets.quality.load_suite`: the model's dump, every
    key present); an expectation type GX does not have fails clearly."""
    import great_expectations as gx

    expectations = []
    for position, item in enumerate(spec["expectations"]):
        cls = getattr(gx.expectations, _camel(item["type"]), None)
        if cls is None:
            raise ValueError(f"suite {spec.get('name')!r}: unknown expectation type {item['type']!r}")
        # GX may return results in another order: the position in the suite finds each one's severity.
        expectations.append(cls(**item["kwargs"], meta={"position": position}))
    return gx.ExpectationSuite(name=spec["name"], expectations=expectations)


def validate_suite(df: DataFrame, spec: Mapping) -> list[ExpectationResult]:
    """Validate `df` against the suite; one result per expectation, counts only."""
    context, batch_definition = _context()
    suite = build_suite(spec)
    with _LOCK:  # the ephemeral context's suite store is shared: one validation at a time
        existing = {s.name for s in context.suites.all()}
        if suite.name in existing:
            context.suites.delete(suite.name)
        suite = context.suites.add(suite)
        batch = batch_definition.get_batch(batch_parameters={"dataframe": df})
        outcome = batch.validate(suite, result_format=RESULT_FORMAT)
    severities = [item["severity"] for item in spec["expectations"]]  # validated (SuiteFile): ERROR or WARN
    results = []
    for res in sorted(outcome.results, key=lambda r: r.expectation_config.meta["position"]):
        config = res.expectation_config
        severity = severities[config.meta["position"]]
        column = config.kwargs.get("column")
        label = f"{config.type}({column})" if column else config.type
        result = res.result or {}
        unexpected = result.get("unexpected_count")
        results.append(ExpectationResult(label, severity, bool(res.success),
                                         int(unexpected) if unexpected is not None else (0 if res.success else 1),
                                         result.get("element_count")))
    return results
