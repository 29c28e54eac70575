"""GX suites evaluated batch by batch (imaging/quality/expectations.py), without Spark: the counts of a
table split into batches add up to the counts of the whole, and only counts come out."""

import json

import pyarrow as pa
import pytest

from imaging.quality.expectations import (ROWS_PER_CALL, Totals, count_batches, row_result, supported, type_result)

SUITE = [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "uid"}, "severity": "ERROR"},
    {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "uid", "regex": "^[0-9.]+$"}, "severity": "ERROR"},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "rows", "min_value": 1, "max_value": 512},
     "severity": "WARN"},
    {"type": "expect_column_pair_values_a_to_be_greater_than_b",
     "kwargs": {"column_A": "day", "column_B": "extract_day", "or_equal": True, "ignore_row_if": "either_value_is_missing"},
     "severity": "ERROR"},
]
ROWS = [{"uid": "1.2.3", "rows": 256, "day": "2024-03-02", "extract_day": "2024-03-01"},
        {"uid": None, "rows": 0, "day": "2024-03-02", "extract_day": None},
        {"uid": "1.2.x-secret-value", "rows": 600, "day": "2024-03-01", "extract_day": "2024-03-05"},
        {"uid": "4.5", "rows": 12, "day": "2024-03-03", "extract_day": "2024-03-03"}]
SCHEMA = pa.schema([("uid", pa.string()), ("rows", pa.int64()), ("day", pa.string()), ("extract_day", pa.string())])


def batch(rows):
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def totals_of(batches) -> dict[int, Totals]:
    pairs = list(enumerate(SUITE))
    out: dict[int, Totals] = {}
    for record_batch in count_batches(json.dumps(pairs), batches):
        for row in record_batch.to_pylist():
            t = out.get(row["position"], Totals())
            out[row["position"]] = Totals(t.element + row["element"], t.missing + row["missing"],
                                          t.unexpected + row["unexpected"], t.raised or row["raised"])
    return out


def test_counts_of_batches_add_up_to_the_counts_of_the_whole():
    whole = totals_of([batch(ROWS)])
    split = totals_of([batch([r]) for r in ROWS])
    assert whole == split
    results = [row_result(item, whole[p]) for p, item in enumerate(SUITE)]
    assert [(r.success, r.unexpected) for r in results] == [(False, 1), (False, 1), (False, 2), (False, 1)]
    assert all(r.checked == 4 for r in results)
    assert not any("secret" in r.label for r in results)  # labels name the type and column, never a value


def test_mostly_and_an_empty_table_follow_gx_rules():
    item = {**SUITE[1], "kwargs": {**SUITE[1]["kwargs"], "mostly": 0.6}}
    assert row_result(item, Totals(element=4, missing=1, unexpected=1)).success      # 2 of 3 non-missing passed
    assert not row_result(item, Totals(element=4, missing=0, unexpected=2)).success  # 2 of 4
    assert row_result(SUITE[0], Totals()).success                                   # no rows: nothing broke it
    assert list(count_batches(json.dumps(list(enumerate(SUITE))), [])) == []


def test_a_raising_expectation_fails_naming_its_exception_type_only():
    bad = [{"type": "expect_column_values_to_be_between", "kwargs": {"column": "uid", "min_value": 1}, "severity": "ERROR"}]
    out = list(count_batches(json.dumps(list(enumerate(bad))), [batch(ROWS)]))
    row = out[0].to_pylist()[0]
    assert row["raised"] and "secret" not in row["raised"]
    result = row_result(bad[0], Totals(row["element"], row["missing"], row["unexpected"], row["raised"]))
    assert not result.success and "raised" in result.label and "secret" not in result.label


def test_large_tasks_are_validated_in_calls_of_bounded_size():
    thousand = batch([ROWS[0]] * 1000)
    calls = list(count_batches(json.dumps([[0, SUITE[0]]]), [thousand] * (ROWS_PER_CALL // 1000 + 1)))
    assert len(calls) == 2 and sum(c.to_pylist()[0]["element"] for c in calls) == (ROWS_PER_CALL // 1000 + 1) * 1000


def test_column_types_are_decided_on_the_schema_as_gx_spark_does():
    from pyspark.sql import types as T

    item = {"type": "expect_column_values_to_be_of_type", "kwargs": {"column": "size", "type_": "LongType"},
            "severity": "ERROR"}
    assert type_result(item, {"size": T.LongType()}).success
    assert not type_result(item, {"size": T.IntegerType()}).success
    assert not type_result(item, {}).success  # a missing column fails
    listed = {"type": "expect_column_values_to_be_in_type_list", "severity": "ERROR",
              "kwargs": {"column": "size", "type_list": ["IntegerType", "LongType"]}}
    assert type_result(listed, {"size": T.IntegerType()}).success


@pytest.mark.parametrize("name, ok", [("expect_column_values_to_be_in_set", True),
                                      ("expect_column_values_to_be_of_type", True),
                                      ("expect_column_values_to_be_unique", False),  # needs the whole column
                                      ("expect_column_mean_to_be_between", False)])
def test_only_expectations_whose_counts_add_up_are_supported(name, ok):
    assert supported(name) is ok
