"""The sites' PACS servers (DICOMweb or DIMSE), as the runs and the sensor reach them.

Configuration is what Dagster's UI shows: URLs, auth kinds, DICOM addresses and AE titles, retrievals at once,
the retry policy. The credentials are not in it: `server(site)` reads them from the site's environment
variables (`IMAGING_PACS_<SITE>_TOKEN`, or `_USER` and `_PASSWORD`) when a run or the sensor contacts the
server. TLS keys stay in their files; only the paths are configuration.
"""

from __future__ import annotations

from dagster import Config, ConfigurableResource

from imaging.pacs.connection import C_GET, DIMSE, DimseAddress, RetryPolicy, PacsServer, Tls
from imaging.pacs.settings import PacsEndpoint, PacsSettings


class DimseSite(Config):
    """A DIMSE site's address (platform/pacs.yaml's keys): the PACS's host, port and AE title (`called_ae`),
    ours (`calling_ae`), `retrieve` (c-get or c-move), the AE title of imaging-receive for C-MOVE
    (`move_destination`), where imaging-receive spools C-MOVE answers, and TLS file paths (empty: none)."""

    host: str
    port: int
    called_ae: str
    calling_ae: str
    retrieve: str = C_GET
    move_destination: str = ""
    spool: str = ""
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    @classmethod
    def of(cls, address: DimseAddress) -> "DimseSite":
        tls = address.tls
        return cls(host=address.host, port=address.port, called_ae=address.called_ae, calling_ae=address.calling_ae,
                   retrieve=address.retrieve, move_destination=address.move_destination or "",
                   spool=address.spool or "", tls_ca_file=tls.ca_file if tls else "",
                   tls_cert_file=(tls.cert_file or "") if tls else "", tls_key_file=(tls.key_file or "") if tls else "")

    def address(self) -> DimseAddress:
        tls = Tls(self.tls_ca_file, self.tls_cert_file or None, self.tls_key_file or None) if self.tls_ca_file else None
        return DimseAddress(self.host, self.port, self.called_ae, self.calling_ae, self.retrieve,
                            self.move_destination or None, tls, self.spool or None)


class PacsServers(ConfigurableResource):
    """Per PACS site: its DICOMweb root and auth kind (`basic`, `token`, `none`, or empty: whichever credentials
    the environment holds), or its DICOM network address (`dimse`); retrievals at once; where retrievals land
    (`landing`, the landing layout)."""

    urls: dict[str, str] = {}
    auth: dict[str, str] = {}
    dimse: dict[str, DimseSite] = {}
    max_connections: dict[str, int] = {}
    retries: int
    backoff_seconds: float
    timeout_seconds: float
    sensor_days: int
    landing: str

    @classmethod
    def from_settings(cls, pacs: PacsSettings, landing: str) -> "PacsServers":
        ends = pacs.endpoints.values()
        web = [e for e in ends if e.protocol != DIMSE]
        return cls(urls={e.site: e.url for e in web}, auth={e.site: e.auth or "" for e in web},
                   dimse={e.site: DimseSite.of(e.dimse) for e in ends if e.protocol == DIMSE},
                   max_connections={e.site: e.max_connections for e in ends}, retries=pacs.policy.retries,
                   backoff_seconds=pacs.policy.backoff_seconds, timeout_seconds=pacs.policy.timeout_seconds,
                   sensor_days=pacs.sensor_days, landing=landing)

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(sorted({*self.urls, *self.dimse}))

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.retries, self.backoff_seconds, self.timeout_seconds)

    def settings(self) -> PacsSettings:
        endpoints = {s: PacsEndpoint(s, u, self.auth.get(s) or None, self.max_connections.get(s, 1))
                     for s, u in self.urls.items()}
        endpoints.update({s: PacsEndpoint(s, "", None, self.max_connections.get(s, 1), DIMSE, d.address())
                          for s, d in self.dimse.items()})
        return PacsSettings(endpoints, self.policy, self.sensor_days, 0)

    def server(self, site: str) -> PacsServer:
        """The site's server, with its credentials from the environment (read now)."""
        return self.settings().server(site)
