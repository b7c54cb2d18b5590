"""The typer application every command registers on, and option checks the commands share."""

import typer

from ..errors import Errors

app = typer.Typer(
    name="spacy-elmo",
    help="ELMo biLMs: pretrain on your corpus, evaluate, fit-state, export, embed, demo.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """ELMo biLMs for spaCy and PyTorch."""
    # A callback keeps typer in multi-command mode even while one command exists.


def positive_int(value: int) -> int:
    """Option callback: a usage error (exit 2) naming the option unless ``value >= 1``."""
    if value is not None and value < 1:
        raise typer.BadParameter(Errors.E_NOT_POSITIVE_OPTION.format(value=value))
    return value
