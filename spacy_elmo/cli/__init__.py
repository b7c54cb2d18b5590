"""Command line: ``spacy-elmo COMMAND`` or ``python -m spacy_elmo COMMAND``.

Each command lives in its own module and registers itself on ``app``.
"""

from .app import app

# Importing a command module registers its command.
from . import config, demo, embed, evaluate, export, fit_state, pretrain  # noqa: F401,E402


def main() -> None:
    app()


__all__ = ["app", "main"]
