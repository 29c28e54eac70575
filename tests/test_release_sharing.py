"""Release versions that share what did not change, labels stamped in the images, versions that end: no Spark.

One small hospital (tests/release_helpers.py), its releases built as the asset builds them, through the release
object store (imaging/steps/objects.py): what a content key promises, what a version writes, what tampering and
withdrawal do, what a stamped header holds and what the review makes of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pydicom
import pytest

from imaging.catalogue import COHORTS, RELEASE_OBJECTS
from imaging.config_model import ConfigError
from imaging.governance import audit
from imaging.governance.bundle import SUMS_FILE, hash_files, manifest_bytes, read_manifest, verify_bundle
from imaging.governance.cohort import CohortDefinition
from imaging.governance.retention import ENDED, WITHDRAW, Ending, collect, current_roots, end, listed_images
from imaging.governance.review import review
from imaging.steps.objects import ObjectStore, TamperedObject, identity
from imaging.steps.release import HeaderPlan, copy_rewritten
from imaging.steps.stamp import CREATOR, GROUP, StampPlan
from release_helpers import build_release, make_hospital

STAMP = ["age_band", "sex", "diagnosis_code", "visual_acuity_logmar"]
STAMPED = CohortDefinition.from_dict({"name": "small-test", "version": 1, "description": "all images",
                                      "stamp": STAMP, "sponsor": "Test hub"})


@pytest.fixture(scope="module")
def hospital(tmp_path_factory):
    return make_hospital(tmp_path_factory.mktemp("sharing"))


def _published(hospital, version: int) -> Path:
    return hospital.warehouse / COHORTS.path / "small-test" / f"v{version}"


def _patients(hospital) -> list[str]:
    return sorted({r["patient_pseudonym"] for r in hospital.manifest})


@pytest.fixture(scope="module")
def versions(hospital):
    """v1 (stamped), v2 after the first patient opted out, v3 after the second patient's visual acuity changed,
    each built through the object store and published as a folder; what each copy did."""
    leaving, changed = _patients(hospital)[:2]
    done = {}
    build_release(hospital, _published(hospital, 1), STAMPED, shared=True)
    done[1] = list(hospital.last_copy)
    without = lambda row: None if row["patient_pseudonym"] == leaving else row  # noqa: E731
    build_release(hospital, _published(hospital, 2), dataclasses.replace(STAMPED, version=2), shared=True,
                  rows_of=without)
    done[2] = list(hospital.last_copy)

    def relabelled(row):
        if row["patient_pseudonym"] == changed:
            row["visual_acuity_logmar"] = 1.5 if row.get("visual_acuity_logmar") != 1.5 else 1.4
        return without(row)
    build_release(hospital, _published(hospital, 3), dataclasses.replace(STAMPED, version=3), shared=True,
                  rows_of=relabelled)
    done[3] = list(hospital.last_copy)
    return {"copies": done, "leaving": leaving, "changed": changed}


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def test_identical_content_keys_mean_identical_bytes_and_every_input_of_the_rewrite_is_in_the_key(hospital):
    """The rewrite takes the source's bytes, the plan and the image's values, nothing else; the key hashes the
    three (the source by its verified sha256) and the code: two equal keys are two equal byte strings."""
    row = hospital.manifest[0]
    source = str(hospital.warehouse / "deidentified" / row["output_path"])
    rules = hospital.disclosure.header_rules()
    types = {"age_band": "string", "sex": "string", "diagnosis_code": "string", "visual_acuity_logmar": "double"}
    plans = [HeaderPlan(rules, None, "a"), HeaderPlan(rules, None, "b"),
             HeaderPlan(rules, StampPlan.build("c", None, STAMP, types), "a"),
             HeaderPlan(rules, StampPlan.build("c", "Hub", STAMP, types), "a"),
             HeaderPlan(rules, StampPlan.build("c", None, STAMP[::-1], types), "a"),
             HeaderPlan(rules, StampPlan.build("d", None, STAMP, types), "a")]
    base = {"age_band": "50-54", "sex": "F", "patient_pseudonym": "P1", "study_date": "2024-03-01",
            "diagnosis_code": "H35.31", "visual_acuity_logmar": 0.2}
    values = [base, {**base, "sex": "M"}, {**base, "age_band": "55-59"}, {**base, "visual_acuity_logmar": 0.3},
              {**base, "patient_pseudonym": "P2"}, {**base, "study_date": "2024-03-02"}, {**base, "diagnosis_code": None}]
    made = {}
    for plan in plans:
        for value in values:
            released = json.dumps(value)
            out = io.BytesIO()
            done = copy_rewritten(source, plan, value, out)
            assert done is not None and done.source_sha256 == row["sha256"]
            key = plan.content_key(row["sha256"], released)
            again = io.BytesIO()
            copy_rewritten(source, plan, json.loads(released), again)
            assert again.getvalue() == out.getvalue() and plan.content_key(row["sha256"], released) == key
            made.setdefault(key, set()).add(hashlib.sha256(out.getvalue()).hexdigest())
    assert all(len(shas) == 1 for shas in made.values())  # one key, one content
    assert len(made) == len(plans) * len(values)  # every input changes the key (the code too: never shared across)
    assert plans[0].content_key(row["sha256"], "{}") != plans[0].content_key("0" * 64, "{}")


def test_the_fast_header_writer_writes_the_bytes_pydicom_writes(hospital):
    """`header_bytes` (the copy's header writer) against pydicom's own `dcmwrite` on every header pydicom's test
    files and the hospital's de-identified images hold, as read and after a stamped plan changed it: the same
    bytes (raw elements, converted ones, sequences, private blocks, implicit and explicit VR, deflated)."""
    import warnings

    from pydicom.data import get_testdata_files

    from imaging.steps.release import header_bytes

    types = {"age_band": "string", "sex": "string", "diagnosis_code": "string", "visual_acuity_logmar": "double"}
    plan = HeaderPlan(hospital.disclosure.header_rules(), StampPlan.build("c", "Hub", STAMP, types), "a")
    value = {"age_band": "50-54", "sex": "F", "patient_pseudonym": "P1", "study_date": "2024-03-01",
             "diagnosis_code": "H35.31", "visual_acuity_logmar": 0.2}
    # pydicom's files of each kind (explicit, implicit, big-endian, deflated, no meta, sequences, private sequences,
    # odd lengths, padding), then the hospital's images
    kinds = ("CT_small", "MR_small", "MR_small_implicit", "MR_small_padded", "MR_small_bigendian", "image_dfl",
             "no_meta", "no_meta_group_length", "rtplan", "rtstruct", "nested_priv_SQ", "priv_SQ", "SC_rgb_small_odd",
             "liver_1frame", "emri_small", "chrX1", "chrH31")
    files = [*(f for k in kinds for f in get_testdata_files(f"{k}.dcm")),
             *(str(hospital.warehouse / "deidentified" / r["output_path"]) for r in hospital.manifest[:12])]
    compared = 0
    for name in files:
        for apply in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:  # read twice: each writer gets its own dataset (a write may convert elements)
                    theirs, mine = (pydicom.dcmread(name, stop_before_pixels=True) for _ in range(2))
                    if apply:
                        plan.apply(theirs, value)
                        plan.apply(mine, value)
                    expected = io.BytesIO()
                    pydicom.dcmwrite(expected, theirs, enforce_file_format=False)
                except Exception:  # noqa: BLE001 - a file pydicom itself cannot read or write: nothing to compare
                    continue
                assert header_bytes(mine) == expected.getvalue(), (name, apply)
                compared += 1
    assert compared >= 2 * 12 + 16  # every hospital image, and most of the kinds (some live in pydicom-data)


def test_a_version_writes_only_what_changed_and_the_store_holds_each_content_once(hospital, versions):
    copies = versions["copies"]
    assert all(c.written > 0 for c in copies[1])
    assert all(c.written == 0 for c in copies[2])  # one patient left: nothing written
    v3_written = [c for c in copies[3] if c.written]
    assert v3_written and {c.path.split("/")[1] for c in v3_written} == {versions["changed"]}
    changed = sum(1 for c in copies[3] if c.path.split("/")[1] == versions["changed"])
    assert len(v3_written) == changed  # only the relabelled patient's images re-stamped
    store = ObjectStore(hospital.store)
    for version, done in copies.items():
        for c in done:
            placed = _published(hospital, version) / c.path
            assert _inode(placed) == _inode(Path(store.url(c.sha256)))  # a hard link to the stored object
            assert placed.stat().st_mode & 0o222 == 0  # read-only, in every version
    distinct = {c.sha256 for done in copies.values() for c in done}
    objects = [p for p in Path(hospital.store).rglob("*.dcm") if "_incoming" not in p.parts]
    assert sorted(p.stem for p in objects) == sorted(distinct)
    inodes = {_inode(p) for v in (1, 2, 3) for p in (_published(hospital, v) / "images").rglob("*.dcm")}
    assert len(inodes) == len(distinct)  # each distinct released image stored once, however many versions hold it
    for v in (1, 2, 3):
        assert verify_bundle(str(_published(hospital, v))).ok


def test_tampering_with_a_shared_file_is_caught_in_every_version_holding_it(hospital, versions, tmp_path):
    """A shared file is one inode: changed through any version, every version holding it fails its review (which
    reads every byte). The store refuses to share it again once its identity moved; one changed behind a restored
    modification time is still caught by every review, and by the next write of the same content."""
    copies = versions["copies"]
    shared = next(c for c in copies[2] if any(d.path == c.path for d in copies[3]) and not c.written)
    for v in (1, 2, 3):  # a working copy of each version (links: the same inodes), the originals stay whole
        shutil.copytree(_published(hospital, v), tmp_path / f"v{v}", copy_function=os.link)
    target = tmp_path / "v2" / shared.path
    before = target.stat()
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    os.chmod(target, 0o644)
    with open(target, "r+b") as handle:  # in place: the same inode every version links
        handle.write(bytes(data))
    for v in (1, 2, 3):
        result = review(str(tmp_path / f"v{v}"))
        assert f"checksum differs: {shared.path}" in result.problems, v
    store = ObjectStore(hospital.store)
    with pytest.raises(TamperedObject):  # its identity moved: hashed again before it is shared, and refused
        store.trusted(shared.sha256, shared.object_identity)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # a careful forger restores the time
    assert all(f"checksum differs: {shared.path}" in verify_bundle(str(tmp_path / f"v{v}")).problems for v in (1, 2, 3))
    with pytest.raises(TamperedObject):  # a new copy of the same content meets the changed object: refused
        store.check(shared.sha256)
    data[-1] ^= 0xFF  # put it back (the module's later tests read these versions)
    with open(target, "r+b") as handle:
        handle.write(bytes(data))
    os.chmod(target, 0o444)
    assert verify_bundle(str(_published(hospital, 2))).ok


def test_stamped_labels_are_read_with_pydicom_and_the_review_counts_what_the_headers_hold(hospital, versions,
                                                                                         tmp_path):
    import pyarrow.parquet as pq

    v1 = _published(hospital, 1)
    rows = {r["file"]: r for r in pq.read_table(v1 / "metadata.parquet").to_pylist()}
    path = sorted(rows)[0]
    ds = pydicom.dcmread(v1 / path)  # what a researcher types
    labels = ds.private_block(GROUP, CREATOR)
    assert labels[0x01].value == rows[path]["age_band"] and ds.ClinicalTrialSubjectID == rows[path]["patient_pseudonym"]
    assert (labels[0x02].value or None) == rows[path]["diagnosis_code"] and ds.ClinicalTrialProtocolID == "small-test"
    assert ds.ClinicalTrialSponsorName == "Test hub" and labels[0x01].VR == "UT"
    assert labels[0x03].VR == "FD" and "PatientAge" not in ds and ds.ClinicalTrialTimePointID
    card = json.loads((v1 / "datacard.json").read_text())
    assert [c["tag"] for c in card["labels_in_images"]["columns"]] == [
        "(0013,1001)", "(0010,0040)", "(0013,1002)", "(0013,1003)"]
    markdown = (v1 / "datacard.md").read_text()
    assert "## Labels in the images" in markdown and 'ds.private_block(0x0013, "IMAGING RELEASE LABELS")' in markdown
    assert json.loads((v1 / "release.json").read_text())["labels_in_images"]["columns"]["age_band"] == "(0013,1001)"
    result = review(str(v1), str(hospital.warehouse))
    assert "age_band (0013,1001)" in result.k.quasi_identifiers  # PatientAge removed; the band, stamped, counts
    assert [p for p in result.problems if not p.startswith("published without its signed approvals")] == []
    assert result.k.same_as_metadata and result.k.label_mismatches == () and result.k.headers_read == len(rows)

    # A forged copy whose stamped age is finer than the metadata's band fails, with or without the warehouse.
    forged = tmp_path / "forged"
    shutil.copytree(v1, forged)
    (forged / "APPROVAL.json").unlink(missing_ok=True)
    image = forged / path
    ds = pydicom.dcmread(image)
    ds.private_block(GROUP, CREATOR)[0x01].value = "57"
    image.unlink()
    ds.save_as(image, enforce_file_format=False)
    (forged / SUMS_FILE).unlink()
    (forged / SUMS_FILE).write_bytes(manifest_bytes(hash_files(str(forged))))
    problems = review(str(forged)).problems
    assert any("stamped label age_band (0013,1001)" in p for p in problems), problems


def test_a_stamp_the_release_cannot_hold_no_finer_than_its_quasi_identifiers_is_refused_at_load(tmp_path):
    shutil.copytree(Path(__file__).resolve().parents[1] / "platform", tmp_path / "platform",
                    ignore=shutil.ignore_patterns("proxy", "*.sh", "*.py"))
    (tmp_path / "platform" / "cohorts" / "finer.yaml").write_text(
        "name: finer\nversion: 1\nstamp: [age_at_scan, visual_acuity_logmar, file, no_such_column]\n")
    from imaging.driver.platform_files import load_platform

    with pytest.raises(ConfigError) as raised:
        load_platform(tmp_path / "platform")
    text = str(raised.value)
    assert "cohorts/finer.yaml" in text and "'age_at_scan' is released only as 'age_band'" in text
    assert "'no_such_column' is not a column" in text and "'file' is not a column" in text


def test_a_superseded_version_expires_after_its_retention_and_one_holding_opted_out_patients_is_withdrawn(
        hospital, versions):
    """`due` (what published_cohort ends after each run): v2 published ten days ago supersedes v1, v3 a day ago
    supersedes v2; with seven days' retention v1 expires, v2 not yet, v3 (the newest) never; v1 holding a patient
    who opted out since is withdrawn instead, whatever the retention."""
    import datetime as dt

    from imaging.governance.approval import manifest_id
    from imaging.governance.retention import EXPIRE, due

    warehouse = str(hospital.warehouse)
    now = dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc)
    for version, days in ((2, 10), (3, 1)):
        audit.record(warehouse, audit.PUBLISH, manifest_id(str(_published(hospital, version))), "small-test", version,
                     now=now - dt.timedelta(days=days))
    kept = dataclasses.replace(STAMPED, retention_days=7)
    assert [(e.version, e.event) for e in due(warehouse, [kept], now, {})] == [(1, EXPIRE)]
    assert due(warehouse, [STAMPED], now, {}) == []  # no retention: kept until withdrawn
    (ending,) = due(warehouse, [STAMPED], now, {("small-test", 1): 1})
    assert (ending.version, ending.event) == (1, WITHDRAW) and "opted out since" in ending.reason


def test_an_ended_version_leaves_a_record_its_bytes_go_when_no_version_holds_them_and_newer_ones_stay_whole(
        hospital, versions):
    """Withdrawing v1 (it holds the patient who opted out) keeps WITHDRAWN.json, logs the withdrawal and how many
    images' bytes went: the opted-out patient's (no current version holds them); v2 and v3 share the rest and still
    verify. Then no current version reaches the opted-out patient's bytes, anywhere."""
    warehouse = str(hospital.warehouse)
    v1 = _published(hospital, 1)
    leaving = {c.sha256 for c in versions["copies"][1] if c.path.split("/")[1] == versions["leaving"]}
    before = listed_images(str(v1))
    assert leaving and leaving <= before
    ended, = end(warehouse, [Ending("small-test", 1, WITHDRAW, "withdrawn: test")])
    assert sorted(p.name for p in v1.iterdir()) == [ENDED]
    record = json.loads((v1 / ENDED).read_text())
    assert record["event"] == "withdraw" and record["images"] == len(before) and record["release_id"]
    assert ended.reclaimed.objects == len(leaving)  # only v1 held them
    events = [e for e in audit.read_events(warehouse).events if e.cohort == "small-test" and e.version == 1]
    assert [e.event for e in events][-2:] == ["withdraw", "reclaim"] and not audit.read_events(warehouse).broken
    for v in (2, 3):
        assert verify_bundle(str(_published(hospital, v))).ok  # deleting an old version never breaks a newer one
    store = ObjectStore(hospital.store)
    reachable = set().union(*(listed_images(root) for root in current_roots(warehouse)))
    assert not leaving & reachable and not any(os.path.exists(store.url(s)) for s in leaving)
    on_disk = {hashlib.sha256(p.read_bytes()).hexdigest()
               for p in (hospital.warehouse / "deidentified").rglob("*.dcm")
               if RELEASE_OBJECTS.name in p.parts or COHORTS.name in p.parts}
    assert not leaving & on_disk
    assert collect(warehouse).objects == 0  # nothing else unreferenced
    with pytest.raises(ValueError):
        end(warehouse, [Ending("small-test", 1, WITHDRAW, "twice")])
    assert identity(str(v1 / ENDED)) is not None and read_manifest(str(_published(hospital, 3))).entries
