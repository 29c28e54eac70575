"""De-identification of DICOM files by DICOM PS3.15 Annex E (Table E.1-1, rev 2024b).

    from imaging.deid import load_profile, deidentify, NotDeidentifiable, to_bytes, PixelTextDetector
    profile = load_profile()                    # the research default; picklable, cached per process
    detector = shared_detector(settings)        # OCR, once per process (pixel_text.py)
    out = deidentify(ds, pseudonymizer=p, namespace="NHS", profile=profile, pixel_text=detector,
                     extra_identifiers=("Jane Smith", "9434765919"))
    data = to_bytes(out)                        # deterministic Part 10 bytes

`namespace` comes from imaging.issuers.IssuerPolicy.resolve(site, IssuerOfPatientID).

Pure functions: no Spark, no Dagster, no clock, no randomness. See docs/deidentification.md.
"""

from .engine import Deidentified, deidentify, deidentify_image
from .errors import NotDeidentifiable
from .options import OPTIONS, RESEARCH_DEFAULT
from .output import to_bytes
from .pixel_text import PixelTextDetector, PixelTextSettings, PixelTextStats, load_pixel_text_settings, shared_detector
from .profile import DeidProfile, load_profile
from .quiet import quiet
from .version import ENGINE_VERSION

OPTION_NAMES = tuple(o.name for o in OPTIONS)

__all__ = [
    "DeidProfile", "Deidentified", "ENGINE_VERSION", "NotDeidentifiable", "OPTION_NAMES", "PixelTextDetector", "PixelTextSettings",
    "PixelTextStats", "RESEARCH_DEFAULT", "deidentify", "deidentify_image", "load_pixel_text_settings", "load_profile", "quiet", "shared_detector",
    "to_bytes",
]
