"""A site's PACS as a source of the landing layout: one package, one module per concern.

- `connection`: a server as configured (site, protocol, credentials from the environment), the errors a run
  can fail with, and the one retry policy (transient faults retried with backoff, a server still failing is
  unavailable, an instance's own fault recorded against it);
- `settings`: `platform/pacs.yaml`'s model (the DICOMweb and DIMSE sites, the receiver) and the PACS sites
  of a deployment (`load_pacs`);
- `listing`: a site-day's instances (UIDs and a change marker each) and its data version, on the driver;
  the sensor's cheap study-level listing;
- `retrieval`: the executor step of `pacs_landing` (`Fetcher`): each listed instance fetched, kept or failed;
- `dicomweb`: QIDO-RS listing, WADO-RS retrieval of the stored bytes;
- `dimse`: the DICOM network protocol: C-FIND listing, C-GET or C-MOVE retrieval (pynetdicom);
- `receive`: `imaging-receive`, the C-STORE receiver (a long-lived service beside the Dagster daemon): pushes
  land in the landing folder, C-MOVE answers in the retrieval spool.

Pure: no Spark, no Dagster. The Dagster parts are `assets/pacs_landing.py`, `resources/pacs.py` and
`automation/pacs_sensor.py`. Shipped to the executors whole (retrieval runs there): nothing here imports a
driver-only package.
"""
