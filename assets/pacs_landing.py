"""pacs_landing: a PACS site's images of a site-day, retrieved into the platform's own landing root.

For each site-day of a PACS site (platform/pacs.yaml, IMAGING_PACS_<SITE>_URL) the driver lists the studies the
PACS dates that day and their instances (QIDO-RS or C-FIND: UIDs and a change marker per instance,
imaging/pacs/listing.py); the listing is joined to what the last run landed, spread over the executors (at most
`max_connections` tasks per server) and each instance is retrieved as a Part 10 file (WADO-RS of its stored
bytes, or C-GET / C-MOVE: imaging/pacs/retrieval.py), or, when its listing marker is unchanged and the landed
copy still has its recorded sha256, kept without a request.

Files land as `identifiable/pacs_landing/images/<site>/<date>/<digest>.dcm`, the layout raw_image_index reads
(for PACS sites it reads this root instead of the landing folder, which stays read-only to the platform), and
go through the run's journalled commit with the table `pacs_instances` (every listed instance, its outcome,
sha256 and reason): a run that fails leaves nothing half-written, and the next one resumes. Every listed instance
is fetched, unchanged or failed (the counts add up, per site-day, in the metadata). Each site-day's data version
is the digest of the PACS's own listing (imaging/pacs/listing.py `listing_version`), so raw_image_index shows as
unsynced exactly when a site-day changed in the PACS.
"""


import math
import time

from dagster import AssetExecutionContext, AssetMaterialization, MaterializeResult, MetadataValue, asset
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG
from dagster._core.definitions.partitions.utils import get_tags_from_multi_partition_key
from dagster import MultiPartitionKey
from pyspark.sql import functions as F

from assets.governance import definition_metadata
from assets.partitions import PARTITIONS, SINGLE_RUN, site_days
from assets.run_tags import label_run
from assets.versions import EVENTS_LOGGED_BY_STEP
from imaging.catalogue import IDENTIFIABLE, PACS_INSTANCES, PACS_LANDING, markdown_safe
from imaging.driver.progress import MB
from imaging.pacs import listing as pacs_listing
from imaging.pacs.listing import list_site_day, listing_version
from imaging.pacs.retrieval import FAILED, FETCHED, OUTCOMES, UNCHANGED, FetchSetup, fetch_step
from imaging.records import PacsInstance, SiteDay, schema_of
from resources.pacs import PacsServers
from resources.progress import SparkProgress
from resources.spark import SparkResource, frame_of, map_batches
from resources.warehouse import WAREHOUSE_POOL, Warehouse

KEY = "pacs_landing"
# At least this many instances per retrieval task before another task (another client, another connection) is
# opened: a task's set-up costs more than a few retrievals; `max_connections` bounds the tasks per server.
INSTANCES_PER_TASK = 16


def subfolder(key: SiteDay) -> str:
    """A site-day's folder below the PACS landing root: the landing layout."""
    return f"images/{key.site}/{key.date}"


@asset(
    name=KEY,
    partitions_def=PARTITIONS,
    backfill_policy=SINGLE_RUN,
    pool=WAREHOUSE_POOL,
    kinds={"spark", "dicom"},
    metadata=definition_metadata(KEY),
    description=markdown_safe(
        "Identifiable zone. A PACS site's images of the site-day, retrieved over DICOMweb or DIMSE (QIDO-RS or "
        "C-FIND listing on the driver, WADO-RS, C-GET or C-MOVE retrievals on the executors) as Part 10 files into "
        "pacs_landing/images/<site>/<date>/, which raw_image_index reads for PACS sites; table pacs_instances: every listed instance fetched, "
        "unchanged or failed with the reason. Site-days of other sites have nothing to fetch."),
)
def pacs_landing(context: AssetExecutionContext, spark: SparkResource, pacs: PacsServers, warehouse: Warehouse,
                 progress: SparkProgress) -> MaterializeResult:
    label_run(context)
    keys = site_days(context)
    ours = [k for k in keys if k.site in pacs.sites]
    if len(ours) < len(keys):
        context.log.info(f"{len(keys) - len(ours)} site-days of sites without a PACS: nothing to fetch")
    policy = pacs.policy
    servers = {site: pacs.server(site) for site in sorted({k.site for k in ours})}  # credentials: env, now
    started = time.monotonic()

    # The fan-out's first half on the driver: a listing is small (UIDs and a marker per instance).
    listing: dict[SiteDay, list[PacsInstance]] = {}
    for site, server in servers.items():
        client = pacs_listing.session(server, policy)
        try:
            for key in (k for k in ours if k.site == site):
                listing[key] = list_site_day(client, site, key.date)
        finally:
            client.close()
    listed = sum(len(v) for v in listing.values())
    context.log.info(f"{KEY}: {len(ours)} site-days listed, {listed} instances, in {time.monotonic() - started:.1f} s")
    pacs_listing.on_listed(len(ours), listed)  # looked up at each call: tests step in here

    commit = warehouse.begin(KEY)
    tally: dict[str, dict[str, int]] = {f"{k.date}|{k.site}": {o: 0 for o in OUTCOMES} for k in keys}
    fetched_bytes: dict[str, int] = {p: 0 for p in tally}
    reasons: dict[str, dict[str, int]] = {p: {} for p in tally}
    fetch_started = time.monotonic()
    slots = 0
    if listed:
        session = spark.spark_session
        instances = [i for k in ours for i in listing[k]]
        planned = frame_of(session, instances, schema_of(PacsInstance)).drop("previous_marker", "previous_sha256",
                                                                              "pixel_bytes")
        # What the last run landed (a projection of the table, joined on the executors, never collected).
        previous = (warehouse.read(session, PACS_INSTANCES, ours).where(F.col("outcome") != FAILED)
                    .select("date", "site", "file_name", F.col("marker").alias("previous_marker"),
                            F.col("sha256").alias("previous_sha256")))
        # file_name is the digest of the instance's three UIDs: one row per listed instance on both sides.
        planned = planned.join(previous, ["date", "site", "file_name"], "left")
        # Concurrency per server: its instances spread over at most `max_connections` slots, one task each.
        offset, slot_of = {}, {}
        for site, server in servers.items():
            count = sum(len(listing[k]) for k in ours if k.site == site)
            slot_of[site] = max(1, min(server.max_connections, math.ceil(count / INSTANCES_PER_TASK)))
            offset[site] = slots
            slots += slot_of[site]
        slot = F.lit(0)
        for site in servers:
            slot = F.when(F.col("site") == site,
                          F.lit(offset[site]) + F.pmod(F.hash("file_name"), F.lit(slot_of[site]))).otherwise(slot)
        setup = FetchSetup(tuple(servers.values()), policy, landed_root=warehouse.url(PACS_LANDING),
                           staged_root=f"{commit.staging(warehouse.zone(IDENTIFIABLE))}/{PACS_LANDING.name}")
        outcomes = map_batches(planned.withColumn("slot", slot).repartitionByRange(slots, "slot").drop("slot"),
                               fetch_step(setup)).persist()
        estimate = sum(i.pixel_bytes or 0 for i in instances)  # MB/s and ETA before any byte has come
        with progress.track(context.log, session, label=KEY, files=listed, bytes=estimate):
            outcomes.count()  # every retrieval exactly once; the table is written from the persisted rows
        for row in outcomes.groupBy("date", "site", "outcome", "reason").agg(
                F.count(F.lit(1)).alias("n"), F.sum("size_bytes").alias("bytes")).collect():
            partition = f"{row['date']}|{row['site']}"
            tally[partition][row["outcome"]] += row["n"]
            if row["outcome"] == FETCHED:
                fetched_bytes[partition] += row["bytes"] or 0
            if row["reason"]:
                reasons[partition][row["reason"]] = reasons[partition].get(row["reason"], 0) + row["n"]
        total = {o: sum(t[o] for t in tally.values()) for o in OUTCOMES}
        if sum(total.values()) != listed:  # every listed instance has exactly one outcome, before anything is visible
            raise RuntimeError(f"{KEY}: {listed} instances listed but {sum(total.values())} outcomes: nothing committed")
        warehouse.stage(commit, outcomes, PACS_INSTANCES, ours)
    else:
        warehouse.stage_empty(commit, PACS_INSTANCES, ours)
    warehouse.stage_folders(commit, PACS_LANDING, [subfolder(k) for k in ours])
    commit.build().apply()
    if listed:
        outcomes.unpersist()

    seconds = time.monotonic() - fetch_started
    total = {o: sum(t[o] for t in tally.values()) for o in OUTCOMES}
    moved = sum(fetched_bytes.values())
    rate = f", {moved / MB / seconds:.1f} MB/s" if seconds > 0 else ""
    context.log.info(f"{KEY}: {listed} listed = {total[FETCHED]} fetched + {total[UNCHANGED]} unchanged + "
                     f"{total[FAILED]} failed; {moved / MB:.1f} MB fetched in {seconds:.1f} s{rate}")

    code_version = context.assets_def.specs_by_key[context.assets_def.key].code_version or context.run.run_id
    for key in keys:
        partition = f"{key.date}|{key.site}"
        counts = tally[partition]
        is_pacs = key in listing
        version = listing_version(listing.get(key, []), counts[FAILED]) if is_pacs else "no-pacs"
        tags = {CODE_VERSION_TAG: code_version, DATA_VERSION_TAG: version,
                **get_tags_from_multi_partition_key(MultiPartitionKey({"date": key.date, "site": key.site}))}
        metadata = {"pacs_site": is_pacs, "listed": len(listing.get(key, [])), **counts,
                    "bytes_fetched": fetched_bytes[partition],
                    **{f"failed/{reason}": n for reason, n in sorted(reasons[partition].items())},
                    "pacs_version": version, "run/seconds": round(seconds, 3), "run/retrieval_tasks": slots,
                    "files": MetadataValue.path(warehouse.relative(f"{warehouse.url(PACS_LANDING)}/{subfolder(key)}"))}
        context.log_event(AssetMaterialization(asset_key=KEY, partition=partition, metadata=metadata, tags=tags))
    return MaterializeResult(metadata=EVENTS_LOGGED_BY_STEP)
