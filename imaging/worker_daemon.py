"""Spark's Python daemon with the executors' heavy imports made once, before it forks any worker.

A local session's Python workers are forked from a daemon that lives as long as the session, but
Spark stops a worker after a minute idle (a fixed timeout), so the workers of a long-lived process
come and go. Each new worker that validates a suite imported Great Expectations again: 3.5-7.6 CPU-s
here, most of a cold run's executor time (benchmarks/RESULTS.md, "Issue 21, fifth pass"). Imported
in the daemon, every fork has it ready.

Set as `spark.python.daemon.module` for local masters only (`resources/spark.py`): there the
executors run this interpreter, where the platform is installed. A cluster's workers keep Spark's
own daemon.

Started as `python -m imaging.worker_daemon`, it imports the `imaging` package from the installed
platform, so local workers import the platform's modules from there: the files the driver runs (the
shipped zip is the same code; it is what a cluster's executors import).

Forking after these imports is safe for what they start: numpy's BLAS and pyarrow's allocator
register fork handlers, and no Python thread is running (`threading.active_count()` stays 1).
"""

import gc

import great_expectations  # noqa: F401 - the point of this module
import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pydicom  # noqa: F401
import pyspark.worker  # noqa: F401 - what each fork runs
from pyspark import daemon

if __name__ == "__main__":
    # A worker collects garbage after each task; frozen, the inherited objects are not walked (nor
    # their pages copied on write) by each fork's collections.
    gc.freeze()
    daemon.manager()
