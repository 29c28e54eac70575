"""Modified dates and times: one keyed per-patient offset applied to every DA, TM and DT.

Under Retain Longitudinal Temporal Information with Modified Dates every date and time of a
patient moves by the same offset, which is *not* a whole number of days, so the time of day
changes too and every interval within the patient is kept exactly:

- a DT, and a DA with its paired TM in the same dataset (StudyDate + StudyTime, ...), are one
  date-time: they move by the full offset, so a late time can land on the next shifted day;
- a DA with no usable paired time stands for the start of its day: it moves by
  `days` (the whole-day part of the offset, rounded down), which is what the date of its
  midnight becomes;
- a TM moves by the sub-day part (`seconds`), modulo a day: the same time of day a paired
  date-time gets, so a time with or without its date publishes the same value.

Precision is kept: an `HHMM` stays `HHMM` (seconds are computed, then cut), fractions of a
second and a DT's UTC offset suffix are kept as they were. A value that is not a real date or
time (`1990/01/`, `25:00`) cannot be shifted and is never kept: the caller empties it.

The values are parsed and written by the one DICOM header module, `imaging.header` (a DA by
`dicom_date(..., acr_nema=True)`: YYYYMMDD or YYYY.MM.DD; a TM by `dicom_time`, a DT by
`dicom_datetime`); this module only moves them.
"""

from __future__ import annotations

import datetime as dt
import re

from pydicom.datadict import DicomDictionary

from imaging.pseudonym import DAY_SECONDS as DAY
from imaging.pseudonym import DateTimeShift
from imaging.header import dicom_date, dicom_datetime, dicom_time, format_date, format_time


def _add(day: dt.date, time_seconds: int, shift: DateTimeShift) -> tuple[dt.date, int] | None:
    """(date, seconds of day) of a date-time moved by the shift; None outside the calendar."""
    total = time_seconds + shift.seconds
    try:
        return day + dt.timedelta(days=shift.days + total // DAY), total % DAY
    except OverflowError:
        return None


def shift_date(value: str, shift: DateTimeShift) -> str | None:
    """A DA with no paired time: the date of its midnight after the shift (day + shift.days)."""
    day = dicom_date(value, acr_nema=True)
    if day is None:
        return None
    moved = _add(day, 0, shift)
    return format_date(moved[0]) if moved else None


def shift_time(value: str, shift: DateTimeShift) -> str | None:
    """A TM moved by the sub-day part of the shift (the time of day its date-time would get)."""
    time = dicom_time(value)
    if time is None:
        return None
    return format_time((time.seconds + shift.seconds) % DAY, time.components, time.fraction)


def shift_paired_date(date_value: str, time_value: str, shift: DateTimeShift) -> str | None:
    """A DA paired with a TM: the date of the shifted date-time (may be one day after day + days)."""
    day, time = dicom_date(date_value, acr_nema=True), dicom_time(time_value)
    if day is None:
        return None
    if time is None:  # the time is unusable (and will be emptied): the date alone decides
        return shift_date(date_value, shift)
    moved = _add(day, time.seconds, shift)
    return format_date(moved[0]) if moved else None


# YYYYMMDDHHMMSS[.F][&ZZXX], the form devices write: moved without the general parser (the same result).
_FULL_DT = re.compile(r"(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\.\d{1,6})?([+-]\d{4})?")


def shift_datetime(value: str, shift: DateTimeShift) -> str | None:
    """A DT moved as one date-time; a DT with only a date moves like a DA. Suffix (&ZZXX) kept."""
    text = str(value).strip()
    full = _FULL_DT.fullmatch(text)
    if full is not None:  # as dicom_datetime reads it: a leap second (or more) counts as :59
        year, month, day_text, hh, mm, ss, fraction, suffix = full.groups()
        hour, minute = int(hh), int(mm)
        if hour > 23 or minute > 59:
            return None
        try:
            day = dt.date(int(year), int(month), int(day_text))
        except ValueError:
            return None
        moved = _add(day, hour * 3600 + minute * 60 + min(int(ss), 59), shift)
        if moved is None:
            return None
        return format_date(moved[0]) + format_time(moved[1], 3, fraction or "") + (suffix or "")
    parsed = dicom_datetime(text)
    if parsed is None:
        return None
    time = parsed.time
    moved = _add(parsed.date, time.seconds if time else 0, shift)
    if moved is None:
        return None
    if time is None:  # only a date: the date of its midnight after the shift, as shift_date
        return format_date(moved[0]) + parsed.suffix
    return format_date(moved[0]) + format_time(moved[1], time.components, time.fraction) + parsed.suffix


def _pairs() -> dict[int, int]:
    """DA tag -> its TM partner's tag, for every pair the data dictionary names alike.

    StudyDate/StudyTime, AcquisitionDate/AcquisitionTime, DateOfLastCalibration/TimeOfLastCalibration,
    the SR content item's Date/Time...: the TM keyword with one "Time" read as "Date" is a DA keyword.
    Retired attributes are included (old files carry them: OverlayDate/OverlayTime, CurveDate/CurveTime).
    """
    by_keyword = {entry[4]: (tag, entry[0]) for tag, entry in DicomDictionary.items() if entry[4]}
    pairs = {}
    for keyword, (tag, vr) in by_keyword.items():
        if vr != "TM":
            continue
        for at in [m.start() for m in re.finditer("Time", keyword)]:
            partner = by_keyword.get(keyword[:at] + "Date" + keyword[at + 4:])
            if partner and partner[1] == "DA":
                pairs[partner[0]] = tag
                break
    return pairs


DATE_TIME_PAIRS: dict[int, int] = _pairs()
