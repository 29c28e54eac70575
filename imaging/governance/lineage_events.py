"""OpenLineage events of a release, with `openlineage-python`'s event classes, as JSON lines.

Two jobs made a release: `anonymized_images` (one event per run that wrote an input partition:
`linked_patient_metadata` in, and the clinical source reads its images were linked from, versioned, the
de-identified manifest out) and `published_cohort` (the manifest
in, the release out). Each output carries the column-lineage facet from `imaging.governance.lineage`, with
`masking` set on every transformation that leaves no original value (keyed pseudonyms, shifted
dates, bands, derived values), and a schema facet.

The events are part of the content-addressed bundle, so they are a function of the release's inputs
only: an anonymisation event is named and timed by its Dagster run (id and materialization time);
the release event's run id is a name-based UUID of the data digest and code versions, and its time
is the newest input's, so an identical rebuild writes identical bytes. The Dagster run that built,
held or published the bundle is recorded by the approval store and Dagster's event log instead.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Iterable

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated.column_lineage_dataset import (ColumnLineageDatasetFacet, Fields, InputField,
                                                                 Transformation)
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.documentation_dataset import DocumentationDatasetFacet
from openlineage.client.generated.job_type_job import JobTypeJobFacet
from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
from openlineage.client.serde import Serde

from imaging.catalogue import COHORTS, LINKED as LINKED_TABLE
from imaging.governance.datacard import ClinicalSourceRead, CodeVersion, InputPartition
from imaging.governance.lineage import KEPT, LINKED, MANIFEST, RELEASE, ColumnLineage

NAMESPACE = "eye-imaging-platform"
PRODUCER = "urn:eye-imaging-platform:imaging.governance.lineage_events"
EVENTS_FILE = "lineage/openlineage.jsonl"


def dataset_name(table: str, cohort: str | None = None, version: int | None = None) -> str:
    """Location-independent dataset names: the zone and table, never a machine path."""
    if table == LINKED:
        return LINKED_TABLE.path
    if table == MANIFEST:
        return "deidentified/anonymized_images/manifest"
    if table == RELEASE:
        return f"{COHORTS.path}/{cohort}/v{version}"
    raise ValueError(f"unknown table {table!r}")


def column_lineage_facet(lineage: Iterable[ColumnLineage], table: str) -> ColumnLineageDatasetFacet:
    fields = {}
    for entry in lineage:
        if entry.table != table or entry.column is None:
            continue
        kept = entry.transform == KEPT
        transformation = Transformation(type="DIRECT", subtype="IDENTITY" if kept else "TRANSFORMATION",
                                        description=f"{entry.transform}: {entry.description}", masking=entry.masked)
        fields[entry.column] = Fields(
            inputFields=[InputField(namespace=NAMESPACE, name=dataset_name(s.table), field=s.column,
                                    transformations=[transformation]) for s in entry.sources],
            transformationDescription=entry.description,
            transformationType="MASKED" if entry.masked else "IDENTITY" if kept else None)
    return ColumnLineageDatasetFacet(fields=fields, producer=PRODUCER)


def _schema(lineage: Iterable[ColumnLineage], table: str) -> SchemaDatasetFacet:
    return SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=e.column, description=e.transform)
                                      for e in lineage if e.table == table and e.column],
                              producer=PRODUCER)


def _job(name: str) -> Job:
    return Job(namespace=NAMESPACE, name=name,
               facets={"jobType": JobTypeJobFacet(processingType="BATCH", integration="DAGSTER", jobType="ASSET",
                                                  producer=PRODUCER)})


def release_run_id(data_digest: str, code_versions: Iterable[CodeVersion]) -> str:
    """A UUID (version 8, name-based) for the release job's run, from what the release is made of."""
    text = data_digest + "".join(f"|{v.asset}={v.version}" for v in sorted(code_versions, key=lambda v: v.asset))
    raw = bytearray(hashlib.sha256(text.encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(raw)))


def _clinical_source_dataset(read: ClinicalSourceRead) -> InputDataset:
    """A clinical source read as an input dataset: versioned by the read, its queries by their sha256."""
    queries = ", ".join(f"{q} sha256 {d}" for q, d in sorted(read.queries.items()))
    return InputDataset(namespace=NAMESPACE, name=f"clinical_source/{read.name}", facets={
        "version": DatasetVersionDatasetFacet(datasetVersion=read.data_version, producer=PRODUCER),
        "documentation": DocumentationDatasetFacet(description=f"queries: {queries}", producer=PRODUCER)})


def release_events(*, cohort: str, version: int, lineage: Iterable[ColumnLineage],
                   inputs: Iterable[InputPartition], code_versions: Iterable[CodeVersion],
                   data_digest: str, clinical_sources: Iterable[ClinicalSourceRead] = ()) -> list[RunEvent]:
    lineage, inputs, code_versions = list(lineage), list(inputs), list(code_versions)
    sources = [_clinical_source_dataset(r) for r in sorted(clinical_sources, key=lambda r: (r.name, r.data_version))]
    if not inputs:
        raise ValueError("a release has at least one input partition")
    manifest = dataset_name(MANIFEST)
    events = []
    by_run: dict[str, list[InputPartition]] = {}
    for p in inputs:
        by_run.setdefault(p.run_id, []).append(p)
    for run_id, parts in sorted(by_run.items(), key=lambda kv: (max(p.materialized_at for p in kv[1]), kv[0])):
        events.append(RunEvent(
            eventType=RunState.COMPLETE, eventTime=max(p.materialized_at for p in parts), producer=PRODUCER,
            run=Run(runId=run_id), job=_job(MANIFEST),
            inputs=[InputDataset(namespace=NAMESPACE, name=dataset_name(LINKED)), *sources],
            outputs=[OutputDataset(namespace=NAMESPACE, name=manifest, facets={
                "columnLineage": column_lineage_facet(lineage, MANIFEST), "schema": _schema(lineage, MANIFEST)})]))
    events.append(RunEvent(
        eventType=RunState.COMPLETE, eventTime=max(p.materialized_at for p in inputs), producer=PRODUCER,
        run=Run(runId=release_run_id(data_digest, code_versions)), job=_job(RELEASE),
        inputs=[InputDataset(namespace=NAMESPACE, name=manifest)],
        outputs=[OutputDataset(namespace=NAMESPACE, name=dataset_name(RELEASE, cohort, version), facets={
            "columnLineage": column_lineage_facet(lineage, RELEASE), "schema": _schema(lineage, RELEASE),
            "version": DatasetVersionDatasetFacet(datasetVersion=data_digest, producer=PRODUCER)})]))
    return events


def events_jsonl(events: Iterable[RunEvent]) -> bytes:
    """One event per line, serialised by openlineage-python's Serde (as its FileTransport does)."""
    return "".join(Serde.to_json(e) + "\n" for e in events).encode()
