"""The raw-element engine publishes what the engine before it published: the same dataset, element by element, or
the same quarantine reason (tests/deid_reference: that engine, kept in the tests only).

A sample of every corpus, each file through both per-file paths (tests/deid_reference/differential.py): pydicom's
and pydicom-data's test files, a seeded sample of their mutants (tests/fuzz_corpus.py), the synthetic hospital
and the planted files (a traceable value in every attribute of Table E.1-1, nested, private, in overlays and
curves, explicit and implicit VR), under the research default, the basic profile and every option.
`FUZZ_FILES=all .venv/bin/python benchmarks/deid_differential.py` runs all 10,167 mutants, with dciodvfy.
"""

from __future__ import annotations

import io
import struct

import pytest
from pydicom import dcmread
from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filewriter import dcmwrite
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian, generate_uid

from deid_reference.differential import EXTRA, KEY, PROFILES, NoText, Outcome, differences, reference, shipped
from fuzz_corpus import mutants, source_files
from test_deid_planted import planted

from imaging.deid import NotDeidentifiable, deidentify, load_profile, quiet, to_bytes

MUTANTS = 100  # the first of the seeded plan: every kind of mutation, many sources


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """(label, path) of each corpus's files."""
    from synth import generate_hospital

    root = tmp_path_factory.mktemp("differential")
    found: dict[str, list[tuple[str, str]]] = {"pydicom": [(s.label, s.path) for s in source_files()],
                                                "mutants": [], "synth": [], "planted": []}
    for i, (mutant, data) in enumerate(mutants()):
        if i >= MUTANTS:
            break
        path = root / f"mutant-{i}.dcm"
        path.write_bytes(data)
        found["mutants"].append((mutant.name, str(path)))
    hospital = root / "hospital"
    generate_hospital(hospital, seed=5, sites=("site-a",), dates=("2024-03-01",), patients_per_site=3)
    found["synth"] = [(str(p.relative_to(hospital)), str(p)) for p in sorted(hospital.rglob("*"))
                      if p.is_file() and p.suffix.lower() in (".dcm", "")]
    for name, syntax in (("explicit", ExplicitVRLittleEndian), ("implicit", ImplicitVRLittleEndian)):
        path = root / f"planted-{name}.dcm"
        path.write_bytes(planted(syntax)[0])
        found["planted"].append((name, str(path)))
    return found


def compare(files: list[tuple[str, str]], options) -> dict[str, int]:
    """Both paths on every file: no difference anywhere; the outcomes counted."""
    profile = load_profile(options)
    counts: dict[str, int] = {}
    for label, path in files:
        want, got = reference(path, profile), shipped(path, profile)
        assert differences(want, got) == [], label
        if want.sha256 is not None and got.sha256 is not None:
            assert got.sha256 == want.sha256, label  # the input hashed as it was read, every byte once
        counts[want.kind] = counts.get(want.kind, 0) + 1
        counts["raw reader"] = counts.get("raw reader", 0) + (got.kind == "published" and got.streamed)
    return counts


def test_pydicom_files_and_their_mutants_publish_the_same(corpora):
    counts = compare(corpora["pydicom"] + corpora["mutants"], PROFILES["default"])
    assert counts["published"] > 150 and counts["quarantined"] > 80 and counts["unreadable"] > 5


@pytest.mark.parametrize("name", ["basic", "all-options"])
def test_every_profile_publishes_the_same(corpora, name):
    """The other profiles keep and change other elements (dates kept, UIDs kept, overlays kept, private numbers)."""
    counts = compare(corpora["pydicom"][::4] + corpora["planted"], PROFILES[name])
    assert counts["published"] > 35


def test_the_hospital_and_the_planted_files_publish_the_same(corpora):
    counts = compare(corpora["synth"] + corpora["planted"], PROFILES["default"])
    assert counts["published"] >= 8 and counts["raw reader"] >= 6  # the raw reader is the one taken


def test_a_difference_is_found():
    """The comparison itself: a changed value, a missing element, another reason are each a difference."""
    data, _ = planted()
    with quiet():
        ds = dcmread(io.BytesIO(data))
    before = Outcome("published", data)
    ds.StudyDescription = "changed"
    del ds.Modality
    buffer = io.BytesIO()
    with quiet():
        dcmwrite(buffer, ds, enforce_file_format=True)
    found = dict(differences(before, Outcome("published", buffer.getvalue())))
    assert found == {"dataset 00081030": "value or VR", "dataset 00080060": "missing"}
    assert differences(Outcome("quarantined", "a"), Outcome("quarantined", "b"))
    assert not differences(Outcome("unreadable", "X"), Outcome("unreadable", "Y"))


# --- a dataset in memory: the engine's other source (elements already decoded) ------------------------------------


def _outcome(ds: Dataset, profile) -> Outcome:
    try:
        out = deidentify(ds, pseudonymizer=KEY, namespace="NHS", profile=profile, extra_identifiers=EXTRA,
                         pixel_text=NoText())
        return Outcome("published", to_bytes(out))
    except NotDeidentifiable as reason:
        return Outcome("quarantined", str(reason))


def _decoded(data: bytes) -> Dataset:
    """A file's dataset with every element at every depth decoded first (what a caller building it in memory has)."""
    def decode(ds: Dataset) -> None:
        for tag in list(ds.keys()):
            try:
                elem = ds[tag]
                if elem.VR == "SQ":
                    for item in elem.value or ():
                        decode(item)
            except Exception:  # noqa: BLE001 - left undecodable, as the engine finds it
                continue

    with quiet():
        ds = dcmread(io.BytesIO(data))
        decode(ds)
    return ds


def test_a_decoded_dataset_publishes_what_its_file_does(corpora):
    """Elements decoded in memory (no bytes to copy: each encoded again) give the dataset the file's bytes give."""
    profile, compared = load_profile(), 0
    for label, path in corpora["pydicom"][::5] + corpora["synth"] + corpora["planted"]:
        data = open(path, "rb").read()
        try:
            decoded = _decoded(data)
        except Exception:  # noqa: BLE001 - unreadable: nothing to compare
            continue
        want = _outcome(dcmread(io.BytesIO(data)), profile)
        assert differences(want, _outcome(decoded, profile)) == [], label
        compared += want.kind == "published"
    assert compared > 30


def _file(**elements) -> bytes:
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.7", generate_uid()  # secondary capture
    ds.PatientID, ds.StudyInstanceUID, ds.SeriesInstanceUID = "P123456", generate_uid(), generate_uid()
    for keyword, value in elements.items():
        setattr(ds, keyword, value)
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue()


def test_a_float_that_is_not_a_number_keeps_its_bytes(tmp_path):
    """A kept FL holding a signalling NaN: the reference decoded it (through Python's float its payload may
    change); the raw engine publishes its four bytes as they are. Both are NaN (the comparison's equality)."""
    data = _file(DepthSpatialResolution=1.5, MaximumDepthDistortion=0.25)
    nan = struct.pack("<I", 0x7F800001)
    path = tmp_path / "nan.dcm"
    path.write_bytes(data.replace(struct.pack("<f", 0.25), nan))
    got = shipped(str(path), load_profile())
    assert not differences(reference(str(path), load_profile()), got)
    with quiet():
        out = dcmread(io.BytesIO(got.value))
    assert out[0x00220036].value != out[0x00220036].value  # NaN
    assert nan in got.value and type(out.get_item(0x00220035)) is RawDataElement


def test_odd_length_bytes_are_padded(tmp_path):
    """A kept OB of odd length (overlay data under Clean Graphics, stored unpadded) is published padded to even
    length with a NUL, as a writer pads it."""
    ds_bytes = _file(Rows=4, Columns=4, BitsAllocated=8, BitsStored=8, HighBit=7, SamplesPerPixel=1,
                     PixelRepresentation=0, PhotometricInterpretation="MONOCHROME2", BurnedInAnnotation="NO",
                     PixelData=bytes(16))
    with quiet():
        ds = dcmread(io.BytesIO(ds_bytes))
    ds.add_new(0x60003000, "OB", bytes(range(1, 10)))
    buffer = io.BytesIO()
    dcmwrite(buffer, ds, enforce_file_format=True)
    header = b"\x00\x60\x00\x30OB\x00\x00"
    padded = header + struct.pack("<I", 10) + bytes(range(1, 10)) + b"\x00"
    data = buffer.getvalue().replace(padded, header + struct.pack("<I", 9) + bytes(range(1, 10)))
    path = tmp_path / "odd.dcm"
    path.write_bytes(data)
    profile = load_profile([*load_profile().options, "clean_graphics"])
    got = shipped(str(path), profile)
    assert got.kind == "published" and padded in got.value
    assert not differences(reference(str(path), profile), got)
