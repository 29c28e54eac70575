"""The reference engine: imaging/deid/engine.py as it was before the raw-element engine (issue 48), kept in the
tests only. It reads every element through pydicom's object model (each value converted, visited, encoded
again); tests/test_deid_differential.py holds the shipped engine's outputs equal to its outputs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pydicom.datadict import keyword_for_tag
from pydicom.dataelem import DataElement
from pydicom.dataset import Dataset

from imaging.pseudonym import Pseudonymizer

from imaging.deid.burned_in import check as check_burned_in
from imaging.deid.meta import build as build_meta, transfer_syntax
from .passthrough import ready_to_write, source_element
from imaging.deid.pixels import check_length
from imaging.deid.private import creator_of, safe_element
from .rules import graphic, not_in_table, table_action
from imaging.deid.declare import declare, screened
from imaging.deid.errors import NotDeidentifiable
from imaging.deid.pixel_text import TEXT_FOUND, PixelTextDetector, image_type, sample_frames, shared_detector
from imaging.deid.profile import REMOVE, DeidProfile, load_profile
from imaging.deid.quiet import quiet
from .rules import Context
from imaging.deid.scrub import Scrubber, collect_terms

MEDIA_DIRECTORY = "1.2.840.10008.1.3.10"  # DICOMDIR: byte offsets and patient records, not an image

# What the text check did to a published image (the manifest's `pixel_text` column).
NOT_READ, CLEAN, REDACTED = "not read", "clean", "redacted"


@dataclass
class Deidentified:
    """A de-identified dataset and what its pixels went through: the text check's outcome (`NOT_READ`,
    `CLEAN`, `REDACTED`) and, when redacted, the redaction (imaging.deid.redact.Redaction: the covered
    boxes, and for a streamed file the redacted pixel data that `part10.write_image` writes)."""

    dataset: Dataset
    pixel_text: str
    redaction: object | None = None

    def close(self) -> None:
        if self.redaction is not None:
            self.redaction.close()


def deidentify(
    ds: Dataset,
    *,
    pseudonymizer: Pseudonymizer,
    namespace: str | None = None,
    profile: DeidProfile | None = None,
    extra_identifiers: Iterable[str] = (),
    pixel_text: PixelTextDetector | None = None,
    issuer_default: str = "NHS",
    streamed=None,
) -> Dataset:
    """A new, de-identified dataset: `deidentify_image`'s, without what the pixels went through. A redacted
    file read whole carries its redacted pixel data; a streamed file that is redacted is refused here
    (NotDeidentifiable): its new pixel data is in `deidentify_image`'s result, for `part10.write_image`."""
    result = deidentify_image(ds, pseudonymizer=pseudonymizer, namespace=namespace, profile=profile,
                              extra_identifiers=extra_identifiers, pixel_text=pixel_text,
                              issuer_default=issuer_default, streamed=streamed)
    if result.redaction is not None and streamed is not None:
        result.close()
        raise NotDeidentifiable("redacted pixel data not written (use deidentify_image)")
    return result.dataset


def deidentify_image(
    ds: Dataset,
    *,
    pseudonymizer: Pseudonymizer,
    namespace: str | None = None,
    profile: DeidProfile | None = None,
    extra_identifiers: Iterable[str] = (),
    pixel_text: PixelTextDetector | None = None,
    issuer_default: str = "NHS",
    streamed=None,
) -> Deidentified:
    """A new, de-identified dataset (with file meta) for `ds`, or NotDeidentifiable.

    `namespace`: the issuer namespace of the file's PatientID, resolved by the caller from
    the site's configuration (`imaging.issuers.IssuerPolicy.resolve`); the patient's
    pseudonym and date/time offset are keyed on (namespace, PatientID), and the file's own
    IssuerOfPatientID is ignored. Transitional: without it the engine falls back to the old
    rule (IssuerOfPatientID, else `issuer_default`), which can split a patient; callers
    should always pass it.

    `pixel_text`: the burned-in text detector, made once per process or partition and
    reused. None uses the process's shared detector with the default settings: the OCR
    check is never skipped.

    `streamed`: the file `ds` was read from when its pixel data were left there
    (imaging.deid.part10.SourceImage: `ds` is then its header, the pixel data element located,
    never loaded). The returned dataset then has no pixel data either: `part10.write_image` writes
    it around the source's pixel bytes.

    Burned-in text found in an image whose type says `on_text: redact` (the detector's settings) is covered
    and proven gone (imaging.deid.redact) instead of quarantining the file: a file read whole gets its new
    pixel data in the returned dataset; a streamed one's are in the result's `redaction`.

    `ds` is not modified. Any unexpected error becomes NotDeidentifiable naming only the
    exception's type: its message could quote a value from the file.
    """
    failure = None
    with quiet():
        try:
            return _deidentify(ds, pseudonymizer, profile or load_profile(), namespace, issuer_default,
                               extra_identifiers, pixel_text, streamed)
        except NotDeidentifiable:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad file must never stop a batch
            failure = type(exc).__name__
    raise NotDeidentifiable(f"de-identification failed: {failure}")


def _text(ds: Dataset, keyword: str) -> str:
    return str(ds.get(keyword, "") or "").strip().rstrip("\x00")


def _deidentify(ds, p, profile, namespace, issuer_default, extra_identifiers, pixel_text, streamed) -> Deidentified:
    sop_class, sop_instance = _text(ds, "SOPClassUID"), _text(ds, "SOPInstanceUID")
    reason = None
    if not sop_class:
        reason = "missing SOPClassUID"
    elif not sop_instance:
        reason = "missing SOPInstanceUID"
    elif sop_class == MEDIA_DIRECTORY:
        reason = "media directory (DICOMDIR)"
    elif not _text(ds, "PatientID"):
        reason = "missing PatientID"
    if reason:
        raise NotDeidentifiable(reason)
    located = streamed.pixels if streamed is not None else None
    read_pixels = check_burned_in(ds, sop_class, has_pixels=True if located is not None else None)
    syntax = transfer_syntax(ds)
    check_length(ds, syntax, located)
    redaction, screen = None, None
    if read_pixels:  # before the walk: a file with text costs no more than its OCR
        detector = pixel_text if pixel_text is not None else shared_detector()
        frames = streamed.frames() if streamed is not None else None
        settings = getattr(detector, "settings", None)
        redact = settings is not None and settings.on_text_for(image_type(ds)) == "redact"
        result = detector.check(ds, syntax, frames=frames, collect=True) if redact else \
            detector.check(ds, syntax, frames=frames)
        if result.found:
            if not redact:
                raise NotDeidentifiable(TEXT_FOUND)
            redaction = _redacted(ds, syntax, streamed, detector, result)
        screen = _screen_lines(detector, result)
    try:
        out = _published(ds, p, profile, namespace, issuer_default, extra_identifiers, syntax, read_pixels,
                         redaction, streamed, screen)
    except BaseException:
        if redaction is not None:
            redaction.close()
        raise
    if redaction is not None and streamed is None:
        redaction.close()  # read whole: the pixel data is in `out`
        return Deidentified(out, REDACTED, redaction)
    return Deidentified(out, REDACTED if redaction is not None else CLEAN if read_pixels else NOT_READ, redaction)


def _redacted(ds, syntax, streamed, detector, result):
    """The text found covered and proven gone (imaging.deid.redact), from the streamed file or `ds`."""
    from imaging.deid.redact import PixelSource, redact

    source = PixelSource.of_image(streamed) if streamed is not None else PixelSource.of_dataset(ds, syntax)
    kind = detector.settings.for_type(image_type(ds))
    sampled = tuple(sample_frames(source.count, kind.frame_sample)) if source.count > 1 else ()
    red = redact(ds, source, result.text, detector, sampled, kind=kind)
    red.source = source
    return red


def _screen_lines(detector, result) -> list[str] | None:
    """What the method text says of the screen (imaging.deid.declare.screened): its readers and the frames read."""
    if not getattr(result, "method", None):
        return None
    return screened(list(result.method), result.frames, result.read, result.overlay)


def _published(ds, p, profile, namespace, issuer_default, extra_identifiers, syntax, read_pixels, redaction,
               streamed, screen=None) -> Dataset:

    patient_id = _text(ds, "PatientID")
    issuer = namespace.strip() if namespace and namespace.strip() else _text(ds, "IssuerOfPatientID") or issuer_default
    pseudonym = p.patient_id(issuer, patient_id)
    ctx = Context(
        profile=profile,
        p=p,
        shift=p.datetime_shift(issuer, patient_id),
        scrubber=Scrubber(collect_terms(ds, extra_identifiers)),
        little_endian=syntax.is_little_endian,
        walk_items=None,
        syntax=syntax,
    )
    ctx.walk_items = lambda items, dummy: [_walk(item, ctx, dummy) for item in items]

    out = _walk(ds, ctx, dummy=False)
    # Replaces the table's Z/D: one stable pseudonym per patient. New elements with the dictionary's
    # VR: the walk keeps a source's VR, and a file may say PatientName is FD.
    out.add(DataElement(0x00100020, "LO", pseudonym))
    out.add(DataElement(0x00100010, "PN", pseudonym))
    _check_identity(out)
    if read_pixels:
        out.BurnedInAnnotation = "NO"  # checked by OCR (and, if redacted, read again clean), not taken from the device
    declare(out, profile, pixels_read=read_pixels, redacted=redaction.method_lines() if redaction else None,
            screen=screen)
    if redaction is not None:
        redaction.apply_header(out)
        syntax = redaction.syntax
        if streamed is None:  # read whole: the redacted pixel data goes into the dataset
            from imaging.deid.redact import pixel_vr, value_bytes

            value = value_bytes(redaction, redaction.source)
            vr = pixel_vr(redaction, out["PixelData"].VR if "PixelData" in out else None) or "OB"
            out.add_new(0x7FE00010, vr, value)
    out.file_meta = build_meta(out, syntax)
    ready_to_write(out, syntax)
    return out


def _check_identity(out: Dataset) -> None:
    """The de-identified instance is addressable: its SOP Class and Instance UIDs (and its Study and
    Series UIDs, when present) are each one UID, digits and dots, at most 64 characters. A
    source whose element of one of these had another VR (the walk then writes a dummy, "0") or
    several values is quarantined, so nothing is published under a name that is not a UID.
    """
    for keyword in ("SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID"):
        elem = out[keyword] if keyword in out else None
        if elem is None and keyword in ("StudyInstanceUID", "SeriesInstanceUID"):
            continue  # absent in the source (the index quarantines that; the engine does not require it)
        value = elem.value if elem is not None and elem.VR == "UI" else None
        if not isinstance(value, str) or len(value) > 64 or not _UID.fullmatch(value):
            raise NotDeidentifiable(f"unreadable {keyword}")


_UID = re.compile(r"[0-9]+(\.[0-9]+)+")  # digits and dots (as the index requires); at most 64 characters


def _walk(src: Dataset, ctx: Context, dummy: bool) -> Dataset:
    """The de-identified copy of one dataset (the top level or a sequence item)."""
    out = Dataset()
    outer, ctx.dataset = ctx.dataset, src  # a date's paired time is looked up in its own dataset
    try:
        _walk_elements(src, out, ctx, dummy)
    finally:
        ctx.dataset = outer
    return out


def _walk_elements(src: Dataset, out: Dataset, ctx: Context, dummy: bool) -> None:
    blocks: dict[int, str] = {}  # private creator tag -> creator, for blocks that kept an element
    for tag in sorted(src.keys()):
        group, element = tag >> 16, tag & 0xFFFF
        if element == 0 or group in (0x0000, 0x0002):
            continue  # group lengths (recomputed if needed), command and file meta groups
        if group % 2 and element <= 0x0FFF:
            continue  # private creators (added back below if needed) and reserved elements
        try:
            new = _element(src, source_element(src, tag, ctx.syntax), ctx, dummy)
            failed = False
        except NotDeidentifiable:
            raise
        except Exception:  # noqa: BLE001 - a value that cannot be read or rebuilt is dropped, never kept
            new, failed = None, True
        if failed and tag in ctx.profile.allowlist:  # e.g. the image itself: do not publish half a file
            _raise_unreadable(tag)
        if new is not None:
            out.add(new)
            if group % 2:
                blocks[(group << 16) | (element >> 8)] = creator_of(src, group, element)
    for tag, creator in blocks.items():
        out.add(DataElement(tag, "LO", creator))


def _raise_unreadable(tag: int) -> None:
    raise NotDeidentifiable(f"unreadable {keyword_for_tag(tag) or 'attribute'}")


def _element(src: Dataset, elem: DataElement, ctx: Context, dummy: bool) -> DataElement | None:
    """Route one element to its rule."""
    profile = ctx.profile
    tag = int(elem.tag)
    group, element = tag >> 16, tag & 0xFFFF
    if group % 2:
        return safe_element(src, elem, profile, ctx.little_endian)
    if 0x5000 <= group <= 0x50FF:  # curves: the whole group follows (50xx,xxxx)
        return None if profile.curves == REMOVE else graphic(elem, ctx)
    if 0x6000 <= group <= 0x60FF:  # overlays: without Clean Graphics the whole group goes
        if profile.overlay_data == REMOVE:
            return None
        if element == 0x4000:
            return table_action(elem, profile.overlay_comments, ctx, dummy)
        return graphic(elem, ctx)
    action = profile.actions.get(tag)
    if action is not None:
        return table_action(elem, action, ctx, dummy)
    return not_in_table(elem, ctx, dummy)
