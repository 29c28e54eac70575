"""Release governance: what the driver and the reviewer run once a cohort's files are selected.

Bundles and their checksums (`bundle`, `release_bundle`), the data card (`datacard`), disclosure control
(`disclosure`), column lineage and its OpenLineage events (`lineage`, `lineage_events`), the code
version a release records (`code_version`), cohort definitions (`cohort`), the approval gate
(`approval`), the reviewer's command and report (`review`, `review_html`, `report`). Driver only: never
shipped to the executors (resources/spark.py leaves this package out of the code archive), so an executor
step that imported it would fail there; tests/test_code_archive.py checks that none does.
"""
