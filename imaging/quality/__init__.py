"""Data-quality rules, pure (no Spark, no Dagster), split by concern.

`rules` (every check, its kind, threshold and severity, from platform/quality.yaml), `outcomes`
(aggregated figures -> a passed or failed `CheckOutcome`, offenders as pseudonyms only), `columns` (the
clinical columns and date patterns the checks read), `gate` (across runs: whether publication waits, and
what a release records of each check) and `files` (`verify_file_frames`, the executor side of the
`manifest_files` check). Shipped to the executors because `files` runs there. `rules` holds the model of
platform/quality.yaml, `expectations` that of platform/expectations/*.json.
"""
