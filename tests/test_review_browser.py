"""The review report opened in headless Chromium: the column-lineage graph renders, offline.

Needs Debian's `chromium` and `chromium-driver` (CI installs them: .ci/run). The screenshot is
saved under tests/artifacts/review/ (git-ignored) and its path printed.
"""

import shutil
import tempfile
from pathlib import Path

import pytest

from imaging.governance import approval as gate
from imaging.governance.review import review
from imaging.governance.review_html import render_html
from approvers import approve_all
from release_helpers import SMALL_TEST, begin_commit, build_release, make_hospital

ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "review"
DRIVER = shutil.which("chromedriver")
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(not (DRIVER and BROWSER), reason="chromium and chromium-driver not installed")


def test_report_renders_the_lineage_graph_in_chromium(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    hospital = make_hospital(tmp_path)
    warehouse = str(hospital.warehouse)
    commit = begin_commit(hospital.warehouse)
    staging = gate.building_url(commit, warehouse, SMALL_TEST.name)
    built = build_release(hospital, Path(staging))
    key = gate.ReleaseKey(built.release_id, built.content_key)
    hold = gate.decide(key, published=None, k_passed=True)
    plan = gate.ReleasePlan(cohort=SMALL_TEST, decision=hold, building=staging, images=9)
    held = gate.carry_out([plan], commit, warehouse)[SMALL_TEST.name].path
    approve_all(held)
    publish = gate.decide(key, published=None, held=gate.list_held(warehouse), k_passed=True)
    plan = gate.ReleasePlan(cohort=SMALL_TEST, decision=publish, building="", images=9)
    target = gate.carry_out([plan], begin_commit(hospital.warehouse), warehouse)[SMALL_TEST.name].path
    report = tmp_path / "report.html"
    report.write_text(render_html(review(target, str(hospital.warehouse))), encoding="utf-8")

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-', dir=tmp_path)}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(report.as_uri())
        assert driver.find_element("id", "status").text == "VERIFIED"
        box = driver.execute_script(
            "const b = document.getElementById('lineage-graph').getBoundingClientRect(); return [b.width, b.height];")
        assert box[0] > 800 and box[1] > 400
        drawn = driver.execute_script(
            "return [...document.querySelectorAll('#lineage-graph path.edge')]"
            ".filter(p => p.getTotalLength() > 50 && p.getBoundingClientRect().width > 50).length;")
        edges = driver.execute_script("return document.querySelectorAll('#lineage-graph path.edge').length;")
        assert edges > 40 and drawn == edges
        labels = driver.execute_script(
            "return [...document.querySelectorAll('#lineage-graph g.node text')].filter("
            "t => t.getComputedTextLength() > 0).map(t => t.textContent);")
        assert {"age_band", "patient_pseudonym", "clinical.{date_of_birth|dob|birth_date}"} <= set(labels)
        assert "(dropped)" not in labels  # dropped columns are listed under the drawing, not drawn
        # Verdict, problems and approvals before the evidence; edge meanings in the legend and in words.
        order = driver.execute_script("return [...document.querySelectorAll('h1, h2')].map(h => h.textContent);")
        assert order.index("Approvals") < order.index("Column lineage") < order.index("Checks")
        assert driver.find_element("css selector", "table.legend").text.count("\n") >= 7
        assert len(driver.find_elements("css selector", "table.edges tbody tr")) > 20
        masked = driver.execute_script(
            "return document.querySelectorAll('#lineage-graph path.edge[data-masked=\"true\"]').length;")
        assert 0 < masked < edges
        # The page fits a 1,280 px window: nothing (a caption, a cell, the drawing) makes it scroll sideways.
        driver.set_window_size(1280, 1000)
        width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
        assert width[0] <= width[1] <= 1280, width
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "review-report.png"
        driver.set_window_size(1400, int(driver.execute_script("return document.body.scrollHeight;")) + 40)
        assert driver.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 20_000
    finally:
        driver.quit()
