"""The sites' PACS servers (DICOMweb), as the runs and the sensor reach them.

Configuration is what Dagster's UI shows: URLs, auth kinds, retrievals at once, the retry policy. The
credentials are not in it: `server(site)` reads them from the site's environment variables
(`IMAGING_PACS_<SITE>_TOKEN`, or `_USER` and `_PASSWORD`) when a run or the sensor contacts the server.
"""

from __future__ import annotations

from dagster import ConfigurableResource

from imaging.driver.pacs import PacsEndpoint, PacsSettings
from imaging.pacs import PacsServer, RetryPolicy


class PacsServers(ConfigurableResource):
    """Per PACS site: its DICOMweb root, auth kind (`basic`, `token`, `none`, or empty: whichever credentials
    the environment holds) and retrievals at once; where retrievals land (`landing`, the landing layout)."""

    urls: dict[str, str] = {}
    auth: dict[str, str] = {}
    max_connections: dict[str, int] = {}
    retries: int
    backoff_seconds: float
    timeout_seconds: float
    sensor_days: int
    landing: str

    @classmethod
    def from_settings(cls, pacs: PacsSettings, landing: str) -> "PacsServers":
        ends = pacs.endpoints.values()
        return cls(urls={e.site: e.url for e in ends}, auth={e.site: e.auth or "" for e in ends},
                   max_connections={e.site: e.max_connections for e in ends}, retries=pacs.policy.retries,
                   backoff_seconds=pacs.policy.backoff_seconds, timeout_seconds=pacs.policy.timeout_seconds,
                   sensor_days=pacs.sensor_days, landing=landing)

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(sorted(self.urls))

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.retries, self.backoff_seconds, self.timeout_seconds)

    def settings(self) -> PacsSettings:
        return PacsSettings({s: PacsEndpoint(s, u, self.auth.get(s) or None, self.max_connections.get(s, 1))
                             for s, u in self.urls.items()}, self.policy, self.sensor_days, 0)

    def server(self, site: str) -> PacsServer:
        """The site's server, with its credentials from the environment (read now)."""
        return self.settings().server(site)
