"""landing_sensor: runs exactly the site-days that are new or changed in the landing zone.

Each tick lists the landing zone once (`imaging.driver.landing.scan_landing`), records the version of every
new or changed site-day as an observation of `landing_zone`, and requests one run per such
site-day over the partitioned image assets, with run key `<date>|<site>@<version>` so the same
landing is never run twice. The cursor keeps the version last requested per site-day. On its first
tick (or after a cursor reset) a site-day whose assets were all materialized after its newest file
counts as done, so turning the sensor on over an existing warehouse does not re-run it.

Off by default (`dagster dev` starts it stopped): turn it on in the UI (Automation) or with
`dagster sensor start landing_sensor`. Site-days with no landed files are never requested; a run
that fails is not retried by the sensor (its run key is spent): re-run it from the UI.
"""

from __future__ import annotations

import json

from dagster import (AssetKey, AssetObservation, AssetRecordsFilter, DefaultSensorStatus, MultiPartitionKey,
                     RunRequest, SensorEvaluationContext, SensorResult, sensor)
# The tag an observation's data version travels in; Dagster 1.13 has no public name for it.
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from assets.landing_zone import KEY as LANDING_KEY, scan
from assets.partitions import SETTINGS
from automation.jobs import LAUNCHED_BY, PIPELINE, REASON, site_day_pipeline
from imaging.driver.landing import plan_requests
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
    cursor = json.loads(context.cursor) if context.cursor else {}
    unseen = [key for key in current.site_days if key not in cursor]
    plan = plan_requests(current.site_days, cursor, materialized_at(context.instance, unseen))
    observations = [
        AssetObservation(asset_key=AssetKey(LANDING_KEY), partition=day.key, tags={DATA_VERSION_TAG: day.version},
                         metadata={"files": day.files, "bytes": day.bytes})
        for day in plan.requests
    ]
    requests = [
        RunRequest(run_key=f"{day.key}@{day.version}",
                   partition_key=MultiPartitionKey({"date": day.date, "site": day.site}),
                   job=site_day_pipeline,
                   tags={"imaging/trigger": "landing_sensor", "imaging/landing_version": day.version})
        for day in plan.requests
    ]
    summary = (f"{len(current.site_days)} landed site-days, {len(requests)} new or changed, "
               f"{len(plan.adopted)} already materialized, {current.ignored} files outside any partition")
    context.log.info(summary)
    return SensorResult(run_requests=requests, asset_events=observations,
                        cursor=json.dumps(plan.cursor, sort_keys=True),
                        skip_reason=None if requests else f"nothing new or changed ({summary})")
