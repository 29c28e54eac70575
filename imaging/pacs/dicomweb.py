"""DICOMweb: QIDO-RS listing and WADO-RS retrieval of the stored bytes (`dicomweb-client`).

- `http_failure` is this protocol's reading of an error for the retry policy: connection errors, time-outs and
  HTTP 408, 429, 500, 502, 503, 504 are transient; HTTP 500 and the other 4xx are an instance's own failure;
  401 and 403 are credentials refused (not retried);
- retrieval asks for the stored transfer syntax (`transfer-syntax=*`): Orthanc then returns the file it
  stored, byte for byte (tests/test_pacs.py checks the sha256);
- the listing's change marker is a digest of an instance's QIDO-RS attributes less where it is served from.

dicomweb-client logs each request's UIDs at INFO: its logger is held at WARNING here.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Mapping

from imaging.pacs.connection import Failure, InstanceFailed, PacsServer, RetryPolicy, env_name
from imaging.pacs.records import NOT_PART10, ListedInstance, StudyRow, dicom_date

logging.getLogger("dicomweb_client").setLevel(logging.WARNING)
# `retrying` (dicomweb-client's retry library) logs each failed attempt with its exception, whose text holds the URL.
logging.getLogger("retrying").setLevel(logging.CRITICAL)

STUDY_UID, SERIES_UID, SOP_UID, STUDY_DATE = "0020000D", "0020000E", "00080018", "00080020"
STUDY_INSTANCES, STUDY_SERIES = "00201208", "00201206"
ROWS, COLUMNS, FRAMES, BITS = "00280010", "00280011", "00280008", "00280100"
# QIDO attributes that say where or how an instance is served, not what it is: left out of the change marker,
# so a server moved to another address or port does not make every instance "changed".
VOLATILE = frozenset({"00081190", "00080056", "00080054"})  # RetrieveURL, InstanceAvailability, RetrieveAETitle
ACCEPT_STORED = 'multipart/related; type="application/dicom"; transfer-syntax=*'


def http_failure(site: str, error: BaseException) -> Failure | None:
    import requests

    if isinstance(error, requests.HTTPError):
        status = error.response.status_code if error.response is not None else None
    elif isinstance(error, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)):
        status = None  # refused, reset, timed out, or cut in the middle of a response
    else:
        return None
    if status in (401, 403):
        return Failure(f"HTTP {status}", transient=False, refused=True, message=(
            f"PACS of site {site} refused the credentials (HTTP {status}): check {env_name(site, 'USER')}/"
            f"{env_name(site, 'PASSWORD')} or {env_name(site, 'TOKEN')}"))
    if status is None:
        return Failure("no connection", transient=True)
    transient = status in (408, 429, 500, 502, 503, 504)
    return Failure(f"HTTP {status}", transient=transient, instance=status not in (408, 429, 502, 503, 504))


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


def pixel_bytes(record) -> int | None:
    """The instance's pixel data size as its listing implies it (one sample per pixel): the run's progress
    estimate of the bytes to come, before any is retrieved. None when the listing does not say."""
    try:
        rows, columns = int(first_value(record, ROWS)), int(first_value(record, COLUMNS))
        bits = int(first_value(record, BITS) or 8)
        frames = int(first_value(record, FRAMES) or 1)
    except (TypeError, ValueError):
        return None
    return rows * columns * frames * bits // 8


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


class DicomwebSession:
    """The listing's and the retrievals' view of one server: one client, every request through the policy."""

    def __init__(self, server: PacsServer, policy: RetryPolicy):
        self.server, self.policy = server, policy
        self.client = connect(server, policy)

    def _call(self, request, per_instance: bool = False):
        return self.policy.call(self.server.site, request, per_instance=per_instance, classify=http_failure)

    def list_day(self, date: str) -> list[ListedInstance]:
        """Every instance of the studies dated `date` (StudyDate): QIDO-RS studies, then each study's instances
        (one query per study, not per series: fewer round trips, the same rows)."""
        client = self.client
        studies, _ = self._call(lambda: client.search_for_studies(
            search_filters={"StudyDate": dicom_date(date)}, get_remaining=True))
        listed = []
        for study in studies:
            study_uid = first_value(study, STUDY_UID)
            if study_uid is None:
                continue
            instances, _ = self._call(lambda: client.search_for_instances(
                study_instance_uid=study_uid, get_remaining=True))
            for record in instances:
                listed.append(ListedInstance(study_uid, first_value(record, SERIES_UID) or "",
                                             first_value(record, SOP_UID) or "", marker(record), pixel_bytes(record)))
        return listed

    def list_studies(self, first: str, last: str) -> list[StudyRow]:
        """One QIDO-RS query of the studies dated `first`..`last` (study level, no instance fan-out)."""
        studies, _ = self._call(lambda: self.client.search_for_studies(
            search_filters={"StudyDate": f"{dicom_date(first)}-{dicom_date(last)}"},
            fields=[STUDY_INSTANCES, STUDY_SERIES], get_remaining=True))
        return [StudyRow(first_value(s, STUDY_UID), first_value(s, STUDY_DATE), first_value(s, STUDY_SERIES),
                         first_value(s, STUDY_INSTANCES)) for s in studies]

    def retrieve(self, study: str, series: str, sop: str, sop_class: str | None) -> tuple[bytes, int]:
        """The instance's stored bytes and the attempts it took."""
        return self._call(lambda: retrieve_stored(self.client, study, series, sop), per_instance=True)

    def close(self) -> None:
        self.client._session.close() if hasattr(self.client, "_session") else None
