"""Cohort definitions: YAML criteria turned into one SQL predicate over the de-identified manifest.

A definition is data, not code: the fields below are the whole language, so a reviewer can
read exactly who is in a release. The predicate is built here (pure, testable) and Spark
evaluates it natively.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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

    @classmethod
    def from_dict(cls, spec: dict, source: str = "cohort definition") -> "CohortDefinition":
        """From a parsed cohort YAML; a ConfigError (imaging.config_files) names every mistake."""
        from imaging.config_files import CohortFile, validate

        return cls.from_model(validate(CohortFile, spec, source))

    @classmethod
    def from_model(cls, spec) -> "CohortDefinition":
        """From a validated `imaging.config_files.CohortFile`."""
        age = spec.age_at_scan
        return cls(
            name=spec.name, version=spec.version, description=spec.description,
            modalities=tuple(spec.modalities), diagnosis_code_prefixes=tuple(spec.diagnosis_code_prefixes),
            lateralities=tuple(spec.lateralities),
            age_min=age.min if age else None, age_max=age.max if age else None,
        )

    @classmethod
    def from_yaml(cls, path: str | Path) -> "CohortDefinition":
        from imaging.config_files import load_file

        path = Path(path)
        return cls.from_model(load_file(f"cohorts/{path.name}", path.parent.parent))

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
        # A null in any tested column leaves the row out: unknown is not a match.
        return " AND ".join(f"coalesce({t}, false)" for t in terms) if terms else "true"


def load_cohorts(folder: str | Path) -> list[CohortDefinition]:
    """Every `<folder>/*.yaml` (a platform folder's `cohorts/`), validated; names must be unique."""
    from imaging.config_files import load_cohort_files

    return [CohortDefinition.from_model(c) for c in load_cohort_files(Path(folder).parent)]
