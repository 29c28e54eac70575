"""Every transfer syntax decoded: each real file with pixel data shipped with pydicom and pydicom-data is read by
the text check's frame reader (first and last frame), grouped by transfer syntax, with the locked codecs
(pylibjpeg + libjpeg, openjpeg, rle; pyjpegls). None is left unread for want of a decoder: the few that are
unread are broken files, each with its reason below. (The pylibjpeg packages' wheels ship no DICOM file:
their tests fetch pydicom-data's; pyjpegls ships raw JPEG-LS codestreams, not DICOM.)
"""

from __future__ import annotations

import collections

import pydicom
import pytest
from pydicom.data import get_testdata_files

from imaging.deid import NotDeidentifiable, quiet
from imaging.deid.frames import Frames

# Files that hold no readable image, and why: not a want of a decoder.
BROKEN = {
    "MR_truncated.dcm": "pixel data shorter than Rows x Columns (8130 of 8192 bytes)",
    "badVR.dcm": "a malformed value in the image attributes (IS '1A')",
    "nested_priv_SQ.dcm": "2 bytes of pixel data and no image attributes",
    "meta_missing_tsyntax.dcm": "2 bytes of pixel data and no image attributes",
    "JPEG2000-embedded-sequence-delimiter.dcm": "a 266-byte JPEG 2000 codestream whose header is cut",
    # A codestream libjpeg refuses ("scan start must be zero and scan stop must be 63 for the sequential
    # operating modes"); GDCM refuses 12-bit JPEG Extended whole (measured: python-gdcm 3.2.6).
    "JPEG-lossy.dcm": "a JPEG Extended codestream with a misplaced marker segment",
}


def _pixel_files():
    files = []
    with quiet():
        for path in sorted(set(get_testdata_files())):
            try:
                ds = pydicom.dcmread(path)
            except Exception:  # noqa: BLE001 - not a DICOM file (a DICOMDIR part, a raw codestream)
                continue
            if "PixelData" in ds:
                files.append((path, ds))
    return files


@pytest.fixture(scope="module")
def by_syntax():
    groups = collections.defaultdict(list)
    for path, ds in _pixel_files():
        syntax = ds.file_meta.get("TransferSyntaxUID") if hasattr(ds, "file_meta") else None
        groups[pydicom.uid.UID(syntax).name if syntax else "(none)"].append((path, ds))
    return groups


def _reads(path: str, ds) -> str | None:
    syntax = ds.file_meta.get("TransferSyntaxUID")
    try:
        with quiet():
            frames = Frames.from_dataset(ds, pydicom.uid.UID(syntax) if syntax else pydicom.uid.ImplicitVRLittleEndian)
            for index in sorted({0, frames.count - 1}):
                frames.frame(index)
        return None
    except NotDeidentifiable as reason:
        return str(reason)


def test_every_real_pixel_file_is_read_by_transfer_syntax(by_syntax):
    expected = {"JPEG Baseline (Process 1)", "JPEG Extended (Process 2 and 4)",
                "JPEG Lossless, Non-Hierarchical, First-Order Prediction (Process 14 [Selection Value 1])",
                "JPEG-LS Lossless Image Compression", "JPEG-LS Lossy (Near-Lossless) Image Compression",
                "JPEG 2000 Image Compression (Lossless Only)", "JPEG 2000 Image Compression", "RLE Lossless",
                "Deflated Explicit VR Little Endian", "Explicit VR Big Endian", "Explicit VR Little Endian",
                "Implicit VR Little Endian"}
    assert expected <= set(by_syntax)
    unread = {}
    summary = []
    for name, files in sorted(by_syntax.items()):
        failed = [path.rsplit("/", 1)[-1] for path, ds in files if _reads(path, ds)]
        unread.update({f: name for f in failed})
        summary.append(f"{name}: {len(files) - len(failed)}/{len(files)}")
    print("\n".join(summary))
    assert set(unread) == set(BROKEN), sorted(set(unread) ^ set(BROKEN))


def test_the_files_the_issue_names_are_read():
    with quiet():
        for name in ("JPEG-LL.dcm", "JPGExtended.dcm", "SC_rgb_jpeg_gdcm.dcm", "JPEGLSNearLossless_16.dcm",
                     "MR_small_jp2klossless.dcm", "SC_rgb_rle.dcm"):
            (path,) = [p for p in get_testdata_files(name) if p.endswith(name)][:1]
            ds = pydicom.dcmread(path)
            assert _reads(path, ds) is None, name


class _Clean:
    """A second reading that always reads nothing: this test is about the pixels written, not the OCR."""

    from imaging.deid.pixel_text import PixelTextSettings

    settings = PixelTextSettings()

    def read_again(self, grey, volume=False, confirming=False):
        return []

    def read_again_turned(self, grey, volume=False):
        return []


def _redacted_copy(ds):
    """`ds` with a box in the middle of its first frame redacted, written and read back."""
    import copy
    import io

    from imaging.deid.pixel_text import Box, FoundText
    from imaging.deid.redact import PixelSource, redact, value_bytes

    syntax = pydicom.uid.UID(ds.file_meta.TransferSyntaxUID)
    rows, cols = int(ds.Rows), int(ds.Columns)
    box = Box(rows // 3, cols // 3, max(1, rows // 6), max(1, cols // 6))
    source = PixelSource.of_dataset(ds, syntax)
    red = redact(ds, source, (FoundText(0, (box,)),), _Clean(), (), confirmed=True)
    try:
        out = copy.deepcopy(ds)
        red.apply_header(out)
        out.PixelData = value_bytes(red, source)
        out["PixelData"].VR = "OW" if red.mode == "converted" and red.layout.bits > 8 else out["PixelData"].VR
        out.file_meta.TransferSyntaxUID = red.syntax
        buffer = io.BytesIO()
        out.save_as(buffer, enforce_file_format=True)
    finally:
        red.close()
    return red, pydicom.dcmread(io.BytesIO(buffer.getvalue()))


def test_every_readable_real_file_can_be_redacted_and_read_back(by_syntax):
    """Each syntax's writer on real files: the redacted output decodes, the box is one value on the first frame,
    every other pixel of every frame is what the source decodes to (lossless where the source was read), and
    the output keeps its syntax where an encoder is locked (RLE, JPEG 2000, JPEG-LS) or is Explicit VR Little
    Endian otherwise."""
    import io

    import numpy as np

    from imaging.deid import redact as R

    seen = collections.Counter()
    for name, files in sorted(by_syntax.items()):
        for path, ds in files:
            if path.rsplit("/", 1)[-1] in BROKEN or "Rows" not in ds or int(ds.get("BitsAllocated", 8)) not in (8, 16, 32):
                continue
            if int(ds.Rows) * int(ds.Columns) * int(ds.get("NumberOfFrames", 1) or 1) > 4_000_000:
                continue  # the largest few: time, not coverage
            try:
                with quiet():
                    ds.save_as(io.BytesIO(), enforce_file_format=True)
            except Exception:  # noqa: BLE001 - a file pydicom cannot write back as it is (SC_rgb_jpeg.dcm's VRs)
                continue
            if not pydicom.uid.UID(ds.file_meta.TransferSyntaxUID).is_little_endian:
                with pytest.raises(NotDeidentifiable, match="^pixel data could not be redacted$"):
                    _redacted_copy(ds)
                seen["big endian, quarantined"] += 1
                continue
            with quiet():
                red, out = _redacted_copy(ds)
                before, after = ds.pixel_array, out.pixel_array
            syntax = str(ds.file_meta.TransferSyntaxUID)
            if red.mode == "own":
                assert syntax in R._OWN and str(out.file_meta.TransferSyntaxUID) == syntax, path
            elif red.mode == "native":
                assert not pydicom.uid.UID(syntax).is_compressed and out.file_meta.TransferSyntaxUID == syntax, path
            else:  # lossy, no encoder, an encoder's refusal (32-bit RLE), a packed layout (YBR_FULL_422)
                assert out.file_meta.TransferSyntaxUID == pydicom.uid.ExplicitVRLittleEndian, path
            frames = int(ds.get("NumberOfFrames", 1) or 1)
            first_b, first_a = (before[0], after[0]) if frames > 1 else (before, after)
            (box,) = red.boxes[0]
            region = first_a[box.top:box.top + box.height, box.left:box.left + box.width]
            assert (region == region.reshape(-1, *region.shape[2:])[0]).all(), path
            mask = np.ones(first_b.shape[:2], dtype=bool)
            mask[box.top:box.top + box.height, box.left:box.left + box.width] = False
            assert np.array_equal(first_b[mask], first_a[mask]), path
            for index in range(1, frames):  # frames the box was not carried to: untouched
                if index not in red.boxes:
                    assert np.array_equal(before[index], after[index]), path
            seen[red.mode] += 1
    assert seen["native"] > 50 and seen["own"] > 20 and seen["converted"] > 10, seen
