"""pacs_sensor: runs exactly the PACS site-days that are new or changed in their PACS.

The landing sensor's contract (automation/landing_sensor.py), with the PACS's own listing for a landing: each
tick asks every PACS site's server once for the studies of the last `sensor_days` days (QIDO-RS or C-FIND, study level:
study UIDs and their series and instance counts, never the instance fan-out), makes a version per site-day
(imaging/pacs/listing.py `list_recent`) and requests one run of `pacs_site_day_pipeline` per new or changed
site-day, run key `<date>|<site>@pacs-<version>`. The cursor is the landing sensor's, bounded the same way. On
its first tick a site-day whose whole chain was already materialized counts as done.

Off by default. A server that cannot be reached skips the tick with the reason (site key and status only).
"""

from __future__ import annotations

import datetime as dt

from dagster import DefaultSensorStatus, MultiPartitionKey, RunRequest, SensorEvaluationContext, SensorResult, sensor

from assets.landing_zone import partition_dates
from assets.partitions import PARTITIONS, SETTINGS
from assets.run_tags import LAUNCHED_BY, REASON
from automation.jobs import PACS_PIPELINE, pacs_site_day_pipeline
from automation.landing_sensor import materialized_at
from imaging.driver.landing import SensorCursor, SiteDayLanding, bounded_cursor, plan_requests
from imaging.pacs.connection import PacsError
from imaging.pacs.listing import list_recent
from resources.pacs import PacsServers


def recent_window(last: str, days: int, first: str) -> tuple[str, str]:
    """The dates a tick lists: `days` back from the last date partition, not before the first."""
    start = max(dt.date.fromisoformat(first), dt.date.fromisoformat(last) - dt.timedelta(days=days - 1))
    return start.isoformat(), last


def scan_pacs(pacs: PacsServers) -> dict[str, SiteDayLanding]:
    """Each PACS site-day of the window as the landing sensor sees a landed one (its instances, its version)."""
    dates = partition_dates(PARTITIONS)
    first, last = recent_window(dates.last, pacs.sensor_days, dates.first)
    found = {}
    for site in pacs.sites:
        for key, day in list_recent(pacs.server(site), pacs.policy, first, last).items():
            found[key] = SiteDayLanding(day.date, day.site, day.instances, 0, 0.0, day.version)
    return dict(sorted(found.items()))


@sensor(
    name="pacs_sensor",
    minimum_interval_seconds=SETTINGS.pacs.sensor_seconds if SETTINGS.pacs else 300,
    default_status=DefaultSensorStatus.STOPPED,
    job=pacs_site_day_pipeline,
    description="Fetches from the PACS and runs the image assets for exactly the PACS site-days that are new or "
                "changed in the PACS's listing (one run per site-day). Off by default.",
)
def pacs_sensor(context: SensorEvaluationContext, pacs: PacsServers) -> SensorResult:
    if not pacs.sites:
        return SensorResult(skip_reason="no PACS site configured (platform/pacs.yaml, IMAGING_PACS_<SITE>_URL)")
    try:
        current = scan_pacs(pacs)
    except PacsError as error:  # site key and status only, never a URL
        return SensorResult(skip_reason=str(error))
    handled = SensorCursor.from_json(context.cursor).known(current)
    unseen = [key for key in current if key not in handled]
    plan = plan_requests(current, handled, materialized_at(context.instance, unseen, targets=PACS_PIPELINE))
    requests = [
        RunRequest(run_key=f"{day.key}@pacs-{day.version}",
                   partition_key=MultiPartitionKey({"date": day.date, "site": day.site}),
                   tags={"imaging/trigger": "pacs_sensor", "imaging/pacs_version": day.version,
                         LAUNCHED_BY: "pacs_sensor", REASON: "new or changed in the PACS"})
        for day in plan.requests
    ]
    summary = f"{len(current)} PACS site-days listed, {len(requests)} new or changed, {len(plan.adopted)} already materialized"
    context.log.info(summary)
    return SensorResult(run_requests=requests, cursor=bounded_cursor(plan.cursor, current).to_json(),
                        skip_reason=None if requests else f"nothing new or changed ({summary})")
