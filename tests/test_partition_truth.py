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
    at that site-day's materialization and never before it; the table-wide checks stay one evaluation each.
    The spec's description names its severity and threshold."""
    from dagster import AssetCheckKey

    from assets.checks import RULES, TABLE_WIDE, check_specs

    for asset in ASSETS:
        specs = check_specs(asset)
        assert specs and not any(s.name in TABLE_WIDE.get(asset, ()) for s in specs)
        for spec in specs:
            key = AssetCheckKey(AssetKey(asset), spec.name)
            rule = RULES.rule(asset, spec.name)
            assert spec.description.startswith(f"[{rule.severity}] {rule.description}")
            assert rule.maximum is None or spec.description.endswith(f"at most {rule.maximum:g})")
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
                assert "partitions" not in meta and "description" not in meta  # the event's own, and the spec's


def test_each_materialization_has_its_quarantine_as_one_table(warehouse, instance):
    held = set()
    for asset in ASSETS:
        for p in PARTITIONS:
            m = latest(instance, asset, p).asset_materialization.metadata
            assert not any(k.startswith("quarantined/") for k in m), sorted(m)
            if not m["quarantined"].value:
                assert "quarantine" not in m, (asset, p)  # a clean site-day repeats no table of zeros
                continue
            held.add(asset)
            rows = [(r.data["reason"], r.data["files"]) for r in m["quarantine"].value.records]
            assert sum(files for _, files in rows) == m["quarantined"].value, (asset, p, rows)
            assert len({reason for reason, _ in rows}) == len(rows)
    assert "raw_image_index" in held, "the session world quarantines broken files in every site-day"


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


def test_each_site_day_lists_its_quarantined_files_by_token_and_the_command_resolves_them(warehouse, instance,
                                                                                         capsys):
    """A site-day's page lists its quarantined files (a keyed token, size, sha256, reason, the step), never a path;
    `imaging-quarantine <date|site>` (an operator, the identifiable zone) resolves each token to its landing path."""
    import re

    from conftest import ROOT as root
    from imaging.quarantine import main, read_token_key

    listed = 0
    for asset in ASSETS:
        for p in PARTITIONS:
            m = latest(instance, asset, p).asset_materialization.metadata
            if not m["quarantined"].value:
                assert "quarantined_files" not in m, (asset, p)  # clean site-days carry no list
                continue
            rows = [r.data for r in m["quarantined_files"].value.records]
            assert 0 < len(rows) <= 100 and len(rows) <= m["quarantined"].value, (asset, p)
            text = repr(rows)
            assert "/" not in text.replace("quarantine/", "") and str(root) not in text, rows
            for row in rows:
                assert re.fullmatch(r"[0-9a-f]{16}", row["token"]) and re.fullmatch(r"[0-9a-f]{64}|None",
                                                                                    str(row["sha256"]))
            capsys.readouterr()
            assert main([p, "--warehouse", str(warehouse)]) == 0
            out = capsys.readouterr().out.splitlines()
            assert out[0].startswith("# IDENTIFIABLE: landing paths")
            paths = {line.split("\t")[0]: line.split("\t")[-1] for line in out[1:]}
            for row in rows:  # every token on the page is a file of this site-day, with its path
                assert row["token"] in paths and paths[row["token"]].startswith(str(root)), (row, paths)
            listed += len(rows)
    assert listed, "the session world quarantines broken files in every site-day"
    assert read_token_key(str(warehouse)) is not None
    token = next(iter(paths))
    capsys.readouterr()
    assert main([token, "--warehouse", str(warehouse)]) == 0  # one token, from the UI, to its file
    assert capsys.readouterr().out.splitlines()[1].split("\t")[-1] == paths[token]


def test_a_rerun_that_changes_nothing_leaves_every_cohort_synced(warehouse, instance, defs):
    """A cohort partition is unsynced only when a site-day it read has a new data version: re-materializing a
    site-day with the same inputs gives it the same version, and every cohort stays synced."""
    from assets.partitions import COHORTS
    from conftest import run_assets

    def unsynced() -> set[str]:
        resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
        return {c for c in COHORTS.get_partition_keys()
                if resolver.get_status(AssetKey("published_cohort"), c) != StaleStatus.FRESH}

    assert unsynced() == set(), "synced after the world's publication"
    again = f"{DATES[0]}|{SITES[1]}"  # a site-day no other test of this file changes
    before = latest(instance, "anonymized_images", again)
    run_assets(defs, ["anonymized_images"], (again, again), instance=instance)
    after = latest(instance, "anonymized_images", again)
    assert after.storage_id > before.storage_id
    assert after.asset_materialization.tags["dagster/data_version"] == \
        before.asset_materialization.tags["dagster/data_version"]
    assert unsynced() == set()


def test_each_cohort_version_has_one_opt_out_table_with_the_same_numbers_everywhere(warehouse, instance):
    """The opt-out table of a cohort version: the same rows and numbers in the metadata (`optout_table`), the
    Markdown review and the HTML review the run wrote (and the UI links, `review_html`)."""
    import html
    import re

    from assets.partitions import COHORTS

    for cohort in COHORTS.get_partition_keys():
        (record,) = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("published_cohort"), asset_partitions=[cohort]), limit=1).records
        m = record.asset_materialization.metadata
        rows = [(r.data["what"], r.data["images"], r.data["patients"]) for r in m["optout_table"].value.records]
        assert len(rows) == 4 and rows[1][1:] == (m["optout_excluded"].value["images"],
                                                  m["optout_excluded"].value["patients"])
        cell = lambda v: "-" if v is None else str(v)  # noqa: E731
        markdown = m["review"].value
        for what, images, patients in rows:
            assert f"| {what} | {cell(images)} | {cell(patients)} |" in markdown, (cohort, what)
        link = m["review_html"].value
        assert re.fullmatch(rf"/reviews/{cohort}-[0-9a-f]{{64}}\.html", link) and f"]({link})" in markdown
        page = html.unescape((warehouse / "identifiable" / "reviews" / link.rsplit("/", 1)[1]).read_text())
        table = page.split('id="optout-table"', 1)[1].split("</table>", 1)[0]
        shown = [re.findall(r"<td>(.*?)</td>", row) for row in table.split("<tr>")[2:]]
        assert shown == [[what, cell(images), cell(patients)] for what, images, patients in rows], (cohort, shown)
