"""What the asset definitions say about themselves: owners, tags, derived code versions, column schemas
and column lineage (Dagster's `dagster/column_schema` and `dagster/column_lineage`). Owners, tags and
code versions are applied to every asset at once, in `definitions.py`.

Code versions are derived (imaging/governance/code_version.py): a hash of each asset's module and the core
modules it runs, plus the de-identification options and the clinical policy where they decide the
output. Edit any of them and Dagster shows the asset as changed; nobody bumps a number by hand.
"""

from __future__ import annotations

from dagster import AssetKey, TableColumn, TableColumnDep, TableColumnLineage, TableSchema

from assets.partitions import SETTINGS
from imaging.catalogue import DEIDENTIFIED, LINKED, RAW_IMAGE_INDEX, Table, manifest
from imaging.driver.config import read_yaml
from imaging.governance.code_version import code_version, module_files
from imaging.governance.disclosure import DisclosurePolicy
from imaging.governance.lineage import MANIFEST, RELEASE, column_lineage, dagster_column_deps
from imaging.steps.clinical import load_policy
from imaging.steps.declared import IMAGE_STEPS

OWNERS = ["team:imaging-platform"]
POLICY_SPEC = read_yaml("clinical_policy.yaml")
POLICY = load_policy()
DISCLOSURE = DisclosurePolicy.from_dict(POLICY_SPEC, min_k=SETTINGS.min_k)
LINEAGE = tuple(column_lineage(POLICY, SETTINGS.deid_options, DISCLOSURE))

_COMMON = ("imaging.records", "imaging.catalogue", "imaging.fs")
_STEP = ("assets.runner", "imaging.steps.declared", *_COMMON)  # every image step runs through the runner
_MODULES = {
    "raw_image_index": ("assets.raw_image_index", "imaging.steps.index", "imaging.header", *_STEP),
    "linked_patient_metadata": ("assets.linked_patient_metadata", "imaging.steps.clinical", *_STEP),
    "anonymized_images": ("assets.anonymized_images", "imaging.steps.anonymize", "imaging.header",
                          "imaging.deid", "imaging.steps.clinical", "imaging.pseudonym", "imaging.provenance",
                          *_STEP),
    "published_cohort": ("assets.published_cohort", "imaging.steps.release", "imaging.governance.release_bundle",
                         "imaging.governance.bundle", "imaging.governance.datacard", "imaging.governance.disclosure",
                         "imaging.governance.lineage", "imaging.governance.lineage_events",
                         "imaging.governance.approval", "imaging.governance.cohort", *_COMMON),
}
# What besides code decides each asset's output.
_DECIDED_BY = {
    "raw_image_index": ((), None),
    "linked_patient_metadata": ((), POLICY_SPEC),
    "anonymized_images": (SETTINGS.deid_options, POLICY_SPEC),
    "published_cohort": (SETTINGS.deid_options, {**POLICY_SPEC, "min_k": DISCLOSURE.min_k}),
}
CODE_VERSIONS = {asset: code_version(module_files(*modules), *_DECIDED_BY[asset])
                 for asset, modules in _MODULES.items()}


# The zone each asset's output lies in (the image steps declare theirs), shown as a tag.
ZONES = {**{s.asset: s.zone for s in IMAGE_STEPS}, "published_cohort": DEIDENTIFIED}


def tags(asset: str) -> dict[str, str]:
    return {"zone": ZONES[asset], "domain": "ophthalmic-imaging"}


def table_schema(table: Table) -> TableSchema:
    """A catalogue table as Dagster's column schema (names and Arrow types)."""
    return TableSchema(columns=[TableColumn(f.name, str(f.type)) for f in table.schema])


def release_schema() -> TableSchema:
    """The columns of a release's metadata.parquet / metadata.csv."""
    types = {f.name: str(f.type) for f in manifest(POLICY).schema}
    columns = [e.column for e in LINEAGE if e.table == RELEASE and e.column]
    return TableSchema(columns=[TableColumn(c, types.get(c, "string"), description=_describe(RELEASE, c))
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
