"""Issue 19's route: approvals a trusted research environment would accept, and a review that means "safe to sign".

1. A release needs two different listed keys: an unlisted key, the same key twice and a failing review are
   each refused; a rejected release is never published; every step is in the audit log.
2. A forged copy, re-summed, fails review with and without the warehouse.
3. The ages and sexes in the released headers give the same k as the metadata.

On a small real release (synthetic DICOM, indexed, de-identified and bundled by the steps the assets run,
`release_helpers`), signed with real OpenSSH keys (`approvers`), checked against the real `ssh-keygen`
where it is installed; the last tests read the releases the session's Spark run published.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pydicom
import pytest

from approvers import approve_all, make_approvers, session_keys, write_key
from imaging.catalogue import COHORTS
from imaging.governance import approval as gate
from imaging.governance import audit
from imaging.governance.bundle import data_digest, hash_files, manifest_bytes, read_manifest
from imaging.governance.cohort import CohortDefinition
from imaging.governance.review import AWAITING, FAILED, REJECTED, VERIFIED, main, review, sign_decision
from imaging.governance.review_html import render_html
from imaging.governance.signing import DEMO_FINGERPRINTS, load_allowed_signers, sign, write_demo_keys
from imaging.pseudonym import DEMO_KEY
from release_helpers import SMALL_TEST, begin_commit, build_release, make_hospital, review_cli

SSH_KEYGEN = shutil.which("ssh-keygen")
OPT_ONLY = CohortDefinition.from_dict({"name": "small-oct", "version": 1, "description": "OCT only",
                                       "modalities": ["OPT"]})


@dataclasses.dataclass
class World:
    hospital: object
    warehouse: str


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    hospital = make_hospital(tmp_path_factory.mktemp("signed"))
    return World(hospital, str(hospital.warehouse))


def hold(world: World, cohort: CohortDefinition = SMALL_TEST, key: str | None = None) -> str:
    """Build a cohort's release and let the gate hold it, as published_cohort's first run does."""
    commit = begin_commit(world.hospital.warehouse)
    staging = Path(gate.building_url(commit, world.warehouse, cohort.name))
    built = build_release(world.hospital, staging, cohort, **({"key": key} if key else {}))
    decision = gate.decide(gate.ReleaseKey(built.release_id, built.content_key), published=None,
                           held=gate.list_held(world.warehouse, cohort.name), k_passed=True)
    plan = gate.ReleasePlan(cohort=cohort, decision=decision, building=str(staging), images=built.files)
    return gate.carry_out([plan], commit, world.warehouse)[cohort.name].path


def materialize(world: World, cohort: CohortDefinition = SMALL_TEST, policy=None) -> gate.Outcome:
    """The next materialization: rebuild, decide with the signed decisions, carry out."""
    policy = policy or gate.ApprovalPolicy.load()
    commit = begin_commit(world.hospital.warehouse)
    staging = Path(gate.building_url(commit, world.warehouse, cohort.name))
    built = build_release(world.hospital, staging, cohort)
    target = gate.published_path(world.warehouse, cohort.name, cohort.version)
    published = gate.ReleaseKey(gate.manifest_id(target), gate.content_key_of(target)) \
        if Path(target).exists() else None
    decision = gate.decide(gate.ReleaseKey(built.release_id, built.content_key), published=published,
                           held=gate.list_held(world.warehouse, cohort.name, policy=policy),
                           standing=gate.load_standing(world.warehouse, built.release_id, policy), k_passed=True)
    plan = gate.ReleasePlan(cohort=cohort, decision=decision, building=str(staging), images=built.files)
    return gate.carry_out([plan], commit, world.warehouse, policy)[cohort.name]


@pytest.fixture(scope="module")
def published(world) -> Path:
    """small-test, held, approved by the session's two approvers, published."""
    target = Path(gate.published_path(world.warehouse, SMALL_TEST.name, 1))
    if not target.exists():
        held = hold(world)
        if not gate.list_held(world.warehouse, SMALL_TEST.name)[0].standing.approved:
            approve_all(held)
        assert materialize(world).action == gate.PUBLISH
    return target


# --- 1. Two different listed keys; refusals; rejection; audit ------------------------------------------------

def test_a_release_needs_two_different_listed_keys(world, tmp_path, monkeypatch, capsys):
    held = hold(world)
    rid = held.rsplit("/", 1)[-1]
    first, second = session_keys()
    write_key(tmp_path / "stranger")

    code, _, err = review_cli(["approve", held, "--key", str(tmp_path / "stranger")], monkeypatch, capsys)
    assert code == 1 and "is not listed in the allowed signers" in err
    assert gate.load_decisions(world.warehouse, rid) == []

    code, out, _ = review_cli(["approve", held, "--key", first, "--note", "IG-42"], monkeypatch, capsys)
    assert code == 0 and "1 of 2 signed approvals" in out and "not published until 2" in out
    assert materialize(world).action == gate.HOLD  # one approval is not enough
    code, _, err = review_cli(["approve", held, "--key", first], monkeypatch, capsys)
    assert code == 1 and "already signed" in err  # the same person cannot approve twice
    assert len(gate.load_decisions(world.warehouse, rid)) == 1
    # Reviewing the held release: passes, but not VERIFIED until two have signed.
    code, out, _ = review_cli([held], monkeypatch, capsys)
    assert code == 1 and f"Result    {AWAITING}" in out and "Approvals 1 of 2 required" in out
    seen = out.rsplit("Review report sha256 ", 1)[1].split()[0]  # what the reviewer read, and will sign

    code, _, err = review_cli(["approve", held, "--key", second, "--report-sha256", "0" * 64], monkeypatch, capsys)
    assert code == 1 and "not the one you read" in err  # the review changed since (here: never that report)
    code, out, _ = review_cli(["approve", held, "--key", second, "--report-sha256", seen], monkeypatch, capsys)
    assert code == 0 and "2 of 2 signed approvals" in out and "the next materialization" in out
    outcome = materialize(world)
    assert outcome.action == gate.PUBLISH and outcome.release_id == rid
    for warehouse in (world.warehouse, None):
        code, out, _ = review_cli([outcome.path], monkeypatch, capsys, warehouse)
        assert code == 0 and f"Result    {VERIFIED}" in out and "Approvals 2 of 2 required" in out
        assert "reviewer-a@test" in out and "reviewer-b@test" in out and "IG-42" in out

    # What each approver signed: this release id and the review report they saw (kept beside the signature).
    (a, b) = gate.load_standing(world.warehouse, rid, gate.ApprovalPolicy.load()).approvals
    assert a.text.release_id == b.text.release_id == rid and a.text.review_sha256 == b.text.review_sha256 == seen
    report = gate.stored_report(world.warehouse, a.text)
    assert hashlib.sha256(report.encode()).hexdigest() == a.text.review_sha256 and rid in report
    log = audit.read_events(world.warehouse, rid)
    assert [e.event for e in log.events] == ["hold", "approve", "approve", "publish"] and not log.broken
    assert {e.principal for e in log.events if e.event == "approve"} == {"reviewer-a@test", "reviewer-b@test"}
    # The report kept beside a signature is the one signed: edited, the review says so.
    kept = next(Path(world.warehouse, "identifiable/approvals", rid).glob("*.review.txt"))
    text = kept.read_text()
    kept.write_text(text + "edited\n")
    assert "is not the one signed" in "\n".join(review(outcome.path, world.warehouse).all_problems)
    kept.write_text(text)


@pytest.mark.skipif(SSH_KEYGEN is None, reason="ssh-keygen (openssh-client) not installed")
def test_the_signatures_are_openssh_signatures(world, published, tmp_path):
    """Both directions against the real ssh-keygen: it verifies what the review signed, and an approval it
    signed itself counts."""
    allowed = os.environ["IMAGING_APPROVERS"]
    signers = load_allowed_signers(allowed)
    carried = gate.approval_copy(str(published))
    assert len(carried) == 2
    for number, decision in enumerate(carried):
        text = gate.DecisionText.parse(decision.message.encode())
        (tmp_path / f"m{number}").write_text(decision.message)
        (tmp_path / f"m{number}.sig").write_text(decision.signature)
        with open(tmp_path / f"m{number}", "rb") as message:
            done = subprocess.run([SSH_KEYGEN, "-Y", "verify", "-f", allowed, "-I", text.principal,
                                   "-n", "imaging-release", "-s", str(tmp_path / f"m{number}.sig")],
                                  stdin=message, capture_output=True, text=True)
        assert done.returncode == 0 and f'Good "imaging-release" signature for {text.principal}' in done.stdout

    # An approval signed by ssh-keygen itself (no Python on the signer's side) verifies and counts.
    held = hold(world, OPT_ONLY)
    rid = held.rsplit("/", 1)[-1]
    first = session_keys()[0]
    text = gate.DecisionText("approve", rid, OPT_ONLY.name, 1, "0" * 64, "reviewer-a@test",
                             signers.signers[0].fingerprint, "2026-11-24T08:00:00+00:00", None)
    (tmp_path / "decision").write_bytes(text.render())
    subprocess.run([SSH_KEYGEN, "-Y", "sign", "-n", "imaging-release", "-f", first, str(tmp_path / "decision")],
                   check=True, capture_output=True)
    standing = gate.standing_of(rid, [gate.SignedDecision(text.render().decode(),
                                                          (tmp_path / "decision.sig").read_text())],
                                gate.ApprovalPolicy.load())
    assert [a.text.principal for a in standing.approvals] == ["reviewer-a@test"] and not standing.problems


def test_a_failing_review_is_refused_and_a_rejected_release_is_never_published(world, tmp_path, monkeypatch, capsys):
    first, second = session_keys()
    cohort = CohortDefinition.from_dict({"name": "small-rejected", "version": 1, "description": "all images"})
    held = hold(world, cohort)
    rid = held.rsplit("/", 1)[-1]
    # A held release whose review fails (one image changed after it was built) is not approved.
    broken = Path(world.warehouse, "identifiable/held/small-broken", rid)
    shutil.copytree(held, broken)
    image = sorted(broken.rglob("*.dcm"))[0]
    image.write_bytes(image.read_bytes()[:-1] + bytes([image.read_bytes()[-1] ^ 0xFF]))
    code, _, err = review_cli(["approve", str(broken), "--key", first], monkeypatch, capsys)
    assert code == 1 and "the review fails" in err and "nothing approved" in err
    shutil.rmtree(broken.parent)

    with pytest.raises(SystemExit):  # a rejection needs its reason (a usage error, exit 2)
        review_cli(["reject", held, "--key", second], monkeypatch, capsys)
    assert "--reason" in capsys.readouterr().err
    code, out, _ = review_cli(["reject", held, "--key", second, "--reason", "consent scope does not cover OCT"],
                       monkeypatch, capsys)
    assert code == 0 and "never published" in out
    code, _, err = review_cli(["approve", held, "--key", first], monkeypatch, capsys)
    assert code == 1 and "rejected" in err
    (entry,) = gate.list_held(world.warehouse, cohort.name)
    assert entry.status == "rejected: never published"
    outcome = materialize(world, cohort)
    assert outcome.action == gate.REJECTED and "consent scope" in outcome.reason
    assert not Path(gate.published_path(world.warehouse, cohort.name, 1)).exists()
    code, out, _ = review_cli([held], monkeypatch, capsys)
    assert code == 1 and f"Result    {REJECTED}" in out
    assert [e.event for e in audit.read_events(world.warehouse, rid).events] == ["hold", "reject"]


# --- 2. Forged copies ---------------------------------------------------------------------------------------

def _resum(root: Path) -> None:
    """What a forger does after editing files: recompute SHA256SUMS so every checksum matches."""
    entries = hash_files(str(root))
    (root / "SHA256SUMS").write_bytes(manifest_bytes(entries))


def _forged_copy(published: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name / "deidentified" / "cohorts" / "small-test" / "v1"
    shutil.copytree(published, copy)
    return copy


def test_a_forged_resummed_copy_fails_review_with_and_without_the_warehouse(world, published, tmp_path):
    # Forgery 1 (the issue's): metadata.csv edited, SHA256SUMS recomputed, APPROVAL.json rewritten, here
    # re-signed for the new id by the forger's own key.
    csv = _forged_copy(published, tmp_path, "csv")
    text = (csv / "metadata.csv").read_text()
    (csv / "metadata.csv").write_text(text.replace("H35", "H36", 1) if "H35" in text else text + text.splitlines()[-1])
    _resum(csv)
    forger = make_approvers(tmp_path / "forger", principals=("reviewer-a@test",))
    new_id = hashlib.sha256((csv / "SHA256SUMS").read_bytes()).hexdigest()
    decisions = []
    for original in gate.approval_copy(str(published)):
        t = gate.DecisionText.parse(original.message.encode())
        t = dataclasses.replace(t, release_id=new_id)
        decisions.append(gate.SignedDecision(t.render().decode(), sign(t.render(), forger.keys["reviewer-a@test"])))
    (csv / "APPROVAL.json").write_bytes(gate.approval_copy_bytes(new_id, decisions))

    # Forgery 2: an image edited and everything re-derived from it (metadata sha256 in both files, the data
    # digest in release.json and the data card, SHA256SUMS); the genuine APPROVAL.json kept.
    image = _forged_copy(published, tmp_path, "image")
    victim = sorted((image / "images").rglob("*.dcm"))[0]
    dataset = pydicom.dcmread(victim)
    dataset.StudyDescription = "edited"
    dataset.save_as(victim)
    file = str(victim.relative_to(image))
    table = pq.read_table(image / "metadata.parquet")
    sums = [hashlib.sha256(victim.read_bytes()).hexdigest() if f == file else h
            for f, h in zip(table.column("file").to_pylist(), table.column("sha256").to_pylist())]
    table = table.set_column(table.column_names.index("sha256"), "sha256", pa.array(sums))
    pq.write_table(table, image / "metadata.parquet")
    pacsv.write_csv(table, image / "metadata.csv")
    _resum(image)
    digest = data_digest(read_manifest(str(image)).entries)
    for name in ("release.json", "datacard.json"):
        info = json.loads((image / name).read_text())
        info["data_digest"] = digest
        (image / name).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    _resum(image)

    for copy, expected in ((csv, ("metadata.csv and metadata.parquet do not hold the same rows",
                                  "is not in the allowed signers")),
                           (image, ("signs another release id",))):
        for warehouse in (world.warehouse, None):
            result = review(str(copy), warehouse)
            assert result.check.ok  # every checksum matches: re-summed
            assert result.verdict == FAILED, (copy, warehouse)
            problems = "\n".join(result.all_problems)
            assert "published without its signed approvals: 0 of 2" in problems
            assert all(e in problems for e in expected), problems
    # Without the re-derivation the cross-checks themselves catch an edited image.
    lazy = _forged_copy(published, tmp_path, "lazy")
    victim = sorted((lazy / "images").rglob("*.dcm"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")
    _resum(lazy)
    problems = "\n".join(review(str(lazy)).all_problems)
    assert "sha256 in the metadata differs from SHA256SUMS" in problems
    assert "data digest recomputed from SHA256SUMS differs" in problems
    # An image that is not DICOM at all: a problem named, never a crash, with or without the warehouse.
    victim.write_bytes(b"not a DICOM file")
    _resum(lazy)
    for warehouse in (world.warehouse, None):
        assert "the released headers cannot be read" in "\n".join(review(str(lazy), warehouse).all_problems)


# --- 3. Released headers no finer than the metadata -----------------------------------------------------

def _classes(rows) -> list[int]:
    members = defaultdict(set)
    for key, patient in rows:
        members[key].add(patient)
    return sorted(len(p) for p in members.values())


def test_released_headers_give_the_same_k_as_the_metadata(world, published, tmp_path):
    rows = pq.read_table(published / "metadata.parquet").to_pylist()
    headers = {r["file"]: pydicom.dcmread(published / r["file"], stop_before_pixels=True) for r in rows}
    assert not any("PatientAge" in h for h in headers.values())  # age leaves as its band, in the metadata only
    sexes = {r["file"]: headers[r["file"]].get("PatientSex") or None for r in rows}
    assert all(sexes[r["file"]] == (r["sex"] if r["sex"] in ("M", "F", "O") else None) for r in rows)
    assert any(r["sex"] is None for r in rows)  # a patient without a clinical record: null in both places
    metadata_k = _classes(((r["age_band"], r["sex"]), r["patient_pseudonym"]) for r in rows)
    files_k = _classes(((r["age_band"], r["sex"], headers[r["file"]].get("PatientAge"), sexes[r["file"]]),
                        r["patient_pseudonym"]) for r in rows)
    assert files_k == metadata_k
    result = review(str(published), world.warehouse)
    assert list(result.k.class_sizes) == metadata_k and result.k.same_as_metadata and result.k.headers_read == len(rows)
    assert result.counts.images == len(rows)  # exact, never "<10"
    age = next(a for a in result.attributes if a.attribute == "PatientAge")
    assert (age.removed, age.kept) == (len(rows), 0)

    # A release whose headers keep the exact age (the de-identified file as it was) is caught.
    finer = _forged_copy(published, tmp_path, "finer")
    row = rows[0]
    original = next(m for m in world.hospital.manifest if row["file"].endswith(f"/{m['sop_instance_uid']}.dcm"))
    shutil.copyfile(world.hospital.warehouse / "deidentified" / original["output_path"], finer / row["file"])
    assert "PatientAge" in pydicom.dcmread(finer / row["file"], stop_before_pixels=True)
    problems = "\n".join(review(str(finer)).all_problems)
    assert "released files hold PatientAge finer than the metadata k was computed on" in problems


def test_spark_built_releases_carry_generalised_headers_and_review_verified(warehouse):
    """The releases the session's Spark run published (published_cohort's own copy step)."""
    releases = sorted((warehouse / COHORTS.path).glob("*/v*"))
    assert releases
    for release in releases:
        result = review(str(release), str(warehouse))
        assert result.verdict == VERIFIED, result.all_problems
        # The partitions read hold broken files (one per site-day): their quarantine, counts by reason.
        assert result.quarantine and all(q.files > 0 and q.reason for q in result.quarantine)
        # The drawing's sources are the clinical columns that arrived, not every alias the policy accepts.
        assert result.arrived and "{" not in render_html(result).split('id="lineage-graph"')[1].split("</svg>")[0]
        assert result.k.same_as_metadata and result.k.headers_read == result.counts.images
        assert not any(a.attribute == "PatientAge" and a.kept for a in result.attributes)
        assert {e.path: e.sha256 for e in read_manifest(str(release)).entries if e.path.startswith("images/")} == \
            dict((r["file"], r["sha256"]) for r in pq.read_table(release / "metadata.parquet").to_pylist())
    # The demo's amd-oct cohort stamps its labels (platform/cohorts/amd_oct.yaml): pydicom shows them, the data
    # card says where, and the review held every stamped value to the metadata's.
    stamped = warehouse / COHORTS.path / "amd-oct" / "v1"
    row = pq.read_table(stamped / "metadata.parquet").to_pylist()[0]
    ds = pydicom.dcmread(stamped / row["file"])
    labels = ds.private_block(0x0013, "IMAGING RELEASE LABELS")
    # amd-oct stamps age_band, sex (PatientSex), then eye, eye_diagnosis_codes, ...: the private block's 1st, 2nd, 3rd.
    assert labels[0x01].value == row["age_band"] and labels[0x02].value == row["eye"] in ("R", "L")
    assert (labels[0x03].value or None) == row["eye_diagnosis_codes"]
    assert ds.ClinicalTrialSubjectID == row["patient_pseudonym"] and ds.ClinicalTrialProtocolID == "amd-oct"
    assert "## Labels in the images" in (stamped / "datacard.md").read_text()
    assert "age_band (0013,1001)" in review(str(stamped), str(warehouse)).k.quasi_identifiers


# --- Flags, help, diff ---------------------------------------------------------------------------------------

def test_demo_keys_and_a_minimum_k_below_the_policy_are_flagged(world, tmp_path):
    demo = gate.ApprovalPolicy(2, load_allowed_signers(write_demo_keys(tmp_path / "demo")))
    cohort = CohortDefinition.from_dict({"name": "small-demo", "version": 1, "description": "all images"})
    held = hold(world, cohort, key=DEMO_KEY)  # the card records the demo pseudonym key
    for principal in ("demo-approver-1", "demo-approver-2"):
        sign_decision(held, "approve", str(tmp_path / "demo" / principal), policy=demo)
    result = review(held, policy=demo)
    assert result.verdict == VERIFIED
    flags = "\n".join(result.all_flags)
    assert "DEMO pseudonym key" in flags and "minimum k (1) is below the policy's (5)" in flags
    assert all(fp in flags for fp in DEMO_FINGERPRINTS)
    # The same demo approvals do not count for a release made under a real pseudonym key.
    real = gate.standing_of(held.rsplit("/", 1)[-1], gate.load_decisions(world.warehouse, held.rsplit("/", 1)[-1]),
                            demo, demo_release=False)
    assert not real.approved and "counts only for a release made under the demo pseudonym key" in real.problems[0]


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("pending", "approve PATH --key", "reject PATH --key", "diff OLD NEW", "demo-keys"):
        assert command in out


def test_diff_between_two_versions_of_a_cohort(world, tmp_path, monkeypatch, capsys):
    v1 = build_release(world.hospital, tmp_path / "v1")
    v2 = build_release(world.hospital, tmp_path / "v2", CohortDefinition.from_dict(
        {"name": "small-test", "version": 2, "description": "OCT only", "modalities": ["OPT"]}))
    code, out, _ = review_cli(["diff", v1.root, v2.root], monkeypatch, capsys)
    rows = pq.read_table(Path(v1.root) / "metadata.parquet").num_rows
    fewer = pq.read_table(Path(v2.root) / "metadata.parquet").num_rows
    assert code == 0 and f"Rows      {rows} -> {fewer} ({fewer - rows:+d})" in out
    assert "Columns   unchanged" in out and "Options   unchanged" in out and "Code      unchanged" in out
    assert "Selection true -> " in out and "Patients  " in out and "removed" in out


def test_a_malformed_allowed_signers_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "approvers"
    bad.write_text('alice namespaces="imaging-release" ssh-ed25519 not-base64!\n'
                   'bob cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILxE2ikxAdcfVz02rkr1CGQSN8eJHvXdK4jQgArXy4LZ\n'
                   "* ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILxE2ikxAdcfVz02rkr1CGQSN8eJHvXdK4jQgArXy4LZ\n")
    monkeypatch.setenv("IMAGING_APPROVERS", str(bad))
    with pytest.raises(gate.ApprovalError) as error:
        gate.ApprovalPolicy.load()
    message = str(error.value)
    assert message.startswith("IMAGING_APPROVERS:") and "line 1: the key is not base64" in message
    assert "line 2: option 'cert-authority' is not supported" in message and "line 3: principal patterns" in message
    monkeypatch.setenv("IMAGING_WAREHOUSE", str(tmp_path))
    assert main(["pending"]) == 1 and "IMAGING_APPROVERS" in capsys.readouterr().err


def test_a_signature_covers_every_byte_of_the_decision(tmp_path):
    approvers = make_approvers(tmp_path, principals=("solo@test",))
    text = gate.DecisionText("approve", "a" * 64, "c", 1, "b" * 64, "solo@test", "SHA256:x", "2026-11-24T08:00:00+00:00",
                             "note")
    signed = gate.SignedDecision(text.render().decode(), sign(text.render(), approvers.keys["solo@test"]))
    policy = gate.ApprovalPolicy(1, load_allowed_signers(approvers.signers))
    assert "signed with another key" in gate.standing_of("a" * 64, [signed], policy).problems[0]
    tampered = gate.SignedDecision(signed.message.replace("note: \"note\"", "note: \"other\""), signed.signature)
    assert "does not match the signed text" in gate.standing_of("a" * 64, [tampered], policy).problems[0]


def test_the_audit_log_is_append_only_and_chained(tmp_path):
    warehouse = str(tmp_path)
    for event in ("hold", "approve", "publish"):
        audit.record(warehouse, event, "a" * 64, "c", 1, principal="p" if event == "approve" else None)
    log = audit.read_events(warehouse)
    assert [e.event for e in log.events] == ["hold", "approve", "publish"] and not log.broken
    files = sorted((tmp_path / "identifiable" / "audit").iterdir())
    files[1].write_text(files[1].read_text().replace('"p"', '"q"'))  # an event edited
    assert audit.read_events(warehouse).broken
    files[1].unlink()  # or removed
    assert audit.read_events(warehouse).broken
