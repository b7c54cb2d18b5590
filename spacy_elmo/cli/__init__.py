"""Command line: ``spacy-elmo COMMAND`` or ``python -m spacy_elmo COMMAND``.

Each command lives in its own module and registers itself on ``app``.
"""

import sys
import warnings

import typer

from ..ranks import torchrun_ranks
from .app import app, echo_styled

# Importing a command module registers its command.
from . import config, demo, embed, evaluate, export, fit_state, pretrain  # noqa: F401,E402


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """spacy-elmo's own warnings as one line, ``UserWarning: spacy-elmo: ...``: Python's
    default adds the file, line number and source line of whichever module raised it,
    which tells a command-line user nothing. Other libraries' warnings keep that form."""
    text = str(message)
    if text.startswith("spacy-elmo:"):
        return f"{category.__name__}: {text}\n"
    return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning


def main() -> None:
    warnings.formatwarning = _format_warning
    try:
        rank, _, local_rank = torchrun_ranks()
    except ValueError as err:  # WORLD_SIZE, RANK or LOCAL_RANK set to no rank of a job
        echo_styled(str(err), fg=typer.colors.RED, err=True)
        sys.exit(1)
    if local_rank != 0:
        # Under torchrun: pretrain's warnings are rank 0's alone; the others (the compiled extension
        # missing) are the same on every process of a machine, and its first one (LOCAL_RANK 0) shows them.
        warnings.filterwarnings("ignore", message="spacy-elmo:")
    if rank == 0:
        app()
        return
    # A usage error (an option's value) is the same on every rank: rank 0 prints it, this one exits
    # with its status unprinted.
    try:
        status = app(standalone_mode=False)
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
