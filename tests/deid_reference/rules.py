"""What happens to one (non-private) element: the table's action, or the rule for the rest.

Every function returns the DataElement to publish or None (removed). Sequences are handed
back to the walk (`Context.walk_items`), so the same rules apply at every depth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydicom.dataelem import DataElement
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.uid import UID as TransferSyntax

from imaging.pseudonym import DateTimeShift, Pseudonymizer

from imaging.deid.timeshift import DATE_TIME_PAIRS, shift_date, shift_datetime, shift_paired_date, shift_time
from imaging.deid.uids import map_values
from imaging.deid.values import as_list, dummy as dummy_value, empty as empty_value, valid_number_string
from .passthrough import Unconverted
from imaging.deid.profile import CLEAN, DUMMY, EMPTY, KEEP, REMOVE, UID, DeidProfile
from imaging.deid.scrub import Scrubber
from imaging.deid.vr import BINARY_NUMBERS, BYTES, DATES, NUMBER_STRINGS, TEXT, normalise


@dataclass
class Context:
    profile: DeidProfile
    p: Pseudonymizer
    shift: DateTimeShift  # the patient's offset for every date and time (modified dates)
    scrubber: Scrubber
    little_endian: bool
    walk_items: Callable  # (items, dummy) -> list[Dataset]
    dataset: Dataset | None = None  # the source dataset being walked (for a date's paired time)
    syntax: TransferSyntax | None = None  # the output's transfer syntax (raw elements in it are copied as they are)


def _new(elem: DataElement, value, vr: str | None = None) -> DataElement:
    return DataElement(elem.tag, vr or elem.VR, value)


def _copy(elem: DataElement | Unconverted):
    """The element unchanged (a new object: the source is never modified); an undecoded binary
    element is published as the file's bytes (passthrough.py)."""
    if type(elem) is Unconverted:
        return elem.raw
    value = elem.value
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        value = list(value)
    return DataElement(elem.tag, elem.VR, value, is_undefined_length=elem.is_undefined_length)


def _per_value(elem: DataElement, vr: str, fn: Callable[[str], str]) -> DataElement:
    """Apply a text function to every value; values pydicom could not decode are dropped.

    A value cleaned to nothing keeps its place (empty) while another value survives, so the element
    keeps its multiplicity: ImageType's third value stays the third when a name equal to it is
    scrubbed from the second (`DERIVED\\PRIMARY\\\\RCBF`, never `DERIVED\\PRIMARY\\RCBF`)."""
    out = [fn(str(v)) for v in as_list(elem.value) if not isinstance(v, (bytes, bytearray))]
    if not any(out):
        return _new(elem, empty_value(vr), vr)
    return _new(elem, out[0] if len(out) == 1 else out, vr)


def _dates(elem: DataElement, vr: str, ctx: Context) -> DataElement:
    """Dates by the date option: shifted (modified), kept (full) or emptied (none)."""
    if ctx.profile.dates == "full":
        return _copy(elem)
    if ctx.profile.dates == "modified":
        shifted = _shift_values(elem, vr, ctx)
        return _new(elem, empty_value(vr) if shifted is None else shifted, vr)
    return _new(elem, empty_value(vr), vr)


def _times(elem: DataElement, ctx: Context, otherwise: Callable[[], DataElement | None]) -> DataElement | None:
    """Times: moved with the patient's offset (modified dates), kept (full dates), else `otherwise()`."""
    if ctx.profile.dates == "full":
        return _copy(elem)
    if ctx.profile.dates == "modified":
        shifted = _shift_values(elem, "TM", ctx)
        return _new(elem, empty_value("TM") if shifted is None else shifted, "TM")
    return otherwise()


def _paired_time(elem: DataElement, ctx: Context, count: int) -> list[str] | None:
    """The values of a DA's paired TM in the same dataset (StudyTime for StudyDate...), if usable."""
    partner = DATE_TIME_PAIRS.get(int(elem.tag))
    if partner is None or ctx.dataset is None or partner not in ctx.dataset:
        return None
    try:
        times = [str(v) for v in as_list(ctx.dataset[partner].value)]
    except Exception:  # noqa: BLE001 - an unreadable time: the date is shifted on its own
        return None
    return times if len(times) == count else None


def _shift_values(elem: DataElement, vr: str, ctx: Context):
    """Every value of a DA/DT/TM moved by the patient's offset; None if any cannot be (never keep it).

    A DA whose dataset holds its paired TM is shifted as one date-time with it (timeshift.py).
    """
    items = [str(v) for v in as_list(elem.value) if not isinstance(v, (bytes, bytearray))]
    if len(items) != len(as_list(elem.value)):
        return None
    if vr == "DA":
        times = _paired_time(elem, ctx, len(items))
        if times is not None:
            out = [shift_paired_date(d, t, ctx.shift) for d, t in zip(items, times)]
        else:
            out = [shift_date(d, ctx.shift) for d in items]
    elif vr == "DT":
        out = [shift_datetime(v, ctx.shift) for v in items]
    else:
        out = [shift_time(v, ctx.shift) for v in items]
    if not out:
        return ""
    if any(v is None for v in out):
        return None
    return out[0] if len(out) == 1 else out


def _sequence(elem: DataElement, ctx: Context, dummy: bool) -> DataElement:
    return DataElement(elem.tag, "SQ", Sequence(ctx.walk_items(elem.value or [], dummy)))


def table_action(elem: DataElement, action: str, ctx: Context, dummy: bool) -> DataElement | None:
    """Apply a resolved Table E.1-1 action (X Z D K C U) to one element."""
    vr = normalise(elem.VR)
    if action == REMOVE:
        return None
    if vr == "SQ":
        if action == EMPTY:
            return DataElement(elem.tag, "SQ", Sequence())
        # D keeps the items' structure but replaces every kept text in them (dummy mode);
        # K, C and U clean the items with the same rules as everywhere else.
        return _sequence(elem, ctx, dummy or action == DUMMY)
    if action == EMPTY:
        return _new(elem, empty_value(vr), vr)
    if action == DUMMY:
        if vr == "UI":
            return _new(elem, map_values(elem.value, ctx.p), vr)
        return _new(elem, dummy_value(vr, len(as_list(elem.value))), vr)
    if action == KEEP:
        if vr in NUMBER_STRINGS and not valid_number_string(vr, elem.value):
            return _new(elem, empty_value(vr), vr)  # kept numbers must be numbers
        return _copy(elem)
    if action == UID:
        if vr == "UI":
            return _new(elem, map_values(elem.value, ctx.p), vr)
        return _new(elem, dummy_value(vr), vr)  # a U on a non-UID: replace, never keep
    if action == CLEAN:
        return _clean(elem, vr, ctx)
    raise ValueError("unknown action")


def _clean(elem: DataElement, vr: str, ctx: Context) -> DataElement | None:
    """C: keep the meaning, remove what identifies."""
    if vr in DATES:
        return _dates(elem, vr, ctx)
    if vr == "TM":  # no date option gives C to a time; if one did, the basic action applies
        return _times(elem, ctx, lambda: table_action(elem, ctx.profile.basic.get(int(elem.tag), REMOVE), ctx, True))
    if vr == "UI":
        return _new(elem, map_values(elem.value, ctx.p), vr)
    if vr == "AE":  # a consistent token per AE title: which device, not whose
        return _per_value(elem, vr, lambda v: ctx.p.token("ae", v.strip(), length=16).upper())
    if vr in TEXT or vr == "CS":
        return _per_value(elem, vr, ctx.scrubber.descriptor)
    if vr in BINARY_NUMBERS:
        return _copy(elem)
    if vr in NUMBER_STRINGS:
        return _copy(elem) if valid_number_string(vr, elem.value) else _new(elem, empty_value(vr), vr)
    # Bytes cannot be cleaned (e.g. a timestamp or a maker note): fall back to the basic action.
    basic = ctx.profile.basic.get(int(elem.tag), REMOVE)
    return table_action(elem, basic, ctx, dummy=True)


def not_in_table(elem: DataElement, ctx: Context, dummy: bool) -> DataElement | None:
    """The rule for attributes Table E.1-1 does not list (see docs/deidentification.md)."""
    vr = normalise(elem.VR)
    mode = ctx.profile.allowlist.get(int(elem.tag))
    if mode is not None:
        if vr in BYTES:
            return _copy(elem)  # pixel data and its LUTs: raw bytes, never decoded
        if vr in TEXT or vr == "CS":
            if dummy:  # inside a sequence the table replaces with dummies (e.g. institution codes)
                return _new(elem, dummy_value(vr), vr)
            if vr == "CS":
                return _per_value(elem, vr, ctx.scrubber.code)
            scrub = ctx.scrubber.descriptor if mode == "descriptor" else ctx.scrubber.terms
            return _per_value(elem, vr, scrub)
        return _copy(elem)
    if vr == "SQ":
        return _sequence(elem, ctx, dummy)
    if vr in BINARY_NUMBERS:
        return _copy(elem)
    if vr in NUMBER_STRINGS:
        return _copy(elem) if valid_number_string(vr, elem.value) else _new(elem, empty_value(vr), vr)
    if vr == "CS":
        return _per_value(elem, vr, ctx.scrubber.code)
    if vr == "UI":
        return _new(elem, map_values(elem.value, ctx.p), vr)
    if vr in DATES:
        return _dates(elem, vr, ctx)
    if vr == "TM":
        return _times(elem, ctx, lambda: _new(elem, empty_value(vr), vr))
    if vr in TEXT:
        return _new(elem, empty_value(vr), vr)  # emptied, not removed: keeps Type 2 attributes present
    return None  # bytes, UN and anything unknown


def graphic(elem: DataElement, ctx: Context) -> DataElement | None:
    """Curve/overlay elements under Clean Graphics: bitmaps and numbers kept, text cleaned."""
    vr = normalise(elem.VR)
    if vr in BYTES:
        return _copy(elem)
    if vr in TEXT:
        return _per_value(elem, vr, ctx.scrubber.descriptor)
    return not_in_table(elem, ctx, dummy=False)
