"""The de-identification declarations every output carries (PS3.15 E.1.1, PS3.3 C.7.1.1)."""

from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from .options import BASIC, BY_NAME, CODING_SCHEME, STANDARD_REVISION
from .profile import DeidProfile
from .version import ENGINE_NAME, ENGINE_VERSION

_LONGITUDINAL = {"modified": "MODIFIED", "full": "UNMODIFIED", None: "REMOVED"}


def method_text(profile: DeidProfile) -> list[str]:
    """(0012,0063) values: profile, options, engine (each fits LO's 64 characters; fixed order)."""
    return [
        f"DICOM PS3.15 {STANDARD_REVISION} {BASIC.meaning}",
        *(BY_NAME[name].meaning for name in profile.options),
        f"{ENGINE_NAME} {ENGINE_VERSION}",
    ]


def method_codes(profile: DeidProfile) -> list[tuple[str, str]]:
    """CID 7050 (code value, meaning) pairs: the basic profile then each enabled option."""
    return [(BASIC.code, BASIC.meaning), *((BY_NAME[n].code, BY_NAME[n].meaning) for n in profile.options)]


def declare(ds: Dataset, profile: DeidProfile) -> None:
    """Write the declarations, replacing any left by an earlier de-identification."""
    ds.PatientIdentityRemoved = "YES"
    ds.DeidentificationMethod = method_text(profile)
    items = []
    for value, meaning in method_codes(profile):
        item = Dataset()
        item.CodeValue = value
        item.CodingSchemeDesignator = CODING_SCHEME
        item.CodeMeaning = meaning
        items.append(item)
    ds.DeidentificationMethodCodeSequence = Sequence(items)
    ds.LongitudinalTemporalInformationModified = _LONGITUDINAL[profile.dates]
