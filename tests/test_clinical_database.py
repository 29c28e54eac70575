"""Clinical records from a real database, eye by eye: the two shipped presets (OMOP CDM 5.4, OpenEyes-shaped) on
real PostgreSQL and real MariaDB, and an EPR of a schema no preset knows, end to end through IMAGING_CLINICAL_SOURCE.

One PostgreSQL (with its statement log on) and one MariaDB for the module (tests/services.py). The presets are read
by the link step's own code (resources/clinical_source.py, assets/clinical_read.py, assets/linkage.py) on the
worker's Spark session, whose JVM predates the source: its driver jars arrive by ADD JAR. The end-to-end run is the
data contract's command in a process of its own with TZ=Europe/London, on a synthetic hospital imaged in June (British
Summer Time), where an examination at 00:30 on a day is, in UTC, the evening before.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest
import yaml
from pyspark.sql import functions as F

from services import mariadb_available, mariadb_server, postgres_bin_dir, postgres_server, skip_unless

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "platform" / "clinical_sources"
DAGSTER = str(Path(sys.executable).parent / "dagster")
PG_JAR, MARIADB_JAR = "/usr/share/java/postgresql.jar", "/usr/share/java/mariadb-java-client.jar"
SITE = "site-x"


# --- servers, one of each for the module ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg():
    skip_unless(postgres_bin_dir() is not None and Path(PG_JAR).exists(),
                "PostgreSQL server or its JDBC driver is not installed (postgresql, libpostgresql-jdbc-java)")
    with postgres_server("epr", settings={"log_statement": "all"}) as server:
        yield server


@pytest.fixture(scope="module")
def maria():
    skip_unless(mariadb_available() and Path(MARIADB_JAR).exists(),
                "MariaDB server or its JDBC driver is not installed (mariadb-server, libmariadb-java)")
    with mariadb_server("epr") as server:
        yield server


def url_of(server) -> str:
    scheme = "postgresql" if hasattr(server, "bin_dir") else "mariadb"
    return f"jdbc:{scheme}://{server.host}:{server.port}/{server.database}"


def source_file(folder: Path, preset: str, server, env: str) -> Path:
    """The preset, pointed at a test server (its queries unchanged)."""
    spec = yaml.safe_load((PRESETS / preset).read_text())
    spec.update(jdbc_url=url_of(server), user=server.user, password_env=env,
                driver_jars=[PG_JAR if hasattr(server, "bin_dir") else MARIADB_JAR])
    path = folder / preset
    path.write_text(yaml.safe_dump(spec))
    return path


# --- what the presets read: the same patients, eyes and diagnoses in both schemas --------------------------------------

# (hospital id, birth date, sex); images of (patient, day, eye) below.
PATIENTS = [("H0001", "1950-06-15", "F"), ("H0002", "1942-01-30", "M"), ("H0003", "1961-11-02", "F")]
D1, D2 = "2024-06-03", "2024-06-04"
# (patient, local date-time, eye R/L/B, acuity logMAR or None, pressure or None, comment or None)
EXAMS = [
    ("H0001", f"{D1} 00:30:00", "R", 0.30, None, None),   # 00:30 British Summer Time: 23:30 UTC the day before
    ("H0001", f"{D1} 00:30:00", "L", 0.10, None, None),
    ("H0001", "2024-05-20 10:00:00", "R", None, 18, "RIGHT PRESSURE NOTE Hx"),
    ("H0001", "2024-05-20 10:00:00", "L", None, 24, None),
    ("H0001", f"{D2} 00:30:00", "R", 1.00, None, None),   # the next day: never the as-of value of a D1 image
    ("H0002", "2024-03-31 01:30:00", "L", 0.50, None, None),  # inside London's spring-forward gap
    ("H0002", "2024-04-02 09:00:00", "B", None, 15, None),  # an IOP of both eyes (OpenEyes eye id 3)
    ("H0003", "2024-06-01 12:00:00", "R", 0.20, 21, None),
]
# (patient, day, eye R/L/B, ICD-10 code, resolved day or None)
DIAGNOSES = [("H0001", "2024-01-10", "R", "H35.32", None), ("H0001", "2023-05-01", "L", "H35.31", None),
             ("H0002", "2023-01-01", "B", "H40.11", None), ("H0003", "2024-01-01", "R", "H33.00", "2024-02-01")]
IMAGES = [("H0001", D1, "R"), ("H0001", D1, "L"), ("H0001", D2, "R"), ("H0002", D1, "L"), ("H0002", D1, "R"),
          ("H0003", D1, "R"), ("H0003", D1, None)]
WANT = {  # (patient, day, eye) -> ({field: value}, {field: days before}, diagnoses in force)
    ("H0001", D1, "R"): ({"visual_acuity_logmar": 0.30, "iop_mmhg": 18}, {"visual_acuity_logmar": 0, "iop_mmhg": 14},
                         ["H35.32"]),
    ("H0001", D1, "L"): ({"visual_acuity_logmar": 0.10, "iop_mmhg": 24}, {"visual_acuity_logmar": 0, "iop_mmhg": 14},
                         ["H35.31"]),
    ("H0001", D2, "R"): ({"visual_acuity_logmar": 1.00, "iop_mmhg": 18}, {"visual_acuity_logmar": 0, "iop_mmhg": 15},
                         ["H35.32"]),
    ("H0002", D1, "L"): ({"visual_acuity_logmar": 0.50, "iop_mmhg": 15}, {"visual_acuity_logmar": 64, "iop_mmhg": 62},
                         ["H40.11"]),
    ("H0002", D1, "R"): ({"iop_mmhg": 15}, {"iop_mmhg": 62}, ["H40.11"]),
    ("H0003", D1, "R"): ({"visual_acuity_logmar": 0.20, "iop_mmhg": 21}, {"visual_acuity_logmar": 2, "iop_mmhg": 2},
                         []),
}


def _q(value) -> str:
    return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else repr(value)


def omop_sql(datetime_type: str) -> str:
    """The module's records as an OMOP CDM 5.4 database (the tables and columns the preset reads)."""
    codes = {("R", "va"): ("LOINC", "98499-7", 1), ("L", "va"): ("SNOMED", "413077008", 4),
             ("R", "iop"): ("LOINC", "79892-6", 5), ("L", "iop"): ("LOINC", "79893-4", 6)}
    rows = ["CREATE TABLE person (person_id BIGINT PRIMARY KEY, person_source_value VARCHAR(50), "
            "year_of_birth INT, month_of_birth INT, day_of_birth INT, gender_concept_id INT);",
            "CREATE TABLE concept (concept_id INT PRIMARY KEY, vocabulary_id VARCHAR(20), concept_code VARCHAR(50));",
            f"CREATE TABLE measurement (measurement_id BIGINT PRIMARY KEY, person_id BIGINT, measurement_concept_id INT, "
            f"measurement_date DATE, measurement_datetime {datetime_type}, value_as_number NUMERIC(6,2));",
            "CREATE TABLE condition_occurrence (condition_occurrence_id BIGINT PRIMARY KEY, person_id BIGINT, "
            "condition_start_date DATE, condition_end_date DATE, condition_source_value VARCHAR(50));"]
    rows += [f"INSERT INTO concept VALUES ({cid}, '{vocab}', '{code}');" for vocab, code, cid in codes.values()]
    rows.append("INSERT INTO concept VALUES (99, 'LOINC', '8480-6');")  # a blood pressure: not an eye measurement
    for n, (pid, born, sex) in enumerate(PATIENTS, start=1):
        y, m, d = born.split("-")
        rows.append(f"INSERT INTO person VALUES ({n}, '{pid}', {int(y)}, {int(m)}, {int(d)}, "
                    f"{8532 if sex == 'F' else 8507});")
    person = {pid: n for n, (pid, _, _) in enumerate(PATIENTS, start=1)}
    mid = 0
    for pid, at, eye, va, iop, _ in EXAMS:
        for kind, value in (("va", va), ("iop", iop)):
            for side in (("R", "L") if eye == "B" else (eye,)):  # OMOP has per-eye concepts only
                if value is not None:
                    mid += 1
                    rows.append(f"INSERT INTO measurement VALUES ({mid}, {person[pid]}, {codes[(side, kind)][2]}, "
                                f"'{at[:10]}', '{at}', {value});")
    rows.append(f"INSERT INTO measurement VALUES ({mid + 1}, 1, 99, '{D1}', '{D1} 08:00:00', 140);")
    laterality = {"R": "1", "L": "2", "B": "3"}
    for n, (pid, day, eye, code, resolved) in enumerate(DIAGNOSES, start=1):
        cm = code[:3] + code[4:] + laterality[eye]  # ICD-10-CM: the laterality digit after the code, no dot
        rows.append(f"INSERT INTO condition_occurrence VALUES ({n}, {person[pid]}, '{day}', {_q(resolved)}, "
                    f"'{cm}');")
    rows.append("INSERT INTO condition_occurrence VALUES (99, 1, '2020-01-01', NULL, 'H3530');")  # no laterality
    return "\n".join(rows)


def omop_want() -> dict:
    """The OMOP diagnosis codes carry their laterality digit (ICD-10-CM): H35.32 in the right eye is H35.321."""
    digit = {"R": "1", "L": "2", "B": "3"}
    return {key: (values, days, [next(c[:4] + c[4:] + digit[e] for p, _, e, c, _ in DIAGNOSES
                                      if p == key[0] and c == code) for code in codes])
            for key, (values, days, codes) in WANT.items()}


def openeyes_sql(datetime_type: str) -> str:
    """The module's records in OpenEyes' shape (the tables and columns the preset reads)."""
    rows = ["CREATE TABLE patient (id INT PRIMARY KEY, hos_num VARCHAR(40), dob DATE, gender VARCHAR(1), deleted INT);",
            "CREATE TABLE episode (id INT PRIMARY KEY, patient_id INT);",
            f"CREATE TABLE event (id INT PRIMARY KEY, episode_id INT, event_date {datetime_type}, deleted INT);",
            "CREATE TABLE et_ophciexamination_visualacuity (id INT PRIMARY KEY, event_id INT, eye_id INT);",
            "CREATE TABLE ophciexamination_visualacuity_reading (id INT PRIMARY KEY, element_id INT, value INT, "
            "side INT);",
            "CREATE TABLE ophciexamination_visual_acuity_unit (id INT PRIMARY KEY, name VARCHAR(40));",
            "CREATE TABLE ophciexamination_visual_acuity_unit_value (id INT PRIMARY KEY, unit_id INT, "
            "value VARCHAR(255), base_value INT);",
            "CREATE TABLE et_ophciexamination_intraocularpressure (id INT PRIMARY KEY, event_id INT, eye_id INT, "
            "left_comments TEXT, right_comments TEXT);",
            "CREATE TABLE ophciexamination_intraocularpressure_value (id INT PRIMARY KEY, element_id INT, eye_id INT, "
            "reading_id INT);",
            "CREATE TABLE ophciexamination_intraocularpressure_reading (id INT PRIMARY KEY, value INT);",
            "CREATE TABLE secondary_diagnosis (id INT PRIMARY KEY, patient_id INT, disorder_id BIGINT, eye_id INT, "
            "date VARCHAR(10));",
            "CREATE TABLE disorder_icd10 (disorder_id BIGINT PRIMARY KEY, icd10_code VARCHAR(10));",
            "INSERT INTO ophciexamination_visual_acuity_unit VALUES (1, 'logMAR'), (2, 'Snellen Metre');"]
    for n, (pid, born, sex) in enumerate(PATIENTS, start=1):
        rows += [f"INSERT INTO patient VALUES ({n}, '{pid}', '{born}', '{sex}', 0);",
                 f"INSERT INTO episode VALUES ({n}, {n});"]
    rows.append("INSERT INTO patient VALUES (9, 'H0009', '1970-01-01', 'M', 1);")  # deleted: never read
    person = {pid: n for n, (pid, _, _) in enumerate(PATIENTS, start=1)}
    base = {}  # logMAR -> OpenEyes base value (110 - 50 x logMAR, its ETDRS-letter scale)
    eye_id = {"L": 1, "R": 2, "B": 3}
    for n, (pid, at, eye, va, iop, comment) in enumerate(EXAMS, start=1):
        rows.append(f"INSERT INTO event VALUES ({n}, {person[pid]}, '{at}', 0);")
        if va is not None:
            base.setdefault(va, int(round(110 - 50 * va)))
            rows += [f"INSERT INTO et_ophciexamination_visualacuity VALUES ({n}, {n}, {eye_id[eye]});",
                     f"INSERT INTO ophciexamination_visualacuity_reading VALUES ({n}, {n}, {base[va]}, "
                     f"{0 if eye == 'R' else 1});"]
        if iop is not None:
            side_comment = (_q(comment), "NULL") if eye == "L" else ("NULL", _q(comment))
            rows += [f"INSERT INTO et_ophciexamination_intraocularpressure VALUES ({n}, {n}, {eye_id[eye]}, "
                     f"{side_comment[0]}, {side_comment[1]});",
                     f"INSERT INTO ophciexamination_intraocularpressure_reading VALUES ({n}, {iop});",
                     f"INSERT INTO ophciexamination_intraocularpressure_value VALUES ({n}, {n}, {eye_id[eye]}, {n});"]
    rows += [f"INSERT INTO ophciexamination_visual_acuity_unit_value VALUES ({k}, 1, '{va:.2f}', {b});"
             for k, (va, b) in enumerate(sorted(base.items()), start=1)]
    rows.append("INSERT INTO ophciexamination_visual_acuity_unit_value VALUES (90, 2, '6/6', 85);")
    # A binocular reading (side 2) is left out by the query; a pressure of an unknown eye id is quarantined.
    rows += ["INSERT INTO event VALUES (90, 1, '2024-05-01 09:00:00', 0);",
             "INSERT INTO et_ophciexamination_visualacuity VALUES (90, 90, 3);",
             f"INSERT INTO ophciexamination_visualacuity_reading VALUES (90, 90, {base[0.30]}, 2);",
             "INSERT INTO et_ophciexamination_intraocularpressure VALUES (90, 90, 3, NULL, NULL);",
             "INSERT INTO ophciexamination_intraocularpressure_reading VALUES (90, 40);",
             "INSERT INTO ophciexamination_intraocularpressure_value VALUES (90, 90, 7, 90);"]
    for n, (pid, day, eye, code, _) in enumerate(DIAGNOSES, start=1):
        fuzzy = day[:8] + "00" if n == 2 else day  # OpenEyes' fuzzy date: an unknown day is '-00'
        rows += [f"INSERT INTO secondary_diagnosis VALUES ({n}, {person[pid]}, {1000 + n}, {eye_id[eye]}, '{fuzzy}');",
                 f"INSERT INTO disorder_icd10 VALUES ({1000 + n}, '{code}');"]
    return "\n".join(rows)


def openeyes_want() -> dict:
    """OpenEyes keeps no end date of a secondary diagnosis: H33.00 of H0003 stays in force."""
    want = dict(WANT)
    values, days, _ = want[("H0003", D1, "R")]
    want[("H0003", D1, "R")] = (values, days, ["H33.00"])
    return want


# --- reading a preset with the link step's own code -------------------------------------------------------------------

@pytest.fixture(scope="module")
def session():
    """The worker's Spark session (the platform's configuration), its JVM in UTC as platform/spark.yaml starts it."""
    from definitions import defs

    spark = defs.resources["spark"].spark_session
    jvm = spark._jvm
    if str(jvm.java.time.ZoneId.systemDefault()) != "UTC":  # a JVM another test started without the platform's options
        jvm.java.util.TimeZone.setDefault(jvm.java.util.TimeZone.getTimeZone("UTC"))
    return spark


def link_with(session, path: Path, env: dict) -> list[dict]:
    """The module's images linked through the source file at `path`, as the link step links them."""
    from pyspark.sql import functions as F

    from assets.clinical_read import read_source
    from assets.linkage import as_of_join, with_eyes
    from imaging.clinical_source import SOURCE_ORIGIN
    from imaging.driver.config import load_clinical_source
    from imaging.driver.platform_files import load_clinical_policy
    from resources.clinical_source import ClinicalSourceResource, reader

    resource = ClinicalSourceResource(file=str(path), partitions=3, fetch_size=2)
    source_reader = reader(resource, session, env)
    assert source_reader.source == load_clinical_source(path)
    read = read_source(source_reader, [SITE], ["", "UNKNOWN"], 2)
    images = session.createDataFrame(
        [(day, SITE, pid, eye, f"{pid}-{day}-{eye}.dcm", day.replace("-", "")) for pid, day, eye in IMAGES],
        "date string, site string, patient_id string, laterality string, source_path string, study_date string")
    policy = load_clinical_policy()
    fields = sorted(policy.eye_aliases - set(policy.eye_diagnosis_rule.aliases))  # as the link step follows them
    linked = with_eyes(as_of_join(images, read.patients), read.observations, read.diagnoses, F.lit(SOURCE_ORIGIN),
                       fields)
    from assets.quality import plain_plans

    with plain_plans(session):  # tiny frames: one reduce task per core, no adaptive re-planning
        rows = [r.asDict(recursive=True) for r in linked.collect()]
        quarantined = read.quarantine(images).collect()
    read.release()
    return rows, quarantined, read


def assert_eyes(rows: list[dict], want: dict) -> None:
    by_key = {(r["patient_id"], r["date"], r["laterality"]): r for r in rows}
    assert len(by_key) == len(IMAGES)
    for (pid, day, eye), (values, days, codes) in want.items():
        row = by_key[(pid, day, eye)]
        got = {k: float(v) for k, v in (row["eye_clinical"] or {}).items() if k in values}
        assert got == pytest.approx({k: float(v) for k, v in values.items()}), (pid, day, eye)
        assert {k: v for k, v in (row["eye_days_before"] or {}).items() if k in values} == days, (pid, day, eye)
        assert sorted(row["eye_diagnoses"] or []) == codes, (pid, day, eye)
        born, sex = next((b, s) for p, b, s in PATIENTS if p == pid)
        assert row["has_clinical_record"] and row["clinical"]["sex"] == sex
        assert row["clinical"]["birth_date"].replace("-", "").startswith(born.replace("-", ""))
    no_eye = by_key[("H0003", D1, None)]
    assert no_eye["eye"] is None and no_eye["eye_clinical"] is None and "laterality" in no_eye["eye_reason"]


PRESET_CASES = [("omop_cdm54.yaml", "pg"), ("omop_cdm54.yaml", "maria"), ("openeyes.yaml", "pg"),
                ("openeyes.yaml", "maria")]


@pytest.mark.parametrize("preset,server_name", PRESET_CASES)
def test_preset_reads_each_eye_from_a_real_server(preset, server_name, request, session, tmp_path):
    server = request.getfixturevalue(server_name)
    schema = f"{preset.split('.')[0]}_{server_name}"
    if server_name == "pg":
        server.execute(f"CREATE SCHEMA {schema}; SET search_path TO {schema};\n"
                       + (omop_sql if preset.startswith("omop") else openeyes_sql)("TIMESTAMP"))
        path = source_file(tmp_path, preset, server, "EPR_TEST_PASSWORD")
        spec = yaml.safe_load(path.read_text())
        spec["jdbc_url"] += f"?currentSchema={schema}"
        path.write_text(yaml.safe_dump(spec))
    else:
        server.execute(f"CREATE DATABASE {schema}; USE {schema};\n"
                       + (omop_sql if preset.startswith("omop") else openeyes_sql)("DATETIME"))
        server.execute(f"GRANT ALL ON {schema}.* TO '{server.user}'@'{server.host}';")
        path = source_file(tmp_path, preset, server, "EPR_TEST_PASSWORD")
        spec = yaml.safe_load(path.read_text())
        spec["jdbc_url"] = spec["jdbc_url"].rsplit("/", 1)[0] + f"/{schema}"
        path.write_text(yaml.safe_dump(spec))
    rows, quarantined, read = link_with(session, path, {"EPR_TEST_PASSWORD": server.password})
    assert_eyes(rows, omop_want() if preset.startswith("omop") else openeyes_want())
    # Unusable rows are set aside with their reason, in the site-days of their patients' images.
    if preset.startswith("omop"):  # a condition whose code carries no laterality
        assert [(r["site"], r["reason"]) for r in quarantined] == [(SITE, "eye observation without an eye")] * 2
    else:  # a pressure of an unknown eye id
        assert {r["reason"] for r in quarantined} == {"eye observation without an eye"}
    figures = read.metadata()["queries"]
    assert figures["eye_observations"]["rows"] > 0 and len(figures["eye_observations"]["query_sha256"]) == 64
    # The eye observations were read in more than one query, split on the preset's partition column.
    if server_name == "pg":
        column = yaml.safe_load(path.read_text())["eye_observations"]["partition_column"]
        ranges = {line.split("source_query", 1)[1].strip() for line in server.log.read_text(errors="replace").splitlines()
                  if "source_query" in line and f'"{column}"' in line}
        assert len(ranges) >= 2, ranges


def test_a_failure_names_the_source_and_the_query_never_the_password(pg, session, tmp_path):
    from imaging.clinical_source import ClinicalSourceError
    from imaging.driver.config import load_clinical_source
    from resources.clinical_source import ClinicalSourceResource, reader

    path = source_file(tmp_path, "omop_cdm54.yaml", pg, "EPR_TEST_PASSWORD")
    wrong = "Wrong-Password-123"
    resource = ClinicalSourceResource(file=str(path))
    with pytest.raises(ClinicalSourceError) as refused:
        reader(resource, session, {"EPR_TEST_PASSWORD": wrong}).read("patients")
    message = str(refused.value)
    assert "'omop-cdm54'" in message and "'patients'" in message and "refused the login" in message
    assert wrong not in message and pg.password not in message
    # A query error (the OMOP tables are not in the public schema): named, with the database's own words.
    with pytest.raises(ClinicalSourceError) as bad:
        reader(resource, session, {"EPR_TEST_PASSWORD": pg.password}).read("eye_observations")
    assert "'eye_observations'" in str(bad.value) and "not valid" in str(bad.value) and pg.password not in str(bad.value)
    # No password in the environment: the variable is named, nothing is read.
    with pytest.raises(ClinicalSourceError, match="EPR_TEST_PASSWORD"):
        reader(resource, session, {})
    assert load_clinical_source(path).queries["eye_observations"].partition_column == "measurement_id"


def test_a_jvm_out_of_utc_is_refused(pg, session, tmp_path):
    """Wall-clock values pass through java.sql.Timestamp in the JVM's default zone: the read refuses a JVM not in
    UTC (a cluster or Connect server started without -Duser.timezone=UTC) rather than move an examination's day."""
    from imaging.clinical_source import ClinicalSourceError
    from resources.clinical_source import ClinicalSourceResource, reader

    path = source_file(tmp_path, "omop_cdm54.yaml", pg, "EPR_TEST_PASSWORD")
    jvm = session._jvm
    jvm.java.util.TimeZone.setDefault(jvm.java.util.TimeZone.getTimeZone("Pacific/Auckland"))
    try:
        with pytest.raises(ClinicalSourceError, match="-Duser.timezone=UTC"):
            reader(ClinicalSourceResource(file=str(path)), session, {"EPR_TEST_PASSWORD": pg.password})
    finally:
        jvm.java.util.TimeZone.setDefault(jvm.java.util.TimeZone.getTimeZone("UTC"))


# --- an EPR of a schema the suite has never seen, end to end -------------------------------------------------------

COMMENT = "RETINAL-NOTE-zq81"  # free text in the exam table: must never reach the de-identified zone
EXAMS_PER_EYE = 400  # a table large enough that its read is split over parallel queries


def unseen_epr(hospital) -> tuple[str, dict]:
    """A hospital's own schema (names no preset uses, its own eye codes RE/LE/BE), with exams of the synthetic
    hospital's imaged patients around their images' days, and the as-of truth computed here from the same rows."""
    import random

    rng = random.Random(5)
    patients = sorted({i.patient_id for i in hospital.instances})
    by_id = {p.patient_id: p for p in hospital.patients}
    rows = ["CREATE SCHEMA clinic;",
            "CREATE TABLE clinic.people (mrn VARCHAR(12) PRIMARY KEY, born DATE, gender_code CHAR(1), "
            "family_name VARCHAR(60));",
            "CREATE TABLE clinic.exam (exam_no BIGINT PRIMARY KEY, mrn VARCHAR(12), seen_at TIMESTAMP, side VARCHAR(4), "
            "va NUMERIC(4,2), pressure INT, remarks TEXT);",
            "CREATE TABLE clinic.problem (mrn VARCHAR(12), onset DATE, side VARCHAR(4), icd VARCHAR(10), ended DATE);"]
    rows += [f"INSERT INTO clinic.people VALUES ('{p}', '{by_id[p].birth_date}', '{by_id[p].sex}', "
             f"'{by_id[p].family_name}');" for p in patients]
    exams: list[tuple] = []
    number = 0
    first = dt.date.fromisoformat(min(hospital.dates))
    for p in patients:
        for side in ("RE", "LE"):
            for k in range(EXAMS_PER_EYE):  # a history of exams, each day at 09:00, up to the day before the first
                number += 1
                day = first - dt.timedelta(days=EXAMS_PER_EYE - k)
                exams.append((number, p, f"{day} 09:00:00", side, round(rng.uniform(0, 1.2), 2),
                              rng.randrange(10, 30), f"{COMMENT} {by_id[p].family_name}"))
        for day in hospital.dates:  # early on each imaging day, and at 00:30 the day after (never the day's as-of)
            after = (dt.date.fromisoformat(day) + dt.timedelta(days=1)).isoformat()
            for when, side, va in ((f"{day} 00:20:00", "od", 0.66), (f"{day} 00:20:00", "OS", 0.55),
                                   (f"{day} 00:30:00", "BE", 0.77), (f"{after} 00:30:00", "BE", 2.5)):
                number += 1
                exams.append((number, p, when, side, va, None, None))
        number += 1
        exams.append((number, p, f"{first} 00:10:00", "XX", 0.4, 12, None))  # an eye that is none: quarantined
    rows += [f"INSERT INTO clinic.exam VALUES ({n}, '{p}', '{at}', '{side}', {_q(va)}, {_q(iop)}, {_q(text)});"
             for n, p, at, side, va, iop, text in exams]
    rows += [f"INSERT INTO clinic.problem VALUES ('{p}', '2023-01-01', 'RE', 'H35.32', NULL);" for p in patients]
    eye = {"RE": "R", "LE": "L", "BE": "B", "od": "R", "OS": "L"}
    truth = {}
    for image in hospital.instances:
        best: dict[str, tuple] = {}
        for n, p, at, side, va, iop, _ in exams:
            if p == image.patient_id and side in eye and eye[side] in (image.laterality, "B") and at[:10] <= image.date:
                for name, value in (("va", va), ("pressure", iop)):
                    if value is not None and (name not in best or best[name][0] < at):
                        best[name] = (at, value)
        truth[image.sop_instance_uid] = {k: v for k, (_, v) in best.items()}
    return "\n".join(rows), truth


UNSEEN_SOURCE = """
name: district-epr
jdbc_url: {url}
user: {user}
password_env: DISTRICT_EPR_PASSWORD
driver_jars: [{jar}]
patients:
  query: SELECT mrn AS patient_id, born AS birth_date, gender_code AS sex, family_name AS surname FROM clinic.people
eye_observations:
  query: >-
    SELECT mrn AS patient_id, seen_at AS observed_at,
           CASE side WHEN 'RE' THEN 'R' WHEN 'LE' THEN 'L' WHEN 'BE' THEN 'B' ELSE side END AS eye,
           va AS visual_acuity_logmar, pressure AS iop_mmhg, remarks, exam_no
    FROM clinic.exam
  partition_column: exam_no
diagnoses:
  query: >-
    SELECT mrn AS patient_id, onset AS diagnosed_on, ended AS resolved_on,
           CASE side WHEN 'RE' THEN 'R' WHEN 'LE' THEN 'L' ELSE 'B' END AS eye, icd AS diagnosis_code
    FROM clinic.problem
"""


@pytest.fixture(scope="module")
def district(tmp_path_factory, pg):
    """The data contract's command over a June site-day, in a process of its own with TZ=Europe/London, the
    clinical records from the unseen EPR through IMAGING_CLINICAL_SOURCE (Dagster instance and logs kept)."""
    from synth import generate_hospital

    root = tmp_path_factory.mktemp("district")
    hospital = generate_hospital(root / "landing", seed=3, sites=("site-a",), dates=("2024-06-03",),
                                 patients_per_site=3, broken_per_partition=False)
    script, truth = unseen_epr(hospital)
    pg.execute(script)
    password = "district-pw-" + os.urandom(6).hex()
    pg.execute(f"CREATE ROLE district LOGIN PASSWORD '{password}'; GRANT USAGE ON SCHEMA clinic TO district; "
               f"GRANT SELECT ON ALL TABLES IN SCHEMA clinic TO district;")
    source = root / "district-epr.yaml"
    source.write_text(UNSEEN_SOURCE.format(url=url_of(pg), user="district", jar=PG_JAR))
    home = root / "dagster-home"
    home.mkdir()
    shutil.copy(REPO / "platform" / "dagster.yaml", home / "dagster.yaml")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "PYSPARK_SUBMIT"))},
           "IMAGING_LANDING": str(root / "landing"), "IMAGING_WAREHOUSE": str(root / "warehouse"),
           "IMAGING_SITES": "site-a", "IMAGING_START_DATE": "2024-06-03", "IMAGING_END_DATE": "2024-06-03",
           "IMAGING_PSEUDONYM_KEY": "district-key-" + "y" * 24, "IMAGING_SPARK_MASTER": "local[2]",
           "IMAGING_CLINICAL_SOURCE": str(source), "DISTRICT_EPR_PASSWORD": password, "DAGSTER_HOME": str(home),
           "TZ": "Europe/London", "SPARK_LOCAL_IP": "127.0.0.1"}
    args = [DAGSTER, "asset", "materialize", "-m", "definitions", "--select",
            "raw_image_index,linked_patient_metadata,anonymized_images",
            "--partition", "2024-06-03|site-a"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return {"root": root, "hospital": hospital, "truth": truth, "env": env, "args": args, "password": password,
            "logs": done.stdout + done.stderr}


def _table(path: Path) -> list[dict]:
    return pads.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []


def test_unseen_epr_each_image_carries_its_own_eyes_latest_values(district, pg):
    from imaging.catalogue import CLINICAL_QUARANTINE, LINKED

    warehouse = district["root"] / "warehouse"
    linked = _table(warehouse / LINKED.path)
    hospital = district["hospital"]
    assert len(linked) == len(hospital.instances)
    fields = {"va": "visual_acuity_logmar", "pressure": "iop_mmhg"}
    for row in linked:
        want = district["truth"][row["sop_instance_uid"]]
        got = dict(row["eye_clinical"] or {})
        assert {k: float(got[fields[k]]) for k in want} == pytest.approx({k: float(v) for k, v in want.items()}), \
            row["source_path"]
        assert dict(row["eye_days_before"])["visual_acuity_logmar"] == 0  # 00:30 that day (BST), not the evening before
        assert row["eye"] in ("R", "L") and row["has_clinical_record"]
    # The exam with an eye that is none is quarantined with its reason, in each site-day of its patient's images.
    held = _table(warehouse / CLINICAL_QUARANTINE.path)
    assert held and {r["reason"] for r in held} == {"eye is not R, L, B, OD, OS or OU"}
    assert {r["source_path"] for r in held} == {"clinical_source:district-epr/eye_observations"}
    # The large table was read in more than one query: the statement log holds each range of exam_no.
    ranges = {line.split("source_query", 1)[1].strip() for line in pg.log.read_text(errors="replace").splitlines()
              if "FROM clinic.exam" in line and '"exam_no"' in line and "source_query" in line}
    assert len(ranges) >= 2, ranges


def test_unseen_epr_read_is_recorded_as_a_data_version(district):
    """The read is an observation of `clinical_source` (a digest of the rows read), and each linked site-day's
    materialization names the source and its queries' digests: what the UI shows and a release's data card states."""
    from dagster import AssetKey, DagsterInstance
    from dagster._core.definitions.data_version import extract_data_version_from_entry

    from assets.checks import RecordedFacts
    from imaging.driver.config import load_clinical_source

    source = load_clinical_source(district["env"]["IMAGING_CLINICAL_SOURCE"])
    with DagsterInstance.from_config(str(district["root"] / "dagster-home")) as instance:
        observed = instance.get_latest_data_version_record(AssetKey("clinical_source"), True)
        assert observed is not None
        metadata = observed.event_log_entry.asset_observation.metadata
        assert metadata["eye_observations/rows"].value > 2 * EXAMS_PER_EYE
        assert metadata["eye_observations/query_sha256"].value == source.queries["eye_observations"].digest
        (read,) = RecordedFacts(instance).clinical_sources(["2024-06-03|site-a"])
    assert read.name == "district-epr" and read.queries == {q.name: q.digest for q in source.queries.values()}
    assert extract_data_version_from_entry(observed.event_log_entry).value == read.data_version


def test_a_cohort_selects_eyes_with_wet_amd_and_poor_acuity(session):
    """"Right and left eyes with wet AMD and acuity 0.3 logMAR or worse" as a cohort definition, evaluated by Spark
    over manifest-shaped rows."""
    from imaging.governance.cohort import CohortDefinition

    cohort = CohortDefinition.from_dict({"name": "wet-amd-eyes", "version": 1, "eye": {
        "lateralities": ["R", "L"], "diagnosis_code_prefixes": ["H35.32"],
        "fields": {"visual_acuity_logmar": {"min": 0.3}}}})
    rows = [("a", "R", "H35.32", 0.3), ("b", "L", "E11.3;H35.321", 1.0), ("c", "R", "H35.31", 0.9),
            ("d", "L", "H35.32", 0.2), ("e", None, None, None), ("f", "R", "H35.32", None), ("g", "L", None, 0.5)]
    frame = session.createDataFrame(rows, "name string, eye string, eye_diagnosis_codes string, "
                                          "eye_visual_acuity_logmar double")
    assert sorted(r["name"] for r in frame.where(cohort.sql_predicate()).collect()) == ["a", "b"]


def test_unseen_epr_comments_and_password_stay_out(district):
    from imaging.catalogue import DEIDENTIFIED

    root, password = district["root"], district["password"].encode()
    deidentified = [p for p in (root / "warehouse" / DEIDENTIFIED).rglob("*") if p.is_file()]
    assert deidentified
    for path in deidentified:
        data = path.read_bytes()
        assert COMMENT.encode() not in data and password not in data, path.name
    instance = [p for p in (root / "dagster-home").rglob("*") if p.is_file()]
    assert instance and any(p.suffix == ".db" for p in instance)
    for path in instance:
        data = path.read_bytes()
        assert password not in data and COMMENT.encode() not in data, path.name
    for path in (root / "warehouse").rglob("*"):
        if path.is_file():
            assert password not in path.read_bytes(), path.name
    assert district["password"] not in district["logs"] and COMMENT not in district["logs"]
    assert "district-epr" in district["logs"]  # the source's read is named in the run's log


def test_unseen_epr_stopped_fails_the_rerun_and_changes_nothing(district, pg, defs):
    """The database stopped: a re-run fails at once, naming the source (never the password), and the warehouse is
    as it was. Run in this process (the same partition, landing and warehouse): the run stops when its resources are
    set up, before any step."""
    from conftest import rooted, run_assets
    from resources.clinical_source import ClinicalSourceResource

    warehouse = district["root"] / "warehouse"

    def snapshot():
        return {str(p.relative_to(warehouse)): p.read_bytes() for p in warehouse.rglob("*") if p.is_file()}

    before = snapshot()
    pg.stop()
    scoped = rooted(defs, district["root"] / "landing", warehouse, checks=False)
    scoped = type(scoped)(assets=scoped.assets, executor=scoped.executor, resources={
        **scoped.resources, "clinical_source": ClinicalSourceResource(file=district["env"]["IMAGING_CLINICAL_SOURCE"])})
    key = "2024-06-03|site-a"
    os.environ["DISTRICT_EPR_PASSWORD"] = district["password"]
    try:
        result = run_assets(scoped, ["raw_image_index", "linked_patient_metadata", "anonymized_images"], (key, key),
                            must_succeed=False)
    finally:
        del os.environ["DISTRICT_EPR_PASSWORD"]
    assert not result.success
    failure = " ".join(str(e.event_specific_data) for e in result.all_events if e.is_failure)
    assert "clinical source 'district-epr'" in failure and "cannot be reached" in failure
    assert district["password"] not in failure
    assert not result.get_asset_materialization_events()
    assert snapshot() == before


def test_eye_checks_flag_a_feed_fault_and_stale_labels_by_pseudonym(session):
    """A patient with hundreds of eye observations in one day is flagged as a patient with a million scans is (by
    pseudonym, the site-days of their images failed); an image whose eye's latest observation is older than the
    window is counted."""
    import datetime as dt_

    from assets import quality as q
    from assets.checks import quality_context
    from assets.partitions import SETTINGS
    from imaging.clinical_source import SOURCE_ORIGIN
    from resources.deid import Deidentifier

    ctx = quality_context(Deidentifier(pseudonym_key=os.environ["IMAGING_PSEUDONYM_KEY"],
                                       options=list(SETTINGS.deid_options), issuers=SETTINGS.issuers,
                                       pixel_text=SETTINGS.pixel_text))
    images = session.createDataFrame([("2024-03-01", "site-a", "9990000001"), ("2024-03-02", "site-a", "9990000002")],
                                     "date string, site string, patient_id string")
    at = dt_.datetime(2024, 2, 1, 9)
    observations = session.createDataFrame(
        [(SOURCE_ORIGIN, "9990000001", "R", at + dt_.timedelta(seconds=i), 0, {"iop_mmhg": "15"}) for i in range(60)]
        + [(SOURCE_ORIGIN, "9990000002", "L", at, 0, {"iop_mmhg": "15"})],
        "_origin string, patient_id string, eye string, observed_at timestamp_ntz, _tie int, "
        "clinical map<string,string>")
    flagged = q.eye_observations_per_patient_day(images, observations, ["site-a"], ctx)
    assert not flagged.passed and flagged.observed == 60 and flagged.failed_partitions == ("2024-03-01|site-a",)
    assert "9990000001" not in json.dumps(flagged.as_metadata()) and len(flagged.offenders) == 1
    assert q.eye_observations_per_patient_day(images, observations, [], ctx).observed == 0  # not served: not read
    linked = session.createDataFrame([("2024-03-01", "site-a", "9990000001", {"iop_mmhg": 400, "va": 20}),
                                      ("2024-03-02", "site-a", "9990000002", {"iop_mmhg": 30}),
                                      ("2024-03-02", "site-a", "9990000003", None)],
                                     "date string, site string, patient_id string, eye_days_before map<string,int>")
    stale = q.stale_eye_observations(linked, ctx)
    assert stale.observed == 0 and stale.details["images_with_eye_observation"] == 2  # the latest (20 days) counts
    older = linked.withColumn("eye_days_before", F.map_from_arrays(F.array(F.lit("va")), F.array(F.lit(500))))
    assert q.stale_eye_observations(older, ctx).observed == 3
