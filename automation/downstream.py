"""Declarative automation downstream of the landing sensor.

`landing_sensor` runs a landed site-day through raw_image_index, linked_patient_metadata and
anonymized_images in one run. When an operator re-runs only an upstream asset for some site-days
(from the UI, say, after a fix), `CATCH_UP` brings the downstream partitioned assets of exactly
those site-days up to date: requested when a dependency was updated since the asset was last
handled, and only when no dependency is missing or running. Unlike `AutomationCondition.eager()`
it is not limited to the latest date (site-days land late, and backfills are historical) and it
never fills partitions that were simply never run.

published_cohort is not automated: a release is a deliberate, versioned act (its definition file
names the version), so it stays a manual materialization.

The conditions are evaluated by `downstream_automation`, off by default like the landing sensor.
"""

from __future__ import annotations

from dagster import AssetKey, AssetSelection, AutomationCondition, AutomationConditionSensorDefinition, DefaultSensorStatus

# The downstream steps also read the landing zone directly (its extracts and files), but a new landing is
# the landing sensor's to run, through the whole chain: an observation alone must not start them. Nor must a
# changed opt-out list: it applies to every site-day, and re-de-identifying all of them for one patient would
# cost the whole archive; published_cohort refuses listed patients at build time whatever the zone holds, and
# a site-day withdraws them at its next materialization (docs/governance.md, "Opt-outs").
LANDING = AssetSelection.assets("landing_zone", "optout_list")
CATCH_UP = (
    AutomationCondition.any_deps_updated().ignore(LANDING).since_last_handled()
    & ~AutomationCondition.any_deps_missing().ignore(LANDING)
    & ~AutomationCondition.any_deps_in_progress().ignore(LANDING)
    & ~AutomationCondition.in_progress()
).with_label("catch up on updated site-days")

DOWNSTREAM = ("linked_patient_metadata", "anonymized_images")

downstream_automation = AutomationConditionSensorDefinition(
    "downstream_automation",
    target=[AssetKey(a) for a in DOWNSTREAM],
    default_status=DefaultSensorStatus.STOPPED,
    minimum_interval_seconds=30,
    description="Keeps linked_patient_metadata and anonymized_images in step with re-materialized upstream "
                "site-days (condition: catch up on updated site-days). Off by default.",
)

