"""anonymized_images: every linked image rewritten de-identified (PS3.15 Annex E), with a manifest
(step: imaging/steps/declared.py ANONYMIZE).

Images of patients on the opt-out list in force are held back before the executor step sees them (a Spark
join on the person, `assets/optouts.py`): quarantined as "patient opted out", counted per site-day, never
listed by id. A site-day re-materialized after a patient opted out is committed without their files, which
withdraws them from the de-identified zone through the same journalled commit.
"""

import datetime as dt
import math

from dagster import AssetExecutionContext
from pyspark.sql import functions as F

from assets import quality as q
from assets.governance import CODE_VERSIONS
from assets.optouts import OPTED, mark, namespaces
from assets.partitions import SETTINGS
from assets.runner import Body, StepOutput, StepRun, held_back, image_asset, merged, tally_of
from imaging.catalogue import (ANONYMIZE_QUARANTINE, DEIDENTIFIED, LEDGER, LINKED, OPTOUT_APPLIED, OPTOUT_QUARANTINE,
                               WITHDRAWN)
from imaging.driver.run_summary import Footprint
from imaging.governance.datacard import DeidSummary
from imaging.issuers import SUSPECT, IssuerPolicy
from imaging.optout import OPTED_OUT
from imaging.records import QUARANTINED, OptOutApplied, Quarantined, schema_of
from imaging.steps.anonymize import AnonymizeJob
from imaging.steps.declared import ANONYMIZE
from resources.spark import map_batches


def issuer_statuses(policy: IssuerPolicy, counted) -> dict[str, int]:
    """{status: images} from (site, issuer_of_patient_id, count) rows; every status present."""
    from imaging.issuers import STATUSES

    totals = dict.fromkeys(STATUSES, 0)
    for row in counted:
        totals[policy.resolve(row["site"], row["issuer_of_patient_id"]).status] += row["count"]
    return totals


def _started(context: AssetExecutionContext) -> str:
    """When this run started (ISO 8601, UTC), from the instance's run record; now if it has none."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    start = record.start_time if record is not None and record.start_time else None
    start = start or dt.datetime.now(dt.timezone.utc).timestamp()
    return dt.datetime.fromtimestamp(start, dt.timezone.utc).replace(microsecond=0).isoformat()


def nothing_linked(run: StepRun) -> bool:
    """No linked image, and no opt-out list file of these days to account for (its quarantine rows)."""
    return not run.warehouse.present(LINKED, run.keys) and not list_quarantine(run)


def list_quarantine(run: StepRun) -> list[Quarantined]:
    """The quarantine rows of the opt-out list files the run's site-days account for (each file on its own day)."""
    return run.optouts.quarantined(((k.date, k.site) for k in run.keys), SETTINGS.start_date)


def lists_applied(run: StepRun) -> list[OptOutApplied]:
    """Which list versions apply to each site-day of the run: every site's list in force now."""
    key, lists = run.deid.key, run.optouts.lists()
    return [OptOutApplied(k.date, k.site, site, v.version(key), v.received, len(v.patients))
            for k in run.keys for site, v in sorted(lists.items())]


def optout_metadata(run: StepRun) -> dict:
    """The list versions applied (keyed digests) and the day each was received: never an id."""
    lists = run.optouts.lists()
    return {"optout_list_versions": {s: v.version(run.deid.key) for s, v in sorted(lists.items())},
            "optout_list_received": {s: v.received for s, v in sorted(lists.items())}}


def deid_metadata(run: StepRun, issuers: dict[str, int]) -> dict:
    return {"deid_options": ", ".join(run.deid.options) or "basic profile only",
            # How the files' IssuerOfPatientID compared with the sites' configured namespaces (counts only):
            # unknown or inconsistent values never split a patient, but an operator should know. Images of the
            # whole run (every site-day it covered), so under `run/` beside a site-day's own numbers.
            **{f"run/issuer_of_patient_id/{status}": count for status, count in issuers.items()}}


def anonymize(run: StepRun) -> StepOutput:
    deid, session = run.deid, run.session
    spaces = namespaces(deid.issuer_policy())
    # The opt-out list in force now, whatever the site-day's date: listed patients never reach the executor step.
    linked = mark(run.read(LINKED), session, run.optouts.keys(spaces), spaces)
    job = AnonymizeJob(deid.key, tuple(deid.options), run.policy, deid.issuer_policy(), deid.pixel_text_settings(),
                       staging=run.commit.staging(run.warehouse.zone(DEIDENTIFIED)))
    # One pass over the input: files and bytes per site-day, those held back for an opt-out, and the
    # IssuerOfPatientID values a site's devices write (a handful, whatever the input size).
    counted = linked.groupBy("date", "site", "issuer_of_patient_id").agg(
        F.count(F.lit(1)).alias("count"), F.sum("size_bytes").alias("bytes"),
        F.sum(F.col(OPTED).cast("int")).alias("held"),
        F.sum(F.when(F.col(OPTED), F.col("size_bytes")).otherwise(0)).alias("held_bytes")).collect()
    read: dict[str, Footprint] = {}
    held_tally: dict[str, dict[str | None, int]] = {}
    for r in counted:
        key = f"{r['date']}|{r['site']}"
        read[key] = read.get(key, Footprint()) + Footprint(r["count"], r["bytes"] or 0)
        if r["held"]:
            held_tally.setdefault(key, {OPTED_OUT: 0})[OPTED_OUT] += r["held"]
    images = sum(r["count"] - (r["held"] or 0) for r in counted)
    bytes_in = sum((r["bytes"] or 0) - (r["held_bytes"] or 0) for r in counted)
    held = linked.where(F.col(OPTED)).select(*[F.lit(OPTED_OUT).alias(c) if c == "reason" else F.col(c)
                                              for c in schema_of(Quarantined).names])
    tasks = max(1, math.ceil(images / run.landing.files_per_task))
    outcomes = map_batches(linked.where(~F.col(OPTED)).drop(OPTED).repartition(tasks), job.step()).persist()
    with run.clock.stage("deidentify"), run.progress.track(run.context.log, session, label=ANONYMIZE.asset,
                                                           files=images, bytes=bytes_in):
        # Run the writes exactly once (every table below reads the persisted outcome), tallied on the way with
        # each site-day's files and bytes written.
        tally, sums = tally_of(outcomes, "output_size_bytes")

    published = outcomes.where(~F.expr(QUARANTINED))
    # The provenance ledger: each published image with the run, code and profile that made it.
    provenance = {"deid_profile": DeidSummary.from_options(deid.options).label,
                  "deid_options": ",".join(deid.options), "code_version": CODE_VERSIONS[ANONYMIZE.asset],
                  "run_id": run.context.run.run_id, "run_started_at": _started(run.context)}
    issuers = issuer_statuses(job.issuers, counted)
    suspect = sum(issuers[s] for s in SUSPECT)
    if suspect:
        run.context.log.warning(f"{suspect} images name an IssuerOfPatientID that is unknown or names another "
                                f"namespace; their site's configured namespace was used (platform/issuers.yaml)")
    bad = list_quarantine(run)
    bad_tally: dict[str, dict[str | None, int]] = {}
    for row in bad:
        counts = bad_tally.setdefault(f"{row.date}|{row.site}", {})
        counts[row.reason] = counts.get(row.reason, 0) + 1
    # Images held back now that were de-identified before (their patient opted out since): their ledger rows move
    # to withdrawn_images (read before this run's commit swaps the ledger), so released copies stay traceable; a
    # row leaves it when its image is de-identified again. The files go with the commit.
    key = ["date", "site", "source_path"]
    withdrawn = (run.read(WITHDRAWN).unionByName(run.read(LEDGER).join(held.select(*key), key, "left_semi"))
                 .dropDuplicates(key).join(published.select(*key), key, "left_anti"))
    if not held_tally and not run.warehouse.present(WITHDRAWN, run.partitions_of(WITHDRAWN)):
        withdrawn = None  # nothing held back, nothing withdrawn before: empty (no query)
    return StepOutput(
        rows={ANONYMIZE.output_table(run.policy).name: published,
              LEDGER.name: published.withColumns({k: F.lit(v) for k, v in provenance.items()}),
              WITHDRAWN.name: withdrawn,
              ANONYMIZE_QUARANTINE.name: outcomes.where(QUARANTINED).select(*schema_of(Quarantined).names)
              .unionByName(held) if held_back(tally, held_tally) else None,
              # Made on the driver (a row per site-day and list; the lists' rejected files): no Spark job.
              OPTOUT_APPLIED.name: lists_applied(run),
              OPTOUT_QUARANTINE.name: bad},
        tally=merged(tally, held_tally, bad_tally), read=read,
        # Batch folders are keyed tokens of the site-day: the manifest's path names no real date or site.
        written={p: Footprint(tally[p].get(None, 0), sums.get(p, {}).get("output_size_bytes", 0)) for p in tally},
        metadata={"run/spark_tasks": tasks, **deid_metadata(run, issuers), **optout_metadata(run)}, release=[outcomes])


# Data quality on what was committed: `linked = published + quarantined` is the images_accounted check
# (ERROR, blocking); every manifest row of this run's batches has its file and sha256.
FIGURES = {
    "images_accounted": lambda f: q.images_accounted(f.committed(LINKED), f.committed(ANONYMIZE.output_table(f.run.policy)),
                                                     f.committed(ANONYMIZE_QUARANTINE), f.run.batch_of, f.ctx),
    "manifest_files": lambda f: q.manifest_files(f.committed(ANONYMIZE.output_table(f.run.policy)),
                                                 f.run.warehouse.zone(DEIDENTIFIED), f.ctx),
    ("column_rules", "column_warnings"): lambda f: q.column_rules(f.committed(ANONYMIZE.output_table(f.run.policy)),
                                                                  ANONYMIZE.asset, f.ctx),
}

anonymized_images = image_asset(ANONYMIZE, Body(
    idle=nothing_linked, work=anonymize,
    idle_metadata=lambda run: {"run/spark_tasks": 0, **deid_metadata(run, issuer_statuses(run.deid.issuer_policy(), [])),
                               **optout_metadata(run)}),
    FIGURES)
