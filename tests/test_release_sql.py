"""The release's Spark SQL (columns, counts, k-anonymity class sizes) agrees with the Python rules."""

import json
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from imaging.deid import RESEARCH_DEFAULT
from imaging.driver.config import read_yaml
from imaging.governance.datacard import (BREAKDOWN_COLUMNS, MISSING, CountedWrite, FactsCount, counts_sql, release_counts,
                                        release_facts)
from imaging.governance.disclosure import DisclosurePolicy, class_sizes
from imaging.governance.lineage import column_lineage, release_columns, release_row
from imaging.steps.clinical import ClinicalPolicy


@pytest.fixture(scope="module")
def selection(spark):
    spec = read_yaml("clinical_policy.yaml")
    policy, disclosure = ClinicalPolicy.from_dict(spec), DisclosurePolicy.from_dict(spec)
    lineage = column_lineage(policy, RESEARCH_DEFAULT, disclosure)
    ages = [None, 0, 4, 5, 49, 50, 54, 55, 89, 90, 90, 61, 61, 61]
    sexes = ["F", "M", None, "F", "F", "M", "F", "U", "M", None, "F", "F", "F", "M"]
    rows = []
    for i, (age, sex) in enumerate(zip(ages, sexes)):
        row = {c: None for c in ("batch", "output_path", "size_bytes", "sha256", "patient_pseudonym",
                                 "study_instance_uid", "series_instance_uid", "sop_instance_uid", "sop_class_uid",
                                 "modality", "laterality", "study_date", "manufacturer", "model", "rows", "columns",
                                 "number_of_frames", "has_clinical_record", "pixel_text", "redacted_regions",
                                 *policy.output_columns)}
        row.update(patient_pseudonym=f"P{i % 11}", study_instance_uid=f"2.25.{i % 5}", series_instance_uid=f"2.25.{i}",
                   sop_instance_uid=f"2.25.{100 + i}", modality="OPT" if i % 3 else "OP",
                   laterality=None if i == 4 else "R" if i % 2 else "L", age_at_scan=age, sex=sex, rows=16)
        rows.append(row)
    types = {"age_at_scan": "INT", "rows": "INT", "columns": "INT", "number_of_frames": "INT", "size_bytes": "BIGINT",
             "visual_acuity_logmar": "DOUBLE", "iop_mmhg": "DOUBLE", "has_clinical_record": "BOOLEAN"}
    schema = ", ".join(f"`{c}` {types.get(c, 'STRING')}" for c in rows[0])
    frame = spark.createDataFrame([tuple(r.values()) for r in rows], schema)
    frame.createOrReplaceTempView("release_sql_selection")
    return rows, lineage, disclosure


def test_release_columns_in_sql_match_release_row(spark, selection):
    rows, lineage, disclosure = selection
    columns = release_columns(lineage, disclosure)
    got = spark.table("release_sql_selection").selectExpr(*[c.sql for c in columns]).collect()
    expected = [release_row(r, lineage, disclosure) for r in rows]
    assert [r.asDict() for r in got] == expected
    assert [r["age_band"] for r in expected][:4] == [None, "0-4", "0-4", "5-9"] and expected[9]["age_band"] == "90+"


def test_class_sizes_and_counts_in_sql_match_python(spark, selection):
    rows, _, disclosure = selection
    sizes = [r["size"] for r in spark.sql(disclosure.class_sizes_sql("release_sql_selection")).collect()]
    assert sorted(sizes) == sorted(class_sizes(rows, disclosure))
    counts = release_counts(spark.sql(counts_sql("release_sql_selection")).collect())
    assert (counts.images, counts.patients, counts.studies, counts.series) == (14, 11, 5, 14)
    for column in BREAKDOWN_COLUMNS:
        assert counts.breakdowns[column] == dict(Counter(MISSING if r[column] is None else r[column] for r in rows))


def test_one_query_over_released_rows_gives_counts_class_sizes_and_listed_rows(spark, selection):
    """The build's one query over the released metadata: the same counts, the class sizes the manifest's own query
    gives (the released quasi-identifier columns are its generalisations), and the rows of listed patients."""
    rows, lineage, disclosure = selection
    listed = {"P1", "P4"}
    released = spark.table("release_sql_selection").selectExpr(
        *[c.sql for c in release_columns(lineage, disclosure)],
        f"CASE WHEN patient_pseudonym IN ({', '.join(repr(p) for p in listed)}) THEN true END AS listed")
    released.createOrReplaceTempView("release_sql_released")
    found = release_facts(spark.sql(counts_sql("release_sql_released", quasi_identifiers=disclosure.released_columns,
                                               listed="listed")).collect())
    assert found.class_sizes == tuple(sorted(class_sizes(rows, disclosure)))
    assert found.counts == release_counts(spark.sql(counts_sql("release_sql_selection")).collect())
    assert found.listed == sum(r["patient_pseudonym"] in listed for r in rows) > 0
    # No quasi-identifier declared: every patient in one class, as the manifest's query says.
    none = release_facts(spark.sql(counts_sql("release_sql_released")).collect())
    assert (none.class_sizes, none.listed) == ((11,), 0)
    # The build counts them in the copy's metadata pass (`CountedWrite`), in batches as they stream past, rows of
    # images no metadata row names (`file` null) passed to the writer and not counted: the same facts.
    written = []

    def write(batches):  # stands for WriteParquet: takes every batch, then says how many rows
        written.extend(batches)
        yield pa.record_batch({"rows": [sum(b.num_rows for b in written)]})

    def facts(count: FactsCount, batches):
        return release_facts(json.loads(next(CountedWrite(write, count)(iter(batches))).column("facts")[0].as_py()))

    table = released.withColumn("file", F.lit("images/x.dcm")).unionByName(
        released.withColumn("file", F.lit(None).cast("string"))).toArrow()
    assert facts(FactsCount(quasi_identifiers=disclosure.released_columns, listed="listed"),
                 table.to_batches(max_chunksize=5)) == found
    assert sum(b.num_rows for b in written) == 2 * len(rows)
    assert facts(FactsCount(), table.to_batches()) == none
    assert facts(FactsCount(), []) == release_facts([])


def test_header_values_and_content_keys_in_sql_match_python(spark, selection):
    """The copy writes each file's header from one JSON object of its release row (quasi-identifiers, stamped
    labels, subject, time point), and the build joins the store's index on the content key Spark computes: the
    JSON is the release row's, and Spark's key hashes exactly the bytes the copy's own key does (it refuses a row
    whose key differs)."""
    import json

    from imaging.steps.release import HeaderPlan
    from imaging.steps.stamp import StampPlan

    rows, lineage, disclosure = selection
    columns = release_columns(lineage, disclosure)
    frame = spark.table("release_sql_selection").selectExpr(*[c.sql for c in columns])
    types = {"age_band": "string", "sex": "string", "diagnosis_code": "string", "visual_acuity_logmar": "double"}
    stamp = StampPlan.build("cohort", None, list(types), types)
    for plan in (HeaderPlan(disclosure.header_rules(), None, "code"), HeaderPlan(disclosure.header_rules(), stamp, "c")):
        got = (frame.withColumn("sha256", frame["sop_instance_uid"])
               .select("sha256", F.expr(plan.values_sql()).alias("released"))
               .withColumn("key", F.expr(plan.key_sql())).collect())
        expected = [release_row(r, lineage, disclosure) for r in rows]
        for row, want in zip(got, expected):
            assert {c: json.loads(row["released"]).get(c) for c in plan.value_columns} == {
                c: want.get(c) for c in plan.value_columns}  # Spark leaves out a null field
            assert row["key"] == plan.content_key(row["sha256"], row["released"])
        assert len({r["key"] for r in got}) == len(got)
