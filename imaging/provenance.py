"""The provenance ledger (identifiable zone): one row per published image, from landing file to output.

The anonymisation step writes one ledger row per de-identified file it publishes, partitioned like its
input (`date`, `site`), in the catalogue's LEDGER table (identifiable zone). A reviewer with
access to the identifiable zone walks a released file back through it: the release file's sha256 is
the output sha256 (a release copies bytes unchanged), which names the landing file, its checksum,
the run, the partition, the code version and the de-identification options.

The source SOP Instance UID is stored as a keyed hash only (`source_uid_hash`): whoever holds the
key and a source file can find its row; the ledger alone does not carry the UID.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Iterable

import pyarrow as pa

from imaging.pseudonym import Pseudonymizer

# The run-level columns the anonymising asset adds to every ledger row it writes (constant per run).
RUN_COLUMNS = pa.schema([pa.field(name, pa.string()) for name in
                         ("deid_profile", "deid_options", "code_version", "run_id", "run_started_at")])


@dataclass(frozen=True)
class ProvenanceRecord:
    """One row of the ledger (`imaging.catalogue.LEDGER`, identifiable zone), as the review reads it."""

    source_path: str  # the landing file's URL
    source_sha256: str
    source_uid_hash: str  # keyed hash of the source SOP Instance UID (see source_uid_hash)
    batch: str
    output_path: str  # relative to <warehouse>/deidentified/
    output_sha256: str
    deid_profile: str  # standard and engine, e.g. "DICOM PS3.15 Annex E ... / imaging.deid 1.0.0"
    deid_options: str  # comma-separated option names, in declaration order
    code_version: str  # of the anonymizing asset (imaging.governance.code_version)
    run_id: str  # the Dagster run that wrote the file
    run_started_at: str  # ISO 8601, UTC
    date: str  # partition: the landing day
    site: str  # partition: the landing site


PARTITION_COLUMNS = ("date", "site")
SCHEMA = pa.schema([pa.field(f.name, pa.string()) for f in fields(ProvenanceRecord)])


def source_uid_hash(pseudonymizer: Pseudonymizer, sop_instance_uid: str) -> str:
    """Keyed hash of a source SOP Instance UID: matchable with the key, not reversible without it."""
    return pseudonymizer.token("provenance-sop-instance-uid", sop_instance_uid.strip(), length=64)


def to_table(records: Iterable[ProvenanceRecord]) -> pa.Table:
    rows = [asdict(r) for r in records]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_ledger(root: str, records: Iterable[ProvenanceRecord]) -> None:
    """Write records as a hive-partitioned Parquet table (for tests and tools; the asset uses Spark)."""
    import pyarrow.parquet as pq

    pq.write_to_dataset(to_table(records), root, partition_cols=list(PARTITION_COLUMNS),
                        existing_data_behavior="delete_matching")


def lookup(root: str, output_sha256s: Iterable[str]) -> dict[str, list[ProvenanceRecord]]:
    """Ledger rows whose output_sha256 is one of the given checksums, by checksum.

    Reads only the columns it needs to filter, then the matching rows (pyarrow dataset filter).
    """
    import pyarrow.compute as pc

    from imaging import fs as fsx

    wanted = sorted(set(output_sha256s))
    dataset = fsx.parquet_table(root) if wanted else None
    if dataset is None:  # no ledger, or a ledger folder without a file: no row to find
        return {}
    table = dataset.to_table(filter=pc.field("output_sha256").isin(wanted))
    found: dict[str, list[ProvenanceRecord]] = {}
    for row in table.to_pylist():
        record = ProvenanceRecord(**{f.name: None if row.get(f.name) is None else str(row[f.name])
                                     for f in fields(ProvenanceRecord)})
        found.setdefault(record.output_sha256, []).append(record)
    return found
