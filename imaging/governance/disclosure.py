"""Disclosure control: small-number suppression and k-anonymity over declared quasi-identifiers.

The clinical policy declares the quasi-identifiers (`quasi_identifiers:`): released values that,
combined, could single a person out (age, sex, ...). A release is k-anonymous when every
combination of them that occurs is shared by at least k distinct patients; below the configured
minimum k (`disclosure: min_k`, default 5) the release is blocked. Age is released and checked as a
band (`band_years`), never as raw years: checking bands while publishing years would overstate k.

Designed for counts computed elsewhere: `k_anonymity` takes the size of each equivalence class
(the asset computes them with a Spark aggregation, never collecting rows); `class_sizes` computes
the same sizes from rows for small inputs and tests. Reports hold counts only, never a value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from imaging.config_model import validate
from imaging.steps.clinical import DEFAULT_MIN_K, DEFAULT_SUPPRESS_BELOW, ClinicalPolicyFile
from imaging.steps.release import HeaderRule


def suppress(count: int, below: int = DEFAULT_SUPPRESS_BELOW) -> int | str:
    """A count as published in a data card: counts from 1 to below-1 become "<below" ("<10").

    Zero is kept: an empty category discloses nobody and hiding it would make totals unreadable.
    """
    count = int(count)
    if count < 0:
        raise ValueError("a count cannot be negative")
    return f"<{below}" if 0 < count < below else count


@dataclass(frozen=True)
class QuasiIdentifier:
    """A released column that counts as a quasi-identifier, and how it is generalised for release.

    `band_years` makes the released value a band ("50-54"); `top_code` is the age from which every
    value falls into one open band ("90+"), matching the clinical policy's top-coding.
    """

    column: str  # the manifest column it is computed from
    released_as: str  # the column name in the release
    band_years: int | None = None
    top_code: int | None = None
    header: str | None = None  # the DICOM attribute holding the same fact in released files

    def header_rule(self) -> HeaderRule | None:
        """How released files carry this quasi-identifier: a band is removed, a plain value written as released."""
        if self.header is None:
            return None
        return HeaderRule(self.header, self.released_as, remove=self.band_years is not None)

    def release_value(self, value):
        """The released (generalised) value of one manifest value; None stays None."""
        if value is None or self.band_years is None:
            return value
        years = int(value)
        if self.top_code is not None and years >= self.top_code:
            return f"{self.top_code}+"
        low = (years // self.band_years) * self.band_years
        return f"{low}-{low + self.band_years - 1}"

    def release_sql(self) -> str:
        """The same generalisation as a Spark SQL expression over the manifest column."""
        column = f"`{self.column}`"
        if self.band_years is None:
            return column
        band = int(self.band_years)
        low = f"CAST(FLOOR({column} / {band}) * {band} AS INT)"
        banded = f"concat({low}, '-', {low} + {band - 1})"
        if self.top_code is not None:
            banded = f"CASE WHEN {column} >= {int(self.top_code)} THEN '{int(self.top_code)}+' ELSE {banded} END"
        return f"CASE WHEN {column} IS NULL THEN NULL ELSE {banded} END"


@dataclass(frozen=True)
class DisclosurePolicy:
    quasi_identifiers: tuple[QuasiIdentifier, ...]
    min_k: int = DEFAULT_MIN_K
    suppress_below: int = DEFAULT_SUPPRESS_BELOW

    @classmethod
    def from_dict(cls, spec: Mapping, min_k: int | None = None,
                  source: str = "platform/clinical_policy.yaml") -> "DisclosurePolicy":
        """From the clinical policy's `quasi_identifiers:` list and `disclosure:` settings (a parsed
        clinical_policy.yaml; a ConfigError names every mistake).

        `min_k` (IMAGING_MIN_K, see imaging.driver.config) overrides the policy's minimum when given.
        """
        return cls.from_model(validate(ClinicalPolicyFile, spec, source), min_k=min_k)

    @classmethod
    def from_model(cls, spec, min_k: int | None = None) -> "DisclosurePolicy":
        """From a validated `imaging.steps.clinical.ClinicalPolicyFile` (it has checked every column)."""
        qis = []
        for item in spec.quasi_identifiers:
            top = spec.columns[item.column].top_code if item.band_years is not None else None
            qis.append(QuasiIdentifier(item.column, item.released_as or item.column, item.band_years, top,
                                       item.header))
        min_k = int(min_k if min_k is not None else spec.disclosure.min_k)
        if min_k < 1:
            raise ValueError("disclosure: min_k must be at least 1")
        return cls(tuple(qis), min_k, spec.disclosure.suppress_below)

    @property
    def released_columns(self) -> tuple[str, ...]:
        return tuple(q.released_as for q in self.quasi_identifiers)

    def by_column(self) -> dict[str, QuasiIdentifier]:
        return {q.column: q for q in self.quasi_identifiers}

    def header_rules(self) -> tuple[HeaderRule, ...]:
        return tuple(r for r in (q.header_rule() for q in self.quasi_identifiers) if r is not None)

    def class_sizes_sql(self, table: str, person: str = "patient_pseudonym") -> str:
        """Spark SQL giving one row per equivalence class of `table` (a manifest selection), its size only.

        Aggregates on the executors: the driver receives one small integer per class, never a row.
        """
        keys = [f"{q.release_sql()} AS `q{i}`" for i, q in enumerate(self.quasi_identifiers)]
        groups = ", ".join(f"`q{i}`" for i in range(len(keys))) or "1"
        return (f"SELECT count(DISTINCT `{person}`) AS size FROM "
                f"(SELECT `{person}`{''.join(', ' + k for k in keys)} FROM {table}) GROUP BY {groups}")


@dataclass(frozen=True)
class KAnonymity:
    """k-anonymity of one release over the declared quasi-identifiers: sizes only, no values."""

    quasi_identifiers: tuple[str, ...]  # released column names
    min_k: int
    class_sizes: tuple[int, ...]  # distinct patients per equivalence class, ascending

    @property
    def classes(self) -> int:
        return len(self.class_sizes)

    @property
    def smallest(self) -> int:
        return self.class_sizes[0] if self.class_sizes else 0

    @property
    def passed(self) -> bool:
        """True when every class has at least min_k patients (an empty release discloses nobody)."""
        return self.smallest >= self.min_k or not self.class_sizes

    @property
    def below_k(self) -> int:
        return sum(1 for s in self.class_sizes if s < self.min_k)

    def report(self, suppress_below: int = DEFAULT_SUPPRESS_BELOW) -> dict:
        """What a data card shows: sizes suppressed like every other count."""
        return {
            "quasi_identifiers": list(self.quasi_identifiers), "min_k": self.min_k,
            "passed": self.passed, "equivalence_classes": self.classes,
            "classes_below_min_k": self.below_k,
            "smallest_class": suppress(self.smallest, suppress_below),
            "class_sizes": [suppress(s, suppress_below) for s in self.class_sizes],
        }

    def reason(self) -> str:
        """Why a release is blocked, in counts only."""
        return (f"{self.below_k} of {self.classes} equivalence classes over "
                f"({', '.join(self.quasi_identifiers)}) have fewer than {self.min_k} patients")


def k_anonymity(class_sizes: Iterable[int], policy: DisclosurePolicy) -> KAnonymity:
    """k-anonymity from the size of each equivalence class (distinct patients per combination)."""
    sizes = tuple(sorted(int(s) for s in class_sizes))
    if any(s <= 0 for s in sizes):
        raise ValueError("an equivalence class has at least one patient")
    return KAnonymity(policy.released_columns, policy.min_k, sizes)


def class_sizes(rows: Iterable[Mapping], policy: DisclosurePolicy, person: str = "patient_pseudonym") -> list[int]:
    """Equivalence-class sizes from manifest rows (for small inputs; the asset aggregates instead).

    A patient counts once per class; a missing value is a value of its own (unknowns are alike).
    """
    members: dict[tuple, set] = defaultdict(set)
    for row in rows:
        key = tuple(q.release_value(row.get(q.column)) for q in policy.quasi_identifiers)
        members[key].add(row[person])
    return [len(people) for people in members.values()]
