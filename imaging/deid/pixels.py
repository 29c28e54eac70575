"""Sanity of the image bytes that are copied, undecoded, into the output."""

from __future__ import annotations

import struct

from pydicom.dataset import Dataset
from pydicom.uid import UID

from .errors import NotDeidentifiable

MISSING = "image attributes without pixel data"
SHORT = "pixel data shorter than the image it describes"
LONG = "pixel data longer than the image it describes"
FRAMES = "number of frames is not a positive integer"
ENCAPSULATION = "malformed encapsulated pixel data"
FEWER_FRAGMENTS = "fewer pixel data fragments than frames"

_ITEM, _DELIMITER = 0xFFFEE000, 0xFFFEE0DD
RLE_LOSSLESS = "1.2.840.10008.1.2.5"


def _int(ds: Dataset, keyword: str, default: int | None = None) -> int | None:
    try:
        return int(ds.get(keyword, default))
    except (TypeError, ValueError):
        return default


def frame_count(ds: Dataset) -> int:
    """Number of Frames, 1 when absent or empty; NotDeidentifiable when it is not a positive integer.

    A count that is 0, negative, fractional or not a number says nothing true about the pixels,
    and the decoders and the OCR sample would read them by it.
    """
    try:
        elem = ds["NumberOfFrames"] if "NumberOfFrames" in ds else None
        value = None if elem is None else elem.value
    except Exception:  # noqa: BLE001 - an unreadable count is no count
        raise NotDeidentifiable(FRAMES) from None
    if value is None or value == "":
        return 1
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise NotDeidentifiable(FRAMES)
    return int(text)


def check_length(ds: Dataset, syntax: UID, located=None) -> None:
    """Quarantine pixel data that does not hold the image its header describes.

    Native pixel data must be exactly Rows x Columns x Frames x Samples x Bits (plus the one
    padding byte of an odd length): shorter is a cut-off image, published as a valid-looking but
    broken one; longer is bytes no reader shows (and no check reads). Encapsulated (compressed)
    pixel data is not decoded here, only its items walked: a Basic Offset Table (empty or one
    offset per frame) then non-empty fragments, each inside the value, at least one per frame. A lying Number of Frames is quarantined.

    `located`: the pixel data element of a streamed file (imaging.deid.part10.PixelElement, its
    value left in the file, its items already walked); else `ds.PixelData` is read.
    """
    if located is None and "PixelData" not in ds:
        if ("Rows" in ds or "Columns" in ds) and "FloatPixelData" not in ds and "DoubleFloatPixelData" not in ds:
            raise NotDeidentifiable(MISSING)  # an image whose file ends before its pixels: cut off
        return
    frames = frame_count(ds)
    if syntax.is_compressed:
        items = located.items if located is not None else item_lengths(bytes(ds.PixelData or b""),
                                                                        syntax.is_little_endian)
        check_items(items, frames, syntax)
        return
    length = located.length if located is not None else len(ds.PixelData or b"")
    rows, cols, bits = _int(ds, "Rows"), _int(ds, "Columns"), _int(ds, "BitsAllocated")
    if not rows or not cols or not bits:
        return
    samples = _int(ds, "SamplesPerPixel", 1) or 1
    expected = (rows * cols * frames * samples * bits + 7) // 8
    if length < expected:
        raise NotDeidentifiable(SHORT)
    if length > expected + expected % 2:
        raise NotDeidentifiable(LONG)


def item_lengths(data: bytes, little_endian: bool) -> tuple[int, ...]:
    """The length of each item of encapsulated pixel data held in memory (pydicom's value: every item,
    without the sequence delimiter); NotDeidentifiable when the items do not exactly fill it."""
    end = "<" if little_endian else ">"
    offset, lengths = 0, []
    while offset < len(data):
        if offset + 8 > len(data):
            raise NotDeidentifiable(ENCAPSULATION)
        group, element, length = struct.unpack_from(end + "HHL", data, offset)
        tag = (group << 16) | element
        if tag == _DELIMITER and length == 0 and offset + 8 == len(data):
            break
        if tag != _ITEM or length == 0xFFFFFFFF or offset + 8 + length > len(data):
            raise NotDeidentifiable(ENCAPSULATION)
        lengths.append(length)
        offset += 8 + length
    return tuple(lengths)


def check_items(lengths: tuple[int, ...], frames: int, syntax: UID) -> None:
    """Encapsulated pixel data is well formed: a Basic Offset Table (empty, or one offset per frame),
    then non-empty fragments, at least one per frame (exactly one per frame for RLE, PS3.5 A.4.2)."""
    if not lengths:
        raise NotDeidentifiable(ENCAPSULATION)  # not even the Basic Offset Table item
    if lengths[0] not in (0, 4 * frames):
        raise NotDeidentifiable(ENCAPSULATION)  # a Basic Offset Table has one offset per frame, or none
    if any(length == 0 for length in lengths[1:]):
        raise NotDeidentifiable(ENCAPSULATION)  # an empty fragment: a second table, or data spliced in
    fragments = len(lengths) - 1
    if fragments < frames:
        raise NotDeidentifiable(FEWER_FRAGMENTS)
    if syntax == RLE_LOSSLESS and fragments != frames:
        raise NotDeidentifiable(ENCAPSULATION)
