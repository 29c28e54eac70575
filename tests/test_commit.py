"""The commit protocol on its own (no Spark): a crash at every step, then recovery, gives exactly the
state of a clean commit; a crash before the intent leaves the old state, with no staging left."""

import pytest

from crash import SimulatedCrash, points_of, stopping_at
from imaging.driver.commit import CommitBuilder, recover


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def setup_warehouse(root):
    """An old state: two table partitions and a file folder; one partition will become empty."""
    zones = [str(root / "identifiable"), str(root / "deidentified")]
    for rel, data in {"identifiable/t/date=1/part-00000.parquet": b"old-1",
                      "identifiable/t/date=2/part-00000.parquet": b"old-2",
                      "deidentified/files/b1/x.dcm": b"old-x",
                      "deidentified/files/keep/y.dcm": b"untouched"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return zones


def stage(root, zones):
    """A run's new outputs: partition 1 replaced, partition 2 emptied, folder b1 replaced, b2 new."""
    builder = CommitBuilder.start("asset", str(root / "identifiable/_journal"), zones)
    ident, deid = builder.staging(zones[0]), builder.staging(zones[1])
    for base, rel, data in ((ident, "t/date=1/part-00000.parquet", b"new-1"),
                            (deid, "files/b1/x.dcm", b"new-x"), (deid, "files/b2/z.dcm", b"new-z")):
        path = root / base[len(str(root)) + 1:] / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for zone, rel in ((zones[0], "t/date=1"), (zones[0], "t/date=2"), (zones[1], "files/b1"), (zones[1], "files/b2")):
        builder.replace(zone, rel)
    return builder.build()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    zones = setup_warehouse(root)
    stage(root, zones).apply()
    return tree(root)


def test_a_clean_commit_replaces_exactly_the_covered_partitions(clean):
    assert clean == {"identifiable/t/date=1/part-00000.parquet": b"new-1",
                     "deidentified/files/b1/x.dcm": b"new-x", "deidentified/files/b2/z.dcm": b"new-z",
                     "deidentified/files/keep/y.dcm": b"untouched"}


@pytest.mark.parametrize("number", range(12))
def test_a_crash_at_any_step_then_recovery_equals_the_clean_commit(tmp_path, monkeypatch, clean, number):
    zones = setup_warehouse(tmp_path)
    commit = stage(tmp_path, zones)
    points = points_of(commit)
    assert len(points) == 12  # staged, journal, 4 x (aside, swap), swapped, cleaned
    point = points[number]
    stopping_at(monkeypatch, point)
    with pytest.raises(SimulatedCrash):
        commit.apply()
    monkeypatch.undo()
    before_intent = point.endswith(":staged")
    done = recover(str(tmp_path / "identifiable/_journal"), zones)
    assert done.rolled_forward == (0 if before_intent else 1)
    if before_intent:  # rolled back: the old state, untouched
        assert tree(tmp_path) == {"identifiable/t/date=1/part-00000.parquet": b"old-1",
                                  "identifiable/t/date=2/part-00000.parquet": b"old-2",
                                  "deidentified/files/b1/x.dcm": b"old-x",
                                  "deidentified/files/keep/y.dcm": b"untouched"}
    else:
        assert tree(tmp_path) == clean
    # Nothing of the protocol is left: no staging, no journal, no markers.
    assert not any(p.name in ("_staging", "_journal") for p in tmp_path.rglob("*"))


def test_recovery_with_nothing_to_do_changes_nothing(tmp_path):
    zones = setup_warehouse(tmp_path)
    before = tree(tmp_path)
    done = recover(str(tmp_path / "identifiable/_journal"), zones)
    assert (done.rolled_forward, done.staging_removed) == (0, 0)
    assert tree(tmp_path) == before
