"""The shipped engine against the reference, file by file: the same published dataset, element by element, or the
same quarantine reason (tests/test_deid_differential.py runs a sample; benchmarks/deid_differential.py all).

    outcome = shipped(path, profile)                  # the per-file path of the anonymize step, from a file
    expected = reference(path, profile)               # the same path before issue 48 (deid_reference)
    differences(expected, outcome)                    # [] when equal: each difference as (where, what)

A published outcome is compared as pydicom reads both outputs back: the file meta and every element at every
depth by (tag, VR, value), values compared as read (numbers as numbers, text as text, bytes as bytes; a float
that is not a number equals one that is not a number). Quarantine reasons compare as strings; a file neither
engine can read is "unreadable" on both sides (the anonymize step quarantines it with the exception's type).
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass

from pydicom import dcmread

import deid_reference
from imaging.deid import NotDeidentifiable, quiet, to_bytes
from imaging.deid.engine import deidentify_image
from imaging.deid.part10 import SourceImage, read_whole
from imaging.deid.frames import Frames
from imaging.deid.pixel_text import PixelTextResult
from imaging.deid.writer import write
from imaging.pseudonym import Pseudonymizer

KEY = Pseudonymizer("differential-test-key")
EXTRA = ("Jane Smith", "9434765919")
PROFILES = {
    "default": None,
    "basic": [],
    "all-options": ["clean_graphics", "clean_structured_content", "clean_descriptors",
                    "retain_longitudinal_full_dates", "retain_patient_characteristics", "retain_device_identity",
                    "retain_uids", "retain_safe_private", "retain_institution_identity"],
}


class NoText:
    """The pixel-text check answering "none found" having asked how many frames there are (so a header that
    cannot describe its pixels quarantines, as the check reading them would say, whenever the engine describes
    them) without decoding a frame: both engines get it, and what is compared is the header's rewrite (the text
    check has its own tests). It names itself and the frames it "read" (the first and the last) as a screen does,
    so the method text's screen lines (issue 44, `declare.screened`) are compared too."""

    settings = None
    METHOD = ("Burned-in text screen: differential test stub",)

    def check(self, ds, syntax, frames=None, collect=False) -> PixelTextResult:
        frames = frames if frames is not None else Frames.from_dataset(ds, syntax)
        count = frames.count
        return PixelTextResult(found=False, frames_checked=0, frames=max(count, 1),
                               read=tuple(sorted({0, max(count - 1, 0)})), method=self.METHOD)


@dataclass(frozen=True)
class Outcome:
    kind: str  # "published", "quarantined" or "unreadable"
    value: bytes | str  # the file's bytes, the reason, or the exception's type
    streamed: bool = False  # (shipped) whether the pixel data were copied from the file, not read whole
    sha256: str | None = None  # (shipped) the input's sha256 as the reader computed it


def reference(path: str, profile) -> Outcome:
    """The anonymize step's per-file path before issue 48: pydicom reads the header (the file read whole when its
    pixel data cannot be streamed), the reference engine, pydicom writes the header back."""
    from deid_reference.part10 import SourceImage as ReferenceSource, write_image

    try:
        with quiet(), ReferenceSource(path) as image:
            try:
                if image.streamed:
                    out = deid_reference.deidentify(image.header, pseudonymizer=KEY, namespace="NHS", profile=profile,
                                                    extra_identifiers=EXTRA, pixel_text=NoText(), streamed=image)
                    target = io.BytesIO()
                    write_image(out, image, target)
                    return Outcome("published", target.getvalue(), True, image.sha256())
                ds = read_whole(image.read_all())
                out = deid_reference.deidentify(ds, pseudonymizer=KEY, namespace="NHS", profile=profile,
                                                extra_identifiers=EXTRA, pixel_text=NoText())
                return Outcome("published", to_bytes(out), False, image.sha256())
            except NotDeidentifiable as reason:
                return Outcome("quarantined", str(reason), image.streamed, image.sha256())
    except NotDeidentifiable as reason:
        return Outcome("quarantined", str(reason))
    except Exception as error:  # noqa: BLE001 - unreadable: the anonymize step quarantines it by type
        return Outcome("unreadable", type(error).__name__)


def shipped(path: str, profile) -> Outcome:
    """The anonymize step's per-file path: the source opened (read once, hashed), the engine, the one writer."""
    try:
        with quiet(), SourceImage(path) as image:
            try:
                ds = None if image.streamed else read_whole(image.read_all())
                result = deidentify_image(ds, pseudonymizer=KEY, namespace="NHS", profile=profile,
                                          extra_identifiers=EXTRA, pixel_text=NoText(),
                                          streamed=image if image.streamed else None)
                target = io.BytesIO()
                write(target, result.published)
                return Outcome("published", target.getvalue(), image.streamed, image.sha256())
            except NotDeidentifiable as reason:
                return Outcome("quarantined", str(reason), image.streamed, image.sha256())
    except NotDeidentifiable as reason:
        return Outcome("quarantined", str(reason))
    except Exception as error:  # noqa: BLE001
        return Outcome("unreadable", type(error).__name__)


def differences(expected: Outcome, got: Outcome) -> list[tuple[str, str]]:
    """Where the two outcomes differ: [] when the same (both unreadable counts as the same)."""
    if expected.kind != got.kind or (expected.kind == "quarantined" and expected.value != got.value):
        return [("outcome", f"{_said(expected)} -> {_said(got)}")]
    if expected.kind != "published":
        return []
    want, have = _read(expected.value), _read(got.value)
    found = []
    for part in ("meta", "dataset"):
        a, b = want[part], have[part]
        for key in sorted(set(a) | set(b)):
            if key not in b:
                found.append((_where(part, key), "missing"))
            elif key not in a:
                found.append((_where(part, key), "added"))
            elif not _same(a[key], b[key]):
                found.append((_where(part, key), "value or VR"))
    return found


def _said(outcome: Outcome) -> str:
    return outcome.kind if outcome.kind == "published" else f"{outcome.kind}: {outcome.value}"


def _where(part: str, key: tuple) -> str:
    return f"{part} " + ".".join(f"{k:08X}" if k > 0xFFFF else f"[{k}]" for k in key)


def _read(data: bytes) -> dict:
    with quiet():
        ds = dcmread(io.BytesIO(data))
        return {"meta": _flat(ds.file_meta), "dataset": _flat(ds)}


def _flat(ds, path=()) -> dict:
    """(tag, item index, tag, ...) -> (VR, value) for every element at every depth; a sequence -> its item count."""
    out = {}
    for elem in ds:
        key = path + (int(elem.tag),)
        if elem.VR == "SQ":
            items = elem.value or []
            out[key] = ("SQ", len(items))
            for index, item in enumerate(items):
                out.update(_flat(item, key + (index,)))
        else:
            out[key] = (elem.VR, _plain(elem.value))
    return out


def _plain(value):
    """A value as comparable data: lists as tuples, text as str, floats with NaN as a marker."""
    if value is None or value == "":
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if type(value).__name__ == "MultiValue" or isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else struct.pack("<d", value)
    if isinstance(value, int):
        return int(value)
    return str(value)


def _same(a, b) -> bool:
    return a == b
