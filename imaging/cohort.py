"""Cohort definitions: YAML criteria turned into one SQL predicate over the de-identified manifest.

A definition is data, not code: the fields below are the whole language, so a reviewer can
read exactly who is in a release. The predicate is built here (pure, testable) and Spark
evaluates it natively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


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
    def from_dict(cls, spec: dict) -> "CohortDefinition":
        known = {"name", "version", "description", "modalities", "diagnosis_code_prefixes", "lateralities", "age_at_scan"}
        unknown = set(spec) - known
        if unknown:
            raise ValueError(f"cohort definition: unknown fields {sorted(unknown)}")
        name = str(spec.get("name", ""))
        if not _NAME.match(name):
            raise ValueError(f"cohort name {name!r} must be lower-case letters, digits and '-'")
        age = spec.get("age_at_scan") or {}
        return cls(
            name=name, version=int(spec["version"]), description=str(spec.get("description", "")),
            modalities=tuple(spec.get("modalities") or ()),
            diagnosis_code_prefixes=tuple(spec.get("diagnosis_code_prefixes") or ()),
            lateralities=tuple(spec.get("lateralities") or ()),
            age_min=age.get("min"), age_max=age.get("max"),
        )

    @classmethod
    def from_yaml(cls, path: str | Path) -> "CohortDefinition":
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(yaml.safe_load(handle))

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
    cohorts = [CohortDefinition.from_yaml(p) for p in sorted(Path(folder).glob("*.yaml"))]
    names = [c.name for c in cohorts]
    if len(names) != len(set(names)):
        raise ValueError("two cohort definitions share a name")
    return cohorts
