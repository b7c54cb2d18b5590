"""Atomic writes: the target is the old file or the new one, never half of one."""

import os
import subprocess
import sys

import pytest

from spacy_elmo.atomic import (atomic_write, atomic_write_text, make_dirs, remove_dir, remove_leftovers, replace_dir,
                                temporary_name)


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


def test_a_file_where_a_parent_directory_belongs_is_named(tmp_path):
    """A regular file where a parent directory should be gave mkdir's "[Errno 17] File exists: 'fap/afile'"
    (config OUTPUT, export OUT_DIR): it says which path is a file, not a directory."""
    afile = tmp_path / "afile"
    afile.write_text("kept")
    for write in (lambda: atomic_write_text(afile / "sub" / "x.cfg", "text"),
                  lambda: replace_dir(afile / "out", lambda tmp: tmp.mkdir())):
        with pytest.raises(NotADirectoryError) as err:
            write()
        assert str(err.value) == f"{afile} is a file, not a directory, so nothing can be written below it"
    assert afile.read_text() == "kept"


def test_a_dangling_symlink_where_a_directory_belongs_is_named_with_its_target_not_said_to_be_a_file(tmp_path):
    """A symlink to nothing where a directory belongs (itself or above it): the link named with its target and the
    fix (broken_link_error), not mkdir's "[Errno 17] File exists: 'link'"; a loop's below it was "[Errno 40]". The
    deepest path that exists there is a directory (the link's), which is no file in the way: E_PARENT_IS_FILE
    named that directory "a file, not a directory"."""
    link, loop = tmp_path / "link", tmp_path / "loop"
    link.symlink_to(tmp_path / "nowhere")
    loop.symlink_to(loop)
    for directory, said in [(link, f"{link} is a broken symbolic link: it points to {tmp_path / 'nowhere'}, "),
                            (link / "sub", f"{link} is a broken symbolic link: it points to "),
                            (loop / "sub" / "deeper", f"{loop} is a symbolic link past too many levels")]:
        with pytest.raises(FileNotFoundError) as err:
            make_dirs(directory)
        assert str(err.value).startswith(said) and "is a file" not in str(err.value), str(err.value)
        assert str(err.value).endswith(f"the directory to write in (ln -sfn TARGET {said.split()[0]}) or remove it.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "loop"]


def test_remove_dir_over_what_a_killed_remove_of_this_process_left(tmp_path):
    """remove_dir renames the directory to its temporary name first: one there already (a remove_dir of this
    process killed half-way, its name this PID's) is deleted before, else the rename failed (not empty)."""
    path = tmp_path / "parts"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "a").write_text("new")
    trash = temporary_name(path)
    trash.mkdir()
    (trash / "half").write_text("left by a killed remove_dir")
    remove_dir(path)
    assert list(tmp_path.iterdir()) == []


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


@pytest.mark.skipif(not hasattr(os, "waitid") or not os.path.exists("/proc/self/stat"), reason="Linux's /proc")
@pytest.mark.parametrize("name", ["python", "a) Z b"])  # the state follows the program's name, which may hold ") Z"
def test_a_killed_writer_not_yet_waited_for_is_not_running(tmp_path, name):
    """A writer SIGKILLed and not yet waited for by its parent (a zombie: `timeout -s KILL` gives one for a
    moment, a supervisor that restarts before it waits one for longer) still answers ``os.kill(pid, 0)``: its
    half-written file was kept as a running write's, and stayed for good."""
    path = tmp_path / "out.h5"
    program = tmp_path / name  # the process's name (/proc's comm) is its program file's
    program.symlink_to(os.path.realpath(sys.executable))
    writer = subprocess.Popen([str(program), "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f".{path.name}.{writer.pid}.tmp").write_text("half")
        remove_leftovers(path)  # running: kept
        assert (tmp_path / f".{path.name}.{writer.pid}.tmp").exists()
        writer.kill()
        os.waitid(os.P_PID, writer.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
        remove_leftovers(path)
        assert not (tmp_path / f".{path.name}.{writer.pid}.tmp").exists()
    finally:
        writer.kill()
        writer.wait()


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


def test_replace_dir_removes_what_killed_replacements_left_and_keeps_a_running_ones(tmp_path, ended_pid):
    """A replacement killed while writing a new directory left ``.NAME.PID.tmp`` beside it (a whole model
    copy) for good, and one killed inside an existing directory its ``.replace.PID.tmp`` (kept, too, when
    the next write failed). Both are removed before the next write, unless their process still runs."""
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        new = tmp_path / "new"
        (tmp_path / f".new.{ended_pid}.tmp").mkdir()
        (tmp_path / f".new.{ended_pid}.tmp" / "model.safetensors").write_text("a killed export's copy")
        (tmp_path / f".new.{running.pid}.tmp").mkdir()
        replace_dir(new, lambda tmp: tmp.mkdir())
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["new", f".new.{running.pid}.tmp"])

        (new / f".replace.{ended_pid}.tmp").mkdir()
        (new / f".replace.{running.pid}.tmp").mkdir()
        (new / "kept").write_text("old")

        def fail(tmp):
            tmp.mkdir()
            raise RuntimeError("disk full")

        with pytest.raises(RuntimeError, match="disk full"):
            replace_dir(new, fail)
        assert sorted(p.name for p in new.iterdir()) == sorted(["kept", f".replace.{running.pid}.tmp"])
        replace_dir(new, lambda tmp: (tmp.mkdir(), (tmp / "a").write_text("1")))
        assert sorted(p.name for p in new.iterdir()) == sorted(["a", f".replace.{running.pid}.tmp"])
    finally:
        running.kill()
        running.wait()


def test_export_does_not_count_a_killed_exports_hidden_copy_as_contents(tmp_path, ended_pid):
    """An --overwrite export killed before its first move left OUT_DIR holding only its hidden .replace.PID.tmp (a
    whole model copy): a rerun without --overwrite was refused as "not empty", though ls showed nothing. A dead
    writer's copy is removed first; a running one's is its export in progress, still refused."""
    from spacy_elmo import BiLM, BiLMConfig
    from spacy_elmo.cli import app
    from spacy_elmo.errors import Errors
    from tests.cli_text import ended, runner

    source, out = tmp_path / "source", tmp_path / "out"
    BiLM(BiLMConfig(projection_dim=4, cell_dim=6, char_embedding_dim=3, filters=[(1, 3), (2, 4)], n_highway=0)).save(source)
    (out / f".replace.{ended_pid}.tmp").mkdir(parents=True)
    (out / f".replace.{ended_pid}.tmp" / "weights.hdf5").write_text("a killed export's copy")
    result = runner.invoke(app, ["export", str(source), str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["options.json", "weights.hdf5"]
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = tmp_path / "other"
        (other / f".replace.{running.pid}.tmp").mkdir(parents=True)
        ended(runner.invoke(app, ["export", str(source), str(other)]), 1, Errors.E_EXPORT_NOT_EMPTY.format(path=other))
        assert (other / f".replace.{running.pid}.tmp").is_dir()
    finally:
        running.kill()
        running.wait()


class Killed(BaseException):
    """What a SIGKILL leaves: raised after a file operation, caught by nothing on its way out."""


def _kill_after(patch, directory, n, done):
    """Make the ``n``-th removal or rename (os.replace, Path.unlink, shutil.rmtree) of an entry of ``directory``
    (not of a temporary directory inside it) raise :class:`Killed` once done; each one done is appended to ``done``."""
    import shutil
    from pathlib import Path

    real = {"replace": os.replace, "unlink": Path.unlink, "rmtree": shutil.rmtree}

    def counted(name, target):
        def operation(*args, **kwargs):
            result = real[name](*args, **kwargs)
            if Path(target(args)).parent == directory:
                done.append(name)
                if len(done) == n:
                    raise Killed
            return result
        return operation

    patch.setattr(os, "replace", counted("replace", lambda a: a[1]))
    patch.setattr(Path, "unlink", counted("unlink", lambda a: a[0]))
    patch.setattr(shutil, "rmtree", counted("rmtree", lambda a: a[0]))


@pytest.mark.parametrize("old_format,new_format", [("native", "native"), ("allennlp", "native"), ("native", "allennlp")])
def test_an_export_over_a_model_killed_after_any_file_operation_leaves_one_model_or_none(
        tmp_path, monkeypatch, old_format, new_format):
    """``export --overwrite`` into an existing model directory removes the old entries and moves the new
    ones in, one file at a time. It did so in directory order: killed after moving model.safetensors and
    config.json, before initial_state.safetensors, the directory loaded without error as the new weights
    from a zero initial state. The markers of a complete model (config.json, the options file) now go
    first and come last: after a kill at any operation the directory loads as the old model, as the new one, or
    not at all."""
    import shutil

    import torch
    from typer.testing import CliRunner

    from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
    from spacy_elmo.cli import app

    config = BiLMConfig(projection_dim=4, cell_dim=6, char_embedding_dim=3, filters=[(1, 3), (2, 4)], n_highway=1)
    torch.manual_seed(0)
    old, new = BiLM(config, backend="reference").eval(), BiLM(config, backend="reference").eval()
    new.set_initial_state((torch.full((2, 2, 4), 0.5), torch.full((2, 2, 6), 0.5)))
    ids = batch_to_ids([["a", "bank"]])

    def top(model):
        with torch.no_grad():
            return model(ids).activations[-1]

    source = tmp_path / "source"
    if new_format == "native":
        new.save(source)
    else:
        new.set_initial_state(None)  # the format has none
        new.to_allennlp(source / "options.json", source / "weights.hdf5")
    out = tmp_path / "out"
    write_old = old.save if old_format == "native" else lambda d: old.to_allennlp(d / "options.json", d / "weights.hdf5")
    outcomes, n = [], 0
    while True:
        n += 1
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        write_old(out)
        done = []
        with monkeypatch.context() as patch:
            _kill_after(patch, out, n, done)
            try:
                result = CliRunner().invoke(app, ["export", str(source), str(out), "--format", new_format, "--overwrite"])
            except Killed:
                result = None
        if result is not None:  # every operation done: the new model
            assert result.exit_code == 0, result.output
            assert torch.equal(top(BiLM.load(out, backend="reference")), top(new))
            break
        try:
            loaded = top(BiLM.load(out, backend="reference"))
        except (ValueError, FileNotFoundError):
            outcomes.append("none")
            continue
        which = [name for name, model in (("old", old), ("new", new)) if torch.equal(loaded, top(model))]
        assert which, f"killed after operation {n} ({done[-1]}): neither model"
        outcomes.append(which[0])
    assert "none" in outcomes and outcomes[-1] == "new" and n > 3, outcomes


def _record_syncs(monkeypatch):
    """Record os.fsync (the inode and kind of what it flushed) and os.replace, in order."""
    import os
    import stat

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync", st.st_ino, "dir" if stat.S_ISDIR(st.st_mode) else "file"))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino, str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_an_atomic_write_is_on_the_disk_before_its_rename_and_the_rename_after_it(tmp_path, monkeypatch):
    """Only checkpoints were fsynced: after a power loss, a file system that commits a rename before the data
    (ext4, XFS) could show any other file (config.json, vocab.txt, the initial state) empty or half-written,
    and the rename itself could be lost. Now the written file is fsynced before its rename and the directory
    after it."""
    import os

    path = tmp_path / "out.txt"
    events = _record_syncs(monkeypatch)
    atomic_write_text(path, "new")
    ino, dir_ino = os.stat(path).st_ino, os.stat(tmp_path).st_ino
    assert events == [("fsync", ino, "file"), ("replace", ino, str(path)), ("fsync", dir_ino, "dir")]


def test_a_replaced_directory_is_on_the_disk_before_its_renames_and_they_after_them(tmp_path, monkeypatch):
    """replace_dir's files (all the way down) and directories are fsynced before the renames that publish
    them, and the directory that holds the new names after them: a new directory and an existing one."""
    import os

    def fill(tmp):
        (tmp / "sub").mkdir(parents=True)
        (tmp / "config.json").write_text("{}")
        (tmp / "sub" / "w").write_text("1")

    out = tmp_path / "out"
    events = _record_syncs(monkeypatch)
    replace_dir(out, fill)
    ino = {name: os.stat(out / name).st_ino for name in ("", "sub", "config.json", "sub/w")}
    flushed = {e[1] for e in events[:-2] if e[0] == "fsync"}
    assert flushed == set(ino.values()) and [e[0] for e in events[:-2]] == ["fsync"] * 4
    assert events[-2:] == [("replace", ino[""], str(out)), ("fsync", os.stat(tmp_path).st_ino, "dir")]

    events.clear()
    replace_dir(out, fill, last=("config.json",))  # an existing directory: its entries moved up into it
    ino = {name: os.stat(out / name).st_ino for name in ("sub", "config.json", "sub/w")}
    moves = [i for i, e in enumerate(events) if e[0] == "replace"]
    assert [events[i][1:] for i in moves] == [(ino["sub"], str(out / "sub")), (ino["config.json"], str(out / "config.json"))]
    assert {e[1] for e in events[: moves[0]] if e[0] == "fsync"} >= {ino["sub"], ino["config.json"], ino["sub/w"]}
    assert events[moves[-1] + 1:] == [("fsync", os.stat(out).st_ino, "dir")]


def test_a_directory_that_cannot_be_opened_or_fsynced_is_not_an_error(tmp_path, monkeypatch):
    """Windows opens no directory and some file systems refuse a directory's fsync (EINVAL): the write goes
    on, as durable as the OS makes it."""
    import errno
    import os

    real_open, real_fsync = os.open, os.fsync
    dirs = set()

    def refusing_open(path, flags, *args):
        if os.path.isdir(path):
            dirs.add(str(path))
            raise PermissionError(errno.EACCES, "a directory")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    atomic_write_text(tmp_path / "a.txt", "1")
    assert (tmp_path / "a.txt").read_text() == "1" and dirs == {str(tmp_path)}
    monkeypatch.setattr(os, "open", real_open)

    def refusing_fsync(fd):
        import stat

        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "no fsync of a directory here")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", refusing_fsync)
    atomic_write_text(tmp_path / "a.txt", "2")
    replace_dir(tmp_path / "d", lambda tmp: (tmp.mkdir(), (tmp / "x").write_text("3")))
    assert (tmp_path / "a.txt").read_text() == "2" and (tmp_path / "d" / "x").read_text() == "3"


def test_a_saved_model_and_a_checkpoint_are_on_the_disk_before_their_renames(tmp_path, monkeypatch):
    """The model files (save_native moves them out of its temporary directory) and a checkpoint (which fsynced
    itself, the one write that did) go through the same flush: each file before its rename, the directory after."""
    import os

    import torch

    from spacy_elmo import BiLM, BiLMConfig
    from spacy_elmo.training.checkpoint import save_checkpoint

    config = BiLMConfig(projection_dim=4, cell_dim=6, char_embedding_dim=3, filters=[(1, 3), (2, 4)], n_highway=1)
    model = BiLM(config, backend="reference")
    model.set_initial_state((torch.zeros(2, 2, 4), torch.zeros(2, 2, 6)))
    events = _record_syncs(monkeypatch)
    model.save(tmp_path / "m")
    save_checkpoint(tmp_path / "m", {"step": 1})
    out = tmp_path / "m"
    dir_ino = os.stat(out).st_ino
    for name in ("model.safetensors", "initial_state.safetensors", "config.json", "checkpoint.pt"):
        ino = os.stat(out / name).st_ino
        moved = events.index(("replace", ino, str(out / name)))
        assert ("fsync", ino, "file") in events[:moved], name
        assert ("fsync", dir_ino, "dir") in events[moved + 1:], name


def test_a_corpus_cache_is_on_the_disk_before_it_is_moved_into_place(tmp_path, monkeypatch):
    """pretrain's tokenized corpus is staged in a directory renamed into place: its token files are flushed before
    that rename (else a power loss could leave its meta.json, which marks it complete, beside empty ones)."""
    import os

    from spacy_elmo.training.trainer import _move_cache_into_place

    staging, cache = tmp_path / "staging", tmp_path / "cache"
    staging.mkdir()
    (staging / "tokens.raw").write_bytes(b"\0" * 8)
    (staging / "meta.json").write_text("{}")
    events = _record_syncs(monkeypatch)
    _move_cache_into_place(staging, cache, tmp_path / "retired")
    ino = {name: os.stat(cache / name).st_ino for name in ("", "tokens.raw", "meta.json")}
    moved = events.index(("replace", ino[""], str(cache)))
    assert {e[1] for e in events[:moved] if e[0] == "fsync"} == set(ino.values())
    assert events[moved + 1:] == [("fsync", os.stat(tmp_path).st_ino, "dir")]


def test_replace_dir_killed_at_any_step_leaves_the_old_contents_the_new_or_no_marker(tmp_path, monkeypatch):
    """replace_dir(last=...) removes the old markers first and moves the new ones in last: killed after any
    removal or move, the directory holds the old contents whole, the new ones whole, or no marker (its readers
    then refuse it). Removing the markers last left, after a kill, the old config.json beside some of the old
    files only (a model loading as neither: the old weights without their initial state)."""
    import shutil

    old = {"config.json": "old", "initial_state.safetensors": "old state", "model.safetensors": "old weights"}
    new = {"config.json": "new", "model.safetensors": "new weights"}

    def fill(tmp):
        tmp.mkdir()
        for name, text in new.items():
            (tmp / name).write_text(text)

    out = tmp_path / "out"
    seen, n = [], 0
    while True:
        n += 1
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        for name, text in old.items():
            (out / name).write_text(text)
        with monkeypatch.context() as patch:
            _kill_after(patch, out, n, [])
            try:
                replace_dir(out, fill, last=("config.json",))
                finished = True
            except Killed:
                finished = False
        found = {p.name: p.read_text() for p in out.iterdir() if not p.name.startswith(".")}
        assert found in (old, new) or "config.json" not in found, f"killed after operation {n}: {found}"
        seen.append("old" if found == old else "new" if found == new else "none")
        if finished:
            break
    assert seen[-1] == "new" and "none" in seen and n > len(old) + len(new), seen
