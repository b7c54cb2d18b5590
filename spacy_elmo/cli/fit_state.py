"""``spacy-elmo fit-state``: fit (or clear) the initial LSTM state of a native model."""

import itertools
from pathlib import Path
from typing import Optional

import typer

from ..errors import Errors
from .app import app


@app.command("fit-state")
def fit_state(
    model_dir: str = typer.Argument(..., help="Native model directory (written by pretrain or BiLM.save), or 'default'."),
    text_path: Optional[Path] = typer.Argument(None, help="Running text like the training text (UTF-8 file or directory)."),
    lang: Optional[str] = typer.Option(None, help="spaCy language (default: the one the model was trained with)."),
    max_sentences: int = typer.Option(4096, help="Read at most this many sentences from the start of the text."),
    rows: int = typer.Option(32, help="Contiguous streams read in parallel."),
    clear: bool = typer.Option(False, "--clear", help="Remove the fitted state: sentences start from zeros again."),
) -> None:
    """Fit the state every sentence starts from: the mean carried state at sentence
    boundaries of running text (see docs/default-model.md). Writes initial_state.safetensors."""
    from ..bilm import BiLM
    from ..bilm.native_io import read_meta, write_initial_state
    from ..training.data import ReadStats, iter_sentences, iter_text, make_nlp

    try:
        meta = read_meta(model_dir)  # a native directory: AllenNLP files have no place for the state
        bilm = BiLM.load(model_dir)
        if clear:
            bilm.set_initial_state(None)
        else:
            if text_path is None:
                raise typer.BadParameter(Errors.E_FIT_STATE_NO_TEXT)
            lang = lang or (meta.get("provenance") or {}).get("lang", "en")
            sentences = list(itertools.islice(iter_sentences(iter_text(text_path, ReadStats()), make_nlp(lang)), max_sentences))
            bilm.fit_initial_state(sentences, rows=rows, progress=True)
        write_initial_state(bilm.initial_state, model_dir)
    except (ValueError, FileNotFoundError) as err:
        typer.secho(str(err), fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    typer.echo(f"{'cleared' if clear else 'fitted'} the initial state of {model_dir}")
