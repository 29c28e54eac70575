"""What a materialization reports: counts, sizes, quarantine by reason, throughput, time per stage.

Pure (no Spark, no Dagster): the runner (`assets/runner.py`) fills a `StepSummary` and turns it into each
partition's Dagster metadata. Three rules make the UI worth reading:

* per site-day truth: a run over many site-days gives each its own counts (`Counts`); the run's totals and
  its times go under `run/`, never in a partition's own keys;
* the same numeric keys on every run, whatever happened (a reason that did not occur is 0, a stage
  that did not run is 0.0), so the asset's plots show trends instead of gaps; the stages (a `StageClock`)
  add up to the step's wall time;
* nothing identifying: counts, sizes, durations, fixed reason phrases and output paths relative to
  the warehouse root (which never contain a real date or site name in the de-identified zone).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

MB = 1_000_000


def slug(text: str) -> str:
    """A metadata key part from a fixed phrase: `not a DICOM Part 10 file` -> `not_a_dicom_part_10_file`."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "other"


@dataclass(frozen=True)
class Footprint:
    """Files and bytes of an output (Parquet parts of the written partitions, DICOM files, a release)."""

    files: int = 0
    bytes: int = 0

    def __add__(self, other: "Footprint") -> "Footprint":
        return Footprint(self.files + other.files, self.bytes + other.bytes)


OTHER = "other"  # the step's time outside every named stage: driver work between them


@dataclass
class StageClock:
    """Wall time per named stage of a step, in the order the stages are declared, from the step's start.

    Stages are exclusive: a stage entered inside another pauses the outer one (the Spark session's start,
    say, awaited inside a stage), so the stages never count a second twice. `finish` books what no stage
    covered under `other`: the stages then add up to the step's wall time.
    """

    names: tuple[str, ...]
    seconds: dict[str, float] = field(default_factory=dict)
    log: Callable[[str], None] | None = None  # told each stage's time as it ends
    label: str = ""
    started: float = field(default_factory=time.monotonic)
    _open: list = field(default_factory=list)  # [name, entered] of the stages under way, innermost last

    def __post_init__(self):
        self.seconds = {name: 0.0 for name in self.names}

    @contextmanager
    def stage(self, name: str):
        if name not in self.seconds:
            raise KeyError(f"undeclared stage {name!r}: declare it so every run reports it")
        now = time.monotonic()
        if self._open:  # pause the enclosing stage
            outer = self._open[-1]
            self.seconds[outer[0]] += now - outer[1]
        entry = [name, now]
        self._open.append(entry)
        try:
            yield
        finally:
            now = time.monotonic()
            spent = now - entry[1]
            self.seconds[name] += spent
            self._open.pop()
            if self._open:  # resume the enclosing stage
                self._open[-1][1] = now
            if self.log and not self._open:
                self.log(f"{self.label}: {name} took {self.seconds[name]:.1f} s")

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def finish(self) -> float:
        """The step's wall time so far; what no stage covered is booked under `other`."""
        wall = time.monotonic() - self.started
        self.seconds[OTHER] = self.seconds.get(OTHER, 0.0) + max(0.0, wall - self.total)
        return wall

    def breakdown(self) -> str:
        """One log line: the step's time and every stage's share of it."""
        parts = " + ".join(f"{name} {s:.1f}" for name, s in self.seconds.items())
        return f"{self.label}: {self.total:.1f} s = {parts}"


@dataclass(frozen=True)
class Counts:
    """What one site-day (or a whole run) took in and gave out."""

    files_in: int = 0
    bytes_in: int = 0
    rows_out: int = 0
    files_out: int = 0
    bytes_out: int = 0
    quarantined: Mapping[str, int] = field(default_factory=dict)  # reason phrase -> files

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def __add__(self, other: "Counts") -> "Counts":
        reasons = dict(self.quarantined)
        for reason, count in other.quarantined.items():
            reasons[reason] = reasons.get(reason, 0) + count
        return Counts(self.files_in + other.files_in, self.bytes_in + other.bytes_in, self.rows_out + other.rows_out,
                      self.files_out + other.files_out, self.bytes_out + other.bytes_out, reasons)


@dataclass(frozen=True)
class QuarantineRow:
    """One line of a materialization's quarantine table: a reason phrase and how many files it held back."""

    reason: str
    files: int


@dataclass(frozen=True)
class StepSummary:
    """One run of one asset: each site-day's own counts, the run's time per stage, its outputs.

    A run may cover many site-days (a single-run backfill); each gets its own materialization, so each
    partition's keys are its own counts and the run's totals and times go under `run/`.
    """

    by_partition: Mapping[str, Counts]       # partition key (`date|site`) -> its counts
    stage_seconds: Mapping[str, float]       # from a StageClock, every declared stage
    outputs: Mapping[str, str]               # table name -> path relative to the warehouse root
    known_reasons: tuple[str, ...] = ()      # always reported, 0 when absent

    @property
    def partitions(self) -> int:
        return len(self.by_partition)

    @property
    def run(self) -> Counts:
        return sum(self.by_partition.values(), Counts())

    @property
    def seconds(self) -> float:
        return sum(self.stage_seconds.values())

    def counts(self, partition: str) -> Counts:
        return self.by_partition.get(partition, Counts())

    def partition_numbers(self, partition: str) -> dict[str, int]:
        """The site-day's own counts, same keys every run."""
        own = self.counts(partition)
        # The reasons are one table (`quarantine`), not a key each: the UI's metadata panel cuts long keys.
        return {"dagster/row_count": own.rows_out, "files_in": own.files_in, "bytes_in": own.bytes_in,
                "files_out": own.files_out, "bytes_out": own.bytes_out, "quarantined": own.quarantined_total}

    def quarantine(self, partition: str) -> list[QuarantineRow]:
        """The site-day's quarantine as rows of one table: every known reason (0 when absent) and any other
        that occurred, by its phrase (a fixed phrase, never a value), most files first."""
        own = self.counts(partition).quarantined
        reasons = {reason: 0 for reason in self.known_reasons} | dict(own)
        return [QuarantineRow(reason, files) for reason, files in
                sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]

    def run_numbers(self) -> dict[str, float | int]:
        """The run's totals and times, under `run/`, same keys every run."""
        run, seconds = self.run, self.seconds
        values: dict[str, float | int] = {
            "run/partitions": self.partitions, "run/row_count": run.rows_out, "run/files_in": run.files_in,
            "run/bytes_in": run.bytes_in, "run/files_out": run.files_out, "run/bytes_out": run.bytes_out,
            "run/quarantined": run.quarantined_total,
            "run/seconds": round(seconds, 3),
            "run/files_per_second": round(run.files_in / seconds, 3) if seconds > 0 else 0.0,
            "run/mb_per_second": round(run.bytes_in / MB / seconds, 3) if seconds > 0 else 0.0,
        }
        values.update({f"run/seconds/{slug(name)}": round(s, 3) for name, s in self.stage_seconds.items()})
        return values

    def numbers(self, partition: str) -> dict[str, float | int]:
        """The numeric metadata of one partition's materialization: its own counts, then the run's."""
        return self.partition_numbers(partition) | self.run_numbers()

    def values(self, partition: str) -> dict[str, float | int | str]:
        """Everything but the table: the numbers, then `path/<output>` for each output."""
        return self.numbers(partition) | {f"path/{name}": path for name, path in self.outputs.items()}

    def markdown(self, title: str, partition: str) -> str:
        """A summary table for the UI: the site-day beside its run, how long each stage took, where."""
        own, run, seconds = self.counts(partition), self.run, self.seconds
        rate = f"{run.files_in / seconds:.1f} files/s, {run.bytes_in / MB / seconds:.1f} MB/s" if seconds > 0 else "n/a"
        plural = "s" if self.partitions != 1 else ""
        lines = [f"**{title}**: this site-day, in a run of {self.partitions} site-day{plural}", "",
                 "| | this site-day | run |", "|---|---:|---:|",
                 f"| files in | {own.files_in} | {run.files_in} |",
                 f"| MB in | {own.bytes_in / MB:.1f} | {run.bytes_in / MB:.1f} |",
                 f"| rows out | {own.rows_out} | {run.rows_out} |",
                 f"| files out | {own.files_out} | {run.files_out} |",
                 f"| MB out | {own.bytes_out / MB:.1f} | {run.bytes_out / MB:.1f} |",
                 f"| quarantined | {own.quarantined_total} | {run.quarantined_total} |"]
        for reason, count in sorted(run.quarantined.items()):
            if count:
                lines.append(f"| &nbsp;&nbsp;{_escape(reason)} | {own.quarantined.get(reason, 0)} | {count} |")
        lines += ["", "| stage (the run's) | seconds |", "|---|---:|"]
        lines += [f"| {_escape(name)} | {s:.1f} |" for name, s in self.stage_seconds.items()]
        lines += [f"| **total** | **{seconds:.1f}** ({rate}) |", "", "| output | path (warehouse-relative) |",
                  "|---|---|"]
        lines += [f"| {_escape(name)} | `{path}` |" for name, path in self.outputs.items()]
        return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
