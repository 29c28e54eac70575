"""A site-day with nothing to do is answered from the warehouse alone: no Spark session for the three
image assets, a result for every check spec (the figures an empty site-day has, the same as Spark's on
empty frames), and the run still replaces whatever its partitions held, through the commit journal."""

import os

import pyarrow as pa
import pytest
import pyarrow.parquet as pq
from dagster import (AssetCheckKey, AssetKey, AssetSelection, DagsterInstance, Definitions,
                     define_asset_job)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from imaging.catalogue import (ANONYMIZE_QUARANTINE, ANONYMIZED_FILES, CLINICAL_QUARANTINE, INDEX_QUARANTINE,
                               LINK_QUARANTINE, LEDGER, LINKED, RAW_IMAGE_INDEX, manifest, partition_dir)
from imaging.records import SiteDay

from conftest import ROOT, SITES

EMPTY = SiteDay("2024-03-09", SITES[0])  # no landing folder and no extract for this day (conftest's DATES end 03-03)
KEY = f"{EMPTY.date}|{EMPTY.site}"
ASSETS = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]
WAREHOUSE = ROOT / "warehouse"


@pytest.fixture
def sessions_made(monkeypatch):
    """Each Spark session a SparkResource makes (or joins) while the test runs, by its type's name:
    how a test sees that a run needed no Spark at all."""
    import dagster_pyspark.resources

    made: list[str] = []
    make = dagster_pyspark.resources.spark_session_from_config

    def counting(*args, **kwargs):
        session = make(*args, **kwargs)
        made.append(type(session).__name__)
        return session

    # SparkResource.spark_session imports it from this module when it makes its session.
    monkeypatch.setattr(dagster_pyspark.resources, "spark_session_from_config", counting)
    return made


def _run_with_checks(defs, instance, must_succeed=True):
    """The three image assets over the empty site-day, with their check specs and the table-wide
    checks, as `dagster asset materialize --select` plans them."""
    job = define_asset_job("empty_day", selection=AssetSelection.assets(*ASSETS))
    resolved = Definitions(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources,
                           jobs=[job], executor=defs.executor)
    result = resolved.resolve_job_def("empty_day").execute_in_process(instance=instance, partition_key=KEY,
                                                                      raise_on_error=must_succeed)
    assert result.success or not must_succeed
    return result


def _plant(path, column="source_path"):
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: ["left by an earlier run"]}), path / "part-00000.parquet")


def _checks_by_name(result):
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {(ev.asset_key.path[-1], ev.check_name): ev for ev in evaluations}


def test_empty_site_day_starts_no_spark_and_reports_every_check(defs, sessions_made):
    from assets.checks import TABLE_WIDE, check_specs

    instance = DagsterInstance.ephemeral()
    result = _run_with_checks(defs, instance)
    assert sessions_made == [], "an empty site-day made a Spark session"

    metadata = {m.asset_key.path[-1]: {k: v.value for k, v in m.metadata.items()}
                for m in (e.materialization for e in result.get_asset_materialization_events())}
    assert set(metadata) == set(ASSETS)
    assert metadata["raw_image_index"]["files_in"] == 0 and metadata["raw_image_index"]["run/spark_tasks"] == 0
    assert metadata["linked_patient_metadata"]["dagster/row_count"] == 0
    assert metadata["anonymized_images"]["files_in"] == 0 and metadata["anonymized_images"]["run/spark_tasks"] == 0
    assert all(m["table_unchanged"] and m["quality_checks_failed"] == [] for m in metadata.values())
    # The key's fingerprint, as on the Spark path (assets record it on both), never the key.
    from imaging.pseudonym import key_fingerprint

    fingerprint = key_fingerprint(os.environ["IMAGING_PSEUDONYM_KEY"])
    assert all(m["pseudonym_key_fingerprint"] == fingerprint for m in metadata.values())
    assert os.environ["IMAGING_PSEUDONYM_KEY"] not in repr(metadata)

    # Every check spec of every asset has a result, each passed and covering the site-day.
    checks = _checks_by_name(result)
    expected = {(asset, spec.name) for asset in ASSETS for spec in check_specs(asset)}
    assert set(checks) == expected
    assert all(ev.passed for ev in checks.values())
    assert all(ev.partition == KEY for ev in checks.values())
    accounted = {k: v.value for k, v in checks[("raw_image_index", "files_accounted")].metadata.items()}
    assert (accounted["files_listed"], accounted["instances_indexed"], accounted["files_quarantined"],
            accounted["observed"]) == (0, 0, 0, 0)
    accounted = {k: v.value for k, v in checks[("anonymized_images", "images_accounted")].metadata.items()}
    assert (accounted["images_linked"], accounted["images_published"], accounted["images_quarantined"]) == (0, 0, 0)

    # The table-wide checks ran (they were planned) but had nothing new to judge: no evaluation.
    for asset, names in TABLE_WIDE.items():
        for name in names:
            records = instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(AssetKey(asset), name), limit=5)
            assert [r.status for r in records] == [AssetCheckExecutionRecordStatus.PLANNED], (asset, name)


def test_empty_site_day_empties_stale_partitions_through_the_journal(defs, sessions_made):
    """Partitions an earlier run filled are emptied by the empty run, still without Spark; every
    folder and table of the site-day is replaced, and nothing is left staged or journaled."""
    from imaging.pseudonym import Pseudonymizer
    from imaging.steps.anonymize import batch_name
    from imaging.driver.platform_files import load_clinical_policy

    batch = batch_name(Pseudonymizer(os.environ["IMAGING_PSEUDONYM_KEY"]), EMPTY.date, EMPTY.site)
    stale = [WAREHOUSE / t.path / partition_dir(t, EMPTY)
             for t in (RAW_IMAGE_INDEX, INDEX_QUARANTINE, LINKED, CLINICAL_QUARANTINE, LEDGER, ANONYMIZE_QUARANTINE)]
    table = manifest(load_clinical_policy())
    stale.append(WAREHOUSE / table.path / partition_dir(table, {"batch": batch}))
    for folder in stale:
        _plant(folder)
    files = WAREHOUSE / ANONYMIZED_FILES.path / batch
    files.mkdir(parents=True)
    (files / "left-by-an-earlier-run.dcm").write_bytes(b"stale")

    # The three assets alone (without the table-wide checks, which do start Spark after a run that
    # emptied rows: the second half of this test).
    assets_only = Definitions(assets=defs.assets, resources=defs.resources, executor=defs.executor,
                              jobs=[define_asset_job("assets_only", selection=AssetSelection.assets(*ASSETS))])
    result = assets_only.resolve_job_def("assets_only").execute_in_process(instance=DagsterInstance.ephemeral(),
                                                                           partition_key=KEY)
    assert result.success
    assert sessions_made == [], "an empty site-day made a Spark session"

    metadata = {m.asset_key.path[-1]: {k: v.value for k, v in m.metadata.items()}
                for m in (e.materialization for e in result.get_asset_materialization_events())}
    assert not any(m["table_unchanged"] for m in metadata.values())  # each emptied something
    for folder in [*stale, files]:
        assert not folder.exists(), folder
    assert not list(WAREHOUSE.glob("*/_staging/*")) and not list(WAREHOUSE.glob("*/_journal/*"))
    assert all(ev.passed for ev in _checks_by_name(result).values())

    # Emptying rows changes the tables the table-wide checks read: then they are evaluated (on Spark),
    # not skipped.
    from assets.checks import TABLE_WIDE

    _plant(stale[0])  # raw_image_index
    instance = DagsterInstance.ephemeral()
    # Not required to succeed: other tests may leave the shared warehouse's table-wide checks failing,
    # and a blocking failure then stops the downstream assets (and their table-wide checks).
    result = _run_with_checks(defs, instance, must_succeed=False)
    assert not stale[0].exists()
    materialized = {e.materialization.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    for asset, names in TABLE_WIDE.items():
        if asset not in materialized:
            continue
        for name in names:
            records = instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(AssetKey(asset), name), limit=5)
            assert [r.status for r in records] != [AssetCheckExecutionRecordStatus.PLANNED], (asset, name)


# The link step's eye observations (assets/linkage.py eye_as_of).
OBSERVATIONS = ("_origin string, patient_id string, eye string, observed_at timestamp_ntz, _tie int, "
                "clinical map<string,string>")


def test_empty_day_outcomes_equal_sparks_on_empty_frames():
    """The declared empty-day figures (imaging/steps/declared.py) are what `assets/quality.py` computes on
    Spark over frames with no row, check for check and in the declared order."""
    from assets import quality as q
    from imaging.steps.declared import empty_outcomes, step_of
    from imaging.quality.gate import covering
    from imaging.records import ClinicalRow, schema_of
    from imaging.driver.platform_files import load_clinical_policy
    from resources.deid import Deidentifier
    from resources.spark import SparkResource, spark_config, spark_schema
    from assets.checks import quality_context
    from assets.partitions import SETTINGS

    session = SparkResource(spark_config=spark_config(os.environ["IMAGING_SPARK_MASTER"])).spark_session
    policy = load_clinical_policy()
    ctx = quality_context(Deidentifier(pseudonym_key=os.environ["IMAGING_PSEUDONYM_KEY"],
                                       options=list(SETTINGS.deid_options), issuers=SETTINGS.issuers,
                                       pixel_text=SETTINGS.pixel_text))

    def empty(schema):
        return session.createDataFrame([], spark_schema(schema))

    index, held = empty(RAW_IMAGE_INDEX.schema), empty(INDEX_QUARANTINE.schema)
    clinical, linked = empty(schema_of(ClinicalRow)), empty(LINKED.schema)
    published, quarantined = empty(manifest(policy).schema), empty(ANONYMIZE_QUARANTINE.schema)
    on_spark = {
        q.RAW: [q.scans_per_patient_site_day(index, ctx), q.instances_per_series(index, ctx),
                q.series_per_study(index, ctx), q.mandatory_attributes(index, ctx), q.study_date_in_future(index, ctx),
                q.files_accounted({}, index, held, ctx), *q.column_rules(index, q.RAW, ctx)],
        q.LINKED: [q.images_linked_accounted(index, linked, empty(LINK_QUARANTINE.schema), ctx),
                   *q.linkage_fan_out(index, clinical, policy, ctx), q.placeholder_keys(index, clinical, ctx),
                   q.images_per_clinical_key(index, ctx), q.unlinked_share(linked, ctx),
                   q.study_before_birth(linked, policy, ctx),
                   q.eye_observations_per_patient_day(index, session.createDataFrame([], OBSERVATIONS), [], ctx),
                   q.stale_eye_observations(linked, ctx), *q.column_rules(linked, q.LINKED, ctx)],
        q.ANONYMIZED: [q.images_accounted(linked, published, quarantined, {KEY: "batch"}, ctx),
                       q.manifest_files(published, str(WAREHOUSE / "deidentified"), ctx),
                       *q.column_rules(published, q.ANONYMIZED, ctx)],
    }
    for asset, outcomes in on_spark.items():
        expected = [(o.check, o.passed, o.as_metadata()) for o in (covering(o, [KEY]) for o in outcomes)]
        shortcut = [(o.check, o.passed, o.as_metadata()) for o in (covering(o, [KEY])
                                                                   for o in empty_outcomes(step_of(asset), ctx))]
        assert shortcut == expected, asset
