"""Issuer namespaces come from the site's configuration; a file's IssuerOfPatientID never splits a patient."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
import yaml
from pydicom import dcmread
from pydicom.dataset import Dataset

from imaging.deid import deidentify, load_profile, to_bytes
from imaging.issuers import IssuerPolicy, IssuerResolution, count_statuses, normalise
from imaging.pseudonym import Pseudonymizer
from synth.dicom import encode_part10

ROOT = Path(__file__).resolve().parents[1]
KEY = Pseudonymizer("issuer-test-key")
POLICY = IssuerPolicy.from_dict({
    "sites": {"north": "NHS", "south": "NHS", "island": "JERSEY"},
    "aliases": {"NHS Number": "NHS", "RX1": "NHS", "JGH": "JERSEY"},
})
NHS_NUMBER = "9434765919"


def test_platform_file_loads_and_names_every_default_site():
    spec = yaml.safe_load((ROOT / "platform/issuers.yaml").read_text())
    policy = IssuerPolicy.from_dict(spec)
    platform = yaml.safe_load((ROOT / "platform/platform.yaml").read_text())
    for site in platform["sites"]:
        assert policy.namespace(site) == "NHS"
    assert policy.resolve("site-a", "nhs number").status == "alias"


@pytest.mark.parametrize("site, header, expected", [
    ("north", "NHS", IssuerResolution("NHS", "configured")),
    ("north", " nhs ", IssuerResolution("NHS", "configured")),  # case, padding
    ("north", "NHS  NUMBER", IssuerResolution("NHS", "alias")),  # inner spaces
    ("north", "RX1\x00", IssuerResolution("NHS", "alias")),
    ("north", "", IssuerResolution("NHS", "absent")),
    ("north", None, IssuerResolution("NHS", "absent")),
    ("north", "EYECAM-07", IssuerResolution("NHS", "unknown")),  # a device name: counted, site wins
    ("north", "JGH", IssuerResolution("NHS", "inconsistent")),  # another namespace: counted, site wins
    ("island", "NHS", IssuerResolution("JERSEY", "inconsistent")),
    ("island", "JGH", IssuerResolution("JERSEY", "alias")),
])
def test_resolution(site, header, expected):
    assert POLICY.resolve(site, header) == expected


def test_counts_cover_every_status():
    resolutions = [POLICY.resolve("north", h) for h in ("NHS", "RX1", "", "EYECAM-07", "JGH", "EYECAM-07")]
    assert count_statuses(resolutions) == {"configured": 1, "alias": 1, "absent": 1, "unknown": 2,
                                           "inconsistent": 1}
    assert [r.suspect for r in resolutions] == [False, False, False, True, True, True]


def test_configuration_errors_are_clear():
    with pytest.raises(ValueError, match="unknown key"):
        IssuerPolicy.from_dict({"sites": {"a": "NHS"}, "default_issuer": "NHS"})
    with pytest.raises(ValueError, match="two namespaces"):
        IssuerPolicy.from_dict({"sites": {"a": "NHS"}, "aliases": {"rx1": "NHS", "RX1": "JERSEY"}})
    with pytest.raises(ValueError, match="alias of another namespace"):
        IssuerPolicy.from_dict({"sites": {"a": "NHS", "b": "RX1"}, "aliases": {"RX1": "NHS"}})
    with pytest.raises(ValueError, match="no site"):
        IssuerPolicy.from_dict({})
    with pytest.raises(ValueError, match="has no namespace"):
        POLICY.namespace("elsewhere")  # no default_namespace: an unlisted site is an error
    assert IssuerPolicy.from_dict({"default_namespace": "NHS"}).namespace("elsewhere") == "NHS"
    assert normalise(" a\tb \x00") == "A B"


def _file(issuer: str | None, uid: str, day: str, time: str) -> Dataset:
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.77.1.5.4", uid
    ds.StudyInstanceUID = uid + ".1"
    ds.PatientID, ds.PatientName, ds.Modality, ds.BurnedInAnnotation = NHS_NUMBER, "Smith^Jane", "OPT", "NO"
    if issuer is not None:
        ds.IssuerOfPatientID = issuer
    ds.StudyDate, ds.StudyTime = day, time
    return dcmread(io.BytesIO(encode_part10(ds)))


def test_one_patient_with_three_issuer_values_publishes_under_one_pseudonym():
    # One NHS number, written by three devices at two sites: trust code, device name, nothing.
    files = [("north", _file("RX1", "2.25.11", "20240301", "091500")),
             ("north", _file("EYECAM-07", "2.25.12", "20240301", "093000")),
             ("south", _file(None, "2.25.13", "20240415", "161000")),
             ("south", _file("NHS", "2.25.14", "20240520", "235900"))]
    out = []
    for site, ds in files:
        resolution = POLICY.resolve(site, ds.get("IssuerOfPatientID"))
        out.append(deidentify(ds, pseudonymizer=KEY, namespace=resolution.namespace, profile=load_profile()))
    assert {o.PatientID for o in out} == {KEY.patient_id("NHS", NHS_NUMBER)}
    assert all(NHS_NUMBER.encode() not in to_bytes(o) for o in out)
    assert [POLICY.resolve(s, d.get("IssuerOfPatientID")).status for s, d in files] == \
        ["alias", "unknown", "absent", "configured"]
    # The date/time offset is keyed on the namespace too: one offset, intervals kept.
    when = lambda d: dt.datetime.strptime(d.StudyDate + d.StudyTime, "%Y%m%d%H%M%S")  # noqa: E731
    offsets = {when(o) - when(ds) for o, (_site, ds) in zip(out, files)}
    assert offsets == {KEY.datetime_offset("NHS", NHS_NUMBER)}


def test_a_different_namespace_is_a_different_patient():
    ds = _file("JGH", "2.25.21", "20240301", "091500")
    jersey = deidentify(ds, pseudonymizer=KEY, namespace=POLICY.resolve("island", "JGH").namespace)
    nhs = deidentify(ds, pseudonymizer=KEY, namespace=POLICY.resolve("north", "JGH").namespace)
    assert jersey.PatientID != nhs.PatientID


def test_the_header_issuer_is_ignored_once_a_namespace_is_given():
    a = deidentify(_file("RX1", "2.25.31", "20240301", "091500"), pseudonymizer=KEY, namespace="NHS")
    b = deidentify(_file("EYECAM-07", "2.25.31", "20240301", "091500"), pseudonymizer=KEY, namespace="NHS")
    assert a.PatientID == b.PatientID and a.StudyDate == b.StudyDate and a.StudyTime == b.StudyTime
