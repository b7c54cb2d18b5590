"""``spacy-elmo export``: write a model as AllenNLP/bilm-tf files or in the native format."""

from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import typer

from ..atomic import remove_replace_leftovers, replace_dir
from ..errors import Errors
from ..paths import broken_link_error, dangling_link, holds_cwd
from .app import app, fail, given_output_path, given_text, model_argument, model_name, one_of
from .signals import interruption_ends


@app.command()
def export(
    ctx: typer.Context,
    model_dir: str = typer.Argument(
        ..., parser=given_text, callback=model_name, help="Native model dir, AllenNLP weights dir, 'default', or a saved spaCy pipeline (or its component's dir)."),
    out_dir: Path = typer.Argument(..., path_type=str, callback=given_output_path, help="Where to write."),
    format: str = typer.Option("allennlp", "--format", callback=one_of(("allennlp", "native"), Errors.E_EXPORT_FORMAT),
                               help="allennlp (options.json + weights.hdf5, as AllenNLP and bilm-tf read them; without the record of the "
                               "training in config.json, nor a fitted initial state) or native (keeps both)."),
    component: Optional[str] = typer.Option(
        None, help="Of a saved pipeline: the component whose biLM to write, an elmo component or one given its own "
        "biLM by nlp.replace_listeners (default: the pipeline's one elmo component; a component's dir names it)."),
    overwrite: bool = typer.Option(False, help="Replace OUT_DIR if it exists (all of its contents)."),
) -> None:
    """Export a model; the softmax and vocab.txt go along when the model has them.

    Given a saved spaCy pipeline, it writes the biLM of its elmo component with the weights saved there (fine-tuned ones included), without a softmax: a pipeline has none.

    The files are written to a temporary directory and moved into OUT_DIR only when complete, so OUT_DIR never mixes them with another model's files. An OUT_DIR that a running pretrain writes (it holds the directory's lock), the bundled default model's directory, a non-empty OUT_DIR that is or holds the current directory (even with --overwrite), and MODEL_DIR itself where it holds a pretrain checkpoint are refused."""
    from ..bilm.allennlp_io import write_allennlp
    from ..bilm.native_io import MODEL_MARKERS, SavedPipelineGiven
    from ..training.modelio import SOFTMAX_FILE, load_pretrained, save_pretrained, write_softmax
    from ..training.trainer import model_dir_lock

    replacing = False  # replace_dir began to fill OUT_DIR

    def rerun() -> str:
        # E_INTERRUPTED's rerun: a stop once replace_dir began moving the model into OUT_DIR (or after it) leaves
        # files there, and check_output_dir refuses OUT_DIR not empty without --overwrite. Judged as that check
        # judges it: this export's hidden copy (.replace.PID.tmp, its PID gone once it exits) is no content
        try:
            filled = replacing and not overwrite and _holds_content(out_dir.resolve())
        except OSError:  # OUT_DIR no longer looked at: the rerun says what it is
            filled = False
        return Errors.E_INTERRUPTED_OVERWRITE.format(path=out_dir) if filled else ""

    with interruption_ends(ctx, "export", rerun) as stop, ExitStack() as held:  # SIGTERM too: the lock released, 143
        # OUT_DIR (or a directory above it) a symbolic link to nothing: refused as pretrain and BiLM.save refuse
        # it (atomic.make_dirs); the model was written into the link's target, made for it, and a loop crashed
        # resolve() below with a traceback
        try:
            link = dangling_link(out_dir)
            if link is not None:
                fail(str(broken_link_error(link, Errors.E_LINK_TO_OUTPUT_DIR)))
            check_output_dir(out_dir, overwrite, model_dir)
            # the directory replace_dir replaces: resolved (RUN/missing/.. is RUN to it, and no directory to the kernel)
            real = out_dir.resolve()
            if real.is_dir():  # replaced below: not while a pretrain writes there (it holds the lock)
                held.enter_context(model_dir_lock(real, Errors.E_EXPORT_IN_USE, "OUT_DIR", "export"))
        except FileExistsError as err:  # OUT_DIR a file, not empty without --overwrite, in use, the bundled model's
            fail(str(err))
        except OSError as err:  # OUT_DIR cannot be looked at (a directory this account may not enter, a name too long)
            fail(Errors.E_EXPORT_WRITE.format(path=out_dir, error=err))
        what = "the model has none"  # said when it has no softmax
        try:
            try:
                with model_argument():
                    bilm, softmax, vocab, provenance = load_pretrained(model_dir, backend="reference")
            except SavedPipelineGiven as given:
                from ..pipeline.saved_bilm import pipeline_bilm  # spaCy: imported for a pipeline only

                bilm, name = pipeline_bilm(given.pipeline, component or given.component)
                softmax, vocab, provenance = None, None, bilm.provenance
                what = f"written from component {name!r} of the saved pipeline {given.pipeline}, whose biLM has none"
            else:
                if component is not None:
                    raise ValueError(Errors.E_EXPORT_COMPONENT_NOT_PIPELINE.format(component=component, path=model_dir))
        except (ValueError, OSError) as err:
            fail(str(err))

        def write(tmp: Path) -> None:
            if format == "native":
                save_pretrained(tmp, bilm, softmax, vocab, provenance)
            else:
                tmp.mkdir(parents=True)
                # Warnings (what the format cannot hold, what AllenNLP will not run) name the final path.
                write_allennlp(bilm, tmp / "options.json", tmp / "weights.hdf5", shown_as=out_dir / "weights.hdf5")
                if softmax is not None and vocab is not None:  # load_pretrained gives both or neither
                    write_softmax(tmp / SOFTMAX_FILE, softmax)
                    vocab.save(tmp)

        try:
            replacing = True
            replace_dir(out_dir, write, last=MODEL_MARKERS)  # a kill in between leaves no model, not a mixed one
        except OSError as err:
            fail(Errors.E_EXPORT_WRITE.format(path=out_dir, error=err))
        stop.complete()  # OUT_DIR holds the model whole: a signal from here on stops nothing (exit 0)
    typer.echo(f"wrote {format} model to {out_dir} "
               + ("(with softmax and vocab.txt)" if softmax is not None else f"(no softmax: {what})"))


def check_output_dir(out_dir: Path, overwrite: bool, model_dir: str) -> None:
    """FileExistsError when ``out_dir`` is a file, a non-empty directory without ``overwrite`` (with it too where
    it is or holds the current directory: everything in it would be deleted), (inside) the bundled default model's
    directory, or ``model_dir`` itself holding a pretrain run's checkpoint (replaced whole, the run could no longer
    be resumed). What killed exports left in ``out_dir`` (hidden, of processes that no longer run) is removed first:
    no content."""
    from ..bilm.native_io import DEFAULT_MODEL_DIR
    from ..training.checkpoint import CHECKPOINT_NAME

    # Each check on the resolved path, the one replace_dir replaces: RUN/missing/.. is RUN to resolve(), but the
    # kernel cannot enter "missing", so out_dir.exists() was False and RUN, checkpoint and all, was replaced.
    real = out_dir.resolve()
    if real == DEFAULT_MODEL_DIR or DEFAULT_MODEL_DIR in real.parents:  # as fit-state refuses it (E_FIT_STATE_BUNDLED)
        raise FileExistsError(Errors.E_EXPORT_BUNDLED.format(path=out_dir, bundled=DEFAULT_MODEL_DIR))
    if real.exists() and not real.is_dir():
        raise FileExistsError(Errors.E_EXPORT_NOT_A_DIR.format(path=out_dir))
    if _holds_content(real):
        # with --overwrite, "$OUT" unset (typer's ".") or "." emptied the current directory, .git and all: refused
        # whatever --overwrite says, as not empty would offer it
        cwd = holds_cwd(real)
        if cwd is not None:
            raise FileExistsError(Errors.E_OVERWRITE_CWD.format(path=out_dir, cwd=cwd))
        if not overwrite:
            raise FileExistsError(Errors.E_EXPORT_NOT_EMPTY.format(path=out_dir))
    # "default" is the bundled model, refused above as OUT_DIR
    if model_dir != "default" and Path(model_dir).resolve() == real and (real / CHECKPOINT_NAME).exists():
        raise FileExistsError(Errors.E_EXPORT_ONTO_RUN.format(path=out_dir, checkpoint=CHECKPOINT_NAME))


def _holds_content(real: Path) -> bool:
    """Whether ``real`` (OUT_DIR resolved) is a directory that holds anything: one an export replaces only with
    --overwrite. What killed exports left there (hidden, of processes that no longer run, this one's too: it is
    asked once this one stopped) is removed first: a killed export's ``.replace.PID.tmp`` is no content, though it
    made the directory "not empty" where ls shows nothing."""
    remove_replace_leftovers(real)
    return real.is_dir() and any(real.iterdir())
