"""The one writer: de-identified elements encoded in the output's transfer syntax, and the Part 10 file written.

The walk hands over each element it publishes as an `Out` tuple:

    (tag, vr, value)            value: the value's bytes (even length), from `Encoder`
    (tag, None, encoded, elem)  an element pydicom's writer encoded (`Encoder.element`: values only pydicom writes)
    (tag, PIXELS, copy)         the pixel data, written by `copy(target)`: the source's bytes copied in chunks, or
                                the redacted frames (imaging.deid.redact)

and `write` puts a file together: zero preamble, the regenerated file meta, the elements in tag order (the
pixel data copied where it sorts), deflated for the deflated syntax. The bytes are those pydicom's writer
gives for the same elements (tests/test_part10.py).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Callable

from pydicom.dataelem import DataElement, RawDataElement
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filebase import DicomBytesIO
from pydicom.filewriter import correct_ambiguous_vr_element, write_data_element
from pydicom.tag import BaseTag
from pydicom.uid import UID

from .errors import NotDeidentifiable
from .reader import LONG_VRS
from .version import IMPLEMENTATION_CLASS_UID, IMPLEMENTATION_VERSION_NAME

PIXELS = "pixels"  # the `vr` of the pixel data written by a copier
EXPLICIT_LITTLE = UID("1.2.840.10008.1.2.1")  # the file meta's encoding
PREAMBLE = b"\0" * 128 + b"DICM"
# Values padded to even length with a NUL (pydicom's writers for these VRs); every other VR with a space.
_NUL_PADDED = frozenset({"UI", "OB", "OD", "OF", "OL", "OV", "OW", "UN", "US", "SS", "UL", "SL", "UV", "SV", "FL",
                         "FD", "AT"})
_LONG = frozenset(vr.encode("ascii") for vr in LONG_VRS)
_TEXT = frozenset({"AE", "AS", "CS", "DA", "DT", "LO", "LT", "SH", "ST", "TM", "UC", "UI", "UR", "UT"})
_ITEM_TAG = b"\xfe\xff\x00\xe0"


class Encoder:
    """Encodes elements in one transfer syntax's encoding, text in one character set (the output dataset's)."""

    def __init__(self, syntax: UID, encodings, top: Callable[[], Dataset] | None = None):
        self.implicit, self.little = syntax.is_implicit_VR, syntax.is_little_endian
        self.encodings = encodings
        self.top = top  # the source's top level (made on demand), which resolves ambiguous VRs
        order = "<" if self.little else ">"
        self._implicit = struct.Struct(order + "HHL").pack
        self._short = struct.Struct(order + "HH2sH").pack
        self._long = struct.Struct(order + "HH2s2xL").pack
        self._item = struct.Struct(order + "HHL").pack

    # ------------------------------------------------------------------------------------------------ values

    def value(self, tag: int, vr: str, data: bytes) -> tuple:
        """An element with the value `data` (padded to even length as pydicom pads it)."""
        if len(data) % 2:
            data = data + (b"\0" if vr in _NUL_PADDED else b" ")
        return (tag, vr, data)

    def empty(self, tag: int, vr: str) -> tuple:
        return (tag, vr, b"")

    def text(self, tag: int, vr: str, values: list[str]) -> tuple:
        """Text values (several joined by backslashes) in the dataset's character set."""
        text = "\\".join(values)
        if text.isascii():
            return self.value(tag, vr, text.encode("ascii"))
        return self.element(DataElement(tag, vr, values[0] if len(values) == 1 else values))

    def element(self, elem: DataElement) -> tuple:
        """Any element as pydicom's writer encodes it (non-ASCII text, private numbers, in-memory values)."""
        try:
            if " or " in elem.VR:
                correct_ambiguous_vr_element(elem, self.top() if self.top is not None else Dataset(), self.little)
            buffer = DicomBytesIO()
            buffer.is_little_endian, buffer.is_implicit_VR = self.little, self.implicit
            write_data_element(buffer, elem, self.encodings)
        except Exception as exc:  # noqa: BLE001 - the message may echo values; the type only
            raise NotDeidentifiable(f"encoding failed: {type(exc).__name__}") from None
        return (int(elem.tag), None, buffer.getvalue(), elem)

    def undefined(self, out: tuple) -> tuple:
        """`out` (an encapsulated pixel data value: its items) written with an undefined length and a delimiter."""
        tag, vr, value = out[0], out[1], out[2]
        if self.implicit:
            head = self._implicit(tag >> 16, tag & 0xFFFF, 0xFFFFFFFF)
        else:
            head = self._long(tag >> 16, tag & 0xFFFF, vr.encode("ascii"), 0xFFFFFFFF)
        raw = RawDataElement(BaseTag(tag), vr, 0xFFFFFFFF, value, 0, self.implicit, self.little)
        return (tag, None, head + value + self._item(0xFFFE, 0xE0DD, 0), raw)

    def outs(self, ds: Dataset) -> list[tuple]:
        """The elements of a dataset made in memory (what the engine adds: declarations, pseudonyms), encoded."""
        found = []
        for elem in ds:
            value = elem.value
            if elem.VR == "SQ":
                found.append(self.sequence(int(elem.tag), [self.outs(item) for item in value]))
            elif isinstance(value, str) and elem.VR in _TEXT:
                found.append(self.text(int(elem.tag), elem.VR, [value]))
            elif type(value).__name__ == "MultiValue" and elem.VR in _TEXT and all(isinstance(v, str) for v in value):
                found.append(self.text(int(elem.tag), elem.VR, list(value)))
            else:
                found.append(self.element(elem))
        return found

    def sequence(self, tag: int, items: list[list[tuple]]) -> tuple:
        """A sequence of defined length, each item of defined length, as pydicom writes new items."""
        parts = []
        encoded = self.encoded
        for item in items:  # the walk hands over each item's elements in tag order
            body = b"".join([encoded(out) for out in item])
            parts.append(self._item(0xFFFE, 0xE000, len(body)))
            parts.append(body)
        return (tag, "SQ", b"".join(parts))

    # ---------------------------------------------------------------------------------------------- datasets

    def dataset(self, outs: list[tuple]) -> bytes:
        """Elements encoded in tag order (`outs` need not be sorted)."""
        outs.sort(key=_tag)
        return b"".join([self.encoded(out) for out in outs])

    def encoded(self, out: tuple) -> bytes:
        """One element's bytes: its header and its value."""
        tag, vr, value = out[0], out[1], out[2]
        if vr is None:
            return value
        length = len(value)
        if self.implicit:
            return self._implicit(tag >> 16, tag & 0xFFFF, length) + value
        code = vr.encode("ascii")
        if code in _LONG:
            return self._long(tag >> 16, tag & 0xFFFF, code, length) + value
        if length > 0xFFFF:  # as pydicom: too long for a 2-byte length, written as UN
            return self._long(tag >> 16, tag & 0xFFFF, b"UN", length) + value
        return self._short(tag >> 16, tag & 0xFFFF, code, length) + value

    def view(self, outs: list[tuple], meta: FileMetaDataset | None = None) -> Dataset:
        """The published elements as a pydicom dataset (values decoded only when read), with its file meta."""
        elements = {}
        for out in outs:
            tag, vr = BaseTag(out[0]), out[1]
            if vr == PIXELS:
                continue
            elements[tag] = out[3] if vr is None else RawDataElement(tag, vr, len(out[2]), out[2], 0, self.implicit,
                                                                      self.little)
        ds = Dataset(elements)
        ds.set_original_encoding(self.implicit, self.little, self.encodings)
        if meta is not None:
            ds.file_meta = meta
        return ds


def _tag(out: tuple) -> int:
    return out[0]


def file_meta(sop_class: str, sop_instance: str, syntax: UID) -> bytes:
    """Group 0002 for a de-identified file (regenerated: nothing of the source's survives), encoded: the SOP
    Class as the dataset says, its new SOP Instance, the syntax, this engine's identity."""
    encoder = Encoder(EXPLICIT_LITTLE, ["iso8859"])
    outs = [encoder.value(0x00020001, "OB", b"\x00\x01"),
            encoder.value(0x00020002, "UI", sop_class.encode("latin-1")),
            encoder.value(0x00020003, "UI", sop_instance.encode("latin-1")),
            encoder.value(0x00020010, "UI", str(syntax).encode("latin-1")),
            encoder.value(0x00020012, "UI", IMPLEMENTATION_CLASS_UID.encode("ascii")),
            encoder.value(0x00020013, "SH", IMPLEMENTATION_VERSION_NAME.encode("ascii"))]
    body = encoder.dataset(outs)
    return encoder.encoded(encoder.value(0x00020000, "UL", struct.pack("<L", len(body)))) + body


@dataclass
class Published:
    """What the writer writes for one de-identified file: its file meta (encoded), the encoder of its syntax and
    its elements (the pixel data as a copier when streamed)."""

    meta: bytes
    encoder: Encoder
    outs: list[tuple]
    deflated: bool = False

    def header(self):
        """The published top level's values by keyword (imaging.deid.element.Header: what imaging.header reads)."""
        from .element import Header, Items

        leaves = [out for out in self.outs if out[1] is not None and out[1] != PIXELS and out[1] != "SQ"]
        leaves.sort(key=_tag)
        return Header(Items.of_nodes(leaves, little=self.encoder.little), fallback=self.dataset)

    def dataset(self) -> Dataset:
        """The published elements as a pydicom dataset (values decoded only when read), with its file meta."""
        from .reader import meta_elements

        meta_ds = FileMetaDataset(Encoder(EXPLICIT_LITTLE, ["iso8859"]).view(meta_elements(self.meta)))
        return self.encoder.view(self.outs, meta_ds)


def write(target, published: Published) -> None:
    """A Part 10 file: preamble, file meta, then the elements in tag order; a pixel copier writes its element in
    place. Deflated syntaxes (files read whole) are written whole, the dataset deflated as pydicom deflates it."""
    encoder, outs = published.encoder, sorted(published.outs, key=_tag)
    if published.deflated:
        data = b"".join([encoder.encoded(out) for out in outs if out[1] != PIXELS])
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = compressor.compress(data) + compressor.flush()
        target.write(PREAMBLE + published.meta + body + (b"\0" if len(body) % 2 else b""))
        return
    pending = [PREAMBLE, published.meta]
    for out in outs:
        if out[1] == PIXELS:
            target.write(b"".join(pending))
            pending = []
            copy: Callable = out[2]
            copy(target)
        else:
            pending.append(encoder.encoded(out))
    if pending:
        target.write(b"".join(pending))
