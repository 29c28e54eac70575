"""A PACS server as a run reaches it: where it is, how it authenticates, and the one retry policy.

Every protocol (`dicomweb`, `dimse`) goes through `RetryPolicy.call` with its own `classify`, which says what
an exception means (`Failure`): transient faults (no connection, a time-out, HTTP 429/502/503/504, an aborted
association) are retried with exponential backoff; a server still failing after the retries is unavailable
(`PacsUnavailable`: the run fails, nothing is committed, the next run resumes); a failure of one instance
(HTTP 500 or 4xx, a DIMSE failure status) is recorded against it (`InstanceFailed`); credentials refused (HTTP
401/403) or an association rejected (a wrong AE title) fail at once (`PacsAuthError`: not retried).

Credentials come from the environment only (`credentials_from_env`) and are never shown: the records' `repr`
leaves them out. Error messages are fixed phrases with the site key, a status or an AE title (configuration),
never a URL (a URL holds UIDs) nor a value from a file.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

DICOMWEB, DIMSE = "dicomweb", "dimse"
PROTOCOLS = (DICOMWEB, DIMSE)
C_GET, C_MOVE = "c-get", "c-move"


def env_name(site: str, what: str) -> str:
    """`IMAGING_PACS_<SITE>_<WHAT>`: the site key upper-cased, '-' as '_'."""
    return f"IMAGING_PACS_{site.upper().replace('-', '_')}_{what}"


class PacsError(RuntimeError):
    """A PACS problem that fails the run (the message names the site and a status, never a URL)."""


class PacsAuthError(PacsError):
    pass


class PacsUnavailable(PacsError):
    pass


class InstanceFailed(Exception):
    """One instance could not be retrieved; `reason` is a fixed phrase, recorded against it."""

    def __init__(self, reason: str, attempts: int = 1):
        super().__init__(reason)
        self.reason, self.attempts = reason, attempts


@dataclass(frozen=True)
class Credentials:
    """HTTP basic (user, password) or a bearer token, or nothing. Never printed."""

    auth: str  # basic | token | none
    user: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)


def credentials_from_env(site: str, auth: str | None, env: Mapping[str, str] | None = None) -> Credentials:
    """The site's credentials from its environment variables (`auth` None: whichever are set)."""
    env = os.environ if env is None else env
    token, user, password = (env.get(env_name(site, w)) for w in ("TOKEN", "USER", "PASSWORD"))
    auth = auth or ("token" if token else "basic" if user else "none")
    if auth == "token":
        if not token:
            raise PacsAuthError(f"PACS of site {site}: auth is token but {env_name(site, 'TOKEN')} is not set")
        return Credentials("token", secret=token)
    if auth == "basic":
        if not user or password is None:
            raise PacsAuthError(f"PACS of site {site}: auth is basic but {env_name(site, 'USER')} and "
                                f"{env_name(site, 'PASSWORD')} are not both set")
        return Credentials("basic", user=user, secret=password)
    return Credentials("none")


@dataclass(frozen=True)
class Tls:
    """TLS of a DIMSE association: the CA bundle the peer's certificate must chain to, and our own
    certificate and key when the peer asks for one (file paths; the files hold the secrets, never the
    configuration)."""

    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None

    def client_context(self):
        import ssl

        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True)
class DimseAddress:
    """A PACS's DICOM network address and our side of it: its AE title (`called_ae`), ours (`calling_ae`), how
    instances are retrieved (C-GET on our association, or C-MOVE to `move_destination`, the AE title of our
    store receiver `imaging-receive`, which puts the answers in `spool`)."""

    host: str
    port: int
    called_ae: str
    calling_ae: str
    retrieve: str = C_GET
    move_destination: str | None = None
    tls: Tls | None = None
    spool: str | None = None  # C-MOVE only: where imaging-receive writes the instances it is sent


@dataclass(frozen=True)
class PacsServer:
    """One site's PACS: its DICOMweb root (`url`) or its DICOM network address (`dimse`), its credentials (DICOMweb)
    and how many retrievals it takes at once."""

    site: str
    url: str
    credentials: Credentials = field(repr=False)
    max_connections: int = 4
    protocol: str = DICOMWEB
    dimse: DimseAddress | None = None


@dataclass(frozen=True)
class Failure:
    """What an exception of a request means, as a protocol's `classify` says it.

    `label` names it in messages and reasons ("HTTP 503", "no connection", "DIMSE status 0xA701"); `transient`:
    retried; `instance`: when retrieving one instance, its own failure (recorded) rather than the server's;
    `refused`: the server refused us (credentials, AE titles): not retried, `message` says what to check."""

    label: str
    transient: bool
    instance: bool = False
    refused: bool = False
    message: str = ""


T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    retries: int
    backoff_seconds: float
    timeout_seconds: float

    def call(self, site: str, request: Callable[[], T], *, per_instance: bool,
             classify: Callable[[str, BaseException], Failure | None]) -> tuple[T, int]:
        """`request()` and the attempts it took, retrying transient failures with exponential backoff.

        `per_instance`: a retrieval, whose own failures (`Failure.instance`) are InstanceFailed; otherwise (a
        listing) every failure fails the run. `classify(site, error)` is the protocol's reading of an error
        (None: not a PACS error, raised as it is)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return request(), attempt
            except InstanceFailed:
                raise
            except Exception as error:  # noqa: BLE001 - the protocol's classify decides
                failure = classify(site, error)
                if failure is None:
                    raise
            if failure.refused:
                raise PacsAuthError(failure.message) from None
            if failure.transient and attempt <= self.retries:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
                continue
            if per_instance and failure.instance:
                raise InstanceFailed(f"{failure.label} from the server"
                                     + (f" after {attempt} attempts" if failure.transient else ""), attempt) from None
            raise PacsUnavailable(f"PACS of site {site} unavailable ({failure.label} after {attempt} attempts): "
                                  f"nothing of this run was committed; run again when the server is back") from None
