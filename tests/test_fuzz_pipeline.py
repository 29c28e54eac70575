"""The whole pipeline on mutated real files: every run succeeds, every file ends published or quarantined.

A sample of each mutation kind of `tests/fuzz_corpus.py` (pydicom's and pydicom-data's files truncated,
VRs flipped, undefined lengths, sequences nested 100 deep, wrong character sets, pixel data that lies
about its length, a lying NumberOfFrames) lands in two site-days; the three image assets and the cohort
release run over them through Dagster and Spark in a warehouse of their own, shared with test_hostile's files in
the other site's days (one run for both: the conftest fixture `hostile_and_fuzzed`); every count here is this
module's site's. `-s` prints the counts
by step and reason; FUZZ_PIPELINE_PER_KIND sets the sample size (default 16 files a kind).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from conftest import DATES, SITES
from fuzz_corpus import KINDS, write_corpus
from imaging.catalogue import ANONYMIZE_QUARANTINE, INDEX_QUARANTINE, LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX
from test_hostile import published_of

SITE, DAYS = SITES[1], DATES[:2]  # test_hostile's files are SITES[0]'s, in the same warehouse
PER_KIND = int(os.environ.get("FUZZ_PIPELINE_PER_KIND", "16"))
# One world with test_hostile and test_fuzz_pipeline (the conftest fixture `hostile_and_fuzzed`): one worker.
pytestmark = pytest.mark.xdist_group("hostile-and-fuzzed")


def land_mutants(landing: Path) -> dict:
    """A sample of each kind in SITE's first two days under `landing` (kinds alternate between them):
    {(day, name): mutant}. Materialized with test_hostile's files in the other site's days (the conftest fixture
    `hostile_and_fuzzed`: one world, one run, for both modules)."""
    corpus = {}
    for number, kind in enumerate(KINDS):
        day = DAYS[number % len(DAYS)]
        corpus.update({(day, m.name): m for m in write_corpus(landing / "images" / SITE / day, kinds=(kind,),
                                                              limit=PER_KIND)})
    return corpus


@pytest.fixture(scope="module")
def fuzzed(hostile_and_fuzzed):
    return hostile_and_fuzzed.root / "warehouse", hostile_and_fuzzed.fuzzed


def _table(warehouse, table) -> list[dict]:
    """SITE's rows (test_hostile's files are the other site's, in the same warehouse)."""
    path = warehouse / table.path
    rows = pads.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []
    return [r for r in rows if r["site"] == SITE]


def test_every_mutated_file_is_published_or_quarantined_and_the_counts_add_up(fuzzed):
    warehouse, corpus = fuzzed
    assert len(corpus) == PER_KIND * len(KINDS)
    index, index_held = _table(warehouse, RAW_IMAGE_INDEX), _table(warehouse, INDEX_QUARANTINE)
    linked, link_held = _table(warehouse, LINKED), _table(warehouse, LINK_QUARANTINE)
    published, held = published_of(warehouse, SITE), _table(warehouse, ANONYMIZE_QUARANTINE)
    for day in DAYS:  # per site-day, as the accounting checks do
        listed = sum(1 for d, _ in corpus if d == day)
        on = lambda rows: [r for r in rows if r.get("date") == day]  # noqa: E731
        assert listed == len(on(index)) + len(on(index_held)), day
        assert len(on(index)) == len(on(linked)) + len(on(link_held)), day
    assert len(linked) == len(published) + len(held)
    assert all(r["reason"] for r in index_held + link_held + held)
    assert published, "no mutated file was publishable: the de-identification was never exercised"

    # The counts by step and reason, for the record (pytest -s).
    kind_of = {f"{warehouse.parent}/landing/images/{SITE}/{d}/{name}": m.kind for (d, name), m in corpus.items()}
    print(f"\n{len(corpus)} mutated files ({PER_KIND} of each of {len(KINDS)} kinds) in {len(DAYS)} site-days")
    for step, rows in (("index", index_held), ("link", link_held), ("de-identification", held)):
        for reason, n in sorted(collections.Counter(r["reason"] for r in rows).items(), key=lambda x: -x[1]):
            print(f"  quarantined by {step:18} {n:4}  {reason}")
    print(f"  published                            {len(published):4}")
    by_kind = collections.Counter(kind_of.get(r["source_path"], "?") for r in index_held + link_held + held)
    print("  quarantined by kind: " + ", ".join(f"{k} {by_kind[k]}" for k in KINDS))
