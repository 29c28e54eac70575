"""Crash-safe commits: a run's outputs become visible all together or not at all.

A run writes everything it makes under staging folders first (one per zone, so every later move
stays on one filesystem). Then:

1. intent   the journal, `<identifiable>/_journal/<id>.json`, is written atomically. It lists each
            swap: a staged folder, the target it replaces, and where the old target is set aside.
2. swaps    in order: the old target is moved aside (marker `<id>.<k>.aside`), then the staged
            folder is moved into place (marker `<id>.<k>.done`). A swap with nothing staged just
            empties its target (a partition whose new result is empty).
3. clean    staging folders (and what was set aside) are removed, then the journal, then the markers.

`recover` runs before a run does anything else. A journal means the staging was complete when
the run died, so its swaps are rolled forward (each step is skipped when its marker says it is
done, and moves are safe to repeat). Staging folders without a journal are a run that died
before its intent: they are removed, which rolls it back. One writer at a time (the run queue
allows one warehouse run), so any staging folder found at start belongs to a dead run.

Readers of the platform only read after `recover`, so they never see files that disagree with
their manifest. `on_step` is called after each named step of a commit and does nothing; it is the one
place a caller (the crash-safety tests, tests/crash.py) can step in between steps.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field

from imaging import fs as fsx


def on_step(label: str, step: str) -> None:
    """Called after each named step of `Commit.apply` (and of a recovery's roll-forward) with the commit's
    label and the step: `staged`, `journal`, `aside-<k>`, `swap-<k>`, `swapped`, `cleaned`. Does nothing;
    looked up at each call, so it can be replaced (tests stop the process here)."""


@dataclass(frozen=True)
class Swap:
    staged: str
    target: str
    aside: str


@dataclass(frozen=True)
class Commit:
    """One run's outputs of one asset: where they are staged and where they go."""

    id: str
    label: str
    journal_dir: str
    staging: tuple[str, ...]
    swaps: tuple[Swap, ...] = ()

    @property
    def journal(self) -> str:
        return f"{self.journal_dir}/{self.id}.json"

    def _marker(self, number: int, step: str) -> str:
        return f"{self.journal_dir}/{self.id}.{number}.{step}"

    def apply(self) -> None:
        """Make the staged outputs visible: intent, swaps, clean (see the module docstring)."""
        on_step(self.label, "staged")
        fsx.write_atomic(self.journal, json.dumps(asdict(self), indent=1).encode())
        on_step(self.label, "journal")
        self._roll_forward()

    def _roll_forward(self) -> None:
        for number, swap in enumerate(self.swaps):
            if fsx.exists(self._marker(number, "done")):
                continue
            if not fsx.exists(self._marker(number, "aside")):
                fsx.move_tree(swap.target, swap.aside)
                fsx.write_atomic(self._marker(number, "aside"), b"")
            on_step(self.label, f"aside-{number}")
            fsx.move_tree(swap.staged, swap.target)
            fsx.write_atomic(self._marker(number, "done"), b"")
            on_step(self.label, f"swap-{number}")
        on_step(self.label, "swapped")
        for folder in self.staging:
            fsx.remove(folder)
            fsx.remove_empty(folder.rsplit("/", 1)[0])
        on_step(self.label, "cleaned")
        # The journal goes before its markers: a journal whose markers were gone would redo its swaps.
        fsx.remove(self.journal)
        for number in range(len(self.swaps)):
            for step in ("aside", "done"):
                fsx.remove(self._marker(number, step))
        fsx.remove_empty(self.journal_dir)

    @classmethod
    def load(cls, url: str) -> "Commit":
        spec = json.loads(fsx.read_bytes(url))
        return cls(spec["id"], spec["label"], spec["journal_dir"], tuple(spec["staging"]),
                   tuple(Swap(**s) for s in spec["swaps"]))


@dataclass
class CommitBuilder:
    """Collects a run's staged outputs. `staging_roots` maps a zone root to its staging folder."""

    label: str
    journal_dir: str
    staging_roots: dict[str, str]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    swaps: list[Swap] = field(default_factory=list)

    @classmethod
    def start(cls, label: str, journal_dir: str, zone_roots: list[str]) -> "CommitBuilder":
        ident = uuid.uuid4().hex
        return cls(label, journal_dir, {root: f"{root}/_staging/{ident}" for root in zone_roots}, ident)

    def staging(self, zone_root: str) -> str:
        """The staging folder of a zone: outputs for that zone are written below it."""
        return self.staging_roots[zone_root]

    def replace(self, zone_root: str, relative: str) -> None:
        """Swap `<staging>/<relative>` in for `<zone>/<relative>` (emptying it when nothing is staged)."""
        staging = self.staging_roots[zone_root]
        self.swaps.append(Swap(staged=f"{staging}/{relative}", target=f"{zone_root}/{relative}",
                               aside=f"{staging}/_aside/{len(self.swaps)}"))

    def build(self) -> Commit:
        return Commit(self.id, self.label, self.journal_dir, tuple(self.staging_roots.values()), tuple(self.swaps))


@dataclass(frozen=True)
class Recovery:
    """What `recover` did: journals rolled forward, dead staging folders removed."""

    rolled_forward: int
    staging_removed: int


def recover(journal_dir: str, zone_roots: list[str]) -> Recovery:
    """Finish or undo whatever a dead run left, before anything else reads or writes."""
    rolled = 0
    fs, path = fsx.filesystem(journal_dir)
    if fs.exists(path):
        for entry in sorted(fs.ls(path, detail=False)):
            if entry.endswith(".json"):
                Commit.load(fsx.qualify(fs, entry))._roll_forward()
                rolled += 1
        for entry in fs.ls(path, detail=False) if fs.exists(path) else ():  # markers of a removed journal
            fs.rm(entry)
    removed = 0
    for root in zone_roots:
        fs, staging = fsx.filesystem(f"{root}/_staging")
        if fs.exists(staging):
            for entry in fs.ls(staging, detail=False):
                fs.rm(entry, recursive=True)
                removed += 1
            fs.rm(staging, recursive=True) if fs.exists(staging) else None
    fsx.remove_empty(journal_dir)
    return Recovery(rolled, removed)
