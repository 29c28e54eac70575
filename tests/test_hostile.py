"""A hostile landing zone: header values that try to become paths, to pass as keys, or to be impossible.

Real archives hold files like these most days. Each must be quarantined with its reason by the step
that reads the value (or, for a legal value such as a PatientID spelled like a path, published
under a pseudonym), the rest of the site-day published, the counts adding up, and nothing written
anywhere but the warehouse. Runs over a landing zone and warehouse of their own, shared with
test_fuzz_pipeline's mutants in the other site's days (one run for both: the conftest fixture `hostile_and_fuzzed`);
every assertion here is on this module's site.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
from pathlib import Path

import pyarrow.dataset as pads
import pydicom
import pytest
from pydicom import config as dicom_config

from conftest import DATES, SITES
from imaging import fs as fsx
from imaging.catalogue import (ANONYMIZE_QUARANTINE, ANONYMIZED_FILES, CLINICAL_QUARANTINE, INDEX_QUARANTINE, LEDGER,
                               LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX, manifest)
from imaging.deid import RESEARCH_DEFAULT, load_pixel_text_settings, quiet
from imaging.driver.config import read_yaml
from imaging.driver.platform_files import load_clinical_policy
from imaging.issuers import IssuerPolicy
from imaging.records import IndexedImage, LinkedImage, ListedFile, PublishedImage
from imaging.steps.anonymize import AnonymizeJob
from imaging.steps.clinical import PLACEHOLDER_ROW, STUDY_BEFORE_BIRTH
from imaging.steps.index import (ELSEWHERE, MALFORMED_UID, PLACEHOLDER_PATIENT_ID, STUDY_DATE_AFTER_INDEXING,
                                 UID_UNDER_DICOM_ROOT, index_file)
from synth import generate_hospital

SITE, DAY, NEXT_DAY = SITES[0], DATES[0], DATES[1]
# One world with test_hostile and test_fuzz_pipeline (the conftest fixture `hostile_and_fuzzed`): one worker.
pytestmark = pytest.mark.xdist_group("hostile-and-fuzzed")
TRAVERSAL = "1.2.840.10008.5.1.4.1.1.77.1.5.1/../../../x"
# file name -> (attribute -> hostile value, the reason expected; None: published)
CASES = {
    "sop-traversal-under-root": ({"SOPInstanceUID": TRAVERSAL}, f"{MALFORMED_UID}: SOPInstanceUID"),
    "sop-absolute-path": ({"SOPInstanceUID": "/etc/passwd"}, f"{MALFORMED_UID}: SOPInstanceUID"),
    "sop-relative-path": ({"SOPInstanceUID": "../../outside"}, f"{MALFORMED_UID}: SOPInstanceUID"),
    "sop-80-digits": ({"SOPInstanceUID": "1" * 80}, f"{MALFORMED_UID}: SOPInstanceUID"),
    "sop-nul": ({"SOPInstanceUID": "1.2.3\x004.5"}, f"{MALFORMED_UID}: SOPInstanceUID"),
    "series-empty-component": ({"SeriesInstanceUID": "1.2..3"}, f"{MALFORMED_UID}: SeriesInstanceUID"),
    "study-under-dicom-root": ({"StudyInstanceUID": "1.2.840.10008.9.9"},
                               f"{UID_UNDER_DICOM_ROOT}: StudyInstanceUID"),
    "patient-placeholder": ({"PatientID": " unknown "}, PLACEHOLDER_PATIENT_ID),
    "study-in-future": ({"StudyDate": "20991231"}, STUDY_DATE_AFTER_INDEXING),
    "patient-id-like-a-path": ({"PatientID": "../../../etc/passwd"}, None),
    "born-after-study": ({"PatientID": "BORNLATER1"}, None),  # quarantined by the link step
}


def save_anything(ds: pydicom.Dataset, path: Path) -> None:
    """Write `ds` as Part 10 whatever its values: archives hold what no validator allows."""
    saved = dicom_config.settings.writing_validation_mode
    dicom_config.settings.writing_validation_mode = dicom_config.IGNORE
    try:
        with quiet():
            ds.save_as(path, enforce_file_format=True)
    finally:
        dicom_config.settings.writing_validation_mode = saved


def _rewrite(source: Path, target: Path, number: int, values: dict) -> None:
    with quiet():
        ds = pydicom.dcmread(source)
    # A fresh instance (and, for a hostile study, its own study) so only the hostile value differs.
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = f"{ds.SOPInstanceUID}.9{number}"
    for keyword, value in values.items():
        setattr(ds, keyword, value)
    if "SOPInstanceUID" in values:
        ds.file_meta.MediaStorageSOPInstanceUID = "1.2.3"
    target.parent.mkdir(parents=True, exist_ok=True)
    save_anything(ds, target)


def land_hostile(landing: Path):
    """The hostile files, a resend and the hostile clinical rows, in SITE's first two days under `landing`; the
    generated hospital's summary. Materialized with test_fuzz_pipeline's mutants in another site's days (the
    conftest fixture `hostile_and_fuzzed`: one world, one run, for both modules)."""
    summary = generate_hospital(landing, seed=5, sites=(SITE,), dates=(DAY, NEXT_DAY), patients_per_site=3,
                                oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    base = sorted(landing / rel for rel in summary.dicom_files[(DAY, SITE)])
    folder = landing / "images" / SITE / DAY / "hostile"
    for number, (name, (values, _)) in enumerate(sorted(CASES.items())):
        _rewrite(base[number % len(base)], folder / f"{name}.dcm", number, values)
    # A resend: the same instance lands again the next day.
    shutil.copy(base[0], landing / "images" / SITE / NEXT_DAY / "resent.dcm")
    # The day's extract gains a record born after the study, and rows keyed by nothing or a placeholder.
    extract = landing / "clinical" / SITE / f"{DAY}.csv"
    rows = list(csv.DictReader(io.StringIO(extract.read_text())))
    extra = [{"patient_id": "BORNLATER1", "date_of_birth": "2099-01-01", "sex": "F"},
             {"patient_id": "", "date_of_birth": "1950-01-01", "sex": "M"},
             {"patient_id": "N/A", "date_of_birth": "1950-01-01", "sex": "M"}]
    with extract.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows + [{c: row.get(c, "") for c in rows[0]} for row in extra])
    return summary


@pytest.fixture(scope="module")
def hostile(hostile_and_fuzzed):
    """(the world's root, its folder tree before the run, the hospital's summary)."""
    return hostile_and_fuzzed.root, hostile_and_fuzzed.before, hostile_and_fuzzed.hostile


def _tree(top: Path) -> set[str]:
    return {str(p) for p in top.rglob("*")}


def _table(warehouse: Path, table) -> list[dict]:
    path = warehouse / table.path
    return pads.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []


def _site(warehouse: Path, table, site: str = SITE) -> list[dict]:
    return [r for r in _table(warehouse, table) if r["site"] == site]


def published_of(warehouse: Path, site: str) -> list[dict]:
    """The manifest's rows of `site`'s files (the manifest is de-identified: its site is its ledger's)."""
    outputs = {r["output_path"] for r in _site(warehouse, LEDGER, site)}
    return [r for r in _table(warehouse, manifest(load_clinical_policy())) if r["output_path"] in outputs]


def test_hostile_files_are_quarantined_with_their_reasons(hostile):
    root, _, _ = hostile
    held = {Path(r["source_path"]).stem: r["reason"] for r in _site(root / "warehouse", INDEX_QUARANTINE)}
    for name, (_, reason) in CASES.items():
        if reason is not None:
            assert held.get(name) == reason, name
    assert held["resent"] == ELSEWHERE.reason
    linked_held = {Path(r["source_path"]).stem: r["reason"] for r in _site(root / "warehouse", LINK_QUARANTINE)}
    assert linked_held == {"born-after-study": STUDY_BEFORE_BIRTH}
    rows = _site(root / "warehouse", CLINICAL_QUARANTINE)
    assert sorted(r["reason"] for r in rows) == [PLACEHOLDER_ROW] * 2 and {r["date"] for r in rows} == {DAY}


def test_a_patient_id_spelled_like_a_path_is_published_under_a_pseudonym(hostile):
    root, _, _ = hostile
    warehouse = root / "warehouse"
    ledger = {Path(r["source_path"]).stem: r for r in _site(warehouse, LEDGER)}
    row = ledger["patient-id-like-a-path"]
    published = {r["output_path"]: r for r in _table(warehouse, manifest(load_clinical_policy()))}[row["output_path"]]
    assert re.fullmatch(r"P[0-9A-F]{24}", published["patient_pseudonym"])
    data = (warehouse / "deidentified" / row["output_path"]).read_bytes()
    assert b"etc/passwd" not in data and b"../" not in data


def test_every_file_is_accounted_for_and_the_rest_published(hostile):
    root, _, summary = hostile
    warehouse = root / "warehouse"
    # SITE's files (test_fuzz_pipeline's mutants are another site's, in the same warehouse).
    listed = sum(1 for p in (root / "landing" / "images" / SITE).rglob("*") if p.is_file())
    index, index_held = _site(warehouse, RAW_IMAGE_INDEX), _site(warehouse, INDEX_QUARANTINE)
    linked, link_held = _site(warehouse, LINKED), _site(warehouse, LINK_QUARANTINE)
    published, held = published_of(warehouse, SITE), _site(warehouse, ANONYMIZE_QUARANTINE)
    assert listed == len(index) + len(index_held)
    assert len(index) == len(linked) + len(link_held)
    assert len(linked) == len(published) + len(held)
    # Every generated (non-hostile) file and the path-like PatientID were published or held for burned-in text.
    clean = sum(len(v) for v in summary.dicom_files.values()) + 1
    assert len(published) + sum(r["reason"] in ("text in pixel data", "text left after redaction")
                                for r in held) == clean


def test_nothing_is_written_outside_the_warehouse(hostile):
    root, before, _ = hostile
    new = _tree(root.parent) - before
    warehouse = str(root / "warehouse")
    assert {p for p in new if p.startswith(str(root) + os.sep)
            and p != warehouse and not p.startswith(warehouse + os.sep)} == set()
    # Nor beside it: what the hostile values would have named (other tests' own folders aside).
    assert not [p for p in new if re.fullmatch(r"(x|outside|passwd)(\.dcm)?", Path(p).name)]
    names = [p.relative_to(root / "warehouse" / "deidentified" / ANONYMIZED_FILES.name)
             for p in (root / "warehouse" / "deidentified" / ANONYMIZED_FILES.name).rglob("*.dcm")]
    assert names and all(re.fullmatch(r"[0-9a-f]{20}/2\.25\.[0-9]+\.dcm", str(n)) for n in names)


def test_the_deidentification_names_files_by_derived_uids_even_when_the_index_is_bypassed(tmp_path):
    """Defence in depth: a hostile SOP Instance UID handed straight to the de-identification (as if the
    index's rule were bypassed) is replaced by its 2.25 UID and the file lands inside the staging folder."""
    landing = tmp_path / "landing"
    summary = generate_hospital(landing, seed=9, sites=(SITE,), dates=(DAY,), patients_per_site=1,
                                oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    source = landing / summary.dicom_files[(DAY, SITE)][0]
    hostile = tmp_path / "hostile.dcm"
    _rewrite(source, hostile, 0, {"SOPInstanceUID": TRAVERSAL})
    image = index_file(ListedFile(DAY, SITE, str(source), source.stat().st_size))
    assert isinstance(image, IndexedImage)
    fields = {**image.__dict__, "source_path": str(hostile), "size_bytes": hostile.stat().st_size,
              "sha256": hashlib.sha256(hostile.read_bytes()).hexdigest(), "sop_instance_uid": TRAVERSAL}
    staging = tmp_path / "staging"
    publish = AnonymizeJob("hostile-test-key-" + "k" * 16, RESEARCH_DEFAULT, load_clinical_policy(),
                           IssuerPolicy.from_dict(read_yaml("issuers.yaml")),
                           load_pixel_text_settings(read_yaml("pixel_text.yaml")), str(staging))()
    out = publish(LinkedImage(**fields, has_clinical_record=False))
    assert isinstance(out, PublishedImage), out
    assert re.fullmatch(rf"{ANONYMIZED_FILES.name}/[0-9a-f]{{20}}/2\.25\.[0-9]+\.dcm", out.output_path)
    outside = {p for p in tmp_path.rglob("*") if p.is_file() and staging not in p.parents}
    assert outside == {hostile, *(p for p in landing.rglob("*") if p.is_file())}
    assert (staging / out.output_path).is_file()


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", ".hidden", "a/\x00b",
                                      "a\\..\\b", ""])
def test_the_file_writer_refuses_paths_that_could_leave_its_root(tmp_path, relative):
    with pytest.raises(fsx.OutsideRoot):
        fsx.write_under(str(tmp_path / "root"), relative, b"x")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_the_file_writer_refuses_a_symbolic_link_out_of_its_root(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(fsx.OutsideRoot):
        fsx.write_under(str(tmp_path / "root"), "link/x.dcm", b"x")
    fsx.write_under(str(tmp_path / "root"), "batch/2.25.1.dcm", b"x")
    assert (tmp_path / "root" / "batch" / "2.25.1.dcm").read_bytes() == b"x"
