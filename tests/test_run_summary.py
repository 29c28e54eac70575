"""Materialization metadata (imaging/driver/run_summary.py, assets/metadata.py): stable keys, nothing identifying."""

import pytest

from imaging.driver.run_summary import Counts, StageClock, StepSummary, slug

KNOWN = ("empty file", "not a DICOM Part 10 file", "duplicate SOP Instance UID in this site-day")


def _summary(quarantined, stages=None):
    clock = StageClock(("list", "index", "write"))
    clock.seconds.update(stages or {"list": 1.0, "index": 8.0, "write": 1.0})
    # Two site-days of one run: each has its own counts, the run adds them up.
    return StepSummary(by_partition={
        "2024-03-01|site-a": Counts(files_in=60, bytes_in=30_000_000, rows_out=55, files_out=1, bytes_out=12_000,
                                    quarantined={r: n for r, n in quarantined.items() if r == "empty file"}),
        "2024-03-02|site-a": Counts(files_in=40, bytes_in=20_000_000, rows_out=35, files_out=0, bytes_out=8_000,
                                    quarantined={r: n for r, n in quarantined.items() if r != "empty file"})},
        stage_seconds=clock.seconds, outputs={"index": "zone/some_table"}, known_reasons=KNOWN)


ONE, TWO = "2024-03-01|site-a", "2024-03-02|site-a"


def test_same_numeric_keys_every_run():
    quiet = _summary({}).numbers(ONE)
    busy = _summary({"empty file": 3, "truncated or unreadable file (OSError)": 7}).numbers(TWO)
    assert set(quiet) == set(busy)  # the reasons are a table (`quarantine`), not a key each
    assert busy["quarantined"] == 7 and busy["dagster/row_count"] == 35 and busy["files_in"] == 40
    assert busy["run/quarantined"] == 10 and busy["run/row_count"] == 90 and busy["run/partitions"] == 2
    assert busy["run/seconds"] == 10.0 and busy["run/files_per_second"] == 10.0 and busy["run/mb_per_second"] == 5.0
    assert (busy["run/seconds/list"], busy["run/seconds/index"], busy["run/seconds/write"]) == (1.0, 8.0, 1.0)
    assert all(isinstance(v, (int, float)) for v in busy.values())


def test_each_partition_its_own_counts_and_the_run_its_totals():
    summary = _summary({"empty file": 3, "truncated or unreadable file (OSError)": 7})
    one, two = summary.numbers(ONE), summary.numbers(TWO)
    assert (one["dagster/row_count"], two["dagster/row_count"]) == (55, 35)
    assert one["dagster/row_count"] + two["dagster/row_count"] == one["run/row_count"] == two["run/row_count"]
    assert (one["quarantined"], one["bytes_out"], two["bytes_out"]) == (3, 12_000, 8_000)
    # Each site-day's quarantine is one table: every known reason (0 when absent) and any other, most files first.
    assert [(r.reason, r.files) for r in summary.quarantine(ONE)] == [
        ("empty file", 3), ("duplicate SOP Instance UID in this site-day", 0), ("not a DICOM Part 10 file", 0)]
    assert [(r.reason, r.files) for r in summary.quarantine(TWO)][0] == ("truncated or unreadable file (OSError)", 7)
    assert {k: v for k, v in one.items() if k.startswith("run/")} == {k: v for k, v in two.items() if k.startswith("run/")}
    assert "partitions" not in one  # the run's size is `run/partitions`, never a partition's


def test_markdown_summary_and_values():
    summary = _summary({"empty file": 3})
    text = summary.markdown("raw_image_index", ONE)
    assert "| files in | 60 | 100 |" in text and "| rows out | 55 | 90 |" in text
    assert "empty file | 3 | 3 |" in text and "| index | 8.0 |" in text and "10.0 files/s, 5.0 MB/s" in text
    assert "in a run of 2 site-days" in text and "`zone/some_table`" in text
    values = summary.values(ONE)
    assert values["dagster/row_count"] == 55 and values["run/mb_per_second"] == 5.0
    assert values["path/index"] == "zone/some_table"


def test_stage_clock_adds_up_to_the_wall_time():
    import time

    clock = StageClock(("spark_start", "work", "other"))
    with clock.stage("work"):
        time.sleep(0.05)
        with clock.stage("spark_start"):  # nested: the outer stage is paused, nothing counted twice
            time.sleep(0.05)
    time.sleep(0.03)
    wall = clock.finish()
    assert abs(clock.total - wall) < 0.005
    assert 0.05 <= clock.seconds["spark_start"] < 0.08 and 0.05 <= clock.seconds["work"] < 0.08
    assert clock.seconds["other"] >= 0.03
    assert clock.breakdown().startswith(": ") and "spark_start 0.1" in clock.breakdown()


def test_stages_are_declared():
    clock = StageClock(("list",))
    with clock.stage("list"):
        pass
    assert clock.seconds["list"] >= 0.0
    with pytest.raises(KeyError):
        with clock.stage("surprise"):
            pass
    assert slug("not a DICOM Part 10 file") == "not_a_dicom_part_10_file"
