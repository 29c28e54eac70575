"""Memory does not grow with a file's size: a large volume is de-identified and released in chunks.

A 256 MB OCT-like volume (400 B-scans of 640 x 1024) goes through the anonymize step (header
de-identified, sampled frames read by the text check, pixel data copied) and a release copy (header
rewritten). Python's own allocations (tracemalloc: bytes, arrays, buffers) peak far below the file's
size: a chunk, a few frames, a header. benchmarks/stream_memory.py measures a whole run's processes on a
2.4 GB volume.
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import numpy as np
import pytest
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from imaging.deid.pixel_text import load_pixel_text_settings
from imaging.driver.config import load_settings
from imaging.issuers import IssuerPolicy
from imaging.records import LinkedImage, PublishedImage
from imaging.steps.anonymize import AnonymizeJob
from imaging.driver.platform_files import load_clinical_policy as load_policy
from imaging.steps.release import CopyJob, HeaderRule, ReleaseSource

FRAMES, ROWS, COLUMNS = 400, 640, 1024  # 262 MB of 8-bit pixels
PEAK = 96 << 20  # bytes: a few frames and chunks, whatever the file's size (and the detector's look at the frames'
# mean enlarged three times: a 1920 x 3072 picture, its probability map and regions, the network read in 1024 px tiles)


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.77.1.5.4", generate_uid(prefix="2.25.")
    ds.StudyInstanceUID, ds.SeriesInstanceUID = generate_uid(prefix="2.25."), generate_uid(prefix="2.25.")
    ds.PatientID, ds.PatientName, ds.PatientSex, ds.PatientAge = "9434765919", "SMITH^JANE", "F", "057Y"
    ds.StudyDate, ds.Modality, ds.BurnedInAnnotation = "20240302", "OPT", "NO"
    ds.Rows, ds.Columns, ds.NumberOfFrames = ROWS, COLUMNS, FRAMES
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit, ds.PixelRepresentation = 7, 0
    rng = np.random.default_rng(7)
    frame = rng.integers(20, 90, size=(ROWS, COLUMNS), dtype=np.uint8)  # speckle-like, no text
    ds.PixelData = b"".join(np.roll(frame, i, axis=1).tobytes() for i in range(FRAMES))
    path = tmp_path_factory.mktemp("volume") / "volume.dcm"
    ds.save_as(path, enforce_file_format=True)
    del ds, frame
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return path, digest.hexdigest()


def _peak(work):
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_volume_is_deidentified_and_released_in_bounded_memory(volume, tmp_path):
    path, sha256 = volume
    size = path.stat().st_size
    assert size > 250e6
    settings = load_settings({"IMAGING_SITES": "site-a"})  # platform/: the shipped text check and issuers
    job = AnonymizeJob("memory-test-key-" + "k" * 24, (), load_policy(), IssuerPolicy.from_dict(settings.issuers),
                       load_pixel_text_settings(settings.pixel_text), staging=str(tmp_path / "staging"))
    anonymizer = job()
    image = LinkedImage(date="2024-03-02", site="site-a", source_path=str(path), size_bytes=size, sha256=sha256,
                        sop_instance_uid=None, study_instance_uid=None, series_instance_uid=None,
                        sop_class_uid=None, modality="OPT", laterality=None, patient_id="9434765919",
                        issuer_of_patient_id=None, study_date="20240302", study_time=None, manufacturer=None,
                        model=None, rows=ROWS, columns=COLUMNS, number_of_frames=FRAMES,
                        transfer_syntax_uid=ExplicitVRLittleEndian)
    import pydicom

    image = LinkedImage(**{**image.__dict__, "sop_instance_uid": pydicom.dcmread(path, stop_before_pixels=True,
                                                                                 specific_tags=["SOPInstanceUID"]).SOPInstanceUID})
    published, peak = _peak(lambda: anonymizer(image))
    assert isinstance(published, PublishedImage), published
    assert peak < PEAK, f"de-identification peaked at {peak / 1e6:.0f} MB of Python allocations"
    output = tmp_path / "staging" / published.output_path
    assert published.output_size_bytes == output.stat().st_size and published.output_size_bytes > size - 4096
    out = pydicom.dcmread(output, stop_before_pixels=True)
    assert out.PatientID != "9434765919" and out.BurnedInAnnotation == "NO"

    copy = CopyJob(str(tmp_path / "staging"), str(tmp_path / "release"),
                   (HeaderRule("PatientAge", "age_band", remove=True), HeaderRule("PatientSex", "sex", remove=False)))
    source = ReleaseSource(published.output_path, published.output_sha256, "p1", "2.25.1", "2.25.2",
                           released=json.dumps({"sex": "F", "age_band": "55-59"}))
    released, peak = _peak(lambda: copy.copy(source))
    assert peak < PEAK, f"the release copy peaked at {peak / 1e6:.0f} MB of Python allocations"
    released_file = tmp_path / "release" / released.path
    header = pydicom.dcmread(released_file, stop_before_pixels=True)
    assert "PatientAge" not in header and header.PatientSex == "F"
    # The pixel data passed through both steps as they were: the released file ends with the source's bytes.
    with open(path, "rb") as a, open(released_file, "rb") as b:
        a.seek(-1 << 20, 2)
        b.seek(-1 << 20, 2)
        assert a.read() == b.read()


LABELLED, SIDE = 300, 512  # 79 MB of 8-bit pixels; the label on the first 40 B-scans


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    from PIL import Image, ImageDraw

    from synth.burned_text import BUILTIN, _font

    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.77.1.5.4", generate_uid(prefix="2.25.")
    ds.StudyInstanceUID, ds.SeriesInstanceUID = generate_uid(prefix="2.25."), generate_uid(prefix="2.25.")
    ds.PatientID, ds.PatientName, ds.StudyDate, ds.Modality = "9434765919", "SMITH^JANE", "20240302", "OPT"
    ds.Rows, ds.Columns, ds.NumberOfFrames = SIDE, SIDE, LABELLED
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit, ds.PixelRepresentation, ds.BurnedInAnnotation = 7, 0, "NO"
    rng = np.random.default_rng(11)
    frame = rng.integers(20, 90, size=(SIDE, SIDE), dtype=np.uint8)
    label = Image.new("L", (SIDE, 40), 0)
    ImageDraw.Draw(label).text((10, 6), "SMITH, Jane  02/03/2024", font=_font(BUILTIN, 24), fill=255)
    ink = np.asarray(label) > 128
    frames = []
    for i in range(LABELLED):
        f = np.roll(frame, i * 7, axis=1)
        if i < 40:
            f[SIDE - 40:][ink] = 255
        frames.append(f.tobytes())
    ds.PixelData = b"".join(frames)
    path = tmp_path_factory.mktemp("labelled") / "labelled.dcm"
    ds.save_as(path, enforce_file_format=True)
    del ds, frames
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return path, digest.hexdigest()


def test_a_volume_is_redacted_in_bounded_memory(labelled, tmp_path):
    import pydicom

    path, sha256 = labelled
    size = path.stat().st_size
    settings = load_settings({"IMAGING_SITES": "site-a"})
    text = load_pixel_text_settings(settings.pixel_text).with_on_text("redact", ("multi_frame",))
    job = AnonymizeJob("memory-test-key-" + "k" * 24, (), load_policy(), IssuerPolicy.from_dict(settings.issuers),
                       text, staging=str(tmp_path / "staging"))
    anonymizer = job()
    uid = pydicom.dcmread(path, stop_before_pixels=True, specific_tags=["SOPInstanceUID"]).SOPInstanceUID
    image = LinkedImage(date="2024-03-02", site="site-a", source_path=str(path), size_bytes=size, sha256=sha256,
                        sop_instance_uid=uid, study_instance_uid=None, series_instance_uid=None,
                        sop_class_uid=None, modality="OPT", laterality=None, patient_id="9434765919",
                        issuer_of_patient_id=None, study_date="20240302", study_time=None, manufacturer=None,
                        model=None, rows=SIDE, columns=SIDE, number_of_frames=LABELLED,
                        transfer_syntax_uid=ExplicitVRLittleEndian)
    published, peak = _peak(lambda: anonymizer(image))
    assert isinstance(published, PublishedImage), published
    assert published.pixel_text == "redacted"
    assert json.loads(published.redacted_regions)[0]["frames"] == [[1, 40]]
    assert peak < PEAK, f"the redaction peaked at {peak / 1e6:.0f} MB of Python allocations"
    output = tmp_path / "staging" / published.output_path
    out = pydicom.dcmread(output, stop_before_pixels=True)
    assert [c.CodeValue for c in out.DeidentificationMethodCodeSequence][1] == "113101"
    # Frames after the label's passed through as bytes: the files end alike.
    with open(path, "rb") as a, open(output, "rb") as b:
        a.seek(-(LABELLED - 40) * SIDE * SIDE, 2)
        b.seek(-(LABELLED - 40) * SIDE * SIDE, 2)
        assert a.read() == b.read()
