"""Planted values: a traceable value in every Table E.1-1 attribute, at every depth, must not survive.

Each planted value is unique and maps back to the attribute it was planted in. After
de-identification the output bytes and every parsed value at every depth are searched;
a planted value may survive only in an attribute whose resolved action under the profile
keeps it (K, or C on text/times/numbers), which never happens under the basic profile.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import re

import pytest
from pydicom import dcmread
from pydicom.datadict import dictionary_VR, tag_for_keyword
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian

from imaging.deid import deidentify, load_profile, to_bytes
from imaging.deid.table import load_table
from imaging.deid.vr import normalise
from imaging.pseudonym import Pseudonymizer

OPT = "1.2.840.10008.5.1.4.1.1.77.1.5.4"
UID_ROOT = "1.2.826.0.1.3680043.10.1143."
SAFE_CREATOR = "SYNTH OCT VENDOR 1.0"
TOKEN = re.compile(r"LEAK\d{4}")


class Planter:
    """Makes unique VR-valid values and remembers which tag each one was planted in."""

    def __init__(self):
        self.n = 0
        self.origin: dict[object, int] = {}  # planted value -> tag

    def value(self, tag: int, vr: str):
        self.n += 1
        n = self.n
        if vr in ("US", "SS"):
            v = 1000 + n
        elif vr in ("UL", "SL", "UV", "SV"):
            v = 4_200_000 + n
        elif vr in ("FL", "FD"):
            v = 4200.5 + n
        elif vr == "AT":
            v = 0x42420000 + n
        elif vr in ("DS", "IS"):
            v = str(4_300_000 + n)
        elif vr == "DA":
            v = f"{1901 + n % 97:04d}{1 + n % 12:02d}{1 + n % 28:02d}"
        elif vr == "DT":
            v = f"{1901 + n % 97:04d}{1 + n % 12:02d}{1 + n % 28:02d}101112.{n:06d}"
        elif vr == "TM":
            v = f"{n % 24:02d}{n % 60:02d}{n * 7 % 60:02d}.{n:06d}"
        elif vr == "AS":
            v = f"{n % 1000:03d}D"
        elif vr == "UI":
            v = f"{UID_ROOT}{n}"
        elif vr in ("OB", "OW", "OD", "OF", "OL", "OV", "UN"):
            v = f"LEAK{n:04d}".encode()
        else:  # AE CS LO LT PN SH ST UC UR UT
            v = f"LEAK{n:04d}"
        key = v.decode() if isinstance(v, bytes) else v
        self.origin[key] = tag
        return v


def _item(planter: Planter, depth: int) -> Dataset:
    """A sequence item with table, non-table and private values, nesting `depth` more levels."""
    item = Dataset()
    for keyword in ("PersonName", "ReferencedSOPInstanceUID", "StudyDate", "DimensionDescriptionLabel",
                    "SOPInstanceUIDOfConcatenationSource", "ContentCreatorName", "ImageComments"):
        t = tag_for_keyword(keyword)
        vr = normalise(dictionary_VR(t))
        item.add_new(t, vr, planter.value(t, vr))
    _private(item, planter)
    if depth > 0:
        item.ReferencedSeriesSequence = Sequence([_item(planter, depth - 1)])
    return item


def _private(ds: Dataset, planter: Planter) -> None:
    leak = ds.private_block(0x0011, "LEAK CORP 1.0", create=True)
    leak.add_new(0x01, "LO", planter.value(0x00110001, "LO"))
    leak.add_new(0x02, "US", planter.value(0x00110002, "US"))
    safe = ds.private_block(0x0009, SAFE_CREATOR, create=True)
    safe.add_new(0x01, "LO", planter.value(0x00091001, "LO"))  # same creator, unlisted offset: removed
    safe.add_new(0x02, "DS", planter.value(0x00091002, "DS"))  # the reviewed safe element


def _table_attributes(ds: Dataset, planter: Planter, meta: FileMetaDataset | None, depth: int) -> None:
    for tag in load_table().rows:
        vr = normalise(dictionary_VR(tag))
        if tag >> 16 == 0x0000:
            continue  # command elements cannot be stored in a file (the engine drops group 0000 anyway)
        if tag >> 16 == 0x0002:
            if meta is not None:
                meta.add_new(tag, vr, planter.value(tag, vr))
            continue
        if vr == "SQ":
            ds.add_new(tag, "SQ", Sequence([_item(planter, depth)]))
        else:
            ds.add_new(tag, vr, planter.value(tag, vr))


def planted(syntax=ExplicitVRLittleEndian, laterality: str | None = None) -> tuple[bytes, Planter]:
    """A file with a unique planted value in every attribute of the table; with `laterality`, its ImageLaterality
    is that eye instead (so that an eye-level cohort can select it)."""
    planter = Planter()
    meta = FileMetaDataset()
    ds = Dataset()
    _table_attributes(ds, planter, meta, depth=2)
    ds.SOPClassUID = OPT
    ds.BurnedInAnnotation = "NO"
    ds.Modality = "OPT"
    ds.Manufacturer = "Synthetic Ophthalmics Ltd"
    _private(ds, planter)
    # The whole table again, two levels down inside sequences the table does not list.
    inner = Dataset()
    _table_attributes(inner, planter, None, depth=1)
    ds.SharedFunctionalGroupsSequence = [Dataset()]
    ds.SharedFunctionalGroupsSequence[0].PerFrameFunctionalGroupsSequence = Sequence([inner])
    # Overlay and curve groups.
    for group, elements in ((0x6000, [(0x0010, "US"), (0x0011, "US"), (0x0022, "LO"), (0x1500, "LO"),
                                       (0x3000, "OW"), (0x4000, "LT")]),
                            (0x5000, [(0x0005, "US"), (0x0010, "US"), (0x0022, "LO"), (0x3000, "OB")])):
        for element, vr in elements:
            tag = (group << 16) | element
            ds.add_new(tag, vr, planter.value(tag, vr))
    meta.SourceApplicationEntityTitle = planter.value(0x00020016, "AE")
    meta.ImplementationVersionName = planter.value(0x00020013, "SH")
    meta.ImplementationClassUID = planter.value(0x00020012, "UI")
    meta.MediaStorageSOPClassUID = OPT
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = syntax
    ds.file_meta = meta
    if laterality is not None:
        ds.ImageLaterality = laterality
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue(), planter


def _values(ds: Dataset, path=()):
    """(path, tag, VR, value) for every element at every depth, file meta included."""
    for elem in ds:
        if elem.VR == "SQ":
            for i, item in enumerate(elem.value):
                yield from _values(item, (*path, elem.tag, i))
        else:
            yield path, int(elem.tag), elem.VR, elem.value


def _allowed(profile) -> set[int]:
    """Tags whose planted value the profile may publish (K, or C where C keeps meaning).

    Times are not among them: under modified dates a time moves with the patient's offset.
    """
    keep = set()
    for tag, action in profile.actions.items():
        vr = normalise(dictionary_VR(tag))
        if action == "K" and vr != "SQ":
            keep.add(tag)
        if action == "C" and vr in ("US", "SS", "UL", "SL", "FL", "FD", "DS", "IS", "LO", "SH", "ST", "LT",
                                    "UT", "UC", "CS", "PN", "UR"):
            keep.add(tag)
    if profile.has("retain_safe_private"):
        keep.add(0x00091002)
    return keep


@functools.lru_cache(maxsize=4)
def _planted_at(source: bytes) -> dict:
    """The planted source's value at each (path, tag): parsed once, however many outputs are checked against it."""
    src = dcmread(io.BytesIO(source))
    return {(path, tag): value for path, tag, _vr, value in list(_values(src.file_meta)) + list(_values(src))}


def _survivors(data: bytes, planter: Planter, source: bytes | None = None) -> set[int]:
    """Tags whose planted values appear in the output, by bytes and by parsed value.

    With `source`, a date or time counts only where it is the value planted at the same place:
    hundreds of dates are planted, and one patient's shifted date can by chance equal a date
    planted elsewhere in the same attribute (a coincidence, not a leak).
    """
    found = set()
    for token in TOKEN.findall(data.decode("latin-1")):
        found.add(planter.origin[token])
    out = dcmread(io.BytesIO(data))
    parsed = list(_values(out.file_meta)) + list(_values(out))
    planted_at = None if source is None else _planted_at(source)
    for _path, _tag, vr, value in parsed:
        if planted_at is not None and vr in ("DA", "DT", "TM"):
            if (_path, _tag) in planted_at and str(planted_at[(_path, _tag)]) == str(value) and str(value):
                found.add(_tag)
            continue
        values = value if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue" else [value]
        for v in values:
            key = v.decode("latin-1").strip(" \x00") if isinstance(v, bytes) else v
            if vr in ("DS", "IS"):
                key = str(v).strip()
            elif vr == "PN":
                key = str(v)
            if isinstance(key, str):
                for token in TOKEN.findall(key):
                    found.add(planter.origin[token])
            try:  # numbers and dates can coincide by chance (a shifted date, a 0): same attribute only
                if planter.origin.get(key) == _tag:
                    found.add(_tag)
            except TypeError:
                pass
    return found


@pytest.mark.parametrize("syntax", [ExplicitVRLittleEndian, ImplicitVRLittleEndian], ids=["explicit", "implicit"])
def test_basic_profile_publishes_no_planted_value(syntax):
    source, planter = planted(syntax)
    out = deidentify(dcmread(io.BytesIO(source)), pseudonymizer=Pseudonymizer("planted"), profile=load_profile([]))
    data = to_bytes(out)
    assert _survivors(data, planter) == set()
    assert b"LEAK" not in data
    assert UID_ROOT.encode() not in data
    for group in (0x5000, 0x6000, 0x0009, 0x0011):
        assert not [e for e in out if e.tag.group == group]


@pytest.mark.parametrize("syntax", [ExplicitVRLittleEndian, ImplicitVRLittleEndian], ids=["explicit", "implicit"])
def test_default_profile_publishes_only_what_its_options_allow(syntax):
    profile = load_profile()
    source, planter = planted(syntax)
    out = deidentify(dcmread(io.BytesIO(source)), pseudonymizer=Pseudonymizer("planted"), profile=profile)
    data = to_bytes(out)
    survivors = _survivors(data, planter, source)
    allowed = _allowed(profile)
    assert survivors - allowed == set(), sorted(hex(t) for t in survivors - allowed)
    # The options did keep what they promise: patient sex and age, descriptors, the safe private score.
    assert {0x00100040, 0x00101010, 0x00081030, 0x00091002} <= survivors
    assert UID_ROOT.encode() not in data
    assert not [e for e in out if e.tag.group in (0x5000, 0x6000, 0x0011)]
    creators = [e.value for e in out if e.tag.is_private_creator]
    assert creators == [SAFE_CREATOR]
    assert [int(e.tag) for e in out if e.tag.group == 0x0009] == [0x00090010, 0x00091002]


def test_default_profile_shifts_dates_instead_of_keeping_them():
    source, planter = planted()
    src = dcmread(io.BytesIO(source))
    p = Pseudonymizer("planted")
    out = deidentify(src, pseudonymizer=p, profile=load_profile(), namespace="NHS")
    when = dt.datetime.strptime(src.StudyDate + src.StudyTime, "%Y%m%d%H%M%S.%f")  # shifted as one date-time
    assert out.StudyDate == (when + p.datetime_offset("NHS", src.PatientID)).strftime("%Y%m%d")
    assert out.LongitudinalTemporalInformationModified == "MODIFIED"


def test_file_meta_is_regenerated():
    source, planter = planted()
    out = dcmread(io.BytesIO(to_bytes(deidentify(dcmread(io.BytesIO(source)),
                                                 pseudonymizer=Pseudonymizer("planted")))))
    assert [e.keyword for e in out.file_meta] == [
        "FileMetaInformationGroupLength", "FileMetaInformationVersion", "MediaStorageSOPClassUID",
        "MediaStorageSOPInstanceUID", "TransferSyntaxUID", "ImplementationClassUID", "ImplementationVersionName",
    ]
    assert out.file_meta.MediaStorageSOPInstanceUID == out.SOPInstanceUID
    assert out.file_meta.MediaStorageSOPClassUID == OPT
