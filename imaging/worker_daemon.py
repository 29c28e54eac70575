"""Spark's Python daemon with the executors' heavy imports made once, before it forks any worker, and
made ready before Spark asks for it.

A local session's Python workers are forked from a daemon that lives as long as the session, but
Spark stops a worker after a minute idle (a fixed timeout), so the workers of a long-lived process
come and go. Each new worker that validates a suite imported Great Expectations again: 3.5-7.6 CPU-s
here, most of a cold run's executor time (benchmarks/RESULTS.md, "Issue 21, fifth pass"). Imported
in the daemon, every fork has it ready.

Spark starts the daemon when a run's first Python task needs a worker, so that task waited for the
imports (about 4 s, a sixth of a cold run with data). The driver therefore *prepares* the daemon
(`prepare`) as it starts the session's JVM: a process that makes the imports at once, alongside the
JVM's own start, then waits. When Spark starts `python -m imaging.worker_daemon`, that process
(the *launcher*) imports nothing heavy: it hands its standard streams, environment, folder and
arguments to the prepared process, which takes them and becomes the daemon. The launcher then stands
for the daemon towards Spark (its stop signal is passed on) until the daemon ends. A launcher that
finds nothing prepared, or a prepared process started with another hash seed, runs the daemon itself
as before. The socket lives in a folder only this user may enter (`tempfile.mkdtemp`, 0700): what
travels over it, the workers' environment, is what every worker holds anyway.

The driver binds the socket itself, before `prepare` returns, and hands the listening socket to the
prepared process: so a launcher always finds what was prepared, however busy the machine. One that
comes while the imports are still being made waits for them (its request is queued on the socket),
which costs it less than making them itself; on a busy machine the prepared process could otherwise
lose the race to the JVM and the first Python task, and the session would import twice.

Set as `spark.python.daemon.module` for local masters only (`resources/spark.py`): there the
executors run this interpreter, where the platform is installed. A cluster's workers keep Spark's
own daemon.

Forking after these imports is safe for what they start: numpy's BLAS and pyarrow's allocator
register fork handlers, and no Python thread is running (`threading.active_count()` stays 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile

# Where a launcher finds the prepared process: set in the workers' environment by the driver.
PREPARED_ENV = "IMAGING_WORKER_DAEMON_PREPARED"
# Read at the interpreter's start or at import, so the prepared process must have the workers' own (Spark gives
# them PYTHONHASHSEED=0 unless the driver sets one): a daemon with another would hash strings unlike its peers, or
# allocate Arrow's memory with another allocator (platform/spark.yaml).
FIXED_AT_START = ("PYTHONHASHSEED", "ARROW_DEFAULT_MEMORY_POOL")
_MESSAGE = 1 << 20  # bytes read at a time from a launcher (its environment, folder, arguments and path)


def prepare(env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start a prepared process for this interpreter; returns it and the socket path launchers reach it by
    (the value of PREPARED_ENV), listening already: a launcher started from now on reaches it. It serves
    one launcher, and ends when the driver closes its stdin (the Popen object is dropped or the driver
    exits) or after serving."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONHASHSEED", "0")
    path = os.path.join(tempfile.mkdtemp(prefix="imaging-daemon-"), "prepared.sock")  # a 0700 folder
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:  # the driver's copy closes here
        try:
            listener.bind(path)
            listener.listen(4)
            process = subprocess.Popen(
                [sys.executable, "-m", "imaging.worker_daemon", "--prepared", path, str(listener.fileno())],
                stdin=subprocess.PIPE, env=env, cwd=tempfile.gettempdir(), pass_fds=(listener.fileno(),))
        except BaseException:
            _remove(path)
            raise
    return process, path


def _import_heavy() -> None:
    import gc

    import great_expectations  # noqa: F401 - the point of this module
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pydicom  # noqa: F401
    import pyspark.worker  # noqa: F401 - what each fork runs

    # A worker collects garbage after each task; frozen, the inherited objects are not walked (nor
    # their pages copied on write) by each fork's collections.
    gc.freeze()


def _run_daemon() -> None:
    from pyspark import daemon

    daemon.manager()


def _remove(path: str) -> None:
    """The socket and its folder, whichever of them is left."""
    for remove, name in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(name)
        except FileNotFoundError:
            pass


def _serve(path: str, listening: int) -> None:
    """The prepared process: import, then take the first launcher that fits from the socket the driver
    bound (the descriptor `listening`, listening since before this process started), then become its
    daemon."""
    def stop(*_):  # stopped with the driver's process group: the finally below still tidies up
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    listener = socket.socket(fileno=listening)
    try:
        _import_heavy()
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in ready:  # the driver closed its end (or exited): nobody will ask any more
                return
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, _MESSAGE, 3)
            while chunk := conn.recv(_MESSAGE):  # a stream: the rest of the message, up to the launcher's end
                message += chunk
            request = json.loads(message)
            if len(fds) == 3 and all(request["env"].get(k) == os.environ.get(k) for k in FIXED_AT_START):
                break
            with contextlib.suppress(OSError):  # a launcher gone meanwhile needs no answer
                conn.sendall(b"no")
            conn.close()
            for fd in fds:
                os.close(fd)
    finally:
        listener.close()  # launchers still queued are refused: they run the daemon themselves
        _remove(path)
    # Still a child of the driver, so its CPU and memory count with the run's process tree.
    try:
        conn.sendall(str(os.getpid()).encode())
    except OSError:  # the launcher is gone (Spark stopped it while it waited): nobody to serve
        return
    conn.close()
    for target, fd in enumerate(fds):  # the launcher's streams: Spark reads the port and writes to these
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv[:] = request["argv"]
    sys.path[:] = request["path"]
    _run_daemon()


def _hand_over(path: str) -> int | None:
    """The launcher's side: the daemon's pid once the prepared process has taken its place, or None."""
    request = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "path": sys.path}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
            conn.shutdown(socket.SHUT_WR)
            answer = conn.recv(64)
    except OSError:
        return None
    return int(answer) if answer.isdigit() else None


def _stand_for(pid: int) -> None:
    """Wait for the daemon `pid` to end, passing Spark's stop signal on to it."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
    select.select([handle], [], [])  # readable when it has ended (retried after a signal, PEP 475)


def main(argv: list[str]) -> None:
    if argv[1:2] == ["--prepared"]:
        _serve(argv[2], int(argv[3]))
        return
    path = os.environ.get(PREPARED_ENV)
    pid = _hand_over(path) if path else None
    if pid is not None:
        _stand_for(pid)
        return
    _import_heavy()
    _run_daemon()


if __name__ == "__main__":
    main(sys.argv)
