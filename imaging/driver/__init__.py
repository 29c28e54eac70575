"""What a run's driver does around the steps: the platform settings (`config`), the crash-safe commit of
a run's outputs (`commit`), run summaries (`run_summary`), progress estimates (`progress`) and the
landing zone's data versions for the sensor (`landing`). Driver only: left out of the code archive the
executors get (resources/spark.py `DRIVER_ONLY`), like `imaging.governance`.
"""
