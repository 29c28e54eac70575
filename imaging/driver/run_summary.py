"""What a materialization reports: counts, sizes, quarantine by reason, throughput, time per stage.

Pure (no Spark, no Dagster): the assets fill a `StepSummary` and `assets/metadata.py` turns it into
Dagster metadata. Two rules make the UI worth reading:

* the same numeric keys on every run, whatever happened (a reason that did not occur is 0, a stage
  that did not run is 0.0), so the asset's plots show trends instead of gaps;
* nothing identifying: counts, sizes, durations, fixed reason phrases and output paths relative to
  the warehouse root (which never contain a real date or site name in the de-identified zone).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
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


@dataclass
class StageClock:
    """Wall time per named stage of a step, in the order the stages are declared."""

    names: tuple[str, ...]
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.seconds = {name: 0.0 for name in self.names}

    @contextmanager
    def stage(self, name: str):
        if name not in self.seconds:
            raise KeyError(f"undeclared stage {name!r}: declare it so every run reports it")
        start = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - start

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass(frozen=True)
class StepSummary:
    """One materialization of one asset, over the partitions of its run."""

    partitions: int
    files_in: int
    bytes_in: int
    rows_out: int
    files_out: int
    bytes_out: int
    quarantined: Mapping[str, int]           # reason phrase -> files
    stage_seconds: Mapping[str, float]       # from a StageClock, every declared stage
    outputs: Mapping[str, str]               # table name -> path relative to the warehouse root
    known_reasons: tuple[str, ...] = ()      # always reported, 0 when absent

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    @property
    def seconds(self) -> float:
        return sum(self.stage_seconds.values())

    def reasons(self) -> dict[str, int]:
        """Every known reason (0 if absent) and any other that occurred, under stable keys."""
        counts = {slug(reason): 0 for reason in self.known_reasons}
        for reason, count in self.quarantined.items():
            counts[slug(reason)] = counts.get(slug(reason), 0) + count
        return dict(sorted(counts.items()))

    def numbers(self) -> dict[str, float | int]:
        """The numeric metadata, same keys every run."""
        seconds = self.seconds
        values: dict[str, float | int] = {
            "dagster/row_count": self.rows_out,
            "partitions": self.partitions,
            "files_in": self.files_in,
            "bytes_in": self.bytes_in,
            "files_out": self.files_out,
            "bytes_out": self.bytes_out,
            "quarantined": self.quarantined_total,
            "seconds": round(seconds, 3),
            "files_per_second": round(self.files_in / seconds, 3) if seconds > 0 else 0.0,
            "mb_per_second": round(self.bytes_in / MB / seconds, 3) if seconds > 0 else 0.0,
        }
        values.update({f"quarantined/{key}": count for key, count in self.reasons().items()})
        values.update({f"seconds/{slug(name)}": round(s, 3) for name, s in self.stage_seconds.items()})
        return values

    def values(self) -> dict[str, float | int | str]:
        """Everything but the table: the numbers, then `path/<output>` for each output."""
        return self.numbers() | {f"path/{name}": path for name, path in self.outputs.items()}

    def markdown(self, title: str) -> str:
        """A summary table for the UI: what came in, what went out, where, how fast."""
        mb_in, mb_out = self.bytes_in / MB, self.bytes_out / MB
        seconds = self.seconds
        rate = f"{self.files_in / seconds:.1f} files/s, {mb_in / seconds:.1f} MB/s" if seconds > 0 else "n/a"
        lines = [f"**{title}** over {self.partitions} partition{'s' if self.partitions != 1 else ''}", "",
                 "| | files | MB | rows |", "|---|---:|---:|---:|",
                 f"| in | {self.files_in} | {mb_in:.1f} | |",
                 f"| out | {self.files_out} | {mb_out:.1f} | {self.rows_out} |",
                 f"| quarantined | {self.quarantined_total} | | |"]
        for reason, count in sorted(self.quarantined.items()):
            if count:
                lines.append(f"| &nbsp;&nbsp;{_escape(reason)} | {count} | | |")
        lines += ["", "| stage | seconds |", "|---|---:|"]
        lines += [f"| {_escape(name)} | {s:.1f} |" for name, s in self.stage_seconds.items()]
        lines += [f"| **total** | **{seconds:.1f}** ({rate}) |", "", "| output | path (warehouse-relative) |",
                  "|---|---|"]
        lines += [f"| {_escape(name)} | `{path}` |" for name, path in self.outputs.items()]
        return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
