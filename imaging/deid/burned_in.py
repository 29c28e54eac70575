"""Files whose pixels may show identifying text. No pixel-cleaning rule exists, so they are refused."""

from __future__ import annotations

from pydicom.dataset import Dataset

from .errors import Quarantined

SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"  # and its .7.x multi-frame family: screenshots, scans
ENCAPSULATED_DOCUMENTS = "1.2.840.10008.5.1.4.1.1.104"  # .104.x: PDF, CDA, STL, OBJ, MTL
# Ophthalmic image IODs in which Burned In Annotation is Type 1: the device must say "NO".
OPHTHALMIC_IMAGES = frozenset({
    "1.2.840.10008.5.1.4.1.1.77.1.5.1",  # Ophthalmic Photography 8 Bit
    "1.2.840.10008.5.1.4.1.1.77.1.5.2",  # Ophthalmic Photography 16 Bit
    "1.2.840.10008.5.1.4.1.1.77.1.5.4",  # Ophthalmic Tomography
    "1.2.840.10008.5.1.4.1.1.77.1.5.5",  # Wide Field Ophthalmic Photography Stereographic Projection
    "1.2.840.10008.5.1.4.1.1.77.1.5.6",  # Wide Field Ophthalmic Photography 3D Coordinates
    "1.2.840.10008.5.1.4.1.1.77.1.5.7",  # Ophthalmic Optical Coherence Tomography En Face
    "1.2.840.10008.5.1.4.1.1.77.1.5.8",  # Ophthalmic OCT B-scan Volume Analysis
})


def _flag(ds: Dataset, keyword: str) -> str:
    return str(ds.get(keyword, "") or "").strip().upper()


def check(ds: Dataset, sop_class: str) -> None:
    """Raise Quarantined if the pixels may carry burned-in text or a recognisable face."""
    reason = None
    burned = _flag(ds, "BurnedInAnnotation")
    if sop_class == SECONDARY_CAPTURE or sop_class.startswith(SECONDARY_CAPTURE + "."):
        reason = "secondary capture (may carry burned-in text)"
    elif sop_class.startswith(ENCAPSULATED_DOCUMENTS + "."):
        reason = "encapsulated document"
    elif burned == "YES":
        reason = "burned-in annotation"
    elif burned not in ("", "NO"):
        reason = "burned-in annotation not declared NO"
    elif not burned and sop_class in OPHTHALMIC_IMAGES:
        reason = "burned-in annotation not declared"
    elif _flag(ds, "RecognizableVisualFeatures") == "YES":
        reason = "recognizable visual features"
    if reason:
        raise Quarantined(reason)
