"""A site-day holding one large OCT volume, through the three image assets: the largest resident size of
any one process of the run, by role (issue 34: no Python process above 1 GB for a 2.4 GB volume).

    .venv/bin/python benchmarks/stream_memory.py [--frames 2300] [--rows 1024] [--columns 1024] [--keep]

Writes the volume (8-bit OCT-like B-scans, every frame different, BurnedInAnnotation NO: the text check
reads its sampled frames) straight to disk, frame by frame, then runs `dagster asset materialize` of
raw_image_index, linked_patient_metadata and anonymized_images on it (benchmarks/pipeline.py's
`materialize`, local[2]) while sampling every process of the run (RSS every 0.2 s). Prints each role's
largest single process, the sum of each role's processes at their peak, the run's wall time and steps,
and checks that the volume was published with its pixel data unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import numpy as np  # noqa: E402

import pipeline as P  # noqa: E402


def write_volume(path: Path, frames: int, rows: int, columns: int) -> str:
    """An OCT-like volume written frame by frame (never whole in memory); returns the sha256 of its pixel data."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.filewriter import dcmwrite
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.77.1.5.4"  # Ophthalmic Tomography Image
    ds.SOPInstanceUID, ds.StudyInstanceUID, ds.SeriesInstanceUID = (generate_uid(prefix="2.25.") for _ in range(3))
    ds.PatientID, ds.PatientName, ds.PatientSex, ds.PatientBirthDate = "9434765919", "SMITH^JANE", "F", "19670501"
    ds.StudyDate, ds.StudyTime, ds.Modality, ds.ImageLaterality = P.DAY.replace("-", ""), "093000", "OPT", "R"
    ds.Manufacturer, ds.BurnedInAnnotation = "Synthetic Ophthalmics Ltd", "NO"
    ds.Rows, ds.Columns, ds.NumberOfFrames = rows, columns, frames
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit, ds.PixelRepresentation = 7, 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        dcmwrite(handle, ds, enforce_file_format=True)
        handle.write(struct.pack("<HH2sHL", 0x7FE0, 0x0010, b"OB", 0, frames * rows * columns))
        rng = np.random.default_rng(34)
        base = rng.gamma(2.0, 18.0, size=(rows, columns)).clip(0, 255).astype(np.uint8)  # speckle-like
        digest = hashlib.sha256()
        for i in range(frames):
            frame = np.roll(base, (i * 7) % rows, axis=0)
            frame[0, :8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)  # no two frames alike
            data = frame.tobytes()
            handle.write(data)
            digest.update(data)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2300)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--columns", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stream-memory-", dir=str(REPO / "benchmarks")))
    try:
        landing = work / "landing"
        source = landing / "images" / P.SITE / P.DAY / "volume.dcm"
        started = time.perf_counter()
        pixels = write_volume(source, args.frames, args.rows, args.columns)
        size = source.stat().st_size
        print(f"# one volume of {args.frames} x {args.rows} x {args.columns} (8 bits): {size / 1e9:.2f} GB, "
              f"written in {time.perf_counter() - started:.0f} s")
        P.init_home(work / f"home-{REPO.name}")
        run = P.materialize("volume", landing, work, P.DAY)
        print(f"wall {run.wall:.1f} s; steps " + ", ".join(f"{k} {v:.1f} s" for k, v in run.steps.items()))
        print("largest single process (RSS):")
        for role, rss in sorted(run.process_memory.items()):
            print(f"  {role:16s} {rss / 1e9:5.2f} GB")
        print("all processes of a role together, at their peak:")
        for role, rss in sorted(run.memory.items()):
            print(f"  {role:16s} {rss / 1e9:5.2f} GB")
        outputs = list((work / "warehouse-volume" / "deidentified").rglob("*.dcm"))
        if len(outputs) != 1:
            raise SystemExit(f"expected the volume published once, found {len(outputs)} files")
        with open(outputs[0], "rb") as handle:
            handle.seek(-args.frames * args.rows * args.columns, 2)
            digest = hashlib.sha256()
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
        same = digest.hexdigest() == pixels
        print(f"published: {outputs[0].stat().st_size / 1e9:.2f} GB, pixel data {'unchanged' if same else 'CHANGED'}")
        python = max((v for k, v in run.process_memory.items() if "Python" in k), default=0)
        print(f"largest Python process: {python / 1e9:.2f} GB ({'within' if python <= 1e9 else 'ABOVE'} 1 GB)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
