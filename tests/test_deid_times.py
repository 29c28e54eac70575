"""Modified dates move every date AND time of a patient by one offset that is not whole days.

A file carries every TM and DT attribute of the data dictionary (and the DA paired with each
TM), at the top level and two sequences down. Under the research default none of those values
is published verbatim, each published one is its source moment plus the patient's offset
(computed here with plain datetime arithmetic), so every interval within the patient, across
files, is kept exactly.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools

import pytest
from pydicom import dcmread
from pydicom.datadict import DicomDictionary
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from imaging.deid import deidentify, load_profile, to_bytes
from imaging.deid.timeshift import DATE_TIME_PAIRS, shift_date, shift_datetime, shift_paired_date, shift_time
from imaging.pseudonym import DateTimeShift, Pseudonymizer
from synth.dicom import encode_part10

KEY = Pseudonymizer("times-key")
PATIENT = "9434765919"
OPT = "1.2.840.10008.5.1.4.1.1.77.1.5.4"

TIMES = sorted(tag for tag, entry in DicomDictionary.items() if entry[0] == "TM" and tag >> 16 not in (0, 2))
DATETIMES = sorted(tag for tag, entry in DicomDictionary.items() if entry[0] == "DT" and tag >> 16 not in (0, 2))
TIME_TO_DATE = {tm: da for da, tm in DATE_TIME_PAIRS.items()}
STEP = dt.timedelta(minutes=47, seconds=13, microseconds=125)  # every planted moment distinct


def _planted(base: dt.datetime, uid: str) -> tuple[bytes, dict[tuple, dt.datetime]]:
    """A file with every TM/DT (and each TM's DA) planted; moment of each (path, tag) planted."""
    moments: dict[tuple, dt.datetime] = {}
    counter = itertools.count()

    def fill(ds: Dataset, path: tuple) -> None:
        for tag in TIMES + DATETIMES:
            when = base + next(counter) * STEP
            moments[(path, tag)] = when
            if tag in DATETIMES:
                suffix = "+0100" if tag % 3 == 0 else ""
                ds.add_new(tag, "DT", when.strftime("%Y%m%d%H%M%S.%f") + suffix)
            else:
                ds.add_new(tag, "TM", when.strftime("%H%M%S.%f"))
                if tag in TIME_TO_DATE:
                    ds.add_new(TIME_TO_DATE[tag], "DA", when.strftime("%Y%m%d"))
                    moments[(path, TIME_TO_DATE[tag])] = when

    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID, ds.PatientID, ds.Modality = OPT, uid, PATIENT, "OPT"
    ds.BurnedInAnnotation = "NO"
    fill(ds, ())
    inner = Dataset()
    fill(inner, ("SharedFunctionalGroupsSequence", 0, "FrameContentSequence", 0))
    ds.SharedFunctionalGroupsSequence = Sequence([Dataset()])
    ds.SharedFunctionalGroupsSequence[0].FrameContentSequence = Sequence([inner])
    return encode_part10(ds), moments


def _at(ds: Dataset, path: tuple) -> Dataset | None:
    for keyword, index in zip(path[::2], path[1::2]):
        if keyword not in ds or len(ds[keyword].value) <= index:
            return None
        ds = ds[keyword].value[index]
    return ds


def _published(out: Dataset, moments: dict) -> dict[tuple, str]:
    """(path, tag) -> published non-empty value of every planted attribute that survived."""
    found = {}
    for path, tag in moments:
        holder = _at(out, path)
        if holder is not None and tag in holder and str(holder[tag].value or "").strip():
            found[(path, tag)] = str(holder[tag].value).strip()
    return found


def _expected(vr: str, when: dt.datetime, shift: DateTimeShift, source: str) -> str:
    moved = when + shift.offset
    if vr == "DT":
        return moved.strftime("%Y%m%d%H%M%S.%f") + ("+0100" if source.endswith("+0100") else "")
    if vr == "DA":
        return moved.strftime("%Y%m%d")
    return moved.strftime("%H%M%S.%f")


def _moment(vr: str, value: str, paired_date: str | None) -> dt.datetime | None:
    if vr == "DT":
        return dt.datetime.strptime(value[:21], "%Y%m%d%H%M%S.%f")
    if vr == "TM" and paired_date:
        return dt.datetime.strptime(paired_date + value, "%Y%m%d%H%M%S.%f")
    return None


@pytest.fixture(scope="module")
def two_visits():
    """The same patient's two files, 37 days, 5 h 13 min apart."""
    base = dt.datetime(2023, 3, 4, 7, 41, 9, 250000)
    first = _planted(base, "2.25.101")
    second = _planted(base + dt.timedelta(days=37, hours=5, minutes=13), "2.25.102")
    out = [deidentify(dcmread(io.BytesIO(data)), pseudonymizer=KEY, namespace="NHS", profile=load_profile())
           for data, _ in (first, second)]
    return [(data, moments, dcmread(io.BytesIO(to_bytes(o)))) for (data, moments), o in zip((first, second), out)]


def test_every_time_attribute_is_planted():
    assert len(TIMES) >= 52 and len(DATETIMES) >= 40  # the dictionary's TM and DT attributes
    assert len(DATE_TIME_PAIRS) >= 40


def test_no_planted_date_or_time_is_published_verbatim(two_visits):
    for data, moments, out in two_visits:
        src = dcmread(io.BytesIO(data))
        published = _published(out, moments)
        assert len(published) > 100  # most are kept (modified), not removed
        for (path, tag), value in published.items():
            assert value != str(_at(src, path)[tag].value).strip(), hex(tag)
        raw = to_bytes(out)
        for (path, tag) in moments:
            planted = str(_at(src, path)[tag].value).strip()
            if len(planted) > 8:  # full times and date-times are unique strings: search the bytes
                assert planted.encode() not in raw, hex(tag)


def test_each_published_value_is_its_moment_plus_the_patients_offset(two_visits):
    shift = KEY.datetime_shift("NHS", PATIENT)
    assert shift.offset % dt.timedelta(days=1) != dt.timedelta(0)  # not a whole number of days
    for data, moments, out in two_visits:
        src = dcmread(io.BytesIO(data))
        for (path, tag), value in _published(out, moments).items():
            vr = DicomDictionary[tag][0]
            source = str(_at(src, path)[tag].value).strip()
            assert value == _expected(vr, moments[(path, tag)], shift, source), hex(tag)


def test_every_interval_within_the_patient_is_kept(two_visits):
    src_moments, out_moments = [], []
    for data, moments, out in two_visits:
        holder = {}
        for (path, tag), value in _published(out, moments).items():
            vr = DicomDictionary[tag][0]
            date_tag = TIME_TO_DATE.get(tag)
            paired = None
            if vr == "TM" and date_tag is not None:
                parent = _at(out, path)
                paired = str(parent[date_tag].value) if date_tag in parent and parent[date_tag].value else None
            when = _moment(vr, value, paired)
            if when is not None:
                holder[(path, tag)] = when
        for key, when in holder.items():
            src_moments.append(moments[key])
            out_moments.append(when)
    assert len(out_moments) > 150
    first_src, first_out = src_moments[0], out_moments[0]
    for s, o in zip(src_moments, out_moments):
        assert o - first_out == s - first_src  # every interval, within and across the two files
    assert {o.time() for o in out_moments}.isdisjoint({s.time() for s in src_moments[:1]})


def test_basic_profile_and_full_dates_keep_their_rules():
    data, moments = _planted(dt.datetime(2023, 3, 4, 7, 41, 9), "2.25.103")
    src = dcmread(io.BytesIO(data))
    basic = deidentify(dcmread(io.BytesIO(data)), pseudonymizer=KEY, namespace="NHS", profile=load_profile([]))
    for (path, tag), value in _published(basic, moments).items():
        assert value != str(_at(src, path)[tag].value).strip(), hex(tag)  # dummies at most
    full = deidentify(dcmread(io.BytesIO(data)), pseudonymizer=KEY, namespace="NHS",
                      profile=load_profile(["retain_longitudinal_full_dates"]))
    assert full.StudyTime == src.StudyTime and full.StudyDate == src.StudyDate


@pytest.mark.parametrize("value, expected", [
    ("101500", "131720"), ("1015", "1317"), ("10", "13"), ("101500.25", "131720.25"),
    ("10:15:00", "131720"), ("235959", "030219"), ("2400", None), ("", None), ("1O15", None),
])
def test_time_precision_is_kept(value, expected):
    shift = DateTimeShift(days=-10, seconds=3 * 3600 + 2 * 60 + 20)
    assert shift_time(value, shift) == expected


def test_dates_alone_and_paired():
    shift = DateTimeShift(days=-10, seconds=20 * 3600)  # -10 days + 20 h
    assert shift_date("20230304", shift) == "20230222"  # a date alone is its midnight: day + days
    assert shift_paired_date("20230304", "030000", shift) == "20230222"  # 03:00 + 20 h: same shifted day
    assert shift_paired_date("20230304", "050000", shift) == "20230223"  # 05:00 + 20 h: the next day
    assert shift_paired_date("20230304", "garbage", shift) == "20230222"
    assert shift_datetime("20230304050000+0100", shift) == "20230223010000+0100"
    assert shift_datetime("20230304", shift) == "20230222"
    assert shift_datetime("2023", shift) is None  # no full date: emptied, never kept
    assert shift_date("1990/01/", shift) is None


def test_offsets_are_keyed_never_whole_days_and_at_least_25_hours():
    shifts = [KEY.datetime_shift("NHS", str(i)) for i in range(2000)]
    assert all(-3652 <= s.days <= -2 and 3600 <= s.seconds <= 82800 for s in shifts)
    assert all(s.offset <= -dt.timedelta(hours=25) for s in shifts)
    assert len({s.seconds for s in shifts}) > 1900
    assert KEY.datetime_shift("NHS", "1") == KEY.datetime_shift("NHS", "1") != KEY.datetime_shift("OTHER", "1")
    assert KEY.date_shift_days("NHS", "1") == KEY.datetime_shift("NHS", "1").days
