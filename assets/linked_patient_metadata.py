"""linked_patient_metadata: each indexed image with its patient's as-of clinical record and, for the eye it shows,
the eye's latest observations and diagnoses in force (step: imaging/steps/declared.py LINK).

The clinical records come from the landing zone's extracts, or, for the sites a clinical source serves
(IMAGING_CLINICAL_SOURCE), from the hospital's database (assets/clinical_read.py): one as-of join either way
(assets/linkage.py), then the eye-level join of the image's own eye.
"""

import dataclasses

from pyspark.sql import functions as F

from assets import quality as q
from assets.clinical_read import SOURCE_RECORD_DATE, extract_eye_rows, read_source
from assets.linkage import as_of_join, with_eyes
from assets.partitions import SETTINGS
from assets.versions import CLINICAL_SOURCE
from assets.runner import Body, StepOutput, StepRun, held_back, image_asset, merged, tally_of
from imaging.catalogue import CLINICAL_QUARANTINE, LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX
from imaging.clinical_source import EYE_REASONS, SOURCE_ORIGIN
from imaging.records import QUARANTINED, ClinicalExtract, ClinicalRow, schema_of
from imaging.driver.run_summary import Footprint
from imaging.steps.clinical import STUDY_BEFORE_BIRTH, ExtractJob, extracts_by_site_day, extracts_needed
from imaging.steps.declared import LINK
from resources.clinical_source import reader as source_reader
from resources.spark import frame_of, map_batches

EXTRACTS_PER_TASK = 16  # extracts are small: a task reads several
# Per site-day: images without eye-level fields, by reason (imaging.clinical_source.EYE_REASONS).
EYE_COUNTS = {reason: f"images_without_eye_fields/{key}" for reason, key in
              zip(EYE_REASONS, ("no_laterality", "both_eyes", "no_eye_observation"))}


def extract_keys(run: StepRun) -> list:
    """The run's site-days whose clinical records are the landing zone's extracts (not a clinical source's)."""
    source = run.clinical_source.source()
    return [k for k in run.keys if source is None or not source.serves(k.site)]


def nothing_indexed(run: StepRun) -> bool:
    """No image indexed and no extract of these days to account for. Earlier extracts are not read:
    with no image there is nothing to join them to."""
    own_day = {(k.date, k.site) for k in run.keys}
    return not run.warehouse.present(RAW_IMAGE_INDEX, run.keys) and not any(
        (e.extract_date, e.site) in own_day for e in extracts_needed(extract_keys(run), run.landing.clinical_extracts))


def link(run: StepRun) -> StepOutput:
    session = run.session
    # The database first: one that refuses the login or a query fails the run here, before anything else is read.
    reader = source_reader(run.clinical_source, session)
    served = sorted({k.site for k in run.keys if reader is not None and reader.source.serves(k.site)})
    extracts = extracts_needed(extract_keys(run), run.landing.clinical_extracts)
    images = run.read(RAW_IMAGE_INDEX)
    policy = run.policy
    with run.clock.stage("read_extracts"):
        job = ExtractJob(frozenset(run.ctx.rules.placeholder_list), policy.eye_aliases)
        parsed = map_batches(frame_of(session, extracts, schema_of(ClinicalExtract))
                             .repartition(max(1, len(extracts) // EXTRACTS_PER_TASK + 1)), job.step()).persist()
        parsed_tally, _ = tally_of(parsed)  # reads every extract once; its quarantine is tallied below
        source = (read_source(reader, served, run.ctx.rules.placeholder_list,
                              int(session.conf.get("spark.sql.shuffle.partitions")))
                  if reader is not None else None)
    rows = parsed.where(~F.expr(QUARANTINED)).select(*schema_of(ClinicalRow).names)
    clinical = rows.where(F.col("eye").isNull())  # each patient's own record (an extract row's patient columns)
    # An extract is read for every later date but accounted (or quarantined) once, in its own day.
    bad = parsed.where(QUARANTINED).join(run.site_days(), ["date", "site"], "left_semi")
    diagnosis_aliases = policy.eye_diagnosis_rule.aliases if policy.eye_diagnosis_rule else ()
    observations, diagnoses = extract_eye_rows(rows, diagnosis_aliases)
    records = clinical
    if source is not None:
        run.context.log_event(source.observation())  # the read, recorded before anything is linked from it
        records = clinical.unionByName(source.patients)
        observations = observations.unionByName(source.observations.select(*observations.columns))
        diagnoses = diagnoses.unionByName(source.diagnoses.select(*diagnoses.columns))
        bad = bad.unionByName(source.quarantine(images), allowMissingColumns=True)
    origin = F.when(F.col("site").isin(served), F.lit(SOURCE_ORIGIN)).otherwise(F.col("site")) if served \
        else F.col("site")

    # The link step's rule (imaging/steps/clinical.py): an image dated before its record's birth is held back.
    as_of = as_of_join(images, records).withColumn(
        "clinical_extract_date", F.when(F.col("clinical_extract_date") != SOURCE_RECORD_DATE,
                                        F.col("clinical_extract_date")))
    # Only the fields the policy follows per eye (its `eye: true` columns, by every name they go by).
    fields = sorted(policy.eye_aliases - set(diagnosis_aliases))
    joined = with_eyes(as_of, observations, diagnoses, origin, fields).withColumn(
        "reason", F.when(q.study_date(F.col("study_date")) < q.birth_date(policy), F.lit(STUDY_BEFORE_BIRTH))).persist()
    linked = joined.where(~F.expr(QUARANTINED)).drop("reason")
    counted = joined.withColumn("_linked", F.col("has_clinical_record").cast("int"))
    for reason, key in EYE_COUNTS.items():
        counted = counted.withColumn(key, (F.col("eye_reason") == reason).cast("int"))
    with run.clock.stage("link"):
        tally, sums = tally_of(counted, "_linked", *EYE_COUNTS.values())
    images_n = sum(n for counts in tally.values() for reason, n in counts.items() if reason is None)
    linked_n = sum(s["_linked"] for s in sums.values())
    # An extract's quarantine is accounted in its own day only (`bad`): the run's own site-days.
    own = set(run.partitions)
    bad_tally = {p: {r: n for r, n in counts.items() if r is not None} for p, counts in parsed_tally.items() if p in own}
    if source is not None:  # the source's unusable rows, in the site-days of their patients' images
        held, _ = tally_of(source.quarantine(images))
        bad_tally = merged(bad_tally, {p: c for p, c in held.items() if p in own})
    run.context.log.info(f"{images_n} images linked, {linked_n} with a clinical record"
                         + (f"; clinical source {source.source.name!r} read, version {source.version}"
                            if source is not None else ""))

    # Placeholder keys in the extracts are accounted to this run's own site-days (each extract once).
    own_rows = clinical.join(run.site_days().withColumnRenamed("date", "extract_date"), ["site", "extract_date"],
                             "left_semi")
    # Per site-day: its index parts, and the extracts it accounts for (each extract once in the run).
    extracts_of = extracts_by_site_day(run.keys, extracts)
    read = {p: run.warehouse.footprint(RAW_IMAGE_INDEX, [k]) + Footprint(extracts_of[p], 0)
            for p, k in zip(run.partitions, run.keys)}
    source_meta = {CLINICAL_SOURCE: source.metadata()} if source is not None else {}
    return StepOutput(
        rows={LINKED.name: linked, LINK_QUARANTINE.name: joined.where(QUARANTINED) if held_back(tally) else None,
              CLINICAL_QUARANTINE.name: bad if held_back(bad_tally) else None},
        tally=merged(tally, bad_tally), read=read,
        given={"images": images, "clinical": records, "own_rows": own_rows, "observations": observations,
               "served": served},
        metadata={"images_with_clinical_record": linked_n, "images_without_clinical_record": images_n - linked_n,
                  "extracts_read": len(extracts), **source_meta},
        partition_metadata={p: {key: int(sums.get(p, {}).get(key, 0)) for key in EYE_COUNTS.values()}
                            for p in run.partitions},
        release=[joined, parsed, *(source.persisted if source is not None else ())])


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
    "eye_observations_per_patient_day": lambda f: q.eye_observations_per_patient_day(
        f.given["images"], f.given["observations"], f.given["served"], f.ctx),
    "stale_eye_observations": lambda f: q.stale_eye_observations(f.committed(LINKED), f.ctx),
    ("column_rules", "column_warnings"): lambda f: q.column_rules(f.committed(LINKED), LINK.asset, f.ctx),
}

# With a clinical source the step also reads it: its observations are an input of every site-day's version.
STEP = dataclasses.replace(LINK, also_reads=(*LINK.also_reads, CLINICAL_SOURCE)) if SETTINGS.clinical_source else LINK

linked_patient_metadata = image_asset(STEP, Body(
    idle=nothing_indexed, work=link,
    idle_metadata=lambda run: {"images_with_clinical_record": 0, "images_without_clinical_record": 0,
                               "extracts_read": 0},
    partition_counts=tuple(EYE_COUNTS.values())), FIGURES)
