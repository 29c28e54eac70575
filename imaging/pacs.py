"""A PACS over DICOMweb: connections, retries, and the retrieval of one instance as its stored bytes.

Runs on the driver (the listing, imaging/driver/pacs.py) and on the executors (`FetchJob`, the retrievals of
`pacs_landing`). `dicomweb-client` speaks QIDO-RS and WADO-RS; this module adds what the platform needs
around it:

- credentials from the environment only (`credentials_from_env`), carried inside the task like the
  pseudonym key and never shown: the record's `repr` leaves them out;
- one retry policy for every request (`RetryPolicy.call`): connection errors, time-outs and HTTP 408, 429,
  502, 503, 504 are transient and retried with exponential backoff; a server still failing after the retries
  is unavailable (`PacsUnavailable`: the run fails, nothing is committed, the next run resumes); HTTP 500 and
  the other 4xx are the instance's own failure (`InstanceFailed`, recorded with its reason); 401 and 403 are
  `PacsAuthError` at once (a wrong password is not retried);
- retrieval of the stored bytes (`transfer-syntax=*`): Orthanc then returns the file it stored, byte for byte
  (tests/test_pacs.py checks the sha256);
- error messages are fixed phrases with the site key and an HTTP status, never a URL: a URL holds UIDs.

dicomweb-client logs each request's UIDs at INFO: its logger is held at WARNING here.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, TypeVar

from imaging import fs as fsx
from imaging.records import BatchStep, PacsInstance, PacsOutcome, schema_of

logging.getLogger("dicomweb_client").setLevel(logging.WARNING)
# `retrying` (dicomweb-client's retry library) logs each failed attempt with its exception, whose text holds the URL.
logging.getLogger("retrying").setLevel(logging.CRITICAL)

FETCHED, UNCHANGED, FAILED = "fetched", "unchanged", "failed"
OUTCOMES = (FETCHED, UNCHANGED, FAILED)

# Reasons (fixed phrases: never a value, a UID or a URL).
MALFORMED_UID = "malformed UID in the PACS listing"
NOT_PART10 = "response is not one DICOM Part 10 instance"
OTHER_INSTANCE = "the server returned another instance"
CONTENT_CHANGED_KEPT_FAILED = "landed copy no longer matches its recorded sha256"

# PS3.5 9.1: digits and dots, no empty component, at most 64 characters. Checked before a UID goes into a
# request's URL (dicomweb-client checks too, less strictly by default).
_UID = re.compile(r"^[0-9]+(\.[0-9]+)*$")
# QIDO attributes that say where or how an instance is served, not what it is: left out of the change marker,
# so a server moved to another address or port does not make every instance "changed".
VOLATILE = frozenset({"00081190", "00080056", "00080054"})  # RetrieveURL, InstanceAvailability, RetrieveAETitle
ACCEPT_STORED = 'multipart/related; type="application/dicom"; transfer-syntax=*'


def is_uid(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 64 and _UID.fullmatch(value) is not None


def file_name(study: str, series: str, sop: str) -> str:
    """The landed file's name: a digest of the instance's UIDs, so no value from the server names a file
    (and a re-listed instance lands under the same name)."""
    return hashlib.sha256(f"{study}\n{series}\n{sop}".encode()).hexdigest()[:40] + ".dcm"


def marker(record: Mapping) -> str:
    """The listing's change marker of an instance: a digest of its QIDO-RS attributes (DICOM JSON) less the
    volatile ones. QIDO gives no content hash; a corrected header the PACS re-indexes (patient, dates,
    instance number, dimensions) changes it. A byte change the listing does not show is found by the sha256
    check of the kept copy only if the copy itself changed (README, "Images from a PACS")."""
    kept = {tag: record[tag] for tag in sorted(record) if tag not in VOLATILE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def first_value(record: Mapping, tag: str) -> str | None:
    """The first value of a DICOM JSON attribute (QIDO-RS result), or None."""
    values = (record.get(tag) or {}).get("Value") or []
    return str(values[0]) if values else None


def env_name(site: str, what: str) -> str:
    """`IMAGING_PACS_<SITE>_<WHAT>`: the site key upper-cased, '-' as '_'."""
    return f"IMAGING_PACS_{site.upper().replace('-', '_')}_{what}"


# --- Servers, credentials, retries ----------------------------------------------------------------------

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
class PacsServer:
    """One site's DICOMweb server: its root URL, credentials and how many retrievals it takes at once."""

    site: str
    url: str
    credentials: Credentials = field(repr=False)
    max_connections: int = 4


T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    retries: int
    backoff_seconds: float
    timeout_seconds: float

    def call(self, site: str, request: Callable[[], T], *, per_instance: bool) -> tuple[T, int]:
        """`request()` and the attempts it took, retrying transient errors with exponential backoff.

        `per_instance`: a retrieval, whose HTTP 500 or 4xx is the instance's own failure (InstanceFailed);
        otherwise (a listing) every error fails the run."""
        import requests

        attempt = 0
        while True:
            attempt += 1
            status = None
            try:
                return request(), attempt
            except requests.HTTPError as error:
                status = error.response.status_code if error.response is not None else None
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError):
                status = None  # refused, reset, timed out, or cut in the middle of a response
            if status in (401, 403):
                raise PacsAuthError(f"PACS of site {site} refused the credentials (HTTP {status}): check "
                                    f"{env_name(site, 'USER')}/{env_name(site, 'PASSWORD')} or "
                                    f"{env_name(site, 'TOKEN')}") from None
            transient = status is None or status in (408, 429, 500, 502, 503, 504)
            if transient and attempt <= self.retries:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
                continue
            if per_instance and status is not None and status not in (408, 429, 502, 503, 504):
                raise InstanceFailed(f"HTTP {status} from the server" + (f" after {attempt} attempts" if transient else ""),
                                     attempt) from None
            what = "no connection" if status is None else f"HTTP {status}"
            raise PacsUnavailable(f"PACS of site {site} unavailable ({what} after {attempt} attempts): nothing of "
                                  f"this run was committed; run again when the server is back") from None


def connect(server: PacsServer, policy: RetryPolicy):
    """A DICOMweb client of `server` (one per Spark partition or per listing, never per instance). Its own
    retries are off: `RetryPolicy.call` retries every request, connection errors included."""
    import requests
    from dicomweb_client import DICOMwebClient

    session = requests.Session()
    headers = {}
    if server.credentials.auth == "basic":
        session.auth = (server.credentials.user, server.credentials.secret)
    elif server.credentials.auth == "token":
        headers["Authorization"] = f"Bearer {server.credentials.secret}"
    client = DICOMwebClient(server.url, session=session, headers=headers or None, timeout=policy.timeout_seconds)
    client.set_http_retry_params(retry=False)
    return client


def retrieve_stored(client, study: str, series: str, sop: str) -> bytes:
    """One instance by WADO-RS in its stored transfer syntax (`transfer-syntax=*`), as the bytes of its one
    part. dicomweb-client's `retrieve_instance` parses the part into a dataset; the file is needed as
    stored, so its multipart reader is used directly (pinned at 0.61 in the lock)."""
    from dicomweb_client.web import _Transaction

    url = client._get_instances_url(_Transaction.RETRIEVE, study, series, sop)
    response = client._http_get(url, headers={"Accept": ACCEPT_STORED})
    if response.headers.get("Content-Type", "").startswith("application/dicom"):
        return response.content  # a server that sends the one part bare (tolerated by dicomweb-client too)
    parts = list(client._decode_multipart_message(response, stream=False))
    if len(parts) != 1:
        raise InstanceFailed(NOT_PART10)
    return bytes(parts[0])


def check_part10(data: bytes, sop: str) -> None:
    """The bytes are one Part 10 file of instance `sop` (its file meta says so)."""
    if len(data) < 132 or data[128:132] != b"DICM":
        raise InstanceFailed(NOT_PART10)
    import pydicom

    try:
        # The file meta is read whole; of the data set only one early tag (cheap: the header's start).
        meta = pydicom.dcmread(io.BytesIO(data), specific_tags=["SOPClassUID"], stop_before_pixels=True).file_meta
    except Exception:  # noqa: BLE001 - any unreadable meta is the same fault
        raise InstanceFailed(NOT_PART10) from None
    if str(meta.get("MediaStorageSOPInstanceUID", "")).rstrip("\0 ") != sop:
        raise InstanceFailed(OTHER_INSTANCE)


# --- The executor step: retrieve (or keep) each planned instance ------------------------------------------

def landed_name(site: str, date: str, name: str) -> str:
    """Path of a landed file below the PACS landing root: the landing layout, `images/<site>/<date>/<name>`."""
    return f"images/{site}/{date}/{name}"


@dataclass(frozen=True)
class FetchSetup:
    """Per Spark partition: one client per server, the landing root (for kept copies) and the staging root
    (where this run's site-days are built before the commit swaps them in)."""

    servers: tuple[PacsServer, ...] = field(repr=False)
    policy: RetryPolicy
    landed_root: str
    staged_root: str

    def __call__(self):
        return Fetcher(self)


class Fetcher:
    def __init__(self, setup: FetchSetup):
        self.setup = setup
        self.servers = {s.site: s for s in setup.servers}
        self.clients: dict[str, object] = {}

    def client(self, site: str):
        if site not in self.clients:
            self.clients[site] = connect(self.servers[site], self.setup.policy)
        return self.clients[site]

    def __call__(self, item: PacsInstance) -> PacsOutcome:
        def outcome(kind: str, **found) -> PacsOutcome:
            return PacsOutcome(**item.listed(), outcome=kind, **found)

        if not all(is_uid(u) for u in (item.study_instance_uid, item.series_instance_uid, item.sop_instance_uid)):
            return outcome(FAILED, reason=MALFORMED_UID)
        relative = landed_name(item.site, item.date, item.file_name)
        staged = fsx.under(self.setup.staged_root, relative)
        if item.previous_sha256 and item.previous_marker == item.marker:
            kept = keep(fsx.under(self.setup.landed_root, relative), staged, item.previous_sha256)
            if kept is not None:
                return outcome(UNCHANGED, size_bytes=kept, sha256=item.previous_sha256)
        policy, site = self.setup.policy, item.site
        try:
            data, attempts = policy.call(site, lambda: retrieve_stored(self.client(site), item.study_instance_uid,
                                                                       item.series_instance_uid, item.sop_instance_uid),
                                         per_instance=True)
            check_part10(data, item.sop_instance_uid)
        except InstanceFailed as failed:
            return outcome(FAILED, attempts=failed.attempts, reason=failed.reason)
        fsx.write_bytes(staged, data)
        return outcome(FETCHED, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), attempts=attempts)


def keep(landed: str, staged: str, sha256: str) -> int | None:
    """Put the last run's copy of an unchanged instance into this run's site-day (a hard link on a local
    disk, a copy on an object store) if it still has its recorded sha256; its size, or None (fetch it)."""
    try:
        if fsx.sha256_url(landed) != sha256:
            return None
        fs, source = fsx.filesystem(landed)
        _, target = fsx.filesystem(staged)
        fs.makedirs(fs._parent(target), exist_ok=True)
        if fsx.is_local(fs):
            try:
                os.link(source, target)
            except OSError:  # a filesystem without hard links: a copy
                shutil.copyfile(source, target)
        else:
            fs.copy(source, target)
        return int(fs.info(target)["size"])
    except (FileNotFoundError, OSError):
        return None


def fetch_step(setup: FetchSetup) -> BatchStep:
    return BatchStep(setup, PacsInstance, schema_of(PacsOutcome))


def counts(outcomes: Iterable[str]) -> dict[str, int]:
    """Instances per outcome, every outcome present (listed = fetched + unchanged + failed)."""
    tally = {o: 0 for o in OUTCOMES}
    for o in outcomes:
        tally[o] += 1
    return tally

