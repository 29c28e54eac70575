"""Fundus photographs with a patient's name and a date burned into the pixels, and clean ones.

Fundus cameras and report screens draw the patient's name, id and the visit date into the
image and still set Burned In Annotation to NO. These generate such files (the flag says
NO whatever the pixels show) and clean ones (flag NO, or no flag at all), to measure how
well a burned-in text check finds the text and how often it cries wolf on clean retinas.

Everything is derived from the seed: the same seed gives the same bytes. Text varies in
font (DejaVu Sans, Serif, Mono, Condensed, Bold, Oblique, and Pillow's built-in Aileron),
size (from about a 40th to a 15th of the image width), position (the black corners, the
top and bottom edges, across the retina) and contrast (white, yellow, green, dim grey on
black; light or dark on the retina).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from pydicom.dataset import Dataset

from synth.dicom import OP_SOP_CLASS, encode_part10
from synth.people import FORENAMES, SURNAMES
from functools import lru_cache

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")  # Debian fonts-dejavu-core (see .ci/run)
FONT_FILES = (
    "DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSansCondensed.ttf",
    "DejaVuSans-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSans-Oblique.ttf",
)
BUILTIN = "Aileron (Pillow built-in)"
POSITIONS = ("top-left", "top-right", "bottom-left", "bottom-right", "top", "bottom", "retina")
# (text colour, name): on the black corners/edges of the camera field.
ON_BLACK = (((255, 255, 255), "white"), ((255, 230, 0), "yellow"), ((0, 220, 0), "green"),
            ((110, 110, 110), "dim grey"), ((170, 170, 170), "grey"))
# On the orange retina itself.
ON_RETINA = (((255, 255, 255), "white"), ((20, 20, 20), "black"), ((255, 255, 120), "pale yellow"))
UID_PREFIX = "2.25."


@dataclass(frozen=True)
class BurnedTextImage:
    """One generated fundus photograph (as Part 10 bytes) and what was drawn into it."""

    data: bytes
    has_text: bool
    text: str  # the lines drawn ("" when clean); for the test report only, never a real person
    font: str
    size: int  # font size in pixels
    position: str
    contrast: str
    flag: str | None  # BurnedInAnnotation as written: "NO" or None (absent)


@lru_cache(maxsize=4)
def _grid(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[-1.0 : 1.0 : rows * 1j, -1.0 : 1.0 : cols * 1j]
    return yy.astype(np.float32), xx.astype(np.float32)


def fundus(shape: tuple[int, int], seed: int) -> np.ndarray:
    """A colour fundus (rows, cols, RGB) like synth.pixels.fundus_photo, varied by the seed.

    Float32 and cached grids (several times faster, for the hundreds of images a rate needs);
    the seed moves the optic disc, bends the vessel arcades, and changes the brightness, so
    no two clean images are the same picture.
    """
    rows, cols = shape
    rng = np.random.default_rng(seed)
    yy, xx = _grid(rows, cols)
    r2 = xx**2 + yy**2
    disc_x = (0.4 if seed % 2 else -0.4) + np.float32(rng.uniform(-0.08, 0.08))
    disc_y = np.float32(rng.uniform(-0.1, 0.1))
    shade = np.clip(1.0 - 0.5 * r2, 0, 1) * np.float32(rng.uniform(0.75, 1.1))
    rgb = shade[..., None] * np.array([200, 85, 35], dtype=np.float32)
    rgb *= (1 - 0.35 * np.exp(-r2 / 0.02))[..., None]  # macula
    disc = np.exp(-((xx - disc_x) ** 2 + (yy - disc_y) ** 2) / 0.008)[..., None]
    rgb += disc * np.array([55.0, 150.0, 90.0], dtype=np.float32)
    for bend in (1.2, -1.2, 0.6, -0.6):
        bend *= np.float32(rng.uniform(0.8, 1.25))
        curve = 0.5 * bend * (xx - disc_x) ** 2 + 0.03 * np.sign(bend) + disc_y
        vessel = np.abs(yy - curve) < 0.012 + 0.01 * np.exp(-np.abs(xx - disc_x))
        rgb[vessel] *= np.array([0.65, 0.45, 0.45], dtype=np.float32)
    rgb += rng.standard_normal(rgb.shape, dtype=np.float32) * 3.0
    rgb[r2 > 0.97**2] = 0  # outside the camera's circular field
    return np.clip(rgb, 0, 255).astype(np.uint8)


def available_fonts() -> list[str]:
    """Font names usable here: the DejaVu files that exist, and Pillow's built-in font."""
    return [name for name in FONT_FILES if (FONT_DIR / name).is_file()] + [BUILTIN]


def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    if name == BUILTIN:
        return ImageFont.load_default(size=size)
    return ImageFont.truetype(str(FONT_DIR / name), size)


def _lines(rng: random.Random) -> list[str]:
    """A name and a date (and sometimes an id), in the layouts devices use."""
    sex = rng.choice("FM")
    family, given = rng.choice(SURNAMES), rng.choice(FORENAMES[sex])
    day = dt.date(2015, 1, 1) + dt.timedelta(days=rng.randrange(3650))
    name = rng.choice((f"{family.upper()}, {given}", f"{given} {family}", f"{family.upper()}^{given.upper()}",
                       f"Name: {given} {family}"))
    date = rng.choice((day.strftime("%d/%m/%Y"), day.isoformat(), day.strftime("%d %b %Y"),
                       day.strftime("%d-%b-%Y %H:%M").replace("00:00", f"{rng.randrange(8, 18):02d}:{rng.randrange(60):02d}")))
    lines = [name, date]
    if rng.random() < 0.4:
        lines.append(f"ID: 999{rng.randrange(10**7):07d}")
    if rng.random() < 0.3:
        lines.reverse()
    return lines


def _draw(pixels: np.ndarray, lines: list[str], rng: random.Random, fonts: list[str]):
    """Draw the lines; returns (pixels, font, size, position, contrast)."""
    rows, cols = pixels.shape[:2]
    image = Image.fromarray(pixels)
    draw = ImageDraw.Draw(image)
    font_name = rng.choice(fonts)
    size = max(10, int(cols * rng.uniform(1 / 40, 1 / 15)))
    font = _font(font_name, size)
    position = rng.choice(POSITIONS)
    colour, contrast = rng.choice(ON_RETINA if position == "retina" else ON_BLACK)
    text = "\n".join(lines)
    box = draw.multiline_textbbox((0, 0), text, font=font, spacing=size // 4)
    width, height = box[2] - box[0], box[3] - box[1]
    margin = max(4, cols // 64)
    left = {"top-left": margin, "bottom-left": margin, "top-right": cols - width - margin,
            "bottom-right": cols - width - margin}.get(position, (cols - width) // 2)
    top = {"top-left": margin, "top-right": margin, "top": margin}.get(
        position, rows - height - margin if position != "retina" else rows // 2 + rng.randrange(-rows // 6, rows // 6))
    if position in ("top", "bottom"):  # a single banner line across the edge
        text = "   ".join(lines)
        box = draw.textbbox((0, 0), text, font=font)
        left = max(margin, (cols - (box[2] - box[0])) // 2)
        top = margin if position == "top" else rows - (box[3] - box[1]) - 2 * margin
    draw.multiline_text((max(0, left), max(0, top)), text, font=font, fill=colour, spacing=size // 4)
    return np.asarray(image), font_name, size, position, contrast


def _dataset(pixels: np.ndarray, seed: int, flag: str | None) -> Dataset:
    """A minimal Ophthalmic Photography 8 Bit file around the pixels (what the engine needs)."""
    rows, cols = pixels.shape[:2]
    ds = Dataset()
    uid = lambda kind: f"{UID_PREFIX}{(seed * 1_000_003 + kind) % 10**30 + 10**30}"  # noqa: E731
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.SOPClassUID = OP_SOP_CLASS
    ds.SOPInstanceUID = uid(1)
    ds.StudyInstanceUID = uid(2)
    ds.SeriesInstanceUID = uid(3)
    ds.PatientName = "BURNEDTEXT^SYNTHETIC"
    ds.PatientID = f"999{seed % 10**7:07d}"
    ds.StudyDate, ds.StudyTime = "20240301", "101500"
    ds.Modality = "OP"
    ds.ImageLaterality = "R" if seed % 2 else "L"
    if flag is not None:
        ds.BurnedInAnnotation = flag
    ds.Rows, ds.Columns = rows, cols
    ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "RGB", 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.NumberOfFrames = 1
    ds.add_new(0x7FE00010, "OB", pixels.tobytes())
    return ds


def fundus_with_text(seed: int, shape: tuple[int, int] = (512, 512), flag: str | None = "NO") -> BurnedTextImage:
    """A fundus photograph with a name and a date drawn in; flagged NO as devices do."""
    rng = random.Random(f"burned-text:{seed}")
    pixels = fundus(shape, seed)
    lines = _lines(rng)
    drawn, font, size, position, contrast = _draw(pixels, lines, rng, available_fonts())
    data = encode_part10(_dataset(np.ascontiguousarray(drawn), seed, flag))
    return BurnedTextImage(data, True, "\n".join(lines), font, size, position, contrast, flag)


def clean_fundus(seed: int, shape: tuple[int, int] = (512, 512)) -> BurnedTextImage:
    """A fundus photograph with nothing drawn in: flagged NO (even seeds) or with no flag (odd)."""
    flag = "NO" if seed % 2 == 0 else None
    pixels = fundus(shape, seed + 1_000_000)  # never the background of a text image
    return BurnedTextImage(encode_part10(_dataset(pixels, seed, flag)), False, "", "", 0, "", "", flag)


def bscan_with_text(seed: int, shape: tuple[int, int] = (496, 512)) -> np.ndarray:
    """One 8-bit OCT B-scan (synth.pixels) with a name and a date drawn in, as the photographs get them.

    For measuring the burned-in text check on volumes: the same fonts, sizes (relative to the width),
    positions and colours as `fundus_with_text`, the colours taken as grey levels.
    """
    from synth.pixels import oct_volume

    rng = random.Random(f"bscan-text:{seed}")
    grey = oct_volume((1, *shape), seed)[0]
    drawn, *_ = _draw(np.stack([grey] * 3, axis=-1), _lines(rng), rng, available_fonts())
    return np.asarray(Image.fromarray(np.ascontiguousarray(drawn)).convert("L"))


def clean_bscan(seed: int, shape: tuple[int, int] = (496, 512)) -> np.ndarray:
    """One 8-bit OCT B-scan with nothing drawn in (never the background of a text B-scan)."""
    from synth.pixels import oct_volume

    return oct_volume((1, *shape), seed + 1_000_000)[0]
