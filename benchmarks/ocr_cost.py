"""Cost of the burned-in text check (OCR): de-identification throughput with OCR on and off.

    .venv/bin/python benchmarks/ocr_cost.py [--photos 20] [--photo-side 512,2048] [--volumes 4] [--frames 49]

Generates, in memory, fundus photographs (synth.burned_text, clean, flagged NO: OCR reads every
one) at each side length, and OCT volumes (synth.pixels, 496 x 512 B-scans: OCR reads a sample of
frames), then times over the same files:
  OCR off  dcmread + deidentify + to_bytes with a stand-in detector that reads nothing
  OCR on   the same with the real detector (platform/pixel_text.yaml), made once for the run
and prints files/s, MB/s, OCR seconds per file and frames read per file. The set-up of the
detector (loading Tesseract's model) is printed separately: a partition pays it once.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from pydicom import dcmread  # noqa: E402
from pydicom.dataset import Dataset  # noqa: E402

from imaging.deid import deidentify, load_profile, quiet, to_bytes  # noqa: E402
from imaging.deid.pixel_text import PixelTextDetector, PixelTextResult, load_pixel_text_settings  # noqa: E402
from imaging.pseudonym import Pseudonymizer  # noqa: E402


class ReadsNothing:
    """Benchmark-only stand-in: answers "no text" without reading, to time everything but OCR."""

    def check(self, ds, syntax, frames=None) -> PixelTextResult:
        return PixelTextResult(found=False, frames_checked=0)


def photos(count: int, side: int) -> list[bytes]:
    from synth.burned_text import clean_fundus

    return [clean_fundus(2 * i, shape=(side, side)).data for i in range(count)]  # even seeds: flagged NO


def volumes(count: int, frames: int) -> list[bytes]:
    from synth.dicom import OPT_SOP_CLASS, encode_part10
    from synth.pixels import oct_volume

    out = []
    for i in range(count):
        ds = Dataset()
        ds.SOPClassUID, ds.SOPInstanceUID, ds.PatientID = OPT_SOP_CLASS, f"2.25.{900 + i}", f"99900{i:05d}"
        ds.Modality, ds.BurnedInAnnotation, ds.StudyDate, ds.StudyTime = "OPT", "NO", "20240301", "101500"
        ds.Rows, ds.Columns, ds.NumberOfFrames = 496, 512, frames
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
        ds.PixelData = oct_volume((frames, 496, 512), seed=i).tobytes()
        out.append(encode_part10(ds))
    return out


def run(files: list[bytes], detector) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine the CPU time is the steadier figure."""
    p, profile = Pseudonymizer("benchmark-key"), load_profile()
    start, cpu = time.perf_counter(), time.process_time()
    for data in files:
        with quiet():
            ds = dcmread(io.BytesIO(data))
        to_bytes(deidentify(ds, pseudonymizer=p, namespace="NHS", profile=profile, pixel_text=detector))
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=20)
    parser.add_argument("--photo-side", default="512,2048", help="comma-separated side lengths")
    parser.add_argument("--volumes", type=int, default=4)
    parser.add_argument("--frames", type=int, default=49)
    args = parser.parse_args()

    settings = load_pixel_text_settings(yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text()))
    made = time.perf_counter()
    detector = PixelTextDetector(settings)
    made = time.perf_counter() - made
    print(f"detector set-up (once per partition): {made * 1000:.0f} ms; frame sample {settings.frame_sample}, "
          f"passes {'+'.join(settings.thresholding)}")
    sets = [(f"OP photo {side}x{side} RGB", photos(args.photos, side))
            for side in (int(s) for s in args.photo_side.split(","))]
    if args.volumes:
        sets.append((f"OPT volume {args.frames}x496x512", volumes(args.volumes, args.frames)))
    for label, files in sets:
        mb = sum(len(f) for f in files) / 1e6
        run(files[:1], detector)  # warm imports and caches
        before = (detector.stats.ocr_seconds, detector.stats.frames_checked, detector.stats.files_checked)
        off, off_cpu = run(files, ReadsNothing())
        on, on_cpu = run(files, detector)
        ocr = detector.stats.ocr_seconds - before[0]
        frames = (detector.stats.frames_checked - before[1]) / max(1, detector.stats.files_checked - before[2])
        n = len(files)
        print(f"{n} x {label} ({mb / n:.1f} MB each)")
        print(f"  OCR off {n / off:8.1f} files/s {mb / off:8.1f} MB/s   CPU {1000 * off_cpu / n:6.0f} ms/file")
        print(f"  OCR on  {n / on:8.1f} files/s {mb / on:8.1f} MB/s   CPU {1000 * on_cpu / n:6.0f} ms/file   "
              f"OCR {1000 * ocr / n:.0f} ms/file wall, {1000 * (on_cpu - off_cpu) / n:.0f} ms/file CPU, "
              f"{frames:.0f} frame(s) read per file")
    detector.close()


if __name__ == "__main__":
    main()
