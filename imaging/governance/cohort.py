"""Cohort definitions: YAML criteria turned into one SQL predicate over the de-identified manifest.

A definition is data, not code: the fields below are the whole language, so a reviewer can
read exactly who is in a release. The predicate is built here (pure, testable) and Spark
evaluates it natively. A definition's file, platform/cohorts/<file>.yaml, is read into `CohortFile`.

Beside the selection, a definition says what its releases carry and how long they stay:
`stamp` lists released metadata columns written into each image's header (imaging/steps/stamp.py;
`sponsor` names the Clinical Trial Sponsor), and `retention_days` how long a published version stays
once a newer version of the cohort is published (none: kept until withdrawn; a version holding
patients who opted out since goes as soon as the version that leaves them out is published).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from imaging.config_model import PositiveInt, StrictModel, Text, validate

COHORT_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"  # becomes a folder: cohorts/<name>/v<version>
LATERALITIES = ("R", "L", "B", "U")
EYES = ("R", "L")  # the eye an image shows, as its eye-level fields know it
FIELD_NAME = r"^[a-z][a-z0-9_]{0,62}$"  # an eye field: a released column eye_<name>


# --- platform/cohorts/*.yaml, their model -----------------------------------------------------------------

class AgeRange(StrictModel):
    min: Annotated[int, Field(ge=0)] | None = None
    max: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self):
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self


class ValueRange(StrictModel):
    min: float | int | None = None
    max: float | int | None = None

    @model_validator(mode="after")
    def _ordered(self):
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self


class EyeSelection(StrictModel):
    """Selection on the eye each image shows (the release's eye-level columns, imaging/steps/clinical.py)."""

    lateralities: list[Literal[EYES]] = []  # type: ignore[valid-type]  # the imaged eye
    diagnosis_code_prefixes: list[Text] = []  # a diagnosis in force for the imaged eye (or both eyes)
    # An eye field of the policy (`eye: true`) -> the range its latest value must lie in, e.g.
    # visual_acuity_logmar: {min: 0.3} is acuity 0.3 logMAR or worse.
    fields: dict[Annotated[str, StringConstraints(pattern=FIELD_NAME)], ValueRange] = {}
    max_days_before: Annotated[int, Field(ge=0)] | None = None  # each field of `fields` observed at most this long before

    @model_validator(mode="after")
    def _days_need_fields(self):
        if self.max_days_before is not None and not self.fields:
            raise ValueError("max_days_before applies to `fields`: name at least one")
        return self


class CohortFile(StrictModel):
    name: Annotated[str, StringConstraints(pattern=COHORT_NAME)]  # a folder name of the release
    version: PositiveInt  # the release folder is v<version>
    description: str = ""
    modalities: list[Annotated[str, StringConstraints(pattern=r"^[A-Z0-9_ ]{1,16}$")]] = []  # DICOM Modality (CS)
    diagnosis_code_prefixes: list[Text] = []
    lateralities: list[Literal[LATERALITIES]] = []  # type: ignore[valid-type]
    age_at_scan: AgeRange | None = None
    eye: EyeSelection | None = None
    # Released metadata columns stamped into each image (imaging/steps/stamp.py); empty: nothing stamped.
    stamp: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]] = []
    sponsor: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\\\x00-\x1f]*$")] | None = None
    retention_days: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _stamped_once(self):
        if len(set(self.stamp)) != len(self.stamp):
            raise ValueError("stamp: a column is listed twice")
        if self.sponsor is not None and not self.stamp:
            raise ValueError("sponsor: only stamped images carry a sponsor (add `stamp:`)")
        return self


def _quote(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class CohortDefinition:
    name: str
    version: int
    description: str = ""
    modalities: tuple[str, ...] = ()
    diagnosis_code_prefixes: tuple[str, ...] = ()
    lateralities: tuple[str, ...] = ()
    age_min: int | None = None
    age_max: int | None = None
    eye_lateralities: tuple[str, ...] = ()
    eye_diagnosis_code_prefixes: tuple[str, ...] = ()
    eye_fields: tuple[tuple[str, float | None, float | None], ...] = ()  # (field, min, max)
    eye_max_days_before: int | None = None
    stamp: tuple[str, ...] = ()  # released metadata columns stamped into each image
    sponsor: str | None = None  # ClinicalTrialSponsorName of stamped images (default: the cohort's name)
    retention_days: int | None = None  # days a superseded published version stays (None: until withdrawn)

    @classmethod
    def from_dict(cls, spec: dict, source: str = "cohort definition") -> "CohortDefinition":
        """From a parsed cohort YAML; a ConfigError names every mistake."""
        return cls.from_model(validate(CohortFile, spec, source))

    @classmethod
    def from_model(cls, spec) -> "CohortDefinition":
        """From a validated `CohortFile`."""
        age, eye = spec.age_at_scan, spec.eye
        return cls(
            name=spec.name, version=spec.version, description=spec.description,
            modalities=tuple(spec.modalities), diagnosis_code_prefixes=tuple(spec.diagnosis_code_prefixes),
            lateralities=tuple(spec.lateralities),
            age_min=age.min if age else None, age_max=age.max if age else None,
            eye_lateralities=tuple(eye.lateralities) if eye else (),
            eye_diagnosis_code_prefixes=tuple(eye.diagnosis_code_prefixes) if eye else (),
            eye_fields=tuple((f, r.min, r.max) for f, r in sorted(eye.fields.items())) if eye else (),
            eye_max_days_before=eye.max_days_before if eye else None,
            stamp=tuple(spec.stamp), sponsor=spec.sponsor, retention_days=spec.retention_days,
        )

    @property
    def release(self) -> str:
        return f"v{self.version}"

    def sql_predicate(self) -> str:
        """The selection as a Spark SQL boolean expression over manifest columns."""
        terms = []
        if self.modalities:
            terms.append(f"modality IN ({', '.join(map(_quote, self.modalities))})")
        if self.lateralities:
            terms.append(f"laterality IN ({', '.join(map(_quote, self.lateralities))})")
        if self.diagnosis_code_prefixes:
            likes = [f"startswith(diagnosis_code, {_quote(p)})" for p in self.diagnosis_code_prefixes]
            terms.append("(" + " OR ".join(likes) + ")")
        if self.age_min is not None:
            terms.append(f"age_at_scan >= {int(self.age_min)}")
        if self.age_max is not None:
            terms.append(f"age_at_scan <= {int(self.age_max)}")
        terms.extend(self._eye_terms())
        # A null in any tested column leaves the row out: unknown is not a match.
        return " AND ".join(f"coalesce({t}, false)" for t in terms) if terms else "true"

    def _eye_terms(self) -> list[str]:
        """The eye-level criteria over the release's eye columns (imaging/steps/clinical.py `eye_columns`): the
        imaged eye, a diagnosis in force for it, its latest value of each field in range and recent enough."""
        terms = []
        if self.eye_lateralities:
            terms.append(f"eye IN ({', '.join(map(_quote, self.eye_lateralities))})")
        if self.eye_diagnosis_code_prefixes:
            likes = " OR ".join(f"startswith(code, {_quote(p)})" for p in self.eye_diagnosis_code_prefixes)
            terms.append(f"exists(split(eye_diagnosis_codes, ';'), code -> {likes})")
        for name, low, high in self.eye_fields:
            column = f"`eye_{name}`"
            if low is not None:
                terms.append(f"{column} >= {float(low)!r}")
            if high is not None:
                terms.append(f"{column} <= {float(high)!r}")
            if self.eye_max_days_before is not None:
                terms.append(f"`eye_{name}_days_before` <= {int(self.eye_max_days_before)}")
        return terms

    @property
    def eye_field_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.eye_fields)

