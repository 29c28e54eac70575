"""Opt-out lists in the landing layout: `optouts/<site>/<YYYY-MM-DD>.csv` (see imaging/optout.py).

`write_list` writes one file: a whole list (`patient_id` only) or changes (`patient_id`, `action`). The
hospital generator uses it for a small list (`generate_hospital(optouts=N)`): N imaged patients of the first
site opted out from the first day, plus one row keyed by a placeholder id, which the platform quarantines.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Iterable

PLACEHOLDER = "UNKNOWN"  # one of platform/quality.yaml's placeholder keys


def write_list(landing, site: str, date: str, rows: Iterable[tuple[str, str | None]]) -> Path:
    """Write one list file. `rows` are (patient_id, action): all actions None make a whole list, else changes."""
    rows = list(rows)
    changes = any(action is not None for _, action in rows)
    path = Path(landing) / "optouts" / site / f"{date}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["patient_id", "action"] if changes else ["patient_id"])
        writer.writerows([pid, action or ""] if changes else [pid] for pid, action in rows)
    return path


def write_small_list(landing, summary, count: int, seed: int) -> list[str]:
    """`count` imaged patients of the first site opted out on the first day (a whole list, with a placeholder
    row); returns their patient ids. Drawn from a generator of its own, so the rest of the hospital is the
    same with or without it."""
    site, day = summary.sites[0], summary.dates[0]
    imaged = sorted(p.patient_id for p in summary.patients if site in p.imaged_sites)
    chosen = sorted(random.Random(seed * 7919 + 1).sample(imaged, min(count, len(imaged))))
    write_list(landing, site, day, [*((pid, None) for pid in chosen), (PLACEHOLDER, None)])
    return chosen
