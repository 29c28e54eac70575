"""Test servers only: Dagster's backfill daemon with a shorter pause between its iterations.

Dagster's daemons pause `dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS` (30 s, not configurable)
between iterations, so a backfill launched from the UI waits up to 30 s to get its run and up to 30 s more, after
the run, to be marked done: a minute of each browser test that launches one spent waiting. `dagster dev` started by
tests/dagster_server.py has this folder on PYTHONPATH and IMAGING_TEST_DAEMON_SECONDS set; Python imports this
module at start-up, and it sets the constant as soon as Dagster's module is imported (nothing else is imported
here, so the processes that never import Dagster, such as Spark's Python workers, pay nothing). The daemon's work
is the same, only its pace: deployments keep Dagster's 30 s.
"""

import os
import sys

_SECONDS = os.environ.get("IMAGING_TEST_DAEMON_SECONDS")
_TARGET = "dagster._daemon.controller"


class _SetInterval:
    """A meta path finder that finds nothing itself: it wraps the real loader of Dagster's controller module."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.DEFAULT_DAEMON_INTERVAL_SECONDS = int(_SECONDS)

        spec.loader.exec_module = exec_module
        return spec


if _SECONDS:
    sys.meta_path.insert(0, _SetInterval())
