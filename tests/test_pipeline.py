"""End to end on real Spark and real DICOM: landing -> index -> linked -> anonymized -> cohort."""

import os
import re
from pathlib import Path

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pydicom
import pytest

from imaging.catalogue import (ANONYMIZE_QUARANTINE, COHORTS, DEIDENTIFIED, INDEX_QUARANTINE, LEDGER, LINKED,
                               RAW_IMAGE_INDEX, REVIEWS, manifest)
from imaging.driver.platform_files import load_clinical_policy

from conftest import DATES, ROOT, SITES, run_assets
from imaging.governance.bundle import verify_release

MANIFEST = manifest(load_clinical_policy())

LANDING = ROOT / "landing"


def table(path: Path) -> list[dict]:
    return pads.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []


def rel(url: str) -> str:
    """A landing file as the generator names it: relative to the landing root."""
    return str(Path(url).relative_to(LANDING))


def keyed(rows) -> set:
    return {(r["date"], r["site"], rel(r["source_path"])) for r in rows}


def expected(hospital, attr) -> set:
    return {(d, s, p) for (d, s), paths in getattr(hospital, attr).items() for p in paths}


def test_index_has_every_readable_file_and_quarantine_every_broken_one(hospital, warehouse):
    index = table(warehouse / RAW_IMAGE_INDEX.path)
    quarantine = table(warehouse / INDEX_QUARANTINE.path)
    assert len(index) == sum(map(len, hospital.dicom_files.values()))
    assert keyed(index) == expected(hospital, "dicom_files")
    assert len(quarantine) == sum(map(len, hospital.broken_files.values()))
    assert keyed(quarantine) == expected(hospital, "broken_files")
    assert all(r["reason"] for r in quarantine)
    truth = {i.sop_instance_uid: i for i in hospital.instances}
    for row in index:
        assert len(row["sha256"]) == 64 and row["size_bytes"] > 0
        assert row["modality"] == truth[row["sop_instance_uid"]].modality
        assert row["patient_id"] == truth[row["sop_instance_uid"]].patient_id


def test_linked_rows_carry_the_as_of_clinical_record(hospital, warehouse):
    linked = table(warehouse / LINKED.path)
    assert len(linked) == sum(map(len, hospital.dicom_files.values()))
    seen_without, seen_earlier = False, False
    for row in linked:
        want = hospital.expected_clinical(row["date"], row["site"], row["patient_id"])
        if want is None:
            assert row["has_clinical_record"] is False and row["clinical"] is None
            seen_without = True
            continue
        assert row["has_clinical_record"] is True
        got = dict(row["clinical"])
        for column, value in want.items():
            if column != "patient_id" and value not in ("", None):
                assert got.get(column.strip().lower()) == str(value).strip(), column
        seen_earlier |= row["clinical_extract_date"] < row["date"]
    assert seen_without and seen_earlier  # both as-of cases really occurred


def test_linked_rows_carry_their_own_eyes_latest_values(hospital, warehouse):
    """Each image's eye fields are its own eye's (site-a's per-eye column pairs, site-b's rows per eye with OU rows
    counting for both eyes): the latest of each field on or before its day, with the days between, and the
    diagnoses in force for that eye; the manifest releases them through the policy."""
    linked = table(warehouse / LINKED.path)
    truth = {i.sop_instance_uid: i for i in hospital.instances}
    seen = {"earlier": 0, "both_eyes_dx": 0, "eyes_differ": 0, "no_observation": 0}
    for row in linked:
        image = truth[row["sop_instance_uid"]]
        want = hospital.expected_eye(row["date"], row["site"], row["patient_id"], image.laterality)
        assert row["eye"] == image.laterality
        assert dict(row["eye_clinical"] or {}) == want.values, row["source_path"]
        assert dict(row["eye_days_before"] or {}) == want.days_before
        assert tuple(row["eye_diagnoses"] or ()) == want.diagnoses
        assert row["eye_reason"] == (None if want.values else "no observation of the imaged eye on or before the image's day")
        other = hospital.expected_eye(row["date"], row["site"], row["patient_id"], "L" if image.laterality == "R" else "R")
        seen["earlier"] += any(d > 0 for d in want.days_before.values())
        seen["both_eyes_dx"] += "E11.3" in want.diagnoses
        seen["eyes_differ"] += bool(want.values) and other.values != want.values
        seen["no_observation"] += not want.values
    assert all(seen.values()), seen  # every case really occurred

    released = {r["sop_instance_uid"]: r for r in table(warehouse / MANIFEST.path)}
    ledger = {r["source_path"]: r["output_path"] for r in table(warehouse / LEDGER.path)}
    by_output = {r["output_path"]: r for r in released.values()}
    for row in linked:
        out = by_output.get(ledger.get(row["source_path"]))
        if out is None:
            continue  # held back (opted out, text in pixels)
        values = dict(row["eye_clinical"] or {})
        acuity = values.get("visual_acuity_logmar", values.get("va_logmar"))
        assert out["eye"] == row["eye"]
        assert out["eye_visual_acuity_logmar"] == (float(acuity) if acuity else None)
        assert out["eye_diagnosis_codes"] == (";".join(row["eye_diagnoses"]) or None if row["eye_diagnoses"] else None)


def deidentified_files(warehouse):
    return [p for p in (warehouse / "deidentified").rglob("*") if p.is_file() and "_staging" not in p.parts]


def test_anonymized_images_parse_and_leak_nothing(hospital, warehouse):
    manifest = table(warehouse / MANIFEST.path)
    ledger = table(warehouse / LEDGER.path)
    held = table(warehouse / ANONYMIZE_QUARANTINE.path)
    indexed = sum(map(len, hospital.dicom_files.values()))
    assert len(manifest) + len(held) == indexed and len(ledger) == len(manifest) and manifest
    source_uids = {i.sop_instance_uid for i in hospital.instances} | {i.study_uid for i in hospital.instances}
    for row in manifest:
        path = warehouse / DEIDENTIFIED / row["output_path"]
        ds = pydicom.dcmread(path)
        assert ds.SOPInstanceUID == row["sop_instance_uid"] == ds.file_meta.MediaStorageSOPInstanceUID
        assert ds.PatientIdentityRemoved == "YES" and ds.SOPInstanceUID not in source_uids
        assert ds.PatientID == row["patient_pseudonym"]

    secrets = {s.lower() for s in hospital.identifying_strings() if len(s) >= 4}
    assert secrets
    for path in deidentified_files(warehouse):
        data = path.read_bytes().lower()
        name = str(path.relative_to(warehouse)).lower()
        for secret in secrets:
            assert secret.encode() not in data, f"an identifying value is in {name}"
            assert secret not in name
        if path.suffix == ".parquet":
            cells = repr(pads.dataset(path, format="parquet").to_table().to_pylist()).lower()
            assert not [s for s in secrets if s in cells], name
    assert not [p for p in (warehouse / "deidentified").rglob("*") if any(d in p.name for d in DATES + SITES)]


def test_one_pseudonym_per_patient_across_sites(hospital, warehouse):
    ledger = table(warehouse / LEDGER.path)
    manifest = {r["output_path"]: r for r in table(warehouse / MANIFEST.path)}
    index = {r["source_path"]: r["patient_id"] for r in table(warehouse / RAW_IMAGE_INDEX.path)}
    pairs = {(index[r["source_path"]], manifest[r["output_path"]]["patient_pseudonym"]) for r in ledger}
    patients = {p for p, _ in pairs}
    assert len(pairs) == len(patients) == len({q for _, q in pairs}) > 1


def test_release_verifies_and_holds_only_the_cohort(warehouse):
    release = warehouse / Path(COHORTS.path) / "amd-oct/v1"
    assert verify_release(str(release)) == []
    rows = table(release / "metadata.parquet")
    # Selected by the imaged eye's own diagnoses (an eye-level cohort), and the release says which eye each image shows.
    assert rows and all(r["modality"] == "OPT" and r["eye"] in ("R", "L")
                        and any(c.startswith("H35.3") for c in r["eye_diagnosis_codes"].split(";"))
                        and 50 <= int(r["age_band"].split("-")[0].rstrip("+")) <= 90 for r in rows)
    assert len(rows) == len(list((release / "images").rglob("*.dcm")))
    assert (release / "metadata.csv").read_text().count("\n") == len(rows) + 1


def test_tampered_release_is_detected(warehouse, tmp_path):
    import shutil

    copy = tmp_path / "release"
    shutil.copytree(warehouse / Path(COHORTS.path) / "amd-oct/v1", copy)
    victim = next((copy / "images").rglob("*.dcm"))
    victim.write_bytes(victim.read_bytes() + b"x")
    (copy / "stray.txt").write_text("x")
    problems = verify_release(str(copy))
    assert any(p.startswith("checksum differs") for p in problems) and "not listed: stray.txt" in problems


RUN_FACTS = ["run_id", "run_started_at"]  # provenance columns of the ledger: which run wrote a row
RUN_ID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The review report's own sha256 covers the runs it names, so it moves with them.
REPORT_SHA = re.compile(rb"(review report sha256[^<]*</td><td>)[0-9a-f]{64}")


def snapshot(root: Path) -> dict:
    """Every file by bytes; ledger files by rows without the run facts (a re-run is a new run); review reports
    with the runs they name (and so their own sha256) masked: a review shows which run wrote each file."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        name = str(p.relative_to(root))
        if name.startswith(LEDGER.path + "/"):
            out[name] = pq.read_table(p).drop_columns(RUN_FACTS).to_pylist()
        elif name.startswith(REVIEWS.path + "/"):
            out[name] = REPORT_SHA.sub(rb"\1<sha>", RUN_ID.sub(b"<run>", p.read_bytes()))
        else:
            out[name] = p.read_bytes()
    return out


def ledger_runs(root: Path, key) -> set:
    return {r["run_id"] for r in table(root / LEDGER.path) if (r["date"], r["site"]) == key}


RERUN = (DATES[1], SITES[0])


@pytest.fixture(scope="module")
def rerun(defs, warehouse):
    """One site-day re-run as an operator re-runs it: its three image assets in one run, then published_cohort.
    What the warehouse held before (and which run wrote the site-day's ledger rows), and the two runs' results:
    the re-run's outputs and what it showed are both checked below, on the one re-run."""
    before, runs = snapshot(warehouse), ledger_runs(warehouse, RERUN)
    key = f"{RERUN[0]}|{RERUN[1]}"
    results = [run_assets(defs, ["raw_image_index", "linked_patient_metadata", "anonymized_images"], (key, key)),
               run_assets(defs, ["published_cohort"])]
    return before, runs, results


def test_rerun_of_one_partition_is_byte_identical(warehouse, rerun):
    before, runs, _ = rerun
    after = snapshot(warehouse)
    assert before.keys() == after.keys()
    assert [k for k in before if before[k] != after[k]] == []
    # Same bytes everywhere, but the ledger names the run that wrote them now.
    assert len(runs) == 1 and ledger_runs(warehouse, RERUN) - runs


def test_follow_up_references_name_the_published_baseline(hospital, warehouse):
    ledger = table(warehouse / LEDGER.path)
    by_source = {rel(r["source_path"]): warehouse / DEIDENTIFIED / r["output_path"] for r in ledger}
    published_uid = {i.sop_instance_uid: pydicom.dcmread(by_source[i.rel_path], stop_before_pixels=True).SOPInstanceUID
                     for i in hospital.instances}
    follow_ups = [i for i in hospital.instances if i.referenced_sop_instance_uid]
    assert follow_ups
    for instance in follow_ups:
        ds = pydicom.dcmread(by_source[instance.rel_path], stop_before_pixels=True)
        assert ds.ReferencedImageSequence[0].ReferencedSOPInstanceUID == \
            published_uid[instance.referenced_sop_instance_uid]


def test_published_dates_move_with_the_patients_offset(warehouse, defs):
    """Study date and time move together by the patient's keyed offset (not whole days), keyed on the
    site's configured namespace whatever the file's IssuerOfPatientID says."""
    import datetime as dt
    import os

    from imaging.deid.timeshift import shift_paired_date
    from imaging.pseudonym import Pseudonymizer

    p = Pseudonymizer(os.environ["IMAGING_PSEUDONYM_KEY"])
    issuers = defs.resources["deid"].issuer_policy()
    index = {r["source_path"]: r for r in table(warehouse / RAW_IMAGE_INDEX.path)}
    manifest = {r["output_path"]: r for r in table(warehouse / MANIFEST.path)}
    for entry in table(warehouse / LEDGER.path):
        source, published = index[entry["source_path"]], manifest[entry["output_path"]]
        namespace = issuers.resolve(source["site"], source["issuer_of_patient_id"]).namespace
        shifted = shift_paired_date(source["study_date"], source["study_time"] or "",
                                    p.datetime_shift(namespace, source["patient_id"]))
        real = dt.datetime.strptime(source["study_date"], "%Y%m%d").date()
        assert published["study_date"] == dt.datetime.strptime(shifted, "%Y%m%d").date().isoformat() != real.isoformat()


def test_no_identifier_in_dagster_metadata_or_logs(hospital, rerun):
    """What the runs show in the UI (metadata, log messages) holds no value from the generated data."""
    _, _, results = rerun
    shown, fingerprints = [], {}
    for result in results:
        for event in result.all_events:
            shown.append(event.message or "")
            if event.is_step_materialization:
                materialization = event.step_materialization_data.materialization
                shown += [repr(v.value) for v in materialization.metadata.values()]
                if "pseudonym_key_fingerprint" in materialization.metadata:
                    fingerprints[materialization.asset_key.path[-1]] = \
                        materialization.metadata["pseudonym_key_fingerprint"].value
    text = "\n".join(shown)
    # Each image asset records which key it used, by fingerprint only; the key itself is never shown.
    from imaging.pseudonym import key_fingerprint

    key_in_use = os.environ["IMAGING_PSEUDONYM_KEY"]
    assert fingerprints == dict.fromkeys(["raw_image_index", "linked_patient_metadata", "anonymized_images"],
                                         key_fingerprint(key_in_use))
    assert key_in_use not in text
    assert "published_cohort" in text and "unchanged" in text
    values = set(hospital.identifying_strings()) | {p.patient_id for p in hospital.patients}
    values |= {p.full_name for p in hospital.patients} | {i.sop_instance_uid for i in hospital.instances}
    values |= {str(LANDING)}
    found = sorted(v for v in values if v and len(v) >= 4 and v in text)
    assert not found, found[:5]


def test_the_data_card_lists_every_upstream_check_and_each_inputs_landing_version(warehouse, instance):
    """The published card names each upstream check's latest result on the release's partitions (by
    batch token, with run and time) and each input's landing data version, as the instance recorded them."""
    import json

    from dagster import AssetKey

    from assets.checks import RULES, TABLE_WIDE, UPSTREAM, RecordedFacts
    from assets.landing_zone import scan

    release = warehouse / Path(COHORTS.path) / "amd-oct/v1"
    card = json.loads((release / "datacard.json").read_text())
    from imaging.pseudonym import key_fingerprint

    assert card["pseudonym_key"] == {"fingerprint": key_fingerprint(os.environ["IMAGING_PSEUDONYM_KEY"]),
                                     "demo_key": False}
    site_day = {r["batch"]: f"{r['date']}|{r['site']}" for r in table(warehouse / LEDGER.path)}
    tokens = sorted(p["batch"] for p in card["inputs"])
    assert tokens and set(tokens) <= set(site_day)

    # Landing: the version the landing zone was observed with, per site-day, before it was indexed.
    landed = scan(str(LANDING)).site_days
    assert all(p["landing_data_version"] == landed[site_day[p["batch"]]].version for p in card["inputs"])

    # Every check of the three upstream assets, the table-wide ones included, and the release's own.
    upstream = [c for c in card["checks"] if c["asset"] != "published_cohort"]
    assert {(c["asset"], c["check"]) for c in upstream} == {(r.asset, r.name) for a in UPSTREAM
                                                            for r in RULES.for_asset(a)}
    indexed = instance.fetch_materializations(AssetKey("raw_image_index"), limit=1).records[0].run_id
    for c in upstream:
        rule = RULES.rule(c["asset"], c["check"])
        assert c["severity"] == rule.severity and c["description"] == rule.description
        assert c["run_id"] == indexed and c["evaluated_at"].endswith("+00:00"), c  # one run evaluated them all
        assert c["result"] == "passed" or (c["result"] == "failed" and rule.severity == "WARN"), c
        if c["check"] in TABLE_WIDE.get(c["asset"], ()):
            assert c["scope"] == "whole table" and c["partitions"] == []
        else:
            assert c["scope"] == "partitions" and c["partitions"] == tokens, c  # exactly the partitions read
    assert {c["check"] for c in card["checks"] if c["asset"] == "published_cohort"} == {
        "k_anonymity", "images_copied_and_verified", "metadata_row_per_image", "no_opted_out_patient"}

    # What the instance says now, after the holding and the publishing runs (and their own checks),
    # is what the card says: publishing did not change the approved content.
    # (Other tests of this shared world may re-run an asset later: only assets still last materialized by the
    # card's run are compared; the index always is, as asserted above.)
    facts = RecordedFacts(instance)  # read afresh
    now = facts.release_checks([site_day[t] for t in tokens])
    same = {a for a in UPSTREAM if instance.fetch_materializations(AssetKey(a), limit=1).records[0].run_id == indexed}
    assert "raw_image_index" in same
    assert sorted((c.asset, c.check, c.result, c.run_id, c.evaluated_at) for c in now if c.asset in same) == sorted(
        (c["asset"], c["check"], c["result"], c["run_id"], c["evaluated_at"]) for c in upstream if c["asset"] in same)
    assert facts.landing_versions([site_day[t] for t in tokens]) == {
        site_day[p["batch"]]: p["landing_data_version"] for p in card["inputs"]}
    text = (release / "datacard.md").read_text() + json.dumps(card)
    assert not any(value in text for value in (*DATES, *SITES, str(LANDING)))
