"""Failures reach the operator without a browser open: two sensors, both stopped until an operator starts them.

* `notify_run_failures` (a run-failure sensor): a run of the platform that failed, one message naming each failed
  step's asset and its error's kind (the exception's class, never its message), the run's partitions, and a link
  to the run in the UI.
* `notify_failed_checks`: every ERROR check that failed since the last tick, one message per run and check,
  naming the asset, the check and the site-days (or cohorts) it failed on, with a link to the run.

Where they go is `platform/ui.yaml` (`notifications`: SMTP and a generic webhook; `url`: the UI's address for the
links), read at each tick, so a change needs no reload. Without a channel configured they send nothing and say so:
in each tick's reason and in their descriptions (the sensor's page and the Automation view), which name the
channels as the code location loaded them ("no channel configured" when there is none; Deployment > Reload after
editing the file). The messages carry no value, identifier or path from a file (imaging/driver/notify.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import (DefaultSensorStatus, RunFailureSensorContext, SensorEvaluationContext, SkipReason,
                     run_failure_sensor, sensor)
from dagster._core.event_api import EventRecordsFilter

from imaging.config_files import DEFAULT_PLATFORM_DIR
from imaging.driver.platform_files import load_file
from imaging.driver.notify import CHECK_FAILED, RUN_FAILED, Notice, partitions_of_run, run_link, send_all
from imaging.ui import FILE as UI_FILE, UiFile

CHECK_EVENTS_PER_TICK = 1000  # check evaluations read per tick at most; the cursor carries on from there
NO_CHANNEL = "no channel configured"


def current_ui() -> UiFile:
    """platform/ui.yaml as it is now (IMAGING_PLATFORM_DIR, or the checkout's platform/)."""
    return load_file(UI_FILE, Path(os.environ.get("IMAGING_PLATFORM_DIR") or DEFAULT_PLATFORM_DIR))


def channels(ui: UiFile) -> str:
    """Where messages go, as the sensors' descriptions say it: hosts and how many recipients, never a secret."""
    from urllib.parse import urlsplit

    n = ui.notifications
    if not n.configured:
        return f"{NO_CHANNEL} in platform/ui.yaml (notifications: smtp, webhook): failures go nowhere"
    out = []
    if n.smtp is not None:
        out.append(f"SMTP {n.smtp.host}:{n.smtp.port} to {len(n.smtp.to)} address{'es' if len(n.smtp.to) > 1 else ''}")
    if n.webhook is not None:
        out.append(f"webhook {urlsplit(n.webhook.url).hostname}")
    return "sends to " + " and ".join(out) + " (platform/ui.yaml)"


def _loaded_channels() -> str:
    try:
        return channels(current_ui())
    except Exception:  # noqa: BLE001 - a broken ui.yaml fails the code location elsewhere, with its message
        return "channels unknown: platform/ui.yaml could not be read"


def read_cursor(cursor: str | None) -> int | None:
    """The last check evaluation sent (an event id), or None: no cursor, or one that is not an event id (a Preview
    with an empty or hand-typed cursor starts from now, as a first tick does, rather than failing)."""
    value = (cursor or "").strip()
    return int(value) if value.isdigit() else None


def error_kind(error) -> str:
    """The class of the error a step raised (Dagster wraps a step's own error in
    DagsterExecutionStepExecutionError: its cause is the step's): a kind, never the message."""
    while error is not None and error.cls_name == "DagsterExecutionStepExecutionError" and error.cause is not None:
        error = error.cause
    return (error.cls_name if error is not None else None) or "error"


def run_failure_notices(context: RunFailureSensorContext, ui: UiFile) -> list[Notice]:
    """One notice per failed step (its asset and error kind), or one for the run when no step failed."""
    run = context.dagster_run
    partitions = partitions_of_run(run.tags)
    link = run_link(ui, run.run_id)
    notices = []
    for event in context.get_step_failure_events():
        kind = error_kind(event.step_failure_data.error if event.step_failure_data else None)
        notices.append(Notice(RUN_FAILED, event.step_key or "the run", kind, partitions, run.run_id, link))
    if not notices:
        data = context.failure_event.event_specific_data
        error = getattr(data, "error", None)
        notices.append(Notice(RUN_FAILED, "the run", error_kind(error) if error is not None else "run failure",
                              partitions, run.run_id, link))
    return notices


CHANNELS = _loaded_channels()  # as the code location loaded platform/ui.yaml: the sensors' descriptions say it


@run_failure_sensor(name="notify_run_failures", default_status=DefaultSensorStatus.STOPPED,
                    description=f"Where: {CHANNELS}. Sends a message for each failed run: the assets whose steps "
                                "failed, the error's kind, the partitions, a link to the run. Off by default.")
def notify_run_failures(context: RunFailureSensorContext):
    ui = current_ui()
    if not ui.notifications.configured:
        return SkipReason(f"{NO_CHANNEL} in platform/ui.yaml: nothing sent")
    notices = run_failure_notices(context, ui)
    problems = send_all(notices, ui.notifications)
    for problem in problems:
        context.log.warning(f"notification not delivered: {problem}")
    context.log.info(f"run {context.dagster_run.run_id}: {len(notices)} messages sent")


def failed_check_notices(records, ui: UiFile) -> list[Notice]:
    """One notice per run and check among these evaluation records: the failed ERROR ones, their partitions."""
    from dagster import AssetCheckSeverity

    grouped: dict[tuple[str, str, str], list[str]] = {}
    for record in records:
        data = record.event_log_entry.dagster_event.event_specific_data
        if data.passed or data.severity != AssetCheckSeverity.ERROR:
            continue
        key = (record.event_log_entry.run_id, data.asset_key.to_user_string(), data.check_name)
        partitions = grouped.setdefault(key, [])
        if data.partition is not None and data.partition not in partitions:
            partitions.append(data.partition)
    return [Notice(CHECK_FAILED, asset, check, tuple(sorted(parts)), run_id, run_link(ui, run_id))
            for (run_id, asset, check), parts in sorted(grouped.items())]


@sensor(name="notify_failed_checks", default_status=DefaultSensorStatus.STOPPED, minimum_interval_seconds=60,
        description=f"Where: {CHANNELS}. Sends a message for each ERROR check that failed since the last tick: "
                    "asset, check, site-days, a link to the run. Off by default; starts from now.")
def notify_failed_checks(context: SensorEvaluationContext):
    from dagster import DagsterEventType

    storage = context.instance.event_log_storage
    after = read_cursor(context.cursor)
    if after is None:  # the first tick (or a cursor that is no event id) starts from now: history is not sent
        latest = storage.get_event_records(EventRecordsFilter(DagsterEventType.ASSET_CHECK_EVALUATION), limit=1)
        context.update_cursor(str(latest[0].storage_id if latest else 0))
        return SkipReason("started: failed ERROR checks from now on are sent")
    ui = current_ui()
    records = storage.get_event_records(EventRecordsFilter(DagsterEventType.ASSET_CHECK_EVALUATION,
                                                           after_cursor=after),
                                        limit=CHECK_EVENTS_PER_TICK, ascending=True)
    if not records:
        return SkipReason("no check evaluated since the last tick")
    context.update_cursor(str(records[-1].storage_id))
    notices = failed_check_notices(records, ui)
    if not notices:
        return SkipReason(f"{len(records)} check evaluations, no ERROR check failed")
    if not ui.notifications.configured:
        return SkipReason(f"{len(notices)} failed ERROR checks; {NO_CHANNEL} in platform/ui.yaml: nothing sent")
    for problem in send_all(notices, ui.notifications):
        context.log.warning(f"notification not delivered: {problem}")
    context.log.info(f"{len(notices)} messages sent for failed ERROR checks")


NOTIFY_SENSORS = [notify_run_failures, notify_failed_checks]
