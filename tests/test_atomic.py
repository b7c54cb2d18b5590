"""Atomic writes: the target is the old file or the new one, never half of one."""

import subprocess
import sys

import pytest

from spacy_elmo.atomic import atomic_write, atomic_write_text, remove_leftovers, replace_dir, temporary_name


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


def test_the_next_write_removes_what_a_killed_write_of_that_file_left(tmp_path, ended_pid):
    # every writer of a file goes through atomic_write, so a kill can never leave a
    # temporary file for good (fit-state's initial state did, before this)
    path = tmp_path / "initial_state.safetensors"
    pid = ended_pid
    (tmp_path / f".{path.name}.{pid}.tmp").write_text("half")
    (tmp_path / f".config.json.{pid}.tmp").write_text("another file's")
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".config.json.{pid}.tmp", path.name]


def test_a_write_keeps_a_running_writers_file_and_another_files_leftovers(tmp_path, ended_pid):
    # two runs writing one file: the second must not delete the first one's write in progress;
    # and writing NAME is no reason to delete what a killed write of NAME.x left (a directory
    # of NAME.x.parts included): only NAME's own leftovers go
    path = tmp_path / "out[1].h5"  # glob characters in the name
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ended = ended_pid
        (tmp_path / f".{path.name}.{running.pid}.tmp").write_text("a running writer's")
        (tmp_path / f".{path.name}.{ended}.tmp").write_text("killed")
        (tmp_path / f".{path.name}.x.{ended}.tmp").write_text("another file's")
        (tmp_path / f".{path.name}.parts.{ended}.tmp").mkdir()
        atomic_write_text(path, "new")
    finally:
        running.kill()
        running.wait()
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, f".{path.name}.{running.pid}.tmp", f".{path.name}.x.{ended}.tmp", f".{path.name}.parts.{ended}.tmp"]
    )


def test_replace_dir_new_existing_dot_and_symlink(tmp_path, monkeypatch):
    def write(files):
        def fill(tmp):
            tmp.mkdir()
            for name, text in files.items():
                (tmp / name).write_text(text)
        return fill

    new = tmp_path / "new"
    replace_dir(new, write({"a": "1"}))
    assert {p.name: p.read_text() for p in new.iterdir()} == {"a": "1"}
    (new / "sub").mkdir()
    replace_dir(new, write({"b": "2"}))  # old entries, a directory included, are replaced
    assert {p.name: p.read_text() for p in new.iterdir()} == {"b": "2"}
    link = tmp_path / "link"
    link.symlink_to(new, target_is_directory=True)
    replace_dir(link, write({"c": "3"}))  # through a symlink: the target directory is kept
    assert link.is_symlink() and [p.name for p in new.iterdir()] == ["c"]
    monkeypatch.chdir(new)
    replace_dir(".", write({"d": "4"}))
    assert [p.name for p in new.iterdir()] == ["d"]

    def fail(tmp):
        tmp.mkdir()
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        replace_dir(new, fail)
    assert [p.name for p in new.iterdir()] == ["d"]  # old contents untouched, no leftovers
