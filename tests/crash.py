"""Stop a process at a named step of a commit: the crash-safety tests' fault injection.

imaging/driver/commit.py calls `on_step(label, step)` after each named step of a commit, and does nothing
there. `crash_at` installs a replacement that stops the process at one point, named
`"<label>:<step>"` (e.g. `"anonymized_images:swap-1"`), in one of three ways:

- `raise`  raise `SimulatedCrash` (a BaseException, so no `except Exception` can absorb it);
- `kill`   SIGKILL the process itself;
- `pause`  write the point's name to `paused_file` and wait to be killed (the test SIGKILLs it).

In a test, `stopping_at(monkeypatch, point)` installs it for that test. For a real
`dagster asset materialize` in a subprocess, run `python tests/crash.py POINT MODE PAUSED_FILE -- <dagster
arguments>`: it installs the crash in that process, then runs Dagster's command line with the arguments.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

MODES = ("raise", "kill", "pause")


class SimulatedCrash(BaseException):
    """Raised at a crash point; a BaseException so no `except Exception` can absorb it."""


def points_of(commit) -> list[str]:
    """Every named step of `commit.apply()`, in order, as `"<label>:<step>"`."""
    steps = ["staged", "journal"]
    for number in range(len(commit.swaps)):
        steps += [f"aside-{number}", f"swap-{number}"]
    return [f"{commit.label}:{step}" for step in steps + ["swapped", "cleaned"]]


def crash_at(point: str, mode: str = "raise", paused_file: str | None = None):
    """An `on_step` that stops the process at `point` (see the module docstring) and does nothing elsewhere."""
    if mode not in MODES:
        raise ValueError(f"crash mode {mode!r} is not one of {MODES}")

    def on_step(label: str, step: str) -> None:
        if f"{label}:{step}" != point:
            return
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "pause":
            if paused_file:
                Path(paused_file).write_text(point, encoding="utf-8")
            while True:  # the test SIGKILLs the process now
                time.sleep(1)
        raise SimulatedCrash(point)

    return on_step


def stopping_at(monkeypatch, point: str, mode: str = "raise", paused_file: str | None = None) -> None:
    """Install `crash_at(point, ...)` as imaging.driver.commit's `on_step` until `monkeypatch` is undone."""
    import imaging.driver.commit

    monkeypatch.setattr(imaging.driver.commit, "on_step", crash_at(point, mode, paused_file))


def main(argv: list[str]) -> int:
    """`crash.py POINT MODE PAUSED_FILE -- ARGS...`: Dagster's command line with ARGS, stopping at POINT."""
    if len(argv) < 4 or argv[3] != "--":
        sys.stderr.write(__doc__ or "")
        return 2
    point, mode, paused_file, args = argv[0], argv[1], argv[2], argv[4:]
    # The project from the working directory, as the `dagster` script sees it there (not tests/, this
    # script's own folder, which Python put first).
    sys.path[0] = os.getcwd()
    import imaging.driver.commit
    from dagster._cli import main as dagster_main

    imaging.driver.commit.on_step = crash_at(point, mode, paused_file or None)
    sys.argv = ["dagster", *args]
    return dagster_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
