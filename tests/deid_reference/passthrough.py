"""Binary elements copied to the output in their file encoding, never decoded and re-encoded.

pydicom reads every element as a `RawDataElement` (its bytes as found in the file) and decodes it
on first access. For a binary element the rules keep unchanged (bulk OB/OW, numbers), decoding then
re-encoding is pure cost: the raw bytes are what the writer would produce. Only elements for which
that holds exactly are left undecoded (`Unconverted`); a rule that needs the value still gets the
decoded one (`Unconverted.value`), so every decision is the one it was. (Pixel data is decoded
before the walk by pixels.check_length and by pydicom's writer, which sets its length form; for
OB/OW pydicom's decoding is the same bytes object, not a copy.)
"""

from __future__ import annotations

import struct

from pydicom.datadict import dictionary_VR
from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset
from pydicom.filewriter import correct_ambiguous_vr
from pydicom.sequence import Sequence
from pydicom.uid import UID

# VR -> size of one value. Decoded then encoded, these give back the file's bytes when the length
# is whole values and even (FL: and no value is a NaN, whose payload Python's float may change).
# Not text (decoding strips padding the writer does not put back) nor UN (pydicom may decode a UN
# as its dictionary VR).
_UNIT = {"OB": 1, "OW": 2, "OD": 8, "OF": 4, "OL": 4, "OV": 8, "AT": 4,
         "US": 2, "SS": 2, "UL": 4, "SL": 4, "UV": 8, "SV": 8, "FL": 4, "FD": 8}
_UNDEFINED = 0xFFFFFFFF


class Unconverted:
    """A source element kept in its file encoding: the tag, the VR pydicom would give it, the raw
    element to publish unchanged (`raw`), and the decoded value on demand."""

    __slots__ = ("raw", "VR", "_source")

    def __init__(self, raw: RawDataElement, vr: str, source: Dataset):
        self.raw, self.VR, self._source = raw, vr, source

    @property
    def tag(self):
        return self.raw.tag

    @property
    def is_undefined_length(self) -> bool:
        return self.raw.length == _UNDEFINED

    @property
    def value(self):
        return self._source[self.raw.tag].value  # decoded (and kept decoded) as a plain read would


def source_element(src: Dataset, tag, syntax: UID):
    """`src[tag]` decoded, or an `Unconverted` view when its bytes can be published as they are."""
    raw = src.get_item(tag)
    if type(raw) is not RawDataElement or raw.value is None or tag >> 16 & 1:
        return src[tag]  # decoded already, deferred, or private (private.py reads its value)
    if raw.is_implicit_VR != syntax.is_implicit_VR or raw.is_little_endian != syntax.is_little_endian:
        return src[tag]  # written in another encoding than read: re-encoded
    vr = raw.VR
    if vr is None:
        try:
            vr = dictionary_VR(tag)  # what pydicom would give it; ambiguous ones ("OB or OW") are not in _UNIT
        except KeyError:
            return src[tag]
    unit = _UNIT.get(vr)
    length = len(raw.value)
    if unit is None or length % unit or length % 2:
        return src[tag]  # odd lengths are padded by the writer, partial values cut by the reader
    if vr == "FL" and _has_nan(raw.value, raw.is_little_endian):
        return src[tag]
    return Unconverted(raw, vr, src)


def _has_nan(data: bytes, little_endian: bool) -> bool:
    values = struct.unpack(("<" if little_endian else ">") + "f" * (len(data) // 4), data)
    return any(v != v for v in values)


def ready_to_write(out: Dataset, syntax: UID) -> None:
    """Let pydicom's writer take `out`'s raw elements as they are.

    The writer decodes every raw element of a dataset whose recorded encoding differs from the file's
    (a new Dataset records none), after correcting ambiguous VRs. That correction is done here, as the
    writer would, then each dataset of the tree records the file's encoding. If the correction fails,
    nothing is recorded: the writer then fails as it always did (to_bytes names the error).
    """
    try:
        if "PixelData" in out:  # as the writer sets it before it corrects VRs (native: defined length)
            out["PixelData"].is_undefined_length = syntax.is_compressed
        correct_ambiguous_vr(out, syntax.is_little_endian)
    except Exception:  # noqa: BLE001 - left to the writer, which reports it
        return
    _record(out, syntax.is_implicit_VR, syntax.is_little_endian)


def _record(ds: Dataset, implicit: bool, little: bool) -> None:
    ds.set_original_encoding(implicit, little, ds._character_set)
    for elem in ds.elements():
        if type(elem) is not RawDataElement and elem.VR == "SQ" and isinstance(elem.value, Sequence):
            for item in elem.value:
                _record(item, implicit, little)
