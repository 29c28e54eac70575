"""Serialising a de-identified dataset to deterministic Part 10 bytes."""

from __future__ import annotations

import io

from pydicom.dataset import Dataset

from .errors import NotDeidentifiable
from .quiet import quiet


def to_bytes(ds: Dataset) -> bytes:
    """Part 10 bytes: zero preamble, the regenerated file meta, the dataset in its transfer syntax.

    Nothing time- or randomness-dependent is written, so the same input gives the same bytes.
    A failure to encode is reported as NotDeidentifiable with the exception's type name only.
    """
    failure = None
    with quiet():
        try:
            buffer = io.BytesIO()
            ds.preamble = None  # never the source's preamble (dual-format files hide data there)
            ds.save_as(buffer, enforce_file_format=True)
            return buffer.getvalue()
        except Exception as exc:  # noqa: BLE001 - message may echo values; keep the type only
            failure = type(exc).__name__
    raise NotDeidentifiable(f"encoding failed: {failure}")
