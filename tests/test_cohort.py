import pytest

from imaging.driver.platform_files import load_cohorts
from imaging.governance.cohort import CohortDefinition


def test_shipped_definitions_load():
    names = {c.name for c in load_cohorts()}
    assert {"amd-oct", "all-fundus"} <= names


def test_predicate_expresses_every_criterion():
    cohort = CohortDefinition.from_dict({"name": "amd-oct", "version": 2, "modalities": ["OPT"],
                                         "diagnosis_code_prefixes": ["H35.3"], "age_at_scan": {"min": 50, "max": 90}})
    predicate = cohort.sql_predicate()
    assert "modality IN ('OPT')" in predicate and "startswith(diagnosis_code, 'H35.3')" in predicate
    assert "age_at_scan >= 50" in predicate and "age_at_scan <= 90" in predicate
    assert cohort.release == "v2"


def test_values_are_quoted():
    cohort = CohortDefinition.from_dict({"name": "x", "version": 1, "diagnosis_code_prefixes": ["H3'5"]})
    assert "'H3\\'5'" in cohort.sql_predicate()


@pytest.mark.parametrize("spec", [{"name": "Bad Name", "version": 1}, {"name": "ok", "version": 1, "sql": "1=1"}])
def test_invalid_definitions_are_refused(spec):
    with pytest.raises(ValueError):
        CohortDefinition.from_dict(spec)
