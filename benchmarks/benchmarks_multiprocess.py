"""The platform's definitions with Dagster's default multiprocess executor (a process, and so a
Spark session, per step): used by session_per_run.py only."""

from dagster import Definitions, multiprocess_executor

import definitions

defs = Definitions(assets=definitions.defs.assets, resources=definitions.defs.resources, executor=multiprocess_executor)
