"""Part 10 files opened for de-identification: read once, hashed on the way, the pixel data located, never loaded.

A de-identified or released image differs from its source in its header only; its pixel data pass
through unchanged. So the pixel data element is *located*, never loaded: the header is read up to
it, the elements after it (rare: trailing padding, signatures, a private group) are read from the
bytes after its end, and the writer (imaging.deid.writer) puts the new header, then the source's pixel
data element copied in chunks, then the rewritten trailing elements. The text check reads its sampled
frames one at a time from the same file (`frames`). The input's sha256 is computed as its bytes are
read, each byte once, and no step holds more than a chunk and a frame, whatever the file's size.

    with SourceImage(url) as image:          # header read, pixel data located (image.pixels)
        if image.streamed:
            result = deidentify_image(image.header, ..., streamed=image)   # walks image.elements
            writer.write(target, result.published)                        # header + pixel bytes + trailing
            image.sha256()                                                # every input byte read once
        else:                                                             # read whole (the few files that
            ds = read_whole(image.read_all())                             # cannot be streamed, size-capped)

How a file is read: its first `CHUNK` bytes (a 1 MB volume: all of it) in one read, then the raw reader
(imaging.deid.reader) takes the explicit VR little endian files of canonical form (the landing zone's
common case): `elements` are then the reader's, `header` a pydicom view of the top level made from them.
Any other file is read by pydicom as before: little-endian files (implicit or explicit VR, not deflated)
whose top-level Pixel Data (7FE0,0010) is native with a defined length or encapsulated with an undefined
one, as OB or OW, are streamed from pydicom's header; deflated and big-endian files, float pixel data and
malformed length forms are read whole, up to `MAX_WHOLE` bytes; larger ones are quarantined with the
reason (a worker's memory is the bound, not the file).
"""

from __future__ import annotations

import io
import struct
import warnings
from dataclasses import dataclass

import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import UID

from imaging import fs as fsx

from . import reader
from .element import Header, Items
from .meta import transfer_syntax
from .errors import NotDeidentifiable
from .frames import Frames, pixel_options

PIXEL_DATA = reader.PIXEL_DATA
ITEM, DELIMITER = 0xFFFEE000, 0xFFFEE0DD
UNDEFINED = 0xFFFFFFFF
CHUNK = 4 << 20  # bytes copied at a time
# Files that cannot be streamed are read whole; a de-identification holds about four copies of a
# file read whole, so this bound keeps a worker near 1 GB.
MAX_WHOLE = 192 << 20
MAX_TRAILING = 16 << 20  # elements after the pixel data are parsed in memory (more: the file is read whole)

TRUNCATED = "file ends inside an element (truncated)"
TOO_LARGE = "file too large to read whole (its pixel data cannot be streamed)"
_EOF_WARNING = " in file <no filename>"  # how pydicom warns that an undefined length ran off the end


@dataclass(frozen=True)
class PixelElement:
    """Where a file's Pixel Data element lies (byte offsets in the file), its value never read."""

    offset: int  # the element's tag
    value_offset: int
    value_end: int  # end of the value: the sequence delimiter's tag when encapsulated
    end: int  # end of the element (after the delimiter item when encapsulated)
    vr: str | None  # as written (explicit VR); None in implicit VR files
    encapsulated: bool
    items: tuple[int, ...] = ()  # encapsulated: each item's length, the Basic Offset Table's first

    @property
    def length(self) -> int:
        return self.value_end - self.value_offset


class SourceImage:
    """A Part 10 file open for streaming (see the module's docstring). Use as a context manager."""

    def __init__(self, url: str, *, trailing: bool = True, size: int | None = None):
        """`trailing`: parse the elements after the pixel data into `header` (a de-identification walks
        them); False leaves them as bytes, copied verbatim with the pixel data (a release copy)."""
        self.url = url
        self._main = fsx.open_read(url)
        self._random = None
        self.reader = fsx.HashingReader(self._main)
        self.size = size if size is not None else _size(self._main)
        self._header: Dataset | None = None
        self._meta: list | None = None  # the file meta as the raw reader read it
        self.elements: Items | None = None  # the dataset as the walk reads it (streamed files)
        self.pixels: PixelElement | None = None
        self.syntax: UID | None = None
        self.streamed = False
        self._trailing = trailing
        self._head = b""  # the file's first bytes, read at once (the raw reader's)
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "SourceImage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for handle in (self._main, self._random):
            if handle is not None:
                handle.close()
        self._main = self._random = None
        if self.elements is not None:
            self.elements.release()
            self.elements = None

    # ------------------------------------------------------------------------------------------ reading

    def _open(self) -> None:
        if self._trailing and self._read_raw():
            return
        self._head = b""
        self.reader.seek(0)
        with warnings.catch_warnings(record=True) as caught:  # inside quiet(): recorded, never shown
            warnings.simplefilter("always")
            try:
                header = pydicom.dcmread(self.reader, stop_before_pixels=True)
            except Exception:  # noqa: BLE001 - read whole instead: the whole-file path names the fault
                return
        if any(str(w.message).endswith(_EOF_WARNING) for w in caught):
            return
        at = self.reader.tell()
        tag = _peek_tag(self.reader, at)
        if tag != PIXEL_DATA:
            return  # no pixel data (or float pixel data): read whole
        try:
            syntax = transfer_syntax(header)
        except NotDeidentifiable:
            return  # the whole-file path refuses it, in its order of reasons
        implicit, little = header.original_encoding
        if (not little or syntax.is_deflated or not syntax.is_little_endian
                or (implicit, little) != (syntax.is_implicit_VR, syntax.is_little_endian)):
            return
        element = self._locate(at, implicit, syntax)
        if element is None:
            return
        if self._trailing and element.end < self.size and not self._parse_trailing(header, element):
            return
        self.header, self.pixels, self.syntax = header, element, syntax
        self.elements = Items.of_dataset(header)
        self.streamed = True

    def _read_raw(self) -> bool:
        """The file read by the raw reader (False: not a form it reads; pydicom reads it instead)."""
        head = self._head = self.reader.read(min(self.size, CHUNK))
        try:
            top = reader.top(head)
            element = None
            if top.pixels is None:
                if len(head) < self.size:
                    return False  # a dataset longer than the first chunk: pydicom reads it
            else:
                element = self._raw_pixels(head, top.pixels, top.syntax)
                if element is None:
                    return False
                if element.end < self.size:
                    trailing = self._trailing_bytes(element)
                    if trailing is None:
                        return False
                    reader.dataset(trailing, 0, len(trailing), top.elements, after=PIXEL_DATA)
        except reader.Refused:
            return False
        self.elements, self._meta = top.elements, top.meta
        self.pixels, self.syntax = element, top.syntax
        self.streamed = True
        return True

    @property
    def header(self) -> Dataset | None:
        """The header as pydicom reads it (a file the raw reader read: a view of its elements, made on first use)."""
        if self._header is None and self._meta is not None:
            header = self.elements.view()
            header.file_meta = FileMetaDataset(Items.of_nodes(self._meta).view())
            self._header = header
        return self._header

    @header.setter
    def header(self, value: Dataset | None) -> None:
        self._header = value

    def _raw_pixels(self, head: bytes, at: int, syntax: UID) -> PixelElement | None:
        """The pixel data element whose tag is at `at` (as `_locate`, from the bytes read)."""
        vr, length, value_offset = reader.pixel_header(head, at)
        if syntax.is_compressed != (length == UNDEFINED):
            return None
        if length != UNDEFINED:
            end = value_offset + length
            return PixelElement(at, value_offset, end, end, vr, encapsulated=False) if end <= self.size else None
        walked = self._walk_items(value_offset)
        if walked is None:
            return None
        value_end, items = walked
        return PixelElement(at, value_offset, value_end, value_end + 8, vr, encapsulated=True, items=items)

    def _trailing_bytes(self, element: PixelElement) -> bytes | None:
        """The bytes after the pixel data element (at most `MAX_TRAILING`)."""
        count = self.size - element.end
        if count > MAX_TRAILING:
            return None
        if self.size <= len(self._head):
            return self._head[element.end:]
        handle = self.random()
        handle.seek(element.end)
        data = handle.read(count)
        return data if len(data) == count else None

    def _locate(self, at: int, implicit: bool, syntax: UID) -> PixelElement | None:
        """The pixel data element at `at`, or None when its form is one only a whole read handles: an
        unusual length form, a value running past the end, items that are not items. (Such files are
        read whole, so they are refused for the same reason, in the same order, as they always were.)"""
        self.reader.seek(at)
        raw = self.reader.read(8)
        if len(raw) < 8:
            return None
        if implicit:
            vr, (length,) = None, struct.unpack("<L", raw[4:8])
            value_offset = at + 8
        else:
            vr = raw[4:6].decode("latin-1")
            if vr not in ("OB", "OW"):
                return None
            extra = self.reader.read(4)
            if len(extra) < 4:
                return None
            (length,) = struct.unpack("<L", extra)
            value_offset = at + 12
        if syntax.is_compressed != (length == UNDEFINED):
            return None  # native data of undefined length, or compressed of a defined one: read whole
        if length != UNDEFINED:
            end = value_offset + length
            if end > self.size:
                return None
            return PixelElement(at, value_offset, end, end, vr, encapsulated=False)
        walked = self._walk_items(value_offset)
        if walked is None:
            return None
        value_end, items = walked
        return PixelElement(at, value_offset, value_end, value_end + 8, vr, encapsulated=True, items=items)

    def _walk_items(self, start: int) -> tuple[int, tuple[int, ...]] | None:
        """The offset of the sequence delimiter ending encapsulated pixel data, and each item's length
        (None: not items up to a delimiter inside the file).

        Only item headers are read (a seek past each fragment). Whether the items make a well-formed
        value is imaging.deid.pixels' rule (`check_items`), applied where the engine always did."""
        handle = self.random()
        offset, lengths = start, []
        while True:
            handle.seek(offset)
            head = handle.read(8)
            if len(head) < 8:
                return None
            group, element, length = struct.unpack("<HHL", head)
            tag = (group << 16) | element
            if tag == DELIMITER:
                return offset, tuple(lengths)
            if tag != ITEM or length == UNDEFINED or offset + 8 + length > self.size:
                return None
            lengths.append(length)
            offset += 8 + length

    def _parse_trailing(self, header: Dataset, element: PixelElement) -> bool:
        """The elements after the pixel data, parsed from their bytes into `header` (False: they cannot
        be, and the file is read whole instead)."""
        count = self.size - element.end
        if count > MAX_TRAILING:
            return False
        handle = self.random()
        handle.seek(element.end)
        data = handle.read(count)
        if len(data) != count:
            return False
        try:
            trailing = read_trailing(data, header)
        except Exception:  # noqa: BLE001 - NotDeidentifiable or a parse error: the whole read names it
            return False
        for tag in trailing.keys():
            header[tag] = trailing.get_item(tag)
        return True

    @property
    def values(self):
        """The header's values by keyword (imaging.deid.element.Header), read from its elements."""
        return Header(self.elements)

    def random(self):
        """A second handle for reads out of order (fragment headers, frames, trailing elements), so the
        hashing reader sees the file once, in order (the bytes already read when they are the whole file)."""
        if self._random is None:
            whole = self._head and len(self._head) == self.size
            self._random = io.BytesIO(self._head) if whole else fsx.open_read(self.url)
        return self._random

    def frames(self) -> "FramesOnDemand":
        """The pixel data's frames, each read alone from the file when asked for; what decoding needs is read
        from the header at the first frame asked for (a text check that reads none costs nothing)."""
        return FramesOnDemand(self)

    def frames_now(self) -> Frames:
        try:
            options = pixel_options(self.header)
        except Exception:  # noqa: BLE001 - a header the decoder cannot describe: nothing can be read
            from .frames import UNCHECKABLE

            raise NotDeidentifiable(UNCHECKABLE) from None
        return Frames(self.random(), self.pixels.value_offset, self.syntax, options)

    def read_all(self) -> bytes:
        """The whole file (for the files that are not streamed), at most `MAX_WHOLE` bytes; hashed as read."""
        if self.size > MAX_WHOLE:
            raise NotDeidentifiable(TOO_LARGE)
        self.reader.seek(0)
        return self.reader.read()

    def sha256(self) -> str:
        """The input's sha256: every byte not yet read is read (and hashed) first."""
        return self.reader.finish()

    # ------------------------------------------------------------------------------------------ writing

    def copy_pixels(self, target) -> None:
        """The pixel data element as the output carries it: its header, the value copied in chunks, and
        (encapsulated) the sequence delimiter, as pydicom's writer would put them."""
        element = self.pixels
        length = element.length
        native_pad = 0 if element.encapsulated else length % 2  # pydicom pads an odd value to even
        head = struct.pack("<HH", PIXEL_DATA >> 16, PIXEL_DATA & 0xFFFF)
        if element.vr is not None:
            head += element.vr.encode("latin-1") + b"\0\0"
        head += struct.pack("<L", UNDEFINED if element.encapsulated else length + native_pad)
        target.write(head)
        at, remaining = element.value_offset, length
        if at < len(self._head):  # the bytes already read first
            held = memoryview(self._head)[at:at + remaining]
            target.write(held)
            at, remaining = at + len(held), remaining - len(held)
        if remaining:
            self.reader.seek(at)
        while remaining:
            chunk = self.reader.read(min(CHUNK, remaining))
            if not chunk:
                raise NotDeidentifiable(TRUNCATED)
            target.write(chunk)
            remaining -= len(chunk)
        if native_pad:
            target.write(b"\0")
        if element.encapsulated:
            target.write(struct.pack("<HHL", 0xFFFE, 0xE0DD, 0))

    def copy_from_pixels(self, target) -> None:
        """Every byte from the pixel data element to the end of the file, verbatim (a release copy)."""
        self.reader.seek(self.pixels.offset)
        while chunk := self.reader.read(CHUNK):
            target.write(chunk)


class FramesOnDemand:
    """A streamed file's `Frames`, made at the first frame read (NotDeidentifiable, "could not be checked", then
    when the header cannot describe them, as the check reading it would say)."""

    def __init__(self, image: SourceImage):
        self._image, self._frames = image, None

    def _made(self) -> Frames:
        if self._frames is None:
            self._frames = self._image.frames_now()
        return self._frames

    @property
    def count(self) -> int:
        return self._made().count

    def frame(self, index: int):
        return self._made().frame(index)


def _size(handle) -> int:
    position = handle.tell()
    size = handle.seek(0, io.SEEK_END)
    handle.seek(position)
    return size


def _peek_tag(reader, at: int) -> int | None:
    reader.seek(at)
    raw = reader.read(4)
    if len(raw) < 4:
        return None
    group, element = struct.unpack("<HH", raw)
    return (group << 16) | element


class _Reads(io.BytesIO):
    """Bytes in memory that note every read returning fewer bytes than asked for (see read_whole)."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.short, self.partial = 0, False

    def read(self, size: int | None = -1) -> bytes:
        out = super().read(size)
        if size is not None and size > 0 and len(out) < size:
            self.short += 1
            self.partial |= bool(out)
        return out


def read_whole(data: bytes) -> Dataset:
    """The whole dataset of a Part 10 file in memory, or NotDeidentifiable when the file ends inside an
    element: a cut file must not be published as if it were complete. (A file cut exactly between two
    elements reads as a shorter complete file: nothing can tell it apart.)

    pydicom reads a value cut by the end of the file without a word (a defined length it cannot fill),
    and warns, without raising, when an undefined length runs off the end; a complete file has exactly
    one short read: the empty one after its last element."""
    source = _Reads(data)
    with warnings.catch_warnings(record=True) as caught:  # inside quiet(): recorded, never shown
        warnings.simplefilter("always")
        ds = pydicom.dcmread(source)
    ran_off = any(str(w.message).endswith(_EOF_WARNING) for w in caught)
    if ran_off or source.partial or source.short > 1:
        raise NotDeidentifiable(TRUNCATED)
    return ds


def read_trailing(data: bytes, header: Dataset) -> Dataset:
    """The elements after the pixel data, in the header's encoding, held to read_whole's rules."""
    from pydicom.filereader import read_dataset

    implicit, little = header.original_encoding
    source = _Reads(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trailing = read_dataset(source, implicit, little, parent_encoding=header._character_set)
    ran_off = any(str(w.message).endswith(_EOF_WARNING) for w in caught)
    if ran_off or source.partial or source.short > 1:
        raise NotDeidentifiable(TRUNCATED)
    return trailing
