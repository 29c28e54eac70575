"""The opt-out list applied with Spark: shared helper module (not an asset).

`anonymized_images` holds back the images of listed patients before anything is de-identified, and
`published_cohort` refuses listed patients at build time and flags published releases that hold patients
who opted out since. The rules are pure (`imaging/optout.py`: reading and folding the lists; and
`imaging/governance/optout.py`: what a release does about them); here they meet the tables. Ids are matched
as persons (namespace, folded id), so an opt-out sent by one site applies to the same person at every site
of its namespace, and the folding is the same in Spark (`translate`) as in Python.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Mapping

from pyspark.sql import DataFrame, functions as F

from assets.partitions import SETTINGS
from imaging.governance.datacard import CheckResult, OptOutList, OptOutSection
from imaging.governance.optout import (Flag, PublishedRelease, Successor, flags, log_flags, published_releases,
                                       record_site_tokens, version_to_build)
from imaging.optout import OPTED_OUT, SPARK_FOLD, OptOutLists, PersonKey, read_lists, site_token
from imaging.records import schema_of
from imaging.driver.platform_files import load_quality_rules
from resources.spark import frame_of

OPTED = "_opted_out"  # the column `mark` adds


def read_optouts(landing_root: str) -> OptOutLists:
    """The configured sites' opt-out lists in the landing zone, rows keyed by a placeholder id held back as the
    extracts' are (platform/quality.yaml `placeholder_keys`)."""
    return read_lists(landing_root, SETTINGS.sites, load_quality_rules().placeholder_list)


def namespaces(issuers) -> dict[str, str]:
    """Each configured site's patient-id namespace (platform/issuers.yaml)."""
    return {site: issuers.namespace(site) for site in SETTINGS.sites}


def with_person(frame: DataFrame, session, spaces: Mapping[str, str]) -> DataFrame:
    """`frame` (with `site` and `patient_id`) with the person columns the list is matched on: `namespace` (null
    for a site without one) and `person`. The sites' namespaces are a literal map in the query, not a frame joined:
    a broadcast of a local frame is a Spark job of its own in every query that reads the lists."""
    pairs = [F.lit(x) for site, space in sorted(spaces.items()) for x in (site, space)]
    namespace = F.create_map(*pairs)[F.col("site")] if pairs else F.lit(None).cast("string")  # null: not in it
    return (frame.withColumn("namespace", namespace)
            .withColumn("person", F.translate(F.coalesce(F.col("patient_id"), F.lit("")), *SPARK_FOLD)))


def keys_frame(session, keys: Iterable[PersonKey]) -> DataFrame:
    return frame_of(session, sorted(set(keys), key=lambda k: (k.namespace, k.person)), schema_of(PersonKey))


def mark(frame: DataFrame, session, keys: Iterable[PersonKey], spaces: Mapping[str, str]) -> DataFrame:
    """`frame` with a boolean column `OPTED` (true for rows of a listed person); its own columns unchanged."""
    listed = keys_frame(session, keys).withColumn(OPTED, F.lit(True))
    columns = frame.columns
    joined = with_person(frame, session, spaces).join(F.broadcast(listed), ["namespace", "person"], "left")
    return joined.select(*columns, F.coalesce(F.col(OPTED), F.lit(False)).alias(OPTED))


def listed_pseudonyms(linked: DataFrame, session, keys: Iterable[PersonKey], spaces: Mapping[str, str],
                      pseudonymizer) -> dict[PersonKey, frozenset[str]]:
    """The patient pseudonyms each listed person's images carry: their ids as the images spell them (one
    person may be spelled with spaces in one file and without in another), pseudonymised as the
    de-identification does. One row per listed person (and spelling) reaches the driver."""
    keys = set(keys)
    if not keys:
        return {}
    # Matched first, then made distinct: one shuffle, of the listed persons' rows only.
    spelled = (with_person(linked.select("site", "patient_id").where("patient_id IS NOT NULL"), session, spaces)
               .join(F.broadcast(keys_frame(session, keys)), ["namespace", "person"])
               .select("namespace", "person", "patient_id").distinct().collect())
    out: dict[PersonKey, set[str]] = {}
    for row in spelled:
        out.setdefault(PersonKey(row["namespace"], row["person"]), set()).add(
            pseudonymizer.patient_id(row["namespace"], row["patient_id"]))
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class Pseudonym:
    """A patient pseudonym as a row (the listed patients' pseudonyms, joined to manifest rows)."""

    patient_pseudonym: str


def pseudonyms_frame(session, pseudonyms: Iterable[str]) -> DataFrame:
    return frame_of(session, [Pseudonym(p) for p in sorted(set(pseudonyms))], schema_of(Pseudonym))


# --- published_cohort: the lists at build time, and after release -------------------------------------------

def held_images(url: str) -> int:
    """Images the de-identification held back because their patient opted out: rows of the quarantine table at
    `url` with that reason, counted by Arrow's scanner over the one column (streamed, nothing kept), not by a
    Spark job of its own in every release build."""
    import pyarrow.dataset as ds

    from imaging import fs as fsx

    dataset = fsx.parquet_table(url)
    return 0 if dataset is None else dataset.count_rows(filter=ds.field("reason") == OPTED_OUT)


@dataclass(frozen=True)
class NotDeidentified:
    """Images never de-identified because their patient opted out (every site-day), and their patients."""

    images: int = 0
    patients: int = 0


@dataclass(frozen=True)
class Tally:
    """What the list held back of a cohort's selection, and the selection's size: counted by the caller in the
    query that reads the marked selection anyway (published_cohort: its input partitions), not in one of its own."""

    excluded_images: int
    excluded_patients: int
    images: int  # images in the selection, less those held back


@dataclass(frozen=True)
class Applied:
    """One cohort in a run: the version to build, the selection without listed patients, what was held back."""

    cohort: object  # the CohortDefinition at the version to build
    kept: DataFrame
    successor: Successor
    excluded_images: int
    excluded_patients: int
    images: int = 0  # images in the selection (`kept`)
    cached: DataFrame | None = None  # what `kept` reads from, persisted: the caller unpersists it


@dataclass(frozen=True)
class Marked:
    """One cohort's selection marked against the list in force (`ReleaseOptOuts.apply`), not yet counted."""

    cohort: object  # the CohortDefinition at the version to build
    successor: Successor
    marked: DataFrame  # the selection, persisted; with a non-null `OPTED` on rows of listed patients when `opted`
    opted: bool  # whether `marked` has the `OPTED` column (the lists name somebody)

    @property
    def kept(self) -> DataFrame:
        return self.marked.where(F.col(OPTED).isNull()).drop(OPTED) if self.opted else self.marked

    def tally_columns(self) -> list:
        """Aggregates (per group, e.g. per batch) of what `Tally` counts: `_excluded` rows held back, `_rows` in all,
        `_excluded_patients` (the held-back patients' pseudonyms: bounded by the lists, not by the selection)."""
        flag = F.col(OPTED) if self.opted else F.lit(None).cast("boolean")
        return [F.count(flag).alias("_excluded"), F.count(F.lit(1)).alias("_rows"),
                F.collect_set(F.when(flag.isNotNull(), F.col("patient_pseudonym"))).alias("_excluded_patients")]

    @staticmethod
    def tally(rows) -> Tally:
        """`Tally` from the rows of a query grouped by any key with `tally_columns`."""
        excluded = sum(r["_excluded"] for r in rows)
        patients = set().union(*(r["_excluded_patients"] for r in rows)) if rows else set()
        return Tally(excluded, len(patients), sum(r["_rows"] for r in rows) - excluded)

    def counted(self, tally: Tally) -> Applied:
        return Applied(self.cohort, self.kept, self.successor, tally.excluded_images, tally.excluded_patients,
                       tally.images, self.marked)


class ReleaseOptOuts:
    """The opt-out lists as one run of published_cohort applies them: read once, before anything is built.

    Persons are matched to pseudonyms through the identifiable zone (`listed_pseudonyms`: the ids as the images
    spell them, pseudonymised as the de-identification does), for every person any list file ever named, so the
    lists in force on any earlier day (a published release's) map too. Then every rule is set arithmetic on
    pseudonyms (imaging/governance/optout.py) and Spark joins against a small broadcast frame."""

    def __init__(self, session, lists: OptOutLists, spaces: dict[str, str], key: str,
                 listed: dict[PersonKey, frozenset[str]], not_deidentified: NotDeidentified):
        self.session, self.lists, self.spaces, self.key, self.listed = session, lists, spaces, key, listed
        self.not_deidentified = not_deidentified
        self.now = self.pseudonyms(lists.keys(spaces))
        self._withdraw: Future | None = None
        self._listed: DataFrame | None = None  # `listed_frame`, made once: each frame sent costs ~40 calls to the JVM

    @classmethod
    def gather(cls, context, session, warehouse, landing, deid) -> "ReleaseOptOuts":
        """Read the lists (a file that cannot be read refuses the run: the list in force is unknown), record the
        versions read as observations of `optout_list`, and map listed persons to pseudonyms."""
        from dagster import Failure

        from assets.versions import optout_read
        from imaging.catalogue import ANONYMIZE_QUARANTINE, LINKED

        lists = read_optouts(landing.root)
        refusal = lists.refusal()
        if refusal:
            raise Failure(refusal)
        for event in optout_read(context.instance, lists, deid.key):
            context.log_event(event)
        spaces = namespaces(deid.issuer_policy())
        # Released cards name each site's list by a keyed token: the identifiable zone maps it back, for reviews.
        record_site_tokens(warehouse.root, {s: site_token(deid.key, s) for s in lists.sites})
        linked = warehouse.read(session, LINKED)
        listed = listed_pseudonyms(linked, session, lists.ever_listed(spaces), spaces, deid.pseudonymizer())
        images = held_images(warehouse.url(ANONYMIZE_QUARANTINE))
        patients = 0
        if images:  # their patients: the held images' linked rows, as persons (one aggregate)
            held = warehouse.read(session, ANONYMIZE_QUARANTINE).where(F.col("reason") == OPTED_OUT)
            patients = (with_person(held.select("date", "site", "source_path")
                                    .join(linked.select("date", "site", "source_path", "patient_id"),
                                          ["date", "site", "source_path"]), session, spaces)
                        .select("namespace", "person").distinct().count())
        out = cls(session, lists, spaces, deid.key, listed, NotDeidentified(images, patients))
        out._withdraw = out.to_withdraw(warehouse)
        return out

    def to_withdraw(self, warehouse) -> Future:
        """The site-days (`date|site`) whose de-identified images include a patient on the list now: materializing
        anonymized_images for them withdraws those images. One row per such site-day reaches the driver.

        Only the run's materialization says them, so the query runs in a thread of its own while the cohorts are
        built (its tables read here, before any of them is cached); `withdraw` waits for it."""
        from assets.quality import partition_key
        from imaging.catalogue import LEDGER, manifest
        from imaging.driver.platform_files import load_clinical_policy as load_policy

        done: Future = Future()
        if not self.now:
            done.set_result([])
            return done
        batches = (warehouse.read(self.session, manifest(load_policy())).select("batch", "patient_pseudonym")
                   .join(self.listed_frame(), "patient_pseudonym", "left_semi").select("batch").distinct())
        keys = (warehouse.read(self.session, LEDGER).join(batches, "batch", "left_semi")
                .select(partition_key().alias("key")).distinct())
        background = ThreadPoolExecutor(max_workers=1)
        try:
            return background.submit(lambda: sorted(r["key"] for r in keys.collect()))
        finally:
            background.shutdown(wait=False)  # the query runs on; the thread ends with it

    @property
    def withdraw(self) -> list[str]:
        return self._withdraw.result() if self._withdraw is not None else []

    def pseudonyms(self, keys: Iterable[PersonKey]) -> frozenset[str]:
        return frozenset(p for k in keys for p in self.listed.get(k, ()))

    def at(self, release: PublishedRelease) -> frozenset[str]:
        """The pseudonyms of the persons on the lists in force when `release` was built: each site's files up to
        the day its card says that site's list was received (a site its card does not name had none)."""
        received = release.lists or {}
        keys = set()
        for site in self.lists.sites:
            day = received.get(site_token(self.key, site))
            if day is not None:
                keys |= {PersonKey(self.spaces[site], p) for p in self.lists.site_list(site, day).patients}
        return self.pseudonyms(keys)

    def _frame(self, pseudonyms: Iterable[str]) -> DataFrame:
        return F.broadcast(pseudonyms_frame(self.session, pseudonyms))

    def patients_among(self, frame: DataFrame, pseudonyms: frozenset[str]) -> int:
        """Distinct patients of `frame` (manifest rows) among `pseudonyms`."""
        if not pseudonyms:
            return 0
        return (frame.join(self._frame(pseudonyms), "patient_pseudonym", "left_semi")
                .select("patient_pseudonym").distinct().count())

    def flag_published(self, warehouse_root: str) -> list[Flag]:
        """Every published release holding patients who opted out since: flagged, and logged once to the audit log."""
        found = flags(published_releases(warehouse_root), self.now)
        log_flags(warehouse_root, found, detail=self.described())
        return found

    def described(self) -> str:
        """The lists in force now, as data cards name them (site token, keyed version, day received): the audit
        log's detail, which review reports show."""
        return "lists in force: " + (", ".join(f"{site_token(self.key, s)} {v.version(self.key)} received {v.received}"
                                               for s, v in sorted(self.lists.lists().items())) or "none")

    def apply(self, cohort, selected: DataFrame, warehouse_root: str) -> Marked:
        """The version to build (`version_to_build`) and the selection marked against the list now (persisted);
        the caller counts it (`Marked.tally_columns`) in a query of its own over the marked rows, and the build
        reads `kept`: the selection less every patient on the list now."""
        import dataclasses

        published = {r.version: r for r in published_releases(warehouse_root, cohort.name)}
        successor = version_to_build(cohort.version, published, self.now, self.at,
                                     lambda ps: self.patients_among(selected, ps))
        cohort = dataclasses.replace(cohort, version=successor.version)
        if not self.now:
            return Marked(cohort, successor, selected.persist(), False)
        # That no listed patient is left is checked on the released rows (`check`).
        return Marked(cohort, successor, selected.join(self.listed_frame(), "patient_pseudonym", "left").persist(),
                      True)

    def listed_frame(self) -> DataFrame | None:
        """The pseudonyms of the patients on the lists in force now, each with a non-null `OPTED` column (broadcast),
        or None when the lists name nobody: what a selection or a release is joined to."""
        if not self.now:
            return None
        if self._listed is None:
            self._listed = F.broadcast(pseudonyms_frame(self.session, self.now).withColumn(OPTED, F.lit(True)))
        return self._listed

    def section(self, applied: Applied) -> OptOutSection:
        """What the data card says about the lists and what they held back (counts; suppressed by the card)."""
        lists = self.lists.lists()
        follows = applied.successor.follows
        return OptOutSection(
            lists=tuple(OptOutList(site_token(self.key, s), v.version(self.key), v.received)
                        for s, v in sorted(lists.items())),
            as_of=self.lists.received, excluded_images=applied.excluded_images,
            excluded_patients=applied.excluded_patients, not_deidentified_images=self.not_deidentified.images,
            not_deidentified_patients=self.not_deidentified.patients,
            follows=None if follows is None else follows.version, left=applied.successor.left,
            returned=applied.successor.returned)

    @staticmethod
    def check(left: int) -> CheckResult:
        """The release's own check: no patient on the list in force is in it (`left`: its rows of listed patients,
        counted on the released metadata; the build is refused otherwise)."""
        return CheckResult("published_cohort", "no_opted_out_patient", left == 0,
                           description="no released patient is on the opt-out list in force at the build")

    def metadata(self, flagged: list[Flag], applied: Mapping[str, Applied]) -> dict:
        """What the run's materialization shows: list versions and days, releases flagged, counts held back."""
        lists = self.lists.lists()
        return {
            "optout_list_versions": {s: v.version(self.key) for s, v in sorted(lists.items())},
            "optout_list_received": {s: v.received for s, v in sorted(lists.items())},
            "optout_since": {f.release: f.message for f in flagged},
            # Site-days still holding de-identified images of listed patients (never released: left out at build).
            "optout_withdraw": self.withdraw,
            "optout_excluded": {name: {"images": a.excluded_images, "patients": a.excluded_patients}
                                for name, a in sorted(applied.items())},
            "optout_follows": {name: f"v{a.successor.follows.version} -> v{a.successor.version}"
                               for name, a in sorted(applied.items()) if a.successor.follows is not None},
        }

    def markdown(self, flagged: list[Flag]) -> list[str]:
        """Lines for the run's summary: each flagged release (a count, never who), the site-days to withdraw."""
        out = []
        if flagged:
            out += ["", "**Opt-outs since release** (the next version is built without them, for approval):", ""]
            out += [f"- {f.release}: {f.message}" for f in flagged]
        if self.withdraw:
            out += ["", f"**{len(self.withdraw)} site-days** still hold de-identified images of patients who opted out "
                        "(left out of every release): materialize `anonymized_images` for them to withdraw them "
                        "(`optout_withdraw`)."]
        return out
