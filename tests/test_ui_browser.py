"""End to end in a real browser: headless Chromium (Debian's) driven by Selenium against `dagster dev`.

`dagster dev` runs on loopback with a temporary instance and a tiny generated hospital (2 sites x 2 days): the
one the proxy test puts nginx in front of (tests/conftest.py, fixture `dagster_ui`). The steps run in file order
and share one browser, as an operator would, following docs/ui.md's recipes:

1. open the asset graph (dismissing the "Join the Dagster community" dialog) and find the assets;
2. materialize one site-day of raw_image_index from its partitions view and see the run succeed, with the
   landing it read recorded as its input's version;
3. backfill the three image assets for one site over two dates from the imaging group's page: one run, three
   assets, two partitions, its backfill page advancing site-day by site-day while the run goes on;
4. open each partition of that run: each shows its own row count (the table's), the run's totals apart;
5. open the first site-day's materialization and read its metadata;
6. a site-day's page shows its own checks (and the check's Partitions tab);
7. change one landed site-day, observe the landing zone from its page: exactly that site-day's partitions of
   the three assets become unsynced, and the partition's page says so;
8. publish every cohort (job `publish`, a backfill of every cohort partition, one run): each is held with its
   own state and review; the Overview shows the runs;
9. a reviewer, through the authenticating proxy (nginx, TLS, a reviewer's login, a read-only webserver), opens a
   held cohort's review, reads its verdict and site-days, follows one to its page and the link to the whole review
   (contact sheet, opt-out table; it fits a 1,280 px window), and cannot launch anything: each kind refused in words;
10. an operator, through the same proxy, turns a failure sensor on (its page says where messages go), lists a
   site-day's quarantined files by token, re-runs a site-day that changed nothing from the UI (every cohort stays
   synced), previews a sensor with an empty cursor (no error), and a failed run's notice reaches the SMTP sink.

The world's landing folders are named after patients (hospital numbers), as some exports are: nothing a reviewer
sees names one.

Every step saves a screenshot under `tests/artifacts/ui-browser/` (or $UI_SCREENSHOTS); the folder is printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

from dagster_server import REPO, UI_DATES, UI_SITES, DagsterProcess, graphql

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver")

SITES, DATES = UI_SITES, UI_DATES  # the shared server's hospital
ASSETS = ("raw_image_index", "linked_patient_metadata", "anonymized_images", "published_cohort")
SITE_DAY = f"{DATES[0]}|{SITES[0]}"        # step 2
BACKFILL_SITE = SITES[1]                    # step 3: this site over both dates
CHANGED = f"{DATES[1]}|{BACKFILL_SITE}"     # step 7: this landed site-day changes
PIPELINE = ("raw_image_index", "linked_patient_metadata", "anonymized_images")
NOTHING = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of no bytes
CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                # The proxy step's nginx has a throwaway self-signed certificate.
                "--ignore-certificate-errors",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                "--window-size=1600,1100")
# Two cores shared with other work: Spark runs take tens of seconds here; waits are generous but bounded.
UI_WAIT, RUN_WAIT = 60, 480
DIALOG = "//*[@role='dialog'][.//*[contains(text(), 'Launch runs to materialize')]]"


class UI:
    """The browser, the server and the screenshot folder, shared by the steps."""

    def __init__(self, driver, server: DagsterProcess, shots: Path, root: Path, world=None):
        self.driver, self.server, self.shots, self.root = driver, server, shots, root
        self.server_world = world  # tests/dagster_server.py SharedDagsterDev: the reviewers' server, the mail sink
        self.step = 0
        self.facts: dict[str, str] = {}

    def open(self, path: str) -> None:
        self.driver.get(self.server.url + path)

    def shot(self, name: str) -> Path:
        self.step += 1
        path = self.shots / f"{self.step:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def wait(self, predicate, what: str, timeout: float = UI_WAIT, poll: float = 0.5, refresh_every: float = 0):
        """Poll `predicate()` until it returns something truthy; a screenshot and a clear error if not."""
        deadline, last_refresh = time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except Exception:  # the page is re-rendering: try again
                pass
            if refresh_every and time.monotonic() - last_refresh > refresh_every:
                self.driver.refresh()
                last_refresh = time.monotonic()
            time.sleep(poll)
        failed = self.shot("FAILED-" + re.sub(r"\W+", "-", what)[:40])
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (screenshot {failed})\n"
                             f"server log:\n{self.server.log_tail(2000)}")

    def click(self, find, what: str, timeout: float = UI_WAIT) -> None:
        """Find and click, again if the page re-rendered in between (a stale element)."""
        def attempt():
            element = find()
            if isinstance(element, list):
                element = element[0] if element else None
            if element is None:
                return False
            element.click()
            return True

        self.wait(attempt, what, timeout)

    def visible(self, xpath: str, within=None):
        from selenium.webdriver.common.by import By

        return [e for e in (within or self.driver).find_elements(By.XPATH, xpath) if e.is_displayed()]

    def button(self, label: str, *, prefix: bool = False, within=None):
        test = f"starts-with(normalize-space(.), '{label}')" if prefix else f"normalize-space(.)='{label}'"
        found = self.visible(f".//button[{test}]", within)
        return found[0] if found else None

    def text_shown(self, text: str) -> bool:
        return bool(self.visible(f"//*[normalize-space(text())='{text}']"))

    def dismiss_community_dialog(self) -> bool:
        """The first visit's "Join the Dagster community" dialog: press Skip. True if it was there."""
        if not self.visible("//*[contains(text(), 'Join the Dagster community')]"):
            return False
        self.click(lambda: self.button("Skip"), "the dialog's Skip button")
        self.wait(lambda: not self.visible("//*[contains(text(), 'Join the Dagster community')]"),
                  "the community dialog to close")
        return True

    def launch_dialog(self, asset: str, dates: str, site: str) -> None:
        """Open `asset`'s partitions view, press Materialize and select `dates` x `site` in the dialog."""
        self.open(f"/assets/{asset}?view=partitions")
        self.click(lambda: self.button("Materialize", prefix=True), "the Materialize button")
        self.wait(lambda: self.visible(f"{DIALOG}"), "the launch dialog")
        self.dismiss_community_dialog()
        self.choose_partitions(dates, site)

    def choose_partitions(self, dates: str, site: str) -> None:
        """In the open launch dialog: type `dates` and pick `site`."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        def type_dates():
            field = self.visible(f"{DIALOG}//input[starts-with(@placeholder, 'ex: ')]")[0]
            field.click()
            field.send_keys(dates, Keys.TAB)
            return True

        self.wait(type_dates, "the date field")
        self.click(lambda: self.visible(f"{DIALOG}//*[contains(text(), 'Select a partition')]"), "the site selector")
        self.click(lambda: [i for i in self.driver.find_elements(
            By.CSS_SELECTOR, "[data-radix-popper-content-wrapper] [role=menuitem]") if i.text.strip() == site],
            f"{site} in the site list")
        self.driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)

    def launched_link(self, pattern: str) -> str:
        """The link of the "Launched run" / "Created backfill" toast."""
        from selenium.webdriver.common.by import By

        def link():
            for anchor in self.driver.find_elements(By.TAG_NAME, "a"):
                href = anchor.get_attribute("href") or ""
                if re.search(pattern, href):
                    return href
            return None

        return self.wait(link, f"a link matching {pattern}")


TERMINAL_RUN = ("SUCCESS", "FAILURE", "CANCELED")


def run_status(ui: UI, run_id: str) -> str:
    return graphql(ui.server.url, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                   {"id": run_id})["runOrError"]["status"]


def backfill_status(ui: UI, backfill_id: str) -> str:
    return graphql(ui.server.url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
        ... on PartitionBackfill { status } } }""", {"id": backfill_id})["partitionBackfillOrError"]["status"]


@pytest.fixture(scope="module")
def ui(dagster_ui, tmp_path_factory, request):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    root = tmp_path_factory.mktemp("ui")
    shots = Path(os.environ.get("UI_SCREENSHOTS") or REPO / "tests" / "artifacts" / "ui-browser")
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line(f"\nUI screenshots: {shots}")

    server = dagster_ui.get()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=root)
    options.add_argument(f"--user-data-dir={profile}")
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        driver.set_page_load_timeout(UI_WAIT)
        yield UI(driver, server, shots, dagster_ui.root, dagster_ui)
    finally:
        if driver:
            driver.quit()


def test_asset_graph_shows_the_two_groups_and_their_assets(ui):
    from selenium.webdriver.common.by import By

    ui.open("/asset-groups")
    ui.wait(lambda: ui.visible("//*[contains(text(), 'Join the Dagster community')]"),
            "the first visit's community dialog")
    ui.shot("first-visit-community-dialog")
    assert ui.dismiss_community_dialog()

    def matches(label: str, name: str) -> bool:
        # Zoomed out, the graph truncates long names in the middle: "linked_p…_metadata".
        head, ellipsis, tail = label.partition("…")
        return label == name or bool(ellipsis and name.startswith(head) and name.endswith(tail))

    def graph_nodes(shown: set[str]):
        # Nodes of the lineage graph (assets, or collapsed groups) are drawn inside SVG foreignObjects.
        # A node's first line is its name (zoomed in, the lines below are its status).
        labels = {(e.text.strip().splitlines() or [""])[0].strip()
                  for e in ui.driver.find_elements(By.XPATH, "//*[local-name()='foreignObject']")} - {""}
        names = {name for name in shown if any(matches(label, name) for label in labels)}
        return names if names == shown and len(labels) == len(shown) else None

    # The global lineage: the site-day pipeline's group and the release group.
    assert ui.wait(lambda: graph_nodes({"imaging", "release"}), "the two asset groups") == {"imaging", "release"}
    ui.shot("asset-groups")
    # The imaging group: the observed landing zone and opt-out lists and the three image assets (and a link to
    # published_cohort, downstream in the release group). No PACS site here: no pacs_landing.
    imaging = {"landing_zone", "optout_list", *PIPELINE, "published_cohort"}
    ui.open("/locations/imaging_platform/asset-groups/imaging")
    assert ui.wait(lambda: graph_nodes(imaging), "the imaging group's assets") == imaging
    ui.shot("asset-graph-imaging-group")
    ui.open("/locations/imaging_platform/asset-groups/release")
    ui.wait(lambda: any(matches(label, "published_cohort") for label in {
        (e.text.strip().splitlines() or [""])[0].strip()
        for e in ui.driver.find_elements(By.XPATH, "//*[local-name()='foreignObject']")}), "published_cohort")


def test_materialize_one_site_day_from_the_ui(ui):
    date, site = SITE_DAY.split("|")
    ui.launch_dialog("raw_image_index", date, site)
    ui.wait(lambda: ui.visible(f"{DIALOG}//*[normalize-space(text())='1 partition']"), "'1 partition' selected")
    ui.wait(lambda: ui.button("Launch 1 run"), "the 'Launch 1 run' button")
    ui.shot("launch-one-site-day")
    ui.click(lambda: ui.button("Launch 1 run"), "the 'Launch 1 run' button")
    run_url = ui.launched_link(r"/runs/[0-9a-f]{8}-[0-9a-f-]{27}$")
    run_id = run_url.rsplit("/", 1)[1]
    ui.driver.get(run_url)
    status = ui.wait(lambda: run_status(ui, run_id) in TERMINAL_RUN and run_status(ui, run_id), "the run to finish",
                     timeout=RUN_WAIT, poll=1)
    # The run page follows the run live; its header tag says how it ended.
    ui.wait(lambda: ui.text_shown("Success") or ui.text_shown("Failure"), "the run page's status")
    ui.shot("site-day-run-succeeded")
    assert status == "SUCCESS" and ui.text_shown("Success"), f"run {run_id} ended {status}: {ui.server.log_tail()}"
    # The run's log carries the step's progress lines (files done of total, MB/s, ETA), then its closing line.
    log_filter = ui.wait(lambda: ui.visible("//input[contains(@placeholder, 'Filter')]"), "the run log filter")[0]
    log_filter.click()
    log_filter.send_keys("raw_image_index:")
    ui.wait(lambda: ui.visible("//*[contains(text(), 'raw_image_index: ') and contains(text(), ' MB in ')]"),
            "the step's closing progress line")
    ui.shot("site-day-run-progress-lines")
    run = graphql(ui.server.url, """query($id: ID!) { runOrError(runId: $id) { ... on Run {
        status tags { key value } assetMaterializations { partition } } } }""", {"id": run_id})["runOrError"]
    assert run["status"] == "SUCCESS"
    assert {t["key"]: t["value"] for t in run["tags"]}["dagster/partition"] == SITE_DAY
    assert [m["partition"] for m in run["assetMaterializations"]] == [SITE_DAY]
    # Nobody observed the landing zone: the run recorded the landing it read, and its partition names it.
    tags = {t["key"]: t["value"] for t in latest_materialization(ui, "raw_image_index", SITE_DAY)["tags"]}
    landing = tags["dagster/input_data_version/landing_zone"]
    assert landing not in ("INITIAL", NOTHING) and tags["dagster/input_event_pointer/landing_zone"] != "NULL"
    assert landing == observed_version(ui, SITE_DAY)
    ui.facts["site_day_run"] = run_id


def latest_materialization(ui: UI, asset: str, partition: str) -> dict:
    return graphql(ui.server.url, """query($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) {
        ... on Asset { assetMaterializations(partitions: $p, limit: 1) { runId partition tags { key value }
        metadataEntries { label ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
        ... on TextMetadataEntry { text } ... on MarkdownMetadataEntry { mdStr }
        ... on UrlMetadataEntry { url } ... on TableMetadataEntry { table { records } } } } } } }""",
                   {"key": {"path": [asset]}, "p": [partition]}
                   )["assetOrError"]["assetMaterializations"][0]


def numbers(materialization: dict) -> dict:
    return {e["label"]: e.get("intValue", e.get("floatValue", e.get("url"))) for e in materialization["metadataEntries"]}


def observed_version(ui: UI, partition: str) -> str:
    """The latest observed data version of a landing_zone partition."""
    events = graphql(ui.server.url, """query($p: [String!]) { assetOrError(assetKey: {path: ["landing_zone"]}) {
        ... on Asset { assetObservations(partitions: $p, limit: 1) { tags { key value } } } } }""",
                     {"p": [partition]})["assetOrError"]["assetObservations"]
    return {t["key"]: t["value"] for t in events[0]["tags"]}["dagster/data_version"]


def stale_partitions(ui: UI, asset: str, partitions: list[str]) -> set[str]:
    statuses = graphql(ui.server.url, """query($key: AssetKeyInput!, $p: [String!]!) { assetNodeOrError(assetKey: $key) {
        ... on AssetNode { staleStatusByPartition(partitions: $p) } } }""",
                       {"key": {"path": [asset]}, "p": partitions})["assetNodeOrError"]["staleStatusByPartition"]
    return {p for p, status in zip(partitions, statuses) if status == "STALE"}


def rows_by_partition(ui: UI, asset: str) -> dict[str, int]:
    """Rows per `date|site` of the asset's table as the server's warehouse holds it (the ledger for the
    de-identified images: its manifest names no date or site)."""
    import pyarrow.dataset as pads

    from imaging.catalogue import LEDGER, LINKED, RAW_IMAGE_INDEX

    table = {"raw_image_index": RAW_IMAGE_INDEX, "linked_patient_metadata": LINKED, "anonymized_images": LEDGER}[asset]
    rows = pads.dataset(ui.root / "warehouse" / table.path, format="parquet", partitioning="hive").to_table(
        columns=["date", "site"]).to_pylist()
    counts: dict[str, int] = {}
    for row in rows:
        counts[f"{row['date']}|{row['site']}"] = counts.get(f"{row['date']}|{row['site']}", 0) + 1
    return counts


def launch_job(ui: UI, job: str, button: str) -> None:
    """docs/ui.md: Jobs > JOB > BUTTON (the job page's materialize button)."""
    ui.open(f"/locations/imaging_platform/jobs/{job}")
    ui.click(lambda: ui.button(button, prefix=True), f"the job page's {button!r} button")


def wait_for_run(ui: UI, run_id: str) -> str:
    return ui.wait(lambda: run_status(ui, run_id) in TERMINAL_RUN and run_status(ui, run_id), "the run to finish",
                   timeout=RUN_WAIT, poll=1)


def test_a_backfill_of_two_dates_of_a_site_is_one_run_and_its_page_advances(ui):
    """docs/ui.md, "Run the pipeline as a backfill": Lineage > the imaging group > Materialize all, dates and a site,
    Launch backfill: an asset backfill, one run (one Spark session) of the three assets over both site-days, and
    its page advancing site-day by site-day while that run goes on."""
    ui.open("/locations/imaging_platform/asset-groups/imaging")
    ui.click(lambda: ui.button("Materialize all", prefix=True), "the group's 'Materialize all' button")
    ui.wait(lambda: ui.visible(f"{DIALOG}"), "the launch dialog")
    assert ui.visible("//*[contains(text(), 'Launch runs to materialize 3 assets')]")
    ui.choose_partitions(f"[{DATES[0]}...{DATES[1]}]", BACKFILL_SITE)
    ui.wait(lambda: ui.visible(f"{DIALOG}//*[normalize-space(text())='2 partitions']"), "'2 partitions' selected")
    ui.wait(lambda: ui.button("Launch backfill"), "the 'Launch backfill' button")
    ui.shot("pipeline-backfill-launch-two-dates-one-site")
    ui.click(lambda: ui.button("Launch backfill"), "the 'Launch backfill' button")
    backfill_url = ui.launched_link(r"/runs/b/[a-z]+$")
    backfill_id = backfill_url.rsplit("/", 1)[1]
    ui.driver.get(backfill_url)
    # The page advances while the one run goes on: the server commits a run's site-days one at a time
    # (platform/ui.yaml files_per_commit, tests/dagster_server.py), and the daemon counts each as it commits.
    seen: list[tuple[int, ...]] = []

    def finished_or_advanced():
        status = backfill_status(ui, backfill_id)
        shown = tuple(int(v) for v in re.findall(r"(\d+)% completed", ui.driver.find_element("tag name", "body").text))
        if shown and (not seen or seen[-1] != shown):
            seen.append(shown)
            if status == "REQUESTED" and set(shown) != {0} and set(shown) != {100}:
                ui.shot("pipeline-backfill-advancing")
        return status.startswith(("COMPLETED", "FAILED", "CANCELED"))

    ui.wait(finished_or_advanced, "the backfill to finish", timeout=RUN_WAIT, poll=1)
    advancing = [v for v in seen if set(v) != {0} and set(v) != {100}]
    assert advancing, f"the backfill's page never showed progress between 0% and 100%: {seen}"
    ui.facts["backfill_progress"] = repr(seen)
    ui.driver.refresh()

    def status_badge():  # the "Status" field of the backfill's overview (not the "Succeeded" column)
        fields = ui.visible("//*[normalize-space(text())='Status']/..")
        return fields and fields[0].text.replace("Status", "").strip()

    assert ui.wait(status_badge, "the backfill's status") == "Succeeded"
    ui.shot("pipeline-backfill-succeeded")
    backfill = graphql(ui.server.url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
        ... on PartitionBackfill { status isAssetBackfill numPartitions runs(limit: 10) { runId status jobName
        tags { key value } assetMaterializations { assetKey { path } partition } } } } }""",
                       {"id": backfill_id})["partitionBackfillOrError"]
    assert backfill["status"] == "COMPLETED_SUCCESS" and backfill["isAssetBackfill"] and backfill["numPartitions"] == 2
    (run,) = backfill["runs"]  # one run: three assets, two site-days, one Spark session
    assert run["status"] == "SUCCESS"
    wanted = {(a, f"{d}|{BACKFILL_SITE}") for a in PIPELINE for d in DATES}
    assert {(m["assetKey"]["path"][0], m["partition"]) for m in run["assetMaterializations"]} == wanted
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["imaging/launched_by"] == "operator (UI backfill)" and tags["imaging/reason"]
    ui.facts["pipeline_run"] = run["runId"]


def test_each_partition_of_the_run_shows_its_own_row_count(ui):
    assert "pipeline_run" in ui.facts, "needs the pipeline run of the step before"
    partitions = [f"{d}|{BACKFILL_SITE}" for d in DATES]
    for asset in PIPELINE:
        truth = rows_by_partition(ui, asset)
        shown = {p: numbers(latest_materialization(ui, asset, p)) for p in partitions}
        for p, m in shown.items():
            assert m["dagster/row_count"] == truth.get(p, 0), (asset, p, m["dagster/row_count"], truth.get(p))
            # This server's runs commit one site-day at a time: `run/` is the part committed with it, itself.
            assert m["run/partitions"] == 1 and m["run/row_count"] == m["dagster/row_count"]
    ui.open("/assets/anonymized_images?view=partitions&partition=" + urllib.parse.quote(CHANGED))
    ui.wait(lambda: ui.text_shown(CHANGED) and ui.text_shown("run/row_count"), "the partition's own metadata")
    ui.shot("partition-own-row-count-beside-run-total")


def test_a_materialization_shows_its_metadata(ui):
    assert "site_day_run" in ui.facts, "needs the site-day materialized in the step before"
    latest = latest_materialization(ui, "raw_image_index", SITE_DAY)
    assert latest["runId"] == ui.facts["site_day_run"]
    labels = [e["label"] for e in latest["metadataEntries"]]
    assert {"dagster/row_count", "files_in", "bytes_in", "files_out", "quarantined", "run/seconds",
            "run/seconds/spark_start", "run/seconds/checks", "run/mb_per_second", "path/table", "summary"} <= set(labels), labels
    ui.open("/assets/raw_image_index?view=partitions&partition=" + urllib.parse.quote(SITE_DAY))
    ui.wait(lambda: ui.text_shown(SITE_DAY) and ui.text_shown("Metadata"), "the site-day's materialization")
    ui.wait(lambda: all(ui.text_shown(label) for label in labels), f"metadata rows {labels}")
    ui.shot("site-day-materialization-metadata")
    # Further down: the Markdown summary table and the warehouse-relative paths.
    summary = ui.visible("//*[normalize-space(text())='summary']")[0]
    ui.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", summary)
    ui.shot("site-day-materialization-summary")


def test_a_site_day_page_shows_its_own_checks(ui):
    """docs/ui.md, "Audit a site-day": the site-day's page lists its own checks (its materialization's `checks`
    table), each recorded on that partition after its materialization; the check's Partitions tab shows them."""
    assert "site_day_run" in ui.facts, "needs the site-day materialized in step 2"
    nodes = graphql(ui.server.url, """{ assetNodes { assetKey { path }
        assetChecksOrError { ... on AssetChecks { checks { name } } } } }""")["assetNodes"]
    names = sorted(c["name"] for n in nodes if n["assetKey"]["path"] == ["raw_image_index"]
                   for c in (n["assetChecksOrError"] or {}).get("checks", []))
    own = graphql(ui.server.url, """query($p: String) { assetCheckExecutions(assetKey: {path: ["raw_image_index"]},
        checkName: "files_accounted", partition: $p, limit: 1) { runId partition evaluation { success timestamp
        targetMaterialization { runId timestamp } } } }""", {"p": SITE_DAY})["assetCheckExecutions"]
    assert own and own[0]["partition"] == SITE_DAY and own[0]["evaluation"]["success"]
    target = own[0]["evaluation"]["targetMaterialization"]
    assert target["runId"] == latest_materialization(ui, "raw_image_index", SITE_DAY)["runId"]
    assert own[0]["evaluation"]["timestamp"] >= target["timestamp"], "a check is never before what it checks"
    ui.open("/assets/raw_image_index?view=partitions&partition=" + urllib.parse.quote(SITE_DAY))
    ui.wait(lambda: ui.text_shown(SITE_DAY) and ui.text_shown("checks"), "the site-day's materialization")
    table = ui.visible("//*[normalize-space(text())='checks']")[0]
    ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", table)
    per_run = [n for n in names if n not in ("scans_per_patient", "sop_instance_uid_in_one_partition")]
    ui.wait(lambda: all(ui.visible(f"//td[normalize-space(.)='{n}']") for n in per_run), f"checks {per_run} listed")
    ui.shot("site-day-page-its-own-checks")
    # The asset's Checks tab: one check, its Partitions tab (each site-day's status).
    ui.open("/assets/raw_image_index?view=checks")
    ui.click(lambda: ui.visible("//*[starts-with(normalize-space(text()), 'files_accounted')]"), "check files_accounted")
    ui.wait(lambda: ui.text_shown("Evaluation result") and ui.text_shown("Partition"), "its latest execution")
    ui.shot("asset-check-latest-execution-with-partition")
    ui.click(lambda: ui.visible("//*[normalize-space(text())='Partitions']/ancestor::button[1]")
             or ui.visible("//button[normalize-space(.)='Partitions']"), "the check's Partitions tab")
    ui.wait(lambda: ui.text_shown(SITE_DAY.split("|")[0]), "the check's partitions")
    ui.shot("asset-check-partitions")


def test_a_changed_landing_site_day_makes_exactly_its_partitions_unsynced(ui):
    """docs/ui.md, "What landed": a site-day's files change; Observe on landing_zone's page records the new
    version; exactly that site-day's partitions of the three assets are unsynced, the partition says so."""
    assert "pipeline_run" in ui.facts, "needs the pipeline run of step 3"
    partitions = [f"{d}|{BACKFILL_SITE}" for d in DATES]
    assert all(stale_partitions(ui, a, partitions) == set() for a in PIPELINE), "in sync after the run"
    date, site = CHANGED.split("|")
    victim = next(p for p in sorted((ui.root / "landing" / "images" / site / date).rglob("*")) if p.is_file())
    stat = victim.stat()
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 3_600_000_000_000))  # rewritten an hour later
    before = observed_version(ui, CHANGED)
    ui.open("/assets/landing_zone")
    ui.click(lambda: ui.button("Observe"), "landing_zone's Observe button")
    run_id = ui.launched_link(r"/runs/[0-9a-f]{8}-[0-9a-f-]{27}$").rsplit("/", 1)[1]
    assert wait_for_run(ui, run_id) == "SUCCESS"
    assert observed_version(ui, CHANGED) != before
    assert {a: stale_partitions(ui, a, partitions) for a in PIPELINE} == {a: {CHANGED} for a in PIPELINE}
    # The landing's observation says what the site-day holds.
    # The landing's observations (Events tab; the latest is the changed site-day, the last in key order) say what
    # the site-day holds.
    ui.open("/assets/landing_zone?view=events")
    ui.wait(lambda: ui.text_shown("newest_file") and ui.visible(f"//a[normalize-space(text())='{CHANGED}']"),
            "the changed site-day's observation and its metadata")
    ui.shot("landing-observation-metadata")
    for asset in PIPELINE:
        ui.open(f"/assets/{asset}?view=partitions&partition=" + urllib.parse.quote(CHANGED))
        ui.wait(lambda: ui.visible("//*[starts-with(normalize-space(text()), 'Unsynced')]"), f"{asset}: 'Unsynced'")
    ui.shot("downstream-partition-unsynced")
    ui.open("/assets/anonymized_images?view=partitions&partition=" + urllib.parse.quote(partitions[0]))
    ui.wait(lambda: ui.text_shown(partitions[0]) and ui.text_shown("Materialized"), "the other site-day")
    assert not ui.visible("//*[starts-with(normalize-space(text()), 'Unsynced')]"), "the unchanged site-day is in sync"


def test_publish_every_cohort_holds_each_with_its_own_review(ui):
    """docs/ui.md, "Publish, every cohort at once": Jobs > publish > Materialize all, every cohort, Launch backfill:
    one run; each cohort's partition carries its own state, release id and review (Markdown), no file: links.
    Then the Overview shows the runs."""
    from dagster_server import every_cohort

    cohorts = every_cohort()
    launch_job(ui, "publish", "Materialize")
    ui.wait(lambda: ui.visible(f"{DIALOG}"), "the launch dialog")
    every = f"{DIALOG}//*[normalize-space(text())='{len(cohorts)} partitions']"
    ui.click(lambda: ui.button("All", within=ui.visible(DIALOG)[0]), "the dialog's 'All' partitions")
    ui.wait(lambda: ui.visible(every), "every cohort selected")
    ui.wait(lambda: ui.visible(f"{DIALOG}//*[contains(text(), 'in a single run')]"), "'a single run' said")
    ui.shot("publish-every-cohort-launch")
    ui.click(lambda: ui.button("Launch backfill"), "the 'Launch backfill' button")
    backfill_id = ui.launched_link(r"/runs/b/[a-z]+$").rsplit("/", 1)[1]
    ui.wait(lambda: backfill_status(ui, backfill_id).startswith(("COMPLETED", "FAILED", "CANCELED")),
            "the publish backfill to finish", timeout=RUN_WAIT, poll=1)
    backfill = graphql(ui.server.url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
        ... on PartitionBackfill { status runs(limit: 10) { runId jobName tags { key value } } } } }""",
                       {"id": backfill_id})["partitionBackfillOrError"]
    assert backfill["status"] == "COMPLETED_SUCCESS", ui.server.log_tail()
    (run,) = backfill["runs"]  # every cohort, one run
    states = {}
    for cohort in cohorts:
        m = latest_materialization(ui, "published_cohort", cohort)
        values = {e["label"]: e.get("text") or e.get("mdStr") or e.get("intValue") for e in m["metadataEntries"]}
        assert m["runId"] == run["runId"]
        states[cohort] = values["state"]
        assert not any("file:" in str(v) for v in values.values())
        if values["state"] == "held":
            assert len(values["release_id"]) == 64 and values["verdict"] == "AWAITING APPROVAL"
            assert "### Site-days read" in values["review"] and "/assets/anonymized_images?view=partitions" in values["review"]
    held = sorted(c for c, state in states.items() if state == "held")
    assert held, states
    ui.facts["held_cohort"] = held[0]
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert run["jobName"] == "publish" and tags["imaging/launched_by"] == "operator (UI backfill)"
    ui.open("/overview/activity/timeline")
    ui.wait(lambda: ui.visible("//*[contains(text(), 'publish')]"), "the publish job's run in the Overview")
    ui.shot("overview-timeline-runs")


def test_a_reviewer_reads_a_held_cohort_review_through_the_proxy(ui, tmp_path):
    """Through the authenticating proxy (platform/proxy/, real nginx, TLS, a reviewer's login), a reviewer opens the
    held cohort's partition of published_cohort, reads its review (verdict, approvals, site-days), follows its link
    to the whole review (the run's HTML: contact sheet, opt-out table) and a site-day's link to its page; the same
    login cannot launch anything: the buttons are disabled and every kind of launch is refused with a message."""
    from proxy import NGINX, REVIEWER, REVIEWER_PASSWORD, nginx_in_front
    from selenium.webdriver.common.by import By
    from ui_mutations import mutations, refused as is_refused

    if not NGINX:
        pytest.skip("needs nginx (Debian: nginx)")
    cohort = ui.facts.get("held_cohort")
    assert cohort, "needs the held cohort of the publish step"
    world = ui.server_world
    with nginx_in_front(ui.server.url, tmp_path, world.reviewer().url, world.reviews) as (port, _):
        base = f"https://127.0.0.1:{port}"
        # Without the login: nginx's 401, nothing of the UI (headless Chromium shows an empty page).
        ui.driver.get(f"{base}/assets/published_cohort")
        assert "dagster" not in ui.driver.page_source.lower()
        # The login (basic auth over TLS, as the browser's prompt sends it); the browser keeps it for the origin, so
        # the UI's own requests (GraphQL, its websocket) carry it. Then the reviewer's page, by its plain address.
        ui.driver.get(f"https://{REVIEWER}:{urllib.parse.quote(REVIEWER_PASSWORD)}@127.0.0.1:{port}/")
        ui.driver.get(f"{base}/assets/published_cohort?view=partitions&partition={cohort}")
        ui.wait(lambda: ui.text_shown("review") and ui.text_shown("AWAITING APPROVAL"), "the cohort's metadata")
        # A new origin for this browser, but the community dialog was dismissed on the server in step 1 (the UI
        # asks the server whether to show it): it does not come back. Were it there, it is dismissed.
        ui.dismiss_community_dialog()
        ui.shot("reviewer-held-cohort-through-proxy")
        # Read only: the partition's Materialize button is there, disabled.
        materialize = ui.wait(lambda: ui.button("Materialize", prefix=True), "the Materialize button")
        assert not materialize.is_enabled() or materialize.get_attribute("disabled") is not None
        ui.click(lambda: ui.visible("//tr[.//*[normalize-space(text())='review']]//*[normalize-space(text())="
                                    "'[Show Markdown]']"), "the review's [Show Markdown]")
        dialog = "//*[@role='dialog']"
        ui.wait(lambda: ui.visible(f"{dialog}//*[contains(normalize-space(.), 'Verdict: AWAITING APPROVAL')]"),
                "the review's verdict")
        ui.wait(lambda: ui.visible(f"{dialog}//*[normalize-space(text())='Site-days read']"), "the site-days")
        ui.shot("reviewer-review-verdict")
        links = [a for a in ui.driver.find_elements(By.XPATH, f"{dialog}//a")
                 if re.fullmatch(r"\d{4}-\d{2}-\d{2}\|[\w-]+", a.text.strip())]
        assert links and {a.text.strip() for a in links} <= {f"{d}|{s}" for d in DATES for s in SITES}
        whole = [a.get_attribute("href") for a in ui.driver.find_elements(By.XPATH, f"{dialog}//a")
                 if "/reviews/" in (a.get_attribute("href") or "")]
        assert whole and whole[0].startswith(f"{base}/reviews/{cohort}-"), whole
        ui.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", links[0])
        ui.shot("reviewer-review-site-days")
        site_day = links[0].text.strip()
        href = links[0].get_attribute("href")
        assert href.startswith(f"https://127.0.0.1:{port}/assets/anonymized_images?view=partitions&partition="), href
        links[0].click()
        ui.wait(lambda: "anonymized_images" in ui.driver.current_url and ui.text_shown(site_day)
                and ui.text_shown("checks"), "the site-day's page, through the proxy")
        assert ui.driver.current_url.startswith(f"https://127.0.0.1:{port}/")
        ui.shot("reviewer-follows-a-site-day")

        # The whole review, as the run wrote it for this release, served behind the same login, in a 1,280 px window.
        ui.driver.set_window_size(1280, 1000)
        try:
            ui.driver.get(whole[0])
            ui.wait(lambda: ui.driver.find_elements(By.CSS_SELECTOR, "#contact-sheet figure"), "the contact sheet")
            assert ui.driver.find_element(By.ID, "status").text == "AWAITING APPROVAL"
            rows = [r.text for r in ui.driver.find_elements(By.CSS_SELECTOR, "table.optout-table tbody tr")]
            assert len(rows) == 4 and rows[0].startswith("held back before release"), rows
            assert ui.driver.find_elements(By.CSS_SELECTOR, "#site-days-read a[href*='/runs/']")
            width = ui.driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
            assert width[0] <= width[1], f"the review is wider than its window: {width}"
            page = ui.driver.page_source
            assert world.root.as_posix() not in page and "/landing/" not in page
            ui.shot("reviewer-whole-review-through-proxy")
            sheet = ui.driver.find_element(By.ID, "contact-sheet")
            ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", sheet)
            ui.shot("reviewer-whole-review-contact-sheet")
            table = ui.driver.find_element(By.ID, "optout-table")
            ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", table)
            ui.shot("reviewer-whole-review-optout-table")
        finally:
            ui.driver.set_window_size(1600, 1100)

        # Every kind of launch, sent by this page as the UI sends it (the browser's login): refused, in words.
        ui.driver.get(f"{base}/assets/published_cohort?view=partitions&partition={cohort}")
        ui.wait(lambda: ui.text_shown("review"), "the cohort's page")
        refused = {}
        for what, (document, variables) in mutations(cohort, site_day, ui.facts["site_day_run"]).items():
            answer = ui.driver.execute_async_script("""const done = arguments[arguments.length - 1];
                fetch('/graphql', {method: 'POST', headers: {'Content-Type': 'application/json'},
                  body: JSON.stringify({query: arguments[0], variables: arguments[1]})})
                .then(r => r.json()).then(j => done(Object.values(j.data)[0])).catch(e => done(String(e)));""",
                                                 document, variables)
            refused[what] = answer
        assert all(isinstance(a, dict) and is_refused(a) for a in refused.values()), refused
        ui.facts["reviewer_refused"] = ", ".join(sorted(refused))


def test_an_operator_through_the_proxy_acts_finds_held_back_files_and_hears_of_a_failure(ui, tmp_path):
    """The operator's login, through the same proxy, may act: turns a failure sensor on (its page says where the
    messages go), lists a site-day's quarantined files (tokens, never a path), re-runs a site-day that changed
    nothing from the UI (every cohort stays synced), previews a sensor with an empty cursor (no error), and the
    notice of a run that failed (an unreadable opt-out list refuses publish) reaches the test's SMTP sink."""
    from proxy import NGINX, PASSWORD, USER, nginx_in_front

    from dagster_server import every_cohort

    if not NGINX:
        pytest.skip("needs nginx (Debian: nginx)")
    assert ui.facts.get("held_cohort"), "needs the cohorts of the publish step"
    world = ui.server_world
    sensor_page = "/locations/imaging_platform/sensors/"
    with nginx_in_front(ui.server.url, tmp_path, world.reviewer().url, world.reviews) as (port, _):
        base = f"https://127.0.0.1:{port}"
        ui.driver.get(f"https://{USER}:{urllib.parse.quote(PASSWORD)}@127.0.0.1:{port}/")
        # 1. The failure sensor: its page says where messages go; the operator turns it on (its first tick starts
        # from now: failures after it are sent).
        ui.driver.get(f"{base}{sensor_page}notify_run_failures")
        ui.wait(lambda: ui.visible("//*[contains(text(), 'Where: sends to SMTP 127.0.0.1')]"), "where messages go")
        ui.dismiss_community_dialog()
        started = ui.driver.execute_async_script("""const done = arguments[arguments.length - 1];
            fetch('/graphql', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({
              query: 'mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename } }',
              variables: {s: arguments[0]}})}).then(r => r.json()).then(j => done(j.data.startSensor.__typename))
              .catch(e => done(String(e)));""", {"repositoryLocationName": "imaging_platform",
                                               "repositoryName": "__repository__", "sensorName": "notify_run_failures"})
        assert started == "Sensor", started  # the operator's login may switch a sensor
        ui.wait(lambda: sensor_ticks(ui, "notify_run_failures"), "the failure sensor's first tick", timeout=120)
        ui.driver.refresh()
        ui.shot("operator-failure-sensor-on-says-where")

        # 2. A run that fails, first (its notice is sent at the sensor's next tick while the rest goes on): an
        # opt-out list file that cannot be read refuses publish (before any Spark session is started).
        broken = world.root / "landing" / "optouts" / SITES[0] / "not-a-date.csv"
        broken.parent.mkdir(parents=True, exist_ok=True)
        broken.write_text("patient_id\n123\n")
        try:
            failed = graphql(ui.server.url, """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                __typename ... on LaunchRunSuccess { run { runId } } } }""", {"p": {
                "selector": {"repositoryLocationName": "imaging_platform", "repositoryName": "__repository__",
                             "jobName": "publish"},
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": ui.facts["held_cohort"]}]}}})
            failed_id = failed["launchRun"]["run"]["runId"]
            # 3. Meanwhile, a site-day's held-back files, by token (an operator's or a reviewer's page: never a path).
            ui.driver.get(f"{base}/assets/raw_image_index?view=partitions&partition=" + urllib.parse.quote(SITE_DAY))
            ui.wait(lambda: ui.text_shown("quarantined_files"), "the site-day's quarantined files")
            table = ui.visible("//*[normalize-space(text())='quarantined_files']")[0]
            ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", table)
            listed = latest_materialization(ui, "raw_image_index", SITE_DAY)
            rows = next(e for e in listed["metadataEntries"] if e["label"] == "quarantined_files")["table"]["records"]
            tokens = [json.loads(r)["token"] for r in rows]
            assert tokens and all(re.fullmatch(r"[0-9a-f]{16}", t) for t in tokens)
            ui.wait(lambda: all(ui.visible(f"//*[contains(text(), '{t}')]") for t in tokens), "the tokens on the page")
            assert world.root.as_posix() not in ui.driver.page_source
            ui.shot("operator-site-day-quarantined-files")
            assert wait_for_run(ui, failed_id) == "FAILURE"
        finally:
            broken.unlink()

        # 4. A re-run that changes nothing, launched from the UI: the site-day keeps its version, every cohort synced.
        again = f"{DATES[0]}|{BACKFILL_SITE}"
        before = latest_materialization(ui, "anonymized_images", again)
        cohorts = every_cohort()
        assert stale_partitions(ui, "published_cohort", cohorts) == set(), "synced after publication"
        ui.driver.get(f"{base}/assets/anonymized_images?view=partitions")
        ui.click(lambda: ui.button("Materialize", prefix=True), "the Materialize button")
        ui.wait(lambda: ui.visible(DIALOG), "the launch dialog")
        ui.choose_partitions(again.split("|")[0], BACKFILL_SITE)
        ui.wait(lambda: ui.visible(f"{DIALOG}//*[normalize-space(text())='1 partition']"), "'1 partition' selected")
        ui.click(lambda: ui.button("Launch 1 run"), "the 'Launch 1 run' button")
        run_id = ui.launched_link(r"/runs/[0-9a-f]{8}-[0-9a-f-]{27}$").rsplit("/", 1)[1]

        # 5. Meanwhile, a sensor's Preview with an empty cursor: its result, no error.
        ui.driver.get(f"{base}{sensor_page}notify_failed_checks")
        ui.click(lambda: ui.button("Preview tick result"), "'Preview tick result'")
        preview = "//*[@role='dialog']"
        ui.wait(lambda: ui.visible(f"{preview}//input"), "the cursor field")
        assert ui.visible(f"{preview}//input")[0].get_attribute("value") == ""
        ui.click(lambda: ui.button("Preview", within=ui.visible(preview)[0]) or ui.button("Continue"), "'Preview'")
        ui.wait(lambda: ui.visible(f"{preview}//*[contains(normalize-space(.), 'from now on are sent')]"),
                "the preview's result")
        shown = ui.visible(preview)[0].text
        assert "ValueError" not in shown and "invalid literal" not in shown and "Traceback" not in shown, shown
        ui.shot("operator-sensor-preview-empty-cursor")

        assert wait_for_run(ui, run_id) == "SUCCESS", ui.server.log_tail()
        after = latest_materialization(ui, "anonymized_images", again)
        assert after["runId"] == run_id and after["runId"] != before["runId"]
        version = lambda m: {t["key"]: t["value"] for t in m["tags"]}["dagster/data_version"]  # noqa: E731
        assert version(after) == version(before)
        assert stale_partitions(ui, "published_cohort", cohorts) == set(), "a re-run that changed nothing"
        ui.driver.get(f"{base}/assets/published_cohort?view=partitions&partition={ui.facts['held_cohort']}")
        ui.wait(lambda: ui.text_shown("review"), "the cohort's page")
        assert not ui.visible("//*[starts-with(normalize-space(text()), 'Unsynced')]")
        ui.shot("operator-no-change-rerun-cohort-synced")

        mailbox = world.mailbox()
        ui.wait(lambda: any(failed_id.encode() in m for m in mailbox.messages), "the failure's mail in the sink",
                timeout=120, poll=2)
        mail = next(m for m in mailbox.messages if failed_id.encode() in m).decode()
        assert "run failed: published_cohort" in mail and "Failure" in mail and ui.facts["held_cohort"] in mail
        assert "not-a-date" not in mail and "optouts" not in mail  # the error's message stays in the run's log
        ui.driver.get(f"{base}/runs/{failed_id}")
        ui.wait(lambda: ui.text_shown("Failure"), "the failed run's page")
        ui.shot("operator-failed-run-noticed")


def test_the_console_review_prints_no_patient_of_the_landing_folders_unless_asked(ui):
    """The world's landing folders are named after patients (hospital numbers), as some exports are: the console
    review of a held release (`imaging-review`, the warehouse set as the docs show) prints none of them, and the
    signed report holds none; `--identifiable` prints the paths, and says so first."""
    import subprocess

    from dagster_server import BIN

    assert ui.facts.get("held_cohort"), "needs the cohorts of the publish step"
    world = ui.server_world
    numbers = {p.name for p in (world.root / "landing" / "images").glob("*/*/*") if p.is_dir() and p.name.isdigit()}
    assert numbers, "folders named after patients' hospital numbers"
    env = world.env()
    pending = subprocess.run([str(BIN / "imaging-review"), "pending"], env=env, capture_output=True, text=True,
                             timeout=120, check=True).stdout
    held = pending.splitlines()[0].split("\t")[0]
    plain = subprocess.run([str(BIN / "imaging-review"), held], env=env, capture_output=True, text=True, timeout=300)
    shown = subprocess.run([str(BIN / "imaging-review"), held, "--identifiable"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert "Provenance (identifiable zone)" in plain.stdout and "landing  file " in plain.stdout
    assert not [n for n in numbers if n in plain.stdout + plain.stderr], "a hospital number in the console review"
    assert shown.stdout.startswith("IDENTIFIABLE VIEW") and any(n in shown.stdout for n in numbers)
    signed = shown.stdout.split("Review report sha256 ")[0]
    assert not [n for n in numbers if n in signed.split("\n", 2)[2]], "a hospital number in the signed report"


def sensor_ticks(ui: UI, name: str) -> list:
    found = graphql(ui.server.url, """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
        ... on Sensor { sensorState { status ticks(limit: 5) { status timestamp } } } } }""",
                    {"s": {"repositoryLocationName": "imaging_platform", "repositoryName": "__repository__",
                           "sensorName": name}})["sensorOrError"]
    return found["sensorState"]["ticks"] if found["sensorState"]["status"] == "RUNNING" else []
