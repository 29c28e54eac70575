"""Header-only indexing of landing-zone DICOM files (the executor side of raw_image_index).

`list_folder` finds a site-day's files; `index_file` turns one into an `IndexedImage` or a
`Quarantined` record with the reason. The file is streamed once for its sha256, then parsed up
to (not including) the pixel data. `MANDATORY` is the rule for what an indexed instance must
carry (an instance missing any of it is quarantined, naming the attributes); `DUPLICATES` the
rule for two files holding one instance.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from imaging import fs as fsx
from imaging.records import (BatchStep, IndexedImage, ListedFile, Quarantined, SiteDayFolder, Stateless,
                             outcome_schema, schema_of)

if TYPE_CHECKING:  # pydicom is imported where files are read: the driver of a run may never need it
    import pydicom

CHUNK = 1 << 20
IN_MEMORY = 64 << 20  # files up to this size are read whole (see read_header)


def site_day_url(landing: str, site: str, date: str) -> str:
    """The data contract: `<landing>/images/<site>/<YYYY-MM-DD>/<any depth>/<file>`."""
    return f"{landing}/images/{site}/{date}"


def list_folder(folder: SiteDayFolder) -> Iterator[ListedFile]:
    """Every file of a site-day, at any depth (none if the folder does not exist)."""
    for url, size in fsx.list_files(folder.url):
        yield ListedFile(folder.date, folder.site, url, size)


class NotAnInstance(ValueError):
    """A readable file that is not an addressable DICOM instance; the message is the reason."""


# Every indexed instance carries these (record field, DICOM keyword): the UIDs address and name it,
# the patient id links and pseudonymises it (without one, every such image would share the
# pseudonym of the empty id), the modality selects it into cohorts.
MANDATORY = (("patient_id", "PatientID"), ("study_instance_uid", "StudyInstanceUID"),
             ("series_instance_uid", "SeriesInstanceUID"), ("sop_instance_uid", "SOPInstanceUID"),
             ("sop_class_uid", "SOPClassUID"), ("modality", "Modality"))
MISSING_MANDATORY = "missing mandatory attribute"  # the reason's fixed start; the attributes' keywords follow


def missing_mandatory(image: IndexedImage) -> tuple[str, ...]:
    """The DICOM keywords of the mandatory attributes `image` lacks (absent, empty or blank)."""
    return tuple(keyword for field_name, keyword in MANDATORY if not (getattr(image, field_name) or "").strip())


def mandatory_rule(image: IndexedImage) -> IndexedImage | Quarantined:
    """The image, or its quarantine record naming the missing attributes (keywords, never values)."""
    missing = missing_mandatory(image)
    if not missing:
        return image
    reason = f"{MISSING_MANDATORY}{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
    return Quarantined(image.date, image.site, image.source_path, image.size_bytes, image.sha256, reason)


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


def read_header(handle, listed: ListedFile) -> IndexedImage:
    """Index record of one open file; raises on anything that is not a usable Part 10 instance.

    A file up to `IN_MEMORY` bytes is read once, in one call, then hashed and parsed from memory
    (pydicom reads a header element by element: from memory each read is a C call, through the
    filesystem's file object a Python one, after a second pass over the file). Larger files are
    streamed for the hash and their header read again from the file. Either way the bytes hashed
    and parsed are the same, so the records are too.
    """
    import pydicom  # here, not at import time: see TYPE_CHECKING above

    if listed.size_bytes is not None and listed.size_bytes <= IN_MEMORY:
        data = handle.read()
        digest = hashlib.sha256(data)
        source = io.BytesIO(data)
    else:
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
        handle.seek(0)
        source = handle
    ds = pydicom.dcmread(source, stop_before_pixels=True)  # no force: Part 10 files only
    meta = getattr(ds, "file_meta", None)
    return IndexedImage(
        date=listed.date, site=listed.site, source_path=listed.source_path, size_bytes=listed.size_bytes,
        sha256=digest.hexdigest(),
        sop_instance_uid=header_text(ds, "SOPInstanceUID"),
        study_instance_uid=header_text(ds, "StudyInstanceUID"),
        series_instance_uid=header_text(ds, "SeriesInstanceUID"),
        sop_class_uid=header_text(ds, "SOPClassUID"),
        modality=header_text(ds, "Modality"),
        laterality=laterality(ds),
        patient_id=header_text(ds, "PatientID"),
        issuer_of_patient_id=header_text(ds, "IssuerOfPatientID"),
        study_date=header_text(ds, "StudyDate"),
        study_time=header_text(ds, "StudyTime"),
        manufacturer=header_text(ds, "Manufacturer"),
        model=header_text(ds, "ManufacturerModelName"),
        rows=header_int(ds, "Rows"),
        columns=header_int(ds, "Columns"),
        number_of_frames=header_int(ds, "NumberOfFrames") or 1,
        transfer_syntax_uid=header_text(meta, "TransferSyntaxUID") if meta is not None else None,
    )


def reason_for(error: Exception) -> str:
    """A quarantine reason that names the failure, never a value read from the file."""
    from pydicom.errors import InvalidDicomError

    if isinstance(error, NotAnInstance):
        return str(error)
    if isinstance(error, InvalidDicomError):
        return "not a DICOM Part 10 file"
    if isinstance(error, (EOFError, OSError)) or "truncat" in str(error).lower():
        return f"truncated or unreadable file ({type(error).__name__})"
    return f"unreadable DICOM header ({type(error).__name__})"


def index_file(listed: ListedFile) -> IndexedImage | Quarantined:
    """One landing file -> its index record, or a quarantine record; errors stay with their file.

    A readable instance missing a mandatory attribute is quarantined with its sha256 (it was read).
    """
    try:
        if listed.size_bytes == 0:
            raise NotAnInstance("empty file")
        fs, path = fsx.filesystem(listed.source_path)  # cached per process by fsspec: no per-record setup
        with fs.open(path, "rb") as handle:
            image = read_header(handle, listed)
    except Exception as error:  # noqa: BLE001 - every failure becomes a quarantine record
        return Quarantined(listed.date, listed.site, listed.source_path, listed.size_bytes, None,
                           reason_for(error))
    return mandatory_rule(image)


@dataclass(frozen=True)
class DuplicateRule:
    """Two files holding one instance in one site-day: the first by `keep_first_by` is indexed,
    the others are quarantined with `reason` (so output names, the new UIDs, stay unique)."""

    key: tuple[str, ...]
    keep_first_by: tuple[str, ...]
    reason: str

    def apply(self, records: list[IndexedImage]) -> list[IndexedImage | Quarantined]:
        """The rule on a list of records, for readers and tests; Spark applies it as a window."""
        seen, out = set(), []
        for record in sorted(records, key=lambda r: tuple(getattr(r, c) for c in self.keep_first_by)):
            key = tuple(getattr(record, c) for c in self.key)
            if key in seen:
                out.append(Quarantined(record.date, record.site, record.source_path, record.size_bytes,
                                       record.sha256, self.reason))
            else:
                seen.add(key)
                out.append(record)
        return out


DUPLICATES = DuplicateRule(("date", "site", "sop_instance_uid"), ("source_path",),
                           "duplicate SOP Instance UID in this site-day")

LIST = BatchStep(Stateless(list_folder), SiteDayFolder, schema_of(ListedFile))
INDEX = BatchStep(Stateless(index_file), ListedFile, outcome_schema(IndexedImage))
