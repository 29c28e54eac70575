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
them in the launchpad.
"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.partitions import PARTITIONS

PIPELINE = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
LAUNCHED_BY = "imaging/launched_by"  # who (or what) launched the run
REASON = "imaging/reason"            # why

site_day_pipeline = define_asset_job(
    "site_day_pipeline",
    selection=AssetSelection.assets(*PIPELINE),
    partitions_def=PARTITIONS,
    description="Landing to de-identified images for the selected site-days: `raw_image_index`, "
                "`linked_patient_metadata`, `anonymized_images`, in one run (one Spark session) per selection.",
    run_tags={REASON: "run the site-day pipeline"},
)

publish = define_asset_job(
    "publish",
    selection=AssetSelection.assets("published_cohort"),
    description="Builds each cohort's release from the de-identified images and holds it for approval; "
                "publishes exactly what an approver approved (`imaging-review approve`).",
    run_tags={REASON: "build or publish the cohort releases"},
)

JOBS = [site_day_pipeline, publish]


def launcher(tags: dict[str, str]) -> str:
    """Who launched a run, from the tags Dagster gives it (open-source Dagster records no user: the means)."""
    if tags.get("dagster/sensor_name"):
        return f"sensor {tags['dagster/sensor_name']}"
    if tags.get("dagster/from_automation_condition") or tags.get("dagster/auto_materialize"):
        return "declarative automation"
    if tags.get("dagster/from_ui") == "true":
        return "operator (UI backfill)" if tags.get("dagster/backfill") else "operator (UI)"
    if tags.get("dagster/backfill"):
        return "backfill"
    return "operator (CLI or API)"


def label_run(context) -> None:
    """Tag the run with who launched it and why when its launcher did not say (a UI backfill's runs carry no
    job tags). A launcher's own tags (the sensor's, the demo's, an operator's typed in the launch dialog) stay."""
    tags = dict(context.run.tags)
    missing = {}
    if LAUNCHED_BY not in tags:
        missing[LAUNCHED_BY] = launcher(tags)
    if REASON not in tags:
        job = context.run.job_name
        missing[REASON] = _DEFAULT_REASONS.get(job, "materialize assets from the asset catalog")
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)


_DEFAULT_REASONS = {job.name: job.run_tags[REASON] for job in JOBS}
