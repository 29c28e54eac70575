"""The publication gate across runs: from the latest evaluation of each check (read from the Dagster
instance), which failed ERROR checks block publication and what a release's data card records of
them. A failed WARN check only shows. Pure: no Spark, no Dagster."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

from imaging.quality.outcomes import CheckOutcome, _sorted_unique
from imaging.quality.rules import ERROR, CheckRule


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
    # One entry per result and run: a run's evaluations of its partitions (recorded one partition at a time, a
    # moment apart) are one entry, at the latest of their times.
    groups: dict[tuple, list[str]] = {}
    times: dict[tuple, str | None] = {}
    for partition in read:
        v = by_partition.get(partition)
        key = (NOT_EVALUATED, None) if v is None else (PASSED if v.passed else FAILED, v.evaluation.run_id)
        groups.setdefault(key, []).append(partition)
        at = None if v is None else v.evaluation.evaluated_at
        times[key] = max(filter(None, (times.get(key), at)), default=None)
    return [ReleaseCheck(rule.asset, rule.name, rule.severity, result, tuple(parts), run_id, times[(result, run_id)])
            for (result, run_id), parts in sorted(groups.items(), key=lambda kv: (kv[1][0], kv[0][0]))]


def blocking_message(blockers: Sequence[Blocker], limit: int = 10) -> str:
    """The refusal: each failed ERROR check and the partitions it failed on."""
    lines = []
    for b in blockers:
        shown = ", ".join(b.partitions[:limit]) + (f" (+{len(b.partitions) - limit} more)"
                                                    if len(b.partitions) > limit else "")
        lines.append(f"{b.asset}:{b.check} failed on " + (shown if b.partitions else "the whole table"))
    return ("publication refused: the latest evaluation of these ERROR checks failed; fix the data and "
            "re-materialize the partitions:\n  " + "\n  ".join(lines))
