"""Landing zone data versions and the sensor's plan (imaging/driver/landing.py): pure, on real files."""

import os
import shutil

from imaging.driver.landing import LandedFile, listing_version, plan_requests, scan_landing
from synth import generate_hospital

SITES = ("site-a", "site-b")
DATES = ("2024-03-01", "2024-03-02")


def _scan(root):
    return scan_landing(str(root), SITES, DATES[0], "2024-03-31")


def test_one_version_per_landed_site_day(tmp_path):
    hospital = generate_hospital(tmp_path, seed=2, sites=SITES, dates=DATES, patients_per_site=2)
    scan = _scan(tmp_path)
    assert set(scan.site_days) == {f"{d}|{s}" for d in DATES for s in SITES}
    for (date, site), dicoms in hospital.dicom_files.items():
        landing = scan.site_days[f"{date}|{site}"]
        images = [p for p in (tmp_path / "images" / site / date).rglob("*") if p.is_file()]
        # Every file of the day's folder (DICOM and junk) plus the day's extract.
        assert landing.files == len(images) + 1 >= len(dicoms) + 1
        assert landing.bytes == sum(p.stat().st_size for p in images) + (
            tmp_path / "clinical" / site / f"{date}.csv").stat().st_size
    assert len({s.version for s in scan.site_days.values()}) == 4
    assert _scan(tmp_path) == scan, "listing again without a change gives the same versions"


def test_changes_move_only_their_site_day(tmp_path):
    generate_hospital(tmp_path, seed=2, sites=SITES, dates=DATES, patients_per_site=2)
    before = _scan(tmp_path).site_days
    folder = tmp_path / "images" / "site-a" / DATES[1]
    victim = next(p for p in sorted(folder.rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"\0")  # rewritten in place
    (tmp_path / "images" / "site-b" / DATES[0] / "extra").mkdir()
    shutil.copy(victim, tmp_path / "images" / "site-b" / DATES[0] / "extra" / "new.dcm")  # a new file
    after = _scan(tmp_path).site_days
    changed = {k for k in before if before[k].version != after[k].version}
    assert changed == {f"{DATES[1]}|site-a", f"{DATES[0]}|site-b"}
    os.utime(victim, ns=(1, 1))  # touched: a new time is a change too (content unread)
    assert _scan(tmp_path).site_days[f"{DATES[1]}|site-a"].version != after[f"{DATES[1]}|site-a"].version


def test_files_outside_any_partition_are_counted_not_versioned(tmp_path):
    generate_hospital(tmp_path, seed=2, sites=("site-a",), dates=DATES[:1], patients_per_site=2)
    for odd in ("images/site-z/2024-03-01/x.dcm", "images/site-a/2024-13-01/x.dcm", "images/site-a/2023-12-31/x.dcm",
                "images/site-a/loose.dcm", "clinical/site-a/notes.txt", "clinical/site-a/2024-03-02/deep.csv"):
        (tmp_path / odd).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / odd).write_bytes(b"x")
    scan = _scan(tmp_path)
    assert set(scan.site_days) == {f"{DATES[0]}|site-a"}
    assert scan.ignored == 6
    assert scan_landing(str(tmp_path / "nowhere"), SITES, DATES[0], DATES[1]).site_days == {}


def test_version_ignores_listing_order_but_not_content():
    a, b = LandedFile("images/s/d/1.dcm", 10, "1"), LandedFile("images/s/d/2.dcm", 20, "2")
    assert listing_version([a, b]) == listing_version([b, a])
    assert listing_version([a, b]) != listing_version([a, LandedFile("images/s/d/2.dcm", 21, "2")])


def test_plan_requests_new_and_changed_only(tmp_path):
    generate_hospital(tmp_path, seed=2, sites=SITES, dates=DATES, patients_per_site=2)
    current = _scan(tmp_path).site_days
    first = plan_requests(current, {}, {})
    assert [s.key for s in first.requests] == sorted(current) and first.cursor == {k: v.version for k, v in current.items()}
    assert plan_requests(current, first.cursor, {}).requests == [], "nothing touched, nothing requested"
    changed = dict(first.cursor, **{f"{DATES[0]}|site-b": "old"})
    assert [s.key for s in plan_requests(current, changed, {}).requests] == [f"{DATES[0]}|site-b"]
    # First tick on an instance that already ran some site-days after their files landed.
    newest = max(s.newest_mtime for s in current.values())
    done = {f"{DATES[0]}|site-a": newest + 1, f"{DATES[1]}|site-a": newest - 3600 * 24 * 365 * 100}
    plan = plan_requests(current, {}, done)
    assert plan.adopted == [f"{DATES[0]}|site-a"]
    assert [s.key for s in plan.requests] == [f"{DATES[0]}|site-b", f"{DATES[1]}|site-a", f"{DATES[1]}|site-b"]
    # A site-day whose files vanished leaves the cursor.
    fewer = {k: v for k, v in current.items() if k != f"{DATES[1]}|site-b"}
    assert f"{DATES[1]}|site-b" not in plan_requests(fewer, first.cursor, {}).cursor


def test_a_few_site_days_scan_as_the_whole_landing_does(tmp_path):
    from imaging.driver.landing import scan_site_days

    generate_hospital(tmp_path, seed=2, sites=SITES, dates=DATES, patients_per_site=2)
    whole = _scan(tmp_path).site_days
    few = scan_site_days(str(tmp_path), [(DATES[1], "site-a"), (DATES[0], "site-b"), ("2024-03-09", "site-a")])
    assert few == {k: whole[k] for k in (f"{DATES[1]}|site-a", f"{DATES[0]}|site-b")}
