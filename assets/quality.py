"""The Spark side of the data-quality checks: each check reduces DataFrames to a few figures.

Shared helper module (like `assets/partitions.py`), not an asset. Every figure comes from
combining aggregations (`groupBy().agg`, `percentile_approx`), so a hot key (one patient with
most rows) is pre-aggregated on each task before the shuffle and never gathered into one task.
The driver receives a constant amount per check: one summary row, the top-N offenders (a
bounded `orderBy().limit()` query, run only when the check fails) and, for accounting checks,
one row per partition of the run. The rules (thresholds, severities, pseudonymous offenders)
are evaluated by the pure `imaging.quality`.

Each query costs a fixed ~0.1 s of driver work (planning, code generation, one job per shuffle)
whatever the data size, so a step's figures share their passes: inside `shared_passes()` (the
runner opens it around a step's figures) each frame's per-partition profile (`partition_profile`,
one `groupBy(date, site)` with the counts of every per-partition figure of that table) and the
distributions of its per-key counts (`key_distributions`, one GROUPING SETS query for every key of a
table) are computed once and handed to every figure that asks; outside it each figure computes what
it needs itself. The runner also turns adaptive execution off for them (`plain_plans`).

The as-of join the linkage checks mirror is `assets/linkage.py` `as_of_join`.
"""

from __future__ import annotations

import os
import re

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from pyspark.sql import Column, DataFrame, functions as F

from imaging.clinical_source import SOURCE_ORIGIN
from imaging.governance.bundle import verify_release
from imaging.quality.columns import birth_date_columns, identity_columns, java_date_pattern
from imaging.quality.outcomes import (CheckOutcome, Distribution, Offender, evaluate_balance, evaluate_max,
                                      patient_offender, uid_offender)
from imaging.quality.rules import QualityContext
from imaging.steps.clinical import ClinicalPolicy
from imaging.header import DA_FORMAT
from imaging.steps.index import MANDATORY as MANDATORY_ATTRIBUTES

RAW = "raw_image_index"
LINKED = "linked_patient_metadata"
ANONYMIZED = "anonymized_images"
PUBLISHED = "published_cohort"
# The index's own rule (imaging.steps.index.MANDATORY) quarantines such instances: mandatory_attributes
# guards that invariant.
MANDATORY = tuple(field_name for field_name, _ in MANDATORY_ATTRIBUTES)


def partition_key() -> Column:
    """The Dagster multi-partition key of a row, `date|site`."""
    return F.concat_ws("|", F.col("date"), F.col("site"))


def _issuer(ctx: QualityContext) -> Column:
    """The row's patient-id namespace: its site's, never the file's IssuerOfPatientID."""
    if not ctx.site_namespaces:
        return F.lit(ctx.default_issuer)
    pairs = [F.lit(v) for item in sorted(ctx.site_namespaces.items()) for v in item]
    return F.coalesce(F.element_at(F.create_map(*pairs), F.col("site")), F.lit(ctx.default_issuer))


# --- shared passes ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Computed:
    """A shared result and the frame it is of (kept alive, so that the `id` in its key is not reused
    while the scope lasts)."""

    frame: DataFrame
    value: object


@dataclass
class _Passes:
    """What one step's figures computed so far, by (kind, frame id, context id, names)."""

    policy: ClinicalPolicy | None
    results: dict[tuple, _Computed] = field(default_factory=dict)


_SHARED: ContextVar[_Passes | None] = ContextVar("quality_shared_passes", default=None)


@contextmanager
def shared_passes(policy: ClinicalPolicy | None = None) -> Iterator[None]:
    """Within the block, each frame's profile and key distributions are computed once and shared by
    every figure reading that frame (the same DataFrame object). `policy` is the step's clinical
    policy: with it, a linked table's profile also holds the birth-date figures.

    The frames must not change underneath the block (the runner opens it after its commit)."""
    token = _SHARED.set(_Passes(policy))
    try:
        yield
    finally:
        _SHARED.reset(token)


ADAPTIVE, SHUFFLE_PARTITIONS = "spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions"


def _cores(session) -> int | None:
    """The cores of a `local[...]` master (from its configuration, which Spark Connect also answers);
    None for a cluster, whose cores the driver does not know before it asks."""
    try:
        master = session.conf.get("spark.master", "") or ""
    except Exception:  # noqa: BLE001 - a Connect server may refuse to show a static setting
        return None
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(,\d+)?\]", master)  # local[N] or local[N,retries]
    if match is None:
        return None
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


@contextmanager
def plain_plans(session) -> Iterator[None]:
    """Adaptive query execution off, and at most one shuffle partition per core, while the block runs
    (the previous settings restored after).

    The checks' queries are aggregations whose shuffles carry partial aggregates (one row per key and
    task), where AQE has nothing to re-plan but would still run each shuffle's map side as a job of its
    own and re-plan after it, a fixed cost per query; its one use here, coalescing the reduce side to
    what the data needs, is replaced by one reduce task per core. Measured with benchmarks/check_jobs.py
    (a third of the jobs, and less time per query). Runtime settings of the session, for a local master
    only: on a cluster or over Spark Connect, where the driver does not know the cores, AQE stays on (the
    standalone-cluster test ran ~45% slower with every shuffle keeping its configured reduce tasks)."""
    cores = _cores(session)
    if not cores:  # a cluster or Connect: without AQE every shuffle would keep all its reduce tasks
        yield
        return
    before = {key: session.conf.get(key) for key in (ADAPTIVE, SHUFFLE_PARTITIONS)}
    session.conf.set(ADAPTIVE, "false")
    session.conf.set(SHUFFLE_PARTITIONS, str(max(1, min(cores, int(before[SHUFFLE_PARTITIONS])))))
    try:
        yield
    finally:
        for key, value in before.items():
            session.conf.set(key, value)


def _shared(kind: str, frame: DataFrame, ctx: QualityContext, compute: Callable[[], object]):
    """`compute()`, once per (kind, frame, ctx) inside `shared_passes`, every time outside it."""
    passes = _SHARED.get()
    if passes is None:
        return compute()
    key = (kind, id(frame), id(ctx), ())
    hit = passes.results.get(key)
    if hit is not None and hit.frame is frame:
        return hit.value
    value = compute()
    passes.results[key] = _Computed(frame, value)
    return value


def _shared_policy() -> ClinicalPolicy | None:
    passes = _SHARED.get()
    return passes.policy if passes is not None else None


@dataclass(frozen=True)
class PartitionCounts:
    """One partition's figures from a table's profile: rows, and the named conditional counts."""

    date: str | None
    site: str | None
    rows: int
    counts: Mapping[str, int]

    @property
    def key(self) -> str:
        """`date|site` as `partition_key()` makes it (`concat_ws`: a null part is left out)."""
        return "|".join(str(v) for v in (self.date, self.site) if v is not None)

    @property
    def label(self) -> str:
        """`date|site` as the figures format a row's two columns."""
        return f"{self.date}|{self.site}"


def _blank(column: str) -> Column:
    return F.col(column).isNull() | (F.trim(F.col(column)) == "")


def _count_when(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def _profile_counts(names: Iterable[str], ctx: QualityContext, policy: ClinicalPolicy | None) -> dict[str, Column]:
    """The per-partition counts `names` asks for (see `PROFILES`)."""
    counts: dict[str, Column] = {}
    for name in names:
        if name == "missing":
            counts[name] = _count_when(F.greatest(*[_blank(c) for c in MANDATORY]))
        elif name.startswith("missing_"):
            counts[name] = _count_when(_blank(name.removeprefix("missing_")))
        elif name == "future":
            counts[name] = _count_when(_dicom_date("study_date") > F.lit(ctx.today))
        elif name == "placeholder":
            counts[name] = _count_when(F.upper(F.trim(F.col("patient_id"))).isin(ctx.rules.placeholder_list))
        elif name == "unlinked":
            counts[name] = F.sum(F.when(F.col("has_clinical_record"), 0).otherwise(1))
        elif name == "before_birth":
            counts[name] = _count_when(_dicom_date("study_date") < birth_date(policy))
        elif name == "birth_date_known":
            counts[name] = _count_when(birth_date(policy).isNotNull())
        else:
            raise ValueError(f"no per-partition count {name!r}")
    return counts


# What each table's figures read from its profile, asked for together so that one query serves them all
# (each is only what its figures need: every expression costs code generation, whatever the data size).
ROWS: tuple[str, ...] = ()
INDEX_COUNTS = ("missing", *(f"missing_{c}" for c in MANDATORY), "future")  # raw step: mandatory, future, accounting
IMAGES_COUNTS = ("placeholder",)                                            # link step's images: placeholders
LINKED_COUNTS = ("unlinked",)                                               # link step's output: unlinked share
BIRTH_COUNTS = ("before_birth", "birth_date_known")                         # ... and study before birth


def _linked_counts() -> tuple[str, ...]:
    """The link step's counts of its output: with the birth-date ones when the step's policy is known."""
    return LINKED_COUNTS + (BIRTH_COUNTS if _shared_policy() is not None else ())


def partition_profile(df: DataFrame, ctx: QualityContext, counts: Sequence[str] = ROWS) -> list[PartitionCounts]:
    """Rows and the per-partition `counts` of `df`, one `groupBy(date, site)` (one driver row per
    partition of the run). Inside `shared_passes` a profile of the same frame holding every count
    asked for is reused, so the figures of one table read one query."""
    wanted = tuple(counts)
    passes = _SHARED.get()
    if passes is not None:
        for (kind, frame_id, ctx_id, names), held in passes.results.items():
            if (kind == "profile" and frame_id == id(df) and held.frame is df and ctx_id == id(ctx)
                    and set(wanted) <= set(names)):
                return held.value
    policy = _shared_policy()

    def compute() -> list[PartitionCounts]:
        expressions = _profile_counts(wanted, ctx, policy)
        aggregates = [F.count(F.lit(1)).alias("_rows"), *[c.alias(f"_c_{i}") for i, c in enumerate(expressions.values())]]
        return [PartitionCounts(r["date"], r["site"], int(r["_rows"]),
                                {name: int(r[f"_c_{i}"] or 0) for i, name in enumerate(expressions)})
                for r in df.groupBy("date", "site").agg(*aggregates).collect()]
    if passes is None:
        return compute()
    value = compute()
    passes.results[("profile", id(df), id(ctx), wanted)] = _Computed(df, value)
    return value


@dataclass(frozen=True)
class KeySet:
    """One per-key figure of a frame: its key columns (rows with a null key are not counted, as the
    figures filter them out), and the value per key: rows, distinct values of `distinct`, or the
    sum of `weight`."""

    name: str
    keys: tuple[str, ...]
    distinct: tuple[str, ...] = ()
    weight: str | None = None
    required: tuple[str, ...] = ()  # key columns whose null value is not a key (the figure's `isNotNull` filter)

    def value(self) -> Column:
        if self.distinct:
            return F.countDistinct(*self.distinct)
        if self.weight:
            return F.sum(self.weight)
        return F.count(F.lit(1))


def _distribution(row, percentiles: Sequence[float]) -> Distribution:
    if row is None:  # no key at all: what an aggregate over no row says
        return Distribution(0, None, None, dict(zip(percentiles, [None] * len(percentiles))))
    return Distribution(int(row["keys"]), _num(row["lo"]), _num(row["hi"]),
                        dict(zip(percentiles, [_num(v) for v in row["pct"] or [None] * len(percentiles)])))


def _distribution_aggregates(ctx: QualityContext) -> list[Column]:
    return [F.count(F.lit(1)).alias("keys"), F.min("n").alias("lo"), F.max("n").alias("hi"),
            F.percentile_approx("n", list(ctx.rules.percentiles), 1000).alias("pct")]


def key_distributions(df: DataFrame, sets: Sequence[KeySet], ctx: QualityContext) -> dict[str, Distribution]:
    """The distribution of every key set's per-key value in one query: GROUPING SETS over the sets'
    keys (each row is pre-aggregated per task for every set, so a hot key never lands whole on one
    task), then per set the number of keys, min, max and percentiles. A set without keys is the
    grand total (its distribution's maximum is the total). One driver row per set."""
    key_sets = [tuple(s.keys) for s in sets]
    if len(set(key_sets)) != len(key_sets):
        raise ValueError("key_distributions: two sets with the same keys")
    columns = list(dict.fromkeys(k for s in sets for k in s.keys))
    base = df.withColumn("_issuer", _issuer(ctx)) if "_issuer" in columns and "_issuer" not in df.columns else df
    values = [s.value().alias(f"_v{i}") for i, s in enumerate(sets)]
    grouped = (base.groupingSets([[F.col(k) for k in s.keys] for s in sets], *columns)
               .agg(*values, F.grouping_id().alias("_gid")) if columns else base.agg(*values, F.lit(0).alias("_gid")))
    which, n = None, None
    for i, s in enumerate(sets):
        # grouping_id: one bit per column (the first is the highest), set when the column is not grouped.
        gid = sum(1 << (len(columns) - 1 - j) for j, c in enumerate(columns) if c not in s.keys)
        mine = F.col("_gid") == gid
        for c in s.required:
            mine = mine & F.col(c).isNotNull()
        which = (F.when(mine, F.lit(i)) if which is None else which.when(mine, F.lit(i)))
        n = (F.when(mine, F.col(f"_v{i}")) if n is None else n.when(mine, F.col(f"_v{i}")))
    rows = {r["_set"]: r for r in grouped.select(which.alias("_set"), n.alias("n")).where(F.col("_set").isNotNull())
            .groupBy("_set").agg(*_distribution_aggregates(ctx)).collect()}
    percentiles = list(ctx.rules.percentiles)
    return {s.name: _distribution(rows.get(i), percentiles) for i, s in enumerate(sets)}


@dataclass(frozen=True)
class KeyCounts:
    """A per-key count reduced to its distribution and, when asked, its top keys (raw: driver only)."""

    distribution: Distribution
    top: tuple[dict, ...] = ()
    failed_partitions: tuple[str, ...] = ()  # when the key holds date and site: every partition over the max


def count_per_key(df: DataFrame, keys: Sequence[str], ctx: QualityContext, *, maximum: float | None = None,
                  distinct: Sequence[str] | None = None, weight: str | None = None,
                  distribution: Distribution | None = None) -> KeyCounts:
    """Rows (or distinct values of `distinct`, or the sum of `weight`) per key.

    One aggregation for the distribution (or none, when `distribution` was computed with others by
    `key_distributions`); only when the maximum is above `maximum`, the top keys (a bounded query,
    top N) and the partitions holding any key over it (one row per partition), so the driver never
    holds one row per key.
    """
    spec = KeySet("n", tuple(keys), tuple(distinct or ()), weight)
    counts = df.groupBy(*keys).agg(spec.value().alias("n"))
    if distribution is None:
        row = counts.agg(*_distribution_aggregates(ctx)).first()
        distribution = _distribution(row, list(ctx.rules.percentiles))
    top: tuple[dict, ...] = ()
    failed: tuple[str, ...] = ()
    if maximum is not None and (distribution.maximum or 0) > maximum:
        # Only a failing check pays these (bounded) queries; the per-key counts are not kept between them.
        over = counts.where(F.col("n") > maximum)
        top = tuple(r.asDict() for r in over.orderBy(F.desc("n"), *keys).limit(ctx.rules.top_offenders).collect())
        rows = over if {"date", "site"} <= set(keys) else df.join(over.select(*keys), list(keys), "left_semi")
        if {"date", "site"} <= set(rows.columns):
            failed = tuple(sorted(r["p"] for r in rows.select(partition_key().alias("p")).distinct().collect()))
    return KeyCounts(distribution, top, failed)


def _num(value):
    return None if value is None else float(value)


def _partitions_of(df: DataFrame, where: Column, limit: int = 50) -> list[str]:
    """Partitions holding the rows `where` selects (bounded: at most `limit`)."""
    return [r["p"] for r in df.where(where).select(partition_key().alias("p")).distinct()
            .orderBy("p").limit(limit).collect()]


def _distribution_of(df: DataFrame, sets: Sequence[KeySet], name: str, ctx: QualityContext) -> Distribution:
    """Set `name`'s distribution: inside `shared_passes` every set of `sets` in one query (the other
    figures of the frame read theirs from it), outside it this set's alone."""
    if _SHARED.get() is None:
        return key_distributions(df, [s for s in sets if s.name == name], ctx)[name]
    kind = "keys:" + ",".join(s.name for s in sets)
    return _shared(kind, df, ctx, lambda: key_distributions(df, sets, ctx))[name]


# --- raw_image_index ---------------------------------------------------------------------------------

# The index's per-key figures, one pass for all (`_distribution_of`).
RAW_KEYS = (
    KeySet("scans_per_patient_site_day", ("date", "site", "_issuer", "patient_id"), required=("patient_id",)),
    KeySet("instances_per_series", ("date", "site", "series_instance_uid"), required=("series_instance_uid",)),
    KeySet("series_per_study", ("date", "site", "study_instance_uid"), distinct=("series_instance_uid",),
           required=("study_instance_uid",)),
)


def scans_per_patient_site_day(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(RAW, "scans_per_patient_site_day")
    patients = index.where(F.col("patient_id").isNotNull()).withColumn("_issuer", _issuer(ctx))
    counts = count_per_key(patients, ["date", "site", "_issuer", "patient_id"], ctx, maximum=rule.maximum,
                           distribution=_distribution_of(index, RAW_KEYS, "scans_per_patient_site_day", ctx))
    offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer,
                                  [f"{r['date']}|{r['site']}"]) for r in counts.top]
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=counts.failed_partitions)


def scans_per_patient(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    """Over every partition of the table given (an `@asset_check` reads the whole table)."""
    rule = ctx.rule(RAW, "scans_per_patient")
    patients = index.where(F.col("patient_id").isNotNull()).withColumn("_issuer", _issuer(ctx))
    counts = count_per_key(patients, ["_issuer", "patient_id"], ctx, maximum=rule.maximum)
    offenders = []
    for r in counts.top:  # where each offender's scans are (bounded per offender)
        where = (F.col("_issuer") == r["_issuer"]) & (F.col("patient_id") == r["patient_id"])
        offenders.append(patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"],
                                          ctx.default_issuer, _partitions_of(patients, where)))
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=counts.failed_partitions)


def instances_per_series(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(RAW, "instances_per_series")
    counts = count_per_key(index.where(F.col("series_instance_uid").isNotNull()),
                           ["date", "site", "series_instance_uid"], ctx, maximum=rule.maximum,
                           distribution=_distribution_of(index, RAW_KEYS, "instances_per_series", ctx))
    offenders = [uid_offender(ctx.pseudonymizer, r["series_instance_uid"], r["n"], [f"{r['date']}|{r['site']}"])
                 for r in counts.top]
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=counts.failed_partitions)


def series_per_study(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(RAW, "series_per_study")
    counts = count_per_key(index.where(F.col("study_instance_uid").isNotNull()),
                           ["date", "site", "study_instance_uid"], ctx, maximum=rule.maximum,
                           distinct=["series_instance_uid"],
                           distribution=_distribution_of(index, RAW_KEYS, "series_per_study", ctx))
    offenders = [uid_offender(ctx.pseudonymizer, r["study_instance_uid"], r["n"], [f"{r['date']}|{r['site']}"])
                 for r in counts.top]
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=counts.failed_partitions)


def sop_instance_uid_in_one_partition(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    """SOP Instance UIDs indexed in two or more partitions (reads every partition given)."""
    rule = ctx.rule(RAW, "sop_instance_uid_in_one_partition")
    per_uid = (index.where(F.col("sop_instance_uid").isNotNull())
               .groupBy("sop_instance_uid").agg(F.countDistinct("date", "site").alias("n")))
    repeated = per_uid.where(F.col("n") > 1)
    stats = repeated.agg(F.count(F.lit(1)).alias("uids"), F.max("n").alias("most")).first()
    uids = int(stats["uids"])
    offenders, failed = [], []
    if uids > rule.maximum:
        for r in repeated.orderBy(F.desc("n"), "sop_instance_uid").limit(ctx.rules.top_offenders).collect():
            parts = _partitions_of(index, F.col("sop_instance_uid") == r["sop_instance_uid"])
            failed += parts
            offenders.append(uid_offender(ctx.pseudonymizer, r["sop_instance_uid"], r["n"], parts))
    # Offenders' figure: the number of partitions their UID was indexed in.
    return evaluate_max(rule, uids, offenders=offenders, failed_partitions=failed,
                        details={"most_partitions_for_one_uid": int(stats["most"] or 0)})


def mandatory_attributes(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(RAW, "mandatory_attributes")
    per_partition = partition_profile(index, ctx, INDEX_COUNTS)  # one row per partition
    total = sum(p.counts["missing"] for p in per_partition)
    details = {f"missing_{c}": sum(p.counts[f"missing_{c}"] for p in per_partition) for c in MANDATORY}
    return evaluate_max(rule, total, failed_partitions=[p.label for p in per_partition
                                                        if p.counts["missing"] > rule.maximum], details=details)


def study_date(column: Column) -> Column:
    """A DICOM DA column as a date (null when malformed): the header module's `DA_FORMAT` as a Spark
    pattern ('yyyyMMdd')."""
    return F.try_to_date(column, java_date_pattern(DA_FORMAT))


def _dicom_date(column: str) -> Column:
    return study_date(F.col(column))


def study_date_in_future(index: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(RAW, "study_date_in_future")
    per_partition = partition_profile(index, ctx, INDEX_COUNTS)
    patients = index.where(_dicom_date("study_date") > F.lit(ctx.today)).withColumn("_issuer", _issuer(ctx))
    total = sum(p.counts["future"] for p in per_partition)
    offenders = []
    if total > rule.maximum:
        counts = count_per_key(patients, ["_issuer", "patient_id"], ctx, maximum=0)
        offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                     for r in counts.top]
    return evaluate_max(rule, total, offenders=offenders, details={"today": ctx.today.isoformat()},
                        failed_partitions=[p.label for p in per_partition if p.counts["future"] > 0])


def files_accounted(listed: Mapping[str, int], index: DataFrame, quarantine: DataFrame,
                    ctx: QualityContext) -> CheckOutcome:
    """`listed` (files per partition key, from the listing) = indexed + quarantined, per partition."""
    rule = ctx.rule(RAW, "files_accounted")
    indexed = _per_partition(index, ctx, INDEX_COUNTS)  # the profile mandatory_attributes and future read
    held = _per_partition(quarantine, ctx)
    parts = sorted(set(listed) | set(indexed) | set(held))
    failed = [p for p in parts if listed.get(p, 0) != indexed.get(p, 0) + held.get(p, 0)]
    return evaluate_balance(rule, {"files_listed": sum(listed.values())},
                            {"instances_indexed": sum(indexed.values()), "files_quarantined": sum(held.values())},
                            partitions=parts, failed_partitions=failed)


def _per_partition(df: DataFrame, ctx: QualityContext, counts: Sequence[str] = ROWS) -> dict[str, int]:
    """Rows per partition key (one driver row per partition of the run), from the frame's profile (one with
    `counts` too: the profile the frame's other figures read)."""
    return {p.key: p.rows for p in partition_profile(df, ctx, counts if _SHARED.get() is not None else ROWS)}


# --- linked_patient_metadata -------------------------------------------------------------------------

def images_linked_accounted(index: DataFrame, linked: DataFrame, quarantine: DataFrame,
                            ctx: QualityContext) -> CheckOutcome:
    """Indexed = linked + quarantined by the link step, per partition of the run."""
    rule = ctx.rule(LINKED, "images_accounted")
    indexed, linked_n, held = (_per_partition(index, ctx, IMAGES_COUNTS), _per_partition(linked, ctx, _linked_counts()),
                               _per_partition(quarantine, ctx))
    parts = sorted(set(indexed) | set(linked_n) | set(held))
    failed = [p for p in parts if indexed.get(p, 0) != linked_n.get(p, 0) + held.get(p, 0)]
    return evaluate_balance(rule, {"images_indexed": sum(indexed.values())},
                            {"images_linked": sum(linked_n.values()), "images_quarantined": sum(held.values())},
                            partitions=parts, failed_partitions=failed)


def _identity_signature(policy: ClinicalPolicy) -> Column:
    """A hash of a clinical row's identity columns (names, birth date, NHS number...): one per person."""
    ids = list(identity_columns(policy))
    entries = F.map_filter(F.col("clinical"), lambda k, v: k.isin(ids))
    return F.sha2(F.to_json(F.array_sort(F.map_entries(entries))), 256)


def linkage_fan_out(images: DataFrame, clinical: DataFrame, policy: ClinicalPolicy,
                    ctx: QualityContext) -> list[CheckOutcome]:
    """`records_per_image` and `images_per_record`, measured on the join's inputs.

    An image's record is the latest extract on or before its date; the image is "joined to more
    than one record" when that extract holds rows of different people (identity columns differ)
    under its key: a later row of the same person supersedes, but two people cannot share a key.
    """
    per_extract = (clinical.groupBy("site", "patient_id", "extract_date")
                   .agg(F.countDistinct(_identity_signature(policy)).alias("people")))
    keys = (images.where(F.col("patient_id").isNotNull())
            .groupBy("date", "site", "patient_id")
            .agg(F.count(F.lit(1)).alias("images"), F.max(_issuer(ctx)).alias("_issuer")))
    chosen = (keys.join(per_extract, ["site", "patient_id"])
              .where(F.col("extract_date") <= F.col("date"))
              .groupBy("date", "site", "patient_id")
              .agg(F.max_by(F.struct("extract_date", "people"), F.col("extract_date")).alias("rec"),
                   F.first("images").alias("images"), F.first("_issuer").alias("_issuer"))
              .select("date", "site", "patient_id", "images", "_issuer",
                      F.col("rec.extract_date").alias("extract_date"), F.col("rec.people").alias("people")))
    fan_out_rule, fan_in_rule = ctx.rule(LINKED, "records_per_image"), ctx.rule(LINKED, "images_per_record")
    # Both distributions and the images affected (the grand total of a weight) in one pass over the join;
    # offenders only when a check fails (each a bounded query, which recomputes the join).
    affected_images = (F.when(F.col("people") > fan_out_rule.maximum, F.col("images"))).alias("_affected")
    sets = [KeySet("people", ("date", "site", "_issuer", "patient_id"), weight="people"),
            KeySet("images", ("site", "_issuer", "patient_id", "extract_date"), weight="images"),
            KeySet("affected", (), weight="_affected")]
    found = key_distributions(chosen.withColumn("_affected", affected_images), sets, ctx)

    people = count_per_key(chosen, ["date", "site", "_issuer", "patient_id"], ctx, maximum=fan_out_rule.maximum,
                           weight="people", distribution=found["people"])
    offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer,
                                  [f"{r['date']}|{r['site']}"]) for r in people.top]
    affected = found["affected"].maximum or 0
    fan_out = evaluate_max(fan_out_rule, people.distribution.maximum, distribution=people.distribution,
                           offenders=offenders, failed_partitions=people.failed_partitions,
                           details={"images_affected": int(affected)})

    per_record = count_per_key(chosen, ["site", "_issuer", "patient_id", "extract_date"], ctx,
                               maximum=fan_in_rule.maximum, weight="images", distribution=found["images"])
    offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                 for r in per_record.top]
    fan_in = evaluate_max(fan_in_rule, per_record.distribution.maximum, distribution=per_record.distribution,
                          offenders=offenders, failed_partitions=per_record.failed_partitions)
    return [fan_out, fan_in]


def placeholder_keys(images: DataFrame, clinical: DataFrame, ctx: QualityContext) -> CheckOutcome:
    """Images, and extract rows of the run's own site-days, whose linkage key is empty or a placeholder.

    `clinical` should hold the rows of the extracts accounted to this run (each extract once).
    """
    rule = ctx.rule(LINKED, "placeholder_keys")
    placeholders = ctx.rules.placeholder_list
    # A missing key (null) is mandatory_attributes' finding; an empty or placeholder *value* is this one's.
    normal = F.upper(F.trim(F.col("patient_id")))
    bad_images = images.where(normal.isin(placeholders)).withColumn("_issuer", _issuer(ctx))
    per_partition = {p.key: p.counts["placeholder"] for p in partition_profile(images, ctx, IMAGES_COUNTS)
                     if p.counts["placeholder"] > 0}
    rows = clinical.where(normal.isin(placeholders)).groupBy("site", "extract_date").agg(
        F.count(F.lit(1)).alias("n")).collect()  # one row per extract
    n_images, n_rows = sum(per_partition.values()), sum(r["n"] for r in rows)
    offenders = []
    if n_images + n_rows > rule.maximum:
        counts = count_per_key(bad_images, ["_issuer", "patient_id"], ctx, maximum=0)
        offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                     for r in counts.top]
    failed = list(per_partition) + [f"{r['extract_date']}|{r['site']}" for r in rows]
    return evaluate_max(rule, n_images + n_rows, offenders=offenders, failed_partitions=failed,
                        details={"images_with_placeholder_key": n_images, "extract_rows_with_placeholder_key": n_rows})


def images_per_clinical_key(images: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(LINKED, "images_per_clinical_key")
    keyed = images.where(F.col("patient_id").isNotNull()).withColumn("_issuer", _issuer(ctx))
    counts = count_per_key(keyed, ["site", "_issuer", "patient_id"], ctx, maximum=rule.maximum)
    offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                 for r in counts.top]
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=counts.failed_partitions)


def unlinked_share(linked: DataFrame, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(LINKED, "unlinked_share")
    rows = partition_profile(linked, ctx, _linked_counts())
    total, unlinked = sum(p.rows for p in rows), sum(p.counts["unlinked"] for p in rows)
    share = unlinked / total if total else 0.0
    return evaluate_max(rule, round(share, 6), partitions=[p.key for p in rows],
                        failed_partitions=[p.key for p in rows if p.rows and p.counts["unlinked"] / p.rows > rule.maximum],
                        details={"images": total, "images_without_record": unlinked})


def birth_date(policy: ClinicalPolicy) -> Column:
    """The patient's birth date from the clinical map: the policy's birth-date columns and formats.

    The index holds no PatientBirthDate (headers are read for what the platform needs, and the
    clinical extract is the hospital's record of the person), so the extract is the one source.
    """
    candidates = [F.try_to_date(F.col("clinical").getItem(alias), java_date_pattern(fmt))
                  for alias in birth_date_columns(policy) for fmt in policy.date_formats]
    return F.coalesce(*candidates) if candidates else F.lit(None).cast("date")


def study_before_birth(linked: DataFrame, policy: ClinicalPolicy, ctx: QualityContext) -> CheckOutcome:
    rule = ctx.rule(LINKED, "study_before_birth")
    early = _dicom_date("study_date") < birth_date(policy)
    if _shared_policy() == policy:  # the step's shared profile holds these counts
        rows = [(p.label, p.counts["before_birth"], p.counts["birth_date_known"]) for p in partition_profile(linked, ctx, _linked_counts())]
    else:
        rows = [(f"{r['date']}|{r['site']}", r["n"] or 0, r["known"] or 0) for r in linked.groupBy("date", "site").agg(
            _count_when(early).alias("n"), _count_when(birth_date(policy).isNotNull()).alias("known")).collect()]
    total = sum(n for _, n, _ in rows)
    offenders = []
    if total > rule.maximum:
        bad = linked.where(early).withColumn("_issuer", _issuer(ctx))
        offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                     for r in count_per_key(bad, ["_issuer", "patient_id"], ctx, maximum=0).top]
    return evaluate_max(rule, total, offenders=offenders,
                        failed_partitions=[label for label, n, _ in rows if n > 0],
                        details={"images_with_birth_date": sum(known for _, _, known in rows)})


def eye_observations_per_patient_day(images: DataFrame, observations: DataFrame, served: Sequence[str],
                                     ctx: QualityContext) -> CheckOutcome:
    """Eye observations of one patient on one day, among the run's imaged patients: a feed that repeats rows (a
    patient with hundreds of acuities in a day) is flagged as a patient with a million scans is, by pseudonym.
    `observations` are the link step's (`_origin`: an extract's site, or the clinical source for `served` sites)."""
    rule = ctx.rule(LINKED, "eye_observations_per_patient_day")
    imaged = images.where(F.col("patient_id").isNotNull()).select("date", "site", "patient_id")
    per_day = (observations.groupBy("_origin", "patient_id", F.to_date("observed_at").alias("day"))
               .agg(F.count(F.lit(1)).alias("n")))
    mine = (F.col("_origin") == F.col("site")) | ((F.col("_origin") == SOURCE_ORIGIN) & F.col("site").isin(list(served)))
    keyed = (per_day.join(imaged.select("site", "patient_id").distinct(), "patient_id").where(mine)
             .withColumn("_issuer", _issuer(ctx)))
    counts = count_per_key(keyed, ["site", "_issuer", "patient_id", "day"], ctx, maximum=rule.maximum, weight="n")
    offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                 for r in counts.top]
    failed: list[str] = []
    if counts.top:  # the run's site-days holding images of a patient over the maximum (bounded)
        over = keyed.groupBy("site", "patient_id", "day").agg(F.sum("n").alias("n")).where(F.col("n") > rule.maximum)
        failed = _partitions_of(imaged.join(over.select("site", "patient_id").distinct(), ["site", "patient_id"]),
                                F.lit(True))
    return evaluate_max(rule, counts.distribution.maximum, distribution=counts.distribution, offenders=offenders,
                        failed_partitions=failed)


def stale_eye_observations(linked: DataFrame, ctx: QualityContext) -> CheckOutcome:
    """Images whose eye's latest observation (any eye field) is older than the rule's `window_days` before the image:
    the label is true as of then, and a reader should know how old it is."""
    rule = ctx.rule(LINKED, "stale_eye_observations")
    latest = F.array_min(F.map_values(F.col("eye_days_before")))
    stale = latest > F.lit(rule.window_days or 365)
    rows = linked.groupBy("date", "site").agg(_count_when(stale).alias("n"),
                                              _count_when(latest.isNotNull()).alias("known")).collect()
    total = sum(int(r["n"] or 0) for r in rows)
    offenders = []
    if total > rule.maximum:
        bad = linked.where(stale).withColumn("_issuer", _issuer(ctx))
        offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                     for r in count_per_key(bad, ["_issuer", "patient_id"], ctx, maximum=0).top]
    return evaluate_max(rule, total, offenders=offenders,
                        failed_partitions=[f"{r['date']}|{r['site']}" for r in rows if r["n"]],
                        details={"images_with_eye_observation": sum(int(r["known"] or 0) for r in rows)})


# --- anonymized_images -------------------------------------------------------------------------------

def images_accounted(linked: DataFrame, manifest: DataFrame, quarantine: DataFrame, batches: Mapping[str, str],
                     ctx: QualityContext) -> CheckOutcome:
    """Linked = published + quarantined, per partition; `batches` maps each partition key to its batch token."""
    rule = ctx.rule(ANONYMIZED, "images_accounted")
    wanted = list(batches.values())
    by_batch = {r["batch"]: int(r["n"]) for r in manifest.where(F.col("batch").isin(wanted)).groupBy("batch")
                .agg(F.count(F.lit(1)).alias("n")).collect()}
    published = {p: by_batch.get(b, 0) for p, b in batches.items()}
    linked_n, held = _per_partition(linked, ctx), _per_partition(quarantine, ctx)
    failed = [p for p in batches if linked_n.get(p, 0) != published[p] + held.get(p, 0)]
    return evaluate_balance(rule, {"images_linked": sum(linked_n.get(p, 0) for p in batches)},
                            {"images_published": sum(published.values()),
                             "images_quarantined": sum(held.get(p, 0) for p in batches)},
                            partitions=list(batches), failed_partitions=failed)


def manifest_files(manifest: DataFrame, root: str, ctx: QualityContext) -> CheckOutcome:
    """Every manifest row's file exists under `root` (the de-identified zone) with its sha256.

    The files are hashed on the executors (mapInPandas); only counts and the top pseudonyms
    come back.
    """
    from imaging.quality.files import verify_file_frames  # pure; shipped to executors with `imaging`

    rule = ctx.rule(ANONYMIZED, "manifest_files")
    status = manifest.select("batch", "patient_pseudonym", "output_path", "sha256").mapInPandas(
        lambda frames: verify_file_frames(root, frames), "batch string, patient_pseudonym string, status string")
    status = status.persist()
    try:
        tally = {r["status"]: int(r["n"]) for r in status.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()}
        bad = tally.get("missing", 0) + tally.get("checksum differs", 0)
        offenders = []
        if bad > rule.maximum:
            top = (status.where(F.col("status") != "ok").groupBy("patient_pseudonym").agg(F.count(F.lit(1)).alias("n"))
                   .orderBy(F.desc("n"), "patient_pseudonym").limit(ctx.rules.top_offenders).collect())
            offenders = [Offender(r["patient_pseudonym"], r["n"]) for r in top]
        return evaluate_max(rule, bad, offenders=offenders,
                            details={"files_checked": sum(tally.values()), "files_missing": tally.get("missing", 0),
                                     "files_with_other_sha256": tally.get("checksum differs", 0)})
    finally:
        status.unpersist()


def pseudonym_bijection(ledger: DataFrame, index: DataFrame, manifest: DataFrame,
                        ctx: QualityContext) -> list[CheckOutcome]:
    """One pseudonym per patient and one patient per pseudonym (ledger + index + manifest, all partitions)."""
    pairs = (ledger.select("source_path", "output_path")
             .join(index.select("source_path", _issuer(ctx).alias("_issuer"), "patient_id"), "source_path")
             .join(manifest.select("output_path", "patient_pseudonym"), "output_path")
             .select("_issuer", F.coalesce("patient_id", F.lit("")).alias("patient_id"), "patient_pseudonym")
             .distinct().persist())
    try:
        # Both distributions in one pass over the pairs; offenders only when a check fails.
        found = key_distributions(pairs, [KeySet("patient", ("_issuer", "patient_id")),
                                          KeySet("pseudonym", ("patient_pseudonym",))], ctx)
        rule = ctx.rule(ANONYMIZED, "pseudonyms_per_patient")
        per_patient = count_per_key(pairs, ["_issuer", "patient_id"], ctx, maximum=rule.maximum,
                                    distribution=found["patient"])
        offenders = [patient_offender(ctx.pseudonymizer, r["_issuer"], r["patient_id"], r["n"], ctx.default_issuer)
                     for r in per_patient.top]
        first = evaluate_max(rule, per_patient.distribution.maximum, distribution=per_patient.distribution,
                             offenders=offenders)
        rule = ctx.rule(ANONYMIZED, "patients_per_pseudonym")
        per_pseudonym = count_per_key(pairs, ["patient_pseudonym"], ctx, maximum=rule.maximum,
                                      distribution=found["pseudonym"])
        second = evaluate_max(rule, per_pseudonym.distribution.maximum, distribution=per_pseudonym.distribution,
                              offenders=[Offender(r["patient_pseudonym"], r["n"]) for r in per_pseudonym.top])
        return [first, second]
    finally:
        pairs.unpersist()


# --- published_cohort --------------------------------------------------------------------------------

def release_checksums(releases: Mapping[str, str], ctx: QualityContext,
                      trusted: Mapping[str, Mapping[str, str]] | None = None) -> CheckOutcome:
    """Each release folder (cohort name -> folder) verifies against its SHA256SUMS (`trusted`: per cohort, the
    files the run's copy placed and hashed, not read again while their identity is unchanged)."""
    rule = ctx.rule(PUBLISHED, "release_checksums")
    problems = {name: len(verify_release(root, (trusted or {}).get(name))) for name, root in sorted(releases.items())}
    return evaluate_max(rule, sum(problems.values()),
                        details={f"problems_{name}": n for name, n in problems.items()} | {"releases": len(releases)})


# --- Great Expectations suites -----------------------------------------------------------------------

def column_rules(df: DataFrame, asset: str, ctx: QualityContext, *,
                 partitions: Iterable[str] = ()) -> list[CheckOutcome]:
    """Run the asset's GX suite on a Spark DataFrame: `column_rules` (expectations marked ERROR) and
    `column_warnings` (marked WARN), each counting its failed expectations.

    Only counts leave GX: its results also list unexpected values, which may be identifiers.
    """
    from assets.expectations import validate_suite

    partitions = list(partitions)
    rule = ctx.rule(asset, "column_rules")
    results = validate_suite(df, ctx.rules.suite(rule.suite))
    outcomes = []
    for name, severity in (("column_rules", "ERROR"), ("column_warnings", "WARN")):
        mine = [r for r in results if r.severity == severity]
        failed = [r for r in mine if not r.success]
        details = {"expectations": len(mine)} | {f"unexpected {r.label}": r.unexpected for r in failed}
        outcomes.append(evaluate_max(ctx.rule(asset, name), len(failed), partitions=partitions,
                                     failed_partitions=partitions if failed else (), details=details))
    return outcomes
