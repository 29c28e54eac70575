"""Header-only indexing of landing-zone DICOM files (runs on Spark executors).

One record per file: an index row for a readable DICOM Part 10 instance, or a quarantine
row with the reason. The file is streamed once for its sha256, then parsed up to (not
including) the pixel data.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

import pydicom
from pydicom.errors import InvalidDicomError

from imaging import fs as fsx
from imaging.deid.quiet import quiet

CHUNK = 1 << 20

# Index columns, in order; every value a string or int so the Spark schema stays simple.
INDEX_FIELDS = (
    "source_path", "size_bytes", "sha256", "sop_instance_uid", "study_instance_uid",
    "series_instance_uid", "sop_class_uid", "modality", "laterality", "patient_id",
    "issuer_of_patient_id", "study_date", "study_time", "manufacturer", "model",
    "rows", "columns", "number_of_frames", "transfer_syntax_uid",
)


# What index_partition yields, in order: the partition, the outcome, then the index fields.
RECORD_FIELDS = ("date", "site", "status", "reason") + INDEX_FIELDS


def site_day_url(landing: str, site: str, date: str) -> str:
    return f"{landing}/images/{site}/{date}"


def list_site_days(keys: Iterable[tuple[str, str, str]]) -> Iterator[tuple[str, str, str, int]]:
    """(date, site, landing) -> (date, site, file url, size) for every file of each site-day."""
    for date, site, landing in keys:
        for url, size in fsx.list_files(site_day_url(landing, site, date)):
            yield date, site, url, size


class NotAnInstance(ValueError):
    """A readable file that is not an addressable DICOM instance; the message is the reason."""


def header_text(ds: pydicom.Dataset, keyword: str) -> str | None:
    """A header value as text, or None when absent or unreadable (malformed values do occur)."""
    try:
        value = ds.get(keyword)
    except Exception:  # a malformed value must not lose the whole file's row
        return None
    if value is None or value == "":
        return None
    return str(value).strip("\x00 ") or None


def header_int(ds: pydicom.Dataset, keyword: str) -> int | None:
    text = header_text(ds, keyword)
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def laterality(ds: pydicom.Dataset) -> str | None:
    """The eye imaged: Image Laterality, else the series' Laterality."""
    return header_text(ds, "ImageLaterality") or header_text(ds, "Laterality")


def header_row(handle, url: str, size: int) -> dict:
    """Index row for one open file; raises on anything that is not a usable Part 10 instance."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(CHUNK), b""):
        digest.update(chunk)
    handle.seek(0)
    ds = pydicom.dcmread(handle, stop_before_pixels=True)  # no force: Part 10 files only
    if not header_text(ds, "SOPInstanceUID") or not header_text(ds, "SOPClassUID"):
        raise NotAnInstance("no SOP Instance UID or SOP Class UID")
    meta = getattr(ds, "file_meta", None)
    return {
        "source_path": url,
        "size_bytes": size,
        "sha256": digest.hexdigest(),
        "sop_instance_uid": header_text(ds, "SOPInstanceUID"),
        "study_instance_uid": header_text(ds, "StudyInstanceUID"),
        "series_instance_uid": header_text(ds, "SeriesInstanceUID"),
        "sop_class_uid": header_text(ds, "SOPClassUID"),
        "modality": header_text(ds, "Modality"),
        "laterality": laterality(ds),
        "patient_id": header_text(ds, "PatientID"),
        "issuer_of_patient_id": header_text(ds, "IssuerOfPatientID"),
        "study_date": header_text(ds, "StudyDate"),
        "study_time": header_text(ds, "StudyTime"),
        "manufacturer": header_text(ds, "Manufacturer"),
        "model": header_text(ds, "ManufacturerModelName"),
        "rows": header_int(ds, "Rows"),
        "columns": header_int(ds, "Columns"),
        "number_of_frames": header_int(ds, "NumberOfFrames") or 1,
        "transfer_syntax_uid": header_text(meta, "TransferSyntaxUID") if meta is not None else None,
    }


def reason_for(error: Exception) -> str:
    """A quarantine reason that names the failure, never a value read from the file."""
    if isinstance(error, NotAnInstance):
        return str(error)
    if isinstance(error, InvalidDicomError):
        return "not a DICOM Part 10 file"
    if isinstance(error, (EOFError, OSError)) or "truncat" in str(error).lower():
        return f"truncated or unreadable file ({type(error).__name__})"
    return f"unreadable DICOM header ({type(error).__name__})"


def index_partition(rows: Iterable) -> Iterator[tuple]:
    """Spark mapPartitions body: rows of (date, site, source_path, size_bytes) -> records.

    Each record is a tuple of RECORD_FIELDS; `status` is 'indexed' or 'quarantined' with a
    `reason`. Errors stay with their file; the partition goes on.
    """
    with quiet():  # pydicom's warnings quote header values: keep them out of executor logs
        for row in rows:
            yield _index_one(row[0], row[1], row[2], int(row[3]))


def _index_one(date: str, site: str, url: str, size: int) -> tuple:
    record = {"date": date, "site": site, "status": "indexed", "reason": None}
    try:
        if size == 0:
            raise NotAnInstance("empty file")
        fs, path = fsx.filesystem(url)  # cached per process by fsspec: no per-record setup
        with fs.open(path, "rb") as handle:
            record.update(header_row(handle, url, size))
    except Exception as error:  # noqa: BLE001 - every failure becomes a quarantine record
        record.update({f: None for f in INDEX_FIELDS})
        record.update(status="quarantined", source_path=url, size_bytes=size,
                      reason=reason_for(error))
    return tuple(record[f] for f in RECORD_FIELDS)
