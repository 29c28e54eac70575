"""What the asset definitions say about themselves: owners, tags, derived code versions, column schemas
and column lineage (Dagster's `dagster/column_schema` and `dagster/column_lineage`). Owners, tags and
code versions are applied to every asset at once, in `definitions.py`.

Code versions are derived (imaging/governance/code_version.py): a hash of each asset's module and the core
modules it runs, plus the de-identification options and the clinical policy where they decide the
output. Edit any of them and Dagster shows the asset as changed; nobody bumps a number by hand.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from dagster import (AssetKey, CodeReferencesMetadataValue, LocalFileCodeReference, TableColumn, TableColumnDep,
                     TableColumnLineage, TableSchema)

from assets.partitions import SETTINGS
from imaging.catalogue import (DEIDENTIFIED, IDENTIFIABLE, LINKED, PACS_INSTANCES, RAW_IMAGE_INDEX, Table, column_privacy, describe_column,
                               manifest, markdown_safe)
from imaging.driver.config import read_yaml
from imaging.driver.platform_files import load_clinical_policy
from imaging.governance.code_version import code_version, module_files
from imaging.governance.disclosure import DisclosurePolicy
from imaging.governance.lineage import MANIFEST, RELEASE, column_lineage, dagster_column_deps
from imaging.steps.declared import IMAGE_STEPS

OWNERS = ["team:imaging-platform"]
POLICY_SPEC = read_yaml("clinical_policy.yaml")
POLICY = load_clinical_policy()
DISCLOSURE = DisclosurePolicy.from_dict(POLICY_SPEC, min_k=SETTINGS.min_k)
LINEAGE = tuple(column_lineage(POLICY, SETTINGS.deid_options, DISCLOSURE))

_COMMON = ("imaging.records", "imaging.catalogue", "imaging.fs")
_STEP = ("assets.runner", "imaging.steps.declared", *_COMMON)  # every image step runs through the runner
_MODULES = {
    "raw_image_index": ("assets.raw_image_index", "imaging.steps.index", "imaging.header", *_STEP),
    "linked_patient_metadata": ("assets.linked_patient_metadata", "imaging.steps.clinical", *_STEP),
    "anonymized_images": ("assets.anonymized_images", "imaging.steps.anonymize", "imaging.header",
                          "imaging.deid", "imaging.steps.clinical", "imaging.pseudonym", "imaging.provenance",
                          "assets.optouts", "imaging.optout", *_STEP),
    "pacs_landing": ("assets.pacs_landing", "imaging.pacs", *_COMMON),
    "published_cohort": ("assets.published_cohort", "imaging.steps.release", "imaging.steps.stamp", "imaging.steps.objects",
                         "imaging.governance.release_bundle", "imaging.governance.retention",
                         "imaging.governance.bundle", "imaging.governance.datacard", "imaging.governance.disclosure",
                         "imaging.governance.lineage", "imaging.governance.lineage_events",
                         "imaging.governance.approval", "imaging.governance.cohort", "assets.optouts", "imaging.optout",
                         "imaging.governance.optout", *_COMMON),
}
# What besides code decides each asset's output.
_DECIDED_BY = {
    "raw_image_index": ((), None),
    "pacs_landing": ((), None),
    "linked_patient_metadata": ((), POLICY_SPEC),
    "anonymized_images": (SETTINGS.deid_options, POLICY_SPEC),
    "published_cohort": (SETTINGS.deid_options, {**POLICY_SPEC, "min_k": DISCLOSURE.min_k}),
}
CODE_VERSIONS = {asset: code_version(module_files(*modules), *_DECIDED_BY[asset])
                 for asset, modules in _MODULES.items()}


# The zone each asset's output lies in (the image steps declare theirs), shown as a tag.
ZONES = {**{s.asset: s.zone for s in IMAGE_STEPS}, "published_cohort": DEIDENTIFIED, "pacs_landing": IDENTIFIABLE}


def tags(asset: str) -> dict[str, str]:
    return {"zone": ZONES[asset], "domain": "ophthalmic-imaging"}


# The clinical policy's identifiers and quasi-identifiers (under their own and their released names): the
# columns the catalogue tags `privacy: identifier` / `privacy: quasi-identifier`.
IDENTIFIERS = frozenset(POLICY_SPEC.get("identifiers") or ())
QUASI_IDENTIFIERS = frozenset(n for q in DISCLOSURE.quasi_identifiers for n in (q.column, q.released_as))


def column(name: str, type_: str, zone: str, description: str) -> TableColumn:
    """One column of the catalogue: its type, what it means and, if it relates to a person, how."""
    privacy = column_privacy(name, zone, IDENTIFIERS, QUASI_IDENTIFIERS)
    return TableColumn(name, type_, description=markdown_safe(description), tags={"privacy": privacy} if privacy else None)


def table_schema(table: Table) -> TableSchema:
    """A catalogue table as Dagster's column schema: names, Arrow types, descriptions and privacy tags
    (the manifest's columns described by their lineage)."""
    lineage = {e.column: f"{e.transform}: {e.description}" for e in LINEAGE if e.table == MANIFEST and e.column}
    described = lineage if table.zone == DEIDENTIFIED else {}
    return TableSchema(columns=[column(f.name, str(f.type), table.zone, described.get(f.name) or describe_column(f.name))
                                for f in table.schema])


def release_schema() -> TableSchema:
    """The columns of a release's metadata.parquet / metadata.csv."""
    types = {f.name: str(f.type) for f in manifest(POLICY).schema}
    columns = [e.column for e in LINEAGE if e.table == RELEASE and e.column]
    return TableSchema(columns=[column(c, types.get(c, "string"), DEIDENTIFIED, _describe(RELEASE, c))
                                for c in columns])


def _describe(table: str, column: str) -> str:
    entry = next(e for e in LINEAGE if e.table == table and e.column == column)
    return f"{entry.transform}: {entry.description}"


def column_lineage(table: str) -> TableColumnLineage:
    """`dagster/column_lineage` of the manifest (MANIFEST) or a release (RELEASE), from imaging.governance.lineage."""
    return TableColumnLineage(deps_by_column={
        column: [TableColumnDep(asset_key=AssetKey(asset), column_name=name) for asset, name in deps]
        for column, deps in dagster_column_deps(LINEAGE, table).items()})


SCHEMAS = {
    "raw_image_index": table_schema(RAW_IMAGE_INDEX),
    "pacs_landing": table_schema(PACS_INSTANCES),
    "linked_patient_metadata": table_schema(LINKED),
    "anonymized_images": table_schema(manifest(POLICY)),
    "published_cohort": release_schema(),
}


def definition_metadata(asset: str) -> dict:
    """Metadata every definition carries: its table's column schema (and lineage, where derived)."""
    out = {"dagster/column_schema": SCHEMAS[asset]}
    if asset == "anonymized_images":
        out["dagster/column_lineage"] = column_lineage(MANIFEST)
    if asset == "published_cohort":
        out["dagster/column_lineage"] = column_lineage(RELEASE)
    return out


# Code references are beta in Dagster 1.13; we depend on them deliberately.
warnings.filterwarnings("ignore", message="Class `CodeReferencesMetadataValue`")
warnings.filterwarnings("ignore", message="Class `LocalFileCodeReference`")

_STEP_NAMES = {"raw_image_index": "INDEX", "linked_patient_metadata": "LINK", "anonymized_images": "ANONYMIZE"}


def code_references(asset: str) -> CodeReferencesMetadataValue:
    """Where an asset is written, for the UI's code references: its module, and for an image step its
    declaration and the runner that turns it into an asset (Dagster's own would name only the runner)."""
    root = Path(__file__).resolve().parent.parent

    def line_of(path: Path, start: str) -> int:
        lines = path.read_text().splitlines()
        return next((i for i, text in enumerate(lines, 1) if text.startswith(start)), 1)

    refs = [LocalFileCodeReference(file_path=str(root / "assets" / f"{asset}.py"), line_number=1, label="asset module")]
    if asset in _STEP_NAMES:
        declared, runner = root / "imaging/steps/declared.py", root / "assets/runner.py"
        refs += [LocalFileCodeReference(file_path=str(declared), line_number=line_of(declared, f"{_STEP_NAMES[asset]} = "), label="step declaration"),
                 LocalFileCodeReference(file_path=str(runner), line_number=line_of(runner, "def image_asset("), label="runner")]
    return CodeReferencesMetadataValue(code_references=refs)
