"""Finishing a release bundle: description files, then the manifest that names it.

The caller (the `published_cohort` asset, or a test) has written the research data into a folder:
`images/<patient>/<study>/<instance>.dcm`, `metadata.parquet`, `metadata.csv`. `finish_release`
adds, in this order, `release.json`, `datacard.json`, `datacard.md`, `lineage/openlineage.jsonl`,
then `SHA256SUMS` over every file, and returns the release id. Every byte is a function of the
inputs passed in: the same inputs give the same release id.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from imaging import fs as fsx
from imaging.governance.bundle import SUMS_FILE, ManifestEntry, hash_files, manifest_bytes
from imaging.governance.datacard import DataCardInputs, build_datacard
from imaging.governance.disclosure import KAnonymity, suppress
from imaging.governance.lineage import RELEASE
from imaging.governance.lineage_events import EVENTS_FILE, events_jsonl, release_events

RELEASE_JSON = "release.json"
DATACARD_JSON = "datacard.json"
DATACARD_MD = "datacard.md"


@dataclass(frozen=True)
class BuiltRelease:
    root: str
    release_id: str  # sha256 of SHA256SUMS: every byte of the release
    data_digest: str  # images and metadata only
    content_key: str  # sha256 of release.json: data digest, selection, options, code versions; no run facts
    files: int  # files listed in SHA256SUMS


@dataclass(frozen=True)
class Sharing:
    """How a build placed its images: how many were shared from the release object store (not read or written
    again), the bytes written for the others, and each image's identity as placed (path -> identity: what the
    release's verification trusts instead of hashing again what the copy just hashed)."""

    shared: int
    written_bytes: int
    identities: Mapping[str, str]
    seconds: float = 0.0  # the copy step's (every image placed)


@dataclass(frozen=True)
class CheckedRelease:
    """A built release and what its build checked: k-anonymity decides hold or block; its own checks
    (images copied and verified, one metadata row per image) failing means the bundle itself is wrong."""

    built: BuiltRelease
    k: KAnonymity
    verified: bool  # every own check but k-anonymity passed
    sharing: Sharing | None = None


def _json(value) -> bytes:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


def _line(entry: ManifestEntry) -> bytes:
    return manifest_bytes([entry])


def finish_release(root: str, card: DataCardInputs, images: Callable[[], Iterable[ManifestEntry]] | None = None
                   ) -> BuiltRelease:
    """Write the description files and SHA256SUMS into `root`; return the release's ids.

    `images`: a function giving the images' manifest entries sorted by path, as the copy that
    verified each image computed them (the asset writes them with Spark and streams them back, so
    no list of every image is held on the driver). Without it the images are read and hashed here.
    The data digest in `card` is ignored and recomputed from the data files.
    """
    fs, base = fsx.filesystem(root)
    top = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base.rstrip("/"), detail=False))
    others = [name for name in top if name != "images" and not name.startswith("metadata.")]
    if others:
        raise ValueError(f"a release folder holds only images/ and metadata.* before finishing; found {len(others)} "
                         "other files")
    present = [name for name in top if name.startswith("metadata.")]
    if images is None:
        hashed = hash_files(root)
        listed = [e for e in hashed if e.path.startswith("images/")]
        images = lambda: listed  # noqa: E731
    metadata = [ManifestEntry(p, fsx.sha256_url(f"{root}/{p}")) for p in present if p.startswith("metadata.")]
    # The data digest over the data manifest, streamed: image paths sort before metadata.*.
    digest_hash, count = hashlib.sha256(), 0
    previous = ""
    for entry in heapq.merge(images(), metadata, key=lambda e: e.path.encode()):
        if entry.path.encode() <= previous.encode():
            raise ValueError("image manifest entries must be unique and sorted by path")
        previous = entry.path
        digest_hash.update(_line(entry))
        count += 1
    digest = digest_hash.hexdigest()
    card = DataCardInputs(**{**card.__dict__, "data_digest": digest})
    datacard = build_datacard(card)
    s, c = card.selection, card.counts
    below = card.suppress_below
    summary = {
        "cohort": s.cohort, "release": f"v{s.version}", "description": s.description, "selection": s.predicate,
        "images": suppress(c.images, below), "patients": suppress(c.patients, below),
        "deidentification": {"standard": card.deid.standard, "engine": card.deid.engine,
                             "options": [name for name, _, _ in card.deid.options]},
        "clinical_fields": [e.column for e in card.lineage if e.table == RELEASE and e.column],
        "data_digest": digest,
        "code_versions": {v.asset: v.version for v in sorted(card.code_versions, key=lambda v: v.asset)},
        "files": {"images": "images/<patient>/<study>/<instance>.dcm", "metadata": ["metadata.parquet", "metadata.csv"],
                  "datacard": [DATACARD_MD, DATACARD_JSON], "lineage": EVENTS_FILE,
                  "checksums": f"{SUMS_FILE} (sha256sum -c); the release id is the sha256 of {SUMS_FILE}"},
        **({"labels_in_images": {"columns": {c["column"]: c["tag"] for c in card.stamp["columns"]},
                                 "where": f"{DATACARD_MD}, 'Labels in the images'"}} if card.stamp else {}),
    }
    events = release_events(cohort=s.cohort, version=s.version, lineage=card.lineage, inputs=card.inputs,
                            code_versions=card.code_versions, data_digest=digest,
                            clinical_sources=card.clinical_sources)
    fsx.write_bytes(f"{root}/{RELEASE_JSON}", _json(summary))
    fsx.write_bytes(f"{root}/{DATACARD_JSON}", datacard.json_bytes())
    fsx.write_bytes(f"{root}/{DATACARD_MD}", datacard.markdown_bytes())
    fsx.write_bytes(f"{root}/{EVENTS_FILE}", events_jsonl(events))
    described = [ManifestEntry(p, fsx.sha256_url(f"{root}/{p}"))
                 for p in (RELEASE_JSON, DATACARD_JSON, DATACARD_MD, EVENTS_FILE)]
    content_key = next(e.sha256 for e in described if e.path == RELEASE_JSON)
    # SHA256SUMS streamed in path order, hashed as it is written: its hash is the release id.
    path = f"{base.rstrip('/')}/{SUMS_FILE}"
    release_hash = hashlib.sha256()
    with fs.open(path, "wb") as handle:
        for entry in heapq.merge(images(), sorted(metadata + described, key=lambda e: e.path.encode()),
                                 key=lambda e: e.path.encode()):
            line = _line(entry)
            handle.write(line)
            release_hash.update(line)
    return BuiltRelease(root, release_hash.hexdigest(), digest, content_key, count + len(described))
