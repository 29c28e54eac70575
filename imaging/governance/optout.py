"""What releases do about the opt-out list: the pure rules `published_cohort` and `imaging-review` follow.

The lists themselves (files, effective lists, keyed versions) are `imaging.optout`'s. Here:

- **At build**: the selection loses every patient on the list in force (the asset's Spark anti-join on
  pseudonyms), and the data card states the lists applied (keyed site token, keyed digest, the day its newest
  file was received: that site's files up to that day were in force), the newest of those days (`as_of`) and
  counts held back (`imaging.governance.datacard.OptOutSection`). The identifiable zone maps each token back to
  its site (`record_site_tokens`), for a review that holds no key.
- **After release**: a published release holding patients who opted out since is flagged
  (`Flag.message`: "N patients in this release have since opted out", never who), once per release and
  count in the audit log (`log_flags`), and the next version is built without them (`version_to_build`):
  a published version whose patients' opt-outs changed since it was built (some left, or some held back
  from it may come back) is followed by the next version number, built, held and approved as usual. A
  published version whose content differs for any other reason is still a conflict (releases are immutable).
- **Review**: `recheck` walks the released images back to their patients through the identifiable zone and
  checks them against the lists in force when the release was built (each site's list files up to the day the
  card says its list was received) and against the lists now. A released patient on the list in force at the
  build is a problem; one who opted out since is a flag on a published release and a problem on a held one
  (it can no longer be published: the next build leaves them out).

Pure: pyarrow and fsspec through `imaging.fs`; no Spark, no Dagster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from imaging import fs as fsx
from imaging.catalogue import COHORTS
from imaging.optout import OptOutLists, PersonKey, person

SINCE = "patients in this release have since opted out"


@dataclass(frozen=True)
class PublishedRelease:
    """A published release as the opt-out rules see it: its patients' pseudonyms and the lists it applied."""

    cohort: str
    version: int
    root: str
    release_id: str | None
    patients: frozenset[str]
    as_of: str | None  # the card's `optouts.as_of`: the newest list received before its build (None: no list then)
    recorded: bool  # whether its card has an opt-out section (a release made before opt-outs were applied has none)
    follows: int | None = None  # the version it follows because opt-outs changed (its card's `optouts.follows`)
    lists: Mapping[str, str] | None = None  # site token -> the day its newest list file applied was received


def _card(root: str) -> dict:
    url = f"{root}/datacard.json"
    return json.loads(fsx.read_bytes(url)) if fsx.exists(url) else {}


def release_patients(root: str) -> frozenset[str]:
    """The patient pseudonyms of a release (one column of its metadata.parquet)."""
    import pyarrow.parquet as pq

    url = f"{root}/metadata.parquet"
    if not fsx.exists(url):
        return frozenset()
    fs, path = fsx.filesystem(url)
    table = pq.read_table(path, filesystem=fs, columns=["patient_pseudonym"])
    return frozenset(p for p in table.column("patient_pseudonym").to_pylist() if p)


def published_releases(warehouse: str, cohort: str | None = None) -> list[PublishedRelease]:
    """Every published release (of one cohort, or all), by cohort and version."""
    from imaging.governance.approval import manifest_id

    fs, base = fsx.filesystem(f"{warehouse}/{COHORTS.path}")
    if not fs.exists(base):
        return []
    out = []
    for folder in sorted(fs.glob(f"{base}/{cohort or '*'}/v*")):
        name, release = folder.rstrip("/").rsplit("/", 2)[-2:]
        if not release[1:].isdigit():
            continue
        root = fsx.qualify(fs, folder)
        card = _card(root)
        section = card.get("optouts")
        follows = (section or {}).get("follows") or {}
        lists = {x["list"]: x["received"] for x in (section or {}).get("lists") or []}
        out.append(PublishedRelease(name, int(release[1:]), root, manifest_id(root), release_patients(root),
                                    (section or {}).get("as_of"), section is not None, follows.get("version"), lists))
    return sorted(out, key=lambda r: (r.cohort, r.version))


@dataclass(frozen=True)
class Flag:
    """A published release holding patients who have since opted out: a count, never who."""

    cohort: str
    version: int
    release_id: str | None
    patients: int

    @property
    def release(self) -> str:
        return f"{self.cohort}/v{self.version}"

    @property
    def message(self) -> str:
        return f"{self.patients} {SINCE}"


def flags(releases: Iterable[PublishedRelease], now: frozenset[str]) -> list[Flag]:
    """The published releases holding patients on the list now (`now`: their pseudonyms)."""
    out = []
    for r in releases:
        gone = len(r.patients & now)
        if gone:
            out.append(Flag(r.cohort, r.version, r.release_id, gone))
    return out


def log_flags(warehouse: str, found: Iterable[Flag], detail: str = "") -> list[Flag]:
    """Append each flag to the audit log once per release and count (a run that finds the same count again, under
    whatever lists, writes nothing); returns the flags newly logged."""
    from imaging.governance import audit

    logged = []
    for flag in found:
        if flag.release_id is None:
            continue
        said = [e.detail or "" for e in audit.read_events(warehouse, flag.release_id).events
                if e.event == audit.OPTED_OUT]
        if any(d == flag.message or d.startswith(flag.message + " (") for d in said):
            continue
        text = flag.message + (f" ({detail})" if detail else "")
        audit.record(warehouse, audit.OPTED_OUT, flag.release_id, flag.cohort, flag.version, detail=text)
        logged.append(flag)
    return logged


@dataclass(frozen=True)
class Successor:
    """Which version of a cohort to build now, and the published one it follows because opt-outs changed."""

    version: int
    follows: PublishedRelease | None = None
    left: int = 0  # patients of `follows` who have since opted out
    returned: int = 0  # patients held back from `follows` whose opt-out was removed, selected again now


def version_to_build(defined: int, published: Mapping[int, PublishedRelease], now: frozenset[str],
                     listed_at: Callable[[PublishedRelease], frozenset[str]],
                     selectable: Callable[[frozenset[str]], int]) -> Successor:
    """The version to build for a cohort defined at `defined`.

    From the defined version up, along the versions that already follow one another because of opt-outs (the
    newest of them is the one that stands), a published version whose patients' opt-outs changed since its
    build is followed by the next: some of its patients are on the list now (`now`, pseudonyms), or patients
    held back from it (on the lists in force at its build, `listed_at(release)`) are off the list now and selected again
    (`selectable` counts them in the current selection). The first version that is not published, or is
    published and unaffected, is the one to build (and `decide` then says unchanged, conflict, or held)."""
    version, follows, left, returned = defined, None, 0, 0
    while version in published:
        release = published[version]
        after = published.get(version + 1)
        if after is not None and after.follows == version:  # already followed: the newer version stands
            version, follows, left, returned = version + 1, release, 0, 0
            continue
        gone = len(release.patients & now)
        back = selectable(listed_at(release) - now - release.patients) if release.as_of else 0
        if not gone and not back:
            break
        version, follows, left, returned = version + 1, release, gone, back
    return Successor(version, follows, left, returned)


# --- The review's re-check, from the identifiable zone ----------------------------------------------------

@dataclass(frozen=True)
class Recheck:
    """Released patients against the lists in force at the build and now: counts only."""

    recorded: bool  # the card has an opt-out section
    as_of: str | None  # the lists in force at the build: files dated on or before it
    lists_applied: int  # lists the card names
    images: int  # released images whose patient was found
    untraced: int  # released images whose patient could not be found in the identifiable zone
    patients: int
    on_list_at_build_images: int
    on_list_at_build_patients: int
    since_patients: int  # released patients on the list now but not at the build
    lists_changed: int  # sites whose list now differs from the one in force at the build
    received_now: str | None  # newest list received now
    unreadable: int  # list files that cannot be read now
    unmapped: int = 0  # lists the card names whose site token the identifiable zone does not map


def in_force_at_build(card: Mapping, lists: OptOutLists, sites_of: Mapping[str, str]) -> dict[str, str | None]:
    """Each list site's last day in force at the release's build: the day its newest file applied was received
    (the card's list of that site, found by its token), or None when the site had no list then. A list the card
    names whose token maps to no site leaves every site without a mapped list at the card's newest date (the
    stricter reading: a later file of that day counts as in force)."""
    section = card.get("optouts") or {}
    received = {sites_of[x["list"]]: x["received"] for x in section.get("lists") or [] if x["list"] in sites_of}
    unmapped = any(x["list"] not in sites_of for x in section.get("lists") or [])
    return {s: received.get(s, section.get("as_of") if unmapped else None) for s in lists.sites}


def recheck(card: Mapping, released: Iterable[PersonKey | None], lists: OptOutLists,
            namespaces: Mapping[str, str], sites_of: Mapping[str, str]) -> Recheck:
    """Each released image's patient (`released`: one person key per image, None when it could not be found)
    against the lists in force at the build (each site's files up to the day the card says its list was
    received, as the landing's files now say; `sites_of` maps the card's site tokens) and now."""
    section = card.get("optouts")
    until = in_force_at_build(card, lists, sites_of)
    then = {s: lists.site_list(s, d) for s, d in until.items() if d is not None}
    at_build = frozenset(PersonKey(namespaces[s], p) for s, v in then.items() for p in v.patients)
    now = lists.keys(namespaces)
    people = list(released)
    found = [p for p in people if p is not None]
    on_list = [p for p in found if p in at_build]
    distinct = set(found)
    current = lists.lists()
    changed = sum(1 for s in set(then) | set(current)
                  if (then[s].patients if s in then else frozenset()) != (current[s].patients if s in current
                                                                          else frozenset()))
    return Recheck(section is not None, (section or {}).get("as_of"), len((section or {}).get("lists") or []),
                   len(found), len(people) - len(found), len(distinct), len(on_list), len(set(on_list)),
                   len((distinct & now) - at_build), changed, lists.received, len(lists.unreadable),
                   sum(1 for x in (section or {}).get("lists") or [] if x["list"] not in sites_of))


def record_site_tokens(warehouse: str, tokens: Mapping[str, str]) -> None:
    """Write each site's list token once (identifiable zone), for reviews to map a card's lists to sites."""
    from imaging.catalogue import OPTOUT_SITES

    for site, token in tokens.items():
        url = fsx.under(warehouse, f"{OPTOUT_SITES.path}/{token}")
        if not fsx.exists(url):
            fsx.write_bytes(url, site.encode())


def sites_of_tokens(warehouse: str) -> dict[str, str]:
    """Token -> site, as published_cohort recorded them."""
    from imaging.catalogue import OPTOUT_SITES

    out = {}
    for url, _ in fsx.list_files(f"{warehouse}/{OPTOUT_SITES.path}"):
        out[url.rsplit("/", 1)[-1]] = fsx.read_bytes(url).decode()
    return out


def released_persons(tables: str, records: Iterable, namespaces: Mapping[str, str]) -> list[PersonKey | None]:
    """Each traced release image's patient, as the opt-out compares persons: the ledger record's landing file
    looked up in linked_patient_metadata (identifiable zone); None for an image without a record or a row."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from imaging.catalogue import LINKED

    records = list(records)
    wanted = {(r.date, r.site) for r in records if r is not None}
    ids: dict[tuple[str, str, str], str | None] = {}
    url = f"{tables}/{LINKED.path}"
    if wanted and fsx.exists(url):
        filesystem, path = fsx.filesystem(url)
        dataset = ds.dataset(path, format="parquet", partitioning="hive", filesystem=filesystem)
        dates = sorted({d for d, _ in wanted})
        if not dataset.files:  # only emptied partition folders
            dates = []
        table = dataset.to_table(columns=["date", "site", "source_path", "patient_id"],
                                 filter=pc.field("date").isin(dates)) if dates else None
        for row in table.to_pylist() if table is not None else []:
            ids[(str(row["date"]), str(row["site"]), row["source_path"])] = row["patient_id"]
    out: list[PersonKey | None] = []
    for r in records:
        pid = None if r is None else ids.get((r.date, r.site, r.source_path))
        out.append(None if pid is None or r.site not in namespaces else PersonKey(namespaces[r.site], person(pid)))
    return out
