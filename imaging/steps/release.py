"""Cohort releases: copying published files into a release (quasi-identifiers in their headers generalised
as the metadata is, clinical labels stamped where the cohort asks) and checking what was copied.

A released image is a function of its de-identified source's bytes, the header plan (`HeaderPlan`: the
quasi-identifier rules, the stamp plan, the rewrite's code version) and the image's own header values (one
JSON object). Its **content key** hashes exactly those (`HeaderPlan.content_key`), so two images with the same
key have the same released bytes, and a version shares the bytes of an earlier one instead of writing them
again (imaging/steps/objects.py).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import warnings
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from imaging import fs as fsx
from imaging.records import BatchStep, ReleaseFile, schema_of
from imaging.steps.objects import ObjectStore, identity
from imaging.steps.stamp import ENUMERATED, StampPlan

CHUNK = 4 << 20  # bytes copied at a time
KEY_FORMAT = 1  # the content key's own layout


@dataclass(frozen=True)
class ReleaseSource:
    """The manifest fields a release copy needs, and what the store's index knows of its content key."""

    output_path: str
    sha256: str
    patient_pseudonym: str | None
    study_instance_uid: str | None
    sop_instance_uid: str | None
    released: str | None = None  # JSON object: the release's value of each column the header takes
    content_key: str | None = None  # the key the build computed (Spark SQL): checked against the copy's own
    object_sha256: str | None = None  # the stored object of that key, when the index knows one
    object_identity: str | None = None  # its identity when it was last hashed


@dataclass(frozen=True)
class HeaderRule:
    """How a quasi-identifier's DICOM attribute leaves in a released file: no finer than the metadata.

    A banded value (an age band) cannot be written in DICOM's format (AS holds "059Y", never
    "55-59"), so `remove` takes the attribute out; otherwise the attribute holds the release's own
    value, and is emptied where the release has none (a patient without a clinical record), so a
    null class in the metadata is a null class in the headers too.
    """

    keyword: str  # DICOM keyword, e.g. PatientSex
    column: str  # the release metadata column holding the released value
    remove: bool

    def header_value(self, released) -> str | None:
        """What the released header holds: the released value, or None (removed or empty)."""
        if self.remove or released is None:
            return None
        value = str(released)
        allowed = ENUMERATED.get(self.keyword)
        return value if value and (allowed is None or value in allowed) else None


@dataclass(frozen=True)
class HeaderPlan:
    """Everything but the image's own bytes and values that decides a released file's bytes."""

    rules: tuple[HeaderRule, ...] = ()
    stamp: StampPlan | None = None
    code: str = ""  # the rewrite's code version (its modules' sources, pydicom's version)

    @property
    def value_columns(self) -> tuple[str, ...]:
        """The release columns whose values each image's header takes, in order, once each."""
        columns = [r.column for r in self.rules] + list(self.stamp.value_columns if self.stamp else ())
        return tuple(dict.fromkeys(columns))

    def values_sql(self) -> str:
        """Spark SQL over release rows: the JSON object of `value_columns` (what the copy writes to headers)."""
        fields = ", ".join(f"'{c}', `{c}`" for c in self.value_columns)
        return f"to_json(named_struct({fields}))" if fields else "'{}'"

    def values_json(self, row: Mapping) -> str:
        """The same in Python, from one release row (small inputs and tests)."""
        return json.dumps({c: row.get(c) for c in self.value_columns})

    @property
    def prefix(self) -> str:
        """The sha256 of the plan: the part of every content key the cohort's images share."""
        plan = {"format": KEY_FORMAT, "rules": [asdict(r) for r in self.rules],
                "stamp": self.stamp.key() if self.stamp else None, "code": self.code}
        return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()

    def content_key(self, source_sha256: str, released: str | None) -> str:
        """The content key of one image: the plan, the source's sha256 and the exact JSON of its values."""
        return hashlib.sha256((self.prefix + source_sha256 + (released or "{}")).encode()).hexdigest()

    def key_sql(self, sha256: str = "sha256", released: str = "released") -> str:
        """`content_key` as Spark SQL over the columns `sha256` and `released` (the same bytes hashed)."""
        return f"sha2(concat('{self.prefix}', `{sha256}`, `{released}`), 256)"

    def apply(self, dataset, released: Mapping) -> bool:
        """`dataset` as the release holds it: stamped, then each rule's attribute as the release holds it (a
        rule has the last word on its attribute); True if anything changed."""
        if self.stamp is not None:
            self.stamp.apply(dataset, released)
        return _generalise(dataset, self.rules, released) or self.stamp is not None


def generalise_header(data: bytes, rules: Sequence[HeaderRule], released: Mapping,
                      stamp: StampPlan | None = None) -> bytes:
    """A DICOM file's bytes with each rule's attribute as the release holds it (and its labels stamped);
    unchanged bytes when it already does. Type 2 attributes present are emptied rather than removed, keeping
    the file valid. (In memory: `CopyJob` streams the same rewrite, `rewrite_header`.)"""
    import pydicom

    dataset = pydicom.dcmread(io.BytesIO(data))
    if not HeaderPlan(tuple(rules), stamp).apply(dataset, released):
        return data
    out = io.BytesIO()
    pydicom.dcmwrite(out, dataset, enforce_file_format=False)
    return out.getvalue()


def _generalise(dataset, rules: Sequence[HeaderRule], released: Mapping) -> bool:
    """Each rule's attribute of `dataset` set as the release holds it; True if anything changed."""
    changed = False
    for rule in rules:
        want = rule.header_value(released.get(rule.column))
        if rule.keyword not in dataset:
            if want is not None:
                setattr(dataset, rule.keyword, want)
                changed = True
            continue
        have = dataset[rule.keyword].value
        if rule.remove:
            delattr(dataset, rule.keyword)
            changed = True
        elif (str(have) if have not in (None, "") else None) != want:
            dataset[rule.keyword].value = want if want is not None else ""
            changed = True
    return changed


def rewrite_header(image, plan: HeaderPlan, released: Mapping, target) -> None:
    """`generalise_header`, streamed: a de-identified file (imaging.deid.part10.SourceImage, opened
    with `trailing=False`) written to `target` with its header rewritten and every byte from its pixel
    data on copied as it is, in chunks; the file copied whole, in chunks, when the plan changes nothing.
    The quasi-identifiers and the stamped labels are all below the pixel data, so the bytes after it never
    change: a full re-stamp costs what a copy does, plus a header."""
    import pydicom

    dataset = image.header
    if not (plan.rules or plan.stamp) or not plan.apply(dataset, released):
        image.reader.seek(0)
        while chunk := image.reader.read(CHUNK):
            target.write(chunk)
        return
    out = io.BytesIO()
    pydicom.dcmwrite(out, dataset, enforce_file_format=False)
    target.write(out.getvalue())
    image.copy_from_pixels(target)


def header_values(data, keywords: Sequence[str]) -> dict[str, str | None]:
    """Each keyword's value in a DICOM file's header (None: absent or empty), read up to the pixels.

    `data`: the file's bytes, or an open binary file (only its header is read)."""
    import pydicom

    source = io.BytesIO(data) if isinstance(data, bytes) else data
    dataset = pydicom.dcmread(source, stop_before_pixels=True, specific_tags=list(keywords))
    out = {}
    for keyword in keywords:
        value = dataset[keyword].value if keyword in dataset else None
        out[keyword] = str(value) if value not in (None, "") else None
    return out


def release_path(source: ReleaseSource) -> str:
    """Where an image sits inside a release: by pseudonymous patient and study."""
    return f"images/{source.patient_pseudonym}/{source.study_instance_uid}/{source.sop_instance_uid}.dcm"


@dataclass(frozen=True)
class CopyJob:
    """Copy selected files into a staged release, verifying each sha256 on the way (a `BatchStep` setup).

    A file whose bytes no longer match the manifest stops the release: publishing an unverified
    file is worse than publishing nothing. With a `store` (imaging/steps/objects.py), an image whose
    content key the store's index knows is placed from its stored object (a hard link, or a server-side
    copy), not written again; a new one is written into the store, then placed.
    """

    source_root: str
    target_root: str
    rules: tuple[HeaderRule, ...] = ()  # quasi-identifier attributes generalised as the metadata is
    stamp: StampPlan | None = None  # clinical labels stamped, when the cohort asks
    code: str = ""  # the rewrite's code version (part of every content key)
    store: str | None = None  # the object store's root; None: written into the release alone

    @property
    def plan(self) -> HeaderPlan:
        return HeaderPlan(self.rules, self.stamp, self.code)

    def __call__(self):
        return self.copy

    def copy(self, source: ReleaseSource) -> ReleaseFile:
        """Copy one file, its header as the release holds it; returns the released file's sha256, the bytes
        written (0: shared from the store) and the identities the verification of the release trusts.

        Streamed (`copy_rewritten`; imaging.deid.part10 for a file not in the plain form): the header parsed
        and rewritten, the pixel data and what follows copied in chunks, the source's sha256 verified as its
        bytes are read and the copy's computed as it is written, so memory does not grow with the file. A
        file that cannot be streamed (none the de-identification writes) is read whole."""
        relative = release_path(source)
        url = fsx.under(self.target_root, relative)  # names are manifest values: never outside the release
        plan = self.plan
        key = plan.content_key(source.sha256, source.released)
        if source.content_key is not None and source.content_key != key:
            raise RuntimeError("the content key computed by the build differs from the copy's own")
        store = ObjectStore(self.store) if self.store else None
        try:
            if store is not None and source.object_sha256:
                sealed = store.trusted(source.object_sha256, source.object_identity)
                if sealed is not None:
                    store.place(source.object_sha256, url)
                    return ReleaseFile(relative, source.object_sha256, key, 0, sealed, identity(url))
            written = self._write(source, plan, store.incoming() if store else url)
            if store is None:
                return ReleaseFile(relative, written.sha256, key, written.size, None, identity(url))
            obj = store.store(written.url, written.sha256)
            store.place(written.sha256, url)
            return ReleaseFile(relative, written.sha256, key, written.size, identity(obj), identity(url))
        except BaseException:
            fsx.remove(url)
            raise

    def _write(self, source: ReleaseSource, plan: HeaderPlan, url: str) -> "_Written":
        """Write the released file at `url`, hashing what is read and what is written, and verify the source."""
        released = json.loads(source.released or "{}")
        origin = f"{self.source_root}/{source.output_path}"
        fs, path = fsx.filesystem(url)
        fs.makedirs(fs._parent(path), exist_ok=True)
        try:
            with _open_write(url) as handle:
                done = copy_rewritten(origin, plan, released, handle)
            if done is None:  # not the plain form: part10's streamed copy (or a read whole) does it
                with _open_write(url) as handle:
                    done = self._write_part10(origin, plan, released, handle)
            if done.source_sha256 != source.sha256:
                raise RuntimeError(f"manifest checksum mismatch for {source.output_path}")
        except BaseException:
            fsx.remove(url)
            raise
        return _Written(url, done.sha256, done.size)

    @staticmethod
    def _write_part10(origin: str, plan: HeaderPlan, released: Mapping, handle) -> "_Copied":
        from imaging.deid.part10 import SourceImage

        with SourceImage(origin, trailing=False) as image:
            target = fsx.HashingWriter(handle)
            if image.streamed or not (plan.rules or plan.stamp):
                rewrite_header(image, plan, released, target)
            else:
                target.write(generalise_header(image.read_all(), plan.rules, released, plan.stamp))
            return _Copied(image.sha256(), target.hexdigest(), target.size)

    def step(self) -> BatchStep:
        return BatchStep(self, ReleaseSource, schema_of(ReleaseFile))


@dataclass(frozen=True)
class _Written:
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class _Copied:
    source_sha256: str  # every byte read, hashed as read
    sha256: str  # every byte written, hashed as written
    size: int


HEAD = 256 << 10  # the header is parsed from the first bytes read: a de-identified header is a few kB
WINDOW = 64 << 20  # bytes of a source mapped at a time to hash them
_PIXEL_DATA = b"\xe0\x7f\x10\x00"


def _open_write(url: str):
    fs, path = fsx.filesystem(url)
    return open(path, "wb", buffering=0) if fsx.is_local(fs) else fs.open(path, "wb")


def _open_read(url: str):
    fs, path = fsx.filesystem(url)
    return open(path, "rb", buffering=0) if fsx.is_local(fs) else fsx.open_read(url)


def _write_all(handle, view: memoryview) -> None:
    """Write all of `view` (an unbuffered file may take fewer bytes at a time)."""
    while len(view):
        done = handle.write(view)
        view = view[len(view) if done is None else done:]


def _read_into(raw, view: memoryview) -> int:
    """Fill `view` from `raw` (fewer bytes only at the end of the file)."""
    filled = 0
    while filled < len(view):
        got = raw.readinto(view[filled:])
        if not got:
            break
        filled += got
    return filled


def copy_rewritten(origin: str, plan: HeaderPlan, released: Mapping, handle) -> "_Copied | None":
    """The release copy at the speed of a copy: the header parsed from the file's first bytes and rewritten
    (`plan`), then every byte from the pixel data element on copied through one reused buffer (no allocation
    per chunk), both hashes computed on the way. The bytes are `rewrite_header`'s. None, with nothing written,
    when the file is not in the plain form every de-identified file has (its pixel data element within the
    first `HEAD` bytes, after an explicit or implicit little-endian header that is not deflated): the caller
    then takes the general path (imaging.deid.part10)."""
    import pydicom

    from imaging.deid.meta import transfer_syntax

    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with _open_read(origin) as raw:
        filled = _read_into(raw, view[:HEAD])
        head = bytes(view[:filled])
        reader = io.BytesIO(head)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pydicom's warnings quote header values
                dataset = pydicom.dcmread(reader, stop_before_pixels=True)
            syntax = transfer_syntax(dataset)
        except Exception:  # noqa: BLE001 - not the plain form (NotDeidentifiable, a parse error): the general
            return None  # path reads it and names the fault
        at = reader.tell()  # pydicom stops at the pixel data element's tag
        implicit, little = dataset.original_encoding
        if (head[at:at + 4] != _PIXEL_DATA or not little or syntax.is_deflated or not syntax.is_little_endian
                or (implicit, little) != (syntax.is_implicit_VR, syntax.is_little_endian)):
            return None
        read, written = hashlib.sha256(head), hashlib.sha256()
        if (plan.rules or plan.stamp) and plan.apply(dataset, released):
            first = memoryview(header_bytes(dataset) + head[at:])
        else:
            first = memoryview(head)
        _write_all(handle, first)
        written.update(first)
        size = len(first)
        rest = _kernel_copy(raw, handle, len(head), read, written)
        if rest is not None:
            return _Copied(read.hexdigest(), written.hexdigest(), size + rest)
        while filled := _read_into(raw, view):
            chunk = view[:filled]
            read.update(chunk)
            _write_all(handle, chunk)
            written.update(chunk)
            size += filled
    return _Copied(read.hexdigest(), written.hexdigest(), size)


def header_bytes(dataset) -> bytes:
    """The bytes `pydicom.dcmwrite(out, dataset, enforce_file_format=False)` writes for a header read from a file
    (`stop_before_pixels`), in a fraction of its time: the preamble and file meta by pydicom, then each element the
    plan did not touch (still raw as read, a defined length) from its tag, VR, length and raw value in one
    expression, as pydicom's writer encodes a raw element; every other element by pydicom's writer. A header whose
    encoding is not little-endian, or whose character set the plan changed, is written by pydicom whole. Its file
    meta's group length is set to the length written, as dcmwrite writes it (dcmwrite sets it on a copy).
    (tests/test_release_sharing.py: the same bytes as dcmwrite.)"""
    import struct

    import pydicom
    from pydicom.dataelem import RawDataElement
    from pydicom.filebase import DicomBytesIO
    from pydicom.filewriter import write_data_element, write_dataset, write_file_meta_info
    from pydicom.uid import DeflatedExplicitVRLittleEndian
    from pydicom.valuerep import EXPLICIT_VR_LENGTH_32, default_encoding

    implicit, little = dataset.original_encoding
    meta = getattr(dataset, "file_meta", None)
    if meta and meta.get("TransferSyntaxUID") == DeflatedExplicitVRLittleEndian:  # not a release copy's form
        out = io.BytesIO()
        pydicom.dcmwrite(out, dataset, enforce_file_format=False)
        return out.getvalue()
    fp = DicomBytesIO()
    fp.is_implicit_VR, fp.is_little_endian = implicit, little
    preamble = getattr(dataset, "preamble", None)
    if preamble:
        fp.write(preamble)
        fp.write(b"DICM")
    if meta:
        write_file_meta_info(fp, meta, enforce_standard=False)  # (it sets the group length to the one written)
    if not little or implicit is None or dataset.original_character_set != dataset._character_set:
        write_dataset(fp, dataset)
        return fp.getvalue()
    encodings = dataset.get("SpecificCharacterSet", default_encoding)
    pack = struct.pack
    for tag in sorted(dataset.keys()):
        if tag.element == 0 and tag.group > 6:  # retired group lengths: pydicom's writer leaves them out
            continue
        elem = dataset.get_item(tag)
        if isinstance(elem, RawDataElement) and isinstance(elem.value, bytes) and elem.length != 0xFFFFFFFF:
            value, vr = elem.value, elem.VR
            start = pack("<HH", tag >> 16, tag & 0xFFFF)
            if implicit:
                fp.write(start + pack("<I", len(value)) + value)
                continue
            if isinstance(vr, str) and len(vr) == 2:
                if vr in EXPLICIT_VR_LENGTH_32:
                    fp.write(start + vr.encode() + b"\0\0" + pack("<I", len(value)) + value)
                    continue
                if len(value) <= 0xFFFF:
                    fp.write(start + vr.encode() + pack("<H", len(value)) + value)
                    continue
        write_data_element(fp, elem, encodings)
    return fp.getvalue()


def _kernel_copy(raw, handle, offset: int, read, written) -> int | None:
    """Between two local files, the rest of the source from `offset`: copied by the kernel (`copy_file_range`) in a
    thread of its own while this one hashes the same bytes where the page cache holds them (a read-only map, no copy
    into Python), so each byte is copied once, as `cp` copies it, and the copy's waits on the disk overlap the
    hashing (both release the GIL); returns the bytes copied. None (nothing done) where either end is not a local
    file."""
    import mmap

    try:
        source, target = raw.fileno(), handle.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    size = os.fstat(source).st_size
    copying = _copier().submit(_copy_range, source, target, offset, size - offset, handle.tell()) \
        if size > offset else None
    try:
        position = offset
        while position < size:  # mapped a window at a time: a worker's address space and memory stay small
            base = position - position % mmap.ALLOCATIONGRANULARITY
            length = min(WINDOW, size - base)
            with mmap.mmap(source, length, access=mmap.ACCESS_READ, offset=base) as mapped:
                view = memoryview(mapped)[position - base:]
                try:
                    read.update(view)
                    written.update(view)
                finally:
                    view.release()
            position = base + length
    finally:
        if copying is not None:
            copying.result()  # its error, if any, raised here; never left running on a closed file
    return max(0, size - offset)


_COPIER: list = []  # the process's copying thread, made on first use (one per Python worker)


def _copier():
    from concurrent.futures import ThreadPoolExecutor

    if not _COPIER:
        _COPIER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="release-copy"))
    return _COPIER[0]


def _copy_range(source: int, target: int, offset: int, count: int, start: int) -> None:
    """`count` bytes of `source` from `offset` to `target` at `start`: by the kernel where it can, else by reads
    and writes."""
    done = 0
    kernel = True
    while done < count:
        if kernel:
            try:
                copied = os.copy_file_range(source, target, count - done, offset + done, start + done)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                kernel = False
                continue
        else:
            chunk = os.pread(source, min(CHUNK, count - done), offset + done)
            copied = os.pwrite(target, chunk, start + done) if chunk else 0
        if copied == 0:
            raise OSError("the source ended while it was copied")
        done += copied


@dataclass(frozen=True)
class WriteParquet:
    """A `mapInArrow` function that writes every batch it is given to one Parquet file with pyarrow, and to one
    CSV file beside it when asked (`csv_url`: the same rows, one pass).

    With `list_url`, the batches also carry `_line` (a line of the release copy's list, on every row) and rows
    whose `file` is null (an image copied that no metadata row names): every line goes to that text file, and
    only the rows with a `file` to the Parquet and CSV files.

    Spark's own Parquet writer lists each column's encodings in a JVM hash-set order that changes
    from one process to the next, so the same rows give different bytes; a release is identified
    by its checksums, so its metadata file must not. Run it on one partition (`coalesce(1)`).
    """

    url: str
    schema: object  # pyarrow.Schema of the rows
    csv_url: str | None = None
    list_url: str | None = None

    def __call__(self, batches):
        import contextlib

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        rows = 0
        with contextlib.ExitStack() as stack:
            writers = []
            for url, make in ((self.url, lambda h: pq.ParquetWriter(h, self.schema, compression="snappy")),
                              (self.csv_url, lambda h: pacsv.CSVWriter(h, self.schema))):
                if url is None:
                    continue
                fs, path = fsx.filesystem(url)
                fs.makedirs(fs._parent(path), exist_ok=True)
                writers.append(stack.enter_context(make(stack.enter_context(fs.open(path, "wb")))))
            lines = stack.enter_context(fsx.open_write(self.list_url)) if self.list_url else None
            for batch in batches:
                if lines is not None:
                    if batch.num_rows:
                        lines.write(("\n".join(batch.column("_line").to_pylist()) + "\n").encode())
                    batch = batch.filter(pc.is_valid(batch.column("file"))).select(self.schema.names)
                batch = batch.cast(self.schema) if batch.schema != self.schema else batch
                for writer in writers:
                    writer.write_batch(batch)
                rows += batch.num_rows
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([pa.field("rows", pa.int64())]))
