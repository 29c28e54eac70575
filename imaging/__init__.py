"""Pure core of the imaging platform: DICOM rules, pseudonyms, clinical policy, cohorts.

Nothing in this package imports Spark or Dagster, so every rule is testable on its own and
ships to Spark executors as plain Python.
"""
