"""The command line's entry: ``python -m spacy_elmo`` and the console script ``spacy-elmo`` (pyproject.toml).

It imports nothing heavy itself (the package imports its API on first use), so that a Ctrl-C while the
commands' modules import (torch takes 1-2 s) ends with one line and status 130, as one while a command
runs does, instead of a traceback."""

import sys


def main() -> None:
    try:
        from .cli import main as command_line

        command_line()
    except KeyboardInterrupt:  # before the commands could catch it (a command's own Ctrl-C says what it kept)
        from .errors import Errors

        sys.stderr.write(Errors.E_INTERRUPTED_STARTING + "\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
