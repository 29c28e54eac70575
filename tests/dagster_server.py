"""Helpers for tests that run the real Dagster webserver (or `dagster dev`) on loopback.

Not a test module: the UI, proxy and automation tests import it. Every process is started in its
own process group and stopped with SIGINT to that group (`dagster dev` ignores SIGTERM), then
SIGKILL if it has not gone within a bounded wait. `SharedDagsterDev` is the one `dagster dev` the
browser and proxy tests share (tests/conftest.py, fixture `dagster_ui`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAEMON_SECONDS = 5  # the backfill daemon's pause between iterations in test servers (Dagster's: 30 s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def platform_env(root: Path, *, sites: tuple[str, ...], start_date: str, key: str,
                 end_date: str | None = None) -> dict[str, str]:
    """The data contract's environment for a server process, with its own instance under `root`."""
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "platform" / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "DAGSTER_"))}
    env.update(IMAGING_LANDING=str(root / "landing"), IMAGING_WAREHOUSE=str(root / "warehouse"),
               IMAGING_SITES=",".join(sites), IMAGING_START_DATE=start_date, IMAGING_PSEUDONYM_KEY=key,
               IMAGING_SPARK_MASTER="local[2]", SPARK_LOCAL_IP="127.0.0.1", DAGSTER_HOME=str(home),
               PYSPARK_PYTHON=sys.executable)
    if end_date:  # a hospital that ends: the partitions end with it (as the demo's do)
        env["IMAGING_END_DATE"] = end_date
    # Backfills picked up and marked done within seconds, not Dagster's 30 s (tests/daemon_interval/sitecustomize.py).
    env["IMAGING_TEST_DAEMON_SECONDS"] = str(DAEMON_SECONDS)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "tests" / "daemon_interval"), env.get("PYTHONPATH")) if p)
    return env


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 30, opener=None) -> dict:
    """POST a GraphQL query to `<url>/graphql` and return its `data` (raises on transport errors)."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with (opener or urllib.request.build_opener()).open(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


ASSET_KEYS_QUERY = "{ assetNodes { assetKey { path } } }"
LOCATIONS_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { name
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


@dataclass
class DagsterProcess:
    """A running `dagster dev` or `dagster-webserver` on 127.0.0.1, its log in `log_path`."""

    process: subprocess.Popen
    url: str
    log_path: Path
    _log: object = field(repr=False, default=None)

    @classmethod
    def start(cls, command: str, env: dict[str, str], log_path: Path, *, port: int | None = None,
              timeout: float = 240, workspace: str = "workspace.yaml", read_only: bool = False) -> "DagsterProcess":
        """Start `command` ("dev" or "webserver", `read_only` for a reviewers' one) and wait until it serves the
        four assets."""
        port = port or free_port()
        if command == "dev":
            argv = [str(BIN / "dagster"), "dev", "-w", workspace, "-h", "127.0.0.1", "-p", str(port)]
        else:
            argv = [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(port)]
            argv += ["--read-only"] if read_only else []
        log = open(log_path, "w")
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        server = cls(process, f"http://127.0.0.1:{port}", log_path, log)
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                nodes = graphql(self.url, ASSET_KEYS_QUERY, timeout=10)["assetNodes"]
                if nodes:
                    return
                failed = [e for e in graphql(self.url, LOCATIONS_QUERY, timeout=10)["workspaceOrError"]["locationEntries"]
                          if (e["locationOrLoadError"] or {}).get("__typename") == "PythonError"]
            except Exception as error:  # not up yet, or the code location still loading
                last, failed = error, []
            if failed:
                raise RuntimeError(f"code location failed to load: {failed[0]['locationOrLoadError']['message']}")
            time.sleep(1.0)
        raise TimeoutError(f"server not ready in {timeout:.0f} s ({last}):\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def interrupt(self) -> None:
        """SIGINT to the process group, without waiting (`stop` waits): servers stopped together stop at once."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 30) -> None:
        """SIGINT to the process group (dagster dev ignores SIGTERM), then SIGKILL if still there."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
            except ProcessLookupError:
                pass
        # Children left in the group (code server, daemon) go too.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._log:
            self._log.close()


# The shared UI server's hospital: 2 sites x 2 days, 2 patients a site (test_ui_browser's steps name them).
UI_SITES = ("site-a", "site-b")
UI_DATES = ("2024-03-01", "2024-03-02")
UI_KEY = "ui-test-key-not-secret-" + "u" * 10


def ui_platform(root: Path, files_per_commit: int = 1, smtp_port: int | None = None) -> Path:
    """A copy of platform/ whose ui.yaml commits a run's site-days one at a time (a few files each here), so a
    backfill's page advances site-day by site-day as it would on a hospital's thousands of files a site-day; with
    `smtp_port`, failure messages go to the test's SMTP sink there."""
    platform = root / "platform"
    if not platform.exists():
        shutil.copytree(REPO / "platform", platform, ignore=shutil.ignore_patterns("*.sh", "proxy", "*.py", "*.lock"))
    text = (REPO / "platform" / "ui.yaml").read_text()
    assert "files_per_commit: 5000" in text and "  smtp: null\n" in text
    text = text.replace("files_per_commit: 5000", f"files_per_commit: {files_per_commit}")
    if smtp_port:  # written each time: a sink started again listens on another port
        text = text.replace("  smtp: null\n", f"  smtp: {{host: 127.0.0.1, port: {smtp_port}, sender: dagster@example.org, "
                                             f"to: [ops@example.org], starttls: false}}\n")
    (platform / "ui.yaml").write_text(text)
    return platform


def every_cohort() -> list[str]:
    """published_cohort's partitions: the cohort names of platform/cohorts/, in name order."""
    from imaging.driver.platform_files import load_cohort_files

    return sorted(c.name for c in load_cohort_files(REPO / "platform"))


class SharedDagsterDev:
    """`dagster dev` (webserver and daemon) with its own instance under `root`, on a small generated hospital:
    started on first use (`get`), stopped by `stop` (and started again if a later test asks)."""

    def __init__(self, root: Path):
        self.root = root
        self.server: DagsterProcess | None = None
        self.read_only: DagsterProcess | None = None
        self._read_only_start = None  # a Future of the read-only webserver, started alongside `dagster dev`
        self.smtp = None  # the test's SMTP sink, where ui.yaml sends failure messages (`mailbox`)

    @property
    def reviews(self) -> Path:
        """The warehouse's review reports, which the proxy serves under /reviews/."""
        return self.root / "warehouse" / "identifiable" / "reviews"

    def env(self) -> dict[str, str]:
        env = platform_env(self.root, sites=UI_SITES, start_date=UI_DATES[0], key=UI_KEY, end_date=UI_DATES[-1])
        # Four patients cannot make a k=5 cohort: the browser's publish step would see every release blocked.
        env["IMAGING_MIN_K"] = "1"
        env["IMAGING_PLATFORM_DIR"] = str(ui_platform(self.root, smtp_port=self.mailbox().port))
        return env

    def mailbox(self):
        if self.smtp is None:
            self.smtp = Mailbox.start()
        return self.smtp

    def get(self) -> DagsterProcess:
        if self.server is None or self.server.process.poll() is not None:
            landing = self.root / "landing"
            if not landing.exists():
                from synth import generate_hospital

                generate_hospital(landing, seed=3, sites=UI_SITES, dates=UI_DATES, patients_per_site=2)
                folders_named_after_patients(landing)
            env = self.env()
            # The instance's storage made first, by this process: two servers starting on a fresh instance would both
            # create its tables at once, and the loser stops (as platform/demo.sh does before its daemon).
            from dagster import DagsterInstance
            from dagster._core.instance.ref import InstanceRef

            DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"])).dispose()
            # The reviewers' read-only webserver starts alongside (its own code location load): ready when asked.
            self._read_only_start = None
            if self.read_only is None or self.read_only.process.poll() is not None:
                from concurrent.futures import ThreadPoolExecutor

                pool = ThreadPoolExecutor(1)
                self._read_only_start = pool.submit(DagsterProcess.start, "webserver", env,
                                                    self.root / "webserver-read-only.log", read_only=True)
                pool.shutdown(wait=False)
            self.server = DagsterProcess.start("dev", env, self.root / "dagster-dev.log")
        return self.server

    def reviewer(self) -> DagsterProcess:
        """A second webserver on the same instance, `--read-only`: where the proxy sends a reviewer's login."""
        self.get()
        if getattr(self, "_read_only_start", None) is not None:
            self.read_only, self._read_only_start = self._read_only_start.result(), None
        if self.read_only is None or self.read_only.process.poll() is not None:
            self.read_only = DagsterProcess.start("webserver", self.env(), self.root / "webserver-read-only.log",
                                                  read_only=True)
        return self.read_only

    def stop(self) -> None:
        if getattr(self, "_read_only_start", None) is not None:  # started alongside, never asked for
            self.read_only, self._read_only_start = self._read_only_start.result(), None
        running = [s for s in (self.read_only, self.server) if s is not None]
        for server in running:
            server.interrupt()
        for server in running:
            server.stop()
        self.server = self.read_only = None
        if self.smtp is not None:
            self.smtp.stop()
            self.smtp = None


def folders_named_after_patients(landing: Path) -> None:
    """As some hospital exports do: each site-day's files in a folder named after the patient's hospital number
    (its PatientID), so a landing path names a patient; every file of the export, whatever its name (a DICOMDIR
    tree's IM000004 too). Files that cannot be read stay where they are."""
    import pydicom

    from imaging.deid.quiet import quiet

    for path in sorted(p for p in (landing / "images").rglob("*") if p.is_file()):
        try:
            with quiet():
                patient = str(pydicom.dcmread(path, stop_before_pixels=True, specific_tags=["PatientID"]).PatientID)
        except Exception:  # noqa: BLE001 - a deliberately broken file: left as landed
            continue
        day = path.relative_to(landing / "images").parts[:2]
        if patient and patient.isalnum():
            target = landing / "images" / day[0] / day[1] / patient / path.relative_to(landing / "images" / day[0] / day[1])
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)


class Mailbox:
    """The test's SMTP sink on loopback (aiosmtpd): every message it accepts, kept."""

    def __init__(self, controller, messages: list):
        self.controller, self.messages = controller, messages

    @property
    def port(self) -> int:
        return self.controller.port

    @classmethod
    def start(cls) -> "Mailbox":
        from aiosmtpd.controller import Controller

        messages: list[bytes] = []

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                messages.append(envelope.content)
                return "250 OK"

        controller = Controller(Handler(), hostname="127.0.0.1", port=free_port())
        controller.start()
        return cls(controller, messages)

    def stop(self) -> None:
        self.controller.stop()
