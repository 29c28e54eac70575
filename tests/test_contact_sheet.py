"""The reviewer sees the redactions: counts per image type and a contact sheet drawn from the released files
(imaging/governance/contact_sheet.py), in the review's HTML (a jinja2 template, autoescaped)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pydicom
import pytest

from imaging.deid import PixelTextDetector, load_pixel_text_settings, quiet, to_bytes
from imaging.deid.engine import deidentify_image
from imaging.driver.config import read_yaml
from imaging.governance.bundle import BundleCheck
from imaging.governance.contact_sheet import text_evidence, text_lines
from imaging.governance.review import Review
from imaging.governance.review_html import render_html
from imaging.pseudonym import Pseudonymizer
from synth.burned_text import clean_fundus, fundus_with_text

OP = "1.2.840.10008.5.1.4.1.1.77.1.5.1"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A release folder of three photographs as published: one redacted, two clean; its metadata rows."""
    root = tmp_path_factory.mktemp("release")
    settings = load_pixel_text_settings(read_yaml("pixel_text.yaml"))
    rows = []
    with PixelTextDetector(settings) as detector:
        for name, data in (("a", fundus_with_text(0).data), ("b", clean_fundus(1).data), ("c", clean_fundus(2).data)):
            with quiet():
                ds = pydicom.dcmread(io.BytesIO(data))
            result = deidentify_image(ds, pseudonymizer=Pseudonymizer("c" * 40), namespace="NHS", pixel_text=detector)
            path = f"images/p/s/{name}.dcm"
            (root / "images/p/s").mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(to_bytes(result.dataset))
            rows.append({"file": path, "sop_class_uid": OP, "number_of_frames": 1, "pixel_text": result.pixel_text,
                         "redacted_regions": result.redaction.regions() if result.redaction else None})
    return root, pa.Table.from_pylist(rows)


def test_every_redacted_image_is_drawn_with_its_boxes_from_the_released_files(release):
    root, table = release
    evidence = text_evidence(str(root), table, seed="f" * 64)
    photo = evidence.counts["photograph"]
    assert (photo.screened, photo.clean, photo.redacted, photo.quarantined) == (3, 2, 1, None)
    redacted = [t for t in evidence.sheet if t.redacted]
    assert [t.file for t in redacted] == ["images/p/s/a.dcm"]
    assert redacted[0].solid is True and redacted[0].boxes == len(json.loads(table["redacted_regions"][0].as_py())[0]["boxes"])
    assert {t.file for t in evidence.sheet} == {"images/p/s/a.dcm", "images/p/s/b.dcm", "images/p/s/c.dcm"}
    assert evidence.sheet[0].png.startswith("data:image/png;base64,")
    assert evidence.problems == []
    assert "photograph         screened 3, clean 2, redacted 1, quarantined not read" in "\n".join(text_lines(evidence))


def test_a_box_that_is_not_solid_in_the_released_file_fails_the_review(release, tmp_path):
    root, table = release
    rows = table.to_pylist()
    regions = json.loads(rows[0]["redacted_regions"])
    regions[0]["boxes"].append([240, 240, 30, 30])  # the metadata claims a box the released pixels do not hold
    rows[0]["redacted_regions"] = json.dumps(regions)
    evidence = text_evidence(str(root), pa.Table.from_pylist(rows), seed="f" * 64)
    assert evidence.problems == ["1 redacted images have a covered box that is not solid in the released pixels"]


def test_the_review_html_shows_the_contact_sheet_escaped(release):
    root, table = release
    evidence = text_evidence(str(root), table, seed="f" * 64)
    review = Review(str(root), None, "unplaced", BundleCheck(str(root), "e" * 64, (), 3, 3), text=evidence,
                    notes=["<script>alert(1)</script>"])
    html = render_html(review)
    assert 'id="contact-sheet"' in html and html.count('class="thumb redacted"') == 1
    assert html.count("data:image/png;base64,") == 3
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html  # autoescape
