"""The clinical source: the hospital's database, read with Spark's JDBC source (imaging/clinical_source.py).

Configured from IMAGING_CLINICAL_SOURCE (a file path; the UI shows the path, never the password, which is read
from the environment variable the file names when a run reads the database). Unset, the link step reads the
landing zone's extracts as before.

A query is read as the lessons teach: Spark's JDBC source, with `fetchsize` rows a round trip (and the MySQL /
MariaDB streaming caveat handled: imaging.clinical_source.jdbc_connection); with a `partition_column`, the
database is first asked for the column's bounds (one small query) and the read is split into
`clinical_read_partitions` parallel queries (platform/platform.yaml), never one task for a large table. Wall-clock
values are read as local date-times (`preferTimestampNTZ`, in a JVM whose default zone is UTC: platform/spark.yaml,
`check_jvm_zone`), so an examination at 00:30 on 3 June is on 3 June whatever the machine's zone.

A failure (the database unreachable, the login refused, a query error, a column missing) raises a
`ClinicalSourceError` at once, naming the source and the query, never the password.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from dagster import ConfigurableResource, InitResourceContext
from pyspark.sql import DataFrame, functions as F, types as T

from imaging.clinical_source import (KEYS, REQUIRED, ClinicalSource, ClinicalSourceError, Query, failure_message,
                                     shown_url)
from imaging.driver.config import load_clinical_source

LINKED_ASSET = "linked_patient_metadata"  # the one asset that reads the source
# The JVM default zone every JDBC conversion of a wall-clock value must run in (platform/spark.yaml sets it on the
# driver and the executors with -Duser.timezone=UTC).
JVM_ZONE = "UTC"
PROBE_SECONDS = 10.0


class ClinicalSourceResource(ConfigurableResource):
    """The deployment's clinical source file (None: the landing zone's extracts) and how it is read."""

    file: str | None = None  # IMAGING_CLINICAL_SOURCE, an absolute path
    partitions: int = 8  # Spark's numPartitions for a query with a partition_column
    fetch_size: int = 10000  # rows a round trip

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """A run that will read the database fails here, before any step runs, when nothing answers at the URL's
        host and port (a database stopped or unreachable): nothing is read or written first."""
        source = self.source()
        if source is None:
            return
        selection = getattr(context.dagster_run, "asset_selection", None) if context.dagster_run else None
        if selection and not any(key.to_user_string() == LINKED_ASSET for key in selection):
            return  # a run that selects assets, none of them the link step: it never reads the database
        reach(source)

    def source(self) -> ClinicalSource | None:
        return load_clinical_source(self.file) if self.file else None


def host_port(url: str) -> tuple[str, int] | None:
    """The host and port a JDBC URL connects to (`jdbc:<scheme>://host[:port]/...`), with the scheme's default port;
    None for a URL of another form (the read itself then says whether the database answers)."""
    match = re.match(r"^jdbc:([a-z0-9]+):(?:[a-z0-9]+:)?//\[?([^/:\]?;]+)\]?(?::(\d+))?", url)
    if not match:
        return None
    default = {"postgresql": 5432, "mariadb": 3306, "mysql": 3306}.get(match.group(1))
    port = int(match.group(3)) if match.group(3) else default
    return (match.group(2), port) if port else None


def reach(source: ClinicalSource, timeout: float = PROBE_SECONDS) -> None:
    """Raise a ClinicalSourceError when nothing accepts a connection at the source's host and port."""
    where = host_port(source.url)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as error:
        reason = f"no answer in {timeout:g} s" if isinstance(error, TimeoutError) else error.strerror or str(error)
        raise ClinicalSourceError(f"clinical source {source.name!r} ({shown_url(source.url)}): the database cannot be "
                                  f"reached ({reason}); nothing was read or written") from None


# --- reading -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reader:
    """One run's reads of a source: the session, the source, its password (held for the read only) and settings."""

    session: object
    source: ClinicalSource
    password: str
    partitions: int
    fetch_size: int

    def __repr__(self) -> str:  # never show the password
        return f"Reader({self.source!r})"

    def _jdbc(self):
        connection = self.source.connection
        reader = (self.session.read.format("jdbc").option("url", connection.url).option("user", self.source.user)
                  .option("password", self.password).option("fetchsize", str(self.fetch_size))
                  # A `timestamp` / DATETIME column is a local date-time, not an instant.
                  .option("preferTimestampNTZ", "true"))
        return reader.option("driver", connection.driver) if connection.driver else reader

    def _fail(self, query: str, error: BaseException) -> ClinicalSourceError:
        return ClinicalSourceError(failure_message(self.source, query, error_text(error), self.password))

    def read(self, name: str) -> DataFrame:
        """One query of the contract as a frame: its columns lower-cased, the required ones checked; split over
        parallel queries when it names a partition column. Raises at once when the database refuses it."""
        query = self.source.queries[name]
        try:
            probe = self._jdbc().option("query", query.sql).load()  # Spark's schema probe: `... WHERE 1=0`
        except Exception as error:  # noqa: BLE001 - every driver error becomes one message naming the query
            raise self._fail(name, error) from None
        columns = [c.lower() for c in probe.columns]
        missing = [c for c in REQUIRED[name] if c not in columns]
        if missing:
            raise ClinicalSourceError(f"clinical source {self.source.name!r}, query {name!r}: returns no column "
                                      f"{', '.join(missing)} (the contract's columns: {', '.join(REQUIRED[name])})")
        if query.partition_column and query.partition_column not in columns:
            raise ClinicalSourceError(f"clinical source {self.source.name!r}, query {name!r}: partition_column "
                                      f"{query.partition_column} is not a column the query returns")
        frame = self._partitioned(query, probe) if query.partition_column else probe
        return frame.toDF(*columns)

    def _partitioned(self, query: Query, probe: DataFrame) -> DataFrame:
        """The query read in up to `partitions` parallel queries over ranges of its partition column, with the
        bounds the database gives (Spark's partitionColumn: the first range also takes the nulls)."""
        column = query.partition_column
        kind = probe.schema[[c.lower() for c in probe.columns].index(column)].dataType
        if not isinstance(kind, (T.NumericType, T.DateType, T.TimestampType, T.TimestampNTZType)):
            raise ClinicalSourceError(f"clinical source {self.source.name!r}, query {query.name!r}: partition_column "
                                      f"{column} must be a number, a date or a timestamp, not {kind.simpleString()}")
        try:
            bounds = (self._jdbc().option("query", f"SELECT MIN({column}) AS lo, MAX({column}) AS hi "
                                                   f"FROM ({query.sql}) bounds").load().first())
        except Exception as error:  # noqa: BLE001
            raise self._fail(query.name, error) from None
        if bounds is None or bounds["lo"] is None:
            return probe  # no rows: nothing to split
        low, high = (_bound(bounds[k]) for k in ("lo", "hi"))
        return (self._jdbc().option("dbtable", f"({query.sql}) source_query").option("partitionColumn", column)
                .option("lowerBound", low).option("upperBound", high)
                .option("numPartitions", str(self.partitions)).load())

    def materialize(self, name: str, frame: DataFrame, *aggregates) -> dict:
        """Run one aggregate over a read (the action that reads the database), turning a failure into one message
        naming the source and the query."""
        try:
            return frame.agg(*aggregates).first().asDict()
        except Exception as error:  # noqa: BLE001
            raise self._fail(name, error) from None


def error_text(error: BaseException) -> str:
    """A failure's text with its causes: Spark reports a refused JDBC connection by its error class alone
    (FAILED_JDBC.CONNECTION), the driver's words (a refused login, a refused connection) are in the JVM
    exception's causes, which a classic session's captured exception holds (a Connect client gets the server's
    message only)."""
    texts, cause = [str(error)], getattr(error, "_origin", None)
    for _ in range(10):
        if cause is None:
            break
        try:
            texts.append(str(cause.toString()))
            cause = cause.getCause()
        except Exception:  # noqa: BLE001 - not a JVM throwable: what we have is enough
            break
    return "\n".join(texts)


def _bound(value) -> str:
    """A partition bound as Spark's JDBC options take it (a number, a date, a timestamp as text)."""
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ") if hasattr(value, "hour") else value.isoformat()
    return str(value)


def reader(resource: ClinicalSourceResource, session, env=None) -> Reader | None:
    """The run's reader of the configured source (None without one): the password read now, from the environment
    variable the source file names; the session's JVM zone checked."""
    source = resource.source()
    if source is None:
        return None
    check_jvm_zone(session, source)
    add_driver_jars(session, source)
    return Reader(session, source, source.password(os.environ if env is None else env), resource.partitions,
                  resource.fetch_size)


def check_jvm_zone(session, source: ClinicalSource) -> None:
    """Refuse to read when the executors' JVM default zone is not UTC: the JDBC drivers turn wall-clock values
    through java.sql.Timestamp in that zone, so a DST gap (01:30 on the last Sunday of March in London) or a
    date-time read as an instant would move. One row on an executor (Spark's `reflect`), no JDBC."""
    zone = session.range(1).selectExpr("reflect('java.time.ZoneId', 'systemDefault') AS zone").first()["zone"]
    if zone != JVM_ZONE:
        raise ClinicalSourceError(
            f"clinical source {source.name!r}: the Spark JVMs run in time zone {zone}, not {JVM_ZONE}; wall-clock "
            f"examination times would be converted through it. Start the driver and executors with "
            f"-Duser.timezone=UTC (platform/spark.yaml does; a cluster or Spark Connect server needs it in its own "
            f"spark.driver/executor.extraJavaOptions: docs/deployment.md)")


def add_driver_jars(session, source: ClinicalSource) -> None:
    """The source's driver jars on a session that is already running (`ADD JAR`: the driver's session class loader and
    every executor). A session the platform starts has them from `spark.jars` already (definitions.py)."""
    if not source.driver_jars:
        return
    listed = {str(r[0]).rsplit("/", 1)[-1] for r in session.sql("LIST JARS").collect()}
    for jar in source.driver_jars:
        if jar.rsplit("/", 1)[-1] not in listed:
            session.sql(f"ADD JAR '{jar}'")


# --- the contract's columns ------------------------------------------------------------------------------------------

def local_datetime(frame: DataFrame, column: str, source: ClinicalSource, query: str):
    """A date / date-time column as a local date-time (TimestampNTZ): a `timestamp` (without time zone) or
    DATETIME as read, a date at midnight, text parsed as ISO 8601, an instant (`timestamp with time zone`) in the
    source's `time_zone` (required then: an instant has no day without a zone)."""
    kind = frame.schema[column].dataType
    value = F.col(column)
    if isinstance(kind, T.TimestampNTZType):
        return value
    if isinstance(kind, T.DateType):
        return value.cast("timestamp_ntz")
    if isinstance(kind, T.StringType):
        return F.expr(f"try_cast(trim(`{column}`) AS timestamp_ntz)")
    if isinstance(kind, T.TimestampType):
        if source.time_zone is None:
            raise ClinicalSourceError(
                f"clinical source {source.name!r}, query {query!r}: {column} is a timestamp with time zone (an "
                f"instant): set time_zone in the source file (the hospital's zone, e.g. Europe/London) so that its "
                f"local day is known, or return a local date-time from the query")
        return F.from_utc_timestamp(value, source.time_zone).cast("timestamp_ntz")
    raise ClinicalSourceError(f"clinical source {source.name!r}, query {query!r}: {column} must be a date, a "
                              f"timestamp or text, not {kind.simpleString()}")


def clinical_map(frame: DataFrame, query: str) -> object:
    """Every column of `frame` that is not one of the query's keys, as a map of text (empty values left out), the
    shape of an extract row: the clinical policy reads it by column name."""
    fields = [c for c in frame.columns if c not in KEYS[query]]
    if not fields:
        return F.create_map().cast("map<string,string>")
    pairs = [x for c in fields for x in (F.lit(c), F.col(c).cast("string"))]
    return F.map_filter(F.create_map(*pairs), lambda k, v: v.isNotNull() & (F.trim(v) != ""))
