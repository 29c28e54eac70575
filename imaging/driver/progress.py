"""Live progress of long Spark work, as an operator reads it: files done of total, MB/s, ETA.

Pure arithmetic and wording (no Spark, no Dagster): `resources/progress.py` feeds it Spark's own
task counts, from the status tracker of a classic session or the progress messages of a Spark
Connect session, and writes the lines to the run's log.

Spark reports tasks, not files. The work being tracked spreads files evenly over its tasks
(the index and the de-identification repartition to about `files_per_task` files per task), so
the share of finished tasks of the widest stage is the share of files done; bytes follow the
same share of the listed size. Rates are over a recent window, so a slow start does not distort
the ETA; a report goes out at most every `interval` seconds, and only when something moved.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

MB = 1_000_000  # decimal megabytes, as storage and network rates are quoted


@dataclass(frozen=True)
class StageCounts:
    """Task counts of one Spark stage, from whichever API reported them."""

    stage_id: int
    tasks: int
    completed: int
    active: int = 0
    failed: int = 0


@dataclass(frozen=True)
class ProgressReport:
    """One progress line's figures."""

    label: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float
    bytes_per_s: float | None  # None until a rate can be measured
    eta_s: float | None        # None while the rate is unknown
    done: bool = False

    @property
    def fraction(self) -> float:
        return self.files_done / self.files_total if self.files_total else (1.0 if self.done else 0.0)

    def message(self) -> str:
        """`raw_image_index: 120/480 files (25%), 31.5 of 126.0 MB, 12.3 MB/s, ETA 0:00:08`."""
        if self.done:
            rate = f", {self.bytes_total / MB / self.elapsed_s:.1f} MB/s" if self.elapsed_s > 0 else ""
            return (f"{self.label}: {self.files_total}/{self.files_total} files, {self.bytes_total / MB:.1f} MB "
                    f"in {format_duration(self.elapsed_s)}{rate}")
        rate = f"{self.bytes_per_s / MB:.1f} MB/s" if self.bytes_per_s is not None else "rate pending"
        eta = f"ETA {format_duration(self.eta_s)}" if self.eta_s is not None else "ETA pending"
        return (f"{self.label}: {self.files_done}/{self.files_total} files ({self.fraction:.0%}), "
                f"{self.bytes_done / MB:.1f} of {self.bytes_total / MB:.1f} MB, {rate}, {eta}")


def format_duration(seconds: float) -> str:
    """H:MM:SS, rounded up so a nearly finished step never shows 0:00:00."""
    total = max(0, math.ceil(seconds))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def fraction_done(stages: list[StageCounts]) -> float:
    """Share of the tracked work finished: the widest stage's finished tasks over its tasks.

    The widest stage is the one that opens the files (listing and bookkeeping stages are narrow);
    among equally wide stages the most advanced counts: a later job lists a finished stage again as
    skipped, with no task completed.
    """
    if not stages:
        return 0.0
    widest = max(stages, key=lambda s: (s.tasks, s.completed))
    return min(1.0, widest.completed / widest.tasks) if widest.tasks else 0.0


@dataclass
class ProgressMeter:
    """Turns successive task counts into reports, at most one every `interval_s` seconds.

    `window_s` is how far back the rate looks: long enough to smooth task granularity, short
    enough to follow a change of pace.
    """

    label: str
    files_total: int
    bytes_total: int
    interval_s: float = 5.0
    window_s: float = 30.0
    _samples: deque = field(default_factory=deque, repr=False)  # (elapsed_s, bytes_done)
    _last_report_at: float | None = field(default=None, repr=False)
    _last_files: int = field(default=-1, repr=False)
    _fraction: float = field(default=0.0, repr=False)

    def estimate(self, stages: list[StageCounts], elapsed_s: float) -> ProgressReport:
        # Never backwards: a later job lists the finished stage again as skipped (0 tasks done).
        fraction = self._fraction = max(self._fraction, fraction_done(stages))
        files_done = min(self.files_total, int(self.files_total * fraction))
        bytes_done = min(self.bytes_total, int(self.bytes_total * fraction))
        self._samples.append((elapsed_s, bytes_done))
        while len(self._samples) > 2 and elapsed_s - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        rate = None
        first_t, first_b = self._samples[0]
        if bytes_done > 0 and elapsed_s > first_t and bytes_done > first_b:
            rate = (bytes_done - first_b) / (elapsed_s - first_t)
        elif bytes_done > 0 and elapsed_s > 0:
            rate = bytes_done / elapsed_s
        eta = (self.bytes_total - bytes_done) / rate if rate else None
        return ProgressReport(self.label, files_done, self.files_total, bytes_done, self.bytes_total, elapsed_s,
                              rate, eta)

    def update(self, stages: list[StageCounts], elapsed_s: float) -> ProgressReport | None:
        """A report if one is due (interval passed and the file count moved), else None."""
        report = self.estimate(stages, elapsed_s)
        due = self._last_report_at is None or elapsed_s - self._last_report_at >= self.interval_s
        if due and report.files_done != self._last_files and report.files_done < self.files_total:
            self._last_report_at, self._last_files = elapsed_s, report.files_done
            return report
        return None

    def finish(self, elapsed_s: float) -> ProgressReport:
        """The closing line: everything done, the average rate over the whole step."""
        return ProgressReport(self.label, self.files_total, self.files_total, self.bytes_total, self.bytes_total,
                              elapsed_s, self.bytes_total / elapsed_s if elapsed_s > 0 else None, 0.0, done=True)


def commit_groups(keys: Sequence[T], files: Callable[[T], int], files_per_commit: int) -> list[list[T]]:
    """A run's site-days (in order) cut into the parts it commits one after the other: each part about
    `files_per_commit` landed files, a site-day never split (one bigger than that is a part alone), so a
    backfill's progress advances as each part commits, in one run and one Spark session. Every part costs the
    step's fixed work again (its Spark queries, its checks: benchmarks/RESULTS.md), so parts are made large
    enough for that to be small beside their files. 0 (or one part's worth of files in all): one part."""
    if files_per_commit <= 0 or not keys:
        return [list(keys)] if keys else []
    groups: list[list[T]] = [[]]
    held = 0
    for key in keys:
        size = max(0, files(key))
        if groups[-1] and held + size > files_per_commit:
            groups.append([])
            held = 0
        groups[-1].append(key)
        held += size
    return groups
