"""Tests for the synthetic eye hospital (synth): pure Python, no Spark."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pydicom
import pytest

import synth
from synth.dicom import OP_SOP_CLASS, OPT_SOP_CLASS, PRIVATE_CREATOR

OCT_SHAPE = (8, 64, 64)


@pytest.fixture(scope="module")
def hospital(tmp_path_factory):
    root = tmp_path_factory.mktemp("landing")
    return root, synth.generate_hospital(root, seed=7, oct_shape=OCT_SHAPE)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _read(root: Path, rel: str) -> pydicom.Dataset:
    return pydicom.dcmread(root / rel)


def test_same_seed_gives_identical_bytes_and_other_seed_differs(hospital, tmp_path):
    root, _ = hospital
    again = synth.generate_hospital(tmp_path / "again", seed=7, oct_shape=OCT_SHAPE)
    assert _tree(root) == _tree(tmp_path / "again")
    assert again.identifying_strings() == hospital[1].identifying_strings()
    other = synth.generate_hospital(tmp_path / "other", seed=8, oct_shape=OCT_SHAPE)
    first, second = _tree(root), _tree(tmp_path / "other")
    assert first != second
    assert {i.sop_instance_uid for i in other.instances}.isdisjoint(i.sop_instance_uid for i in hospital[1].instances)


def test_layout_accounts_for_every_file(hospital):
    root, summary = hospital
    listed = {f for files in summary.dicom_files.values() for f in files}
    broken = {f for files in summary.broken_files.values() for f in files}
    images = {k for k in _tree(root) if k.startswith("images/")}
    assert listed | broken == images and not listed & broken
    for (day, site), files in {**summary.dicom_files, **summary.broken_files}.items():
        assert all(f.startswith(f"images/{site}/{day}/") for f in files)
    assert set(summary.dicom_files) == {(d, s) for d in summary.dates for s in summary.sites}
    names = [Path(f).name for f in listed]
    assert any("." not in n for n in names) and any(n.endswith(".dcm") for n in names)
    assert any(f.count("/") >= 6 for f in listed)  # nested study/series folders
    assert len(summary.instances) < 100 and sum(len(b) for b in _tree(root).values()) < 10_000_000


def test_every_dicom_parses_with_expected_headers(hospital):
    root, summary = hospital
    assert {i.modality for i in summary.instances} == {"OPT", "OP"}
    for inst in summary.instances:
        raw = (root / inst.rel_path).read_bytes()
        assert raw[128:132] == b"DICM"
        ds = _read(root, inst.rel_path)
        assert ds.file_meta.TransferSyntaxUID == pydicom.uid.ExplicitVRLittleEndian
        assert ds.SOPClassUID == (OPT_SOP_CLASS if inst.modality == "OPT" else OP_SOP_CLASS)
        assert (ds.SOPInstanceUID, ds.StudyInstanceUID, ds.SeriesInstanceUID) == (
            inst.sop_instance_uid, inst.study_uid, inst.series_uid)
        assert ds.PatientID == inst.patient_id and ds.IssuerOfPatientID == "NHS"
        assert ds.Modality == inst.modality and ds.ImageLaterality == inst.laterality
        assert ds.StudyDate == ds.SeriesDate == ds.ContentDate == inst.date.replace("-", "")
        assert ds.AcquisitionDateTime.startswith(inst.date.replace("-", ""))
        assert ds.InstitutionName and ds.OperatorsName and ds.AccessionNumber
        assert ds.RequestAttributesSequence[0].RequestedProcedureID
        assert ds.OtherPatientIDsSequence[0].PatientID
        block = ds.private_block(0x0009, PRIVATE_CREATOR[inst.modality])
        assert block[0x01].value == str(ds.PatientName)
        nested = block[0x03].value[0].private_block(0x0009, PRIVATE_CREATOR[inst.modality])
        assert nested[0x01].value == inst.patient_id
        pixels = ds.pixel_array
        if inst.modality == "OPT":
            assert ds.NumberOfFrames == OCT_SHAPE[0] == inst.frames
            assert pixels.shape == OCT_SHAPE and ds.PhotometricInterpretation == "MONOCHROME2"
            assert len(ds.PerFrameFunctionalGroupsSequence) == OCT_SHAPE[0]
        else:
            assert pixels.shape == (64, 64, 3) and ds.PhotometricInterpretation == "RGB"
        assert pixels.std() > 5  # an image, not a blank


def test_broken_files_do_not_parse(hospital, tmp_path):
    root, summary = hospital
    for partition, files in summary.broken_files.items():
        assert {summary.broken_kinds[f] for f in files} == {"notes", "empty", "truncated", "garbage"}
        for rel in files:
            with pytest.raises(Exception):
                pydicom.dcmread(root / rel)
    kinds = {summary.broken_kinds[f]: (root / f).read_bytes() for f in summary.broken_files[("2024-03-01", "site-a")]}
    assert kinds["empty"] == b"" and kinds["garbage"][128:132] == b"DICM"
    assert kinds["truncated"][128:132] == b"DICM"
    assert any(open_bytes.startswith(kinds["truncated"]) for open_bytes in _tree(root).values()
               if open_bytes != kinds["truncated"])  # a real file, cut short
    clean = synth.generate_hospital(tmp_path, patients_per_site=2, dates=["2024-03-01"], broken_per_partition=False)
    assert clean.broken_files == {("2024-03-01", "site-a"): [], ("2024-03-01", "site-b"): []}
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name == "notes.txt"]


def test_follow_ups_reference_an_earlier_baseline(hospital):
    root, summary = hospital
    by_uid = {i.sop_instance_uid: i for i in summary.instances}
    follow_ups = [i for i in summary.instances if i.referenced_sop_instance_uid]
    assert follow_ups
    for inst in summary.instances:
        ds = _read(root, inst.rel_path)
        if inst.referenced_sop_instance_uid is None:
            assert "ReferencedImageSequence" not in ds
            continue
        base = by_uid[inst.referenced_sop_instance_uid]
        assert (base.patient_id, base.site, base.modality, base.laterality) == (
            inst.patient_id, inst.site, inst.modality, inst.laterality)
        assert base.date < inst.date and base.referenced_sop_instance_uid is None
        ref = ds.ReferencedImageSequence[0]
        assert ref.ReferencedSOPInstanceUID == base.sop_instance_uid
        assert ref.ReferencedSOPClassUID == base.sop_class_uid
        if inst.modality == "OPT":
            shared = ds.SharedFunctionalGroupsSequence[0].ReferencedImageSequence[0]
            assert shared.ReferencedSOPInstanceUID == base.sop_instance_uid


def _csv_rows(root: Path, site: str, day: str) -> tuple[list[str], list[dict[str, str]]]:
    with (root / "clinical" / site / f"{day}.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


def test_clinical_csvs_have_site_specific_columns(hospital):
    root, summary = hospital
    for (day, site), count in summary.clinical_rows.items():
        header, rows = _csv_rows(root, site, day)
        assert header == (synth.SITE_B_COLUMNS if site == "site-b" else synth.SITE_A_COLUMNS)
        assert len(rows) == count == len(summary.clinical_records[(day, site)]) > 0
        for row in rows:
            assert re.fullmatch(r"\d{10}", row["patient_id"])
            if site == "site-b":  # a row per eye: OD, OS, and OU for a diagnosis of both eyes
                assert row["eye"] in ("OD", "OS", "OU") and row["diagnosis_code"] in synth.DIAGNOSES + [""]
            else:  # per-eye column pairs
                assert {row["diagnosis_code_right"], row["diagnosis_code_left"]} <= set(synth.DIAGNOSES) | {""}
                assert float(row["visual_acuity_logmar_right"]) >= 0 and int(row["iop_os"]) > 0
            if site == "site-b":
                assert re.fullmatch(r"\d\d/\d\d/\d{4}", row["dob"])
                assert row["surname"] in row["clinician_notes"]
            else:
                assert re.fullmatch(r"\d{4}-\d\d-\d\d", row["date_of_birth"])
                assert row["full_name"] in row["notes"]
                assert row["nhs_number"].replace(" ", "") == row["patient_id"]


def test_clinical_truth_covers_the_as_of_cases(hospital):
    root, summary = hospital
    imaged = {(i.site, i.patient_id) for i in summary.instances}
    dicom_ids = {i.patient_id for i in summary.instances}
    assert summary.unmatched_images and summary.earlier_day_matches
    for inst in summary.instances:  # recompute the as-of rule straight from the CSV files
        candidates = [d for d in summary.dates if d <= inst.date]
        expected = None
        for day in candidates:
            for row in _csv_rows(root, inst.site, day)[1]:
                if row["patient_id"] == inst.patient_id:
                    expected = {k: v for k, v in row.items() if k in summary.patient_columns[inst.site]}
        assert summary.expected_clinical(inst.date, inst.site, inst.patient_id) == expected
    listed = {(s, r["patient_id"]) for (d, s), rows in summary.clinical_records.items() for r in rows}
    assert listed - imaged, "extracts should also hold patients who are never imaged"
    assert dicom_ids <= {p.patient_id for p in summary.patients}
    changed = False
    for site in summary.sites:
        history: dict[str, list[dict]] = {}
        for day in summary.dates:
            for row in summary.clinical_records[(day, site)]:
                history.setdefault(row["patient_id"], []).append(row)
        changed |= any(len(rows) > 1 and rows[0] != rows[1] for rows in history.values())
    assert changed


def test_patients_shared_across_sites_and_valid_nhs_numbers(hospital):
    _, summary = hospital
    assert sum(len(p.imaged_sites) >= 2 for p in summary.patients) >= 2
    ids = [p.patient_id for p in summary.patients]
    assert len(ids) == len(set(ids))
    for pid in ids:
        digits = list(map(int, pid))
        check = (11 - sum(d * w for d, w in zip(digits[:9], range(10, 1, -1))) % 11) % 11
        assert check == digits[9]
    visits = {}
    for inst in summary.instances:
        visits.setdefault((inst.site, inst.patient_id), set()).add(inst.date)
    assert any(len(days) >= 2 for days in visits.values())


def test_identifying_strings_are_planted(hospital):
    root, summary = hospital
    secrets = summary.identifying_strings()
    blob = b"\n".join(_tree(root).values()).decode("latin-1").lower()
    missing = [s for s in secrets if s.lower() not in blob]
    assert not missing
    for patient in summary.patients:
        assert {patient.patient_id, patient.family_name, patient.given_name} <= set(secrets)
        if patient.imaged_sites:
            assert {patient.dicom_name, patient.postcode, patient.birth_date.replace("-", "")} <= set(secrets)
    for inst in summary.instances:
        assert {inst.sop_instance_uid, inst.study_uid, inst.series_uid} <= set(secrets)
    ds = _read(root, summary.instances[0].rel_path)
    for keyword in ("InstitutionName", "InstitutionAddress", "StationName", "ReferringPhysicianName",
                    "AccessionNumber", "StudyID", "PatientAddress"):
        assert str(ds.data_element(keyword).value) in secrets
    names = {p.patient_id: p for p in summary.patients}
    descriptions = [(names[i.patient_id], _read(root, i.rel_path)) for i in summary.instances]
    assert any(p.dicom_name in ds.StudyDescription for p, ds in descriptions)
    assert any(p.full_name in ds.SeriesDescription for p, ds in descriptions)


def test_custom_shapes_and_cli(tmp_path, capsys):
    summary = synth.generate_hospital(tmp_path / "small", sites=["x"], dates=["2024-05-01"],
                                      patients_per_site=2, oct_shape=(3, 16, 24), fundus_shape=(20, 30))
    opt = next(i for i in summary.instances if i.modality == "OPT")
    ds = pydicom.dcmread(tmp_path / "small" / opt.rel_path)
    assert (ds.NumberOfFrames, ds.Rows, ds.Columns) == (3, 16, 24)
    assert synth.main(["--out", str(tmp_path / "cli"), "--sites", "a,b", "--dates", "2024-03-01,2024-03-02",
                       "--patients", "3", "--oct-shape", "4,32,32", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "DICOM files" in out
    cli = synth.generate_hospital(tmp_path / "cli2", sites=["a", "b"], dates=["2024-03-01", "2024-03-02"],
                                  patients_per_site=3, oct_shape=(4, 32, 32), seed=3)
    assert _tree(tmp_path / "cli") == _tree(tmp_path / "cli2")
    assert not [s for s in cli.identifying_strings() if s.lower() in out.lower()]
