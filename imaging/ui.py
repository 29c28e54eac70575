"""`platform/ui.yaml`: what operators and reviewers see in the Dagster UI and hear from it, as a pydantic model.

The UI's address as people reach it (the review's links and the messages' links start there), how often a
run over many site-days commits (so a backfill's page advances as each part commits), and the failure
messages: SMTP and a generic webhook, both off until configured. Secrets are never in the file: it names the
environment variables that hold them.

This module owns the file's model and defaults (`imaging/config_files.py` only registers it). Pure: no Spark, no
Dagster, no other platform module; the sending is `imaging/driver/notify.py`.
"""

from __future__ import annotations

import re
from typing import Annotated, Optional
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

FILE = "ui.yaml"
# A run commits its site-days in parts of about this many landed files (a site-day is never split); 0: together.
DEFAULT_FILES_PER_COMMIT = 5000
ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"  # the name of an environment variable holding a secret
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME)]
Address = Annotated[str, StringConstraints(pattern=r"^[^@\s<>,;]+@[^@\s<>,;]+$")]


class _Model(BaseModel):
    """Unknown keys are errors; values are not coerced (a quoted number is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _http_url(value: str, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http or https URL (got {value!r})")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"must carry no credentials, query or fragment: the {field} is shown and logged; put a "
                         f"secret in the environment variable the file names")
    return value


class SmtpSettings(_Model):
    """An SMTP relay: messages from `sender` to each of `to`; credentials, when it wants them, from the environment."""

    host: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.:_-]+$")]
    port: Annotated[int, Field(ge=1, le=65535)] = 587
    sender: Address
    to: Annotated[list[Address], Field(min_length=1)]
    starttls: bool = True
    user_env: Optional[EnvName] = None      # the variable holding the user name
    password_env: Optional[EnvName] = None  # the variable holding the password
    timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 20


class WebhookSettings(_Model):
    """A generic webhook: one JSON POST per message (`text` plus the fields), a bearer token from the environment."""

    url: str
    token_env: Optional[EnvName] = None
    timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 20

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "webhook URL")


class NotificationSettings(_Model):
    """Where failure messages go: none configured means the sensors send nothing (and stay off by default)."""

    smtp: Optional[SmtpSettings] = None
    webhook: Optional[WebhookSettings] = None

    @property
    def configured(self) -> bool:
        return self.smtp is not None or self.webhook is not None


class UiFile(_Model):
    """`platform/ui.yaml`."""

    # As people reach the UI (through the proxy): https://dagster.example.org or https://host/dagster. None: links
    # in messages are the run's path alone, and the review's links are root-relative.
    url: Optional[str] = None
    files_per_commit: Annotated[int, Field(ge=0)] = DEFAULT_FILES_PER_COMMIT
    notifications: NotificationSettings = NotificationSettings()

    @field_validator("url")
    @classmethod
    def _url(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _http_url(value, "UI's address").rstrip("/")

    @property
    def path_prefix(self) -> str:
        """The path the UI is served under ('' at the root): the review's links are relative to the host."""
        return urlsplit(self.url).path.rstrip("/") if self.url else ""

    def link(self, path: str) -> str:
        """A page of the UI as people open it: the full address when known, else the path from the host."""
        return f"{self.url or ''}{path}"


def partition_path(prefix: str, asset: str, partition: str) -> str:
    """The UI's page of one partition of an asset (Dagster's own asset-partition URL), from the host's root, so a
    link works through a proxy and never names the server's own address."""
    from urllib.parse import quote

    if not re.fullmatch(r"[a-z_][a-z0-9_]*", asset):
        raise ValueError(f"not an asset key: {asset!r}")
    return f"{prefix}/assets/{asset}?view=partitions&partition={quote(partition, safe='')}"


REVIEWS_PATH = "/reviews/"  # where the proxy serves the runs' review reports (platform/proxy/), below the UI's prefix


def review_path(prefix: str, file_name: str) -> str:
    """The address of a release's review report as the proxy serves it (identifiable/reviews/<file>), from the host's
    root. The name is the platform's own (`<cohort>-<release id>.html`), never a value from a file."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*-[0-9a-f]{64}\.html", file_name):
        raise ValueError(f"not a review report's name: {file_name!r}")
    return f"{prefix}{REVIEWS_PATH}{file_name}"


def run_path(prefix: str, run_id: str) -> str:
    """The UI's page of a run, from the host's root."""
    if not re.fullmatch(r"[0-9a-f-]{36}", run_id):
        raise ValueError(f"not a run id: {run_id!r}")
    return f"{prefix}/runs/{run_id}"
