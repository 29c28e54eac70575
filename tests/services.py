"""Real servers for the deployment tests, started and stopped by the tests on loopback.

Each server is a context manager that starts real processes on dynamically chosen free ports,
waits until it answers, yields a named record describing it, and stops every process it started
(by the process group it created, never by name). The pytest fixtures at the bottom wrap them, one
server per test module; each skips with the reason only when the program it needs is absent on this
machine (CI installs them all: see `.ci/run`).

- `spark_standalone`: a Spark standalone master and one worker, from the installed pyspark's own
  `bin/spark-class`, with authentication and network encryption on under a fresh shared secret (what
  a driver gets from IMAGING_SPARK_AUTH_SECRET), read from a properties file, never a command line.
- `spark_connect_server`: a Spark Connect server, from pyspark's own `sbin/start-connect-server.sh`.
- `gcs_emulator`: the `gcp-storage-emulator` package's server (the GCS JSON API), in memory.
- `postgres_server`: Debian's PostgreSQL, `initdb` + `postgres` on a temporary data directory, run
  as the `postgres` user (both refuse to run as root) when the tests run as root.
- `mariadb_server`: Debian's MariaDB, `mariadb-install-db` + `mariadbd` on a temporary data directory, the
  server run as the `mysql` user (`--user`), on loopback; its root reaches it through the socket only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest

LOOPBACK = "127.0.0.1"
PYTHON_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def wait_until(ready: Callable[[], bool], what: str, timeout: float, logs: list[Path] = (),
               alive: Callable[[], bool] = lambda: True) -> None:
    """Poll `ready` until it holds; on timeout or early death, fail with the tail of the logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not alive():
            break
        time.sleep(0.3)
    tails = []
    for log in logs:
        if Path(log).exists():
            tails.append(f"--- {log} ---\n" + "\n".join(Path(log).read_text(errors="replace").splitlines()[-30:]))
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n" + "\n".join(tails))


def spark_home() -> Path:
    """The installed pyspark package directory: it holds Spark's jars, bin/ and sbin/."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_available() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def server_java_options() -> str:
    """The JVM options platform/spark.yaml gives the platform's driver (C1 only, the parallel collector: half
    the CPU of a short run, benchmarks/RESULTS.md). The test servers' JVMs run short jobs too: a Connect
    server (a driver itself), a cluster's master, worker and the executors the worker starts. They map the
    driver's class-data-sharing archive when setup made one: the same JDK and jars, so the same classes (a
    Connect server answers its first query in 6.5-7 s instead of 12-13 s); a JVM whose classpath does not
    match it ignores it."""
    from imaging.config_files import load_as
    from imaging.driver.config import SparkFile
    from resources.spark import DRIVER_ARCHIVE

    options = str(load_as(SparkFile, "spark.yaml").root.get("spark.driver.extraJavaOptions", ""))
    return f"{options} -XX:SharedArchiveFile={DRIVER_ARCHIVE}" if DRIVER_ARCHIVE.is_file() else options


def spark_env(**extra: str) -> dict[str, str]:
    """Environment of Spark's own scripts: this interpreter for Python workers, loopback only."""
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    env.update(extra)
    return env


def start_process(argv: list[str], log: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> subprocess.Popen:
    """Start `argv` in its own process group (so stopping it stops its children), output to `log`."""
    handle = open(log, "ab")
    try:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
    finally:
        handle.close()


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM the process group this module created, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --- Spark standalone -------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkStandalone:
    """A running standalone cluster: `master_url` is what IMAGING_SPARK_MASTER takes."""

    master_url: str
    master_ui: str
    worker_cores: int
    workdir: Path
    auth_secret: str = ""  # the cluster's shared secret: a driver's IMAGING_SPARK_AUTH_SECRET

    def __repr__(self) -> str:  # never show the secret (pytest prints fixtures on failure)
        return f"SparkStandalone(master_url={self.master_url!r}, master_ui={self.master_ui!r})"


def _alive_workers(master_ui: str) -> int:
    try:
        with urllib.request.urlopen(f"{master_ui}/json/", timeout=2) as response:
            state = json.load(response)
    except (OSError, ValueError):  # not up yet; under load the UI serves its HTML page before the JSON one
        return 0
    return int(state.get("aliveworkers", 0))


@contextlib.contextmanager
def owned_processes(prefix: str) -> Iterator[tuple[Path, list[subprocess.Popen]]]:
    """A temporary working folder and a list for the processes started in it: on exit every process
    in the list is stopped (last first) and the folder removed, however the block ended."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    procs: list[subprocess.Popen] = []
    try:
        yield workdir, procs
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def serve(procs: list[subprocess.Popen], argv: list[str], log: Path, what: str, ready: Callable[[], bool],
          timeout: float, logs: list[Path] = (), **popen) -> subprocess.Popen:
    """Start `argv` (recorded in `procs` for `owned_processes` to stop) and wait until `ready`."""
    proc = start_process(argv, log, **popen)
    procs.append(proc)
    wait_until(ready, what, timeout, [log, *logs], alive=lambda: proc.poll() is None)
    return proc


def security_properties(workdir: Path, secret: str) -> Path:
    """A Spark properties file (mode 600) turning on authentication and network encryption with `secret`,
    as docs/deployment.md has an operator give the master and each worker (`--properties-file`)."""
    path = workdir / "spark-security.conf"
    path.touch(mode=0o600)
    path.write_text("spark.authenticate true\n"
                    f"spark.authenticate.secret {secret}\n"
                    "spark.network.crypto.enabled true\n")
    return path


@contextlib.contextmanager
def spark_standalone(cores: int = 2, memory: str = "2g", timeout: float = 90) -> Iterator[SparkStandalone]:
    """A master and one worker from pyspark's `bin/spark-class`, on loopback and free ports, both started
    with authentication and RPC/block-transfer encryption on under one fresh shared secret."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    master_port, master_ui_port, worker_port, worker_ui_port = (free_port() for _ in range(4))
    master_url = f"spark://{LOOPBACK}:{master_port}"
    master_ui = f"http://{LOOPBACK}:{master_ui_port}"
    secret = secrets.token_urlsafe(32)
    with owned_processes("spark-standalone-") as (workdir, procs):
        env = spark_env(SPARK_LOG_DIR=str(workdir), SPARK_WORKER_DIR=str(workdir / "work"),
                        # The web UIs would otherwise also bind 0.0.0.0.
                        SPARK_PUBLIC_DNS=LOOPBACK,
                        # The master's and worker's JVMs, and (inherited from the worker) its executors'.
                        SPARK_DAEMON_JAVA_OPTS=server_java_options(), JAVA_TOOL_OPTIONS=server_java_options())
        security = ["--properties-file", str(security_properties(workdir, secret))]
        serve(procs, [spark_class, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                      "--port", str(master_port), "--webui-port", str(master_ui_port), *security],
              workdir / "master.log", "Spark master", lambda: port_open(master_port), timeout, env=env, cwd=workdir)
        serve(procs, [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                      "--port", str(worker_port), "--webui-port", str(worker_ui_port),
                      "--cores", str(cores), "--memory", memory, "--work-dir", str(workdir / "work"), *security,
                      master_url],
              workdir / "worker.log", "Spark worker registration", lambda: _alive_workers(master_ui) >= 1,
              timeout, [workdir / "master.log"], env=env, cwd=workdir)
        yield SparkStandalone(master_url=master_url, master_ui=master_ui, worker_cores=cores, workdir=workdir,
                              auth_secret=secret)


# --- Spark Connect ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkConnectServer:
    """A running Spark Connect server: `remote` (sc://host:port) is what IMAGING_SPARK_MASTER takes."""

    remote: str
    port: int
    log_dir: Path


@contextlib.contextmanager
def spark_connect_server(master: str = "local[2]", conf: dict[str, str] | None = None,
                         timeout: float = 120) -> Iterator[SparkConnectServer]:
    """pyspark's `sbin/start-connect-server.sh` on a free loopback port; stopped by its own stop script."""
    workdir = Path(tempfile.mkdtemp(prefix="spark-connect-"))
    port = free_port()
    sbin = spark_home() / "sbin"
    env = spark_env(SPARK_LOG_DIR=str(workdir / "logs"), SPARK_PID_DIR=str(workdir / "pids"),
                    SPARK_IDENT_STRING=f"connect-{port}")
    settings = {"spark.connect.grpc.binding.address": LOOPBACK, "spark.connect.grpc.binding.port": str(port),
                "spark.master": master, "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "4", "spark.driver.extraJavaOptions": server_java_options(),
                **(conf or {})}
    argv = [str(sbin / "start-connect-server.sh")]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    logs = lambda: sorted((workdir / "logs").glob("*.out"))  # noqa: E731 - the name is only known later
    started = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True, timeout=60)
    try:
        if started.returncode != 0:
            raise RuntimeError(f"start-connect-server.sh failed: {started.stdout}\n{started.stderr}")
        wait_until(lambda: port_open(port), "Spark Connect server", timeout, logs(),
                   alive=lambda: _daemon_alive(workdir / "pids"))
        yield SparkConnectServer(remote=f"sc://{LOOPBACK}:{port}", port=port, log_dir=workdir / "logs")
    finally:
        subprocess.run([str(sbin / "stop-connect-server.sh")], env=env, cwd=workdir, capture_output=True,
                       timeout=60)
        wait_until(lambda: not port_open(port), "Spark Connect server shutdown", 30)
        shutil.rmtree(workdir, ignore_errors=True)


class SharedSparkConnect:
    """One Spark Connect server for the tests that share it: started by the first test that asks (`get`),
    stopped by `stop`, and started again if a later test asks. A session fixture cannot be stopped early and
    still be right: pytest hands the stopped server to any later test of the run (a selection in one process
    runs other tests between them), whose client then retries a closed port for ten minutes."""

    def __init__(self, **options):
        self.options = options  # for spark_connect_server
        self._running: contextlib.ExitStack | None = None
        self.server: SparkConnectServer | None = None

    def get(self) -> SparkConnectServer:
        if self.server is None:
            with contextlib.ExitStack() as stack:
                self.server = stack.enter_context(spark_connect_server(**self.options))
                self._running = stack.pop_all()
        return self.server

    def stop(self) -> None:
        running, self._running, self.server = self._running, None, None
        if running is not None:
            running.close()


def _daemon_alive(pid_dir: Path) -> bool:
    """Whether the daemon spark-daemon.sh recorded is still running (or not yet recorded)."""
    pid_files = list(pid_dir.glob("*.pid"))
    if not pid_files:
        return True
    try:
        os.kill(int(pid_files[0].read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


# --- GCS emulator -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GcsEmulator:
    """A running GCS JSON API emulator; `endpoint` is the value of STORAGE_EMULATOR_HOST."""

    endpoint: str
    port: int
    project: str

    def environment(self) -> dict[str, str]:
        """What gcsfs and google-cloud-storage read to talk to the emulator with no credentials."""
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            # gcsfs otherwise probes every bucket over gRPC first (60 s per call against the emulator).
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GOOGLE_CLOUD_PROJECT": self.project,
        }

    def filesystem(self):
        """A gcsfs filesystem on the emulator (anonymous: the emulator checks no credentials)."""
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import gcsfs

        return gcsfs.GCSFileSystem(endpoint_url=self.endpoint, token="anon", project=self.project,
                                   skip_instance_cache=True)

    def make_bucket(self, name: str) -> str:
        fs = self.filesystem()
        if not fs.exists(name):
            fs.mkdir(name)
        return f"gs://{name}"


def gcs_emulator_program() -> str | None:
    """The emulator's console script next to this interpreter, or on PATH."""
    local = PYTHON_BIN / "gcp-storage-emulator"
    return str(local) if local.exists() else shutil.which("gcp-storage-emulator")


@contextlib.contextmanager
def gcs_emulator(project: str = "imaging-test", timeout: float = 30) -> Iterator[GcsEmulator]:
    """`gcp-storage-emulator start --in-memory` on a free loopback port."""
    program = gcs_emulator_program()
    if program is None:
        raise RuntimeError("gcp-storage-emulator is not installed (the `test` extra of pyproject.toml)")
    port = free_port()
    with owned_processes("gcs-emulator-") as (workdir, procs):
        serve(procs, [program, "start", "--host", LOOPBACK, "--port", str(port), "--in-memory", "--quiet"],
              workdir / "emulator.log", "GCS emulator", lambda: port_open(port), timeout, cwd=workdir)
        yield GcsEmulator(endpoint=f"http://{LOOPBACK}:{port}", port=port, project=project)


# --- PostgreSQL -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresServer:
    """A running PostgreSQL server with one database; `environment()` is what the instance yaml reads. `log` is the
    server's log (its statements too, when started with `log_statement=all`); `stop()` stops it for good."""

    host: str
    port: int
    user: str
    password: str
    database: str
    bin_dir: Path
    log: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:  # never show the password
        return f"PostgresServer({self.host}:{self.port}/{self.database})"

    def stop(self) -> None:
        """A fast shutdown (SIGINT), waited for: the server no longer answers."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                stop_process(self.process)

    def execute(self, script: str) -> None:
        """Run a script of statements (DDL, inserts) in one transaction."""
        import psycopg2

        with contextlib.closing(psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                                 password=self.password, dbname=self.database)) as conn:
            with conn.cursor() as cursor:
                cursor.execute(script)
            conn.commit()

    def environment(self) -> dict[str, str]:
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USER": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_DB": self.database,
        }

    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    def query(self, sql: str) -> list[tuple]:
        """Rows of `sql`, through psycopg2 (installed with dagster-postgres)."""
        import psycopg2

        with contextlib.closing(psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                                 password=self.password, dbname=self.database)) as conn:
            with conn.cursor() as cursor:
                cursor.execute(sql)
                return cursor.fetchall()


def postgres_bin_dir() -> Path | None:
    """Debian installs the server under /usr/lib/postgresql/<major>/bin (newest wins); else PATH."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if candidates:
        return candidates[-1].parent
    found = shutil.which("postgres")
    return Path(found).parent if found and shutil.which("initdb") else None


def _as_server_user(argv: list[str]) -> tuple[list[str], str | None]:
    """initdb and postgres refuse to run as root: run them as `postgres` through runuser then."""
    if os.geteuid() != 0:
        return argv, None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root and there is no `postgres` user to run PostgreSQL as") from None
    return ["runuser", "-u", "postgres", "--", *argv], "postgres"


@contextlib.contextmanager
def postgres_server(database: str = "dagster", timeout: float = 60,
                    settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """initdb + postgres on a temporary data dir, listening on 127.0.0.1 only, password login; `settings` are
    further server settings (`-c name=value`), e.g. `log_statement=all`."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")
    workdir = Path(tempfile.mkdtemp(prefix="postgres-"))
    data, sockets = workdir / "data", workdir / "sockets"
    sockets.mkdir()
    port, user, password = free_port(), "imaging", "test-only-password"
    password_file = workdir / "pwfile"
    password_file.write_text(password + "\n")
    _, run_as = _as_server_user([])
    if run_as:
        record = pwd.getpwnam(run_as)
        for path in (workdir, sockets, password_file):
            os.chown(path, record.pw_uid, record.pw_gid)
    initdb, _ = _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", user,
                                 f"--pwfile={password_file}", "--auth=scram-sha-256", "-E", "UTF8",
                                 "--no-sync", "--locale=C"])
    done = subprocess.run(initdb, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {done.stdout}\n{done.stderr}")
    serve, _ = _as_server_user([str(bin_dir / "postgres"), "-D", str(data), "-h", LOOPBACK, "-p", str(port),
                                "-k", str(sockets), "-c", "fsync=off", "-c", "synchronous_commit=off",
                                "-c", "full_page_writes=off",
                                *(a for k, v in (settings or {}).items() for a in ("-c", f"{k}={v}"))])
    log = workdir / "postgres.log"
    log.touch()
    if run_as:
        os.chown(log, pwd.getpwnam(run_as).pw_uid, pwd.getpwnam(run_as).pw_gid)
    proc = start_process(serve, log, cwd=workdir)
    server = PostgresServer(host=LOOPBACK, port=port, user=user, password=password, database=database,
                            bin_dir=bin_dir, log=log, process=proc)
    try:
        # An open port is not a server ready for connections ("the database system is starting up"): pg_isready
        # answers 0 only once it accepts them.
        ready = [str(bin_dir / "pg_isready"), "-q", "-h", LOOPBACK, "-p", str(port), "-U", user]
        wait_until(lambda: port_open(port) and subprocess.run(ready, timeout=10).returncode == 0, "PostgreSQL",
                   timeout, [log], alive=lambda: proc.poll() is None)
        created = subprocess.run([str(bin_dir / "createdb"), "-h", LOOPBACK, "-p", str(port), "-U", user, database],
                                 env={**os.environ, "PGPASSWORD": password}, capture_output=True, text=True,
                                 timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"createdb failed: {created.stderr}")
        yield server
    finally:
        # SIGINT is PostgreSQL's "fast shutdown"; runuser passes it on to the server.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --- MariaDB ------------------------------------------------------------------------------------


MARIADBD = "/usr/sbin/mariadbd"
MARIADB_INSTALL_DB = "mariadb-install-db"


def mariadb_available() -> bool:
    return Path(MARIADBD).exists() and shutil.which(MARIADB_INSTALL_DB) is not None and shutil.which("mariadb") is not None


@dataclass(frozen=True)
class MariaDbServer:
    """A running MariaDB server with one database and one password user on loopback; the tests' own root statements
    go through the socket (`execute`, `query`); `stop()` stops it for good."""

    host: str
    port: int
    user: str
    password: str
    database: str
    socket: Path
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:  # never show the password
        return f"MariaDbServer({self.host}:{self.port}/{self.database})"

    def _client(self, sql: str, *flags: str) -> str:
        done = subprocess.run(["mariadb", "--no-defaults", "-S", str(self.socket), "-u", "root", *flags, self.database],
                              input=sql, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"mariadb: {done.stderr.strip()}")
        return done.stdout

    def execute(self, script: str) -> None:
        self._client(script)

    def query(self, sql: str) -> list[tuple]:
        return [tuple(line.split("\t")) for line in self._client(sql, "--batch", "--skip-column-names").splitlines()]

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


@contextlib.contextmanager
def mariadb_server(database: str = "epr", timeout: float = 60) -> Iterator[MariaDbServer]:
    """mariadb-install-db + mariadbd on a temporary data dir, run as `mysql` when the tests run as root (the server
    refuses root otherwise), listening on 127.0.0.1 only; one database and a user with a password."""
    workdir = Path(tempfile.mkdtemp(prefix="mariadb-"))
    data, sock, port = workdir / "data", workdir / "mariadb.sock", free_port()
    user, password = "imaging", "test-only-mariadb-password"
    as_user = ["--user=mysql"] if os.geteuid() == 0 else []
    if as_user:
        record = pwd.getpwnam("mysql")
        os.chown(workdir, record.pw_uid, record.pw_gid)
    done = subprocess.run([MARIADB_INSTALL_DB, "--no-defaults", f"--datadir={data}", *as_user,
                           "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed: {done.stdout}\n{done.stderr}")
    log = workdir / "mariadb.log"
    proc = start_process([MARIADBD, "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
                          f"--bind-address={LOOPBACK}", *as_user, "--skip-log-bin", "--skip-name-resolve",
                          "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M",
                          "--innodb-flush-log-at-trx-commit=0", f"--pid-file={workdir / 'mariadb.pid'}",
                          f"--log-error={log}"], workdir / "out.log", cwd=workdir)
    server = MariaDbServer(LOOPBACK, port, user, password, database, sock, proc)
    try:
        wait_until(lambda: port_open(port) and sock.exists(), "MariaDB", timeout, [log],
                   alive=lambda: proc.poll() is None)
        setup = MariaDbServer(LOOPBACK, port, user, password, "mysql", sock)
        setup.execute(f"CREATE DATABASE {database}; CREATE USER '{user}'@'{LOOPBACK}' IDENTIFIED BY '{password}'; "
                      f"GRANT ALL ON {database}.* TO '{user}'@'{LOOPBACK}';")
        yield server
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --- Orthanc (a PACS with its DICOMweb plugin) ------------------------------------------------


ORTHANC = "/usr/sbin/Orthanc"
DICOMWEB_PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"


@dataclass
class OrthancServer:
    """A running Orthanc: its DICOMweb root, its REST root and the test user (the password: `password`).
    `kill()` stops it as a crash would (SIGKILL), `restart()` starts it again on the same port and storage.
    With `dicom` (an `OrthancDicom`), its DICOM port is on too (`dicom_port`, AE title `aet`)."""

    port: int
    user: str
    password: str
    workdir: Path
    procs: list
    dicom: "OrthancDicom | None" = None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[-1].pid, signal.SIGKILL)
        self.procs[-1].wait(10)

    def restart(self) -> None:
        self.procs.append(start_orthanc(self.workdir, self.port, self.user, self.password, dicom=self.dicom))

    def __repr__(self) -> str:  # never show the password
        return f"OrthancServer(port={self.port})"

    @property
    def rest(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def dicomweb(self) -> str:
        return f"{self.rest}/dicom-web"

    @property
    def dicom_port(self) -> int:
        assert self.dicom is not None, "this Orthanc has no DICOM port"
        return self.dicom.port

    @property
    def aet(self) -> str:
        assert self.dicom is not None, "this Orthanc has no DICOM port"
        return self.dicom.aet


@dataclass(frozen=True)
class OrthancDicom:
    """Orthanc's DICOM side: its port and AE title, and the peers it knows (`DicomModalities`: name ->
    (AE title, host, port)). Unknown peers are refused everything (no `DicomAlwaysAllow*`) and a wrong called
    AE title is rejected (`DicomCheckCalledAet`), as a hospital PACS is set up."""

    port: int
    aet: str
    modalities: dict
    extra: dict = None  # further settings of the DICOM side (DicomTls*)


def orthanc_available() -> bool:
    return Path(ORTHANC).exists() and Path(DICOMWEB_PLUGIN).exists()


def orthanc_config(workdir: Path, port: int, user: str, password: str, dicom: OrthancDicom | None = None) -> Path:
    """Loopback only (`RemoteAccessAllowed` false), a login, files stored as sent; a DICOM port only when asked."""
    config = workdir / "orthanc.json"
    storage = workdir / "storage"
    storage.mkdir(exist_ok=True)
    settings = {
        "Name": "imaging-test-pacs", "StorageDirectory": str(storage), "IndexDirectory": str(storage),
        "HttpPort": port, "DicomServerEnabled": False, "RemoteAccessAllowed": False,
        "AuthenticationEnabled": True, "RegisteredUsers": {user: password},
        "Plugins": [DICOMWEB_PLUGIN], "DicomWeb": {"Enable": True, "Root": "/dicom-web/"},
        "StorageCompression": False, "OverwriteInstances": True, "HttpDescribeErrors": False,
    }
    if dicom is not None:
        settings.update({
            "DicomServerEnabled": True, "DicomPort": dicom.port, "DicomAet": dicom.aet, "DicomCheckCalledAet": True,
            "DicomAlwaysAllowEcho": False, "DicomAlwaysAllowStore": False, "DicomAlwaysAllowFind": False,
            "DicomAlwaysAllowGet": False, "DicomAlwaysAllowMove": False,
            "DicomModalities": {name: {"AET": aet, "Host": host, "Port": peer_port, "AllowEcho": True,
                                       "AllowFind": True, "AllowGet": True, "AllowMove": True, "AllowStore": True}
                                for name, (aet, host, peer_port) in dicom.modalities.items()},
            **(dicom.extra or {}),
        })
    config.write_text(json.dumps(settings))
    os.chmod(config, 0o600)
    return config


def start_orthanc(workdir: Path, port: int, user: str, password: str, timeout: float = 30,
                  dicom: OrthancDicom | None = None) -> subprocess.Popen:
    """`Orthanc <config>` (again, on the same storage, after a stop) until its REST API (and DICOM port) answer."""
    config = orthanc_config(workdir, port, user, password, dicom)
    proc = start_process([ORTHANC, str(config)], workdir / "orthanc.log", cwd=workdir)
    wait_until(lambda: port_open(port) and (dicom is None or port_open(dicom.port)), "Orthanc", timeout,
               [workdir / "orthanc.log"], alive=lambda: proc.poll() is None)
    return proc


@contextlib.contextmanager
def orthanc_server(timeout: float = 30, dicom_modalities: dict | None = None,
                   dicom_extra: dict | None = None) -> Iterator[OrthancServer]:
    """An Orthanc on loopback; `dicom_modalities` (name -> (AE title, host, port)) also opens its DICOM port,
    with `dicom_extra` settings (TLS)."""
    port, user, password = free_port(), "pacs-test", secrets.token_urlsafe(12)
    dicom = (OrthancDicom(free_port(), "ORTHANC-PACS", dict(dicom_modalities), dicom_extra)
             if dicom_modalities is not None else None)
    with owned_processes("orthanc-") as (workdir, procs):
        procs.append(start_orthanc(workdir, port, user, password, timeout, dicom))
        yield OrthancServer(port, user, password, workdir, procs, dicom)


# --- pytest fixtures (import them into a test module: `from services import postgres, ...`) ----
# (The Spark Connect server is shared by two modules: its fixture, `spark_connect`, is in conftest.py.)
# Module-scoped: a server stops when the tests of the module that needed it are done, rather than idling
# until the end of the run (the suite runs in parallel workers, with two cores between them).


def skip_unless(condition: bool, reason: str) -> None:
    if not condition:
        pytest.skip(reason + " (CI installs it: see .ci/run)")


@pytest.fixture(scope="module")
def spark_cluster():
    skip_unless(java_available(), "Java is not installed: no Spark standalone cluster")
    with spark_standalone() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def gcs():
    skip_unless(gcs_emulator_program() is not None, "gcp-storage-emulator is not installed")
    with gcs_emulator() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def orthanc():
    skip_unless(orthanc_available(), "Orthanc and its DICOMweb plugin are not installed (orthanc, orthanc-dicomweb)")
    with orthanc_server() as server:
        yield server


@pytest.fixture(scope="module")
def postgres():
    skip_unless(postgres_bin_dir() is not None, "PostgreSQL server is not installed (apt-get install postgresql)")
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def mariadb():
    skip_unless(mariadb_available(), "MariaDB server is not installed (apt-get install mariadb-server)")
    with mariadb_server() as server:
        yield server
