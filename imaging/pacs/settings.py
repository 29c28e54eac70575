"""`platform/pacs.yaml`: its model, and the PACS sites of a deployment (`load_pacs`).

The model lives here, beside the code that uses it; imaging/config_files.py only maps the file to it (this
module never imports config_files back). Unknown keys are errors, values are not coerced, and every problem
names the file and the field.

A site is `protocol: dicomweb` (the default: `url`, `auth`) or `protocol: dimse` (`host`, `port`, `called_ae`,
`calling_ae`, `retrieve: c-get | c-move`, `move_destination` for C-MOVE, `tls`), each with `max_connections`.
Other tools write this file: these names are a contract. `receiver` configures `imaging-receive`, the C-STORE
receiver: its AE title and address, its TLS, and the senders it accepts (AE title, addresses and the site
their pushes land as).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Iterable, Literal, Mapping

from pydantic import Field, StringConstraints, field_validator, model_validator

from imaging.config_model import PositiveInt, SiteKey, StrictModel, Text
from imaging.pacs.connection import (C_GET, C_MOVE, DICOMWEB, DIMSE, DimseAddress, PacsServer, RetryPolicy, Tls,
                                     credentials_from_env, env_name)

PACS_AUTH = ("basic", "token", "none")
# PS3.5 6.2 AE: at most 16 characters of the default repertoire, no backslash or control character, not only
# spaces. Stricter here (letters, digits, space, '_', '.', '-'; no leading or trailing space): an AE title is
# shown in logs and errors, so it carries nothing but a name.
AE_TITLE = r"^[A-Za-z0-9_.-]([A-Za-z0-9 _.-]{0,14}[A-Za-z0-9_.-])?$"
HOST = r"^[A-Za-z0-9]([A-Za-z0-9.:-]{0,252})$"  # a DNS name, an IPv4 or an IPv6 address (no brackets)

AeTitle = Annotated[str, StringConstraints(pattern=AE_TITLE)]
Host = Annotated[str, StringConstraints(pattern=HOST)]
Port = Annotated[int, Field(ge=1, le=65535)]
_Model = StrictModel  # unknown keys are errors; values are not coerced (imaging.config_model)


class TlsFile(_Model):
    """TLS of a DIMSE site: the CA file the PACS's certificate must chain to (its host name is checked), and
    our certificate and key when the PACS asks for one. Paths only: the files hold the secrets."""

    ca_file: Text
    cert_file: Text | None = None
    key_file: Text | None = None

    @model_validator(mode="after")
    def _pair(self):
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self


class PacsServerFile(_Model):
    """One PACS site. DICOMweb: `url` (and `auth`); DIMSE: `host`, `port`, `called_ae`, `calling_ae`, `retrieve`
    (and `move_destination` for C-MOVE, `tls`)."""

    protocol: Literal[DICOMWEB, DIMSE] = DICOMWEB  # type: ignore[valid-type]
    max_connections: PositiveInt | None = None
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")] | None = None
    auth: Literal[PACS_AUTH] | None = None  # type: ignore[valid-type]
    host: Host | None = None
    port: Port | None = None
    called_ae: AeTitle | None = None
    calling_ae: AeTitle | None = None
    retrieve: Literal[C_GET, C_MOVE] | None = None  # type: ignore[valid-type]
    move_destination: AeTitle | None = None
    tls: TlsFile | None = None

    @model_validator(mode="after")
    def _by_protocol(self):
        web = {"url": self.url, "auth": self.auth}
        dimse = {"host": self.host, "port": self.port, "called_ae": self.called_ae, "calling_ae": self.calling_ae,
                 "retrieve": self.retrieve, "move_destination": self.move_destination, "tls": self.tls}
        if self.protocol == DICOMWEB:
            wrong = [k for k, v in dimse.items() if v is not None]
            if wrong:
                raise ValueError(f"{', '.join(wrong)}: DIMSE keys, but protocol is dicomweb")
            if self.url is None:
                raise ValueError("protocol dicomweb needs url")
            return self
        wrong = [k for k, v in web.items() if v is not None]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: DICOMweb keys, but protocol is dimse")
        missing = [k for k in ("host", "port", "called_ae", "calling_ae") if dimse[k] is None]
        if missing:
            raise ValueError(f"protocol dimse needs {', '.join(missing)}")
        if (self.retrieve == C_MOVE) != (self.move_destination is not None):
            raise ValueError("retrieve: c-move needs move_destination (the AE title of imaging-receive), and "
                             "only c-move takes one")
        return self


class SenderFile(_Model):
    """A peer allowed to associate with imaging-receive: its AE title, the addresses (or networks) it calls
    from, and the site its pushes land as (none: it may only answer our C-MOVEs)."""

    ae_title: AeTitle
    addresses: Annotated[list[Text], Field(min_length=1)]
    site: SiteKey | None = None

    @field_validator("addresses")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for address in value:
            try:
                ipaddress.ip_network(address, strict=False)
            except ValueError:
                raise ValueError(f"{address!r} is not an IP address or network (such as 10.1.2.3 or "
                                 f"10.1.2.0/24)") from None
        return value


class ReceiverTlsFile(_Model):
    """TLS of imaging-receive: its certificate and key; `ca_file` set: every sender must present a
    certificate that chains to it."""

    cert_file: Text
    key_file: Text
    ca_file: Text | None = None


class ReceiverFile(_Model):
    ae_title: AeTitle
    host: Host = "127.0.0.1"
    port: Port = 11112
    senders: list[SenderFile] = []
    tls: ReceiverTlsFile | None = None
    max_associations: PositiveInt = 8


class PacsFile(_Model):
    servers: dict[SiteKey, PacsServerFile] = {}
    max_connections: PositiveInt
    retries: Annotated[int, Field(ge=0, le=20)]
    backoff_seconds: Annotated[float, Field(ge=0, le=600)]
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)]
    sensor_days: Annotated[int, Field(ge=1, le=366)]
    sensor_seconds: PositiveInt
    receiver: ReceiverFile | None = None


# --- a deployment's PACS sites -------------------------------------------------------------------------------

@dataclass(frozen=True)
class PacsEndpoint:
    """A PACS site as configured: its URL and auth kind (DICOMweb) or its DICOM address (DIMSE), its
    retrievals at once (no secret)."""

    site: str
    url: str
    auth: str | None  # None: whichever credentials the environment holds
    max_connections: int
    protocol: str = DICOMWEB
    dimse: DimseAddress | None = None


@dataclass(frozen=True)
class PacsSettings:
    endpoints: dict[str, PacsEndpoint]
    policy: RetryPolicy
    sensor_days: int
    sensor_seconds: int
    receiver: ReceiverFile | None = None

    def server(self, site: str, env: Mapping[str, str] | None = None) -> PacsServer:
        """The site's server with its credentials, read from the environment now (never stored in config)."""
        end = self.endpoints[site]
        if end.protocol == DIMSE:
            return PacsServer(site, "", credentials_from_env(site, "none", env), end.max_connections, DIMSE, end.dimse)
        return PacsServer(site, end.url, credentials_from_env(site, end.auth, env), end.max_connections)


def spool_root(warehouse: str) -> str:
    """Where imaging-receive puts the instances a C-MOVE sends it, for the retrieval that asked to collect:
    the warehouse's identifiable zone, beside the PACS landing."""
    return f"{warehouse}/identifiable/pacs_spool"


def dimse_address(listed: PacsServerFile, spool: str | None) -> DimseAddress:
    tls = listed.tls
    return DimseAddress(listed.host, listed.port, listed.called_ae, listed.calling_ae, listed.retrieve or C_GET,
                        listed.move_destination, Tls(tls.ca_file, tls.cert_file, tls.key_file) if tls else None,
                        spool if listed.retrieve == C_MOVE else None)


def load_pacs(base: PacsFile, sites: Iterable[str], env: Mapping[str, str], warehouse: str | None = None) -> PacsSettings:
    """platform/pacs.yaml's model, with IMAGING_PACS_<SITE>_URL adding or re-pointing a partition site's
    DICOMweb server. `warehouse`: where C-MOVE answers are spooled (`spool_root`)."""
    sites = tuple(sites)
    endpoints = {}
    for site in sites:
        listed = base.servers.get(site)
        max_connections = (listed.max_connections if listed else None) or base.max_connections
        url = (env.get(env_name(site, "URL")) or "").strip()
        if listed is not None and listed.protocol == DIMSE:
            if url:
                raise ValueError(f"{env_name(site, 'URL')} is set but site {site} is a DIMSE site in "
                                 f"platform/pacs.yaml: unset one of them")
            spool = spool_root(warehouse) if warehouse else None
            endpoints[site] = PacsEndpoint(site, "", None, max_connections, DIMSE, dimse_address(listed, spool))
            continue
        url = url or (listed.url if listed else "") or ""
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{env_name(site, 'URL')} must be an http(s) URL of the site's DICOMweb root")
        if "@" in url.split("/")[2] or "?" in url:
            # The URL is resource configuration, which Dagster's UI shows: no credentials or tokens in it.
            raise ValueError(f"the PACS URL of site {site} carries credentials or a query: give them in "
                             f"{env_name(site, 'USER')}/{env_name(site, 'PASSWORD')} or {env_name(site, 'TOKEN')}")
        endpoints[site] = PacsEndpoint(site, url.rstrip("/"), (listed.auth or "basic") if listed else None,
                                       max_connections)
    unknown = sorted(set(base.servers) - set(sites))
    if unknown:
        raise ValueError(f"platform/pacs.yaml: servers of sites that are not partitions: {', '.join(unknown)}")
    if base.receiver is not None:
        for sender in base.receiver.senders:
            if sender.site is not None and sender.site not in sites:
                raise ValueError(f"platform/pacs.yaml: receiver.senders: {sender.ae_title} pushes as site "
                                 f"{sender.site}, which is not a partition")
            if sender.site in endpoints:
                raise ValueError(f"platform/pacs.yaml: receiver.senders: {sender.ae_title} pushes as site "
                                 f"{sender.site}, whose images come from its PACS (servers): a site is pulled or "
                                 f"pushed, not both")
    return PacsSettings(endpoints, RetryPolicy(base.retries, base.backoff_seconds, base.timeout_seconds),
                        base.sensor_days, base.sensor_seconds, base.receiver)
