"""Burned-in text covered, proven gone, and written back without losing what need not be lost.

When a file's image type says `on_text: redact` (platform/pixel_text.yaml) and the text check found words,
the engine does not quarantine the file: it covers every word box the OCR found, padded, with a solid fill
(`fill_value`: the darkest value of the image's own encoding, one number, nothing of the pixels below it can
be read back), on every frame that carries the text, then proves it gone before anything is declared.

- **Confirmed first** (`confirm`). The frames the words were found on are read whole by the second reader
  below; unless it reads a word where the screening's are, nothing is covered and the file is quarantined
  as text found, unchanged (a screening's false alarm never becomes boxes on a clean image). Its own words are
  covered too.
- **Which frames.** A single-frame image: its frame. A volume: the frames the words were read on, and every
  frame that carries the same label. A device draws its label alike on every B-scan while the speckle below
  changes, so a frame carries a box when, at the label's own pixels (the pixels still across the overlay
  frames, `pixel_text.still_pixels`, or else the strokes of the frame it was read on), at least half of its
  pixels hold the label's values (`carries`). Every frame of the volume is tested, not only the sampled ones.
- **Proven gone** (`verify`). Every redacted frame is decoded again from the bytes that will be written
  (the spool below, in the output's transfer syntax) and read whole by Tesseract at another scale and
  thresholding than the screening (`PixelTextDetector.read_again`), as are the sampled frames of a volume
  left unredacted. A word left is covered in a second round (`ROUNDS`), read again the same way; a word
  left then: the file is quarantined, "text left after redaction". Only then does the engine declare
  BurnedInAnnotation NO and Clean Pixel Data (113101).
- **No quality lost that need not be** (`plan_output`). Uncompressed pixel data stays uncompressed, each
  redacted frame rewritten in place. A losslessly compressed image whose syntax has an encoder in the lock
  (RLE: pydicom or pylibjpeg-rle; JPEG 2000: pylibjpeg-openjpeg; JPEG-LS: pyjpegls) gets its redacted frames
  re-encoded losslessly in its own syntax; every other frame's fragments pass through as bytes. Anything else
  (lossy JPEG, JPEG Lossless, HTJ2K: no encoder, or lossy) is written as Explicit VR Little Endian, every
  frame decoded (a lossy image is never recompressed lossily), and `LossyImageCompression` stays "01" where
  the source was lossy. The method text says which (`Redaction.method_lines`).
- **Memory.** Frames are read, tested and redacted one at a time; the redacted frames' bytes go to a spool
  that moves to disk past `SPOOL_MEMORY`, so a volume redacted on every frame costs no more memory than one
  redacted on one frame. The writer (`write_value`) then copies the source's other frames as bytes.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
from pydicom.dataset import Dataset
from pydicom.uid import UID, ExplicitVRLittleEndian

from .errors import NotDeidentifiable
from .frames import Frames, pixel_options
from .pixel_text import (ON_TEXT, STILL_PIXELS, STILL_SHARE, TEXT_FOUND, Box, FoundText,  # noqa: F401 - ON_TEXT: named here too
                         PixelTextDetector, TypeSettings, _colour, loose_still, sample_frames, still_pixels, to_grey8)
from .pixels import frame_count, item_lengths

TEXT_LEFT = "text left after redaction"
NOT_REDACTABLE = "pixel data could not be redacted"

SPOOL_MEMORY = 16 << 20  # redacted frames' bytes kept in memory up to this, then on disk
ROUNDS = 2  # coverings: words the second reading still reads after the first are covered once more
MAX_WORD_HEIGHT = 96  # pixels: the second reading's words (and lines, across) taller than this are not covered
CARRY_SHARE = 0.5  # share of a label's pixels a frame must hold for the label to be on it
LABEL_CONTRAST = 40  # grey levels a stroke stands out of its box's median to be one of the label's pixels
MIN_LABEL_PIXELS = 8

# Syntaxes whose redacted frames are re-encoded losslessly in the syntax itself (an encoder is locked); the
# value is the encoder's transfer syntax and its options. JPEG 2000 (.91) allows a reversible codestream.
_OWN = {
    "1.2.840.10008.1.2.5": ("1.2.840.10008.1.2.5", {}),  # RLE Lossless
    "1.2.840.10008.1.2.4.90": ("1.2.840.10008.1.2.4.90", {}),  # JPEG 2000 Lossless
    "1.2.840.10008.1.2.4.91": ("1.2.840.10008.1.2.4.90", {}),  # JPEG 2000: a lossless codestream is one of its forms
    "1.2.840.10008.1.2.4.80": ("1.2.840.10008.1.2.4.80", {}),  # JPEG-LS Lossless
    "1.2.840.10008.1.2.4.81": ("1.2.840.10008.1.2.4.81", {"jls_error": 0}),  # JPEG-LS near-lossless, error 0
}
_NAMES = {"1.2.840.10008.1.2.5": "RLE Lossless", "1.2.840.10008.1.2.4.90": "JPEG 2000 lossless",
          "1.2.840.10008.1.2.4.91": "JPEG 2000 (reversible)", "1.2.840.10008.1.2.4.80": "JPEG-LS lossless",
          "1.2.840.10008.1.2.4.81": "JPEG-LS (error 0)"}
_LOSSY = frozenset({"1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.81",
                    "1.2.840.10008.1.2.4.91", "1.2.840.10008.1.2.4.203", "1.2.840.10008.1.2.4.100",
                    "1.2.840.10008.1.2.4.101", "1.2.840.10008.1.2.4.102", "1.2.840.10008.1.2.4.103",
                    "1.2.840.10008.1.2.4.104", "1.2.840.10008.1.2.4.105", "1.2.840.10008.1.2.4.106"})


def pad_of(box: Box) -> int:
    """Pixels a box is grown by on every side: a third of the height of its line and 2 (anti-aliased edges, the
    ascenders and descenders Tesseract's box may clip). A box more than twice as tall as wide is a line running up
    or down (the detector's): its line's height is its width."""
    return (box.width if box.height > 2 * box.width else box.height) // 3 + 2


# --- where the pixel data is ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """How one uncompressed frame's bytes hold its pixels (little- or big-endian, any planar configuration)."""

    rows: int
    cols: int
    samples: int
    bits: int  # allocated: 8, 16 or 32
    planar: int
    little: bool
    signed: bool
    stored: int
    photometric: str

    @classmethod
    def of(cls, options: dict, little: bool = True) -> "Layout":
        try:
            layout = cls(int(options["rows"]), int(options["columns"]), int(options.get("samples_per_pixel") or 1),
                         int(options["bits_allocated"]), int(options.get("planar_configuration") or 0), little,
                         bool(int(options.get("pixel_representation") or 0)),
                         int(options.get("bits_stored") or options["bits_allocated"]),
                         str(options.get("photometric_interpretation") or "").strip().upper())
        except (KeyError, TypeError, ValueError):
            raise NotDeidentifiable(NOT_REDACTABLE) from None
        if layout.bits not in (8, 16, 32) or layout.samples not in (1, 3) or layout.rows < 1 or layout.cols < 1:
            raise NotDeidentifiable(NOT_REDACTABLE)
        return layout

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(f"{'<' if self.little else '>'}{'i' if self.signed else 'u'}{self.bits // 8}")

    @property
    def frame_size(self) -> int:
        return self.rows * self.cols * self.samples * self.bits // 8

    def array(self, data: bytes) -> np.ndarray:
        """A writable (rows, cols[, samples]) array of one frame's bytes."""
        array = np.frombuffer(data, dtype=self.dtype, count=self.rows * self.cols * self.samples).copy()
        if self.samples == 1:
            return array.reshape(self.rows, self.cols)
        if self.planar:
            return array.reshape(self.samples, self.rows, self.cols).transpose(1, 2, 0)
        return array.reshape(self.rows, self.cols, self.samples)

    def tobytes(self, array: np.ndarray) -> bytes:
        array = np.asarray(array, dtype=self.dtype)
        if self.samples > 1 and self.planar:
            array = array.transpose(2, 0, 1)
        return np.ascontiguousarray(array).tobytes()


def fill_value(photometric: str, samples: int, stored: int, signed: bool) -> tuple[int, ...]:
    """The solid fill of a redacted box, one value per sample: what the image's encoding shows as black."""
    low = -(1 << (stored - 1)) if signed else 0
    high = (1 << (stored - 1)) - 1 if signed else (1 << stored) - 1
    if samples == 3 and photometric.startswith("YBR"):
        return (low, (high + low + 1) // 2, (high + low + 1) // 2)  # black: no luma, neutral chroma
    if photometric == "MONOCHROME1":
        return (high,)
    return (low,) * samples


def cover(array: np.ndarray, boxes: tuple[Box, ...], fill: tuple[int, ...]) -> None:
    """Each box (already padded) set to the fill, in place."""
    for b in boxes:
        region = array[b.top:b.top + b.height, b.left:b.left + b.width]
        region[...] = fill if array.ndim == 3 else fill[0]


class PixelSource:
    """One image's pixel data value, left in a file or in memory (`handle`, the value at `offset`): its frames'
    raw bytes (uncompressed) or fragments (encapsulated), and its frames decoded one at a time."""

    def __init__(self, handle: BinaryIO, offset: int, length: int, syntax: UID, options: dict,
                 items: tuple[int, ...] = (), frames: int = 1):
        self.handle, self.offset, self.length, self.syntax, self.options = handle, offset, length, syntax, options
        self.items, self.count = items, frames
        self.frames = Frames(handle, offset, syntax, options)
        self._fragments: list[list[tuple[int, int]]] | None = None

    @classmethod
    def of_image(cls, image) -> "PixelSource":
        """A streamed file's pixel data (imaging.deid.part10.SourceImage), read through its second handle."""
        element = image.pixels
        try:
            options = pixel_options(image.header)
        except Exception:  # noqa: BLE001
            raise NotDeidentifiable(NOT_REDACTABLE) from None
        return cls(image.random(), element.value_offset, element.length, image.syntax, options, element.items,
                   frame_count(image.header))

    @classmethod
    def of_dataset(cls, ds: Dataset, syntax: UID) -> "PixelSource":
        data = bytes(ds.PixelData or b"")
        items = item_lengths(data, syntax.is_little_endian) if syntax.is_compressed else ()
        try:
            options = pixel_options(ds)
        except Exception:  # noqa: BLE001
            raise NotDeidentifiable(NOT_REDACTABLE) from None
        return cls(io.BytesIO(data), 0, len(data), syntax, options, items, frame_count(ds))

    def read(self, offset: int, length: int) -> bytes:
        self.handle.seek(offset)
        data = self.handle.read(length)
        if len(data) != length:
            raise NotDeidentifiable(NOT_REDACTABLE)
        return data

    def native(self, index: int, layout: Layout) -> bytes:
        return self.read(self.offset + index * layout.frame_size, layout.frame_size)

    def fragments(self) -> list[list[tuple[int, int]]] | None:
        """Each frame's fragments as (offset of the item's value in the handle, length); None when which
        fragments make which frame cannot be told from the items and the Basic Offset Table."""
        if self._fragments is not None:
            return self._fragments
        places, at = [], self.offset
        for length in self.items:
            places.append((at + 8, length))
            at += 8 + length
        table, fragments = places[0], places[1:]
        if self.count == 1:
            grouped = [fragments]
        elif len(fragments) == self.count:
            grouped = [[f] for f in fragments]
        elif table[1] == 4 * self.count:
            offsets = struct.unpack(f"<{self.count}L", self.read(*table))
            starts, position, grouped = {}, 0, [[] for _ in range(self.count)]
            for i, (_, length) in enumerate(fragments):
                starts[position] = i
                position += 8 + length
            if any(o not in starts for o in offsets) or list(offsets) != sorted(offsets):
                return None
            bounds = [starts[o] for o in offsets] + [len(fragments)]
            grouped = [fragments[bounds[i]:bounds[i + 1]] for i in range(self.count)]
        else:
            return None
        self._fragments = grouped
        return grouped


# --- which frames carry which boxes ---------------------------------------------------------------------

@dataclass
class _Label:
    """A box and the pixels that make its label: where (a mask over the box) and their values."""

    box: Box
    mask: np.ndarray
    values: np.ndarray


def _label(box: Box, reference: np.ndarray, still: np.ndarray | None) -> _Label | None:
    region = reference[box.top:box.top + box.height, box.left:box.left + box.width].astype(np.float32)
    if region.size == 0:
        return None
    if still is not None:
        mask = still[box.top:box.top + box.height, box.left:box.left + box.width]
    else:
        mask = np.abs(region - float(np.median(region))) >= LABEL_CONTRAST
    if int(mask.sum()) < MIN_LABEL_PIXELS:
        return None
    return _Label(box, mask, region[mask])


def carries(grey: np.ndarray, label: _Label) -> bool:
    """Whether a frame (8-bit grey) holds a label: at least `CARRY_SHARE` of the label's pixels within the
    still tolerance of its values (15% of the value, at least 4 grey levels: `pixel_text.STILL_SHARE`)."""
    b = label.box
    region = grey[b.top:b.top + b.height, b.left:b.left + b.width].astype(np.float32)
    if region.shape != label.mask.shape:
        return False
    near = np.abs(region[label.mask] - label.values) <= np.maximum(4.0, STILL_SHARE * label.values)
    return float(near.mean()) >= CARRY_SHARE


# --- the plan and the spool -----------------------------------------------------------------------------

@dataclass
class Redaction:
    """What was covered and how the pixel data is written: the output's syntax and form, each redacted frame's
    new bytes (in `spool`), and the header changes the output needs."""

    syntax: UID  # the output's transfer syntax
    mode: str  # "native" (in place), "own" (redacted frames re-encoded in their syntax), "converted" (to EVRLE)
    frames: int
    boxes: dict[int, tuple[Box, ...]]  # frame index -> covered (padded) boxes
    spooled: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # frame -> [(offset, length)] in spool
    spool: Any = None
    layout: Layout | None = None  # uncompressed output's frame layout (native and converted)
    header: dict[str, Any] = field(default_factory=dict)  # attribute keyword -> new value (None: removed)
    offset_table: bool = False  # encapsulated output: write a Basic Offset Table
    source: Any = None  # the PixelSource the unredacted frames are copied from
    looked: bool = False  # the learned detector looked at the redacted frames too (`leftovers`)

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None

    @property
    def covered(self) -> int:
        return sum(len(b) for b in self.boxes.values())

    def regions(self) -> str:
        """The covered boxes as JSON for the manifest and the release metadata: frames with the same boxes
        together, 1-based inclusive frame ranges (as DICOM numbers frames), boxes [top, left, height, width]
        in pixels. Geometry only: nothing of what was under the boxes."""
        groups: dict[tuple, list[int]] = {}
        for index in sorted(self.boxes):
            key = tuple((b.top, b.left, b.height, b.width) for b in sorted(self.boxes[index],
                                                                          key=lambda b: (b.top, b.left)))
            groups.setdefault(key, []).append(index + 1)
        out = []
        for key, numbers in sorted(groups.items(), key=lambda kv: kv[1][0]):
            ranges, start = [], numbers[0]
            for previous, number in zip(numbers, numbers[1:] + [None]):
                if number != previous + 1:
                    ranges.append([start, previous])
                    start = number
            out.append({"frames": ranges, "boxes": [list(b) for b in key]})
        return json.dumps(out, separators=(",", ":"))

    def method_lines(self) -> list[str]:
        """De-identification Method values (each at most 64 characters) saying what was covered and how the
        pixels were written."""
        again = "OCR, text detector" if self.looked else "OCR"
        lines = [f"Burned-in text covered: {self.covered} boxes, {len(self.boxes)} of {self.frames} frames"[:64],
                 f"Redacted frames read again ({again}): no text found" if self.looked else
                 "Redacted frames read again by OCR: no text found"]
        if self.mode == "own":
            lines.append(f"Redacted frames re-encoded losslessly: {_NAMES.get(str(self.syntax), 'own syntax')}"[:64])
        elif self.mode == "converted":
            lines.append("Pixel data decoded, written as Explicit VR Little Endian")
        return lines

    def apply_header(self, out: Dataset) -> None:
        """The output header's pixel attributes as this pixel data needs them."""
        for keyword, value in self.header.items():
            if value is None:
                if keyword in out:
                    delattr(out, keyword)
            else:
                setattr(out, keyword, value)


def _spool_write(red: Redaction, index: int, pieces: list[bytes]) -> None:
    if red.spool is None:
        red.spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    places = []
    for piece in pieces:
        red.spool.seek(0, 2)
        places.append((red.spool.tell(), len(piece)))
        red.spool.write(piece)
    red.spooled[index] = places


def _spool_read(red: Redaction, index: int) -> list[bytes]:
    out = []
    for offset, length in red.spooled[index]:
        red.spool.seek(offset)
        out.append(red.spool.read(length))
    return out


def plan_output(source: PixelSource, ds: Dataset) -> tuple[str, UID, dict]:
    """How the redacted image is written: (mode, output syntax, encoder options). Uncompressed: in place.
    Compressed with a locked lossless encoder for its syntax and frames whose fragments are known: its own
    syntax. Otherwise Explicit VR Little Endian, every frame decoded."""
    syntax = source.syntax
    if not syntax.is_little_endian:
        # Explicit VR Big Endian (retired): its 8-bit OW pixels are byte-swapped in pairs and its header would be
        # rewritten in another byte order; such a file with text is quarantined rather than redacted.
        raise NotDeidentifiable(NOT_REDACTABLE)
    if not syntax.is_compressed:
        photometric = str(source.options.get("photometric_interpretation") or "").strip().upper()
        try:
            Layout.of(source.options)
            if not photometric.endswith("_422"):
                return "native", syntax, {}
        except NotDeidentifiable:
            pass
        # A layout not written frame by frame here (YBR_FULL_422's shared chroma, 1-bit or 12-bit packing):
        # decoded, and written uncompressed still, as Explicit VR Little Endian.
        return "converted", ExplicitVRLittleEndian, {}
    own = _OWN.get(str(syntax))
    if own is not None and source.fragments() is not None:
        from pydicom.pixels import get_encoder

        try:
            encoder = get_encoder(UID(own[0]))
            if encoder.is_available:
                return "own", syntax, own[1]
        except Exception:  # noqa: BLE001 - no encoder: converted below
            pass
    return "converted", ExplicitVRLittleEndian, {}


def _overlaps(a: Box, b: Box) -> bool:
    return a.top < b.top + b.height and b.top < a.top + a.height and a.left < b.left + b.width and b.left < a.left + a.width


def confirm(source: PixelSource, found: tuple[FoundText, ...], detector: PixelTextDetector, photometric: str,
            sampled: tuple[int, ...], kind: TypeSettings | None = None) -> tuple[FoundText, ...]:
    """The screening's words confirmed by a second reader before anything is covered, and its own words added.

    The frames the words were found on (a volume's sampled frames for words found on its overlays) are read
    whole by `PixelTextDetector.read_again`. Two readers must agree before anything is covered: Tesseract's
    screening and its second reading (a word where the screening's are), or the learned detector and either.
    Text the detector found (lines, unread) is covered whatever Tesseract reads: faces and lines Tesseract does
    not read are why it is there; it was tuned to see no text in clean images of the tuning half. Tesseract's
    words the second reading does not confirm are looked at by the detector (a single frame, `kind`'s
    settings); where it sees no line there either, nothing is covered and the file is quarantined as text
    found ("text in pixel data"), unchanged, as `on_text: quarantine` would: on the 300 clean report screens of
    benchmarks/text_screening.py the two the screening took for text (a B-scan thumbnail's speckle) would
    otherwise have been published with boxes over their thumbnails. The second reading's words are covered too
    (a word the screening's boxes cut)."""
    options = source.options
    rows, cols = int(options["rows"]), int(options["columns"])
    volume = source.count > 1
    frames = sorted({t.frame for t in found if t.frame is not None} or set(sampled) or {0})
    padded = [b.padded(pad_of(b), rows, cols) for t in found for b in t.boxes]
    agreed, extra = any(t.reader == "detector" for t in found), []
    for index in frames:
        frame = source.frames.frame(index)
        grey = _grey(frame, photometric)
        if grey is None:
            continue
        words = detector.read_again(grey, volume, confirming=True)
        agreed |= any(_overlaps(w, b) for w in words for b in padded)
        if not agreed and not volume and kind is not None and kind.detector == "frames":
            lines = detector.detect(_colour(np.asarray(frame), photometric), grey, kind)
            agreed = any(_overlaps(w, b) for w in lines for b in padded)
        words = [w for w in words if w.height <= MAX_WORD_HEIGHT]  # a "word" taller is Tesseract reading a region
        if volume:  # on a volume only words on the found words' lines: elsewhere Sauvola reads the speckle
            words = [w for w in words if any(w.top < b.top + b.height and b.top < w.top + w.height for b in padded)]
        if words:
            extra.append(FoundText(index if volume else 0, tuple(words)))
    if not agreed:
        raise NotDeidentifiable(TEXT_FOUND)
    return tuple(found) + tuple(extra)


def redact(ds: Dataset, source: PixelSource, found: tuple[FoundText, ...], detector: PixelTextDetector,
           sampled: tuple[int, ...], confirmed: bool = False, kind: TypeSettings | None = None) -> Redaction:
    """Confirm the found words (`confirm`, unless `confirmed`), cover them on every frame that carries them,
    write the redacted frames to a spool in the output's form, and prove them clean (`verify`);
    NotDeidentifiable(TEXT_FOUND) if the second reading does not confirm them, (TEXT_LEFT) if words are still
    read after, (NOT_REDACTABLE) if the pixels cannot be rewritten."""
    photometric = str(ds.get("PhotometricInterpretation", "") or "").strip().upper()
    count = source.count
    if not confirmed:
        found = confirm(source, found, detector, photometric, sampled, kind)
    mode, syntax, encode_options = plan_output(source, ds)
    red = None
    for round_ in range(ROUNDS):
        if red is not None:
            red.close()
        red = Redaction(syntax=syntax, mode=mode, frames=count, boxes={})
        try:
            try:
                _redact(ds, source, found, detector, photometric, encode_options, red)
            except NotDeidentifiable as reason:
                if red.mode != "own" or str(reason) != NOT_REDACTABLE:
                    raise
                # The syntax's encoder refused these pixels (RLE of 32-bit samples): decoded and written as
                # Explicit VR Little Endian instead, as for a syntax without an encoder.
                red.close()
                mode, syntax, encode_options = "converted", ExplicitVRLittleEndian, {}
                red = Redaction(syntax=syntax, mode=mode, frames=count, boxes={})
                _redact(ds, source, found, detector, photometric, encode_options, red)
            left = leftovers(red, source, detector, ds, sampled, kind)
            red.looked = kind is not None and kind.detector != "off"
        except BaseException:
            red.close()
            raise
        if not left:
            return red
        # Words read after the covering (a line the first boxes cut): covered in the next round, whose frames
        # are read again whole; still read after the last round: quarantined.
        found = tuple(found) + tuple(FoundText(t.frame if count > 1 else 0,
                                               tuple(b for b in t.boxes if min(b.height, b.width) <= MAX_WORD_HEIGHT),
                                               t.reader)
                                     for t in left)
    red.close()
    raise NotDeidentifiable(TEXT_LEFT)


def _redact(ds, source: PixelSource, found, detector, photometric, encode_options, red: Redaction) -> None:
    options = source.options
    rows, cols = int(options["rows"]), int(options["columns"])
    count = source.count
    placed = [(t.frame, b.padded(pad_of(b), rows, cols)) for t in found for b in t.boxes]
    placed = [(frame, box) for frame, box in placed if box.height and box.width]
    # A volume: each box's label, to look for on every frame, from where it was read. A box read on the
    # overlays whose label cannot be told (no still pixels in it) is covered on every frame; one read on a
    # frame whose strokes cannot be told, on that frame only.
    labels: list[_Label | None] = []
    if count == 1:
        placed += [(0, box) for box in _bridges([box for _, box in placed])]
    if count > 1:
        still, reference = _volume_reference(source, detector, photometric, count)
        if still is not None:
            placed = [(frame, _whole_line(box, still)) for frame, box in placed]
        for frame, box in placed:
            if frame is None:
                labels.append(_label(box, reference, still) if still is not None else None)
            else:
                grey = _grey(source.frames.frame(frame), photometric)
                labels.append(_label(box, grey, None) if grey is not None else None)
    if red.mode == "native":
        red.layout = Layout.of(options, source.syntax.is_little_endian)
    for index in range(count):
        if count == 1:
            boxes = tuple(dict.fromkeys(box for _, box in placed))
        else:
            boxes, grey = [], None
            for (frame, box), label in zip(placed, labels):
                if frame == index or (frame is None and label is None):
                    boxes.append(box)
                    continue
                if label is None:
                    continue
                if grey is None:
                    grey = _grey(source.frames.frame(index), photometric)
                if grey is not None and carries(grey, label):
                    boxes.append(box)
            boxes = tuple(dict.fromkeys(boxes))
        if boxes:
            red.boxes[index] = boxes
            _spool_write(red, index, _redacted_frame(source, index, boxes, red, encode_options))
    if not red.boxes:
        raise NotDeidentifiable(NOT_REDACTABLE)
    _header_changes(ds, source, red)


def _whole_line(box: Box, still: np.ndarray) -> Box:
    """A volume's box grown to the whole label it is part of: the still pixels (what every overlay frame
    shares: a device's label) joined along the line, where they touch the box. A word neither reading
    found ("Name:" before a name both read) is on every B-scan with the rest of its line; covering the line
    covers it (6 of 246 redacted volumes of the benchmark kept such a word). Growth is kept to the box's line
    (a component at most twice its height). A box running up or down (taller than twice its width) grows along
    its column the same way."""
    from scipy import ndimage as ndi

    if box.height > 2 * box.width:
        turned = _whole_line(Box(box.left, box.top, box.width, box.height), np.ascontiguousarray(still.T))
        return Box(turned.left, turned.top, turned.width, turned.height)

    rows, cols = still.shape
    top, bottom = max(0, box.top - box.height // 2), min(rows, box.top + box.height + box.height // 2)
    band = still[top:bottom]
    if not band.any():
        return box
    joined = ndi.maximum_filter1d(band.view(np.uint8), size=max(3, box.height), axis=1) > 0
    labels, _ = ndi.label(joined)
    touching = np.unique(labels[:, box.left:box.left + box.width])
    left, right = box.left, box.left + box.width
    for number, found in enumerate(ndi.find_objects(labels), start=1):
        if found is None or number not in touching:
            continue
        if found[0].stop - found[0].start > 2 * box.height:
            continue
        left, right = min(left, found[1].start), max(right, found[1].stop)
    return Box(box.top, left, box.height, right - left)


BRIDGE = 8  # line heights: a gap this wide at most between two covered boxes of one line is covered too


def _bridges(boxes: list[Box]) -> list[Box]:
    """The gaps between covered boxes of one line (each overlapping the other's rows by half the smaller's height,
    at most `BRIDGE` times that height apart), as boxes to cover: a word neither reader boxed between two they did
    ("MRN" between a birth date and a number, on a held-out report screen whose cover left it legible) goes with
    its line. A single frame's analogue of a volume's `_whole_line`, which grows along still pixels; a frame's own
    ink runs on into a fundus or a panel's edge, so only what lies between covered words is taken."""
    out = []
    across = sorted((b for b in boxes if b.height <= 2 * b.width), key=lambda b: b.left)
    for i, a in enumerate(across):
        for b in across[i + 1:]:
            line = min(a.height, b.height)
            gap = b.left - (a.left + a.width)
            if gap > BRIDGE * line:
                break  # sorted by left: every later box starts farther off
            top, bottom = max(a.top, b.top), min(a.top + a.height, b.top + b.height)
            if gap > 0 and 2 * (bottom - top) >= line:
                out.append(Box(top, a.left + a.width, bottom - top, gap))
    return out


def _grey(frame: np.ndarray, photometric: str) -> np.ndarray | None:
    return to_grey8(np.asarray(frame), "RGB" if np.asarray(frame).ndim == 3 else photometric)


def _volume_reference(source: PixelSource, detector: PixelTextDetector, photometric: str,
                      count: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The still pixels and the mean of the volume's overlay frames (as the text check made them)."""
    kind_frames = max(2, detector.settings.for_type("multi_frame").overlay_frames)
    greys = []
    for index in sample_frames(count, kind_frames):
        grey = _grey(source.frames.frame(index), photometric)
        if grey is None or grey.ndim != 2:
            return None, None
        greys.append(grey)
    lowest, highest = np.minimum.reduce(greys), np.maximum.reduce(greys)
    average = np.sum(greys, axis=0, dtype=np.uint32) / len(greys)
    return still_pixels(lowest, highest, average), average


def _redacted_frame(source: PixelSource, index: int, boxes, red: Redaction, encode_options) -> list[bytes]:
    options = source.options
    if red.mode == "native":
        layout = red.layout
        array = layout.array(source.native(index, layout))
        cover(array, boxes, fill_value(layout.photometric, layout.samples, layout.stored, layout.signed))
        return [layout.tobytes(array)]
    if red.mode == "own":
        from pydicom.pixels import get_decoder, get_encoder

        source.handle.seek(source.offset)
        array, meta = get_decoder(source.syntax).as_array(source.handle, index=index, as_rgb=False, **options)
        photometric = str(meta.get("photometric_interpretation") or options.get("photometric_interpretation"))
        array = np.array(array)
        cover(array, boxes, fill_value(photometric, int(meta.get("samples_per_pixel", 1)),
                                       int(meta.get("bits_stored", 8)), bool(meta.get("pixel_representation", 0))))
        target = UID(_OWN[str(source.syntax)][0])
        encoder_options = {k: meta[k] for k in ("rows", "columns", "samples_per_pixel", "bits_allocated",
                                                 "bits_stored", "pixel_representation", "photometric_interpretation")
                           if k in meta}
        encoder_options["number_of_frames"] = 1
        if int(meta.get("samples_per_pixel", 1)) > 1:
            encoder_options["planar_configuration"] = int(meta.get("planar_configuration", 0) or 0)
        try:
            data = get_encoder(target).encode(array, **encoder_options, **encode_options)
        except Exception:  # noqa: BLE001 - an encoder's refusal: not written
            raise NotDeidentifiable(NOT_REDACTABLE) from None
        return [bytes(data) + (b"\0" if len(data) % 2 else b"")]
    # converted: the frame decoded as the output holds every frame (colour as RGB)
    array, layout = _decoded_native(source, index)
    red.layout = layout
    cover(array, boxes, fill_value(layout.photometric, layout.samples, layout.stored, layout.signed))
    return [layout.tobytes(array)]


def _decoded_native(source: PixelSource, index: int) -> tuple[np.ndarray, Layout]:
    """A compressed frame decoded to what an uncompressed output holds: RGB for colour, the decoder's bits."""
    from pydicom.pixels import get_decoder

    source.handle.seek(source.offset)
    try:
        array, meta = get_decoder(source.syntax).as_array(source.handle, index=index, as_rgb=True, **source.options)
    except Exception:  # noqa: BLE001
        raise NotDeidentifiable(NOT_REDACTABLE) from None
    array = np.array(array)
    samples = int(meta.get("samples_per_pixel", 1))
    bits = array.dtype.itemsize * 8
    layout = Layout(int(meta["rows"]), int(meta["columns"]), samples, bits, 0, True,
                    array.dtype.kind == "i", min(int(meta.get("bits_stored", bits)), bits),
                    "RGB" if samples == 3 else str(meta.get("photometric_interpretation", "MONOCHROME2")))
    return array, layout


def _header_changes(ds: Dataset, source: PixelSource, red: Redaction) -> None:
    """The pixel attributes the output must say: for a converted image its new encoding (colour as RGB,
    interleaved, the decoder's bits) and that it was once lossy; offset tables that no longer hold removed."""
    header: dict[str, Any] = {"ExtendedOffsetTable": None, "ExtendedOffsetTableLengths": None}
    if red.mode == "own":
        red.offset_table = source.items[0] > 0 or "ExtendedOffsetTable" in ds
    if red.mode == "converted":
        layout = red.layout
        header.update({"PhotometricInterpretation": layout.photometric, "BitsAllocated": layout.bits,
                       "BitsStored": layout.stored, "HighBit": layout.stored - 1,
                       "PixelRepresentation": int(layout.signed),
                       "PlanarConfiguration": 0 if layout.samples > 1 else None})
        lossy = str(ds.get("LossyImageCompression", "") or "").strip() == "01" or str(source.syntax) in _LOSSY
        if lossy:
            header["LossyImageCompression"] = "01"
    red.header = header


# --- proof ----------------------------------------------------------------------------------------------

def output_frames(red: Redaction, source: PixelSource) -> Frames:
    """The redacted frames as the output will hold them, read from the spool (only `red.boxes`' frames)."""
    return _SpoolFrames(red, source)


class _SpoolFrames:
    def __init__(self, red: Redaction, source: PixelSource):
        self.red, self.source = red, source

    def frame(self, index: int) -> np.ndarray:
        red = self.red
        data = _spool_read(red, index)
        if red.mode in ("native", "converted"):
            array = red.layout.array(data[0])
            if red.layout.samples == 3 and red.layout.photometric.startswith("YBR"):
                from pydicom.pixels import convert_color_space

                array = convert_color_space(array, red.layout.photometric, "RGB")
            return array
        from pydicom.encaps import encapsulate
        from pydicom.pixels import get_decoder

        value = encapsulate([b"".join(data)])
        options = dict(self.source.options, number_of_frames=1)
        array, _ = get_decoder(self.source.syntax).as_array(io.BytesIO(value), index=0, as_rgb=True, **options)
        return array


def _inside(b: Box, covered: tuple[Box, ...]) -> bool:
    return any(c.top <= b.top and c.left <= b.left and b.top + b.height <= c.top + c.height
               and b.left + b.width <= c.left + c.width for c in covered)


def leftovers(red: Redaction, source: PixelSource, detector: PixelTextDetector, ds: Dataset,
              sampled: tuple[int, ...], kind: TypeSettings | None = None) -> tuple[FoundText, ...]:
    """The text still found: every redacted frame, decoded from the bytes to be written, read whole again by
    the second reader (`PixelTextDetector.read_again`: another scale and thresholding than the screening), and
    a volume's sampled frames left unredacted too; the words outside the covered boxes, per frame. Where the
    type has the learned detector (`kind`), it looks again too, so a redacted frame is read by a reader other
    than the one that found its text whichever found it: a single frame's redacted frame whole (`detect`), a
    volume's still pixels across its overlay frames as written (`_still_left`). Its lines outside the covered
    boxes are left."""
    photometric = str(ds.get("PhotometricInterpretation", "") or "").strip().upper()
    spooled = output_frames(red, source)
    looks = kind is not None and kind.detector != "off"
    left = []
    for index in sorted(set(red.boxes) | set(sampled)):
        try:
            frame = spooled.frame(index) if index in red.boxes else source.frames.frame(index)
        except NotDeidentifiable:
            raise
        except Exception:  # noqa: BLE001 - what cannot be decoded again cannot be shown clean
            raise NotDeidentifiable(NOT_REDACTABLE) from None
        grey = _grey(frame, photometric)
        if grey is None:
            continue
        covered = red.boxes.get(index, ())
        words = tuple(b for b in detector.read_again(grey, volume=red.frames > 1) if not _inside(b, covered))
        if red.frames == 1 and any(c.height > c.width for c in covered):
            # Text ran up or down: the rest of a line the cover took part of is read only turned.
            words += tuple(b for b in detector.read_again_turned(grey) if not _inside(b, covered))
        if looks and red.frames == 1:
            words += tuple(b for b in detector.detect(_colour(np.asarray(frame), photometric), grey, kind)
                           if min(b.height, b.width) <= MAX_WORD_HEIGHT and not _inside(b, covered))
        if words:
            left.append(FoundText(index, words))
    if looks and red.frames > 1:
        left.extend(_still_left(red, source, detector, photometric, spooled))
    return tuple(left)


def _still_left(red: Redaction, source: PixelSource, detector: PixelTextDetector, photometric: str,
                spooled) -> list[FoundText]:
    """The learned detector on what a redacted volume's overlay frames share as written (`_still_regions`): its
    lines outside every frame's covered boxes (on what every frame shares, so on every frame)."""
    frames = max(2, detector.settings.for_type("multi_frame").overlay_frames)
    greys = []
    for index in sample_frames(red.frames, frames):
        grey = _grey(spooled.frame(index) if index in red.boxes else source.frames.frame(index), photometric)
        if grey is None or grey.ndim != 2:
            return []
        greys.append(grey)
    lowest, highest = np.minimum.reduce(greys), np.maximum.reduce(greys)
    average = np.sum(greys, axis=0, dtype=np.uint32) / len(greys)
    still = still_pixels(lowest, highest, average)
    if still.sum() < STILL_PIXELS:
        return []
    covered = tuple(b for boxes in red.boxes.values() for b in boxes)
    lines = tuple(b for b in detector._still_regions(loose_still(lowest, highest, average), still,
                                                     average.astype(np.uint8))
                  if not _inside(b, covered))
    return [FoundText(None, lines, "detector")] if lines else []


def verify(red: Redaction, source: PixelSource, detector: PixelTextDetector, ds: Dataset,
           sampled: tuple[int, ...], kind: TypeSettings | None = None) -> None:
    """Any text still found (`leftovers`): NotDeidentifiable(TEXT_LEFT)."""
    if leftovers(red, source, detector, ds, sampled, kind):
        raise NotDeidentifiable(TEXT_LEFT)


# --- writing --------------------------------------------------------------------------------------------

def value_length(red: Redaction, source: PixelSource) -> int | None:
    """The length of the output's pixel data value (None: encapsulated, undefined length)."""
    if red.mode == "own":
        return None
    if red.mode == "native":
        return source.length
    size = red.layout.frame_size * red.frames
    return size + size % 2


def write_value(red: Redaction, source: PixelSource, target) -> None:
    """The output's pixel data value: uncompressed frames in order (redacted ones from the spool, the others
    copied as bytes, or decoded when converted), or the items of encapsulated data (a Basic Offset Table,
    then each frame's fragments: redacted frames' new one, the others' copied as bytes). No delimiter."""
    if red.mode == "native":
        layout = red.layout
        position = source.offset
        for index in range(red.frames):
            if index in red.boxes:
                target.write(_spool_read(red, index)[0])
            else:
                _copy(source, source.offset + index * layout.frame_size, layout.frame_size, target)
            position = source.offset + (index + 1) * layout.frame_size
        _copy(source, position, source.offset + source.length - position, target)  # odd-length padding
        return
    if red.mode == "converted":
        written = 0
        for index in range(red.frames):
            if index in red.boxes:
                data = _spool_read(red, index)[0]
            else:
                array, layout = _decoded_native(source, index)
                if layout != red.layout:
                    raise NotDeidentifiable(NOT_REDACTABLE)
                data = layout.tobytes(array)
            target.write(data)
            written += len(data)
        if written % 2:
            target.write(b"\0")
        return
    grouped = source.fragments()
    frames = []
    for index in range(red.frames):
        if index in red.boxes:
            frames.append([("spool", o, n) for o, n in red.spooled[index]])
        else:
            frames.append([("source", o, n) for o, n in grouped[index]])
    offsets, position = [], 0
    for pieces in frames:
        offsets.append(position)
        position += sum(8 + n for _, _, n in pieces)
    table = struct.pack(f"<{len(offsets)}L", *offsets) if red.offset_table and position < 1 << 32 else b""
    target.write(struct.pack("<HHL", 0xFFFE, 0xE000, len(table)) + table)
    for pieces in frames:
        for where, offset, length in pieces:
            target.write(struct.pack("<HHL", 0xFFFE, 0xE000, length))
            if where == "spool":
                red.spool.seek(offset)
                target.write(red.spool.read(length))
            else:
                _copy(source, offset, length, target)


COPY_CHUNK = 4 << 20  # bytes copied at a time (part10's CHUNK; part10 imports this module, not the reverse)


def _copy(source: PixelSource, offset: int, length: int, target) -> None:
    source.handle.seek(offset)
    while length > 0:
        chunk = source.handle.read(min(COPY_CHUNK, length))
        if not chunk:
            raise NotDeidentifiable(NOT_REDACTABLE)
        target.write(chunk)
        length -= len(chunk)


def pixel_vr(red: Redaction, source_vr: str | None) -> str | None:
    """The VR the output's Pixel Data is written with (None: implicit VR)."""
    if red.mode == "converted":
        return "OW" if red.layout.bits > 8 else "OB"
    return source_vr


def write_element(red: Redaction, source: PixelSource, target, vr: str | None) -> None:
    """The whole Pixel Data element of a streamed output (tag, VR, length, value, and the delimiter when
    encapsulated), as `SourceImage.copy_pixels` writes an unchanged one."""
    length = value_length(red, source)
    vr = pixel_vr(red, vr)
    head = struct.pack("<HH", 0x7FE0, 0x0010)
    if vr is not None:
        head += vr.encode("latin-1") + b"\0\0"
    head += struct.pack("<L", 0xFFFFFFFF if length is None else length + length % 2)
    target.write(head)
    write_value(red, source, target)
    if red.mode == "native" and length % 2:
        target.write(b"\0")  # pydicom pads an odd value to even (as SourceImage.copy_pixels)
    if length is None:
        target.write(struct.pack("<HHL", 0xFFFE, 0xE0DD, 0))


def value_bytes(red: Redaction, source: PixelSource) -> bytes:
    """The output's pixel data value in memory (a file read whole is written whole)."""
    buffer = io.BytesIO()
    write_value(red, source, buffer)
    return buffer.getvalue()
