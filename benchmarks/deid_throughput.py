"""Throughput of the de-identification engine on OCT-sized files, against a plain copy.

    .venv/bin/python benchmarks/deid_throughput.py [--files 12] [--frames 49] [--rows 496] [--cols 512]

Generates OPT volumes with synth in a temp directory, then times, over the same files and in the same run:
  copy     read the file's bytes and write them to a new file (the floor)
  pydicom  dcmread + encode to Part 10 + write, with no de-identification
  deid     dcmread + deidentify + to_bytes + write (what a Spark task does per file), OCR of the
           sampled frames on (platform/pixel_text.yaml; the detector is made once, outside the timing)
  no-ocr   the same with a stand-in detector that reads nothing (what OCR costs: deid - no-ocr)
and prints files/s, MB/s and each one's time relative to the copy. benchmarks/ocr_cost.py
breaks the OCR cost down per file for photographs and volumes.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydicom import dcmread  # noqa: E402

import yaml  # noqa: E402

from imaging.deid import deidentify, load_profile, quiet, to_bytes  # noqa: E402
from imaging.deid.pixel_text import PixelTextDetector, load_pixel_text_settings  # noqa: E402
from imaging.pseudonym import Pseudonymizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ocr_cost import ReadsNothing  # noqa: E402


def synth_files(root: Path, count: int, shape: tuple[int, int, int]) -> list[Path]:
    """OPT files from the project's synthetic hospital (one site, one day, enough patients)."""
    from synth import generate_hospital

    summary = generate_hospital(root, seed=1, sites=("site-a",), dates=("2024-03-01",),
                                patients_per_site=max(2, count), oct_shape=shape, fundus_shape=(64, 64),
                                broken_per_partition=False)
    files = [root / i.rel_path for i in summary.instances if i.modality == "OPT"]
    return files[:count]


def timed(label: str, files: list[Path], out: Path, work) -> float:
    start = time.perf_counter()
    for i, path in enumerate(files):
        (out / f"{label}_{i}.dcm").write_bytes(work(path))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--frames", type=int, default=49)
    parser.add_argument("--rows", type=int, default=496)
    parser.add_argument("--cols", type=int, default=512)
    args = parser.parse_args()
    shape = (args.frames, args.rows, args.cols)

    root = Path(tempfile.mkdtemp(prefix="deid-bench-"))
    try:
        made = time.perf_counter()
        files = synth_files(root / "landing", args.files, shape)
        made = time.perf_counter() - made
        out = root / "out"
        out.mkdir()
        size = sum(p.stat().st_size for p in files)
        p, profile = Pseudonymizer("benchmark-key"), load_profile()

        def pydicom_roundtrip(path: Path) -> bytes:
            with quiet():
                ds = dcmread(path)
            buffer = io.BytesIO()
            ds.save_as(buffer, enforce_file_format=True)
            return buffer.getvalue()

        settings = yaml.safe_load((Path(__file__).resolve().parents[1] / "platform/pixel_text.yaml").read_text())
        detector = PixelTextDetector(load_pixel_text_settings(settings))

        def deid(path: Path, reader=detector) -> bytes:
            with quiet():
                ds = dcmread(path)
            return to_bytes(deidentify(ds, pseudonymizer=p, namespace="NHS", profile=profile, pixel_text=reader))

        def no_ocr(path: Path) -> bytes:
            return deid(path, ReadsNothing())

        results = {}
        for label, work in (("copy", Path.read_bytes), ("pydicom", pydicom_roundtrip), ("deid", deid),
                            ("no-ocr", no_ocr)):
            timed(label, files[:1], out, work)  # warm caches and imports
            results[label] = timed(label, files, out, work)

        mb = size / 1e6
        print(f"{len(files)} OPT files from synth ({args.frames}x{args.rows}x{args.cols}), "
              f"{mb / len(files):.1f} MB each, {mb:.0f} MB total (generated in {made:.1f} s)")
        for label, seconds in results.items():
            print(f"  {label:8s} {len(files) / seconds:8.1f} files/s {mb / seconds:9.1f} MB/s "
                  f"{seconds / results['copy']:6.1f}x copy time")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
