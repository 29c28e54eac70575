"""The review's evidence about burned-in text: counts per image type and a contact sheet, from the released bytes.

- `text_counts`: per image type (`imaging.deid.pixel_text.image_type`: photograph, multi_frame,
  secondary_capture, default), the released images whose pixels were read for text (`screened`), found
  clean, and redacted, from the release's metadata (`pixel_text`); with the identifiable zone, the images of
  the partitions read that were quarantined for their pixels (text found, text left after redaction, not
  checkable), typed by their landing file's header (read up to the pixels, never drawn).
- `contact_sheet`: a thumbnail of every redacted image, drawn from its released file, with the boxes the
  metadata says were covered outlined, and a seeded random sample of the other released images (the seed
  is the release id: the same release gives the same sample). Nothing from the identifiable zone is drawn.
  Each thumbnail also says whether every covered box is solid in the released pixels.
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from imaging import fs as fsx

TYPES = ("photograph", "multi_frame", "secondary_capture", "default")
PIXEL_REASONS = ("text in pixel data", "text left after redaction", "pixel data could not be checked for text",
                 "pixel data could not be redacted")
THUMBNAIL = 192  # pixels, the longer side
SAMPLE = 12  # other published images drawn


@dataclass
class TypeCounts:
    screened: int = 0
    clean: int = 0
    redacted: int = 0
    not_read: int = 0
    quarantined: int | None = None  # None: the identifiable zone was not read


@dataclass(frozen=True)
class Thumbnail:
    file: str  # path inside the release
    image_type: str
    redacted: bool
    frame: int  # 1-based, the frame shown
    boxes: int  # covered boxes on that frame
    solid: bool | None  # every covered box one value in the released pixels (None: not redacted)
    png: str  # data: URL


@dataclass
class TextEvidence:
    counts: dict[str, TypeCounts] = field(default_factory=dict)
    sheet: list[Thumbnail] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _type_of(sop_class: str | None, frames) -> str:
    from pydicom.dataset import Dataset

    from imaging.deid.pixel_text import image_type

    ds = Dataset()
    ds.SOPClassUID = sop_class or ""
    ds.NumberOfFrames = int(frames or 1)
    return image_type(ds)


def text_counts(rows: list[dict]) -> dict[str, TypeCounts]:
    counts = {t: TypeCounts() for t in TYPES}
    for row in rows:
        c = counts[_type_of(row.get("sop_class_uid"), row.get("number_of_frames"))]
        outcome = row.get("pixel_text") or "not read"
        c.screened += outcome in ("clean", "redacted")
        c.clean += outcome == "clean"
        c.redacted += outcome == "redacted"
        c.not_read += outcome not in ("clean", "redacted")
    return counts


def quarantined_by_type(sources: list[str]) -> Counter:
    """Image types of quarantined landing files (headers only, up to the pixels); "unknown" when unreadable."""
    import pydicom

    out = Counter()
    for path in sources:
        try:
            with fsx.open_read(path) as handle:
                ds = pydicom.dcmread(handle, stop_before_pixels=True, specific_tags=["SOPClassUID", "NumberOfFrames"])
            out[_type_of(str(ds.get("SOPClassUID", "")), ds.get("NumberOfFrames", 1))] += 1
        except Exception:  # noqa: BLE001 - a file gone or unreadable is counted, untyped
            out["unknown"] += 1
    return out


def _regions(row: dict) -> list[dict]:
    try:
        return json.loads(row.get("redacted_regions") or "[]")
    except ValueError:
        return []


def _boxes_on(regions: list[dict], frame: int) -> list[list[int]]:
    return [b for r in regions if any(a <= frame <= z for a, z in r.get("frames", [])) for b in r.get("boxes", [])]


def _thumbnail(root: str, row: dict, image_type: str) -> Thumbnail:
    import pydicom
    from PIL import Image, ImageDraw

    from imaging.deid.frames import Frames
    from imaging.deid.pixel_text import to_grey8

    regions = _regions(row)
    redacted = row.get("pixel_text") == "redacted"
    frame = regions[0]["frames"][0][0] if redacted and regions else 1
    with fsx.open_read(f"{root}/{row['file']}") as handle:
        ds = pydicom.dcmread(io.BytesIO(handle.read()))
    array = np.asarray(Frames.from_dataset(ds, ds.file_meta.TransferSyntaxUID).frame(frame - 1))
    boxes = _boxes_on(regions, frame) if redacted else []
    solid = None
    if redacted:
        solid = all(np.unique(array[t:t + h, l:l + w].reshape(-1, *array.shape[2:]), axis=0).shape[0] <= 1
                    for t, l, h, w in boxes)
    photometric = str(ds.get("PhotometricInterpretation", "") or "").upper()
    grey = to_grey8(array, photometric) if array.ndim == 2 else None
    image = Image.fromarray(grey if grey is not None else
                            (array.astype(np.uint8) if array.ndim == 3 else np.zeros(array.shape, np.uint8)))
    image = image.convert("RGB")
    scale = THUMBNAIL / max(image.size)
    image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    draw = ImageDraw.Draw(image)
    for t, l, h, w in boxes:
        draw.rectangle((l * scale - 1, t * scale - 1, (l + w) * scale + 1, (t + h) * scale + 1), outline=(255, 40, 40),
                       width=2)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)  # 4x faster than optimize, no larger on noisy scans
    png = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    return Thumbnail(row["file"], image_type, redacted, frame, len(boxes), solid, png)


def contact_sheet(root: str, rows: list[dict], seed: str,
                  sample: int = SAMPLE) -> tuple[list[Thumbnail], list[str], list[str]]:
    """Thumbnails of every redacted image and of `sample` others (seeded); the problems found drawing them (a
    redacted image that cannot be drawn, a box not solid) and notes (a sampled other image that cannot be
    drawn: one whose pixels were never read, e.g. a syntax or layout without a decoder)."""
    redacted = [r for r in rows if r.get("pixel_text") == "redacted"]
    others = sorted((r for r in rows if r.get("pixel_text") != "redacted"), key=lambda r: r["file"])
    chosen = random.Random(seed).sample(others, min(sample, len(others)))
    sheet, problems, notes = [], [], []
    for row in sorted(redacted, key=lambda r: r["file"]) + chosen:
        try:
            sheet.append(_thumbnail(root, row, _type_of(row.get("sop_class_uid"), row.get("number_of_frames"))))
        except Exception as error:  # noqa: BLE001 - a redacted image that cannot be drawn fails the review
            (problems if row.get("pixel_text") == "redacted" else notes).append(
                f"{row['file']}: the released image cannot be drawn ({type(error).__name__})")
    unsolid = [t.file for t in sheet if t.solid is False]
    if unsolid:
        problems.append(f"{len(unsolid)} redacted images have a covered box that is not solid in the released pixels")
    return sheet, problems, notes


def text_evidence(root: str, table, seed: str) -> TextEvidence:
    """Counts per image type and the contact sheet, from a release's metadata table and released files."""
    columns = set(table.column_names)
    wanted = [c for c in ("file", "sop_class_uid", "number_of_frames", "pixel_text", "redacted_regions") if c in columns]
    rows = table.select(wanted).to_pylist()
    evidence = TextEvidence(counts=text_counts(rows))
    if "pixel_text" not in columns:  # a release made before the text check's outcome was recorded
        return evidence
    evidence.sheet, evidence.problems, evidence.notes = contact_sheet(root, rows, seed)
    return evidence


def pixel_quarantine_sources(tables: str, site_days) -> list[str]:
    """Landing paths of the images of these (date, site) partitions quarantined for their pixels (identifiable)."""

    from imaging.catalogue import ANONYMIZE_QUARANTINE

    wanted = set(site_days)
    url = f"{tables}/{ANONYMIZE_QUARANTINE.path}"
    dataset = fsx.parquet_table(url) if wanted else None
    if dataset is None:  # no folder, or only partition folders an empty site-day's run emptied: no rows
        return []
    rows = dataset.to_table(columns=["date", "site", "reason", "source_path"]).to_pylist()
    return sorted(r["source_path"] for r in rows
                  if (str(r["date"]), str(r["site"])) in wanted and r["reason"] in PIXEL_REASONS)


def add_quarantined(evidence: TextEvidence, tables: str, site_days) -> None:
    """The quarantined counts per image type (identifiable zone: landing headers read, never drawn)."""
    counted = quarantined_by_type(pixel_quarantine_sources(tables, site_days))
    for name, c in evidence.counts.items():
        c.quarantined = counted.get(name, 0)
        c.screened += c.quarantined
    if counted.get("unknown"):
        evidence.counts["unknown"] = TypeCounts(screened=counted["unknown"], quarantined=counted["unknown"])


def text_lines(evidence: TextEvidence) -> list[str]:
    """The evidence in words, for the review's text report (what an approval signs)."""
    lines = ["Burned-in text per image type (screened = pixels read; quarantined: identifiable zone):"]
    for name, c in evidence.counts.items():
        quarantined = "not read" if c.quarantined is None else str(c.quarantined)
        lines.append(f"  {name:18s} screened {c.screened}, clean {c.clean}, redacted {c.redacted}, "
                     f"quarantined {quarantined}, not read {c.not_read}")
    redacted = [t for t in evidence.sheet if t.redacted]
    lines.append(f"  contact sheet: {len(redacted)} redacted images (boxes "
                 f"{'solid in every one' if all(t.solid for t in redacted) else 'NOT all solid'}), "
                 f"{len(evidence.sheet) - len(redacted)} others sampled")
    return lines
