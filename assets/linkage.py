"""The as-of join of images to clinical records: shared helper (not an asset).

Used by the `linked_patient_metadata` asset and by `benchmarks/skew.py` (which also measures the
salted variant), so the benchmark times the join the asset runs, not a copy of it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, functions as F

KEY = ["date", "site", "patient_id"]


def as_of_join(images: DataFrame, clinical: DataFrame, *, salt_buckets: int = 0) -> DataFrame:
    """Each image with its patient's latest record dated on or before the image's date.

    Joins the distinct (date, site, patient) keys, not the images, and takes the latest with a
    `max_by` aggregation rather than grouping whole keys: the latest extract, the last row in it.
    Images with no such record are kept, `has_clinical_record` false.

    With `salt_buckets` > 0 the final image-to-record join is salted: each image row draws a
    bucket from its path and the (small, one row per key) record side is copied into every
    bucket, so a hot key spreads over tasks. The result is the same rows either way.
    """
    keys = images.select(*KEY).where("patient_id IS NOT NULL").distinct()
    as_of = (keys.join(clinical, ["site", "patient_id"])
             .where(F.col("extract_date") <= F.col("date"))
             .groupBy(*KEY)
             .agg(F.max_by(F.struct("extract_date", "clinical"), F.struct("extract_date", "row_number")).alias("rec"))
             .select(*KEY, F.col("rec.extract_date").alias("clinical_extract_date"),
                     F.col("rec.clinical").alias("clinical")))
    on = list(KEY)
    if salt_buckets > 0:
        images = images.withColumn("_salt", (F.xxhash64("source_path") % salt_buckets + salt_buckets) % salt_buckets)
        as_of = as_of.withColumn("_salt", F.explode(F.sequence(F.lit(0), F.lit(salt_buckets - 1))))
        on.append("_salt")
    linked = (images.join(as_of, on, "left")
              .withColumn("has_clinical_record", F.col("clinical_extract_date").isNotNull()))
    return linked.drop("_salt") if salt_buckets > 0 else linked
