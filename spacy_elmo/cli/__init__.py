"""Command line: ``spacy-elmo COMMAND`` or ``python -m spacy_elmo COMMAND``.

Each command lives in its own module and registers itself on ``app``.
"""

import warnings

from .app import app

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
    app()


__all__ = ["app", "main"]
