"""Listing a site-day on the driver, its data version, and the sensor's cheap study-level listing.

The listing is the one fan-out the driver takes on (studies by StudyDate, then their instances: UIDs, a change
marker per instance and the SOP class, nothing else); the retrievals are spread over the executors
(assets/pacs_landing.py, `retrieval.Fetcher`). Each protocol module gives a session with `list_day`,
`list_studies`, `retrieve` and `close`; `session` picks it by the server's protocol. `on_listed` is a no-op
called once a run's listing is done: tests replace it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

from imaging.pacs.connection import DIMSE, PacsServer, RetryPolicy
from imaging.pacs.records import file_name, iso_date
from imaging.records import PacsInstance


def session(server: PacsServer, policy: RetryPolicy):
    """A protocol session with `server` (one per listing or per Spark task, never per instance)."""
    if server.protocol == DIMSE:
        from imaging.pacs.dimse import DimseSession

        return DimseSession(server, policy)
    from imaging.pacs.dicomweb import DicomwebSession

    return DicomwebSession(server, policy)


def on_listed(site_days: int, instances: int) -> None:
    """Called after a run's listing, before any retrieval. Does nothing (tests stop a server here)."""


def list_site_day(client, site: str, date: str) -> list[PacsInstance]:
    """Every instance of the studies the site's PACS dates `date` (StudyDate), one row each, sorted."""
    listed = [PacsInstance(date=date, site=site, study_instance_uid=i.study, series_instance_uid=i.series,
                           sop_instance_uid=i.sop, marker=i.marker, file_name=file_name(i.study, i.series, i.sop),
                           pixel_bytes=i.pixel_bytes, sop_class_uid=i.sop_class)
              for i in client.list_day(date)]
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
    """One study-level query of the studies dated `first`..`last` on a server, grouped by site-day: the sensor's
    cheap listing (study UIDs and their instance and series counts, no instance query)."""
    client = session(server, policy)
    try:
        studies = client.list_studies(first, last)
    finally:
        client.close()
    grouped: dict[str, list[tuple[str, str, str]]] = {}
    for study in studies:
        date = iso_date(study.date)
        if not study.uid or date is None:
            continue
        grouped.setdefault(date, []).append((study.uid, study.series or "", study.instances or ""))
    days = {}
    for date, rows in grouped.items():
        digest = hashlib.sha256("".join(f"{u}\t{s}\t{n}\n" for u, s, n in sorted(rows)).encode()).hexdigest()[:32]
        total = sum(int(n) for _, _, n in rows if n.isdigit())
        days[f"{date}|{server.site}"] = StudyDay(date, server.site, len(rows), total, digest)
    return days
