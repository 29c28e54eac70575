"""What the UI's catalogue says of each asset, read from the definitions (no Spark, no server): descriptions
that render their placeholders, column descriptions with the clinical policy's privacy tags, code references to
real files, freshness policies on the site-day assets, the two groups and the named jobs."""

import re
from pathlib import Path

import pytest

from imaging.driver.config import read_yaml

PIPELINE = ("raw_image_index", "linked_patient_metadata", "anonymized_images")


@pytest.fixture(scope="module")
def graph(defs):
    return defs.resolve_asset_graph()


def _markdown_shows(text: str) -> bool:
    """No `<word>` the UI's Markdown would swallow as an HTML tag (outside code spans)."""
    plain = re.sub(r"`[^`]*`", "", text)
    return not re.search(r"(?<!\\)<[A-Za-z]", plain)


def test_descriptions_show_their_placeholders(graph):
    from dagster import AssetKey

    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.description and _markdown_shows(node.description), key
        schema = node.metadata.get("dagster/column_schema")
        for column in (schema.columns if schema else []):
            assert _markdown_shows(column.description or ""), (key, column.name)
    assert "\\<site\\>" in graph.get(AssetKey("landing_zone")).description


def test_columns_are_described_and_tagged_as_the_clinical_policy_says(graph):
    from dagster import AssetKey

    policy = read_yaml("clinical_policy.yaml")
    quasi = {q["column"] for q in policy["quasi_identifiers"]} | {q.get("released_as") for q in policy["quasi_identifiers"]}
    tags = {}
    for asset in (*PIPELINE, "published_cohort"):
        columns = graph.get(AssetKey(asset)).metadata["dagster/column_schema"].columns
        assert all(c.description for c in columns), asset
        tags[asset] = {c.name: (c.tags or {}).get("privacy") for c in columns}
    assert tags["raw_image_index"]["patient_id"] == "identifier" and "patient_id" in policy["identifiers"]
    assert tags["raw_image_index"]["study_instance_uid"] == "identifier"  # the hospital's UID, as read
    assert tags["anonymized_images"]["study_instance_uid"] is None       # a keyed UID, de-identified
    assert tags["anonymized_images"]["patient_pseudonym"] == "pseudonym"
    released = {c for c, t in tags["published_cohort"].items() if t == "quasi-identifier"}
    assert released and released <= quasi
    assert not any(t == "identifier" for t in tags["published_cohort"].values())


def test_code_references_freshness_groups_and_jobs(defs, graph):
    from dagster import AssetKey

    for asset in (*PIPELINE, "published_cohort"):
        node = graph.get(AssetKey(asset))
        refs = node.metadata["dagster/code_references"].code_references
        assert refs and all(Path(r.file_path).is_file() for r in refs), asset
        assert Path(refs[0].file_path).name == f"{asset}.py"
        assert (node.freshness_policy is None) == (asset == "published_cohort"), asset
        assert node.group_name == ("release" if asset == "published_cohort" else "imaging")
    jobs = {job.name: job for job in defs.jobs}
    # No PACS site in this session's environment: no pacs_landing, no PACS job or sensor (test_pacs has them).
    assert set(jobs) == {"site_day_pipeline", "publish"}
    assert not graph.has(AssetKey("pacs_landing"))
    assert {s.name for s in defs.sensors} == {"landing_sensor", "downstream_automation", "notify_run_failures",
                                               "notify_failed_checks"}
    assert {k.to_user_string() for k in defs.resolve_job_def("site_day_pipeline").asset_layer.executable_asset_keys} == set(PIPELINE)
