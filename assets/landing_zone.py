"""landing_zone: the landing zone as an observable source asset, one data version per site-day.

Not materialized by the platform (the hospital's systems write it); observed. Each landed
site-day's version is the content hash of its listing (`imaging.driver.landing`), so the UI shows which
site-days have landed and when one changed, and `raw_image_index` (which depends on it, partition
for partition) shows as stale when its site-day's files changed after it ran. Site-days with no
files get no version. Observed by `landing_sensor` on each tick, or from the UI ("Observe").
"""

from __future__ import annotations

import warnings

from dagster import BetaWarning
from dagster import DataVersionsByPartition, MultiPartitionsDefinition, TimeWindowPartitionsDefinition, observable_source_asset

from assets.partitions import PARTITIONS, SETTINGS
from imaging.catalogue import markdown_safe
from assets.versions import observation
from imaging.driver.landing import DateRange, LandingScan, scan_landing
from resources.landing import LandingZone

KEY = "landing_zone"
# Observable source assets are beta in Dagster 1.13; we depend on them deliberately.
warnings.filterwarnings("ignore", message="Function `observable_source_asset`", category=BetaWarning)


def partition_dates(partitions_def: MultiPartitionsDefinition) -> DateRange:
    """First and last date partitions (the last is yesterday: today is not complete yet)."""
    daily = next(d.partitions_def for d in partitions_def.partitions_defs
                 if isinstance(d.partitions_def, TimeWindowPartitionsDefinition))
    fmt = daily.fmt
    return DateRange(first=daily.start.strftime(fmt), last=daily.get_last_partition_key() or daily.start.strftime(fmt))


def scan(root: str) -> LandingScan:
    """The landing zone's site-days that are partitions of the image assets."""
    dates = partition_dates(PARTITIONS)
    return scan_landing(root, SETTINGS.sites, dates.first, dates.last)


@observable_source_asset(
    name=KEY,
    partitions_def=PARTITIONS,
    group_name="imaging",
    description=markdown_safe("Identifiable zone, read-only: what the hospital has landed, per site-day (DICOM files under "
                "images/<site>/<date>/ and the clinical extract clinical/<site>/<date>.csv). Observed, never "
                "materialized: the platform does not write it. So its partition bar, which counts materializations, "
                "reads 0% however much has landed; what has landed is each site-day's latest observation (Events, or "
                "a partition's page): its data version, the hash of its listing (paths, sizes, times), with its "
                "files, bytes and newest file. Site-days with no files have no observation. Observed by the landing "
                "sensor, by every run that reads a site-day, or by 'Observe' here."),
)
def landing_zone(context, landing: LandingZone) -> DataVersionsByPartition:
    # Each site-day's observation is logged here, with its version and what it holds (Dagster's own would carry
    # the version alone); nothing is left for Dagster to log.
    for day in scan(landing.root).site_days.values():
        context.log_event(observation(day))
    return DataVersionsByPartition({})
