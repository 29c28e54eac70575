"""Groups of DICOM value representations, as the rules use them."""

from __future__ import annotations

BINARY_NUMBERS = frozenset({"US", "SS", "UL", "SL", "UV", "SV", "FL", "FD", "AT"})
NUMBER_STRINGS = frozenset({"DS", "IS"})
# Free text of any kind: may hold anything a person typed or a device copied in.
TEXT = frozenset({"AE", "AS", "LO", "LT", "PN", "SH", "ST", "UT", "UC", "UR"})
DATES = frozenset({"DA", "DT"})
BYTES = frozenset({"OB", "OW", "OD", "OF", "OL", "OV", "UN"})


def normalise(vr: str | None) -> str:
    """One VR for pydicom's unresolved ambiguous ones ("US or SS", "OB or OW", "US or OW").

    Ambiguity is resolved towards the more cautious group: any byte VR makes it bytes.
    """
    if not vr:
        return "UN"
    if " or " not in vr:
        return vr
    parts = [p.strip() for p in vr.split(" or ")]
    for part in parts:
        if part in BYTES:
            return part
    return parts[0]
