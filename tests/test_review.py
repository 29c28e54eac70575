"""The approval gate and `imaging-review`: hold, approve, publish, then trace a file to its landing file."""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imaging.governance import approval as gate
from imaging.governance.bundle import APPROVAL, content_key_of, verify_bundle
from imaging.governance.cohort import CohortDefinition
from imaging.governance.review import review
from imaging.governance.review_html import render_html
from approvers import approve_all, session_keys
from release_helpers import DATES, RUN_IDS, SITE, SMALL_TEST, begin_commit, build_release, make_hospital, review_cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    """A release built, held, approved and published as the asset does it (`gate.carry_out`, through a commit)."""
    hospital = make_hospital(tmp_path_factory.mktemp("review"))
    warehouse = str(hospital.warehouse)
    commit = begin_commit(hospital.warehouse)
    staging = Path(gate.building_url(commit, warehouse, "small-test"))
    built = build_release(hospital, staging)
    first = gate.decide(_key(built), published=None, k_passed=True)
    assert first.action == gate.HOLD
    held = _carry_out(commit, warehouse, first, staging).path
    assert not staging.exists() and held.endswith(f"/identifiable/held/small-test/{built.release_id}")
    return hospital, warehouse, built, held


def _key(built):
    return gate.ReleaseKey(built.release_id, built.content_key)


def _carry_out(commit, warehouse, decision, building, cohort=SMALL_TEST):
    """What the asset does with one cohort's decision: `gate.carry_out` through the run's commit."""
    images = len(list(Path(building).rglob("*.dcm"))) if str(building) else 0
    plan = gate.ReleasePlan(cohort=cohort, decision=decision, building=str(building), images=images)
    return gate.carry_out([plan], commit, warehouse)[cohort.name]


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_hold_approve_publish(flow, monkeypatch, capsys):
    hospital, warehouse, built, held = flow
    code, out, _ = review_cli(["pending"], monkeypatch, capsys, warehouse)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1
    path, cohort, version, rid, status = lines[0].split("\t")
    assert (path, cohort, version, rid, status) == (held, "small-test", "v1", built.release_id, "awaiting approval (0 of 2)")
    # Without approval nothing is published, whatever the number of runs.
    policy = gate.ApprovalPolicy.load()
    assert gate.load_standing(warehouse, built.release_id, policy).approvals == ()
    assert not Path(gate.published_path(warehouse, "small-test", 1)).exists()

    first, second = session_keys()
    code, out, _ = review_cli(["approve", path, "--key", first, "--note", "IG-42"], monkeypatch, capsys)
    assert code == 0 and built.release_id in out and "1 of 2 signed approvals" in out
    standing = gate.load_standing(warehouse, built.release_id, policy)
    (approval,) = standing.approvals
    assert (approval.text.principal, approval.text.note, approval.text.cohort, approval.text.version) == \
        ("reviewer-a@test", "IG-42", "small-test", 1)
    assert not standing.approved and gate.list_held(warehouse)[0].status == "awaiting approval (1 of 2)"
    # One approval per principal: the same key again is refused and nothing changes.
    code, _, err = review_cli(["approve", path, "--key", first], monkeypatch, capsys)
    assert code == 1 and "already signed" in err
    code, out, _ = review_cli(["approve", path, "--key", second], monkeypatch, capsys)
    assert code == 0 and "2 of 2 signed approvals" in out
    standing = gate.load_standing(warehouse, built.release_id, policy)
    assert standing.approved

    # The next materialization rebuilds the same content (same id) and publishes exactly that.
    commit = begin_commit(hospital.warehouse)
    rebuilt = build_release(hospital, Path(gate.building_url(commit, warehouse, "small-test")))
    assert rebuilt.release_id == built.release_id
    decision = gate.decide(_key(rebuilt), published=None, standing=standing, k_passed=True)
    assert decision.action == gate.PUBLISH and "reviewer-a@test" in decision.reason
    target = _carry_out(commit, warehouse, decision, rebuilt.root).path
    assert not Path(rebuilt.root).exists() and not Path(held).exists()
    assert target == gate.published_path(warehouse, "small-test", 1)
    assert verify_bundle(target).ok and verify_bundle(target).release_id == built.release_id
    assert len(gate.approval_copy(target)) == 2
    assert review_cli(["pending"], monkeypatch, capsys, warehouse)[1] == ""
    # Published: the same content again is unchanged; other content is a conflict.
    published = gate.ReleaseKey(gate.manifest_id(target), content_key_of(target))
    assert gate.decide(_key(built), published=published, k_passed=True).action == gate.UNCHANGED
    assert gate.decide(gate.ReleaseKey("0" * 64, "1" * 64), published=published, standing=standing,
                       k_passed=True).action == gate.CONFLICT
    with pytest.raises(gate.ApprovalError):  # a published version is never replaced, whatever is asked
        _carry_out(begin_commit(hospital.warehouse), warehouse, decision, rebuilt.root)


def test_an_approval_is_of_that_content_only(flow, tmp_path):
    hospital, warehouse, built, held = flow
    standing = gate.load_standing(warehouse, built.release_id, gate.ApprovalPolicy.load())
    other = gate.decide(gate.ReleaseKey("f" * 64, "e" * 64), published=None, standing=standing, k_passed=True)
    assert other.action == gate.HOLD
    # A held release that no longer verifies cannot be approved.
    rebuilt = build_release(hospital, tmp_path / "w" / "identifiable" / "held" / "small-test" / "x")
    bad = Path(rebuilt.root).with_name(rebuilt.release_id)
    Path(rebuilt.root).rename(bad)
    image = sorted(bad.rglob("*.dcm"))[0]
    _flip_last_byte(image)
    with pytest.raises(gate.ApprovalError, match="the review fails"):
        approve_all(str(bad))
    with pytest.raises(gate.ApprovalError, match="only a held release"):
        approve_all(str(tmp_path))


@pytest.fixture(scope="module")
def published(flow):
    hospital, warehouse, built, held = flow
    target = Path(gate.published_path(warehouse, "small-test", 1))
    if not target.exists():
        if not gate.list_held(warehouse)[0].standing.approved:
            approve_all(held)
        decision = gate.decide(_key(built), published=None, held=gate.list_held(warehouse), k_passed=True)
        assert (decision.action, decision.from_held) == (gate.PUBLISH, True)
        _carry_out(begin_commit(hospital.warehouse), warehouse, decision, "")
    return target


def test_review_traces_a_published_image_to_its_landing_file_and_run(flow, published, monkeypatch, capsys):
    from imaging.quarantine import ensure_token_key, file_token

    hospital, warehouse, built, _ = flow
    token_key = ensure_token_key(warehouse, "review-test-key-" + "k" * 20)  # as a run records it
    image = sorted(published.rglob("*.dcm"))[0]
    inner = str(image.relative_to(published))
    record = next(r for r in hospital.ledger if r.output_path.endswith("/" + image.name))
    code, out, _ = review_cli([str(image)], monkeypatch, capsys, warehouse)
    assert code == 0, out
    assert f"File      {inner}" in out and built.release_id in out
    # The landing file by its keyed token and sha256, never its path (unless asked, below).
    token = file_token(token_key, record.source_path)
    assert f"landing  file {token}  sha256 {record.source_sha256} (verified)" in out
    assert record.source_path not in out and str(hospital.root / "landing") not in out
    assert f"run {record.run_id} (started {record.run_started_at})  partition {record.date}|{SITE}" in out
    assert record.run_id in RUN_IDS.values() and "Approvals 2 of 2 required" in out
    assert "read from APPROVAL.json and the approval store" in out and "Result    VERIFIED" in out
    assert out.count("landing  ") == 1  # one file reviewed, one trace
    code, shown, _ = review_cli([str(image), "--identifiable"], monkeypatch, capsys, warehouse)
    assert code == 0 and shown.startswith("IDENTIFIABLE VIEW") and f"  {token}  {record.source_path}" in shown
    assert shown.split("Review report sha256 ")[1].split()[0] == out.split("Review report sha256 ")[1].split()[0]

    whole = review(str(published), warehouse)
    assert whole.ok and len(whole.traces) == 9 and {t.landing for t in whole.traces} == {"verified"}


def test_review_without_the_warehouse_shows_what_the_release_proves(flow, published, monkeypatch, capsys):
    hospital, *_ = flow
    code, out, _ = review_cli([str(published)], monkeypatch, capsys)
    assert code == 0, out
    assert "IMAGING_WAREHOUSE not set" in out and "Approvals 2 of 2 required" in out
    assert "(read from APPROVAL.json)" in out
    assert "landing" not in out.replace("landing data version", "") and str(hospital.root / "landing") not in out
    assert "every_image_accounted_for" in out and "clean_descriptors (113105)" in out


def test_review_fails_on_a_tampered_file_and_a_missing_approval(published, tmp_path, monkeypatch, capsys):
    copy = tmp_path / "deidentified" / "cohorts" / "small-test" / "v1"
    shutil.copytree(published, copy)
    image = sorted(copy.rglob("*.dcm"))[0]
    _flip_last_byte(image)
    code, out, _ = review_cli([str(image)], monkeypatch, capsys)
    assert code == 1 and "problem: checksum differs: images/" in out and "Result    FAILED" in out
    shutil.copyfile(sorted(published.rglob("*.dcm"))[0], image)
    (copy / APPROVAL).unlink()
    code, out, _ = review_cli([str(copy)], monkeypatch, capsys)
    assert code == 1 and "published without its signed approvals: 0 of 2" in out


def test_html_report_has_the_graph_and_no_identifier(flow, published, tmp_path):
    hospital, warehouse, *_ = flow
    html = render_html(review(str(published), warehouse))
    assert html.count('<path class="edge') > 40 and 'data-column="age_band"' in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html
    summary = hospital.summary
    values = set(summary.identifying_strings()) | {p.patient_id for p in summary.patients}
    values |= {i.sop_instance_uid for i in summary.instances} | {str(hospital.root), SITE, *DATES}
    found = [v for v in values if v and len(v) >= 4 and v in html]
    assert not found, found[:3]


def test_cli_runs_as_a_program(published, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "IMAGING_WAREHOUSE"}
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "imaging.governance.review", str(published), "--html", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    done = subprocess.run([sys.executable, "-m", "imaging.governance.review", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no SHA256SUMS" in done.stderr


def test_carry_out_holds_then_publishes_then_leaves_alone_and_refuses_a_conflict(tmp_path):
    hospital = make_hospital(tmp_path)
    warehouse = str(hospital.warehouse)

    def run(cohort=SMALL_TEST):
        """One materialization of the gate for the small cohort: build, decide, carry out (as the asset)."""
        commit = begin_commit(hospital.warehouse)
        staging = Path(gate.building_url(commit, warehouse, cohort.name))
        built = build_release(hospital, staging, cohort)
        target = gate.published_path(warehouse, "small-test", 1)
        published = gate.ReleaseKey(gate.manifest_id(target), content_key_of(target)) if Path(target).exists() \
            else None
        held = gate.list_held(warehouse, "small-test", 1)
        decision = gate.decide(_key(built), published=published, held=held,
                               standing=gate.load_standing(warehouse, built.release_id, gate.ApprovalPolicy.load()),
                               k_passed=True)
        outcome = _carry_out(commit, warehouse, decision, staging, cohort)
        assert not staging.exists()
        return outcome

    first, second = run(), run()
    assert first.action == second.action == gate.HOLD and first.path == second.path
    assert [h.path for h in gate.list_held(warehouse)] == [first.path]
    approve_all(first.path)
    third = run()
    assert third.action == gate.PUBLISH and third.path == gate.published_path(warehouse, "small-test", 1)
    assert not Path(first.path).exists() and gate.list_held(warehouse) == []
    assert review(third.path, warehouse).ok
    fourth = run()
    assert fourth.action == gate.UNCHANGED and fourth.release_id == third.release_id
    # Other content under the published version: the run is refused and nothing published is touched.
    other = CohortDefinition.from_dict({"name": "small-test", "version": 1, "description": "other content"})
    with pytest.raises(gate.ApprovalError, match="already published with other content: small-test"):
        run(other)
    assert gate.manifest_id(third.path) == third.release_id and review(third.path, warehouse).ok
    assert gate.list_held(warehouse) == []


def test_a_rebuild_naming_other_runs_publishes_the_approved_held_bytes(tmp_path):
    """Inputs re-materialized with identical data name new runs, so a rebuild has other bytes (another
    release id) but the same content key; what gets published is the held release that was approved."""
    hospital = make_hospital(tmp_path)
    warehouse = str(hospital.warehouse)
    commit = begin_commit(hospital.warehouse)
    first = build_release(hospital, Path(gate.building_url(commit, warehouse, "small-test")))
    held = _carry_out(commit, warehouse, gate.decide(_key(first), published=None, k_passed=True), first.root).path
    commit = begin_commit(hospital.warehouse)
    staging = Path(gate.building_url(commit, warehouse, "small-test"))
    rebuilt = build_release(hospital, staging, run_ids={d: str(uuid.UUID(int=90 + i)) for i, d in enumerate(DATES)})
    assert rebuilt.release_id != first.release_id and rebuilt.content_key == first.content_key
    assert rebuilt.data_digest == first.data_digest
    waiting = gate.decide(_key(rebuilt), published=None, held=gate.list_held(warehouse), k_passed=True)
    assert (waiting.action, waiting.release_id, waiting.from_held) == (gate.HOLD, first.release_id, True)
    approve_all(held)
    decision = gate.decide(_key(rebuilt), published=None, held=gate.list_held(warehouse),
                           standing=gate.load_standing(warehouse, rebuilt.release_id, gate.ApprovalPolicy.load()),
                           k_passed=True)
    assert (decision.action, decision.release_id, decision.from_held) == (gate.PUBLISH, first.release_id, True)
    outcome = _carry_out(commit, warehouse, decision, staging)
    assert outcome.action == gate.PUBLISH and gate.manifest_id(outcome.path) == first.release_id
    assert not staging.exists() and not Path(held).exists()


def test_a_failed_error_check_in_the_card_is_a_problem_a_warn_or_unevaluated_one_a_note():
    from imaging.governance.review import card_check_findings

    def check(result, severity, partitions=()):
        return {"asset": "raw_image_index", "check": f"c_{result}_{severity}", "result": result,
                "severity": severity, "partitions": list(partitions)}
    card = {"checks": [check("passed", "ERROR"), check("failed", "WARN", ["ab" * 10]), check("not evaluated", "ERROR")],
            "inputs": [{"landing_data_version": "not observed"}, {"landing_data_version": "ab" * 8}]}
    findings = card_check_findings(card)
    problems, notes = findings.problems, findings.notes
    assert problems == []
    assert any("c_failed_WARN (1 partitions)" in n for n in notes)
    assert any("1 checks have no recorded evaluation" in n for n in notes)
    assert any("1 input partitions have no observed landing data version" in n for n in notes)
    card["checks"].append(check("failed", "ERROR", ["cd" * 10, "ef" * 10]))
    problems = card_check_findings(card).problems
    assert problems == ["failed ERROR checks recorded in the data card: raw_image_index:c_failed_ERROR (2 partitions)"]


def test_the_evidence_reads_tables_whose_partitions_an_empty_run_emptied(tmp_path):
    """A table's folder without a file (an empty site-day's run empties stale partitions, and no other
    partition has rows) holds no rows: the review counts none rather than fail on it."""
    from imaging.catalogue import INDEX_QUARANTINE, LEDGER, LINKED
    from imaging.governance.evidence import arrived_columns, quarantine_summary
    from imaging.governance.review import _lookup_by_name
    from imaging.provenance import lookup

    for table in (INDEX_QUARANTINE, LINKED, LEDGER):
        (tmp_path / table.path / "date=2024-03-01" / "site=site-a").mkdir(parents=True)
    site_days = [("2024-03-01", "site-a")]
    assert quarantine_summary(str(tmp_path), site_days) == []
    assert arrived_columns(str(tmp_path), site_days) == set()
    assert lookup(str(tmp_path / LEDGER.path), ["ab" * 32]) == {}
    assert _lookup_by_name(str(tmp_path), ["batch"], {"1.2.3.dcm"}) == {}
