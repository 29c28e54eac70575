"""Per-file CPU of de-identification on OCT-sized files, against a plain pydicom loop, old engine and new.

    .venv/bin/python benchmarks/deid_throughput.py [--files 60] [--frames 16] [--rows 256] [--cols 256]
                                                   [--rounds 3] [--ref 9719aec] [--ocr]

Generates OPT volumes with synth in a temp directory (16 frames of 256 x 256, 8-bit: about 1 MB each by
default), then measures, over the same files and in the same run, the process CPU time per file of:
  copy     read the file's bytes and write them to a new file (the floor)
  plain    dcmread, blank five attributes, save_as (what a user would write; benchmarks/pipeline.py's loop)
  old      the platform's per-file path with the engine as it was at `--ref` (imaging/deid from git):
           index_file, then read, deidentify, to_bytes, write (imaging/steps/anonymize.py), OCR off
  new      the same with the working tree's engine
  new+ocr  (with --ocr) the same with the burned-in-text OCR on (platform/pixel_text.yaml)
"OCR off" is a stand-in detector that reads nothing; both engines get it. The modes run interleaved,
`--rounds` times, and each reports its best round (the machine is shared: the least disturbed one).
Prints CPU ms per file, MB/s of CPU and each mode's ratio to the plain loop.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pydicom  # noqa: E402

from deid_identical import ReadsNothing, engine_at  # noqa: E402
from imaging.deid import quiet  # noqa: E402
from imaging.pseudonym import Pseudonymizer  # noqa: E402
from imaging.records import ListedFile  # noqa: E402
from imaging.steps.anonymize import read_whole  # noqa: E402
from imaging.steps.index import index_file  # noqa: E402

BLANKED = ("PatientName", "PatientID", "PatientBirthDate", "AccessionNumber", "InstitutionName")


def synth_files(root: Path, count: int, shape: tuple[int, int, int]) -> list[Path]:
    """OPT files from the project's synthetic hospital (one site, one day, enough patients)."""
    from synth import generate_hospital

    summary = generate_hospital(root, seed=1, sites=("site-a",), dates=("2024-03-01",),
                                patients_per_site=max(2, count), oct_shape=shape, fundus_shape=(64, 64),
                                broken_per_partition=False)
    files = [root / i.rel_path for i in summary.instances if i.modality == "OPT"]
    return files[:count]


def plain(path: Path, target: Path) -> None:
    ds = pydicom.dcmread(path)
    for keyword in BLANKED:
        if keyword in ds:
            setattr(ds, keyword, "")
    ds.save_as(target)


def platform_path(engine, profile, p: Pseudonymizer, detector):
    """imaging/steps/anonymize.py's per-file work (and the index before it) with `engine`."""

    def work(path: Path, target: Path) -> None:
        index_file(ListedFile(date="2024-03-01", site="site-a", source_path=str(path),
                              size_bytes=path.stat().st_size))
        data = path.read_bytes()
        with quiet():
            ds = read_whole(data)
        out = engine.deidentify(ds, pseudonymizer=p, namespace="NHS", profile=profile,
                                extra_identifiers=("Jane Smith", "9434765919"), pixel_text=detector)
        target.write_bytes(engine.to_bytes(out))

    return work


def cpu_seconds(files: list[Path], out: Path, work) -> float:
    start = time.process_time()
    for i, path in enumerate(files):
        work(path, out / f"{i}.dcm")
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ref", default="9719aec", help="the commit whose engine is 'old'")
    parser.add_argument("--ocr", action="store_true", help="also time the new engine with the OCR on")
    args = parser.parse_args()
    shape = (args.frames, args.rows, args.cols)
    import imaging.deid as new

    root = Path(tempfile.mkdtemp(prefix="deid-bench-"))
    try:
        old = engine_at(args.ref, root / "ref")
        files = synth_files(root / "landing", args.files, shape)
        size = sum(p.stat().st_size for p in files)
        p = Pseudonymizer("benchmark-key")
        modes = {
            "copy": lambda path, target: target.write_bytes(path.read_bytes()),
            "plain": plain,
            "old": platform_path(old, old.load_profile(), p, ReadsNothing()),
            "new": platform_path(new, new.load_profile(), p, ReadsNothing()),
        }
        if args.ocr:
            import yaml

            settings = yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text())
            detector = new.PixelTextDetector(new.load_pixel_text_settings(settings))
            modes["new+ocr"] = platform_path(new, new.load_profile(), p, detector)
        best = {label: float("inf") for label in modes}
        for _ in range(args.rounds):
            for label, work in modes.items():
                out = root / "out" / label
                out.mkdir(parents=True, exist_ok=True)
                cpu_seconds(files[:1], out, work)  # warm imports and caches
                best[label] = min(best[label], cpu_seconds(files, out, work))
                shutil.rmtree(out)

        mb = size / 1e6
        print(f"{len(files)} OPT files from synth ({args.frames}x{args.rows}x{args.cols}), "
              f"{mb / len(files):.2f} MB each; best of {args.rounds} rounds; old engine: {args.ref}")
        for label, seconds in best.items():
            print(f"  {label:8s} {1000 * seconds / len(files):8.2f} CPU ms/file {mb / seconds:8.1f} MB/CPU-s "
                  f"{seconds / best['plain']:6.2f}x plain")
        print(f"  new / old: {best['new'] / best['old']:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
