"""Pure core of the imaging platform, split by where the code runs (ARCHITECTURE.md, "Code layout").

The top-level modules are the shared foundations (records, catalogue, fs, commit, config, settings
models, pseudonyms, issuers, the provenance ledger record, landing, run summaries, progress);
`imaging.steps` the executor steps, `imaging.deid` the de-identification engine, `imaging.quality` the
quality rules, and `imaging.governance` the driver-only release governance. Nothing in this package
imports Spark or Dagster, so every rule is testable on its own; all of it but `imaging.governance`
ships to Spark executors as plain Python.
"""
