"""The release audit log: every hold, approval, rejection, publication, opt-out flag, withdrawal, expiry and
reclaim of stored bytes, append-only, identifiable zone.

One write-once JSON file per event in `identifiable/audit/` (object stores cannot append to a file;
they can refuse to overwrite one), named by UTC time and the event's own hash so a listing is the
log in order. Each event carries the sha256 of the event before it (`previous`), so a removed or
edited event breaks the chain, which `read_events` reports. Events hold release ids, cohort names,
approver principals and key fingerprints: never a patient identifier, a path or a value.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass

from imaging import fs as fsx
from imaging.catalogue import AUDIT

HOLD, APPROVE, REJECT, PUBLISH = "hold", "approve", "reject", "publish"
# A published release found holding patients who opted out since it was built (the detail says how many,
# never who): written once per release and count by published_cohort (imaging.governance.optout.log_flags).
OPTED_OUT = "opted-out"
# A published version ended (imaging.governance.retention): withdrawn, or expired after its cohort's retention;
# then its images' bytes that no current version holds any more, removed from the object store.
WITHDRAW, EXPIRE, RECLAIM = "withdraw", "expire", "reclaim"


@dataclass(frozen=True)
class AuditEvent:
    event: str  # hold | approve | reject | publish | opted-out | withdraw | expire | reclaim
    release_id: str
    cohort: str
    version: int
    at: str  # ISO 8601, UTC
    principal: str | None = None  # approve, reject: the signer's principal
    key_fingerprint: str | None = None
    detail: str | None = None  # why held, the note or the reason, the run id
    previous: str | None = None  # sha256 of the previous event's file (None: the first)


@dataclass(frozen=True)
class AuditLog:
    events: tuple[AuditEvent, ...]
    broken: bool  # some event's `previous` does not name the event before it


def _folder(warehouse: str) -> str:
    return fsx.under(warehouse, AUDIT.path)


def _files(warehouse: str) -> list[str]:
    fs, root = fsx.filesystem(_folder(warehouse))
    if not fs.exists(root):
        return []
    return sorted(fsx.qualify(fs, p) for p in fs.ls(root, detail=False) if p.endswith(".json"))


@dataclass(frozen=True)
class PendingEvent:
    """What to log, before it is chained and named."""

    event: str
    release_id: str
    cohort: str
    version: int
    principal: str | None = None
    key_fingerprint: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class EventFile:
    """A chained event as written: its file name in the log folder and its bytes."""

    name: str
    data: bytes


def prepare(warehouse: str, pending: list[PendingEvent], now: dt.datetime | None = None) -> list[EventFile]:
    """Chain and name events after the log's last one (in order), without writing them.

    published_cohort stages them in its run's commit, so a hold or publication and its event appear
    together or not at all; `record` writes one at once.
    """
    at = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    files = _files(warehouse)
    previous = fsx.sha256_url(files[-1]) if files else None
    out = []
    for number, item in enumerate(pending):
        when = at + dt.timedelta(microseconds=number)  # one run's events keep their order in the listing
        entry = AuditEvent(item.event, item.release_id, item.cohort, int(item.version),
                           when.isoformat(timespec="microseconds"), item.principal, item.key_fingerprint,
                           item.detail, previous)
        data = json.dumps(asdict(entry), sort_keys=True, ensure_ascii=False).encode() + b"\n"
        out.append(EventFile(f"{when.strftime('%Y%m%dT%H%M%S%fZ')}-{item.event}-{hashlib.sha256(data).hexdigest()[:12]}"
                             f".json", data))
        previous = hashlib.sha256(data).hexdigest()
    return out


def record(warehouse: str, event: str, release_id: str, cohort: str, version: int, *, principal: str | None = None,
           key_fingerprint: str | None = None, detail: str | None = None, now: dt.datetime | None = None) -> EventFile:
    """Append one event now (a new write-once file chained to the last one)."""
    (entry,) = prepare(warehouse, [PendingEvent(event, release_id, cohort, version, principal, key_fingerprint,
                                                detail)], now)
    url = f"{_folder(warehouse)}/{entry.name}"
    if fsx.exists(url):
        raise FileExistsError("an audit event is never overwritten")
    fsx.write_bytes(url, entry.data)
    return entry


def read_events(warehouse: str, release_id: str | None = None) -> AuditLog:
    """The log in order (optionally of one release), and whether its chain is whole."""
    events, broken, previous = [], False, None
    for url in _files(warehouse):
        data = fsx.read_bytes(url)
        entry = AuditEvent(**json.loads(data))
        broken = broken or entry.previous != previous
        previous = hashlib.sha256(data).hexdigest()
        if release_id is None or entry.release_id == release_id:
            events.append(entry)
    return AuditLog(tuple(events), broken)
