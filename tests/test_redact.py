"""Burned-in text redacted (`on_text: redact`): covered on every frame that carries it, proven gone by a second
whole-frame reading, declared, and written without losing what need not be lost (imaging/deid/redact.py).

Real parts: generated photographs, report screens and volumes with names and dates drawn in (synth), Tesseract,
pydicom's and the pylibjpeg packages' codecs. The residual check reads each published frame whole with plain
Tesseract (tesserocr here, not the detector's code) and looks for the words that were drawn.
"""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pydicom
import pytest
from PIL import Image
from pydicom.uid import (JPEG2000, ExplicitVRLittleEndian, JPEG2000Lossless, JPEGBaseline8Bit, JPEGLSLossless,
                         RLELossless)

from imaging.deid import NotDeidentifiable, PixelTextDetector, load_pixel_text_settings, quiet, to_bytes
from imaging.deid.engine import CLEAN, NOT_READ, REDACTED, deidentify_image
from imaging.deid.pixel_text import find_tessdata
from imaging.deid.redact import TEXT_LEFT, fill_value
from imaging.driver.config import read_yaml
from imaging.pseudonym import Pseudonymizer
from synth.burned_text import _draw, _lines, available_fonts, clean_fundus, fundus_with_text
from synth.dicom import OPT_SOP_CLASS, encode_part10
from synth.pixels import oct_volume

KEY = "redaction-test-key-" + "r" * 24


@pytest.fixture(scope="module")
def redacting():
    settings = load_pixel_text_settings(read_yaml("pixel_text.yaml")).with_on_text("redact")
    with PixelTextDetector(settings) as detector:
        yield detector


@pytest.fixture(scope="module")
def plain_ocr():
    """An independent reader: plain Tesseract on the whole frame at 1x and 2x, global Otsu."""
    import tesserocr

    api = tesserocr.PyTessBaseAPI(path=find_tessdata(), lang="eng", psm=tesserocr.PSM.SPARSE_TEXT)

    def words(grey: np.ndarray) -> set[str]:
        found = set()
        for factor in (1, 2):
            image = Image.fromarray(grey)
            if factor > 1:
                image = image.resize((image.width * factor, image.height * factor))
            api.SetImage(image)
            found |= {w.strip(".,:;^").upper() for w in (api.GetUTF8Text() or "").split() if len(w) >= 3}
        return found

    yield words
    api.End()


def _drawn(text: str) -> set[str]:
    return {w.strip(".,:;^").upper() for w in text.replace("^", " ").split() if len(w.strip(".,:;^")) >= 3}


def _grey(array: np.ndarray) -> np.ndarray:
    if array.ndim == 3:
        return np.asarray(Image.fromarray(array.astype(np.uint8)).convert("L"))
    return array.astype(np.uint8)


def _run(data: bytes, detector):
    with quiet():
        ds = pydicom.dcmread(io.BytesIO(data))
    result = deidentify_image(ds, pseudonymizer=Pseudonymizer(KEY), namespace="NHS", pixel_text=detector)
    with quiet():
        out = pydicom.dcmread(io.BytesIO(to_bytes(result.dataset)))
    return ds, result, out


def _covered_mask(regions: str, frame: int, shape) -> np.ndarray:
    mask = np.zeros(shape[:2], dtype=bool)
    for region in json.loads(regions):
        if any(a <= frame + 1 <= b for a, b in region["frames"]):
            for top, left, height, width in region["boxes"]:
                mask[top:top + height, left:left + width] = True
    return mask


def test_a_photograph_is_published_with_its_text_covered_and_read_again_clean(redacting, plain_ocr):
    published = 0
    for seed in range(6):
        image = fundus_with_text(seed)
        try:
            ds, result, out = _run(image.data, redacting)
        except NotDeidentifiable as reason:
            assert str(reason) == TEXT_LEFT  # never published with a word left
            continue
        published += 1
        assert result.pixel_text == REDACTED
        before, after = ds.pixel_array, out.pixel_array
        mask = _covered_mask(result.redaction.regions(), 0, before.shape)
        assert mask.any()
        assert np.array_equal(before[~mask], after[~mask])  # every other pixel untouched
        assert (after[mask] == 0).all()  # a solid fill: nothing of what was below
        assert out.BurnedInAnnotation == "NO"
        codes = [item.CodeValue for item in out.DeidentificationMethodCodeSequence]
        assert codes[:2] == ["113100", "113101"]
        assert any(line.startswith("Burned-in text covered") for line in out.DeidentificationMethod)
        assert out.file_meta.TransferSyntaxUID == ds.file_meta.TransferSyntaxUID  # uncompressed stays so
        residual = plain_ocr(_grey(after)) & _drawn(image.text)
        assert not residual, f"seed {seed}: {len(residual)} drawn words still read"
    assert published >= 5


def test_clean_images_are_published_byte_identical_in_their_pixels(redacting):
    for seed in range(4):
        ds, result, out = _run(clean_fundus(seed).data, redacting)
        assert result.pixel_text == CLEAN and result.redaction is None
        assert out.PixelData == ds.PixelData
        assert [item.CodeValue for item in out.DeidentificationMethodCodeSequence][1] != "113101"


def test_quarantine_stays_the_default():
    settings = load_pixel_text_settings({})
    assert settings.on_text == "quarantine"
    assert all(settings.on_text_for(t) == "quarantine" for t in ("photograph", "multi_frame", "secondary_capture"))
    shipped = load_pixel_text_settings(read_yaml("pixel_text.yaml"))
    assert [shipped.on_text_for(t) for t in ("photograph", "multi_frame", "secondary_capture", "default")] == \
        ["redact", "quarantine", "redact", "quarantine"]
    with PixelTextDetector(settings) as detector:
        with pytest.raises(NotDeidentifiable, match="^text in pixel data$"):
            _run(fundus_with_text(0).data, detector)


def _volume(frames_with_text: range, frames: int = 12, seed: int = 3) -> tuple[bytes, list[str]]:
    volume = oct_volume((frames, 256, 256), seed)
    rng0 = random.Random(f"label:{seed}")
    lines = _lines(rng0)
    for index in frames_with_text:
        rng = random.Random(f"label:{seed}")
        _lines(rng)
        rgb = np.stack([volume[index]] * 3, axis=-1)
        drawn, *_ = _draw(rgb, lines, rng, available_fonts()[:1])
        volume[index] = np.asarray(Image.fromarray(np.ascontiguousarray(drawn)).convert("L"))
    ds = pydicom.Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID, ds.PatientID, ds.Modality = OPT_SOP_CLASS, "2.25.77", "9990000001", "OPT"
    ds.Rows, ds.Columns, ds.NumberOfFrames, ds.SamplesPerPixel = 256, 256, frames, 1
    ds.PhotometricInterpretation, ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = \
        "MONOCHROME2", 8, 8, 7, 0
    ds.BurnedInAnnotation = "NO"
    ds.add_new(0x7FE00010, "OB", volume.tobytes())
    return encode_part10(ds), lines


def test_a_volume_is_redacted_on_exactly_the_frames_that_carry_its_label(redacting):
    data, _ = _volume(range(2, 9))
    settings = load_pixel_text_settings(read_yaml("pixel_text.yaml")).with_on_text("redact")
    with PixelTextDetector(settings) as detector:
        ds, result, out = _run(data, detector)
    assert result.pixel_text == REDACTED
    changed = [i for i in range(12) if not np.array_equal(ds.pixel_array[i], out.pixel_array[i])]
    assert changed == list(range(2, 9))  # the unsampled ones among them too; the others untouched


def _encoded(data: bytes, syntax) -> bytes:
    with quiet():
        ds = pydicom.dcmread(io.BytesIO(data))
    kwargs = {"j2k_cr": [20]} if syntax == JPEG2000 else {}
    if syntax == JPEGBaseline8Bit:  # no JPEG encoder is locked: Pillow writes the lossy JPEG the test needs
        buffer = io.BytesIO()
        Image.fromarray(ds.pixel_array).save(buffer, format="JPEG", quality=95)
        from pydicom.encaps import encapsulate

        ds.PixelData = encapsulate([buffer.getvalue()])
        ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
        ds.PhotometricInterpretation = "YBR_FULL_422"
        ds["PixelData"].VR = "OB"
    else:
        ds.compress(syntax, encoding_plugin="", **kwargs)
    buffer = io.BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue()


@pytest.mark.parametrize("syntax, written, lossy", [
    (RLELossless, RLELossless, False),
    (JPEG2000Lossless, JPEG2000Lossless, False),
    (JPEGLSLossless, JPEGLSLossless, False),
    (JPEG2000, JPEG2000, True),  # a reversible codestream is one of JPEG 2000's forms: nothing lost again
    (JPEGBaseline8Bit, ExplicitVRLittleEndian, True),  # never recompressed lossily
])
def test_compressed_images_are_rewritten_losslessly(redacting, plain_ocr, syntax, written, lossy):
    for seed in range(4):
        image = fundus_with_text(seed)
        try:
            ds, result, out = _run(_encoded(image.data, syntax), redacting)
            break
        except NotDeidentifiable as reason:
            assert str(reason) == TEXT_LEFT
    else:
        pytest.fail("no photograph redacted")
    assert result.pixel_text == REDACTED
    assert out.file_meta.TransferSyntaxUID == written
    before, after = ds.pixel_array, out.pixel_array  # both as RGB
    mask = _covered_mask(result.redaction.regions(), 0, before.shape)
    if syntax == JPEGBaseline8Bit:
        assert out.PhotometricInterpretation == "RGB" and out.LossyImageCompression == "01"
        assert any("Explicit VR Little Endian" in line for line in out.DeidentificationMethod)
    assert np.array_equal(before[~mask], after[~mask])  # decoded once, never lossily again
    assert (after[mask] == after[mask].flat[0]).all()
    if syntax == JPEG2000:
        assert out.LossyImageCompression == "01" if "LossyImageCompression" in out else True
    assert not plain_ocr(_grey(after)) & _drawn(image.text)


def test_a_multi_frame_rle_image_passes_its_other_frames_fragments_through(redacting):
    data, _ = _volume(range(0, 3), frames=6)
    with quiet():
        ds = pydicom.dcmread(io.BytesIO(data))
    ds.compress(RLELossless, encoding_plugin="pydicom")
    buffer = io.BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    settings = load_pixel_text_settings(read_yaml("pixel_text.yaml")).with_on_text("redact")
    with PixelTextDetector(settings) as detector:
        source, result, out = _run(buffer.getvalue(), detector)
    from pydicom.encaps import generate_frames

    before = list(generate_frames(source.PixelData, number_of_frames=6))
    after = list(generate_frames(out.PixelData, number_of_frames=6))
    assert out.file_meta.TransferSyntaxUID == RLELossless
    assert [a == b for a, b in zip(before, after)] == [False] * 3 + [True] * 3  # bytes of unredacted frames kept


def test_the_fill_is_black_in_every_encoding():
    assert fill_value("MONOCHROME2", 1, 12, False) == (0,)
    assert fill_value("MONOCHROME1", 1, 12, False) == (4095,)
    assert fill_value("MONOCHROME2", 1, 16, True) == (-32768,)
    assert fill_value("RGB", 3, 8, False) == (0, 0, 0)
    assert fill_value("YBR_FULL", 3, 8, False) == (0, 128, 128)


def test_a_gap_between_covered_words_of_one_line_is_covered_too():
    """`_bridges`: a word neither reader boxed between two covered words of one line ("MRN" on a held-out report
    screen) goes with them; words of other lines, and words farther apart than `BRIDGE` line heights, do not."""
    from imaging.deid.pixel_text import Box
    from imaging.deid.redact import BRIDGE, _bridges

    date, number = Box(135, 229, 16, 29), Box(135, 284, 16, 24)  # "1996" and "678", "MRN" between them
    below = Box(160, 262, 16, 40)  # the next line: overlaps neither's rows by half
    far = Box(135, 308 + BRIDGE * 16 + 1, 16, 30)
    assert _bridges([number, below, date, far]) == [Box(135, 258, 16, 26)]
    up = Box(100, 600, 200, 20)  # a line running up a margin (the detector's) is not bridged across
    assert _bridges([up, Box(150, 640, 16, 40)]) == []


def test_text_left_after_redaction_is_quarantined(redacting, monkeypatch):
    from imaging.deid import redact
    from imaging.deid.pixel_text import Box, FoundText

    monkeypatch.setattr(redact, "leftovers", lambda red, *args: (FoundText(0, (Box(0, 0, 12, 40),)),))
    with pytest.raises(NotDeidentifiable, match="^text left after redaction$"):
        _run(fundus_with_text(1).data, redacting)


def test_images_not_read_say_so(redacting):
    from pydicom.data import get_testdata_file

    with quiet():
        ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    ds.BurnedInAnnotation = "NO"
    ds.PatientID = "x1"
    result = deidentify_image(ds, pseudonymizer=Pseudonymizer(KEY), namespace="NHS", pixel_text=redacting)
    assert result.pixel_text == NOT_READ


@pytest.mark.parametrize("syntax", [None, RLELossless, JPEG2000Lossless, JPEGBaseline8Bit])
def test_a_streamed_redaction_writes_the_bytes_of_one_read_whole(redacting, tmp_path, syntax):
    """The streamed path (header parsed, pixel data left in the file, frames redacted into a spool, the rest
    copied) writes exactly what the file read whole gives."""
    from imaging.deid.part10 import SourceImage, read_whole
    from imaging.deid.writer import write

    data = fundus_with_text(1).data
    data = _encoded(data, syntax) if syntax is not None else data
    path = tmp_path / "in.dcm"
    path.write_bytes(data)
    with quiet():
        whole = deidentify_image(read_whole(data), pseudonymizer=Pseudonymizer(KEY), namespace="NHS",
                                 pixel_text=redacting)
        expected = to_bytes(whole.dataset)
        with SourceImage(str(path)) as image:
            assert image.streamed
            result = deidentify_image(image.header, pseudonymizer=Pseudonymizer(KEY), namespace="NHS",
                                      pixel_text=redacting, streamed=image)
            buffer = io.BytesIO()
            try:
                write(buffer, result.published)
            finally:
                result.close()
    assert whole.pixel_text == result.pixel_text == REDACTED
    assert buffer.getvalue() == expected


@pytest.mark.parametrize("turn", [1, 3])
def test_the_second_reading_reads_a_line_running_up_or_down_in_the_frame_s_pixels(redacting, turn):
    """A redacted frame whose covered text ran up or down is also read turned (`read_again_turned`): a detector region
    can be only a fragment of such a line (issue 44: 84 px of a 670 px line up a photograph's margin, the rest
    published with 4 words readable). The words it reads are boxed where they are in the frame, so what the cover
    took is told from what it left."""
    from synth.burned_text import font_faces, text_mask

    face = next(f for f in font_faces(("DejaVu Sans",)) if f.style == "bold")
    mask, _ = text_mask(["HOSPITAL NUMBER 4471"], face, 24, antialias=False)
    line = np.rot90(mask, turn)  # 1: reads bottom to top, 3: top to bottom
    frame = np.zeros((400, 300), np.uint8)
    top, left = 40, 250
    frame[top:top + line.shape[0], left:left + line.shape[1]] = line
    assert not redacting.read_again(frame)  # upright, Tesseract reads none of it
    boxes = redacting.read_again_turned(frame)
    assert boxes
    for b in boxes:  # every word where the line is, within a few pixels
        assert top - 4 <= b.top and b.top + b.height <= top + line.shape[0] + 4, b
        assert left - 4 <= b.left and b.left + b.width <= left + line.shape[1] + 4, b
