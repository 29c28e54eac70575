"""The pure data-quality rules (imaging/quality/): no Spark, no Dagster."""

import json

import pytest

from imaging.config_model import validate
from imaging.driver.config import read_yaml
from imaging.driver.platform_files import load_quality_rules
from imaging.pseudonym import Pseudonymizer
from imaging.quality.columns import java_date_pattern
from imaging.quality.gate import (CheckEvaluation, blocking_message, latest_by_partition, publication_blockers,
                                  release_checks)
from imaging.quality.outcomes import Distribution, evaluate_balance, evaluate_max, patient_offender, uid_offender
from imaging.quality.rules import ERROR, WARN
from imaging.steps.declared import QualityFile
from imaging.header import dicom_date

RULES = load_quality_rules()
KEY = Pseudonymizer("rules-test-key")


def test_every_check_of_the_issue_is_configured_with_a_severity():
    expected = {
        "raw_image_index": {"scans_per_patient_site_day", "scans_per_patient", "instances_per_series",
                            "series_per_study", "sop_instance_uid_in_one_partition", "mandatory_attributes",
                            "study_date_in_future", "files_accounted", "column_rules", "column_warnings"},
        "linked_patient_metadata": {"images_accounted", "records_per_image", "images_per_record", "unlinked_share", "placeholder_keys",
                                    "images_per_clinical_key", "study_before_birth", "eye_observations_per_patient_day",
                                    "stale_eye_observations", "column_rules", "column_warnings"},
        "anonymized_images": {"images_accounted", "manifest_files", "pseudonyms_per_patient",
                              "patients_per_pseudonym", "column_rules", "column_warnings"},
        "published_cohort": {"release_checksums"},
    }
    assert {a: set(c) for a, c in RULES.checks.items()} == expected
    for asset in expected:
        for rule in RULES.for_asset(asset):
            assert rule.severity in (ERROR, WARN) and rule.description
    assert RULES.rule("raw_image_index", "column_warnings").severity == WARN


def test_bad_severity_and_percentiles_are_refused():
    spec = read_yaml("quality.yaml")
    spec["checks"]["raw_image_index"]["series_per_study"]["severity"] = "fatal"
    with pytest.raises(ValueError, match=r"checks\.raw_image_index\.series_per_study\.severity: must be 'ERROR' or 'WARN'"):
        validate(QualityFile, spec, "platform/quality.yaml")
    with pytest.raises(ValueError, match=r"percentiles\[0\]: must be < 1"):
        validate(QualityFile, {**read_yaml("quality.yaml"), "percentiles": [50]}, "platform/quality.yaml")


def test_placeholders_are_compared_trimmed_and_upper_case():
    for key in ("UNKNOWN", " unknown ", "0", "N/A", "999999", "", None):
        assert RULES.is_placeholder(key), key
    assert not RULES.is_placeholder("9434765919")


def test_max_rule_passes_at_the_threshold_and_names_offenders_only_on_failure():
    rule = RULES.rule("raw_image_index", "scans_per_patient_site_day")
    hot = patient_offender(KEY, None, "1234567890", rule.maximum + 50, "NHS", ["2024-03-01|site-a"])
    ok = evaluate_max(rule, rule.maximum, offenders=[hot])
    assert ok.passed and ok.offenders == () and ok.failed_partitions == ()
    bad = evaluate_max(rule, rule.maximum + 50, offenders=[hot], failed_partitions=["2024-03-01|site-a"],
                       distribution=Distribution(3, 1, rule.maximum + 50, {0.5: 2.0, 0.99: 250.0}))
    assert not bad.passed and bad.blocking
    meta = bad.as_metadata()
    assert meta["observed"] == rule.maximum + 50 and meta["threshold"] == rule.maximum
    assert meta["top_offenders"] == [{"pseudonym": KEY.patient_id("NHS", "1234567890"),
                                      "value": rule.maximum + 50, "partitions": ["2024-03-01|site-a"]}]
    assert meta["distribution"] == {"keys": 3, "min": 1, "max": rule.maximum + 50, "p50": 2, "p99": 250}
    assert "1234567890" not in json.dumps(meta)


def test_uid_offenders_are_the_published_uid():
    offender = uid_offender(KEY, "1.2.826.0.1.3680043.2.1125.1", 2)
    assert offender.pseudonym == KEY.uid("1.2.826.0.1.3680043.2.1125.1") and offender.pseudonym.startswith("2.25.")


def test_balance_rule():
    rule = RULES.rule("raw_image_index", "files_accounted")
    assert evaluate_balance(rule, {"listed": 10}, {"indexed": 8, "quarantined": 2}).passed
    lost = evaluate_balance(rule, {"listed": 10}, {"indexed": 8, "quarantined": 1}, failed_partitions=["d|s"])
    assert not lost.passed and lost.observed == 1 and lost.failed_partitions == ("d|s",)


def test_dates():
    assert java_date_pattern("%d/%m/%Y") == "dd/MM/yyyy" and java_date_pattern("%Y%m%d") == "yyyyMMdd"
    assert dicom_date("19990101").year == 1999 and dicom_date("1990/01/") is None
    with pytest.raises(ValueError):
        java_date_pattern("%H:%M")


def test_publication_blocked_by_failed_error_checks_on_partitions_read_only():
    evaluations = [
        CheckEvaluation("raw_image_index", "scans_per_patient_site_day", False, ERROR,
                        ("2024-03-01|site-a", "2024-03-02|site-a"), ("2024-03-02|site-a",)),
        CheckEvaluation("linked_patient_metadata", "unlinked_share", False, WARN, ("2024-03-02|site-a",)),
        CheckEvaluation("raw_image_index", "mandatory_attributes", True, ERROR, ("2024-03-02|site-a",)),
        CheckEvaluation("raw_image_index", "scans_per_patient", False, ERROR),  # whole table
    ]
    blockers = publication_blockers(evaluations)
    assert [(b.check, b.partitions) for b in blockers] == [("scans_per_patient", ()),
                                                           ("scans_per_patient_site_day", ("2024-03-02|site-a",))]
    only_first_day = publication_blockers(evaluations, ["2024-03-01|site-a"])
    assert [b.check for b in only_first_day] == ["scans_per_patient"]
    message = blocking_message(blockers)
    assert "raw_image_index:scans_per_patient_site_day failed on 2024-03-02|site-a" in message
    assert "scans_per_patient failed on the whole table" in message
    assert publication_blockers(evaluations[1:3]) == []  # WARN failures and passed checks never block


def test_the_newest_evaluation_covering_a_partition_decides_it():
    a, b = "2024-03-01|site-a", "2024-03-02|site-a"
    history = [  # newest first: b was re-run clean after both failed
        CheckEvaluation("raw_image_index", "mandatory_attributes", True, ERROR, (b,)),
        CheckEvaluation("raw_image_index", "mandatory_attributes", False, ERROR, (a, b), (a, b)),
    ]
    state = latest_by_partition(history)
    assert not state.passed and state.failed_partitions == (a,) and state.partitions == (a, b)
    assert publication_blockers([state])[0].partitions == (a,)
    fixed = [CheckEvaluation("raw_image_index", "mandatory_attributes", True, ERROR, (a,))] + history
    assert latest_by_partition(fixed).passed
    # A failure that names no partition fails every partition it covered.
    assert latest_by_partition([CheckEvaluation("x", "y", False, ERROR, (a, b))]).failed_partitions == (a, b)
    whole = CheckEvaluation("raw_image_index", "scans_per_patient", False, ERROR)
    assert latest_by_partition([whole]) == whole and latest_by_partition([]) is None


def test_a_release_lists_each_check_on_the_partitions_it_read():
    a, b, c = "2024-03-01|site-a", "2024-03-02|site-a", "2024-03-03|site-a"
    rule = RULES.rule("raw_image_index", "files_accounted")
    history = [  # newest first: b re-run (and passing) after a first run over a and b failed on b
        CheckEvaluation(rule.asset, rule.name, True, ERROR, (b,), (), "run-2", "2026-11-21T10:00:00+00:00"),
        CheckEvaluation(rule.asset, rule.name, False, ERROR, (a, b), (b,), "run-1", "2026-11-21T09:00:00+00:00"),
    ]
    got = release_checks(rule, history, [c, b, a])
    assert [(r.partitions, r.result, r.run_id) for r in got] == [
        ((a,), "passed", "run-1"), ((b,), "passed", "run-2"), ((c,), "not evaluated", None)]
    assert all(r.severity == ERROR and r.asset == rule.asset for r in got)
    # Only the partitions read: b alone is one entry, from its newest evaluation.
    assert [(r.partitions, r.result) for r in release_checks(rule, history, [b])] == [((b,), "passed")]
    assert [(r.partitions, r.result) for r in release_checks(rule, history[1:], [a, b])] == [
        ((a,), "passed"), ((b,), "failed")]
    assert [(r.partitions, r.result) for r in release_checks(rule, [], [a])] == [((a,), "not evaluated")]
    # A whole-table evaluation: one entry, failed only when it failed on a partition read (or names none).
    wide = RULES.rule("raw_image_index", "sop_instance_uid_in_one_partition")
    failed_on_c = CheckEvaluation(wide.asset, wide.name, False, ERROR, (), (c,), "run-3", "2026-11-21T11:00:00+00:00")
    assert [(r.partitions, r.result, r.run_id) for r in release_checks(wide, [failed_on_c], [a, b])] == [
        ((), "passed", "run-3")]
    assert release_checks(wide, [failed_on_c], [c])[0].result == "failed"
    anywhere = CheckEvaluation(wide.asset, wide.name, False, ERROR, (), (), "run-4", "2026-11-21T12:00:00+00:00")
    assert release_checks(wide, [anywhere], [a])[0].result == "failed"
