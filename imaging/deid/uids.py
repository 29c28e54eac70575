"""UID rules: registered DICOM UIDs are kept, every other UID is replaced by its keyed pseudonym."""

from __future__ import annotations

import re

from pydicom._uid_dict import UID_dictionary  # pydicom's table of UIDs registered in PS3.6

from imaging.pseudonym import Pseudonymizer

from .values import as_list


def clean(uid) -> str:
    return str(uid).strip().rstrip("\x00").strip()


# The DICOM root: only UIDs the standard itself defines (SOP classes, transfer syntaxes,
# context groups, coding schemes, well-known frames of reference) may start with it.
DICOM_ROOT = "1.2.840.10008."


# A UID's shape (PS3.5 9.1): digits and dots, at most 64 characters.
_UID = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def is_registered(uid) -> bool:
    """True for UIDs defined by the standard (pydicom's UID_dictionary, or a well-formed UID under the
    DICOM root). Anything else, a malformed value that merely starts with the root included, is
    replaced: only a value of the standard's own shape is ever kept verbatim."""
    value = clean(uid)
    return value in UID_dictionary or (value.startswith(DICOM_ROOT) and len(value) <= 64
                                       and _UID.fullmatch(value) is not None)


def map_uid(uid, p: Pseudonymizer) -> str:
    """The UID to publish for `uid`: itself if registered, else `p.uid(uid)` (same input, same output)."""
    value = clean(uid)
    if not value or is_registered(value):
        return value
    return p.uid(value)


def map_values(value, p: Pseudonymizer):
    """`map_uid` over every value of a (possibly multi-valued) UI element."""
    out = [map_uid(v, p) for v in as_list(value)]
    if not out:
        return ""
    return out[0] if len(out) == 1 else out
