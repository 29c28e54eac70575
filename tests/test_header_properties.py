"""Property: whatever values a header carries, the index and the de-identification either accept them in
the shapes every later step relies on, or quarantine the file with a fixed reason; nothing raises, and
nothing is written outside the staging folder.

Hypothesis generates the values (UIDs, PatientID, StudyDate) from alphabets rich in path characters,
NULs, the DICOM root and over-long digits; each example is written into a real Part 10 file (a small
synthetic OCT volume) that goes through `index_file`, then the per-file de-identification the
`anonymized_images` step runs.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pydicom
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from imaging.deid import RESEARCH_DEFAULT, load_pixel_text_settings, quiet
from imaging.driver.config import read_yaml
from imaging.driver.platform_files import load_clinical_policy, load_quality_rules
from imaging.issuers import IssuerPolicy
from imaging.records import IndexedImage, LinkedImage, ListedFile, PublishedImage, Quarantined
from imaging.steps.anonymize import AnonymizeJob
from imaging.header import dicom_date
from imaging.steps.index import DICOM_ROOT, IndexRules, index_file, is_uid
from synth import generate_hospital
from test_hostile import save_anything

DAY, SITE = "2024-03-01", "site-a"
RULES = IndexRules(placeholders=frozenset(load_quality_rules().placeholder_list), today="2026-11-23")
# Reasons are fixed phrases (keywords at most), never values from the file.
REASON = re.compile(r"[A-Za-z0-9 ,:()'._/-]+")

digits = st.text(alphabet="0123456789", min_size=1, max_size=12)
well_formed = st.lists(digits, min_size=2, max_size=6).map(".".join)
uid = st.one_of(
    well_formed, well_formed, well_formed,                               # half the draws: a plausible UID
    st.text(alphabet="0123456789./\\\x00 -_ab", max_size=90),         # path characters, NULs, spaces
    st.text(alphabet="0123456789./", max_size=40).map(lambda s: DICOM_ROOT + s),
    st.lists(digits, min_size=6, max_size=12).map(".".join),            # often over 64 characters
)
patient_id = st.one_of(st.text(min_size=1, max_size=64), st.sampled_from(["../../../etc/passwd", "/etc/passwd", "UNKNOWN", " 0 ",
                                                              "N/A", "a\x00b", "..", "C:\\x"]))
study_date = st.one_of(st.text(alphabet="0123456789/-.", max_size=10),
                       st.dates().map(lambda d: d.strftime("%Y%m%d")))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("properties")
    summary = generate_hospital(root / "landing", seed=4, sites=(SITE,), dates=(DAY,), patients_per_site=1,
                                oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    base = root / "landing" / summary.dicom_files[(DAY, SITE)][0]
    with quiet():
        template = pydicom.dcmread(base)
    publish = AnonymizeJob("property-test-key-" + "k" * 16, RESEARCH_DEFAULT, load_clinical_policy(),
                           IssuerPolicy.from_dict(read_yaml("issuers.yaml")),
                           load_pixel_text_settings(read_yaml("pixel_text.yaml")), str(root / "staging"))()
    return root, template, publish


# Which way each example went: the property is only worth something if every way was taken.
OUTCOMES: dict[str, int] = {}


def _files(top: Path) -> set[Path]:
    return {p for p in top.rglob("*") if p.is_file()}


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sop=uid, study=uid, series=uid, pid=patient_id, date=study_date)
def test_generated_header_values_are_indexed_and_deidentified_safely(world, sop, study, series, pid, date):
    root, template, publish = world
    ds = template.copy()
    with quiet():  # pydicom warns about every invalid value assigned: these are meant to be
        ds.SOPInstanceUID, ds.StudyInstanceUID, ds.SeriesInstanceUID = sop, study, series
        ds.PatientID, ds.StudyDate = pid, date
    path = root / "landing" / "example.dcm"
    before = _files(root) - {path}
    save_anything(ds, path)

    record = index_file(ListedFile(DAY, SITE, str(path), path.stat().st_size), RULES)
    if isinstance(record, Quarantined):
        assert REASON.fullmatch(record.reason) and (len(pid.strip()) < 4 or pid.strip() not in record.reason)
        OUTCOMES["index quarantined"] = OUTCOMES.get("index quarantined", 0) + 1
        return
    assert isinstance(record, IndexedImage)
    for value in (record.sop_instance_uid, record.study_instance_uid, record.series_instance_uid):
        assert is_uid(value) and not value.startswith(DICOM_ROOT), value
    assert record.patient_id.strip().upper() not in RULES.placeholders
    assert dicom_date(record.study_date) is None or dicom_date(record.study_date).isoformat() <= RULES.today

    out = publish(LinkedImage(**{f.name: getattr(record, f.name) for f in dataclasses.fields(IndexedImage)},
                              has_clinical_record=False))
    written = _files(root) - before - {path}
    if isinstance(out, Quarantined):
        assert REASON.fullmatch(out.reason)
        assert all(root / "staging" in p.parents for p in written)
        OUTCOMES["de-identification quarantined"] = OUTCOMES.get("de-identification quarantined", 0) + 1
        return
    assert isinstance(out, PublishedImage)
    assert re.fullmatch(r"anonymized_images/files/[0-9a-f]{20}/2\.25\.[0-9]{1,39}\.dcm", out.output_path)
    assert written <= _files(root / "staging")
    assert (root / "staging" / out.output_path).is_file()
    assert re.fullmatch(r"P[0-9A-F]{24}", out.patient_pseudonym)
    for value in (out.sop_instance_uid, out.study_instance_uid, out.series_instance_uid):
        assert re.fullmatch(r"2\.25\.[0-9]{1,39}", value), value
    OUTCOMES["published"] = OUTCOMES.get("published", 0) + 1


def test_the_generated_values_took_both_ways():
    """The property above held on files the index quarantined and on files it published."""
    assert OUTCOMES.get("index quarantined", 0) >= 10 and OUTCOMES.get("published", 0) >= 5, OUTCOMES
