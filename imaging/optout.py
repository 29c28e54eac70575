"""The opt-out list: the patients a site says must not be released (national data opt-out, local objection).

Landing layout (the data contract): `optouts/<site>/<YYYY-MM-DD>.csv`, the date being the day the hub
received the list. A site sends either kind of file, told apart by its header:

- a **whole list** (a `patient_id` column, no `action` column): every patient opted out on that day. It
  replaces whatever the site's list held before, so a missed or broken earlier file heals at the next one,
  and a removal needs no row of its own. This is what a hub gets from NHS England's check (it sends its
  patients' NHS numbers and gets back those who may be used: the difference is the list).
- **changes** (`patient_id` and `action`, each row `add` or `remove`): applied in row order to the list
  before it. This is what a local objection register emits day by day.

Both, because hubs have both sources; a site may mix them (a monthly whole list, daily changes). A site's
effective list on a day is every readable file dated on or before it, folded in date order
(`OptOutLists.site_list`). An opt-out applies to the person, not to the site that sent it: the platform
matches (namespace, id) over every site whose ids share the namespace (`platform/issuers.yaml`), with ids
compared without spaces and ASCII case (`person`), the same in Python and in Spark (`SPARK_FOLD`).

What cannot be read is never silently dropped (each is a `Quarantined` row with its reason, accounted to
the site-day of the file's date, as clinical extracts are):
- a row whose `patient_id` is empty or a placeholder (`platform/quality.yaml`) identifies nobody:
  quarantined, not applied;
- a row whose action is neither `add` nor `remove` is quarantined **and applied as an opt-out** (fail
  closed: an unreadable row never lets a patient in);
- a file that cannot be read (not UTF-8, no `patient_id` column) or not named by a date is quarantined
  whole and not applied, and `published_cohort` refuses to release anything until it is fixed
  (`OptOutLists.refusal`): the list in force is then unknown.

A list's version is a keyed digest of its patients (`list_version`, HMAC-SHA256 under the pseudonym key):
a plain hash of a one-patient list would give that patient's NHS number away to anyone who tries them
all, and the version is shown in the UI and in released data cards.

Pure (fsspec through `imaging.fs`), no Spark or Dagster. Read on the driver: a list holds one short id
per opted-out patient.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import string
from dataclasses import dataclass
from typing import Iterable, Mapping

from imaging.records import Quarantined

OPTOUTS = "optouts"  # the landing folder: optouts/<site>/<YYYY-MM-DD>.csv
ADD, REMOVE = "add", "remove"
WHOLE, CHANGES = "whole list", "changes"

# Why an image or a list row is held back: fixed phrases, never a value.
OPTED_OUT = "patient opted out"
PLACEHOLDER_ROW = "opt-out row with an empty or placeholder patient_id"
UNKNOWN_ACTION = "opt-out row whose action is neither add nor remove (applied as an opt-out)"
NOT_DATED = "opt-out file not named <YYYY-MM-DD>.csv"
NOT_TEXT = "opt-out list is not UTF-8 text"
NO_ID_COLUMN = "opt-out list has no patient_id column"

# Ids compare without spaces and ASCII case: "943 476 5919" is "9434765919". ASCII only, so Python and
# Spark's `translate` fold exactly alike (a JVM and Python disagree on some non-ASCII case mappings).
_SPACES = " \t\n\r\f\v"
_FOLD = str.maketrans(string.ascii_lowercase, string.ascii_uppercase, _SPACES)
SPARK_FOLD = (string.ascii_lowercase + _SPACES, string.ascii_uppercase)  # F.translate(column, *SPARK_FOLD)


def person(patient_id: str | None) -> str:
    """A patient id as the opt-out match compares it."""
    return (patient_id or "").translate(_FOLD)


@dataclass(frozen=True)
class PersonKey:
    """A person as the opt-out applies to them: the id's namespace and the folded id."""

    namespace: str
    person: str


@dataclass(frozen=True)
class Entry:
    """One applied row of a list file: a folded id and what it does."""

    person: str
    action: str  # ADD | REMOVE (a whole list's rows are ADD)


@dataclass(frozen=True)
class ListFile:
    """One file under optouts/<site>/: its date, kind, the rows it applies and what it quarantines."""

    site: str
    date: str | None  # None: not named by a date
    url: str
    kind: str | None  # WHOLE | CHANGES; None when the file is quarantined whole
    entries: tuple[Entry, ...] = ()
    reasons: tuple[str, ...] = ()  # one per quarantined row, or the one reason of a file quarantined whole

    @property
    def applied(self) -> bool:
        return self.kind is not None and self.date is not None

    def accounted_to(self, first_date: str) -> str:
        """The site-day whose partition accounts for this file's quarantine rows: its date, or the first
        date partition for a file dated before it or not dated at all."""
        return max(self.date, first_date) if self.date else first_date

    def quarantined(self, first_date: str) -> list[Quarantined]:
        day = self.accounted_to(first_date)
        return [Quarantined(date=day, site=self.site, source_path=self.url, size_bytes=None, sha256=None, reason=r)
                for r in self.reasons]


def _file_date(name: str) -> str | None:
    if not name.endswith(".csv"):
        return None
    try:
        return dt.date.fromisoformat(name[:-4]).isoformat() if len(name) == 14 else None
    except ValueError:
        return None


def parse_list(site: str, url: str, data: bytes, placeholders: Iterable[str] = ()) -> ListFile:
    """One list file's rows. `placeholders` are compared trimmed and upper-cased, the empty id always among them."""
    date = _file_date(url.rsplit("/", 1)[-1])
    if date is None:
        return ListFile(site, None, url, None, reasons=(NOT_DATED,))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return ListFile(site, date, url, None, reasons=(NOT_TEXT,))
    reader = csv.DictReader(io.StringIO(text))
    header = [(h or "").strip().lower() for h in (reader.fieldnames or [])]
    if "patient_id" not in header:
        return ListFile(site, date, url, None, reasons=(NO_ID_COLUMN,))
    reader.fieldnames = header
    changes = "action" in header
    held = {p.strip().upper() for p in placeholders} | {""}
    entries, reasons = [], []
    for row in reader:
        raw = row.get("patient_id")
        key = person(raw if isinstance(raw, str) else "")
        if key in held or (raw or "").strip().upper() in held:
            reasons.append(PLACEHOLDER_ROW)
            continue
        action = (row.get("action") or "").strip().lower() if changes else ADD
        if action not in (ADD, REMOVE):
            reasons.append(UNKNOWN_ACTION)  # fail closed: an unreadable row never lets a patient in
            action = ADD
        entries.append(Entry(key, action))
    return ListFile(site, date, url, CHANGES if changes else WHOLE, tuple(entries), tuple(reasons))


@dataclass(frozen=True)
class SiteList:
    """A site's effective list on a day: its patients (folded ids) and the date of the newest file applied."""

    site: str
    received: str | None  # None: no readable file on or before that day
    patients: frozenset[str]
    files: int = 0  # files applied

    def version(self, key: str | bytes) -> str:
        return list_version(key, self.patients)


def list_version(key: str | bytes, patients: Iterable[str]) -> str:
    """The keyed digest of a list (its patients, in any order): equal lists, equal versions; without the key
    nothing about the patients can be recovered or tried."""
    from imaging.pseudonym import Pseudonymizer

    return Pseudonymizer(key).token("opt-out list", *sorted(set(patients)), length=32)


def site_token(key: str | bytes, site: str) -> str:
    """A site as a released data card names its list: a keyed token, never the site's name."""
    from imaging.pseudonym import Pseudonymizer

    return Pseudonymizer(key).token("opt-out site", site, length=16)


@dataclass(frozen=True)
class OptOutLists:
    """Every list file of the configured sites, as read; the effective lists on any day are folded from it."""

    files: tuple[ListFile, ...]
    sites: tuple[str, ...]

    def site_list(self, site: str, as_of: str | None = None) -> SiteList:
        """The site's list from every readable file dated on or before `as_of` (None: every file)."""
        applied = sorted((f for f in self.files if f.site == site and f.applied and (as_of is None or f.date <= as_of)),
                         key=lambda f: f.date)
        patients: set[str] = set()
        for f in applied:
            if f.kind == WHOLE:
                patients = set()
            for e in f.entries:
                (patients.add if e.action == ADD else patients.discard)(e.person)
        return SiteList(site, applied[-1].date if applied else None, frozenset(patients), len(applied))

    def lists(self, as_of: str | None = None) -> dict[str, SiteList]:
        """Each site's list on `as_of`, for the sites that had received one by then."""
        out = {s: self.site_list(s, as_of) for s in self.sites}
        return {s: v for s, v in out.items() if v.received is not None}

    @property
    def received(self) -> str | None:
        """The newest date of a readable file: the day of the lists in force now."""
        dates = [f.date for f in self.files if f.applied]
        return max(dates) if dates else None

    def keys(self, namespaces: Mapping[str, str], as_of: str | None = None) -> frozenset[PersonKey]:
        """The persons opted out on `as_of` (None: now), by any site's list."""
        return frozenset(PersonKey(namespaces[s], p) for s, v in self.lists(as_of).items() for p in v.patients)

    def ever_listed(self, namespaces: Mapping[str, str]) -> frozenset[PersonKey]:
        """Every person any readable row names: what a release built on any earlier day may have held back."""
        return frozenset(PersonKey(namespaces[f.site], e.person) for f in self.files if f.applied for e in f.entries)

    @property
    def unreadable(self) -> tuple[ListFile, ...]:
        """Files quarantined whole: the list in force cannot be known while they stand."""
        return tuple(f for f in self.files if not f.applied)

    def refusal(self) -> str | None:
        """Why nothing may be released now, or None."""
        bad = self.unreadable
        if not bad:
            return None
        names = ", ".join(f"{OPTOUTS}/{f.site}/{f.url.rsplit('/', 1)[-1]} ({f.reasons[0]})" for f in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return (f"{len(bad)} opt-out list files cannot be read, so the list in force is unknown: {names}{more}. "
                f"Nothing is released until each is fixed or removed from the landing zone")

    def accounted(self, first_date: str) -> dict[tuple[str, str], list[ListFile]]:
        """The files each (date, site) partition accounts for (their quarantine rows are written there)."""
        out: dict[tuple[str, str], list[ListFile]] = {}
        for f in self.files:
            out.setdefault((f.accounted_to(first_date), f.site), []).append(f)
        return out

    def quarantined(self, keys: Iterable[tuple[str, str]], first_date: str) -> list[Quarantined]:
        """The quarantine rows of the files the given (date, site) partitions account for."""
        accounted = self.accounted(first_date)
        return [q for key in sorted(set(keys)) for f in accounted.get(key, []) for q in f.quarantined(first_date)]


def read_lists(root: str, sites: Iterable[str], placeholders: Iterable[str] = ()) -> OptOutLists:
    """Every file under `<root>/optouts/<site>/` (any name, any depth) for each configured site.

    A file that cannot be read at all (a store error) is quarantined whole like a malformed one, naming
    the exception's type only."""
    from imaging import fs as fsx

    sites = tuple(sites)
    files = []
    for site in sites:
        folder = f"{root.rstrip('/')}/{OPTOUTS}/{site}"
        for url, _ in fsx.list_files(folder):
            if "/" in url[len(folder) + 1:]:  # in a sub-folder: not optouts/<site>/<date>.csv
                files.append(ListFile(site, None, url, None, reasons=(NOT_DATED,)))
                continue
            try:
                data = fsx.read_bytes(url)
            except Exception as error:  # noqa: BLE001 - an unreadable file is quarantined, not fatal
                files.append(ListFile(site, _file_date(url.rsplit("/", 1)[-1]), url, None,
                                      reasons=(f"unreadable opt-out list ({type(error).__name__})",)))
                continue
            files.append(parse_list(site, url, data, placeholders))
    return OptOutLists(tuple(files), sites)
