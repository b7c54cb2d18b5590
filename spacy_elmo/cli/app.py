"""The typer application every command registers on."""

import typer

app = typer.Typer(
    name="spacy-elmo",
    help="ELMo biLMs: pretrain on your corpus, evaluate, export, demo.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """ELMo biLMs for spaCy and PyTorch."""
    # A callback keeps typer in multi-command mode even while one command exists.
