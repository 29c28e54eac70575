"""linked_patient_metadata: each indexed image with its patient's as-of clinical record (step: imaging/steps/declared.py LINK)."""

from pyspark.sql import functions as F

from assets import quality as q
from assets.linkage import as_of_join
from assets.runner import Body, StepOutput, StepRun, held_back, image_asset, merged, tally_of
from imaging.catalogue import CLINICAL_QUARANTINE, LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX
from imaging.records import QUARANTINED, ClinicalExtract, ClinicalRow, schema_of
from imaging.driver.run_summary import Footprint
from imaging.steps.clinical import STUDY_BEFORE_BIRTH, ExtractJob, extracts_by_site_day, extracts_needed
from imaging.steps.declared import LINK
from resources.spark import frame_of, map_batches

EXTRACTS_PER_TASK = 16  # extracts are small: a task reads several


def nothing_indexed(run: StepRun) -> bool:
    """No image indexed and no extract of these days to account for. Earlier extracts are not read:
    with no image there is nothing to join them to."""
    own_day = {(k.date, k.site) for k in run.keys}
    return not run.warehouse.present(RAW_IMAGE_INDEX, run.keys) and not any(
        (e.extract_date, e.site) in own_day for e in extracts_needed(run.keys, run.landing.clinical_extracts))


def link(run: StepRun) -> StepOutput:
    session = run.session
    extracts = extracts_needed(run.keys, run.landing.clinical_extracts)
    images = run.read(RAW_IMAGE_INDEX)
    with run.clock.stage("read_extracts"):
        reader = ExtractJob(frozenset(run.ctx.rules.placeholder_list)).step()
        parsed = map_batches(frame_of(session, extracts, schema_of(ClinicalExtract))
                             .repartition(max(1, len(extracts) // EXTRACTS_PER_TASK + 1)), reader).persist()
        parsed_tally, _ = tally_of(parsed)  # reads every extract once; its quarantine is tallied below
    clinical = parsed.where(~F.expr(QUARANTINED)).select(*schema_of(ClinicalRow).names)
    # An extract is read for every later date but accounted (or quarantined) once, in its own day.
    bad = parsed.where(QUARANTINED).join(run.site_days(), ["date", "site"], "left_semi")

    # The link step's rule (imaging/steps/clinical.py): an image dated before its record's birth is held back.
    joined = as_of_join(images, clinical).withColumn(
        "reason", F.when(q.study_date(F.col("study_date")) < q.birth_date(run.policy), F.lit(STUDY_BEFORE_BIRTH))).persist()
    linked = joined.where(~F.expr(QUARANTINED)).drop("reason")
    with run.clock.stage("link"):
        tally, sums = tally_of(joined.withColumn("_linked", F.col("has_clinical_record").cast("int")), "_linked")
    images_n = sum(n for counts in tally.values() for reason, n in counts.items() if reason is None)
    linked_n = sum(s["_linked"] for s in sums.values())
    # An extract's quarantine is accounted in its own day only (`bad`): the run's own site-days.
    own = set(run.partitions)
    bad_tally = {p: {r: n for r, n in counts.items() if r is not None} for p, counts in parsed_tally.items() if p in own}
    run.context.log.info(f"{images_n} images linked, {linked_n} with a clinical record")

    # Placeholder keys in the extracts are accounted to this run's own site-days (each extract once).
    own_rows = clinical.join(run.site_days().withColumnRenamed("date", "extract_date"), ["site", "extract_date"],
                             "left_semi")
    # Per site-day: its index parts, and the extracts it accounts for (each extract once in the run).
    extracts_of = extracts_by_site_day(run.keys, extracts)
    read = {p: run.warehouse.footprint(RAW_IMAGE_INDEX, [k]) + Footprint(extracts_of[p], 0)
            for p, k in zip(run.partitions, run.keys)}
    return StepOutput(
        rows={LINKED.name: linked, LINK_QUARANTINE.name: joined.where(QUARANTINED) if held_back(tally) else None,
              CLINICAL_QUARANTINE.name: bad if held_back(bad_tally) else None},
        tally=merged(tally, bad_tally), read=read,
        given={"images": images, "clinical": clinical, "own_rows": own_rows},
        metadata={"images_with_clinical_record": linked_n, "images_without_clinical_record": images_n - linked_n,
                  "extracts_read": len(extracts)},
        release=[joined, parsed])


# Data quality: fan-out is measured on the join's inputs (the output keeps one record per image).
FIGURES = {
    "images_accounted": lambda f: q.images_linked_accounted(f.given["images"], f.committed(LINKED),
                                                            f.committed(LINK_QUARANTINE), f.ctx),
    ("records_per_image", "images_per_record"): lambda f: q.linkage_fan_out(f.given["images"], f.given["clinical"],
                                                                            f.run.policy, f.ctx),
    "placeholder_keys": lambda f: q.placeholder_keys(f.given["images"], f.given["own_rows"], f.ctx),
    "images_per_clinical_key": lambda f: q.images_per_clinical_key(f.given["images"], f.ctx),
    "unlinked_share": lambda f: q.unlinked_share(f.committed(LINKED), f.ctx),
    "study_before_birth": lambda f: q.study_before_birth(f.committed(LINKED), f.run.policy, f.ctx),
    ("column_rules", "column_warnings"): lambda f: q.column_rules(f.committed(LINKED), LINK.asset, f.ctx),
}

linked_patient_metadata = image_asset(LINK, Body(
    idle=nothing_indexed, work=link,
    idle_metadata=lambda run: {"images_with_clinical_record": 0, "images_without_clinical_record": 0,
                               "extracts_read": 0}), FIGURES)
