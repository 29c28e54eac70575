"""The de-identification declarations every output carries (PS3.15 E.1.1, PS3.3 C.7.1.1)."""

from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from .options import BASIC, BY_NAME, CODING_SCHEME, STANDARD_REVISION
from .profile import DeidProfile
from .version import ENGINE_NAME, ENGINE_VERSION

_LONGITUDINAL = {"modified": "MODIFIED", "full": "UNMODIFIED", None: "REMOVED"}


PIXELS_READ = "Pixel data read by OCR for burned-in text: none found"


def method_text(profile: DeidProfile, pixels_read: bool = False) -> list[str]:
    """(0012,0063) values: profile, options, the pixel check, engine (each fits LO's 64 characters)."""
    return [
        f"DICOM PS3.15 {STANDARD_REVISION} {BASIC.meaning}",
        *(BY_NAME[name].meaning for name in profile.options),
        *([PIXELS_READ] if pixels_read else []),
        f"{ENGINE_NAME} {ENGINE_VERSION}",
    ]


def method_codes(profile: DeidProfile) -> list[tuple[str, str]]:
    """CID 7050 (code value, meaning) pairs: the basic profile then each enabled option."""
    return [(BASIC.code, BASIC.meaning), *((BY_NAME[n].code, BY_NAME[n].meaning) for n in profile.options)]


def declare(ds: Dataset, profile: DeidProfile, pixels_read: bool = False) -> None:
    """Write the declarations, replacing any left by an earlier de-identification.

    `pixels_read`: the pixels were read by OCR and no text was found; said in the method text.
    Clean Pixel Data (113101) is never declared: no pixel is changed.
    """
    ds.PatientIdentityRemoved = "YES"
    ds.DeidentificationMethod = method_text(profile, pixels_read)
    items = []
    for value, meaning in method_codes(profile):
        item = Dataset()
        item.CodeValue = value
        item.CodingSchemeDesignator = CODING_SCHEME
        item.CodeMeaning = meaning
        items.append(item)
    ds.DeidentificationMethodCodeSequence = Sequence(items)
    ds.LongitudinalTemporalInformationModified = _LONGITUDINAL[profile.dates]
