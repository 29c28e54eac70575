"""Check outcomes: a check's figures (an observed value, a distribution, the top offenders) turned into a
`CheckOutcome`, passed or not, with metadata a reviewer can use. Offenders leave this module as
pseudonyms only (the keyed patient pseudonym, or the published `2.25.` UID), never as a raw patient id,
name or path. Pure: no Spark, no Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from imaging.pseudonym import Pseudonymizer
from imaging.quality.rules import ERROR, CheckRule


@dataclass(frozen=True)
class Distribution:
    """Summary of a per-key count (for example scans per patient): how many keys and its percentiles."""

    keys: int
    minimum: float | None
    maximum: float | None
    percentiles: Mapping[float, float | None] = field(default_factory=dict)

    def as_metadata(self) -> dict:
        out = {"keys": self.keys, "min": self.minimum, "max": self.maximum}
        out.update({f"p{round(p * 100):02d}": v for p, v in sorted(self.percentiles.items())})
        return out


@dataclass(frozen=True)
class Offender:
    """An offending key, by pseudonym only, with its figure and the partitions it was seen in."""

    pseudonym: str
    value: float
    partitions: tuple[str, ...] = ()

    def as_metadata(self) -> dict:
        out = {"pseudonym": self.pseudonym, "value": _plain(self.value)}
        if self.partitions:
            out["partitions"] = list(self.partitions)
        return out


def patient_offender(pseudonymizer: Pseudonymizer, issuer: str | None, patient_id: str | None, value: float,
                     default_issuer: str, partitions: Sequence[str] = ()) -> Offender:
    """A patient as an offender: its keyed pseudonym, the one the de-identified data carries."""
    return Offender(pseudonymizer.patient_id(issuer or default_issuer, patient_id or ""), value,
                    tuple(sorted(partitions)))


def uid_offender(pseudonymizer: Pseudonymizer, uid: str, value: float, partitions: Sequence[str] = ()) -> Offender:
    """A UID as an offender: the `2.25.` UID it is published under, never the source UID."""
    return Offender(pseudonymizer.uid(uid), value, tuple(sorted(partitions)))


@dataclass(frozen=True)
class CheckOutcome:
    """One evaluated check: what a Dagster check result reports (see `as_metadata`)."""

    asset: str
    check: str
    severity: str
    passed: bool
    observed: float
    threshold: float | None
    description: str = ""
    distribution: Distribution | None = None
    offenders: tuple[Offender, ...] = ()
    partitions: tuple[str, ...] = ()          # the partitions this evaluation covered
    failed_partitions: tuple[str, ...] = ()   # the partitions the failure is in, where known
    details: Mapping[str, float | int | str] = field(default_factory=dict)

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR

    def summary_line(self, limit: int = 10) -> str:
        """One log line: check, verdict, figures and failed partitions (no offender, no value)."""
        line = (f"quality check {self.asset}:{self.check} {'passed' if self.passed else 'failed'} ({self.severity}): "
                f"observed {self.observed:g}" + (f", threshold {self.threshold:g}" if self.threshold is not None else ""))
        if self.failed_partitions:
            shown = ", ".join(self.failed_partitions[:limit])
            more = len(self.failed_partitions) - limit
            line += f"; partitions {shown}" + (f" (+{more} more)" if more > 0 else "")
        return line

    def failed_on(self) -> frozenset[str]:
        """The partitions this evaluation failed on: those it names, else every one it covered."""
        if self.passed:
            return frozenset()
        return frozenset(self.failed_partitions or self.partitions)

    def on_partition(self, partition: str) -> "CheckOutcome":
        """This evaluation's verdict on one of the partitions it covered, for that partition's own check result.

        It fails there only where the failure is (`failed_on`). The figures stay the evaluation's, measured over
        all its partitions, and say so (`run_site_days`, `run_site_days_failed`); the offenders kept are those
        seen in this partition (all of them when they name no partition).
        """
        failed = partition in self.failed_on()
        offenders = tuple(o for o in self.offenders if not o.partitions or partition in o.partitions) if failed else ()
        return replace(self, passed=not failed, partitions=(partition,), failed_partitions=(partition,) if failed else (),
                       offenders=offenders,
                       details={**self.details, "run_site_days": len(self.partitions) or 1,
                                "run_site_days_failed": len(self.failed_on())})

    def as_metadata(self) -> dict:
        """Plain JSON values only: numbers, pseudonyms, partition keys and fixed phrases."""
        out: dict = {"observed": _plain(self.observed), "severity": self.severity}
        if self.threshold is not None:
            out["threshold"] = _plain(self.threshold)
        if self.description:
            out["description"] = self.description
        if self.distribution is not None:
            out["distribution"] = self.distribution.as_metadata()
        if self.offenders:
            out["top_offenders"] = [o.as_metadata() for o in self.offenders]
        if self.partitions:
            out["partitions"] = list(self.partitions)
        if self.failed_partitions:
            out["failed_partitions"] = list(self.failed_partitions)
        out.update({k: _plain(v) for k, v in self.details.items()})
        return out


def _plain(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _sorted_unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values)))


def evaluate_max(rule: CheckRule, observed: float | None, *, distribution: Distribution | None = None,
                 offenders: Sequence[Offender] = (), partitions: Iterable[str] = (),
                 failed_partitions: Iterable[str] = (), details: Mapping | None = None) -> CheckOutcome:
    """Pass while `observed` (None: nothing to measure) is at most the rule's maximum.

    Offenders and failed partitions are kept only on failure: a passing check names nobody.
    """
    if rule.maximum is None:
        raise ValueError(f"quality check {rule.asset}.{rule.name} has no `max`")
    value = float(observed or 0)
    passed = value <= rule.maximum
    return CheckOutcome(
        asset=rule.asset, check=rule.name, severity=rule.severity, passed=passed, observed=value,
        threshold=rule.maximum, description=rule.description, distribution=distribution,
        offenders=() if passed else tuple(o for o in offenders if o.value > rule.maximum),
        partitions=_sorted_unique(partitions), failed_partitions=() if passed else _sorted_unique(failed_partitions),
        details=dict(details or {}))


def evaluate_balance(rule: CheckRule, total: Mapping[str, int], parts: Mapping[str, int], *,
                     partitions: Iterable[str] = (), failed_partitions: Iterable[str] = ()) -> CheckOutcome:
    """An accounting equation, `sum(total) == sum(parts)`; observed is the difference (0 passes)."""
    difference = sum(total.values()) - sum(parts.values())
    passed = difference == 0
    return CheckOutcome(
        asset=rule.asset, check=rule.name, severity=rule.severity, passed=passed, observed=float(difference),
        threshold=0.0, description=rule.description, partitions=_sorted_unique(partitions),
        failed_partitions=() if passed else _sorted_unique(failed_partitions), details={**total, **parts})
