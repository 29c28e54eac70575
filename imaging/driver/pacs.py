"""The PACS on the driver: which sites are PACS sites, listing a site-day (QIDO-RS), its data version.

The listing is the one fan-out the driver takes on (studies by StudyDate, then each study's instances: UIDs
and a change marker per instance, nothing else); the retrievals are spread over the executors
(assets/pacs_landing.py). `on_listed` is a no-op called once a run's listing is done: tests replace it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Annotated, Iterable, Literal, Mapping

from pydantic import Field, StringConstraints

from imaging.config_files import load_as
from imaging.config_model import PositiveInt, SiteKey, StrictModel
from imaging.pacs import (PacsServer, RetryPolicy, connect, credentials_from_env, env_name, file_name, first_value,
                          marker)
from imaging.records import PacsInstance

STUDY_UID, SERIES_UID, SOP_UID, STUDY_DATE = "0020000D", "0020000E", "00080018", "00080020"
STUDY_INSTANCES, STUDY_SERIES = "00201208", "00201206"
ROWS, COLUMNS, FRAMES, BITS = "00280010", "00280011", "00280008", "00280100"


# --- platform/pacs.yaml, its model -------------------------------------------------------------------------

PACS_AUTH = ("basic", "token", "none")


class PacsServerFile(StrictModel):
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")]
    auth: Literal[PACS_AUTH] = "basic"  # type: ignore[valid-type]
    max_connections: PositiveInt | None = None


class PacsFile(StrictModel):
    servers: dict[SiteKey, PacsServerFile] = {}
    max_connections: PositiveInt
    retries: Annotated[int, Field(ge=0, le=20)]
    backoff_seconds: Annotated[float, Field(ge=0, le=600)]
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)]
    sensor_days: Annotated[int, Field(ge=1, le=366)]
    sensor_seconds: PositiveInt


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


def on_listed(site_days: int, instances: int) -> None:
    """Called after a run's listing, before any retrieval. Does nothing (tests stop a server here)."""


@dataclass(frozen=True)
class PacsEndpoint:
    """A PACS site as configured: its URL, how it authenticates and its retrievals at once (no secret)."""

    site: str
    url: str
    auth: str | None  # None: whichever credentials the environment holds
    max_connections: int


@dataclass(frozen=True)
class PacsSettings:
    endpoints: dict[str, PacsEndpoint]
    policy: RetryPolicy
    sensor_days: int
    sensor_seconds: int

    def server(self, site: str, env: Mapping[str, str] | None = None) -> PacsServer:
        """The site's server with its credentials, read from the environment now (never stored in config)."""
        end = self.endpoints[site]
        return PacsServer(site, end.url, credentials_from_env(site, end.auth, env), end.max_connections)


def load_pacs(sites: Iterable[str], env: Mapping[str, str]) -> PacsSettings:
    """platform/pacs.yaml, with IMAGING_PACS_<SITE>_URL adding or re-pointing a partition site's server."""
    base = load_as(PacsFile, "pacs.yaml")
    sites = tuple(sites)
    endpoints = {}
    for site in sites:
        listed = base.servers.get(site)
        url = (env.get(env_name(site, "URL")) or "").strip() or (listed.url if listed else "")
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{env_name(site, 'URL')} must be an http(s) URL of the site's DICOMweb root")
        if "@" in url.split("/")[2] or "?" in url:
            # The URL is resource configuration, which Dagster's UI shows: no credentials or tokens in it.
            raise ValueError(f"the PACS URL of site {site} carries credentials or a query: give them in "
                             f"{env_name(site, 'USER')}/{env_name(site, 'PASSWORD')} or {env_name(site, 'TOKEN')}")
        endpoints[site] = PacsEndpoint(site, url.rstrip("/"), listed.auth if listed else None,
                                       (listed.max_connections if listed else None) or base.max_connections)
    unknown = sorted(set(base.servers) - set(sites))
    if unknown:
        raise ValueError(f"platform/pacs.yaml: servers of sites that are not partitions: {', '.join(unknown)}")
    return PacsSettings(endpoints, RetryPolicy(base.retries, base.backoff_seconds, base.timeout_seconds),
                        base.sensor_days, base.sensor_seconds)


def dicom_date(date: str) -> str:
    return dt.date.fromisoformat(date).strftime("%Y%m%d")


def list_site_day(client, policy: RetryPolicy, site: str, date: str) -> list[PacsInstance]:
    """Every instance of the studies the site's PACS dates `date` (StudyDate), sorted: QIDO-RS studies, then
    each study's instances (one query per study, not per series: fewer round trips, the same rows)."""
    studies, _ = policy.call(site, lambda: client.search_for_studies(
        search_filters={"StudyDate": dicom_date(date)}, get_remaining=True), per_instance=False)
    listed = []
    for study in studies:
        study_uid = first_value(study, STUDY_UID)
        if study_uid is None:
            continue
        instances, _ = policy.call(site, lambda: client.search_for_instances(
            study_instance_uid=study_uid, get_remaining=True), per_instance=False)
        for record in instances:
            series, sop = first_value(record, SERIES_UID) or "", first_value(record, SOP_UID) or ""
            listed.append(PacsInstance(date=date, site=site, study_instance_uid=study_uid,
                                       series_instance_uid=series, sop_instance_uid=sop, marker=marker(record),
                                       file_name=file_name(study_uid, series, sop), pixel_bytes=pixel_bytes(record)))
    # One row per instance (file_name digests its three UIDs), however often a server repeats it.
    return sorted({i.file_name: i for i in listed}.values(), key=lambda i: i.file_name)


def listing_version(instances: Iterable[PacsInstance], failed: int = 0) -> str:
    """A site-day's data version from the PACS's own listing: a digest of its instances (SOP Instance UID and
    change marker), and of how many failed to land, so a run that left some behind is not the same version
    as one that landed them all. Only the digest is shown, never a UID."""
    digest = hashlib.sha256()
    for item in sorted(instances, key=lambda i: i.sop_instance_uid):
        digest.update(f"{item.sop_instance_uid}\t{item.marker}\n".encode())
    if failed:
        digest.update(f"failed={failed}\n".encode())
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class StudyDay:
    """What the sensor sees of a site-day without the fan-out: its studies and their instance counts."""

    date: str
    site: str
    studies: int
    instances: int
    version: str


def list_recent(server: PacsServer, policy: RetryPolicy, first: str, last: str) -> dict[str, StudyDay]:
    """One QIDO-RS query of the studies dated `first`..`last` on a server, grouped by site-day: the sensor's
    cheap listing (study UIDs and their instance and series counts, no instance query)."""
    client = connect(server, policy)
    studies, _ = policy.call(server.site, lambda: client.search_for_studies(
        search_filters={"StudyDate": f"{dicom_date(first)}-{dicom_date(last)}"},
        fields=[STUDY_INSTANCES, STUDY_SERIES], get_remaining=True), per_instance=False)
    grouped: dict[str, list[tuple[str, str, str]]] = {}
    for study in studies:
        uid, day = first_value(study, STUDY_UID), first_value(study, STUDY_DATE)
        if not uid or not day or len(day) != 8 or not day.isdigit():
            continue
        date = f"{day[:4]}-{day[4:6]}-{day[6:]}"
        grouped.setdefault(date, []).append((uid, first_value(study, STUDY_SERIES) or "",
                                             first_value(study, STUDY_INSTANCES) or ""))
    days = {}
    for date, rows in grouped.items():
        digest = hashlib.sha256("".join(f"{u}\t{s}\t{n}\n" for u, s, n in sorted(rows)).encode()).hexdigest()[:32]
        total = sum(int(n) for _, _, n in rows if n.isdigit())
        days[f"{date}|{server.site}"] = StudyDay(date, server.site, len(rows), total, digest)
    return days
