"""The quality checks' rules as data: every check, its kind, threshold and severity (pure: no Spark,
no Dagster).

The package `imaging.quality` splits by concern: `rules` (this module, what is checked, from
`platform/quality.yaml`), `outcomes` (figures -> a passed or failed `CheckOutcome`), `columns` (clinical
columns the checks read), `gate` (whether publication waits, across runs) and `files` (the one executor
side, `verify_file_frames`). It is shipped to the executors with the steps; `files` is what runs there.

Every check has a threshold and a severity in `platform/quality.yaml`; the Spark side (`assets/quality.py`)
reduces a table to a few figures per check and `outcomes` judges them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Mapping

from imaging.pseudonym import Pseudonymizer

ERROR = "ERROR"
WARN = "WARN"
SEVERITIES = (ERROR, WARN)

# The kinds of check: MAX passes while the observed value is at most `max`; BALANCE compares the two
# sides of an accounting equation (no `max`); SUITE counts failed expectations of a suite in
# platform/expectations/. Which checks each asset has, and their kinds, is declared with the steps
# (imaging/steps/declared.py `QUALITY_CHECKS`); platform/quality.yaml must configure exactly those.
MAX, BALANCE, SUITE = "max", "balance", "suite"


@dataclass(frozen=True)
class CheckRule:
    """One check's configuration: `maximum` None means an accounting equation (sides must be equal)."""

    asset: str
    name: str
    severity: str
    maximum: float | None
    description: str = ""
    suite: str | None = None

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR


def _float(value) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class QualityRules:
    """Every check's rule, plus the shared settings of offenders, percentiles and placeholders."""

    checks: Mapping[str, Mapping[str, CheckRule]]
    top_offenders: int = 5
    percentiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    placeholder_keys: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, spec: Mapping, source: str = "platform/quality.yaml") -> "QualityRules":
        """From a parsed quality.yaml; a ConfigError (imaging.config_files) names every mistake."""
        from imaging.config_files import QualityFile, validate

        return cls.from_model(validate(QualityFile, spec, source))

    @classmethod
    def from_model(cls, spec) -> "QualityRules":
        """From a validated `imaging.config_files.QualityFile`."""
        checks = {asset: {name: CheckRule(asset=asset, name=name, severity=rule.severity,
                                          maximum=_float(getattr(rule, "max", None)), description=rule.description.strip(),
                                          suite=getattr(rule, "suite", None))
                          for name, rule in named}
                  for asset, named in spec.checks}
        return cls(checks=checks, top_offenders=spec.top_offenders, percentiles=tuple(spec.percentiles),
                   placeholder_keys=frozenset(normal_key(k) for k in spec.placeholder_keys))

    def rule(self, asset: str, name: str) -> CheckRule:
        try:
            return self.checks[asset][name]
        except KeyError:
            raise KeyError(f"no quality check {asset}.{name} in platform/quality.yaml") from None

    def for_asset(self, asset: str) -> tuple[CheckRule, ...]:
        return tuple(self.checks.get(asset, {}).values())

    def is_placeholder(self, key: str | None) -> bool:
        """An empty linkage key, or one of the site conventions for 'unknown patient'."""
        return normal_key(key) == "" or normal_key(key) in self.placeholder_keys

    @property
    def placeholder_list(self) -> list[str]:
        """The placeholders plus the empty key, as Spark compares them (trimmed, upper-case)."""
        return sorted(self.placeholder_keys | {""})


def normal_key(key: str | None) -> str:
    return (key or "").strip().upper()


def load_quality_rules() -> QualityRules:
    """The rules of `platform/quality.yaml`."""
    from imaging.config_files import load_file

    return QualityRules.from_model(load_file("quality.yaml"))


def load_suite(name: str) -> dict:
    """A suite in `platform/expectations/<name>` (JSON: name + expectations of type, kwargs and severity),
    validated (imaging.config_files.SuiteFile)."""
    from imaging.config_files import load_file

    return load_file(f"expectations/{name}").model_dump()


@dataclass(frozen=True)
class QualityContext:
    """What every check needs besides its data: the rules, how to pseudonymise offenders, the day."""

    rules: QualityRules
    pseudonymizer: Pseudonymizer
    # The patient-id namespace of each site (platform/issuers.yaml): offenders are named by the same
    # pseudonym the de-identified zone uses, whatever IssuerOfPatientID the file carries.
    site_namespaces: Mapping[str, str]
    default_issuer: str  # the namespace of a site not listed
    today: dt.date = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).date())

    def rule(self, asset: str, name: str) -> CheckRule:
        return self.rules.rule(asset, name)
