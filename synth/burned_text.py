"""Fundus photographs with a patient's name and a date burned into the pixels, and clean ones.

Fundus cameras and report screens draw the patient's name, id and the visit date into the
image and still set Burned In Annotation to NO. These generate such files (the flag says
NO whatever the pixels show) and clean ones (flag NO, or no flag at all), to measure how
well a burned-in text check finds the text and how often it cries wolf on clean retinas.

Everything is derived from the seed: the same seed gives the same bytes. Two corpora:

- The first (`fundus_with_text`, `bscan_with_text`; the 300 + 300 sets of benchmarks/text_screening.py): text in
  DejaVu Sans, Serif, Mono, Condensed, Bold, Oblique and Pillow's built-in Aileron, a 40th to a 15th of the image
  width, in the black corners, on the top and bottom edges or across the retina, white, yellow, green, grey on
  black, light or dark on the retina. The text check was tuned on it: it flatters it.
- The second (`photograph`, `volume`, `report_screen`, issue 44): every Latin font family the Debian font
  packages of `FAMILIES` install (regular, bold, italic, oblique, condensed, light; two bitmap families as
  devices' on-screen displays use), 8-48 px, shades from white down to 40 grey levels from the background under
  the text, on the black field, the retina or the bright optic disc, lines cut by any edge, vertical text (90
  and 270 degrees), anti-aliased or not, a third of the files JPEG-compressed at quality 75-95. A caller picks
  the families (a benchmark tunes on some and measures on the others: `TUNING`, `HELD_OUT`).
"""

from __future__ import annotations

import datetime as dt
import io
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from pydicom.dataset import Dataset

from synth.dicom import OP_SOP_CLASS, OPT_SOP_CLASS, encode_part10
from synth.people import FORENAMES, SURNAMES

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


# --- the second corpus (issue 44): every font family the Debian font packages install ------------------------

FONT_ROOT = Path("/usr/share/fonts")
# Families by design lineage, each with its Debian package and its faces: (style, file under FONT_ROOT, pixel size
# of a bitmap face, 0 for outlines). Left out: URW's D050000L and Standard Symbols PS (dingbats and symbols, no
# letters), DejaVu Math TeX Gyre (a maths face), the Noto families of other scripts (no Latin letters).
_RBIB = (("regular", "Regular"), ("bold", "Bold"), ("italic", "Italic"), ("bold italic", "BoldItalic"))
_OBLIQUE = (("regular", ""), ("bold", "Bold"), ("oblique", "Oblique"), ("bold oblique", "BoldOblique"))
FAMILIES: dict[str, tuple[str, tuple[tuple[str, str, int], ...]]] = {
    "DejaVu Sans": ("fonts-dejavu-core, fonts-dejavu-extra", tuple(
        (style, f"truetype/dejavu/DejaVuSans{name}.ttf", 0) for style, name in (
            ("regular", ""), ("bold", "-Bold"), ("oblique", "-Oblique"), ("bold oblique", "-BoldOblique"),
            ("light", "-ExtraLight"), ("condensed", "Condensed"), ("condensed bold", "Condensed-Bold"),
            ("condensed oblique", "Condensed-Oblique"), ("condensed bold oblique", "Condensed-BoldOblique")))),
    "DejaVu Serif": ("fonts-dejavu-core, fonts-dejavu-extra", tuple(
        (style, f"truetype/dejavu/DejaVuSerif{name}.ttf", 0) for style, name in (
            ("regular", ""), ("bold", "-Bold"), ("italic", "-Italic"), ("bold italic", "-BoldItalic"),
            ("condensed", "Condensed"), ("condensed bold", "Condensed-Bold"), ("condensed italic", "Condensed-Italic"),
            ("condensed bold italic", "Condensed-BoldItalic")))),
    "DejaVu Sans Mono": ("fonts-dejavu-core, fonts-dejavu-extra", tuple(
        (style, f"truetype/dejavu/DejaVuSansMono{name}.ttf", 0) for style, name in (
            ("regular", ""), ("bold", "-Bold"), ("oblique", "-Oblique"), ("bold oblique", "-BoldOblique")))),
    "Aileron": ("Pillow (built in)", (("regular", "", 0),)),
    **{f"Liberation {kind}": ("fonts-liberation2", tuple(
        (style, f"truetype/liberation2/Liberation{kind}-{name}.ttf", 0) for style, name in _RBIB))
       for kind in ("Sans", "Serif", "Mono")},
    **{family: ("fonts-croscore", tuple((style, f"truetype/croscore/{family}-{name}.ttf", 0) for style, name in _RBIB))
       for family in ("Arimo", "Tinos", "Cousine")},
    **{f"Noto {kind}": ("fonts-noto-core", tuple(
        (style, f"truetype/noto/Noto{kind.replace(' ', '')}-{name}.ttf", 0) for style, name in _RBIB))
       for kind in ("Sans", "Serif", "Sans Display", "Serif Display")},
    "Terminus": ("fonts-terminus", (("regular", "truetype/terminus/TerminusTTF-4.46.0.ttf", 0),)),
    "Schumacher Clean": ("xfonts-base", tuple((style, f"X11/misc/{name}.pcf.gz", pixels) for style, name, pixels in (
        ("regular", "clR6x12", 12), ("regular", "clR7x14", 14), ("regular", "clR8x16", 16), ("bold", "clB6x12", 12),
        ("bold", "clB8x14", 14), ("bold", "clB8x16", 16), ("italic", "clI6x12", 12)))),
    "FreeSans": ("fonts-freefont-ttf", tuple((style, f"truetype/freefont/FreeSans{name}.ttf", 0) for style, name in _OBLIQUE)),
    "FreeSerif": ("fonts-freefont-ttf", tuple(
        (style, f"truetype/freefont/FreeSerif{name}.ttf", 0) for style, name in (
            ("regular", ""), ("bold", "Bold"), ("italic", "Italic"), ("bold italic", "BoldItalic")))),
    "FreeMono": ("fonts-freefont-ttf", tuple((style, f"truetype/freefont/FreeMono{name}.ttf", 0) for style, name in _OBLIQUE)),
    "Nimbus Sans": ("fonts-urw-base35", tuple(
        (style, f"opentype/urw-base35/NimbusSans-{name}.otf", 0) for style, name in (
            ("regular", "Regular"), ("bold", "Bold"), ("oblique", "Italic"), ("bold oblique", "BoldItalic")))),
    "Nimbus Sans Narrow": ("fonts-urw-base35", tuple(
        (style, f"opentype/urw-base35/NimbusSansNarrow-{name}.otf", 0) for style, name in (
            ("condensed", "Regular"), ("condensed bold", "Bold"), ("condensed oblique", "Oblique"),
            ("condensed bold oblique", "BoldOblique")))),
    "Nimbus Roman": ("fonts-urw-base35", tuple(
        (style, f"opentype/urw-base35/NimbusRoman-{name}.otf", 0) for style, name in _RBIB)),
    "Nimbus Mono PS": ("fonts-urw-base35", tuple(
        (style, f"opentype/urw-base35/NimbusMonoPS-{name}.otf", 0) for style, name in (
            ("regular", "Regular"), ("bold", "Bold"), ("oblique", "Italic"), ("bold oblique", "BoldItalic")))),
    "C059": ("fonts-urw-base35", tuple((style, f"opentype/urw-base35/C059-{name}.otf", 0) for style, name in (
        ("regular", "Roman"), ("bold", "Bold"), ("italic", "Italic"), ("bold italic", "BdIta")))),
    "P052": ("fonts-urw-base35", tuple((style, f"opentype/urw-base35/P052-{name}.otf", 0) for style, name in (
        ("regular", "Roman"), ("bold", "Bold"), ("italic", "Italic"), ("bold italic", "BoldItalic")))),
    "URW Bookman": ("fonts-urw-base35", tuple((style, f"opentype/urw-base35/URWBookman-{name}.otf", 0) for style, name in (
        ("light", "Light"), ("bold", "Demi"), ("italic", "LightItalic"), ("bold italic", "DemiItalic")))),
    "URW Gothic": ("fonts-urw-base35", tuple((style, f"opentype/urw-base35/URWGothic-{name}.otf", 0) for style, name in (
        ("regular", "Book"), ("bold", "Demi"), ("oblique", "BookOblique"), ("bold oblique", "DemiOblique")))),
    "Z003": ("fonts-urw-base35", (("italic", "opentype/urw-base35/Z003-MediumItalic.otf", 0),)),
    # Script faces (three Debian packages): handwriting-like joined letters; Kristi's lower case is small and narrow.
    "Dancing Script": ("fonts-dancingscript", tuple(
        (style, f"opentype/dancingscript/DancingScript-{name}.otf", 0) for style, name in (
            ("regular", "Regular"), ("bold", "Bold")))),
    "Kaushan Script": ("fonts-kaushanscript", (("regular", "opentype/kaushanscript/KaushanScript-Regular.otf", 0),)),
    "Kristi": ("fonts-kristi", (("regular", "truetype/kristi/Kristi.ttf", 0),)),
    "Misc Fixed": ("xfonts-base", tuple((style, f"X11/misc/{name}.pcf.gz", pixels) for style, name, pixels in (
        ("regular", "6x10", 10), ("regular", "6x13", 13), ("bold", "6x13B", 13), ("oblique", "6x13O", 13),
        ("regular", "7x14", 14), ("bold", "7x14B", 14), ("regular", "8x13", 13), ("oblique", "8x13O", 13),
        ("regular", "9x15", 15), ("bold", "9x15B", 15), ("regular", "9x18", 18), ("bold", "9x18B", 18),
        ("regular", "10x20", 20)))),
}
# The split of benchmarks/text_screening.py, fixed: the text check is tuned on TUNING and measured on HELD_OUT
# only. By lineage, so that no held-out face is a clone of a tuned one (Arimo, Tinos and Cousine are Liberation's
# designs; FreeFont grew from URW's Nimbus faces): the faces the first corpus had (DejaVu, Aileron), Liberation
# and its croscore twins, Noto, Terminus and Schumacher Clean to tune on; URW's 35 and their FreeFont offspring
# and the X11 Misc Fixed bitmaps held out. Three script families joined the tuning half at stop 57, after the
# held-out half's one script face (Z003) was the face of every miss of two held-out runs: a face like it to tune on,
# Z003 itself still held out.
TUNING = ("DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono", "Aileron", "Liberation Sans", "Liberation Serif",
          "Liberation Mono", "Arimo", "Tinos", "Cousine", "Noto Sans", "Noto Serif", "Noto Sans Display",
          "Noto Serif Display", "Terminus", "Schumacher Clean", "Dancing Script", "Kaushan Script", "Kristi")
HELD_OUT = ("Nimbus Sans", "Nimbus Sans Narrow", "Nimbus Roman", "Nimbus Mono PS", "C059", "P052", "URW Bookman",
            "URW Gothic", "Z003", "FreeSans", "FreeSerif", "FreeMono", "Misc Fixed")


@dataclass(frozen=True)
class Face:
    """One font file of a family: its style, its file (under FONT_ROOT; "" for Pillow's Aileron) and, for a bitmap
    face, the one pixel size it has (0: an outline face, any size)."""

    family: str
    style: str
    path: str
    pixels: int = 0


def font_faces(families: tuple[str, ...] | None = None) -> list[Face]:
    """The faces of `families` (every family of FAMILIES when None) whose files are installed here."""
    out = []
    for family in families or tuple(FAMILIES):
        for style, path, pixels in FAMILIES[family][1]:
            if not path or (FONT_ROOT / path).is_file():
                out.append(Face(family, style, path, pixels))
    return out


def missing_packages(families: tuple[str, ...]) -> list[str]:
    """The Debian packages to install for every face of `families` to be drawn."""
    wanted = {face for family in families for face in FAMILIES[family][1]}
    have = {(f.style, f.path, f.pixels) for f in font_faces(families)}
    return sorted({package.strip() for family in families for package in FAMILIES[family][0].split(",")
                   if any(face not in have for face in FAMILIES[family][1] if face in wanted)})


@lru_cache(maxsize=512)
def _face_font(face: Face, size: int):
    if not face.path:
        return ImageFont.load_default(size=size)
    return ImageFont.truetype(str(FONT_ROOT / face.path), face.pixels or size)


def text_mask(lines: list[str], face: Face, size: int, antialias: bool = True) -> tuple[np.ndarray, int]:
    """The lines drawn white on black (an alpha mask cropped to the ink) and the size drawn: a bitmap face is drawn
    at its own size and enlarged by a whole factor, pixel by pixel, as a device's display enlarges it."""
    font = _face_font(face, size)
    spacing = max(2, (face.pixels or size) // 4)
    text = "\n".join(lines)
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    left, top, right, bottom = probe.multiline_textbbox((0, 0), text, font=font, spacing=spacing)
    image = Image.new("L", (right - left + 8, bottom - top + 8), 0)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "L" if antialias and not face.pixels else "1"
    draw.multiline_text((4 - left, 4 - top), text, font=font, fill=255, spacing=spacing)
    drawn = size
    if face.pixels:
        factor = max(1, round(size / face.pixels))
        drawn = face.pixels * factor
        if factor > 1:
            image = image.resize((image.width * factor, image.height * factor), Image.NEAREST)
    mask = np.asarray(image)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not rows.size:
        return np.zeros((1, 1), dtype=np.uint8), drawn
    return np.ascontiguousarray(mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]), drawn


@dataclass(frozen=True)
class Drawn:
    """One file of the second corpus and what was drawn into it (empty strings and 0 when clean)."""

    kind: str  # "photograph", "oct", "secondary_capture"
    has_text: bool
    data: bytes
    lines: tuple[str, ...] = ()  # the text drawn: for the benchmark's report only, never a real person
    family: str = ""
    style: str = ""
    face: str = ""  # the font file
    size: int = 0  # pixels (a bitmap face: its size times its enlargement)
    angle: int = 0  # 0, 90 (reads bottom to top) or 270 (top to bottom)
    antialias: bool = True
    background: str = ""  # photographs: black, fundus, disc; volumes: vitreous, retina, choroid; screens: dark, light, panel
    placement: str = ""  # corner, edge, middle, margin (vertical), ...
    cut: str = ""  # the edge the text runs off, "" when whole
    contrast: int = 0  # grey levels between the text and the median of the background under it
    jpeg: int = 0  # JPEG quality, 0 when the pixels are not JPEG-compressed
    where: tuple[int, int, int, int] = (0, 0, 0, 0)  # the drawn text's box in the image (top, left, height, width)


def _identifiers(rng: random.Random) -> list[str]:
    """A name, a birth date, a hospital number, in one to three lines, as devices and report screens write them."""
    sex = rng.choice("FM")
    family, given = rng.choice(SURNAMES), rng.choice(FORENAMES[sex])
    born = dt.date(1930, 1, 1) + dt.timedelta(days=rng.randrange(80 * 365))
    number = rng.choice((f"H{rng.randrange(10**6):06d}", f"999{rng.randrange(10**7):07d}",
                         f"{rng.randrange(10**3):03d} {rng.randrange(10**3):03d} {rng.randrange(10**4):04d}"))
    name = rng.choice((f"{family.upper()}^{given.upper()}", f"{family.upper()}, {given}", f"{given} {family}",
                       f"Name: {family}, {given}"))
    date = rng.choice((born.isoformat(), born.strftime("%d/%m/%Y"), born.strftime("%d %b %Y"), born.strftime("%d-%b-%Y")))
    parts = [name, f"DOB {date}", rng.choice(("MRN ", "ID: ", "Hosp No ", "")) + number]
    layout = rng.random()
    if layout < 0.4:
        return ["  ".join(parts)]
    if layout < 0.7:
        return [parts[0], "  ".join(parts[1:])]
    return parts


def _shade(local: float, rng: random.Random, contrasts: tuple[int, int] | None = None) -> tuple[int, int]:
    """A grey level for text on a background of median `local`: 40 grey levels off it at the least (a third of the
    time 40-70: low contrast), or always within `contrasts` when given; lighter where there is room, else darker.
    Returns (level, contrast)."""
    if contrasts is not None:
        contrast = rng.randint(*contrasts)
    else:
        contrast = rng.randint(40, 70) if rng.random() < 0.35 else rng.randint(70, 255)
    if local + contrast <= 255 and (local - contrast < 0 or rng.random() < 0.7):
        return int(local + contrast), contrast
    if local - contrast >= 0:
        return int(local - contrast), contrast
    light, dark = 255 - local, local
    return (255, int(light)) if light >= dark else (0, int(dark))


def _stamp(pixels: np.ndarray, mask: np.ndarray, top: int, left: int, colour) -> None:
    """`mask` drawn into `pixels` (grey or RGB, in place) in `colour` at (top, left), clipped at every edge."""
    rows, cols = pixels.shape[:2]
    t, lf = max(0, top), max(0, left)
    b, r = min(rows, top + mask.shape[0]), min(cols, left + mask.shape[1])
    if b <= t or r <= lf:
        return
    alpha = mask[t - top:b - top, lf - left:r - left].astype(np.float32) / 255.0
    region = pixels[t:b, lf:r].astype(np.float32)
    ink = np.asarray(colour, dtype=np.float32)
    if pixels.ndim == 3:
        alpha = alpha[..., None]
    pixels[t:b, lf:r] = np.clip(region * (1 - alpha) + ink * alpha + 0.5, 0, 255).astype(np.uint8)


def _cut_offset(rng: random.Random, extent: int, along: bool) -> int:
    """How far past an edge a line's start is put: 15-45% of its length (`along`: the edge cuts words off its
    end), or 15-35% of its height (the edge cuts through its letters)."""
    return int(extent * (rng.uniform(0.15, 0.45) if along else rng.uniform(0.15, 0.35)))


def _place(rng: random.Random, shape: tuple[int, int], mask: np.ndarray, anchor: tuple[int, int], cut: str,
           vertical: bool) -> tuple[int, int]:
    """Top-left of a label of `mask`'s shape near `anchor` (its top-left wanted), inside the image unless `cut`
    names the edge it runs off."""
    rows, cols = shape
    h, w = mask.shape
    top = min(max(0, anchor[0]), max(0, rows - h))
    left = min(max(0, anchor[1]), max(0, cols - w))
    if cut == "left":
        left = -_cut_offset(rng, w, not vertical)
    elif cut == "right":
        left = cols - w + _cut_offset(rng, w, not vertical)
    elif cut == "top":
        top = -_cut_offset(rng, h, vertical)
    elif cut == "bottom":
        top = rows - h + _cut_offset(rng, h, vertical)
    return top, left


def _label(rng: random.Random, faces: list[Face], sizes: tuple[int, int]):
    """A face (a family first, then one of its faces), the lines, a size, anti-aliasing, an angle; the mask."""
    family = rng.choice(sorted({f.family for f in faces}))
    face = rng.choice([f for f in faces if f.family == family])
    lines = _identifiers(rng)
    low, high = sizes
    size = int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
    antialias = rng.random() < 0.7
    angle = rng.choice((90, 270)) if rng.random() < 0.2 else 0
    if angle:
        lines = lines[:1] if len(lines[0]) > 12 else lines[:2]
    mask, drawn = text_mask(lines, face, size, antialias)
    if angle:
        mask = np.ascontiguousarray(np.rot90(mask, 1 if angle == 90 else 3))
    return face, lines, drawn, antialias, angle, mask


def _fits(mask: np.ndarray, shape: tuple[int, int], share: float = 0.95) -> bool:
    return mask.shape[0] <= shape[0] * share and mask.shape[1] <= shape[1] * share


def _jpeg(rng: random.Random) -> int:
    return rng.randint(75, 95) if rng.random() < 0.35 else 0


def _compressed(pixels: np.ndarray, quality: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _encode(ds: Dataset, frames: list[np.ndarray], quality: int) -> bytes:
    """Part 10 bytes of `ds` with `frames` as its pixel data: uncompressed, or JPEG Baseline at `quality`."""
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit

    if not quality:
        ds.add_new(0x7FE00010, "OB", b"".join(np.ascontiguousarray(f).tobytes() for f in frames))
        return encode_part10(ds)
    ds.add_new(0x7FE00010, "OB", encapsulate([_compressed(f, quality) for f in frames]))
    if ds.SamplesPerPixel == 3:
        ds.PhotometricInterpretation = "YBR_FULL_422"
    ds.LossyImageCompression, ds.LossyImageCompressionRatio, ds.LossyImageCompressionMethod = "01", "10", "ISO_10918_1"
    data = encode_part10(ds)  # Explicit VR Little Endian, then the file meta says JPEG Baseline
    from pydicom import dcmread

    out = dcmread(io.BytesIO(data))
    out.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    out["PixelData"].is_undefined_length = True
    buffer = io.BytesIO()
    out.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue()


def _header(seed: int, sop_class: str, modality: str, shape: tuple[int, ...], frames: int) -> Dataset:
    ds = Dataset()
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, f"{UID_PREFIX}{4 * 10**30 + seed}"
    ds.StudyInstanceUID, ds.SeriesInstanceUID = f"{UID_PREFIX}{5 * 10**30 + seed}", f"{UID_PREFIX}{6 * 10**30 + seed}"
    ds.PatientName, ds.PatientID = "BURNEDTEXT^SYNTHETIC", f"999{seed % 10**7:07d}"
    ds.StudyDate, ds.StudyTime, ds.Modality = "20240301", "101500", modality
    ds.BurnedInAnnotation = "NO"
    ds.Rows, ds.Columns = shape[0], shape[1]
    colour = len(shape) == 3
    ds.SamplesPerPixel, ds.PhotometricInterpretation = (3, "RGB") if colour else (1, "MONOCHROME2")
    if colour:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.NumberOfFrames = frames
    return ds


def disc_centre(shape: tuple[int, int], seed: int) -> tuple[int, int]:
    """Where `fundus(shape, seed)` puts the optic disc (row, column): its first two draws."""
    rng = np.random.default_rng(seed)
    x = (0.4 if seed % 2 else -0.4) + float(np.float32(rng.uniform(-0.08, 0.08)))
    y = float(np.float32(rng.uniform(-0.1, 0.1)))
    rows, cols = shape
    return int((y + 1) / 2 * (rows - 1)), int((x + 1) / 2 * (cols - 1))


PHOTOGRAPH_SHAPES = ((512, 512), (768, 1024))
EDGES = ("left", "right", "top", "bottom")


def photograph(seed: int, text: bool, families: tuple[str, ...] | None = None, sizes: tuple[int, int] = (8, 48),
               contrasts: tuple[int, int] | None = None) -> Drawn:
    """A fundus photograph (512 x 512 or 768 x 1024, Ophthalmic Photography 8 Bit, flagged NO) with a name, a birth
    date and a hospital number drawn in one of the faces of `families`, or clean (`text` False). `sizes` and
    `contrasts` narrow the draw to a corner of it (e.g. (8, 11) and (40, 55): the small faint lines a screen
    misses first)."""
    rng = random.Random(f"photograph-44:{seed}:{text}")
    shape = rng.choice(PHOTOGRAPH_SHAPES)
    pixels = fundus(shape, seed + (3_000_000 if text else 4_000_000))
    fields = {}
    if text:
        rows, cols = shape
        while True:
            face, lines, size, antialias, angle, mask = _label(rng, font_faces(families), sizes)
            if _fits(mask, shape):
                break
        background = rng.choice(("black", "fundus", "disc"))
        h, w = mask.shape
        margin = rng.randrange(2, max(3, cols // 40))
        if background == "black":  # the dark corners outside the camera's field
            placement = rng.choice(("top-left", "top-right", "bottom-left", "bottom-right"))
            anchor = (margin if placement.startswith("top") else rows - h - margin,
                      margin if placement.endswith("left") else cols - w - margin)
        elif background == "disc":
            placement = "over the optic disc"
            cy, cx = disc_centre(shape, seed + 3_000_000)
            anchor = (cy - h // 2 + rng.randrange(-h // 3 - 1, h // 3 + 1), cx - w // 2 + rng.randrange(-w // 4 - 1, w // 4 + 1))
        else:
            placement = "across the retina"
            anchor = (rng.randrange(rows // 6, max(rows // 6 + 1, rows * 5 // 6 - h)),
                      rng.randrange(cols // 8, max(cols // 8 + 1, cols * 7 // 8 - w)))
        if angle and background == "black":
            placement = "margin"
            anchor = (rng.randrange(0, max(1, rows - h)), margin if rng.random() < 0.5 else cols - w - margin)
        cut = rng.choice(EDGES) if rng.random() < 0.2 else ""
        top, left = _place(rng, shape, mask, anchor, cut, bool(angle))
        under = _under(_luminance(pixels), mask, top, left)
        level, contrast = _shade(float(np.median(under)) if under.size else 0.0, rng, contrasts)
        tint = rng.choice(((1.0, 1.0, 1.0), (1.0, 1.0, 0.45), (0.6, 1.0, 0.6), (1.0, 0.9, 0.7)))
        colour = _tinted(level, tint)
        _stamp(pixels, mask, top, left, colour)
        fields = dict(lines=tuple(lines), family=face.family, style=face.style, face=Path(face.path).name or "Aileron",
                      size=size, angle=angle, antialias=antialias, background=background, placement=placement,
                      cut=cut, contrast=contrast, where=_where(pixels.shape, mask, top, left))
    quality = _jpeg(rng)
    ds = _header(seed, OP_SOP_CLASS, "OP", pixels.shape, 1)
    return Drawn("photograph", text, _encode(ds, [pixels], quality), jpeg=quality, **fields)


def _under(luminance: np.ndarray, mask: np.ndarray, top: int, left: int) -> np.ndarray:
    """The background's values under the visible ink of `mask` put at (top, left)."""
    rows, cols = luminance.shape
    t, lf = max(0, top), max(0, left)
    b, r = min(rows, top + mask.shape[0]), min(cols, left + mask.shape[1])
    if b <= t or r <= lf:
        return np.zeros(0, dtype=np.float32)
    return luminance[t:b, lf:r][mask[t - top:b - top, lf - left:r - left] > 0]


def _where(shape: tuple[int, ...], mask: np.ndarray, top: int, left: int) -> tuple[int, int, int, int]:
    """The box of `mask` put at (top, left), clipped to an image of `shape`."""
    t, lf = max(0, top), max(0, left)
    b, r = min(shape[0], top + mask.shape[0]), min(shape[1], left + mask.shape[1])
    return t, lf, max(0, b - t), max(0, r - lf)


def _luminance(pixels: np.ndarray) -> np.ndarray:
    if pixels.ndim == 2:
        return pixels.astype(np.float32)
    return pixels[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)


def _tinted(level: int, tint: tuple[float, float, float]) -> tuple[int, int, int]:
    """A colour of luminance `level` (as near as 8 bits allow) in the hue of `tint`."""
    weight = 0.299 * tint[0] + 0.587 * tint[1] + 0.114 * tint[2]
    scale = level / weight
    colour = [min(255.0, c * scale) for c in tint]
    short = level - (0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2])
    if short > 0.5:  # a bright tint clipped at 255: grey makes up the rest
        colour = [min(255.0, c + short) for c in colour]
    return tuple(int(round(c)) for c in colour)


VOLUME_SHAPES = ((256, 256), (496, 512))
VOLUME_FRAMES = 16


def volume(seed: int, text: bool, families: tuple[str, ...] | None = None) -> Drawn:
    """An OCT volume (16 speckled B-scans, 256 x 256 or 496 x 512) with the same label drawn on every B-scan, as a
    device overlays it (still pixels), in one of the faces of `families`, or clean."""
    from synth.pixels import oct_volume

    rng = random.Random(f"volume-44:{seed}:{text}")
    shape = rng.choice(VOLUME_SHAPES)
    frames = oct_volume((VOLUME_FRAMES, *shape), seed + (5_000_000 if text else 6_000_000))
    fields = {}
    if text:
        rows, cols = shape
        high = 24 if rows <= 256 else 48
        while True:
            face, lines, size, antialias, angle, mask = _label(rng, font_faces(families), (8, high))
            if _fits(mask, shape, 0.9):
                break
        h, w = mask.shape
        margin = rng.randrange(2, 10)
        if angle:
            placement, background = "margin", "retina"
            anchor = (rng.randrange(0, max(1, rows - h)), margin if rng.random() < 0.5 else cols - w - margin)
        else:
            background = rng.choice(("vitreous", "vitreous", "retina", "choroid"))
            placement = rng.choice(("left", "right", "middle"))
            left = {"left": margin, "right": cols - w - margin}.get(placement, (cols - w) // 2)
            top = {"vitreous": margin, "retina": int(rows * 0.45) - h // 2, "choroid": rows - h - margin}[background]
            anchor = (top, left)
        cut = rng.choice(EDGES) if rng.random() < 0.2 else ""
        top, left = _place(rng, shape, mask, anchor, cut, bool(angle))
        under = _under(frames.mean(axis=0), mask, top, left)
        level, contrast = _shade(float(np.median(under)) if under.size else 0.0, rng)
        for frame in frames:
            _stamp(frame, mask, top, left, level)
        fields = dict(lines=tuple(lines), family=face.family, style=face.style, face=Path(face.path).name or "Aileron",
                      size=size, angle=angle, antialias=antialias, background=background, placement=placement,
                      cut=cut, contrast=contrast, where=_where(shape, mask, top, left))
    quality = _jpeg(rng)
    ds = _header(seed, OPT_SOP_CLASS, "OPT", shape, VOLUME_FRAMES)
    return Drawn("oct", text, _encode(ds, list(frames), quality), jpeg=quality, **fields)


def labelled_volume(seed: int, face: Face, size: int, contrast: int, at: tuple[float, float] = (0.45, 0.5),
                    lines: tuple[str, ...] = ("DOE^JANE  DOB 1954-05-14", "MRN H100004  OD"),
                    shape: tuple[int, int] = (256, 256), count: int = VOLUME_FRAMES) -> Drawn:
    """An OCT volume (`count` speckled B-scans, 16 by default) with one anti-aliased label drawn as asked, for a test
    that needs one hard case rather than the corpus's mix: `face` at `size` px, `contrast` grey levels lighter than
    the median under it, its centre at `at` (fractions of the rows and columns: the default is on the retina); no
    `lines`: the same volume clean."""
    from synth.pixels import oct_volume

    frames = oct_volume((count, *shape), seed + 7_000_000)
    ds = _header(seed, OPT_SOP_CLASS, "OPT", shape, count)
    if not lines:  # the same volume clean
        return Drawn("oct", False, _encode(ds, list(frames), 0))
    mask, drawn = text_mask(list(lines), face, size, True)
    top, left = int(shape[0] * at[0]) - mask.shape[0] // 2, int(shape[1] * at[1]) - mask.shape[1] // 2
    under = _under(frames.mean(axis=0), mask, top, left)
    level = min(255, int(np.median(under)) + contrast)
    for frame in frames:
        _stamp(frame, mask, top, left, level)
    return Drawn("oct", True, _encode(ds, list(frames), 0), lines=tuple(lines), family=face.family, style=face.style,
                 face=Path(face.path).name, size=drawn, background="retina", placement="middle", contrast=contrast,
                 where=_where(shape, mask, top, left))


def screen_background(seed: int, margin: int = 0) -> tuple[Image.Image, random.Random, bool]:
    """A report screen without text: panels, thumbnails, a thickness map, a plot, grid lines (RGB, 768 x 1024 or
    600 x 800, light or dark), the panels `margin` pixels in from each side; the random source it drew from, and
    whether it is dark."""
    from synth.pixels import oct_volume

    rng = random.Random(f"screen:{seed}")
    rows, cols = rng.choice(((768, 1024), (600, 800)))
    dark = rng.random() < 0.35
    background = rng.choice(((18, 18, 24), (35, 35, 35))) if dark else rng.choice(((255, 255, 255), (236, 236, 236)))
    image = Image.new("RGB", (cols, rows), background)
    draw = ImageDraw.Draw(image)
    line = (120, 120, 120) if dark else (160, 160, 170)
    panel = (cols - 2 * margin) // 3
    m = margin
    for x in range(3):  # three panels with borders
        draw.rectangle((m + x * panel + 8, 70, m + (x + 1) * panel - 8, rows - 90), outline=line, width=2)
    thumb = fundus((panel - 40, panel - 40), seed)
    image.paste(Image.fromarray(thumb), (m + 20, 90))
    scan = oct_volume((1, 160, panel - 40), seed)[0]
    image.paste(Image.fromarray(scan).convert("RGB"), (m + panel + 20, 90))
    yy, xx = np.mgrid[0:140, 0:panel - 40]
    thickness = (np.sin(xx / 17.0 + seed) + np.cos(yy / 23.0)) * 0.25 + 0.5
    heat = np.stack([thickness * 255, (1 - abs(thickness - 0.5) * 2) * 255, (1 - thickness) * 255], axis=-1)
    image.paste(Image.fromarray(heat.astype(np.uint8)), (m + 2 * panel + 20, 90))
    top = 260 if rows > 700 else 240
    for i in range(6):  # grid of the plot
        y = top + i * 30
        draw.line((m + 2 * panel + 20, y, m + 3 * panel - 20, y), fill=line, width=1)
    points = [(m + 2 * panel + 20 + i * 12, top + 75 + int(40 * np.sin(i / 3 + seed))) for i in range((panel - 40) // 12)]
    draw.line(points, fill=(220, 60, 60) if not dark else (255, 200, 0), width=2)
    draw.rectangle((m + panel + 20, 270, m + panel + 20 + rng.randrange(60, panel - 60), 290), fill=(80, 140, 220))
    return image, rng, dark


def report_screen(seed: int, text: bool, families: tuple[str, ...] | None = None) -> Drawn:
    """A secondary capture of a report screen (`screen_background`; grey or colour; a margin of 16-64 px beside
    the panels) with the patient's identifiers drawn in one of the faces of `families`: in the header, the
    footer, the right-hand corner, over the fundus thumbnail, or up a margin; or clean."""
    rng = random.Random(f"screen-44:{seed}:{text}")
    margin = rng.randrange(16, 64)  # a margin each side of the panels (where vertical labels go)
    image, _, dark = screen_background(seed + (7_000_000 if text else 8_000_000), margin)
    pixels = np.array(image)
    fields = {}
    if text:
        rows, cols = pixels.shape[:2]
        while True:
            face, lines, size, antialias, angle, mask = _label(rng, font_faces(families), (8, 48))
            if _fits(mask, (rows, cols // 2 if not angle else cols)):
                break
        h, w = mask.shape
        if angle:  # up a margin: in the band left of the panels (over their border when wider than the band)
            placement = "margin"
            x = rng.randrange(2, max(3, margin - w)) if margin > w + 2 else 2
            anchor = (rng.randrange(60, max(61, rows - h - 60)), rng.choice((x, cols - w - x)))
        else:
            placement = rng.choice(("header", "footer", "right", "panel"))
            anchor = {"header": (rng.randrange(4, 30), rng.randrange(8, 40)),
                      "footer": (rows - h - rng.randrange(4, 40), rng.randrange(8, 40)),
                      "right": (rng.randrange(4, 30), cols - w - rng.randrange(8, 40)),
                      "panel": (rng.randrange(95, 140), margin + 24)}[placement]
        cut = rng.choice(EDGES) if rng.random() < 0.2 else ""
        top, left = _place(rng, (rows, cols), mask, anchor, cut, bool(angle))
        under = _under(_luminance(pixels), mask, top, left)
        level, contrast = _shade(float(np.median(under)) if under.size else 0.0, rng)
        tint = rng.choice(((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), (0.3, 0.45, 1.0), (1.0, 1.0, 0.45)))
        _stamp(pixels, mask, top, left, _tinted(level, tint))
        fields = dict(lines=tuple(lines), family=face.family, style=face.style, face=Path(face.path).name or "Aileron",
                      size=size, angle=angle, antialias=antialias, background="panel" if placement == "panel" else
                      "dark" if dark else "light", placement=placement, cut=cut, contrast=contrast,
                      where=_where(pixels.shape, mask, top, left))
    if rng.random() < 0.4:
        pixels = np.asarray(Image.fromarray(pixels).convert("L"))
    quality = _jpeg(rng)
    ds = _header(seed, SECONDARY_CAPTURE, "OT", pixels.shape, 1)
    return Drawn("secondary_capture", text, _encode(ds, [pixels], quality), jpeg=quality, **fields)


SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"
MAKERS = {"photograph": photograph, "oct": volume, "secondary_capture": report_screen}
