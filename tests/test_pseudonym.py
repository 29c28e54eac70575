import re

import pytest

from imaging.pseudonym import MAX_DATE_SHIFT_DAYS, Pseudonymizer


def test_same_input_same_pseudonym_and_keyed():
    a, b, other = Pseudonymizer("k1"), Pseudonymizer("k1"), Pseudonymizer("k2")
    assert a.patient_id("NHS", "9434765919") == b.patient_id("NHS", "9434765919")
    assert a.patient_id("NHS", "9434765919") != other.patient_id("NHS", "9434765919")
    assert a.patient_id("NHS", "9434765919") != a.patient_id("NHS", "9434765870")
    assert a.patient_id("NHS", "1") != a.patient_id("LOCAL", "1")  # the issuer is part of the identity


def test_uid_is_valid_2_25_and_stable():
    p = Pseudonymizer("k")
    uid = p.uid("1.2.826.0.1.3680043.8.498.1")
    assert uid == p.uid("1.2.826.0.1.3680043.8.498.1") != p.uid("1.2.826.0.1.3680043.8.498.2")
    assert re.fullmatch(r"2\.25\.(0|[1-9][0-9]*)", uid) and len(uid) <= 64
    assert int(uid[5:]) < 2**128
    assert p.uid("1.2.3\x00") == p.uid("1.2.3")  # UI padding does not change the mapping


def test_date_shift_is_never_zero_and_in_range():
    p = Pseudonymizer("k")
    shifts = {p.date_shift_days("NHS", str(i)) for i in range(2000)}
    assert all(-MAX_DATE_SHIFT_DAYS <= s <= -2 for s in shifts)  # with the sub-day part: at least 25 h
    assert len(shifts) > 1000


def test_key_required_and_hidden():
    with pytest.raises(ValueError):
        Pseudonymizer("")
    assert "secret" not in repr(Pseudonymizer("secret"))
