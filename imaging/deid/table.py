"""Load and parse PS3.15 Table E.1-1 (the copy in `data/`), once per process."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from .options import OPTIONS

# Through importlib.resources, not __file__: on Spark executors the package runs from a shipped zip.
TABLE_FILE = files("imaging.deid") / "data" / "ps3.15-table-e.1-1.json"

# Every action code the 2024b table uses. A code outside this set (a newer revision of the
# standard) stops the loader rather than being guessed at.
BASIC_ACTIONS = frozenset({"D", "Z", "X", "U", "X/Z", "X/D", "X/Z/D", "Z/D", "X/Z/U*"})
OPTION_ACTIONS = frozenset({"K", "C"})
PRIVATE_ROW_ID = "ggggeeee-where-gggg-is-odd"


@dataclass(frozen=True)
class Row:
    """One attribute of the table: its basic action and the action under each option that has one."""

    name: str
    basic: str
    options: dict[str, str] = field(default_factory=dict)  # option name -> "K" or "C"


@dataclass(frozen=True)
class Table:
    rows: dict[int, Row]  # tag (as int) -> row
    curves: Row  # (50xx,xxxx): every element of a curve group
    overlay_data: Row  # (60xx,3000)
    overlay_comments: Row  # (60xx,4000)
    private: Row  # (gggg,eeee) with gggg odd


def _row(raw: dict) -> Row:
    basic = raw["basicProfile"]
    if basic not in BASIC_ACTIONS:
        raise ValueError(f"Table E.1-1 row {raw['id']}: unknown basic action {basic!r}")
    options = {}
    for option in OPTIONS:
        action = raw.get(option.column)
        if action is None:
            continue
        if action not in OPTION_ACTIONS:
            raise ValueError(f"Table E.1-1 row {raw['id']}: unknown {option.column} action {action!r}")
        options[option.name] = action
    return Row(raw["name"], basic, options)


@lru_cache(maxsize=None)
def load_table(path: str | None = None) -> Table:
    """Parse the table. Raises ValueError on anything unexpected, so a bad copy cannot load."""
    raw_rows = json.loads((Path(path) if path else TABLE_FILE).read_text(encoding="utf-8"))
    rows: dict[int, Row] = {}
    special: dict[str, Row] = {}
    for raw in raw_rows:
        key = raw["id"].lower()
        row = _row(raw)
        if key in ("50xxxxxx", "60xx3000", "60xx4000", PRIVATE_ROW_ID):
            special[key] = row
            continue
        tag = int(key, 16)  # raises on any other non-hex id
        if tag in rows:
            raise ValueError(f"Table E.1-1: duplicate row {key}")
        rows[tag] = row
    missing = {"50xxxxxx", "60xx3000", "60xx4000", PRIVATE_ROW_ID} - special.keys()
    if missing:
        raise ValueError(f"Table E.1-1: rows missing: {sorted(missing)}")
    return Table(rows, special["50xxxxxx"], special["60xx3000"], special["60xx4000"], special[PRIVATE_ROW_ID])

