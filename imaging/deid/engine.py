"""The engine: a file's checks, its text check, then its elements walked and the published ones handed to the writer.

    result = deidentify_image(ds, pseudonymizer=p, namespace="NHS", profile=profile, pixel_text=detector,
                              streamed=image)      # image: imaging.deid.part10.SourceImage (or None: `ds` whole)
    writer.write(target, result.published)          # imaging.deid.writer: the one writer

Top-down, per file: the quarantine checks on the header (identity, burned-in flags, pixel lengths), the
burned-in text check (imaging.deid.pixel_text, and a redaction when the image type says so), then the walk
(imaging.deid.walk: every element, at every depth, by Table E.1-1 and its options), then what every output
carries (the patient's pseudonym, the declarations, a redaction's pixel attributes, the file meta). Elements
kept as they were are published as their own bytes; only what the profile changes is decoded and encoded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from pydicom.dataset import Dataset

from imaging.pseudonym import Pseudonymizer

from .burned_in import check as check_burned_in
from .declare import declare, screened
from .element import Header, Items
from .errors import NotDeidentifiable
from .meta import transfer_syntax
from .pixel_text import TEXT_FOUND, PixelTextDetector, image_type, sample_frames, shared_detector
from .pixels import check_length
from .profile import DeidProfile, load_profile
from .quiet import quiet
from .rules import Context
from .scrub import Scrubber, element_terms
from .walk import walk, walk_items
from .writer import PIXELS, Encoder, Published, file_meta

MEDIA_DIRECTORY = "1.2.840.10008.1.3.10"  # DICOMDIR: byte offsets and patient records, not an image

# What the text check did to a published image (the manifest's `pixel_text` column).
NOT_READ, CLEAN, REDACTED = "not read", "clean", "redacted"


@dataclass
class Deidentified:
    """A de-identified file: what the writer writes (`published`), the same as a pydicom dataset (`dataset`, its
    values decoded only when read; the pixel data in it when the file was read whole), and what its pixels went
    through: the text check's outcome (`NOT_READ`, `CLEAN`, `REDACTED`) and, when redacted, the redaction
    (imaging.deid.redact.Redaction: the covered boxes, and for a streamed file the redacted pixel data)."""

    published: Published
    pixel_text: str = NOT_READ
    redaction: object | None = None

    @cached_property
    def dataset(self) -> Dataset:
        return self.published.dataset()

    @cached_property
    def values(self):
        """The published top level's values by keyword, read without pydicom where they can be (`Header`)."""
        return self.published.header()

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
    (NotDeidentifiable): its new pixel data is in `deidentify_image`'s result, for the writer."""
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
    never loaded). The returned dataset then has no pixel data either: the writer copies the
    source's pixel bytes into place (`Deidentified.published`).

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


def _text(header, keyword: str) -> str:
    return str(header.get(keyword, "") or "").strip().rstrip("\x00")


def _little(ds: Dataset) -> bool:
    """Whether the dataset's bytes are little endian (its transfer syntax's, else how it was read)."""
    try:
        return transfer_syntax(ds).is_little_endian
    except NotDeidentifiable:
        return True  # refused below, by the same check


def _deidentify(ds, p, profile, namespace, issuer_default, extra_identifiers, pixel_text, streamed) -> Deidentified:
    if streamed is not None:  # the header read by the raw reader: pydicom's view of it made only when needed
        items, checked = streamed.elements, Header(streamed.elements)
        header, view = checked, lambda: streamed.header
    else:
        items = Items.of_dataset(ds, _little(ds))
        header, checked, view = Header(items), ds, lambda: ds
    sop_class, sop_instance = _text(header, "SOPClassUID"), _text(header, "SOPInstanceUID")
    reason = None
    if not sop_class:
        reason = "missing SOPClassUID"
    elif not sop_instance:
        reason = "missing SOPInstanceUID"
    elif sop_class == MEDIA_DIRECTORY:
        reason = "media directory (DICOMDIR)"
    elif not _text(header, "PatientID"):
        reason = "missing PatientID"
    if reason:
        raise NotDeidentifiable(reason)
    located = streamed.pixels if streamed is not None else None
    read_pixels = check_burned_in(checked, sop_class, has_pixels=True if located is not None else None)
    syntax = streamed.syntax if streamed is not None else transfer_syntax(ds)
    check_length(checked, syntax, located)
    redaction, screen = None, None
    if read_pixels:  # before the walk: a file with text costs no more than its OCR
        ds = view()
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
        out = _published(view, items, header, p, profile, namespace, issuer_default, extra_identifiers, syntax,
                         read_pixels, redaction, streamed, screen)
    except BaseException:
        if redaction is not None:
            redaction.close()
        raise
    finally:
        if streamed is None:
            items.release()  # the source's own (a streamed file's go with it: SourceImage.close)
    if redaction is not None and streamed is None:
        redaction.close()  # read whole: the pixel data is in `out`
    out.pixel_text = REDACTED if redaction is not None else CLEAN if read_pixels else NOT_READ
    return out


def _redacted(ds, syntax, streamed, detector, result):
    """The text found covered and proven gone (imaging.deid.redact), from the streamed file or `ds`."""
    from .redact import PixelSource, redact

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


def _published(view, items, header, p, profile, namespace, issuer_default, extra_identifiers, syntax, read_pixels,
               redaction, streamed, screen=None) -> Deidentified:
    patient_id = _text(header, "PatientID")
    issuer = namespace.strip() if namespace and namespace.strip() else _text(header, "IssuerOfPatientID") or issuer_default
    pseudonym = p.patient_id(issuer, patient_id)
    output = redaction.syntax if redaction is not None else syntax
    encoder = Encoder(output, ["iso8859"], top=view)
    ctx = Context(profile=profile, p=p, shift=p.datetime_shift(issuer, patient_id),
                  scrubber=Scrubber(element_terms(items, extra_identifiers)), encoder=encoder, walk_items=walk_items,
                  syntax=syntax)

    top = {out[0]: out for out in walk(items, ctx, dummy=False)}
    encoder.encodings = _charset_of(top, encoder)  # the output's own character set writes what is added
    # Replaces the table's Z/D: one stable pseudonym per patient. New elements with the dictionary's
    # VR: the walk keeps a source's VR, and a file may say PatientName is FD.
    top[0x00100020] = encoder.text(0x00100020, "LO", [pseudonym])
    top[0x00100010] = encoder.text(0x00100010, "PN", [pseudonym])
    uids = _check_identity(top)
    top.update((out[0], out) for out in _declarations(encoder, profile, read_pixels,
                                                      redaction.method_lines() if redaction else None, screen))
    if redaction is not None:
        _redacted_header(top, redaction, encoder)
    if streamed is not None and streamed.pixels is not None:
        top[PIXEL_DATA] = (PIXEL_DATA, PIXELS, _pixel_copier(streamed, redaction))
    elif redaction is not None:  # read whole: the redacted pixel data goes into the file
        from .redact import pixel_vr, value_bytes

        source_vr = top[PIXEL_DATA][1] if PIXEL_DATA in top and top[PIXEL_DATA][1] != PIXELS else None
        vr = pixel_vr(redaction, source_vr) or "OB"
        top[PIXEL_DATA] = encoder.value(PIXEL_DATA, vr, value_bytes(redaction, redaction.source))
    if PIXEL_DATA in top and top[PIXEL_DATA][1] not in (None, PIXELS) and output.is_compressed:
        top[PIXEL_DATA] = encoder.undefined(top[PIXEL_DATA])  # encapsulated: undefined length, as written
    meta = file_meta(uids["SOPClassUID"], uids["SOPInstanceUID"], output)
    return Deidentified(Published(meta, encoder, list(top.values()), deflated=output.is_deflated), NOT_READ, redaction)


_DECLARED: dict[tuple, list[tuple]] = {}


def _declarations(encoder: Encoder, profile: DeidProfile, pixels_read: bool, redacted: list[str] | None,
                  screen: list[str] | None = None) -> list:
    """What every output says of its de-identification (imaging.deid.declare), encoded; BurnedInAnnotation NO
    when the pixels were read (checked by OCR, and if redacted read again clean, not taken from the device), and
    the screen that read them (`screen`: imaging.deid.declare.screened). The same for every file of a profile,
    text check outcome and screen: encoded once per process."""
    key = (profile.options, profile.dates, pixels_read, tuple(redacted or ()), tuple(screen or ()),
           encoder.implicit, encoder.little, tuple(encoder.encodings))
    found = _DECLARED.get(key)
    if found is None:
        added = Dataset()
        if pixels_read:
            added.BurnedInAnnotation = "NO"
        declare(added, profile, pixels_read=pixels_read, redacted=redacted, screen=screen)
        found = encoder.outs(added)
        if len(_DECLARED) < 64:
            _DECLARED[key] = found
    return found


PIXEL_DATA = 0x7FE00010
_IDENTITY = {"SOPClassUID": 0x00080016, "SOPInstanceUID": 0x00080018, "StudyInstanceUID": 0x0020000D,
             "SeriesInstanceUID": 0x0020000E}


def _check_identity(top: dict) -> dict[str, str]:
    """The de-identified instance is addressable: its SOP Class and Instance UIDs (and its Study and
    Series UIDs, when present) are each one UID, digits and dots, at most 64 characters. A
    source whose element of one of these had another VR (the walk then writes a dummy, "0") or
    several values is quarantined, so nothing is published under a name that is not a UID.
    Returns the four (those present).
    """
    found = {}
    for keyword, tag in _IDENTITY.items():
        out = top.get(tag)
        if out is None and keyword in ("StudyInstanceUID", "SeriesInstanceUID"):
            continue  # absent in the source (the index quarantines that; the engine does not require it)
        value = None
        if out is not None and out[1] is None:
            value = out[3].value if out[3].VR == "UI" else None
        elif out is not None and out[1] == "UI":
            value = out[2].decode("latin-1").rstrip("\0 ")
            value = None if "\\" in value else value
        if not isinstance(value, str) or len(value) > 64 or not _UID.fullmatch(value):
            raise NotDeidentifiable(f"unreadable {keyword}")
        found[keyword] = str(value)
    return found


_UID = re.compile(r"[0-9]+(\.[0-9]+)+")  # digits and dots (as the index requires); at most 64 characters


def _charset_of(top: dict, encoder: Encoder):
    """The encodings of the published Specific Character Set (pydicom's default without one)."""
    from .walk import CHARSET, _charset

    return _charset(top[CHARSET]) if CHARSET in top else ["iso8859"]


def _redacted_header(top: dict, redaction, encoder: Encoder) -> None:
    """The output's pixel attributes as the redacted pixel data needs them (`Redaction.apply_header`)."""
    header = encoder.view([out for out in top.values() if out[1] != PIXELS])
    redaction.apply_header(header)
    for keyword in redaction.header:
        tag = _tag_of(keyword)
        if keyword in header:
            elem = header[keyword]
            top[tag] = encoder.outs(_one(header, keyword))[0] if elem.VR != "SQ" else encoder.element(elem)
        else:
            top.pop(tag, None)


def _one(ds: Dataset, keyword: str) -> Dataset:
    out = Dataset()
    out.add(ds[keyword])
    return out


def _tag_of(keyword: str) -> int:
    from pydicom.datadict import tag_for_keyword

    return tag_for_keyword(keyword)


def _pixel_copier(streamed, redaction):
    """What writes the pixel data element: the source's bytes copied, or the redacted frames."""
    if redaction is None:
        return streamed.copy_pixels
    from .redact import write_element

    vr = streamed.pixels.vr
    return lambda target: write_element(redaction, redaction.source, target, vr)
