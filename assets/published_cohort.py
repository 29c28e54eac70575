"""published_cohort: content-addressed research releases, held until approved, published only when approved."""

import dataclasses
import math
import time
from dataclasses import dataclass

from dagster import AssetExecutionContext, Failure, MaterializeResult, MetadataValue, asset
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from assets import quality as q
from assets.checks import RULES, RecordedFacts, check_results, check_specs, publication_refusal, quality_context
from assets.run_tags import label_run
from assets.governance import CODE_VERSIONS, DISCLOSURE, LINEAGE, column_lineage, definition_metadata
from imaging import fs as fsx
from imaging.catalogue import COHORTS, DEIDENTIFIED, LEDGER, REVIEWS, manifest
from imaging.driver.config import PLATFORM_DIR
from imaging.governance.approval import (BLOCKED, CONFLICT, EMPTY, HOLD, PUBLISH, REJECTED, UNCHANGED, ApprovalError,
                                         ApprovalPolicy, Decision, ReleaseKey, ReleasePlan, building_url, carry_out,
                                         decide, list_held, load_standing, manifest_id)
from imaging.pseudonym import DEMO_KEY_FINGERPRINT
from imaging.governance.bundle import content_key_of, parse_manifest
from imaging.governance.cohort import CohortDefinition, load_cohorts
from imaging.governance.datacard import (BREAKDOWN_COLUMNS, CheckResult, CodeVersion, DataCardInputs, DeidSummary,
                                         InputPartition, ReleaseCounts, Selection, breakdown_sql, counts_sql)
from imaging.governance.disclosure import k_anonymity
from imaging.governance.lineage import RELEASE, release_columns
from imaging.governance.release_bundle import CheckedRelease, finish_release
from imaging.quality.gate import NOT_EVALUATED, PASSED
from imaging.steps.clinical import load_policy
from imaging.steps.release import CopyJob, WriteParquet
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse


def _single_file(spark_dir: str, target: str, suffix: str) -> None:
    """Spark writes a folder of parts; a release wants one named file."""
    fs, path = fsx.filesystem(spark_dir)
    parts = sorted(p for p in fs.ls(path, detail=False) if p.rsplit("/", 1)[-1].startswith("part-")
                   and p.endswith(suffix))
    if len(parts) != 1:
        raise RuntimeError(f"expected one {suffix} part in {spark_dir}, found {len(parts)}")
    (part,) = parts
    fsx.move(fsx.qualify(fs, part), target)
    fsx.remove(spark_dir)


def _image_entries(url: str):
    """The images' manifest lines the Spark copy wrote (sorted by path), streamed from its file."""
    def read():
        with fsx.open_read(url) as handle:
            for line in handle:
                yield from parse_manifest(line)
    return read


def _view(frame, name: str) -> str:
    frame.createOrReplaceTempView(name)
    return name


def stage_data(selected, building: str, work: str, source_root: str, files_per_task: int, images: int):
    """Copy the images (each checksum verified, quasi-identifier attributes generalised as the metadata
    is) and write the metadata; returns the metadata rows' frame.

    The copy's (path, sha256) pairs go to one sorted text file in `work` (outside the bundle), so
    the manifest is written from a stream and no list of every image reaches the driver. The
    metadata's `sha256` is the released file's (its header generalised), joined from the copy.
    """
    tasks = max(1, math.ceil(images / files_per_task))
    to_copy = selected.withColumn("released", F.expr(DISCLOSURE.released_json_sql()))
    job = CopyJob(source_root, building, DISCLOSURE.header_rules())
    # Read twice (the checksum list, the metadata's sha256): kept, so each file is written once.
    copied = map_batches(to_copy.repartition(tasks), job.step()).persist()
    (copied.orderBy("path").select(F.concat_ws("  ", "sha256", "path")).coalesce(1)
     .write.text(f"{work}/_sums"))
    _single_file(f"{work}/_sums", f"{work}/images.sha256", ".txt")

    columns = [c.sql for c in release_columns(list(LINEAGE), DISCLOSURE)]
    names = [c.name for c in release_columns(list(LINEAGE), DISCLOSURE)]
    released = copied.select(F.col("path").alias("_file"), F.col("sha256").alias("_sha256"))
    metadata = (selected.selectExpr(*columns).join(released, F.col("file") == F.col("_file"))
                .withColumn("sha256", F.col("_sha256")).select(*names).orderBy("file").coalesce(1))
    writer = WriteParquet(f"{building}/metadata.parquet", to_arrow_schema(metadata.schema))
    metadata.mapInArrow(writer, "rows long").collect()  # one row: the count written
    metadata.write.option("header", True).csv(f"{work}/_csv")
    _single_file(f"{work}/_csv", f"{building}/metadata.csv", ".csv")
    return metadata, copied


@dataclass(frozen=True)
class ReleaseInputs:
    """The manifest partitions a release read, and the site-day (`date|site`) behind each batch token.

    The site-days are identifiable (real dates and sites): used to look up the instance's records,
    never written to the card, which names partitions by batch token only.
    """

    partitions: tuple[InputPartition, ...]
    site_day: dict[str, str]  # batch token -> date|site


def input_partitions(selected, ledger) -> ReleaseInputs:
    """The manifest partitions a release read: batch token, a content hash of its rows, the run that wrote it.

    One row per batch reaches the driver (bounded by the number of site-days, not of images).
    """
    versions = selected.groupBy("batch").agg(
        F.substring(F.sha2(F.concat_ws(",", F.array_sort(F.collect_list("sha256"))), 256), 1, 16)
        .alias("data_version"))
    runs = ledger.groupBy("batch").agg(F.max("run_id").alias("run_id"), F.max("run_started_at").alias("started"),
                                       F.max(q.partition_key()).alias("site_day"))
    rows = versions.join(runs, "batch", "left").orderBy("batch").collect()
    return ReleaseInputs(
        tuple(InputPartition("anonymized_images", r["batch"], r["data_version"], r["run_id"] or "unknown",
                             r["started"] or "unknown") for r in rows),
        {r["batch"]: r["site_day"] for r in rows if r["site_day"]})


def upstream_checks(facts: RecordedFacts, inputs: ReleaseInputs) -> tuple[CheckResult, ...]:
    """The latest result of every upstream check on the release's partitions, by batch token."""
    token = {key: batch for batch, key in inputs.site_day.items()}
    out = []
    for c in facts.release_checks(token):
        out.append(CheckResult(c.asset, c.check, None if c.result == NOT_EVALUATED else c.result == PASSED,
                               severity=c.severity, description=RULES.rule(c.asset, c.check).description,
                               run_id=c.run_id, evaluated_at=c.evaluated_at,
                               partitions=tuple(sorted(token[k] for k in c.partitions)),
                               whole_table=not c.partitions and c.result != NOT_EVALUATED))
    return tuple(out)


def with_landing_versions(facts: RecordedFacts, inputs: ReleaseInputs) -> tuple[InputPartition, ...]:
    """Each input partition with its landing site-day's observed data version (None: not observed)."""
    versions = facts.landing_versions(inputs.site_day.values())
    return tuple(dataclasses.replace(p, landing_data_version=versions.get(inputs.site_day.get(p.batch, "")))
                 for p in inputs.partitions)


def _text_policy(deid: Deidentifier) -> dict[str, str]:
    """platform/pixel_text.yaml's `on_text` per image type, as the data card states it."""
    from imaging.deid.pixel_text import DEFAULT_TYPE, IMAGE_TYPES

    settings = deid.pixel_text_settings()
    return {name: settings.on_text_for(name) for name in (*IMAGE_TYPES, DEFAULT_TYPE)}


def build_release(session, cohort: CohortDefinition, selected, ledger, images: int, building: str, work: str,
                  source_root: str, files_per_task: int, deid: Deidentifier,
                  facts: RecordedFacts | None = None) -> CheckedRelease:
    """Stage one cohort's release bundle in `building`; returns what `finish_release` made and what it checked.

    With what the Dagster instance recorded (`facts`), the data card lists the latest result of every
    upstream check on the partitions the release read and each input's landing data version. Only
    evaluations recorded before this build are read (published_cohort's own checks are the three
    below), so a rebuild of the same inputs after the same runs gives the same bytes.
    """
    sizes = [r["size"] for r in session.sql(DISCLOSURE.class_sizes_sql(_view(selected, "cohort_selected"))).collect()]
    k = k_anonymity(sizes, DISCLOSURE)
    metadata, copied_frame = stage_data(selected, building, work, source_root, files_per_task, images)
    rows = _view(metadata, "cohort_release")
    totals = session.sql(counts_sql(rows)).first()
    breakdowns = {c: {r["value"]: r["images"] for r in session.sql(breakdown_sql(rows, c)).collect()}
                  for c in BREAKDOWN_COLUMNS}
    copied = sum(1 for _ in _image_entries(f"{work}/images.sha256")())
    read = input_partitions(selected, ledger)
    checks = (
        *(upstream_checks(facts, read) if facts is not None else ()),
        CheckResult("published_cohort", "k_anonymity", k.passed,
                    description=f"every equivalence class has at least {k.min_k} patients"),
        CheckResult("published_cohort", "images_copied_and_verified", copied == images,
                    description="every selected image copied, its manifest checksum verified"),
        CheckResult("published_cohort", "metadata_row_per_image", totals["images"] == images,
                    description="one metadata row per released image"),
    )
    card = DataCardInputs(
        selection=Selection.from_cohort(cohort),
        counts=ReleaseCounts(totals["images"], totals["patients"], totals["studies"], totals["series"], breakdowns),
        deid=DeidSummary.from_options(deid.options), checks=checks,
        inputs=with_landing_versions(facts, read) if facts is not None else read.partitions,
        code_versions=tuple(CodeVersion(a, v) for a, v in sorted(CODE_VERSIONS.items())),
        disclosure=k, lineage=LINEAGE, data_digest="", suppress_below=DISCLOSURE.suppress_below,
        key_fingerprint=deid.key_fingerprint, text_policy=_text_policy(deid))
    built = finish_release(building, card, images=_image_entries(f"{work}/images.sha256"))
    copied_frame.unpersist()
    # k-anonymity decides hold or block; the release's other checks failing means the bundle itself is wrong.
    own = [c for c in checks if c.asset == "published_cohort" and c.name != "k_anonymity"]
    return CheckedRelease(built=built, k=k, verified=all(c.passed for c in own))


@asset(
    deps=["anonymized_images"],
    kinds={"spark", "dicom", "parquet"},
    metadata=definition_metadata("published_cohort"),
    pool=WAREHOUSE_POOL,
    check_specs=check_specs("published_cohort"),
    description="For each cohort definition in platform/cohorts/: a content-addressed release bundle (images, "
                "metadata, data card, OpenLineage events, SHA256SUMS; the release id is the sha256 of "
                "SHA256SUMS), checked for k-anonymity (quasi-identifier attributes of the released headers "
                "generalised as the metadata is), held in identifiable/held/ until `approvals_required` listed "
                "approvers have signed an approval of that exact content (`imaging-review approve`), then published to deidentified/cohorts/<name>/"
                "v<version>/. Published releases are immutable. Refuses while the latest evaluation of an ERROR "
                "data-quality check of an upstream partition has failed.",
)
def published_cohort(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                     warehouse: Warehouse, deid: Deidentifier) -> MaterializeResult:
    started = time.monotonic()
    label_run(context)  # who launched the run and why, when its launcher did not say
    # Across runs: a failed ERROR check on any partition this reads (every manifest partition) holds
    # publication until the partition is fixed and re-materialized. Nothing is staged before this.
    refusal = publication_refusal(context.instance)
    if refusal:
        raise Failure(refusal)
    session = spark.spark_session
    # The upstream checks' results and the landing versions the data cards list: recorded before this
    # run built anything (this asset's own evaluations come after), read once for every cohort.
    facts = RecordedFacts(context.instance)
    # Who may sign and how many must: read once, before anything is built (a broken file stops the run here).
    try:
        approvers = ApprovalPolicy.load()
    except ApprovalError as error:
        raise Failure(str(error)) from error
    demo = deid.key_fingerprint == DEMO_KEY_FINGERPRINT  # demo approver keys count only for demo releases
    rows = warehouse.read(session, manifest(load_policy()))
    ledger = warehouse.read(session, LEDGER)
    commit = warehouse.begin("published_cohort")
    root = warehouse.root
    plans: dict[str, ReleasePlan] = {}
    for cohort in load_cohorts(PLATFORM_DIR / "cohorts"):
        selected = rows.where(cohort.sql_predicate()).persist()
        images = selected.count()
        if images == 0:
            selected.unpersist()
            context.log.info(f"cohort {cohort.name} {cohort.release}: selects no image, nothing to release")
            plans[cohort.name] = ReleasePlan(cohort=cohort, decision=Decision(EMPTY, "selects no image", ""),
                                             building="", images=0)
            continue
        building = building_url(commit, root, cohort.name)
        # Spark writes the checksum list and the CSV: on a tables root it can write (not gs:// files).
        work = warehouse.scratch(commit, cohort.name)
        release = build_release(session, cohort, selected, ledger, images, building, work,
                                warehouse.zone(DEIDENTIFIED), landing.files_per_task, deid, facts)
        selected.unpersist()
        if not release.verified:
            raise Failure(f"cohort {cohort.name}: the release's own checks failed (see its data card)")
        built, k = release.built, release.k
        target = warehouse.url(COHORTS, cohort.name, cohort.release)
        published = ReleaseKey(manifest_id(target), content_key_of(target)) if fsx.exists(target) else None
        decision = decide(ReleaseKey(built.release_id, built.content_key), published=published,
                          held=list_held(root, cohort.name, cohort.version, approvers),
                          standing=load_standing(root, built.release_id, approvers, demo), k_passed=k.passed,
                          k_reason=k.reason())
        plans[cohort.name] = ReleasePlan(cohort=cohort, decision=decision, building=building, images=images)
        log = context.log.warning if decision.action in (BLOCKED, CONFLICT, REJECTED) else context.log.info
        log(f"cohort {cohort.name} {cohort.release}: {decision.action} (release {decision.release_id}, "
            f"{images} images): {decision.reason}")

    try:  # a conflict refuses the run before anything is staged: releases go out together or not at all
        outcomes = carry_out(list(plans.values()), commit, root, approvers, run_id=context.run.run_id)
    except ApprovalError as error:
        raise Failure(str(error)) from error
    paths = {name: warehouse.relative(o.path) for name, o in outcomes.items() if o.path is not None}
    links = release_links(warehouse, plans, outcomes)

    # Every published release of these cohorts verifies against its SHA256SUMS (data-quality check).
    released = {name: warehouse.url(COHORTS, name, p.cohort.release) for name, p in plans.items()
                if p.decision.action in (PUBLISH, UNCHANGED)}
    checksums = q.release_checksums(released, quality_context(deid))
    table_md = ["| cohort | state | release id | images | path (warehouse-relative) |", "|---|---|---|---:|---|"]
    table_md += [f"| {name} | {p.decision.action} | {p.decision.release_id or ''} | {p.images} | "
                 f"{('`' + paths[name] + '`') if name in paths else ''} |"
                 for name, p in sorted(plans.items())]
    return MaterializeResult(check_results=check_results([checksums], context.log), metadata={
        "dagster/row_count": sum(p.images for p in plans.values() if p.decision.action in (PUBLISH, UNCHANGED)),
        "cohorts": len(plans),
        "releases_published": sum(p.decision.action == PUBLISH for p in plans.values()),
        "releases_held": sum(p.decision.action == HOLD for p in plans.values()),
        "releases_rejected": sum(p.decision.action == REJECTED for p in plans.values()),
        "approvals_required": approvers.required,
        "seconds": round(time.monotonic() - started, 3),
        "summary": MetadataValue.md("\n".join(table_md)),
        "states": {name: p.decision.action for name, p in plans.items()},
        "reasons": {name: p.decision.reason for name, p in plans.items()},
        "release_ids": {name: p.decision.release_id for name, p in plans.items() if p.decision.release_id},
        "paths": paths,
        "images": {name: p.images for name, p in plans.items()},
        "min_k": DISCLOSURE.min_k,
        "dagster/column_lineage": column_lineage(RELEASE),
        **links,
    })


def release_links(warehouse: Warehouse, plans: dict[str, ReleasePlan], outcomes: dict) -> dict[str, MetadataValue]:
    """Links the UI opens, per cohort: the held release (`held/<cohort>`, waiting for approval) or the
    published one (`release/<cohort>`), and its review report (`review/<cohort>`): imaging-review's HTML,
    written to identifiable/reviews/ when the release is new or changed state (held, published)."""
    from imaging.governance.review import review
    from imaging.governance.review_html import render_html

    links = {}
    for name, outcome in sorted(outcomes.items()):
        action = plans[name].decision.action
        if outcome.path is None or action not in (HOLD, PUBLISH, UNCHANGED):
            continue
        report = warehouse.url(REVIEWS, f"{name}-{outcome.release_id}.html")
        if action != UNCHANGED or not fsx.exists(report):
            fsx.write_atomic(report, render_html(review(outcome.path, warehouse.root)).encode())
        links[f"{'held' if action == HOLD else 'release'}/{name}"] = _link(outcome.path)
        links[f"review/{name}"] = _link(report)
    return links


def _link(url: str) -> MetadataValue:
    """A warehouse location as a link the UI renders (a local path as a file: URL)."""
    return MetadataValue.url(url if "://" in url else f"file://{url}")

