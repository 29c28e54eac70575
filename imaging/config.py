"""Settings: the data contract's environment variables over the defaults in `platform/`, in one place.

Environment variables (all optional but the key; defaults in brackets):
  IMAGING_LANDING        landing zone root [./data/landing]
  IMAGING_WAREHOUSE      output root [./data/warehouse]
  IMAGING_TABLES         root of Spark's Parquet tables, when apart from the files [IMAGING_WAREHOUSE]
  IMAGING_SITES          comma-separated site partition keys [platform/platform.yaml: sites]
  IMAGING_START_DATE     first date partition, YYYY-MM-DD [platform/platform.yaml: start_date]
  IMAGING_PSEUDONYM_KEY  secret for keyed pseudonyms, at least 32 bytes (UTF-8) [required]. It travels
                         to the executors inside every de-identification task (docs/deployment.md, "The
                         pseudonym key"): a run refuses a short key, a `spark://` master without
                         IMAGING_SPARK_AUTH_SECRET and a remote `sc://` server without `use_ssl=true`
  IMAGING_SPARK_MASTER   Spark master: local[N], spark://..., k8s://... or sc://... (Spark Connect) [local[*]]
  IMAGING_SPARK_AUTH_SECRET  shared secret of a standalone cluster (`spark://` only, required there): the
                         driver turns on spark.authenticate and spark.network.crypto.enabled with it; the
                         master and workers must be started with the same secret [none]
  IMAGING_LANDING_SENSOR_SECONDS  seconds between landing_sensor ticks [platform/platform.yaml]
  IMAGING_MIN_K          minimum k-anonymity of a release [platform/clinical_policy.yaml: disclosure.min_k]

Every other setting lives in `platform/` and nowhere else (`platform.yaml`, `issuers.yaml`,
`pixel_text.yaml`): code reads it from `Settings`, never restates a default.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
# `platform/` holds configuration only; IMAGING_PLATFORM_DIR lets a deployment keep it elsewhere.
PLATFORM_DIR = Path(os.environ.get("IMAGING_PLATFORM_DIR", REPO_ROOT / "platform"))

# The contract's defaults for the environment variables that have one.
DEFAULT_LANDING = "./data/landing"
DEFAULT_WAREHOUSE = "./data/warehouse"
DEFAULT_SPARK_MASTER = "local[*]"


def _root(value: str) -> str:
    """Absolute local path, or a URL (gs://...) unchanged: executors must not depend on cwd."""
    return value.rstrip("/") if "://" in value else str(Path(value).expanduser().resolve())


def read_yaml(name: str) -> dict:
    with open(PLATFORM_DIR / name, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


@dataclass(frozen=True)
class Settings:
    landing: str
    warehouse: str
    sites: tuple[str, ...]
    start_date: str
    spark_master: str
    deid_options: tuple[str, ...]
    files_per_task: int
    landing_sensor_seconds: int
    issuers: dict  # platform/issuers.yaml: each site's patient-id namespace and the alias table
    pixel_text: dict  # platform/pixel_text.yaml: the OCR check for text burned into pixels
    # Spark's tables; the warehouse root unless IMAGING_TABLES puts them apart (docs/deployment.md).
    tables: str = ""
    min_k: int | None = None  # overrides the clinical policy's disclosure.min_k when set


def _required(base: Mapping, key: str):
    if key not in base:
        raise ValueError(f"platform/platform.yaml: `{key}` is required")
    return base[key]


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    base = read_yaml("platform.yaml")
    sites_env = env.get("IMAGING_SITES", "").strip()
    sites = (tuple(s.strip() for s in sites_env.split(",") if s.strip()) if sites_env
             else tuple(_required(base, "sites")))
    start_date = env.get("IMAGING_START_DATE", "").strip() or str(_required(base, "start_date"))
    dt.date.fromisoformat(start_date)  # fail early and clearly on a malformed date
    for site in sites:
        if not site.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"site key {site!r} must be letters, digits, '-' or '_'")
    files_per_task = int(_required(base, "files_per_task"))
    if files_per_task < 1:
        raise ValueError("platform/platform.yaml: `files_per_task` must be at least 1")
    sensor_seconds = int(env.get("IMAGING_LANDING_SENSOR_SECONDS", "").strip()
                         or _required(base, "landing_sensor_seconds"))
    if sensor_seconds < 1:
        raise ValueError("landing_sensor_seconds must be at least 1")
    warehouse = _root(env.get("IMAGING_WAREHOUSE") or DEFAULT_WAREHOUSE)
    return Settings(
        landing=_root(env.get("IMAGING_LANDING") or DEFAULT_LANDING),
        warehouse=warehouse,
        tables=_root(env["IMAGING_TABLES"]) if env.get("IMAGING_TABLES") else warehouse,
        sites=sites,
        start_date=start_date,
        spark_master=env.get("IMAGING_SPARK_MASTER") or DEFAULT_SPARK_MASTER,
        deid_options=tuple(_required(base, "deid_options") or ()),
        files_per_task=files_per_task,
        landing_sensor_seconds=sensor_seconds,
        issuers=_issuers(sites),
        pixel_text=_pixel_text(),
        min_k=_min_k(env.get("IMAGING_MIN_K", "").strip()),
    )


def _min_k(value: str) -> int | None:
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError("IMAGING_MIN_K must be a whole number of at least 1")
    return int(value)


def _issuers(sites: tuple[str, ...]) -> dict:
    """platform/issuers.yaml, checked now: every configured site must resolve to a namespace."""
    from imaging.issuers import IssuerPolicy

    spec = read_yaml("issuers.yaml")
    policy = IssuerPolicy.from_dict(spec)
    for site in sites:
        policy.namespace(site)  # raises, naming the site, when it has none
    return spec


def _pixel_text() -> dict:
    from imaging.deid.pixel_text import load_pixel_text_settings

    spec = read_yaml("pixel_text.yaml")
    load_pixel_text_settings(spec)  # fail at load, not on an executor
    return spec


def pseudonym_key(env: Mapping[str, str] | None = None) -> str:
    """The secret key, checked: a clear error (naming the variable and the rule, never the key) when it is
    missing or shorter than `imaging.pseudonym.MIN_KEY_BYTES` bytes, rather than a silent default."""
    from imaging.pseudonym import KEY_VARIABLE, check_key

    env = os.environ if env is None else env
    return check_key(env.get(KEY_VARIABLE, ""))
