"""The typer application every command registers on, and option checks the commands share."""

import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NoReturn, Optional

import typer
from typer.core import TyperGroup

from ..device import torch_device
from ..errors import Errors, Warnings
from ..paths import check_output_path
from ..ranks import printing_ranks


class _Commands(TyperGroup):
    """The application's commands. Ctrl-C in one that does not say itself what it kept (pretrain and embed do)
    ends it as theirs: status 130 and a line on stderr, E_INTERRUPTED (typer, 0.15.4 to 0.29, exits with 130
    without a word; click's own main, which typer's replaces, printed "Aborted!" and exited with 1)."""

    def get_command(self, ctx, cmd_name):
        """The command, its arguments shown (usage line, help, "Missing argument") in capitals, OUTPUT_DIR, as
        its help and errors.py name them: typer 0.29 shows the parameter's own name, {output_dir}."""
        command = super().get_command(ctx, cmd_name)
        for param in getattr(command, "params", ()):
            if param.param_type_name == "argument" and param.metavar is None and _shown_lowercase(param, ctx):
                param.metavar = param.name.upper()
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            if ctx.obj == COMMAND_LINE and ctx.invoked_subcommand == "pretrain" and printing_ranks().rank != 0:
                # Under torchrun every process gets the Ctrl-C: rank 0 says it once, as pretrain's own stops.
                raise typer.Exit(130)
            fail(Errors.E_INTERRUPTED.format(command=ctx.invoked_subcommand, rerun=""), status=130,
                 fg=typer.colors.YELLOW)


def _shown_lowercase(param, ctx) -> bool:
    """Whether typer shows argument ``param`` by its own, lowercase name: typer 0.29's (``display_name_raw``),
    which brackets or braces whatever name it shows. Older typer (0.15) shows ``MODEL_DIR``, or ``[TEXT_PATH]``
    when optional, itself, and an explicit metavar there would lose the brackets."""
    return hasattr(param, "display_name_raw")


app = typer.Typer(
    cls=_Commands,
    name="spacy-elmo",
    help="ELMo biLMs: pretrain on your corpus, evaluate, fit-state, export, embed, demo; config writes a spacy train config; info prints what is installed (for bug reports).",
    no_args_is_help=True,
    add_completion=False,
)


def progress_option():
    """``--progress/--no-progress``, of every command that draws progress bars (README: "every command's alike")."""
    return typer.Option(True, help="Show progress bars (on stderr; --no-progress: none).")


#: Given by main() as the commands' ``ctx.obj``: this process is the command line, and ends with its command
#: (pretrain may then leave its signals ignored while it exits; an in-process caller, CliRunner, goes on).
COMMAND_LINE = "spacy-elmo command line"


@contextmanager
def extension_warning_hidden() -> Iterator[None]:
    """Within: the compiled extension's missing (W_NO_EXTENSION, some 500 characters) is not warned, for the
    commands whose output says it themselves (``--version``, ``info`` with the reason and the fix)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="spacy-elmo: the compiled extension")
        yield


def _print_version(value: bool) -> None:
    if value:
        import torch

        from .. import __version__
        from ..ops import fused_available

        with extension_warning_hidden():
            fused = fused_available()
        typer.echo(f"spacy-elmo {__version__} (torch {torch.__version__}, compiled kernels: "
                   f"{'yes' if fused else 'no, the reference path runs: spacy-elmo info says why'})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version (and whether the compiled kernels load) and exit."),
) -> None:
    """ELMo biLMs for spaCy and PyTorch."""
    # A callback keeps typer in multi-command mode even while one command exists.


def positive_int(value: int) -> int:
    """Option callback: a usage error (exit 2) naming the option unless ``value >= 1``."""
    if value is not None and value < 1:
        raise typer.BadParameter(Errors.E_NOT_POSITIVE_OPTION.format(value=value))
    return value


def one_of(choices, message: str):
    """An option callback: a usage error (exit 2) naming the option, ``message`` formatted with
    ``name=`` the value, unless the value is one of ``choices``."""

    def check(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(message.format(name=value))
        return value

    return check


def checked_by(check, errors=(ValueError,)):
    """An option callback: ``check(value)`` (unless no value was given), an error of ``errors`` it
    raises turned into a usage error (exit 2) naming the option, with the error's message."""

    def callback(value):
        if value is not None:
            try:
                check(value)
            except errors as err:
                raise typer.BadParameter(str(err)) from err
        return value

    return callback


def non_negative_int(value: int) -> int:
    """Option callback: a usage error (exit 2) naming the option unless ``value >= 0``."""
    if value is not None and value < 0:
        raise typer.BadParameter(Errors.E_NEGATIVE_OPTION.format(value=value))
    return value


def given_text(value: str) -> str:
    """Parser of every path argument and option typed ``str`` (MODEL_DIR, which may be ``default``; --init, --model;
    config's OUTPUT): a usage error (exit 2) naming it for an empty string, :data:`Errors.E_PATH_EMPTY`."""
    if value == "":  # "$OUT" with OUT unset: it was the current directory, which export --overwrite emptied
        raise typer.BadParameter(Errors.E_PATH_EMPTY)
    return value


@contextmanager
def model_argument() -> Iterator[None]:
    """Within: a file given as a model argument (MODEL_DIR, --model) is refused advising its directory,
    :data:`Errors.E_MODEL_PATH_FIX_DIR`, and a directory without a model advising what one is and which commands
    write one (:meth:`NativeDirMissing.advising_cli`), not BiLM's Python API, which a command line cannot call.
    (pretrain's --init says its own: ``check_init_model``.)"""
    from ..bilm.native_io import ModelPathIsFile, NativeDirMissing  # the biLM's modules and h5py: for the commands that load a model

    try:
        yield
    except ModelPathIsFile as err:
        raise err.advising(Errors.E_MODEL_PATH_FIX_DIR) from None
    except NativeDirMissing as err:
        raise err.advising_cli() from None


def model_name(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    """Callback of every model argument and option that takes 'default' (evaluate's and export's MODEL_DIR, embed's
    and demo's --model, pretrain's --init), after ``parser=given_text``: a warning, once, where 'default' is given
    and the current directory holds a directory named default, which it does not name (the bundled model
    is read: ``resolve_model_dir``); not where embed's --model is left at its default. Under torchrun, rank 0's.
    The source is told by its name: typer 0.29 ships its own copy of click (``typer._click``), whose
    ParameterSource is not ``click.core``'s, so an identity test against the installed click's was never true."""
    source = None if param.name is None else ctx.get_parameter_source(param.name)
    if (value == "default" and Path("default").is_dir() and source is not None
            and source.name not in ("DEFAULT", "DEFAULT_MAP") and printing_ranks().rank == 0):
        warn(Warnings.W_DEFAULT_IS_BUNDLED.format(path=Path("default").absolute()))
    return value


def given_path(value: Optional[str]) -> Optional[Path]:
    """Callback of every path argument and option typed ``Path``, given with ``path_type=str`` (typer's path type,
    which --help shows as ``<path>``, handing on the string as given: its Path conversion made "" ``Path(".")``):
    :func:`given_text` as a Path (None: not given)."""
    return None if value is None else Path(given_text(value))


#: Callback of every output path argument (pretrain's OUTPUT_DIR, export's OUT_DIR, embed's OUTPUT_PATH, config's
#: OUTPUT): a usage error (exit 2) naming it for a path that starts with a ~ no shell expanded ("~/out", --x=~/out),
#: which would create a directory named ~ in the current directory.
checked_output = checked_by(check_output_path)


def given_output_path(value: Optional[str]) -> Optional[Path]:
    """Callback of every output path argument typed ``Path`` (all but config's OUTPUT, a ``str``), in place of
    :func:`given_path`: that, then :data:`checked_output`."""
    return checked_output(given_path(value))


#: Option callback of --device: a usage error (exit 2) naming the option for a device torch does not
#: know or this machine lacks (``tpu``, ``cuda`` without CUDA, ``cuda:99``), before any model or text is read.
known_device = checked_by(torch_device, (RuntimeError,))
#: --device's help, every command's: what known_device accepts.
DEVICE_HELP = "cpu, cuda (the current GPU), cuda:N (GPU N) or mps (Apple GPU)."

def spacy_language(value: str) -> str:
    """Option callback of --lang: a usage error (exit 2) naming the option unless spaCy has language
    ``value`` (spacy.blank's lookup, without building the tokenizer, which happened only after the
    corpus was listed; a tokenizer package that is missing is a fallback with a warning, not this error)."""
    if value is not None:
        from spacy.util import get_lang_class  # spaCy: imported when a command runs, not for --help or spacy-elmo export

        try:
            get_lang_class(value)
        except Exception as err:  # noqa: BLE001 - ImportError, or AttributeError for 'en.stop_words'
            raise typer.BadParameter(Errors.E_UNKNOWN_LANG.format(lang=value, error=f"{type(err).__name__}: {err}")) from err
    return value


def echo_styled(message: str, fg: str, err: bool = False) -> None:
    """``typer.secho(message, fg=fg, err=err)``, without colour where ``NO_COLOR`` is set and not empty
    (https://no-color.org): typer's help and usage-error boxes (rich) honour it, its ``secho`` does not."""
    if os.environ.get("NO_COLOR"):
        typer.echo(message, err=err)  # secho without a colour still ends the line with a reset code
    else:
        typer.secho(message, fg=fg, err=err)


def fail(message: str, status: int = 1, fg: str = typer.colors.RED) -> NoReturn:
    """End the command with exit ``status`` and ``message`` on stderr (stdout stays the command's result
    alone): an error, red, status 1; or an interruption (yellow, 130) saying what was kept and how to go on."""
    echo_styled(message, fg=fg, err=True)
    raise typer.Exit(status)


def warn(message: str) -> None:
    """``message``, a warning, in yellow on stderr: stdout stays the command's result alone."""
    echo_styled(message, fg=typer.colors.YELLOW, err=True)
