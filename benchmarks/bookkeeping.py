"""What a run over many site-days costs Dagster's instance: bytes and events per site-day, and seconds per site-day.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python benchmarks/bookkeeping.py [--site-days 60,365] [--patients 40]
                                                                          [--storage sqlite,postgres] [--broken]

For each size, a fresh Dagster home (the shipped platform/dagster.yaml: SQLite storage), warehouse and landing
zone: one site, `N` consecutive days of a generated hospital (`--patients` patients visiting over the period, a
few small files a site-day; `--broken` adds the generator's junk files, quarantined, to every site-day), then the
three image assets over all `N` site-days in one run, launched as an operator does
(`dagster asset materialize --partition-range`). Measured: the instance's bytes on disk after the run less
before it (the run's share of Dagster's storage), the run's events by type with their serialized bytes, the
instance's bytes by table (SQLite: each shard's, from `dbstat`), and the run's seconds; each per site-day.
`--storage postgres` runs the same on the production instance's storage (platform/dagster-production.yaml's
storage section: PostgreSQL with pooled connections, a local server as tests/services.py starts one) and measures
the database's size instead of the Dagster home's (right after the run, and after `VACUUM FULL`: its live rows),
and the sessions the run opened on it; `postgres-plain` on dagster-postgres's own storage (a new connection for
each write), to compare.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ASSETS = "raw_image_index,linked_patient_metadata,anonymized_images"
SITE = "site-a"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def tables_sqlite(home: Path) -> collections.Counter:
    """Bytes on disk by shard and table (its indexes counted with it), from SQLite's `dbstat`, and each shard's
    free pages: where a SQLite instance's bytes are."""
    import sqlite3

    out: collections.Counter = collections.Counter()
    for db in sorted((home / "history").rglob("*.db")):
        shard = "index" if db.name == "index.db" else "runs" if db.parent.name == "history" else "run"
        with sqlite3.connect(db) as conn:
            tables = dict(conn.execute("select name, tbl_name from sqlite_master where type in ('table', 'index')"))
            for name, size in conn.execute("select name, sum(pgsize) from dbstat group by name"):
                out[f"{shard}:{tables.get(name, name)}"] += size
            free, page = (conn.execute(f"pragma {p}").fetchone()[0] for p in ("freelist_count", "page_size"))
            out[f"{shard}:(free pages)"] += free * page
    return out


def tables_postgres(database) -> collections.Counter:
    """Bytes by table (its indexes and TOAST counted with it) in the production storage's database."""
    return collections.Counter({name: int(size) for name, size in database.query(
        "select relname, pg_total_relation_size(oid) from pg_class where relkind = 'r' and relnamespace = "
        "'public'::regnamespace")})


def events_by_type(home: Path, env: dict[str, str]) -> tuple[collections.Counter, collections.Counter, str]:
    """(events by type, serialized bytes by type, run id) of the instance's one run; `env`: the run's."""
    os.environ.update({k: v for k, v in env.items() if k.startswith("DAGSTER_")})
    from dagster import DagsterInstance
    from dagster_shared.serdes import serialize_value

    count, size = collections.Counter(), collections.Counter()
    with DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        for entry in instance.all_logs(run.run_id):
            kind = entry.dagster_event.event_type_value if entry.dagster_event else "log message"
            count[kind] += 1
            size[kind] += len(serialize_value(entry))
    return count, size, run.run_id


def measure(days: int, patients: int, broken: bool, work: Path, storage: str = "sqlite", database=None) -> dict:
    """One run over `days` site-days on `storage`: `sqlite` (the demo instance's), `postgres` (the production
    instance's, pooled) or `postgres-plain` (dagster-postgres's own) on `database` (a tests/services.py server)."""
    root = work / f"days-{days}-{storage}"
    home, landing, warehouse = root / "dagster_home", root / "landing", root / "warehouse"
    home.mkdir(parents=True)
    instance = yaml.safe_load((REPO / "platform" / "dagster.yaml").read_text())
    if storage == "postgres":  # the production file's storage section (pooled), read from DAGSTER_PG_*
        instance["storage"] = yaml.safe_load((REPO / "platform" / "dagster-production.yaml").read_text())["storage"]
    elif storage == "postgres-plain":  # dagster-postgres's own storage: a new connection for each write
        instance["storage"] = {"postgres": {"postgres_url": database.url().replace(
            "postgresql://", "postgresql+psycopg2://", 1)}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
    size = (lambda: folder_bytes(home)) if database is None else \
        (lambda: database.query("select pg_database_size(current_database())")[0][0])
    sessions = (lambda: 0) if database is None else \
        (lambda: database.query("select sessions from pg_stat_database where datname = current_database()")[0][0])
    start_day = dt.date(2024, 1, 1)
    dates = [str(start_day + dt.timedelta(days=i)) for i in range(days)]
    sys.path.insert(0, str(REPO))
    from synth import generate_hospital

    summary = generate_hospital(landing, seed=11, sites=(SITE,), dates=tuple(dates), patients_per_site=patients,
                                oct_shape=(2, 32, 32), fundus_shape=(32, 32), broken_per_partition=broken)
    files = sum(len(v) for v in summary.dicom_files.values()) + sum(len(v) for v in summary.broken_files.values())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGING_", "DAGSTER_"))}
    env.update(IMAGING_LANDING=str(landing), IMAGING_WAREHOUSE=str(warehouse), IMAGING_SITES=SITE,
               IMAGING_START_DATE=dates[0], IMAGING_END_DATE=dates[-1],
               IMAGING_PSEUDONYM_KEY="benchmark-key-not-secret-" + "b" * 10, IMAGING_SPARK_MASTER="local[2]",
               SPARK_LOCAL_IP="127.0.0.1", DAGSTER_HOME=str(home), IMAGING_MIN_K="1",
               **(database.environment() if database is not None else {}))
    # The instance made before the run (its empty storage is not the run's).
    made = subprocess.run([str(Path(sys.executable).with_name("dagster")), "instance", "migrate"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if made.returncode:
        raise SystemExit(f"the instance could not be made: {made.stdout[-2000:]}{made.stderr[-2000:]}")
    before, opened = size(), sessions()
    command = [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m", "definitions",
               "--select", ASSETS, "--partition-range", f"{dates[0]}|{SITE}...{dates[-1]}|{SITE}"]
    started = time.perf_counter()
    with open(root / "run.log", "w") as log:
        code = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if code:
        raise SystemExit(f"the run failed; see {root / 'run.log'}")
    after, opened = size(), sessions() - opened - 2  # less the first count's and the size query's sessions
    count, size, _ = events_by_type(home, env)
    tables = tables_sqlite(home) if database is None else tables_postgres(database)
    live = None if database is None else vacuumed_bytes(database) - before
    return {"site_days": days, "files": files, "seconds": seconds, "instance_bytes": after - before,
            "events": count, "event_bytes": size, "tables": tables, "sessions": opened, "live_bytes": live}


def vacuumed_bytes(database) -> int:
    """The database's size after `VACUUM FULL`: its live rows only. Right after a run PostgreSQL also holds the
    row versions the run replaced (each check's planned row, then its evaluation), until autovacuum makes their
    space reusable; how many are left when the run ends depends on how fast it ran."""
    import psycopg2

    conn = psycopg2.connect(host=database.host, port=database.port, user=database.user, password=database.password,
                            dbname=database.database)
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute("VACUUM FULL")
            cursor.execute("select pg_database_size(current_database())")
            return cursor.fetchone()[0]
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site-days", default="60,365")
    parser.add_argument("--patients", type=int, default=40)
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--storage", default="sqlite",
                        help="comma-separated: sqlite (platform/dagster.yaml), postgres (the production file's pooled "
                             "storage), postgres-plain (dagster-postgres's own, a connection per write)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bookkeeping-"))
    try:
        for storage, days in ((s, int(d)) for s in args.storage.split(",") for d in args.site_days.split(",")):
            if storage.startswith("postgres"):
                sys.path.insert(0, str(REPO / "tests"))
                from services import postgres_server

                with postgres_server() as server:
                    r = measure(days, args.patients, args.broken, work, storage, server)
            else:
                r = measure(days, args.patients, args.broken, work)
            n = r["site_days"]
            print(f"[{storage}] {n} site-days, {r['files']} files, one run: {r['seconds']:.0f} s = {r['seconds'] / n:.2f} s a "
                  f"site-day; instance {r['instance_bytes'] / 1e6:.1f} MB = {r['instance_bytes'] / n / 1e3:.0f} KB a "
                  f"site-day; {sum(r['events'].values())} events = {sum(r['events'].values()) / n:.1f} a site-day",
                  flush=True)
            if r["live_bytes"] is not None:
                print(f"    PostgreSQL sessions opened: {r['sessions']} = {r['sessions'] / n:.1f} a site-day; after "
                      f"VACUUM FULL (live rows only) {r['live_bytes'] / 1e6:.1f} MB = {r['live_bytes'] / n / 1e3:.0f} KB "
                      f"a site-day")
            for kind, bytes_ in r["event_bytes"].most_common():
                print(f"    {kind:36s} {r['events'][kind] / n:7.2f} a site-day {bytes_ / n / 1e3:8.1f} KB a site-day")
            print("  on disk, by table (with its indexes), the whole instance:")
            for table, bytes_ in r["tables"].most_common(8):
                print(f"    {table:46s} {bytes_ / n / 1e3:8.1f} KB a site-day")
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
