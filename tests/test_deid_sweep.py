"""Every file pydicom ships: de-identified cleanly or quarantined with a reason, nothing else.

The de-identification (the shipped profile and the basic one, the burned-in text screen included) is made once for
this module and test_deid_dciodvfy: the conftest fixture `pydicom_deidentified` (tests/pydicom_sweep.py).
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter

import pytest
from pydicom import dcmread

from pydicom_sweep import GROUP

from imaging.deid import quiet

# Every file de-identified once a profile for this module and test_deid_dciodvfy (tests/pydicom_sweep.py): one worker.
pytestmark = pytest.mark.xdist_group(GROUP)

IDENTIFYING_UIDS = ("SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID", "FrameOfReferenceUID")


def read(path: str):
    """The dataset as the pipeline reads it (plain dcmread), or None if that fails."""
    try:
        with quiet():
            return dcmread(path)
    except Exception:  # noqa: BLE001 - any failure means "not readable" here
        return None


def identifiers(ds) -> set[bytes]:
    """Values of the source that must not appear in the output bytes."""
    found = set()
    with quiet():
        name = str(ds.get("PatientName", "") or "")
        for part in name.replace("=", "^").split("^"):
            if len(part.strip()) >= 3:
                found.add(part.strip().encode())
        pid = str(ds.get("PatientID", "") or "").strip()
        if len(pid) >= 3:
            found.add(pid.encode())
        for keyword in IDENTIFYING_UIDS:
            uid = str(ds.get(keyword, "") or "").strip()
            if uid and not uid.startswith("1.2.840.10008."):
                found.add(uid.encode())
    return found


def sweep(outcomes):
    counts, reasons, problems = Counter(), Counter(), []
    for outcome in outcomes:
        if not outcome.readable:
            counts["unreadable"] += 1
            continue
        leaks = identifiers(read(outcome.source))
        counts["identifiers checked"] += len(leaks)
        if outcome.output is None:
            assert outcome.reason and len(outcome.reason) < 80
            counts["quarantined"] += 1
            reasons[outcome.reason] += 1
            continue
        counts["published"] += 1
        data = outcome.output.read_bytes()
        with quiet():
            out = dcmread(io.BytesIO(data))
        assert out.PatientIdentityRemoved == "YES"
        for value in leaks:  # as a whole token: a name part "LUT" inside "MLUT_18" or "VOI LUT" is no leak
            if re.search(rb"(?<![A-Za-z0-9])" + re.escape(value) + rb"(?![A-Za-z0-9])", data):
                problems.append((os.path.basename(outcome.source), value))
    return counts, reasons, problems


@pytest.mark.parametrize("options", [None, []], ids=["default", "basic"])
def test_every_pydicom_file_is_published_clean_or_quarantined(options, pydicom_deidentified):
    counts, reasons, problems = sweep(pydicom_deidentified(options))
    print(f"\nsweep ({'default' if options is None else 'basic'}): {dict(counts)}; quarantine reasons: {dict(reasons)}")
    assert problems == []
    assert counts["published"] >= 100  # most of pydicom's files are publishable
    assert counts["quarantined"] > 0
    assert counts["identifiers checked"] > 200
    # Quarantine reasons are fixed phrases, never values from the file.
    assert set(reasons) <= {
        "missing SOPClassUID", "missing SOPInstanceUID", "missing PatientID", "media directory (DICOMDIR)",
        "text in pixel data", "pixel data could not be checked for text", "encapsulated document", "burned-in annotation",
        "burned-in annotation not declared NO", "pixel data shorter than the image it describes",
        "unsupported transfer syntax", "unknown transfer syntax", "recognizable visual features",
        "pixel data longer than the image it describes", "number of frames is not a positive integer",
        "malformed encapsulated pixel data", "fewer pixel data fragments than frames",
        "image attributes without pixel data", "text left after redaction", "pixel data could not be redacted",
    }
