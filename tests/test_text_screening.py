"""The burned-in text check in tiers (imaging/deid/pixel_text.py): cheap candidates, Tesseract on them only,
settings per image type, verdicts kept by pixel hash. Real generated DICOM files and real Tesseract.

The rates over hundreds of files are measured by benchmarks/text_screening.py, not here: these are a few
files of each type, each asserted.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw, ImageFont
from pydicom import dcmread
from pydicom.dataset import Dataset

from imaging.deid import quiet
from imaging.deid.pixel_text import (
    PixelTextDetector, PixelTextSettings, find_candidates, frame_key, image_type, load_pixel_text_settings, to_grey8,
)
from synth.burned_text import FONT_DIR, clean_fundus, fundus, fundus_with_text
from synth.dicom import OPT_SOP_CLASS, encode_part10
from synth.pixels import oct_volume

ROOT = Path(__file__).resolve().parents[1]
SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"
LABEL = ("MARCHBANKS, Ottilie", "ID: 9993141592  12/04/2021")


@pytest.fixture(scope="module")
def settings() -> PixelTextSettings:
    """platform/pixel_text.yaml with the candidates screening for every type (the file reads secondary
    captures in whole frames; its image types' settings are the candidates' all the same)."""
    return load_pixel_text_settings(yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text())).everywhere("candidates")


def test_the_shipped_file_screens_candidates_for_every_type():
    shipped = load_pixel_text_settings(yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text()))
    assert shipped.screening == "candidates"
    assert {shipped.for_type(t).screening for t in ("photograph", "multi_frame", "secondary_capture", "default")} \
        == {"candidates"}
    assert shipped.for_type("multi_frame").overlay and shipped.for_type("photograph").frame_sample == 1
    assert shipped.for_type("secondary_capture").max_side == 2048
    # A type may still be read in whole frames, with the top-level settings that method was measured with.
    screens = _with_screens_whole().for_type("secondary_capture")
    assert screens.screening == "whole_frame" and screens.max_side == shipped.max_side == 4096
    assert screens.thresholding == ("otsu", "adaptive_otsu")
    # Whole frames everywhere: every type the same.
    whole = load_pixel_text_settings({"screening": "whole_frame", "image_types": {"photograph": {"frame_sample": 1}}})
    assert whole.for_type("photograph") == whole.for_type("default")


def _with_screens_whole() -> PixelTextSettings:
    """The shipped file with `screening: whole_frame` under secondary_capture."""
    spec = yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text())
    spec["image_types"]["secondary_capture"]["screening"] = "whole_frame"
    return load_pixel_text_settings(spec)


@pytest.fixture(scope="module")
def detector(settings):
    with PixelTextDetector(settings) as made:
        yield made


def _font(size: int):
    path = FONT_DIR / "DejaVuSans.ttf"
    return ImageFont.truetype(str(path), size) if path.is_file() else ImageFont.load_default(size=size)


def _file(pixels: np.ndarray, sop_class: str, frames: int = 1) -> Dataset:
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, "2.25.77"
    ds.PatientID, ds.Modality = "9990000077", "OT"
    colour = pixels.ndim == (4 if frames > 1 else 3)
    ds.Rows, ds.Columns = pixels.shape[-3:-1] if colour else pixels.shape[-2:]
    ds.SamplesPerPixel, ds.PhotometricInterpretation = (3, "RGB") if colour else (1, "MONOCHROME2")
    if colour:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.NumberOfFrames = frames
    ds.add_new(0x7FE00010, "OB", np.ascontiguousarray(pixels).tobytes())
    with quiet():
        return dcmread(io.BytesIO(encode_part10(ds)))


def _photo(data: bytes) -> Dataset:
    with quiet():
        return dcmread(io.BytesIO(data))


def _volume(seed: int, text: bool, frames: int = 8, shape=(256, 256)) -> Dataset:
    """An OCT volume; with text, a dim grey label on the speckled choroid of every B-scan (a device's overlay)."""
    volume = oct_volume((frames, *shape), seed)
    if text:
        for index in range(frames):
            image = Image.fromarray(volume[index])
            ImageDraw.Draw(image).text((8, shape[0] - 40), "\n".join(LABEL), fill=110, font=_font(13))
            volume[index] = np.asarray(image)
    return _file(volume, OPT_SOP_CLASS, frames)


def _screen(text: bool) -> Dataset:
    """A grey report screen: panels, a B-scan thumbnail, a plot; with text, the patient's identifiers."""
    image = Image.new("L", (800, 600), 236)
    draw = ImageDraw.Draw(image)
    for x in range(3):
        draw.rectangle((x * 266 + 8, 70, (x + 1) * 266 - 8, 510), outline=160, width=2)
    image.paste(Image.fromarray(oct_volume((1, 160, 230), 5)[0]), (20, 90))
    draw.line([(300 + i * 12, 300 + int(40 * np.sin(i / 3))) for i in range(18)], fill=60, width=2)
    if text:
        draw.multiline_text((16, 14), "\n".join(LABEL), fill=40, font=_font(16))
    return _file(np.asarray(image), SECONDARY_CAPTURE)


def _check(detector, ds: Dataset) -> bool:
    return detector.check(ds, ds.file_meta.TransferSyntaxUID).found


def test_each_image_type_reads_with_its_own_settings(settings):
    assert image_type(_photo(clean_fundus(0).data)) == "photograph"
    assert image_type(_volume(1, False, frames=2)) == "multi_frame"
    assert image_type(_screen(False)) == "secondary_capture"
    single = Dataset()
    single.SOPClassUID, single.NumberOfFrames = "1.2.840.10008.5.1.4.1.1.2", 1  # a CT slice: the default
    assert image_type(single) == "default"
    assert settings.for_type("photograph").frame_sample == 1 and settings.for_type("multi_frame").overlay
    assert settings.for_type("default").thresholding == settings.thresholding  # the top-level keys
    assert settings.for_type("secondary_capture").max_side == 2048 and settings.for_type("default").max_side == 4096
    with pytest.raises(ValueError):
        load_pixel_text_settings({"image_types": {"photo": {"frame_sample": 1}}})  # unknown type
    with pytest.raises(ValueError):
        load_pixel_text_settings({"image_types": {"photograph": {"passes": 1}}})  # unknown key


def test_frames_read_follow_the_file_s_type():
    """The same 6-frame pixels read 2 frames as a secondary capture, 5 as OCT: the type's frame_sample."""
    custom = load_pixel_text_settings({"screening": "candidates",
                                       "image_types": {"secondary_capture": {"frame_sample": 2},
                                                       "multi_frame": {"frame_sample": 5}}})
    pixels = oct_volume((6, 64, 96), 11)
    with PixelTextDetector(custom) as made:
        made.check(sc := _file(pixels, SECONDARY_CAPTURE, 6), sc.file_meta.TransferSyntaxUID)
        assert made.stats.frames_checked == 2
        made.check(oct_ := _file(pixels, OPT_SOP_CLASS, 6), oct_.file_meta.TransferSyntaxUID)
        assert made.stats.frames_checked == 2 + 5


def test_text_is_caught_and_clean_images_pass_in_every_type(detector):
    for seed in (0, 1, 2):
        assert _check(detector, _photo(fundus_with_text(seed).data)), seed
        assert not _check(detector, _photo(clean_fundus(seed).data)), seed
    assert _check(detector, _volume(3, True))  # dim label on the speckle: found on the frames' minimum
    assert not _check(detector, _volume(4, False))
    assert _check(detector, _screen(True))
    assert not _check(detector, _screen(False))


def test_clean_photographs_are_cleared_without_tesseract(detector, settings):
    before_ocr, before_clear = detector.stats.frames_ocr, detector.stats.frames_without_candidates
    for seed in (10, 11, 12):
        ds = _photo(clean_fundus(seed).data)
        grey = to_grey8(ds.pixel_array, "RGB")
        assert find_candidates(grey, settings.min_contrast, settings.stroke_max, False, settings.min_crossings) == []
        assert not _check(detector, ds)
    assert detector.stats.frames_ocr == before_ocr  # Tesseract never saw them
    assert detector.stats.frames_without_candidates == before_clear + 3


def test_candidates_cover_the_drawn_text(settings):
    ds = _photo(fundus_with_text(4).data)
    grey = to_grey8(ds.pixel_array, "RGB")
    drawn = np.abs(ds.pixel_array.astype(int) - fundus((512, 512), 4).astype(int)).max(axis=-1) > 40
    boxes = find_candidates(grey, settings.min_contrast, settings.stroke_max, False, settings.min_crossings)
    covered = np.zeros_like(drawn)
    for b in boxes:  # padded as candidate_page pads them: what Tesseract sees
        margin = max(4, b.height // 2)
        top, left = max(0, b.top - margin), max(0, b.left - margin)
        covered[top:b.top + b.height + margin, left:b.left + b.width + margin] = True
    share = (covered & drawn).sum() / drawn.sum()
    # Most of it: a word crossing the edge of the camera field can fall out (here 82%); one word read is enough.
    assert drawn.sum() > 100 and share >= 0.75, share
    assert covered.sum() < 0.25 * grey.size  # and only a small part of the frame is read


def test_a_verdict_is_kept_by_pixel_hash_and_not_read_again(detector):
    ds = _photo(fundus_with_text(5).data)
    assert _check(detector, ds)
    ocr, cached = detector.stats.frames_ocr, detector.stats.frames_cached
    assert _check(detector, _photo(fundus_with_text(5).data))  # the same pixels, a new file
    assert detector.stats.frames_ocr == ocr and detector.stats.frames_cached == cached + 1
    # Identical frames in one volume (blank or repeated B-scans) are read once.
    frame = oct_volume((1, 128, 128), 9)[0]
    volume = _file(np.stack([frame] * 6), OPT_SOP_CLASS, 6)
    before = detector.stats.frames_cached
    assert not _check(detector, volume)
    assert detector.stats.frames_cached - before == 2  # 3 sampled, 1 screened, 2 from the cache


def test_the_cache_key_is_the_pixels_and_the_settings():
    frame = oct_volume((1, 32, 32), 1)[0]
    base = PixelTextSettings()
    key = frame_key(frame, "MONOCHROME2", base)
    assert key == frame_key(frame.copy(), "MONOCHROME2", base)  # stable: could be persisted
    assert key != frame_key(frame, "MONOCHROME1", base)
    other = frame.copy()
    other[0, 0] ^= 1
    assert key != frame_key(other, "MONOCHROME2", base)
    assert key != frame_key(frame, "MONOCHROME2", PixelTextSettings(min_confidence=70.0))
    assert key != frame_key(frame.reshape(16, 64), "MONOCHROME2", base)
    with PixelTextDetector(PixelTextSettings(cache_frames=0)) as uncached:
        ds = _photo(clean_fundus(6).data)
        uncached.check(ds, ds.file_meta.TransferSyntaxUID)
        uncached.check(ds, ds.file_meta.TransferSyntaxUID)
        assert uncached.stats.frames_cached == 0


def _benchmark_volume(seed: int, text: bool) -> Dataset:
    """A 16-frame volume as benchmarks/text_screening.py makes it: the same label on every B-scan."""
    import random

    from synth.burned_text import _draw, _lines, available_fonts

    shape = (256, 256) if seed % 2 else (496, 512)
    volume = oct_volume((16, *shape), seed + (0 if text else 1_000_000))
    if text:
        for index in range(16):
            rng = random.Random(f"oct-text:{seed}")
            drawn, *_ = _draw(np.stack([volume[index]] * 3, axis=-1), _lines(rng), rng, available_fonts())
            volume[index] = np.asarray(Image.fromarray(np.ascontiguousarray(drawn)).convert("L"))
    return _file(volume, OPT_SOP_CLASS, 16)


def test_black_text_beside_the_optic_disc_is_read_the_right_way_up(detector, settings):
    """Black 25 px text on the retina across the optic disc's glow (benchmark photograph 109): the box's
    ring against its min-max middle called the text light and Tesseract read a negative; the screen's ink
    says dark."""
    ds = _photo(fundus_with_text(109).data)
    grey = to_grey8(ds.pixel_array, "RGB")
    boxes = find_candidates(grey, settings.min_contrast, settings.stroke_max, False, settings.min_crossings)
    assert boxes and all(b.polarity == "dark" for b in boxes)
    assert _check(detector, ds)


def test_a_dim_10_px_label_on_a_256_px_volume_is_caught(detector):
    """Benchmark OCT volume 1: 'Rosalind Lumsden 2020-08-01 ID: ...' in 10 px dim grey on the speckled
    choroid of 256 x 256 B-scans, missed at half size; found on the overlay screened at full size."""
    assert _check(detector, _benchmark_volume(1, True))


def test_clean_speckled_volumes_are_cleared_without_tesseract(detector):
    """Clean 16-frame volumes, both sizes: every sampled B-scan is cleared by the screen alone. The overlays
    (min and mean of 8 B-scans) are not even screened: no pixel is the same on every B-scan (the speckled
    layers move), so no candidate of theirs could be read. Tesseract never sees a clean volume."""
    for seed in (1, 2, 3):
        ocr, cleared = detector.stats.frames_ocr, detector.stats.frames_without_candidates
        skipped = detector.stats.overlays_without_still
        assert not _check(detector, _benchmark_volume(seed, False))
        assert detector.stats.frames_without_candidates - cleared >= 3, seed  # the 3 sampled B-scans
        assert detector.stats.overlays_without_still == skipped + 1, seed  # nothing still: overlays unread
        assert detector.stats.frames_ocr == ocr, seed


@pytest.mark.parametrize("seed", [31, 60])
def test_a_label_the_overlays_strokes_miss_is_read_from_what_every_b_scan_shares(detector, seed):
    """Benchmark volumes 31 (a 256 px volume) and 60 (496 x 512): labels across the speckled retina that
    neither overlay lifts into a candidate Tesseract can read (both missed before the still page). Drawn
    alike on every B-scan, they are crisp on the page of still pixels."""
    from imaging.deid.pixel_text import sample_frames, still_pages

    ds = _benchmark_volume(seed, True)
    assert _check(detector, ds)
    greys = [ds.pixel_array[i] for i in sample_frames(16, 8)]
    lowest, highest = np.minimum.reduce(greys), np.maximum.reduce(greys)
    pages = still_pages(lowest, highest, np.mean(greys, axis=0), 256)
    assert any(detector._read(page, ("otsu",)) for page in pages)


def test_still_pixels_are_those_every_frame_shares():
    """A label stamped on speckled frames is still; speckle, and a lone pixel that happens to repeat, are not."""
    from imaging.deid.pixel_text import still_pixels

    rng = np.random.default_rng(5)
    frames = (100 * rng.gamma(4.0, 0.25, size=(8, 64, 64))).clip(0, 255).astype(np.uint8)
    frames[:, 20:24, 10:40] = 230  # a bar drawn alike on every frame
    frames[:, 50, 50] = 7  # one pixel alike by chance
    still = still_pixels(frames.min(axis=0), frames.max(axis=0), frames.mean(axis=0))
    assert still[20:24, 10:40].all()
    assert not still[50, 50]
    assert still.sum() == 4 * 30


def test_each_type_is_read_by_the_method_named_for_it():
    """Report screens named `whole_frame` are read whole (never cleared by the screening alone), photographs
    still by candidates; with the shipped file, a clean report screen is cleared by candidates."""
    with PixelTextDetector(_with_screens_whole()) as made:
        assert _check(made, _screen(True))
        assert not _check(made, _screen(False))
        assert made.stats.frames_without_candidates == 0 and made.stats.frames_whole == made.stats.frames_checked
        assert not _check(made, _photo(clean_fundus(0).data))
        assert made.stats.frames_without_candidates == 1  # the clean photograph: cleared without Tesseract
        assert made.stats.frames_whole == made.stats.frames_checked - 1
    shipped = load_pixel_text_settings(yaml.safe_load((ROOT / "platform/pixel_text.yaml").read_text()))
    with PixelTextDetector(shipped) as made:
        assert _check(made, _screen(True))
        assert not _check(made, _screen(False))
        assert made.stats.frames_whole == 0
