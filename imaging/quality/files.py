"""Executor side of the `manifest_files` check: each manifest file exists and has its sha256. Runs on
the executors (assets/quality.py hands `verify_file_frames` to mapInPandas), so it imports only what
is shipped to them."""

from __future__ import annotations


# Executor side of `manifest_files` (a Spark mapInPandas body; pandas frames in and out, no Spark import).

def verify_file_frames(root: str, frames):
    """(batch, patient_pseudonym, output_path, sha256) frames -> (batch, patient_pseudonym, status).

    Status is 'ok', 'missing' or 'checksum differs'; each file is streamed once.
    """
    import pandas as pd

    from imaging import fs as fsx

    for frame in frames:
        statuses = []
        for path, expected in zip(frame["output_path"], frame["sha256"]):
            url = f"{root}/{path}"
            if not path or not fsx.exists(url):
                statuses.append("missing")
            elif fsx.sha256_url(url) != expected:
                statuses.append("checksum differs")
            else:
                statuses.append("ok")
        yield pd.DataFrame({"batch": frame["batch"], "patient_pseudonym": frame["patient_pseudonym"],
                            "status": statuses})
