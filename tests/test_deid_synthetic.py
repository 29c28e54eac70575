"""The synthetic eye hospital (synth): leaks against its ground truth, references, pseudonyms, dates."""

from __future__ import annotations

import datetime as dt
import io
import os
from collections import defaultdict

import pytest
from pydicom import dcmread

from imaging.deid import NotDeidentifiable, deidentify, load_profile, quiet, to_bytes
from imaging.pseudonym import Pseudonymizer

synth = pytest.importorskip("synth")
KEY = Pseudonymizer("synthetic-hospital-key")


@pytest.fixture(scope="module")
def hospital(tmp_path_factory):
    landing = tmp_path_factory.mktemp("deid-landing")
    summary = synth.generate_hospital(landing, seed=5, dates=("2024-03-01", "2024-03-02", "2024-03-03"))
    return summary


@pytest.fixture(scope="module")
def published(hospital):
    """instance truth -> (source dataset, de-identified dataset, output bytes), default profile."""
    out = {}
    for inst in hospital.instances:
        with quiet():
            src = dcmread(os.path.join(hospital.landing, inst.rel_path))
        result = deidentify(src, pseudonymizer=KEY, profile=load_profile())
        out[inst.rel_path] = (inst, src, result, to_bytes(result))
    return out


def test_every_synthetic_image_is_published(hospital, published):
    assert len(published) == len(hospital.instances) > 20


def test_no_identifying_string_survives(hospital, published):
    identifying = [s.lower().encode() for s in hospital.identifying_strings() if len(s) >= 3]
    assert len(identifying) > 100
    for rel, (_inst, _src, _out, data) in published.items():
        low = data.lower()
        leaked = [s for s in identifying if s in low]
        assert leaked == [], rel


def test_extra_identifiers_are_scrubbed_from_descriptors(published):
    _inst, src, _out, _data = next(iter(published.values()))
    src = src.copy()
    src.SeriesDescription = "Macula cube for Jane Smith 943 476 5919"
    out = deidentify(src, pseudonymizer=KEY, extra_identifiers=("Jane Smith", "9434765919"))
    assert out.SeriesDescription == "Macula cube for"


def test_references_and_uids_are_consistent_across_files(published):
    new_uid = {inst.sop_instance_uid: out.SOPInstanceUID for inst, _src, out, _data in published.values()}
    followups = 0
    for inst, src, out, _data in published.values():
        assert out.file_meta.MediaStorageSOPInstanceUID == out.SOPInstanceUID
        assert out.SOPInstanceUID != inst.sop_instance_uid and out.SOPInstanceUID.startswith("2.25.")
        assert out.StudyInstanceUID == KEY.uid(inst.study_uid)
        if inst.referenced_sop_instance_uid:
            followups += 1
            ref = out.ReferencedImageSequence[0]
            assert ref.ReferencedSOPInstanceUID == new_uid[inst.referenced_sop_instance_uid]
            assert ref.ReferencedSOPClassUID == src.ReferencedImageSequence[0].ReferencedSOPClassUID
    assert followups > 0


def test_one_pseudonym_per_patient_and_intervals_kept(published):
    by_patient = defaultdict(list)
    for inst, src, out, _data in published.values():
        by_patient[inst.patient_id].append((src, out))
    assert len(by_patient) > 1
    pseudonyms = {}
    for pid, pairs in by_patient.items():
        assert len({out.PatientID for _s, out in pairs}) == 1
        assert all(out.PatientName == out.PatientID for _s, out in pairs)
        pseudonyms[pid] = pairs[0][1].PatientID
        when = lambda d: dt.datetime.strptime(d.StudyDate + d.StudyTime, "%Y%m%d%H%M%S")  # noqa: E731
        shifts = {when(out) - when(src) for src, out in pairs}
        assert len(shifts) == 1  # one offset for all the patient's dates and times
        assert shifts.pop() % dt.timedelta(days=1) != dt.timedelta(0)  # not whole days: times move too
        for src, out in pairs:
            assert src.PatientID not in out.PatientID
    assert len(set(pseudonyms.values())) == len(pseudonyms)  # two patients, two pseudonyms


def test_broken_files_never_escape(hospital):
    """Junk the hospital writes (truncated, garbage, empty, notes) is quarantined by the index, with a
    reason; and read by force past the index, whatever dataset pydicom makes of it, the
    de-identification refuses it too, so no junk is ever written de-identified."""
    from imaging.records import ListedFile, Quarantined
    from imaging.steps.index import index_file

    forced = []
    assert set(hospital.broken_kinds.values()) == {"notes", "empty", "truncated", "garbage"}
    for rel, kind in hospital.broken_kinds.items():
        path = os.path.join(hospital.landing, rel)
        _, site, date, *_ = rel.split("/")  # images/<site>/<date>/...
        record = index_file(ListedFile(date, site, path, os.path.getsize(path)))
        assert isinstance(record, Quarantined) and record.reason, (kind, record)
        try:
            with quiet():
                ds = dcmread(path, force=True)
        except Exception:  # noqa: BLE001 - not even a forced read makes a dataset of it
            continue
        forced.append(kind)
        with pytest.raises(NotDeidentifiable):
            to_bytes(deidentify(ds, pseudonymizer=KEY))
    assert forced, "no junk file was read by force: the de-identification's refusal was never exercised"


def test_reads_back_identically(published):
    for _inst, src, _out, data in published.values():
        again = dcmread(io.BytesIO(data))
        assert again.PixelData == src.PixelData  # pixels copied untouched
        assert again.file_meta.TransferSyntaxUID == src.file_meta.TransferSyntaxUID
