"""De-identification alone, in one process, text check off: CPU per GB against the plain pydicom loop.

    .venv/bin/python benchmarks/deid_throughput.py [--files 300] [--rounds 5] [--held-out] [--no-reference]

The corpus is `benchmarks/pipeline.py`'s (synth's mix of OCT-like volumes of 16 x 256 x 256, about 1 MB, and
small fundus photographs; every frame different), one site-day of about `--files` files (`--held-out`: another
seed, a corpus nothing was tuned on). Measured over the same files in the same run, the modes interleaved
`--rounds` times, each its best round (the machine is shared: the least disturbed one), process CPU time:

  plain      the plain loop: pydicom reads each file, blanks five attributes, writes it (pipeline.py's loop)
  shipped    the anonymize step's per-file work as the executors run it (imaging/steps/anonymize.py: the source
             read once and hashed, the engine, the writer, the output hashed, the manifest row), the burned-in
             text check off (a detector that reads nothing: its cost is the OCR benchmarks')
  reference  the same per-file path with the engine before issue 48 (tests/deid_reference: pydicom reads
             the header, converts every element, writes it back)

Prints CPU-s per GB and per file of each mode, and each mode's ratio to the plain loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import pydicom  # noqa: E402

from pipeline import BLANKED, OCT_SHAPE, generate  # noqa: E402

KEY = "benchmark-key-not-a-secret-" + "b" * 8


class ReadsNothing:
    """The text check off: no text found, nothing read."""

    settings = None

    def check(self, ds, syntax, frames=None, collect=False):
        from imaging.deid.pixel_text import PixelTextResult

        return PixelTextResult(found=False, frames_checked=0)


def corpus(root: Path, files: int, held_out: bool) -> list[Path]:
    """pipeline.py's corpus (its seed), or with `held_out` another seed: files nothing here was tuned on."""
    folder = generate(root / "landing", files, OCT_SHAPE, seed=1012 if held_out else 12)
    return sorted(p for p in folder.rglob("*") if p.is_file())


def plain(files: list[Path], out: Path) -> None:
    for i, path in enumerate(files):
        ds = pydicom.dcmread(path)
        for keyword in BLANKED:
            if keyword in ds:
                setattr(ds, keyword, "")
        ds.save_as(out / f"{i}.dcm")


def shipped_step(files: list[Path], staging: Path):
    """The anonymize step's per-file function on the files' linked records (made once, not timed)."""
    from imaging.driver.config import load_settings
    from imaging.driver.platform_files import load_clinical_policy
    from imaging.records import IndexedImage, LinkedImage, ListedFile
    from imaging.steps.anonymize import AnonymizeJob, _Anonymizer
    from imaging.steps.index import index_file
    from resources.deid import Deidentifier

    settings = load_settings({**os.environ, "IMAGING_PSEUDONYM_KEY": KEY})
    deid = Deidentifier(pseudonym_key=KEY, options=list(settings.deid_options), issuers=settings.issuers,
                        pixel_text=settings.pixel_text)
    job = AnonymizeJob(deid.pseudonym_key, tuple(deid.options), load_clinical_policy(), deid.issuer_policy(),
                       deid.pixel_text_settings(), staging=str(staging))
    linked = []
    for path in files:
        record = index_file(ListedFile("2024-03-02", "site-a", str(path), path.stat().st_size))
        if isinstance(record, IndexedImage):
            linked.append(LinkedImage(**{f.name: getattr(record, f.name) for f in dataclasses.fields(IndexedImage)}))
    made = job()
    anonymizer = _Anonymizer(job, made.pseudonymizer, made.profile, ReadsNothing())
    return lambda: [anonymizer(image) for image in linked]


def reference_step(files: list[Path], out: Path):
    """The same per-file path with the reference engine (tests/deid_reference), writing each file."""
    from deid_reference.differential import EXTRA, KEY as REFERENCE_KEY, NoText
    from deid_reference import deidentify
    from deid_reference.part10 import SourceImage, write_image
    from imaging import fs as fsx
    from imaging.deid import load_profile, quiet, to_bytes
    from imaging.deid.part10 import read_whole

    profile = load_profile()

    def work() -> None:
        for i, path in enumerate(files):
            with quiet(), SourceImage(str(path)) as image, open(out / f"{i}.dcm", "wb") as handle:
                target = fsx.HashingWriter(handle)
                if image.streamed:
                    result = deidentify(image.header, pseudonymizer=REFERENCE_KEY, namespace="NHS", profile=profile,
                                        extra_identifiers=EXTRA, pixel_text=NoText(), streamed=image)
                    write_image(result, image, target)
                else:
                    result = deidentify(read_whole(image.read_all()), pseudonymizer=REFERENCE_KEY, namespace="NHS",
                                        profile=profile, extra_identifiers=EXTRA, pixel_text=NoText())
                    target.write(to_bytes(result))
                image.sha256()
                target.hexdigest()

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--held-out", action="store_true")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="deid-throughput-"))
    try:
        files = corpus(root, args.files, args.held_out)
        size = sum(p.stat().st_size for p in files)
        scratch = root / "out"
        modes = {"plain": lambda: plain(files, scratch), "shipped": shipped_step(files, scratch / "staging")}
        if not args.no_reference:
            modes["reference"] = reference_step(files, scratch)
        best = {label: float("inf") for label in modes}
        for _ in range(args.rounds):
            for label, work in modes.items():
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                start = time.process_time()
                work()
                best[label] = min(best[label], time.process_time() - start)
        gb = size / 1e9
        print(f"{len(files)} files, {size / 1e6:.0f} MB ({'held-out seed' if args.held_out else 'pipeline.py seed'}),"
              f" best of {args.rounds} rounds; load {os.getloadavg()[0]:.1f}")
        for label, seconds in best.items():
            print(f"  {label:10s} {seconds / gb:7.2f} CPU-s/GB {1000 * seconds / len(files):7.2f} CPU ms/file "
                  f"{seconds / best['plain']:6.2f}x the plain loop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
