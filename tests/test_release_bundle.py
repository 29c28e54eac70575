"""Release bundles: every file listed and checksummed, nothing unlisted, the id is the content."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from imaging.governance.bundle import SUMS_FILE, bundle_files, verify_bundle
from imaging.governance.datacard import CheckResult
from release_helpers import DATES, LANDING_VERSIONS, RUN_IDS, SITE, build_release, make_hospital


@pytest.fixture(scope="module")
def hospital(tmp_path_factory):
    return make_hospital(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="module")
def built(hospital, tmp_path_factory):
    return build_release(hospital, tmp_path_factory.mktemp("release"))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_bundle_lists_every_file_and_its_id_is_the_manifest_hash(built):
    root = Path(built.root)
    check = verify_bundle(built.root)
    assert check.ok and check.problems == ()
    files = [p for p in bundle_files(built.root) if p != SUMS_FILE]
    assert check.listed == check.checked == len(files) == built.files
    assert {"release.json", "datacard.json", "datacard.md", "lineage/openlineage.jsonl", "metadata.parquet",
            "metadata.csv"} <= set(files)
    assert sum(p.startswith("images/") for p in files) == 9
    assert built.release_id == hashlib.sha256((root / SUMS_FILE).read_bytes()).hexdigest()
    # The manifest is plain sha256sum format: coreutils verifies it with no platform code.
    done = subprocess.run(["sha256sum", "--check", "--strict", SUMS_FILE], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_same_inputs_give_the_same_release_id_and_bytes(hospital, built, tmp_path):
    again = build_release(hospital, tmp_path / "again")
    assert again.release_id == built.release_id and again.data_digest == built.data_digest
    assert _tree(tmp_path / "again") == _tree(Path(built.root))


def test_the_card_lists_each_check_with_its_result_and_each_input_with_its_landing_version(hospital, built):
    root = Path(built.root)
    card = json.loads((root / "datacard.json").read_text())
    checks = {(c["asset"], c["check"]): c for c in card["checks"]}
    tokens = sorted({p["batch"] for p in card["inputs"]})
    files = checks[("raw_image_index", "files_accounted")]
    assert files["result"] == "passed" and files["partitions"] == tokens and files["scope"] == "partitions"
    assert files["run_id"] == RUN_IDS[DATES[0]] and files["evaluated_at"] and files["severity"] == "ERROR"
    assert checks[("raw_image_index", "scans_per_patient")]["scope"] == "whole table"
    unknown = checks[("linked_patient_metadata", "unlinked_share")]
    assert unknown["result"] == "not evaluated" and unknown["severity"] == "WARN" and unknown["run_id"] is None
    assert sorted(p["landing_data_version"] for p in card["inputs"]) == [LANDING_VERSIONS[DATES[0]], "not observed"]
    markdown = (root / "datacard.md").read_text()
    assert "| raw_image_index | files_accounted | passed | ERROR | " + ", ".join(tokens) in markdown
    assert "not evaluated" in markdown and "not observed" in markdown and LANDING_VERSIONS[DATES[0]] in markdown
    # Partitions are batch tokens: no real date or site in the card.
    assert not any(d in markdown or d in json.dumps(card) for d in (*DATES, SITE))


def test_a_check_names_partitions_by_batch_token_only():
    with pytest.raises(ValueError):
        CheckResult("raw_image_index", "files_accounted", True, partitions=(f"{DATES[0]}|{SITE}",))


def test_a_new_check_result_changes_the_id_but_not_the_data_digest(hospital, built, tmp_path):
    failed = (CheckResult("anonymized_images", "every_image_accounted_for", False, run_id=RUN_IDS[DATES[1]],
                          evaluated_at="2026-11-21T00:00:00+00:00"),)
    other = build_release(hospital, tmp_path / "other", checks=failed)
    assert other.release_id != built.release_id
    assert other.data_digest == built.data_digest


@pytest.mark.parametrize("damage", ["tamper", "extra", "missing"])
def test_verification_finds_any_change(built, tmp_path, damage):
    copy = tmp_path / "copy"
    shutil.copytree(built.root, copy)
    image = sorted(copy.rglob("*.dcm"))[0]
    if damage == "tamper":
        data = bytearray(image.read_bytes())
        data[-1] ^= 0xFF
        image.write_bytes(bytes(data))
    elif damage == "extra":
        (copy / "images" / "notes.txt").write_text("added later")
    else:
        image.unlink()
    check = verify_bundle(str(copy))
    assert not check.ok and check.release_id == built.release_id
    expected = {"tamper": "checksum differs: ", "extra": "not listed: ", "missing": "missing: "}[damage]
    assert len(check.problems) == 1 and check.problems[0].startswith(expected)


def test_one_file_check_reads_that_image_only(built):
    image = next(p for p in bundle_files(built.root) if p.startswith("images/"))
    check = verify_bundle(built.root, only=image)
    assert check.ok
    assert check.checked == sum(not p.startswith("images/") for p in bundle_files(built.root) if p != SUMS_FILE) + 1


def test_finishing_refuses_a_folder_with_other_files(hospital, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "stray.txt").write_text("x")
    with pytest.raises(ValueError, match="only images/ and metadata"):
        build_release(hospital, tmp_path / "r")


def test_no_identifier_from_the_generated_data_in_the_bundle(hospital, built):
    summary = hospital.summary
    values = set(summary.identifying_strings())
    values |= {p.patient_id for p in summary.patients} | {p.full_name for p in summary.patients}
    values |= {i.sop_instance_uid for i in summary.instances} | {i.study_uid for i in summary.instances}
    values |= {str(hospital.root), "landing/images"}
    values = {v for v in values if v and len(v) >= 4}
    assert len(values) > 20
    tree = _tree(Path(built.root))
    for name, data in tree.items():
        text = data.decode("latin-1")
        found = [v for v in values if v in text or v in name]
        assert not found, (name, found[:3])
    # The description files name no real date or site: partitions appear as opaque batch tokens.
    for name in ("release.json", "datacard.json", "datacard.md", "lineage/openlineage.jsonl"):
        text = tree[name].decode()
        assert SITE not in text
        for day in DATES:
            assert day not in text and day.replace("-", "") not in text


def test_markdown_lists_a_bounded_number_of_partitions_per_check(built):
    from imaging.governance.datacard import SHOWN_PARTITIONS, render_markdown

    card = json.loads((Path(built.root) / "datacard.json").read_text())
    many = [f"{i:020x}" for i in range(SHOWN_PARTITIONS + 5)]
    card["checks"][0]["partitions"] = many
    markdown = render_markdown(card)
    assert many[SHOWN_PARTITIONS - 1] in markdown and many[SHOWN_PARTITIONS] not in markdown
    assert "(+5 more: datacard.json lists every one)" in markdown
