"""Cohort releases: copying published files into a release and checking what was copied."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from imaging import fs as fsx
from imaging.records import BatchStep, ReleaseFile, schema_of


@dataclass(frozen=True)
class ReleaseSource:
    """The manifest fields a release copy needs."""

    output_path: str
    sha256: str
    patient_pseudonym: str | None
    study_instance_uid: str | None
    sop_instance_uid: str | None


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

    def __call__(self):
        return self.copy

    def copy(self, source: ReleaseSource) -> ReleaseFile:
        data = fsx.read_bytes(f"{self.source_root}/{source.output_path}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != source.sha256:
            raise RuntimeError(f"manifest checksum mismatch for {source.output_path}")
        relative = release_path(source)
        fsx.write_under(self.target_root, relative, data)  # names are manifest values: never outside the release
        return ReleaseFile(relative, digest)

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
