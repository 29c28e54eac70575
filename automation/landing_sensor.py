"""landing_sensor: runs exactly the site-days that are new or changed in the landing zone.

Each tick lists the landing zone once (`imaging.driver.landing.scan_landing`), records the version of every
new or changed site-day as an observation of `landing_zone`, and requests one run per such
site-day over the partitioned image assets, with run key `<date>|<site>@<version>` so the same
landing is never run twice. The cursor keeps the version last requested per recent site-day and one digest of
the older ones, so it does not grow with history (imaging/driver/landing.py, `SensorCursor`). On its first
tick (or after a cursor reset) a site-day whose assets were all materialized after its newest file
counts as done, so turning the sensor on over an existing warehouse does not re-run it.

Off by default (`dagster dev` starts it stopped): turn it on in the UI (Automation) or with
`dagster sensor start landing_sensor`. Site-days with no landed files are never requested; a run
that fails is not retried by the sensor (its run key is spent): re-run it from the UI.
"""

from __future__ import annotations

from dagster import (AssetKey, AssetRecordsFilter, DefaultSensorStatus, MultiPartitionKey,
                     RunRequest, SensorEvaluationContext, SensorResult, sensor)

from assets.landing_zone import scan
from assets.versions import observation
from assets.partitions import SETTINGS
from assets.run_tags import LAUNCHED_BY, REASON
from automation.jobs import PIPELINE, site_day_pipeline
from imaging.driver.landing import SensorCursor, bounded_cursor, plan_requests
from resources.landing import LandingZone

# The partitioned chain a landed site-day feeds, run together in one run (one Spark session): the
# site_day_pipeline job, so the sensor's runs carry the job's name.
TARGETS = PIPELINE


def materialized_at(instance, keys: list[str], targets=TARGETS) -> dict[str, float]:
    """Per site-day, when its whole chain was last materialized: the oldest of its assets' latest."""
    if not keys:
        return {}
    latest: dict[str, float] = {}
    for asset in targets:
        seen: dict[str, float] = {}
        for chunk in range(0, len(keys), 100):
            part = keys[chunk:chunk + 100]
            records = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=part), limit=10 * len(part)).records
            for record in records:  # newest first
                partition = record.event_log_entry.dagster_event.partition
                seen.setdefault(partition, record.timestamp)
        latest = seen if asset == targets[0] else {k: min(v, seen[k]) for k, v in latest.items() if k in seen}
    return latest


@sensor(
    name="landing_sensor",
    minimum_interval_seconds=SETTINGS.landing_sensor_seconds,
    default_status=DefaultSensorStatus.STOPPED,
    job=site_day_pipeline,
    description="Runs the image assets for exactly the site-days that are new or changed in the landing zone "
                "(one run per site-day, run key = site-day + listing version). Off by default.",
)
def landing_sensor(context: SensorEvaluationContext, landing: LandingZone) -> SensorResult:
    current = scan(landing.root)
    # Bounded: recent site-days one by one, older ones as one digest (imaging/driver/landing.py SensorCursor).
    handled = SensorCursor.from_json(context.cursor).known(current.site_days)
    unseen = [key for key in current.site_days if key not in handled]
    plan = plan_requests(current.site_days, handled, materialized_at(context.instance, unseen))
    observations = [observation(day) for day in plan.requests]
    requests = [
        RunRequest(run_key=f"{day.key}@{day.version}",
                   partition_key=MultiPartitionKey({"date": day.date, "site": day.site}),
                   tags={"imaging/trigger": "landing_sensor", "imaging/landing_version": day.version,
                         LAUNCHED_BY: "landing_sensor", REASON: "new or changed landing"})
        for day in plan.requests
    ]
    summary = (f"{len(current.site_days)} landed site-days, {len(requests)} new or changed, "
               f"{len(plan.adopted)} already materialized, {current.ignored} files outside any partition")
    context.log.info(summary)
    if requests:  # which site-days, by partition key (a date and a site key: no one's identity)
        shown = [day.key for day in plan.requests[:20]]
        context.log.info(f"new or changed: {', '.join(shown)}{' ...' if len(requests) > len(shown) else ''}")
    return SensorResult(run_requests=requests, asset_events=observations,
                        cursor=bounded_cursor(plan.cursor, current.site_days).to_json(),
                        skip_reason=None if requests else f"nothing new or changed ({summary})")
