"""Progress arithmetic and wording (imaging/driver/progress.py): pure, no Spark."""

from imaging.driver.progress import MB, ProgressMeter, StageCounts, format_duration, fraction_done


def stages(completed, tasks=8):
    # A narrow listing stage finished, then the wide stage that opens the files.
    return [StageCounts(0, 2, 2), StageCounts(1, tasks, completed)]


def test_fraction_follows_the_widest_stage():
    assert fraction_done([]) == 0.0
    assert fraction_done(stages(0)) == 0.0
    assert fraction_done(stages(2)) == 0.25
    assert fraction_done(stages(8)) == 1.0
    assert fraction_done([StageCounts(3, 0, 0)]) == 0.0


def test_reports_files_bytes_rate_and_eta():
    meter = ProgressMeter("raw_image_index", files_total=480, bytes_total=480 * MB, interval_s=5)
    first = meter.update(stages(0), 1.0)
    assert first.files_done == 0 and first.bytes_per_s is None and first.eta_s is None
    assert first.message() == "raw_image_index: 0/480 files (0%), 0.0 of 480.0 MB, rate pending, ETA pending"
    report = meter.update(stages(2), 11.0)  # 120 files, 120 MB in 10 s since the first sample
    assert (report.files_done, report.bytes_done) == (120, 120 * MB)
    assert report.bytes_per_s == 12 * MB and report.eta_s == 30.0
    assert report.message() == "raw_image_index: 120/480 files (25%), 120.0 of 480.0 MB, 12.0 MB/s, ETA 0:00:30"


def test_at_most_one_report_per_interval_and_only_when_files_moved():
    meter = ProgressMeter("x", files_total=100, bytes_total=100 * MB, interval_s=5)
    assert meter.update(stages(0), 0.5) is not None
    assert meter.update(stages(1), 3.0) is None      # within the interval
    assert meter.update(stages(1), 6.0) is not None  # interval passed, files moved
    assert meter.update(stages(1), 12.0) is None     # interval passed, nothing moved
    assert meter.update(stages(2), 12.5) is not None
    assert meter.update(stages(8), 30.0) is None     # all done: the closing line says so instead
    meter = ProgressMeter("x", files_total=1000, bytes_total=1000 * MB, interval_s=5)
    lines = [meter.update([StageCounts(1, 100, k)], float(k)) for k in range(60)]
    assert sum(line is not None for line in lines) == 60 // 5


def test_never_goes_backwards():
    meter = ProgressMeter("x", files_total=240, bytes_total=240 * MB, interval_s=0)
    assert meter.update([StageCounts(0, 24, 12)], 1.0).files_done == 120
    # A later job shows the finished wide stage again as skipped, with nothing completed.
    assert meter.estimate([StageCounts(0, 24, 24), StageCounts(2, 24, 0), StageCounts(3, 1, 0)], 2.0).files_done == 240


def test_rate_is_over_a_recent_window():
    meter = ProgressMeter("x", files_total=1000, bytes_total=1000 * MB, interval_s=1, window_s=30)
    for t in range(0, 61):  # slow for a minute: 1 task of 100 in 60 s...
        meter.estimate([StageCounts(1, 100, 1 if t >= 59 else 0)], float(t))
    for t in range(61, 71):  # ...then one task per second
        report = meter.estimate([StageCounts(1, 100, 1 + (t - 60))], float(t))
    # The recent pace (10 MB/s) sets the ETA, not the whole-run average (~2 MB/s).
    assert report.bytes_per_s > 3 * MB
    assert report.eta_s < (1000 - report.bytes_done / MB) / 3


def test_closing_line_and_durations():
    meter = ProgressMeter("anonymized_images", files_total=3, bytes_total=6 * MB)
    assert meter.finish(2.0).message() == "anonymized_images: 3/3 files, 6.0 MB in 0:00:02, 3.0 MB/s"
    assert format_duration(0.2) == "0:00:01" and format_duration(3725) == "1:02:05" and format_duration(-1) == "0:00:00"
