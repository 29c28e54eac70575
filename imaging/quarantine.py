"""Held-back files, findable: keyed tokens of landing files, a site-day's list, and `imaging-quarantine`.

A site-day's page in the UI lists its quarantined files (the first `LISTED`, in the materialization's metadata):
a keyed token of the landing file, its size, sha256, the reason and the step that held it; never a path (hospital
exports name folders after patients) nor a header value. The token is an HMAC of the landing file's URL under the
*token key*: a key derived from the pseudonym key (HMAC, so it reveals nothing of it) and kept in the identifiable
zone (`identifiable/keys/landing_file_token`, written by the runs). So whoever may read the identifiable zone (an
operator, `imaging-review` with the warehouse set) can turn a path into its token, and nobody else can test a
guess of a path against one. The provenance of a released file names its landing file the same way.

    imaging-quarantine 2024-03-01|north      every quarantined file of that site-day, each step's, with its path
    imaging-quarantine north                 every date of a site;  imaging-quarantine 2024-03-01: every site
    imaging-quarantine 3f2a9c01d4e5b6a7      the file a token (from the UI or a review) stands for
    imaging-quarantine north --csv out.csv   the whole list as CSV (token, step, reason, bytes, sha256, site-day, path)

It reads the identifiable zone (IMAGING_WAREHOUSE, or IMAGING_TABLES when the tables are apart) with pyarrow: no
Spark, no Dagster, no pseudonym key. Its output holds landing paths, and says so first.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import os
import re
import sys
from dataclasses import asdict, dataclass

from imaging import fs as fsx
from imaging.catalogue import (ANONYMIZE_QUARANTINE, CLINICAL_QUARANTINE, INDEX_QUARANTINE, KEYS, LINK_QUARANTINE,
                               OPTOUT_QUARANTINE, Table)

LISTED = 100  # files a site-day's materialization lists; the command lists every one
TOKEN_KEY_FILE = "landing_file_token"
TOKEN_LENGTH = 16  # hex digits: 64 bits, unique among any archive's files, short in the UI's metadata
# Each step's quarantine tables, and the name the list gives the step that held a file.
STEP_TABLES: dict[str, tuple[Table, ...]] = {
    "raw_image_index": (INDEX_QUARANTINE,),
    "linked_patient_metadata": (LINK_QUARANTINE, CLINICAL_QUARANTINE),
    "anonymized_images": (ANONYMIZE_QUARANTINE, OPTOUT_QUARANTINE),
}


def step_name(table: Table) -> str:
    """The step a quarantine table's rows were held by, as the list names it (`quarantine/raw_image_index` ->
    `raw_image_index`, the extracts' and opt-out lists' tables by what they hold)."""
    return table.name.removeprefix("quarantine/")


def derive_token_key(pseudonym_key: str | bytes) -> bytes:
    raw = pseudonym_key.encode("utf-8") if isinstance(pseudonym_key, str) else bytes(pseudonym_key)
    return hmac.new(raw, b"imaging landing file token key", hashlib.sha256).digest()


def file_token(token_key: bytes, source_path: str) -> str:
    """The keyed token of a landing file (its URL as the tables record it)."""
    return hmac.new(token_key, b"landing-file\x1f" + source_path.encode("utf-8"), hashlib.sha256).hexdigest()[
        :TOKEN_LENGTH]


def _key_url(warehouse: str) -> str:
    return fsx.under(warehouse, f"{KEYS.path}/{TOKEN_KEY_FILE}")


def ensure_token_key(warehouse: str, pseudonym_key: str | bytes) -> bytes:
    """The token key of this pseudonym key, written to the identifiable zone when it is not there (or is another
    key's: a new pseudonym key gives new tokens, as it gives new pseudonyms)."""
    key = derive_token_key(pseudonym_key)
    url = _key_url(warehouse)
    if not fsx.exists(url) or fsx.read_bytes(url) != key.hex().encode():
        fsx.write_atomic(url, key.hex().encode())
    return key


def read_token_key(warehouse: str) -> bytes | None:
    """The token key the runs recorded in the identifiable zone; None when no run has recorded one yet."""
    url = _key_url(warehouse)
    if not fsx.exists(url):
        return None
    return bytes.fromhex(fsx.read_bytes(url).decode().strip())


@dataclass(frozen=True)
class HeldFile:
    """One quarantined file as a site-day's page lists it: no path, no value from the file."""

    token: str
    bytes: int | None
    sha256: str | None
    reason: str
    step: str


@dataclass(frozen=True)
class HeldFileAt:
    """One quarantined file as `imaging-quarantine` prints it: with its site-day and landing path (identifiable)."""

    token: str
    step: str
    reason: str
    bytes: int | None
    sha256: str | None
    site_day: str
    path: str


def held(token_key: bytes, row: dict, step: str) -> HeldFile:
    """A quarantine table's row (a `Quarantined` record's fields) as the page lists it."""
    size = row.get("size_bytes")
    return HeldFile(file_token(token_key, str(row["source_path"])), None if size is None else int(size),
                    row.get("sha256"), str(row["reason"]), step)


# --- the command ------------------------------------------------------------------------------------------------

DATE = r"\d{4}-\d{2}-\d{2}"
SITE = r"[a-z0-9][a-z0-9_-]*"


@dataclass(frozen=True)
class Selection:
    date: str | None = None
    site: str | None = None
    token: str | None = None


def parse_selection(text: str) -> Selection:
    """`date|site`, a date, a site, or a token; anything else is refused (it becomes a filter, never a path)."""
    text = text.strip()
    if m := re.fullmatch(rf"({DATE})\|({SITE})", text):
        return Selection(date=m[1], site=m[2])
    if re.fullmatch(DATE, text):
        return Selection(date=text)
    if re.fullmatch(rf"[0-9a-f]{{{TOKEN_LENGTH}}}", text):
        return Selection(token=text)
    if re.fullmatch(SITE, text):
        return Selection(site=text)
    raise ValueError(f"not a site-day (YYYY-MM-DD|site), a date, a site or a {TOKEN_LENGTH}-digit token: {text!r}")


def _rows(tables_root: str, table: Table, selection: Selection) -> list[dict]:
    import pyarrow.compute as pc

    dataset = fsx.parquet_table(f"{tables_root}/{table.path}")
    if dataset is None:
        return []
    wanted = None
    for column, value in (("date", selection.date), ("site", selection.site)):
        if value is not None:
            test = pc.field(column) == value
            wanted = test if wanted is None else wanted & test
    return dataset.to_table(filter=wanted, columns=["date", "site", "source_path", "size_bytes", "sha256",
                                                    "reason"]).to_pylist()


def list_held(tables_root: str, token_key: bytes | None, selection: Selection) -> list[HeldFileAt]:
    """Every quarantined file of the selection, each step's, sorted by site-day, step and path."""
    out = []
    for tables in STEP_TABLES.values():
        for table in tables:
            for row in _rows(tables_root, table, selection):
                token = file_token(token_key, str(row["source_path"])) if token_key else "-"
                if selection.token and token != selection.token:
                    continue
                out.append(HeldFileAt(token, step_name(table), str(row["reason"]), row.get("size_bytes"),
                                      row.get("sha256"), f"{row['date']}|{row['site']}", str(row["source_path"])))
    return sorted(out, key=lambda h: (h.site_day, h.step, h.path))


def _root(value: str) -> str:
    return value.rstrip("/") if "://" in value else os.path.abspath(os.path.expanduser(value))


def main(argv: list[str] | None = None) -> int:
    from imaging.deid.quiet import silence_for_process

    silence_for_process()
    parser = argparse.ArgumentParser(prog="imaging-quarantine", description=__doc__.splitlines()[0],
                                     epilog="Reads IMAGING_WAREHOUSE (and IMAGING_TABLES); prints landing paths.")
    parser.add_argument("selection", help="a site-day (YYYY-MM-DD|site), a date, a site, or a token from the UI")
    parser.add_argument("--csv", default=None, help="write the whole list here as CSV (it holds landing paths)")
    parser.add_argument("--warehouse", default=None, help="warehouse root [IMAGING_WAREHOUSE]")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    warehouse = args.warehouse or os.environ.get("IMAGING_WAREHOUSE", "").strip()
    if not warehouse:
        parser.error("set IMAGING_WAREHOUSE (the quarantine tables are in its identifiable zone) or pass --warehouse")
    try:
        selection = parse_selection(args.selection)
    except ValueError as error:
        parser.error(str(error))
    warehouse = _root(warehouse)
    tables = _root(os.environ.get("IMAGING_TABLES", "").strip() or warehouse)
    token_key = read_token_key(warehouse)
    if token_key is None and selection.token:
        print("imaging-quarantine: no token key in the identifiable zone yet (no run has listed a quarantined "
              "file): tokens cannot be resolved", file=sys.stderr)
        return 1
    found = list_held(tables, token_key, selection)
    print(f"# IDENTIFIABLE: landing paths of the identifiable zone ({len(found)} quarantined files). "
          "Do not copy them into tickets or chat: quote the token.")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(HeldFileAt.__dataclass_fields__))
            writer.writeheader()
            writer.writerows(asdict(h) for h in found)
        print(f"# written to {args.csv}")
    else:
        for h in found:
            print("\t".join([h.token, h.site_day, h.step, h.reason, str(h.bytes if h.bytes is not None else "-"),
                             h.sha256 or "-", h.path]))
    if selection.token and not found:
        print(f"imaging-quarantine: no quarantined file has the token {selection.token}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
