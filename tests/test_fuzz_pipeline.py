"""The whole pipeline on mutated real files: every run succeeds, every file ends published or quarantined.

A sample of each mutation kind of `tests/fuzz_corpus.py` (pydicom's and pydicom-data's files truncated,
VRs flipped, undefined lengths, sequences nested 100 deep, wrong character sets, pixel data that lies
about its length, a lying NumberOfFrames) lands in two site-days; the three image assets and the cohort
release run over them through Dagster and Spark in a warehouse of their own. `-s` prints the counts
by step and reason; FUZZ_PIPELINE_PER_KIND sets the sample size (default 16 files a kind).
"""

from __future__ import annotations

import collections
import os

import pyarrow.dataset as pads
import pytest

from conftest import DATES, SITES, publish_cohorts, run_assets
from fuzz_corpus import KINDS, write_corpus
from imaging.catalogue import ANONYMIZE_QUARANTINE, INDEX_QUARANTINE, LINK_QUARANTINE, LINKED, RAW_IMAGE_INDEX, manifest
from imaging.driver.platform_files import load_clinical_policy

SITE, DAYS = SITES[0], DATES[:2]
PER_KIND = int(os.environ.get("FUZZ_PIPELINE_PER_KIND", "16"))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, defs):
    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    root = tmp_path_factory.mktemp("fuzz-pipeline")
    corpus = {}
    for number, kind in enumerate(KINDS):  # kinds alternate between the two site-days
        day = DAYS[number % len(DAYS)]
        corpus.update({(day, m.name): m for m in write_corpus(root / "landing" / "images" / SITE / day, kinds=(kind,),
                                                              limit=PER_KIND)})
    resources = {**defs.resources, "landing": LandingZone(root=str(root / "landing"),
                                                          files_per_task=defs.resources["landing"].files_per_task),
                 "warehouse": Warehouse(root=str(root / "warehouse"))}
    scoped = type(defs)(assets=defs.assets, resources=resources, executor=defs.executor)
    run_assets(scoped, ["raw_image_index", "linked_patient_metadata", "anonymized_images"],
               (f"{DAYS[0]}|{SITE}", f"{DAYS[-1]}|{SITE}"))  # asserts the run succeeded
    publish_cohorts(scoped, root / "warehouse")
    return root / "warehouse", corpus


def _table(warehouse, table) -> list[dict]:
    path = warehouse / table.path
    return pads.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []


def test_every_mutated_file_is_published_or_quarantined_and_the_counts_add_up(fuzzed):
    warehouse, corpus = fuzzed
    assert len(corpus) == PER_KIND * len(KINDS)
    index, index_held = _table(warehouse, RAW_IMAGE_INDEX), _table(warehouse, INDEX_QUARANTINE)
    linked, link_held = _table(warehouse, LINKED), _table(warehouse, LINK_QUARANTINE)
    published, held = _table(warehouse, manifest(load_clinical_policy())), _table(warehouse, ANONYMIZE_QUARANTINE)
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
