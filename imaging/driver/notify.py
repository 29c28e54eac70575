"""Failure messages to the operator, without a browser open: by SMTP and by a generic webhook.

A `Notice` names the asset, the partitions (site-days or cohorts) and the kind of failure (the check's name, or
the error's class), with a link to the run in the UI. It never carries an error's message, a value, an identifier
or a path from a file: those stay in the run's log behind the UI's login. `send` delivers one notice to every
channel `platform/ui.yaml` configures; a channel that fails is reported by name and status, and the others are
still tried. Driver only: the sensors in `automation/notify.py` build the notices from the instance's records.
"""

from __future__ import annotations

import json
import os
import smtplib
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Mapping, Sequence

from imaging.ui import NotificationSettings, UiFile

RUN_FAILED, CHECK_FAILED = "run failed", "check failed"
SHOWN = 10  # partitions named in one message; the rest counted


@dataclass(frozen=True)
class Notice:
    """One failure as a message: fixed phrases, asset and check names, partition keys, a run id and a link."""

    kind: str                    # RUN_FAILED | CHECK_FAILED
    asset: str                   # the asset (or "the run" when no step failed)
    what: str                    # the check's name, or the error's kind (its class name)
    partitions: tuple[str, ...]  # the site-days (date|site) or cohorts concerned; () when the run had none
    run_id: str
    link: str                    # the run's page in the UI

    def where(self) -> str:
        if not self.partitions:
            return "no partition"
        shown = ", ".join(self.partitions[:SHOWN])
        more = len(self.partitions) - SHOWN
        return shown + (f" (+{more} more)" if more > 0 else "")

    def subject(self) -> str:
        first = f" {self.partitions[0]}" + (f" +{len(self.partitions) - 1}" if len(self.partitions) > 1 else "") \
            if self.partitions else ""
        return f"[imaging] {self.kind}: {self.asset} {self.what}{first}"

    def text(self) -> str:
        return (f"{self.kind}: {self.asset}, {'check' if self.kind == CHECK_FAILED else 'error'} {self.what}\n"
                f"partitions: {self.where()}\n"
                f"run: {self.run_id}\n"
                f"open the run: {self.link}\n"
                "Details are in the run's log in the Dagster UI (behind its login); this message carries no value, "
                "identifier or path.\n")

    def payload(self) -> dict:
        return {"text": f"{self.subject()}\n{self.text()}", "kind": self.kind, "asset": self.asset,
                "what": self.what, "partitions": list(self.partitions), "run_id": self.run_id, "link": self.link}


def run_link(ui: UiFile, run_id: str) -> str:
    return ui.link(f"/runs/{run_id}")


def partitions_of_run(tags: Mapping[str, str]) -> tuple[str, ...]:
    """A run's partitions as its tags say: one partition, or a range's two ends (`first...last`)."""
    if tags.get("dagster/partition"):
        return (tags["dagster/partition"],)
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if start and end:
        return (start,) if start == end else (f"{start}...{end}",)
    return ()


def _smtp(notice: Notice, settings, env: Mapping[str, str]) -> None:
    message = EmailMessage()
    message["Subject"] = notice.subject()
    message["From"] = settings.sender
    message["To"] = ", ".join(settings.to)
    message.set_content(notice.text())
    with smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_seconds) as client:
        if settings.starttls:
            client.starttls(context=ssl.create_default_context())
        if settings.user_env and settings.password_env:
            client.login(env.get(settings.user_env, ""), env.get(settings.password_env, ""))
        client.send_message(message)


def _webhook(notice: Notice, settings, env: Mapping[str, str]) -> None:
    headers = {"Content-Type": "application/json"}
    if settings.token_env and env.get(settings.token_env):
        headers["Authorization"] = f"Bearer {env[settings.token_env]}"
    request = urllib.request.Request(settings.url, data=json.dumps(notice.payload()).encode(), headers=headers,
                                     method="POST")
    with urllib.request.urlopen(request, timeout=settings.timeout_seconds) as response:
        response.read()


def send(notice: Notice, settings: NotificationSettings, env: Mapping[str, str] | None = None) -> list[str]:
    """Deliver `notice` to every configured channel; returns what failed, one line a channel (its kind and
    the error's class or HTTP status: never the server's answer, which could echo a secret)."""
    env = os.environ if env is None else env
    failed = []
    for name, channel, deliver in (("smtp", settings.smtp, _smtp), ("webhook", settings.webhook, _webhook)):
        if channel is None:
            continue
        try:
            deliver(notice, channel, env)
        except urllib.error.HTTPError as error:
            failed.append(f"{name}: HTTP {error.code}")
        except (OSError, smtplib.SMTPException, ValueError) as error:
            failed.append(f"{name}: {type(error).__name__}")
    return failed


def send_all(notices: Sequence[Notice], settings: NotificationSettings, env: Mapping[str, str] | None = None
             ) -> list[str]:
    return [problem for notice in notices for problem in send(notice, settings, env)]
