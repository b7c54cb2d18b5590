"""Atomic writes: the target is the old file or the new one, never half of one."""

import pytest

from spacy_elmo.atomic import atomic_write, atomic_write_text, remove_leftovers, temporary_name


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "old")

    def broken(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(path, broken)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    atomic_write_text(path, "new")
    assert path.read_text() == "new"


def test_leftovers_of_a_killed_write_are_found_and_only_they(tmp_path):
    path = tmp_path / "out.h5"
    temporary_name(path).write_text("half")
    (tmp_path / ".other.h5.1.tmp").write_text("someone else's")
    remove_leftovers(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.h5.1.tmp"]
