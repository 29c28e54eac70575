"""What happens to one (non-private) element: the table's action, or the rule for the rest.

Every function takes an `Element` (imaging.deid.element: tag, VR, bytes) and returns the element to publish,
as the writer's `Out` (imaging.deid.writer), or None (removed). An element kept as it was is published as its
own bytes; a value is decoded only when the rule needs it (UIDs replaced, dates shifted, text scrubbed,
numbers checked) and only the new value is encoded. Sequences are handed back to the walk
(`Context.walk_items`), so the same rules apply at every depth.

Each rule gives what the engine before the raw engine gave (tests/deid_reference, held equal by
tests/test_deid_differential.py): the same action by tag and VR, the same values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from pydicom.dataelem import DataElement
from pydicom.uid import UID as TransferSyntax

from imaging.pseudonym import DateTimeShift, Pseudonymizer

from .element import Element, Items
from .profile import CLEAN, DUMMY, EMPTY, KEEP, REMOVE, UID, DeidProfile
from .scrub import Scrubber
from .timeshift import DATE_TIME_PAIRS, shift_date, shift_datetime, shift_paired_date, shift_time
from .uids import map_uid
from .values import DUMMY_BYTES, dummy as dummy_value, valid_number_string
from .vr import BINARY_NUMBERS, BYTES, DATES, NUMBER_STRINGS, TEXT, normalise
from .writer import Encoder

_UNITS = {"US": 2, "SS": 2, "UL": 4, "SL": 4, "UV": 8, "SV": 8, "FL": 4, "FD": 8, "AT": 4}
# Text VRs pydicom reads and writes as Latin-1 whatever the character set: any bytes read back the same.
_ANY_BYTES = frozenset({"AE", "AS", "CS", "DA", "DT", "TM", "UI", "UR", "DS", "IS"})


@dataclass
class Context:
    profile: DeidProfile
    p: Pseudonymizer
    shift: DateTimeShift  # the patient's offset for every date and time (modified dates)
    scrubber: Scrubber
    encoder: Encoder  # the output's encoding
    walk_items: Callable  # (items: list[Items], ctx, dummy) -> list[list[Out]]: imaging.deid.walk.walk_items
    dataset: Items | None = None  # the dataset being walked (for a date's paired time)
    syntax: TransferSyntax | None = None  # the output's transfer syntax
    moved: dict = field(default_factory=dict)  # dates and times already shifted in this file (they repeat per frame)
    uids: dict = field(default_factory=dict)  # UIDs already mapped in this file


def copy(el: Element, ctx: Context) -> tuple:
    """The element unchanged: its own bytes (padded to even length as a writer pads), or, when they cannot be
    published as they are (only its decoded value is known), its value encoded again."""
    raw, vr = el.raw, el.vr
    if raw is not None:
        if " or " in vr:  # an ambiguous VR (implicit VR files): written without a VR, the bytes are the value
            if ctx.encoder.implicit and not len(raw) % 2:
                return (el.tag, vr, raw)
        elif vr in _UNITS:  # whole numbers (cut ones: decoded below, which refuses them)
            if not len(raw) % _UNITS[vr]:
                return (el.tag, vr, raw)
        elif vr in BYTES or vr in _ANY_BYTES or raw.isascii() and b"\x1b" not in raw:
            return ctx.encoder.value(el.tag, vr, raw)
    return _again(el, ctx)


def _again(el: Element, ctx: Context) -> tuple:
    """The decoded element written anew (the reference engine's copy)."""
    elem = el.decoded
    value = elem.value
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        value = list(value)
    return ctx.encoder.element(DataElement(elem.tag, elem.VR, value, is_undefined_length=elem.is_undefined_length))


def _empty(el: Element, vr: str, ctx: Context) -> tuple:
    return ctx.encoder.empty(el.tag, vr)


def _new_text(el: Element, vr: str, values: list[str], ctx: Context) -> tuple:
    return ctx.encoder.text(el.tag, vr, values)


def _per_value(el: Element, vr: str, fn: Callable[[str], str], ctx: Context) -> tuple:
    """Apply a text function to every value; values pydicom could not decode are dropped.

    A value cleaned to nothing keeps its place (empty) while another value survives, so the element
    keeps its multiplicity: ImageType's third value stays the third when a name equal to it is
    scrubbed from the second (`DERIVED\\PRIMARY\\\\RCBF`, never `DERIVED\\PRIMARY\\RCBF`)."""
    values = el.strings()
    out = [fn(v) for v in values]
    if not any(out):
        return _empty(el, vr, ctx)
    if out == values and vr == el.vr:
        return copy(el, ctx)  # nothing to remove: the element as it was
    return _new_text(el, vr, out, ctx)


def _paired_time(el: Element, ctx: Context, count: int) -> list[str] | None:
    """The values of a DA's paired TM in the same dataset (StudyTime for StudyDate...), if usable."""
    partner = DATE_TIME_PAIRS.get(el.tag)
    found = ctx.dataset.get(partner) if partner is not None and ctx.dataset is not None else None
    if found is None:
        return None
    try:
        times = [str(v) for v in found.values()]
    except Exception:  # noqa: BLE001 - an unreadable time: the date is shifted on its own
        return None
    return times if len(times) == count else None


def _shift_values(el: Element, vr: str, ctx: Context) -> list[str] | None:
    """Every value of a DA/DT/TM moved by the patient's offset; None if any cannot be (never keep it).

    A DA whose dataset holds its paired TM is shifted as one date-time with it (timeshift.py).
    """
    every = el.values()
    items = [str(v) for v in every if not isinstance(v, (bytes, bytearray))]
    if len(items) != len(every):
        return None
    if vr == "DA":
        times = _paired_time(el, ctx, len(items))
        if times is not None:
            out = [_moved(ctx, shift_paired_date, d, t) for d, t in zip(items, times)]
        else:
            out = [_moved(ctx, shift_date, d) for d in items]
    elif vr == "DT":
        out = [_moved(ctx, shift_datetime, v) for v in items]
    else:
        out = [_moved(ctx, shift_time, v) for v in items]
    if any(v is None for v in out):
        return None
    return out


def _moved(ctx: Context, shift: Callable, *values: str) -> str | None:
    """`shift(*values, ctx.shift)`, once per value in a file."""
    key = (shift, *values)
    if key not in ctx.moved:
        ctx.moved[key] = shift(*values, ctx.shift)
    return ctx.moved[key]


def _uids(el: Element, ctx: Context) -> tuple:
    """Every UID of the element mapped (registered UIDs kept, the rest replaced by their pseudonyms)."""
    out = [_uid(v, ctx) for v in el.values()]
    if not out:
        return _empty(el, "UI", ctx)
    return _new_text(el, "UI", out, ctx)


def _uid(value, ctx: Context) -> str:
    """`map_uid`, once per UID in a file (a file names its own study, series and instances again and again)."""
    found = ctx.uids.get(value)
    if found is None:
        found = ctx.uids[value] = map_uid(value, ctx.p)
    return found


def _dummy(el: Element, vr: str, ctx: Context, count: int = 1) -> tuple:
    """`values.dummy(vr, count)`: a non-zero-length value carrying nothing (numbers: `count` zeros)."""
    if vr in BINARY_NUMBERS:
        return ctx.encoder.value(el.tag, vr, b"\0" * (_UNITS[vr] * max(count, 1)))
    if vr in NUMBER_STRINGS:
        return _new_text(el, vr, ["0"] * max(count, 1), ctx)
    if vr in BYTES:
        return ctx.encoder.value(el.tag, vr, DUMMY_BYTES)
    return _new_text(el, vr, [dummy_value(vr)], ctx)


# Number strings of plain digits (no exponent, so finite): every value a number pydicom reads, kept as they are.
_PLAIN_NUMBERS = {
    "DS": re.compile(rb" *[+-]?(?:\d+(?:\.\d*)?|\.\d+) *(?:\\ *[+-]?(?:\d+(?:\.\d*)?|\.\d+) *)*[ \x00]*"),
    "IS": re.compile(rb" *[+-]?\d+ *(?:\\ *[+-]?\d+ *)*[ \x00]*"),
}


def _numbers(el: Element, ctx: Context, vr: str) -> tuple:
    """A number string kept when every value is a finite number, else emptied."""
    raw = el.raw
    if raw is not None and len(raw) < 256 and vr == el.vr and _PLAIN_NUMBERS[vr].fullmatch(raw):
        return ctx.encoder.value(el.tag, vr, raw)
    return copy(el, ctx) if valid_number_string(vr, el.values()) else _empty(el, vr, ctx)


# ------------------------------------------------------------------------------------- the table's decisions
#
# Which rule an element gets depends only on its tag, its VR and whether it sits in a sequence the table
# replaces with dummies: `decide` works it out once per profile and (tag, VR, dummy) from Table E.1-1 as the
# profile resolved it, the allow-list and the rule by VR, and the walk keeps the answer (`DeidProfile.plans`).
# An answer is a function (element, context) -> published element, or None (removed).

Rule = Callable[[Element, Context], tuple | None]


def decide(profile: DeidProfile, tag: int, vr: str, dummy: bool) -> Rule | None:
    """The rule for a public element (private ones: imaging.deid.walk)."""
    vr = normalise(vr)
    group = tag >> 16
    if 0x5000 <= group <= 0x50FF:  # curves: the whole group follows (50xx,xxxx)
        return None if profile.curves == REMOVE else _graphic(profile, tag, vr)
    if 0x6000 <= group <= 0x60FF:  # overlays: without Clean Graphics the whole group goes
        if profile.overlay_data == REMOVE:
            return None
        if tag & 0xFFFF == 0x4000:
            return _table(profile, tag, vr, profile.overlay_comments, dummy)
        return _graphic(profile, tag, vr)
    action = profile.actions.get(tag)
    if action is not None:
        return _table(profile, tag, vr, action, dummy)
    return _not_in_table(profile, tag, vr, dummy)


def _table(profile: DeidProfile, tag: int, vr: str, action: str, dummy: bool) -> Rule | None:
    """A resolved Table E.1-1 action (X Z D K C U) on one VR."""
    if action == REMOVE:
        return None
    if vr == "SQ":
        if action == EMPTY:
            return _empty_sequence
        # D keeps the items' structure but replaces every kept text in them (dummy mode);
        # K, C and U clean the items with the same rules as everywhere else.
        return _walked_dummy if dummy or action == DUMMY else _walked
    if action == EMPTY:
        return partial(_emptied, vr=vr)
    if action == DUMMY:
        if vr == "UI":
            return _uids
        return partial(_dummied, vr=vr, counted=vr in BINARY_NUMBERS or vr in NUMBER_STRINGS)
    if action == KEEP:
        return partial(_numbers, vr=vr) if vr in NUMBER_STRINGS else copy  # kept numbers must be numbers
    if action == UID:
        return _uids if vr == "UI" else partial(_dummied, vr=vr, counted=False)  # a U on a non-UID: replaced
    if action == CLEAN:
        return _clean(profile, tag, vr)
    raise ValueError("unknown action")


def _clean(profile: DeidProfile, tag: int, vr: str) -> Rule | None:
    """C: keep the meaning, remove what identifies."""
    if vr in DATES:
        return _dated(profile, vr, otherwise=partial(_emptied, vr=vr))
    if vr == "TM":  # no date option gives C to a time; if one did, the basic action applies
        return _dated(profile, "TM", otherwise=_table(profile, tag, vr, profile.basic.get(tag, REMOVE), True))
    if vr == "UI":
        return _uids
    if vr == "AE":  # a consistent token per AE title: which device, not whose
        return _tokened
    if vr in TEXT or vr == "CS":
        return partial(_scrubbed, vr=vr, how=Scrubber.descriptor)
    if vr in BINARY_NUMBERS:
        return copy
    if vr in NUMBER_STRINGS:
        return partial(_numbers, vr=vr)
    # Bytes cannot be cleaned (e.g. a timestamp or a maker note): fall back to the basic action.
    return _table(profile, tag, vr, profile.basic.get(tag, REMOVE), dummy=True)


def _not_in_table(profile: DeidProfile, tag: int, vr: str, dummy: bool) -> Rule | None:
    """The rule for attributes Table E.1-1 does not list (see docs/deidentification.md)."""
    mode = profile.allowlist.get(tag)
    if mode is not None:
        if vr in BYTES:
            return copy  # pixel data and its LUTs: raw bytes, never decoded
        if vr in TEXT or vr == "CS":
            if dummy:  # inside a sequence the table replaces with dummies (e.g. institution codes)
                return partial(_dummied, vr=vr, counted=False)
            if vr == "CS":
                return partial(_scrubbed, vr=vr, how=Scrubber.code)
            return partial(_scrubbed, vr=vr, how=Scrubber.descriptor if mode == "descriptor" else Scrubber.terms)
        return copy
    if vr == "SQ":
        return _walked_dummy if dummy else _walked
    if vr in BINARY_NUMBERS:
        return copy
    if vr in NUMBER_STRINGS:
        return partial(_numbers, vr=vr)
    if vr == "CS":
        return partial(_scrubbed, vr=vr, how=Scrubber.code)
    if vr == "UI":
        return _uids
    if vr in DATES:
        return _dated(profile, vr, otherwise=partial(_emptied, vr=vr))
    if vr == "TM":
        return _dated(profile, "TM", otherwise=partial(_emptied, vr=vr))
    if vr in TEXT:
        return partial(_emptied, vr=vr)  # emptied, not removed: keeps Type 2 attributes present
    return None  # bytes, UN and anything unknown


def _graphic(profile: DeidProfile, tag: int, vr: str) -> Rule | None:
    """Curve/overlay elements under Clean Graphics: bitmaps and numbers kept, text cleaned."""
    if vr in BYTES:
        return copy
    if vr in TEXT:
        return partial(_scrubbed, vr=vr, how=Scrubber.descriptor)
    return _not_in_table(profile, tag, vr, dummy=False)


def _dated(profile: DeidProfile, vr: str, otherwise: Rule | None) -> Rule | None:
    """Dates and times by the date option: kept (full), moved by the patient's offset (modified), else
    `otherwise` (dates emptied; a time as its row says)."""
    if profile.dates == "full":
        return copy
    if profile.dates == "modified":
        return partial(_shifted, vr=vr)
    return otherwise


# --------------------------------------------------------------------------------------------- the rules

def _walked(el: Element, ctx: Context) -> tuple:
    return ctx.encoder.sequence(el.tag, ctx.walk_items(el.items(), ctx, False))


def _walked_dummy(el: Element, ctx: Context) -> tuple:
    return ctx.encoder.sequence(el.tag, ctx.walk_items(el.items(), ctx, True))


def _empty_sequence(el: Element, ctx: Context) -> tuple:
    return ctx.encoder.sequence(el.tag, [])


def _emptied(el: Element, ctx: Context, vr: str) -> tuple:
    return ctx.encoder.empty(el.tag, vr)


def _dummied(el: Element, ctx: Context, vr: str, counted: bool) -> tuple:
    return _dummy(el, vr, ctx, el.count() if counted else 1)


def _shifted(el: Element, ctx: Context, vr: str) -> tuple:
    shifted = _shift_values(el, vr, ctx)
    return _empty(el, vr, ctx) if shifted is None else _new_text(el, vr, shifted, ctx)


def _scrubbed(el: Element, ctx: Context, vr: str, how: Callable) -> tuple:
    raw = el.raw
    if raw is not None and vr == el.vr and how is not Scrubber.descriptor and raw.isascii() and b"\x1b" not in raw:
        text = raw.decode("ascii")
        if text.strip("\\ \x00") and ctx.scrubber.holds_none(text, code=how is Scrubber.code):
            return ctx.encoder.value(el.tag, vr, raw)  # no term in any value, and a value left: as it was
    return _per_value(el, vr, partial(how, ctx.scrubber), ctx)


def _tokened(el: Element, ctx: Context) -> tuple:
    return _per_value(el, "AE", lambda v: ctx.p.token("ae", v.strip(), length=16).upper(), ctx)
