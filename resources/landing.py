"""The landing zone: read-only input laid out by site and day (see README, data contract)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext

from imaging import fs as fsx
from resources.gcs import check_buckets


class LandingZone(ConfigurableResource):
    """`<root>/images/<site>/<date>/...` DICOM files and `<root>/clinical/<site>/<date>.csv` extracts."""

    root: str
    files_per_task: int
    # Sites whose images come from their PACS (assets/pacs_landing.py): their images are read below
    # `pacs_root`, in the same layout; their clinical extracts still below `root`.
    pacs_root: str | None = None
    pacs_sites: list[str] = []

    def images_root(self, site: str) -> str:
        """The root whose `images/<site>/<date>/` holds a site's images: the platform's PACS landing for a PACS
        site, else the landing zone."""
        return self.pacs_root if site in self.pacs_sites and self.pacs_root else self.root

    def setup_for_execution(self, context: InitResourceContext) -> None:
        check_buckets([self.root])

    def clinical_extracts(self, site: str) -> list[str]:
        """Every file in the site's clinical folder (dated or not: the caller checks names)."""
        return [url for url, _ in fsx.list_files(f"{self.root}/clinical/{site}")]
