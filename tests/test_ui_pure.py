"""The pure parts behind the UI (issue 36): commit parts of a run, a check's verdict per partition, the review's
Markdown and its links, the partition URLs, platform/ui.yaml."""

import pytest

from imaging.driver.progress import commit_groups
from imaging.governance.review_md import CohortState, SiteDayRead, render_markdown
from imaging.quality.outcomes import CheckOutcome, Offender
from imaging.ui import UiFile, partition_path


def test_a_run_commits_its_site_days_in_parts_of_about_n_files_never_splitting_one():
    files = {"a": 3, "b": 3, "c": 10, "d": 1, "e": 1}
    assert commit_groups(list("abcde"), files.get, 6) == [["a", "b"], ["c"], ["d", "e"]]
    assert commit_groups(list("abcde"), files.get, 1) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert commit_groups(list("abcde"), files.get, 0) == [list("abcde")]  # 0: together
    assert commit_groups([], files.get, 5) == []
    assert commit_groups(list("ab"), lambda k: 0, 5) == [["a", "b"]]  # nothing landed: one part


def test_a_check_fails_only_on_the_partitions_where_its_failure_is():
    outcome = CheckOutcome("raw_image_index", "scans_per_patient_site_day", "ERROR", False, 12, 10,
                           partitions=("d1|a", "d1|b", "d2|a"), failed_partitions=("d1|b",),
                           offenders=(Offender("p1", 12, ("d1|b",)), Offender("p2", 11, ("d2|a",))))
    here, elsewhere = outcome.on_partition("d1|b"), outcome.on_partition("d1|a")
    assert not here.passed and here.failed_partitions == ("d1|b",) and [o.pseudonym for o in here.offenders] == ["p1"]
    assert elsewhere.passed and not elsewhere.offenders and not elsewhere.failed_partitions
    assert here.details["run_site_days"] == 3 and here.details["run_site_days_failed"] == 1
    # A failure that names no partition fails every partition it covered.
    whole = CheckOutcome("a", "c", "ERROR", False, 1, 0, partitions=("x", "y"))
    assert not whole.on_partition("x").passed and not whole.on_partition("y").passed
    assert CheckOutcome("a", "c", "ERROR", True, 0, 0, partitions=("x",)).on_partition("x").passed


def test_the_review_links_each_site_day_to_its_page_relative_to_the_host():
    state = CohortState("amd-oct", 1, "blocked", "below the minimum k: smallest class 2 < 5", "ab" * 32, 7, 5, 2, None)
    days = [SiteDayRead("2024-03-02|north", "tok2", 3), SiteDayRead("2024-03-01|north", "tok1", 4)]
    text = render_markdown(state, None, days, lambda asset, p: partition_path("/dagster", asset, p))
    assert "**Verdict: BLOCKED** (below the minimum k: smallest class 2 &lt; 5)" in text
    assert ("| [2024-03-01\\|north](/dagster/assets/anonymized_images?view=partitions&partition=2024-03-01%7Cnorth) "
            "| 4 |") in text
    assert text.index("2024-03-01") < text.index("2024-03-02")  # in key order
    assert "smallest equivalence class 2, minimum k 5" in text and "no release to approve" in text
    assert "file:" not in text and "](" in text


def test_partition_urls_and_the_ui_file():
    assert partition_path("", "raw_image_index", "2024-03-01|site-a") == \
        "/assets/raw_image_index?view=partitions&partition=2024-03-01%7Csite-a"
    with pytest.raises(ValueError):
        partition_path("", "../x", "p")
    ui = UiFile.model_validate({"url": "https://host.example/dagster/"})
    assert ui.path_prefix == "/dagster" and ui.link("/runs/1") == "https://host.example/dagster/runs/1"
    assert UiFile().link("/runs/1") == "/runs/1" and UiFile().files_per_commit == 5000
