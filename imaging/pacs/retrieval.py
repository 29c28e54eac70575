"""The executor step of `pacs_landing`: each planned instance retrieved (or kept) into this run's staging.

Per Spark partition, one protocol session per server (`listing.session`: one DICOMweb client, or one DIMSE
association), never one per instance. Each instance is `fetched` (its bytes retrieved, checked as one Part 10
file of that instance, staged), `unchanged` (the listing's marker and the landed copy's sha256 are as the last
run recorded: the copy is linked into the staging without a request) or `failed` with a fixed reason. A
server that stays unavailable raises (`PacsUnavailable`): the run fails before its commit, nothing is visible.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Iterable

from imaging import fs as fsx
from imaging.pacs.connection import InstanceFailed, PacsServer, RetryPolicy
from imaging.pacs.listing import session
from imaging.pacs.records import NOT_PART10
from imaging.records import BatchStep, PacsInstance, PacsOutcome, schema_of

FETCHED, UNCHANGED, FAILED = "fetched", "unchanged", "failed"
OUTCOMES = (FETCHED, UNCHANGED, FAILED)

# Reasons (fixed phrases: never a value, a UID or a URL).
MALFORMED_UID = "malformed UID in the PACS listing"
OTHER_INSTANCE = "the server returned another instance"
CONTENT_CHANGED_KEPT_FAILED = "landed copy no longer matches its recorded sha256"

# PS3.5 9.1: digits and dots, no empty component, at most 64 characters. Checked before a UID goes into a
# request (a URL, a C-GET identifier).
_UID = re.compile(r"^[0-9]+(\.[0-9]+)*$")


def is_uid(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 64 and _UID.fullmatch(value) is not None


def landed_name(site: str, date: str, name: str) -> str:
    """Path of a landed file below the PACS landing root: the landing layout, `images/<site>/<date>/<name>`."""
    return f"images/{site}/{date}/{name}"


def check_part10(data: bytes, sop: str) -> None:
    """The bytes are one Part 10 file of instance `sop` (its file meta says so)."""
    if len(data) < 132 or data[128:132] != b"DICM":
        raise InstanceFailed(NOT_PART10)
    import pydicom

    try:
        # The file meta is read whole; of the data set only one early tag (cheap: the header's start).
        meta = pydicom.dcmread(io.BytesIO(data), specific_tags=["SOPClassUID"], stop_before_pixels=True).file_meta
    except Exception:  # noqa: BLE001 - any unreadable meta is the same fault
        raise InstanceFailed(NOT_PART10) from None
    if str(meta.get("MediaStorageSOPInstanceUID", "")).rstrip("\0 ") != sop:
        raise InstanceFailed(OTHER_INSTANCE)


@dataclass(frozen=True)
class FetchSetup:
    """Per Spark partition: one session per server, the landing root (for kept copies) and the staging root
    (where this run's site-days are built before the commit swaps them in)."""

    servers: tuple[PacsServer, ...] = field(repr=False)
    policy: RetryPolicy
    landed_root: str
    staged_root: str

    def __call__(self):
        return Fetcher(self)


class Fetcher:
    def __init__(self, setup: FetchSetup):
        self.setup = setup
        self.servers = {s.site: s for s in setup.servers}
        self.sessions: dict[str, object] = {}

    def session(self, site: str):
        if site not in self.sessions:
            self.sessions[site] = session(self.servers[site], self.setup.policy)
        return self.sessions[site]

    def close(self) -> None:
        """Release every session at the partition's end (BatchStep calls it): a DIMSE server counts open
        associations."""
        for opened in self.sessions.values():
            opened.close()
        self.sessions.clear()

    def __call__(self, item: PacsInstance) -> PacsOutcome:
        def outcome(kind: str, **found) -> PacsOutcome:
            return PacsOutcome(**item.listed(), outcome=kind, **found)

        if not all(is_uid(u) for u in (item.study_instance_uid, item.series_instance_uid, item.sop_instance_uid)):
            return outcome(FAILED, reason=MALFORMED_UID)
        relative = landed_name(item.site, item.date, item.file_name)
        staged = fsx.under(self.setup.staged_root, relative)
        if item.previous_sha256 and item.previous_marker == item.marker:
            kept = keep(fsx.under(self.setup.landed_root, relative), staged, item.previous_sha256)
            if kept is not None:
                return outcome(UNCHANGED, size_bytes=kept, sha256=item.previous_sha256)
        try:
            data, attempts = self.session(item.site).retrieve(item.study_instance_uid, item.series_instance_uid,
                                                              item.sop_instance_uid, item.sop_class_uid)
            check_part10(data, item.sop_instance_uid)
        except InstanceFailed as failed:
            return outcome(FAILED, attempts=failed.attempts, reason=failed.reason)
        fsx.write_bytes(staged, data)
        return outcome(FETCHED, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), attempts=attempts)


def keep(landed: str, staged: str, sha256: str) -> int | None:
    """Put the last run's copy of an unchanged instance into this run's site-day (a hard link on a local
    disk, a copy on an object store) if it still has its recorded sha256; its size, or None (fetch it)."""
    try:
        if fsx.sha256_url(landed) != sha256:
            return None
        fs, source = fsx.filesystem(landed)
        _, target = fsx.filesystem(staged)
        fs.makedirs(fs._parent(target), exist_ok=True)
        if fsx.is_local(fs):
            try:
                os.link(source, target)
            except OSError:  # a filesystem without hard links: a copy
                shutil.copyfile(source, target)
        else:
            fs.copy(source, target)
        return int(fs.info(target)["size"])
    except (FileNotFoundError, OSError):
        return None


def fetch_step(setup: FetchSetup) -> BatchStep:
    return BatchStep(setup, PacsInstance, schema_of(PacsOutcome))


def counts(outcomes: Iterable[str]) -> dict[str, int]:
    """Instances per outcome, every outcome present (listed = fetched + unchanged + failed)."""
    tally = {o: 0 for o in OUTCOMES}
    for o in outcomes:
        tally[o] += 1
    return tally
