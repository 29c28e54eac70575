"""Materialization metadata (imaging/driver/run_summary.py, assets/metadata.py): stable keys, nothing identifying."""

import pytest

from imaging.driver.run_summary import StageClock, StepSummary, slug

KNOWN = ("empty file", "not a DICOM Part 10 file", "duplicate SOP Instance UID in this site-day")


def _summary(quarantined, stages=None):
    clock = StageClock(("list", "index", "write"))
    clock.seconds.update(stages or {"list": 1.0, "index": 8.0, "write": 1.0})
    return StepSummary(partitions=2, files_in=100, bytes_in=50_000_000, rows_out=90, files_out=1, bytes_out=20_000,
                       quarantined=quarantined, stage_seconds=clock.seconds,
                       outputs={"index": "zone/some_table"}, known_reasons=KNOWN)


def test_same_numeric_keys_every_run():
    quiet = _summary({}).numbers()
    busy = _summary({"empty file": 3, "truncated or unreadable file (OSError)": 7}).numbers()
    assert set(quiet) <= set(busy) and set(busy) - set(quiet) == {"quarantined/truncated_or_unreadable_file_oserror"}
    assert quiet["quarantined/empty_file"] == 0 and busy["quarantined/empty_file"] == 3
    assert busy["quarantined"] == 10 and busy["dagster/row_count"] == 90
    assert busy["seconds"] == 10.0 and busy["files_per_second"] == 10.0 and busy["mb_per_second"] == 5.0
    assert (busy["seconds/list"], busy["seconds/index"], busy["seconds/write"]) == (1.0, 8.0, 1.0)
    assert all(isinstance(v, (int, float)) for v in busy.values())


def test_markdown_summary_and_values():
    summary = _summary({"empty file": 3})
    text = summary.markdown("raw_image_index")
    assert "| in | 100 | 50.0 | |" in text and "| out | 1 | 0.0 | 90 |" in text
    assert "empty file | 3" in text and "| index | 8.0 |" in text and "10.0 files/s, 5.0 MB/s" in text
    assert "`zone/some_table`" in text
    values = summary.values()
    assert values["dagster/row_count"] == 90 and values["mb_per_second"] == 5.0
    assert values["path/index"] == "zone/some_table"


def test_stages_are_declared():
    clock = StageClock(("list",))
    with clock.stage("list"):
        pass
    assert clock.seconds["list"] >= 0.0
    with pytest.raises(KeyError):
        with clock.stage("surprise"):
            pass
    assert slug("not a DICOM Part 10 file") == "not_a_dicom_part_10_file"
