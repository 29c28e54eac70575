"""published_cohort: content-addressed research releases, held until approved, published only when approved."""

import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass

from dagster import (AllPartitionMapping, AssetCheckSpec, AssetDep, AssetExecutionContext, AssetKey,
                     AssetMaterialization, AssetRecordsFilter, Failure, MaterializeResult, MetadataValue, TableColumn,
                     TableRecord, TableSchema, asset)
from dagster._core.definitions.data_version import (CODE_VERSION_TAG, DATA_VERSION_IS_USER_PROVIDED_TAG,
                                                    DATA_VERSION_TAG, DEFAULT_DATA_VERSION, NULL_EVENT_POINTER,
                                                    get_input_data_version_tag, get_input_event_pointer_tag)
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from assets import quality as q
from assets.checks import (RULES, RecordedFacts, check_outputs, check_specs, checks_table, partition_check_events,
                           publication_refusal, quality_context, upstream_rules)
from assets.optouts import OPTED, Marked, ReleaseOptOuts, Tally, read_optouts
from assets.partitions import COHORTS, PARTITIONS, SETTINGS, SINGLE_RUN, UI, run_partition_keys
from assets.runner import code_version
from assets.versions import EVENTS_LOGGED_BY_STEP, OPTOUT, InputVersion, input_version_over
from assets.run_tags import label_run
from assets.governance import CODE_VERSIONS, DISCLOSURE, LINEAGE, column_lineage, definition_metadata
from imaging import fs as fsx
from imaging.catalogue import (COHORTS as COHORTS_FOLDER, DEIDENTIFIED, LEDGER, RELEASE_INDEX, RELEASE_OBJECTS,
                               REVIEWS, manifest)
from imaging.driver.platform_files import load_clinical_policy, load_cohorts
from imaging.governance.approval import (BLOCKED, CONFLICT, EMPTY, HOLD, PUBLISH, REJECTED, UNCHANGED, ApprovalError,
                                         ApprovalPolicy, Decision, Outcome, ReleaseKey, ReleasePlan, building_url, carry_out,
                                         decide, list_held, load_standing, manifest_id)
from imaging.pseudonym import DEMO_KEY_FINGERPRINT
from imaging.quarantine import ensure_token_key
from imaging.ui import partition_path, review_path, run_path
from imaging.governance.bundle import ManifestEntry, content_key_of
from imaging.governance.cohort import CohortDefinition
from imaging.governance.datacard import (CheckResult, CodeVersion, DataCardInputs, DeidSummary,
                                         CountedWrite, FactsCount, InputPartition, OptOutSection, ReleaseFacts,
                                         Selection, release_facts)
from imaging.governance.disclosure import k_anonymity
from imaging.governance.lineage import RELEASE, release_columns
from imaging.governance.code_version import code_version as files_version, module_files
from imaging.governance.release_bundle import CheckedRelease, Sharing, finish_release
from imaging.governance.optout_table import OptOutTable
from imaging.governance.review_html import Served, SiteDayLink
from imaging.governance.review_md import CohortState, SiteDayRead, render_markdown
from imaging.quality.gate import NOT_EVALUATED, PASSED, covering
from imaging.quality.outcomes import CheckOutcome
from imaging.quality.rules import ERROR
from imaging.steps.release import CopyJob, HeaderPlan, WriteParquet
from imaging.steps.stamp import StampError, StampPlan
from resources.deid import Deidentifier
from resources.landing import LandingZone
from resources.spark import SparkResource, map_batches, project
from resources.warehouse import WAREHOUSE_POOL, Warehouse


# The code that decides a released image's bytes from its source's (part of every content key): the header
# rewrite, the stamp, the streamed copy, and pydicom's writer.
REWRITE_VERSION = files_version(module_files("imaging.steps.release", "imaging.steps.stamp", "imaging.deid.part10"),
                                policy={"pydicom": __import__("pydicom").__version__})


@dataclass(frozen=True)
class Placed:
    """One line of the copy's list (`images.list`, sorted by path): what the copy did with one image."""

    path: str
    sha256: str
    written: int  # bytes written: 0 when shared from the object store
    identity: str | None  # the file's identity as placed


def _placed(url: str):
    """The copy's lines, streamed from its file (`<sha256>  <written>  <identity or ->  <path>`)."""
    with fsx.open_read(url) as handle:
        for line in handle:
            sha, written, identity, path = line.decode().rstrip("\n").split("  ", 3)
            yield Placed(path, sha, int(written), None if identity == "-" else identity)


def _image_entries(url: str):
    """The images' manifest entries the Spark copy computed (sorted by path), streamed from its file."""
    def read():
        return (ManifestEntry(p.path, p.sha256) for p in _placed(url))
    return read


def _sharing(url: str, seconds: float) -> Sharing:
    """How the copy placed the images (shared or written, bytes written, identities), from its list."""
    shared = written = 0
    identities = {}
    for p in _placed(url):
        shared += p.written == 0
        written += p.written
        if p.identity is not None:
            identities[p.path] = p.identity
    return Sharing(shared, written, identities, round(seconds, 3))


@dataclass(frozen=True)
class Staged:
    """What staging a release's data made: the copy's outcome (persisted: one row per image, `ReleaseFile`), the
    header plan its images were written under and what its metadata rows count (`ReleaseFacts`)."""

    copied: object  # DataFrame of ReleaseFile rows
    plan: HeaderPlan
    seconds: float  # the copy step's
    facts: ReleaseFacts


def header_plan(cohort: CohortDefinition, rows, names) -> HeaderPlan:
    """The cohort's header plan: the quasi-identifier rules, its stamp (columns typed from the release rows'
    schema, of its columns `names`) and the rewrite's code version."""
    stamp = None
    if cohort.stamp:
        types = {f.name: str(f.type) for f in to_arrow_schema(rows.schema) if f.name in names}
        try:
            stamp = StampPlan.build(cohort.name, cohort.sponsor, cohort.stamp, types)
        except StampError as error:
            raise Failure(f"cohort {cohort.name}: {error}") from error
    return HeaderPlan(DISCLOSURE.header_rules(), stamp, REWRITE_VERSION)


def stage_data(selected, cohort: CohortDefinition, building: str, work: str, source_root: str, store: str, index,
               files_per_task: int, images: int, listed=None) -> Staged:
    """Place the images (each checksum verified, quasi-identifier attributes generalised as the metadata is,
    labels stamped where the cohort asks) and write the metadata.

    Each image's content key (`HeaderPlan.content_key`, in Spark SQL) is joined to the object store's index
    (`index`): an image whose key is known is placed from its stored object without being read or written
    again; the others are rewritten into the store, then placed. The copy's lines (sha256, bytes written, identity,
    path) go to one sorted text file in `work` (outside the bundle), so the manifest is written from a stream, the
    release verified without hashing what the copy just hashed, and no list of every image reaches the driver.
    The metadata's `sha256` is the released file's, joined from the copy; the list and the metadata are written
    in the copy's own pass, which also counts the metadata rows it writes (`FactsCount`: the data card's counts
    and breakdowns, k-anonymity's class sizes over the released quasi-identifiers, and the rows of patients on the
    lists in force, `listed`: what the release's checks hold to).
    """
    tasks = max(1, math.ceil(images / files_per_task))
    columns = release_columns(list(LINEAGE), DISCLOSURE)
    names = [c.name for c in columns]
    rows = selected.selectExpr(*[c.sql for c in columns], "output_path AS _output_path")
    plan = header_plan(cohort, rows, set(names))
    to_copy = (rows.select(F.col("_output_path").alias("output_path"), "sha256", "patient_pseudonym",
                           "study_instance_uid", "sop_instance_uid", F.expr(plan.values_sql()).alias("released"))
               .withColumn("content_key", F.expr(plan.key_sql()))
               .join(index, "content_key", "left"))
    job = CopyJob(source_root, building, plan.rules, plan.stamp, plan.code, store)
    # Kept: read by the one pass below, the metadata's counts and the store's index, and each file placed once.
    copied = map_batches(to_copy.repartition(tasks), job.step()).persist()
    line = F.concat_ws("  ", "sha256", F.col("written").cast("string"), F.coalesce("identity", F.lit("-")), "path")
    released = copied.select(F.col("path").alias("_file"), F.col("sha256").alias("_sha256"), line.alias("_line"))
    base = rows.drop("_output_path")
    # One pass (one Spark action: the copy itself, every image placed) writes the copy's list, a line for every
    # image copied, and the metadata (Parquet and CSV), a row for every copied image a selected row names (with
    # its released file's sha256), and counts those rows; sorted on one partition without a range sort's sampling
    # pass (a job of its own): the rows are one per image.
    both = project(released.join(base, F.col("file") == F.col("_file"), "left").withColumn("sha256", F.col("_sha256")),
                   [*names, "_file", "_line"])
    if listed is not None:  # rows of patients on the lists in force: counted, never written
        both = both.join(listed, "patient_pseudonym", "left")
    both = both.repartition(1).sortWithinPartitions("_file")
    # The metadata's schema: each selected row with its released file's sha256 (an inner join: the left join
    # above makes every column nullable).
    metadata = project(base.join(released.drop("_line"), F.col("file") == F.col("_file"))
                       .withColumn("sha256", F.col("_sha256")), names)
    count = FactsCount(quasi_identifiers=DISCLOSURE.released_columns, listed=None if listed is None else OPTED)
    writer = CountedWrite(WriteParquet(f"{building}/metadata.parquet", to_arrow_schema(metadata.schema),
                                       f"{building}/metadata.csv", list_url=f"{work}/images.list"), count)
    started = time.monotonic()
    (done,) = both.mapInArrow(writer, CountedWrite.OUTPUT).collect()  # one row: the rows written, their counts
    seconds = time.monotonic() - started
    return Staged(copied, plan, seconds, release_facts(json.loads(done["facts"])))


@dataclass(frozen=True)
class ReleaseInputs:
    """The manifest partitions a release read, and the site-day (`date|site`) behind each batch token.

    The site-days are identifiable (real dates and sites): used to look up the instance's records,
    never written to the card, which names partitions by batch token only.
    """

    partitions: tuple[InputPartition, ...]
    site_day: dict[str, str]  # batch token -> date|site
    images: dict[str, int]  # batch token -> images the release took from it


def input_partitions(selection: Marked, ledger) -> tuple[ReleaseInputs, Tally]:
    """The manifest partitions a release reads: batch token, a content hash of its rows, the run that wrote it; and
    what the opt-out lists held back of the selection (`Tally`), counted in the same query (one pass over the
    marked selection, which also fills its cache for the copy).

    One row per batch reaches the driver (bounded by the number of site-days, not of images), with the pseudonyms
    of its patients the lists held back (bounded by the lists).
    """
    kept = F.col(OPTED).isNull() if selection.opted else F.lit(True)
    versions = selection.marked.groupBy("batch").agg(
        F.substring(F.sha2(F.concat_ws(",", F.array_sort(F.collect_list(F.when(kept, F.col("sha256"))))), 256), 1, 16)
        .alias("data_version"), F.count(F.when(kept, F.lit(1))).alias("images"), *selection.tally_columns())
    runs = ledger.groupBy("batch").agg(F.max("run_id").alias("run_id"), F.max("run_started_at").alias("started"),
                                       F.max(q.partition_key()).alias("site_day"))
    # Sorted here, not by Spark: a sort is a sampling job of its own, and the rows are one per batch.
    every = sorted(versions.join(runs, "batch", "left").collect(), key=lambda r: r["batch"])
    rows = [r for r in every if r["images"]]  # a batch whose every selected image was held back is not read
    return ReleaseInputs(
        tuple(InputPartition("anonymized_images", r["batch"], r["data_version"], r["run_id"] or "unknown",
                             r["started"] or "unknown") for r in rows),
        {r["batch"]: r["site_day"] for r in rows if r["site_day"]},
        {r["batch"]: r["images"] for r in rows}), Marked.tally(every)


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


@dataclass(frozen=True)
class CohortBuild:
    """One cohort's build: the release and its checks, the copy's rows (persisted until the store's index is
    staged) and the partitions it read."""

    release: CheckedRelease
    copied: object  # DataFrame of ReleaseFile rows
    inputs: ReleaseInputs


def build_release(cohort: CohortDefinition, selected, read: ReleaseInputs, images: int, building: str,
                  work: str, source_root: str, files_per_task: int, deid: Deidentifier,
                  facts: RecordedFacts | None = None, optout_section: OptOutSection | None = None,
                  optouts: ReleaseOptOuts | None = None, store: str | None = None, index=None
                  ) -> "CohortBuild":
    """Stage one cohort's release bundle in `building`; returns what `finish_release` made and what it checked.

    With what the Dagster instance recorded (`facts`), the data card lists the latest result of every
    upstream check on the partitions the release read (`read`: `input_partitions`) and each input's landing data
    version. Only evaluations recorded before this build are read (published_cohort's own checks are the three
    below), so a rebuild of the same inputs after the same runs gives the same bytes. The card states the
    opt-out lists applied and what they held back (`optout_section`), and the release's own checks include that no
    patient on the lists in force (`optouts`) is in it.

    Its Spark action: the copy, whose own pass writes the metadata and counts it (counts, breakdowns,
    k-anonymity's class sizes, rows of listed patients).
    """
    # Disclosure control, counts and the opt-out check all on what is released: its metadata rows, counted as
    # the copy's pass writes them.
    staged = stage_data(selected, cohort, building, work, source_root, store, index, files_per_task, images,
                        listed=optouts.listed_frame() if optouts is not None else None)
    copied_frame, found = staged.copied, staged.facts
    k, counts = k_anonymity(found.class_sizes, DISCLOSURE), found.counts
    copied = sum(1 for _ in _image_entries(f"{work}/images.list")())
    checks = (
        *(upstream_checks(facts, read) if facts is not None else ()),
        CheckResult("published_cohort", "k_anonymity", k.passed,
                    description=f"every equivalence class has at least {k.min_k} patients"),
        CheckResult("published_cohort", "images_copied_and_verified", copied == images,
                    description="every selected image copied, its manifest checksum verified"),
        CheckResult("published_cohort", "metadata_row_per_image", counts.images == images,
                    description="one metadata row per released image"),
        *((optouts.check(found.listed),) if optouts is not None else ()),
    )
    card = DataCardInputs(
        selection=Selection.from_cohort(cohort),
        counts=counts,
        deid=DeidSummary.from_options(deid.options), checks=checks,
        inputs=with_landing_versions(facts, read) if facts is not None else read.partitions,
        code_versions=tuple(CodeVersion(a, v) for a, v in sorted(CODE_VERSIONS.items())),
        disclosure=k, lineage=LINEAGE, data_digest="", suppress_below=DISCLOSURE.suppress_below,
        key_fingerprint=deid.key_fingerprint, optouts=optout_section, text_policy=_text_policy(deid),
        stamp=staged.plan.stamp.describe() if staged.plan.stamp else None,
        clinical_sources=facts.clinical_sources(read.site_day.values()) if facts is not None else ())
    built = finish_release(building, card, images=_image_entries(f"{work}/images.list"))
    # k-anonymity decides hold or block; the release's other checks failing means the bundle itself is wrong.
    own = [c for c in checks if c.asset == "published_cohort" and c.name != "k_anonymity"]
    placed = _sharing(f"{work}/images.list", staged.seconds)
    return CohortBuild(CheckedRelease(built=built, k=k, verified=all(c.passed for c in own), sharing=placed),
                       copied_frame, read)


def site_days_read(inputs: ReleaseInputs) -> list[SiteDayRead]:
    """The site-days a release read: each batch's partition key (from the identifiable ledger) and the images
    it gave the release (`input_partitions`' one row per site-day). Shown in the UI, never in the release."""
    return [SiteDayRead(inputs.site_day.get(batch, "unknown"), batch, count)
            for batch, count in sorted(inputs.images.items())]


def stored_objects(session, warehouse: Warehouse):
    """The object store's index, one row per content key (any cohort's latest kept build): what a build joins
    its images' content keys to, to share their bytes instead of writing them again."""
    return (warehouse.read(session, RELEASE_INDEX).select("content_key", "object_sha256", "object_identity")
            .dropDuplicates(["content_key"]))


def index_rows(cohort: str, copied, action: str, placed: Sharing):
    """The cohort's rows of the object store's index (its build's content keys, objects and their identities once
    hashed) when the build is kept (held, published, or the same content as a kept one) and wrote something, else
    None. A build that shared every image adds nothing the index does not hold (rows it no longer lists stay as
    hints: an object gone is written anew)."""
    if action in (HOLD, PUBLISH, UNCHANGED) and placed.written_bytes:
        return (copied.where(F.col("object_identity").isNotNull())
                .select(F.lit(cohort).alias("cohort"), "content_key", F.col("sha256").alias("object_sha256"),
                        "object_identity").dropDuplicates(["content_key"]))
    return None


def stage_index(warehouse: Warehouse, commit, rows: dict, copied: list) -> None:
    """Stage every cohort's index rows of the run (`rows`: cohort -> rows) in one write, as one table's staging
    holds one write (a write per cohort kept only the last cohort's), then release the copies' rows."""
    if rows:
        union = functools.reduce(lambda a, b: a.unionByName(b), rows.values())
        warehouse.stage(commit, union, RELEASE_INDEX, [(cohort,) for cohort in sorted(rows)])
    for frame in copied:
        frame.unpersist()


def end_versions(context, warehouse: Warehouse, cohorts, flagged) -> list:
    """The run's cohorts' published versions that end now (imaging.governance.retention.due): a version holding
    patients who opted out since, once a newer one is published, and any superseded for its `retention_days`;
    ended in one commit, logged, and their bytes that no current version holds removed from the object store."""
    import datetime as dt

    from imaging.governance.retention import due, end

    opted = {(f.cohort, f.version): f.patients for f in flagged}
    endings = due(warehouse.root, cohorts, dt.datetime.now(dt.timezone.utc), opted)
    done = end(warehouse.root, endings, commit=warehouse.begin("retention")) if endings else []
    for ended in done:
        context.log.info(f"cohort {ended.ending.cohort} v{ended.ending.version}: {ended.ending.event} "
                         f"({ended.ending.reason}); {ended.reclaimed.objects} images' bytes reclaimed")
    return done


def sharing_metadata(placed: Sharing | None, ended: list) -> dict:
    """What the cohort's materialization says of its images' bytes: shared from earlier builds or written, and
    the versions that ended in this run."""
    out = {}
    if placed is not None:
        out.update({"images_shared": placed.shared, "image_bytes_written": placed.written_bytes,
                    "copy_seconds": placed.seconds})
    if ended:
        out["versions_ended"] = {f"v{e.ending.version}": f"{e.ending.event}: {e.ending.reason}" for e in ended}
    return out


COHORT = AssetKey("published_cohort")
# The release's own checks, per cohort partition. k-anonymity is ERROR (a release below the minimum k is blocked,
# and the failure reaches the operator) but not blocking: nothing runs after published_cohort, and a blocked cohort
# is a decision recorded, not a failed run. release_checksums is quality.yaml's (check_specs).
K_CHECK, BUILT_CHECK = "k_anonymity", "release_verified"
RELEASE_SPECS = [
    AssetCheckSpec(K_CHECK, asset=COHORT, partitions_def=COHORTS, blocking=False,
                   description="[ERROR] every quasi-identifier equivalence class of the release has at least the "
                               "minimum k patients (else the release is blocked)"),
    AssetCheckSpec(BUILT_CHECK, asset=COHORT, partitions_def=COHORTS, blocking=False,
                   description="[ERROR] every selected image copied with its checksum verified, one metadata row per "
                               "image (the release's own checks, in its data card)"),
]


def _outcome(check: str, passed: bool, observed: float, threshold: float | None, cohort: str, description: str,
             details: dict | None = None) -> CheckOutcome:
    return CheckOutcome(asset="published_cohort", check=check, severity=ERROR, passed=passed, observed=observed,
                        threshold=threshold, description=description, partitions=(cohort,),
                        failed_partitions=() if passed else (cohort,), details=details or {})


@asset(
    # Every site's opt-out list applies at build time (assets/optout_list.py).
    deps=[AssetDep("anonymized_images", partition_mapping=AllPartitionMapping()),
          AssetDep("optout_list", partition_mapping=AllPartitionMapping())],
    partitions_def=COHORTS,
    backfill_policy=SINGLE_RUN,
    kinds={"spark", "dicom", "parquet"},
    metadata=definition_metadata("published_cohort"),
    pool=WAREHOUSE_POOL,
    check_specs=[*RELEASE_SPECS, *check_specs("published_cohort", COHORTS)],
    description="One partition per cohort definition in platform/cohorts/ (a new file is a new partition): a "
                "content-addressed release bundle (images, metadata, data card, OpenLineage events, SHA256SUMS; the "
                "release id is the sha256 of SHA256SUMS) read from every site-day of the de-identified images, "
                "checked for k-anonymity (quasi-identifier attributes of the released headers generalised as the "
                "metadata is), held in identifiable/held/ until `approvals_required` listed approvers have signed an "
                "approval of that exact content (`imaging-review approve`), then published to "
                "deidentified/cohorts/<name>/v<version>/. Published releases are immutable. Each cohort's "
                "materialization carries its review (Markdown: verdict, approvals, counts, disclosure control, "
                "quarantine, the site-days read, each linked to its page). Every cohort at once: a backfill of all "
                "partitions (one run). Refuses while the latest evaluation of an ERROR data-quality check of an "
                "upstream partition has failed, or while an opt-out list file cannot be read. Patients on the "
                "opt-out list in force are never released; a published release holding patients who opted out "
                "since is flagged (a count) and the next version is built without them.",
)
def published_cohort(context: AssetExecutionContext, spark: SparkResource, landing: LandingZone,
                     warehouse: Warehouse, deid: Deidentifier):
    started = time.monotonic()
    label_run(context)  # who launched the run and why, when its launcher did not say
    # Across runs: a failed ERROR check on any partition this reads (every manifest partition) holds
    # publication until the partition is fixed and re-materialized. Nothing is staged before this.
    # An unreadable opt-out list refuses too, before a Spark session is started for nothing.
    # The upstream checks' results and the landing versions the data cards list: recorded before this
    # run built anything (this asset's own evaluations come after), read once for the refusal and every cohort.
    facts = RecordedFacts(context.instance)
    refusal = publication_refusal(context.instance, facts=facts) or read_optouts(landing.root).refusal()
    if refusal:
        raise Failure(refusal)
    facts.prefetch(upstream_rules())  # the data cards' other checks (WARN), read while Spark works
    wanted = set(run_partition_keys(context, COHORTS))
    session = spark.spark_session
    # Who may sign and how many must: read once, before anything is built (a broken file stops the run here).
    try:
        approvers = ApprovalPolicy.load()
    except ApprovalError as error:
        raise Failure(str(error)) from error
    demo = deid.key_fingerprint == DEMO_KEY_FINGERPRINT  # demo approver keys count only for demo releases
    # The opt-out lists in force now (an unreadable list file refuses the run); published releases holding patients
    # who opted out since are flagged (a count) and logged, and each cohort's next version is built without them.
    optouts = ReleaseOptOuts.gather(context, session, warehouse, landing, deid)
    provenance = cohort_provenance(context)  # what it reads, as recorded now: before any row is read
    ensure_token_key(warehouse.root, deid.key)  # the reviews name landing files by their keyed tokens
    flagged = optouts.flag_published(warehouse.root)
    rows = warehouse.read(session, manifest(load_clinical_policy()))
    ledger = warehouse.read(session, LEDGER)
    index = stored_objects(session, warehouse)
    commit = warehouse.begin("published_cohort")
    root = warehouse.root
    sharing: dict[str, Sharing] = {}
    indexed: dict = {}  # cohort -> its rows of the object store's index, staged together after the builds
    copies: list = []  # each build's copy rows (persisted), released once the index is staged
    plans: dict[str, ReleasePlan] = {}
    smallest: dict[str, int | None] = {}
    read: dict[str, list[SiteDayRead]] = {}
    own: list[CheckOutcome] = []
    applied = {}
    for cohort in (c for c in load_cohorts() if c.name in wanted):
        marked = optouts.apply(cohort, rows.where(cohort.sql_predicate()), root)
        inputs, tally = input_partitions(marked, ledger)  # one pass: the card's inputs and what the lists held back
        applied[cohort.name] = optout = marked.counted(tally)
        cohort, selected, images = optout.cohort, optout.kept, optout.images
        if images == 0:
            optout.cached.unpersist()
            context.log.info(f"cohort {cohort.name} {cohort.release}: selects no image, nothing to release")
            plans[cohort.name] = ReleasePlan(cohort=cohort, decision=Decision(EMPTY, "selects no image", ""),
                                             building="", images=0)
            smallest[cohort.name], read[cohort.name] = None, []
            own += [_outcome(K_CHECK, True, 0, DISCLOSURE.min_k, cohort.name, "nothing selected: nothing disclosed"),
                    _outcome(BUILT_CHECK, True, 0, 0, cohort.name, "nothing selected: nothing built")]
            continue
        building = building_url(commit, root, cohort.name)
        # Spark writes the checksum list and the CSV: on a tables root it can write (not gs:// files).
        work = warehouse.scratch(commit, cohort.name)
        made = build_release(cohort, selected, inputs, images, building, work,
                             warehouse.zone(DEIDENTIFIED), landing.files_per_task, deid, facts,
                             optout_section=optouts.section(optout), optouts=optouts,
                             store=warehouse.url(RELEASE_OBJECTS), index=index)
        release, copied = made.release, made.copied
        read[cohort.name] = site_days_read(made.inputs)
        optout.cached.unpersist()
        sharing[cohort.name] = release.sharing
        built, k = release.built, release.k
        smallest[cohort.name] = k.smallest
        own += [_outcome(K_CHECK, k.passed, k.smallest, k.min_k, cohort.name,
                         f"every equivalence class has at least {k.min_k} patients",
                         {"classes": k.classes, "classes_below_k": k.below_k}),
                _outcome(BUILT_CHECK, release.verified, 0 if release.verified else 1, 0, cohort.name,
                         "every selected image copied and verified, one metadata row per image")]
        if not release.verified:
            yield from _checks(context, own, [cohort.name])
            raise Failure(f"cohort {cohort.name}: the release's own checks failed (see its data card)")
        target = warehouse.url(COHORTS_FOLDER, cohort.name, cohort.release)
        published = ReleaseKey(manifest_id(target), content_key_of(target)) if fsx.exists(target) else None
        decision = decide(ReleaseKey(built.release_id, built.content_key), published=published,
                          held=list_held(root, cohort.name, cohort.version, approvers),
                          standing=load_standing(root, built.release_id, approvers, demo), k_passed=k.passed,
                          k_reason=k.reason())
        plans[cohort.name] = ReleasePlan(cohort=cohort, decision=decision, building=building, images=images,
                                         trusted=release.sharing.identities)
        kept = index_rows(cohort.name, copied, decision.action, release.sharing)
        if kept is not None:
            indexed[cohort.name] = kept
        copies.append(copied)
        log = context.log.warning if decision.action in (BLOCKED, CONFLICT, REJECTED) else context.log.info
        log(f"cohort {cohort.name} {cohort.release}: {decision.action} (release {decision.release_id}, "
            f"{images} images, {release.sharing.shared} shared with earlier builds, "
            f"{release.sharing.written_bytes} image bytes written): {decision.reason}")

    stage_index(warehouse, commit, indexed, copies)
    try:  # a conflict refuses the run before anything is staged: releases go out together or not at all
        outcomes = carry_out(list(plans.values()), commit, root, approvers, run_id=context.run.run_id)
    except ApprovalError as error:
        raise Failure(str(error)) from error

    ended = end_versions(context, warehouse, [p.cohort for p in plans.values()], flagged)
    # Every release now in place (held or published) verifies against its SHA256SUMS (data-quality check); a file
    # the copy placed is trusted while its identity is the one it had then (a changed file is hashed again).
    ctx = quality_context(deid)
    trusted = {name: placed.identities for name, placed in sharing.items() if placed is not None}
    for name in sorted(plans):
        path = outcomes[name].path if outcomes[name].path else (
            warehouse.url(COHORTS_FOLDER, name, plans[name].cohort.release)
            if plans[name].decision.action == UNCHANGED else None)
        own.append(covering(q.release_checksums({name: path} if path else {}, ctx, trusted), [name]))
    seconds = round(time.monotonic() - started, 3)
    reviews = review_releases(warehouse, plans, outcomes, trusted)
    tables = {name: optout_table(plans[name], applied[name], optouts, flagged, reviews.get(name)) for name in plans}
    served = write_reviews(warehouse, plans, outcomes, reviews, tables, read)
    opted = optouts.metadata(flagged, applied)
    for name, plan in sorted(plans.items()):
        materialization = cohort_materialization(warehouse, plan, outcomes[name], reviews.get(name), read[name],
                                                 smallest[name], approvers.required, seconds, len(plans), provenance,
                                                 tables[name], served.get(name))
        # The cohort's page shows its own checks too (recorded right after, on its partition), and what the
        # opt-out lists did to it: its published releases holding patients who opted out since (a count, never
        # who), what they held back of this build, the list versions applied and the site-days to withdraw.
        mine = [f for f in flagged if f.cohort == name]
        yield materialization.with_metadata({
            **materialization.metadata,
            **sharing_metadata(sharing.get(name), [e for e in ended if e.ending.cohort == name]),
            "checks": checks_table([o for o in own if o.partitions == (name,)], name),
            "optout_list_versions": opted["optout_list_versions"],
            "optout_list_received": opted["optout_list_received"],
            "optout_since": {f.release: f.message for f in mine},
            "optout_excluded": opted["optout_excluded"].get(name, {}),
            "optout_table": optout_metadata(tables[name]),
            "optout_withdraw": opted["optout_withdraw"],
            **({"optout_follows": opted["optout_follows"][name]} if name in opted["optout_follows"] else {}),
            **({"optouts": MetadataValue.md("\n".join(optouts.markdown(mine)).strip())}
               if mine or opted["optout_withdraw"] else {})})
    yield from _checks(context, own, sorted(plans))
    yield MaterializeResult(metadata=EVENTS_LOGGED_BY_STEP)


def _checks(context, outcomes: list[CheckOutcome], cohorts: list[str]):
    """Each cohort's own results (after its materialization), then the run's one output per check."""
    for name in cohorts:
        yield from partition_check_events(context, [o for o in outcomes if o.partitions == (name,)], [name],
                                          "published_cohort")
    yield from check_outputs(context, "published_cohort", outcomes)


def cohort_materialization(warehouse: Warehouse, plan: ReleasePlan, outcome: Outcome, review, site_days,
                           smallest: int | None, required: int, seconds: float, cohorts: int,
                           provenance: dict[str, str] | None = None, optouts: OptOutTable | None = None,
                           full_review: str | None = None) -> AssetMaterialization:
    """One cohort's materialization: its own state, reason, release id, k, counts and approvals, and its review
    as Markdown with a link to the page of each site-day it read. Its data version is the release id (a
    release is named by its content), so a rebuild of the same content is the same version; its provenance
    (`cohort_provenance`) says which versions of its inputs it read."""
    decision, cohort = plan.decision, plan.cohort
    path = warehouse.relative(outcome.path) if outcome.path else None
    if path is None and decision.action == UNCHANGED:
        path = warehouse.relative(warehouse.url(COHORTS_FOLDER, cohort.name, cohort.release))
    state = CohortState(cohort.name, cohort.version, decision.action, decision.reason, decision.release_id,
                        plan.images, DISCLOSURE.min_k, smallest, path)
    standing = review.standing if review is not None else None
    approvals = list(standing.approvals) if standing is not None else []
    metadata = {
        "state": decision.action,
        "verdict": review.verdict if review is not None else decision.action.upper(),
        "reason": decision.reason,
        # The whole review, first thing a reviewer opens ("Show Markdown" in the metadata table).
        "review": MetadataValue.md(render_markdown(state, review, site_days, _partition_link, full_review=full_review,
                                                   optouts=optouts, run_link=_run_link)),
        "release_id": decision.release_id or "",
        "version": cohort.version,
        "images": plan.images,
        # Images released (published, or unchanged): what the cohort's data is, as every asset counts rows.
        "dagster/row_count": plan.images if decision.action in (PUBLISH, UNCHANGED) else 0,
        "k_smallest_class": smallest if smallest is not None else 0,
        "min_k": DISCLOSURE.min_k,
        "approvals": len(approvals),
        "approvals_required": required,
        "approved_by": ", ".join(f"{a.text.principal} ({a.text.signed_at})" for a in approvals) or "none",
        "site_days_read": len(site_days),
        "run/cohorts": cohorts,
        "run/seconds": seconds,
        "dagster/column_lineage": column_lineage(RELEASE),
    }
    if review is not None and review.counts is not None:
        metadata.update(patients=review.counts.patients, studies=review.counts.studies, series=review.counts.series)
    if full_review:  # the whole review of this exact release, served by the proxy behind the same login
        metadata["review_html"] = MetadataValue.url(full_review)
    if path:
        metadata["path"] = path  # warehouse-relative: a folder on the server, never a link
    tags = dict(provenance or {})
    if decision.release_id:
        tags.update({DATA_VERSION_TAG: decision.release_id, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"})
    return AssetMaterialization(asset_key=COHORT, partition=cohort.name, metadata=metadata, tags=tags)


def cohort_provenance(context: AssetExecutionContext) -> dict[str, str]:
    """Dagster's provenance tags for every cohort this run materializes: its code version, and for each input the
    version read and a pointer to the newest event read. Dagster then calls a cohort unsynced only when a site-day of
    anonymized_images (or a site's opt-out list) has, after that pointer, a data version other than the one it had:
    a re-run that changes nothing leaves every cohort synced. Without these tags Dagster falls back to times, and
    any later materialization of any site-day, the same data included, made every cohort unsynced. (Dagster tracks
    partitioned inputs below 100 partitions only; beyond, the pointer is the newest materialization of any.)"""
    instance = context.instance
    keys = PARTITIONS.get_partition_keys()
    if len(keys) < 100:
        images = input_version_over(instance, "anonymized_images", keys, observed=False)
    else:
        latest = next(iter(instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("anonymized_images")), limit=1).records), None)
        images = InputVersion("anonymized_images", DEFAULT_DATA_VERSION.value, latest.storage_id if latest else None)
    lists = input_version_over(instance, OPTOUT, SETTINGS.sites, observed=True)
    tags = {CODE_VERSION_TAG: code_version(context, "published_cohort")}
    for i in (images, lists):
        tags[get_input_data_version_tag(AssetKey(i.asset))] = i.version
        tags[get_input_event_pointer_tag(AssetKey(i.asset))] = str(i.pointer) if i.pointer else NULL_EVENT_POINTER
    return tags


def _partition_link(asset: str, partition: str) -> str:
    return partition_path(UI.path_prefix, asset, partition)


def review_releases(warehouse: Warehouse, plans: dict[str, ReleasePlan], outcomes: dict,
                    trusted: dict[str, dict[str, str]] | None = None) -> dict:
    """Each held, published or unchanged release reviewed as `imaging-review` does (every checksum verified, the
    identifiable zone read), for its Markdown, its opt-out table and its HTML. A file this run's copy placed is
    trusted while its identity is unchanged (`trusted`), and what the cohort's last review computed from files
    unchanged since is kept (`EvidenceCache`)."""
    from imaging.governance.evidence import EvidenceCache
    from imaging.governance.review import review

    found = {}
    for name, outcome in sorted(outcomes.items()):
        plan = plans[name]
        path = warehouse.url(COHORTS_FOLDER, name, plan.cohort.release) if plan.decision.action == UNCHANGED \
            else outcome.path
        if path is None or plan.decision.action not in (HOLD, PUBLISH, UNCHANGED):
            continue
        cache_url = warehouse.url(REVIEWS, "_cache", f"{name}.json")
        cache = EvidenceCache.load(cache_url)
        found[name] = review(path, warehouse.root, trusted=(trusted or {}).get(name), cache=cache)
        cache.save(cache_url)
    return found


def optout_table(plan: ReleasePlan, applied, optouts: ReleaseOptOuts, flagged, review) -> OptOutTable:
    """The cohort version's opt-out table (imaging/governance/optout_table.py), from this run's exact counts: the
    same numbers in its Markdown, metadata and served HTML."""
    cohort = plan.cohort
    since = sum(f.patients for f in flagged if f.cohort == cohort.name and f.version == cohort.version)
    withdrawn = sum(1 for t in review.traces if t.withdrawn) if review is not None else 0
    never = optouts.not_deidentified
    return OptOutTable.of(cohort.name, cohort.version, never=(never.images, never.patients),
                          left_out=(applied.excluded_images, applied.excluded_patients), since=since,
                          withdrawn=withdrawn)


def optout_metadata(table: OptOutTable) -> MetadataValue:
    return MetadataValue.table(
        records=[TableRecord(r) for r in table.records()],
        schema=TableSchema(columns=[TableColumn("what", "string"), TableColumn("images", "int"),
                                    TableColumn("patients", "int")]))


def write_reviews(warehouse: Warehouse, plans: dict[str, ReleasePlan], outcomes: dict, reviews: dict,
                  tables: dict[str, OptOutTable], read: dict[str, list[SiteDayRead]]) -> dict[str, str]:
    """Each reviewed release's HTML report, into identifiable/reviews/<cohort>-<release id>.html: one per release
    of a cohort version, made by the run (rewritten when what it says changed: approvals, opt-outs since), and
    served by the proxy behind the UI's login. Returns each cohort's address of it for the UI."""
    from imaging.governance.review_html import render_html

    served = {}
    for name, result in sorted(reviews.items()):
        file_name = f"{name}-{outcomes[name].release_id}.html"
        report = warehouse.url(REVIEWS, file_name)
        html = render_html(result, _served(result, tables[name], read[name], name)).encode()
        if not fsx.exists(report) or fsx.read_bytes(report) != html:
            fsx.write_atomic(report, html)
        served[name] = review_path(UI.path_prefix, file_name)
    return served


def _served(result, table: OptOutTable, site_days: list[SiteDayRead], cohort: str) -> Served:
    runs = {p["batch"]: p["run_id"] for p in (result.card or {}).get("inputs", [])}
    links = tuple(SiteDayLink(s.site_day, s.images, _partition_link("anonymized_images", s.site_day),
                              runs.get(s.batch, "unknown"),
                              _run_link(runs[s.batch]) if runs.get(s.batch, "unknown") != "unknown" else "")
                  for s in sorted(site_days, key=lambda s: s.site_day))
    return Served(optouts=table, site_days=links, cohort_page=partition_path(UI.path_prefix, "published_cohort", cohort))


def _run_link(run_id: str) -> str:
    return run_path(UI.path_prefix, run_id)
