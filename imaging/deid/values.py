"""Value-level rules: dummy (D) and empty (Z) values per VR, number checks (dates and times: timeshift.py).

All pure functions of their arguments; none keeps an input value it does not mean to keep.
"""

from __future__ import annotations

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
