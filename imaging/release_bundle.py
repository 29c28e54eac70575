"""Finishing a release bundle: description files, then the manifest that names it.

The caller (the `published_cohort` asset, or a test) has written the research data into a folder:
`images/<patient>/<study>/<instance>.dcm`, `metadata.parquet`, `metadata.csv`. `finish_release`
adds, in this order, `release.json`, `datacard.json`, `datacard.md`, `lineage/openlineage.jsonl`,
then `SHA256SUMS` over every file, and returns the release id. Every byte is a function of the
inputs passed in: the same inputs give the same release id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from imaging import fs as fsx
from imaging.bundle import DATA_PREFIXES, MANIFEST, data_digest, hash_files, manifest_bytes, release_id
from imaging.datacard import DataCardInputs, build_datacard
from imaging.disclosure import suppress
from imaging.lineage import RELEASE
from imaging.lineage_events import EVENTS_FILE, events_jsonl, release_events

RELEASE_JSON = "release.json"
DATACARD_JSON = "datacard.json"
DATACARD_MD = "datacard.md"


@dataclass(frozen=True)
class BuiltRelease:
    root: str
    release_id: str
    data_digest: str
    files: int  # files listed in SHA256SUMS


def _json(value) -> bytes:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


def finish_release(root: str, card: DataCardInputs, known: Mapping[str, str] | None = None) -> BuiltRelease:
    """Write the description files and SHA256SUMS into `root`; return the release id.

    `known`: checksums of data files computed while writing them (not read again). The data digest
    in `card` is ignored and recomputed from the data files, so it cannot disagree with them.
    """
    present = hash_files(root, known)
    data = [e for e in present if e.path.startswith(DATA_PREFIXES)]
    extra = [e.path for e in present if not e.path.startswith(DATA_PREFIXES)]
    if extra:
        raise ValueError(f"a release folder holds only images/ and metadata.* before finishing; found {len(extra)} "
                         "other files")
    digest = data_digest(data)
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
                  "checksums": f"{MANIFEST} (sha256sum -c); the release id is the sha256 of {MANIFEST}"},
    }
    events = release_events(cohort=s.cohort, version=s.version, lineage=card.lineage, inputs=card.inputs,
                            code_versions=card.code_versions, data_digest=digest)
    fsx.write_bytes(f"{root}/{RELEASE_JSON}", _json(summary))
    fsx.write_bytes(f"{root}/{DATACARD_JSON}", datacard.json_bytes())
    fsx.write_bytes(f"{root}/{DATACARD_MD}", datacard.markdown_bytes())
    fsx.write_bytes(f"{root}/{EVENTS_FILE}", events_jsonl(events))
    entries = hash_files(root, {e.path: e.sha256 for e in data})
    manifest = manifest_bytes(entries)
    fsx.write_bytes(f"{root}/{MANIFEST}", manifest)
    return BuiltRelease(root, release_id(manifest), digest, len(entries))
