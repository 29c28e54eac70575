"""The DICOM header, once: which keyword fills which record column, reading values, and DA/TM/DT.

`COLUMNS` is the one table of header keyword -> record column. The index reads `INDEXED` from a
landing file (`index.read_header`; its mandatory attributes are named by `keyword`), the anonymizer
reads `PUBLISHED` from the de-identified dataset (`anonymize.AnonymizeJob`), and the column lineage
(`imaging.governance.lineage`) says each published column comes from its keyword: all derive from this
table.

The value representations of dates and times (PS3.5 6.2) are parsed and formatted here and nowhere
else: DA (`dicom_date`, `format_date`, `DA_FORMAT`), TM (`dicom_time`, `format_time`) and DT
(`dicom_datetime`). The index's study-date rule, the anonymizer's ISO study date and age at scan, the
de-identification's date-time shift (`imaging.deid.timeshift`) and the Spark quality checks
(`assets.quality.study_date`, through `DA_FORMAT`) all read them from here.

Executor code, and a leaf: imports nothing from `imaging` (so `imaging.deid`, which uses the DA/TM/DT
parsing, can import it without a cycle) and pydicom only for type checking (values are read from a
dataset the caller already holds). Pure functions: no clock, no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
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


def keyword(column: str) -> str:
    """The DICOM keyword of a record column read from one attribute (`keyword("patient_id")` is
    "PatientID"); a ValueError for a column read from several (laterality)."""
    (only,) = COLUMNS[column]
    return only


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


# Dates and times: DA, TM and DT (PS3.5 6.2).

DA_FORMAT = "%Y%m%d"  # a DA as a `strftime` / `strptime` format (as a Spark pattern: `java_date_pattern`)

_DA = re.compile(r"^(\d{4})\.?(\d{2})\.?(\d{2})$")  # YYYYMMDD, or ACR-NEMA YYYY.MM.DD
_TM = re.compile(r"^(\d{2})(?::?(\d{2})(?::?(\d{2})(\.\d{1,6})?)?)?$")  # HH[MM[SS[.F]]], ACR-NEMA colons
_DT = re.compile(r"^(\d{4})(\d{2})(\d{2})((?:\d{2}){0,3}(?:\.\d{1,6})?)([+-]\d{4})?$")
_DAY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class DicomTime:
    """A TM value: the time of day it names and the precision it was written with."""

    seconds: int  # of the day, from the given components (missing ones are 0)
    components: int  # 1 (HH), 2 (HHMM) or 3 (HHMMSS)
    fraction: str  # ".F..." (only with seconds) or ""


@dataclass(frozen=True)
class DicomDateTime:
    """A DT value: its date, its time of day (None when the DT holds a date only) and its suffix."""

    date: dt.date
    time: DicomTime | None
    suffix: str  # the UTC offset "&ZZXX" ("+0100", "-0500") as written, or ""


def dicom_date(text: str | None, *, lenient: bool = False, acr_nema: bool = False) -> dt.date | None:
    """A DICOM DA value (YYYYMMDD) as a date, or None when absent, malformed or not a real date.

    Three reads, each kept so that what every caller has always read does not change:

    - strict (the default): exactly eight digits, nothing around them. The index's study-date rule.
    - `acr_nema`: surrounding whitespace trimmed, then YYYYMMDD or the ACR-NEMA YYYY.MM.DD; takes any
      value (`str(value)`). What the de-identification's time shift reads every DA (and a DT's date) with.
    - `lenient`: what the anonymizer has always read a study date with (`strptime` `DA_FORMAT` after
      trimming whitespace, which also takes one-digit months and days), kept so the published dates
      and ages of an odd value do not change.
    """
    if lenient and acr_nema:
        raise ValueError("dicom_date: lenient or acr_nema, not both")
    if acr_nema:
        match = _DA.match(str(text).strip())
        if not match:
            return None
        try:
            return dt.date(*(int(g) for g in match.groups()))
        except ValueError:
            return None
    if lenient:
        if not text:
            return None
        text = text.strip()
        if len(text) == 8 and text.isascii() and text.isdigit():  # what strptime reads eight digits as, faster
            try:
                return dt.date(int(text[:4]), int(text[4:6]), int(text[6:]))
            except ValueError:
                return None
        try:
            return dt.datetime.strptime(text, DA_FORMAT).date()
        except ValueError:
            return None
    if not text or len(text) != 8 or not text.isdigit():
        return None
    try:
        return dt.date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        return None


def format_date(day: dt.date) -> str:
    """A date as a DA value, YYYYMMDD (`DA_FORMAT`)."""
    return day.strftime(DA_FORMAT)


def dicom_time(value) -> DicomTime | None:
    """A DICOM TM value (HH, HHMM, HHMMSS or HHMMSS.FFFFFF; the ACR-NEMA HH:MM:SS too), surrounding
    whitespace trimmed, or None when it is not a real time (`25:00`, `2400`, a fraction without seconds).

    A leap second (`60`) counts as :59. Takes any value (`str(value)`).
    """
    match = _TM.match(str(value).strip())
    if not match:
        return None
    hh, mm, ss, fraction = match.groups()
    hour, minute, second = int(hh), int(mm or 0), min(int(ss or 0), 59)  # a leap second counts as :59
    if hour > 23 or minute > 59 or second > 60:
        return None
    if fraction is not None and ss is None:
        return None
    components = 1 + (mm is not None) + (ss is not None)
    return DicomTime(hour * 3600 + minute * 60 + second, components, fraction or "")


def format_time(seconds: int, components: int, fraction: str) -> str:
    """A time of day (0 <= seconds < 86400) as a TM of the given precision: `components` of HH, MM, SS,
    then `fraction` when the seconds are written. The inverse of `dicom_time` for its canonical forms."""
    if not 0 <= seconds < _DAY_SECONDS:
        raise ValueError("format_time: seconds must be a time of day")
    parts = (seconds // 3600, seconds // 60 % 60, seconds % 60)
    return "".join(f"{p:02d}" for p in parts[:components]) + (fraction if components == 3 else "")


def dicom_datetime(value) -> DicomDateTime | None:
    """A DICOM DT value (YYYYMMDD, then optionally HH[MM[SS[.F]]], then optionally a &ZZXX UTC offset),
    surrounding whitespace trimmed, or None when it has no full real date or its time part is not a
    real time. Takes any value (`str(value)`)."""
    match = _DT.match(str(value).strip())
    if not match:
        return None
    year, month, day_text, rest, suffix = match.groups()
    day = dicom_date(year + month + day_text, acr_nema=True)
    if day is None:
        return None
    time = None
    if rest:
        time = dicom_time(rest)
        if time is None:
            return None
    return DicomDateTime(day, time, suffix or "")
