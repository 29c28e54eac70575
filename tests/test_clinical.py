import datetime as dt

import pytest

from imaging.driver.config import read_yaml
from imaging.records import ClinicalExtract, ClinicalRow, Quarantined
from imaging.steps.clinical import (PLACEHOLDER_ROW, ClinicalPolicy, ExtractError, age_in_years,
                                    extract_date, parse_extract, read_extract)

POLICY = ClinicalPolicy.from_dict(read_yaml("clinical_policy.yaml"))


def test_parse_extract_normalises_header_and_keeps_blank_ids_for_the_reader():
    rows = list(parse_extract(b"Patient_ID, Full_Name ,sex\n123,Ann Lee,F\n,No One,M\n123,Ann Lee,F\n"))
    assert [(r.number, r.patient_id) for r in rows] == [(1, "123"), (2, ""), (3, "123")]
    assert rows[0].columns == {"full_name": "Ann Lee", "sex": "F"}


def test_rows_with_a_blank_or_placeholder_id_are_quarantined_one_each(tmp_path):
    """No row is dropped silently: a row keyed by nothing or by a site's "unknown" is a quarantine record."""
    extract = tmp_path / "2024-03-01.csv"
    extract.write_bytes(b"patient_id,sex\n123,F\n,M\n unknown ,F\n0,M\n456,F\n")
    out = list(read_extract(ClinicalExtract("site-a", "2024-03-01", str(extract)),
                            placeholders=frozenset({"", "UNKNOWN", "0"})))
    assert [r.patient_id for r in out if isinstance(r, ClinicalRow)] == ["123", "456"]
    held = [r for r in out if isinstance(r, Quarantined)]
    assert [r.reason for r in held] == [PLACEHOLDER_ROW] * 3
    assert all(r.date == "2024-03-01" and r.source_path == str(extract) for r in held)



def test_extract_without_patient_id_is_an_error_naming_no_value():
    with pytest.raises(ExtractError, match="no patient_id column"):
        list(parse_extract(b"name,dob\nAnn Lee,1950-01-01\n"))


def test_policy_keeps_only_declared_columns_and_drops_free_text():
    record = {"full_name": "Ann Lee", "nhs_number": "9434765919", "date_of_birth": "1950-06-15", "sex": "female",
              "diagnosis_code": "H35.31", "notes": "Ann Lee reports blurring", "visual_acuity_logmar": "0.3",
              "record_date": "2024-02-10", "unknown_column": "anything"}
    out = POLICY.apply(record, scan_date=dt.date(2024, 3, 1), shift_days=-10)
    assert set(out) == set(POLICY.output_columns)
    assert out["sex"] == "F" and out["diagnosis_code"] == "H35.31" and out["age_at_scan"] == 73
    assert out["visual_acuity_logmar"] == 0.3 and out["record_date"] == "2024-01-31"
    assert "Ann Lee" not in repr(out) and "9434765919" not in repr(out) and "1950" not in repr(out)


def test_kept_columns_reject_values_outside_their_pattern():
    out = POLICY.apply({"diagnosis_code": "see letter from Dr Smith", "iop_mmhg": "high"}, scan_date=None,
                       shift_days=-1)
    assert out["diagnosis_code"] is None and out["iop_mmhg"] is None


def test_site_aliases_and_uk_dates():
    out = POLICY.apply({"dob": "15/06/1950", "gender": "M"}, scan_date=dt.date(2024, 6, 14), shift_days=-1)
    assert out["age_at_scan"] == 73 and out["sex"] == "M"


def test_age_is_top_coded():
    assert age_in_years(dt.date(1920, 1, 1), dt.date(2024, 1, 1)) == 90


def test_keep_without_pattern_is_refused():
    with pytest.raises(ValueError, match="needs a pattern"):
        ClinicalPolicy.from_dict({"columns": {"notes": {"action": "keep"}}})


def test_identifying_values_come_from_identifier_columns():
    values = POLICY.identifying_values({"full_name": "Ann Lee", "nhs_number": "9434765919", "sex": "F"})
    assert set(values) == {"Ann Lee", "9434765919"}


def test_extract_date_from_name():
    assert extract_date("/x/clinical/site-a/2024-03-01.csv") == "2024-03-01"
    assert extract_date("/x/clinical/site-a/readme.csv") is None
    assert extract_date("/x/clinical/site-a/2024-03-01.txt") is None


def test_pseudonymise_gives_keyed_tokens_and_drop_releases_nothing():
    from imaging.pseudonym import Pseudonymizer

    p = Pseudonymizer("k")
    token = lambda column, value: p.token("clinical", column, value)  # noqa: E731
    out = POLICY.apply({"episode_id": "EP-1234", "notes": "free text"}, scan_date=None, shift_days=-1, token=token)
    assert out["episode"] == p.token("clinical", "episode", "EP-1234") and "EP-1234" not in repr(out)
    assert "notes" not in out and "notes" not in POLICY.output_columns
    assert POLICY.apply({"episode_id": "EP-1234"}, scan_date=None, shift_days=-1)["episode"] is None


def test_each_extract_is_accounted_to_one_site_day_of_the_run():
    from imaging.records import ClinicalExtract, SiteDay
    from imaging.steps.clinical import extracts_by_site_day

    run = [SiteDay("2024-03-02", "a"), SiteDay("2024-03-05", "a"), SiteDay("2024-03-05", "b")]
    extracts = [ClinicalExtract("a", "2024-03-01", "x"), ClinicalExtract("a", "2024-03-02", "x"),
                ClinicalExtract("a", "2024-03-03", "x"), ClinicalExtract("b", "2024-03-05", "x")]
    # Its own day when the run covers it; else the first later site-day of its site that reads it.
    assert extracts_by_site_day(run, extracts) == {"2024-03-02|a": 2, "2024-03-05|a": 1, "2024-03-05|b": 1}
    assert sum(extracts_by_site_day(run, extracts).values()) == len(extracts)
