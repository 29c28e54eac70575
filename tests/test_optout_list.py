"""The opt-out list's pure rules (imaging/optout.py, imaging/governance/optout.py): files, folding, versions,
what a release does about them. No Spark: the pipeline's use of them is tests/test_optout_pipeline.py."""

from pathlib import Path

import pytest

from imaging.governance.optout import PublishedRelease, flags, recheck, version_to_build
from imaging.optout import (ADD, CHANGES, NO_ID_COLUMN, NOT_DATED, NOT_TEXT, PLACEHOLDER_ROW, REMOVE, UNKNOWN_ACTION,
                            WHOLE, PersonKey, list_version, parse_list, person, read_lists, site_token)

KEY = "optout-test-key-" + "o" * 24
PLACEHOLDERS = ("UNKNOWN", "0", "N/A")


def write(root: Path, site: str, name: str, text: str | bytes) -> None:
    path = root / "optouts" / site / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_ids_compare_without_spaces_or_ascii_case():
    assert person(" 943 476 5919 ") == person("9434765919") == "9434765919"
    assert person("mrn-ab12") == "MRN-AB12" and person("é") == "é"  # ASCII case only, as Spark's translate folds


def test_a_whole_list_and_a_change_file_are_told_apart_by_their_header():
    whole = parse_list("a", "/l/optouts/a/2024-03-01.csv", b"patient_id,reason\n111\n222,asked\n", PLACEHOLDERS)
    assert whole.kind == WHOLE and [e.person for e in whole.entries] == ["111", "222"]
    assert {e.action for e in whole.entries} == {ADD}
    changes = parse_list("a", "/l/optouts/a/2024-03-02.csv", b"Patient_ID , Action\n111,remove\n333,ADD\n")
    assert changes.kind == CHANGES and [(e.person, e.action) for e in changes.entries] == [("111", REMOVE),
                                                                                          ("333", ADD)]


def test_placeholder_rows_are_quarantined_and_unknown_actions_fail_closed():
    parsed = parse_list("a", "/l/optouts/a/2024-03-01.csv",
                        b"patient_id,action\n,add\nunknown,add\n n/a ,add\n444,delete\n555,\n666,add\n", PLACEHOLDERS)
    assert parsed.reasons == (PLACEHOLDER_ROW, PLACEHOLDER_ROW, PLACEHOLDER_ROW, UNKNOWN_ACTION, UNKNOWN_ACTION)
    # An action the platform cannot read never lets a patient in: applied as an opt-out, and reported.
    assert [(e.person, e.action) for e in parsed.entries] == [("444", ADD), ("555", ADD), ("666", ADD)]
    rows = parsed.quarantined(first_date="2024-01-01")
    assert {r.reason for r in rows} == {PLACEHOLDER_ROW, UNKNOWN_ACTION} and {r.date for r in rows} == {"2024-03-01"}
    assert all("444" not in r.reason and "555" not in r.reason for r in rows)


@pytest.mark.parametrize("name,data,reason", [
    ("2024-03-01.csv", b"nhs,name\n1,x\n", NO_ID_COLUMN),
    ("2024-03-01.csv", b"\xff\xfe\x00garbage", NOT_TEXT),
    ("latest.csv", b"patient_id\n1\n", NOT_DATED),
    ("2024-13-01.csv", b"patient_id\n1\n", NOT_DATED),
])
def test_a_file_that_cannot_be_read_is_quarantined_whole_and_refuses_releases(tmp_path, name, data, reason):
    write(tmp_path, "a", name, data)
    write(tmp_path, "a", "2024-02-01.csv", "patient_id\n777\n")
    lists = read_lists(str(tmp_path), ["a"], PLACEHOLDERS)
    (bad,) = lists.unreadable
    assert bad.reasons == (reason,) and not bad.applied
    assert lists.site_list("a").patients == {"777"}  # the readable file still applies
    assert "cannot be read" in lists.refusal() and "777" not in lists.refusal()
    # A file dated before the first partition (or not dated) is accounted to the first one.
    assert [q.date for q in lists.quarantined([("2024-03-01", "a"), ("2024-01-01", "a")], "2024-01-01")] == \
        ["2024-01-01" if reason == NOT_DATED else "2024-03-01"]


def test_the_effective_list_folds_whole_lists_and_changes_in_date_order(tmp_path):
    write(tmp_path, "a", "2024-03-01.csv", "patient_id\n111\n222\n")
    write(tmp_path, "a", "2024-03-03.csv", "patient_id,action\n333,add\n111,remove\n")
    write(tmp_path, "a", "2024-03-05.csv", "patient_id\n222\n444\n")  # a whole list replaces what came before
    write(tmp_path, "a", "2024-03-06.csv", "patient_id,action\n555,add\n555,remove\n")  # row order counts
    write(tmp_path, "b", "2024-03-04.csv", "patient_id\n999 000 1111\n")
    write(tmp_path, "zz", "2024-03-04.csv", "patient_id\n1\n")  # not a configured site: not read
    lists = read_lists(str(tmp_path), ["a", "b"], PLACEHOLDERS)
    assert lists.site_list("a", "2024-02-28").received is None
    assert lists.site_list("a", "2024-03-02").patients == {"111", "222"}
    assert lists.site_list("a", "2024-03-04").patients == {"222", "333"}
    now = lists.site_list("a")
    assert now.patients == {"222", "444"} and now.received == "2024-03-06" and now.files == 4
    assert lists.received == "2024-03-06" and set(lists.lists("2024-03-03")) == {"a"}
    spaces = {"a": "NHS", "b": "NHS"}
    assert lists.keys(spaces) == {PersonKey("NHS", p) for p in ("222", "444", "9990001111")}
    assert PersonKey("NHS", "111") in lists.ever_listed(spaces) and lists.refusal() is None


def test_a_list_version_is_a_keyed_digest_of_its_patients():
    v = list_version(KEY, ["222", "111"])
    assert v == list_version(KEY, {"111", "222"}) and len(v) == 32
    assert v != list_version(KEY, ["111"]) and v != list_version("another-key-" + "x" * 24, ["111", "222"])
    assert "111" not in v and list_version(KEY, []) != list_version(KEY, ["111"])
    assert site_token(KEY, "a") != site_token(KEY, "b") and len(site_token(KEY, "a")) == 16


def _published(version, patients, as_of="2024-03-01", follows=None):
    return PublishedRelease("c", version, f"/w/c/v{version}", "0" * 64, frozenset(patients), as_of, True, follows,
                            {"ab" * 8: as_of})


def test_the_next_version_follows_a_release_whose_patients_opted_out_or_came_back():
    v1 = _published(1, {"P1", "P2"})
    nobody = lambda as_of: frozenset()  # noqa: E731
    none_back = lambda ps: 0  # noqa: E731
    # Unchanged opt-outs: build the defined version (decide then says unchanged or conflict).
    assert version_to_build(1, {1: v1}, frozenset(), nobody, none_back).version == 1
    # P2 opted out since v1: v2 follows it; one patient left.
    s = version_to_build(1, {1: v1}, frozenset({"P2"}), nobody, none_back)
    assert (s.version, s.follows.version, s.left, s.returned) == (2, 1, 1, 0)
    # v2 published without P2, nothing new: build v2 again (unchanged), not v3.
    v2 = _published(2, {"P1"}, as_of="2024-03-04", follows=1)
    assert version_to_build(1, {1: v1, 2: v2}, frozenset({"P2"}), lambda r: frozenset({"P2"}), none_back).version == 2
    # P2's opt-out removed and P2 selectable again: v1 holds P2 and is unaffected now, but v2 follows it and
    # stands; v3 follows v2, with P2 back.
    s = version_to_build(1, {1: v1, 2: v2}, frozenset(), lambda r: frozenset({"P2"}) if r.version == 2 else
                         frozenset(), lambda ps: len(ps & {"P2"}))
    assert (s.version, s.follows.version, s.left, s.returned) == (3, 2, 0, 1)
    # An unpublished defined version is simply built.
    assert version_to_build(4, {1: v1}, frozenset({"P1"}), nobody, none_back).version == 4


def test_flags_count_released_patients_who_opted_out_since_never_who():
    found = flags([_published(1, {"P1", "P2", "P3"}), _published(2, {"P1"})], frozenset({"P2", "P3", "P9"}))
    assert [(f.release, f.patients) for f in found] == [("c/v1", 2)]
    assert found[0].message == "2 patients in this release have since opted out"


def test_the_recheck_tells_a_patient_listed_at_the_build_from_one_who_opted_out_since(tmp_path):
    write(tmp_path, "a", "2024-03-01.csv", "patient_id\n111\n")
    write(tmp_path, "b", "2024-03-02.csv", "patient_id\n888\n")
    # Both after the build: a's change is dated after its list's day; b's list arrived later the same day as the
    # card's newest (site b's list was not in force, though its file is dated on the card's newest day).
    write(tmp_path, "a", "2024-03-04.csv", "patient_id,action\n222,add\n")
    write(tmp_path, "c", "2024-03-02.csv", "patient_id\n999\n")
    lists = read_lists(str(tmp_path), ["a", "b", "c"], PLACEHOLDERS)
    spaces = {"a": "NHS", "b": "NHS", "c": "NHS"}
    ta, tb = site_token(KEY, "a"), site_token(KEY, "b")
    card = {"optouts": {"as_of": "2024-03-02", "lists": [{"list": ta, "version": "cd" * 16, "received": "2024-03-01"},
                                                         {"list": tb, "version": "ef" * 16, "received": "2024-03-02"}]}}
    sites_of = {ta: "a", tb: "b"}
    released = [PersonKey("NHS", "222"), PersonKey("NHS", "222"), PersonKey("NHS", "999"), PersonKey("NHS", "333"), None]
    rc = recheck(card, released, lists, spaces, sites_of)
    assert (rc.on_list_at_build_images, rc.since_patients, rc.untraced, rc.patients) == (0, 2, 1, 3)
    assert rc.lists_changed == 2 and rc.received_now == "2024-03-04" and rc.unmapped == 0
    forged = recheck(card, [PersonKey("NHS", "111"), PersonKey("NHS", "888")], lists, spaces, sites_of)
    assert (forged.on_list_at_build_images, forged.on_list_at_build_patients) == (2, 2)
    # Without the token map (another warehouse), every site is read up to the card's newest day: stricter.
    strict = recheck(card, [PersonKey("NHS", "999")], lists, spaces, {})
    assert strict.unmapped == 2 and strict.on_list_at_build_patients == 1


def test_the_data_card_names_lists_by_token_and_suppresses_small_counts():
    from imaging.governance.datacard import OptOutList, OptOutSection, _optout_markdown, optout_section

    with pytest.raises(ValueError):
        OptOutList("site-a", list_version(KEY, ["1"]), "2024-03-01")  # never a site's name
    with pytest.raises(ValueError):
        OptOutList(site_token(KEY, "a"), "9434765919", "2024-03-01")  # never an id
    section = OptOutSection((OptOutList(site_token(KEY, "a"), list_version(KEY, ["1"]), "2024-03-01"),), "2024-03-01",
                            excluded_images=0, excluded_patients=0, not_deidentified_images=12,
                            not_deidentified_patients=3, follows=1, left=2, returned=0)
    card = optout_section(section, 10)
    assert card["not_deidentified"] == {"images": 12, "patients": "<10"}
    assert card["follows"] == {"version": 1, "left": "<10", "returned": 0}
    text = "".join(_optout_markdown(card, 10))
    assert "## Opt-outs" in text and "follows v1" in text and site_token(KEY, "a") in text
