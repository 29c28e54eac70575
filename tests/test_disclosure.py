"""Disclosure control: suppressed small counts, k-anonymity over the policy's quasi-identifiers."""

import json
from pathlib import Path

import pytest

from imaging.driver.config import read_yaml
from imaging.governance.approval import BLOCKED, HOLD, ReleaseKey, decide
from imaging.governance.disclosure import DisclosurePolicy, class_sizes, k_anonymity, suppress
from release_helpers import build_release, make_hospital


@pytest.fixture(scope="module")
def policy():
    return DisclosurePolicy.from_dict(read_yaml("clinical_policy.yaml"))


def test_counts_below_ten_are_suppressed():
    assert [suppress(n) for n in (0, 1, 9, 10, 250)] == [0, "<10", "<10", 10, 250]
    assert suppress(4, below=5) == "<5" and suppress(5, below=5) == 5
    with pytest.raises(ValueError):
        suppress(-1)


def test_the_shipped_policy_declares_age_band_and_sex(policy):
    assert policy.min_k == 5 and policy.suppress_below == 10
    assert policy.released_columns == ("age_band", "sex")
    age = policy.quasi_identifiers[0]
    assert [age.release_value(v) for v in (None, 0, 49, 50, 54, 55, 89, 90)] == \
        [None, "0-4", "45-49", "50-54", "50-54", "55-59", "85-89", "90+"]
    assert "'90+'" in age.release_sql() and "IS NULL" in age.release_sql()


@pytest.mark.parametrize("spec", [
    {"quasi_identifiers": ["postcode"]},  # not a released column
    {"quasi_identifiers": ["notes"]},  # dropped, never released
    {"quasi_identifiers": [{"column": "sex", "band_years": 5}]},  # bands are for ages
    {"quasi_identifiers": ["sex"], "disclosure": {"min_k": 0}},
])
def test_policy_mistakes_are_refused(spec):
    columns = read_yaml("clinical_policy.yaml")["columns"]
    with pytest.raises(ValueError):
        DisclosurePolicy.from_dict({"columns": columns, **spec})


def test_k_anonymity_from_pre_aggregated_class_sizes(policy):
    passed = k_anonymity([12, 5, 7], policy)
    assert passed.passed and passed.smallest == 5 and passed.class_sizes == (5, 7, 12)
    blocked = k_anonymity([30, 4, 1], policy)
    assert not blocked.passed and blocked.below_k == 2 and blocked.classes == 3
    report = blocked.report()
    assert report["class_sizes"] == ["<10", "<10", 30] and report["smallest_class"] == "<10"
    assert "2 of 3 equivalence classes" in blocked.reason()
    assert k_anonymity([], policy).passed  # an empty release discloses nobody
    with pytest.raises(ValueError):
        k_anonymity([0, 5], policy)


def test_classes_count_patients_not_images(policy):
    rows = [{"patient_pseudonym": "P1", "age_at_scan": 61, "sex": "F"}] * 7 + \
           [{"patient_pseudonym": "P2", "age_at_scan": 63, "sex": "F"},
            {"patient_pseudonym": "P3", "age_at_scan": 77, "sex": None},
            {"patient_pseudonym": "P4", "age_at_scan": None, "sex": None}]
    assert sorted(class_sizes(rows, policy)) == [1, 1, 2]


def test_a_release_with_a_small_class_is_blocked(tmp_path, policy):
    hospital = make_hospital(tmp_path, patients=4, min_k=policy.min_k)
    built = build_release(hospital, tmp_path / "release")
    card = json.loads(Path(built.root, "datacard.json").read_text())
    k = card["disclosure"]
    assert k["passed"] is False and k["min_k"] == 5 and k["classes_below_min_k"] >= 1
    assert set(k["class_sizes"]) == {"<10"}  # sizes only, suppressed like every count, no values
    assert "age_band" in k["quasi_identifiers"]
    text = json.dumps(k)
    for value in ("F", "M", "-4", "+"):
        assert f'"{value}' not in text
    result = k_anonymity(class_sizes(hospital.manifest, hospital.disclosure), hospital.disclosure)
    key = ReleaseKey(built.release_id, built.content_key)
    decision = decide(key, published=None, k_passed=result.passed,
                      k_reason=result.reason())
    assert decision.action == BLOCKED and "fewer than 5 patients" in decision.reason
    # The same release with a lower configured minimum is only held for approval.
    assert decide(key, published=None, k_passed=True).action == HOLD


def test_the_minimum_k_can_be_set_by_environment():
    from imaging.driver.config import load_settings

    assert load_settings({"IMAGING_MIN_K": "3"}).min_k == 3
    assert load_settings({}).min_k is None
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="IMAGING_MIN_K"):
            load_settings({"IMAGING_MIN_K": bad})
    spec = read_yaml("clinical_policy.yaml")
    assert DisclosurePolicy.from_dict(spec, min_k=3).min_k == 3
    assert DisclosurePolicy.from_dict(spec).min_k == 5
