"""The executor steps: what runs inside Spark tasks, one file or extract at a time, and what those steps need.

`index` (list a site-day, read a file's header through `imaging.header`, the one DICOM header module),
`clinical` (read an extract; the clinical policy the anonymizer applies),
`anonymize` (de-identify one file, through `imaging.deid`) and `release` (copy a release's files,
write its metadata), and `declared` (the image steps as data: what each reads, runs, writes and checks).
Shipped to the executors (resources/spark.py) with the shared foundations at the top
of `imaging`, `imaging.deid` and `imaging.quality`; nothing here imports `imaging.governance` or
`imaging.driver`, which stay on the driver (tests/test_code_archive.py checks both).
"""
