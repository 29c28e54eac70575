"""pydicom's and pydicom-data's files de-identified once a profile, for the sweeps that check the outputs.

test_deid_sweep (no identifier of the source left in the bytes, quarantine reasons fixed phrases) and
test_deid_dciodvfy (no conformance error the source did not have) each checked the same de-identification of
every shipped file, the burned-in text screen included, and each made it itself: ~40 s a profile. The
conftest fixture `pydicom_deidentified` makes it once a profile for the run (both modules share one xdist
group, so one worker), written under a temporary folder rather than held in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydicom import dcmread

from fuzz_corpus import source_files  # pydicom's and pydicom-data's files on disk, never a download
from imaging.deid import NotDeidentifiable, deidentify, load_profile, quiet, to_bytes
from imaging.pseudonym import Pseudonymizer

GROUP = "pydicom-sweeps"  # the xdist group of the modules that read these outputs
KEY = Pseudonymizer("sweep-key")


@dataclass(frozen=True)
class Outcome:
    """One source file's outcome: unreadable by pydicom, published (`output`) or quarantined (`reason`)."""

    source: str
    readable: bool
    output: Path | None = None
    reason: str | None = None


def deidentify_all(profile, folder: Path) -> list[Outcome]:
    folder.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for number, path in enumerate(s.path for s in source_files()):
        try:
            with quiet():
                ds = dcmread(path)
        except Exception:  # noqa: BLE001 - any failure means "not readable" here
            outcomes.append(Outcome(path, readable=False))
            continue
        try:
            data = to_bytes(deidentify(ds, pseudonymizer=KEY, profile=profile))
        except NotDeidentifiable as q:
            outcomes.append(Outcome(path, readable=True, reason=q.reason))
            continue
        output = folder / f"{number:03d}.dcm"
        output.write_bytes(data)
        outcomes.append(Outcome(path, readable=True, output=output))
    return outcomes


class Deidentified:
    """`deidentified(options)`: the outcomes under `load_profile(options)`, made on the first call."""

    def __init__(self, folder: Path):
        self.folder, self.made = folder, {}

    def __call__(self, options) -> list[Outcome]:
        key = "default" if options is None else "+".join(["basic", *options])
        if key not in self.made:
            self.made[key] = deidentify_all(load_profile(options), self.folder / key)
        return self.made[key]
