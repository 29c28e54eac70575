"""The landing zone: read-only input laid out by site and day (see README, data contract)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext

from imaging import fs as fsx
from resources.gcs import check_buckets


class LandingZone(ConfigurableResource):
    """`<root>/images/<site>/<date>/...` DICOM files and `<root>/clinical/<site>/<date>.csv` extracts."""

    root: str
    files_per_task: int

    def setup_for_execution(self, context: InitResourceContext) -> None:
        check_buckets([self.root])

    def clinical_extracts(self, site: str) -> list[str]:
        """Every file in the site's clinical folder (dated or not: the caller checks names)."""
        return [url for url, _ in fsx.list_files(f"{self.root}/clinical/{site}")]
