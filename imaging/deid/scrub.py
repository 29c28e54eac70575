"""Removing identifying text from text that is otherwise kept.

Two strengths:
- `terms`: the patient's own names and ids (and other names found in the file, and the
  caller's extra identifiers), case-insensitive, as whole words. Applied to every kept text.
- `descriptor`: `terms` plus anything shaped like an NHS number or other long number, a date
  or a year. Applied to descriptors under Clean Descriptors (action C).
Matches are removed, never kept or masked in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property

from pydicom.datadict import dictionary_VR, tag_for_keyword
from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset

from .values import as_list

# Attributes whose values identify the patient or the visit wherever they appear in a file.
_ID_KEYWORDS = ("PatientID", "OtherPatientIDs", "AccessionNumber", "MedicalRecordLocator",
                "PatientTelephoneNumbers", "IssuerOfPatientID")
_ID_TAGS = frozenset(tag_for_keyword(k) for k in _ID_KEYWORDS)
_MIN_NAME = 2  # single letters (initials) are not worth removing from every text
_MIN_ID = 3

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_SEP = r"[\s,./-]*"
_PATTERNS = [
    # NHS-number-like (3-3-4 with spaces or hyphens) and any run of 6+ digits (ids, phone, yyyymmdd)
    r"(?<!\d)\d{3}[ -]?\d{3}[ -]?\d{4}(?!\d)",
    r"(?<!\d)\d{6,}(?!\d)",
    # numeric dates: 01/02/2023, 2023-02-01, 1.2.23
    r"(?<!\d)\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}(?!\d)",
    # dates with a month name, but only next to a number (so the word "OCT" survives)
    rf"(?<![a-z0-9]){_DAY}{_SEP}{_MONTH}\.?(?:{_SEP}\d{{2,4}})?(?![a-z0-9])",
    rf"(?<![a-z0-9]){_MONTH}\.?{_SEP}(?:{_DAY}(?:{_SEP}\d{{4}})?|\d{{4}})(?![a-z0-9])",
    # a year on its own
    r"(?<!\d)(?:19|20)\d{2}(?!\d)",
]
_SHAPES = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)
_SPACES = re.compile(r"\s{2,}")


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s^=,;:/\\()\[\]{}\"'.]+", text) if w]


def _name_terms(value) -> set[str]:
    """Family, given and middle names of every representation of a PN, and their parts."""
    terms = set()
    for group in str(value).split("="):
        for component in group.split("^")[:3]:  # prefix/suffix ("Mr", "Jr") are not identifying
            component = component.strip()
            if len(component) >= _MIN_NAME:
                terms.add(component)
            terms.update(w for w in _words(component.replace("-", " ")) if len(w) >= _MIN_NAME)
    return terms


def _id_terms(value) -> set[str]:
    terms = set()
    for item in value:
        text = str(item).strip()
        if len(text) >= _MIN_ID:
            terms.add(text)
            compact = re.sub(r"[\s-]", "", text)
            if len(compact) >= _MIN_ID:
                terms.add(compact)
    return terms


def collect_terms(ds: Dataset, extra: Iterable[str] = ()) -> set[str]:
    """Names and ids found anywhere in `ds` (any depth), plus `extra` and its words.

    One pass per file; only the elements that can hold a name or an id (PN, the id attributes) or
    items (SQ) are decoded, the rest (pixel data above all) stay as read (`_may_hold_terms`).
    """
    terms: set[str] = set()

    def visit(dataset: Dataset) -> None:
        for tag in list(dataset.keys()):
            try:
                if not _may_hold_terms(dataset, tag):
                    continue
                elem = dataset[tag]
                if elem.VR == "SQ":
                    for item in elem.value or ():
                        visit(item)
                elif elem.VR == "PN":
                    for v in as_list(elem.value):
                        terms.update(_name_terms(v))
                elif elem.keyword in _ID_KEYWORDS:
                    terms.update(_id_terms(as_list(elem.value)))
            except Exception:  # noqa: BLE001 - an unreadable value is dropped by the engine anyway
                continue

    visit(ds)
    return _with_extra(terms, extra)


def element_terms(items, extra: Iterable[str] = ()) -> set[str]:
    """`collect_terms` over a dataset as the walk reads it (imaging.deid.element.Items): the same terms, from
    the same elements (PN, the id attributes, sequences), only those decoded."""
    terms: set[str] = set()

    def visit(dataset) -> None:
        for el in dataset:
            try:
                if el.vr == "SQ":
                    for item in el.items():
                        visit(item)
                elif el.vr == "PN":
                    for v in el.values():
                        terms.update(_name_terms(v))
                elif el.tag in _ID_TAGS:
                    terms.update(_id_terms(el.values()))
            except Exception:  # noqa: BLE001 - an unreadable value is dropped by the engine anyway
                continue

    visit(items)
    return _with_extra(terms, extra)


def _with_extra(terms: set[str], extra: Iterable[str]) -> set[str]:
    for item in extra or ():
        text = str(item or "").strip()
        if len(text) >= _MIN_NAME:
            terms.add(text)
            terms.update(_id_terms([text]))
            terms.update(w for w in _words(text) if len(w) >= _MIN_NAME)
    return terms


def _may_hold_terms(dataset: Dataset, tag) -> bool:
    """False only for an undecoded element that pydicom would decode as neither PN nor SQ, and not an
    id attribute: decoding it could not add a term. Undecided cases are decoded and looked at."""
    if tag in _ID_TAGS:
        return True
    raw = dataset.get_item(tag)
    if type(raw) is not RawDataElement:
        return True
    vr = raw.VR
    if vr is None:  # implicit VR: pydicom takes the dictionary's (private and unknown tags: looked at)
        try:
            vr = dictionary_VR(tag)
        except KeyError:
            return True
    # An explicit VR other than UN is kept by pydicom's decoding (or made UN when it cannot decode).
    return vr in ("PN", "SQ", "UN")


class Scrubber:
    """Removes a fixed set of terms (and, for descriptors, identifying shapes) from text.

    The patterns are compiled on first use: a file whose kept text is all numbers, dates and UIDs
    (or has none) never pays for the alternation of its patient's terms. With ASCII terms, ASCII text that
    holds none of them (case aside) is returned at once: a match needs the term in the text, and between
    ASCII characters case-insensitive matching is ASCII case (so codes and labels never reach the patterns)."""

    def __init__(self, terms: Iterable[str]):
        self._ordered = sorted({t for t in terms if t}, key=lambda t: (-len(t), t))  # longest first
        ascii_terms = all(t.isascii() for t in self._ordered)
        self._lower = [t.lower() for t in self._ordered] if ascii_terms else None
        self._lower_code = [t for t in self._lower if len(t) >= 4] if ascii_terms else None

    @staticmethod
    def _absent(text: str, lowered: list[str] | None) -> bool:
        """True when no term of `lowered` can match `text` (checked without a regular expression)."""
        if lowered is None or not text.isascii():
            return False
        return not any(map(text.lower().__contains__, lowered))

    @cached_property
    def _terms(self) -> re.Pattern | None:
        return _alternation(self._ordered)

    @cached_property
    def _code_terms(self) -> re.Pattern | None:
        # Code strings (CS) are short enumerated codes: a two-letter surname must not erase "CT"
        # or "OP". Only terms of 4+ characters are removed from them.
        return _alternation([t for t in self._ordered if len(t) >= 4])

    def holds_none(self, text: str, code: bool = False) -> bool:
        """True when `text` holds none of the terms (`code`: of those removed from codes), as `terms` and `code`
        would find: any of their values then comes back unchanged."""
        return self._absent(text, self._lower_code if code else self._lower)

    def terms(self, text: str) -> str:
        if not text or self._absent(text, self._lower) or self._terms is None:
            return text
        return _tidy(self._terms.sub(" ", text), text)

    def code(self, text: str) -> str:
        if not text or self._absent(text, self._lower_code) or self._code_terms is None:
            return text
        return _tidy(self._code_terms.sub(" ", text), text)

    def descriptor(self, text: str) -> str:
        if not text:
            return text
        return _tidy(_SHAPES.sub(" ", self.terms(text)), text)


def _alternation(terms: list[str]) -> re.Pattern | None:
    if not terms:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(t) for t in terms) + r")(?!\w)", re.IGNORECASE)


def _tidy(new: str, old: str) -> str:
    if new == old:
        return old
    return _SPACES.sub(" ", new).strip()
