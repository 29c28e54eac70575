"""The named jobs an operator launches: the site-day pipeline and publishing.

Selecting the pipeline by asset is awkward in the UI (`raw_image_index+` is not a valid selection, and
`key:raw_image_index+` pulls in published_cohort and makes a multi-run backfill), and ad-hoc runs are all
named `__ASSET_JOB`. These two jobs name what an operator means:

* `site_day_pipeline`: the three partitioned image assets, landing to de-identified images, for one or many
  site-days. Each asset has a single-run backfill policy, so any selection of site-days is one run (one
  Spark session) whenever Dagster can plan it as one (STACK-NOTES: a selection that is not a rectangle of
  dates x sites may be split).
* `publish`: `published_cohort`, the release step: builds and holds each cohort's release, publishes what an
  approver approved. Never automated.

Every run of them says who launched it and why (`LAUNCHED_BY`, `REASON`): the defaults name the UI or CLI
operator and the job's purpose; the landing sensor and the demo set their own, and an operator may edit
them in the launchpad (assets/run_tags.py).
"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.partitions import PARTITIONS
from assets.run_tags import JOB_REASONS, REASON

PIPELINE = ("raw_image_index", "linked_patient_metadata", "anonymized_images")

site_day_pipeline = define_asset_job(
    "site_day_pipeline",
    selection=AssetSelection.assets(*PIPELINE),
    partitions_def=PARTITIONS,
    description="Landing to de-identified images for the selected site-days: `raw_image_index`, "
                "`linked_patient_metadata`, `anonymized_images`, in one run (one Spark session) per selection.",
    run_tags={REASON: JOB_REASONS["site_day_pipeline"]},
)

publish = define_asset_job(
    "publish",
    selection=AssetSelection.assets("published_cohort"),
    description="Builds each cohort's release from the de-identified images and holds it for approval; "
                "publishes exactly what an approver approved (`imaging-review approve`).",
    run_tags={REASON: JOB_REASONS["publish"]},
)

# A PACS site's site-days: the retrieval first, then the same three assets, in one run (pacs_sensor's job).
PACS_PIPELINE = ("pacs_landing", *PIPELINE)

pacs_site_day_pipeline = define_asset_job(
    "pacs_site_day_pipeline",
    selection=AssetSelection.assets(*PACS_PIPELINE),
    partitions_def=PARTITIONS,
    description="A PACS site's site-days, PACS to de-identified images: `pacs_landing` (DICOMweb retrieval), then "
                "`raw_image_index`, `linked_patient_metadata`, `anonymized_images`, in one run per selection.",
    run_tags={REASON: JOB_REASONS["pacs_site_day_pipeline"]},
)

JOBS = [site_day_pipeline, pacs_site_day_pipeline, publish]
