"""Data-quality checks on generated tables with a real Spark session (assets/quality.py).

Index, clinical, manifest and ledger rows are generated directly (tiny), not through DICOM
files: the checks read tables, and each bad case is planted into otherwise clean data.
"""

import datetime as dt
import hashlib
import json
import os

import pytest
from pyspark.sql.types import BooleanType, IntegerType, StringType, StructField, StructType

from assets import quality as q
from assets.linkage import as_of_join
from imaging.catalogue import LINKED, RAW_IMAGE_INDEX
from imaging.driver.config import read_yaml
from imaging.driver.platform_files import load_quality_rules
from imaging.pseudonym import Pseudonymizer
from imaging.records import ClinicalRow, schema_of
from imaging.steps.clinical import ClinicalPolicy
from resources.spark import spark_schema

PSEUDO = Pseudonymizer(os.environ["IMAGING_PSEUDONYM_KEY"])
CTX = q.QualityContext(load_quality_rules(), PSEUDO, {}, "NHS", today=dt.date(2024, 6, 1))
POLICY = ClinicalPolicy.from_dict(read_yaml("clinical_policy.yaml"))
DAYS = ("2024-03-01", "2024-03-02")
SITES = ("site-a", "site-b")
PATIENTS = ("9434765919", "9434765870", "9434765828")
INDEX_FIELDS = RAW_IMAGE_INDEX.columns
MANIFEST = StructType([StructField(n, t, True) for n, t in [
    ("batch", StringType()), ("output_path", StringType()), ("sha256", StringType()),
    ("patient_pseudonym", StringType()), ("study_instance_uid", StringType()), ("series_instance_uid", StringType()),
    ("sop_instance_uid", StringType()), ("study_date", StringType()), ("sex", StringType()),
    ("age_at_scan", IntegerType()), ("has_clinical_record", BooleanType()), ("pixel_text", StringType()),
    ("redacted_regions", StringType())]])
LEDGER = StructType([StructField(n, StringType(), False) for n in
                     ("source_path", "source_sha256", "batch", "output_path", "output_sha256", "date", "site")])


@pytest.fixture(scope="module")
def spark():
    """The process's one Spark session, started as the assets start theirs (SparkResource: getOrCreate hands
    it to every later run in this test process, so it must be the assets' whichever test starts it), with
    2 shuffle partitions for these tiny frames while this module runs."""
    from resources.spark import SparkResource, spark_config

    session = SparkResource(spark_config=spark_config(os.environ["IMAGING_SPARK_MASTER"])).spark_session
    before = session.conf.get("spark.sql.shuffle.partitions")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.conf.set("spark.sql.shuffle.partitions", before)


class Hospital:
    """Generated index and extract rows: clean unless a test plants a problem."""

    def __init__(self):
        self.images: list[dict] = []
        self.clinical: list[tuple] = []
        self._uid = 0
        for day in DAYS:
            for site in SITES:
                for patient in PATIENTS:
                    self.scans(day, site, patient, 4)
                    self.record(day, site, patient, f"Person {patient[-3:]}", "1950-06-15")

    def uid(self) -> str:
        self._uid += 1
        return f"1.2.826.0.1.3680043.10.{self._uid}"

    def scans(self, day, site, patient, n, *, study_date=None, series_size=2) -> list[dict]:
        study, made, series = self.uid(), [], None
        for i in range(n):
            if i % series_size == 0:
                series = self.uid()
            sop = self.uid()
            row = {f: None for f in INDEX_FIELDS}
            row.update(date=day, site=site, patient_id=patient, source_path=f"/landing/images/{site}/{day}/{sop}.dcm",
                       size_bytes=1000 + i, sha256=hashlib.sha256(sop.encode()).hexdigest(), sop_instance_uid=sop,
                       study_instance_uid=study, series_instance_uid=series, sop_class_uid="1.2.840.10008.5.1.4.1.1.77.1.5.4",
                       modality="OPT", laterality="R", study_date=study_date or day.replace("-", ""), rows=496,
                       columns=512, number_of_frames=49)
            made.append(row)
        self.images += made
        return made

    def record(self, day, site, patient, name, birth):
        number = 1 + sum(1 for r in self.clinical if r[0] == site and r[1] == day)
        self.clinical.append((site, day, number, patient, {"full_name": name, "date_of_birth": birth, "sex": "F"},
                              None))  # eye: None, the patient's own record

    def index(self, spark):
        return spark.createDataFrame([tuple(r[f] for f in INDEX_FIELDS) for r in self.images],
                                     spark_schema(RAW_IMAGE_INDEX.schema))

    def extracts(self, spark):
        return spark.createDataFrame(self.clinical, spark_schema(schema_of(ClinicalRow)))


def no_raw_identifier(outcome, *raw):
    text = json.dumps(outcome.as_metadata())
    return not any(value in text for value in raw)


def raw_outcomes(index, hospital):
    listed = {f"{d}|{s}": sum(1 for r in hospital.images if (r["date"], r["site"]) == (d, s))
              for d in DAYS for s in SITES}
    empty = index.limit(0)
    return {o.check: o for o in [
        q.scans_per_patient_site_day(index, CTX), q.scans_per_patient(index, CTX), q.instances_per_series(index, CTX),
        q.series_per_study(index, CTX), q.sop_instance_uid_in_one_partition(index, CTX),
        q.mandatory_attributes(index, CTX), q.study_date_in_future(index, CTX),
        q.files_accounted(listed, index, empty, CTX)]}


def linked_outcomes(spark, hospital):
    index, clinical = hospital.index(spark), hospital.extracts(spark)
    linked = as_of_join(index, clinical)
    return {o.check: o for o in [
        *q.linkage_fan_out(index, clinical, POLICY, CTX), q.placeholder_keys(index, clinical, CTX),
        q.images_per_clinical_key(index, CTX), q.unlinked_share(linked, CTX),
        q.study_before_birth(linked, POLICY, CTX)]}


def test_clean_data_passes_every_index_and_linkage_check(spark):
    hospital = Hospital()
    outcomes = {**raw_outcomes(hospital.index(spark), hospital), **linked_outcomes(spark, hospital)}
    failed = {k: o.as_metadata() for k, o in outcomes.items() if not o.passed}
    assert failed == {}
    assert len(outcomes) == 14
    per_day = outcomes["scans_per_patient_site_day"]
    assert per_day.distribution.maximum == 4 and per_day.distribution.keys == 12 and per_day.offenders == ()
    assert outcomes["unlinked_share"].observed == 0 and outcomes["records_per_image"].observed == 1


def test_impossible_scans_in_one_site_day_fail_with_pseudonymous_offender(spark):
    hospital = Hospital()
    hot = "4857773456"
    hospital.scans("2024-03-02", "site-a", hot, 250, series_size=50)
    outcomes = raw_outcomes(hospital.index(spark), hospital)
    check = outcomes["scans_per_patient_site_day"]
    assert not check.passed and check.blocking and check.observed == 250
    assert [(o.pseudonym, o.value) for o in check.offenders] == [(PSEUDO.patient_id("NHS", hot), 250)]
    assert check.failed_partitions == ("2024-03-02|site-a",)
    meta = check.as_metadata()
    assert meta["distribution"]["max"] == 250 and meta["distribution"]["p50"] == 4
    assert no_raw_identifier(check, hot, "/landing/")
    # The rest of the index is fine: only this check fails.
    assert [k for k, o in outcomes.items() if not o.passed] == ["scans_per_patient_site_day"]


def test_one_sop_instance_uid_on_two_days_fails_naming_the_published_uid(spark):
    hospital = Hospital()
    first = next(r for r in hospital.images if r["date"] == DAYS[0] and r["site"] == "site-b")
    again = dict(first, date=DAYS[1], source_path=first["source_path"].replace(DAYS[0], DAYS[1]))
    hospital.images.append(again)
    outcomes = raw_outcomes(hospital.index(spark), hospital)
    check = outcomes["sop_instance_uid_in_one_partition"]
    assert not check.passed and check.observed == 1
    assert [(o.pseudonym, o.value) for o in check.offenders] == [(PSEUDO.uid(first["sop_instance_uid"]), 2)]
    assert check.failed_partitions == ("2024-03-01|site-b", "2024-03-02|site-b")
    assert no_raw_identifier(check, first["sop_instance_uid"], first["patient_id"])
    assert [k for k, o in outcomes.items() if not o.passed] == ["sop_instance_uid_in_one_partition"]


def test_placeholder_patient_id_shared_by_many_patients_fans_the_join_out(spark):
    hospital = Hospital()
    for n in range(6):  # six different people filed under the site's 'UNKNOWN' key, in the PACS and the extract
        hospital.scans("2024-03-02", "site-b", "UNKNOWN", 2)
        hospital.record("2024-03-02", "site-b", "UNKNOWN", f"Stranger {n}", f"19{40 + n}-01-0{n + 1}")
    outcomes = linked_outcomes(spark, hospital)
    fan_out = outcomes["records_per_image"]
    assert not fan_out.passed and fan_out.observed == 6 and fan_out.details["images_affected"] == 12
    assert [(o.pseudonym, o.value) for o in fan_out.offenders] == [(PSEUDO.patient_id("NHS", "UNKNOWN"), 6)]
    assert fan_out.failed_partitions == ("2024-03-02|site-b",)
    placeholder = outcomes["placeholder_keys"]
    assert not placeholder.passed and placeholder.details == {"images_with_placeholder_key": 12,
                                                              "extract_rows_with_placeholder_key": 6}
    assert [o.pseudonym for o in placeholder.offenders] == [PSEUDO.patient_id("NHS", "UNKNOWN")]
    for outcome in outcomes.values():
        assert no_raw_identifier(outcome, "UNKNOWN", "Stranger")
    assert sorted(k for k, o in outcomes.items() if not o.passed) == ["placeholder_keys", "records_per_image"]


def test_two_people_under_one_real_key_is_fan_out_but_a_later_row_of_one_person_is_not(spark):
    hospital = Hospital()
    hospital.record("2024-03-02", "site-a", PATIENTS[0], f"Person {PATIENTS[0][-3:]}", "1950-06-15")  # same person
    assert linked_outcomes(spark, hospital)["records_per_image"].passed
    hospital.record("2024-03-02", "site-a", PATIENTS[1], "Somebody Else", "1987-02-03")
    outcome = linked_outcomes(spark, hospital)["records_per_image"]
    assert not outcome.passed and outcome.offenders[0].pseudonym == PSEUDO.patient_id("NHS", PATIENTS[1])


def test_dates_in_the_future_or_before_birth_and_missing_attributes(spark):
    hospital = Hospital()
    future = hospital.scans("2024-03-01", "site-a", PATIENTS[2], 1, study_date="20300101")
    early = hospital.scans("2024-03-01", "site-b", PATIENTS[1], 1, study_date="19400101")  # born 1950
    hospital.images[0]["modality"] = None
    index = hospital.index(spark)
    raw = raw_outcomes(index, hospital)
    assert not raw["study_date_in_future"].passed and raw["study_date_in_future"].observed == 1
    assert raw["study_date_in_future"].offenders[0].pseudonym == PSEUDO.patient_id("NHS", future[0]["patient_id"])
    assert not raw["mandatory_attributes"].passed and raw["mandatory_attributes"].details["missing_modality"] == 1
    # The index quarantines such rows (imaging.steps.index.MANDATORY): one reaching it is an ERROR, blocking.
    assert raw["mandatory_attributes"].blocking and raw["mandatory_attributes"].failed_partitions == ("2024-03-01|site-a",)
    before = q.study_before_birth(as_of_join(index, hospital.extracts(spark)), POLICY, CTX)
    assert not before.passed and before.observed == 1 and before.failed_partitions == ("2024-03-01|site-b",)
    assert before.offenders[0].pseudonym == PSEUDO.patient_id("NHS", early[0]["patient_id"])


def test_files_lost_between_listing_and_index_fail_the_accounting(spark):
    hospital = Hospital()
    index = hospital.index(spark)
    listed = {f"{d}|{s}": 12 for d in DAYS for s in SITES}
    assert q.files_accounted(listed, index, index.limit(0), CTX).passed
    listed["2024-03-02|site-a"] = 15  # 12 indexed, none quarantined: three files went nowhere
    outcome = q.files_accounted(listed, index, index.limit(0), CTX)
    assert not outcome.passed and outcome.observed == 3 and outcome.failed_partitions == ("2024-03-02|site-a",)


def test_great_expectations_suites_pass_clean_and_fail_without_quoting_values(spark):
    # One validation (GX runs several Spark jobs per expectation): two planted faults, everything else clean.
    hospital = Hospital()
    hospital.images[0]["sha256"] = "not-a-digest-of-" + hospital.images[0]["patient_id"]
    hospital.images[1]["laterality"] = "X"
    errors, warnings = q.column_rules(hospital.index(spark), "raw_image_index", CTX, partitions=["2024-03-01|site-a"])
    assert errors.observed == 1 and warnings.observed == 1  # only the planted faults fail
    assert errors.failed_partitions == ("2024-03-01|site-a",)
    assert not errors.passed and errors.blocking and errors.details["unexpected expect_column_values_to_match_regex(sha256)"] == 1
    assert not warnings.passed and not warnings.blocking
    assert warnings.details["unexpected expect_column_values_to_be_in_set(laterality)"] == 1
    assert no_raw_identifier(errors, hospital.images[0]["patient_id"], "not-a-digest")
    clean = Hospital()
    from pyspark.sql import functions as F

    from assets.clinical_read import extract_eye_rows
    from assets.linkage import with_eyes

    observations, diagnoses = extract_eye_rows(clean.extracts(spark), ())  # as the link step derives them
    linked = with_eyes(as_of_join(clean.index(spark), clean.extracts(spark)), observations, diagnoses,
                       F.col("site")).select(*LINKED.columns)
    assert all(o.passed for o in q.column_rules(linked, "linked_patient_metadata", CTX))


def _anonymized(tmp_path, hospital):
    """Files under a de-identified root, with the manifest and ledger rows that describe them."""
    manifest, ledger = [], []
    for row in hospital.images:
        issuer = row["issuer_of_patient_id"] or "NHS"
        batch = PSEUDO.token("batch", row["date"], row["site"])
        sop = PSEUDO.uid(row["sop_instance_uid"])
        rel = f"anonymized_images/files/{batch}/{sop}.dcm"
        data = f"de-identified {sop}".encode()
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        manifest.append((batch, rel, digest, PSEUDO.patient_id(issuer, row["patient_id"]),
                         PSEUDO.uid(row["study_instance_uid"]), PSEUDO.uid(row["series_instance_uid"]), sop,
                         "2023-01-01", "F", 73, True, "redacted" if len(manifest) == 0 else "clean",
                         '[{"frames":[[1,1]],"boxes":[[4,0,39,170]]}]' if len(manifest) == 0 else None))
        ledger.append((row["source_path"], row["sha256"], batch, rel, digest, row["date"], row["site"]))
    return manifest, ledger


def test_anonymized_checks_pass_clean_and_catch_files_and_pseudonym_breaks(spark, tmp_path):
    hospital = Hospital()
    index = hospital.index(spark)
    manifest_rows, ledger_rows = _anonymized(tmp_path, hospital)
    manifest, ledger = spark.createDataFrame(manifest_rows, MANIFEST), spark.createDataFrame(ledger_rows, LEDGER)
    batches = {f"{d}|{s}": PSEUDO.token("batch", d, s) for d in DAYS for s in SITES}
    root = str(tmp_path)
    clean = [q.images_accounted(index, manifest, index.limit(0), batches, CTX), q.manifest_files(manifest, root, CTX),
             *q.pseudonym_bijection(ledger, index, manifest, CTX), *q.column_rules(manifest, "anonymized_images", CTX)]
    assert {o.check: o.passed for o in clean} == {"images_accounted": True, "manifest_files": True,
                                                  "pseudonyms_per_patient": True, "patients_per_pseudonym": True,
                                                  "column_rules": True, "column_warnings": True}

    (tmp_path / manifest_rows[0][1]).write_bytes(b"tampered")
    (tmp_path / manifest_rows[1][1]).unlink()
    files = q.manifest_files(manifest, root, CTX)
    assert not files.passed and files.details["files_missing"] == 1 and files.details["files_with_other_sha256"] == 1
    assert [o.pseudonym for o in files.offenders] == [manifest_rows[0][3]]  # both files are the first patient's

    # Two patients published under one pseudonym (say, a key mix-up): both directions fail.
    broken = [r[:3] + (manifest_rows[0][3],) + r[4:] if r[3] == manifest_rows[-1][3] else r for r in manifest_rows]
    per_patient, per_pseudonym = q.pseudonym_bijection(ledger, index, spark.createDataFrame(broken, MANIFEST), CTX)
    assert per_patient.passed and not per_pseudonym.passed and per_pseudonym.observed == 2
    assert per_pseudonym.offenders[0].pseudonym == manifest_rows[0][3]
    lost = q.images_accounted(index, manifest.where(f"batch != '{batches['2024-03-01|site-a']}'"), index.limit(0),
                              batches, CTX)
    assert not lost.passed and lost.failed_partitions == ("2024-03-01|site-a",)


def test_release_checksums(tmp_path):
    release = tmp_path / "cohorts" / "demo" / "v1"
    (release / "images").mkdir(parents=True)
    (release / "images" / "a.dcm").write_bytes(b"a")
    (release / "SHA256SUMS").write_text(f"{hashlib.sha256(b'a').hexdigest()}  images/a.dcm\n")
    assert q.release_checksums({"demo": str(release)}, CTX).passed
    (release / "images" / "a.dcm").write_bytes(b"b")
    outcome = q.release_checksums({"demo": str(release)}, CTX)
    assert not outcome.passed and outcome.details["problems_demo"] == 1


def test_the_salted_join_links_exactly_as_the_asset_does(spark):
    hospital = Hospital()
    hospital.scans("2024-03-02", "site-a", PATIENTS[0], 30)  # a hot key for the salt to spread
    index, clinical = hospital.index(spark), hospital.extracts(spark)
    columns = ["source_path", "has_clinical_record", "clinical_extract_date", "clinical"]
    plain = as_of_join(index, clinical).select(*columns).orderBy("source_path").collect()
    salted = as_of_join(index, clinical, salt_buckets=4).select(*columns).orderBy("source_path").collect()
    assert salted == plain and len(plain) == len(hospital.images)


def test_figures_sharing_passes_report_exactly_what_each_alone_reports(spark):
    """Inside `shared_passes` (as the runner computes a step's figures) one profile per table and one
    per-key pass serve every figure: on data failing several of them, each outcome is the one the
    figure computes alone (benchmarks/check_jobs.py --outcomes compares both with the previous code)."""
    hospital = Hospital()
    hospital.scans("2024-03-02", "site-a", "4857773456", 250, series_size=50)  # hot patient
    hospital.scans("2024-03-01", "site-a", PATIENTS[2], 1, study_date="20300101")  # in the future
    hospital.scans("2024-03-01", "site-b", PATIENTS[1], 1, study_date="19400101")  # before birth
    hospital.images[0]["modality"] = None
    for n in range(3):  # placeholder key shared by three people: placeholders and fan-out
        hospital.scans("2024-03-02", "site-b", "UNKNOWN", 2)
        hospital.record("2024-03-02", "site-b", "UNKNOWN", f"Stranger {n}", f"19{40 + n}-01-0{n + 1}")
    index, clinical = hospital.index(spark), hospital.extracts(spark)
    linked = as_of_join(index, clinical)

    def figures():
        return {o.check: (o.passed, o.as_metadata()) for o in [
            q.scans_per_patient_site_day(index, CTX), q.instances_per_series(index, CTX),
            q.series_per_study(index, CTX), q.mandatory_attributes(index, CTX), q.study_date_in_future(index, CTX),
            q.files_accounted({"2024-03-01|site-a": 1}, index, index.limit(0), CTX),
            q.images_linked_accounted(index, linked, index.limit(0), CTX),
            *q.linkage_fan_out(index, clinical, POLICY, CTX), q.placeholder_keys(index, clinical, CTX),
            q.images_per_clinical_key(index, CTX), q.unlinked_share(linked, CTX),
            q.study_before_birth(linked, POLICY, CTX)]}

    alone = figures()
    with q.shared_passes(POLICY):
        shared = figures()
    assert shared == alone
    assert sorted(c for c, (passed, _) in alone.items() if not passed) == [
        "files_accounted", "mandatory_attributes", "placeholder_keys", "records_per_image",
        "scans_per_patient_site_day", "study_before_birth", "study_date_in_future", "unlinked_share"]
    assert alone["scans_per_patient_site_day"][1]["distribution"]["max"] == 250
