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
