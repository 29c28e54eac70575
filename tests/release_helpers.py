"""Small real releases without Spark: synthetic DICOM, indexed, de-identified, bundled.

The steps are the pure bodies the assets run on executors (`imaging.index.index_partition`,
`imaging.anonymize.anonymize_partition`), called directly on a handful of files, then
`imaging.release_bundle.finish_release`. The provenance ledger is written as the anonymize step
will write it (one `ProvenanceRecord` per published image).
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from imaging.anonymize import MANIFEST_FIELDS, AnonymizeJob, anonymize_partition
from imaging.clinical import ClinicalPolicy
from imaging.code_version import code_version, module_files
from imaging.cohort import CohortDefinition
from imaging.config import read_yaml
from imaging.datacard import (MISSING, CheckResult, CodeVersion, DataCardInputs, DeidSummary, InputPartition,
                              ReleaseCounts, Selection)
from imaging.deid import RESEARCH_DEFAULT
from imaging.disclosure import DisclosurePolicy, class_sizes, k_anonymity
from imaging.index import RECORD_FIELDS, index_partition
from imaging.lineage import column_lineage, release_row
from imaging.provenance import LEDGER, ProvenanceRecord, source_uid_hash, write_ledger
from imaging.pseudonym import Pseudonymizer
from imaging.release_bundle import BuiltRelease, finish_release
from synth import generate_hospital

KEY = "release-test-key-" + "k" * 16
SITE, DATES = "site-a", ("2024-03-01", "2024-03-02")
RUN_IDS = {DATES[0]: str(uuid.UUID(int=1)), DATES[1]: str(uuid.UUID(int=2))}
TIMES = {DATES[0]: "2026-11-20T10:00:00+00:00", DATES[1]: "2026-11-20T11:00:00+00:00"}


@dataclass
class Hospital:
    """A de-identified warehouse of a few synthetic images, with its ground truth and ledger."""

    root: Path
    warehouse: Path
    summary: object
    policy: ClinicalPolicy
    disclosure: DisclosurePolicy
    manifest: list[dict] = field(default_factory=list)
    ledger: list[ProvenanceRecord] = field(default_factory=list)
    code_versions: tuple[CodeVersion, ...] = ()


def make_hospital(root: Path, patients: int = 4, min_k: int = 1) -> Hospital:
    landing, warehouse = root / "landing", root / "warehouse"
    summary = generate_hospital(landing, seed=3, sites=(SITE,), dates=DATES, patients_per_site=patients,
                                oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    spec = read_yaml("clinical_policy.yaml")
    policy = ClinicalPolicy.from_dict(spec)
    disclosure = DisclosurePolicy.from_dict({**spec, "disclosure": {"min_k": min_k}})
    deid_version = code_version(module_files("imaging.anonymize", "imaging.deid", "imaging.clinical"),
                                RESEARCH_DEFAULT, spec)
    hospital = Hospital(root, warehouse, summary, policy, disclosure,
                        code_versions=(CodeVersion("anonymized_images", deid_version),
                                       CodeVersion("published_cohort",
                                                   code_version(module_files("imaging.release_bundle"), (), spec))))
    pseudonymizer = Pseudonymizer(KEY)
    staging = warehouse / "deidentified"
    job = AnonymizeJob(KEY, "NHS", RESEARCH_DEFAULT, policy, str(staging))
    for date in DATES:
        listing = [(date, SITE, str(landing / rel), (landing / rel).stat().st_size)
                   for rel in summary.dicom_files[(date, SITE)]]
        linked = []
        for record in index_partition(listing):
            row = dict(zip(RECORD_FIELDS, record))
            assert row["status"] == "indexed"
            clinical = summary.expected_clinical(date, SITE, row["patient_id"])
            linked.append({**row, "has_clinical_record": clinical is not None, "clinical": clinical})
        by_path = {r["source_path"]: r for r in linked}
        for out in anonymize_partition(job, linked):
            assert out[0] == "published", out
            _, d, s, source_path, source_sha, batch, *rest = out
            row = dict(zip(("batch",) + MANIFEST_FIELDS + policy.output_columns, (batch, *rest)))
            hospital.manifest.append(row)
            hospital.ledger.append(ProvenanceRecord(
                landing_path=source_path, landing_sha256=source_sha,
                source_uid_hash=source_uid_hash(pseudonymizer, by_path[source_path]["sop_instance_uid"]),
                output_path=row["output_path"], output_sha256=row["sha256"],
                deid_profile=DeidSummary.from_options(RESEARCH_DEFAULT).label, deid_options=",".join(RESEARCH_DEFAULT),
                code_version=deid_version, run_id=RUN_IDS[d], date=d, site=s))
    write_ledger(str(warehouse / "identifiable" / LEDGER), hospital.ledger)
    return hospital


def build_release(hospital: Hospital, target: Path, cohort: CohortDefinition | None = None,
                  checks: tuple[CheckResult, ...] | None = None) -> BuiltRelease:
    """A release of `cohort` (default: every image) written into `target` as the asset would."""
    cohort = cohort or CohortDefinition.from_dict({"name": "small-test", "version": 1, "description": "all images"})
    rows = [r for r in hospital.manifest if not cohort.modalities or r["modality"] in cohort.modalities]
    lineage = column_lineage(hospital.policy, RESEARCH_DEFAULT, hospital.disclosure)
    released = sorted((release_row(r, lineage, hospital.disclosure) for r in rows), key=lambda r: r["file"])
    known = {}
    for row in rows:
        out = release_row(row, lineage, hospital.disclosure)["file"]
        (target / out).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(hospital.warehouse / "deidentified" / row["output_path"], target / out)
        known[out] = row["sha256"]
    table = pa.Table.from_pylist(released)
    pq.write_table(table, target / "metadata.parquet")
    pacsv.write_csv(table, target / "metadata.csv")
    batches = {}
    for row in hospital.manifest:
        batches.setdefault(row["batch"], []).append(row["sha256"])
    date_of = {r.output_path.split("/")[2]: r.date for r in hospital.ledger}
    inputs = tuple(InputPartition("anonymized_images", b, hashlib.sha256("".join(sorted(s)).encode()).hexdigest()[:16],
                                  RUN_IDS[date_of[b]], TIMES[date_of[b]]) for b, s in sorted(batches.items()))
    checks = checks if checks is not None else (
        CheckResult("anonymized_images", "every_image_accounted_for", True, run_id=RUN_IDS[DATES[1]],
                    evaluated_at=TIMES[DATES[1]], description="indexed = published + quarantined"),)
    breakdowns = {c: {} for c in ("modality", "laterality", "sex")}
    for r in released:
        for c in breakdowns:
            value = MISSING if r[c] is None else str(r[c])
            breakdowns[c][value] = breakdowns[c].get(value, 0) + 1
    counts = ReleaseCounts(len(rows), len({r["patient_pseudonym"] for r in rows}),
                           len({r["study_instance_uid"] for r in rows}), len({r["series_instance_uid"] for r in rows}),
                           breakdowns)
    card = DataCardInputs(
        selection=Selection.from_cohort(cohort), counts=counts, deid=DeidSummary.from_options(RESEARCH_DEFAULT),
        checks=checks, inputs=inputs, code_versions=hospital.code_versions,
        disclosure=k_anonymity(class_sizes(rows, hospital.disclosure), hospital.disclosure),
        lineage=tuple(lineage), data_digest="")
    return finish_release(str(target), card, known)
