"""Silence pydicom while handling identifiable files.

pydicom reports malformed values through `warnings` and the "pydicom" logger, quoting the
value ("Invalid value for VR DA: '...'"). On a Spark executor those land in logs, so every
engine entry point runs inside `quiet()`. Callers may wrap their own dcmread with it too. A process that reads
headers for its whole life (a service, a command, the code location) calls `silence_for_process()` once.
"""

from __future__ import annotations

import logging
import sys
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


# Libraries whose warnings and log records quote the values of a DICOM header or a DIMSE request.
DICOM_LIBRARIES = ("pydicom", "pynetdicom")


def _from_dicom_library() -> bool:
    """Whether a warning being shown was raised inside pydicom or pynetdicom (any frame of the stack):
    pydicom attributes its validation warnings to whichever caller its stack level names."""
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).split(".", 1)[0] in DICOM_LIBRARIES:
            return True
        frame = frame.f_back
    return False


class _NoLibraryRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".", 1)[0] not in DICOM_LIBRARIES


def silence_for_process() -> None:
    """For the whole life of a process that reads headers (imaging-receive, imaging-review, imaging-quarantine, the
    code location's processes): pydicom's and pynetdicom's warnings and log records never reach its output, which
    a log collector keeps. Idempotent. `quiet()` stays the tool inside a step: it also stops the records a library
    keeps (warnings recorded by a caller)."""
    if getattr(warnings.showwarning, "_imaging_silenced", False):
        return
    for name in DICOM_LIBRARIES:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)  # children without a level of their own follow
    no_records = _NoLibraryRecords()
    for handler in logging.root.handlers:
        handler.addFilter(no_records)
    logging.root.addFilter(no_records)
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not _from_dicom_library():
            shown(message, category, filename, lineno, file, line)

    showwarning._imaging_silenced = True
    warnings.showwarning = showwarning
