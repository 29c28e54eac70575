"""Failure messages (automation/notify.py): a real SMTP server (aiosmtpd) and a real HTTP receiver on loopback.

Real runs on a real Dagster instance fail, one in a step and one in an ERROR check per site-day; the sensors, as
the daemon evaluates them, send each failure by mail and webhook. The messages name the asset, the check or the
error's kind, the site-day and a link to the run in the UI, and never the error's message: it carries a path and
an identifier here, as a real one may.
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from dagster_server import REPO, free_port

SECRET_PATH = "/landing/images/site-a/2024-03-01/patient-NHS9434765919.dcm"
SECRET_ID = "NHS9434765919"
SITE_DAY = "2024-03-01|site-a"
UI_URL = "https://dagster.example.org"
TOKEN = "webhook-token-not-secret"


class Mailbox:
    """An aiosmtpd handler keeping every message it accepts."""

    def __init__(self):
        self.messages: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(envelope.content)
        return "250 OK"


@pytest.fixture
def receivers(tmp_path, monkeypatch):
    from aiosmtpd.controller import Controller

    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    posts: list[tuple[dict, dict]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posts.append((dict(self.headers), json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    web = HTTPServer(("127.0.0.1", free_port()), Hook)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    platform = tmp_path / "platform"
    shutil.copytree(REPO / "platform", platform, ignore=shutil.ignore_patterns("*.sh", "proxy", "*.py", "*.lock"))
    (platform / "ui.yaml").write_text(f"""url: {UI_URL}
notifications:
  smtp: {{host: 127.0.0.1, port: {smtp.port}, sender: dagster@example.org, to: [ops@example.org], starttls: false}}
  webhook: {{url: "http://127.0.0.1:{web.server_port}/hook", token_env: IMAGING_TEST_WEBHOOK_TOKEN}}
""")
    monkeypatch.setenv("IMAGING_PLATFORM_DIR", str(platform))
    monkeypatch.setenv("IMAGING_TEST_WEBHOOK_TOKEN", TOKEN)
    try:
        yield mailbox, posts
    finally:
        smtp.stop()
        web.shutdown()
        web.server_close()


def _defs():
    from dagster import (AssetCheckResult, AssetCheckSpec, Definitions, MaterializeResult, MultiPartitionsDefinition,
                         StaticPartitionsDefinition, asset, define_asset_job)

    partitions = MultiPartitionsDefinition({"date": StaticPartitionsDefinition(["2024-03-01"]),
                                            "site": StaticPartitionsDefinition(["site-a"])})

    @asset(name="raw_image_index", partitions_def=partitions)
    def failing(context):
        raise OSError(f"cannot read {SECRET_PATH} (PatientID {SECRET_ID})")

    @asset(name="linked_patient_metadata", partitions_def=partitions,
           check_specs=[AssetCheckSpec("records_per_image", asset="linked_patient_metadata", partitions_def=partitions,
                                        blocking=True)])
    def checked(context):
        return MaterializeResult(check_results=[AssetCheckResult(passed=False, metadata={"offender": SECRET_ID})])

    return Definitions(assets=[failing, checked], jobs=[define_asset_job("fails", selection=["raw_image_index"]),
                                                        define_asset_job("checks", selection=["linked_patient_metadata"])])


def _delivered(mailbox: Mailbox, posts: list) -> list[str]:
    import email
    from email import policy

    mails = [email.message_from_bytes(m, policy=policy.default) for m in mailbox.messages]
    texts = [f"Subject: {m['Subject']}\n{m.get_content()}" for m in mails] + [json.dumps(p) for _, p in posts]
    for text in texts:
        assert SECRET_ID not in text and SECRET_PATH not in text and "cannot read" not in text, text
    return texts


def test_a_failed_run_is_sent_by_mail_and_webhook(receivers):
    from dagster import DagsterEventType, DagsterInstance, build_run_status_sensor_context

    from automation.notify import notify_run_failures

    mailbox, posts = receivers
    with DagsterInstance.ephemeral() as instance:
        result = _defs().resolve_job_def("fails").execute_in_process(
            instance=instance, partition_key=SITE_DAY, raise_on_error=False)
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
        failure = next(r.event_log_entry.dagster_event for r in instance.get_records_for_run(
            result.run_id, of_type=DagsterEventType.RUN_FAILURE).records)
        context = build_run_status_sensor_context(sensor_name="notify_run_failures", dagster_instance=instance,
                                                  dagster_run=run, dagster_event=failure).for_run_failure()
        notify_run_failures(context)
    texts = _delivered(mailbox, posts)
    assert len(mailbox.messages) == 1 and len(posts) == 1
    mail = texts[0]
    assert "Subject: [imaging] run failed: raw_image_index OSError 2024-03-01|site-a" in mail
    assert f"{UI_URL}/runs/{result.run_id}" in mail
    headers, payload = posts[0]
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert (payload["asset"], payload["what"], payload["partitions"]) == ("raw_image_index", "OSError", [SITE_DAY])
    assert payload["link"] == f"{UI_URL}/runs/{result.run_id}" and payload["kind"] == "run failed"


def test_a_failed_error_check_is_sent_once_from_the_next_tick_on(receivers):
    from dagster import DagsterInstance, build_sensor_context

    from automation.notify import notify_failed_checks

    mailbox, posts = receivers
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(instance=instance)
        notify_failed_checks(context)  # the first tick starts from now
        assert context.cursor is not None and not mailbox.messages
        result = _defs().resolve_job_def("checks").execute_in_process(
            instance=instance, partition_key=SITE_DAY, raise_on_error=False)
        assert not result.success  # a blocking ERROR check failed
        notify_failed_checks(context)
        notify_failed_checks(context)  # nothing new: nothing sent again
    texts = _delivered(mailbox, posts)
    assert len(mailbox.messages) == 1 and len(posts) == 1, texts
    assert "check failed: linked_patient_metadata records_per_image 2024-03-01|site-a" in texts[0]
    _, payload = posts[0]
    assert payload["partitions"] == [SITE_DAY] and payload["link"] == f"{UI_URL}/runs/{result.run_id}"


def test_nothing_is_sent_without_a_channel_and_the_sensors_are_off_by_default(monkeypatch):
    from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

    import importlib

    import automation.notify

    monkeypatch.delenv("IMAGING_PLATFORM_DIR", raising=False)
    # The descriptions say where messages go as the code location loads platform/ui.yaml: loaded again here.
    NOTIFY_SENSORS = importlib.reload(automation.notify).NOTIFY_SENSORS
    from automation.notify import channels, current_ui, notify_failed_checks

    for sensor in NOTIFY_SENSORS:
        assert sensor.default_status == DefaultSensorStatus.STOPPED
        # What the sensor's page and the Automation view show: where messages go, here nowhere.
        assert sensor.description.startswith("Where: no channel configured in platform/ui.yaml")
    assert not current_ui().notifications.configured  # the shipped platform/ui.yaml configures none
    assert "failures go nowhere" in channels(current_ui())
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(instance=instance)
        notify_failed_checks(context)
        _defs().resolve_job_def("checks").execute_in_process(instance=instance, partition_key=SITE_DAY,
                                                             raise_on_error=False)
        skipped = notify_failed_checks(context)
    assert "1 failed ERROR checks; no channel configured in platform/ui.yaml" in skipped.skip_message


@pytest.mark.parametrize("cursor", ["", " ", "abc", "-3", "12.5"])
def test_a_preview_with_any_cursor_starts_from_now_without_an_error(cursor):
    """The UI's sensor Preview passes whatever cursor is typed (an empty one included): never a stack trace."""
    from dagster import DagsterInstance, build_sensor_context

    from automation.notify import notify_failed_checks

    with DagsterInstance.ephemeral() as instance:
        skipped = notify_failed_checks(build_sensor_context(instance=instance, cursor=cursor))
    assert "from now on" in skipped.skip_message


def test_the_description_names_the_channels_never_a_secret():
    from automation.notify import channels
    from imaging.config_model import validate
    from imaging.ui import UiFile

    ui = validate(UiFile, {"notifications": {
        "smtp": {"host": "smtp.example.org", "sender": "d@example.org", "to": ["a@example.org", "b@example.org"],
                 "password_env": "IMAGING_SMTP_PASSWORD"},
        "webhook": {"url": "https://chat.example.org/hooks/imaging-secret-path", "token_env": "T"}}}, "ui.yaml")
    said = channels(ui)
    assert said == "sends to SMTP smtp.example.org:587 to 2 addresses and webhook chat.example.org (platform/ui.yaml)"


def test_the_file_refuses_a_secret_in_a_url():
    from imaging.config_model import ConfigError, validate
    from imaging.ui import UiFile

    with pytest.raises(ConfigError, match="credentials"):
        validate(UiFile, {"notifications": {"webhook": {"url": "https://user:pw@hooks.example.org/x"}}}, "ui.yaml")
    with pytest.raises(ConfigError, match="files_per_commit"):
        validate(UiFile, {"files_per_commit": "10"}, "ui.yaml")
