"""Versions that end, and the bytes no current version holds: withdrawal, expiry, the object store's collection.

A published version ends in one of two ways, each logged in the audit log:

- **withdrawn** (`withdraw`): by a governance decision (`imaging-versions withdraw COHORT VERSION --reason T`),
  or by published_cohort as soon as a newer version of its cohort is published while it holds patients who
  have opted out since (the newer version was built without them: the opt-out must take effect);
- **expired** (`expire`): `retention_days` (the cohort file) after a newer version of its cohort was published.
  The newest published version of a cohort never expires.

An ended version's folder keeps only `WITHDRAWN.json` (what ended, when, why, its release id and data digest):
its images, metadata and checksums go, and the folder name stays taken, so the version is never built again
(a new release needs a new version). Its images' bytes are then collected from the object store when no
current version (held or published, any cohort) lists them in its SHA256SUMS (`collect`); the audit log says how
many went (`reclaim`). Hard links share an inode, so removing an ended version's files never touches another
version's; on an object store each version holds its own copies.

The same commit protocol as every other write (imaging/driver/commit.py): an ending and its audit event appear
together or not at all. One writer at a time: run `imaging-versions` between publish runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from imaging import fs as fsx
from imaging.catalogue import AUDIT, COHORTS, HELD, IDENTIFIABLE, RELEASE_OBJECTS, ZONES
from imaging.driver.commit import CommitBuilder
from imaging.governance import audit
from imaging.governance.bundle import SUMS_FILE, parse_manifest
from imaging.steps.objects import INCOMING, INDEX, ObjectStore

ENDED = "WITHDRAWN.json"
WITHDRAW, EXPIRE, RECLAIM = audit.WITHDRAW, audit.EXPIRE, audit.RECLAIM


@dataclass(frozen=True)
class Version:
    """A published version as retention sees it."""

    cohort: str
    version: int
    root: str
    release_id: str | None  # None once ended
    ended: bool


@dataclass(frozen=True)
class Ending:
    """A version to end: which, how (withdraw or expire) and why (a sentence, no value)."""

    cohort: str
    version: int
    event: str
    reason: str


@dataclass(frozen=True)
class Reclaimed:
    """What a collection removed from the object store: objects and their bytes."""

    objects: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Ended:
    ending: Ending
    release_id: str
    images: int  # image files the version listed
    reclaimed: Reclaimed  # bytes that went with it (no current version holds them any more)


def published(warehouse: str, cohort: str | None = None) -> list[Version]:
    """Every published version (of one cohort, or all), ended ones included, by cohort and version."""
    from imaging.governance.approval import manifest_id

    fs, base = fsx.filesystem(f"{warehouse}/{COHORTS.path}")
    if not fs.exists(base):
        return []
    out = []
    for folder in fs.glob(f"{base}/{cohort or '*'}/v*"):
        name, release = folder.rstrip("/").rsplit("/", 2)[-2:]
        if not release[1:].isdigit():
            continue
        root = fsx.qualify(fs, folder)
        ended = fsx.exists(f"{root}/{ENDED}")
        out.append(Version(name, int(release[1:]), root, None if ended else manifest_id(root), ended))
    return sorted(out, key=lambda v: (v.cohort, v.version))


def current_roots(warehouse: str) -> list[str]:
    """Every release folder that holds images now: held releases and published versions not ended."""
    fs, base = fsx.filesystem(f"{warehouse}/{HELD.path}")
    held = [fsx.qualify(fs, p.rsplit("/", 1)[0]) for p in fs.glob(f"{base}/*/*/{SUMS_FILE}")] if fs.exists(base) else []
    return sorted(held) + [v.root for v in published(warehouse) if not v.ended]


def listed_images(root: str) -> set[str]:
    """The sha256 of every image a release folder's SHA256SUMS lists."""
    url = f"{root}/{SUMS_FILE}"
    if not fsx.exists(url):
        return set()
    return {e.sha256 for e in parse_manifest(fsx.read_bytes(url)) if e.path.startswith("images/")}


def collect(warehouse: str, candidates: Iterable[str] | None = None) -> Reclaimed:
    """Remove from the object store each object among `candidates` (sha256s; None: every object, and what dead
    writers left in `_incoming/`) that no current version lists. Reads every current version's SHA256SUMS, keeping
    only the candidates' lines."""
    store = ObjectStore(f"{warehouse}/{RELEASE_OBJECTS.path}")
    fs, base = fsx.filesystem(store.root)
    if not fs.exists(base):
        return Reclaimed()
    if candidates is None:
        found = [p for p in fs.find(base) if p.endswith(".dcm") and f"/{INCOMING}/" not in p
                 and f"/{INDEX}/" not in p]
        wanted = {p.rsplit("/", 1)[-1][:-4] for p in found}
        fsx.remove(f"{store.root}/{INCOMING}")
    else:
        wanted = set(candidates)
    if not wanted:
        return Reclaimed()
    for root in current_roots(warehouse):
        wanted -= listed_images(root)
        if not wanted:
            return Reclaimed()
    count = size = 0
    for sha in sorted(wanted):
        _, path = fsx.filesystem(store.url(sha))
        if fs.exists(path):
            size += int(fs.info(path).get("size") or 0)
            fs.rm(path)
            count += 1
    return Reclaimed(count, size)


def due(warehouse: str, cohorts: Sequence, now: dt.datetime, opted_out: Mapping[tuple[str, int], int]) -> list[Ending]:
    """The published versions of `cohorts` (CohortDefinitions) to end now: a version holding patients who opted
    out since (`opted_out`: (cohort, version) -> patients) once a newer version is published (withdraw); one
    superseded for `retention_days` (expire). The newest published version of a cohort is never due."""
    events = audit.read_events(warehouse).events
    published_at = {e.release_id: dt.datetime.fromisoformat(e.at) for e in events if e.event == audit.PUBLISH}
    out = []
    for cohort in cohorts:
        live = [v for v in published(warehouse, cohort.name) if not v.ended]
        for older, newer in zip(live, live[1:]):
            gone = opted_out.get((older.cohort, older.version), 0)
            if gone:
                out.append(Ending(older.cohort, older.version, WITHDRAW,
                                  f"superseded by v{newer.version}, built without the {gone} patients of it who "
                                  f"have opted out since"))
                continue
            since = published_at.get(newer.release_id or "")
            if cohort.retention_days is not None and since is not None and \
                    now - since >= dt.timedelta(days=cohort.retention_days):
                out.append(Ending(older.cohort, older.version, EXPIRE,
                                  f"superseded by v{newer.version} for {cohort.retention_days} days or more "
                                  f"(retention_days)"))
    return out


def end(warehouse: str, endings: Sequence[Ending], commit: CommitBuilder | None = None, tables: str | None = None,
        now: dt.datetime | None = None) -> list[Ended]:
    """End each version: its folder becomes `WITHDRAWN.json` alone and its audit event is written, in one
    commit (`commit`: a fresh one over the warehouse's zones, `Warehouse.begin`'s when the asset calls); then the
    object store's bytes that no current version holds any more are collected and logged."""
    if not endings:
        return []
    at = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    if commit is None:
        commit = CommitBuilder.start("retention", f"{tables or warehouse}/{IDENTIFIABLE}/_journal",
                                     [f"{warehouse}/{z}" for z in ZONES])
    pending, facts = [], []
    for ending in endings:
        version = next((v for v in published(warehouse, ending.cohort) if v.version == ending.version), None)
        if version is None or version.ended:
            raise ValueError(f"{ending.cohort} v{ending.version} is not a published version that holds images")
        images = listed_images(version.root)
        summary = _read_json(f"{version.root}/release.json")
        record = {"cohort": ending.cohort, "version": ending.version, "event": ending.event,
                  "reason": ending.reason, "at": at.isoformat(timespec="seconds"), "release_id": version.release_id,
                  "data_digest": summary.get("data_digest"), "images": len(images)}
        staged = f"{commit.staging(f'{warehouse}/{COHORTS.zone}')}/{COHORTS.name}/{ending.cohort}/v{ending.version}"
        fsx.write_bytes(f"{staged}/{ENDED}", json.dumps(record, indent=2, sort_keys=True).encode() + b"\n")
        commit.replace(f"{warehouse}/{COHORTS.zone}", f"{COHORTS.name}/{ending.cohort}/v{ending.version}")
        pending.append(audit.PendingEvent(ending.event, version.release_id, ending.cohort, ending.version,
                                          detail=f"{ending.reason}; {len(images)} images leave this version"))
        facts.append((ending, version.release_id, images))
    for event in audit.prepare(warehouse, pending, at):
        fsx.write_bytes(f"{commit.staging(f'{warehouse}/{AUDIT.zone}')}/{AUDIT.name}/{event.name}", event.data)
        commit.replace(f"{warehouse}/{AUDIT.zone}", f"{AUDIT.name}/{event.name}")
    commit.build().apply()
    out = []
    for ending, rid, images in facts:
        reclaimed = collect(warehouse, images)
        if reclaimed.objects:
            audit.record(warehouse, RECLAIM, rid, ending.cohort, ending.version,
                         detail=f"{reclaimed.objects} released images' bytes ({reclaimed.bytes} bytes) removed from "
                                f"the object store: no current version holds them any more")
        out.append(Ended(ending, rid, len(images), reclaimed))
    return out


def _read_json(url: str) -> dict:
    return json.loads(fsx.read_bytes(url)) if fsx.exists(url) else {}


# --- imaging-versions -----------------------------------------------------------------------------------------

COMMANDS = """commands:
  imaging-versions list                                 every published version: cohort, version, state, release id
  imaging-versions withdraw COHORT VERSION --reason T   end a published version now (its folder keeps WITHDRAWN.json)
  imaging-versions expire                               end every version its cohort's retention_days has run out for
  imaging-versions gc                                   remove every stored object no current version holds

Set IMAGING_WAREHOUSE (and IMAGING_TABLES when Spark's tables are apart). Run it between publish runs: the
warehouse has one writer at a time."""


def _warehouse() -> str:
    value = os.environ.get("IMAGING_WAREHOUSE", "").strip()
    if not value:
        raise SystemExit("imaging-versions: set IMAGING_WAREHOUSE")
    return value.rstrip("/") if "://" in value else os.path.abspath(os.path.expanduser(value))


def _tables() -> str | None:
    value = os.environ.get("IMAGING_TABLES", "").strip()
    return (value.rstrip("/") if "://" in value else os.path.abspath(os.path.expanduser(value))) if value else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imaging-versions", description=__doc__.splitlines()[0],
                                     epilog=COMMANDS, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    withdraw = sub.add_parser("withdraw", help="end a published version now")
    withdraw.add_argument("cohort")
    withdraw.add_argument("version", type=lambda v: int(v.lstrip("v")))
    withdraw.add_argument("--reason", required=True)
    sub.add_parser("expire", help="end the versions whose retention ran out")
    sub.add_parser("gc", help="remove every stored object no current version holds")
    sub.add_parser("list", help="list the published versions")
    args = parser.parse_args(argv)
    warehouse, tables = _warehouse(), _tables()
    try:
        if args.command == "list":
            for v in published(warehouse):
                print("\t".join([v.cohort, f"v{v.version}", "ended" if v.ended else "current", v.release_id or "-"]))
            return 0
        if args.command == "gc":
            done = collect(warehouse)
            print(f"removed {done.objects} stored objects ({done.bytes} bytes) that no current version holds")
            return 0
        if args.command == "withdraw":
            reason = " ".join(args.reason.split())
            if not reason or len(reason) > 500:
                raise ValueError("a withdrawal needs its reason (at most 500 characters)")
            endings = [Ending(args.cohort, args.version, WITHDRAW, f"withdrawn: {reason}")]
        else:
            from imaging.driver.platform_files import load_cohorts

            endings = due(warehouse, load_cohorts(), dt.datetime.now(dt.timezone.utc), {})
        for ended in end(warehouse, endings, tables=tables):
            e = ended.ending
            print(f"{e.event} {e.cohort} v{e.version} (release {ended.release_id}): {ended.images} images left it; "
                  f"{ended.reclaimed.objects} images' bytes ({ended.reclaimed.bytes} bytes) reclaimed")
        if not endings:
            print("nothing to end")
        return 0
    except (ValueError, OSError) as error:
        print(f"imaging-versions: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
