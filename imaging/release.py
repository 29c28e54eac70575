"""Cohort releases: copying published files into a release and checking what was copied."""

from __future__ import annotations

import hashlib

from imaging import fs as fsx


def release_path(row) -> str:
    """Where an image sits inside a release: by pseudonymous patient and study."""
    return f"images/{row['patient_pseudonym']}/{row['study_instance_uid']}/{row['sop_instance_uid']}.dcm"


def copy_partition(source_root: str, target_root: str, rows):
    """Spark mapPartitions body: copy each selected file, verifying its sha256 on the way.

    Yields (release path, sha256). A file whose bytes no longer match the manifest stops the
    release: publishing an unverified file is worse than publishing nothing.
    """
    for row in rows:
        fs, path = fsx.filesystem(f"{source_root}/{row['output_path']}")
        with fs.open(path, "rb") as handle:
            data = handle.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != row["sha256"]:
            raise RuntimeError(f"manifest checksum mismatch for {row['output_path']}")
        relative = release_path(row)
        fsx.write_bytes(f"{target_root}/{relative}", data)
        yield relative, digest


def sha256_file(url: str) -> str:
    fs, path = fsx.filesystem(url)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_release(root: str) -> list[str]:
    """Problems found checking a release folder against its SHA256SUMS (empty when it verifies)."""
    fs, base = fsx.filesystem(root)
    with fs.open(f"{base}/SHA256SUMS", "r") as handle:
        expected = dict(reversed(line.rstrip("\n").split("  ", 1)) for line in handle if line.strip())
    present = {p[len(base) + 1:] for p in fs.find(base) if not p.endswith("/SHA256SUMS")}
    problems = [f"not listed: {p}" for p in sorted(present - set(expected))]
    problems += [f"missing: {p}" for p in sorted(set(expected) - present)]
    problems += [f"checksum differs: {p}" for p in sorted(set(expected) & present)
                 if sha256_file(f"{root}/{p}") != expected[p]]
    return problems
