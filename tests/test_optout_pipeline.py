"""The opt-out list through the real pipeline (real Spark, real DICOM, a generated hospital on its own
warehouse and instance): a listed patient is never de-identified nor released and only counted; a patient who
opts out after a release flags it and the next version leaves them out; their site-day is withdrawn from the
de-identified zone when it is materialized again; a removed opt-out lets the patient back in the next version;
a malformed row is quarantined; the reviewer's re-check fails a forged release that carries an opted-out
patient. The tests build on one another, in file order (one xdist group: this module)."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from conftest import DATES as WORLD_DATES, SITES, publish_cohorts, rooted, run_assets
from imaging.catalogue import (ANONYMIZE_QUARANTINE, COHORTS, HELD, LEDGER, OPTOUT_APPLIED, OPTOUT_QUARANTINE,
                               WITHDRAWN)
from imaging.optout import OPTED_OUT, PLACEHOLDER_ROW, list_version
from imaging.pseudonym import Pseudonymizer
from synth import generate_hospital
from synth.optouts import PLACEHOLDER, write_list

DATES = WORLD_DATES[:2]
IMAGES = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]
KEY = os.environ["IMAGING_PSEUDONYM_KEY"]
SINCE = "1 patients in this release have since opted out"


def pseudonym(patient_id: str) -> str:
    return Pseudonymizer(KEY).patient_id("NHS", patient_id)  # both test sites issue NHS numbers


def rows(root: Path, table) -> list[dict]:
    path = root / table.path
    return ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist() if path.exists() else []


def manifest_patients(warehouse: Path) -> set[str]:
    path = warehouse / "deidentified/anonymized_images/manifest"
    return set(ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["patient_pseudonym"]).column("patient_pseudonym").to_pylist())


def release_patients(root: Path) -> set[str]:
    return set(pq.read_table(root / "metadata.parquet", columns=["patient_pseudonym"]).column(0).to_pylist())


def published(warehouse: Path) -> dict[str, Path]:
    return {f"{p.parent.name}/{p.name}": p for p in sorted((warehouse / COHORTS.path).glob("*/v*"))}


def held(warehouse: Path, cohort: str) -> list[Path]:
    return sorted(p.parent for p in (warehouse / HELD.path / cohort).glob("*/SHA256SUMS"))


def latest_metadata(instance, asset: str, partition: str | None = None) -> dict:
    from dagster import AssetKey

    records = instance.fetch_materializations(AssetKey(asset), limit=50).records
    record = next(r for r in records if partition is None or r.partition_key == partition)
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


@pytest.fixture(scope="module")
def world(defs, tmp_path_factory):
    """A small hospital (2 sites x 2 days), A on site-a's list from the first day (with a blank and a placeholder
    row), materialized and published; B, released in all-fundus v1, is who opts out later; A's opt-out is removed
    later still."""
    from dagster import DagsterInstance

    root = tmp_path_factory.mktemp("optouts")
    landing, warehouse = root / "landing", root / "warehouse"
    hospital = generate_hospital(landing, seed=13, sites=SITES, dates=DATES, patients_per_site=3,
                                 oct_shape=(2, 16, 16), fundus_shape=(16, 16), broken_per_partition=False)
    fundus = {(i.site, i.patient_id) for i in hospital.instances if i.modality == "OP"}
    a = sorted(pid for site, pid in fundus if site == SITES[0])[0]
    b = sorted(pid for site, pid in fundus if site == SITES[1] and pid != a)[0]
    write_list(landing, SITES[0], DATES[0], [(a, None), ("", None), (PLACEHOLDER, None)])
    previous = os.environ.get("IMAGING_LANDING")
    os.environ["IMAGING_LANDING"] = str(landing)  # where imaging-review re-reads the lists
    ours = rooted(defs, landing, warehouse)
    with DagsterInstance.ephemeral() as instance:
        run_assets(ours, IMAGES, (f"{DATES[0]}|{SITES[0]}", f"{DATES[-1]}|{SITES[-1]}"), instance=instance)
        publish_cohorts(ours, warehouse, instance=instance)
        yield {"landing": landing, "warehouse": warehouse, "defs": ours, "instance": instance, "hospital": hospital,
               "a": a, "b": b, "v1": published(warehouse)["all-fundus/v1"]}
    os.environ["IMAGING_LANDING"] = previous or ""


def test_a_listed_patient_is_never_de_identified_nor_released_and_only_counted(world):
    from dagster import AssetKey
    from dagster._core.definitions.observe import observe

    from assets.optout_list import optout_list

    warehouse, hospital, a, b = world["warehouse"], world["hospital"], world["a"], world["b"]
    a_files = sorted(str(world["landing"] / i.rel_path) for i in hospital.instances if i.patient_id == a)
    # Not de-identified: held back as "patient opted out", counted per site-day.
    held_back = [r for r in rows(warehouse, ANONYMIZE_QUARANTINE) if r["reason"] == OPTED_OUT]
    assert sorted(r["source_path"] for r in held_back) == a_files
    assert pseudonym(a) not in manifest_patients(warehouse) and pseudonym(b) in manifest_patients(warehouse)
    for date in DATES:
        expected = sum(1 for i in hospital.instances if i.patient_id == a and i.date == date and i.site == SITES[0])
        meta = latest_metadata(world["instance"], "anonymized_images", f"{date}|{SITES[0]}")
        quarantine = {r.data["reason"]: r.data["files"] for r in meta["quarantine"].records} if meta["quarantined"] else {}
        assert quarantine.get(OPTED_OUT, 0) == expected
    # The lists applied are the run's (every site's list in force): said once, on the run's last site-day.
    last = latest_metadata(world["instance"], "anonymized_images", f"{DATES[-1]}|{SITES[-1]}")
    assert last["optout_list_received"] == {SITES[0]: DATES[0]}
    # Which list applied to each site-day, in the identifiable zone; the malformed rows quarantined with the reason.
    applied = rows(warehouse, OPTOUT_APPLIED)
    assert {(r["date"], r["site"]) for r in applied} == {(d, s) for d in DATES for s in SITES}
    assert {(r["list_site"], r["list_received"], r["list_patients"]) for r in applied} == {(SITES[0], DATES[0], 1)}
    bad = rows(warehouse, OPTOUT_QUARANTINE)
    assert [(r["date"], r["site"], r["reason"]) for r in bad] == [(DATES[0], SITES[0], PLACEHOLDER_ROW)] * 2

    # Absent from every release; its data card states the list applied and the counts, suppressed.
    releases = published(warehouse)
    assert "all-fundus/v1" in releases
    for release in releases.values():
        assert pseudonym(a) not in release_patients(release)
        card = json.loads((release / "datacard.json").read_text())
        section = card["optouts"]
        assert section["as_of"] == DATES[0] and [x["received"] for x in section["lists"]] == [DATES[0]]
        assert section["lists"][0]["version"] == list_version(KEY, [a])
        assert section["not_deidentified"] == {"images": "<10", "patients": "<10"}
        assert section["excluded_at_build"] == {"images": 0, "patients": 0} and section["follows"] is None
        assert "## Opt-outs" in (release / "datacard.md").read_text()
        assert {c["check"]: c["result"] for c in card["checks"]}["no_opted_out_patient"] == "passed"

    # Observed: one keyed version per site (site-b has none: the empty list's).
    observe([optout_list], instance=world["instance"], resources={
        "landing": world["defs"].resources["landing"], "deid": world["defs"].resources["deid"]})
    for site, patients in ((SITES[0], [a]), (SITES[1], [])):
        record = world["instance"].get_latest_data_version_record(AssetKey("optout_list"), True, site)
        assert record.asset_observation.tags["dagster/data_version"] == list_version(KEY, patients)

    # The review re-checks every released patient from the identifiable zone: none on the list; its HTML names
    # no site and no id.
    from imaging.governance.review import VERIFIED, review
    from imaging.governance.review_html import render_html

    report = review(str(releases["all-fundus/v1"]), str(warehouse))
    assert report.verdict == VERIFIED and report.optouts.on_list_at_build_images == 0
    assert report.optouts.images == len(report.traces) > 0 and report.optouts.untraced == 0
    html = render_html(report)
    assert "optout-lists" in html and not any(s in html for s in (*SITES, a, pseudonym(a)))

    # Named nowhere: not in the Dagster instance's events (metadata, logs) nor in any released file.
    instance = world["instance"]
    events = "\n".join(str(e) for r in instance.get_runs() for e in instance.all_logs(r.run_id))
    released = "\n".join(p.read_text(errors="replace") for p in (warehouse / COHORTS.path).rglob("*")
                         if p.is_file() and p.suffix in (".csv", ".json", ".md", ".jsonl"))
    for text in (events, released):
        assert a not in text and pseudonym(a) not in text


def test_a_patient_who_opts_out_after_release_flags_it_and_the_next_version_leaves_them_out(world):
    from imaging.governance import audit
    from imaging.governance.approval import manifest_id
    from imaging.governance.review import VERIFIED, review

    warehouse, instance, b, v1 = world["warehouse"], world["instance"], world["b"], world["v1"]
    assert pseudonym(b) in release_patients(v1)
    write_list(world["landing"], SITES[1], DATES[1], [(b, "add")])  # received the next day, as a change
    run_assets(world["defs"], ["published_cohort"], instance=instance)
    meta = latest_metadata(instance, "published_cohort", "all-fundus")  # the cohort's own materialization
    assert meta["optout_since"]["all-fundus/v1"] == SINCE
    assert meta["state"] == "held" and meta["optout_follows"] == "v1 -> v2"
    # B's site-days still hold B's de-identified images (left out of the build): listed for withdrawal.
    assert meta["optout_withdraw"] == sorted({f"{i.date}|{i.site}" for i in world["hospital"].instances
                                              if i.patient_id == b})
    (v2,) = held(warehouse, "all-fundus")
    assert json.loads((v2 / "release.json").read_text())["release"] == "v2"
    assert pseudonym(b) not in release_patients(v2) and pseudonym(b) in manifest_patients(warehouse)
    assert json.loads((v2 / "datacard.json").read_text())["optouts"]["follows"] == {
        "version": 1, "left": "<10", "returned": 0}
    # The audit log says so (a count), and the reviewer sees the flag on v1, which was built before the change.
    flagged = [e for e in audit.read_events(str(warehouse), manifest_id(str(v1))).events if e.event == audit.OPTED_OUT]
    assert len(flagged) == 1 and flagged[0].detail.startswith(SINCE) and b not in flagged[0].detail
    report = review(str(v1), str(warehouse))
    assert any(f.startswith(SINCE) for f in report.all_flags) and report.verdict == VERIFIED
    assert any("built before an opt-out list changed" in n for n in report.notes)
    assert review(str(v2), str(warehouse)).ok
    world["v2"] = v2


def test_materializing_site_days_again_withdraws_an_opted_out_patient_and_readmits_a_removed_one(world):
    from imaging.governance.review import review

    warehouse, hospital, a, b = world["warehouse"], world["hospital"], world["a"], world["b"]
    b_sources = {str(world["landing"] / i.rel_path) for i in hospital.instances if i.patient_id == b}
    outputs = [warehouse / "deidentified" / r["output_path"] for r in rows(warehouse, LEDGER) if r["source_path"] in b_sources]
    assert outputs and all(p.exists() for p in outputs)
    write_list(world["landing"], SITES[0], DATES[1], [(a, "remove")])  # A's opt-out removed the next day
    every = (f"{DATES[0]}|{SITES[0]}", f"{DATES[-1]}|{SITES[-1]}")
    run_assets(world["defs"], ["anonymized_images"], every, instance=world["instance"])
    # B's files went with the commit; B's images are held back; A's are de-identified now.
    assert not any(p.exists() for p in outputs) and pseudonym(b) not in manifest_patients(warehouse)
    assert not b_sources & {r["source_path"] for r in rows(warehouse, LEDGER)}
    assert {r["source_path"] for r in rows(warehouse, ANONYMIZE_QUARANTINE) if r["reason"] == OPTED_OUT} == b_sources
    assert pseudonym(a) in manifest_patients(warehouse)
    # The ledger rows moved to withdrawn_images: v1's copies of B's images still trace to their landing files.
    assert {r["source_path"] for r in rows(warehouse, WITHDRAWN)} == b_sources
    report = review(str(world["v1"]), str(warehouse))
    assert report.ok and all(t.record is not None for t in report.traces)
    assert any(f.startswith(SINCE) for f in report.all_flags)
    files = sorted(p.relative_to(warehouse) for p in (warehouse / "deidentified/anonymized_images").rglob("*")
                   if p.is_file())
    run_assets(world["defs"], ["anonymized_images"], every, instance=world["instance"])  # idempotent
    assert sorted(p.relative_to(warehouse) for p in (warehouse / "deidentified/anonymized_images").rglob("*")
                  if p.is_file()) == files


def test_the_reviewer_fails_a_forged_release_that_carries_an_opted_out_patient(world, tmp_path):
    from imaging.governance.bundle import SUMS_FILE, hash_files, manifest_bytes
    from imaging.governance.review import FAILED, review

    # v1 holds B, who opted out after it was built: a forger re-labels it as built under the newer lists (v2's).
    forged = tmp_path / "forged"
    shutil.copytree(world["v1"], forged)
    (forged / "APPROVAL.json").unlink()
    card = json.loads((forged / "datacard.json").read_text())
    newer = json.loads((world["v2"] / "datacard.json").read_text())["optouts"]
    card["optouts"].update(as_of=newer["as_of"], lists=newer["lists"])
    (forged / "datacard.json").write_text(json.dumps(card, indent=2, sort_keys=True))
    (forged / SUMS_FILE).unlink()
    (forged / SUMS_FILE).write_bytes(manifest_bytes(hash_files(str(forged))))
    report = review(str(forged), str(world["warehouse"]))
    assert report.verdict == FAILED
    assert any("on the opt-out list in force when the release was built" in p for p in report.problems)
    assert world["b"] not in "\n".join(report.problems) and pseudonym(world["b"]) not in "\n".join(report.problems)


def test_a_removed_opt_out_lets_the_patient_back_in_the_next_version(world):
    from imaging.governance import audit
    from imaging.governance.approval import manifest_id

    warehouse, a, b = world["warehouse"], world["a"], world["b"]
    run_assets(world["defs"], ["published_cohort"], instance=world["instance"])
    meta = latest_metadata(world["instance"], "published_cohort", "all-fundus")
    assert meta["state"] == "held" and meta["optout_follows"] == "v1 -> v2"
    v2 = warehouse / HELD.path / "all-fundus" / meta["release_id"]
    assert v2 != world["v2"] and json.loads((v2 / "release.json").read_text())["release"] == "v2"
    assert pseudonym(a) in release_patients(v2) and pseudonym(b) not in release_patients(v2)
    assert meta["optout_withdraw"] == []  # every site-day holding B has been materialized since B opted out
    # v1 was flagged again with the same count: logged once.
    events = audit.read_events(str(warehouse), manifest_id(str(world["v1"]))).events
    assert [e.event for e in events].count(audit.OPTED_OUT) == 1


def test_publishing_the_next_version_withdraws_the_one_holding_an_opted_out_patient_and_their_bytes_go(world):
    """The held v2 (without B) approved and published: it shares v1's images (the same files: hard links to the
    release object store), and v1, which holds B, is withdrawn at once (its folder keeps WITHDRAWN.json), the
    audit log says so and how many images' bytes went. No current version, held or published, reaches B's bytes,
    and nothing under the de-identified zone's releases holds them any more."""
    from approvers import approve_all
    from imaging.catalogue import RELEASE_OBJECTS
    from imaging.governance import audit
    from imaging.governance.approval import list_held, manifest_id
    from imaging.governance.bundle import read_manifest
    from imaging.governance.retention import ENDED, current_roots, listed_images
    from imaging.governance.review import review

    warehouse, instance, v1 = world["warehouse"], world["instance"], world["v1"]
    entries = read_manifest(str(v1)).entries
    b_bytes = {e.sha256 for e in entries if e.path.startswith(f"images/{pseudonym(world['b'])}/")}
    kept = {e.path: (v1 / e.path).stat().st_ino for e in entries if e.path.startswith("images/")}
    rid = manifest_id(str(v1))
    assert b_bytes
    building = latest_metadata(instance, "published_cohort", "all-fundus")["release_id"]  # the held v2 without B
    approve_all(next(h.path for h in list_held(str(warehouse), "all-fundus") if h.release_id == building))
    run_assets(world["defs"], ["published_cohort"], instance=instance)
    v2 = published(warehouse)["all-fundus/v2"]
    assert review(str(v2), str(warehouse)).ok
    same = [p for p in kept if (v2 / p).exists()]
    assert same and all((v2 / p).stat().st_ino == kept[p] for p in same)  # shared, not written again
    assert sorted(p.name for p in v1.iterdir()) == [ENDED]
    assert json.loads((v1 / ENDED).read_text())["event"] == "withdraw"
    events = [e.event for e in audit.read_events(str(warehouse), rid).events]
    assert events[-2:] == ["withdraw", "reclaim"]
    meta = latest_metadata(instance, "published_cohort", "all-fundus")
    assert meta["versions_ended"]["v1"].startswith("withdraw: superseded by v2")
    reachable = set().union(*(listed_images(root) for root in current_roots(str(warehouse))))
    assert not b_bytes & reachable
    stored = {p.stem for p in (warehouse / RELEASE_OBJECTS.path).rglob("*.dcm")}
    assert not b_bytes & stored and reachable <= stored
    released = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (warehouse / COHORTS.path).rglob("*.dcm")}
    assert not b_bytes & released
