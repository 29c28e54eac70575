"""Streamed files (imaging/deid/part10.py) give the bytes, verdicts and hashes of files read whole.

Every input is de-identified twice: read whole (pydicom's full read), and streamed (the header read by the
raw reader, or by pydicom where the raw reader does not read it, the pixel data element located and copied
past the new header in chunks). Published bytes must be equal and quarantine reasons the same; the streamed
reader's sha256 must be the file's. (tests/test_deid_differential.py holds the engine equal to the one before
it; this file holds the two ways of reading a file equal to each other.)
Inputs: pydicom's and pydicom-data's files, a seeded sample of their mutants (truncated, wrong pixel
lengths, lying frame counts...) and the synthetic hospital. The frames the text check reads are
compared too: viewed or decoded one at a time from the file, against pydicom decoding the dataset.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from fuzz_corpus import mutants, source_files

from imaging.deid import NotDeidentifiable, load_profile, quiet
from imaging.deid.engine import deidentify_image
from imaging.deid.frames import Frames
from imaging.deid.part10 import SourceImage, read_whole
from imaging.deid.writer import write
from imaging.deid.pixel_text import PixelTextResult, sample_frames
from imaging.pseudonym import Pseudonymizer

KEY = Pseudonymizer("part10-test-key")
EXTRA = ("Jane Smith", "9434765919")


class NoText:
    """The pixel-text check answered "none found" having read the sampled frames it was given, so a
    frame that cannot be read quarantines as it does with OCR (both paths read through `Frames`)."""

    def check(self, ds, syntax, frames=None, collect=False) -> PixelTextResult:
        frames = frames if frames is not None else Frames.from_dataset(ds, syntax)
        indexes = sample_frames(frames.count, 3)
        for index in indexes:
            frames.frame(index)
        return PixelTextResult(found=False, frames_checked=len(indexes))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[tuple[str, str, bytes]]:
    """(label, path on disk, bytes) of every input."""
    from synth import generate_hospital

    root = tmp_path_factory.mktemp("part10")
    found = [(s.label, s.path, open(s.path, "rb").read()) for s in source_files()]
    for i, (mutant, data) in enumerate(mutants()):
        if i >= 200:
            break
        path = root / f"mutant-{i}.dcm"
        path.write_bytes(data)
        found.append((mutant.name, str(path), data))
    hospital = root / "hospital"
    generate_hospital(hospital, seed=5, sites=("site-a",), dates=("2024-03-01",), patients_per_site=3)
    found += [(str(p.relative_to(hospital)), str(p), p.read_bytes()) for p in sorted(hospital.rglob("*"))
              if p.is_file() and p.suffix.lower() in (".dcm", "")]
    return found


def published(result) -> bytes:
    target = io.BytesIO()
    write(target, result.published)
    return target.getvalue()


def whole(data: bytes, profile) -> tuple[str, bytes | str]:
    try:
        with quiet():
            ds = read_whole(data)
            out = deidentify_image(ds, pseudonymizer=KEY, namespace="NHS", profile=profile, extra_identifiers=EXTRA,
                                   pixel_text=NoText())
            return "published", published(out)
    except NotDeidentifiable as q:
        return "quarantined", str(q)
    except Exception as e:  # noqa: BLE001 - unreadable whole: the streamed path must not publish it either
        return "unreadable", type(e).__name__


def streamed(path: str, profile) -> tuple[tuple[str, bytes | str], bool, str]:
    """(outcome, whether the pixel data were streamed, the reader's sha256 of the input)."""
    try:
        with quiet(), SourceImage(path) as image:
            was_streamed = image.streamed
            try:
                if not image.streamed:
                    outcome = whole(image.read_all(), profile)
                    return outcome, False, image.sha256()
                out = deidentify_image(None, pseudonymizer=KEY, namespace="NHS", profile=profile,
                                       extra_identifiers=EXTRA, pixel_text=NoText(), streamed=image)
                return ("published", published(out)), True, image.sha256()
            except NotDeidentifiable as q:
                return ("quarantined", str(q)), was_streamed, image.sha256()
    except NotDeidentifiable as q:
        return ("quarantined", str(q)), False, ""
    except Exception as e:  # noqa: BLE001
        return ("unreadable", type(e).__name__), False, ""


def test_streamed_outputs_are_those_of_files_read_whole(inputs):
    """One profile: which elements a profile keeps is the walk's business (tests/test_deid_differential.py holds it
    under three); what is compared here is how the file is read and written around them."""
    profile = load_profile()
    compared = published = was_streamed = 0
    for label, path, data in inputs:
        expected = whole(data, profile)
        got, streamed_here, digest = streamed(path, profile)
        if expected[0] == "unreadable":
            assert got[0] != "published", label
            continue
        assert got == expected, label
        if digest:
            assert digest == hashlib.sha256(data).hexdigest(), label
        compared += 1
        published += got[0] == "published"
        was_streamed += streamed_here and got[0] == "published"
    assert compared > 350 and published > 150
    assert was_streamed > 120  # the streamed path is the one taken, not the fallback


def test_frames_read_from_the_file_are_those_pydicom_decodes(inputs):
    """Each sampled frame, viewed (uncompressed) or decoded alone from the file, equals pydicom's
    decoding of the dataset read whole. (Where pydicom cannot decode a dataset read whole, a mutant's
    header, the frames are not compared: both of the engine's paths read them through `Frames`.)"""
    from pydicom.pixels import get_decoder

    compared = viewed = 0
    for label, path, data in inputs:
        with quiet():
            try:
                ds = read_whole(data)
                syntax = ds.file_meta.TransferSyntaxUID
                count = int(ds.get("NumberOfFrames", 1) or 1)
                indexes = sample_frames(count, 3)
            except Exception:  # noqa: BLE001 - not an image the engine reads frames of
                continue
            if "PixelData" not in ds:
                continue
            with SourceImage(path) as image:
                if not image.streamed:
                    continue
                frames = image.frames_now()
                for index in indexes:
                    try:
                        want = get_decoder(syntax).as_array(ds, index=index, as_rgb=True)[0]
                    except Exception:  # noqa: BLE001
                        want = None
                    try:
                        got = frames.frame(index)
                    except NotDeidentifiable:
                        got = None
                    if want is None:
                        continue
                    assert got is not None and got.dtype == want.dtype and np.array_equal(got, want), label
                    compared += 1
                    viewed += frames._view is not None
    assert compared > 150 and viewed > 80


def test_a_frame_is_read_alone(tmp_path):
    """Reading one frame of a large volume reads that frame's bytes, not the volume."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.77.1.5.4", generate_uid()
    ds.Rows = ds.Columns = 64
    ds.NumberOfFrames, ds.SamplesPerPixel, ds.PhotometricInterpretation = 100, 1, "MONOCHROME2"
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit, ds.PixelRepresentation = 7, 0
    volume = np.arange(100 * 64 * 64, dtype=np.uint32).astype(np.uint8).reshape(100, 64, 64)
    ds.PixelData = volume.tobytes()
    path = tmp_path / "volume.dcm"
    ds.save_as(path, enforce_file_format=True)

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, size=-1):
            out = super().read(size)
            Counting.read_bytes += len(out)
            return out

    with SourceImage(str(path)) as image:
        frames = image.frames_now()
        frames.source = Counting(path.read_bytes())
        assert np.array_equal(frames.frame(42), volume[42])
    assert Counting.read_bytes == 64 * 64


def test_a_release_copy_streams_the_header_rewrite_of_a_read_whole(inputs, tmp_path):
    """CopyJob's streamed copy (header rewritten, bytes from the pixel data on copied) gives the bytes of
    the rewrite of the file read whole, verifies the source's sha256 and names the copy's."""
    from imaging.steps.release import CopyJob, HeaderRule, ReleaseSource, generalise_header

    rules = (HeaderRule("PatientAge", "age_band", remove=True), HeaderRule("PatientSex", "sex", remove=False))
    source_root = tmp_path / "published"
    copied = 0
    for i, (label, path, data) in enumerate(inputs):
        outcome = whole(data, load_profile())
        if outcome[0] != "published":
            continue
        published = outcome[1]
        (source_root / f"{i}.dcm").parent.mkdir(parents=True, exist_ok=True)
        (source_root / f"{i}.dcm").write_bytes(published)
        for sex, job_rules in (("F", rules), ("M", ())):
            job = CopyJob(str(source_root), str(tmp_path / f"release-{sex}"), job_rules)
            source = ReleaseSource(f"{i}.dcm", hashlib.sha256(published).hexdigest(), "p1", "2.25.1", f"2.25.{i}",
                                   released=f'{{"sex": "{sex}", "age_band": "55-59"}}')
            copy = job.copy(source)
            got = (tmp_path / f"release-{sex}" / copy.path).read_bytes()
            want = generalise_header(published, job_rules, {"sex": sex, "age_band": "55-59"}) if job_rules else published
            assert got == want, label
            assert copy.sha256 == hashlib.sha256(want).hexdigest()
        copied += 1
    assert copied > 150
    bad = ReleaseSource("0.dcm", "0" * 64, "p1", "2.25.1", "2.25.2", released="{}")
    with pytest.raises(RuntimeError, match="checksum mismatch"):
        CopyJob(str(source_root), str(tmp_path / "release-bad"), rules).copy(bad)
    assert not (tmp_path / "release-bad" / "images" / "p1" / "2.25.1" / "2.25.2.dcm").exists()
