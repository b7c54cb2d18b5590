"""Writing a file so that readers, and a writer killed half-way, see the old file or the new one, never half.

Also after a power loss: what was written is flushed to the disk (:func:`sync`) before the rename that
publishes it, and the directory holding the new name after it. Without the first, a file system that
commits the rename before the data (ext4's delayed allocation, XFS) may show the new name over an empty or
half-written file after a crash; without the second, the rename itself may be lost.
"""

import errno
import fnmatch
import glob
import itertools
import os
import shutil
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from ._typing import PathLike
from .errors import Errors, Warnings
from .paths import broken_link_error, dangling_link

#: ``flock`` where the platform has it (POSIX); None elsewhere (Windows), where nothing is locked.
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def temporary_name(path: PathLike) -> Path:
    """``.NAME.PID.tmp`` beside ``path``: where :func:`atomic_write` writes before renaming."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def naming(path: PathLike) -> Iterator[None]:
    """An OSError of the OS's raised inside that names no file (a ``write`` on a full disk: "[Errno 28] No space
    left on device") names ``path``: the message says which file, and a caller can tell whose disk filled up."""
    try:
        yield
    except OSError as err:
        if err.errno is not None and err.filename is None:
            err.filename = str(path)
        raise


def named_paths(err: OSError) -> List[Path]:
    """The absolute paths ``err`` names (none, one or two), not resolved: as written, also a link (to elsewhere)."""
    return [Path(os.path.abspath(os.fsdecode(name))) for name in (err.filename, err.filename2) if isinstance(name, (str, bytes))]


def names_a_file_in(err: OSError, directory: PathLike, above: bool = False) -> bool:
    """Whether ``err`` names a file in ``directory`` (its writes name their file: :func:`naming`) or ``directory``
    itself; with ``above``, also a directory above it (one that creating it made)."""
    inside = Path(os.path.abspath(directory))
    return any(path == inside or inside in path.parents or (above and path in inside.parents) for path in named_paths(err))


#: The errnos of a write that found no room: a full disk, a full quota, a file past the size its file system or
#: ``ulimit -f`` allows (EFBIG, SIGXFSZ ignored: FAT32's 4 GiB).
OUT_OF_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


def out_of_space(err: OSError, directory: PathLike) -> bool:
    """Whether ``err`` is a write into ``directory`` (a file in it, at any depth) that found no room
    (:data:`OUT_OF_SPACE`): pretrain's and embed's "free space, then rerun" errors; one of another disk's (a full
    ``/dev/shm``) is not theirs to explain."""
    return err.errno in OUT_OF_SPACE and names_a_file_in(err, directory)


def make_dirs(directory: Path) -> List[Path]:
    """``directory.mkdir(parents=True, exist_ok=True)``; where it or a directory above it is a file,
    NotADirectoryError :data:`~spacy_elmo.errors.Errors.E_PARENT_IS_FILE` naming that file, where mkdir said
    "[Errno 17] File exists: 'a/file'" or "[Errno 20] Not a directory: 'a/file/sub'"; where it or one above it is
    a symbolic link to nothing (or round a loop), :func:`~spacy_elmo.paths.broken_link_error` naming the link and
    its target, where mkdir said "[Errno 17] File exists: 'link'". Returns the directories it created, the
    deepest first (for :func:`remove_empty_dirs`)."""
    created = list(itertools.takewhile(lambda p: not p.exists(), (directory, *directory.parents)))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a link in a loop above it: "[Errno 40] Too many levels of symbolic links"
        link = dangling_link(directory)
        if link is not None:
            raise broken_link_error(link, Errors.E_LINK_TO_OUTPUT_DIR) from None
        if not isinstance(err, (FileExistsError, NotADirectoryError)):
            raise
        found = next((path for path in (directory, *directory.parents) if path.exists()), None)  # the deepest
        if found is None or found.is_dir():  # not a file in the way (made or removed meanwhile)
            raise
        raise NotADirectoryError(Errors.E_PARENT_IS_FILE.format(path=found)) from None
    return created


def remove_empty_dirs(created: Sequence[Path]) -> None:
    """Remove the directories :func:`make_dirs` created (``created``, the deepest first) as long as they are
    empty: a run that made its output's directories and wrote nothing there leaves none behind; what it wrote
    stays (the first directory not empty stops it, and so every one above)."""
    with suppress(OSError):
        for directory in created:
            directory.rmdir()


def atomic_write(path: PathLike, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary name beside ``path``, then rename it to ``path``.

    An exception removes the temporary file; a kill leaves it behind under a name
    that :func:`remove_leftovers` finds, and the next write of ``path`` removes it
    (so no writer has to remember to: a killed write cannot leave a file forever).
    """
    path = Path(path)
    make_dirs(path.parent)
    remove_leftovers(path)
    tmp = temporary_name(path)
    try:
        with naming(tmp):
            write(tmp)
            sync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_dir(path.parent)


def sync(path: PathLike) -> None:
    """Flush ``path`` to the disk: a file's data, or a directory's files (all the way down) and the directories
    themselves (which hold the names of the files in them). Called before the rename that publishes ``path``."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        for entry in path.iterdir():
            sync(entry)
        sync_dir(path)
    elif path.is_file() and not path.is_symlink():
        # Windows commits only a handle that may write (fsync of a read-only one: EBADF); POSIX any.
        fd = os.open(path, os.O_RDONLY if os.name == "posix" else os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sync_dir(path: PathLike) -> None:
    """Flush the directory ``path``'s entries (a rename into it) to the disk, where the OS allows it: Windows
    opens no directory, and some file systems refuse its fsync (EINVAL); there the rename stays as durable
    as the OS makes it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: PathLike, text: str) -> None:
    """``path`` holds ``text`` (UTF-8), written atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def remove_leftovers(path: PathLike) -> None:
    """Delete the temporary files (and directories) of writes to ``path`` that were killed before
    their rename, and what a killed :func:`remove_dir` of ``path`` left: ``.NAME.PID.tmp`` of a
    process that no longer runs (or of this one). A live process's is its write in progress (two
    runs writing one file), and ``.NAME.x.PID.tmp`` is another file's (``NAME.x``)."""
    for stale, pid in temporary_files(path):
        if _running(pid):
            continue
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def temporary_files(path: PathLike) -> List[Tuple[Path, int]]:
    """``(.NAME.PID.tmp, PID)`` beside ``path``: what writes (and :func:`remove_dir`) of ``path``
    by any process hold or left (not ``.NAME.x.PID.tmp``, another file's)."""
    path = Path(path)
    prefix = f".{path.name}."
    found = []
    for tmp in path.parent.glob(glob.escape(prefix) + "*.tmp"):
        pid = tmp.name[len(prefix) : -len(".tmp")]
        if pid.isdigit():
            found.append((tmp, int(pid)))
    return found


def _running(pid: int) -> bool:
    """Whether another process ``pid`` runs (on POSIX; elsewhere taken as not). A zombie (ended, not yet
    waited for by its parent: a SIGKILLed writer for a moment, or for good under a parent that never waits)
    does not: ``os.kill(pid, 0)`` succeeds for it, so its half-written file was kept as a write in progress."""
    if pid == os.getpid() or os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's
        pass
    return not _ended(pid)


def _ended(pid: int) -> bool:
    """Whether the process ``pid`` ended and only its exit status is left: state Z (zombie) or X (dead) in Linux's
    ``/proc/PID/stat``. False where there is no such file to tell (other systems: taken as running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "PID (COMM) STATE ...": COMM (the program's name) may hold spaces and ")", so the state follows the last ")"
    state = stat[stat.rfind(b")") + 1 :].split()[:1]
    return state in ([b"Z"], [b"X"])


def try_lock(fd: int) -> Optional[OSError]:
    """Take an exclusive ``flock`` on ``fd`` without waiting: BlockingIOError while another process holds it (the
    kernel releases a lock when its process ends, also by SIGKILL); the OSError of a file system without flock
    (some network mounts), which locks nothing, is returned (None: locked, or no flock on this platform)."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as err:
        return err
    return None


def warn_if_not_locked(unlocked: Optional[OSError], path: PathLike, name: str, command: str,
                       rival: Optional[str] = None) -> None:
    """Where :func:`try_lock` could not lock (``unlocked``, the error of a file system without flock, some network
    mounts), warn that ``rival`` (default: a second run of ``command``) writing into ``path`` (``command``'s argument
    ``name``: OUTPUT_DIR) while ``command`` runs is not refused (:data:`Warnings.W_OUTPUT_NOT_LOCKED`); nothing where
    it locked."""
    if unlocked is not None:
        warnings.warn(Warnings.W_OUTPUT_NOT_LOCKED.format(name=name, path=path, error=unlocked, command=command,
                                                          rival=rival or f"a second {command}"),
                      RuntimeWarning, stacklevel=3)


def remove_dir(path: PathLike) -> None:
    """Remove the directory ``path`` in one step for readers and a kill: it is renamed to a
    temporary name first (which :func:`remove_leftovers` finds), then deleted."""
    path = Path(path)
    trash = temporary_name(path)
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash)


#: The name in a directory that :func:`replace_dir` fills under a temporary name (``.replace.PID.tmp``).
_REPLACING = "replace"


def remove_replace_leftovers(path: PathLike) -> None:
    """Remove what :func:`replace_dir` calls on ``path`` killed before they ended left (of processes that no longer
    run; a live one's is its write in progress): ``.NAME.PID.tmp`` beside ``path`` (a whole copy, when it was new) and
    ``.replace.PID.tmp`` inside it (a whole copy too, which ``ls`` does not show but an emptiness test counts)."""
    path = Path(path)
    remove_leftovers(path)
    if path.is_dir():
        remove_leftovers(path / _REPLACING)


def replace_dir(path: PathLike, write: Callable[[Path], None], last: Sequence[str] = ()) -> None:
    """Make the directory ``path`` hold exactly what ``write(tmp)`` puts into a new directory.

    A new ``path`` is renamed into place whole. An existing one (``.``, a symlink to a
    directory, a mount point) is kept as a directory: ``write`` fills a hidden directory
    inside it, and only once that succeeded are the old entries removed and the new ones
    moved up, so a failed ``write`` leaves the old contents as they were. ``last``: glob patterns
    of the names that mark the contents complete (a model's ``config.json``): the old ones are
    removed first and the new ones moved in last, so a process killed in between leaves a
    directory without them (an error for its readers), never new files mixed with old ones.

    What killed writes left is removed first (:func:`remove_replace_leftovers`).
    """
    path = Path(path).resolve()
    remove_replace_leftovers(path)
    if not path.exists():
        make_dirs(path.parent)
        tmp = temporary_name(path)
        _write_fresh(tmp, write)
        os.replace(tmp, path)
        sync_dir(path.parent)
        return
    inner = path / _REPLACING
    tmp = temporary_name(inner)
    _write_fresh(tmp, write)

    def marks(entry: Path) -> bool:
        return any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in last)

    running = {stale for stale, _ in temporary_files(inner)}  # another live writer's (removed above if not)
    for old in sorted(path.iterdir(), key=lambda entry: not marks(entry)):  # the markers first
        if old in running:
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    for new in sorted(tmp.iterdir(), key=marks):  # the markers last
        os.replace(new, path / new.name)
    tmp.rmdir()
    sync_dir(path)


def _write_fresh(tmp: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` into a directory that did not exist, flushed to the disk (:func:`sync`); removed again
    when it fails."""
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
        sync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
