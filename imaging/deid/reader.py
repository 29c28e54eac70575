"""Explicit VR little endian elements read from bytes: each element's tag, VR and value bytes, nothing decoded.

The common case of the landing zone (every compressed syntax and Explicit VR Little Endian) read in one pass
over the file's first bytes, sequences and items of defined and undefined length included, straight into the
walk's datasets (imaging.deid.element: `Items` of `Element`s): an element's value is its bytes as they are in
the file; a sequence's, its items (each an `Items`) and a view of its bytes.

Only canonical forms are read here, so what is read is exactly what pydicom's reader would read: a preamble
and "DICM", the file meta in group 0002, a transfer syntax with an explicit VR little endian dataset, every
VR one of the standard's, tags ascending in every dataset, items that are items, lengths inside the bytes,
undefined lengths only on sequences, items and the top level's pixel data. Anything else (implicit VR, big
endian, deflated, a command group, an element cut by the end of what was read, tags out of order, a UN of
undefined length...) raises `Refused` and the caller reads the file with pydicom instead
(imaging.deid.part10): such files keep every behaviour they always had.

The top level stops at the pixel data (7FE0,0010), which is located, never read: `Top.pixels` says where it
starts; the caller walks its items and reads what follows it (`dataset`).
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct

from pydicom.uid import UID

from .element import Element, Items

_ELEMENT = Struct("<HH2sH").unpack_from
_LONG_LENGTH = Struct("<L").unpack_from
_ITEM = Struct("<HHL").unpack_from

# pydicom's EXPLICIT_VR_LENGTH_32: a 2-byte reserved field, then a 4-byte length.
LONG_VRS = frozenset({"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"})
SHORT_VRS = frozenset({"AE", "AS", "AT", "CS", "DA", "DS", "DT", "FD", "FL", "IS", "LO", "LT", "PN", "SH", "SL",
                       "SS", "ST", "TM", "UI", "UL", "US"})
_VRS = {vr.encode("ascii"): vr for vr in LONG_VRS | SHORT_VRS}
_LONG = frozenset(vr.encode("ascii") for vr in LONG_VRS)

UNDEFINED = 0xFFFFFFFF
ITEM, ITEM_END, SEQUENCE_END = 0xFFFEE000, 0xFFFEE00D, 0xFFFEE0DD
PIXEL_DATA = 0x7FE00010
FLOAT_PIXELS = (0x7FE00008, 0x7FE00009)
PREAMBLE = 128


class Refused(Exception):
    """Not a canonical explicit VR little endian form: read by pydicom instead."""


@dataclass(frozen=True)
class Top:
    """A file's meta and its top-level elements up to the pixel data."""

    meta: list  # group 0002's elements, as (tag, VR, value)
    syntax: UID
    elements: Items  # before the pixel data (all of them when there is none)
    pixels: int | None  # offset of the pixel data element's tag, or None
    end: int  # where reading stopped: the pixel data's tag, or the end of the dataset


def top(data: bytes) -> Top:
    """The meta and the dataset up to its pixel data, from the first bytes of a file (`data`)."""
    if len(data) < PREAMBLE + 4 or data[PREAMBLE:PREAMBLE + 4] != b"DICM":
        raise Refused
    meta, pos = _group_0002(data, PREAMBLE + 4)
    syntax = _syntax(meta)
    end = len(data)
    if pos + 4 <= end and data[pos:pos + 2] == b"\0\0":
        raise Refused  # a command group (0000,eeee): pydicom reads it as implicit VR
    elements = Items()
    stopped = _elements(data, memoryview(data), pos, end, elements, undefined_item=False, top=True)
    return Top(meta, syntax, elements, stopped if stopped < end else None, stopped)


def dataset(data: bytes, start: int, end: int, into: Items, after: int = -1) -> None:
    """The elements in data[start:end] added to `into` (a top level's after its pixel data: tags above `after`)."""
    _elements(data, memoryview(data), start, end, into, undefined_item=False, top=False, last=after)


def meta_elements(data: bytes) -> list:
    """(tag, VR, value) of the group 0002 elements at the start of `data` (a file meta as written)."""
    return _group_0002(data, 0)[0]


def pixel_header(data: bytes, pos: int) -> tuple[str, int, int]:
    """(VR, value length, value offset) of the pixel data element whose tag is at `pos`."""
    if pos + 12 > len(data):
        raise Refused
    _group, _element, vrb, _short = _ELEMENT(data, pos)
    if vrb not in (b"OB", b"OW"):
        raise Refused
    return vrb.decode("ascii"), _LONG_LENGTH(data, pos + 8)[0], pos + 12


def _syntax(meta: list) -> UID:
    found = [value for tag, vr, value, *_ in meta if tag == 0x00020010]
    if not found or not isinstance(found[0], bytes):
        raise Refused
    syntax = UID(found[0].decode("latin-1").rstrip("\0 "))
    if (not syntax.is_transfer_syntax or syntax.is_private or syntax.is_implicit_VR or not syntax.is_little_endian
            or syntax.is_deflated):
        raise Refused  # implicit VR, big endian, deflated or unknown: pydicom's reading, as always
    return syntax


def _group_0002(data: bytes, pos: int) -> tuple[list, int]:
    """Group 0002 (explicit VR little endian, as pydicom reads it), up to the first tag of another group."""
    meta, last, end = [], -1, len(data)
    while pos + 8 <= end:
        group, element, vrb, length = _ELEMENT(data, pos)
        if group != 2:
            break
        tag = group << 16 | element
        vr = _VRS.get(vrb)
        if vr is None or tag <= last or vr == "SQ":
            raise Refused
        last = tag
        if vrb in _LONG:
            if pos + 12 > end:
                raise Refused
            length = _LONG_LENGTH(data, pos + 8)[0]
            pos += 12
        else:
            pos += 8
        stop = pos + length
        if length == UNDEFINED or stop > end:
            raise Refused
        meta.append((tag, vr, data[pos:stop]))
        pos = stop
    if not meta:
        raise Refused
    return meta, pos


def _elements(data: bytes, view: memoryview, pos: int, end: int, into: Items, undefined_item: bool, top: bool,
              last: int = -1) -> int:
    """The elements from `pos`, added to `into`: to `end` (a defined length), to an item delimiter
    (`undefined_item`), or (`top`) to the pixel data. Returns where reading stopped."""
    append = into._list.append
    while pos < end:
        if pos + 8 > end:
            raise Refused
        group, element, vrb, length = _ELEMENT(data, pos)
        tag = group << 16 | element
        if tag == ITEM_END and undefined_item:
            if length:
                raise Refused
            return pos + 8
        if tag <= last or group == 0xFFFE:
            raise Refused
        if top and (tag == PIXEL_DATA or tag in FLOAT_PIXELS):
            if tag != PIXEL_DATA:
                raise Refused  # float pixel data: read whole, as always
            return pos
        last = tag
        vr = _VRS.get(vrb)
        if vr is None:
            raise Refused
        if vrb in _LONG:
            if pos + 12 > end:
                raise Refused
            length = _LONG_LENGTH(data, pos + 8)[0]
            pos += 12
        else:
            pos += 8
        if vr == "SQ":
            start = pos
            if length == UNDEFINED:
                items, pos = _items(data, view, pos, end, into, defined=False)
                append(Element(into, tag, vr, view[start:pos - 8], items))
            else:
                stop = pos + length
                if stop > end:
                    raise Refused
                items, _ = _items(data, view, pos, stop, into, defined=True)
                append(Element(into, tag, vr, view[start:stop], items))
                pos = stop
            continue
        stop = pos + length
        if length == UNDEFINED or stop > end or vr == "UN" and not group & 1:
            raise Refused  # undefined lengths but on sequences; a public UN (pydicom replaces its VR)
        append(Element(into, tag, vr, data[pos:stop]))
        pos = stop
    if undefined_item:
        raise Refused  # no item delimiter before the end
    return pos


def _items(data: bytes, view: memoryview, pos: int, end: int, parent: Items, defined: bool) -> tuple[list, int]:
    """A sequence's items (each an Items within `parent`). Returns them and the position after the sequence."""
    items = []
    while True:
        if defined and pos == end:
            return items, pos
        if pos + 8 > end:
            raise Refused
        group, element, length = _ITEM(data, pos)
        tag = group << 16 | element
        if tag == SEQUENCE_END and not defined:
            if length:
                raise Refused
            return items, pos + 8
        if tag != ITEM:
            raise Refused
        pos += 8
        item = Items(parent)
        if length == UNDEFINED:
            pos = _elements(data, view, pos, end, item, undefined_item=True, top=False)
        else:
            stop = pos + length
            if stop > end:
                raise Refused
            if _elements(data, view, pos, stop, item, undefined_item=False, top=False) != stop:
                raise Refused
            pos = stop
        items.append(item)
