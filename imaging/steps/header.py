"""The DICOM header, once: reading values, parsing DA dates, and which keyword fills which record column.

`COLUMNS` is the one table of header keyword -> record column. The index reads `INDEXED` from a
landing file (`index.read_header`), the anonymizer reads `PUBLISHED` from the de-identified dataset
(`anonymize.AnonymizeJob`), and the column lineage (`imaging.governance.lineage`) says each published
column comes from its keyword: all three derive from this table. Executor code: imports pydicom only
for type checking (values are read from a dataset the caller already holds).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import pydicom

# record column -> header keywords, the first present wins (Image Laterality, else the series' Laterality)
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "sop_instance_uid": ("SOPInstanceUID",),
    "study_instance_uid": ("StudyInstanceUID",),
    "series_instance_uid": ("SeriesInstanceUID",),
    "sop_class_uid": ("SOPClassUID",),
    "modality": ("Modality",),
    "laterality": ("ImageLaterality", "Laterality"),
    "patient_id": ("PatientID",),
    "issuer_of_patient_id": ("IssuerOfPatientID",),
    "study_date": ("StudyDate",),
    "study_time": ("StudyTime",),
    "manufacturer": ("Manufacturer",),
    "model": ("ManufacturerModelName",),
    "rows": ("Rows",),
    "columns": ("Columns",),
    "number_of_frames": ("NumberOfFrames",),
}
INTEGERS = frozenset({"rows", "columns", "number_of_frames"})  # read with `header_int`
DEFAULTS: Mapping[str, object] = {"number_of_frames": 1}  # absent (or 0): a single frame

# What an `IndexedImage` reads from the landing file (its transfer syntax comes from the file meta).
INDEXED = tuple(COLUMNS)
# What a `PublishedImage` reads from the de-identified dataset (the patient pseudonym is its PatientID,
# named apart; study_date is then written as ISO 8601), in the manifest's order.
PUBLISHED = ("study_instance_uid", "series_instance_uid", "sop_instance_uid", "sop_class_uid", "modality",
             "laterality", "study_date", "manufacturer", "model", "rows", "columns", "number_of_frames")


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
    return column_value(ds, "laterality")


def column_value(ds: pydicom.Dataset, column: str):
    """The value of one record column, read from its keywords in `COLUMNS`."""
    read = header_int if column in INTEGERS else header_text
    value = None
    for keyword in COLUMNS[column]:
        value = value or read(ds, keyword)
    return value or DEFAULTS.get(column, value)


def read_columns(ds: pydicom.Dataset, columns: tuple[str, ...]) -> dict:
    """{column: value} for `columns` (names of `COLUMNS`)."""
    return {column: column_value(ds, column) for column in columns}


def dicom_date(text: str | None, *, lenient: bool = False) -> dt.date | None:
    """A DICOM DA value (YYYYMMDD) as a date, or None when absent or malformed.

    Strict by default: exactly eight digits. `lenient` is what the anonymizer has always read a study
    date with (`strptime` '%Y%m%d' after trimming spaces, which also takes one-digit months and days),
    kept so the published dates and ages of an odd value do not change.
    """
    if lenient:
        if not text:
            return None
        try:
            return dt.datetime.strptime(text.strip(), "%Y%m%d").date()
        except ValueError:
            return None
    if not text or len(text) != 8 or not text.isdigit():
        return None
    try:
        return dt.date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        return None
