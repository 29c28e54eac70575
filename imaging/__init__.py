"""Pure core of the imaging platform, split by where the code runs (ARCHITECTURE.md, "Code layout").

The top-level modules are the foundations shared by driver and executors (records, catalogue, fs, the
DICOM header (keyword -> column table, value readers, DA/TM/DT), settings models, pseudonyms, issuers,
the provenance ledger record); `imaging.steps` the executor
steps, `imaging.deid` the de-identification engine, `imaging.quality` the quality rules,
`imaging.driver` a run's machinery (settings, commits, summaries, progress, landing versions) and
`imaging.governance` the release governance. Nothing in this package imports Spark or Dagster, so every
rule is testable on its own (one exception, which decides nothing: `worker_daemon`, Spark's Python daemon
for local executors, started by Spark itself); all of it but `imaging.driver` and `imaging.governance` ships to Spark
executors as plain Python.
"""
