"""A hospital's clinical database as the platform's clinical source: the contract, and its pure rules.

`IMAGING_CLINICAL_SOURCE` names a YAML file (`ClinicalSourceFile`, below); unset, the landing zone's CSV
extracts are read as before. The file names a JDBC URL, a user, the environment variable holding the
password (never the password itself), optional driver jars, and three queries whose output columns are
the contract:

    patients          patient_id, birth_date, sex                       one row a patient
    eye_observations  patient_id, observed_at, eye,                     one row a measurement occasion
                      visual_acuity_logmar, iop_mmhg                    of one eye
    diagnoses         patient_id, diagnosed_on, eye, diagnosis_code     optional; `resolved_on` optional

Every other column a query returns is a clinical field, passed through platform/clinical_policy.yaml as an
extract column is. `eye` is R, L or B (OD, OS, OU; either case); anything else quarantines the row.

Pure: no Spark, no Dagster. The Spark side (resources/clinical_source.py) reads the queries; the link step
(assets/linked_patient_metadata.py) joins them to the images, eye by eye.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Mapping

from pydantic import StringConstraints, field_validator

from imaging.config_model import SecretInputError, SiteKey, StrictModel, Text

# The queries of the contract and the columns each must return. `KEYS` are not clinical fields: the
# link step reads them; every other column is a clinical field for the policy.
PATIENTS, EYE_OBSERVATIONS, DIAGNOSES = "patients", "eye_observations", "diagnoses"
QUERIES = (PATIENTS, EYE_OBSERVATIONS, DIAGNOSES)
REQUIRED: dict[str, tuple[str, ...]] = {
    PATIENTS: ("patient_id", "birth_date", "sex"),
    EYE_OBSERVATIONS: ("patient_id", "observed_at", "eye", "visual_acuity_logmar", "iop_mmhg"),
    DIAGNOSES: ("patient_id", "diagnosed_on", "eye", "diagnosis_code"),
}
KEYS: dict[str, tuple[str, ...]] = {
    PATIENTS: ("patient_id",),
    EYE_OBSERVATIONS: ("patient_id", "observed_at", "eye"),
    DIAGNOSES: ("patient_id", "diagnosed_on", "eye", "resolved_on"),
}
# The diagnosis code column: its values pass the policy's rule of the same name (the eye's diagnoses in force).
DIAGNOSIS_CODE = "diagnosis_code"

IDENTIFIER = r"^[a-z_][a-z0-9_]{0,62}$"  # a column the platform names in SQL it writes (partition_column)
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"
# URL parameters that carry credentials: the password comes from `password_env`, the user from `user`.
CREDENTIAL_PARAMETERS = ("password", "pwd", "user", "username", "passwd")


# --- the source file, its model -------------------------------------------------------------------------------

class QuerySpec(StrictModel):
    query: Text
    # A numeric, date or timestamp column the query returns: the read is split on it into parallel queries.
    partition_column: Annotated[str, StringConstraints(pattern=IDENTIFIER)] | None = None


class ClinicalSourceFile(StrictModel):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")] | None = None  # the file's stem
    jdbc_url: Annotated[str, StringConstraints(pattern=r"^jdbc:[a-z0-9]+:\S+$")]
    user: Text
    password_env: Annotated[str, StringConstraints(pattern=ENV_NAME)]
    driver_jars: list[Text] = []
    driver_class: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.$]*$")] | None = None
    # The zone of the hospital's clock: only for columns that are instants (`timestamp with time zone`).
    time_zone: Text | None = None
    sites: list[SiteKey] = []  # the sites it serves; empty: every site
    patients: QuerySpec
    eye_observations: QuerySpec
    diagnoses: QuerySpec | None = None

    @field_validator("jdbc_url")
    @classmethod
    def _no_credentials(cls, url):
        if credentials_in(url):
            raise SecretInputError("must not carry a user or password: give `user`, and the password in the environment "
                             "variable `password_env` names")
        return url

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, zone):
        if zone is not None:
            try:
                zoneinfo.ZoneInfo(zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise ValueError("must be an IANA time zone, e.g. Europe/London") from None
        return zone


def credentials_in(url: str) -> bool:
    """Whether a JDBC URL carries a user or password (`//user:pw@host`, or a parameter of either)."""
    rest = url.split(":", 2)[-1]
    authority = rest.split("//", 1)[1].split("/", 1)[0] if "//" in rest else ""
    if "@" in authority:
        return True
    parameters = re.split(r"[?&;]", rest)[1:]
    return any(p.split("=", 1)[0].strip().lower() in CREDENTIAL_PARAMETERS for p in parameters if "=" in p)


# --- the source, as the run uses it ----------------------------------------------------------------------------

class ClinicalSourceError(RuntimeError):
    """The clinical source cannot be read: the message names the source and the query, never the password."""


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    partition_column: str | None = None

    @property
    def digest(self) -> str:
        """sha256 of the query's text: which query was read, recorded without the text."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class JdbcConnection:
    """What Spark's JDBC source is given: the URL it opens, the driver class, options the driver needs."""

    url: str
    driver: str | None


# Driver classes of the URL schemes the platform knows (others name `driver_class`).
DRIVERS = {"postgresql": "org.postgresql.Driver", "mariadb": "org.mariadb.jdbc.Driver",
           "mysql": "com.mysql.cj.jdbc.Driver"}
MARIADB_DRIVER = DRIVERS["mariadb"]


def _with_parameter(url: str, parameter: str) -> str:
    if parameter.split("=", 1)[0].lower() in url.lower():
        return url
    return url + ("&" if "?" in url else "?") + parameter


def jdbc_connection(url: str, driver_class: str | None = None) -> JdbcConnection:
    """The URL and driver Spark reads with.

    Spark picks its SQL dialect by URL prefix and knows `jdbc:mysql:` but not `jdbc:mariadb:`: with no dialect it
    quotes column names in double quotes, which MariaDB reads as string literals (every value then the column's
    name). So a MariaDB URL is handed to Spark as `jdbc:mysql:` with MariaDB Connector/J's `permitMysqlScheme`,
    which gives MySQL's dialect (backtick quoting) and the MariaDB driver. MariaDB Connector/J streams a result
    set in `fetchsize` chunks; MySQL Connector/J reads a whole result set into memory unless `useCursorFetch=true`
    (then `fetchsize` rows a round trip), which is added to a MySQL URL. PostgreSQL streams only inside a
    transaction, which Spark's PostgreSQL dialect opens when `fetchsize` is set."""
    scheme = url.split(":", 2)[1].lower()
    driver = driver_class or DRIVERS.get(scheme)
    if scheme == "mariadb":
        return JdbcConnection(_with_parameter("jdbc:mysql:" + url.split(":", 2)[2], "permitMysqlScheme"), driver)
    if scheme == "mysql" and driver != MARIADB_DRIVER:
        return JdbcConnection(_with_parameter(url, "useCursorFetch=true"), driver)
    return JdbcConnection(url, driver)


def shown_url(url: str) -> str:
    """The JDBC URL as messages and metadata show it: scheme, host, port and database, no parameters."""
    return re.split(r"[?;]", url, maxsplit=1)[0]


@dataclass(frozen=True)
class ClinicalSource:
    """A validated source file, as the run uses it."""

    name: str
    url: str
    user: str
    password_env: str
    queries: Mapping[str, Query]
    driver_jars: tuple[str, ...] = ()
    driver_class: str | None = None
    time_zone: str | None = None
    sites: tuple[str, ...] = ()

    @classmethod
    def from_model(cls, spec: ClinicalSourceFile, path: str | Path) -> "ClinicalSource":
        """From a validated file; its name is the file's `name`, else the file's stem."""
        queries = {q: Query(q, getattr(spec, q).query.strip(), getattr(spec, q).partition_column)
                   for q in QUERIES if getattr(spec, q) is not None}
        return cls(name=spec.name or _slug(Path(path).stem), url=spec.jdbc_url, user=spec.user,
                   password_env=spec.password_env, queries=queries, driver_jars=tuple(spec.driver_jars),
                   driver_class=spec.driver_class, time_zone=spec.time_zone, sites=tuple(spec.sites))

    def __repr__(self) -> str:
        return f"ClinicalSource({self.name!r}, {shown_url(self.url)!r})"

    def serves(self, site: str) -> bool:
        return not self.sites or site in self.sites

    @property
    def connection(self) -> JdbcConnection:
        return jdbc_connection(self.url, self.driver_class)

    def password(self, env: Mapping[str, str]) -> str:
        """The password from the environment variable the file names; an error naming the variable when unset."""
        value = env.get(self.password_env)
        if not value:
            raise ClinicalSourceError(f"clinical source {self.name!r}: the environment variable {self.password_env} "
                                      f"(password_env) is not set")
        return value

    def describe(self) -> dict:
        """What metadata and data cards say of the source: its name, URL without parameters and each query's digest."""
        return {"name": self.name, "url": shown_url(self.url),
                "queries": {q.name: q.digest for q in self.queries.values()}}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63] or "clinical-source"


# --- eyes ----------------------------------------------------------------------------------------------------

RIGHT, LEFT, BOTH = "R", "L", "B"
EYES = {"R": RIGHT, "L": LEFT, "B": BOTH, "OD": RIGHT, "OS": LEFT, "OU": BOTH}
# A row's eye that is none of those: the row is quarantined, a row each.
EYE_NOT_KNOWN = "eye is not R, L, B, OD, OS or OU"
EYE_MISSING = "eye observation without an eye"
OBSERVED_MISSING = "eye observation without a date"
DIAGNOSED_MISSING = "diagnosis without a date"
# The origin of the observations a source serves (every site it serves reads them); an extract's are its site's.
SOURCE_ORIGIN = ":source"  # never a site key (imaging.config_model.SITE_KEY)
# Why an image gets no eye fields (counted per site-day in the link step's metadata; never a quarantine).
NO_LATERALITY = "image has no laterality (ImageLaterality, Laterality)"
BOTH_EYES = "image shows both eyes"
NO_EYE_OBSERVATION = "no observation of the imaged eye on or before the image's day"
EYE_REASONS = (NO_LATERALITY, BOTH_EYES, NO_EYE_OBSERVATION)


def normal_eye(value: object) -> str | None:
    """R, L or B for R/L/B and OD/OS/OU in either case (blanks around ignored); None for anything else."""
    if value is None:
        return None
    return EYES.get(str(value).strip().upper())


def image_eye(laterality: str | None) -> tuple[str | None, str | None]:
    """The eye an image shows (its ImageLaterality, else Laterality: the index keeps the first present), and why
    it has none: an image of both eyes, or of no stated eye, gets no eye-level fields."""
    eye = normal_eye(laterality)
    if eye in (RIGHT, LEFT):
        return eye, None
    return None, BOTH_EYES if eye == BOTH else NO_LATERALITY


# --- failures ---------------------------------------------------------------------------------------------------

# What went wrong, from the drivers' own words (PostgreSQL's and MariaDB's JDBC drivers name the failure in the
# exception's class or text; PostgreSQL's text carries no SQLSTATE).
_LOGIN = ("password authentication failed", "access denied for user", "sqlinvalidauthorizationspecexception",
          "authentication failed", "no pg_hba.conf entry")
_UNREACHABLE = ("connection refused", "connect timed out", "unknownhostexception", "no route to host", "refused.",
                "could not connect", "communications link failure", "socket fail to connect",
                "connection attempt failed", "the connection attempt failed")
_QUERY = ("sqlsyntaxerrorexception", "does not exist", "doesn't exist", "syntax error", "unknown column",
          "psqlexception: error:", "sqldataexception")
_NO_DRIVER = ("classnotfoundexception", "no suitable driver")


def failure_message(source: ClinicalSource, query: str, error: str, password: str | None) -> str:
    """The message a failed read raises: the source, its URL without parameters, the query and what went wrong, with
    the database's own first line (the password, should a driver ever echo it, masked). Never the password."""
    lower = (error or "").lower()
    if any(m in lower for m in _LOGIN):
        what = "the database refused the login"
    elif any(m in lower for m in _UNREACHABLE):
        what = "the database cannot be reached"
    elif any(m in lower for m in _NO_DRIVER):
        what = "the JDBC driver is not on the Spark session's classpath (driver_jars)"
    elif any(m in lower for m in _QUERY):
        what = "the query is not valid for this database"
    else:
        what = "the read failed"
    detail = _database_line(error or "")
    message = (f"clinical source {source.name!r} ({shown_url(source.url)}), query {query!r}: {what}"
               + (f": {detail}" if detail else ""))
    return redact(message, password)


def _database_line(text: str) -> str:
    """The database's own words: the first line naming an SQL exception (or Spark's own error class), without the
    Java class or stack."""
    for line in text.splitlines():
        match = re.search(r"(?:[A-Za-z0-9_.$]*(?:SQL|Sql)[A-Za-z]*Exception|ConnectException|UnknownHostException)"
                          r":\s*(.+)", line)
        if match:
            return match.group(1).strip()[:300]
    match = re.search(r"\[([A-Z_.]+)\]", text)  # a Spark error class: never a value
    return match.group(1) if match else ""


def redact(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` (and its URL-encoded form) masked."""
    if not secret:
        return text
    for form in {secret, urllib.parse.quote(secret, safe="")}:
        text = text.replace(form, "***")
    return text

