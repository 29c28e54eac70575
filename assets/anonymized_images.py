"""anonymized_images: every linked image rewritten de-identified (PS3.15 Annex E), with a manifest
(step: imaging/steps/declared.py ANONYMIZE)."""

import datetime as dt
import math

from dagster import AssetExecutionContext
from pyspark.sql import functions as F

from assets import quality as q
from assets.governance import CODE_VERSIONS
from assets.runner import Body, StepOutput, StepRun, image_asset, tally_of
from imaging.catalogue import ANONYMIZE_QUARANTINE, DEIDENTIFIED, LEDGER, LINKED
from imaging.driver.run_summary import Footprint
from imaging.governance.datacard import DeidSummary
from imaging.issuers import SUSPECT, IssuerPolicy
from imaging.records import QUARANTINED
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
    return not run.warehouse.present(LINKED, run.keys)


def deid_metadata(run: StepRun, issuers: dict[str, int]) -> dict:
    return {"deid_options": ", ".join(run.deid.options) or "basic profile only",
            # How the files' IssuerOfPatientID compared with the sites' configured namespaces (counts only):
            # unknown or inconsistent values never split a patient, but an operator should know.
            "issuer_of_patient_id": issuers,
            **{f"issuer_of_patient_id/{status}": count for status, count in issuers.items()}}


def anonymize(run: StepRun) -> StepOutput:
    deid, session = run.deid, run.session
    linked = run.read(LINKED)
    job = AnonymizeJob(deid.key, tuple(deid.options), run.policy, deid.issuer_policy(), deid.pixel_text_settings(),
                       staging=run.commit.staging(run.warehouse.zone(DEIDENTIFIED)))
    # One pass over the input: files and bytes per site-day, and the IssuerOfPatientID values a site's
    # devices write (a handful, whatever the input size).
    counted = linked.groupBy("date", "site", "issuer_of_patient_id").agg(
        F.count(F.lit(1)).alias("count"), F.sum("size_bytes").alias("bytes")).collect()
    read: dict[str, Footprint] = {}
    for r in counted:
        key = f"{r['date']}|{r['site']}"
        read[key] = read.get(key, Footprint()) + Footprint(r["count"], r["bytes"] or 0)
    images, bytes_in = sum(f.files for f in read.values()), sum(f.bytes for f in read.values())
    tasks = max(1, math.ceil(images / run.landing.files_per_task))
    outcomes = map_batches(linked.repartition(tasks), job.step()).persist()
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
    return StepOutput(
        rows={ANONYMIZE.output_table(run.policy).name: published,
              LEDGER.name: published.withColumns({k: F.lit(v) for k, v in provenance.items()}),
              ANONYMIZE_QUARANTINE.name: outcomes.where(QUARANTINED)},
        tally=tally, read=read,
        # Batch folders are keyed tokens of the site-day: the manifest's path names no real date or site.
        written={p: Footprint(tally[p].get(None, 0), sums.get(p, {}).get("output_size_bytes", 0)) for p in tally},
        metadata={"spark_tasks": tasks, **deid_metadata(run, issuers)}, release=[outcomes])


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
    idle_metadata=lambda run: {"spark_tasks": 0, **deid_metadata(run, issuer_statuses(run.deid.issuer_policy(), []))}),
    FIGURES)
