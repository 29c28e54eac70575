"""The as-of join of images to clinical records, patient and eye: shared helper (not an asset).

Used by the `linked_patient_metadata` asset and by `benchmarks/skew.py` (which also measures the
salted variant) and `benchmarks/clinical_source.py`, so the benchmarks time the joins the asset runs, not a
copy of them.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, functions as F

from imaging.clinical_source import BOTH, BOTH_EYES, EYES, LEFT, NO_EYE_OBSERVATION, NO_LATERALITY, RIGHT

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


# --- eye by eye -------------------------------------------------------------------------------------------------

def normal_eye(column) -> Column:
    """R, L or B for R/L/B and OD/OS/OU in either case (imaging.clinical_source.normal_eye), else null."""
    value = F.upper(F.trim(column))
    out = None
    for spelled, eye in EYES.items():
        out = F.when(value == spelled, F.lit(eye)) if out is None else out.when(value == spelled, F.lit(eye))
    return out


def image_eyes(images: DataFrame) -> DataFrame:
    """Each image with the eye it shows (`eye`: R or L) and, without one, why (`eye_reason`), from its laterality
    (ImageLaterality, else Laterality, as the index reads it): imaging.clinical_source.image_eye."""
    eye = normal_eye(F.col("laterality"))
    return (images.withColumn("eye", F.when(eye.isin(RIGHT, LEFT), eye))
            .withColumn("eye_reason", F.when(eye == BOTH, F.lit(BOTH_EYES))
                        .when(~eye.isin(RIGHT, LEFT) | eye.isNull(), F.lit(NO_LATERALITY))))


def _both_eyes(frame: DataFrame) -> DataFrame:
    """Rows of eye B counted for each eye: one row for R and one for L."""
    return frame.withColumn("eye", F.explode(F.when(F.col("eye") == BOTH, F.array(F.lit(RIGHT), F.lit(LEFT)))
                                             .otherwise(F.array(F.col("eye")))))


EYE_KEY = ["date", "site", "patient_id", "eye"]


def eye_as_of(images: DataFrame, observations: DataFrame, diagnoses: DataFrame,
              fields: Sequence[str] | None = None) -> DataFrame:
    """For each (date, site, patient, eye) of `images` (`image_eyes`, with `_origin`): each eye field's latest value
    observed on or before the image's day for that eye, with the days between (`eye_clinical`,
    `eye_days_before`), and the diagnosis codes in force for that eye on that day (`eye_diagnoses`).

    `observations`: _origin, patient_id, eye (R/L/B), observed_at (local date-time), _tie, clinical (the eye fields
    as text). `diagnoses`: _origin, patient_id, eye, diagnosed_on, resolved_on (date or null), code. Rows of eye B
    count for both eyes. `fields`: the eye fields to follow (the policy's per-eye column names); None: every one. Joined on the distinct keys, not the images; the latest per field is a `max_by`
    aggregation (pre-aggregated on each task), never a grouping of whole keys."""
    keys = (images.where(F.col("eye").isNotNull() & F.col("patient_id").isNotNull())
            .select(*EYE_KEY, "_origin").distinct())
    day = F.to_date("date")
    wanted = list(fields) if fields is not None else None
    clinical = F.map_filter("clinical", lambda k, v: k.isin(wanted)) if wanted is not None else F.col("clinical")
    values = (_both_eyes(observations)
              .select("_origin", "patient_id", "eye", "observed_at", "_tie", F.explode(clinical).alias("field", "value"))
              .where(F.col("value").isNotNull()))
    latest = (keys.join(values, ["_origin", "patient_id", "eye"])
              .where(F.to_date("observed_at") <= day)
              .groupBy(*EYE_KEY, "field")
              .agg(F.max_by(F.struct("value", "observed_at"), F.struct("observed_at", "_tie", "value")).alias("o"))
              .groupBy(*EYE_KEY)
              .agg(F.map_from_entries(F.collect_list(F.struct("field", "o.value"))).alias("eye_clinical"),
                   F.map_from_entries(F.collect_list(F.struct(
                       "field", F.datediff(day, F.to_date("o.observed_at")).cast("int")))).alias("eye_days_before")))
    in_force = (keys.join(_both_eyes(diagnoses), ["_origin", "patient_id", "eye"])
                .where((F.col("diagnosed_on") <= day) & (F.col("resolved_on").isNull() | (F.col("resolved_on") > day)))
                .groupBy(*EYE_KEY).agg(F.array_sort(F.collect_set("code")).alias("eye_diagnoses")))
    return keys.drop("_origin").join(latest, EYE_KEY, "left").join(in_force, EYE_KEY, "left")


def with_eyes(linked: DataFrame, observations: DataFrame, diagnoses: DataFrame, origin: Column,
              fields: Sequence[str] | None = None) -> DataFrame:
    """`linked` (the as-of join's rows) with the eye-level fields of the eye each image shows, and the reason an image
    has none: no laterality, both eyes, or no observation of that eye on or before its day. `origin` says which
    observations a row's site reads (its own extracts, or the clinical source); `fields` the eye fields followed."""
    images = image_eyes(linked).withColumn("_origin", origin)
    found = eye_as_of(images, observations, diagnoses, fields)
    return (images.join(found, EYE_KEY, "left").drop("_origin")
            .withColumn("eye_reason", F.coalesce(F.col("eye_reason"), F.when(
                F.col("eye_clinical").isNull(), F.lit(NO_EYE_OBSERVATION)))))
