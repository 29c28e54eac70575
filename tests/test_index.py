"""Header indexing of single files, without Spark."""

import hashlib

import pytest

from imaging.index import RECORD_FIELDS, index_partition
from synth import generate_hospital


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    return root, generate_hospital(root, seed=2, sites=("site-a",), dates=("2024-03-01",), patients_per_site=2)


def records(root, paths):
    rows = [("2024-03-01", "site-a", str(root / p), (root / p).stat().st_size) for p in paths]
    return [dict(zip(RECORD_FIELDS, r)) for r in index_partition(rows)]


def test_dicom_files_are_indexed_from_headers(landing):
    root, hospital = landing
    paths = hospital.dicom_files[("2024-03-01", "site-a")]
    truth = {i.rel_path: i for i in hospital.instances}
    for record, path in zip(records(root, paths), paths):
        assert record["status"] == "indexed"
        assert record["sha256"] == hashlib.sha256((root / path).read_bytes()).hexdigest()
        assert record["sop_instance_uid"] == truth[path].sop_instance_uid
        assert record["modality"] == truth[path].modality and record["laterality"] == truth[path].laterality
        assert record["number_of_frames"] == truth[path].frames
        assert record["transfer_syntax_uid"] and record["rows"] and record["columns"]


def test_broken_files_are_quarantined_with_a_reason(landing):
    root, hospital = landing
    paths = hospital.broken_files[("2024-03-01", "site-a")]
    got = {hospital.broken_kinds[p]: r for p, r in zip(paths, records(root, paths))}
    assert all(r["status"] == "quarantined" and r["sop_instance_uid"] is None for r in got.values())
    assert got["empty"]["reason"] == "empty file"
    assert got["notes"]["reason"] == "not a DICOM Part 10 file"
    assert got["truncated"]["reason"].startswith(("truncated", "unreadable"))
    assert got["garbage"]["reason"]
