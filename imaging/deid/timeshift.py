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
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from pydicom.datadict import DicomDictionary

from imaging.pseudonym import DAY_SECONDS as DAY
from imaging.pseudonym import DateTimeShift

_DA = re.compile(r"^(\d{4})\.?(\d{2})\.?(\d{2})$")  # YYYYMMDD, or ACR-NEMA YYYY.MM.DD
_TM = re.compile(r"^(\d{2})(?::?(\d{2})(?::?(\d{2})(\.\d{1,6})?)?)?$")  # HH[MM[SS[.F]]], ACR-NEMA colons
_DT = re.compile(r"^(\d{4})(\d{2})(\d{2})((?:\d{2}){0,3}(?:\.\d{1,6})?)([+-]\d{4})?$")


@dataclass(frozen=True)
class _Time:
    seconds: int  # of the day, from the given components (missing ones are 0)
    components: int  # 1 (HH), 2 (HHMM) or 3 (HHMMSS)
    fraction: str  # ".F..." or ""


def _parse_date(value: str) -> dt.date | None:
    match = _DA.match(str(value).strip())
    if not match:
        return None
    try:
        return dt.date(*(int(g) for g in match.groups()))
    except ValueError:
        return None


def _parse_time(value: str) -> _Time | None:
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
    return _Time(hour * 3600 + minute * 60 + second, components, fraction or "")


def _format_time(seconds: int, components: int, fraction: str) -> str:
    seconds %= DAY
    parts = (seconds // 3600, seconds // 60 % 60, seconds % 60)
    return "".join(f"{p:02d}" for p in parts[:components]) + (fraction if components == 3 else "")


def _add(day: dt.date, time_seconds: int, shift: DateTimeShift) -> tuple[dt.date, int] | None:
    """(date, seconds of day) of a date-time moved by the shift; None outside the calendar."""
    total = time_seconds + shift.seconds
    try:
        return day + dt.timedelta(days=shift.days + total // DAY), total % DAY
    except OverflowError:
        return None


def shift_date(value: str, shift: DateTimeShift) -> str | None:
    """A DA with no paired time: the date of its midnight after the shift (day + shift.days)."""
    day = _parse_date(value)
    if day is None:
        return None
    moved = _add(day, 0, shift)
    return moved[0].strftime("%Y%m%d") if moved else None


def shift_time(value: str, shift: DateTimeShift) -> str | None:
    """A TM moved by the sub-day part of the shift (the time of day its date-time would get)."""
    time = _parse_time(value)
    if time is None:
        return None
    return _format_time(time.seconds + shift.seconds, time.components, time.fraction)


def shift_paired_date(date_value: str, time_value: str, shift: DateTimeShift) -> str | None:
    """A DA paired with a TM: the date of the shifted date-time (may be one day after day + days)."""
    day, time = _parse_date(date_value), _parse_time(time_value)
    if day is None:
        return None
    if time is None:  # the time is unusable (and will be emptied): the date alone decides
        return shift_date(date_value, shift)
    moved = _add(day, time.seconds, shift)
    return moved[0].strftime("%Y%m%d") if moved else None


def shift_datetime(value: str, shift: DateTimeShift) -> str | None:
    """A DT moved as one date-time; a DT with only a date moves like a DA. Suffix (&ZZXX) kept."""
    match = _DT.match(str(value).strip())
    if not match:
        return None
    year, month, day_text, rest, suffix = match.groups()
    day = _parse_date(year + month + day_text)
    if day is None:
        return None
    if not rest:
        shifted = shift_date(year + month + day_text, shift)
        return None if shifted is None else shifted + (suffix or "")
    time = _parse_time(rest)
    if time is None:
        return None
    moved = _add(day, time.seconds, shift)
    if moved is None:
        return None
    return moved[0].strftime("%Y%m%d") + _format_time(moved[1], time.components, time.fraction) + (suffix or "")


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
