"""The step contracts, checked on the sources: executors through the DataFrame API only (so a Spark
Connect session can run them), no positional field access in assets, one catalogue for tables."""

import ast
import re
from pathlib import Path

import pyarrow as pa
import pytest

from imaging import catalogue
from imaging.records import (IndexedImage, LinkedImage, PublishedImage, Quarantined, from_row, outcome_schema,
                             schema_of, to_batch)

REPO = Path(__file__).resolve().parents[1]


def sources(*folders):
    return [p for folder in folders for p in sorted((REPO / folder).rglob("*.py"))]


@pytest.mark.parametrize("path", sources("assets", "imaging"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_rdd_api_in_assets_or_the_core(path):
    text = path.read_text()
    assert not re.search(r"\.rdd\b|\bparallelize\b|\bsparkContext\b|\bmapPartitions\b", text)


@pytest.mark.parametrize("path", sources("assets"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_positional_record_access_in_assets(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript):
            index = node.slice
            assert not (isinstance(index, ast.Constant) and isinstance(index.value, int)), \
                f"{path.name}:{node.lineno} reads a field by position"
            assert not isinstance(index, ast.Slice), f"{path.name}:{node.lineno} slices a record"


@pytest.mark.parametrize("path", sources("assets"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_asset_imports_another_asset(path):
    # partitions, quality, checks, expectations, governance, held_files, linkage, clinical_read, optouts, runner,
    # run_tags and versions are shared helpers, not assets.
    assets = {p.stem for p in sources("assets")} - {"__init__", "partitions", "quality", "checks", "expectations",
                                                    "governance", "held_files", "linkage", "clinical_read",
                                                    "optouts", "runner",
                                                    "run_tags", "versions"}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("assets."):
            assert node.module.split(".")[1] not in assets, f"{path.name} imports {node.module}"


@pytest.mark.parametrize("path", sources("assets"), ids=lambda p: str(p.relative_to(REPO)))
def test_assets_import_nothing_from_automation(path):
    # automation/ (jobs, sensors, automation conditions) is built on the assets, never the other way round.
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        assert not [n for n in names if n.split(".")[0] == "automation"], f"{path.name} imports {names}"


@pytest.mark.parametrize("path", sources("assets", "resources", "tests") + [REPO / "imaging/governance/report.py"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_table_paths_are_spelled_only_in_the_catalogue(path):
    asset_keys = {"raw_image_index", "linked_patient_metadata", "anonymized_images", "published_cohort"}
    spelled = {t.path for t in catalogue.TABLES} | {t.name for t in catalogue.TABLES if t.name not in asset_keys}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value not in spelled, f"{path.name}:{node.lineno} spells table {node.value!r}"


def test_a_record_round_trips_through_an_arrow_batch():
    image = LinkedImage(**{f: None for f in schema_of(IndexedImage).names} | {
        "date": "2024-03-01", "site": "north", "source_path": "/l/x.dcm", "rows": 7},
        has_clinical_record=True, clinical={"sex": "F", "dob": "1950-01-01"})
    batch = to_batch([image], schema_of(LinkedImage))
    assert batch.schema.field("rows").type == pa.int32()
    assert from_row(LinkedImage, batch.to_pylist()[0]) == image


def test_an_outcome_batch_holds_both_kinds_and_tells_them_apart_by_reason():
    schema = outcome_schema(IndexedImage)
    held = Quarantined(date="2024-03-01", site="north", source_path="/l/bad", size_bytes=3, sha256=None,
                       reason="empty file")
    rows = to_batch([held], schema).to_pylist()
    assert rows[0]["reason"] == "empty file" and rows[0]["sop_instance_uid"] is None
    assert all(f.nullable for f in schema)


def test_the_manifest_and_ledger_are_projections_of_the_published_record():
    from imaging.driver.platform_files import load_clinical_policy

    table = catalogue.manifest(load_clinical_policy())
    fields = set(schema_of(PublishedImage).names)
    assert {table.source_of(c) for c in table.columns} - set(table.extra.names) <= fields
    assert table.columns[-1] == "batch" and table.source_of("sha256") == "output_sha256"
    assert set(catalogue.LEDGER.columns) - set(catalogue.LEDGER.extra.names) <= fields
