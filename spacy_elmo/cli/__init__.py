"""Command line: ``spacy-elmo COMMAND`` or ``python -m spacy_elmo COMMAND``.

Each command lives in its own module and registers itself on ``app``.
"""

import sys
import warnings
from typing import Optional

from ..ranks import printing_ranks
from .app import COMMAND_LINE, app

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


def _command(argv) -> Optional[str]:
    """The command ``argv`` runs (``pretrain``), None for none: the first word that is no option (the
    application's own options, ``--help`` and ``--version``, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main() -> None:
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
