"""``spacy-elmo fit-state``: fit (or clear) the initial LSTM state of a native model."""

from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import typer

from ..errors import Errors, Warnings, counted
from ..paths import shell_quoted
from .app import app, fail, given_path, given_text, model_argument, positive_int, progress_option, spacy_language, warn
from .signals import interruption_ends


def _or_fewer_rows(n_sentences: int) -> str:
    """", or lower --rows to R or fewer": the most rows ``n_sentences`` fit; "" when they fit none."""
    from ..bilm.initial_state import sentences_needed

    max_rows = n_sentences // sentences_needed(1)
    return Errors.E_FIT_STATE_OR_FEWER_ROWS.format(max_rows=max_rows) if max_rows else ""


@app.command("fit-state")
def fit_state(
    ctx: typer.Context,
    model_dir: str = typer.Argument(
        ..., parser=given_text, help="Native model directory (written by pretrain, export --format native or BiLM.save). The state is "
        "written into it (not into the bundled default model: export that to a directory first)."),
    text_path: Optional[Path] = typer.Argument(None, path_type=str, callback=given_path, help="Running text like the training text (UTF-8 file, plain, .gz, .bz2 or .xz, or directory)."),
    lang: Optional[str] = typer.Option(None, callback=spacy_language, help="spaCy language (default: the one the model was trained with, else en)."),
    max_sentences: int = typer.Option(4096, callback=positive_int, help="Read at most this many sentences from the start of the text."),
    rows: int = typer.Option(32, callback=positive_int, help="Contiguous streams read in parallel (needs 3 x rows sentences)."),
    clear: bool = typer.Option(False, "--clear", help="Remove the fitted state: sentences start from zeros again."),
    progress: bool = progress_option(),
) -> None:
    """Fit the state every sentence starts from (writes initial_state.safetensors).

    The state is the mean carried state at sentence boundaries of running text (see docs/default-model.md in the source distribution). The file is replaced atomically: a killed or failed run leaves the model as it was. A model directory that a running pretrain writes is refused (it holds the directory's lock)."""
    from ..bilm import BiLM
    from ..bilm.initial_state import WARMUP, running_streams, sentences_needed
    from ..bilm.native_io import (
        DEFAULT_MODEL_DIR,
        allennlp_files_of,
        load_tensors,
        model_from_native,
        model_path,
        read_meta,
        write_initial_state,
    )
    from ..training.data import (ReadStats, files_read, make_nlp, replaced_bytes_so_far, text_language, tokenize_file,
                                 warn_other_tokens)
    from ..training.trainer import model_dir_lock

    if clear and text_path is not None:
        raise typer.BadParameter(Errors.E_FIT_STATE_CLEAR_AND_TEXT.format(path=text_path))
    if not clear and text_path is None:
        raise typer.BadParameter(Errors.E_FIT_STATE_NO_TEXT)
    if not clear and max_sentences < sentences_needed(rows):  # said "give it more running text" after reading it
        raise typer.BadParameter(Errors.E_FIT_STATE_MAX_SENTENCES.format(
            max_sentences=max_sentences, needed=sentences_needed(rows), rows=rows, warmup=WARMUP,
            or_rows=_or_fewer_rows(max_sentences)))
    replaced = 0
    with interruption_ends(ctx, "fit-state") as stop, ExitStack() as held:  # SIGTERM too: the lock released, 143
        try:
            with model_argument():  # clear errors for a missing path or a file; "default" is refused below
                path = model_path(model_dir, offer_default=False)
            if path.resolve() == DEFAULT_MODEL_DIR:
                raise ValueError(Errors.E_FIT_STATE_BUNDLED.format(model=model_dir, path=DEFAULT_MODEL_DIR))
            if allennlp_files_of(path) is not None:  # an error too when native and AllenNLP files share it
                raise ValueError(Errors.E_FIT_STATE_ALLENNLP.format(path=path, shell_path=shell_quoted(path)))
            # From the read of the model to the write of its state: a pretrain running there rewrites the model at
            # every checkpoint (the state written would be lost, or land beside weights it was not fitted to).
            held.enter_context(model_dir_lock(path, Errors.E_FIT_STATE_IN_USE, "MODEL_DIR", "fit-state"))
            with model_argument():  # a directory without config.json or model.safetensors: told what a model directory is
                meta = read_meta(path)  # a native directory: AllenNLP files have no place for the state
                tensors = load_tensors(path)
            bilm = model_from_native(BiLM, path, meta, tensors)
            had_state = bilm.initial_state is not None
            if clear:
                bilm.set_initial_state(None)
            else:
                assert text_path is not None  # refused above without --clear
                provenance = meta.get("provenance") or {}
                lang, from_model = text_language(lang, provenance)
                nlp = make_nlp(lang, provenance, from_model=from_model)
                warn_other_tokens(provenance, model_dir, nlp, lang, text_path)
                stats = ReadStats()
                before = replaced_bytes_so_far()  # the reading stops early: stats count whole files only
                sentences = tokenize_file(text_path, lang, stats, progress, limit=max_sentences, nlp=nlp)
                replaced = replaced_bytes_so_far() - before
                if not sentences:
                    raise ValueError(Errors.E_FIT_STATE_EMPTY_TEXT.format(path=text_path, files=files_read(stats)))
                n = sum(1 for sentence in sentences if sentence)  # the fitting drops empty ones
                if n < sentences_needed(rows):  # the whole text (--max-sentences is checked above): said with --rows
                    raise ValueError(Errors.E_FIT_STATE_TEXT_TOO_SHORT.format(
                        path=text_path, n=n, needed=sentences_needed(rows), rows=rows, streams=counted(rows, "stream"),
                        warmup=WARMUP,
                        or_rows=_or_fewer_rows(n)))
                bilm.fit_initial_state(sentences, rows=rows, progress=progress)
        except (ValueError, OSError) as err:
            fail(str(err))
        if had_state or not clear:  # clearing no state writes nothing (a read-only model is no error then)
            try:
                write_initial_state(bilm.initial_state, path)
            except OSError as err:
                fail(Errors.E_FIT_STATE_WRITE.format(path=path, shell_path=shell_quoted(path), error=err))
        stop.complete()  # the state is written whole: a signal from here on stops nothing (exit 0)
    if clear:
        if had_state:
            typer.echo(f"cleared the initial state of {model_dir}")
        else:
            warn(Warnings.W_FIT_STATE_NOTHING_TO_CLEAR.format(model=model_dir))
        return
    # The fitting reads ``rows`` streams of equal length: the sentences past the last whole one per stream are left out.
    per = len(running_streams(sentences, rows)[0])
    left_out = n - per * rows
    rest = f"; the last {counted(left_out, 'sentence')} left out, fewer than one per stream" if left_out else ""
    typer.echo(f"fitted the initial state of {model_dir} on {counted(per * rows, 'sentence')} "
               f"({counted(rows, 'stream')} of {per:,}; the mean of {counted((per - WARMUP) * rows, 'boundary state')}, "
               f"past each stream's first {WARMUP}{rest})")
    if (meta.get("provenance") or {}).get("reading") == "sentences":
        warn(Warnings.W_FIT_STATE_SENTENCES_MODEL.format(model=model_dir, shell_model=shell_quoted(model_dir)))
    if replaced:
        warn(Warnings.W_REPLACED_BYTES_TEXT.format(n_bytes=counted(replaced, "undecodable byte"), path=text_path))
