"""Great Expectations 1.x suites on a Spark DataFrame, in one pass (dagster-ge supports only GX < 1).

Suites are JSON in `platform/expectations/`: a name and a list of expectations, each a GX
expectation type and its kwargs, e.g. `{"type": "expect_column_values_to_not_be_null",
"kwargs": {"column": "sop_instance_uid"}}`. The row-wise ones run on the executors, GX's pandas
engine on each Arrow batch, and Spark sums their counts (`imaging.quality.expectations`); the
schema-wise ones (a column's type) are decided on the DataFrame's schema. One Spark job a suite,
and the driver never imports GX. Results are counts only: no unexpected value reaches the driver.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from imaging.quality.expectations import (COUNTS, SCHEMA_WISE, ExpectationResult, Totals, count_batches,
                                          row_result, type_result)
from resources.spark import spark_schema

__all__ = ["ExpectationResult", "validate_suite"]


def validate_suite(df: DataFrame, spec: Mapping) -> list[ExpectationResult]:
    """Validate `df` against the suite (validated: `imaging.quality.rules.QualityRules.suite`); one result per
    expectation, in the suite's order, counts only."""
    items = list(spec["expectations"])
    rows = [(position, item) for position, item in enumerate(items) if item["type"] not in SCHEMA_WISE]
    totals: dict[int, Totals] = {}
    if rows:
        summed = (df.mapInArrow(partial(count_batches, json.dumps(rows)), spark_schema(COUNTS))
                  .groupBy("position")
                  .agg(F.sum("element").alias("element"), F.sum("missing").alias("missing"),
                       F.sum("unexpected").alias("unexpected"), F.max("raised").alias("raised"))
                  .collect())  # one row per expectation, whatever the table's size
        totals = {r["position"]: Totals(r["element"], r["missing"], r["unexpected"], r["raised"]) for r in summed}
    types = {field.name: field.dataType for field in df.schema.fields}
    return [type_result(item, types) if item["type"] in SCHEMA_WISE else row_result(item, totals.get(position, Totals()))
            for position, item in enumerate(items)]
