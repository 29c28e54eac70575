"""One dataset and its elements as the walk sees them: tag, VR and bytes; values decoded only when a rule asks.

An element comes from one of two places:

- the raw reader (imaging.deid.reader): a tuple of tag, VR and value bytes (a sequence: its items as lists
  of such tuples);
- a pydicom dataset (a file pydicom read: implicit VR, big endian, deflated, malformed; or a dataset built in
  memory): its RawDataElement (bytes) or DataElement (a value already decoded).

Either way `Element.vr` is the VR pydicom gives the element, `Element.raw` its value's bytes when they can be
published as they are (None: only its decoded value can be), and `Element.decoded` the DataElement pydicom
makes of it: exactly the value the engine before the raw engine read (tests/deid_reference), used where a
value is not one of the canonical forms read here directly (`strings`).

`strings` reads a text element's values from its bytes as pydicom's converters do (imaging.deid.values'
`as_list` of them: no value, one, or several), for the VRs whose decoding needs no character set, and for
the others when the bytes are ASCII (every character set DICOM allows reads ASCII bytes as ASCII; an escape
sequence or a byte above 0x7F goes to pydicom).
"""

from __future__ import annotations

import re
import struct
from typing import Iterator

from pydicom.datadict import tag_for_keyword
from pydicom.dataelem import DataElement, RawDataElement
from pydicom.dataset import Dataset
from pydicom.hooks import hooks
from pydicom.charset import convert_encodings, default_encoding
from pydicom.tag import BaseTag

from .values import as_list

CHARSET = 0x00080005
# VRs whose values pydicom decodes as Latin-1 whatever the character set (values.convert_string and kin).
_LATIN1 = frozenset({"AE", "AS", "CS", "DA", "DT", "TM", "UI", "UR", "DS", "IS"})
# VRs decoded with the dataset's character set, one value (convert_single_string) or several (convert_text).
_SINGLE = frozenset({"ST", "LT", "UT"})
_MULTI = frozenset({"SH", "LO", "UC"})
# A number string pydicom reads as a number (values that fail it go to pydicom, which may refuse them).
_DS = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")
_IS = re.compile(r"\s*[+-]?\d+\s*")
# VRs whose bytes pydicom may refuse to read (`Element.readable`); text is always read.
FAILABLE = frozenset({"US", "SS", "UL", "SL", "UV", "SV", "FL", "FD", "AT", "DS", "IS"})
_NUMBERS = {"US": "H", "SS": "h", "UL": "L", "SL": "l", "UV": "Q", "SV": "q", "FL": "f", "FD": "d"}
_UNIT = {"US": 2, "SS": 2, "UL": 4, "SL": 4, "UV": 8, "SV": 8, "FL": 4, "FD": 8, "AT": 4,
         "OB": 1, "OW": 2, "OD": 8, "OF": 4, "OL": 4, "OV": 8, "UN": 1}


class Element:
    """One element of a dataset being walked (see the module's docstring)."""

    __slots__ = ("owner", "tag", "vr", "raw", "nodes")

    def __init__(self, owner: "Items", tag: int, vr: str, raw, nodes: list | None = None):
        """`raw`: the value's bytes when they can be published as they are (a sequence from the raw reader: its
        value's bytes, for pydicom's view; never published as they are); `nodes`: a sequence's items, as read."""
        self.owner, self.tag, self.vr, self.raw, self.nodes = owner, tag, vr, raw, nodes

    @property
    def decoded(self) -> DataElement:
        """The element as pydicom decodes it (raises what pydicom raises)."""
        return self.owner.view()[self.tag]

    @property
    def value(self):
        return self.decoded.value

    def items(self) -> list["Items"]:
        """A sequence's items, each a dataset of its own (the parent's character set inherited); made once, so
        the terms' pass and the walk share them."""
        if self.nodes is None:
            self.nodes = [Items.of_dataset(item, self.owner.little) for item in (self.value or ())]
        return self.nodes

    def strings(self) -> list[str]:
        """The values as text, as pydicom decodes them: [] (no value), one, or several (values pydicom could only
        leave as bytes left out)."""
        return [v for v in self.values() if not isinstance(v, (bytes, bytearray))]

    def values(self) -> list:
        """`as_list` of the value as pydicom decodes it (text read from the bytes where that gives the same)."""
        raw, vr = self.raw, self.vr
        if raw is not None:
            if vr in _LATIN1:
                text = raw.decode("latin-1")
                if vr == "AE":
                    values = [v.strip() for v in text.split("\\")]
                elif vr == "UR":
                    values = [text.rstrip()]
                elif vr == "UI":
                    values = text.rstrip("\0 ").split("\\")
                elif vr == "DS":
                    values = text.strip().rstrip(" \x00").split("\\")
                    if not all(_DS.fullmatch(v) for v in values):
                        return as_list(self.value)  # pydicom's DSfloat decides (it may refuse the element)
                elif vr == "IS":
                    values = text.rstrip(" \x00").split("\\")
                    if not all(_IS.fullmatch(v) for v in values):
                        return as_list(self.value)
                else:
                    values = text.rstrip(" \x00").split("\\")
                return values if len(values) > 1 or values[0] else []
            if (vr in _MULTI or vr in _SINGLE) and raw.isascii() and b"\x1b" not in raw:
                text = raw.decode("ascii")
                values = [text.rstrip("\0 ")] if vr in _SINGLE else [v.rstrip("\0 ") for v in text.split("\\")]
                return values if len(values) > 1 or values[0] else []
            code = _NUMBERS.get(vr)
            if code is not None and raw and not len(raw) % _UNIT[vr]:  # as pydicom's convert_numbers
                count = len(raw) // _UNIT[vr]
                return list(struct.unpack(("<" if self.owner.little else ">") + code * count, raw))
            if vr == "PN" and raw.isascii() and b"\x1b" not in raw and b"=" not in raw:
                values = raw.rstrip(b"\x00 ").decode("ascii").split("\\")  # one group: str(PersonName) as read
                return values if len(values) > 1 or values[0] else []
        return as_list(self.value)

    def count(self) -> int:
        """How many values pydicom reads (binary numbers: whole values in the bytes)."""
        unit = _UNIT.get(self.vr)
        if self.raw is not None and unit is not None and not len(self.raw) % unit:
            return len(self.raw) // unit
        if self.vr in ("DS", "IS") or self.vr in _LATIN1:
            return len(self.values())
        return len(as_list(self.value))

    def readable(self) -> None:
        """Raise what reading the element's value would raise (the reference engine read every element first, and
        dropped those pydicom could not read): binary numbers cut mid-value, number strings that are not
        numbers, sequences that are not sequences. Elements whose bytes are published as they are, or whose
        decoding cannot fail, are not decoded."""
        if self.vr == "SQ":
            self.items()
            return
        if self.raw is None:
            self.decoded
            return
        unit = _UNIT.get(self.vr)
        if unit is not None:
            if len(self.raw) % unit:
                self.decoded
        elif self.vr in ("DS", "IS"):
            self.strings()


class Items:
    """One dataset being walked (the top level or a sequence item): its elements in tag order, its character set,
    and a pydicom view of it, made only when a value must be decoded by pydicom. The raw reader fills `elements`
    as it reads (imaging.deid.reader); a pydicom dataset's are made on first use (`of_dataset`)."""

    __slots__ = ("_dataset", "parent", "little", "_charset", "_view", "_index", "_list")

    def __init__(self, parent=default_encoding, little: bool = True):
        """`parent`: the enclosing Items (its character set is inherited), or the encodings of a top level."""
        self.parent, self.little = parent, little
        self._dataset = self._charset = self._view = self._index = None
        self._list: list[Element] | None = []

    @classmethod
    def of_nodes(cls, nodes: list, parent=default_encoding, little: bool = True) -> "Items":
        """A dataset of elements given as (tag, VR, value bytes), in tag order (no sequences)."""
        items = cls(parent, little)
        items._list = [Element(items, tag, vr, value) for tag, vr, value in nodes]
        return items

    @classmethod
    def of_dataset(cls, dataset: Dataset, little: bool = True) -> "Items":
        items = cls(None, little)
        items._dataset = items._view = dataset
        items._list = None
        return items

    @property
    def charset(self):
        """The character set of this dataset's text: its own Specific Character Set, else its parent's."""
        if self._charset is None:
            if self._dataset is not None:
                self._charset = self._dataset._character_set
            else:
                own = None
                for el in self._list:
                    if el.tag >= CHARSET:
                        own = el if el.tag == CHARSET and el.vr != "SQ" else None
                        break
                parent = self.parent.charset if isinstance(self.parent, Items) else self.parent
                self._charset = _encodings(own.raw) if own is not None and own.raw else parent
        return self._charset

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements())

    def elements(self) -> list[Element]:
        """The elements, in tag order."""
        if self._list is None:
            dataset = self._dataset
            self._list = [self._element(tag, dataset.get_item(tag)) for tag in sorted(dataset._dict)]
        return self._list

    def _element(self, tag: int, item) -> Element:
        if type(item) is not RawDataElement:
            return Element(self, tag, item.VR, None)
        vr = item.VR
        if vr is None or vr == "UN":
            found: dict = {}
            hooks.raw_element_vr(item, found, encoding=self._dataset._character_set, ds=self._dataset)
            vr = found["VR"]
        raw = item.value
        publishable = (raw is not None and vr != "SQ" and item.is_little_endian == self.little
                       and (item.VR == vr or item.VR is None and (item.is_implicit_VR or len(vr) == 2)))
        return Element(self, tag, vr, raw if publishable else None)

    def release(self) -> None:
        """Let go of the elements (at every depth) once the file is done: an element and its dataset refer to each
        other, and without this only Python's cycle collector would free them (1 ms a file of its scans)."""
        for el in self._list or ():
            if el.vr == "SQ" and el.nodes:
                for item in el.nodes:
                    if isinstance(item, Items):
                        item.release()
            el.owner = el.nodes = None
        self._list = self._index = self._view = None
        if self._dataset is not None:
            self._dataset = None
            self._list = []

    def get(self, tag: int) -> Element | None:
        """The element `tag` of this dataset, or None."""
        if self._index is None:
            self._index = {e.tag: e for e in self.elements()}
        return self._index.get(tag)

    def view(self) -> Dataset:
        """This dataset as pydicom holds it (made from the raw reader's elements on first use)."""
        if self._view is None:
            elements = {}
            little = self.little
            for el in self._list:
                tag = BaseTag(el.tag)
                value = bytes(el.raw) if el.vr == "SQ" else el.raw
                elements[tag] = RawDataElement(tag, el.vr, len(value), value, 0, False, little)
            parent = self.parent.charset if isinstance(self.parent, Items) else self.parent
            view = Dataset(elements, parent_encoding=parent)
            view.set_original_encoding(False, little, self.charset)
            self._view = view
        return self._view


class Header:
    """A dataset's own values by keyword, as `Dataset.get` gives them (what imaging.header and the engine's checks
    read through `get`, `in` and `[]`): one value read from the element's bytes where that gives pydicom's value
    (text, numbers); anything else (several values, none, another form) as pydicom reads it, or from `fallback`
    for elements `items` does not hold."""

    __slots__ = ("items", "fallback")

    def __init__(self, items: Items, fallback=None):
        self.items, self.fallback = items, fallback

    def __contains__(self, name) -> bool:
        tag = tag_for_keyword(name) if isinstance(name, str) else name
        return tag is not None and self.items.get(tag) is not None

    def __getitem__(self, keyword: str) -> "Value":
        """The element's value as `.value` (what the checks read of `ds[keyword]`); KeyError when absent."""
        if keyword not in self:
            raise KeyError(keyword)
        return Value(self.get(keyword))

    def get(self, keyword: str, default=None):
        tag = tag_for_keyword(keyword)
        el = self.items.get(tag) if tag is not None else None
        if el is None:
            return self.fallback().get(keyword, default) if self.fallback is not None else default
        if el.raw is not None and el.vr != "AT":
            values = el.values()
            if len(values) == 1 and isinstance(values[0], (str, int, float)):
                return values[0]
        return el.value


class Value:
    """An element's value, as `Header[keyword]` gives it."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


_ENCODINGS: dict[bytes, list[str]] = {}


def _encodings(value: bytes) -> list[str]:
    """The Python encodings of a Specific Character Set value, as pydicom's reader makes them (cached)."""
    found = _ENCODINGS.get(value)
    if found is None:
        raw = RawDataElement(BaseTag(CHARSET), "CS", len(value), value, 0, False, True)
        from pydicom.dataelem import convert_raw_data_element

        found = convert_encodings(convert_raw_data_element(raw).value)
        if len(_ENCODINGS) < 256:
            _ENCODINGS[value] = found
    return list(found)
