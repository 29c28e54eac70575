"""Who launched a run and why: the two run tags every run carries (`LAUNCHED_BY`, `REASON`).

The named jobs (automation/jobs.py) set their reason as a run tag, the landing sensor and the demo set both;
runs a UI backfill launches carry no job tags, so the steps fill in what their launcher did not say
(`label_run`). Here, not in automation/, because the assets call it and assets/ imports nothing from there.
"""

from __future__ import annotations

LAUNCHED_BY = "imaging/launched_by"  # who (or what) launched the run
REASON = "imaging/reason"            # why

# The default reason of each named job (automation/jobs.py tags its runs with it).
JOB_REASONS = {"site_day_pipeline": "run the site-day pipeline", "publish": "build or publish the cohort releases",
               "pacs_site_day_pipeline": "fetch from the PACS and run the site-day pipeline"}


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
        missing[REASON] = JOB_REASONS.get(context.run.job_name, "materialize assets from the asset catalog")
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)
