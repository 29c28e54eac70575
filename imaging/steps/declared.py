"""The image steps as data: what each step reads, runs, writes and checks, in one place.

Each `ImageStep` says its asset, its input, its executor step, its ok and quarantine tables (and any
other output), its stage names, the quarantine reasons it always reports, and its ordered checks. One
runner (`assets/runner.py`) turns a declaration and the asset's Spark body into a Dagster asset: it owns
the partitions, the empty-day shortcut, the journal commit, the tallies, the checks and the
materialization.

Each `Check` carries its kind (how `platform/quality.yaml` configures it), whether it reads every
partition of its table (table-wide: evaluated by `assets/checks.py`'s multi-asset checks) and its
empty-day figure: what it reports on site-days without rows, computed here without Spark. Its Spark
figure is bound by name in the asset's module (`FIGURES`); the runner refuses a module whose figures
do not match its declared checks. `QUALITY_CHECKS` (what quality.yaml must configure) is derived from
these declarations: each check list is written once, here.

Pure: no Spark, no Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from imaging.catalogue import (ANONYMIZE_QUARANTINE, ANONYMIZED_FILES, CLINICAL_QUARANTINE, DEIDENTIFIED,
                               IDENTIFIABLE, INDEX_QUARANTINE, LEDGER, LINK_QUARANTINE, LINKED, OPTOUT_APPLIED,
                               OPTOUT_QUARANTINE, RAW_IMAGE_INDEX, WITHDRAWN, Folder, Table, manifest)
from imaging.optout import OPTED_OUT
from imaging.quality.outcomes import CheckOutcome, Distribution, evaluate_balance, evaluate_max
from imaging.quality.rules import BALANCE, ERROR, MAX, SUITE, WARN, QualityContext, quality_file_model
from imaging.steps.anonymize import AnonymizeJob
from imaging.steps.clinical import PLACEHOLDER_ROW, STUDY_BEFORE_BIRTH, ExtractJob
from imaging.steps.index import DUPLICATES, ELSEWHERE, MANDATORY, IndexJob

# How a check reports site-days without rows (the figures `assets/quality.py` computes on empty frames;
# tests/test_empty_site_day.py holds the two equal).
NO_KEYS = "no keys"        # a per-key count: no key, no extreme, no percentile
ZERO = "zero"              # a count of offending rows: 0
BALANCED = "balanced"      # an accounting equation: 0 = 0 + 0
SUITE_COUNTS = "suite"     # a Great Expectations suite: its expectations, none failed


@dataclass(frozen=True)
class EmptyFigure:
    """What a per-run check reports on site-days without rows."""

    kind: str
    details: tuple[str, ...] = ()   # detail figures reported as 0 (NO_KEYS, ZERO)
    today: bool = False             # also report the day of the check (`today`)
    total: tuple[str, ...] = ()     # BALANCED: the left side's figures
    parts: tuple[str, ...] = ()     # BALANCED: the right side's figures
    severity: str | None = None     # SUITE_COUNTS: which expectations of the suite it counts


@dataclass(frozen=True)
class Check:
    """One check of an asset: its name in quality.yaml, its kind, and its figure on an empty site-day.

    A table-wide check reads every partition of its table, so it has no empty-day figure: it is
    evaluated by its own multi-asset check, skipped when a run changed no row.
    """

    name: str
    kind: str = MAX
    empty: EmptyFigure | None = None

    @property
    def table_wide(self) -> bool:
        return self.empty is None


def per_key(name: str, *details: str) -> Check:
    return Check(name, MAX, EmptyFigure(NO_KEYS, details))


def count(name: str, *details: str, today: bool = False) -> Check:
    return Check(name, MAX, EmptyFigure(ZERO, details, today=today))


def balance(name: str, total: str, *parts: str) -> Check:
    return Check(name, BALANCE, EmptyFigure(BALANCED, total=(total,), parts=parts))


def table_wide(name: str) -> Check:
    return Check(name, MAX)


# A Great Expectations suite on the step's table: expectations marked ERROR, then those marked WARN.
COLUMN_SUITE = (Check("column_rules", SUITE, EmptyFigure(SUITE_COUNTS, severity=ERROR)),
                Check("column_warnings", SUITE, EmptyFigure(SUITE_COUNTS, severity=WARN)))


@dataclass(frozen=True)
class ImageStep:
    """One image step: an asset over date x site partitions whose rows come from an executor step.

    `output` and `quarantine` are the ok and quarantine tables; `also` any further table, `folders` the
    folders of files it writes (by batch). Tables partitioned by `batch` (the manifest, the files) are
    written per opaque batch of a site-day, the others per site-day. `output` may depend on the clinical
    policy (the manifest's clinical columns): then it is `manifest`, called with the policy.
    """

    asset: str
    input: str                               # the upstream asset (or observed source) it reads
    zone: str                                # where its output lies: IDENTIFIABLE or DEIDENTIFIED
    executor: type                           # the executor step (imaging/steps/) its rows come from
    output: Table | Callable[..., Table]
    quarantine: Table
    stages: tuple[str, ...]                  # StageClock names, in order; the last is "commit"
    checks: tuple[Check, ...]                # in the order the asset reports them
    idle: str                                # why a run has nothing to do ("nothing landed")
    labels: tuple[str, ...] = ("table", "quarantine")  # metadata names of `outputs`
    also: tuple[Table, ...] = ()
    folders: tuple[Folder, ...] = ()
    known_reasons: tuple[str, ...] = ()      # quarantine reasons always reported, 0 when absent
    kinds: tuple[str, ...] = ("spark", "parquet")
    description: str = ""
    # Assets it reads besides `input`: the landing zone for the steps that open landed files (the clinical
    # extracts, the DICOM files), so a changed site-day makes their partitions stale too, not only the index.
    also_reads: tuple[str, ...] = ()

    @property
    def deps(self) -> tuple[str, ...]:
        """Every asset the step reads, `input` first: its Dagster dependencies and its data version's inputs."""
        return (self.input, *self.also_reads)

    def output_table(self, policy) -> Table:
        return self.output if isinstance(self.output, Table) else self.output(policy)

    def tables(self, policy) -> tuple[Table, ...]:
        """Every table the step writes, output first."""
        return (self.output_table(policy), self.quarantine, *self.also)

    def outputs(self, policy) -> dict[str, Table | Folder]:
        """What the step's metadata names, by label: its folders, then its tables."""
        return dict(zip(self.labels, (*self.folders, *self.tables(policy))))

    @property
    def per_run(self) -> tuple[Check, ...]:
        """The checks evaluated with each materialization."""
        return tuple(c for c in self.checks if not c.table_wide)

    @property
    def table_wide(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.checks if c.table_wide)


INDEX = ImageStep(
    asset="raw_image_index", input="landing_zone", zone=IDENTIFIABLE, executor=IndexJob,
    output=RAW_IMAGE_INDEX, quarantine=INDEX_QUARANTINE, stages=("list", "index", "commit"), idle="nothing landed",
    known_reasons=(DUPLICATES.reason, ELSEWHERE.reason),
    checks=(per_key("scans_per_patient_site_day"), table_wide("scans_per_patient"), per_key("instances_per_series"),
            per_key("series_per_study"), table_wide("sop_instance_uid_in_one_partition"),
            count("mandatory_attributes", *(f"missing_{column}" for column, _ in MANDATORY)),
            count("study_date_in_future", today=True),
            balance("files_accounted", "files_listed", "instances_indexed", "files_quarantined"), *COLUMN_SUITE),
    description="Identifiable zone. One row per DICOM instance (headers only, sha256 of the file); "
                "unreadable files, instances missing a mandatory attribute (PatientID, a UID, Modality) and duplicate "
                "instances go to quarantine/raw_image_index with the reason.",
)

LINK = ImageStep(
    asset="linked_patient_metadata", input="raw_image_index", zone=IDENTIFIABLE, executor=ExtractJob,
    output=LINKED, quarantine=LINK_QUARANTINE, also=(CLINICAL_QUARANTINE,), stages=("read_extracts", "link", "commit"),
    idle="nothing indexed", labels=("table", "quarantine", "extract_quarantine"), also_reads=("landing_zone",),
    known_reasons=(STUDY_BEFORE_BIRTH, PLACEHOLDER_ROW),
    checks=(balance("images_accounted", "images_indexed", "images_linked", "images_quarantined"),
            per_key("records_per_image", "images_affected"), per_key("images_per_record"),
            count("placeholder_keys", "images_with_placeholder_key", "extract_rows_with_placeholder_key"),
            per_key("images_per_clinical_key"), count("unlinked_share", "images", "images_without_record"),
            count("study_before_birth", "images_with_birth_date"), per_key("eye_observations_per_patient_day"),
            count("stale_eye_observations", "images_with_eye_observation"), *COLUMN_SUITE),
    description="Identifiable zone. Each indexed image joined to its patient's latest clinical record "
                "dated on or before the image's date (site extracts, or the clinical source's patients); images with "
                "no record are kept with has_clinical_record = false. For the eye the image shows (ImageLaterality, "
                "else Laterality), each eye field's latest value observed on or before its day, how many days "
                "before, and the diagnoses in force for that eye (or both); an image without one eye gets none, "
                "and the reason is counted per site-day.",
)

ANONYMIZE = ImageStep(
    asset="anonymized_images", input="linked_patient_metadata", zone=DEIDENTIFIED, executor=AnonymizeJob,
    output=manifest, quarantine=ANONYMIZE_QUARANTINE, also=(LEDGER, WITHDRAWN, OPTOUT_APPLIED, OPTOUT_QUARANTINE),
    folders=(ANONYMIZED_FILES,), stages=("deidentify", "commit"), idle="nothing linked", labels=("files", "manifest"),
    # The opt-out list (assets/optout_list.py): patients on it are held back before anything is de-identified.
    also_reads=("landing_zone", "optout_list"), known_reasons=(OPTED_OUT,),
    kinds=("spark", "dicom", "parquet"),
    checks=(balance("images_accounted", "images_linked", "images_published", "images_quarantined"),
            count("manifest_files", "files_checked", "files_missing", "files_with_other_sha256"),
            table_wide("pseudonyms_per_patient"), table_wide("patients_per_pseudonym"), *COLUMN_SUITE),
    description="De-identified zone. Every linked image de-identified to DICOM PS3.15 Annex E under keyed "
                "pseudonyms, in an opaque batch folder per site-day, with a manifest; the source-to-output "
                "ledger and quarantined files stay in the identifiable zone. Images of patients on the opt-out "
                "list in force are never de-identified (quarantined as 'patient opted out', counted per site-day; "
                "re-materializing a site-day withdraws a patient who opted out since), and which list versions "
                "applied is kept in optout_applied.",
)

IMAGE_STEPS = (INDEX, LINK, ANONYMIZE)
# Every asset's checks; published_cohort is not an image step, but its one check is declared beside theirs.
CHECKS: dict[str, tuple[Check, ...]] = {s.asset: s.checks for s in IMAGE_STEPS} | {
    "published_cohort": (count("release_checksums"),)}
# What platform/quality.yaml must configure: every declared check, by kind; and the file's model, which
# requires exactly those (imaging/quality/rules.py).
QUALITY_CHECKS: dict[str, dict[str, str]] = {asset: {c.name: c.kind for c in checks} for asset, checks in CHECKS.items()}
QualityFile = quality_file_model(QUALITY_CHECKS)


def step_of(asset: str) -> ImageStep:
    return next(s for s in IMAGE_STEPS if s.asset == asset)


def empty_outcome(asset: str, check: Check, ctx: QualityContext) -> CheckOutcome:
    """`check`'s outcome on site-days without rows, from its declared empty-day figure."""
    rule, figure = ctx.rule(asset, check.name), check.empty
    if figure is None:
        raise ValueError(f"{asset}.{check.name} reads the whole table: it has no empty-day figure")
    if figure.kind == NO_KEYS:
        no_keys = Distribution(0, None, None, {p: None for p in ctx.rules.percentiles})
        return evaluate_max(rule, None, distribution=no_keys, details=dict.fromkeys(figure.details, 0) or None)
    if figure.kind == ZERO:
        details = dict.fromkeys(figure.details, 0) | ({"today": ctx.today.isoformat()} if figure.today else {})
        return evaluate_max(rule, 0, details=details)
    if figure.kind == BALANCED:
        return evaluate_balance(rule, dict.fromkeys(figure.total, 0), dict.fromkeys(figure.parts, 0))
    if figure.kind == SUITE_COUNTS:
        # Over no rows every column-map expectation holds vacuously and type expectations read the
        # catalogue's schema: the suite's expectations of this severity, none failed.
        suite = ctx.rules.suite(ctx.rule(asset, "column_rules").suite)
        return evaluate_max(rule, 0, details={"expectations": sum(1 for e in suite["expectations"]
                                                                  if e["severity"] == figure.severity)})
    raise ValueError(f"unknown empty-day figure {figure.kind!r}")


def empty_outcomes(step: ImageStep, ctx: QualityContext) -> list[CheckOutcome]:
    """Every per-run check of `step` on site-days without rows, in the order the step reports them."""
    return [empty_outcome(step.asset, c, ctx) for c in step.per_run]


def check_names(checks: Sequence[Check]) -> tuple[str, ...]:
    return tuple(c.name for c in checks)
