"""The platform's one Dagster code location: assets, resources and global policies.

Every setting comes from `imaging.driver.config.load_settings` (environment over `platform/`), so a
deployment is configured by environment variables alone.
"""

from __future__ import annotations

# Every file under platform/ is validated first: a mistake stops the code location at load, naming the
# file and the field, before anything else is imported and long before a Spark session could start.
from imaging.config_files import load_platform

load_platform()

from dagster import AssetSpec, Definitions, EnvVar, in_process_executor, map_asset_specs  # noqa: E402

from assets.anonymized_images import anonymized_images
from assets.checks import TABLE_CHECKS
from assets.governance import CODE_VERSIONS, OWNERS, tags
from assets.landing_zone import landing_zone
from assets.linked_patient_metadata import linked_patient_metadata
from assets.partitions import SETTINGS
from assets.published_cohort import published_cohort
from assets.raw_image_index import raw_image_index
from automation.downstream import CATCH_UP, DOWNSTREAM, downstream_automation
from automation.landing_sensor import landing_sensor
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.progress import SparkProgress
from resources.spark import SparkResource, spark_config
from resources.warehouse import Warehouse



def policies(spec: AssetSpec) -> AssetSpec:
    """The shared asset policies, applied here once rather than in each asset's module: owners, the zone and
    domain tags, the derived code version, the group, and automation. The downstream image assets catch up
    on updated site-days (`CATCH_UP`, evaluated by `downstream_automation`); raw_image_index runs from the
    landing sensor and published_cohort by hand. (The warehouse pool is the one policy Dagster cannot
    apply to a spec: `assets/runner.py` and `published_cohort` set it on their decorators.)"""
    name = spec.key.to_user_string()
    return spec.replace_attributes(
        owners=OWNERS, tags={**spec.tags, **tags(name)}, code_version=CODE_VERSIONS[name], group_name="imaging",
        automation_condition=CATCH_UP if name in DOWNSTREAM else spec.automation_condition)


defs = Definitions(
    # landing_zone is observed, not materialized: it has no policy to apply.
    assets=[landing_zone, *map_asset_specs(policies, [raw_image_index, linked_patient_metadata,
                                                               anonymized_images, published_cohort])],
    asset_checks=TABLE_CHECKS,
    # Both off by default; docs/ui.md says what they do and how to turn them on.
    sensors=[landing_sensor, downstream_automation],
    resources={
        "spark": SparkResource(spark_config=spark_config(SETTINGS.spark_master)),
        "landing": LandingZone(root=SETTINGS.landing, files_per_task=SETTINGS.files_per_task),
        "warehouse": Warehouse(root=SETTINGS.warehouse, tables=SETTINGS.tables),
        "deid": Deidentifier(pseudonym_key=EnvVar("IMAGING_PSEUDONYM_KEY"), options=list(SETTINGS.deid_options),
                             issuers=SETTINGS.issuers, pixel_text=SETTINGS.pixel_text),
        "progress": SparkProgress(),
    },
    # One process per run, so every asset in it shares one Spark session (see ARCHITECTURE.md).
    executor=in_process_executor,
)
