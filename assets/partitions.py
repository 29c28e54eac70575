"""Partitions shared by the image assets: daily `date` x static `site`, from the settings."""

from __future__ import annotations

import datetime as dt
import warnings

from dagster import (AssetExecutionContext, BackfillPolicy, BetaWarning, PreviewWarning, DailyPartitionsDefinition,
                     MultiPartitionKey, MultiPartitionsDefinition, PartitionKeyRange, StaticPartitionsDefinition)

from imaging.driver.platform_files import load_cohort_files, load_file
from imaging.driver.config import Settings, load_settings
from imaging.ui import FILE as UI_FILE, UiFile
from imaging.records import SiteDay


def build_partitions(settings: Settings) -> MultiPartitionsDefinition:
    # A data set that ends (the demo's) ends its partitions too: the UI then shows what exists, not years of
    # empty days. Dagster's end date is exclusive.
    end = (dt.date.fromisoformat(settings.end_date) + dt.timedelta(days=1)).isoformat() if settings.end_date else None
    return MultiPartitionsDefinition({
        "date": DailyPartitionsDefinition(start_date=settings.start_date, end_date=end),
        "site": StaticPartitionsDefinition(list(settings.sites)),
    })


SETTINGS = load_settings()
PARTITIONS = build_partitions(SETTINGS)
UI: UiFile = load_file(UI_FILE)  # platform/ui.yaml: the UI's address, how often a run commits, notifications
# published_cohort: one partition per cohort definition (platform/cohorts/*.yaml, by its `name`): a new file is
# a new partition when the code location loads (the UI's "Reload"), with no code change.
COHORTS = StaticPartitionsDefinition(sorted(c.name for c in load_cohort_files()))
# A backfill over many site-days is one run: each asset reads them all from context.partition_keys.
# (Dagster marks the parameter beta; we depend on it deliberately, so its warning is noise here.)
SINGLE_RUN = BackfillPolicy.single_run()
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=BetaWarning)
# Checks recorded per partition (a site-day's page shows its own): a preview in Dagster 1.13, used deliberately.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=PreviewWarning)


RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def run_partition_keys(context: AssetExecutionContext, partitions_def=None) -> list:
    """The run's partition keys. A run over a range (a single-run backfill) is read from its range: Dagster 1.13's
    job backfills (launched from a job's page) also stamp the range's first partition on the run as
    `dagster/partition/<dimension>` tags, and Dagster then resolves `context.partition_keys` to that one
    partition alone (dagster/_core/execution/job_backfill.py copies the first partition's tags)."""
    tags = context.run.tags
    if RANGE_START in tags and RANGE_END in tags:
        return (partitions_def or PARTITIONS).get_partition_keys_in_range(PartitionKeyRange(tags[RANGE_START],
                                                                                            tags[RANGE_END]))
    return list(context.partition_keys)


def site_days(context: AssetExecutionContext) -> list[SiteDay]:
    """The site-days this run covers: one for a single partition, many for a backfill."""
    keys = set()
    for key in run_partition_keys(context):
        dims = key.keys_by_dimension if isinstance(key, MultiPartitionKey) else dict(
            zip(("date", "site"), key.split("|")))
        keys.add(SiteDay(dims["date"], dims["site"]))
    return sorted(keys, key=lambda k: (k.date, k.site))
