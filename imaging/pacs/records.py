"""What a PACS answers, whatever the protocol: named records the listing and the sensor build on."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

NOT_PART10 = "response is not one DICOM Part 10 instance"  # a reason: a fixed phrase, never a value


def dicom_date(date: str) -> str:
    """An ISO date as DICOM's DA (YYYYMMDD)."""
    return dt.date.fromisoformat(date).strftime("%Y%m%d")


def iso_date(value: str | None) -> str | None:
    """A DICOM DA (exactly YYYYMMDD, a real calendar date) as an ISO date; None for anything else (a range,
    a truncated or impossible date, padding): such a value never names a folder."""
    if not value or len(value) != 8 or not value.isdigit():
        return None
    try:
        return dt.date(int(value[:4]), int(value[4:6]), int(value[6:])).isoformat()
    except ValueError:
        return None


def file_name(study: str, series: str, sop: str) -> str:
    """The landed file's name: a digest of the instance's UIDs, so no value from the server names a file
    (and a re-listed instance lands under the same name)."""
    return hashlib.sha256(f"{study}\n{series}\n{sop}".encode()).hexdigest()[:40] + ".dcm"


@dataclass(frozen=True)
class ListedInstance:
    """One instance as a site-day's listing gives it: UIDs, a change marker (a digest of what the listing says
    of it), the pixel bytes it implies (a progress estimate) and its SOP class (what C-GET must accept)."""

    study: str
    series: str
    sop: str
    marker: str
    pixel_bytes: int | None = None
    sop_class: str | None = None


@dataclass(frozen=True)
class StudyRow:
    """One study of the sensor's study-level listing: its UID, date and series and instance counts as given."""

    uid: str | None
    date: str | None  # DICOM DA
    series: str | None
    instances: str | None
