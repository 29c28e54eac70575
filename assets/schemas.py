"""Spark schemas of the warehouse tables, in one place so readers and writers agree."""

from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, MapType, StringType,
                               StructField, StructType)

from imaging.index import INDEX_FIELDS

_INTS = {"rows", "columns", "number_of_frames"}


def _index_field(name: str) -> StructField:
    kind = LongType() if name == "size_bytes" else IntegerType() if name in _INTS else StringType()
    return StructField(name, kind, name not in ("source_path",))


PARTITION = [StructField("date", StringType(), False), StructField("site", StringType(), False)]

LISTING = StructType(PARTITION + [StructField("source_path", StringType(), False),
                                  StructField("size_bytes", LongType(), False)])

INDEX_RECORD = StructType(PARTITION + [StructField("status", StringType(), False),
                                       StructField("reason", StringType(), True)]
                          + [_index_field(f) for f in INDEX_FIELDS])

RAW_IMAGE_INDEX = StructType([_index_field(f) for f in INDEX_FIELDS] + PARTITION)

QUARANTINE = StructType([
    StructField("source_path", StringType(), False),
    StructField("size_bytes", LongType(), True),
    StructField("sha256", StringType(), True),
    StructField("reason", StringType(), False),
] + PARTITION)

CLINICAL_ROW = StructType([
    StructField("site", StringType(), False),
    StructField("extract_date", StringType(), False),
    StructField("row_number", IntegerType(), False),
    StructField("patient_id", StringType(), False),
    StructField("clinical", MapType(StringType(), StringType()), False),
])

LINKED = StructType(RAW_IMAGE_INDEX.fields[:-2] + [
    StructField("has_clinical_record", BooleanType(), False),
    StructField("clinical_extract_date", StringType(), True),
    StructField("clinical", MapType(StringType(), StringType()), True),
] + PARTITION)

SPARK_TYPES = {"int": IntegerType(), "double": DoubleType(), "string": StringType()}
