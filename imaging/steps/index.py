"""Header-only indexing of landing-zone DICOM files (the executor side of raw_image_index).

`list_folder` finds a site-day's files; `index_file` turns one into an `IndexedImage` or a
`Quarantined` record with the reason. The file is streamed once for its sha256, then parsed up
to (not including) the pixel data. `problem` is the rule for what an indexed instance must be:
it carries the `MANDATORY` attributes, its UIDs are UIDs (digits and dots, at most 64
characters) and its instance UIDs are not the standard's own, its PatientID is no placeholder,
its study date is not after the day it is indexed; an instance breaking any of it is
quarantined with a fixed reason naming keywords, never values. `DUPLICATES` is the rule for two
files holding one instance.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import struct
from dataclasses import dataclass
from typing import Iterator

from imaging import fs as fsx
from imaging.records import (BatchStep, IndexedImage, ListedFile, Quarantined, SiteDayFolder, Stateless, outcome_schema,
                             schema_of)
from imaging.header import INDEXED, dicom_date, header_text, keyword, read_columns

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


# Every indexed instance carries these (record field, DICOM keyword from header.COLUMNS): the UIDs
# address and name it, the patient id links and pseudonymises it (without one, every such image would
# share the pseudonym of the empty id), the modality selects it into cohorts.
MANDATORY = tuple((column, keyword(column)) for column in ("patient_id", "study_instance_uid", "series_instance_uid",
                                                           "sop_instance_uid", "sop_class_uid", "modality"))
MISSING_MANDATORY = "missing mandatory attribute"  # the reason's fixed start; the attributes' keywords follow

# UIDs (PS3.5 9.1): digits and dots, at most 64 characters, no empty component. Checked where they are
# read, so no later step (a file name, a join, a release) ever sees another shape.
UID_PATTERN = re.compile(r"[0-9]+(?:\.[0-9]+)*")
UID_MAX = 64
UIDS = tuple(pair for pair in MANDATORY if pair[1].endswith("UID"))
MALFORMED_UID = "malformed UID"  # the reason's fixed start; the attributes' keywords follow
# Only the standard's own UIDs live under its root; an instance, series or study there would be kept
# verbatim by the de-identification (a registered UID is not replaced) instead of getting its 2.25 UID.
DICOM_ROOT = "1.2.840.10008."
INSTANCE_UIDS = tuple(pair for pair in UIDS if pair[0] != "sop_class_uid")
UID_UNDER_DICOM_ROOT = "instance UID under the DICOM root"
PLACEHOLDER_PATIENT_ID = "placeholder PatientID"
STUDY_DATE_AFTER_INDEXING = "study date after the day it was indexed"


def is_uid(value: str | None) -> bool:
    """Whether `value` has the shape of a DICOM UID (digits and dots, at most 64 characters)."""
    return value is not None and len(value) <= UID_MAX and UID_PATTERN.fullmatch(value) is not None


@dataclass(frozen=True)
class IndexRules:
    """What the index holds back besides unreadable files, beyond the file itself: linkage keys that
    are not identifiers (`placeholders`, compared trimmed and upper-cased, from platform/quality.yaml)
    and study dates after `today` (ISO, the run's day in UTC; None skips that rule)."""

    placeholders: frozenset[str] = frozenset()
    today: str | None = None


def missing_mandatory(image: IndexedImage) -> tuple[str, ...]:
    """The DICOM keywords of the mandatory attributes `image` lacks (absent, empty or blank)."""
    return tuple(keyword for field_name, keyword in MANDATORY if not (getattr(image, field_name) or "").strip())


def problem(image: IndexedImage, rules: IndexRules) -> str | None:
    """Why `image` cannot be indexed, as a fixed phrase naming keywords (never values); None if it can.

    Each rule guards an ERROR check of raw_image_index (platform/quality.yaml, expectations), so a
    value wrong in one file quarantines that file instead of failing the site-day.
    """
    missing = missing_mandatory(image)
    if missing:
        return f"{MISSING_MANDATORY}{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
    malformed = [keyword for name, keyword in UIDS if not is_uid(getattr(image, name))]
    if malformed:
        return f"{MALFORMED_UID}: {', '.join(malformed)}"
    rooted = [keyword for name, keyword in INSTANCE_UIDS if getattr(image, name).startswith(DICOM_ROOT)]
    if rooted:
        return f"{UID_UNDER_DICOM_ROOT}: {', '.join(rooted)}"
    if image.patient_id.strip().upper() in rules.placeholders:
        return PLACEHOLDER_PATIENT_ID
    if rules.today is not None:
        study = dicom_date(image.study_date)
        if study is not None and study.isoformat() > rules.today:
            return STUDY_DATE_AFTER_INDEXING
    return None


def index_rule(image: IndexedImage, rules: IndexRules) -> IndexedImage | Quarantined:
    """The image, or its quarantine record with the reason (it was read: its sha256 is kept)."""
    reason = problem(image, rules)
    if reason is None:
        return image
    return Quarantined(date=image.date, site=image.site, source_path=image.source_path, size_bytes=image.size_bytes,
                       sha256=image.sha256, reason=reason)


def read_header(handle, listed: ListedFile) -> IndexedImage:
    """Index record of one open file; raises on anything that is not a usable Part 10 instance.

    A file up to `IN_MEMORY` bytes is read once, in one call, then hashed and parsed from memory
    (pydicom reads a header element by element: from memory each read is a C call, through the
    filesystem's file object a Python one, after a second pass over the file). Larger files are
    streamed for the hash and their header read again from the file. Either way the bytes hashed
    and parsed are the same, so the records are too.
    """
    import pydicom  # here, not at import time: the driver of a run may never need it

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
        **read_columns(ds, INDEXED),
        transfer_syntax_uid=header_text(meta, "TransferSyntaxUID") if meta is not None else None,
    )


def reason_for(error: Exception) -> str:
    """A quarantine reason that names the failure, never a value read from the file."""
    from pydicom.errors import InvalidDicomError

    if isinstance(error, NotAnInstance):
        return str(error)
    if isinstance(error, InvalidDicomError):
        return "not a DICOM Part 10 file"
    if isinstance(error, struct.error):  # pydicom unpacking fewer bytes than a header says: a short read
        return "truncated or unreadable file (short read)"
    if isinstance(error, (EOFError, OSError)) or "truncat" in str(error).lower():
        return f"truncated or unreadable file ({type(error).__name__})"
    return f"unreadable DICOM header ({type(error).__name__})"


def index_file(listed: ListedFile, rules: IndexRules = IndexRules()) -> IndexedImage | Quarantined:
    """One landing file -> its index record, or a quarantine record; errors stay with their file.

    A readable instance that breaks a rule of `problem` is quarantined with its sha256 (it was read).
    """
    try:
        if listed.size_bytes == 0:
            raise NotAnInstance("empty file")
        with fsx.open_read(listed.source_path) as handle:  # the filesystem is cached per process by fsspec
            image = read_header(handle, listed)
    except Exception as error:  # noqa: BLE001 - every failure becomes a quarantine record
        return Quarantined(date=listed.date, site=listed.site, source_path=listed.source_path,
                           size_bytes=listed.size_bytes, sha256=None, reason=reason_for(error))
    return index_rule(image, rules)


@dataclass(frozen=True)
class IndexJob:
    """The index of one run; `setup` for a `BatchStep` (the rules travel with the task)."""

    rules: IndexRules

    def __call__(self):
        return functools.partial(index_file, rules=self.rules)

    def step(self) -> BatchStep:
        return BatchStep(self, ListedFile, outcome_schema(IndexedImage))


@dataclass(frozen=True)
class DuplicateRule:
    """Two files holding one instance in one site-day: the first by `keep_first_by` is indexed,
    the others are quarantined with `reason` (so output names, the new UIDs, stay unique)."""

    key: tuple[str, ...]
    keep_first_by: tuple[str, ...]
    reason: str

    def apply(self, records: list[IndexedImage | Quarantined]) -> list[IndexedImage | Quarantined]:
        """The rule on a list of records, for readers and tests; Spark applies it as a window."""
        seen, out = set(), []
        for record in sorted(records, key=lambda r: tuple(getattr(r, c) for c in self.keep_first_by)):
            if isinstance(record, Quarantined):
                out.append(record)
                continue
            key = tuple(getattr(record, c) for c in self.key)
            if key in seen:
                out.append(Quarantined(date=record.date, site=record.site, source_path=record.source_path,
                                       size_bytes=record.size_bytes, sha256=record.sha256, reason=self.reason))
            else:
                seen.add(key)
                out.append(record)
        return out


DUPLICATES = DuplicateRule(("date", "site", "sop_instance_uid"), ("source_path",),
                           "duplicate SOP Instance UID in this site-day")
# After DUPLICATES, one instance in two site-days (a resend landing on another day): the first by date,
# site and path among a run's site-days is indexed, and a copy whose instance is already indexed in a
# site-day outside the run is quarantined too, so every SOP Instance UID is in one partition of the
# table (the ERROR check sop_instance_uid_in_one_partition guards this) and its de-identified file,
# named by its new UID, is written once.
ELSEWHERE = DuplicateRule(("sop_instance_uid",), ("date", "site", "source_path"),
                          "SOP Instance UID indexed in another site-day")

LIST = BatchStep(Stateless(list_folder), SiteDayFolder, schema_of(ListedFile))
