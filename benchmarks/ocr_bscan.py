"""What the burned-in text check costs and finds on OCT B-scans, at the settings an operator could choose.

    .venv/bin/python benchmarks/ocr_bscan.py [--images 30] [--sides 384,320,256]

An OCT volume's frames are most of the platform's OCR time (benchmarks/RESULTS.md): `frame_sample`
B-scans of 496 x 512 per volume, each read by every thresholding pass when it is clean. This generates
B-scans with a name and a date drawn in (synth.burned_text.bscan_with_text: the photographs' fonts,
sizes, positions and colours) and clean ones, and prints, for `platform/pixel_text.yaml` as shipped and
for variants of it (every pass at a smaller side, the adaptive pass alone at a smaller side, the global
pass alone): text found, false alarms, and CPU milliseconds per frame with and without text. A variant
that finds less is not a saving; one that finds as much is a candidate to measure on more images.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from imaging.deid.pixel_text import PixelTextDetector, load_pixel_text_settings  # noqa: E402
from synth.burned_text import bscan_with_text, clean_bscan  # noqa: E402


def measure(name: str, spec: dict, text: list, clean: list) -> None:
    with PixelTextDetector(load_pixel_text_settings(spec)) as detector:
        started = time.process_time()
        found = sum(detector.frame_has_text(frame) for frame in text)
        text_cpu = time.process_time() - started
        started = time.process_time()
        alarms = sum(detector.frame_has_text(frame) for frame in clean)
        clean_cpu = time.process_time() - started
    n = len(text)
    print(f"  {name:34s} found {found:3d}/{n}  false alarms {alarms:3d}/{n}  "
          f"CPU per frame: with text {1e3 * text_cpu / n:5.0f} ms, clean {1e3 * clean_cpu / n:5.0f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=30, help="B-scans of each kind (with text, clean)")
    parser.add_argument("--sides", default="384,320,256", help="smaller sides to try (pixels)")
    args = parser.parse_args()
    shipped = yaml.safe_load((ROOT / "platform" / "pixel_text.yaml").read_text())
    text = [bscan_with_text(seed) for seed in range(args.images)]
    clean = [clean_bscan(seed) for seed in range(args.images)]
    print(f"# {args.images} B-scans of 496 x 512 with text and {args.images} clean; settings: platform/pixel_text.yaml")
    measure("as shipped", shipped, text, clean)
    for side in (int(x) for x in args.sides.split(",")):
        measure(f"every pass at {side} px", {**shipped, "max_side": side, "pass_max_side": {}}, text, clean)
    for side in (int(x) for x in args.sides.split(",")):
        measure(f"adaptive pass at {side} px", {**shipped, "pass_max_side": {"adaptive_otsu": side}}, text, clean)
    measure("global Otsu pass only", {**shipped, "thresholding": ["otsu"]}, text, clean)


if __name__ == "__main__":
    main()
