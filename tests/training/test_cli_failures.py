"""Every command's way out when it cannot finish, through the shared ``cli.app.fail``: its errors.py message on
stderr (stdout stays the command's result alone, so ``spacy-elmo config ner > x.cfg`` never holds an error)
and its exit status: 1 for an error, 130 for Ctrl-C."""

import errno
import os
import re
import signal
import sys

import click
import pytest
import torch
import typer

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.cli import app, main
from spacy_elmo.errors import Errors, Warnings
from spacy_elmo.paths import shell_quoted

from tests.cli_text import ended, runner

from .conftest import TINY, write_corpus

#: A write error with a known text, where the real one names a temporary file.
READ_ONLY = OSError(errno.EROFS, "Read-only file system")


def _raise(err):
    def raising(*args, **kwargs):
        raise err

    return raising


def _no_model(command, *args):
    """A case: ``command ARGS``, MODEL in ARGS a model directory that does not exist."""

    def case(tmp_path, monkeypatch):
        missing = tmp_path / "missing"
        filled = [str(missing) if arg == "MODEL" else arg.format(tmp=tmp_path) for arg in args]
        # fit-state refuses the bundled model: its message does not offer "default"
        or_default = "" if command == "fit-state" else Errors.E_MODEL_PATH_OR_DEFAULT
        return [command, *filled], Errors.E_MODEL_PATH_MISSING.format(path=missing, or_default=or_default)

    return case


def _unwritable(where, message, command, *args):
    """A case: ``command ARGS OUT`` whose write (``where``) of OUT fails with READ_ONLY, said by ``message``."""

    def case(tmp_path, monkeypatch):
        monkeypatch.setattr(where, _raise(READ_ONLY))
        out = tmp_path / "out"
        return [command, *args, str(out)], message.format(path=out, error=READ_ONLY)

    return case


def _unreachable(message, command, *args):
    """A case: ``command ARGS OUT``, OUT a path the system cannot look at (its name too long; for another
    account than root, a directory it may not enter is the same), said by ``message`` with the stat's error."""

    def case(tmp_path, monkeypatch):
        out = tmp_path / ("x" * 300)
        with pytest.raises(OSError) as stat:
            os.stat(out)
        return [command, *args, str(out)], message.format(path=out, error=stat.value)

    return case


def _config_dir(tmp_path, monkeypatch):
    return ["config", "ner", str(tmp_path)], Errors.E_CONFIG_IS_DIR.format(path=tmp_path, example=tmp_path / "ner.cfg")


def _a_file_there(message, command, *args):
    """A case: ``command ARGS OUT``, OUT a file already (config's output, export's directory)."""

    def case(tmp_path, monkeypatch):
        existing = tmp_path / "out"
        existing.write_text("mine\n", encoding="utf-8")
        return [command, *args, str(existing)], message.format(path=existing)

    return case


def _embed(tmp_path, monkeypatch):
    missing = tmp_path / "missing.txt"
    return ["embed", str(missing), str(tmp_path / "out.h5")], Errors.E_EMBED_INPUT_MISSING.format(path=missing)


def _tiny_with_a_state(path):
    """A tiny native model at ``path`` with a fitted initial state (what ``fit-state --clear`` removes)."""
    bilm = BiLM(BiLMConfig(**TINY))
    L, P, C = TINY["n_layers"], TINY["projection_dim"], TINY["cell_dim"]
    bilm.set_initial_state((torch.full((2, L, P), 0.5), torch.full((2, L, C), 0.5)))
    bilm.save(path)


def _fit_state_write(tmp_path, monkeypatch):
    model = tmp_path / "tiny"
    _tiny_with_a_state(model)  # without a state --clear writes nothing
    monkeypatch.setattr("spacy_elmo.bilm.native_io.write_initial_state", _raise(READ_ONLY))
    return ["fit-state", str(model), "--clear"], Errors.E_FIT_STATE_WRITE.format(path=model, shell_path=shell_quoted(model), error=READ_ONLY)


def _pretrain_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "x")
    train = write_corpus(tmp_path / "train.txt", 10)
    message = Errors.E_TORCHRUN_ENV.format(name="WORLD_SIZE", value="x", lowest=1, highest=2**31 - 1)
    return ["pretrain", str(train), str(tmp_path / "out")], message


def _pretrain_run(tmp_path, monkeypatch):
    missing = tmp_path / "missing.txt"
    return ["pretrain", str(missing), str(tmp_path / "out"), "--no-progress"], Errors.E_TRAIN_PATH_MISSING.format(path=missing)


FAILURES = {
    "config-dir": _config_dir,
    "config-exists": _a_file_there(Errors.E_CONFIG_EXISTS, "config", "ner"),
    "config-unreachable": _unreachable(Errors.E_CONFIG_WRITE, "config", "ner"),
    "config-write": _unwritable("spacy_elmo.cli.config.atomic_write_text", Errors.E_CONFIG_WRITE, "config", "ner"),
    "demo": _no_model("demo", "--model", "MODEL"),
    "embed": _embed,
    "evaluate": _no_model("evaluate", "MODEL", "{tmp}/text.txt"),
    "export-load": _no_model("export", "MODEL", "{tmp}/out"),
    "export-not-a-dir": _a_file_there(Errors.E_EXPORT_NOT_A_DIR, "export", "default"),
    "export-unreachable": _unreachable(Errors.E_EXPORT_WRITE, "export", "default"),
    "export-write": _unwritable("spacy_elmo.cli.export.replace_dir", Errors.E_EXPORT_WRITE, "export", "default"),
    "fit-state-load": _no_model("fit-state", "MODEL", "--clear"),
    "fit-state-write": _fit_state_write,
    "pretrain-environment": _pretrain_environment,
    "pretrain-run": _pretrain_run,
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_every_command_fails_with_its_message_on_stderr_and_status_1(tmp_path, monkeypatch, failure):
    args, message = FAILURES[failure](tmp_path, monkeypatch)
    ended(runner.invoke(app, args), 1, message)


# -- Ctrl-C ------------------------------------------------------------------------------------
#: Per command: where a Ctrl-C comes (a function the command calls, raising KeyboardInterrupt), its arguments.
INTERRUPTED = {
    "config": ("spacy_elmo.cli.config.atomic_write_text", lambda tmp: ["ner", str(tmp / "ner.cfg")]),
    "demo": ("spacy_elmo.bilm.BiLM.load", lambda tmp: ["--model", "default", "--threads", "1"]),
    "evaluate": ("spacy_elmo.training.evaluate.evaluate_model_dir", lambda tmp: ["default", str(tmp)]),
    "export": ("spacy_elmo.training.modelio.load_pretrained", lambda tmp: ["default", str(tmp / "out")]),
    "fit-state": ("spacy_elmo.bilm.native_io.model_path", lambda tmp: [str(tmp), "--clear"]),
    # before the run, whose own Ctrl-C says what the checkpoint holds (test_cli_inputs)
    "pretrain": ("spacy_elmo.cli.pretrain.torchrun_ranks", lambda tmp: [str(tmp), str(tmp / "out")]),
}


@pytest.mark.parametrize("command", sorted(INTERRUPTED))
def test_ctrl_c_ends_every_command_with_130_and_a_word_on_stderr(tmp_path, monkeypatch, command):
    """typer (0.15.4 to 0.29) exits with 130 without a word (click's own main: "Aborted!" and 1), where
    pretrain and embed say what they kept: every command now says it stopped and how to go on."""
    where, args = INTERRUPTED[command]
    monkeypatch.setattr(where, _raise(KeyboardInterrupt()))
    ended(runner.invoke(app, [command, *args(tmp_path)]), 130, Errors.E_INTERRUPTED.format(command=command, rerun=""))


def _terminated(*args, **kwargs):
    """SIGTERM (Slurm's preemption, docker stop, `timeout`) delivered to this process where the command calls this:
    only under a handler of the command's own, since Python's default action would end the test session."""
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler), f"SIGTERM's handler is {handler}: the signal would end the process silently (-15)"
    signal.raise_signal(signal.SIGTERM)
    raise AssertionError("the signal was not delivered")


#: The long commands besides pretrain (test_kill): where SIGTERM comes, their arguments, what they say.
TERMINATED = {
    "embed": ("spacy_elmo.embedding.check_paths", lambda tmp: [str(tmp / "in.txt"), str(tmp / "out.h5")],
              lambda tmp: Errors.E_EMBED_INTERRUPTED_EARLY),
    "export": ("spacy_elmo.training.modelio.load_pretrained", lambda tmp: ["default", str(tmp / "out")],
               lambda tmp: Errors.E_INTERRUPTED.format(command="export", rerun="")),
    "fit-state": ("spacy_elmo.bilm.native_io.model_path", lambda tmp: [str(tmp), "--clear"],
                  lambda tmp: Errors.E_INTERRUPTED.format(command="fit-state", rerun="")),
}


@pytest.mark.parametrize("command", sorted(TERMINATED))
def test_sigterm_ends_a_long_command_as_ctrl_c_does_with_143(tmp_path, monkeypatch, command):
    """SIGTERM ended embed (and export, fit-state) at once: exit status -15, no word, embed's lock and unfinished
    part left behind. They now stop as on Ctrl-C, as pretrain does (the handling shared): the same word, 143."""
    where, args, message = TERMINATED[command]
    monkeypatch.setattr(where, _terminated)
    before = signal.getsignal(signal.SIGTERM)
    ended(runner.invoke(app, [command, *args(tmp_path)]), 128 + signal.SIGTERM, message(tmp_path))
    assert signal.getsignal(signal.SIGTERM) is before  # in-process: the caller's handler back
    if command == "embed":
        assert sorted(path.name for path in tmp_path.iterdir()) == []  # no lock file left


#: export's and fit-state's arguments, and what they say once done.
COMPLETED = {
    "export": (lambda tmp: [str(tmp / "model"), str(tmp / "out")], "wrote allennlp model to"),
    "fit-state": (lambda tmp: [str(tmp / "model"), "--clear"], "cleared the initial state of"),
}


@pytest.mark.parametrize("command", sorted(COMPLETED))
def test_sigterm_after_the_result_is_written_stops_nothing(tmp_path, monkeypatch, command):
    """Once export's OUT_DIR (fit-state's state) is written whole, the command marks its run complete
    (Stop.complete): a SIGTERM from then on, under the command's handler, is recorded, not raised (it said
    "interrupted, rerun" of a complete result, 143), and the command ends as it would have, 0. The signal comes as
    the mark is set (in-process the command line's ignoring is off: the handler stays); in-process it is the
    caller's, delivered to its handler once the command's block ended (it was dropped)."""
    from spacy_elmo.cli import signals

    if command == "fit-state":
        _tiny_with_a_state(tmp_path / "model")  # without a state --clear writes nothing
    else:
        BiLM(BiLMConfig(**TINY)).save(tmp_path / "model")
    args, said = COMPLETED[command]
    real, sent, caught = signals.Stop.ignore_signals, [], []

    def then_terminated(stop):
        real(stop)
        sent.append(stop.reporting)
        signal.raise_signal(signal.SIGTERM)  # the command's handler: the test session goes on

    monkeypatch.setattr(signals.Stop, "ignore_signals", then_terminated)
    before = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))  # the caller's
    try:
        callers = signal.getsignal(signal.SIGTERM)
        result = runner.invoke(app, [command, *args(tmp_path)])
        assert signal.getsignal(signal.SIGTERM) is callers  # in-process: the caller's handler back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert sent == [True]  # the run marked complete, once
    assert caught == [signal.SIGTERM]  # the caller's, after the command
    assert result.exit_code == 0, result.output
    assert said in result.stdout and Errors.E_INTERRUPTED.format(command=command, rerun="") not in result.stderr
    if command == "export":
        assert BiLM.load(tmp_path / "out").config.projection_dim == TINY["projection_dim"]


#: Run in a process of its own: the command line (argv[1:]) with a SIGTERM sent to itself at exit (atexit), after
#: the command said what it wrote.
_TERMINATED_AT_EXIT = """
import atexit, os, signal, sys
atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))
sys.argv = ["spacy-elmo", *sys.argv[1:]]
from spacy_elmo.__main__ import main
main()
"""


def test_sigterm_after_export_said_it_wrote_exits_0(tmp_path):
    """export printed "wrote ..." and restored Python's default SIGTERM action: a SIGTERM while the process exited
    (its atexit callbacks, the interpreter's teardown) killed it by the signal, -15, after a complete export. The
    command line ignores it from then on: 0. A real process: the default action would end the test session."""
    import subprocess
    from pathlib import Path

    import spacy_elmo

    BiLM(BiLMConfig(**TINY)).save(tmp_path / "model")
    root = str(Path(spacy_elmo.__file__).resolve().parent.parent)  # this checkout's package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-c", _TERMINATED_AT_EXIT, "export", str(tmp_path / "model"), str(tmp_path / "out")]
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, (res.returncode, res.stderr)
    assert f"wrote allennlp model to {tmp_path / 'out'}" in res.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["options.json", "weights.hdf5"]


def test_ctrl_c_in_embed_says_what_it_kept(tmp_path, monkeypatch):
    text = write_corpus(tmp_path / "text.txt", 10)
    out = tmp_path / "out.h5"
    monkeypatch.setattr("spacy_elmo.embedding.check_paths", _raise(KeyboardInterrupt()))
    result = runner.invoke(app, ["embed", str(text), str(out)])
    ended(result, 130, Errors.E_EMBED_INTERRUPTED_EARLY.format(parts=tmp_path / "out.h5.parts"))
    assert Errors.E_INTERRUPTED.format(command="embed", rerun="") not in result.stderr  # said once, by embed


def test_ctrl_c_in_pretrain_on_another_rank_exits_130_unsaid(tmp_path, monkeypatch, capsys):
    """Under torchrun every process gets the Ctrl-C: rank 0 says it stopped, the others exit quietly."""
    where, args = INTERRUPTED["pretrain"]
    monkeypatch.setattr(where, _raise(KeyboardInterrupt()))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(sys, "argv", ["spacy-elmo", "pretrain", *args(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 130
    assert capsys.readouterr().err == ""


def test_ctrl_c_in_another_command_on_a_rank_besides_0_is_said(tmp_path, monkeypatch, capsys):
    """Only pretrain's other ranks exit quietly (rank 0 says it for the job): another command in a process with
    torchrun's variables set (in a job script, say) still says it stopped and how to go on."""
    where, args = INTERRUPTED["config"]
    monkeypatch.setattr(where, _raise(KeyboardInterrupt()))
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["spacy-elmo", "config", *args(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 130
    assert Errors.E_INTERRUPTED.format(command="config", rerun="") in capsys.readouterr().err


def test_a_real_sigint_ends_the_command_line_with_130(tmp_path, monkeypatch, capsys):
    """The console script's main(), and a SIGINT as the terminal sends it, not an exception put in its place."""

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # Python's own handler: KeyboardInterrupt
        raise AssertionError("the signal was not delivered")

    monkeypatch.setattr("spacy_elmo.training.evaluate.evaluate_model_dir", interrupted)
    monkeypatch.setattr(sys, "argv", ["spacy-elmo", "evaluate", "default", str(tmp_path)])
    # Python's own handler, as in a terminal: a shell's background job (`pytest &`) starts with SIGINT ignored
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as exited:
            main()
    except KeyboardInterrupt:  # escaped main(): not pytest's own Ctrl-C
        pytest.fail("Ctrl-C escaped main() as a KeyboardInterrupt")
    finally:
        signal.signal(signal.SIGINT, before)
    assert exited.value.code == 130
    captured = capsys.readouterr()
    assert Errors.E_INTERRUPTED.format(command="evaluate", rerun="") in captured.err
    assert captured.out == ""


#: Run in a process of its own: a real SIGINT (Python's own handler, as in a terminal) once the module named by
#: argv[1] starts importing, then the command line entered as argv[2] says: ``-m`` (``python -m spacy_elmo``), or
#: ``MODULE:FUNCTION``, the console script's entry in pyproject.toml, called as pip's script calls it.
_INTERRUPTED_STARTING = """
import importlib.abc, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with SIGINT ignored
at, entry = sys.argv[1], sys.argv[2]

class Interrupting(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == at:
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupting())
sys.argv = ["spacy-elmo", "info"]
if entry == "-m":
    runpy.run_module("spacy_elmo", run_name="__main__", alter_sys=True)
else:
    module, function = entry.split(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
"""


def _console_script() -> str:
    """The console script's entry (``MODULE:FUNCTION``), as pyproject.toml declares it."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["scripts"]["spacy-elmo"]


@pytest.mark.parametrize("entry", ["-m", "script"])
@pytest.mark.parametrize("module", ["torch", "typer", "spacy_elmo.cli.pretrain"])
def test_ctrl_c_while_the_command_line_starts_exits_130_with_one_line(tmp_path, entry, module):
    """A Ctrl-C in the first 1-2 s, while torch and the commands' modules import (before any command could
    catch it), printed Python's traceback: it now ends as a command's Ctrl-C does, with one line and 130."""
    import subprocess
    from pathlib import Path

    import spacy_elmo

    root = str(Path(spacy_elmo.__file__).resolve().parent.parent)  # this checkout's package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-c", _INTERRUPTED_STARTING, module, "-m" if entry == "-m" else _console_script()]
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert (res.returncode, res.stderr, res.stdout) == (130, Errors.E_INTERRUPTED_STARTING + "\n", "")


# -- warnings ----------------------------------------------------------------------------------
def test_demo_without_the_bundled_model_warns_on_stderr(tmp_path, monkeypatch):
    """The demo's warning went to stdout, between its results; every other warning goes to stderr."""
    monkeypatch.setattr("spacy_elmo.cli.demo.DEFAULT_MODEL_DIR", tmp_path / "not-installed")
    monkeypatch.setattr("spacy_elmo.cli.demo._tokens_per_second", lambda bilm: 1.0)
    monkeypatch.setattr("spacy_elmo.cli.demo._pipeline_words_per_second", lambda model_dir: 1.0)
    result = runner.invoke(app, ["demo", "--threads", "1"])
    assert result.exit_code == 0, result.output
    warning = Warnings.W_DEMO_RANDOM_MODEL.format(path=tmp_path / "not-installed")
    assert warning in result.stderr and warning not in result.stdout
    assert "random small preset" in result.stdout


# -- help and usage errors ---------------------------------------------------------------------
#: Every command's arguments, as its help, README.md and errors.py name them ("Choose another OUTPUT_DIR").
ARGUMENTS = {
    "config": ["NAME", "[OUTPUT]"],
    "demo": [],
    "embed": ["INPUT_PATH", "OUTPUT_PATH"],
    "evaluate": ["MODEL_DIR", "TEXT_PATH"],
    "export": ["MODEL_DIR", "OUT_DIR"],
    "fit-state": ["MODEL_DIR", "[TEXT_PATH]"],
    "info": [],
    "pretrain": ["TRAIN_PATH", "OUTPUT_DIR"],
}


def test_arguments_are_shown_and_named_in_usage_errors_as_the_messages_name_them():
    """typer 0.29 showed ``{output_dir}`` in the usage line and said "Missing argument 'output_dir'", while
    the help and errors.py ask for OUTPUT_DIR."""
    group = typer.main.get_command(app)
    assert sorted(group.list_commands(click.Context(group))) == sorted(ARGUMENTS)
    for command, arguments in ARGUMENTS.items():
        shown = runner.invoke(app, [command, "--help"], terminal_width=200)
        assert shown.exit_code == 0, shown.output
        usage = next(line for line in shown.stdout.splitlines() if "Usage:" in line)
        # a required argument bare or in braces (typer 0.29), an optional one in brackets (every typer)
        shown_arguments = re.findall(r"[\[{]?\b[A-Z_]{3,}\b[\]}]?", usage.split(command, 1)[1])
        assert [name.strip("{}") for name in shown_arguments] == ["[OPTIONS]", *arguments], usage
        if arguments:
            missing = runner.invoke(app, [command])
            assert missing.exit_code == 2, missing.output
            assert f"Missing argument '{arguments[0]}'" in missing.stderr, missing.stderr


def test_device_help_lists_what_the_option_accepts():
    """--device's help said "cpu or cuda." while the option takes cuda:N and mps too (E_UNKNOWN_DEVICE lists them)."""
    forms = ["cpu", "cuda", "cuda:N", "mps"]
    assert all(form in Errors.E_UNKNOWN_DEVICE for form in forms)
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    with_device = {}
    for name in group.list_commands(ctx):
        for param in group.get_command(ctx, name).params:
            if param.name == "device":
                with_device[name] = param.help
    assert sorted(with_device) == ["embed", "evaluate", "pretrain"]
    for name, help_text in with_device.items():
        assert all(re.search(rf"(^|\s){re.escape(form)}\b", help_text) for form in forms), (name, help_text)


@pytest.mark.parametrize("inside", ["", "elmo"])
@pytest.mark.parametrize("command", ["embed", "evaluate"])
def test_a_saved_pipeline_given_as_model_is_named_with_how_to_get_its_biLM(tmp_path, command, inside):
    """A saved spaCy pipeline (model-last) or its elmo directory as the model: the command said only "not a
    spacy-elmo model directory (no config.json)", where loading it as weights names the pipeline. Said so here
    too, with how to export its biLM (evaluate: that it has no softmax), and the directory exported so works."""
    import spacy

    BiLM(BiLMConfig(**TINY)).save(tmp_path / "tiny")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "tiny")})
    nlp.to_disk(tmp_path / "trained")
    text = write_corpus(tmp_path / "text.txt", 3)
    model = str(tmp_path / "trained" / inside) if inside else str(tmp_path / "trained")
    args = {
        "embed": ["embed", str(text), str(tmp_path / "out.h5"), "--model", model, "--no-progress"],
        "evaluate": ["evaluate", model, str(text), "--no-progress"],
    }[command]
    pipeline = tmp_path / "trained"
    message = {"embed": Errors.E_MODEL_IS_PIPELINE, "evaluate": Errors.E_EVALUATE_PIPELINE}[command]
    given = (f"{pipeline} is a saved spaCy pipeline" if not inside
             else f"{pipeline / 'elmo'} is the directory of the 'elmo' component of the saved spaCy pipeline {pipeline}")
    message = message.format(given=given, py_pipeline=repr(str(pipeline)), shell_pipeline=shell_quoted(pipeline))
    ended(runner.invoke(app, args), 1, message)
    assert f"`spacy-elmo export {pipeline} ELMO_DIR --format native`" in message
    exported = runner.invoke(app, ["export", str(pipeline), str(tmp_path / "saved"), "--format", "native"])  # what it says
    assert exported.exit_code == 0, exported.output
    saved = [str(tmp_path / "saved") if arg == model else arg for arg in args]
    result = runner.invoke(app, saved)
    if command == "evaluate":  # a biLM of a pipeline has no softmax
        ended(result, 1, Errors.E_NO_SOFTMAX.format(path=tmp_path / "saved", shell_path=shell_quoted(tmp_path / "saved")))
    else:
        assert result.exit_code == 0, result.output


def test_an_export_stopped_before_its_first_move_says_no_overwrite(tmp_path, monkeypatch):
    """An export into an empty OUT_DIR stopped after it wrote its hidden copy (.replace.PID.tmp) but before it moved
    a file out of it said "Rerun ..., adding --overwrite": the check counted that copy as content, which the rerun's
    check_output_dir removes (its writer no longer runs) before it looks. It says no --overwrite, and the same
    command writes the model."""
    import spacy_elmo.atomic

    BiLM(BiLMConfig(**TINY)).save(tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    real_replace = os.replace

    def replace(src, dst):  # the first file moved up from replace_dir's hidden directory into OUT_DIR: Ctrl-C
        if os.path.dirname(dst) == str(out.resolve()):
            assert os.path.basename(os.path.dirname(src)).startswith(".replace.")
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(spacy_elmo.atomic.os, "replace", replace)
    command = ["export", str(tmp_path / "model"), str(out)]
    result = runner.invoke(app, command)
    monkeypatch.undo()
    ended(result, 130, Errors.E_INTERRUPTED.format(command="export", rerun="") + "\n")
    result = runner.invoke(app, command)  # what it says: the same command
    assert result.exit_code == 0, result.output
    assert BiLM.load(out).config.projection_dim == TINY["projection_dim"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_export_stopped_while_it_filled_out_dir_says_to_rerun_with_overwrite(tmp_path, monkeypatch, overwrite):
    """An export into an empty OUT_DIR stopped while replace_dir moved the model in left part of it there; "Rerun the
    same command" was then refused (OUT_DIR not empty without --overwrite). The message names --overwrite where the
    rerun needs it (not where it was given), and the rerun it names writes the model whole."""
    import spacy_elmo.atomic

    BiLM(BiLMConfig(**TINY)).save(tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    real_replace, moved = os.replace, []

    def replace(src, dst):  # the second file moved up from replace_dir's hidden directory into OUT_DIR: Ctrl-C
        if os.path.dirname(dst) == str(out.resolve()):
            if len(moved) == 1:
                raise KeyboardInterrupt
            moved.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(spacy_elmo.atomic.os, "replace", replace)
    command = ["export", str(tmp_path / "model"), str(out), *(["--overwrite"] if overwrite else [])]
    result = runner.invoke(app, command)
    monkeypatch.undo()
    rerun = "" if overwrite else Errors.E_INTERRUPTED_OVERWRITE.format(path=out)
    ended(result, 130, Errors.E_INTERRUPTED.format(command="export", rerun=rerun))
    assert len(moved) == 1 and any(out.iterdir())  # part of the model
    if not overwrite:
        assert runner.invoke(app, command).exit_code == 1  # the same command: refused, OUT_DIR not empty
        command.append("--overwrite")
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert BiLM.load(out).config.projection_dim == TINY["projection_dim"]
