"""What a run's driver does around the steps: the platform settings (`config`), the crash-safe commit of
a run's outputs (`commit`), run summaries (`run_summary`), progress estimates (`progress`), the
landing zone's data versions for the sensor (`landing`) and the production instance's pooled PostgreSQL storage
(`instance_storage`). Driver only: left out of the code archive the
executors get (resources/spark.py `DRIVER_ONLY`), like `imaging.governance`.
"""
