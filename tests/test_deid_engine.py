"""Engine behaviour on small hand-built files: determinism, options, quarantine, malformed input."""

from __future__ import annotations

import datetime as dt
import io
import pickle

import pytest
from pydicom import dcmread
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian

from imaging.deid import OPTION_NAMES, NotDeidentifiable, deidentify, load_profile, quiet, to_bytes
from imaging.deid.scrub import Scrubber
from imaging.pseudonym import Pseudonymizer

OP = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
SOP_UID = "1.2.826.0.1.3680043.10.1143.1.1"
KEY = Pseudonymizer("engine-test-key")


def dataset(**attrs) -> Dataset:
    """A dataset (or sequence item) with the given keyword attributes."""
    ds = Dataset()
    for keyword, value in attrs.items():
        setattr(ds, keyword, value)
    return ds


def read(data: bytes) -> Dataset:
    with quiet():
        return dcmread(io.BytesIO(data))


def write(ds: Dataset) -> bytes:
    buffer = io.BytesIO()
    with quiet():
        dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue()


def op_file(**changes) -> bytes:
    """A small Ophthalmic Photography file as Part 10 bytes (what the pipeline reads).
    Keyword arguments add or replace attributes; None removes one."""
    attrs = dict(
        SpecificCharacterSet="ISO_IR 100", SOPClassUID=OP, SOPInstanceUID=SOP_UID,
        StudyInstanceUID="1.2.826.0.1.3680043.10.1143.1.2", SeriesInstanceUID="1.2.826.0.1.3680043.10.1143.1.3",
        PatientName="Smith^Jane^Ann", PatientID="9434765919", IssuerOfPatientID="NHS",
        PatientBirthDate="19530503", PatientSex="F", PatientAge="070Y",
        StudyDate="20230304", StudyTime="101500", AcquisitionDateTime="20230304101612.25+0000",
        StudyDescription="Diabetic screening for SMITH, seen 04/03/2023", Modality="OP", ImageLaterality="R",
        Manufacturer="Synthetic Ophthalmics Ltd", DeviceSerialNumber="SN-12345",
        InstitutionName="Moorfields Eye Hospital", BurnedInAnnotation="NO",
        AnatomicRegionSequence=[dataset(CodeValue="81745001", CodingSchemeDesignator="SCT", CodeMeaning="Eye")],
        Rows=4, Columns=4, SamplesPerPixel=3, PhotometricInterpretation="RGB", PlanarConfiguration=0,
        BitsAllocated=8, BitsStored=8, HighBit=7, PixelRepresentation=0, PixelData=bytes(range(48)),
    ) | changes
    ds = dataset(**{keyword: value for keyword, value in attrs.items() if value is not None})
    ds.file_meta = FileMetaDataset(dataset(
        MediaStorageSOPClassUID=OP, MediaStorageSOPInstanceUID=SOP_UID,
        TransferSyntaxUID=ExplicitVRLittleEndian, SourceApplicationEntityTitle="EYECAM01"))
    return write(ds)


def run(data: bytes, options=None, **kwargs):
    return deidentify(read(data), pseudonymizer=KEY, profile=load_profile(options), **kwargs)


# ---------------------------------------------------------------- determinism and shape


def test_same_input_gives_identical_bytes():
    data = op_file()
    assert to_bytes(run(data)) == to_bytes(run(data))
    profile = pickle.loads(pickle.dumps(load_profile()))  # as shipped to a Spark executor
    again = deidentify(read(data), pseudonymizer=KEY, profile=profile)
    assert to_bytes(again) == to_bytes(run(data))


def test_source_dataset_is_not_modified():
    ds = read(op_file())
    before = ds.to_json()
    deidentify(ds, pseudonymizer=KEY)
    assert ds.to_json() == before


def test_declarations():
    out = run(op_file())
    assert out.PatientIdentityRemoved == "YES"
    assert out.LongitudinalTemporalInformationModified == "MODIFIED"
    codes = [(i.CodeValue, i.CodingSchemeDesignator) for i in out.DeidentificationMethodCodeSequence]
    assert codes == [("113100", "DCM"), ("113105", "DCM"), ("113107", "DCM"), ("113108", "DCM"), ("113111", "DCM")]
    assert out.DeidentificationMethod[-1].startswith("imaging.deid ")
    assert run(op_file(), []).LongitudinalTemporalInformationModified == "REMOVED"
    full = run(op_file(), ["retain_longitudinal_full_dates"])
    assert full.LongitudinalTemporalInformationModified == "UNMODIFIED" and full.StudyDate == "20230304"


def test_research_default_output():
    out = run(op_file(), extra_identifiers=("Ann",))
    assert out.PatientName == out.PatientID == KEY.patient_id("NHS", "9434765919")
    assert "PatientBirthDate" not in out or out.PatientBirthDate == ""
    assert (out.PatientSex, out.PatientAge) == ("F", "070Y")  # retain_patient_characteristics
    shift = KEY.datetime_shift("NHS", "9434765919")  # modified dates move dates and times together
    moved = dt.datetime(2023, 3, 4, 10, 15) + shift.offset
    assert (out.StudyDate, out.StudyTime) == (moved.strftime("%Y%m%d"), moved.strftime("%H%M%S")) != ("20230304", "101500")
    acquired = dt.datetime(2023, 3, 4, 10, 16, 12) + shift.offset
    assert out.AcquisitionDateTime == acquired.strftime("%Y%m%d%H%M%S") + ".25+0000"
    assert out.StudyDescription == "Diabetic screening for , seen"  # name and date removed, rest kept
    assert out.DeviceSerialNumber == "ANONYMOUS"  # X/Z/D -> D: present (Type 1 in some IODs), no value
    assert out.InstitutionName == "ANONYMOUS"
    assert "IssuerOfPatientID" not in out
    assert out.AnatomicRegionSequence[0].CodeMeaning == "Eye"
    assert out.Manufacturer == "Synthetic Ophthalmics Ltd"
    assert out.PixelData == bytes(range(48))
    assert "SourceApplicationEntityTitle" not in out.file_meta


def test_options_keep_what_they_name():
    out = run(op_file(), ["retain_device_identity", "retain_institution_identity", "retain_uids"])
    assert out.DeviceSerialNumber == "SN-12345"
    assert out.InstitutionName == "Moorfields Eye Hospital"
    assert out.SOPInstanceUID == SOP_UID
    assert out.file_meta.MediaStorageSOPInstanceUID == out.SOPInstanceUID


# ---------------------------------------------------------------- profiles


def test_profile_options():
    assert load_profile() is load_profile(None)  # cached per process
    assert load_profile([]).options == ()
    assert set(load_profile(OPTION_NAMES[:3]).options) == set(OPTION_NAMES[:3])
    with pytest.raises(ValueError):
        load_profile(["retain_everything"])
    with pytest.raises(ValueError):
        load_profile(["retain_longitudinal_full_dates", "retain_longitudinal_modified_dates"])


# ---------------------------------------------------------------- UIDs


def test_uids_mapped_consistently_registered_uids_kept():
    code = dataset(CodeValue="121311", CodingSchemeDesignator="DCM", CodeMeaning="Localizer",
                   ContextUID="1.2.840.10008.6.1.18")  # a registered context group UID
    ref = dataset(ReferencedSOPClassUID=OP, ReferencedSOPInstanceUID=SOP_UID,  # the file's own SOP instance
                  PurposeOfReferenceCodeSequence=[code])
    out = run(op_file(ReferencedImageSequence=Sequence([ref])))
    item = out.ReferencedImageSequence[0]
    assert item.ReferencedSOPInstanceUID == out.SOPInstanceUID == KEY.uid(SOP_UID)
    assert item.ReferencedSOPClassUID == OP == out.SOPClassUID
    assert item.PurposeOfReferenceCodeSequence[0].ContextUID == "1.2.840.10008.6.1.18"
    assert b"1.2.826.0.1.3680043.10.1143" not in to_bytes(out)


# ---------------------------------------------------------------- quarantine


@pytest.mark.parametrize("changes, reason", [
    ({"BurnedInAnnotation": "YES"}, "burned-in annotation"),
    ({"BurnedInAnnotation": "MAYBE"}, "burned-in annotation not declared NO"),
    ({"SOPClassUID": "1.2.840.10008.5.1.4.1.1.104.1"}, "encapsulated document"),
    ({"RecognizableVisualFeatures": "YES"}, "recognizable visual features"),
    ({"PatientID": None}, "missing PatientID"),
    ({"PatientID": "  "}, "missing PatientID"),
    ({"SOPInstanceUID": None}, "missing SOPInstanceUID"),
    ({"PixelData": bytes(40)}, "pixel data shorter than the image it describes"),
])
def test_quarantine_reasons(changes, reason):
    with pytest.raises(NotDeidentifiable) as caught:
        run(op_file(**changes))
    assert caught.value.reason == reason


@pytest.mark.parametrize("changes", [
    {"BurnedInAnnotation": None},  # unflagged ophthalmic image: read by OCR, no text (4 x 4 pixels)
    {"SOPClassUID": "1.2.840.10008.5.1.4.1.1.7"},  # secondary captures are read, not refused wholesale
    {"SOPClassUID": "1.2.840.10008.5.1.4.1.1.7.4", "BurnedInAnnotation": None},
])
def test_files_read_for_text_are_published_when_clean(changes):
    out = run(op_file(**changes))
    assert out.BurnedInAnnotation == "NO"  # the output records the check
    assert any("OCR" in line for line in out.DeidentificationMethod)
    assert "113101" not in [i.CodeValue for i in out.DeidentificationMethodCodeSequence]  # no pixel was cleaned


def test_unexpected_failure_is_quarantined_by_type_only():
    ds = read(op_file())
    with pytest.raises(NotDeidentifiable) as caught:
        deidentify(ds, pseudonymizer=None)
    assert caught.value.reason == "de-identification failed: AttributeError"


# ---------------------------------------------------------------- malformed values


def test_malformed_values_are_dropped_not_published():
    # Valid placeholders of the same length, then the bytes replaced (pydicom will not write bad values).
    data = op_file(StudyDate="19000102", ContentDate="19000103", PatientWeight="4321.5", InstanceNumber="987654",
                   AcquisitionDateTime="19000104")
    for good, bad in ((b"19000102", b"1990/01/"), (b"19000103", b"20230231"), (b"4321.5", b"heavy "),
                      (b"987654", b"x1    "), (b"19000104", b"2023    ")):
        assert data.count(good) == 1
        data = data.replace(good, bad)
    out = run(data)
    assert out.StudyDate == ""  # cannot be shifted, so never kept
    assert out.ContentDate == ""
    assert out.AcquisitionDateTime == ""
    assert out.get("PatientWeight", "") in ("", None)
    assert out.get("InstanceNumber", "") in ("", None)
    published = to_bytes(out)
    assert b"heavy" not in published and b"1990/01/" not in published
    dcmread(io.BytesIO(published))


def test_truncated_sequence_does_not_crash():
    data = op_file(OtherPatientIDsSequence=Sequence([Dataset()]),
                   ReferencedStudySequence=Sequence([Dataset()]))
    # Give the first element of the Referenced Study Sequence item an impossible length.
    ds = read(data)
    ds.ReferencedStudySequence[0].ReferencedSOPInstanceUID = "1.2.3.4"
    raw = bytearray(write(ds))
    at = raw.index(b"\x08\x00\x55\x11UI")
    raw[at + 6:at + 8] = (0x7FF0).to_bytes(2, "little")
    try:
        broken = read(bytes(raw))
    except Exception:  # noqa: BLE001 - if pydicom refuses it outright, the pipeline quarantines it
        return
    try:
        out = deidentify(broken, pseudonymizer=KEY)
    except NotDeidentifiable as q:
        assert q.reason
        return
    assert b"1.2.3.4" not in to_bytes(out)


# ---------------------------------------------------------------- graphics and private


def test_overlays_removed_unless_clean_graphics():
    ds = read(op_file())
    ds.add_new(0x60000010, "US", 4)
    ds.add_new(0x60000011, "US", 4)
    ds.add_new(0x60000022, "LO", "Jane Smith annotation")
    ds.add_new(0x60003000, "OW", b"\x01\x00")
    assert not [e for e in deidentify(ds, pseudonymizer=KEY) if e.tag.group == 0x6000]
    kept = deidentify(ds, pseudonymizer=KEY, profile=load_profile(["clean_graphics"]))
    assert kept[0x60003000].value == b"\x01\x00"
    assert kept[0x60000022].value == "annotation"


def test_private_blocks_removed_at_every_depth():
    ds = read(op_file())
    ds.private_block(0x0029, "ACME 1.0", create=True).add_new(0x01, "LO", "Smith")
    ds.AnatomicRegionSequence[0].private_block(0x0011, "ACME 1.0", create=True).add_new(0x02, "LO", "Jane")
    out = deidentify(ds, pseudonymizer=KEY)
    assert b"ACME" not in to_bytes(out)


# ---------------------------------------------------------------- descriptor cleaning


def test_descriptor_scrubber():
    s = Scrubber({"Smith", "Jane", "9434765919"})
    assert s.descriptor("OCT macula JANE smith") == "OCT macula"
    assert s.descriptor("Smithson review") == "Smithson review"  # whole words only
    assert s.descriptor("NHS 943 476 5919 and 943-476-5919") == "NHS and"
    assert s.descriptor("seen 4 Mar 2023, 2023-03-04, 04/03/23, March 4th") == "seen , , ,"
    assert s.descriptor("OCT 512x128 6mm 3D") == "OCT 512x128 6mm 3D"
    assert s.descriptor("VA 6/12 R") == "VA 6/12 R"
    assert s.code("OP") == "OP" and Scrubber({"OP"}).code("OP") == "OP"
