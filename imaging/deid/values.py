"""Value-level rules: dummy (D) and empty (Z) values per VR, date shifting, number checks.

All pure functions of their arguments; none keeps an input value it does not mean to keep.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from pydicom.dataelem import empty_value_for_VR
from pydicom.multival import MultiValue

from .vr import BINARY_NUMBERS, BYTES, NUMBER_STRINGS

DUMMY_TEXT = "ANONYMOUS"  # valid for every text VR, CS and AE included (upper case, <= 16 chars)
DUMMY_DATE = "19000101"
DUMMY_DATETIME = "19000101000000"
DUMMY_TIME = "000000"
DUMMY_AGE = "000Y"
DUMMY_BYTES = b"\x00" * 8  # a multiple of every binary VR's unit size

_DS = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")
_IS = re.compile(r"^\s*[+-]?\d+\s*$")
_DA = re.compile(r"^(\d{4})\.?(\d{2})\.?(\d{2})$")  # YYYYMMDD, or ACR-NEMA YYYY.MM.DD
_DT = re.compile(r"^(\d{4})(\d{2})(\d{2})(\d{0,6}(?:\.\d{1,6})?)([+-]\d{4})?$")


def as_list(value) -> list:
    """The values of an element as a list (empty for None/empty)."""
    if value is None or value == "" or value == b"":
        return []
    if isinstance(value, (list, tuple, MultiValue)):
        return list(value)
    return [value]  # str, bytes, numbers, PersonName (which is iterable, but one value)


def empty(vr: str):
    """A zero-length value for the VR (action Z)."""
    return empty_value_for_VR(vr)


def dummy(vr: str, count: int = 1):
    """A non-zero-length value that carries no information (action D).

    Numbers become 0, keeping the number of values so value multiplicity rules still hold.
    """
    count = max(count, 1)
    if vr in BINARY_NUMBERS:
        return [0] * count if count > 1 else 0
    if vr in NUMBER_STRINGS:
        return ["0"] * count if count > 1 else "0"
    if vr in BYTES:
        return DUMMY_BYTES
    return {"DA": DUMMY_DATE, "DT": DUMMY_DATETIME, "TM": DUMMY_TIME, "AS": DUMMY_AGE}.get(vr, DUMMY_TEXT)


def valid_number_string(vr: str, value) -> bool:
    """True if every value of a DS/IS is a finite number (a DS holding a name is not)."""
    pattern = _DS if vr == "DS" else _IS
    for item in as_list(value):
        text = str(item)
        if not pattern.match(text):
            return False
        if vr == "DS" and not math.isfinite(float(text)):
            return False
    return True


def shift_date(value: str, days: int) -> str | None:
    """YYYYMMDD shifted by `days`, or None if `value` is not a full, real calendar date."""
    match = _DA.match(str(value).strip())
    if not match:
        return None
    try:
        day = dt.date(*(int(g) for g in match.groups()))
        return (day + dt.timedelta(days=days)).strftime("%Y%m%d")
    except (ValueError, OverflowError):
        return None


def shift_datetime(value: str, days: int) -> str | None:
    """A DT with its date part shifted (time and offset kept), or None if it has no full date."""
    match = _DT.match(str(value).strip())
    if not match:
        return None
    year, month, day, rest, offset = match.groups()
    shifted = shift_date(year + month + day, days)
    if shifted is None or (rest and not re.match(r"^(\d{2}){1,3}(\.\d{1,6})?$", rest)):
        return None
    return shifted + rest + (offset or "")


def shift_all(vr: str, value, days: int):
    """Shift every value of a DA/DT element; None if any value cannot be shifted (never keep it)."""
    shift = shift_date if vr == "DA" else shift_datetime
    out = [shift(str(v), days) for v in as_list(value)]
    if not out:
        return ""
    if any(v is None for v in out):
        return None
    return out[0] if len(out) == 1 else out
