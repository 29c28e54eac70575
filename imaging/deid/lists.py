"""The two reviewed lists: non-table attributes kept verbatim, and safe private attributes.

Both are YAML files in `data/` that a reviewer edits; every entry needs a reason. The loader
validates them so that a typo cannot silently widen what is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

import yaml
from pydicom.datadict import dictionary_VR, tag_for_keyword

# Through importlib.resources, not __file__: on Spark executors the package runs from a shipped zip.
DATA = files("imaging.deid") / "data"
# Only numbers may be kept from a private block: a number cannot spell a name or an address.
SAFE_PRIVATE_VRS = frozenset({"US", "SS", "UL", "SL", "UV", "SV", "FL", "FD", "DS", "IS"})


@dataclass(frozen=True)
class SafePrivate:
    group: int
    creator: str
    offset: int  # the element's low byte within its block, 0x00-0xFF
    vr: str
    reason: str


def _entries(name: str, key: str) -> list[dict]:
    doc = yaml.safe_load((DATA / name).read_text(encoding="utf-8")) or {}
    entries = doc.get(key) or []
    for entry in entries:
        if not str(entry.get("reason") or "").strip():
            raise ValueError(f"{name}: entry without a reason: {entry}")
    return entries


SCRUB_MODES = ("terms", "descriptor")


@lru_cache(maxsize=None)
def allowlist(table_tags: frozenset[int]) -> dict[int, str]:
    """Tag -> scrub mode of the reviewed allow-list. An entry also in Table E.1-1 is an error: the table wins.

    Text is always scrubbed: "terms" (default) removes the patient's names and ids; "descriptor"
    also removes numbers and dates, for labels a person may have typed.
    """
    tags = {}
    for entry in _entries("allowlist.yaml", "attributes"):
        keyword = entry["keyword"]
        tag = tag_for_keyword(keyword)
        if tag is None:
            raise ValueError(f"allowlist.yaml: unknown keyword {keyword!r}")
        if tag in table_tags:
            raise ValueError(f"allowlist.yaml: {keyword} is in Table E.1-1, whose action applies")
        dictionary_VR(tag)  # must be a public dictionary attribute
        mode = entry.get("scrub", "terms")
        if mode not in SCRUB_MODES:
            raise ValueError(f"allowlist.yaml: {keyword}: scrub must be one of {SCRUB_MODES}")
        tags[tag] = mode
    return tags


@lru_cache(maxsize=None)
def safe_private() -> tuple[SafePrivate, ...]:
    out = []
    for entry in _entries("safe_private.yaml", "attributes"):
        item = SafePrivate(
            group=int(str(entry["group"]), 16),
            creator=str(entry["creator"]).strip(),
            offset=int(str(entry["offset"]), 16),
            vr=str(entry["vr"]),
            reason=str(entry["reason"]).strip(),
        )
        if item.group % 2 == 0 or item.group < 0x0009 or item.group > 0xFFFD:
            raise ValueError(f"safe_private.yaml: {entry}: not a private group")
        if not item.creator or not 0 <= item.offset <= 0xFF:
            raise ValueError(f"safe_private.yaml: {entry}: bad creator or offset")
        if item.vr not in SAFE_PRIVATE_VRS:
            raise ValueError(f"safe_private.yaml: {entry}: only numeric VRs may be listed")
        out.append(item)
    return tuple(out)
