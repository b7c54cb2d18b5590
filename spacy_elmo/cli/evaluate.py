"""``spacy-elmo evaluate``: full-softmax perplexities and OOV rate of a model on a text."""

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import Errors, Warnings, counted
from ..paths import shell_quoted
from .app import (DEVICE_HELP, app, fail, given_path, given_text, known_device, model_argument, model_name, positive_int, progress_option,
                  spacy_language, warn)


@app.command()
def evaluate(
    model_dir: str = typer.Argument(..., parser=given_text, callback=model_name, help="Model directory written by pretrain, or 'default'."),
    text_path: Path = typer.Argument(..., path_type=str, callback=given_path, help="A UTF-8 text file (plain, .gz, .bz2 or .xz) or a directory of them."),
    lang: Optional[str] = typer.Option(None, callback=spacy_language, help="spaCy language (default: the one the model was trained with, else en)."),
    batch_size: int = typer.Option(
        32, callback=positive_int,
        help="Rows evaluated together. With --stream: the text is cut at sentence starts into at most this many rows "
        "(a sentence longer than two rows' shares (and 40 tokens) can be cut mid-sentence too, so that text with few "
        "sentence ends is still read in that many), each read from the zero state, so the result moves a little "
        "with it (1: one unbroken stream)."),
    device: str = typer.Option("cpu", callback=known_device, help=DEVICE_HELP),
    per_sentence: Optional[bool] = typer.Option(
        None, "--per-sentence/--stream",
        help="Read every sentence alone from the model's initial state (what a pipeline sees), or the text as "
        "one stream with carried states. Default: the way the model was trained (pretrain --sentences: per sentence).",
    ),
    as_json: bool = typer.Option(
        False, "--json",
        help="Print one JSON object instead (and no progress bars): perplexity (exp of the mean of the two losses: "
        "the geometric mean of the two perplexities), perplexity_forward, "
        "perplexity_backward (each null where it is past a float's range, a mean loss over 709 nats), loss_forward, loss_backward (mean negative log-likelihood, nats), n_targets "
        "(predictions per direction: --per-sentence, each sentence's words and its </S> forward, its words and <S> "
        "backward; --stream, those and one more per sentence boundary, the next <S> forward and the previous </S> "
        "backward: the two modes average over different targets), n_tokens (words, markers not counted), "
        "n_sentences, n_rows (rows read: with --stream the pieces the text was cut into, else its sentences), oov_rate (share of words "
        "outside the vocabulary; they are <UNK> targets), vocab_size, mode (stream or per_sentence), "
        "replaced_bytes (undecodable bytes read as U+FFFD), lang."),
    progress: bool = progress_option(),
) -> None:
    """Forward, backward and mean (geometric) perplexity (full softmax) and the OOV rate.

    The model needs its softmax and vocab.txt (models written by pretrain have both)."""
    from ..bilm.native_io import SavedPipelineGiven
    from ..device import torch_device
    from ..training.evaluate import evaluate_model_dir, json_ready, perplexity_text

    try:
        target = torch_device(device)  # known_device checked it when the options were parsed
        with model_argument():
            result = evaluate_model_dir(model_dir, text_path, lang=lang, batch_size=batch_size, device=target,
                                        progress=progress and not as_json, per_sentence=per_sentence)
    except SavedPipelineGiven as err:  # exporting its biLM is not enough here: it has no softmax
        fail(Errors.E_EVALUATE_PIPELINE.format(given=err.given, pipeline=err.pipeline,
                                                shell_pipeline=shell_quoted(err.pipeline)))
    except (ValueError, OSError, RuntimeError) as err:
        fail(str(err))
    if result.get("replaced_bytes"):  # on stderr with --json too: stdout holds the object alone
        warn(Warnings.W_REPLACED_BYTES_TEXT.format(n_bytes=counted(result["replaced_bytes"], "undecodable byte"), path=text_path))
    if as_json:
        typer.echo(json.dumps(json_ready(result), allow_nan=False))
        return
    typer.echo(f"tokens {result['n_tokens']:,} in {counted(result['n_sentences'], 'sentence')}; OOV rate {result['oov_rate']:.2%} (vocabulary {result['vocab_size']:,})")
    typer.echo(perplexity_text(result))
