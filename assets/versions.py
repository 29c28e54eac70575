"""Per-site-day data versions and provenance of the image assets (shared helper module, not an asset).

A run over many site-days (a single-run backfill) is one Dagster step, and Dagster 1.13 gives every
partition of such a step the same data version and records, as a partitioned input's version, a hash of
its partitions' latest *materialization* versions: for the observed `landing_zone` that is the hash of
nothing (`e3b0c442...`). So the runner writes each partition's materialization itself, with Dagster's own
provenance tags filled per partition:

* the version of each input recorded is that site-day's latest observed or materialized version, with a
  pointer to the event that carried it (what Dagster's staleness compares against later events of the
  same partition);
* the partition's data version is Dagster's hash of the asset's code version and those input versions
  (`compute_logical_data_version`), so the same inputs and code give the same version, and a changed
  site-day changes exactly its own partitions' versions downstream.

The UI then marks exactly the partitions whose inputs moved as unsynced (tests/test_landing_versions.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import islice
from typing import Mapping, Sequence

from dagster import AssetKey, AssetMaterialization, AssetObservation, DataVersion, MetadataValue, MultiPartitionKey
# Dagster's provenance tags and its version hash: 1.13 has no public names for them (see STACK-NOTES).
from dagster._core.definitions.data_version import (CODE_VERSION_TAG, DATA_VERSION_TAG, DEFAULT_DATA_VERSION,
                                                    NULL_EVENT_POINTER, compute_logical_data_version,
                                                    extract_data_version_from_entry, get_input_data_version_tag,
                                                    get_input_event_pointer_tag)
from dagster._core.definitions.partitions.utils import get_tags_from_multi_partition_key
# Marks an output whose asset events the step logs itself: Dagster then adds none of its own (1.13 uses it
# for source-asset observations; it is the one switch that stops a second, run-wide materialization).
from dagster._core.definitions.source_asset import SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION

from imaging.driver.landing import SiteDayLanding, scan_site_days
from imaging.optout import OptOutLists

EVENTS_LOGGED_BY_STEP = {SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION: True}
LANDING = "landing_zone"  # the observed source
OPTOUT = "optout_list"  # the observed opt-out lists, one partition per site, each read whole by its readers
CLINICAL_SOURCE = "clinical_source"  # the observed clinical database (IMAGING_CLINICAL_SOURCE), unpartitioned


@dataclass(frozen=True)
class InputVersion:
    """One input of one partition: its data version and the event-log id of the event that set it."""

    asset: str
    version: str
    pointer: int | None  # None: the input has no recorded version for this partition


@dataclass(frozen=True)
class PartitionVersion:
    """A partition's data version and the input versions it was derived from."""

    partition: str
    code_version: str
    inputs: tuple[InputVersion, ...]

    @property
    def data_version(self) -> str:
        return compute_logical_data_version(
            self.code_version, {AssetKey(i.asset): DataVersion(i.version) for i in self.inputs}).value

    def tags(self) -> dict[str, str]:
        """Dagster's provenance tags of this partition's materialization (as its own events would carry)."""
        tags = {CODE_VERSION_TAG: self.code_version, DATA_VERSION_TAG: self.data_version}
        for i in self.inputs:
            tags[get_input_data_version_tag(AssetKey(i.asset))] = i.version
            tags[get_input_event_pointer_tag(AssetKey(i.asset))] = str(i.pointer) if i.pointer else NULL_EVENT_POINTER
        date, site = self.partition.split("|")
        tags.update(get_tags_from_multi_partition_key(MultiPartitionKey({"date": date, "site": site})))
        return tags


def input_version(instance, asset: str, partition: str, *, observed: bool) -> InputVersion:
    """The latest version of `asset`'s `partition`: observed (a source) or materialized. A partition
    never observed has Dagster's default version, as Dagster itself records it."""
    record = instance.get_latest_data_version_record(AssetKey(asset), observed, partition)
    if record is None:
        return InputVersion(asset, DEFAULT_DATA_VERSION.value, None)
    version = extract_data_version_from_entry(record.event_log_entry) or DEFAULT_DATA_VERSION
    return InputVersion(asset, version.value, record.storage_id)


BATCH = 500  # partitions read in one query by `input_versions`


def input_versions(instance, asset: str, partitions: Sequence[str | None], *, observed: bool
                   ) -> dict[str | None, InputVersion]:
    """`input_version` of each of `partitions`, the same records read in two queries a `BATCH` of partitions (each
    one's latest event id, then those events), not one a partition: a run over a year of site-days reads a version
    of each of its inputs per site-day, and each query is a connection (Dagster's storages open one per query)."""
    from dagster import DagsterEventType, EventRecordsFilter

    kind = DagsterEventType.ASSET_OBSERVATION if observed else DagsterEventType.ASSET_MATERIALIZATION
    key, storage = AssetKey(asset), instance.event_log_storage
    found = {p: input_version(instance, asset, p, observed=observed) for p in partitions if p is None}
    named = iter(sorted({p for p in partitions if p is not None}))
    while chunk := list(islice(named, BATCH)):
        latest = storage.get_latest_storage_id_by_partition(key, kind, set(chunk))
        records = {r.storage_id: r for r in storage.get_event_records(
            EventRecordsFilter(kind, asset_key=key, storage_ids=sorted(latest.values())), limit=len(latest))} \
            if latest else {}
        for partition in chunk:
            record = records.get(latest.get(partition))
            version = (extract_data_version_from_entry(record.event_log_entry) if record else None) \
                or DEFAULT_DATA_VERSION
            found[partition] = InputVersion(asset, version.value, record.storage_id if record else None)
    return found


def input_version_over(instance, asset: str, partitions: Sequence[str], *, observed: bool) -> InputVersion:
    """One input that is every partition of `asset` (every site's opt-out list applies to every site-day): a hash
    of each partition's latest version, pointing at the newest of their events. Dagster's staleness then looks for
    a later event of any of those partitions with another version, which is exactly a list that changed."""
    found = dict(sorted(input_versions(instance, asset, partitions, observed=observed).items()))
    pointers = [v.pointer for v in found.values() if v.pointer]
    if not pointers:
        return InputVersion(asset, DEFAULT_DATA_VERSION.value, None)
    digest = hashlib.blake2b("".join(f"{p}={v.version}\n" for p, v in found.items()).encode(), digest_size=16)
    return InputVersion(asset, digest.hexdigest(), max(pointers))


def partition_versions(instance, partitions: Sequence[str], code_version: str, deps: Sequence[str],
                       observed: frozenset[str], whole: Mapping[str, Sequence[str]] | None = None
                       ) -> dict[str, PartitionVersion]:
    """Each partition's version from its own inputs' versions (`observed`: the deps that are sources; `whole`: the
    deps read whole, with their partitions)."""
    whole = whole or {}
    shared = {d: input_version_over(instance, d, whole[d], observed=d in observed) for d in deps if d in whole}
    own = {d: input_versions(instance, d, partitions, observed=d in observed) for d in deps if d not in whole}
    return {p: PartitionVersion(p, code_version, tuple(shared[d] if d in whole else own[d][p] for d in deps))
            for p in partitions}


def materialization(asset: str, version: PartitionVersion, metadata: dict) -> AssetMaterialization:
    """The partition's materialization event: its own metadata and its own provenance."""
    return AssetMaterialization(asset_key=asset, partition=version.partition, metadata=metadata, tags=version.tags())


def observation(day: SiteDayLanding) -> AssetObservation:
    """A landed site-day's observation of `landing_zone`: its data version, and its files, bytes and newest
    file's time (counts and a time, never a path or a name). The same from the asset, the sensor and a run."""
    metadata = {"files": day.files, "bytes": day.bytes}
    if day.newest_mtime > 0:
        metadata["newest_file"] = MetadataValue.timestamp(day.newest_mtime)
    return AssetObservation(asset_key=AssetKey(LANDING), partition=day.key, tags={DATA_VERSION_TAG: day.version},
                            metadata=metadata)


def landing_scan(root: str, keys) -> dict[str, SiteDayLanding]:
    """The run's landed site-days (`date|site` -> listing), listing only those site-days."""
    return scan_site_days(root, [(k.date, k.site) for k in keys])


def landing_read(instance, current: dict[str, SiteDayLanding]) -> list[AssetObservation]:
    """Observations of the run's landed site-days (`landing_scan`) whose listing is not the one last recorded
    (or none is): a run records the landing it reads, so its partitions' lineage names it even when nobody
    observed the landing zone before (a run from the UI or the CLI, without the sensor)."""
    recorded = input_versions(instance, LANDING, list(current), observed=True)
    return [observation(day) for key, day in current.items() if recorded[key].version != day.version]


def optout_observations(lists: OptOutLists, key: str) -> list[AssetObservation]:
    """One observation of `optout_list` per configured site: the keyed digest of its effective list as data version
    (a site without a list has the empty list's, so removing every file is a change too), and counts: patients on
    the list, files read, the date of the newest (the day it was received), rows and files quarantined. Never an id."""
    out = []
    for site in lists.sites:
        current = lists.site_list(site)
        files = [f for f in lists.files if f.site == site]
        metadata = {"patients": len(current.patients), "files": len(files), "files_applied": current.files,
                    "files_quarantined": sum(1 for f in files if not f.applied),
                    "rows_quarantined": sum(len(f.reasons) for f in files if f.applied),
                    "received": current.received or "no list received"}
        out.append(AssetObservation(asset_key=AssetKey(OPTOUT), partition=site,
                                    tags={DATA_VERSION_TAG: current.version(key)}, metadata=metadata))
    return out


def optout_read(instance, lists: OptOutLists, key: str) -> list[AssetObservation]:
    """Observations of the sites whose list is not the one last recorded: a run records the lists it applies."""
    observations = optout_observations(lists, key)
    recorded = input_versions(instance, OPTOUT, [o.partition for o in observations], observed=True)
    return [o for o in observations if recorded[o.partition].version != o.tags[DATA_VERSION_TAG]]
