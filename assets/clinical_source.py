"""clinical_source: the hospital's clinical database as an observed asset (only with IMAGING_CLINICAL_SOURCE).

It is never materialized: `linked_patient_metadata` records each read of it as an observation whose data version is
a digest of the rows read (counts and a sum of row hashes per query, with each query's own digest: never a value),
so the UI shows which source and which queries each site-day was linked from, and a changed database makes the
linked site-days unsynced. The read itself: assets/clinical_read.py.
"""

from dagster import AssetSpec

from assets.versions import CLINICAL_SOURCE

clinical_source = AssetSpec(
    CLINICAL_SOURCE, kinds={"jdbc"},
    description="Identifiable zone (read-only). The hospital's clinical database (IMAGING_CLINICAL_SOURCE): "
                "patients, eye observations and diagnoses read through JDBC by linked_patient_metadata, which records "
                "each read as an observation (a digest of the rows read and of each query; never a value).")
