"""The DICOM DA/TM/DT reads and writes of the one header module (imaging/header.py), and the
keyword of a record column. Pure: no Spark, no files."""

from __future__ import annotations

import ast
import datetime as dt

import pytest

import imaging.header as header

from imaging.header import (COLUMNS, DicomTime, dicom_date, dicom_datetime, dicom_time, format_date,
                                  format_time, keyword)


@pytest.mark.parametrize("value, strict, acr_nema, lenient", [
    ("20230304", dt.date(2023, 3, 4), dt.date(2023, 3, 4), dt.date(2023, 3, 4)),
    (" 20230304 ", None, dt.date(2023, 3, 4), dt.date(2023, 3, 4)),  # only the strict read refuses padding
    ("2023.03.04", None, dt.date(2023, 3, 4), None),  # ACR-NEMA: the time shift's read only
    ("2023034", None, None, dt.date(2023, 3, 4)),  # strptime takes a one-digit day
    ("20230230", None, None, None),  # not a real date
    ("1990/01/", None, None, None),
    ("", None, None, None),
])
def test_the_three_da_reads(value, strict, acr_nema, lenient):
    assert dicom_date(value) == strict
    assert dicom_date(value, acr_nema=True) == acr_nema
    assert dicom_date(value, lenient=True) == lenient


def test_da_reads_are_one_at_a_time_and_absent_is_none():
    assert dicom_date(None) is None and dicom_date(None, lenient=True) is None
    with pytest.raises(ValueError):
        dicom_date("20230304", lenient=True, acr_nema=True)


@pytest.mark.parametrize("value, parsed", [
    ("10", DicomTime(36000, 1, "")), ("1015", DicomTime(36900, 2, "")), ("101530", DicomTime(36930, 3, "")),
    ("101530.25", DicomTime(36930, 3, ".25")), ("10:15:30", DicomTime(36930, 3, "")),
    ("235960", DicomTime(86399, 3, "")),  # a leap second counts as :59
    ("2400", None), ("1060", None), ("10.5", None), ("1O15", None), ("", None),
])
def test_tm(value, parsed):
    assert dicom_time(value) == parsed


@pytest.mark.parametrize("value", ["10", "1015", "101530", "101530.250000", "000000", "235959"])
def test_format_time_writes_back_a_canonical_tm(value):
    time = dicom_time(value)
    assert format_time(time.seconds, time.components, time.fraction) == value


def test_format_time_takes_a_time_of_day():
    with pytest.raises(ValueError):
        format_time(86400, 3, "")


def test_dt():
    parsed = dicom_datetime("20230304050000.5+0100")
    assert (parsed.date, parsed.time, parsed.suffix) == (dt.date(2023, 3, 4), DicomTime(18000, 3, ".5"), "+0100")
    assert dicom_datetime("20230304").time is None and dicom_datetime("20230304").suffix == ""
    assert dicom_datetime("2023") is None and dicom_datetime("20230230") is None
    assert dicom_datetime("2023030425") is None  # hour 25: not a real time
    assert format_date(dt.date(2023, 3, 4)) == "20230304"


def test_keyword_of_a_column():
    assert keyword("patient_id") == "PatientID" and keyword("study_date") == "StudyDate"
    assert all(keyword(c) == k[0] for c, k in COLUMNS.items() if len(k) == 1)
    with pytest.raises(ValueError):
        keyword("laterality")  # two keywords: read with column_value


def test_the_header_module_is_a_leaf():
    """It imports nothing from `imaging`, so `imaging.deid` (which `imaging.steps.anonymize` imports) can
    read its dates and times through it without an import cycle."""
    tree = ast.parse(open(header.__file__, encoding="utf-8").read())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
    assert not [m for m in imported if m == "imaging" or m.startswith("imaging.")]
