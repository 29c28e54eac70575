"""Burned-in text screening: what the tiered check finds and costs, against the detector it replaced.

    .venv/bin/python benchmarks/text_screening.py                 # 300 text + 300 clean images of each type
    .venv/bin/python benchmarks/text_screening.py --per-type 40   # a quick iteration
    .venv/bin/python benchmarks/text_screening.py --redact        # on_text: redact for every type (issue 35)

With `--redact` it de-identifies every file with `on_text: redact` for every image type (the shipped settings
otherwise) and prints per type (and per transfer syntax, `--syntaxes N`: the first N text and N clean
photographs and screens re-encoded in RLE, JPEG 2000, JPEG-LS and JPEG Baseline): the share of text images
published redacted, quarantined with text left or unreadable, or published unredacted (missed); words of the
drawn text still read in the published pixels by an independent whole-frame OCR (plain Tesseract on every
frame, at 1x and 2x, global Otsu: not the detector's code); clean images whose pixels changed (must be 0);
and CPU per file (dcmread + de-identification + encoding, this process).

Generates (seeded: the same run gives the same files) DICOM files of three image types, half with a
patient's name, a date and sometimes a hospital number drawn in, half clean:

- fundus photographs (synth.burned_text: colour retina disc on a dark field, 512 x 512);
- OCT volumes: 16 speckled, layered B-scans of 256 x 256 or 496 x 512, the label drawn on every B-scan as
  devices overlay it;
- secondary captures: report screens (light or dark, grey or colour) with panels, a fundus and a B-scan
  thumbnail, a thickness map, a plot and grid lines, 768 x 1024 or 600 x 800;

text in every font on the machine (DejaVu families if installed, Pillow's own), sizes, contrasts and
positions (corners, edges, over the retina or the panels). For the OLD method (`screening: whole_frame`, the
method before candidates: three frames at native size, global then adaptive Otsu on the whole frame), the NEW one
(`screening: candidates` with platform/pixel_text.yaml's image types: Tesseract on the candidates only) and a one-core loop of
"pydicom + Tesseract, three frames a file at native size, one pass", it prints per type: the share of text
images caught, the share of clean images refused, and CPU milliseconds per file (dcmread + check). CPU
time of this process (`time.process_time`), so other load on the machine counts little.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from pydicom import dcmread  # noqa: E402
from pydicom.dataset import Dataset  # noqa: E402

from imaging.deid import quiet  # noqa: E402
from imaging.deid.pixel_text import (  # noqa: E402
    PixelTextDetector, PixelTextSettings, decode_frame, find_tessdata, load_pixel_text_settings, sample_frames,
    to_grey8,
)
from synth.burned_text import (  # noqa: E402
    FONT_ROOT, HELD_OUT, TUNING, Drawn, _draw, _font, _lines, available_fonts, clean_fundus, font_faces,
    fundus_with_text, missing_packages, photograph, report_screen, screen_background, volume,
)
from synth.dicom import OPT_SOP_CLASS, encode_part10  # noqa: E402
from synth.pixels import oct_volume  # noqa: E402

SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"
TYPES = ("photograph", "oct", "secondary_capture")
TYPE_NAMES = {"photograph": "photograph", "oct": "multi_frame", "secondary_capture": "secondary_capture"}  # image_type()


@dataclass(frozen=True)
class Sample:
    """One generated file and whether text was drawn into it."""

    kind: str
    has_text: bool
    data: bytes


# --- the files ----------------------------------------------------------------------------------------

def _dataset(seed: int, sop_class: str, modality: str, pixels: np.ndarray, frames: int) -> Dataset:
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, f"2.25.{10**30 + seed}"
    ds.PatientID, ds.Modality = f"999{seed % 10**7:07d}", modality
    ds.StudyDate, ds.StudyTime = "20240301", "101500"
    colour = pixels.ndim == (4 if frames > 1 else 3)
    ds.Rows, ds.Columns = pixels.shape[-3:-1] if colour else pixels.shape[-2:]
    ds.SamplesPerPixel = 3 if colour else 1
    ds.PhotometricInterpretation = "RGB" if colour else "MONOCHROME2"
    if colour:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.NumberOfFrames = frames
    ds.add_new(0x7FE00010, "OB", np.ascontiguousarray(pixels).tobytes())
    return ds


def oct_file(seed: int, text: bool, drawn: list | None = None) -> bytes:
    """A 16-frame OCT volume; with text, the same label on every B-scan (a device's overlay). `drawn`: gets the
    lines drawn."""
    shape = (256, 256) if seed % 2 else (496, 512)
    volume = oct_volume((16, *shape), seed + (0 if text else 1_000_000))
    if text:
        for index in range(16):
            rng = random.Random(f"oct-text:{seed}")  # the same label, font and place on every frame
            rgb = np.stack([volume[index]] * 3, axis=-1)
            lines = _lines(rng)
            if drawn is not None and index == 0:
                drawn.extend(lines)
            labelled, *_ = _draw(rgb, lines, rng, available_fonts())
            volume[index] = np.asarray(Image.fromarray(np.ascontiguousarray(labelled)).convert("L"))
    return encode_part10(_dataset(seed, OPT_SOP_CLASS, "OPT", volume, 16))


def screen_file(seed: int, text: bool, drawn: list | None = None) -> bytes:
    """A secondary capture (a report screen); grey or colour; with text, identifiers drawn on it (`drawn`: gets
    the lines)."""
    image, rng, dark = screen_background(seed + (0 if text else 1_000_000))
    if text:
        draw = ImageDraw.Draw(image)
        fonts = available_fonts()
        size = rng.randrange(11, 30)
        font = _font(rng.choice(fonts), size)
        colour = rng.choice(((255, 255, 255), (200, 200, 200), (255, 230, 0))) if dark else \
            rng.choice(((0, 0, 0), (70, 70, 70), (20, 40, 140), (120, 120, 120)))
        lines = _lines(rng)
        if drawn is not None:
            drawn.extend(lines)
        where = rng.choice(("header", "footer", "panel", "right"))
        x, y = {"header": (16, 12), "footer": (16, image.height - 80), "right": (image.width - 420, 14),
                "panel": (30, 100 + rng.randrange(0, 200))}[where]
        if where == "panel":  # over the fundus thumbnail: light text on the retina
            colour = rng.choice(((255, 255, 255), (255, 255, 120)))
        draw.multiline_text((x, y), "\n".join(lines), font=font, fill=colour, spacing=size // 4)
    pixels = np.asarray(image)
    if rng.random() < 0.4:  # a greyscale screen
        pixels = np.asarray(image.convert("L"))
    return encode_part10(_dataset(seed, SECONDARY_CAPTURE, "OT", pixels, 1))


def photograph_file(seed: int, text: bool) -> bytes:
    return (fundus_with_text(seed) if text else clean_fundus(seed)).data


MAKERS = {"photograph": photograph_file, "oct": oct_file, "secondary_capture": screen_file}


def generate(per_type: int, types: tuple[str, ...] = TYPES) -> list[Sample]:
    return [Sample(kind, text, MAKERS[kind](seed, text))
            for kind in types for text in (True, False) for seed in range(per_type)]


def count_words(tess, api, settings: PixelTextSettings) -> int:
    if not api.Recognize():
        return 0
    counted = 0
    for word in tess.iterate_level(api.GetIterator(), tess.RIL.WORD):
        try:
            text = word.GetUTF8Text(tess.RIL.WORD) or ""
        except RuntimeError:
            continue
        if word.Confidence(tess.RIL.WORD) >= settings.min_confidence and \
                sum(ch.isalnum() for ch in text) >= settings.min_word_chars:
            counted += 1
    return counted


class OnePassLoop:
    """What a user would write: pydicom + Tesseract, three frames at native size, one global-Otsu pass."""

    def __init__(self, settings: PixelTextSettings):
        import tesserocr

        self.settings = settings
        self._tess = tesserocr
        self._api = tesserocr.PyTessBaseAPI(path=find_tessdata(settings.language, settings.tessdata),
                                            lang=settings.language, psm=tesserocr.PSM.SPARSE_TEXT)

    def check(self, ds: Dataset) -> bool:
        frames = max(1, int(ds.get("NumberOfFrames", 1) or 1))
        for index in sample_frames(frames, 3):
            grey = to_grey8(np.asarray(decode_frame(ds, ds.file_meta.TransferSyntaxUID, index)),
                            str(ds.PhotometricInterpretation).upper())
            if grey is None:
                continue
            self._api.SetImage(Image.fromarray(grey))
            if count_words(self._tess, self._api, self.settings) >= self.settings.min_words:
                return True
        return False


# --- measuring ---------------------------------------------------------------------------------------

@dataclass
class Tally:
    caught: int = 0
    texts: int = 0
    refused: int = 0
    cleans: int = 0
    cpu: float = 0.0


def measure(name: str, check, samples: list[Sample]) -> dict[str, Tally]:
    tallies = {kind: Tally() for kind in dict.fromkeys(sample.kind for sample in samples)}  # the types run
    for sample in samples:
        started = time.process_time()
        with quiet():
            ds = dcmread(io.BytesIO(sample.data))
        found = check(ds)
        tally = tallies[sample.kind]
        tally.cpu += time.process_time() - started
        if sample.has_text:
            tally.texts += 1
            tally.caught += found
        else:
            tally.cleans += 1
            tally.refused += found
    for kind, t in tallies.items():
        files = t.texts + t.cleans
        print(f"  {name:9s} {kind:18s} caught {t.caught:3d}/{t.texts} ({100 * t.caught / max(t.texts, 1):5.1f}%)  "
              f"clean refused {t.refused:3d}/{t.cleans} ({100 * t.refused / max(t.cleans, 1):4.1f}%)  "
              f"CPU {1e3 * t.cpu / max(files, 1):6.1f} ms/file", flush=True)
    total = sum(t.cpu for t in tallies.values())
    print(f"  {name:9s} {'all':18s} CPU {1e3 * total / len(samples):6.1f} ms/file", flush=True)
    return tallies


def omp_probe(files: int) -> None:
    """One-pass loop CPU on OCT files, in a fresh process (Tesseract reads OMP_THREAD_LIMIT when it loads)."""
    samples = [Sample("oct", bool(seed % 2), oct_file(seed, bool(seed % 2))) for seed in range(files)]
    loop = OnePassLoop(PixelTextSettings())
    started = time.process_time()
    for sample in samples:
        with quiet():
            loop.check(dcmread(io.BytesIO(sample.data)))
    print(f"{1e3 * (time.process_time() - started) / files:.1f}")



# --- redaction (issue 35) ----------------------------------------------------------------------------

def drawn_text(kind: str, seed: int) -> list[str]:
    """The lines drawn into a text sample (regenerated from its seed)."""
    if kind == "photograph":
        return fundus_with_text(seed).text.splitlines()
    lines: list[str] = []
    (oct_file if kind == "oct" else screen_file)(seed, True, lines)
    return lines


def _words(lines: list[str]) -> set[str]:
    out = set()
    for line in lines:
        for word in line.replace("^", " ").replace(",", " ").split():
            word = word.strip(".,:;").upper()
            if sum(ch.isalnum() for ch in word) >= 3:
                out.add(word)
    return out


class WholeFrameOCR:
    """The independent reader of published pixels: plain Tesseract on every frame, whole, at 1x and 2x, global
    Otsu, sparse text; the words it reads (not the detector's code, its candidates or its verification)."""

    def __init__(self):
        import tesserocr

        self._api = tesserocr.PyTessBaseAPI(path=find_tessdata(), lang="eng", psm=tesserocr.PSM.SPARSE_TEXT)

    def words(self, frame: np.ndarray) -> set[str]:
        return {word for word, _ in self.placed(frame)}

    def placed(self, frame: np.ndarray) -> list[tuple[str, tuple[int, int, int, int]]]:
        """Each word read, with its box in `frame`'s pixels (left, top, right, bottom)."""
        import tesserocr

        grey = frame if frame.ndim == 2 else np.asarray(Image.fromarray(frame.astype(np.uint8)).convert("L"))
        if grey.dtype != np.uint8:
            grey = (255.0 * (grey - grey.min()) / max(float(grey.max() - grey.min()), 1.0)).astype(np.uint8)
        found = []
        for factor in (1, 2):
            image = Image.fromarray(grey)
            if factor > 1:
                image = image.resize((image.width * factor, image.height * factor), Image.BILINEAR)
            self._api.SetImage(image)
            self._api.Recognize()
            level = tesserocr.RIL.WORD
            for word in tesserocr.iterate_level(self._api.GetIterator(), level):
                try:
                    text, box = word.GetUTF8Text(level), word.BoundingBox(level)
                except RuntimeError:  # an empty word
                    continue
                found += [(w, tuple(v // factor for v in box)) for w in _words([text or ""])]
        return found


@dataclass
class RedactTally:
    texts: int = 0
    redacted: int = 0
    text_left: int = 0
    other_quarantine: int = 0
    missed: int = 0  # text images published without redaction
    residual_words: int = 0  # drawn words the independent OCR still reads in redacted images
    residual_images: int = 0
    missed_words: int = 0  # ... and in text images the check missed (published unredacted)
    words_before: int = 0  # drawn words it reads in the same images before (the reader works)
    cleans: int = 0
    clean_changed: int = 0
    clean_quarantined: int = 0
    cpu: float = 0.0


def _encode(data: bytes, syntax) -> bytes:
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEG2000Lossless, JPEGBaseline8Bit, JPEGLSLossless, RLELossless

    with quiet():
        ds = dcmread(io.BytesIO(data))
    if syntax == JPEGBaseline8Bit:  # no JPEG encoder is locked: Pillow's, quality 95, as cameras write
        buffer = io.BytesIO()
        Image.fromarray(ds.pixel_array).save(buffer, format="JPEG", quality=95)
        ds.PixelData = encapsulate([buffer.getvalue()])
        ds["PixelData"].VR = "OB"
        ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
        ds.PhotometricInterpretation = "YBR_FULL_422" if ds.SamplesPerPixel == 3 else "MONOCHROME2"
        ds.LossyImageCompression = "01"
    else:
        ds.compress({"rle": RLELossless, "j2k": JPEG2000Lossless, "jls": JPEGLSLossless}[syntax]
                    if isinstance(syntax, str) else syntax)
    out = io.BytesIO()
    ds.save_as(out, enforce_file_format=True)
    return out.getvalue()


def measure_redaction(samples: list[tuple[str, bool, int, bytes]], label: str) -> dict[str, RedactTally]:
    """De-identify every sample with on_text: redact for every type; tally what was published and read after."""
    from imaging.deid import NotDeidentifiable, to_bytes
    from imaging.deid.engine import REDACTED, deidentify_image
    from imaging.pseudonym import Pseudonymizer

    shipped = load_pixel_text_settings(yaml.safe_load((ROOT / "platform" / "pixel_text.yaml").read_text()))
    reader = WholeFrameOCR()
    pseudonymizer = Pseudonymizer("benchmark-redaction-key-" + "b" * 16)
    tallies: dict[str, RedactTally] = {}
    with PixelTextDetector(shipped.with_on_text("redact")) as detector:
        for kind, has_text, seed, data in samples:
            t = tallies.setdefault(kind, RedactTally())
            started = time.process_time()
            with quiet():
                ds = dcmread(io.BytesIO(data))
                try:
                    result = deidentify_image(ds, pseudonymizer=pseudonymizer, namespace="NHS", pixel_text=detector)
                    out = dcmread(io.BytesIO(to_bytes(result.dataset)))
                    reason = None
                except NotDeidentifiable as error:
                    result, out, reason = None, None, str(error)
            t.cpu += time.process_time() - started
            if has_text:
                t.texts += 1
                if reason is not None:
                    t.text_left += reason == "text left after redaction"
                    t.other_quarantine += reason != "text left after redaction"
                    continue
                t.redacted += result.pixel_text == REDACTED
                t.missed += result.pixel_text != REDACTED
                words = _words(drawn_text(kind, seed))
                with quiet():
                    after, before = out.pixel_array, ds.pixel_array
                frames = (after,) if int(out.get("NumberOfFrames", 1) or 1) == 1 else tuple(after)
                originals = (before,) if len(frames) == 1 else tuple(before)
                left = set().union(*(reader.words(f) for f in frames)) & words
                if result.pixel_text == REDACTED:
                    t.residual_words += len(left)
                    t.residual_images += bool(left)
                else:
                    t.missed_words += len(left)
                t.words_before += len(reader.words(originals[0]) & words)
            else:
                t.cleans += 1
                if reason is not None:
                    t.clean_quarantined += 1
                elif out.PixelData != ds.PixelData:
                    t.clean_changed += 1
    for kind, t in tallies.items():
        files = t.texts + t.cleans
        print(f"  {label:22s} {kind:18s} text {t.texts}: redacted {t.redacted} ({100 * t.redacted / max(t.texts, 1):5.1f}%), "
              f"text left {t.text_left}, other quarantine {t.other_quarantine}, missed {t.missed}; drawn words read "
              f"after redaction {t.residual_words} in {t.residual_images} images (read before: {t.words_before}; in "
              f"missed images: {t.missed_words}); clean "
              f"{t.cleans}: changed {t.clean_changed}, quarantined {t.clean_quarantined}; CPU "
              f"{1e3 * t.cpu / max(files, 1):6.1f} ms/file", flush=True)
    return tallies


def redaction_run(per_type: int, syntaxes: int) -> None:
    """Photographs and report screens first (each type printed as it is done), then the other transfer
    syntaxes, then OCT volumes (the slowest: the independent OCR reads each of 16 frames twice)."""
    print(f"# redaction: on_text redact for every type, {per_type} text + {per_type} clean files of each type, "
          f"Explicit VR Little Endian", flush=True)
    made = {}
    for kind in ("photograph", "secondary_capture"):
        made[kind] = [(kind, text, seed, MAKERS[kind](seed, text)) for text in (True, False) for seed in range(per_type)]
        measure_redaction(made[kind], "Explicit VR LE")
    if syntaxes:
        from pydicom.uid import JPEGBaseline8Bit

        for name, syntax in (("RLE Lossless", "rle"), ("JPEG 2000 Lossless", "j2k"), ("JPEG-LS Lossless", "jls"),
                             ("JPEG Baseline", JPEGBaseline8Bit)):
            chosen = [(k, t, s, _encode(d, syntax)) for kind in made for k, t, s, d in made[kind] if s < syntaxes]
            measure_redaction(chosen, name)
    measure_redaction([("oct", text, seed, MAKERS["oct"](seed, text)) for text in (True, False)
                       for seed in range(per_type)], "Explicit VR LE")


# --- issue 44: text in fonts and places the check was never tuned on ----------------------------------------

HALVES = {"tuning": TUNING, "held-out": HELD_OUT}
FIRST_SEED = {"tuning": 0, "held-out": 100_000}  # the halves' files never share a seed (nor a clean image)
MAKERS_44 = {"photograph": photograph, "oct": volume, "secondary_capture": report_screen}
TODAY = {"photograph": (98.0, 0.0), "oct": (97.0, 0.0), "secondary_capture": (97.7, 0.7)}  # the old sets, issue 34
TODAY_OCT_MS = 20.7  # the old OCT set's check, CPU ms a file (issue 34)


class OrientedOCR(WholeFrameOCR):
    """The independent reader, also turned a quarter each way for text drawn up or down (plain Tesseract cannot
    read it otherwise: the turns are chosen from what was drawn, so the reader is shown every planted word the
    right way up)."""

    def read(self, frame: np.ndarray, angle: int, where: tuple[int, int, int, int] | None = None) -> set[str]:
        """The words read in `frame`; with `where` (the drawn text's box: top, left, height, width), only those read
        over it (a line's height around it): a planted word exists nowhere else, and Tesseract now and then reads
        a word like NAME in a B-scan's speckle at confidence 0, far from any text (held-out screen 900140, fully
        covered, counted as a word left before this)."""
        rows, cols = frame.shape[:2]
        placed = self.placed(frame)
        if angle:
            turned = self.placed(np.ascontiguousarray(np.rot90(frame, 3 if angle == 90 else 1)))
            for word, (x0, y0, x1, y1) in turned:  # back to the frame's rows and columns
                placed.append((word, (y0, rows - x1, y1, rows - x0) if angle == 90 else (cols - y1, x0, cols - y0, x1)))
        if where is None:
            return {word for word, _ in placed}
        top, left, height, width = where
        pad = max(16, min(height, width))
        return {word for word, (x0, y0, x1, y1) in placed
                if x0 < left + width + pad and x1 > left - pad and y0 < top + height + pad and y1 > top - pad}


@dataclass
class Outcome:
    """What became of one file of the second corpus."""

    drawn: Drawn
    outcome: str  # "published" (pixels as they were), "redacted", or the quarantine reason
    reader: str  # what found the text: "tesseract", "detector", "" (nothing)
    check_cpu: float
    total_cpu: float
    size: int  # bytes of the file
    words_left: int = 0  # planted words the independent reader reads in the published pixels
    words_before: int = 0  # ... and in the file before (the reader reads them)
    seed: int = 0  # the file's seed (`MAKERS_44[kind](seed, ...)` draws it again)

    @property
    def caught(self) -> bool:
        return self.outcome != "published"


def _frames_of(ds: Dataset) -> list[np.ndarray]:
    from pydicom.pixels import convert_color_space

    with quiet():
        array = ds.pixel_array
    if str(ds.get("PhotometricInterpretation", "")).startswith("YBR"):
        array = convert_color_space(array, ds.PhotometricInterpretation, "RGB")
    return [array] if int(ds.get("NumberOfFrames", 1) or 1) == 1 else list(array)


def run_half(kind: str, half: str, per_type: int, detector: PixelTextDetector, reader: OrientedOCR,
             seed_base: int | None = None, texts_only: bool = False) -> list[Outcome]:
    """`per_type` text and `per_type` clean files of one type in the faces of one half, each de-identified by the
    engine with the shipped settings (photographs and report screens redacted, volumes quarantined); the published
    text images read by the independent reader."""
    from imaging.deid import NotDeidentifiable, to_bytes
    from imaging.deid.engine import REDACTED, deidentify_image
    from imaging.pseudonym import Pseudonymizer

    pseudonymizer = Pseudonymizer("benchmark-generalisation-key-" + "c" * 16)
    seen: dict[str, object] = {}
    check = detector.check

    def timed_check(*args, **kwargs):
        started = time.process_time()
        try:
            seen["result"] = check(*args, **kwargs)
            return seen["result"]
        finally:
            seen["cpu"] = time.process_time() - started

    detector.check = timed_check
    out = []
    try:
        for text in (True,) if texts_only else (True, False):
            for i in range(per_type):
                seed = (FIRST_SEED[half] if seed_base is None else seed_base) + i
                drawn = MAKERS_44[kind](seed, text, HALVES[half])
                seen.clear()
                started = time.process_time()
                with quiet():
                    ds = dcmread(io.BytesIO(drawn.data))
                    try:
                        result = deidentify_image(ds, pseudonymizer=pseudonymizer, namespace="NHS", pixel_text=detector)
                        published = dcmread(io.BytesIO(to_bytes(result.dataset)))
                        outcome = "redacted" if result.pixel_text == REDACTED else "published"
                    except NotDeidentifiable as error:
                        published, outcome = None, str(error)
                total = time.process_time() - started
                found = seen.get("result")
                readers = {t.reader for t in found.text} if found is not None and found.found else set()
                record = Outcome(drawn, outcome, "tesseract" if "tesseract" in readers else "detector" if readers else "",
                                 seen.get("cpu", 0.0), total, len(drawn.data), seed=seed)
                if text and published is not None:
                    words = _words(list(drawn.lines))
                    after, before = _frames_of(published), _frames_of(ds)
                    record.words_left = len(set().union(*(reader.read(f, drawn.angle, drawn.where)
                                                          for f in after[:1])) & words) if outcome == "published" else \
                        len(set().union(*(reader.read(f, drawn.angle, drawn.where) for f in after)) & words)
                    record.words_before = len(reader.read(before[0], drawn.angle, drawn.where) & words)
                out.append(record)
    finally:
        del detector.check
    return out


def _described(d: Drawn) -> str:
    return (f"{d.family} {d.style} {d.face} {d.size} px, {d.background}/{d.placement}{', cut ' + d.cut if d.cut else ''}"
            f"{', %d deg' % d.angle if d.angle else ''}, contrast {d.contrast}, "
            f"{'anti-aliased' if d.antialias else 'aliased'}{', JPEG q%d' % d.jpeg if d.jpeg else ''}, "
            f"{d.where[2]}x{d.where[3]} at ({d.where[0]}, {d.where[1]})")


def _bucket(size: int) -> str:
    for low, high in ((8, 11), (12, 15), (16, 23), (24, 35), (36, 48)):
        if size <= high:
            return f"{low}-{high} px"
    return "48+ px"


def report_half(kind: str, half: str, outcomes: list[Outcome]) -> None:
    texts = [o for o in outcomes if o.drawn.has_text]
    cleans = [o for o in outcomes if not o.drawn.has_text]
    caught = sum(o.caught for o in texts)
    redacted = sum(o.outcome == "redacted" for o in texts)
    refused = sum(o.outcome not in ("published", "redacted") for o in cleans)
    changed = sum(o.outcome == "redacted" for o in cleans)
    by_reader = {r: sum(o.reader == r for o in texts if o.caught) for r in ("tesseract", "detector")}
    reasons: dict[str, int] = {}
    for o in texts:
        if o.caught and o.outcome != "redacted":
            reasons[o.outcome] = reasons.get(o.outcome, 0) + 1
    checks = np.array([o.check_cpu for o in outcomes]) * 1e3
    gb = sum(o.size for o in outcomes) / 1e9
    print(f"  {half:8s} {kind:18s} text caught {caught}/{len(texts)} ({100 * caught / max(len(texts), 1):5.1f}%: "
          f"redacted {redacted}, quarantined {dict(sorted(reasons.items()))}; found by Tesseract's tiers "
          f"{by_reader['tesseract']}, by the detector {by_reader['detector']})  clean refused {refused}/{len(cleans)}, "
          f"changed {changed}/{len(cleans)} ({100 * (refused + changed) / max(len(cleans), 1):4.1f}%)", flush=True)
    print(f"  {'':8s} {'':18s} planted words read after by the independent OCR: "
          f"{sum(o.words_left for o in texts if o.outcome == 'redacted')} in redacted images, "
          f"{sum(o.words_left for o in texts if o.outcome == 'published')} in missed ones (read before: "
          f"{sum(o.words_before for o in texts if o.outcome in ('redacted', 'published'))}); check CPU median "
          f"{np.median(checks):6.1f} ms, mean {checks.mean():6.1f} ms a file (text {np.mean([o.check_cpu for o in texts]) * 1e3:.1f}, "
          f"clean {np.mean([o.check_cpu for o in cleans]) * 1e3:.1f}), {checks.sum() / 1e3 / max(gb, 1e-9):6.1f} CPU-s/GB "
          f"of files ({gb * 1e3:.0f} MB); de-identification with it {np.mean([o.total_cpu for o in outcomes]) * 1e3:.1f} ms "
          f"a file", flush=True)
    missed = [o.drawn for o in texts if not o.caught]
    if missed:
        for label, key in (("family", lambda d: d.family), ("size", lambda d: _bucket(d.size)),
                           ("style", lambda d: d.style), ("placement", lambda d: f"{d.background}/{d.placement}"),
                           ("angle", lambda d: str(d.angle)), ("cut", lambda d: d.cut or "whole"),
                           ("contrast", lambda d: "40-69" if d.contrast < 70 else "70+"),
                           ("anti-aliased", lambda d: str(d.antialias)), ("jpeg", lambda d: "q%d" % d.jpeg if d.jpeg else "none")):
            counts: dict[str, int] = {}
            for d in missed:
                counts[key(d)] = counts.get(key(d), 0) + 1
            print(f"  {'':8s} {'':18s} missed by {label}: {dict(sorted(counts.items(), key=lambda kv: -kv[1]))}")
        for o in texts:
            if not o.caught:
                print(f"  {'':8s} {'':18s}   missed: seed {o.seed}, {_described(o.drawn)}")
    for o in texts:  # a word still legible after redaction is a leak: named so it can be drawn again and traced
        if o.outcome == "redacted" and o.words_left:
            print(f"  {'':8s} {'':18s}   {o.words_left} word(s) read after redaction: seed {o.seed}, {_described(o.drawn)}")


def tier_lines(stats) -> str:
    return (f"frames {stats.frames_checked}: {stats.frames_without_candidates} without candidates, {stats.frames_ocr} "
            f"Tesseract reads ({stats.tesseract_seconds:.1f} s); the detector on {stats.frames_detector} frames "
            f"(text in {stats.frames_detector_text}; {stats.candidate_pages} pages of candidates; found only turned "
            f"{stats.turned_text}, only enlarged {stats.zoomed_text}) and "
            f"{stats.still_detector} volumes' still pixels (text in {stats.still_detector_text}), "
            f"{stats.mean_detector} volumes' means (text in {stats.mean_detector_text}), "
            f"{stats.stillness_detector} volumes' stillness (text in {stats.stillness_detector_text}); faint "
            f"{stats.faint_text}, chroma {stats.chroma_text}, tall candidates refused {stats.tall_candidates_refused}: "
            f"{stats.detector_seconds:.1f} s; the whole check {stats.ocr_seconds:.1f} s; second readings "
            f"{stats.frames_verified}")


def generalisation_run(per_type: int, half: str, types: tuple[str, ...], old_per_type: int,
                       seed_base: int | None = None, overrides: tuple[str, ...] = (), texts_only: bool = False) -> None:
    families = HALVES[half]
    if half == "held-out" and seed_base is not None and seed_base < 100_000:
        raise SystemExit("--seed-base: 100000 or more for the held-out half (seeds below are the tuning half's)")
    print(f"# issue 44: {per_type} text + {per_type} clean files of each type drawn in the {half} half's font families "
          f"(the check is tuned on the tuning half only); engine with platform/pixel_text.yaml, photographs and report "
          f"screens redacted, volumes quarantined; CPU = this process's; seeds from "
          f"{FIRST_SEED[half] if seed_base is None else seed_base}", flush=True)
    print(f"  tuning half:   {', '.join(TUNING)}")
    print(f"  held-out half: {', '.join(HELD_OUT)}")
    missing = missing_packages(TUNING + HELD_OUT)
    if missing:
        print(f"  MISSING font packages (their faces are left out): {', '.join(missing)}")
    faces = font_faces(families)
    print(f"  {half} faces drawn ({len(faces)} files): " + ", ".join(
        sorted({str(FONT_ROOT / f.path) if f.path else "Pillow's Aileron" for f in faces})), flush=True)
    spec = yaml.safe_load((ROOT / "platform" / "pixel_text.yaml").read_text())
    for override in overrides:  # top-level settings changed for this run (a before / after comparison)
        key, _, value = override.partition("=")
        spec[key] = yaml.safe_load(value)
    if overrides:
        print(f"  settings changed for this run: {', '.join(overrides)}")
    shipped = load_pixel_text_settings(spec)
    reader = OrientedOCR()
    started = time.perf_counter()
    with PixelTextDetector(shipped) as detector:
        for kind in types if per_type else ():  # --per-type 0: the old sets only
            before = replace(detector.stats)
            outcomes = run_half(kind, half, per_type, detector, reader, seed_base, texts_only)
            report_half(kind, half, outcomes)
            after = detector.stats
            delta = type(after)(**{f.name: getattr(after, f.name) - getattr(before, f.name) for f in fields(after)})
            print(f"  {'':8s} {'':18s} tiers: {tier_lines(delta)}", flush=True)
        print(f"# {half}: wall time {time.perf_counter() - started:.0f} s", flush=True)
        if old_per_type:
            print(f"# the old sets ({old_per_type} text + {old_per_type} clean of each type run, DejaVu and Aileron; the "
                  f"check alone; today: photographs 98.0/0.0, OCT 97.0/0.0, report screens 97.7/0.7, OCT "
                  f"{TODAY_OCT_MS} ms a file)", flush=True)
            samples = generate(old_per_type, types)
            before = replace(detector.stats)
            tallies = measure("shipped", lambda ds: detector.check(ds, ds.file_meta.TransferSyntaxUID).found, samples)
            after = detector.stats
            delta = type(after)(**{f.name: getattr(after, f.name) - getattr(before, f.name) for f in fields(after)})
            print(f"            tiers: {tier_lines(delta)}")
            for kind, t in tallies.items():
                caught, refused = 100 * t.caught / max(t.texts, 1), 100 * t.refused / max(t.cleans, 1)
                print(f"  old set {kind:18s} caught {caught:5.1f}% (today {TODAY[kind][0]}), clean refused {refused:4.1f}% "
                      f"(today {TODAY[kind][1]}): {'no worse' if caught >= TODAY[kind][0] and refused <= TODAY[kind][1] else 'WORSE'}")
    print(f"# wall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-type", type=int, default=300,
                        help="text images and clean images of each type (issue 44's run: 0, the old sets only)")
    parser.add_argument("--half", choices=tuple(HALVES), default="held-out",
                        help="the font families drawn (issue 44's run): tune on 'tuning', report 'held-out' only")
    parser.add_argument("--types", default=",".join(TYPES), help="issue 44's run: the image types, comma-separated")
    parser.add_argument("--old-per-type", type=int, default=300,
                        help="issue 44's run: also the old sets, this many text and clean files of each type (0: not)")
    parser.add_argument("--seed-base", type=int, default=None,
                        help="issue 44's run: the first seed (default: the half's, tuning 0, held-out 100000); a fresh "
                             "range (e.g. 300000) gives held-out files never looked at while tuning")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="issue 44's run: a top-level setting of platform/pixel_text.yaml changed for this run "
                             "(e.g. --set detector_zoom=1 --set detector_turned=false: the screen before its last looks)")
    parser.add_argument("--tiers", action="store_true",
                        help="the old sets only: the tiers against whole frames and a one-pass loop (issues 21, 34)")
    parser.add_argument("--no-old", action="store_true", help="skip the old detector (quicker iterations)")
    parser.add_argument("--texts-only", action="store_true",
                        help="issue 44's run: the text files only (what is caught, redacted and read after; no clean rate)")
    parser.add_argument("--omp-probe", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--redact", action="store_true", help="measure redaction (on_text: redact) instead")
    parser.add_argument("--syntaxes", type=int, default=0,
                        help="with --redact: also the first N text and clean photographs and screens in other syntaxes")
    args = parser.parse_args()
    if args.omp_probe:
        omp_probe(args.omp_probe)
        return
    if args.redact:
        started = time.perf_counter()
        redaction_run(args.per_type, args.syntaxes)
        print(f"# wall time {time.perf_counter() - started:.0f} s")
        return
    if not args.tiers:
        generalisation_run(args.per_type, args.half, tuple(args.types.split(",")), args.old_per_type, args.seed_base,
                           tuple(args.set), args.texts_only)
        return
    started = time.perf_counter()
    samples = generate(args.per_type)
    print(f"# {args.per_type} text + {args.per_type} clean files of each type ({len(samples)} files, generated "
          f"in {time.perf_counter() - started:.0f} s); fonts: {len(available_fonts())}; "
          f"settings: platform/pixel_text.yaml; CPU = dcmread + check, this process", flush=True)
    # "new": the file's candidates screening for every type; "old": whole frames for every type; "shipped":
    # per type, the method the file names for it (one of the two, so composed from their tallies).
    shipped = load_pixel_text_settings(yaml.safe_load((ROOT / "platform" / "pixel_text.yaml").read_text()))
    with PixelTextDetector(shipped.everywhere("candidates")) as detector:
        new = measure("new", lambda ds: detector.check(ds, ds.file_meta.TransferSyntaxUID).found, samples)
        s = detector.stats
        print(f"            frames {s.frames_checked}: {s.frames_without_candidates} without candidates, "
              f"{s.frames_ocr} read by Tesseract ({s.frames_whole} whole), {s.frames_cached} from the cache; "
              f"Tesseract {s.tesseract_seconds:.1f} s of {s.ocr_seconds:.1f} s", flush=True)
    loop = OnePassLoop(PixelTextSettings())
    base = measure("one-pass", loop.check, samples)
    if not args.no_old:
        with PixelTextDetector(shipped.everywhere("whole_frame")) as whole:
            old = measure("old", lambda ds: whole.check(ds, ds.file_meta.TransferSyntaxUID).found, samples)
        for kind in TYPES:
            method = shipped.for_type(TYPE_NAMES[kind]).screening
            t = (new if method == "candidates" else old)[kind]
            print(f"  shipped   {kind:18s} {method:11s} caught {100 * t.caught / max(t.texts, 1):5.1f}%  clean refused "
                  f"{100 * t.refused / max(t.cleans, 1):4.1f}%  CPU {1e3 * t.cpu / max(t.texts + t.cleans, 1):6.1f} ms/file")
    print("# ratios (CPU per file, same run)")
    for kind in TYPES:
        line = f"  {kind:18s} new / one-pass loop {new[kind].cpu / max(base[kind].cpu, 1e-9):.3f}"
        if not args.no_old:
            line += f"   new / old {new[kind].cpu / max(old[kind].cpu, 1e-9):.3f}"
        print(line)
    totals = [sum(t.cpu for t in r.values()) for r in (new, base)]
    print(f"  {'all':18s} new / one-pass loop {totals[0] / totals[1]:.3f}")
    probe = 40 if args.per_type >= 100 else 10
    env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
    unset = subprocess.run([sys.executable, __file__, "--omp-probe", str(probe)], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    one = subprocess.run([sys.executable, __file__, "--omp-probe", str(probe)], env={**env, "OMP_THREAD_LIMIT": "1"},
                         capture_output=True, text=True, check=True).stdout.strip()
    print(f"# one-pass loop on {probe} OCT files, CPU ms/file: OMP_THREAD_LIMIT unset {unset}, =1 {one}")
    print(f"# wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
