"""``spacy-elmo embed``: ELMo vectors of every line of a text file, into HDF5 (AllenNLP's layout)."""

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import Errors, counted
from .app import (COMMAND_LINE, DEVICE_HELP, app, fail, given_output_path, given_path, given_text, known_device,
                  model_argument, model_name, non_negative_int, positive_int, progress_option, spacy_language)
from .signals import signals_stop


def _layer_mode(value: str) -> str:
    """Option callback: an unknown --layers is a usage error before the model loads."""
    from ..embedding import LAYER_MODES

    if value not in LAYER_MODES:
        raise typer.BadParameter(Errors.E_EMBED_LAYERS.format(layers=value))
    return value


@app.command()
def embed(
    ctx: typer.Context,
    input_path: Path = typer.Argument(..., path_type=str, callback=given_path, help="UTF-8 text, one sentence per line (plain, .gz, .bz2 or .xz)."),
    output_path: Path = typer.Argument(..., path_type=str, callback=given_output_path, help="HDF5 file to write: dataset 'i' holds line i."),
    model: str = typer.Option("default", parser=given_text, callback=model_name, help="Model directory (native or AllenNLP files), or 'default'."),
    layers: str = typer.Option("all", callback=_layer_mode,
                               help="all: (L+1, n, 2P) per line; top: the last layer; average: their mean."),
    lang: Optional[str] = typer.Option(None, callback=spacy_language, help="Tokenize with spaCy's tokenizer for this language, whitespace "
                                       "tokens left out as in pretraining (default: the language the model was pretrained on, "
                                       "as evaluate; a model that records none, AllenNLP's among them, is split at whitespace)."),
    whitespace: bool = typer.Option(False, "--whitespace", help="Split the lines at whitespace (text already tokenized, as "
                                    "AllenNLP's command reads it), whatever language the model records."),
    batch_size: int = typer.Option(64, callback=positive_int, help="Most lines per biLM call."),
    batch_tokens: int = typer.Option(4096, callback=positive_int,
                                     help="Most padded tokens (lines x longest line) per biLM call."),
    part_size: int = typer.Option(4096, callback=positive_int, help="Lines per resumable part."),
    max_tokens: int = typer.Option(10_000, callback=positive_int, help="Longest line accepted, in tokens."),
    cache_size: int = typer.Option(50_000, callback=non_negative_int,
                                   help="Token vectors kept for reuse (0: encode every token)."),
    device: str = typer.Option("cpu", callback=known_device, help=DEVICE_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUTPUT_PATH if it exists."),
    restart: bool = typer.Option(False, "--restart", help="Drop the parts of an earlier, unfinished run."),
    progress: bool = progress_option(),
) -> None:
    """Embed every line of a text file into HDF5 (AllenNLP's `allennlp elmo` layout).

    A killed run resumes where it stopped when rerun with the same arguments (finished parts are kept in OUTPUT_PATH.parts/ until the end), --batch-size, --batch-tokens and --cache-size included: which lines share a biLM call changes the vectors' last bits (float32 rounding), so parts written with other values are refused."""
    from ..bilm import BiLM
    from ..device import torch_device
    from ..embedding import check_paths, embed_file, output_lock, parts_path, spacy_tokenizer_name

    # SIGTERM (Slurm preemption, docker stop, timeout) stops it as Ctrl-C does: the lock and the unfinished part
    # removed, the finished parts kept, the way on said, exit status 143 (it died at once, silently, with -15)
    if whitespace and lang:
        raise typer.BadParameter(Errors.E_EMBED_WHITESPACE_AND_LANG.format(lang=lang))
    with signals_stop(command_line=ctx.obj == COMMAND_LINE) as stop:
        try:
            check_paths(input_path, output_path, overwrite)  # before loading: the cheaper errors first
            with output_lock(output_path):  # before loading too: a second embed into OUTPUT is refused at once
                target = torch_device(device)
                with model_argument():
                    bilm = BiLM.load(model).to(target)  # a saved pipeline: an error saying to export its biLM
                tokenize, name = None, "whitespace"
                from ..training.data import (make_nlp, spacy_rules, text_language, tokenizer_settings, warn_other_tokens,
                                             word_texts)

                # the model's own reading by default (as evaluate and fit-state): a Chinese model read whole lines
                lang, from_model = (None, False) if whitespace else text_language(lang, bilm.provenance, default="")
                if lang:
                    nlp = make_nlp(lang, bilm.provenance, from_model=from_model)
                    warn_other_tokens(bilm.provenance, model, nlp, lang, input_path)
                    # whitespace tokens dropped, as in pretraining; no stretch cut (pretraining cuts one spaCy is
                    # quadratically slow on, cut_runs): a line's tokens are the pipeline's
                    tokenizer = nlp.tokenizer
                    # The tokenizer block tells a fallback from, say, SudachiPy's ja, and the rules' digest a spaCy
                    # whose exceptions or punctuation rules changed: parts of the other are not reused.
                    block = json.dumps(tokenizer_settings(nlp), sort_keys=True)
                    name = spacy_tokenizer_name(lang, block, spacy_rules(nlp))
                    tokenize = lambda line: word_texts(tokenizer(line))
                counts = embed_file(bilm, input_path, output_path, layers=layers, batch_size=batch_size,
                                    batch_tokens=batch_tokens, part_size=part_size, max_tokens=max_tokens,
                                    cache_size=cache_size, tokenize=tokenize, tokenizer_name=name, overwrite=overwrite,
                                    restart=restart, progress=progress)
        except (ValueError, OSError, RuntimeError) as err:
            fail(str(err))
        except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: say what is kept and how to go on
            stop.reporting = True  # first: a signal now must not escape this handler
            parts = parts_path(output_path)
            message = Errors.E_EMBED_INTERRUPTED if parts.exists() else Errors.E_EMBED_INTERRUPTED_EARLY
            stop.end(err, message.format(parts=parts))
    size = f"{counted(counts['lines'], 'line')}, {counted(counts['tokens'], 'token')}"
    if not counts["merged"]:  # a rerun after a kill once OUTPUT was complete: nothing to do
        typer.echo(f"{output_path} is already complete ({size}): an earlier run of this command wrote it")
        return
    reused = f" ({counted(counts['parts_reused'], 'part')} from an earlier run)" if counts["parts_reused"] else ""
    typer.echo(f"wrote {output_path}: {size}{reused}")
