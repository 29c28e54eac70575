"""Small real releases without Spark: synthetic DICOM, indexed, de-identified, bundled.

The steps are the pure bodies the assets run on executors (`imaging.steps.index.index_partition`,
`imaging.steps.anonymize.anonymize_partition`), called directly on a handful of files, then
`imaging.governance.release_bundle.finish_release`. The provenance ledger is written as the anonymize step
will write it (one `ProvenanceRecord` per published image).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from imaging.catalogue import ZONES, manifest as manifest_table
from imaging.catalogue import LEDGER, RELEASE_OBJECTS
from imaging.deid import RESEARCH_DEFAULT
from imaging.deid.pixel_text import load_pixel_text_settings
from imaging.driver.commit import CommitBuilder
from imaging.driver.config import read_yaml
from imaging.governance.bundle import ManifestEntry
from imaging.governance.code_version import code_version, module_files
from imaging.governance.cohort import CohortDefinition
from imaging.governance.datacard import (MISSING, CheckResult, CodeVersion, DataCardInputs, DeidSummary, InputPartition,
                                         ReleaseCounts, Selection)
from imaging.governance.disclosure import DisclosurePolicy, class_sizes, k_anonymity
from imaging.governance.lineage import column_lineage, release_column_types, release_row
from imaging.governance.release_bundle import BuiltRelease, finish_release
from imaging.issuers import IssuerPolicy
from imaging.provenance import ProvenanceRecord, write_ledger
from imaging.pseudonym import key_fingerprint
from imaging.records import IndexedImage, LinkedImage, ListedFile
from imaging.steps.anonymize import AnonymizeJob
from imaging.steps.clinical import ClinicalPolicy
from imaging.steps.release import CopyJob, HeaderPlan, ReleaseSource
from imaging.steps.stamp import StampPlan
from imaging.steps.index import index_file
from synth import generate_hospital

KEY = "release-test-key-" + "k" * 16
SITE, DATES = "site-a", ("2024-03-01", "2024-03-02")
SMALL_TEST = CohortDefinition.from_dict({"name": "small-test", "version": 1, "description": "all images"})
RUN_IDS = {DATES[0]: str(uuid.UUID(int=1)), DATES[1]: str(uuid.UUID(int=2))}
TIMES = {DATES[0]: "2026-11-20T10:00:00+00:00", DATES[1]: "2026-11-20T11:00:00+00:00"}
LANDING_VERSIONS = {DATES[0]: "0123456789abcdef0123456789abcdef"}


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
    # The release object store's index as the asset keeps it (content key -> (object sha256, identity)), and what
    # the last `build_release` copy did (one ReleaseFile per image).
    index: dict = field(default_factory=dict)
    last_copy: list = field(default_factory=list)

    @property
    def store(self) -> str:
        return str(self.warehouse / RELEASE_OBJECTS.path)


def make_hospital(root: Path, patients: int = 4, min_k: int = 1) -> Hospital:
    landing, warehouse = root / "landing", root / "warehouse"
    summary = generate_hospital(landing, seed=3, sites=(SITE,), dates=DATES, patients_per_site=patients,
                                oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    spec = read_yaml("clinical_policy.yaml")
    policy = ClinicalPolicy.from_dict(spec)
    disclosure = DisclosurePolicy.from_dict({**spec, "disclosure": {"min_k": min_k}})
    deid_version = code_version(module_files("imaging.steps.anonymize", "imaging.deid", "imaging.steps.clinical"),
                                RESEARCH_DEFAULT, spec)
    hospital = Hospital(root, warehouse, summary, policy, disclosure,
                        code_versions=(CodeVersion("anonymized_images", deid_version),
                                       CodeVersion("published_cohort",
                                                   code_version(module_files("imaging.governance.release_bundle"), (), spec))))
    staging = warehouse / "deidentified"
    publish = AnonymizeJob(KEY, RESEARCH_DEFAULT, policy, IssuerPolicy.from_dict(read_yaml("issuers.yaml")),
                           load_pixel_text_settings(read_yaml("pixel_text.yaml")), str(staging))()
    table = manifest_table(policy)
    for date in DATES:
        for rel in summary.dicom_files[(date, SITE)]:
            image = index_file(ListedFile(date, SITE, str(landing / rel), (landing / rel).stat().st_size))
            assert isinstance(image, IndexedImage), image
            clinical = summary.expected_clinical(date, SITE, image.patient_id)
            linked = LinkedImage(**{f.name: getattr(image, f.name) for f in dataclasses.fields(IndexedImage)},
                                 has_clinical_record=clinical is not None, clinical=clinical)
            out = publish(linked)
            assert out.__class__.__name__ == "PublishedImage", out
            flat = {f.name: getattr(out, f.name) for f in dataclasses.fields(out) if f.name != "clinical"}
            flat.update(out.clinical)
            hospital.manifest.append({c: flat[table.source_of(c)] for c in table.columns})
            hospital.ledger.append(ProvenanceRecord(
                source_path=out.source_path, source_sha256=out.source_sha256, source_uid_hash=out.source_uid_hash,
                batch=out.batch, output_path=out.output_path, output_sha256=out.output_sha256,
                deid_profile=DeidSummary.from_options(RESEARCH_DEFAULT).label, deid_options=",".join(RESEARCH_DEFAULT),
                code_version=deid_version, run_id=RUN_IDS[date], run_started_at=TIMES[date], date=date, site=SITE))
    write_ledger(str(warehouse / LEDGER.path), hospital.ledger)
    return hospital


def begin_commit(warehouse: Path) -> CommitBuilder:
    """A commit over the warehouse's zones, as `Warehouse.begin` starts published_cohort's (files and tables
    share the root here)."""
    return CommitBuilder.start("published_cohort", f"{warehouse}/identifiable/_journal",
                               [f"{warehouse}/{zone}" for zone in ZONES])


def build_release(hospital: Hospital, target: Path, cohort: CohortDefinition | None = None,
                  checks: tuple[CheckResult, ...] | None = None, run_ids: dict | None = None,
                  key: str = KEY, shared: bool = False, rows_of=None) -> BuiltRelease:
    """A release of `cohort` (default: every image) written into `target` as the asset would; its data card
    records `key`'s fingerprint (the images are always pseudonymised under KEY). Its images are stamped with the
    cohort's `stamp:` columns. `shared`: placed through the release object store, as the asset places them (an
    image whose content key the hospital's index knows is linked, not written). `rows_of`: each manifest row
    through this function first (a changed row, or None: left out, as an opt-out leaves a patient out)."""
    cohort = cohort or SMALL_TEST
    rows = [r for r in hospital.manifest if not cohort.modalities or r["modality"] in cohort.modalities]
    rows = [r for r in (rows_of(dict(r)) if rows_of else r for r in rows) if r is not None]
    lineage = column_lineage(hospital.policy, RESEARCH_DEFAULT, hospital.disclosure)
    released = sorted(({**release_row(r, lineage, hospital.disclosure)} for r in rows), key=lambda r: r["file"])
    by_file = {r["file"]: r for r in released}
    # The declared types, as the asset has them from its Spark schema (a column all null here is still typed).
    types = release_column_types(hospital.policy, RESEARCH_DEFAULT, hospital.disclosure)
    stamp = StampPlan.build(cohort.name, cohort.sponsor, cohort.stamp, types) if cohort.stamp else None
    plan = HeaderPlan(hospital.disclosure.header_rules(), stamp, "release-helpers")
    # The asset's copy: each file's quasi-identifier attributes generalised as the metadata is, its labels stamped.
    job = CopyJob(str(hospital.warehouse / "deidentified"), str(target), plan.rules, plan.stamp, plan.code,
                  hospital.store if shared else None)
    known, hospital.last_copy = {}, []
    for row in rows:
        path = f"images/{row['patient_pseudonym']}/{row['study_instance_uid']}/{row['sop_instance_uid']}.dcm"
        values = plan.values_json(by_file[path])
        content = plan.content_key(row["sha256"], values)
        stored = hospital.index.get(content) if shared else None
        out = job.copy(ReleaseSource(row["output_path"], row["sha256"], row["patient_pseudonym"],
                                     row["study_instance_uid"], row["sop_instance_uid"], values, content,
                                     *(stored or (None, None))))
        if shared:
            hospital.index[content] = (out.sha256, out.object_identity)
        known[out.path] = out.sha256
        hospital.last_copy.append(out)
    for r in released:
        r["sha256"] = known[r["file"]]
    table = pa.Table.from_pylist(released)
    pq.write_table(table, target / "metadata.parquet")
    pacsv.write_csv(table, target / "metadata.csv")
    batches = {}
    for row in hospital.manifest:
        batches.setdefault(row["batch"], []).append(row["sha256"])
    date_of = {r.output_path.split("/")[2]: r.date for r in hospital.ledger}
    # The first day's landing was observed, the second's not (the card says "not observed").
    inputs = tuple(InputPartition("anonymized_images", b, hashlib.sha256("".join(sorted(s)).encode()).hexdigest()[:16],
                                  (run_ids or RUN_IDS)[date_of[b]], TIMES[date_of[b]],
                                  LANDING_VERSIONS.get(date_of[b]))
                   for b, s in sorted(batches.items()))
    tokens = tuple(sorted(batches))
    checks = checks if checks is not None else (
        CheckResult("anonymized_images", "every_image_accounted_for", True, run_id=RUN_IDS[DATES[1]],
                    evaluated_at=TIMES[DATES[1]], description="indexed = published + quarantined"),
        # Upstream checks as the asset lists them: per partition (batch tokens), whole table, not evaluated.
        CheckResult("raw_image_index", "files_accounted", True, run_id=RUN_IDS[DATES[0]], evaluated_at=TIMES[DATES[0]],
                    description="Files listed = indexed + quarantined.", partitions=tokens),
        CheckResult("raw_image_index", "scans_per_patient", True, run_id=RUN_IDS[DATES[1]],
                    evaluated_at=TIMES[DATES[1]], whole_table=True),
        CheckResult("linked_patient_metadata", "unlinked_share", None, severity="WARN", partitions=tokens[:1]),
    )
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
        lineage=tuple(lineage), data_digest="", key_fingerprint=key_fingerprint(key),
        stamp=stamp.describe() if stamp else None)
    entries = sorted((ManifestEntry(p, h) for p, h in known.items()), key=lambda e: e.path.encode())
    return finish_release(str(target), card, images=lambda: iter(entries))


def review_cli(argv, monkeypatch, capsys, warehouse=None):
    """`imaging-review ARGV` in this process, with IMAGING_WAREHOUSE set to `warehouse` (or unset): exit code,
    standard output, standard error."""
    from imaging.governance.review import main

    monkeypatch.delenv("IMAGING_WAREHOUSE", raising=False)
    if warehouse:
        monkeypatch.setenv("IMAGING_WAREHOUSE", warehouse)
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err
