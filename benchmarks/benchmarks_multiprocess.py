"""The platform's definitions with Dagster's default multiprocess executor (a process, and so a
Spark session, per step): used by session_per_run.py only."""

from dagster import Definitions, multiprocess_executor

from definitions import defs as _defs

defs = Definitions(assets=_defs.assets, resources=_defs.resources, executor=multiprocess_executor)
