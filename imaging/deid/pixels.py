"""Sanity of the image bytes that are copied, undecoded, into the output."""

from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.uid import UID

from .errors import Quarantined


def _int(ds: Dataset, keyword: str, default: int | None = None) -> int | None:
    try:
        return int(ds.get(keyword, default))
    except (TypeError, ValueError):
        return default


def check_length(ds: Dataset, syntax: UID) -> None:
    """Quarantine native pixel data shorter than its Rows x Columns x Frames x Samples x Bits.

    A cut-off file would otherwise be published as a valid-looking but broken image.
    Encapsulated (compressed) pixel data is opaque to us and not checked.
    """
    if "PixelData" not in ds or syntax.is_compressed:
        return
    rows, cols, bits = _int(ds, "Rows"), _int(ds, "Columns"), _int(ds, "BitsAllocated")
    if not rows or not cols or not bits:
        return
    frames = _int(ds, "NumberOfFrames", 1) or 1
    samples = _int(ds, "SamplesPerPixel", 1) or 1
    expected = (rows * cols * frames * samples * bits + 7) // 8
    if len(ds.PixelData) < expected:
        raise Quarantined("pixel data shorter than the image it describes")
