"""Mutated real DICOM files for fuzzing the per-file path (test-side only, never shipped).

The sources are the files shipped with pydicom and with pydicom-data, found on disk only:
`pydicom.data.get_testdata_files()` would also try to download every file of pydicom's URL list
that is missing from its cache (and create that cache folder), so `source_files()` repeats its
search without the download step: pydicom's own test files, then the files of each installed
external data source (pydicom-data's checked against its hashes, as pydicom does), then any
file already in pydicom's download cache. Nothing here touches the network.

Every mutation is deterministic (seeded by kind, source and variant) and named by its kind:

    truncated         the file cut at k/16 of its length, k = 1..15
    vr_flipped        an element's VR bytes changed to another VR (explicit-VR files)
    undefined_length  0xFFFFFFFF as the length of an element that may not have one
    deep_sequence     a valid file with a sequence nested 100 levels deep
    charset           a bogus Specific Character Set, or bytes invalid for the declared one
    pixel_length      pixel data shorter or longer than Rows x Columns x frames x bytes says
    frames            a lying Number of Frames (much larger or smaller, 0, negative, not a number)

    corpus = write_corpus(folder, kinds=("truncated", "charset"), limit=300)
    corpus[0].name, corpus[0].kind, corpus[0].source, corpus[0].variant
"""

from __future__ import annotations

import functools
import glob
import io
import os
import random
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pydicom
from pydicom.dataelem import DataElement, RawDataElement
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.tag import Tag

from imaging.deid import quiet

KINDS = ("truncated", "vr_flipped", "undefined_length", "deep_sequence", "charset", "pixel_length", "frames")

# The variants of each kind; a variant that does not apply to a source (a VR flip in an
# implicit-VR file, pixel data in a file without any) is skipped.
TRUNCATIONS = tuple(range(1, 16))
SHORT_VRS = ("AE", "AS", "AT", "CS", "DA", "DS", "DT", "FL", "FD", "IS", "LO", "LT", "PN", "SH", "SL", "SS", "ST",
             "TM", "UI", "UL", "US")
LONG_VRS = ("OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV")
# Elements worth a flip whenever a file has them: what the index and the engine read first.
FLIP_FIRST = ("PatientID", "PatientName", "SOPInstanceUID", "SOPClassUID", "StudyDate", "Rows", "PixelData",
              "SpecificCharacterSet", "NumberOfFrames", "BurnedInAnnotation")
VR_FLIPS = ("same_header", "same_header", "same_header", "same_header", "other_header", "other_header")
UNDEFINED = ("pixel_data", "first", "random", "random")
DEPTH = 100
DEEP = ("defined", "undefined", "private", "table_removed")
CHARSETS = ("bogus_term", "bogus_second_term", "not_ascii_term", "invalid_utf8", "broken_iso2022",
            "invalid_gb18030", "latin1_declared_ascii")
PIXELS = ("half", "minus_two", "empty", "double", "plus_two", "rows_x4", "huge_dimensions")
FRAMES = ("x1000", "huge", "zero", "negative", "non_numeric", "fewer", "decimal", "empty")
VARIANTS = {"truncated": tuple(f"k{k:02d}" for k in TRUNCATIONS),
            "vr_flipped": tuple(f"{v}{i}" for i, v in enumerate(VR_FLIPS)),
            "undefined_length": tuple(f"{v}{i}" for i, v in enumerate(UNDEFINED)),
            "deep_sequence": DEEP, "charset": CHARSETS, "pixel_length": PIXELS, "frames": FRAMES}

MARK = "FUZZ"  # planted in every text value a mutation writes: it must never appear in a reason
UNDEFINED_LENGTH = 0xFFFFFFFF


@dataclass(frozen=True)
class Mutant:
    """One file of a corpus: `name` relative to the corpus folder, how it was made, from what."""

    name: str
    kind: str
    source: str  # the source file, relative to its data store ("pydicom/CT_small.dcm")
    variant: str


@dataclass(frozen=True)
class Source:
    label: str  # "<store>/<path in the store>"
    path: str


def source_files() -> list[Source]:
    """pydicom's and pydicom-data's test files that are on disk (never downloaded), sorted."""
    from pydicom.data import data_manager

    found: dict[str, str] = {}
    root = Path(data_manager.DATA_ROOT) / "test_files"
    for path in sorted(root.glob("**/*")):
        if path.is_file() and path.suffix != ".py":
            found[f"pydicom/{path.relative_to(root).as_posix()}"] = str(path)
    for store, source in sorted(data_manager.external_data_sources().items()):
        for path in sorted(source.get_paths("**/*", data_manager.DataTypes.DATASET)):
            if store == "pydicom-data" and not data_manager._check_data_hash(path):
                continue
            if os.path.isfile(path) and not path.endswith(".py"):
                found.setdefault(f"{store}/{os.path.basename(path)}", path)
    # A download cache only if one exists already (asking pydicom for it would create it).
    cache = Path(os.path.expanduser("~")) / ".pydicom" / "data"
    if cache.is_dir():
        for path in sorted(glob.glob(str(cache / "*"))):
            if os.path.isfile(path):
                found.setdefault(f"pydicom-data/{os.path.basename(path)}", path)
    return [Source(label, path) for label, path in sorted(found.items())]


@functools.lru_cache(maxsize=None)
def _bytes(path: str) -> bytes:
    return Path(path).read_bytes()


@functools.lru_cache(maxsize=None)
def _parses(path: str) -> bool:
    """True for a Part 10 file pydicom reads whole (the ones structured mutations start from)."""
    try:
        _read(path)
        return True
    except Exception:  # noqa: BLE001 - sources that do not parse get byte-level mutations only
        return False


def _read(path: str) -> Dataset:
    with quiet():
        ds = pydicom.dcmread(io.BytesIO(_bytes(path)))
        for elem in ds.iterall():  # every value converted: a source that cannot be is not used
            elem.value
    return ds


def _write(ds: Dataset) -> bytes:
    buffer = io.BytesIO()
    with quiet():
        ds.save_as(buffer, enforce_file_format=False)
    return buffer.getvalue()


def _rng(kind: str, source: str, variant: str, seed: int) -> random.Random:
    return random.Random(f"{seed}|{kind}|{source}|{variant}")


# ---------------------------------------------------------------------------------------------
# Where an element's header is, in the bytes of its file (top level and inside sequences).


@dataclass(frozen=True)
class Located:
    tag: int
    vr: str
    keyword: str
    header: int  # offset of the tag in the file
    length_at: int  # offset of the length field
    length_size: int  # 2 or 4 bytes
    vr_at: int | None  # offset of the VR bytes (explicit VR), else None
    undefined: bool


@functools.lru_cache(maxsize=None)
def _locate(path: str) -> tuple[list[Located], bool, bool]:
    """Every element whose header bytes could be found (checked against its tag), and the encoding."""
    data = _bytes(path)
    with quiet():
        ds = pydicom.dcmread(io.BytesIO(data))
    implicit, little = ds.original_encoding
    out: list[Located] = []

    def visit(dataset: Dataset, depth: int) -> None:
        for tag in list(dataset.keys()):
            raw = dataset.get_item(tag)
            if isinstance(raw, RawDataElement):
                located = _header(data, raw, implicit, little)
                if located is not None:
                    out.append(located)
            if depth < 3:
                try:
                    elem = dataset[tag]
                except Exception:  # noqa: BLE001
                    continue
                if elem.VR == "SQ":
                    for item in elem.value or ():
                        visit(item, depth + 1)

    with quiet():
        visit(ds, 0)
    return out, implicit, little


def _header(data: bytes, raw: RawDataElement, implicit: bool, little: bool) -> Located | None:
    tell, tag = raw.value_tell, int(raw.tag)
    if tell is None or tag >> 16 == 0x0002:
        return None
    end = "<" if little else ">"
    tag_bytes = struct.pack(end + "HH", tag >> 16, tag & 0xFFFF)
    from pydicom.datadict import keyword_for_tag

    keyword = keyword_for_tag(tag) or ""
    undefined = raw.length == UNDEFINED_LENGTH
    if implicit:
        start = tell - 8
        if start >= 0 and data[start:start + 4] == tag_bytes:
            return Located(tag, raw.VR or "UN", keyword, start, tell - 4, 4, None, undefined)
        return None
    for start, long in ((tell - 8, False), (tell - 12, True)):
        if start >= 0 and data[start:start + 4] == tag_bytes:
            vr = data[start + 4:start + 6].decode("latin-1")
            if (vr in LONG_VRS) != long:
                continue
            return Located(tag, vr, keyword, start, tell - 4 if long else tell - 2, 4 if long else 2, start + 4,
                           undefined)
    return None


def _patch(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


# ---------------------------------------------------------------------------------------------
# The mutations: (source, variant) -> bytes, or None when the variant does not apply.


def _truncated(source: Source, variant: str, rng: random.Random) -> bytes | None:
    data = _bytes(source.path)
    k = int(variant[1:])
    return data[: len(data) * k // 16] if len(data) >= 16 else None


def _vr_flipped(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    elements, implicit, _little = _locate(source.path)
    elements = [e for e in elements if e.vr_at is not None]
    if implicit or not elements:
        return None
    index = int(variant[-1])
    firsts = [e for keyword in FLIP_FIRST for e in elements if e.keyword == keyword]
    target = firsts[index] if index < len(firsts) and variant.startswith("same") else rng.choice(elements)
    if variant.startswith("same"):
        pool = LONG_VRS if target.vr in LONG_VRS else SHORT_VRS
    else:
        pool = SHORT_VRS if target.vr in LONG_VRS else LONG_VRS
    new = rng.choice([vr for vr in pool if vr != target.vr])
    return _patch(_bytes(source.path), target.vr_at, new.encode("ascii"))


def _undefined_length(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    elements, _implicit, _little = _locate(source.path)
    with quiet():
        encapsulated = pydicom.dcmread(io.BytesIO(_bytes(source.path)), stop_before_pixels=True)
    syntax = getattr(getattr(encapsulated, "file_meta", None), "TransferSyntaxUID", None)
    compressed = bool(syntax is not None and syntax.is_compressed)
    # Only sequences, items and encapsulated pixel data may have an undefined length.
    allowed = [e for e in elements if e.length_size == 4 and not e.undefined and e.vr != "SQ"
               and not (e.tag == 0x7FE00010 and compressed)]
    if not allowed:
        return None
    if variant.startswith("pixel_data"):
        pixels = [e for e in allowed if e.tag == 0x7FE00010]
        if not pixels:
            return None
        target = pixels[0]
    elif variant.startswith("first"):
        target = allowed[0]
    else:
        target = rng.choice(allowed)
    return _patch(_bytes(source.path), target.length_at, struct.pack("<I", UNDEFINED_LENGTH))


def _leaf(level: int) -> Dataset:
    item = Dataset()
    item.PatientName = f"{MARK}^DEEP{level}"
    item.ReferencedSOPInstanceUID = f"1.2.826.0.1.3680043.10.1143.99.{level + 1}"
    item.StudyDate = "20200229"
    item.CodeMeaning = f"{MARK} nested text {level}"
    return item


def _nested(tag: int, undefined: bool) -> DataElement:
    """A sequence DEPTH levels deep: each item holds text, a UID, a date and the next level."""
    inner = None
    for level in range(DEPTH, 0, -1):
        item = _leaf(level)
        if inner is not None:
            item.add(inner)
        item.is_undefined_length_sequence_item = undefined
        inner = DataElement(tag, "SQ", Sequence([item]))
        inner.is_undefined_length = undefined
    return inner


def _deep_sequence(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    ds = _read(source.path)
    if variant == "private":
        ds.add_new(0x00990010, "LO", f"{MARK} PRIVATE")
        ds.add(_nested(0x00991001, undefined=False))
    elif variant == "table_removed":
        ds.add(_nested(0x0040A730, undefined=True))  # Content Sequence: X in Table E.1-1
    else:  # Referenced Image Sequence: walked and kept (its UIDs replaced)
        ds.add(_nested(0x00081140, undefined=variant == "undefined"))
    try:
        return _write(ds)
    except Exception:  # noqa: BLE001 - a source pydicom cannot write back
        return None


def _raw(ds: Dataset, tag: int, vr: str, value: bytes) -> None:
    implicit, little = ds.original_encoding
    ds._dict[Tag(tag)] = RawDataElement(Tag(tag), vr, len(value), value, 0, implicit, little)


def _charset(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    ds = _read(source.path)
    name = f"{MARK}^CHARSET".encode()
    if variant == "bogus_term":
        _raw(ds, 0x00080005, "CS", b"ISO_IR 999")
        _raw(ds, 0x00100010, "PN", name + b"^\xe9\xe8")
    elif variant == "bogus_second_term":
        _raw(ds, 0x00080005, "CS", b"ISO 2022 IR 6\\NOT A CHARSET ")
        _raw(ds, 0x00081030, "LO", b"\x1b-A" + MARK.encode() + b" \xe9t\xe9")
    elif variant == "not_ascii_term":
        _raw(ds, 0x00080005, "CS", b"\xff\xfeISO_IR 100")
        _raw(ds, 0x00100010, "PN", name + b"\xff")
    elif variant == "invalid_utf8":
        _raw(ds, 0x00080005, "CS", b"ISO_IR 192")
        _raw(ds, 0x00100010, "PN", name + b"^\xc3\x28\xff")
        _raw(ds, 0x00081030, "LO", MARK.encode() + b" \xed\xa0\x80 ")
        _raw(ds, 0x00204000, "LT", MARK.encode() + b" \xf8\x88\x80\x80\x80")
    elif variant == "broken_iso2022":
        _raw(ds, 0x00080005, "CS", b"\\ISO 2022 IR 87")
        _raw(ds, 0x00100010, "PN", name + b"=\x1b$B\x1b(\x1b$B\xff\xfe")
    elif variant == "invalid_gb18030":
        _raw(ds, 0x00080005, "CS", b"GB18030 ")
        _raw(ds, 0x00100010, "PN", name + b"^\x81\x30\xff\x30")
    else:  # latin1_declared_ascii: no Specific Character Set, bytes above 0x7F
        if 0x00080005 in ds:
            del ds[0x00080005]
        _raw(ds, 0x00100010, "PN", name + b"^J\xf6rg\xe9 ")
        _raw(ds, 0x00081030, "LO", MARK.encode() + b" caf\xe9 ")
    try:
        return _write(ds)
    except Exception:  # noqa: BLE001
        return None


def _pixel_length(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    ds = _read(source.path)
    if "PixelData" not in ds:
        return None
    pixels = bytes(ds.PixelData)
    if variant == "half":
        ds.PixelData = pixels[: len(pixels) // 4 * 2]
    elif variant == "minus_two":
        ds.PixelData = pixels[:-2]
    elif variant == "empty":
        ds.PixelData = b""
    elif variant == "double":
        ds.PixelData = pixels + pixels
    elif variant == "plus_two":
        ds.PixelData = pixels + b"\x00\x00"
    elif variant == "rows_x4":
        if "Rows" not in ds:
            return None
        ds.Rows = min(int(ds.Rows) * 4, 0xFFFF)
    else:  # huge_dimensions: 64 k x 64 k pixels said, a few kB held
        ds.Rows, ds.Columns = 0xFFFF, 0xFFFF
    try:
        return _write(ds)
    except Exception:  # noqa: BLE001
        return None


def _frames(source: Source, variant: str, rng: random.Random) -> bytes | None:
    if not _parses(source.path):
        return None
    ds = _read(source.path)
    if "PixelData" not in ds:
        return None
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError):
        frames = 1
    value = {"x1000": str(frames * 1000), "huge": "2147483647", "zero": "0", "negative": "-3",
             "non_numeric": f"{MARK}", "fewer": str(max(frames // 2, 1)) if frames > 1 else None,
             "decimal": "2.5", "empty": ""}[variant]
    if value is None:
        return None
    text = value.encode("ascii")
    _raw(ds, 0x00280008, "IS", text + b" " * (len(text) % 2))
    try:
        return _write(ds)
    except Exception:  # noqa: BLE001
        return None


MUTATE = {"truncated": _truncated, "vr_flipped": _vr_flipped, "undefined_length": _undefined_length,
          "deep_sequence": _deep_sequence, "charset": _charset, "pixel_length": _pixel_length, "frames": _frames}


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)


def mutants(kinds: Iterable[str] = KINDS, seed: int = 0,
            sources: list[Source] | None = None) -> Iterator[tuple[Mutant, bytes]]:
    """Every (mutant, bytes), kinds interleaved and each kind's plan in a seeded order, so that
    the first few hundred cover every kind and many sources."""
    kinds = tuple(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown mutation kinds {sorted(unknown)}; known: {KINDS}")
    sources = source_files() if sources is None else sources
    plans = []
    for kind in kinds:
        plan = [(source, variant) for source in sources for variant in VARIANTS[kind]]
        random.Random(f"{seed}|plan|{kind}").shuffle(plan)
        plans.append((kind, iter(plan)))
    while plans:
        for kind, plan in list(plans):
            for source, variant in plan:
                data = MUTATE[kind](source, variant, _rng(kind, source.label, variant, seed))
                if data is not None:
                    name = f"{kind}/{_safe(source.label)}.{variant}.dcm"
                    yield Mutant(name, kind, source.label, variant), data
                    break
            else:
                plans.remove((kind, plan))


def write_corpus(folder: str | os.PathLike, kinds: Iterable[str] = KINDS, limit: int | None = None,
                 seed: int = 0, sources: list[Source] | None = None) -> list[Mutant]:
    """Write up to `limit` mutants (all when None) under `folder` (one sub-folder per kind)."""
    folder = Path(folder)
    written: list[Mutant] = []
    if limit is not None and limit <= 0:
        return written
    for mutant, data in mutants(kinds, seed, sources):
        target = folder / mutant.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(mutant)
        if limit is not None and len(written) >= limit:
            break
    return written


if __name__ == "__main__":  # python tests/fuzz_corpus.py <folder> [limit]: write a corpus, print its counts
    import collections
    import sys

    corpus = write_corpus(sys.argv[1], limit=int(sys.argv[2]) if len(sys.argv) > 2 else None)
    for kind, count in sorted(collections.Counter(m.kind for m in corpus).items()):
        print(f"{kind:18} {count}")
    print(f"{'total':18} {len(corpus)}")
