"""``spacy-elmo config``: write one of the shipped ``spacy train`` configs."""

import sys
from pathlib import Path

import typer

from ..atomic import atomic_write_text
from ..configs import config_names, config_path
from ..errors import Errors, Warnings
from ..paths import shell_quoted
from .app import app, checked_by, checked_output, fail, given_text, warn


@app.command()
def config(
    name: str = typer.Argument(..., callback=checked_by(config_path), help=f"Which config: {', '.join(config_names())}."),
    output: str = typer.Argument("-", parser=given_text, callback=checked_output, help="File to write, or - for stdout."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUTPUT if it exists."),
    # the flag's first name, before export's and embed's --overwrite: still taken, with a warning, not shown
    force: bool = typer.Option(False, "--force", hidden=True, help="Deprecated: --overwrite."),
) -> None:
    """Write a shipped spacy train config (ELMo listener + sentencizer) to OUTPUT.

    Then: python -m spacy train OUTPUT --output training/NAME --paths.train train.spacy --paths.dev dev.spacy --paths.elmo MODEL_DIR (without --output spaCy trains and saves nothing; leave --paths.elmo out to load the bundled default model: as written, the config's components.elmo weights are null). Written to a file, the command prints that line."""
    if force:
        warn(Warnings.W_CONFIG_FORCE)
        overwrite = True
    text = config_path(name).read_text(encoding="utf-8")
    if output == "-":  # a stdout that fails (a full disk, a closed pipe) is main()'s to report, as every command's
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(output)
    try:
        if path.is_dir():
            fail(Errors.E_CONFIG_IS_DIR.format(path=path, example=path / f"{name}.cfg"))
        if path.exists() and not overwrite:
            fail(Errors.E_CONFIG_EXISTS.format(path=path))
        atomic_write_text(path, text)
    # a read-only directory, a file where a directory belongs, a full disk; and before the write, a path that
    # cannot be looked at (a directory this account may not enter, a name too long): is_dir() raises those
    except OSError as err:
        fail(Errors.E_CONFIG_WRITE.format(path=path, error=str(err).rstrip(".")))  # a broken link's ends in one
    typer.echo(f"wrote {path}")
    typer.echo(f"train it with: {train_command(path, name)}")
    typer.echo("(add --paths.elmo MODEL_DIR for weights other than the bundled default model)")


def train_command(path: Path, name: str) -> str:
    """The ``spacy train`` command line of the shipped config ``name`` written to ``path``, with ``--output``:
    without it spaCy trains and saves nothing (no model-best, no model-last)."""
    return (f"python -m spacy train {shell_quoted(path)} --output training/{name} --paths.train train.spacy "
            "--paths.dev dev.spacy")
