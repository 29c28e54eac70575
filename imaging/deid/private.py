"""Private attributes: removed, except reviewed numeric ones under Retain Safe Private.

A private data element (gggg,xxee), gggg odd, belongs to the block whose creator string is in
(gggg,00xx). It is kept only if (group, creator, ee) is on the safe list and its value is
numbers of the listed VR. The engine adds back a creator only for blocks that kept an element.
"""

from __future__ import annotations

import struct

from pydicom.dataelem import DataElement
from pydicom.dataset import Dataset

from .profile import DeidProfile
from .values import as_list, valid_number_string

_STRUCT = {"US": "H", "SS": "h", "UL": "I", "SL": "i", "UV": "Q", "SV": "q", "FL": "f", "FD": "d"}


def creator_of(ds: Dataset, group: int, element: int) -> str | None:
    """The creator string of the block of (group, element), or None if it has none."""
    block = element >> 8
    if block < 0x10:  # (gggg,0001-0FFF) are creators or reserved, never private data
        return None
    creator = ds.get((group << 16) | block)
    if creator is None or not isinstance(creator.value, str):
        return None
    return creator.value.strip()


def _numbers(elem: DataElement, vr: str, little_endian: bool):
    """The element's value as numbers of `vr`, or None if it is not exactly that."""
    value = elem.value
    if elem.VR == "UN" and isinstance(value, (bytes, bytearray)):  # implicit VR: decode as listed
        if vr in _STRUCT:
            size = struct.calcsize(_STRUCT[vr])
            if not value or len(value) % size:
                return None
            fmt = ("<" if little_endian else ">") + _STRUCT[vr] * (len(value) // size)
            value = list(struct.unpack(fmt, value))
        else:
            try:
                value = value.decode("ascii").strip(" \x00").split("\\")
            except UnicodeDecodeError:
                return None
    elif elem.VR != vr:
        return None
    values = as_list(value)
    if not values:
        return None
    if vr in ("DS", "IS"):
        if not valid_number_string(vr, values):
            return None
        values = [str(v).strip() for v in values]
    elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return values[0] if len(values) == 1 else values


def safe_element(ds: Dataset, elem: DataElement, profile: DeidProfile, little_endian: bool):
    """The element to publish for private data element `elem` of `ds`, or None to drop it."""
    if profile.private != "C" or not profile.safe_private:
        return None
    group, element = elem.tag.group, elem.tag.element
    creator = creator_of(ds, group, element)
    vr = profile.safe_private.get((group, creator, element & 0xFF)) if creator else None
    if vr is None:
        return None
    value = _numbers(elem, vr, little_endian)
    return None if value is None else DataElement(elem.tag, vr, value)
