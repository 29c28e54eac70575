"""The landing zone: read-only input laid out by site and day (see README, data contract)."""

from __future__ import annotations

from dagster import ConfigurableResource

from imaging import fs as fsx


class LandingZone(ConfigurableResource):
    """`<root>/images/<site>/<date>/...` DICOM files and `<root>/clinical/<site>/<date>.csv` extracts."""

    root: str
    files_per_task: int

    def clinical_extracts(self, site: str) -> list[str]:
        """Every file in the site's clinical folder (dated or not: the caller checks names)."""
        return [url for url, _ in fsx.list_files(f"{self.root}/clinical/{site}")]
