"""Per-site-day truth on the session world, where one run materialized the three image assets over 2 sites x 3
days: each partition's materialization carries its own counts and its own data version, derived from its own
inputs' versions; a changed landed site-day makes exactly its own partitions stale, downstream included; the
step's time is accounted in full."""

import os
from collections import defaultdict

import pyarrow.dataset as pads
from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter, DagsterEventType
from dagster._core.definitions.data_version import (CachingStaleStatusResolver, StaleStatus,
                                                    compute_logical_data_version, DataVersion)
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.loader import LoadingContextForTest

from assets.versions import input_version_over
from imaging.catalogue import LEDGER, LINKED, RAW_IMAGE_INDEX

from conftest import DATES, ROOT, SITES, observe_landing
from dagster_server import REPO

ASSETS = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
TABLES = {"raw_image_index": RAW_IMAGE_INDEX, "linked_patient_metadata": LINKED, "anonymized_images": LEDGER}
PARTITIONS = [f"{d}|{s}" for d in DATES for s in SITES]


def latest(instance, asset: str, partition: str):
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return records[0]


def rows_by_partition(defs, table) -> dict[str, int]:
    path = defs.resources["warehouse"].url(table)
    rows = pads.dataset(path, format="parquet", partitioning="hive").to_table(columns=["date", "site"]).to_pylist()
    counts = defaultdict(int)
    for row in rows:
        counts[f"{row['date']}|{row['site']}"] += 1
    return counts


def test_each_partition_carries_its_own_counts(warehouse, instance, defs):
    for asset in ASSETS:
        truth = rows_by_partition(defs, TABLES[asset])
        metadata = {p: {k: v.value for k, v in latest(instance, asset, p).asset_materialization.metadata.items()}
                    for p in PARTITIONS}
        for p, m in metadata.items():
            assert m["dagster/row_count"] == truth[p], (asset, p, m["dagster/row_count"], truth[p])
            assert "partitions" not in m
        # The world's run covered every site-day: its total is the sum of the partitions', never one of them, and it
        # is said once, on the run's last site-day (the part's totals are not repeated on each of its site-days).
        (run,) = [m for m in metadata.values() if "run/partitions" in m]
        assert run["run/partitions"] == len(PARTITIONS) and metadata[PARTITIONS[-1]] is run
        assert run["run/row_count"] == sum(m["dagster/row_count"] for m in metadata.values()) > max(
            m["dagster/row_count"] for m in metadata.values())
        assert sum(m["files_in"] for m in metadata.values()) == run["run/files_in"]
        assert sum(m["quarantined"] for m in metadata.values()) == run["run/quarantined"]


def test_each_partition_has_its_own_data_version_from_its_own_inputs(warehouse, instance, defs):
    graph = defs.resolve_asset_graph()
    for asset in ASSETS:
        deps = sorted(k.to_user_string() for k in graph.get(AssetKey(asset)).parent_keys)
        # anonymized_images also reads every site's opt-out list (the session world has none: the empty list's).
        assert ("landing_zone" in deps) and (asset == "raw_image_index" or len(set(deps) - {"optout_list"}) == 2), deps
        versions = set()
        for p in PARTITIONS:
            tags = latest(instance, asset, p).asset_materialization.tags
            inputs = {}
            for dep in deps:
                if dep == "optout_list":  # one input over every site's list, as recorded by the run
                    version = input_version_over(instance, dep, SITES, observed=True).version
                    assert tags[f"dagster/input_data_version/{dep}"] == version != "INITIAL", (asset, p)
                    inputs[AssetKey(dep)] = DataVersion(version)
                    continue
                observed = instance.get_latest_data_version_record(AssetKey(dep), dep == "landing_zone", p)
                want = observed.asset_observation if dep == "landing_zone" else observed.asset_materialization
                version = want.tags["dagster/data_version"]
                assert tags[f"dagster/input_data_version/{dep}"] == version, (asset, p, dep)
                assert version != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of nothing
                inputs[AssetKey(dep)] = DataVersion(version)
            expected = compute_logical_data_version(tags["dagster/code_version"], inputs).value
            assert tags["dagster/data_version"] == expected
            assert tags["dagster/code_version"] == graph.get(AssetKey(asset)).code_version
            assert (tags["dagster/partition/date"], tags["dagster/partition/site"]) == tuple(p.split("|"))
            versions.add(expected)
        assert len(versions) == len(PARTITIONS), f"{asset}: partitions share a data version"


def test_each_site_day_has_its_own_checks_recorded_after_its_materialization(warehouse, instance, defs):
    """Every per-run check of an image asset is recorded per site-day (Dagster's partitioned checks), pointing
    at that site-day's materialization and never before it; the table-wide checks stay one evaluation each."""
    from dagster import AssetCheckKey

    from assets.checks import TABLE_WIDE, check_specs

    for asset in ASSETS:
        specs = check_specs(asset)
        assert specs and not any(s.name in TABLE_WIDE.get(asset, ()) for s in specs)
        for spec in specs:
            key = AssetCheckKey(AssetKey(asset), spec.name)
            infos = {i.partition_key: i for i in instance.event_log_storage.get_asset_check_partition_info([key])}
            assert set(PARTITIONS) <= set(infos), (asset, spec.name, sorted(infos))
            for p in PARTITIONS:
                (record,) = instance.event_log_storage.get_asset_check_execution_history(
                    key, limit=1, partition_filter=PartitionKeyFilter(key=p))
                evaluation = record.event.dagster_event.event_specific_data
                materialized = latest(instance, asset, p)
                assert evaluation.partition == p and infos[p].is_current, (asset, spec.name, p)
                assert evaluation.target_materialization_data.storage_id == materialized.storage_id
                assert record.event.timestamp >= materialized.timestamp
                meta = {k: v.value for k, v in evaluation.metadata.items()}
                assert meta["run_site_days"] >= 1  # its partition is the event's own (`evaluation.partition`)


def test_each_materialization_has_its_quarantine_as_one_table(warehouse, instance):
    for asset in ASSETS:
        for p in PARTITIONS:
            m = latest(instance, asset, p).asset_materialization.metadata
            assert not any(k.startswith("quarantined/") for k in m), sorted(m)
            rows = [(r.data["reason"], r.data["files"]) for r in m["quarantine"].value.records]
            assert sum(files for _, files in rows) == m["quarantined"].value, (asset, p, rows)
            assert len({reason for reason, _ in rows}) == len(rows)


def _stale(instance, defs) -> dict[str, set[str]]:
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    return {asset: {p for p in PARTITIONS if resolver.get_status(AssetKey(asset), p) == StaleStatus.STALE}
            for asset in ASSETS}


def test_a_changed_landed_site_day_makes_exactly_its_partitions_stale(warehouse, instance, defs):
    assert _stale(instance, defs) == {a: set() for a in ASSETS}, "fresh after the world's run"
    date, site = DATES[1], SITES[0]
    victim = next(p for p in sorted((ROOT / "landing" / "images" / site / date).rglob("*")) if p.is_file())
    before = victim.stat()
    try:
        os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # touched: a new listing
        observe_landing(defs, instance)
        assert _stale(instance, defs) == {a: {f"{date}|{site}"} for a in ASSETS}
    finally:
        os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
        observe_landing(defs, instance)
    assert _stale(instance, defs) == {a: set() for a in ASSETS}, "back to the version the partitions were made from"


def test_the_step_time_is_accounted_in_full(warehouse, instance):
    for asset in ASSETS:
        record = latest(instance, asset, PARTITIONS[-1])  # the run's times: on its last site-day
        m = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        stages = {k: v for k, v in m.items() if k.startswith("run/seconds/")}
        assert {"run/seconds/spark_start", "run/seconds/checks", "run/seconds/count", "run/seconds/other"} <= set(stages)
        assert abs(sum(stages.values()) - m["run/seconds"]) < 0.01
        events = {e.event_log_entry.dagster_event.event_type: e.event_log_entry.timestamp
                  for e in instance.get_records_for_run(record.run_id).records
                  if e.event_log_entry.step_key == asset and e.event_log_entry.dagster_event is not None}
        step = events[DagsterEventType.STEP_SUCCESS] - events[DagsterEventType.STEP_START]
        # What the stages do not cover is Dagster's own work around the body (events, outputs): under a
        # second worker's load it stretched to 1.9 s of a 15.6 s step, so the bound grows with the step.
        assert abs(step - m["run/seconds"]) < max(1.0, 0.15 * step), (asset, step, m["run/seconds"])


def test_each_cohort_is_its_own_partition_with_its_review(warehouse, instance):
    """published_cohort is partitioned by cohort: each cohort's materializations carry its own state, release id,
    counts and approvals, and its review as Markdown whose site-days link to their pages in the UI (relative
    Dagster asset-partition URLs); folders are warehouse-relative paths, never links to the server's files."""
    import re
    import urllib.parse

    from assets.partitions import COHORTS

    cohorts = COHORTS.get_partition_keys()
    assert cohorts == sorted(p.stem.replace("_", "-") for p in (REPO / "platform" / "cohorts").glob("*.yaml"))
    for cohort in cohorts:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("published_cohort"), asset_partitions=[cohort]), limit=10).records
        runs = [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in reversed(records)]
        assert [m["state"] for m in runs] == ["held", "publish"], (cohort, [m["state"] for m in runs])
        held, published = runs
        assert held["release_id"] == published["release_id"] and len(published["release_id"]) == 64
        assert held["approvals"] == 0 and published["approvals"] == published["approvals_required"] == 2
        assert published["verdict"] == "VERIFIED" and published["dagster/row_count"] == published["images"] > 0
        assert published["path"] == f"deidentified/cohorts/{cohort}/v1"
        assert held["path"].startswith(f"identifiable/held/{cohort}/")
        assert not any(isinstance(v, str) and ("file:" in v or str(warehouse) in v) for m in runs for v in m.values())
        review = published["review"]
        assert "**Verdict: VERIFIED**" in review and "### Site-days read" in review
        links = re.findall(r"\[([^\]]+)\]\((/assets/anonymized_images\?view=partitions&partition=[^)]+)\)", review)
        assert links and len(links) == published["site_days_read"]
        for shown, url in links:
            shown = shown.replace("\\|", "|")  # a table cell's pipe is escaped
            assert urllib.parse.unquote(url.rsplit("=", 1)[1]) == shown and shown in PARTITIONS
        assert records[0].asset_materialization.tags["dagster/data_version"] == published["release_id"]
        # Its own checks, on its own partition, after its materialization.
        for check in ("k_anonymity", "release_verified", "release_checksums"):
            (record,) = instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(AssetKey("published_cohort"), check), limit=1, partition_filter=PartitionKeyFilter(key=cohort))
            assert record.event.dagster_event.event_specific_data.passed, (cohort, check)
            assert record.event.timestamp >= records[0].timestamp
