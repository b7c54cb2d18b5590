"""Command line: ``spacy-elmo COMMAND`` or ``python -m spacy_elmo COMMAND``.

Each command lives in its own module and registers itself on ``app``.
"""

import errno
import io
import os
import sys
import warnings
from typing import Optional, Union

import typer

from ..errors import Errors
from ..ranks import printing_ranks
from ..switches import SwitchWarning
from .app import COMMAND_LINE, app, echo_styled

# Importing a command module registers its command.
from . import config, demo, embed, evaluate, export, fit_state, info, pretrain  # noqa: F401,E402


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """spacy-elmo's own warnings as one line, ``UserWarning: spacy-elmo: ...`` (and a SPACY_ELMO_* switch's,
    ``SwitchWarning: SPACY_ELMO_CPU_ISA='AVX2' is ...``): Python's default adds the file, line number and
    source line of whichever module raised it, which tells a command-line user nothing. Other libraries'
    warnings keep that form."""
    text = str(message)
    if text.startswith("spacy-elmo:") or issubclass(category, SwitchWarning):
        return f"{category.__name__}: {text}\n"
    return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning


def _command(argv) -> Optional[str]:
    """The command ``argv`` runs (``pretrain``), None for none: the first word that is no option (the
    application's own options, ``--help`` and ``--version``, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


class _WatchedStdout(io.FileIO):
    """stdout's file descriptor under ``sys.stdout`` while main() runs, keeping the error of the last write
    of some output that failed (the output is incomplete from then on, even where rich then points stdout
    at devnull; click's probe ``write(b"")``, which fails on /dev/full too, is no output): an OSError that
    escapes a command is stdout's only if it is that one (an input file's read error keeps its own message)."""

    failed: Optional[OSError] = None

    def write(self, data):
        try:
            return super().write(data)
        except OSError as err:
            if len(data):
                self.failed = err
            raise


class _ClosedStdout(io.TextIOBase):
    """``sys.stdout`` while main() runs where stdout is closed (``cmd >&-``, as some daemon wrappers leave it),
    for which Python gives None: config's write raised AttributeError, and typer.echo wrote nothing and exited 0.
    A write of some text fails here as a write to the closed descriptor would (EBADF), kept in ``failed`` as
    :class:`_WatchedStdout` keeps it, so that the command ends as on any failing stdout (E_STDOUT, status 1)."""

    failed: Optional[OSError] = None

    def writable(self) -> bool:
        return True

    def write(self, text):
        if not isinstance(text, str):  # no binary stream: click probes for one with write(b"")
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self.failed = OSError(errno.EBADF, os.strerror(errno.EBADF))
            raise self.failed
        return 0


def _watch_stdout() -> Union[_WatchedStdout, _ClosedStdout, None]:
    """Put :class:`_WatchedStdout` under a new ``sys.stdout`` (the same encoding and buffering), or
    :class:`_ClosedStdout` in place of a closed one (None); None, and stdout left alone, where it is no plain
    file descriptor (captured in-process)."""
    stdout = sys.stdout
    if stdout is None:
        sys.stdout = _ClosedStdout()
        return sys.stdout
    if stdout is not sys.__stdout__ or not isinstance(stdout, io.TextIOWrapper):
        return None
    buffer = stdout.buffer
    raw = getattr(buffer, "raw", buffer)  # python -u, PYTHONUNBUFFERED: no buffer between
    if type(raw) is not io.FileIO:
        return None
    stdout.flush()
    watched = _WatchedStdout(raw.fileno(), "w", closefd=False)
    sys.stdout = io.TextIOWrapper(watched if buffer is raw else io.BufferedWriter(watched), encoding=stdout.encoding,
                                  errors=stdout.errors, line_buffering=stdout.line_buffering,
                                  write_through=stdout.write_through)
    return watched


def main() -> None:
    """The command line. A stdout that fails ends every command the same way, without a traceback: a
    reader that stopped early (``| head``, a closed pipe) quietly with exit status 0, as when the output
    fitted in the pipe before it closed; another write error (a full disk, EIO, a closed stdout: ``>&-``) with
    E_STDOUT and status 1."""
    previous = sys.stdout
    watched = _watch_stdout()
    try:
        _run()
    except BaseException as end:  # typer's standalone mode ends every command in SystemExit
        if watched is not None:
            _finish(watched, previous, end)
        raise
    if watched is not None:
        _finish(watched, previous, None)


def _finish(watched: Union[_WatchedStdout, _ClosedStdout], previous, end: Optional[BaseException]) -> None:
    """Flush stdout and give ``previous`` back as ``sys.stdout``; where a write to it failed and the command
    ended by that (``end`` the error, or a SystemExit: click's for a closed pipe, 1), exit with 0 for a
    closed pipe, else with 1 after E_STDOUT on stderr. Another end returns, for main() to raise it."""
    by_stdout = end is None or isinstance(end, SystemExit) or end is watched.failed  # before the flush fails anew
    try:
        sys.stdout.flush()  # what is still buffered fails here, not at the interpreter's shutdown
    except OSError:
        pass  # kept in watched.failed
    if watched.failed is not None and isinstance(watched, _WatchedStdout):  # a closed stdout has no descriptor
        # Python's docs ("Note on SIGPIPE"): stdout's descriptor on devnull, so that no later flush of what
        # a failed write left buffered prints "Exception ignored ... BrokenPipeError" at shutdown.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, watched.fileno())
        os.close(devnull)
    sys.stdout = previous
    if watched.failed is None or not by_stdout:
        return
    if watched.failed.errno == errno.EPIPE:
        sys.exit(0)
    try:
        # a full disk or a vanished file system wants another place; a closed stdout wants one at all
        closed = watched.failed.errno == errno.EBADF
        said = Errors.E_STDOUT_CLOSED if closed else Errors.E_STDOUT.format(error=watched.failed)
        echo_styled(said, fg=typer.colors.RED, err=True)
    except OSError:  # stderr fails as well: the status says it
        pass
    sys.exit(1)


def _run() -> None:
    warnings.formatwarning = _format_warning
    # Only pretrain runs as one of torchrun's processes (DDP): another command (embed, --help) runs whole
    # wherever it is started, whatever WORLD_SIZE and RANK say, and pretrain refuses a malformed rank itself.
    rank, local_rank = 0, 0
    if _command(sys.argv[1:]) == "pretrain":
        rank, _, local_rank = printing_ranks()
    if local_rank != 0:
        # Under torchrun: pretrain's warnings are rank 0's alone; the others (the compiled extension
        # missing) are the same on every process of a machine, and its first one (LOCAL_RANK 0) shows them.
        warnings.filterwarnings("ignore", message="spacy-elmo:")
    if rank == 0:
        app(obj=COMMAND_LINE)
        return
    # A usage error (an option's value) is the same on every rank: rank 0 prints it, this one exits
    # with its status unprinted.
    try:
        status = app(standalone_mode=False, obj=COMMAND_LINE)
    except Exception as err:
        status = _usage_status(err)
        if status is None:
            raise
    sys.exit(status if isinstance(status, int) else 0)


def _usage_status(err: Exception):
    """The exit status of click's usage errors and aborts (``exit_code``; 1 for ``Abort``), None for another
    error. By duck type: typer >= 0.26 raises its bundled click's classes (``typer.TyperException``),
    older typer plain click's."""
    code = getattr(err, "exit_code", None)
    if isinstance(code, int):
        return code
    return 1 if type(err).__name__ == "Abort" else None


__all__ = ["app", "main"]
