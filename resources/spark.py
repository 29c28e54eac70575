"""Spark, through dagster-pyspark: one session per run, shared by every asset in it.

The definitions use Dagster's in-process executor, so a run's steps share one process and
`getOrCreate` hands each the same session (a session per step costs seconds per asset).
Executor work goes through the DataFrame API only (`mapInArrow` over named records, see
imaging/records.py), and the code reaches executors with `addArtifacts`, both of which a Spark
Connect session supports as well as a classic one.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import pyarrow as pa
from dagster import InitResourceContext
from dagster_pyspark import PySparkResource

from imaging import worker_daemon
from imaging.config_files import load_as
from imaging.driver.config import SparkFile
from imaging.records import BatchStep, to_batch

_SHIPPED: set[int] = set()
# One session is made at a time: a background warm-up (`start_session_in_background`) and the step's own
# first use may ask together, and the second must wait for the first's session, not make or ship another.
_SESSION_LOCK = threading.RLock()
PACKAGE = Path(__file__).resolve().parents[1] / "imaging"
# Subpackages (and modules) only the driver runs, dotted below `imaging`: left out of the executors' code
# archive (ARCHITECTURE.md, the layout). `pacs.receive` is imaging-receive, a service of its own.
DRIVER_ONLY = ("governance", "driver", "pacs.receive")


def driver_only(relative: Path) -> bool:
    """Whether a file below the `imaging` package belongs to a driver-only subpackage or module."""
    parts = list(relative.parts)
    parts[-1] = parts[-1].split(".", 1)[0]
    if parts[-1] == "__init__":
        parts.pop()
    dotted = ".".join(parts)
    return any(dotted == p or dotted.startswith(p + ".") for p in DRIVER_ONLY)


# Environment the tasks read (imaging/fs.py: gcsfs's endpoint, project and settings). A classic
# cluster's executors get it as spark.executorEnv.*; a Spark Connect client cannot set executor
# environment, so a Connect server must be started with it (docs/deployment.md).
EXECUTOR_ENV = ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")
# The driver JVM's class-data-sharing archive, made by platform/spark_archive.py (platform/setup.sh runs
# it) beside the environment it belongs to: when it exists, the driver maps Spark's classes from it
# instead of loading them from the jars (a session starts in about half the time).
DRIVER_ARCHIVE = Path(sys.prefix) / "spark-driver.jsa"


# The shared secret of a standalone cluster (`spark://`): the pseudonym key travels to the executors
# inside every de-identification task, so a standalone driver authenticates to the cluster and encrypts
# its RPC and block transfers with it (docs/deployment.md, "The pseudonym key").
AUTH_SECRET_ENV = "IMAGING_SPARK_AUTH_SECRET"
STANDALONE_SECURITY = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
_AUTH_SECRET_CONF = "spark.authenticate.secret"
DAEMON_CONF = "spark.python.daemon.module"  # Spark's setting: the module its Python daemon runs
# The worker daemon prepared for the session being started (imaging/worker_daemon.py): held here, since
# it ends when its stdin closes, that is when this object is dropped.
_PREPARED: list[subprocess.Popen] = []


def is_connect(master: str) -> bool:
    """`sc://host:port` is a Spark Connect server; anything else is a classic master URL."""
    return master.startswith("sc://")


def is_standalone(master: str) -> bool:
    return master.startswith("spark://")


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 and ::1 (also as an IPv4-mapped address): a connection that never leaves
    the machine."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # any other name may resolve anywhere
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def connect_transport_error(remote: str) -> str | None:
    """Why the pseudonym key may not be sent to the Spark Connect server `remote` (`sc://host:port/;...`),
    or None when it may: a server on loopback, or any other host reached with `use_ssl=true` (TLS, as
    pyspark's Connect client reads the connection string). A `token=` in the URL is refused too: the URL
    is resource configuration, shown in Dagster's UI (the token goes in SPARK_CONNECT_AUTHENTICATE_TOKEN).
    Pure: no server is contacted."""
    parsed = urllib.parse.urlparse("http" + remote[2:]) if is_connect(remote) else None
    if parsed is None or not parsed.hostname:
        return "IMAGING_SPARK_MASTER is not a Spark Connect URL with a host (sc://host:port)"
    params = dict(p.split("=", 1) for p in parsed.params.split(";") if "=" in p)
    if "token" in params:
        return ("IMAGING_SPARK_MASTER carries a Spark Connect token: the master URL is part of the Spark "
                "resource's configuration, which Dagster's UI shows. Give the token in "
                "SPARK_CONNECT_AUTHENTICATE_TOKEN (pyspark's Connect client reads it) and keep "
                "sc://host:port/;use_ssl=true in IMAGING_SPARK_MASTER.")
    if is_loopback(parsed.hostname):
        return None
    if urllib.parse.unquote(params.get("use_ssl", "")).lower() == "true":
        return None
    return ("IMAGING_SPARK_MASTER names a Spark Connect server off this machine without `use_ssl=true`: the "
            "pseudonym key travels inside every de-identification task and would cross the network in "
            "clear. Put a TLS front before the server and connect with sc://host:port/;use_ssl=true "
            "(docs/deployment.md, \"The pseudonym key\").")


# pyspark's Connect client retries a server it cannot reach for at least ten minutes (its DefaultPolicy)
# before it fails, so a run against a server that is down would seem to hang; one connection attempt says
# at once whether anything listens there.
CONNECT_PROBE_SECONDS = 10.0
CONNECT_DEFAULT_PORT = 15002  # Spark Connect's, when the URL names none


def reach_connect_server(remote: str, timeout: float = CONNECT_PROBE_SECONDS) -> None:
    """Raise, naming host and port, when nothing accepts a connection where the Spark Connect URL `remote`
    points (refused, unreachable, or silent for `timeout` seconds); return when something does."""
    parsed = urllib.parse.urlparse("http" + remote[2:])
    host, port = parsed.hostname, parsed.port or CONNECT_DEFAULT_PORT
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        reason = f"no answer in {timeout:g} s" if isinstance(error, TimeoutError) else error.strerror or str(error)
        raise RuntimeError(f"IMAGING_SPARK_MASTER: the Spark Connect server at {host}:{port} does not answer "
                           f"({reason}). Start it, or point IMAGING_SPARK_MASTER at one that runs.") from None


def check_master(master: str, env: Mapping[str, str]) -> None:
    """Refuse, before any session starts, a master the pseudonym key must not be sent to as configured:
    a `spark://` cluster without IMAGING_SPARK_AUTH_SECRET, a remote `sc://` server without TLS."""
    if is_standalone(master) and not env.get(AUTH_SECRET_ENV):
        raise RuntimeError(
            f"IMAGING_SPARK_MASTER is a standalone cluster (spark://) but {AUTH_SECRET_ENV} is not set: the "
            f"pseudonym key travels inside every de-identification task, so the driver authenticates to the "
            f"cluster and encrypts its traffic (spark.authenticate, spark.network.crypto.enabled) with this "
            f"shared secret, the one the master and workers were started with (docs/deployment.md).")
    if is_connect(master):
        error = connect_transport_error(master)
        if error:
            raise RuntimeError(error)


def java() -> str:
    """The `java` Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")


@dataclass(frozen=True)
class DriverJvm:
    """What a running driver JVM was started with: its -XX options (less any archive's) and classpath."""

    options: tuple[str, ...]
    classpath: str

    @classmethod
    def of(cls, jvm) -> "DriverJvm":
        """Read from a live session's JVM (`session._jvm`, py4j)."""
        arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
        return cls(tuple(a for a in arguments if a.startswith("-XX:")
                         and not a.startswith(("-XX:ArchiveClassesAtExit", "-XX:SharedArchiveFile"))),
                   jvm.java.lang.System.getProperty("java.class.path"))

    def maps(self, archive: Path) -> subprocess.CompletedProcess:
        """Start a JVM like this driver, mapping `archive`. `-Xshare:on` makes an archive it could not
        map (truncated, another classpath or JDK) an error, where a driver would silently start
        without it: returncode 0 means such a driver maps it."""
        return subprocess.run([java(), "-Xshare:on", *self.options, f"-XX:SharedArchiveFile={archive}",
                               "-cp", self.classpath, "-version"], capture_output=True, text=True, timeout=120,
                              cwd=tempfile.gettempdir())  # a JVM that crashes on a bad archive writes hs_err_*.log here


def spark_config(master: str, env: Mapping[str, str] | None = None,
                 archive: Path | None = DRIVER_ARCHIVE, jars: tuple[str, ...] = ()) -> dict[str, str]:
    """Spark defaults from `platform/spark.yaml`, with the master from IMAGING_SPARK_MASTER.

    `local[...]`, `spark://...` and `k8s://...` are classic masters (`spark.master`); `sc://...` makes
    the builder connect to a Spark Connect server (`spark.remote`), which applies the `spark.sql.*`
    settings to the session and ignores the static ones (the server owns them). A classic driver
    maps `archive` (the class-data-sharing archive) when it exists.

    A `spark://` master gets authentication and network encryption on (`STANDALONE_SECURITY`); the shared
    secret itself is not in this configuration (Dagster shows resource configuration in its UI): the
    session reads it from IMAGING_SPARK_AUTH_SECRET when it starts. `check_master` refuses a master the
    pseudonym key must not be sent to, here and again when the session starts.
    """
    env = os.environ if env is None else env
    check_master(master, env)
    config = dict(load_as(SparkFile, "spark.yaml").root)  # every value a string, checked by the model
    config.pop("spark.master", None)
    if is_connect(master):  # a Connect server owns its classpath: its drivers are its own (docs/deployment.md)
        config["spark.remote"] = master
        return config
    if jars:  # a clinical source's JDBC drivers (a running session gets them with ADD JAR: resources/clinical_source.py)
        config["spark.jars"] = ",".join(filter(None, [config.get("spark.jars", ""), *jars]))
    config["spark.master"] = master
    if is_standalone(master):
        config.update(STANDALONE_SECURITY)
    if archive is not None and archive.is_file():
        options = config.get("spark.driver.extraJavaOptions", "")
        config["spark.driver.extraJavaOptions"] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    if not master.startswith("local"):
        config.update({f"spark.executorEnv.{name}": env[name] for name in EXECUTOR_ENV if env.get(name)})
    return config


def spark_schema(schema: pa.Schema):
    """The Spark schema of an Arrow schema (the catalogue and the records speak Arrow)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def frame_of(session, records, schema: pa.Schema):
    """A small driver-side list of records (partition keys, extract names) as a DataFrame."""
    table = pa.Table.from_batches([to_batch(records, schema)], schema=schema)
    return session.createDataFrame(table, schema=spark_schema(schema))


def project(frame, names):
    """`frame`'s columns `names`, in that order: `frame.select(*names)` at a quarter of its calls to the JVM.

    A classic session's `select` makes each name a column object through py4j (three round trips a name, each a
    Java object for py4j to collect again) before sending the list; `selectExpr` sends the names as strings. At
    30-40 columns a projection was ~130 round trips, ~0.1 s on a loaded driver (benchmarks/RESULTS.md, "Issue 46,
    fifth pass"). Names are quoted, so any column name is taken as itself."""
    return frame.selectExpr(*("`" + name.replace("`", "``") + "`" for name in names))


def map_batches(df, step: BatchStep):
    """Run a per-partition step on the executors over Arrow batches (no RDD, no row pickling)."""
    return df.mapInArrow(step, spark_schema(step.output))


def code_archive() -> str:
    """The pure `imaging` package, less its driver-only subpackages (`DRIVER_ONLY`), as a zip named by its
    content (a changed package is a new name)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE.rglob("*")):
            relative = path.relative_to(PACKAGE)
            if path.is_file() and "__pycache__" not in path.parts and not driver_only(relative):
                name = str(path.relative_to(PACKAGE.parent))
                archive.writestr(zipfile.ZipInfo(name, date_time=ZIP_TIME), path.read_bytes())
                if path.suffix == ".py":
                    archive.writestr(zipfile.ZipInfo(name + "c", date_time=ZIP_TIME), _bytecode(path))
    data = buffer.getvalue()
    target = Path(tempfile.gettempdir()) / f"imaging-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        # Written aside, then renamed: another process on this machine (a second run, a parallel test worker)
        # may be making the same archive, and must never see it half-written.
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.stem + "-", suffix=".part",
                                         delete=False) as part:
            part.write(data)
        os.replace(part.name, target)
    return str(target)


ZIP_TIME = (2000, 1, 1, 0, 0, 0)  # fixed: the archive's bytes, hence its name, depend on its content alone


def _bytecode(path: Path) -> bytes:
    """`path` compiled for this interpreter, as an unchecked hash-based .pyc beside its source in the zip.

    zipimport cannot cache what it compiles, so without it every new Python worker compiled the whole
    package from source (~7% of the executors' CPU in a de-identification run). Unchecked: zipimport
    takes it without comparing times. A worker on another Python version finds a foreign magic number
    and compiles the source, as before."""
    from importlib.util import MAGIC_NUMBER, source_hash
    import marshal

    source = path.read_bytes()
    code = compile(source, str(path), "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, check_source off (PEP 552)
    return MAGIC_NUMBER + flags + source_hash(source) + marshal.dumps(code)


def ship_code(session) -> None:
    """Send the pure `imaging` package to the executors once per session (classic or Connect)."""
    if id(session) in _SHIPPED:
        return
    session.addArtifacts(code_archive(), pyfile=True)
    _SHIPPED.add(id(session))


def session_config(config: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a session starts with: `config` checked again (`check_master`, in the run's own environment)
    and, on a standalone cluster, the shared secret from IMAGING_SPARK_AUTH_SECRET (Spark's UI and logs
    redact `spark.authenticate.secret`; executors are started with it by their worker, which has its own
    copy, never on a command line)."""
    env = os.environ if env is None else env
    master = str(config.get("spark.remote") or config.get("spark.master") or "")
    check_master(master, env)
    config = dict(config)
    if is_standalone(master):
        config[_AUTH_SECRET_CONF] = env[AUTH_SECRET_ENV]
    if master.startswith("local"):
        # Local executors run this interpreter: their daemon imports Great Expectations once, and
        # the workers it forks (anew after each idle minute) inherit it (imaging/worker_daemon.py).
        config.setdefault(DAEMON_CONF, "imaging.worker_daemon")
        # Spark keys its daemons by the workers' environment, which simplified tracebacks change for
        # some tasks only: off, one daemon (one import) serves every task.
        config.setdefault("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
    return config


class SparkResource(PySparkResource):
    """PySparkResource that starts its session on first use, ships the platform's code and keeps
    Spark quiet on loopback.

    The session is made lazily, not in the resource's set-up: starting a JVM costs seconds, and a
    run whose site-days have nothing to do never needs one (the image assets answer those from the
    warehouse alone, see ARCHITECTURE.md). Every step of a run still shares the one session
    (in-process executor, `getOrCreate`).
    """

    def setup_for_execution(self, context: InitResourceContext) -> None:
        pass  # see `spark_session`

    @property
    def spark_session(self):
        if self._spark_session is not None:
            return self._spark_session
        with _SESSION_LOCK:
            return self._make_session()

    def _make_session(self):
        if self._spark_session is None:
            from dagster_pyspark.resources import spark_session_from_config

            if str(self.spark_config.get("spark.master", "")).startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
                # Local Python workers run the driver's interpreter (read when the session starts), so
                # pydicom and the platform code are the same on both sides. A cluster's executors
                # use their own (PYSPARK_PYTHON there, see README).
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            config = session_config(self.spark_config)
            if "spark.remote" in config:
                reach_connect_server(config["spark.remote"])
            session = spark_session_from_config(prepare_daemon(config))
            if "spark.remote" not in self.spark_config:  # a Connect session has no SparkContext
                session.sparkContext.setLogLevel("WARN")
            ship_code(session)
            self._spark_session = session
        return self._spark_session


def executor_env(config: Mapping[str, str]) -> dict[str, str]:
    """The environment `config` gives the executors' Python workers (its `spark.executorEnv.*` settings)."""
    prefix = "spark.executorEnv."
    return {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}


def prepare_daemon(config: Mapping[str, str]) -> dict[str, str]:
    """`config`, with the platform's worker daemon prepared alongside the JVM when this call starts a local
    SparkContext (imaging/worker_daemon.py: its imports, about 4 s, then no longer wait for the first
    Python task). A session that exists already has its daemon."""
    from pyspark import SparkContext

    config = dict(config)
    if config.get(DAEMON_CONF) == "imaging.worker_daemon" and SparkContext._active_spark_context is None:
        # The executors' environment from its start: what is read at import (Arrow's allocator) must be the workers'.
        process, path = worker_daemon.prepare({**os.environ, **executor_env(config)})
        _PREPARED[:] = [process]  # a previous one, never used, ends as it is dropped
        config[f"spark.executorEnv.{worker_daemon.PREPARED_ENV}"] = path
    return config


def start_session_in_background(resource: SparkResource) -> threading.Thread | None:
    """Make `resource`'s session in a daemon thread, so that a step's driver-side preparation overlaps
    the JVM's start; the step's first `spark_session` then waits for it (or finds it made). None when
    the session already exists. A failure is left for that first use to raise (it tries again)."""
    if resource._spark_session is not None:
        return None

    def make():
        try:
            resource.spark_session
        except Exception:  # noqa: BLE001 - the step's own first use raises it with its context
            pass

    thread = threading.Thread(target=make, name="spark-session-warm-up", daemon=True)
    thread.start()
    return thread
