"""The platform's one Dagster code location: assets, resources and global policies.

Every setting comes from `imaging.driver.config.load_settings` (environment over `platform/`), so a
deployment is configured by environment variables alone.
"""

from __future__ import annotations

# Every file under platform/ is validated first: a mistake stops the code location at load, naming the
# file and the field, before anything else is imported and long before a Spark session could start.
from imaging.driver.platform_files import load_platform
from imaging.deid.quiet import silence_for_process

load_platform()
# The code server, the run workers and the daemon read headers (the PACS listing, the driver's checks): pydicom's
# and pynetdicom's warnings quote values, and never reach their logs.
silence_for_process()

import datetime as dt  # noqa: E402

from dagster import AssetSpec, Definitions, EnvVar, FreshnessPolicy, in_process_executor, map_asset_specs  # noqa: E402

from assets.anonymized_images import anonymized_images
from assets.clinical_source import clinical_source
from assets.checks import TABLE_CHECKS
from assets.governance import CODE_VERSIONS, OWNERS, code_references, tags
from imaging.catalogue import markdown_safe
from assets.landing_zone import landing_zone
from assets.linked_patient_metadata import linked_patient_metadata
from assets.optout_list import optout_list
from assets.pacs_landing import pacs_landing
from assets.partitions import SETTINGS
from imaging.driver.config import load_clinical_source
from assets.published_cohort import published_cohort
from assets.raw_image_index import raw_image_index
from automation.downstream import CATCH_UP, DOWNSTREAM, downstream_automation
from automation.jobs import JOBS

PACS_JOB = "pacs_site_day_pipeline"
from automation.landing_sensor import landing_sensor
from automation.notify import NOTIFY_SENSORS
from automation.pacs_sensor import pacs_sensor
from resources.clinical_source import ClinicalSourceResource
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.pacs import PacsServers
from resources.progress import SparkProgress
from resources.spark import SparkResource, spark_config
from resources.warehouse import Warehouse



# Site-days land daily and the landing sensor runs each within minutes: an image asset with no new
# materialization for a day is late (warn), for two days something is wrong (fail). published_cohort is
# deliberate, on no cadence: it has no freshness policy.
SITE_DAY_FRESHNESS = FreshnessPolicy.time_window(fail_window=dt.timedelta(hours=48), warn_window=dt.timedelta(hours=26))


def policies(spec: AssetSpec) -> AssetSpec:
    """The shared asset policies, applied here once rather than in each asset's module: owners, the zone and
    domain tags, the derived code version, the freshness policy, the group (`imaging` for the site-day pipeline, `release` for
    publishing), and automation. The downstream image assets catch up
    on updated site-days (`CATCH_UP`, evaluated by `downstream_automation`); raw_image_index runs from the
    landing sensor and published_cohort by hand. (The warehouse pool is the one policy Dagster cannot
    apply to a spec: `assets/runner.py` and `published_cohort` set it on their decorators.)"""
    name = spec.key.to_user_string()
    return spec.replace_attributes(
        owners=OWNERS, tags={**spec.tags, **tags(name)}, code_version=CODE_VERSIONS[name],
        description=markdown_safe(spec.description or ""),
        group_name="release" if name == "published_cohort" else "imaging",
        automation_condition=CATCH_UP if name in DOWNSTREAM else spec.automation_condition,
        # pacs_landing runs for PACS sites only (and from its sensor): no daily cadence to hold it to.
        freshness_policy=None if name in ("published_cohort", "pacs_landing") else SITE_DAY_FRESHNESS,
        # Each asset links to its module (and an image step to its declaration and runner) in the UI.
        metadata={**spec.metadata, "dagster/code_references": code_references(name)})


# The graph shows what this deployment has: the PACS retrieval, its job and its sensor only with PACS sites
# (platform/pacs.yaml or IMAGING_PACS_<SITE>_URL), so a deployment without any has no grey, unconnected asset.
PACS = bool(SETTINGS.pacs_sites)
# The clinical database likewise, only with a clinical source file (IMAGING_CLINICAL_SOURCE): observed, not
# materialized, by linked_patient_metadata. Its driver jars join the Spark session when it starts (spark.jars).
SOURCE = load_clinical_source(SETTINGS.clinical_source) if SETTINGS.clinical_source else None

defs = Definitions(
    # landing_zone and optout_list are observed, not materialized: they have no policy to apply.
    assets=[landing_zone, optout_list, *([clinical_source] if SOURCE else []), *map_asset_specs(policies, [*([pacs_landing] if PACS else []), raw_image_index,
                                                                   linked_patient_metadata, anonymized_images,
                                                                   published_cohort])],
    asset_checks=TABLE_CHECKS,
    # The named jobs an operator launches (docs/ui.md): the site-day pipeline, and publishing.
    jobs=[job for job in JOBS if PACS or job.name != PACS_JOB],
    # All off by default; docs/ui.md says what they do and how to turn them on.
    sensors=[landing_sensor, *([pacs_sensor] if PACS else []), downstream_automation, *NOTIFY_SENSORS],
    resources={
        "spark": SparkResource(spark_config=spark_config(SETTINGS.spark_master,
                                                         jars=SOURCE.driver_jars if SOURCE else ())),
        # PACS sites' images are read from the platform's own PACS landing (assets/pacs_landing.py).
        "landing": LandingZone(root=SETTINGS.landing, files_per_task=SETTINGS.files_per_task,
                               pacs_root=SETTINGS.pacs_landing, pacs_sites=list(SETTINGS.pacs_sites)),
        "pacs": PacsServers.from_settings(SETTINGS.pacs, SETTINGS.pacs_landing),
        "warehouse": Warehouse(root=SETTINGS.warehouse, tables=SETTINGS.tables),
        "deid": Deidentifier(pseudonym_key=EnvVar("IMAGING_PSEUDONYM_KEY"), options=list(SETTINGS.deid_options),
                             issuers=SETTINGS.issuers, pixel_text=SETTINGS.pixel_text),
        "progress": SparkProgress(),
        "clinical_source": ClinicalSourceResource(file=SETTINGS.clinical_source,
                                                  partitions=SETTINGS.clinical_read_partitions,
                                                  fetch_size=SETTINGS.clinical_fetch_size),
    },
    # One process per run, so every asset in it shares one Spark session (see ARCHITECTURE.md).
    executor=in_process_executor,
)
