"""The clinical source contract and the eye-level rules, without Spark or a database (imaging/clinical_source.py,
imaging/steps/clinical.py, imaging/governance/cohort.py)."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from imaging.clinical_source import (BOTH_EYES, EYE_MISSING, EYE_NOT_KNOWN, NO_LATERALITY, ClinicalSourceFile,
                                     failure_message, image_eye, jdbc_connection, normal_eye, redact)
from imaging.config_model import ConfigError
from imaging.driver.config import load_clinical_source
from imaging.driver.platform_files import load_clinical_policy
from imaging.governance.cohort import CohortDefinition
from imaging.records import ClinicalExtract, ClinicalRow, Quarantined
from imaging.steps.clinical import EyeRecord, read_extract

POLICY = load_clinical_policy()
MINIMAL = {"jdbc_url": "jdbc:postgresql://db:5432/epr", "user": "reader", "password_env": "EPR_PASSWORD",
           "patients": {"query": "SELECT 1"}, "eye_observations": {"query": "SELECT 2"}}


def write(tmp_path, spec, name="epr.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_source_file_is_named_by_its_stem_and_its_queries_by_their_digest(tmp_path):
    source = load_clinical_source(write(tmp_path, {**MINIMAL, "eye_observations": {
        "query": " SELECT 2 ", "partition_column": "exam_no"}}, "District EPR.yaml"))
    assert source.name == "district-epr" and set(source.queries) == {"patients", "eye_observations"}
    assert source.queries["eye_observations"].partition_column == "exam_no"
    described = source.describe()
    assert described["url"] == "jdbc:postgresql://db:5432/epr" and len(described["queries"]["patients"]) == 64
    assert "reader" not in repr(source)


@pytest.mark.parametrize("change, problem", [
    ({"jdbc_url": "jdbc:postgresql://db/epr?user=a&password=secret"}, "must not carry a user or password"),
    ({"jdbc_url": "jdbc:mysql://reader:secret@db/epr"}, "must not carry a user or password"),
    ({"password_env": "not a variable"}, "password_env"),
    ({"password": "secret"}, "password"),  # the password itself is never a key of the file
    ({"time_zone": "Mars/Olympus"}, "IANA time zone"),
    ({"eye_observations": {"query": "SELECT 2", "partition_column": "exam_no; DROP TABLE x"}}, "partition_column"),
    ({"patients": {"query": "  "}}, "patients.query"),
])
def test_a_source_file_with_a_mistake_is_refused_naming_the_field(tmp_path, change, problem):
    with pytest.raises(ConfigError, match=problem) as refused:
        load_clinical_source(write(tmp_path, {**MINIMAL, **change}))
    assert "secret" not in str(refused.value)


def test_the_shipped_presets_are_valid_source_files():
    from imaging.config_files import PLATFORM_DIR

    for preset in ("omop_cdm54.yaml", "openeyes.yaml"):
        source = load_clinical_source(PLATFORM_DIR / "clinical_sources" / preset)
        assert set(source.queries) == {"patients", "eye_observations", "diagnoses"} and source.driver_jars
        assert source.queries["eye_observations"].partition_column
        ClinicalSourceFile.model_validate(yaml.safe_load((PLATFORM_DIR / "clinical_sources" / preset).read_text()))


def test_mariadb_reads_with_mysql_s_dialect_and_mysql_streams_with_a_cursor():
    maria = jdbc_connection("jdbc:mariadb://db:3306/openeyes")
    assert maria.url == "jdbc:mysql://db:3306/openeyes?permitMysqlScheme" and maria.driver == "org.mariadb.jdbc.Driver"
    mysql = jdbc_connection("jdbc:mysql://db:3306/epr?ssl=true")
    assert mysql.url.endswith("?ssl=true&useCursorFetch=true") and mysql.driver == "com.mysql.cj.jdbc.Driver"
    assert jdbc_connection("jdbc:mysql://db/epr", "org.mariadb.jdbc.Driver").url == "jdbc:mysql://db/epr"
    pg = jdbc_connection("jdbc:postgresql://db:5432/epr")
    assert pg.url == "jdbc:postgresql://db:5432/epr" and pg.driver == "org.postgresql.Driver"
    assert jdbc_connection("jdbc:sqlserver://db;databaseName=epr", "com.x.Driver").driver == "com.x.Driver"


@pytest.mark.parametrize("value, eye", [("R", "R"), ("l", "L"), (" b ", "B"), ("OD", "R"), ("os", "L"), ("Ou", "B"),
                                        ("RE", None), ("", None), (None, None), ("right", None)])
def test_an_eye_is_r_l_b_or_od_os_ou_in_either_case(value, eye):
    assert normal_eye(value) == eye


def test_an_image_shows_one_eye_or_says_why_not():
    assert image_eye("R") == ("R", None) and image_eye("L") == ("L", None)
    assert image_eye("B") == (None, BOTH_EYES) and image_eye(None) == (None, NO_LATERALITY)
    assert image_eye("U") == (None, NO_LATERALITY)


def test_a_failure_message_names_source_and_query_never_the_password(tmp_path):
    source = load_clinical_source(write(tmp_path, MINIMAL))
    cases = {
        'org.postgresql.util.PSQLException: FATAL: password authentication failed for user "reader"':
            "refused the login",
        "java.sql.SQLInvalidAuthorizationSpecException: (conn=9) Access denied for user 'reader'@'h' (using password: YES)":
            "refused the login",
        "Caused by: java.net.ConnectException: Connection refused": "cannot be reached",
        'org.postgresql.util.PSQLException: ERROR: relation "exam" does not exist': "not valid",
        "java.lang.ClassNotFoundException: org.postgresql.Driver": "JDBC driver",
    }
    for error, what in cases.items():
        message = failure_message(source, "eye_observations", error + " hunter2-secret", "hunter2-secret")
        assert what in message and "'epr'" in message and "'eye_observations'" in message, message
        assert "hunter2-secret" not in message
    assert redact("a%2Fb and a/b", "a/b") == "*** and ***"


def test_an_extract_with_an_eye_column_gives_each_row_s_eye_and_the_patient_apart(tmp_path):
    extract = tmp_path / "2024-03-01.csv"
    extract.write_bytes(b"patient_id,dob,eye,va_logmar,iop_mmhg,diagnosis_code,notes\n"
                        b"1,15/06/1950,OD,0.3,18,H35.32,seen\n1,15/06/1950,os,0.1,,,seen\n"
                        b"2,01/01/1940,OU,,,E11.3,\n3,01/01/1940,X,0.2,,,\n4,01/01/1940,,0.2,,,\n")
    out = list(read_extract(ClinicalExtract("site-b", "2024-03-01", str(extract)), eye_aliases=POLICY.eye_aliases))
    rows = [r for r in out if isinstance(r, ClinicalRow)]
    patient = [r for r in rows if r.eye is None]
    eyes = {(r.patient_id, r.eye): r.clinical for r in rows if r.eye is not None}
    assert [r.clinical for r in patient if r.patient_id == "1"] == [{"dob": "15/06/1950", "notes": "seen"}] * 2
    assert eyes == {("1", "R"): {"va_logmar": "0.3", "iop_mmhg": "18", "diagnosis_code": "H35.32"},
                    ("1", "L"): {"va_logmar": "0.1"}, ("2", "B"): {"diagnosis_code": "E11.3"}}
    assert sorted(r.reason for r in out if isinstance(r, Quarantined)) == sorted([EYE_NOT_KNOWN, EYE_MISSING])


def test_an_extract_with_per_eye_column_pairs_gives_both_eyes(tmp_path):
    extract = tmp_path / "2024-03-01.csv"
    extract.write_bytes(b"patient_id,sex,visual_acuity_logmar_right,visual_acuity_logmar_left,iop_od,iop_os\n"
                        b"1,F,0.3,0.5,18,\n")
    out = list(read_extract(ClinicalExtract("site-a", "2024-03-01", str(extract))))
    assert {r.eye: r.clinical for r in out} == {None: {"sex": "F"},
                                               "R": {"visual_acuity_logmar": "0.3", "iop": "18"},
                                               "L": {"visual_acuity_logmar": "0.5"}}


def test_eye_fields_go_through_the_policy_as_extract_columns_do():
    eye = EyeRecord("L", {"va_logmar": "0.40", "iop": "99", "comments": "patient anxious", "refraction": "-2.00"},
                    {"va_logmar": 3, "iop": 0, "comments": 0}, ("H35.32", "H40.1", "see letter"))
    out = POLICY.apply({"sex": "F", "visual_acuity_logmar": "0.1"}, scan_date=dt.date(2024, 3, 1), shift_days=-3,
                       eye=eye)
    assert out["eye"] == "L" and out["visual_acuity_logmar"] == 0.1  # the patient-level column as before
    assert out["eye_visual_acuity_logmar"] == 0.4 and out["eye_visual_acuity_logmar_days_before"] == 3
    assert out["eye_iop_mmhg"] is None and out["eye_iop_mmhg_days_before"] is None  # 99 mmHg: out of the policy's range
    assert out["eye_diagnosis_codes"] == "H35.32;H40.1"  # free text that is not a code is dropped
    assert "patient anxious" not in repr(out) and "-2.00" not in repr(out) and set(out) == set(POLICY.output_columns)
    none = POLICY.apply({"sex": "F"}, scan_date=None, shift_days=0, eye=EyeRecord(None))
    assert all(none[c] is None for c in POLICY.eye_columns)


def test_a_cohort_selects_on_the_imaged_eye():
    cohort = CohortDefinition.from_dict({
        "name": "wet-amd-eyes", "version": 1, "modalities": ["OPT"],
        "eye": {"lateralities": ["R", "L"], "diagnosis_code_prefixes": ["H35.32"],
                "fields": {"visual_acuity_logmar": {"min": 0.3}}, "max_days_before": 90}})
    predicate = cohort.sql_predicate()
    assert "eye IN ('R', 'L')" in predicate
    assert "exists(split(eye_diagnosis_codes, ';'), code -> startswith(code, 'H35.32'))" in predicate
    assert "`eye_visual_acuity_logmar` >= 0.3" in predicate and "`eye_visual_acuity_logmar_days_before` <= 90" in predicate
    for bad in ({"fields": {"Bad Name": {"min": 1}}}, {"fields": {"x": {}}}, {"max_days_before": 3},
                {"lateralities": ["B"]}, {"fields": {"x": {"min": 2, "max": 1}}}):
        with pytest.raises(ValueError):
            CohortDefinition.from_dict({"name": "x", "version": 1, "eye": bad})


def test_a_cohort_may_only_select_on_eye_fields_the_policy_releases(tmp_path):
    import shutil

    from imaging.config_files import PLATFORM_DIR
    from imaging.driver.platform_files import load_platform

    platform = tmp_path / "platform"
    shutil.copytree(PLATFORM_DIR, platform)
    (platform / "cohorts" / "eyes.yaml").write_text(
        "name: eyes\nversion: 1\neye: {fields: {refraction: {min: 1}}}\n")
    with pytest.raises(ConfigError, match="eye.fields.refraction: not an eye field"):
        load_platform(platform)
