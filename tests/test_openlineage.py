"""Column lineage derived from policy and profile; OpenLineage events that openlineage-python reads back."""

import json
import uuid
from pathlib import Path

import pytest
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated.column_lineage_dataset import (ColumnLineageDatasetFacet, Fields, InputField,
                                                                 Transformation)
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.job_type_job import JobTypeJobFacet
from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
from openlineage.client.serde import Serde

from imaging.catalogue import manifest
from imaging.catalogue import LINKED as LINKED_TABLE
from imaging.deid import RESEARCH_DEFAULT
from imaging.driver.config import read_yaml
from imaging.governance.code_version import code_version, module_files
from imaging.governance.disclosure import DisclosurePolicy
from imaging.governance.lineage import (LINKED, MANIFEST, PSEUDONYMISED, RELEASE, KEPT, column_lineage,
                                        dagster_column_deps, release_columns)
from imaging.governance.lineage_events import EVENTS_FILE, dataset_name
from imaging.steps.clinical import ClinicalPolicy
from release_helpers import RUN_IDS, build_release, make_hospital


@pytest.fixture(scope="module")
def spec():
    return read_yaml("clinical_policy.yaml")


def _lineage(spec, options=RESEARCH_DEFAULT):
    return column_lineage(ClinicalPolicy.from_dict(spec), options, DisclosurePolicy.from_dict(spec))


def _facet(raw):
    if "fields" in raw and "dataset" in raw:  # column lineage
        return ColumnLineageDatasetFacet(
            fields={name: Fields(inputFields=[InputField(namespace=i["namespace"], name=i["name"], field=i["field"],
                                                         transformations=[Transformation(**t)
                                                                          for t in i["transformations"]])
                                              for i in f["inputFields"]],
                                 transformationDescription=f.get("transformationDescription"),
                                 transformationType=f.get("transformationType"))
                    for name, f in raw["fields"].items()},
            producer=raw["_producer"])
    if "fields" in raw:
        return SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(**f) for f in raw["fields"]],
                                  producer=raw["_producer"])
    if "datasetVersion" in raw:
        return DatasetVersionDatasetFacet(datasetVersion=raw["datasetVersion"], producer=raw["_producer"])
    return JobTypeJobFacet(**{k: v for k, v in raw.items() if not k.startswith("_")}, producer=raw["_producer"])


def _event(raw) -> RunEvent:
    """Rebuild a RunEvent from its JSON with openlineage-python's classes (their validators run)."""
    datasets = lambda cls, items: [cls(namespace=d["namespace"], name=d["name"],  # noqa: E731
                                       facets={k: _facet(v) for k, v in d.get("facets", {}).items()}) for d in items]
    return RunEvent(eventType=RunState(raw["eventType"]), eventTime=raw["eventTime"], producer=raw["producer"],
                    run=Run(runId=raw["run"]["runId"]),
                    job=Job(namespace=raw["job"]["namespace"], name=raw["job"]["name"],
                            facets={k: _facet(v) for k, v in raw["job"]["facets"].items()}),
                    inputs=datasets(InputDataset, raw["inputs"]), outputs=datasets(OutputDataset, raw["outputs"]))


def test_every_manifest_column_has_lineage_and_dagster_deps(spec):
    lineage = _lineage(spec)
    policy = ClinicalPolicy.from_dict(spec)
    deps = dagster_column_deps(lineage, MANIFEST)
    assert set(deps) == set(manifest(policy).columns)
    assert deps["patient_pseudonym"] == [("linked_patient_metadata", "patient_id"),
                                         ("linked_patient_metadata", "issuer_of_patient_id")]
    assert ("linked_patient_metadata", "clinical.dob") in deps["age_at_scan"]
    release = dagster_column_deps(lineage, RELEASE)
    assert "age_at_scan" not in release and release["age_band"] == [("anonymized_images", "age_at_scan")]
    assert [c.name for c in release_columns(lineage, DisclosurePolicy.from_dict(spec))] == list(release)
    dropped = {s.column for e in lineage if e.column is None for s in e.sources}
    assert {"clinical.notes", "clinical.nhs_number", "source_path", "date", "site"} <= dropped


def test_lineage_follows_the_options_and_the_policy(spec):
    default = {e.column: e for e in _lineage(spec) if e.table == MANIFEST}
    assert default["study_instance_uid"].transform == PSEUDONYMISED and default["study_date"].transform == "shifted"
    retained = {e.column: e for e in _lineage(spec, ["retain_uids", "retain_longitudinal_full_dates"])
                if e.table == MANIFEST}
    assert retained["study_instance_uid"].transform == KEPT and not retained["study_instance_uid"].masked
    assert retained["study_date"].transform == KEPT
    basic = {e.column: e for e in _lineage(spec, []) if e.table == MANIFEST}
    assert basic["study_date"].transform == "dropped"
    changed = {**spec, "columns": {**spec["columns"], "iop_mmhg": {"aliases": ["iop"], "action": "drop"}}}
    assert "iop_mmhg" not in {e.column for e in _lineage(changed)}


def test_code_version_is_derived_from_files_options_and_policy(spec, tmp_path):
    files = module_files("imaging.steps.anonymize", "imaging.deid")
    assert any(f.name == "ps3.15-table-e.1-1.json" for f in files)
    base = code_version(files, RESEARCH_DEFAULT, spec)
    assert base == code_version(files, list(reversed(RESEARCH_DEFAULT)), spec)
    assert base != code_version(files, ["retain_uids"], spec)
    assert base != code_version(files, RESEARCH_DEFAULT, {**spec, "disclosure": {"min_k": 11}})
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    before = code_version([module], (), spec, root=tmp_path)
    module.write_text("x = 2\n")
    assert code_version([module], (), spec, root=tmp_path) != before


def test_openlineage_file_parses_and_names_inputs_outputs_and_masked_columns(tmp_path):
    hospital = make_hospital(tmp_path)
    built = build_release(hospital, tmp_path / "release")
    lines = Path(built.root, EVENTS_FILE).read_text().splitlines()
    events = [_event(json.loads(line)) for line in lines]
    # Serialising the rebuilt events gives back the very lines written: nothing lost or invented.
    assert [Serde.to_json(e) for e in events] == lines
    assert len(events) == 3 and all(e.eventType == RunState.COMPLETE for e in events)
    anonymize, release = events[:2], events[2]
    assert {e.run.runId for e in anonymize} == set(RUN_IDS.values())
    assert uuid.UUID(release.run.runId).version == 8
    assert [d.name for d in release.inputs] == ["deidentified/anonymized_images/manifest"]
    assert [d.name for d in release.outputs] == ["deidentified/cohorts/small-test/v1"]
    assert release.outputs[0].facets["version"].datasetVersion == built.data_digest
    assert all(e.inputs[0].name == dataset_name(LINKED) == LINKED_TABLE.path for e in anonymize)
    manifest = anonymize[0].outputs[0].facets["columnLineage"].fields
    masking = lambda fields, c: {t.masking for i in fields[c].inputFields for t in i.transformations}  # noqa: E731
    for column in ("patient_pseudonym", "sop_instance_uid", "study_date", "age_at_scan", "episode", "sex"):
        assert masking(manifest, column) == {True}, column
        assert manifest[column].transformationType == "MASKED"
    for column in ("modality", "rows", "diagnosis_code"):
        assert masking(manifest, column) == {False}, column
    assert manifest["age_at_scan"].inputFields[0].name == LINKED_TABLE.path
    released = release.outputs[0].facets["columnLineage"].fields
    assert masking(released, "age_band") == {True} and masking(released, "modality") == {False}
    assert "age_at_scan" not in released and "notes" not in manifest
