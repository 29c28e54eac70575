"""Elements copied undecoded (imaging/deid/passthrough.py) give the bytes decoding would have given.

Every file is de-identified twice from the same bytes: as read (pydicom's raw elements, most binary
ones then copied as they are) and with every element at every depth decoded first (nothing left to
pass through: the engine's path before passthrough.py). Outputs must be byte-equal, quarantine
reasons the same. Inputs: pydicom's and pydicom-data's files on disk, a seeded sample of their
mutants (tests/fuzz_corpus.py) and the synthetic hospital. benchmarks/deid_identical.py compares
with an earlier commit's engine instead.
"""

from __future__ import annotations

import io
import struct

import pytest
from pydicom import dcmread
from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from fuzz_corpus import mutants, source_files

from imaging.deid import NotDeidentifiable, deidentify, load_profile, quiet, to_bytes
from imaging.deid.pixel_text import PixelTextResult
from imaging.deid.scrub import collect_terms
from imaging.pseudonym import Pseudonymizer

KEY = Pseudonymizer("passthrough-test-key")
EXTRA = ("Jane Smith", "9434765919")


class NoText:
    """The pixel-text check answered "none found" without OCR: both runs of a file get the same
    answer, and what is compared here is how elements are copied, not the OCR (its own tests)."""

    def check(self, ds, syntax, frames=None) -> PixelTextResult:
        return PixelTextResult(found=False, frames_checked=0)


def decode_all(ds: Dataset) -> None:
    """Decode every element at every depth (what the engine did to every file before passthrough)."""
    for tag in list(ds.keys()):
        try:
            elem = ds[tag]
            if elem.VR == "SQ":
                for item in elem.value or ():
                    decode_all(item)
        except Exception:  # noqa: BLE001 - left undecodable, as the engine finds it
            continue


def read(data: bytes, decoded: bool) -> Dataset | None:
    try:
        with quiet():
            ds = dcmread(io.BytesIO(data))
            if decoded:
                decode_all(ds)
        return ds
    except Exception:  # noqa: BLE001 - unreadable: nothing to compare
        return None


def outcome(ds: Dataset, profile) -> tuple[str, bytes | str, int]:
    """("published", bytes, raw elements copied) or ("quarantined", reason, 0)."""
    try:
        out = deidentify(ds, pseudonymizer=KEY, namespace="NHS", profile=profile, extra_identifiers=EXTRA,
                         pixel_text=NoText())
        raw = sum(type(out.get_item(tag)) is RawDataElement for tag in out.keys())
        return "published", to_bytes(out), raw
    except NotDeidentifiable as q:
        return "quarantined", str(q), 0


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[tuple[str, bytes]]:
    from synth import generate_hospital

    found = [(s.label, open(s.path, "rb").read()) for s in source_files()]
    for i, (mutant, data) in enumerate(mutants()):
        if i >= 150:
            break
        found.append((mutant.name, data))
    root = tmp_path_factory.mktemp("passthrough")
    generate_hospital(root, seed=5, sites=("site-a",), dates=("2024-03-01",), patients_per_site=3)
    found += [(str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.rglob("*"))
              if p.is_file() and p.suffix.lower() in (".dcm", "")]
    return found


@pytest.mark.parametrize("options", [None, [], ["retain_longitudinal_full_dates", "retain_safe_private",
                                                  "retain_uids", "clean_graphics", "retain_device_identity"]],
                         ids=["default", "basic", "retaining"])
def test_outputs_are_those_of_fully_decoded_inputs(inputs, options):
    profile = load_profile(options)
    compared, published, passed_through = 0, 0, 0
    for label, data in inputs:
        as_read, decoded = read(data, decoded=False), read(data, decoded=True)
        if as_read is None or decoded is None:
            continue
        fast, slow = outcome(as_read, profile), outcome(decoded, profile)
        assert fast[:2] == slow[:2], label
        assert slow[2] == 0  # nothing undecoded is left when everything was decoded first
        compared += 1
        published += fast[0] == "published"
        passed_through += fast[2] > 0
    assert compared > 300 and published > 150
    assert passed_through > 100  # the fast path is taken (pixel data, numbers), not just allowed


def test_terms_are_those_of_fully_decoded_inputs(inputs):
    checked = 0
    for label, data in inputs:
        as_read, decoded = read(data, decoded=False), read(data, decoded=True)
        if as_read is None or decoded is None:
            continue
        with quiet():
            assert collect_terms(as_read, EXTRA) == collect_terms(decoded, EXTRA), label
        checked += 1
    assert checked > 300


def test_a_float_nan_is_decoded_not_copied():
    """An FL value that is a signalling NaN: through Python's float its payload may change, so it is
    decoded and re-encoded as before, never copied (the output is what decoding gives); a plain FL is
    copied as it is."""
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.77.1.5.1", generate_uid()
    ds.PatientID, ds.StudyInstanceUID, ds.SeriesInstanceUID = "P123456", generate_uid(), generate_uid()
    ds.DepthSpatialResolution = 1.5  # FL, not in Table E.1-1: kept
    ds.MaximumDepthDistortion = 0.25  # FL: made a NaN below
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    assert buffer.getvalue().count(struct.pack("<f", 0.25)) == 1
    data = buffer.getvalue().replace(struct.pack("<f", 0.25), struct.pack("<I", 0x7F800001))
    profile = load_profile()
    fast, slow = outcome(read(data, decoded=False), profile), outcome(read(data, decoded=True), profile)
    assert fast[0] == "published" and fast[:2] == slow[:2]
    out = deidentify(read(data, decoded=False), pseudonymizer=KEY, namespace="NHS", profile=profile,
                     pixel_text=NoText())
    assert type(out.get_item(0x00220035)) is RawDataElement  # the plain FL: copied
    assert type(out.get_item(0x00220036)) is not RawDataElement  # the NaN: decoded


def test_odd_length_bytes_are_padded_as_before():
    """A kept OB element of odd length (overlay data under Clean Graphics, stored unpadded): the writer
    pads it to an even length, so it is decoded and re-encoded as before, never copied as it is."""
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.7", generate_uid()  # secondary capture
    ds.PatientID, ds.StudyInstanceUID, ds.SeriesInstanceUID = "P123456", generate_uid(), generate_uid()
    ds.Rows, ds.Columns, ds.BitsAllocated, ds.BitsStored, ds.HighBit = 4, 4, 8, 8, 7
    ds.SamplesPerPixel, ds.PixelRepresentation, ds.PhotometricInterpretation = 1, 0, "MONOCHROME2"
    ds.BurnedInAnnotation = "NO"
    ds.PixelData = bytes(16)
    ds.add_new(0x60003000, "OB", bytes(range(1, 10)))  # OverlayData, 9 bytes
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    header = b"\x00\x60\x00\x30OB\x00\x00"
    padded = header + struct.pack("<I", 10) + bytes(range(1, 10)) + b"\x00"
    assert buffer.getvalue().count(padded) == 1
    data = buffer.getvalue().replace(padded, header + struct.pack("<I", 9) + bytes(range(1, 10)))
    profile = load_profile([*load_profile().options, "clean_graphics"])
    fast, slow = outcome(read(data, decoded=False), profile), outcome(read(data, decoded=True), profile)
    assert fast[0] == "published" and fast[:2] == slow[:2]
    assert padded in fast[1]  # padded to 10 bytes, as decoding and re-encoding gives
