"""The quality checks' rules as data: every check, its kind, threshold and severity (pure: no Spark,
no Dagster).

The package `imaging.quality` splits by concern: `rules` (this module, what is checked, from
`platform/quality.yaml`), `outcomes` (figures -> a passed or failed `CheckOutcome`), `columns` (clinical
columns the checks read), `gate` (whether publication waits, across runs) and `files` (the one executor
side, `verify_file_frames`). It is shipped to the executors with the steps; `files` is what runs there.

Every check has a threshold and a severity in `platform/quality.yaml`; the Spark side (`assets/quality.py`)
reduces a table to a few figures per check and `outcomes` judges them. The file's model is made here from the
checks the steps declare (`quality_file_model`; `imaging.steps.declared.QualityFile` is the one for the
platform's steps), and the caller loads it with the suites it names (`imaging.driver.platform_files`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Annotated, Literal, Mapping

from pydantic import Field, StringConstraints, create_model

from imaging.config_model import PositiveInt, StrictModel, Text
from imaging.pseudonym import Pseudonymizer

ERROR = "ERROR"
WARN = "WARN"
SEVERITIES = (ERROR, WARN)

# The kinds of check: MAX passes while the observed value is at most `max`; BALANCE compares the two
# sides of an accounting equation (no `max`); SUITE counts failed expectations of a suite in
# platform/expectations/. Which checks each asset has, and their kinds, is declared with the steps
# (imaging/steps/declared.py `QUALITY_CHECKS`); platform/quality.yaml must configure exactly those.
MAX, BALANCE, SUITE = "max", "balance", "suite"

Severity = Literal[SEVERITIES]  # type: ignore[valid-type]


# --- platform/quality.yaml, its model ----------------------------------------------------------------------

class MaxCheck(StrictModel):
    """A check that passes while the observed value is at most `max`."""

    severity: Severity
    max: float = Field(ge=0)
    description: Text
    window_days: PositiveInt | None = None  # a check of how old something may be (stale_eye_observations)


class BalanceCheck(StrictModel):
    """An accounting equation: passes when both sides are equal, so it has no `max`."""

    severity: Severity
    description: Text


class SuiteCheck(MaxCheck):
    """Failed expectations of a Great Expectations suite in `expectations/`."""

    suite: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+\.json$")]


_CHECK_MODELS = {BALANCE: BalanceCheck, SUITE: SuiteCheck}


class QualitySettings(StrictModel):
    """What quality.yaml holds besides the checks (`quality_file_model` adds them)."""

    top_offenders: PositiveInt = 5
    percentiles: list[Annotated[float, Field(gt=0, lt=1)]] = Field([0.5, 0.9, 0.99], min_length=1)
    placeholder_keys: list[str] = []


def quality_file_model(declared: Mapping[str, Mapping[str, str]]) -> type[QualitySettings]:
    """The model of quality.yaml for the declared checks ({asset: {check: kind}}): every asset and check
    required, any other an error, each check with the fields of its kind."""
    def asset_checks(asset: str, checks: Mapping[str, str]) -> type[StrictModel]:
        fields = {name: (_CHECK_MODELS.get(kind, MaxCheck), ...) for name, kind in checks.items()}
        return create_model(f"{asset}_checks", __base__=StrictModel, **fields)

    checks = create_model("QualityChecks", __base__=StrictModel,
                          **{asset: (asset_checks(asset, named), ...) for asset, named in declared.items()})
    return create_model("QualityFile", __base__=QualitySettings, checks=(checks, ...))


@dataclass(frozen=True)
class CheckRule:
    """One check's configuration: `maximum` None means an accounting equation (sides must be equal)."""

    asset: str
    name: str
    severity: str
    maximum: float | None
    description: str = ""
    suite: str | None = None
    window_days: int | None = None

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR


def _float(value) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class QualityRules:
    """Every check's rule, plus the shared settings of offenders, percentiles and placeholders, and the
    suites (platform/expectations/) the checks name."""

    checks: Mapping[str, Mapping[str, CheckRule]]
    top_offenders: int = 5
    percentiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    placeholder_keys: frozenset[str] = frozenset()
    suites: Mapping[str, Mapping] = field(default_factory=dict)  # file name -> suite (name, expectations)

    @classmethod
    def from_model(cls, spec, suites: Mapping[str, Mapping] | None = None) -> "QualityRules":
        """From a validated quality.yaml (`quality_file_model`) and the validated suites its checks name
        (`imaging.quality.expectations.SuiteFile`, as dicts)."""
        checks = {asset: {name: CheckRule(asset=asset, name=name, severity=rule.severity,
                                          maximum=_float(getattr(rule, "max", None)), description=rule.description.strip(),
                                          suite=getattr(rule, "suite", None),
                                          window_days=getattr(rule, "window_days", None))
                          for name, rule in named}
                  for asset, named in spec.checks}
        return cls(checks=checks, top_offenders=spec.top_offenders, percentiles=tuple(spec.percentiles),
                   placeholder_keys=frozenset(normal_key(k) for k in spec.placeholder_keys), suites=dict(suites or {}))

    def rule(self, asset: str, name: str) -> CheckRule:
        try:
            return self.checks[asset][name]
        except KeyError:
            raise KeyError(f"no quality check {asset}.{name} in platform/quality.yaml") from None

    def suite(self, name: str) -> Mapping:
        """A suite a check names (`platform/expectations/<name>`: name + expectations of type, kwargs and
        severity), validated when the rules were loaded."""
        try:
            return self.suites[name]
        except KeyError:
            raise KeyError(f"no suite expectations/{name} among the quality rules' suites") from None

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
