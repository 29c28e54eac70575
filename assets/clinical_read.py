"""The clinical source's read shaped for the link step (shared helper module, not an asset).

`read_source` reads the three queries once (each read persisted, repartitioned by patient before any join, its
figures in one aggregate that is also the action reading the database) and shapes them as the link step joins
them: the patients as extract rows of each site the source serves, the eye observations and diagnoses with their
eyes normalised, and the rows that cannot be used (a blank or placeholder patient_id, an eye not R/L/B/OD/OS/OU, no
date) set aside with the reason. `extract_eye_rows` gives the landing extracts' eye rows the same shape. The read's
figures and digest are its data version, which the link step records as an observation of `clinical_source`
(assets/clinical_source.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dagster import AssetKey, AssetObservation
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from pyspark.sql import DataFrame, functions as F, types as T

from assets.linkage import normal_eye
from assets.versions import CLINICAL_SOURCE
from imaging.clinical_source import (DIAGNOSED_MISSING, DIAGNOSES, EYE_MISSING, EYE_NOT_KNOWN, EYE_OBSERVATIONS,
                                     OBSERVED_MISSING, PATIENTS, SOURCE_ORIGIN, ClinicalSource)
from imaging.steps.clinical import PLACEHOLDER_ROW
from resources.clinical_source import Reader, clinical_map, local_datetime

# A source's patient rows join the as-of rule as records dated before any image (they are the patient as now).
SOURCE_RECORD_DATE = "0001-01-01"


@dataclass
class SourceRead:
    """One run's read of the source, shaped for the link step, with its figures."""

    source: ClinicalSource
    patients: DataFrame       # site, extract_date, row_number, patient_id, clinical, eye (null): extract-row shaped
    observations: DataFrame   # _origin, patient_id, eye, observed_at, _tie, clinical
    diagnoses: DataFrame      # _origin, patient_id, eye, diagnosed_on, resolved_on, code
    held: DataFrame           # patient_id, reason, query: rows that cannot be used
    figures: Mapping[str, Mapping[str, int | str]]  # query -> rows, quarantined by reason, digest of the rows
    persisted: Sequence[DataFrame] = field(default_factory=tuple)

    @property
    def version(self) -> str:
        """The read's data version: a digest of the source's name, each query's digest and each read's figures."""
        text = json.dumps({"source": self.source.describe(), "rows": self.figures}, sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def metadata(self) -> dict:
        """What the link step's materializations and the observation record: counts and digests, never a value."""
        described = self.source.describe()
        return {"name": described["name"], "url": described["url"], "data_version": self.version,
                "queries": {q: {"query_sha256": digest, **self.figures.get(q, {})}
                            for q, digest in described["queries"].items()}}

    def observation(self) -> AssetObservation:
        meta = self.metadata()
        return AssetObservation(asset_key=AssetKey(CLINICAL_SOURCE), tags={DATA_VERSION_TAG: self.version},
                                metadata={"source": meta["name"], "url": meta["url"],
                                          **{f"{q}/{k}": v for q, figures in meta["queries"].items()
                                             for k, v in figures.items()}})

    def quarantine(self, images: DataFrame) -> DataFrame:
        """The unusable rows as quarantine records of the run's site-days whose images are of their patient (the
        site-days that read them); rows of patients not imaged in the run are counted in the figures only."""
        name = self.source.name
        keys = images.where(F.col("patient_id").isNotNull()).select("date", "site", "patient_id").distinct()
        return (self.held.join(keys, "patient_id")
                .select("date", "site", F.concat(F.lit(f"clinical_source:{name}/"), F.col("query")).alias("source_path"),
                        F.lit(None).cast("long").alias("size_bytes"), F.lit(None).cast("string").alias("sha256"),
                        "reason"))

    def release(self) -> None:
        for frame in self.persisted:
            frame.unpersist()


def _patient_key(placeholders: Sequence[str]):
    key = F.trim(F.col("patient_id").cast("string"))
    bad = key.isNull() | F.upper(key).isin(list(placeholders))
    return key, bad


def _figures(reader: Reader, name: str, frame: DataFrame, reasons: Sequence[str]) -> dict:
    """Rows read, rows set aside by reason, and an order-free digest of the rows (a sum of 64-bit row hashes): one
    aggregate, the action that reads the database."""
    columns = [F.to_json(F.array_sort(F.map_entries(c.name))) if isinstance(c.dataType, T.MapType) else F.col(c.name)
               for c in frame.schema.fields if c.name not in ("reason", "_tie")]  # a map hashed as its sorted entries
    row_hash = F.xxhash64(*columns)
    found = reader.materialize(name, frame, F.count(F.lit(1)).alias("rows"),
                               F.sum(row_hash.cast("decimal(38,0)")).alias("digest"),
                               *[F.sum(F.when(F.col("reason") == r, 1).otherwise(0)).alias(f"r{i}")
                                 for i, r in enumerate(reasons)])
    held = {r: int(found[f"r{i}"] or 0) for i, r in enumerate(reasons) if found[f"r{i}"]}
    return {"rows": int(found["rows"]), "quarantined": sum(held.values()),
            "rows_digest": hashlib.blake2b(str(found["digest"] or 0).encode(), digest_size=16).hexdigest(),
            **({"reasons": json.dumps(held, sort_keys=True)} if held else {})}


def read_source(reader: Reader, served_sites: Sequence[str], placeholders: Sequence[str],
                shuffle_partitions: int) -> SourceRead:
    """Read the source's queries (patients, eye observations, diagnoses) and shape them for the link step."""
    source, session = reader.source, reader.session
    persisted: list[DataFrame] = []

    def kept(frame: DataFrame) -> DataFrame:
        frame = frame.persist()
        persisted.append(frame)
        return frame

    # Patients: one record a patient, for every site the source serves in the run.
    raw = reader.read(PATIENTS)
    key, bad = _patient_key(placeholders)
    birth = F.col("birth_date")
    if isinstance(raw.schema["birth_date"].dataType, (T.TimestampType, T.TimestampNTZType)):
        raw = raw.withColumn("birth_date", F.to_date(birth))
    patients = kept(raw.select(key.alias("patient_id"), clinical_map(raw, PATIENTS).alias("clinical"),
                               F.when(bad, F.lit(PLACEHOLDER_ROW)).alias("reason"))
                    .repartition(shuffle_partitions, "patient_id"))
    figures = {PATIENTS: _figures(reader, PATIENTS, patients, [PLACEHOLDER_ROW])}
    sites = session.createDataFrame([(s,) for s in served_sites], "site string")
    patient_rows = (patients.where(F.col("reason").isNull()).crossJoin(F.broadcast(sites))
                    .select("site", F.lit(SOURCE_RECORD_DATE).alias("extract_date"),
                            (F.abs(F.xxhash64(F.to_json("clinical"))) % 2147483647).cast("int").alias("row_number"),
                            "patient_id", "clinical", F.lit(None).cast("string").alias("eye")))

    # Eye observations: a row per measurement occasion of one eye, repartitioned by patient before the join.
    raw = reader.read(EYE_OBSERVATIONS)
    key, bad = _patient_key(placeholders)
    eye, at = normal_eye(F.col("eye")), local_datetime(raw, "observed_at", source, EYE_OBSERVATIONS)
    reason = (F.when(bad, F.lit(PLACEHOLDER_ROW))
              .when(F.col("eye").isNull() | (F.trim(F.col("eye").cast("string")) == ""), F.lit(EYE_MISSING))
              .when(eye.isNull(), F.lit(EYE_NOT_KNOWN)).when(at.isNull(), F.lit(OBSERVED_MISSING)))
    observations = kept(raw.select(F.lit(SOURCE_ORIGIN).alias("_origin"), key.alias("patient_id"), eye.alias("eye"),
                                   at.alias("observed_at"), F.lit(0).alias("_tie"),
                                   clinical_map(raw, EYE_OBSERVATIONS).alias("clinical"), reason.alias("reason"))
                        .repartition(shuffle_partitions, "patient_id"))
    figures[EYE_OBSERVATIONS] = _figures(reader, EYE_OBSERVATIONS, observations,
                                         [PLACEHOLDER_ROW, EYE_MISSING, EYE_NOT_KNOWN, OBSERVED_MISSING])
    held = observations.where(F.col("reason").isNotNull()).select("patient_id", "reason",
                                                                  F.lit(EYE_OBSERVATIONS).alias("query"))

    # Diagnoses (optional): each in force from its day, for its eye or both, until resolved.
    if DIAGNOSES in source.queries:
        raw = reader.read(DIAGNOSES)
        key, bad = _patient_key(placeholders)
        eye, on = normal_eye(F.col("eye")), local_datetime(raw, "diagnosed_on", source, DIAGNOSES)
        resolved = (F.to_date(local_datetime(raw, "resolved_on", source, DIAGNOSES)) if "resolved_on" in raw.columns
                    else F.lit(None).cast("date"))
        reason = (F.when(bad, F.lit(PLACEHOLDER_ROW))
                  .when(F.col("eye").isNull() | (F.trim(F.col("eye").cast("string")) == ""), F.lit(EYE_MISSING))
                  .when(eye.isNull(), F.lit(EYE_NOT_KNOWN)).when(on.isNull(), F.lit(DIAGNOSED_MISSING)))
        diagnoses = kept(raw.select(F.lit(SOURCE_ORIGIN).alias("_origin"), key.alias("patient_id"), eye.alias("eye"),
                                    F.to_date(on).alias("diagnosed_on"), resolved.alias("resolved_on"),
                                    F.trim(F.col("diagnosis_code").cast("string")).alias("code"), reason.alias("reason"))
                         .repartition(shuffle_partitions, "patient_id"))
        figures[DIAGNOSES] = _figures(reader, DIAGNOSES, diagnoses,
                                      [PLACEHOLDER_ROW, EYE_MISSING, EYE_NOT_KNOWN, DIAGNOSED_MISSING])
        held = held.unionByName(diagnoses.where(F.col("reason").isNotNull())
                                .select("patient_id", "reason", F.lit(DIAGNOSES).alias("query")))
        diagnoses = diagnoses.where(F.col("reason").isNull()).drop("reason")
    else:
        diagnoses = session.createDataFrame([], DIAGNOSES_SCHEMA)
    return SourceRead(source, patient_rows, observations.where(F.col("reason").isNull()).drop("reason"),
                      diagnoses, held, figures, tuple(persisted))


DIAGNOSES_SCHEMA = "_origin string, patient_id string, eye string, diagnosed_on date, resolved_on date, code string"


def extract_eye_rows(rows: DataFrame, diagnosis_aliases: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    """An extract's eye rows (`ClinicalRow.eye` set) as observations dated by their extract, and the diagnosis codes
    among them as diagnoses of that eye from that day (never resolved: a later extract's code adds, not replaces)."""
    eyes = rows.where(F.col("eye").isNotNull())
    aliases = list(diagnosis_aliases)
    observations = eyes.select(F.col("site").alias("_origin"), "patient_id", "eye",
                               F.col("extract_date").cast("date").cast("timestamp_ntz").alias("observed_at"),
                               F.col("row_number").alias("_tie"),
                               F.map_filter("clinical", lambda k, v: ~k.isin(aliases)).alias("clinical"))
    code = F.coalesce(*[F.col("clinical").getItem(a) for a in aliases]) if aliases else F.lit(None).cast("string")
    diagnoses = (eyes.select(F.col("site").alias("_origin"), "patient_id", "eye",
                             F.col("extract_date").cast("date").alias("diagnosed_on"),
                             F.lit(None).cast("date").alias("resolved_on"), code.alias("code"))
                 .where(F.col("code").isNotNull()))
    return observations, diagnoses
