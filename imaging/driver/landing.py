"""What has landed, per site-day, and which site-days need a run: the landing zone's data versions.

Pure (fsspec only, no Spark or Dagster): `assets/landing.py` reports these versions as the
observable source asset `landing_zone`; `assets/sensors.py` asks `plan_requests` which site-days
to run.

A site-day's version is a content hash of its listing: every file under
`images/<site>/<date>/` (any depth) and `clinical/<site>/<date>.csv`, each as relative path, size and
modification time (or the object store's generation/etag when it has one). A new, removed,
replaced or rewritten file changes it; listing again without a change does not. Site-days with
no files have no version and are never requested.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from imaging import fs as fsx


@dataclass(frozen=True)
class LandedFile:
    """One file of a site-day, relative to the landing root."""

    path: str
    size: int
    stamp: str  # modification time in ns, or the store's generation/etag


@dataclass(frozen=True)
class SiteDayLanding:
    """A site-day that has files: their count, total size, newest time and the listing's hash."""

    date: str
    site: str
    files: int
    bytes: int
    newest_mtime: float  # seconds since the epoch; 0 when the store gives none
    version: str

    @property
    def key(self) -> str:
        """The multi-partition key, dimensions in Dagster's order: `date|site`."""
        return f"{self.date}|{self.site}"


@dataclass(frozen=True)
class LandingScan:
    """Every landed site-day that is a partition, and how many folders or files were not."""

    site_days: dict[str, SiteDayLanding]
    ignored: int  # files outside any partition: unknown site, malformed or out-of-range date


@dataclass(frozen=True)
class RequestPlan:
    """The site-days to run now, and the cursor to keep (site-day key -> version requested)."""

    requests: list[SiteDayLanding]
    cursor: dict[str, str]
    adopted: list[str] = field(default_factory=list)  # already materialized after their newest file


def listing_version(files: Iterable[LandedFile]) -> str:
    """Content hash of a listing, independent of listing order."""
    digest = hashlib.sha256()
    for item in sorted(files, key=lambda f: f.path):
        digest.update(f"{item.path}\t{item.size}\t{item.stamp}\n".encode())
    return digest.hexdigest()[:32]


def _seconds(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


@dataclass(frozen=True)
class FileStamp:
    """What a listing says of a file's version: a change marker and its modification time (epoch seconds)."""

    marker: str
    mtime: float


def _stamp(info: Mapping) -> FileStamp:
    """A change marker and a modification time from an fsspec `info` record, whatever the store."""
    mtime = _seconds(info.get("mtime") or info.get("updated") or info.get("LastModified")
                     or info.get("last_modified") or info.get("created"))
    for key in ("generation", "md5Hash", "ETag", "etag", "crc32c"):
        if info.get(key):
            return FileStamp(marker=f"{key}={info[key]}", mtime=mtime)
    return FileStamp(marker=str(int(mtime * 1_000_000_000)), mtime=mtime)


def _is_date(text: str) -> bool:
    try:
        return dt.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


@dataclass(frozen=True)
class DateRange:
    """The first and last date partitions (ISO dates, both included)."""

    first: str
    last: str


def scan_landing(root: str, sites: Iterable[str], first_date: str, last_date: str) -> LandingScan:
    """List the landing zone once and group it by site-day (partitions from first to last date)."""
    sites = set(sites)
    grouped: dict[tuple[str, str], list[tuple[LandedFile, float]]] = {}
    ignored = 0
    fs, base = fsx.filesystem(root)
    base = base.rstrip("/")
    for area in ("images", "clinical"):
        top = f"{base}/{area}"
        if not fs.exists(top):
            continue
        for path, info in fs.find(top, detail=True).items():
            if info.get("type") != "file":
                continue
            relative = path[len(base) + 1:] if path.startswith(base + "/") else path
            parts = relative.split("/")
            if area == "images" and len(parts) >= 4:
                site, date = parts[1], parts[2]
            elif area == "clinical" and len(parts) == 3 and parts[2].endswith(".csv"):
                site, date = parts[1], parts[2][:-4]
            else:
                ignored += 1
                continue
            if site not in sites or not _is_date(date) or not first_date <= date <= last_date:
                ignored += 1
                continue
            stamp = _stamp(info)
            grouped.setdefault((date, site), []).append(
                (LandedFile(relative, int(info.get("size") or 0), stamp.marker), stamp.mtime))
    site_days = {}
    for (date, site), entries in grouped.items():
        landing = _site_day(date, site, entries)
        site_days[landing.key] = landing
    return LandingScan(dict(sorted(site_days.items())), ignored)


def _site_day(date: str, site: str, entries: list[tuple[LandedFile, float]]) -> SiteDayLanding:
    files = [f for f, _ in entries]
    return SiteDayLanding(date, site, len(files), sum(f.size for f in files), max(m for _, m in entries),
                          listing_version(files))


def scan_site_days(root: str, keys: Iterable[tuple[str, str]]) -> dict[str, SiteDayLanding]:
    """The listing of a few site-days (`(date, site)` pairs), each read from its own folder and extract:
    the same versions `scan_landing` gives them, without listing the whole landing zone. Site-days with
    no files are absent."""
    fs, base = fsx.filesystem(root)
    base = base.rstrip("/")
    found = {}
    for date, site in keys:
        entries = []
        paths = {}
        folder = f"{base}/images/{site}/{date}"
        if fs.exists(folder):
            paths.update(fs.find(folder, detail=True))
        extract = f"{base}/clinical/{site}/{date}.csv"
        if fs.exists(extract):
            paths[extract] = fs.info(extract)
        for path, info in sorted(paths.items()):
            if info.get("type") != "file":
                continue
            relative = path[len(base) + 1:] if path.startswith(base + "/") else path
            if relative.startswith("images/") and len(relative.split("/")) < 4:
                continue
            stamp = _stamp(info)
            entries.append((LandedFile(relative, int(info.get("size") or 0), stamp.marker), stamp.mtime))
        if entries:
            landing = _site_day(date, site, entries)
            found[landing.key] = landing
    return found


def plan_requests(current: Mapping[str, SiteDayLanding], cursor: Mapping[str, str],
                  materialized_at: Mapping[str, float]) -> RequestPlan:
    """Which landed site-days are new or changed since they were last run.

    `cursor` holds the version last requested per site-day. A site-day not in it (the first tick,
    or a landing the sensor never saw) counts as done if `materialized_at` (the time its assets
    were last materialized, from the instance) is after its newest file; otherwise it is requested.
    A site-day whose files all vanished leaves the cursor and is not requested.
    """
    requests, adopted, kept = [], [], {}
    for key, landing in sorted(current.items()):
        kept[key] = landing.version
        previous = cursor.get(key)
        if previous == landing.version:
            continue
        if previous is None and key in materialized_at and landing.newest_mtime <= materialized_at[key]:
            adopted.append(key)
            continue
        requests.append(landing)
    return RequestPlan(requests, kept, adopted)


# --- The sensor's cursor, bounded ------------------------------------------------------------------------

CURSOR_DAYS = 62  # dates (back from the newest landed date) whose site-days the cursor keeps one by one


@dataclass(frozen=True)
class SensorCursor:
    """What the landing sensor has handled, in a size that does not grow with history.

    Site-days dated from `since` on are kept one by one (version last requested); the older ones, which rarely
    change, only as one digest of their versions. While that digest holds, every older site-day counts as
    handled at its current version; when any older site-day changes, the digest no longer matches and each of
    them is judged as on a first tick: done if its assets were materialized after its newest file, else
    requested (a run key never runs twice). So the cursor holds at most `CURSOR_DAYS` dates x sites entries.
    """

    recent: dict[str, str]
    since: str | None = None   # first date kept one by one; None: every site-day is (a cursor from before)
    older: str | None = None   # digest of the site-days dated before `since`, as last handled

    def to_json(self) -> str:
        return json.dumps({"recent": self.recent, "since": self.since, "older": self.older}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "SensorCursor":
        """A stored cursor; an empty one, or the earlier format (a JSON object of every site-day's version)."""
        if not text:
            return cls({})
        stored = json.loads(text)
        if "recent" not in stored:
            return cls(dict(stored))
        return cls(dict(stored["recent"]), stored.get("since"), stored.get("older"))

    def known(self, current: Mapping[str, SiteDayLanding]) -> dict[str, str]:
        """The versions handled, as `plan_requests` reads its cursor: the recent site-days', and the older
        ones' current versions while their digest is unchanged (else none: they are judged afresh)."""
        known = dict(self.recent)
        if self.since is not None and self.older == older_digest(current, self.since):
            known.update({k: d.version for k, d in current.items() if d.date < self.since})
        return known


def older_digest(current: Mapping[str, SiteDayLanding], since: str) -> str:
    """One hash of the versions of every site-day dated before `since`."""
    digest = hashlib.sha256()
    for key in sorted(k for k, d in current.items() if d.date < since):
        digest.update(f"{key}={current[key].version}\n".encode())
    return digest.hexdigest()


def bounded_cursor(handled: Mapping[str, str], current: Mapping[str, SiteDayLanding],
                   days: int = CURSOR_DAYS) -> SensorCursor:
    """The cursor to keep after a tick that handled `handled` (a plan's cursor: every current site-day)."""
    if not current:
        return SensorCursor(dict(handled))
    newest = max(dt.date.fromisoformat(d.date) for d in current.values())
    since = (newest - dt.timedelta(days=days - 1)).isoformat()
    return SensorCursor({k: v for k, v in handled.items() if current[k].date >= since} if handled else {},
                        since, older_digest(current, since))
