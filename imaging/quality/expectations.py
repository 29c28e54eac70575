"""Great Expectations suites evaluated batch by batch, where the rows are: counts that add up.

A suite (`platform/expectations/<asset>.json`) holds two kinds of expectation:

- **row-wise** (`ROW_WISE`): each row passes or fails on its own values, so a table's counts are the
  sums of its batches' counts. `count_batches` runs them with GX's pandas engine on each Arrow batch
  of a Spark task (`DataFrame.mapInArrow`), and yields one row of counts per expectation and batch;
  Spark sums them (a combiner, not a gather). GX on Spark's own engine builds one query plan per
  metric through the driver (about 2,400 driver-JVM calls and 2-9 CPU-seconds a suite on a
  seven-row table); per batch it is a tenth of a second of Python.
- **schema-wise** (`SCHEMA_WISE`): the column's type, a property of the table, not of its rows.
  `type_outcome` decides it on the Spark schema exactly as GX's Spark engine does (the type name
  is a `pyspark.sql.types` class; the column's type is an instance of it).

An expectation of any other kind (one that needs the whole column at once, such as uniqueness)
cannot be summed over batches: `supported` names it, and the suite file is refused when loaded.
Only counts leave a batch: GX is asked for no sample of unexpected values, which could be
identifiers, and an expectation that raises reports its exception's type, never its message.
Pure of Spark and Dagster: batches in, counts out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Iterator, Mapping

import pyarrow as pa
from pydantic import Field, StringConstraints, field_validator

from imaging.config_model import StrictModel, Text
from imaging.quality.rules import Severity

ROW_WISE = frozenset({
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
    "expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex",
    "expect_column_values_to_match_regex_list", "expect_column_values_to_not_match_regex_list",
    "expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between",
    "expect_column_value_lengths_to_equal", "expect_column_values_to_match_strftime_format",
    "expect_column_values_to_be_dateutil_parseable", "expect_column_values_to_be_json_parseable",
    "expect_column_pair_values_a_to_be_greater_than_b", "expect_column_pair_values_to_be_equal",
    "expect_column_pair_values_to_be_in_set", "expect_select_column_values_to_be_unique_within_record",
    "expect_multicolumn_sum_to_equal",
})
SCHEMA_WISE = frozenset({"expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list"})

# What `count_batches` yields: one row per expectation and GX call.
COUNTS = pa.schema([("position", pa.int32()), ("element", pa.int64()), ("missing", pa.int64()),
                    ("unexpected", pa.int64()), ("raised", pa.string())])
# Rows handed to GX in one call: large enough that GX's fixed cost (its metric graph, ~0.05 s) is
# amortised, small enough that a call's pandas frame stays a few MB.
ROWS_PER_CALL = 50_000
# Counts only: BASIC reports each expectation's unexpected and element counts; with no partial list
# GX computes no sample of unexpected values, so no value ever leaves the batch.
RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": 0}


def supported(expectation_type: str) -> bool:
    """Whether per-batch validation can evaluate this GX expectation type."""
    return expectation_type in ROW_WISE or expectation_type in SCHEMA_WISE


# --- platform/expectations/*.json, their model ------------------------------------------------------------

class Expectation(StrictModel):
    type: Annotated[str, StringConstraints(pattern=r"^expect_[a-z0-9_]+$")]  # a GX expectation, snake case
    kwargs: dict[str, Any] = {}
    severity: Severity = "ERROR"

    @field_validator("type")
    @classmethod
    def _per_batch(cls, value: str) -> str:
        # Suites run batch by batch on the executors: only expectations whose counts add up over
        # batches, or that read the schema, can be evaluated that way.
        if not supported(value):
            raise ValueError("must be a row-wise GX expectation (its counts add up over batches) or a column "
                             "type expectation; see imaging/quality/expectations.py")
        return value


class SuiteFile(StrictModel):
    """A suite of platform/expectations/: its `name` is the file's name without `.json`."""

    name: Text  # the file's name without .json
    description: str = ""
    expectations: list[Expectation] = Field(min_length=1)


@dataclass(frozen=True)
class ExpectationResult:
    """One expectation's outcome over the whole table, as counts: `label` is its type and column, never
    a value."""

    label: str
    severity: str            # ERROR or WARN, from the suite (default ERROR)
    success: bool
    unexpected: int          # rows that broke it (0 or 1 for a schema expectation)
    checked: int | None      # rows it looked at (None for a schema expectation)


@dataclass(frozen=True)
class Totals:
    """One row-wise expectation's counts summed over every batch."""

    element: int = 0
    missing: int = 0
    unexpected: int = 0
    raised: str | None = None  # the exception type GX reported for some batch, if any


def label(item: Mapping) -> str:
    """`type(column)` (or the type alone): what an outcome names, never a value."""
    kwargs = item.get("kwargs") or {}
    column = kwargs.get("column") or ",".join(str(kwargs[k]) for k in ("column_A", "column_B") if k in kwargs)
    return f"{item['type']}({column})" if column else item["type"]


def row_result(item: Mapping, totals: Totals) -> ExpectationResult:
    """A row-wise expectation's outcome from its summed counts, by GX's own rule: the share of non-missing
    rows that passed must reach `mostly` (1 when absent); no rows at all passes."""
    mostly = float((item.get("kwargs") or {}).get("mostly", 1.0))
    considered = totals.element - totals.missing
    success = totals.raised is None and (considered <= 0 or (considered - totals.unexpected) / considered >= mostly)
    unexpected = totals.unexpected if totals.raised is None else max(totals.unexpected, 1)
    name = label(item) if totals.raised is None else f"{label(item)} raised {totals.raised}"
    return ExpectationResult(name, item["severity"], success, unexpected, totals.element)


def type_result(item: Mapping, column_types: Mapping[str, object]) -> ExpectationResult:
    """A schema expectation decided as GX's Spark engine decides it: the column's Spark type is an
    instance of the named `pyspark.sql.types` class (any of them, for `type_list`)."""
    from pyspark.sql import types

    kwargs = item["kwargs"]
    names = kwargs.get("type_list") if item["type"] == "expect_column_values_to_be_in_type_list" else [kwargs.get("type_")]
    actual = column_types.get(kwargs["column"])
    classes = tuple(c for c in (getattr(types, str(n), None) for n in names or ()) if isinstance(c, type))
    success = actual is not None and (names is None or names == [None] or
                                      bool(classes) and isinstance(actual, classes))
    return ExpectationResult(label(item), item["severity"], success, 0 if success else 1, None)


# --- on the executors ----------------------------------------------------------------------------------

_LOCK = threading.Lock()
_CONTEXT = None              # this process's ephemeral GX context and pandas batch definition
_SUITES: dict[str, object] = {}  # GX suites made in this process, by the digest of their row-wise part


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        for name in ("great_expectations", "great_expectations.core", "great_expectations.datasource"):
            logging.getLogger(name).setLevel(logging.WARNING)
        context = gx.get_context(mode="ephemeral")  # nothing written, no GX cloud
        context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        batches = context.data_sources.add_pandas("imaging").add_dataframe_asset("batch")
        _CONTEXT = (context, batches.add_batch_definition_whole_dataframe("whole"))
    return _CONTEXT


def _suite(context, rows: list[tuple[int, Mapping]]):
    """The GX suite of the row-wise expectations, made once per process; each keeps its position."""
    import great_expectations as gx

    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:24]
    if digest not in _SUITES:
        expectations = []
        for position, item in rows:
            cls = getattr(gx.expectations, "".join(p.capitalize() for p in item["type"].split("_")))
            expectations.append(cls(**item["kwargs"], meta={"position": position}))
        _SUITES[digest] = context.suites.add(gx.ExpectationSuite(name=f"rows-{digest}", expectations=expectations))
    return _SUITES[digest]


def validate_frame(frame, rows: list[tuple[int, Mapping]]) -> list[dict]:
    """Counts of each row-wise expectation on one pandas frame: one dict per expectation (COUNTS)."""
    with _LOCK:  # one GX context per process; Python workers run one task at a time, tests may not
        context, whole = _context()
        outcome = whole.get_batch(batch_parameters={"dataframe": frame}).validate(
            _suite(context, rows), result_format=RESULT_FORMAT)
    counts = []
    for res in outcome.results:
        result = res.result or {}
        failure = _failure(res.exception_info) if not result and not res.success else None
        counts.append({"position": int(res.expectation_config.meta["position"]),
                       "element": int(result.get("element_count") or len(frame)),
                       "missing": int(result.get("missing_count") or 0),
                       "unexpected": int(result.get("unexpected_count") or 0),
                       "raised": failure})
    return counts


def _failure(info) -> str:
    """Why GX gave a failed expectation no counts: the type name of the exception it caught (its message
    may quote a value: dropped). GX reports one exception, or one per metric it could not compute."""
    infos = [info] if isinstance(info, dict) and "raised_exception" in info else \
        [v for v in (info or {}).values() if isinstance(v, dict)] if isinstance(info, dict) else []
    for one in infos:
        if one.get("raised_exception"):
            text = str(one.get("exception_traceback") or "").strip()
            last = text.splitlines()[-1] if text else ""
            name = last.split(":", 1)[0].strip().rsplit(".", 1)[-1]
            return name if name.isidentifier() else "an exception"
    return "no counts"


def count_batches(rows_json: str, batches: Iterable) -> Iterator:
    """`mapInArrow` body: the suite's row-wise expectations (JSON of `[position, item]` pairs) on the
    task's Arrow batches, `ROWS_PER_CALL` rows per GX call; yields record batches of COUNTS."""
    rows = [(int(p), item) for p, item in json.loads(rows_json)]
    pending, size = [], 0

    def flush():
        frame = pa.Table.from_batches(pending).to_pandas()
        return pa.RecordBatch.from_pylist(validate_frame(frame, rows), schema=COUNTS)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.num_rows
        if size >= ROWS_PER_CALL:
            yield flush()
            pending, size = [], 0
    if pending:
        yield flush()

