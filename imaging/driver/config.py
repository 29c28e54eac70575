"""Settings: the data contract's environment variables over the defaults in `platform/`, in one place.

Environment variables (all optional but the key; defaults in brackets):
  IMAGING_LANDING        landing zone root [./data/landing]
  IMAGING_WAREHOUSE      output root [./data/warehouse]
  IMAGING_TABLES         root of Spark's Parquet tables, when apart from the files [IMAGING_WAREHOUSE]
  IMAGING_SITES          comma-separated site partition keys [platform/platform.yaml: sites]
  IMAGING_START_DATE     first date partition, YYYY-MM-DD [platform/platform.yaml: start_date]
  IMAGING_END_DATE       last date partition, YYYY-MM-DD, for a data set that ends (the demo's) [none: up to
                         yesterday, a new partition each day]
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
  IMAGING_PACS_<SITE>_URL  the site's DICOMweb root: its images come from its PACS [platform/pacs.yaml: servers]
  IMAGING_PACS_<SITE>_TOKEN, or _USER and _PASSWORD  the PACS credentials (bearer token, or HTTP basic);
                         read when a run or the sensor contacts the server, never stored in configuration
  IMAGING_CLINICAL_SOURCE  a clinical source file (YAML, imaging/clinical_source.py): the clinical records are read
                         from the hospital's database through JDBC, eye by eye [none: the landing zone's extracts].
                         Its password comes from the environment variable the file names (`password_env`)

Every other setting lives in `platform/` and nowhere else (`platform.yaml`, `issuers.yaml`,
`pixel_text.yaml`): code reads it from `Settings`, never restates a default. Each file is read
through its pydantic model (`imaging.config_files.load_as`; `PlatformFile` and `SparkFile` below, the
others with their domains, all listed in imaging/driver/platform_files.py): a mistake is a ConfigError
naming the file and the field.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Mapping

from pydantic import ConfigDict, Field, RootModel, StringConstraints, field_validator

from imaging.clinical_source import ClinicalSource, ClinicalSourceFile
from imaging.config_files import PLATFORM_DIR, REPO_ROOT, load_as, read_raw
from imaging.config_model import SITE_KEY, ConfigError, PositiveInt, SiteKey, StrictModel, Text
from imaging.deid.options import BY_NAME as DEID_OPTIONS, FULL_DATES, MODIFIED_DATES
from imaging.deid.pixel_text import PixelTextFile
from imaging.pacs.settings import PacsFile, PacsSettings, load_pacs
from imaging.issuers import IssuerPolicy, IssuersFile

__all__ = ["PLATFORM_DIR", "REPO_ROOT", "ConfigError", "Settings", "load_settings", "read_yaml"]

# The contract's defaults for the environment variables that have one.
DEFAULT_LANDING = "./data/landing"
DEFAULT_WAREHOUSE = "./data/warehouse"
DEFAULT_SPARK_MASTER = "local[*]"


# --- platform/platform.yaml and platform/spark.yaml, their models ------------------------------------------

class PlatformFile(StrictModel):
    start_date: dt.date
    sites: list[SiteKey] = Field(min_length=1)
    # SUPERSEDED by issuers.yaml; allowed until the old executor path that reads it is gone.
    default_issuer: Text | None = None
    deid_options: list[Literal[tuple(DEID_OPTIONS)]]  # type: ignore[valid-type]
    files_per_task: PositiveInt
    landing_sensor_seconds: PositiveInt
    # A clinical source's read (IMAGING_CLINICAL_SOURCE): parallel queries of a query with a partition_column
    # (Spark's numPartitions), and rows a round trip from the database (the JDBC fetch size).
    clinical_read_partitions: PositiveInt = 8
    clinical_fetch_size: PositiveInt = 10000

    @field_validator("start_date", mode="before")
    @classmethod
    def _iso_date(cls, value):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError("must be a date, YYYY-MM-DD")

    @field_validator("sites")
    @classmethod
    def _unique_sites(cls, sites):
        if len(set(sites)) != len(sites):
            raise ValueError("a site is listed twice")
        return sites

    @field_validator("deid_options")
    @classmethod
    def _options(cls, options):
        if FULL_DATES in options and MODIFIED_DATES in options:
            raise ValueError(f"{FULL_DATES} and {MODIFIED_DATES} exclude each other")
        return options


class SparkFile(RootModel[dict[Annotated[str, StringConstraints(pattern=r"^spark\.[A-Za-z0-9_.-]+$")], str]]):
    """Spark properties the driver starts its session with, each a string as Spark reads it (quote numbers
    and booleans)."""

    model_config = ConfigDict(strict=True, frozen=True)


def _root(value: str) -> str:
    """Absolute local path, or a URL (gs://...) unchanged: executors must not depend on cwd."""
    return value.rstrip("/") if "://" in value else str(Path(value).expanduser().resolve())


def read_yaml(name: str) -> dict:
    """A platform file as parsed, unvalidated (for hashing it, or for tests that edit it)."""
    return read_raw(name)


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
    end_date: str | None = None  # the last date partition; None: the partitions grow by one each day
    pacs: "PacsSettings | None" = None  # platform/pacs.yaml + IMAGING_PACS_<SITE>_URL: the PACS sites
    clinical_source: str | None = None  # IMAGING_CLINICAL_SOURCE: the clinical source file, validated at load
    clinical_read_partitions: int = 8
    clinical_fetch_size: int = 10000

    @property
    def pacs_sites(self) -> tuple[str, ...]:
        return tuple(self.pacs.endpoints) if self.pacs else ()

    @property
    def pacs_landing(self) -> str:
        """Where PACS retrievals land (the landing layout below it): the warehouse's identifiable zone."""
        return f"{self.warehouse}/identifiable/pacs_landing"


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    base = load_as(PlatformFile, "platform.yaml")
    sites_env = env.get("IMAGING_SITES", "").strip()
    sites = tuple(s.strip() for s in sites_env.split(",") if s.strip()) if sites_env else tuple(base.sites)
    for site in sites:
        if not re.fullmatch(SITE_KEY, site):
            raise ValueError(f"IMAGING_SITES: site key {site!r} must be letters, digits, '-' or '_'")
    start_date = env.get("IMAGING_START_DATE", "").strip() or base.start_date.isoformat()
    dt.date.fromisoformat(start_date)  # fail early and clearly on a malformed date
    end_date = env.get("IMAGING_END_DATE", "").strip() or None
    if end_date is not None:
        try:
            ended = dt.date.fromisoformat(end_date)
        except ValueError:
            raise ValueError(f"IMAGING_END_DATE must be a date, YYYY-MM-DD: {end_date!r}") from None
        if ended < dt.date.fromisoformat(start_date):
            raise ValueError(f"IMAGING_END_DATE {end_date} is before the first date partition {start_date}")
    sensor_env = env.get("IMAGING_LANDING_SENSOR_SECONDS", "").strip()
    if sensor_env and (not sensor_env.isdigit() or int(sensor_env) < 1):
        raise ValueError("IMAGING_LANDING_SENSOR_SECONDS must be a whole number of at least 1")
    warehouse = _root(env.get("IMAGING_WAREHOUSE") or DEFAULT_WAREHOUSE)
    return Settings(
        landing=_root(env.get("IMAGING_LANDING") or DEFAULT_LANDING),
        warehouse=warehouse,
        tables=_root(env["IMAGING_TABLES"]) if env.get("IMAGING_TABLES") else warehouse,
        sites=sites,
        start_date=start_date,
        end_date=end_date,
        spark_master=env.get("IMAGING_SPARK_MASTER") or DEFAULT_SPARK_MASTER,
        deid_options=tuple(base.deid_options),
        files_per_task=base.files_per_task,
        landing_sensor_seconds=int(sensor_env) if sensor_env else base.landing_sensor_seconds,
        issuers=_issuers(sites),
        pixel_text=_pixel_text(),
        min_k=_min_k(env.get("IMAGING_MIN_K", "").strip()),
        pacs=load_pacs(load_as(PacsFile, "pacs.yaml"), sites, env, warehouse),
        clinical_source=_clinical_source(env.get("IMAGING_CLINICAL_SOURCE", "").strip(), sites),
        clinical_read_partitions=base.clinical_read_partitions,
        clinical_fetch_size=base.clinical_fetch_size,
    )


def _clinical_source(path: str, sites: tuple[str, ...]) -> str | None:
    """IMAGING_CLINICAL_SOURCE as an absolute path, its file validated now (a mistake stops the code location at
    load, naming the file and the field); every site it names must be a configured site."""
    if not path:
        return None
    resolved = str(Path(path).expanduser().resolve())
    source = load_clinical_source(resolved)
    unknown = [s for s in source.sites if s not in sites]
    if unknown:
        raise ConfigError([f"{path}: sites: {', '.join(unknown)} not among the configured sites ({', '.join(sites)})"])
    return resolved


def _min_k(value: str) -> int | None:
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError("IMAGING_MIN_K must be a whole number of at least 1")
    return int(value)


def _issuers(sites: tuple[str, ...]) -> dict:
    """platform/issuers.yaml (the resource passes it on as a dict), checked now: every configured
    site must resolve to a namespace."""
    policy = IssuerPolicy.from_model(load_as(IssuersFile, "issuers.yaml"))
    for site in sites:
        policy.namespace(site)  # raises, naming the site, when it has none
    return read_raw("issuers.yaml")


def _pixel_text() -> dict:
    """platform/pixel_text.yaml, validated here so a mistake fails at load, not on an executor."""
    load_as(PixelTextFile, "pixel_text.yaml")
    return read_raw("pixel_text.yaml")


def load_clinical_source(path: str | Path) -> ClinicalSource:
    """The clinical source file at `path` (any folder: IMAGING_CLINICAL_SOURCE names it), validated; a ConfigError
    names the file and every field in error."""
    path = Path(path)
    return ClinicalSource.from_model(load_as(ClinicalSourceFile, path.name, path.parent), path)
