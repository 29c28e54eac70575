"""Files whose pixels may show identifying text: refused outright, or read for text by OCR.

The Burned In Annotation flag is only trusted one way: YES (or a value that is not NO) is
believed and quarantines. NO is not believed for the files where devices are known to burn
text in and still say NO, nor is a missing flag: those are read by OCR (pixel_text.py), and
published only if no text is found, or, where the image type's `on_text` is `redact`, with the text covered
and read again (redact.py).
"""

from __future__ import annotations

from pydicom.dataset import Dataset

from .errors import NotDeidentifiable

SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"  # and its .7.x multi-frame family: screenshots, scans
ENCAPSULATED_DOCUMENTS = "1.2.840.10008.5.1.4.1.1.104"  # .104.x: PDF, CDA, STL, OBJ, MTL
# Photographs: cameras burn the patient's name, id and date into them whatever the flag says.
PHOTOGRAPHS = frozenset({
    "1.2.840.10008.5.1.4.1.1.77.1.5.1",  # Ophthalmic Photography 8 Bit
    "1.2.840.10008.5.1.4.1.1.77.1.5.2",  # Ophthalmic Photography 16 Bit
    "1.2.840.10008.5.1.4.1.1.77.1.5.5",  # Wide Field Ophthalmic Photography Stereographic Projection
    "1.2.840.10008.5.1.4.1.1.77.1.5.6",  # Wide Field Ophthalmic Photography 3D Coordinates
    "1.2.840.10008.5.1.4.1.1.77.1.5.7",  # Ophthalmic OCT En Face (a rendered picture, often labelled)
    "1.2.840.10008.5.1.4.1.1.77.1.4",  # VL Photographic Image (external eye, slit lamp)
    "1.2.840.10008.5.1.4.1.1.77.1.4.1",  # Video Photographic Image
})
PIXEL_DATA = (0x7FE00010, 0x7FE00008, 0x7FE00009)  # Pixel Data, Float and Double Float Pixel Data


def _flag(ds: Dataset, keyword: str) -> str:
    return str(ds.get(keyword, "") or "").strip().upper()


def _frames(ds: Dataset) -> int:
    try:
        return int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError):
        return 1


def is_secondary_capture(sop_class: str) -> bool:
    return sop_class == SECONDARY_CAPTURE or sop_class.startswith(SECONDARY_CAPTURE + ".")


def check(ds: Dataset, sop_class: str, has_pixels: bool | None = None) -> bool:
    """Raise NotDeidentifiable for what no check can clear; else True if the pixels must be read for text.

    Refused whatever the pixels show: encapsulated documents, Burned In Annotation YES or any
    value other than NO, Recognizable Visual Features YES. Read for text: photographs and
    secondary captures (whatever the flag), files without the flag, multi-frame images (a
    sample of frames). A file without pixel data has nothing to read (`has_pixels`: whether it has
    any, when `ds` is a header whose pixel data was left in the file).
    """
    reason = None
    burned = _flag(ds, "BurnedInAnnotation")
    if sop_class.startswith(ENCAPSULATED_DOCUMENTS + "."):
        reason = "encapsulated document"
    elif burned == "YES":
        reason = "burned-in annotation"
    elif burned not in ("", "NO"):
        reason = "burned-in annotation not declared NO"
    elif _flag(ds, "RecognizableVisualFeatures") == "YES":
        reason = "recognizable visual features"
    if reason:
        raise NotDeidentifiable(reason)
    if not (has_pixels if has_pixels is not None else any(tag in ds for tag in PIXEL_DATA)):
        return False
    return bool(sop_class in PHOTOGRAPHS or is_secondary_capture(sop_class) or not burned or _frames(ds) > 1)
