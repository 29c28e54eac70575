"""Data-quality rules as data, evaluated from aggregated figures (pure: no Spark, no Dagster).

Every check has a threshold and a severity in `platform/quality.yaml`. The Spark side
(`assets/quality.py`) reduces a table to a few figures per check (an observed value, a
distribution summary, the top offending keys); this module turns those figures into a
`CheckOutcome`: passed or not, and metadata a reviewer can use. Offenders leave this module
as pseudonyms only (the keyed patient pseudonym, or the published `2.25.` UID), never as a
raw patient id, name or path.

Across runs, `publication_blockers` decides from the latest evaluation of each check whether
publication must wait: a failed ERROR check blocks, a failed WARN check only shows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from imaging.pseudonym import Pseudonymizer

ERROR = "ERROR"
WARN = "WARN"
SEVERITIES = (ERROR, WARN)

# Every check the assets evaluate (`ctx.rule(asset, name)` in assets/quality.py, assets/empty_day.py),
# and its kind: MAX passes while the observed value is at most `max`; BALANCE compares the two sides of
# an accounting equation (no `max`); SUITE counts failed expectations of a suite in platform/expectations/.
# platform/quality.yaml must configure exactly these (imaging/config_files.py).
MAX, BALANCE, SUITE = "max", "balance", "suite"
QUALITY_CHECKS: dict[str, dict[str, str]] = {
    "raw_image_index": {
        "scans_per_patient_site_day": MAX, "scans_per_patient": MAX, "instances_per_series": MAX,
        "series_per_study": MAX, "sop_instance_uid_in_one_partition": MAX, "mandatory_attributes": MAX,
        "study_date_in_future": MAX, "files_accounted": BALANCE, "column_rules": SUITE, "column_warnings": SUITE,
    },
    "linked_patient_metadata": {
        "images_accounted": BALANCE, "records_per_image": MAX, "images_per_record": MAX, "unlinked_share": MAX, "placeholder_keys": MAX,
        "images_per_clinical_key": MAX, "study_before_birth": MAX, "column_rules": SUITE, "column_warnings": SUITE,
    },
    "anonymized_images": {
        "images_accounted": BALANCE, "manifest_files": MAX, "pseudonyms_per_patient": MAX,
        "patients_per_pseudonym": MAX, "column_rules": SUITE, "column_warnings": SUITE,
    },
    "published_cohort": {"release_checksums": MAX},
}


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


# Birth dates: the platform's index holds no PatientBirthDate (it is not read from headers), so the
# clinical extract is the source, through the policy's `age_at_scan` columns and date formats.

_STRPTIME_TO_JAVA = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%y": "yy", "%b": "MMM", "%B": "MMMM"}


def java_date_pattern(strptime_format: str) -> str:
    """A `datetime.strptime` date format as a Java (Spark) pattern, e.g. '%d/%m/%Y' -> 'dd/MM/yyyy'."""
    out, i = [], 0
    while i < len(strptime_format):
        token = strptime_format[i:i + 2]
        if token in _STRPTIME_TO_JAVA:
            out.append(_STRPTIME_TO_JAVA[token])
            i += 2
        elif token.startswith("%"):
            raise ValueError(f"date format directive {token!r} has no Spark equivalent here")
        else:
            char = strptime_format[i]
            out.append(f"'{char}'" if char.isalpha() else char)
            i += 1
    return "".join(out)


def birth_date_columns(policy) -> tuple[str, ...]:
    """Clinical columns holding the birth date: the aliases of the policy's `age_at_scan` rule."""
    return tuple(alias for rule in policy.rules if rule.action == "age_at_scan" for alias in rule.aliases)


def identity_columns(policy) -> tuple[str, ...]:
    """Clinical columns that tell people apart (identifiers and birth date), `patient_id` excluded."""
    return tuple(sorted((set(policy.identifiers) | set(birth_date_columns(policy))) - {"patient_id"}))


def parse_dicom_date(text: str | None) -> dt.date | None:
    try:
        return dt.datetime.strptime((text or "").strip(), "%Y%m%d").date()
    except ValueError:
        return None


# Across runs: publication waits while the latest evaluation of an ERROR check has failed.

@dataclass(frozen=True)
class CheckEvaluation:
    """The latest recorded evaluation of one check (from the Dagster instance)."""

    asset: str
    check: str
    passed: bool
    severity: str
    partitions: tuple[str, ...] = ()         # partitions it covered (empty: the whole table)
    failed_partitions: tuple[str, ...] = ()  # where the failure is, when the check says
    run_id: str | None = None                # the run that evaluated it
    evaluated_at: str | None = None          # when, ISO 8601 UTC


@dataclass(frozen=True)
class Blocker:
    asset: str
    check: str
    partitions: tuple[str, ...]


def publication_blockers(evaluations: Iterable[CheckEvaluation],
                         partitions_read: Iterable[str] | None = None) -> list[Blocker]:
    """Failed ERROR checks on any partition publication reads (None: it reads every partition).

    A check's failure is placed on its failed partitions when it names them, else on every
    partition it covered; a whole-table check (no partitions) blocks whatever is read.
    """
    wanted = None if partitions_read is None else set(partitions_read)
    blockers = []
    for ev in evaluations:
        if ev.passed or ev.severity != ERROR:
            continue
        where = ev.failed_partitions or ev.partitions
        hit = tuple(sorted(where if wanted is None else set(where) & wanted)) if where else ()
        if where and not hit:
            continue
        blockers.append(Blocker(ev.asset, ev.check, hit))
    return sorted(blockers, key=lambda b: (b.asset, b.check))


def covering(outcome: CheckOutcome, partitions: Iterable[str]) -> CheckOutcome:
    """The outcome, stamped with the partitions its evaluation covered (a run's site-days)."""
    return dataclasses.replace(outcome, partitions=_sorted_unique(partitions))


@dataclass(frozen=True)
class PartitionVerdict:
    """What the evaluation deciding one partition said about it (`partition` None: the whole table)."""

    partition: str | None
    passed: bool
    evaluation: CheckEvaluation


def verdicts(history: Sequence[CheckEvaluation]) -> list[PartitionVerdict]:
    """Fold one check's evaluations (newest first) into the evaluation deciding each partition.

    A per-run check covers the partitions of its run, so the newest evaluation covering a partition
    decides for it; a failed evaluation that names no failed partitions fails all it covered. A
    whole-table evaluation (no partitions) covers everything: the newest one decides alone (one
    verdict, partition None, failing when it failed).
    """
    if not history:
        return []
    if not history[0].partitions:
        return [PartitionVerdict(None, history[0].passed, history[0])]
    decided: dict[str, PartitionVerdict] = {}
    for ev in history:
        if not ev.partitions:
            break  # an older whole-table evaluation says nothing newer runs did not
        failed_here = set(ev.failed_partitions or (() if ev.passed else ev.partitions))
        for partition in ev.partitions:
            decided.setdefault(partition, PartitionVerdict(partition, partition not in failed_here, ev))
    return [decided[p] for p in sorted(decided)]


def latest_by_partition(history: Sequence[CheckEvaluation]) -> CheckEvaluation | None:
    """One check's current state: the newest evaluation covering each partition decides it (`verdicts`)."""
    found = verdicts(history)
    if not found:
        return None
    if found[0].partition is None:
        return found[0].evaluation
    newest = history[0]
    failed = tuple(v.partition for v in found if not v.passed)
    return CheckEvaluation(newest.asset, newest.check, not failed, newest.severity, tuple(v.partition for v in found),
                           failed, newest.run_id, newest.evaluated_at)


@dataclass(frozen=True)
class ReleaseCheck:
    """The latest result of one check on some of the partitions a release read.

    `result` is passed, failed or not evaluated (no evaluation of the check covers those partitions).
    `partitions` are the partitions it applies to (empty: a whole-table evaluation).
    """

    asset: str
    check: str
    severity: str
    result: str
    partitions: tuple[str, ...] = ()
    run_id: str | None = None
    evaluated_at: str | None = None


PASSED, FAILED, NOT_EVALUATED = "passed", "failed", "not evaluated"


def release_checks(rule: CheckRule, history: Sequence[CheckEvaluation], partitions_read: Iterable[str]
                   ) -> list[ReleaseCheck]:
    """One check's latest results on exactly the partitions a release read (history newest first).

    Partitions decided by the same evaluation with the same result are one entry. A whole-table
    evaluation is one entry, failed for the release when it failed on a partition read (or names
    none), as `publication_blockers` decides. Partitions read that no evaluation covers are one
    "not evaluated" entry: nothing is invented.
    """
    read = sorted(set(partitions_read))
    found = verdicts(history)
    if found and found[0].partition is None:
        ev = found[0].evaluation
        hit = set(ev.failed_partitions) & set(read) if ev.failed_partitions else set(read)
        result = PASSED if ev.passed or not hit else FAILED
        return [ReleaseCheck(rule.asset, rule.name, rule.severity, result, (), ev.run_id, ev.evaluated_at)]
    by_partition = {v.partition: v for v in found}
    groups: dict[tuple, list[str]] = {}
    for partition in read:
        v = by_partition.get(partition)
        key = ((NOT_EVALUATED, None, None) if v is None else
               (PASSED if v.passed else FAILED, v.evaluation.run_id, v.evaluation.evaluated_at))
        groups.setdefault(key, []).append(partition)
    return [ReleaseCheck(rule.asset, rule.name, rule.severity, result, tuple(parts), run_id, at)
            for (result, run_id, at), parts in sorted(groups.items(), key=lambda kv: (kv[1][0], kv[0][0]))]


def blocking_message(blockers: Sequence[Blocker], limit: int = 10) -> str:
    """The refusal: each failed ERROR check and the partitions it failed on."""
    lines = []
    for b in blockers:
        shown = ", ".join(b.partitions[:limit]) + (f" (+{len(b.partitions) - limit} more)"
                                                    if len(b.partitions) > limit else "")
        lines.append(f"{b.asset}:{b.check} failed on " + (shown if b.partitions else "the whole table"))
    return ("publication refused: the latest evaluation of these ERROR checks failed; fix the data and "
            "re-materialize the partitions:\n  " + "\n  ".join(lines))


def load_quality_rules() -> QualityRules:
    """The rules of `platform/quality.yaml`."""
    from imaging.config_files import load_file

    return QualityRules.from_model(load_file("quality.yaml"))


# Executor side of `manifest_files` (a Spark mapInPandas body; pandas frames in and out, no Spark import).

def verify_file_frames(root: str, frames):
    """(batch, patient_pseudonym, output_path, sha256) frames -> (batch, patient_pseudonym, status).

    Status is 'ok', 'missing' or 'checksum differs'; each file is streamed once.
    """
    import pandas as pd

    from imaging import fs as fsx
    from imaging.release import sha256_file

    for frame in frames:
        statuses = []
        for path, expected in zip(frame["output_path"], frame["sha256"]):
            url = f"{root}/{path}"
            if not path or not fsx.exists(url):
                statuses.append("missing")
            elif sha256_file(url) != expected:
                statuses.append("checksum differs")
            else:
                statuses.append("ok")
        yield pd.DataFrame({"batch": frame["batch"], "patient_pseudonym": frame["patient_pseudonym"],
                            "status": statuses})
