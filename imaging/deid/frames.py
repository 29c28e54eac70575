"""The frames of an image's pixel data, each read and decoded alone, on demand.

The text check reads a few frames of an image (a sample of a volume's B-scans), so a 2,300-frame
volume must never be decoded, or even held, whole. `Frames` reads one frame's bytes from a file
positioned anywhere (the pixel data element's value starts at `offset`) and turns them into an
array:

- uncompressed frames of the common layouts (8- or 16-bit grey, 8-bit RGB interleaved) are *viewed*:
  the frame's bytes read and given a shape (`numpy.frombuffer`), no decoder involved;
- every other layout, and every compressed frame, goes through pydicom's decoder for that frame alone
  (pydicom walks the fragments of encapsulated data from the file, reading only what the frame needs).

    frames = Frames.from_dataset(ds, syntax)            # pixel data in memory (a dataset read whole)
    frames = Frames(handle, offset, syntax, options)    # pixel data left in a file (imaging.deid.part10)
    frames.count; frames.frame(i)                       # one decoded frame: (rows, cols) or (rows, cols, 3)
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
from pydicom.dataset import Dataset
from pydicom.uid import UID

from .errors import NotDeidentifiable

UNCHECKABLE = "pixel data could not be checked for text"


def pixel_options(ds: Dataset) -> dict[str, Any]:
    """pydicom's decoding options (rows, columns, bits, photometric interpretation...) from a header."""
    from pydicom.pixels.utils import as_pixel_options

    return as_pixel_options(ds, pixel_keyword="PixelData")


@dataclass
class Frames:
    """One image's frames, read from `source` (its pixel data value starts at `offset`) one at a time."""

    source: BinaryIO
    offset: int
    syntax: UID
    options: dict[str, Any]
    _view: tuple | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        native = not self.syntax.is_compressed and self.syntax.is_little_endian
        self._view = _view_layout(self.options) if native else None

    @classmethod
    def from_dataset(cls, ds: Dataset, syntax: UID) -> "Frames":
        """The frames of a dataset read whole (its PixelData value in memory, read in place)."""
        try:
            return cls(io.BytesIO(ds.PixelData or b""), 0, syntax, pixel_options(ds))
        except Exception:  # noqa: BLE001 - a header the decoder cannot describe: nothing can be read
            raise NotDeidentifiable(UNCHECKABLE) from None

    @property
    def count(self) -> int:
        try:
            return max(1, int(self.options.get("number_of_frames") or 1))
        except (TypeError, ValueError):
            return 1

    def frame(self, index: int) -> np.ndarray:
        """Frame `index`, decoded alone (RGB for colour); NotDeidentifiable(UNCHECKABLE) when it cannot be."""
        try:
            if self._view is not None:
                return self._viewed(index)
            from pydicom.pixels import get_decoder

            self.source.seek(self.offset)
            array, _meta = get_decoder(self.syntax).as_array(self.source, index=index, as_rgb=True, **self.options)
            return array
        except NotDeidentifiable:
            raise
        except Exception:  # noqa: BLE001 - whatever the codec raises: the frame cannot be shown clean
            raise NotDeidentifiable(UNCHECKABLE) from None

    def _viewed(self, index: int) -> np.ndarray:
        dtype, shape = self._view
        size = int(np.prod(shape)) * dtype.itemsize
        self.source.seek(self.offset + index * size)
        data = self.source.read(size)
        if len(data) != size:
            raise NotDeidentifiable(UNCHECKABLE)
        return np.frombuffer(data, dtype=dtype).reshape(shape)


def _view_layout(options: dict[str, Any]) -> tuple[np.dtype, tuple[int, ...]] | None:
    """(dtype, frame shape) when an uncompressed frame's bytes are its pixels as they stand, else None.

    Exactly the layouts where pydicom's native decoder returns the bytes reshaped and nothing more:
    whole bytes per sample with every bit stored (no masking or sign extension to do), grey or
    interleaved RGB (no planar reordering, no YBR conversion). Anything else is left to pydicom."""
    try:
        rows, cols = int(options["rows"]), int(options["columns"])
        bits, stored = int(options["bits_allocated"]), int(options.get("bits_stored") or options["bits_allocated"])
        samples = int(options.get("samples_per_pixel") or 1)
        signed = int(options.get("pixel_representation") or 0)
        photometric = str(options.get("photometric_interpretation") or "").strip().upper()
    except (KeyError, TypeError, ValueError):
        return None
    if rows < 1 or cols < 1 or bits not in (8, 16) or stored != bits:
        return None
    dtype = np.dtype(f"<{'i' if signed else 'u'}{bits // 8}")
    if samples == 1 and photometric in ("MONOCHROME1", "MONOCHROME2"):
        return dtype, (rows, cols)
    planar = int(options.get("planar_configuration") or 0)
    if samples == 3 and bits == 8 and photometric == "RGB" and planar == 0:
        return dtype, (rows, cols, 3)
    return None
