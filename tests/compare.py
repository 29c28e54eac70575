"""Compare two warehouses over the partitions a run covered: files by bytes, tables by rows.

Used by the deployment tests: a run on another backend (cluster, Spark Connect, GCS, the production
instance) must leave exactly what the local run leaves. Parquet part files are not compared by
bytes (their layout depends on the number of tasks); their rows are, per partition folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import fsspec
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from imaging.catalogue import LEDGER, partition_dir


@dataclass(frozen=True)
class Output:
    """One output of a warehouse: a table partition (its rows, sorted) or a file (its sha256)."""

    kind: str  # "rows", "bytes" or "sums"
    value: object


# Columns that name the run that wrote a row (the provenance ledger's), not what it wrote: two runs of
# the same inputs differ there by design.
RUN_FACTS = ("run_id", "run_started_at")

# A release's own record of its runs: the data card, its OpenLineage events and the approval name run ids
# and times, and the release id (the sha256 of SHA256SUMS) follows from them. Two deployments run the
# same inputs under different runs, so these files are compared with run ids, times and the release's own
# id masked; everything else in a release (images, metadata, release.json) is compared by bytes or rows.
RUN_RECORDS = ("datacard.json", "datacard.md", "openlineage.jsonl", "APPROVAL.json")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _rows(fs: fsspec.AbstractFileSystem, files: Sequence[str]) -> list:
    rows = []
    for path in files:
        with fs.open(path, "rb") as handle:
            rows += [{k: v for k, v in row.items() if k not in RUN_FACTS} for row in pq.read_table(handle).to_pylist()]
    return sorted(rows, key=repr)


def _covered(relative: str, pairs: Iterable[tuple[str, str]], batches: set[str]) -> bool:
    parts = relative.split("/")
    for date, site in pairs:
        if f"date={date}" in parts and f"site={site}" in parts:
            return True
    return any(p in batches or p.removeprefix("batch=") in batches for p in parts)


def batches_of(root: str, pairs: Iterable[tuple[str, str]]) -> set[str]:
    """The opaque batch folders of the site-days `pairs`, from the warehouse's own ledger."""
    fs, base = url_to_fs(f"{root}/{LEDGER.path}")
    found: set[str] = set()
    for date, site in pairs:
        folder = f"{base}/{partition_dir(LEDGER, (date, site))}"
        if fs.exists(folder):
            files = [p for p in fs.find(folder) if p.endswith(".parquet")]
            found |= {row["batch"] for row in _rows(fs, files)}
    return found


def collect(root: str, pairs: Sequence[tuple[str, str]], cohorts: bool = False,
            tables_root: str | None = None) -> dict[str, Output]:
    """Every output of `root` (a path or URL) that belongs to the site-days `pairs` (and cohorts if asked).

    `tables_root` holds the ledger when Spark's tables live apart from the files (default: `root`).
    """
    fs, base = url_to_fs(root)
    base = base.rstrip("/")
    batches = batches_of(tables_root or root, pairs)
    tables: dict[str, list[str]] = {}
    outputs: dict[str, Output] = {}
    for path in sorted(fs.find(base)):
        relative = path[len(base) + 1:]
        parts = relative.split("/")
        if any(p.startswith(("_", ".")) for p in parts):  # staging folders, Spark markers, checksums
            continue
        if not (_covered(relative, pairs, batches) or (cohorts and "cohorts" in parts)):
            continue
        if path.endswith(".parquet"):
            # A release's single metadata.parquet is compared as its own table.
            folder = relative if "cohorts" in parts else relative.rsplit("/", 1)[0]
            tables.setdefault(folder, []).append(path)
        elif parts[-1] == "SHA256SUMS":
            with fs.open(path, "r") as handle:
                outputs[relative] = Output("sums", _sums_but_parquet(handle.read()))
        elif "cohorts" in parts and parts[-1] == "APPROVAL.json":
            # Signed approvals: each signs its release's id and the review report its signer saw (paths of
            # this deployment), so two deployments compare by who approved which cohort version.
            with fs.open(path, "r") as handle:
                outputs[relative] = Output("approvals", _approvers(handle.read()))
        elif "cohorts" in parts and parts[-1] in RUN_RECORDS:
            with fs.open(path, "r") as handle:
                outputs[relative] = Output("text", _run_facts_masked(handle.read(), _release_id(fs, path)))
        else:
            with fs.open(path, "rb") as handle:
                outputs[relative] = Output("bytes", hashlib.sha256(handle.read()).hexdigest())
    for folder, files in tables.items():
        outputs[folder] = Output("rows", _rows(fs, files))
    return outputs


def _sums_but_parquet(text: str) -> list[str]:
    """A release's checksum lines, but Parquet's and the run records' (RUN_RECORDS, compared masked).

    parquet-mr lists each column's encodings in the footer in a JVM-dependent order, so the same rows
    written by two Spark processes differ in bytes (seen: BIT_PACKED,RLE,PLAIN_DICTIONARY against
    BIT_PACKED,PLAIN_DICTIONARY,RLE); metadata.parquet is compared by rows instead.
    """
    return sorted(line for line in text.splitlines()
                  if not line.endswith(".parquet") and line.rsplit("/", 1)[-1].split()[-1] not in RUN_RECORDS)


def _release_id(fs: fsspec.AbstractFileSystem, path: str) -> str | None:
    """The id of the release holding `path`: the sha256 of its SHA256SUMS (None outside a release)."""
    folder = path.rsplit("/", 2 if path.endswith("openlineage.jsonl") else 1)[0]
    try:
        with fs.open(f"{folder}/SHA256SUMS", "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return None


def _approvers(text: str) -> list:
    from imaging.governance.approval import DecisionText

    decisions = [DecisionText.parse(d["message"].encode()) for d in json.loads(text)["approvals"]]
    return sorted((d.kind, d.principal, d.cohort, d.version, d.note) for d in decisions)


def _run_facts_masked(text: str, release_id: str | None) -> str:
    """`text` with run ids, times and the release's own id replaced by placeholders."""
    if release_id:
        text = text.replace(release_id, "<release id>")
    return _TIME.sub("<time>", _UUID.sub("<run id>", text))


def assert_same_outputs(candidate: str, reference: str, pairs: Sequence[tuple[str, str]],
                        cohorts: bool = False, rewrite: dict[str, str] | None = None,
                        candidate_tables: str | None = None, reference_tables: str | None = None,
                        ) -> dict[str, Output]:
    """The outputs of `candidate` for `pairs` equal `reference`'s; returns them (non-empty).

    `rewrite` maps text in the candidate's rows to the reference's (a landing root on gs:// against a
    local one: the identifiable tables record where each source file was).
    """
    got = collect(candidate, pairs, cohorts, candidate_tables)
    want = collect(reference, pairs, cohorts, reference_tables)
    if rewrite:
        got = {k: rewritten(v, rewrite) for k, v in got.items()}
    assert got, f"no outputs at all for {list(pairs)} under {candidate}"
    assert sorted(got) == sorted(want), (sorted(set(got) ^ set(want)))[:10]
    differing = [name for name in got if got[name] != want[name]]
    assert not differing, f"outputs that differ from the reference run: {differing[:10]}"
    return got


_LANDING_VERSION = re.compile(r"\b[0-9a-f]{32}\b")  # imaging.driver.landing.listing_version


def versions_masked(output: Output) -> Output:
    """A run record with the landing data versions masked, for two deployments whose landings are different
    stores: a site-day's landing version hashes its listing with each object's change marker (a GCS
    generation, a local file's mtime), so it differs between a bucket and a local copy of the same files.
    Everything else in the record, and the images, metadata and tables, are still compared."""
    return Output(output.kind, _LANDING_VERSION.sub("<landing version>", output.value)) if output.kind == "text" \
        else output


def rewritten(output: Output, rewrite: dict[str, str]) -> Output:
    if output.kind != "rows":
        return output
    rows = []
    for row in output.value:
        new = {}
        for key, value in row.items():
            if isinstance(value, str):
                for old, replacement in rewrite.items():
                    value = value.replace(old, replacement)
            new[key] = value
        rows.append(new)
    return Output("rows", sorted(rows, key=repr))
