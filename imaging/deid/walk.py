"""The walk: every element of every dataset, at every depth, goes through exactly one rule.

The profile is Table E.1-1 resolved for the run's options (imaging.deid.profile): the one table that decides.
An element's tag finds its row (`DeidProfile.actions`), or the rule for curves, overlays, private blocks and
attributes the table does not list, and its VR chooses how the action applies (imaging.deid.rules). The walk
hands each dataset's published elements to the writer's encoder (imaging.deid.writer) in tag order.
"""

from __future__ import annotations

import struct

from pydicom.datadict import keyword_for_tag
from pydicom.dataelem import DataElement

from .element import FAILABLE, Element, Items, _encodings
from .errors import NotDeidentifiable
from .private import safe_element
from .rules import _UNITS, Context, decide
from .values import valid_number_string

CHARSET = 0x00080005
PLANS = 100_000  # decisions kept per profile (tag x VR pairs met; a hostile file cannot grow it without bound)
_UNDECIDED = object()


def walk(items: Items, ctx: Context, dummy: bool) -> list[tuple]:
    """The published elements of one dataset (the top level or a sequence item), in tag order."""
    outer, ctx.dataset = ctx.dataset, items
    encoder = ctx.encoder
    encodings = encoder.encodings
    try:
        out: list[tuple] = []
        blocks: dict[int, str] = {}  # private creator tag -> creator, for blocks that kept an element
        profile = ctx.profile
        allowlist, plans = profile.allowlist, profile.plans
        for el in items.elements():
            tag = el.tag
            group, element = tag >> 16, tag & 0xFFFF
            if element == 0 or group == 0 or group == 2:
                continue  # group lengths (recomputed if needed), command and file meta groups
            if group & 1 and element <= 0x0FFF:
                continue  # private creators (added back below if needed) and reserved elements
            try:
                if group & 1:
                    new = _private(el, ctx)
                else:
                    key = (tag, el.vr, dummy)
                    rule = plans.get(key, _UNDECIDED)
                    if rule is _UNDECIDED:
                        rule = decide(profile, tag, el.vr, dummy)
                        if len(plans) < PLANS:
                            plans[key] = rule
                    new = None
                    if rule is not None:
                        if el.raw is None or el.vr in FAILABLE:
                            el.readable()  # as the reference engine, which read every element before its rule
                        new = rule(el, ctx)
                failed = False
            except NotDeidentifiable:
                raise
            except Exception:  # noqa: BLE001 - a value that cannot be read or rebuilt is dropped, never kept
                new, failed = None, True
            if failed and tag in allowlist:  # e.g. the image itself: do not publish half a file
                raise NotDeidentifiable(f"unreadable {keyword_for_tag(tag) or 'attribute'}")
            if new is None:
                continue
            out.append(new)
            if group & 1:
                blocks[(group << 16) | (element >> 8)] = _creator(items, group, element)
            elif tag == CHARSET:  # this dataset's text (and its items') is written in its own character set
                encoder.encodings = _charset(new)
        if blocks:
            out.extend(encoder.text(tag, "LO", [creator]) for tag, creator in blocks.items())
            out.sort(key=_tag)
    finally:
        ctx.dataset = outer
        encoder.encodings = encodings
    return out


def _tag(out: tuple) -> int:
    return out[0]


def walk_items(items: list[Items], ctx: Context, dummy: bool) -> list[list[tuple]]:
    """The walk of a sequence's items, for the rules (`Context.walk_items`: they cannot import this module)."""
    return [walk(item, ctx, dummy) for item in items]


def _private(el: Element, ctx: Context) -> tuple | None:
    """A private data element: removed, unless its block's creator and offset are on the safe list (Retain Safe
    Private) and its value is numbers of the listed VR (imaging.deid.private). Only those are decoded."""
    profile = ctx.profile
    if profile.private != "C" or not profile.safe_private:
        return None
    tag = el.tag
    creator = _creator(ctx.dataset, tag >> 16, tag & 0xFFFF)
    vr = profile.safe_private.get((tag >> 16, creator, tag & 0xFF)) if creator else None
    if vr is None:
        return None
    raw = el.raw
    if raw and el.vr == vr and ctx.encoder.little:  # numbers of the listed VR as they are (safe_element's test)
        unit = _UNITS.get(vr)
        if unit is not None and not len(raw) % unit and (vr not in ("FL", "FD") or not _nan(raw, vr)):
            return (tag, vr, raw)
        values = el.values() if unit is None else None
        if values and valid_number_string(vr, values):
            return ctx.encoder.value(tag, vr, raw)
    kept = safe_element(ctx.dataset.view(), el.decoded, profile, ctx.encoder.little)
    return None if kept is None else ctx.encoder.element(kept)


def _nan(raw: bytes, vr: str) -> bool:
    """A float value that is not a number (kept only as the reference engine keeps it: decoded)."""
    code = "f" if vr == "FL" else "d"
    return any(v != v for v in struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))


def _creator(items: Items, group: int, element: int) -> str | None:
    """The creator string of the block of (group, element), or None (imaging.deid.private.creator_of)."""
    block = element >> 8
    if block < 0x10:
        return None
    found = items.get((group << 16) | block)
    if found is None:
        return None
    if found.raw is not None and found.vr in ("LO", "SH", "CS"):
        values = found.strings()
        return values[0].strip() if len(values) == 1 else "" if not values else None
    value = found.value  # another VR (a private UN: pydicom reads it as its dictionary says)
    return value.strip() if isinstance(value, str) else None


def _charset(out: tuple):
    """The encodings of a published Specific Character Set."""
    if out[1] is None:
        elem: DataElement = out[3]
        from pydicom.charset import convert_encodings

        return convert_encodings(elem.value)
    return _encodings(out[2])
