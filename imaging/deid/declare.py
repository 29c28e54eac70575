"""The de-identification declarations every output carries (PS3.15 E.1.1, PS3.3 C.7.1.1)."""

from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from .options import BASIC, BY_NAME, CLEAN_PIXEL_DATA, CODING_SCHEME, STANDARD_REVISION
from .profile import DeidProfile
from .version import ENGINE_NAME, ENGINE_VERSION

_LONGITUDINAL = {"modified": "MODIFIED", "full": "UNMODIFIED", None: "REMOVED"}


PIXELS_READ = "Pixel data read by OCR for burned-in text: none found"
LO = 64  # characters of one De-identification Method value


def screened(readers: list[str], frames: int, read: tuple[int, ...], overlay: tuple[int, ...]) -> list[str]:
    """(0012,0063) values saying which screen read the pixels for burned-in text (`readers`: its name and
    version, then each reader's, from `PixelTextDetector.method`) and which frames it read: "all" when every frame
    was read whole, else the frame numbers (1-based, as DICOM numbers frames) read whole and those whose shared
    (still) pixels were read as overlays. Each value at most 64 characters; long lists go on over several."""
    lines = [r[:LO] for r in readers]
    if len(set(read)) >= frames:
        return [*lines, f"Frames screened: all {frames}"]
    lines += _numbered(f"Frames screened whole, {len(set(read))} of {frames}:", read)
    if overlay:
        lines += _numbered(f"Frames screened as overlays, {len(set(overlay))}:", overlay)
    return lines


def _numbered(head: str, indexes: tuple[int, ...]) -> list[str]:
    """`head` and the 1-based numbers of `indexes`, comma-separated, over as many values as 64 characters need."""
    lines, line = [], head
    for number in sorted({i + 1 for i in indexes}):
        word = f" {number}" if line == head else f",{number}"
        if len(line) + len(word) > LO:
            lines.append(line)
            line = f"{head.split(',')[0]} (cont.): {number}"
        else:
            line += word
    return [*lines, line]


def method_text(profile: DeidProfile, pixels_read: bool = False, redacted: list[str] | None = None,
                screen: list[str] | None = None) -> list[str]:
    """(0012,0063) values: profile, options, the pixel check (or what the redaction covered), the screen that
    read the pixels and the frames it read (`screened`), engine (each fits LO's 64 characters)."""
    pixels = redacted if redacted else [PIXELS_READ] if pixels_read else []
    return [
        f"DICOM PS3.15 {STANDARD_REVISION} {BASIC.meaning}",
        *(BY_NAME[name].meaning for name in profile.options),
        *pixels,
        *((screen or ()) if pixels_read or redacted else ()),
        f"{ENGINE_NAME} {ENGINE_VERSION}",
    ]


def method_codes(profile: DeidProfile, clean_pixels: bool = False) -> list[tuple[str, str]]:
    """CID 7050 (code value, meaning) pairs: the basic profile, Clean Pixel Data when the pixels were
    redacted, then each enabled option (by code value)."""
    return [(BASIC.code, BASIC.meaning),
            *([(CLEAN_PIXEL_DATA.code, CLEAN_PIXEL_DATA.meaning)] if clean_pixels else []),
            *((BY_NAME[n].code, BY_NAME[n].meaning) for n in profile.options)]


def declare(ds: Dataset, profile: DeidProfile, pixels_read: bool = False, redacted: list[str] | None = None,
            screen: list[str] | None = None) -> None:
    """Write the declarations, replacing any left by an earlier de-identification.

    `pixels_read`: the pixels were read by OCR and no text was found; said in the method text.
    `redacted`: burned-in text was covered and the redacted frames read again clean (imaging.deid.redact):
    these method lines say what was covered, and Clean Pixel Data (113101) is declared. Otherwise no pixel
    was changed and 113101 is not declared. `screen`: the screen and the frames it read (`screened`).
    """
    ds.PatientIdentityRemoved = "YES"
    ds.DeidentificationMethod = method_text(profile, pixels_read, redacted, screen)
    items = []
    for value, meaning in method_codes(profile, clean_pixels=bool(redacted)):
        item = Dataset()
        item.CodeValue = value
        item.CodingSchemeDesignator = CODING_SCHEME
        item.CodeMeaning = meaning
        items.append(item)
    ds.DeidentificationMethodCodeSequence = Sequence(items)
    ds.LongitudinalTemporalInformationModified = _LONGITUDINAL[profile.dates]
