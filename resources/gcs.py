"""Google Cloud Storage on the Dagster side: dagster-gcp's `GCSResource` checks the buckets of gs:// roots.

Files themselves go through `imaging/fs.py` (fsspec, gcsfs) on the driver and in the tasks; this
client only makes a run fail at its start, with the bucket's name, when a configured bucket does not
exist or the credentials cannot see it, instead of deep inside a Spark task. Credentials and project
come from the environment (application default credentials, GOOGLE_CLOUD_PROJECT; STORAGE_EMULATOR_HOST
for an emulator).
"""

from __future__ import annotations

import os
from typing import Iterable

from dagster import Failure


def buckets_of(urls: Iterable[str]) -> list[str]:
    """The bucket names of the gs:// URLs among `urls`."""
    return sorted({url[len("gs://"):].split("/", 1)[0] for url in urls if url.startswith("gs://")})


def check_buckets(urls: Iterable[str]) -> None:
    """Raise a clear Failure if a gs:// root's bucket is missing or not visible with these credentials."""
    buckets = buckets_of(urls)
    if not buckets:
        return
    from dagster_gcp import GCSResource  # Google's client libraries load only when a root is gs://

    client = GCSResource(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None).get_client()
    missing = []
    for name in buckets:
        try:
            found = client.bucket(name).exists()
        except Exception as error:  # credentials, network: say which bucket, then the cause
            raise Failure(f"cannot reach GCS bucket {name!r}: {type(error).__name__}: {error}") from error
        if not found:
            missing.append(name)
    if missing:
        raise Failure(f"GCS bucket(s) not found or not visible with these credentials: {', '.join(missing)}")
