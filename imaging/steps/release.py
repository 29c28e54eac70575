"""Cohort releases: copying published files into a release (quasi-identifiers in their headers generalised
as the metadata is) and checking what was copied."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Mapping, Sequence

from imaging import fs as fsx

CHUNK = 4 << 20  # bytes copied at a time
from imaging.records import BatchStep, ReleaseFile, schema_of


@dataclass(frozen=True)
class ReleaseSource:
    """The manifest fields a release copy needs."""

    output_path: str
    sha256: str
    patient_pseudonym: str | None
    study_instance_uid: str | None
    sop_instance_uid: str | None
    released: str | None = None  # JSON object: the release's value of each quasi-identifier column


# DICOM's enumerated values of attributes a released value is written to; any other value is emptied.
_ENUMERATED = {"PatientSex": frozenset({"M", "F", "O"})}


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
        allowed = _ENUMERATED.get(self.keyword)
        return value if value and (allowed is None or value in allowed) else None


def generalise_header(data: bytes, rules: Sequence[HeaderRule], released: Mapping) -> bytes:
    """A DICOM file's bytes with each rule's attribute as the release holds it; unchanged bytes when it
    already does. Type 2 attributes present are emptied rather than removed, keeping the file valid.
    (In memory: `CopyJob` streams the same rewrite, `rewrite_header`.)"""
    import pydicom

    dataset = pydicom.dcmread(io.BytesIO(data))
    if not _generalise(dataset, rules, released):
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


def rewrite_header(image, rules: Sequence[HeaderRule], released: Mapping, target) -> None:
    """`generalise_header`, streamed: a de-identified file (imaging.deid.part10.SourceImage, opened
    with `trailing=False`) written to `target` with its header rewritten and every byte from its pixel
    data on copied as it is, in chunks; the file copied whole, in chunks, when no rule changes it.
    The quasi-identifiers are all below the pixel data, so the bytes after it never change."""
    import pydicom

    dataset = image.header
    if not rules or not _generalise(dataset, rules, released):
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
    file is worse than publishing nothing.
    """

    source_root: str
    target_root: str
    rules: tuple[HeaderRule, ...] = ()  # quasi-identifier attributes generalised as the metadata is

    def __call__(self):
        return self.copy

    def copy(self, source: ReleaseSource) -> ReleaseFile:
        """Copy one file, its quasi-identifier attributes generalised; returns the released file's sha256.

        Streamed (imaging.deid.part10): the header parsed and rewritten, the pixel data and what
        follows copied in chunks, the source's sha256 verified as its bytes are read and the copy's
        computed as it is written, so memory does not grow with the file. A file that cannot be
        streamed (none the de-identification writes) is read whole."""
        from imaging.deid.part10 import SourceImage

        relative = release_path(source)
        url = fsx.under(self.target_root, relative)  # names are manifest values: never outside the release
        released = json.loads(source.released or "{}")
        try:
            with SourceImage(f"{self.source_root}/{source.output_path}", trailing=False) as image, \
                    fsx.open_write_under(self.target_root, relative) as handle:
                target = fsx.HashingWriter(handle)
                if image.streamed or not self.rules:
                    rewrite_header(image, self.rules, released, target)
                else:
                    target.write(generalise_header(image.read_all(), self.rules, released))
                if image.sha256() != source.sha256:
                    raise RuntimeError(f"manifest checksum mismatch for {source.output_path}")
        except BaseException:
            fsx.remove(url)
            raise
        return ReleaseFile(relative, target.hexdigest())

    def step(self) -> BatchStep:
        return BatchStep(self, ReleaseSource, schema_of(ReleaseFile))


@dataclass(frozen=True)
class WriteParquet:
    """A `mapInArrow` function that writes every batch it is given to one Parquet file with pyarrow.

    Spark's own Parquet writer lists each column's encodings in a JVM hash-set order that changes
    from one process to the next, so the same rows give different bytes; a release is identified
    by its checksums, so its metadata file must not. Run it on one partition (`coalesce(1)`).
    """

    url: str
    schema: object  # pyarrow.Schema of the rows

    def __call__(self, batches):
        import pyarrow as pa
        import pyarrow.parquet as pq

        fs, path = fsx.filesystem(self.url)
        fs.makedirs(fs._parent(path), exist_ok=True)
        rows = 0
        with fs.open(path, "wb") as handle, pq.ParquetWriter(handle, self.schema, compression="snappy") as writer:
            for batch in batches:
                writer.write_batch(batch.cast(self.schema) if batch.schema != self.schema else batch)
                rows += batch.num_rows
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([pa.field("rows", pa.int64())]))
