"""The platform's Python daemon for local executors (imaging/worker_daemon.py): prepared alongside the
driver's JVM, handed to the launcher Spark starts, and run by the launcher itself when nothing fits."""

import os
import signal
import socket
import struct
import subprocess
import sys
import time

import psutil

from imaging import worker_daemon


def launch(env: dict[str, str]) -> subprocess.Popen:
    """What Spark's PythonWorkerFactory starts: the daemon module, the worker module as its argument."""
    return subprocess.Popen([sys.executable, "-m", "imaging.worker_daemon", "pyspark.worker"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.getcwd())


def daemon_pid(launcher: subprocess.Popen) -> int:
    """The pid of the process that forks workers for `launcher`: ask it for a worker, as Spark does, and read
    that worker's parent."""
    (port,) = struct.unpack(">i", launcher.stdout.read(4))  # the daemon's first words: its port
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        (worker,) = struct.unpack(">i", conn.recv(4))  # then each connection's: its worker's pid
        parent = psutil.Process(worker).ppid()
        os.kill(worker, signal.SIGKILL)
    return parent


def ended(process: subprocess.Popen, within: float = 30) -> int:
    """Its exit code; TimeoutExpired if it is still running after `within` seconds."""
    return process.wait(timeout=within)


def workers_env(seed: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": seed, "PYSPARK_PYTHON": sys.executable}


def stops_cleanly(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler installed (Linux's SigCgt mask): from then on a stop
    signal lets it tidy up."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_a_launcher_started_at_once_is_served_by_the_prepared_daemon():
    """The socket listens before `prepare` returns: a launcher that comes while the prepared process is still
    importing (a busy machine, or a JVM quicker than the imports) waits for it instead of importing again."""
    prepared, path = worker_daemon.prepare(workers_env("0"))
    launcher = prepared
    try:
        assert os.path.exists(path)
        launcher = launch({**workers_env("0"), worker_daemon.PREPARED_ENV: path})
        assert daemon_pid(launcher) == prepared.pid
        launcher.stdin.close()
        assert ended(prepared) == 1 and ended(launcher) == 0
        assert not os.path.exists(os.path.dirname(path))
    finally:
        for p in (prepared, launcher):
            if p.poll() is None:
                p.kill()


def test_a_prepared_daemon_is_taken_by_a_launcher_with_its_hash_seed_only():
    prepared, path = worker_daemon.prepare(workers_env("7"))
    other = fits = prepared
    try:
        # Another hash seed than the prepared interpreter's: the launcher runs the daemon itself.
        other = launch({**workers_env("0"), worker_daemon.PREPARED_ENV: path})
        assert daemon_pid(other) == other.pid
        other.stdin.close()  # how Spark stops a daemon: its stdin closed (Spark's daemon then exits 1)
        assert ended(other) == 1

        # The same seed: the prepared process becomes the launcher's daemon, and the launcher stands for it.
        fits = launch({**workers_env("7"), worker_daemon.PREPARED_ENV: path})
        assert daemon_pid(fits) == prepared.pid
        assert not os.path.exists(path)  # served once: its socket is gone
        fits.terminate()  # Spark's other way: the daemon process destroyed (SIGTERM), passed on
        assert ended(prepared) == 1  # Spark's daemon exits 1 on SIGTERM
        assert ended(fits) == 0  # and its launcher once it has
    finally:
        for p in (prepared, other, fits):
            if p.poll() is None:
                p.kill()


def test_a_launcher_with_nothing_prepared_is_told_so(tmp_path):
    """Then it runs the daemon itself, as a launcher the prepared process refuses does (tested above)."""
    assert worker_daemon._hand_over(str(tmp_path / "none.sock")) is None


def test_a_prepared_daemon_never_used_ends_with_its_driver_and_leaves_nothing():
    prepared = [worker_daemon.prepare(workers_env("0")) for _ in range(2)]
    assert all(os.path.exists(path) for _, path in prepared)  # listening from the start
    deadline = time.monotonic() + 60
    while not all(stops_cleanly(p.pid) for p, _ in prepared) and time.monotonic() < deadline:
        time.sleep(0.05)  # its interpreter started: a stop now is the driver's, not one before Python runs
    (closed, closed_path), (stopped, stopped_path) = prepared
    closed.stdin.close()  # the driver's end: dropped, or the driver gone
    stopped.terminate()  # the driver's process group stopped
    assert ended(closed) == 0 and ended(stopped) == 0
    assert not os.path.exists(os.path.dirname(closed_path)) and not os.path.exists(os.path.dirname(stopped_path))


SESSION = """
import os, sys
import pyarrow as pa
from resources import spark as spark_resource
from resources.spark import SparkResource, spark_config
from imaging.worker_daemon import PREPARED_ENV

session = SparkResource(spark_config=spark_config("local[2]")).spark_session
(prepared,) = spark_resource._PREPARED

def parents(batches):
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"parent": [os.getppid()]})

found = {r["parent"] for r in session.range(4).repartition(2).mapInArrow(parents, "parent long").collect()}
path = session.conf.get(f"spark.executorEnv.{PREPARED_ENV}")  # where launchers reached the prepared process
print(found == {prepared.pid}, os.path.exists(os.path.dirname(path)))
session.stop()
"""


def test_a_new_local_session_forks_its_workers_from_the_prepared_daemon():
    """In a fresh process (one SparkContext per process): the first daemon of its session is the prepared one,
    and the prepared process's folder is gone once it has been taken. A later daemon of a long-lived process
    (Spark keys its daemons by the workers' environment) finds nothing prepared and imports for itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "PYSPARK_SUBMIT"))}
    out = subprocess.run([sys.executable, "-c", SESSION], env={**env, "SPARK_LOCAL_IP": "127.0.0.1"},
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["True", "False"], out.stdout[-2000:] + out.stderr[-3000:]
