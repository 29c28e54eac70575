"""Header indexing of single files, without Spark."""

import hashlib

import pytest

import pydicom

from imaging.records import IndexedImage, ListedFile, Quarantined
from imaging.steps.index import DUPLICATES, MANDATORY, index_file
from synth import generate_hospital


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    return root, generate_hospital(root, seed=2, sites=("site-a",), dates=("2024-03-01",), patients_per_site=2)


def records(root, paths):
    return [index_file(ListedFile("2024-03-01", "site-a", str(root / p), (root / p).stat().st_size))
            for p in paths]


def test_dicom_files_are_indexed_from_headers(landing):
    root, hospital = landing
    paths = hospital.dicom_files[("2024-03-01", "site-a")]
    truth = {i.rel_path: i for i in hospital.instances}
    for record, path in zip(records(root, paths), paths):
        assert isinstance(record, IndexedImage)
        assert record.sha256 == hashlib.sha256((root / path).read_bytes()).hexdigest()
        assert record.sop_instance_uid == truth[path].sop_instance_uid
        assert record.modality == truth[path].modality and record.laterality == truth[path].laterality
        assert record.number_of_frames == truth[path].frames
        assert record.transfer_syntax_uid and record.rows and record.columns


def test_broken_files_are_quarantined_with_a_reason(landing):
    root, hospital = landing
    paths = hospital.broken_files[("2024-03-01", "site-a")]
    got = {hospital.broken_kinds[p]: r for p, r in zip(paths, records(root, paths))}
    assert all(isinstance(r, Quarantined) and r.sha256 is None for r in got.values())
    assert got["empty"].reason == "empty file"
    assert got["notes"].reason == "not a DICOM Part 10 file"
    assert got["truncated"].reason.startswith(("truncated", "unreadable"))
    assert got["garbage"].reason


def test_a_second_copy_of_an_instance_is_quarantined_and_the_first_path_kept(landing):
    root, hospital = landing
    path = hospital.dicom_files[("2024-03-01", "site-a")][0]
    first, second = (index_file(ListedFile("2024-03-01", "site-a", str(root / p), (root / path).stat().st_size))
                     for p in (path, path))
    copy = IndexedImage(**{**first.__dict__, "source_path": first.source_path + ".copy"})
    kept, held = DUPLICATES.apply([copy, first])
    assert kept == first
    assert isinstance(held, Quarantined) and held.source_path == copy.source_path
    assert held.reason == DUPLICATES.reason and held.sha256 == first.sha256


@pytest.mark.parametrize("missing", [("PatientID",), ("Modality",), ("SOPInstanceUID",),
                                     ("PatientID", "StudyInstanceUID", "SeriesInstanceUID", "Modality")])
def test_an_instance_missing_a_mandatory_attribute_is_quarantined_naming_it(landing, tmp_path, missing):
    root, hospital = landing
    source = root / hospital.dicom_files[("2024-03-01", "site-a")][0]
    ds = pydicom.dcmread(source)
    patient_id = str(ds.PatientID)
    for keyword in missing:
        if keyword == "SOPInstanceUID":
            ds.SOPInstanceUID = ""  # present but empty: as absent
        else:
            delattr(ds, keyword)
    path = tmp_path / "incomplete.dcm"
    ds.save_as(path)
    record = index_file(ListedFile("2024-03-01", "site-a", str(path), path.stat().st_size))
    assert isinstance(record, Quarantined), record
    # The reason names the attributes by keyword, never a value; the file was read, so its sha256 is kept.
    plural = "s" if len(missing) > 1 else ""
    order = [k for _, k in MANDATORY if k in missing]
    assert record.reason == f"missing mandatory attribute{plural}: {', '.join(order)}"
    assert record.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert patient_id not in record.reason


def test_every_indexed_instance_carries_every_mandatory_attribute(landing):
    root, hospital = landing
    for record in records(root, hospital.dicom_files[("2024-03-01", "site-a")]):
        assert isinstance(record, IndexedImage)
        assert all(getattr(record, field_name) for field_name, _ in MANDATORY)
