"""Site-days with nothing to do, answered from the warehouse alone: no Spark session, no JVM.

Shared helper module (like `assets/checks.py`), not an asset. A run over site-days where nothing
landed (raw_image_index), nothing was indexed (linked_patient_metadata) or nothing was linked
(anonymized_images) would start a Spark session and run a dozen jobs over empty frames to learn
what is known without them: every output partition is empty. The image assets take this path
instead. It still commits through the journal (a partition a previous run filled is emptied, not
left stale) and still returns a result for every check spec of the asset, computed here from the
figures an empty site-day has: the same values, thresholds, details and partitions that
`assets/quality.py` reports on empty frames (tests/test_empty_site_day.py holds the two equal).

Great Expectations column rules over no rows: every column-map expectation holds vacuously (no row
breaks it) and type expectations read the table's schema, which is the catalogue's; so each suite
reports its expectations with none failed (the test runs GX on empty frames to hold this).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue

from assets import quality as q
from assets.checks import check_results, quality_context, summary
from imaging import fs as fsx
from imaging.catalogue import Folder, Table
from imaging.driver.commit import CommitBuilder
from imaging.driver.run_summary import StageClock, StepSummary
from imaging.quality.gate import covering
from imaging.quality.outcomes import CheckOutcome, Distribution, evaluate_balance, evaluate_max
from resources.deid import Deidentifier
from resources.warehouse import Warehouse


@dataclass(frozen=True)
class Emptied:
    """What committing empty outputs did: partitions (and folders) that held something before."""

    partitions_emptied: int

    @property
    def changed(self) -> bool:
        """Whether any table (or folder) lost rows: only then can a table-wide figure move."""
        return self.partitions_emptied > 0


def commit_empty(warehouse: Warehouse, label: str, tables: Sequence[tuple[Table, Sequence]],
                 folders: Sequence[tuple[Folder, Sequence[str]]] = ()) -> Emptied:
    """Commit `tables`' partitions (and `folders`' sub-folders) as empty, through the journal."""
    commit: CommitBuilder = warehouse.begin(label)
    emptied = 0
    for table, partitions in tables:
        emptied += len(warehouse.present(table, partitions))
        warehouse.stage_empty(commit, table, partitions)
    for folder, subfolders in folders:
        emptied += sum(1 for sub in subfolders if fsx.exists(warehouse.url(folder, sub)))
        warehouse.stage_folders(commit, folder, subfolders)
    commit.build().apply()
    return Emptied(emptied)


def _no_keys(ctx: q.QualityContext) -> Distribution:
    """`count_per_key` over no rows: no key, no extreme, no percentile."""
    return Distribution(0, None, None, {p: None for p in ctx.rules.percentiles})


def _per_key(ctx: q.QualityContext, asset: str, name: str, **details) -> CheckOutcome:
    return evaluate_max(ctx.rule(asset, name), None, distribution=_no_keys(ctx), details=details or None)


def _count(ctx: q.QualityContext, asset: str, name: str, **details) -> CheckOutcome:
    return evaluate_max(ctx.rule(asset, name), 0, details=details)


def column_rules(asset: str, ctx: q.QualityContext) -> list[CheckOutcome]:
    """`q.column_rules` over a frame without rows: each expectation of the suite, none failed."""
    suite = q.load_suite(ctx.rule(asset, "column_rules").suite)
    severities = [item["severity"] for item in suite["expectations"]]  # validated: ERROR or WARN
    return [evaluate_max(ctx.rule(asset, name), 0, details={"expectations": severities.count(severity)})
            for name, severity in (("column_rules", "ERROR"), ("column_warnings", "WARN"))]


def outcomes(asset: str, ctx: q.QualityContext, partitions: Sequence[str]) -> list[CheckOutcome]:
    """Every per-run check of `asset` on site-days without rows, in the order the asset reports them,
    each covering `partitions` (the run's `date|site` keys)."""
    if asset == q.RAW:
        checks = [_per_key(ctx, q.RAW, "scans_per_patient_site_day"), _per_key(ctx, q.RAW, "instances_per_series"),
                  _per_key(ctx, q.RAW, "series_per_study"),
                  _count(ctx, q.RAW, "mandatory_attributes", **{f"missing_{c}": 0 for c in q.MANDATORY}),
                  _count(ctx, q.RAW, "study_date_in_future", today=ctx.today.isoformat()),
                  evaluate_balance(ctx.rule(q.RAW, "files_accounted"), {"files_listed": 0},
                                   {"instances_indexed": 0, "files_quarantined": 0}),
                  *column_rules(q.RAW, ctx)]
    elif asset == q.LINKED:
        checks = [evaluate_balance(ctx.rule(q.LINKED, "images_accounted"), {"images_indexed": 0},
                                   {"images_linked": 0, "images_quarantined": 0}),
                  _per_key(ctx, q.LINKED, "records_per_image", images_affected=0),
                  _per_key(ctx, q.LINKED, "images_per_record"),
                  _count(ctx, q.LINKED, "placeholder_keys", images_with_placeholder_key=0,
                         extract_rows_with_placeholder_key=0),
                  _per_key(ctx, q.LINKED, "images_per_clinical_key"),
                  _count(ctx, q.LINKED, "unlinked_share", images=0, images_without_record=0),
                  _count(ctx, q.LINKED, "study_before_birth", images_with_birth_date=0),
                  *column_rules(q.LINKED, ctx)]
    elif asset == q.ANONYMIZED:
        checks = [evaluate_balance(ctx.rule(q.ANONYMIZED, "images_accounted"), {"images_linked": 0},
                                   {"images_published": 0, "images_quarantined": 0}),
                  _count(ctx, q.ANONYMIZED, "manifest_files", files_checked=0, files_missing=0,
                         files_with_other_sha256=0),
                  *column_rules(q.ANONYMIZED, ctx)]
    else:
        raise ValueError(f"no empty-day checks for {asset!r}")
    return [covering(o, partitions) for o in checks]


def answer(context: AssetExecutionContext, asset: str, checks_of: str, keys: Sequence, emptied: Emptied,
           reason: str, clock: StageClock, warehouse: Warehouse, deid: Deidentifier, outputs: dict[str, str],
           metadata: dict, known_reasons: tuple[str, ...] = ()) -> MaterializeResult:
    """The materialization of site-days answered without Spark: the empty-day check results of
    `checks_of`, a step summary with no input and no output, and `metadata` (the asset's own keys)."""
    context.log.info(f"{len(keys)} site-days: {reason}, {emptied.partitions_emptied} partitions emptied")
    checks = outcomes(checks_of, quality_context(deid), [f"{k.date}|{k.site}" for k in keys])
    step = StepSummary(
        partitions=len(keys), files_in=0, bytes_in=0, rows_out=0, files_out=0, bytes_out=0, quarantined={},
        stage_seconds=clock.seconds, known_reasons=known_reasons,
        outputs={name: warehouse.relative(url) for name, url in outputs.items()})
    return MaterializeResult(metadata={
        **step.values(), **metadata, "table_unchanged": not emptied.changed, **summary(checks),
        **deid.run_metadata(),  # the key fingerprint, as on the Spark path
        "summary": MetadataValue.md(step.markdown(asset)),
    }, check_results=check_results(checks, context.log))
