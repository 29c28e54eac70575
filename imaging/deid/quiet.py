"""Silence pydicom while handling identifiable files.

pydicom reports malformed values through `warnings` and the "pydicom" logger, quoting the
value ("Invalid value for VR DA: '...'"). On a Spark executor those land in logs, so every
engine entry point runs inside `quiet()`. Callers may wrap their own dcmread with it too.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

_LOGGER = logging.getLogger("pydicom")


@contextmanager
def quiet() -> Iterator[None]:
    """Suppress pydicom's warnings and log records for the duration (not thread-safe: per process)."""
    previous = _LOGGER.disabled
    _LOGGER.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _LOGGER.disabled = previous
