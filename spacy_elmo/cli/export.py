"""``spacy-elmo export``: write a model as AllenNLP/bilm-tf files or in the native format."""

from pathlib import Path

import typer

from ..errors import Errors
from .app import app


@app.command()
def export(
    model_dir: str = typer.Argument(..., help="Native model dir, AllenNLP weights dir, or 'default'."),
    out_dir: Path = typer.Argument(..., help="Where to write."),
    format: str = typer.Option("allennlp", "--format", help="allennlp (options.json + weights.hdf5) or native."),
) -> None:
    """Export a model; the softmax and vocab.txt go along when the model has them."""
    from ..training.modelio import SOFTMAX_FILE, load_pretrained, save_pretrained, write_softmax

    if format not in ("allennlp", "native"):
        raise typer.BadParameter(Errors.E_EXPORT_FORMAT.format(name=format))
    try:
        bilm, softmax, vocab, provenance = load_pretrained(model_dir, backend="reference")
    except (ValueError, FileNotFoundError) as err:
        typer.secho(str(err), fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    out_dir.mkdir(parents=True, exist_ok=True)
    if format == "native":
        save_pretrained(out_dir, bilm, softmax, vocab, provenance)
    else:
        bilm.to_allennlp(out_dir / "options.json", out_dir / "weights.hdf5")
        if softmax is not None:
            write_softmax(out_dir / SOFTMAX_FILE, softmax)
            vocab.save(out_dir)
    typer.echo(f"wrote {format} model to {out_dir}" + (" (with softmax and vocab.txt)" if softmax is not None else ""))
