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
# Child loggers do not inherit `disabled`: pixel decoders log through "pydicom.pixels.decoders.base".
_CHILDREN = ("pydicom.pixels", "pydicom.pixels.decoders", "pydicom.pixels.decoders.base")


_FOUND: dict[int, list[logging.Logger]] = {}  # the pydicom loggers, by how many loggers the process has


def _loggers() -> list[logging.Logger]:
    """pydicom's loggers (looked for again only when a logger was added: once a file it cost a scan of all)."""
    known = logging.root.manager.loggerDict
    found = _FOUND.get(len(known))
    if found is None:
        found = [_LOGGER, *(logging.getLogger(name) for name in _CHILDREN)]
        found += [logging.getLogger(name) for name in list(known) if name.startswith("pydicom.") and name not in _CHILDREN]
        _FOUND.clear()
        _FOUND[len(known)] = found
    return found


@contextmanager
def quiet() -> Iterator[None]:
    """Suppress pydicom's warnings and log records for the duration (not thread-safe: per process)."""
    loggers = _loggers()
    previous = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, was in zip(loggers, previous):
            logger.disabled = was
