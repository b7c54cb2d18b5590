"""Bad inputs to fit-state, evaluate, demo and the help texts: clear errors (exit 1 or 2, no
traceback) that name the problem and the fix, nothing dropped without a word."""

import json
import re
import shutil
import warnings

import click
import pytest
import typer

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm.native_io import INITIAL_STATE_NAME
from spacy_elmo.cli import app
from spacy_elmo.errors import Warnings
from tests.cli_text import mixed_runner as runner, plain
from tests.compressed import FORMATS, compressed

from .conftest import TINY, locked_by_another_process, write_corpus



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model of `pretrain` (softmax and vocab.txt), its training text and a held-out text."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("trained")
    train = write_corpus(base / "train.txt", 200)
    held = write_corpus(base / "held.txt", 30, seed=2)
    options = base / "tiny.json"
    options.write_text(json.dumps(TINY))
    out = base / "model"
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--options", str(options), "--max-steps", "2",
                                 "--batch-size", "4", "--unroll", "5", "--negatives", "8", "--threads", "1",
                                 "--backend", "reference", "--no-progress"])
    torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    return {"model": out, "train": train, "held": held}


@pytest.fixture
def model(trained, tmp_path):
    """A copy of the trained model that a test may change."""
    copy = tmp_path / "model"
    shutil.copytree(trained["model"], copy, ignore=shutil.ignore_patterns("data", "checkpoint.pt", "*.jsonl"))
    return copy


def files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def clean_error(result, code=1):
    """Exit ``code`` with a message, not a traceback."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.output


# -- fit-state -------------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["", " \n\n\t\n", None], ids=["empty", "blank", "empty-dir"])
def test_fit_state_on_a_text_without_text_names_it(model, tmp_path, content):
    if content is None:
        text = tmp_path / "texts"
        text.mkdir()
    else:
        text = tmp_path / "text.txt"
        text.write_text(content, encoding="utf-8")
    before = files(model)
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(text)]))
    assert str(text) in output and "no text" in output
    assert files(model) == before


def test_fit_state_on_binary_or_missing_text(model, tmp_path):
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\x00\x01\x02 not text \x00")
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(binary)]))
    assert "binary" in output and str(binary) in output
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(tmp_path / "missing.txt")]))
    assert "does not exist" in output
    assert not (model / INITIAL_STATE_NAME).exists()


def test_fit_state_needs_a_native_model_dir(trained, model, tmp_path):
    allen = tmp_path / "allen"
    assert runner.invoke(app, ["export", str(model), str(allen), "--format", "allennlp"]).exit_code == 0
    before = files(allen)
    output = clean_error(runner.invoke(app, ["fit-state", str(allen), str(trained["train"]), "--rows", "4"]))
    assert "AllenNLP" in output and "--format native" in output  # how to get a model it can write into
    assert files(allen) == before
    notmodel = tmp_path / "notmodel"
    notmodel.mkdir()
    output = clean_error(runner.invoke(app, ["fit-state", str(notmodel), str(trained["train"])]))
    assert "not a spacy-elmo model directory" in output
    # A missing path or a file said "not a spacy-elmo model directory" too (BiLM.load's messages now).
    output = clean_error(runner.invoke(app, ["fit-state", str(tmp_path / "missing"), str(trained["train"])]))
    assert "missing does not exist" in output
    output = clean_error(runner.invoke(app, ["fit-state", str(trained["train"]), str(trained["train"])]))
    assert "is a file, but a model is a directory" in output
    # AllenNLP files beside the native model: BiLM.load refuses that directory, so fit-state does too
    for name in ("options.json", "weights.hdf5"):
        shutil.copy(allen / name, model / name)
    before = files(model)
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "4"]))
    assert "holds two models" in output
    assert files(model) == before


def _pasted(message: str):
    """The words a shell makes of each command that ``message`` suggests (between backticks)."""
    import shlex

    return [shlex.split(command) for command in re.findall(r"`([^`]*)`", message)]


def test_a_path_in_a_suggested_command_is_one_shell_word(trained, tmp_path):
    """The commands messages suggest put paths unquoted: one with spaces (or a quote) pasted as several words. Now
    each such path is shell-quoted; the prose names it plain."""
    from spacy_elmo.bilm.native_io import SavedPipelineGiven
    from spacy_elmo.training.data import not_text_error
    from spacy_elmo.training.evaluate import evaluate_model_dir
    from tests.cli_text import runner as split_runner

    base = tmp_path / "my models" / "it's ünï"
    allen = base / "allen"
    with warnings.catch_warnings():  # what AllenNLP will not run, said elsewhere
        warnings.simplefilter("ignore")
        BiLM.load(trained["model"]).to_allennlp(allen / "options.json", allen / "weights.hdf5")
    result = split_runner.invoke(app, ["fit-state", str(allen), str(trained["held"])])
    assert result.exit_code == 1 and result.stderr.startswith(f"{allen} holds AllenNLP"), result.output
    bare = base / "bare"
    BiLM.load(trained["model"]).save(bare)  # no softmax
    with pytest.raises(ValueError) as no_softmax:
        evaluate_model_dir(bare, trained["held"])
    messages = [result.stderr, str(no_softmax.value), not_text_error(base / "a b.txt", "UTF-16LE"),
                str(SavedPipelineGiven(base / "pipe", base / "pipe"))]
    for message, path in zip(messages, [allen, bare, base / "a b.txt", base / "pipe"]):
        assert any(str(path) in words for words in _pasted(message)), message


def test_a_path_after_init_in_a_suggested_fix_is_one_shell_word(tmp_path):
    """"start a new OUTPUT_DIR with --init PATH" put PATH unquoted: it is shell-quoted as a command's is."""
    import shlex

    from spacy_elmo.training.checkpoint import check_settings
    from spacy_elmo.training.trainer import _diverged, _refuse_allennlp_output

    out = tmp_path / "my runs" / "it's 1"
    errors = [_diverged(5, "the loss", float("nan"), out, last_saved=4)]
    for saved, current in (({"data": "a"}, {"data": "b"}), ({"vocab_size": 3}, {"vocab_size": 4}),
                           ({"lr": 0.1}, {"lr": 0.2})):
        with pytest.raises(ValueError) as err:
            check_settings(saved, current, out)
        errors.append(err.value)
    out.mkdir(parents=True)
    BiLM(BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)).to_allennlp(
        out / "options.json", out / "weights.hdf5")
    with pytest.raises(FileExistsError) as err:
        _refuse_allennlp_output(out)
    errors.append(err.value)
    for error in errors:
        after_init = re.search(r".*--init (.*?)(?:, or start over|\)?\.$)", str(error), re.S)  # the last --init
        assert after_init and shlex.split(after_init.group(1)) == [str(out)], str(error)


def test_a_refused_resume_of_a_new_vocab_init_with_a_softmax_suggests_one_shell_word(tmp_path):
    """The branch of an --init that has a softmax (so --new-vocab, not the missing softmax, built the vocabulary):
    the options it suggests ("Resume with --init PATH --new-vocab") and how the run started name the path
    shell-quoted, one word however many spaces and quotes it holds."""
    import shlex

    from spacy_elmo.training.checkpoint import check_settings
    from tests.training.test_modelio import pretrained

    init = str(pretrained(tmp_path / "my models" / "it's the one"))  # a native model with a softmax
    with pytest.raises(ValueError) as err:
        check_settings({"init": init, "new_vocab": True}, {"init": init, "new_vocab": False}, tmp_path / "out")
    message = str(err.value)
    resume = re.search(r"Resume with (.*?) \(and the other", message, re.S)
    started = re.search(r"it was started with --init (.*?) --new-vocab\b", message, re.S)
    assert resume and started, message
    assert shlex.split(resume.group(1)) == ["--init", init, "--new-vocab"]
    assert shlex.split(started.group(1)) == [init]


def test_the_init_and_heldout_a_refused_resume_suggests_are_one_shell_word(tmp_path):
    """The refusals of a --resume that changes --init or --new-vocab put the --init path unquoted in the options
    they suggest ("Resume with --init PATH", "start a new OUTPUT_DIR with --init PATH") and in how the run started,
    as the held-out warning did its --heldout path: one with a space pasted as two words. Each is shell-quoted; the
    prose names it plain."""
    import shlex
    import types

    from spacy_elmo.training.checkpoint import check_settings
    from spacy_elmo.training.trainer import _warn_heldout_dropped

    base = tmp_path / "my models" / "it's"
    earlier, now = str(base / "first one"), str(base / "second one")  # neither exists: its softmax is unknown

    def refusal(saved, current):
        with pytest.raises(ValueError) as err:
            check_settings(saved, current, tmp_path / "out")
        return str(err.value)

    def words(pattern, message):
        found = re.search(pattern, message, re.S)
        assert found, message
        return shlex.split(found.group(1))

    other = refusal({"init": earlier, "data": "a"}, {"init": now, "data": "b"})  # E_RESUME_OTHER_INIT
    assert words(r"started with --init (.*?)\), but", other) == [earlier]
    assert words(r"names --init (.*?), another model", other) == [now]
    assert words(r"Resume with --init (.*?); to fine-tune", other) == [earlier]
    assert words(r"start a new OUTPUT_DIR with --init (.*)\.$", other) == [now]
    assert f"fine-tunes {earlier} (" in other and f"to fine-tune {now}, start" in other  # the prose: plain
    added = refusal({"init": None}, {"init": now})  # E_RESUME_INIT_ADDED
    assert words(r"this --resume adds --init (.*?): its vocabulary", added) == [now]
    assert words(r"start a new OUTPUT_DIR with --init (.*)\.$", added) == [now]
    new_vocab = refusal({"init": earlier, "new_vocab": False}, {"init": earlier, "new_vocab": True})
    assert words(r"start a new OUTPUT_DIR with --init (.*) --new-vocab\.$", new_vocab) == [earlier]  # ..._ADDED
    assert words(r"\(it was started with --init (.*?), without --new-vocab\)", new_vocab) == [earlier]
    left_out = refusal({"init": earlier, "new_vocab": False}, {"init": None})  # E_RESUME_INIT_MISSING
    assert words(r"Resume with (.*?) \(and the other", left_out) == ["--init", earlier]
    assert words(r"\(it was started with --init (.*?)\), but", left_out) == [earlier]
    unknown = refusal({"init": earlier, "new_vocab": True}, {"init": earlier, "new_vocab": False})  # ..._UNKNOWN
    assert words(r"Resume with (.*?) \(and the other", unknown) == ["--init", earlier, "--new-vocab"]
    assert words(r"started from --init (.*?) with a vocabulary", unknown) == [earlier]
    heldout = str(base / "held out.txt")
    log = types.SimpleNamespace(entries=[{"event": "heldout", "step": 4, "heldout_path": heldout}])
    with pytest.warns(RuntimeWarning) as said:
        _warn_heldout_dropped(log, tmp_path / "out", 4)
    (message,) = [str(w.message) for w in said]
    assert words(r"resume with --heldout (.*)\.$", message) == [heldout]
    assert f"held-out perplexity on {heldout} (last" in message


def test_standard_input_is_named_not_a_missing_file(model, trained):
    """`fit-state MODEL -` (and evaluate's, pretrain's TEXT) said "- does not exist": '-' is standard input
    elsewhere, which no command reads; it says so, with the fix (a file), as embed's own message does."""
    from spacy_elmo.errors import Errors

    for args in (["fit-state", str(model), "-", "--rows", "4"], ["evaluate", str(model), "-"],
                 ["evaluate", "-", str(trained["held"])]):
        output = plain(clean_error(runner.invoke(app, args, input="some text\n")))
        assert " ".join(Errors.E_PATH_STDIN.split()) in " ".join(output.split()), (args, output)
        assert "does not exist" not in output


def test_fit_state_refuses_a_model_a_running_pretrain_holds(model, trained):
    """fit-state took no lock: it wrote its state into a model directory that a running pretrain rewrites at every
    checkpoint (lost there, or left beside weights it was not fitted to). It takes pretrain's lock on the
    directory: refused while a pretrain holds it, naming the fix; a lock of a run that ended (killed) is none."""
    pytest.importorskip("fcntl")
    before = files(model)
    with locked_by_another_process(model):  # a running pretrain; then killed
        for args in ([str(trained["train"]), "--rows", "4"], ["--clear"]):
            output = plain(clean_error(runner.invoke(app, ["fit-state", str(model), *args])))
            assert "is in use: another process holds the directory's lock, a pretrain run" in output
            assert "or an export or a second fit-state there. Wait for it to end" in output
            assert f"spacy-elmo export {model} NEW_DIR --format native" in output  # or a copy
        assert files(model) == before
    result = runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "4"])
    assert result.exit_code == 0, result.output
    assert INITIAL_STATE_NAME in files(model)


def _tree(directory):
    """Every path under ``directory`` (relative) with its bytes (None for a directory)."""
    return {str(p.relative_to(directory)): (None if p.is_dir() else p.read_bytes()) for p in sorted(directory.rglob("*"))}


def test_export_overwrite_refuses_an_out_dir_a_running_pretrain_holds(trained, tmp_path):
    """export --overwrite took no lock: it replaced a directory a running pretrain writes, deleting its
    checkpoint.pt, train_log.jsonl and data/. It takes pretrain's lock, as fit-state does: refused while held,
    OUT_DIR untouched; a lock of a run that ended (killed) is none."""
    pytest.importorskip("fcntl")
    running = tmp_path / "running"
    shutil.copytree(trained["model"], running)
    before = _tree(running)
    args = ["export", str(trained["model"]), str(running), "--overwrite", "--format", "native"]
    with locked_by_another_process(running):
        for out in (running, running / "missing" / ".."):  # the lock was not taken for the second spelling
            output = plain(clean_error(runner.invoke(app, args[:2] + [str(out)] + args[3:])))
            assert "is in use: another process holds the directory's lock, a pretrain run (or a fit-state" in output
            assert "choose another OUT_DIR" in output, output
            assert _tree(running) == before
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "checkpoint.pt" not in _tree(running)


@pytest.mark.parametrize("command", ["fit-state", "export"])
def test_a_model_dir_that_cannot_be_locked_is_warned_of_as_pretrain_warns(command, model, trained, tmp_path, no_flock):
    """A file system without flock (some network mounts): pretrain and embed warned that their output was not
    locked, fit-state and export (--overwrite) went on without a word, though a pretrain running there is then not
    refused. They warn once, as pretrain does, and finish."""
    from tests.conftest import NO_FLOCK

    if command == "fit-state":
        path, name, args = model, "MODEL_DIR", ["fit-state", str(model), str(trained["train"]), "--rows", "4"]
    else:
        path, name = tmp_path / "out", "OUT_DIR"
        shutil.copytree(model, path)
        args = ["export", str(model), str(path), "--overwrite", "--format", "native"]
    with pytest.warns(RuntimeWarning) as said:
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    expected = Warnings.W_OUTPUT_NOT_LOCKED.format(name=name, path=path.resolve(), error=NO_FLOCK, command=command,
                                                   rival=f"a pretrain (or a second {command})")
    assert [str(w.message) for w in said if "could not lock" in str(w.message)] == [expected]
    assert f"a pretrain (or a second {command}) into it while this {command} runs is not refused" in expected


def test_export_in_place_keeps_a_run_resumable(trained, model, monkeypatch):
    """`export M M --overwrite` replaced M whole: a pretrain run's checkpoint.pt, data/ and train_log.jsonl went
    with it, and `pretrain --resume` could not continue. Refused where M holds a checkpoint; a model without one
    (nothing to resume) is still converted in place."""
    run = model.parent / "run"
    shutil.copytree(trained["model"], run)
    before = _tree(run)
    # the same directory spelt alike, relative against absolute, and through a missing directory and ".."
    # (resolved to RUN, but no directory to the kernel: the checks were skipped and RUN replaced whole)
    for model_arg, out_arg in [(str(run), str(run)), ("run", str(run)), (str(run), str(run / "missing" / ".."))]:
        with monkeypatch.context() as m:
            m.chdir(model.parent)
            output = plain(clean_error(runner.invoke(app, ["export", model_arg, out_arg, "--overwrite", "--format", "native"])))
        assert "holds a pretrain run's checkpoint (checkpoint.pt)" in output and "Export elsewhere" in output, output
        assert _tree(run) == before
    before = files(model)
    result = runner.invoke(app, ["export", str(model), str(model), "--overwrite", "--format", "native"])
    assert result.exit_code == 0, result.output
    assert files(model) == before  # the same model, written anew


def test_export_refuses_the_bundled_model_dir(model, tmp_path, monkeypatch):
    """export --overwrite replaced the bundled default model (what nlp.add_pipe("elmo") and BiLM.load("default")
    load for every user of the environment), which fit-state refuses. Refused, and a directory inside it too;
    a stand-in for the bundled directory here, never the installed one."""
    from spacy_elmo.bilm import native_io

    bundled = tmp_path / "package" / "data" / "default"
    shutil.copytree(model, bundled)
    monkeypatch.setattr(native_io, "DEFAULT_MODEL_DIR", bundled.resolve())
    before = _tree(bundled)
    for out in (bundled, bundled / "copy", bundled / "sub" / ".."):
        output = plain(clean_error(runner.invoke(app, ["export", str(model), str(out), "--overwrite", "--format", "native"])))
        assert "bundled default model's directory" in output and "Choose another OUT_DIR" in output, output
    assert _tree(bundled) == before


def test_a_pretrain_into_a_model_that_fit_state_is_writing_is_refused(model, trained, monkeypatch):
    """fit-state holds the lock from its read of the model to its write: a pretrain --resume started meanwhile
    (which would rewrite the model) is refused, naming fit-state."""
    from spacy_elmo.training import data, trainer

    pytest.importorskip("fcntl")
    real, refused = data.tokenize_file, []

    def tokenize_while_pretrain_starts(*args, **kwargs):
        with pytest.raises(FileExistsError, match="or a fit-state of the model in it") as err:
            with trainer._output_dir_lock(model):
                pass
        refused.append(err.value)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "tokenize_file", tokenize_while_pretrain_starts)
    result = runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "4"])
    assert result.exit_code == 0, result.output
    assert len(refused) == 1
    with trainer._output_dir_lock(model):  # released at the end
        pass


@pytest.mark.parametrize("option, value", [("--max-sentences", "0"), ("--max-sentences", "-1"), ("--rows", "0")])
def test_fit_state_bad_numbers(model, trained, option, value):
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), option, value]), code=2)
    assert option in output and "positive" in output


def test_fit_state_clear_takes_no_text(model, trained):
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--clear"]), code=2)
    assert "--clear" in output and "TEXT_PATH" in output


def test_fit_state_without_text_or_clear_says_to_give_one(model):
    """Neither TEXT_PATH nor --clear: a usage error naming both, before the model is read (not an assertion's
    traceback), and the model left as it was."""
    before = files(model)
    result = runner.invoke(app, ["fit-state", str(model)])
    output = clean_error(result, code=2)
    assert "Pass TEXT_PATH (the text to fit the initial state on), or --clear" in " ".join(output.replace("│", " ").split())
    assert files(model) == before


def test_fit_state_reports_replaced_bytes(model, tmp_path):
    text = tmp_path / "latin1.txt"
    lines = write_corpus(tmp_path / "utf8.txt", 120).read_text(encoding="utf-8").splitlines()
    text.write_bytes(b"\n".join(line.encode("utf-8") + b" caf\xe9 ." for line in lines) + b"\n")
    result = runner.invoke(app, ["fit-state", str(model), str(text), "--rows", "4"])
    assert result.exit_code == 0, result.output
    # a warning, on stderr: stdout holds the result alone
    assert f"{len(lines)} undecodable bytes replaced by U+FFFD in {text}" in plain(result.stderr) and "undecodable" not in result.stdout


def test_fit_state_max_sentences_too_few_for_the_rows_is_a_usage_error_naming_both(model, trained):
    """--max-sentences below what --rows needs was read and tokenized first, then said 'Give it more running
    text' of a text that had plenty. The bound is the fitting's own: one sentence more fits."""
    before = files(model)
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "4",
                                             "--max-sentences", "11"]), code=2)
    said = plain(output)
    assert "--max-sentences 11 is fewer than the 12 sentences --rows 4 needs" in said, said
    assert "raise --max-sentences to 12 or more, or lower --rows to 3 or fewer" in said
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--max-sentences", "2"]), code=2)
    assert "lower --rows" not in output  # no number of rows fits 2 sentences
    assert files(model) == before
    for args in (["--rows", "4", "--max-sentences", "12"], ["--rows", "3", "--max-sentences", "11"]):
        result = runner.invoke(app, ["fit-state", str(model), str(trained["train"]), *args])
        assert result.exit_code == 0, result.output


def test_fit_state_on_too_short_a_text_names_rows(model, tmp_path):
    """A text of fewer sentences than --rows needs ended "Give it more running text or fewer rows", naming
    no option: the CLI says --rows, and how many rows the text fits."""
    before = files(model)
    short = write_corpus(tmp_path / "short.txt", 7)
    output = plain(clean_error(runner.invoke(app, ["fit-state", str(model), str(short), "--rows", "4", "--no-progress"])))
    assert f"{short} holds 7 non-empty sentence(s), fewer than the 12 --rows 4 needs" in output, output
    assert output.endswith("give it more running text, or lower --rows to 2 or fewer."), output
    assert files(model) == before
    result = runner.invoke(app, ["fit-state", str(model), str(short), "--rows", "2", "--no-progress"])  # what it says
    assert result.exit_code == 0, result.output
    two = write_corpus(tmp_path / "two.txt", 2)
    output = plain(clean_error(runner.invoke(app, ["fit-state", str(model), str(two), "--rows", "1", "--no-progress"])))
    assert "lower --rows" not in output and output.endswith("give it more running text."), output
    assert "(1 stream of more than" in output, output  # not "1 streams"


def test_fit_state_says_how_many_sentences_it_read_and_left_out(model, tmp_path):
    """fit-state said "on 43 sentences" with --rows 4, but the fitting reads 4 streams of 43 // 4 = 10 and
    leaves the last 3 out (they change nothing: boundary_state_mean of the first 40 is the same)."""
    text = write_corpus(tmp_path / "text.txt", 43)
    result = runner.invoke(app, ["fit-state", str(model), str(text), "--rows", "4", "--no-progress"])
    assert result.exit_code == 0, result.output
    said = plain(result.stdout)
    assert f"fitted the initial state of {model} on 40 sentences (4 streams of 10; the mean of 32 boundary states, " \
        "past each stream's first 2; the last 3 sentences left out, fewer than one per stream)" in said, said
    result = runner.invoke(app, ["fit-state", str(model), str(write_corpus(tmp_path / "even.txt", 40)), "--rows", "4",
                                 "--no-progress"])
    assert result.exit_code == 0 and "on 40 sentences" in result.stdout and "left out" not in result.stdout


def test_fit_state_write_error_is_reported_and_keeps_the_old_state(model, trained, monkeypatch):
    assert runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "4"]).exit_code == 0
    before = files(model)

    from safetensors.torch import save_file

    def refused(tensors, path):  # safetensors' own error, as for a read-only directory (SafetensorError, no OSError)
        save_file(tensors, str(model / "no-such-dir" / "x.safetensors"))

    monkeypatch.setattr("spacy_elmo.bilm.native_io.save_file", refused)
    output = clean_error(runner.invoke(app, ["fit-state", str(model), str(trained["train"]), "--rows", "2"]))
    assert "Could not write the initial state" in output and "No such file or directory" in output
    assert files(model) == before


def test_fit_state_write_error_suggests_the_model_path_as_one_shell_word(model, trained, tmp_path, monkeypatch):
    """The export command E_FIT_STATE_WRITE suggests names MODEL_DIR shell-quoted: a path with a space pasted whole."""
    import errno

    from tests.cli_text import runner as split_runner

    spaced = tmp_path / "my model"
    model.rename(spaced)

    def refused(state, path):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("spacy_elmo.bilm.native_io.write_initial_state", refused)
    result = split_runner.invoke(app, ["fit-state", str(spaced), str(trained["train"]), "--rows", "4"])
    assert result.exit_code == 1 and "Could not write the initial state" in result.stderr, result.output
    assert ["spacy-elmo", "export", str(spaced), "NEW_DIR", "--format", "native"] in _pasted(result.stderr), result.stderr


# -- evaluate --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["native", "allennlp"])
def test_evaluate_without_a_softmax_says_one_is_needed(trained, tmp_path, kind):
    bare = tmp_path / "bare"
    BiLM(BiLMConfig(**TINY)).save(bare)
    if kind == "allennlp":
        assert runner.invoke(app, ["export", str(bare), str(tmp_path / "allen"), "--format", "allennlp"]).exit_code == 0
        bare = tmp_path / "allen"
    output = clean_error(runner.invoke(app, ["evaluate", str(bare), str(trained["held"])]))
    assert "has no softmax" in output and "perplexity needs one" in output and "--init" in output


def test_evaluate_model_without_its_vocabulary(model, trained):
    (model / "vocab.txt").unlink()
    output = clean_error(runner.invoke(app, ["evaluate", str(model), str(trained["held"])]))
    assert "no vocab.txt" in output and "Restore" in output


def test_evaluate_empty_text(model, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    folder = tmp_path / "nothing"
    folder.mkdir()
    # said what to pass (it said only "contains no tokens to evaluate on."), also of a directory without files
    for path, read in ((empty, "1 file(s) read"), (folder, "0 file(s) read")):
        output = plain(clean_error(runner.invoke(app, ["evaluate", str(model), str(path)])))
        assert f"{path} contains no tokens to evaluate on ({read}, 0 skipped as binary, UTF-16/32 or a format not read). Pass UTF-8 text" in output, output


def test_evaluate_a_loss_past_a_floats_range(model, trained, monkeypatch):
    """A mean loss over about 709 nats (a broken model) crashed evaluate with OverflowError from math.exp.
    Its perplexity is inf now: the text says so with the loss, and --json stays standard JSON (null, no
    Infinity), the losses given; a finite mean of the two is still a number."""
    from spacy_elmo.training import evaluate as ev

    real = ev._stream_nll_sums

    def huge(*args, **kwargs):
        (fwd, bwd), n = real(*args, **kwargs)
        return [800.0 * n, bwd], n

    monkeypatch.setattr(ev, "_stream_nll_sums", huge)
    result = runner.invoke(app, ["evaluate", str(model), str(trained["held"]), "--stream"])
    assert result.exit_code == 0, result.output
    assert "forward inf (mean loss 800.00 nats), backward " in result.stdout and "geometric mean inf" not in result.stdout
    # the finite mean (about e^402) with an exponent, not as a number of 175 digits
    assert re.search(r"geometric mean \d\.\d{3}e\+\d{3}$", result.stdout.strip()), result.stdout
    text = result.stdout

    def refuse(constant):
        raise ValueError(constant)

    result = runner.invoke(app, ["evaluate", str(model), str(trained["held"]), "--stream", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout, parse_constant=refuse)
    assert metrics["perplexity_forward"] is None and metrics["loss_forward"] == pytest.approx(800.0)
    assert metrics["perplexity_backward"] > 1 and metrics["perplexity"] > 1e100
    # the held-out line of train_log.jsonl holds this form: printed again (a resume's summary) as the text said it
    assert ev.perplexity_text(metrics) in text


@pytest.mark.parametrize("value, shown", [(123.456, "123.46"), (999_999_999_999_999.0, "999999999999999.00"),
                                          (1e15, "1.000e+15"), (2.5e300, "2.500e+300")])
def test_a_huge_finite_perplexity_is_shown_with_an_exponent(value, shown):
    from spacy_elmo.training.evaluate import perplexity_text

    result = {"mode": "stream", "n_rows": 1, "perplexity_forward": value, "perplexity_backward": 1.0,
              "perplexity": value, "loss_forward": 1.0, "loss_backward": 1.0}
    assert perplexity_text(result) == f"perplexity (one stream): forward {shown}, backward 1.00, geometric mean {shown}"


def test_evaluate_reports_replaced_bytes_and_oov(model, tmp_path):
    text = tmp_path / "latin1.txt"
    text.write_bytes(b"zzqx caf\xe9 ol\xe9 qqxz .\n")
    result = runner.invoke(app, ["evaluate", str(model), str(text)])
    assert result.exit_code == 0, result.output
    assert f"2 undecodable bytes replaced by U+FFFD in {text}" in plain(result.stderr) and "OOV rate" in result.stdout
    assert "undecodable" not in result.stdout  # a warning, on stderr: stdout holds the result alone
    # --json said nothing of them on stderr (the count was in the object alone)
    result = runner.invoke(app, ["evaluate", str(model), str(text), "--json"])
    assert result.exit_code == 0, result.output
    assert f"2 undecodable bytes replaced by U+FFFD in {text}" in plain(result.stderr)
    assert json.loads(result.stdout)["replaced_bytes"] == 2


def test_evaluate_json_keys_are_documented(model, trained):
    result = runner.invoke(app, ["evaluate", str(model), str(trained["held"]), "--json"])
    assert result.exit_code == 0, result.output
    keys = set(json.loads(result.output.strip().splitlines()[-1]))
    help_text = " ".join(runner.invoke(app, ["evaluate", "--help"], terminal_width=200).output.split())
    missing = [k for k in sorted(keys) if k not in help_text]
    assert not missing, missing


def test_evaluate_batch_size_help_says_long_sentences_are_cut():
    """--batch-size said "the text is cut at sentence starts", but a sentence over two rows' shares (and 40 tokens)
    can be cut mid-sentence too, so that text with few sentence ends is still read in that many rows. "Can": only where
    its start is a share and 20 tokens or more from the row's point (MID_SENTENCE_CUT_TOKENS), not always."""
    help_text = " ".join(plain(runner.invoke(app, ["evaluate", "--help"], terminal_width=200).output).split())
    assert "a sentence longer than two rows' shares (and 40 tokens) can be cut mid-sentence too" in help_text


MODEL_FILE_ARGS = {
    "evaluate": lambda file, t, out: ["evaluate", str(file), str(t["held"])],
    "fit-state": lambda file, t, out: ["fit-state", str(file), str(t["train"])],
    "embed": lambda file, t, out: ["embed", str(t["held"]), str(out / "vectors.hdf5"), "--model", str(file)],
    "export": lambda file, t, out: ["export", str(file), str(out / "exported")],
    "demo": lambda file, t, out: ["demo", "--model", str(file)],
}


@pytest.mark.parametrize("command", sorted(MODEL_FILE_ARGS))
@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_model_file_given_as_a_model_argument_is_told_to_pass_its_directory(trained, tmp_path, command, name):
    """A model's file as MODEL_DIR (or --model) got BiLM.load's advice, "load AllenNLP files with
    BiLM.from_allennlp(options_file, weight_file)": a Python call a command line cannot make."""
    file = trained["model"] / name
    output = " ".join(clean_error(runner.invoke(app, MODEL_FILE_ARGS[command](file, trained, tmp_path))).split())
    assert f"{file} is a file, but a model is a directory: pass the model's directory" in output, output
    assert "from_allennlp" not in output


MODEL_DIR_ARGS = dict(MODEL_FILE_ARGS, pretrain=lambda d, t, out: ["pretrain", str(t["train"]), str(out / "run"), "--init", str(d)])


@pytest.mark.parametrize("command", sorted(MODEL_DIR_ARGS))
def test_a_directory_without_a_model_given_as_a_model_argument_gets_command_line_advice(trained, tmp_path, command):
    """A directory without config.json as MODEL_DIR (--model, --init) was told "Write one with BiLM.save(directory),
    or load AllenNLP weights with BiLM.from_allennlp(options, weights)": Python calls a command line cannot make.
    It is told what a model directory is, which commands write one, and what the directory holds."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat .\n")
    output = " ".join(clean_error(runner.invoke(app, MODEL_DIR_ARGS[command](folder, trained, tmp_path))).split())
    assert f"{folder} is not a spacy-elmo model directory (no config.json)." in output, output
    assert "spacy-elmo pretrain or spacy-elmo export --format native" in output and f"{folder} holds a.txt." in output
    assert "BiLM." not in output
    (folder / "a.txt").unlink()
    output = " ".join(clean_error(runner.invoke(app, MODEL_DIR_ARGS[command](folder, trained, tmp_path))).split())
    assert f"{folder} is empty." in output, output


def test_the_listing_of_a_directory_without_a_model_quotes_names_that_would_read_as_several(tmp_path):
    """The listing of what a directory without a model holds joined names with ", ": a name with a comma or a
    space read as two, and one with a newline broke the line. Those are quoted as Python strings."""
    folder = tmp_path / "texts"
    folder.mkdir()
    for name in ("a,b.txt", "my text.txt", "new\nline", "plain.txt"):
        (folder / name).write_text("the cat .\n")
    output = " ".join(clean_error(runner.invoke(app, ["evaluate", str(folder), str(folder / "plain.txt")])).split())
    assert f"{folder} holds 'a,b.txt', 'my text.txt', 'new\\nline', plain.txt." in output, output


@pytest.mark.parametrize("command", sorted(MODEL_DIR_ARGS))
def test_a_directory_with_a_config_but_no_weights_gets_command_line_advice(trained, tmp_path, command):
    """A directory holding config.json but no model.safetensors: fit-state loaded the weights outside
    model_argument() and advised BiLM's Python API, which a command line cannot call."""
    folder = tmp_path / "half"
    folder.mkdir()
    shutil.copy(trained["model"] / "config.json", folder / "config.json")
    output = " ".join(clean_error(runner.invoke(app, MODEL_DIR_ARGS[command](folder, trained, tmp_path))).split())
    assert "model.safetensors" in output and "BiLM." not in output, output
    assert "spacy-elmo pretrain or spacy-elmo export --format native" in output, output


# each command given 'default' as its model, then a usage error (exit 2) before anything is loaded (the options are
# checked before the arguments: a later argument's, an empty path and an output path under a ~ no shell expanded)
DEFAULT_GIVEN = {
    "evaluate": ["evaluate", "default", ""],
    "export": ["export", "default", "~/out"],
    "embed": ["embed", "held.txt", "out.hdf5", "--model", "default", "--batch-size", "0"],
    "demo": ["demo", "--model", "default", "--threads", "0"],
    "pretrain": ["pretrain", "train.txt", "out", "--init", "default", "--batch-size", "0"],
}


@pytest.mark.parametrize("command", sorted(DEFAULT_GIVEN))
def test_default_given_beside_a_default_directory_warns_that_it_names_the_bundled_model(tmp_path, monkeypatch, command):
    """'default' names the bundled model, also where the current directory holds a directory named default:
    a user who meant it got the bundled model without a word. A warning says so once, naming ./default."""
    monkeypatch.chdir(tmp_path)
    warning = "'default' names the bundled model, not the directory default here"
    result = runner.invoke(app, DEFAULT_GIVEN[command])
    assert result.exit_code == 2 and warning not in result.stderr  # no ./default: nothing to say
    (tmp_path / "default").mkdir()
    result = runner.invoke(app, DEFAULT_GIVEN[command])
    assert result.exit_code == 2
    said = " ".join(plain(result.stderr).split())
    assert said.count(warning) == 1 and "to read that directory, pass ./default" in said, said
    if command == "embed":  # --model not given: the bundled model by default, nothing to say
        # a usage error of the command's body, past every option's callback (--model's among them): the check
        # once compared against the installed click's ParameterSource, not typer's own copy's, and warned here
        given = ["embed", "held.txt", "out.hdf5", "--whitespace", "--lang", "en"]
        result = runner.invoke(app, given + ["--model", "default"])
        assert result.exit_code == 2 and "--whitespace" in plain(result.stderr) and warning in result.stderr
        result = runner.invoke(app, given)
        assert result.exit_code == 2 and "--whitespace" in plain(result.stderr), result.stderr
        assert warning not in result.stderr


# -- demo ------------------------------------------------------------------------------------
def test_demo_bad_model_and_threads(tmp_path):
    output = clean_error(runner.invoke(app, ["demo", "--model", str(tmp_path / "missing")]))
    assert "missing does not exist" in output
    output = clean_error(runner.invoke(app, ["demo", "--threads", "0"]), code=2)
    assert "--threads" in output


def test_demo_runs_a_model_with_other_token_width(tmp_path):
    small = tmp_path / "tiny"
    BiLM(BiLMConfig(**TINY)).save(small)  # max_characters_per_token 20, not 50
    result = runner.invoke(app, ["demo", "--model", str(small), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "tokens/s" in result.output and "words/s" in result.output


# -- help --------------------------------------------------------------------------------------
def test_command_list_shows_one_line_per_command():
    """The short help in `spacy-elmo --help` is one line; and every paragraph of a command's help is one line:
    rich keeps a docstring's line breaks, so export's and info's broke mid-sentence at any terminal width."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        paragraphs = (command.help or "").strip().split("\n\n")
        assert paragraphs[0], name
        for paragraph in paragraphs:
            assert "\n" not in paragraph.strip(), (name, paragraph)


def test_help_texts_keep_their_brackets():
    """rich, which renders typer's help, read ``[components.elmo]`` in config's help as a markup tag and
    dropped it: every bracketed span of every help text (the application's, each command's and option's)
    shows in ``--help``."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    texts = {None: [group.help or ""]}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        texts[name] = [command.help or "", *(getattr(param, "help", None) or "" for param in command.params)]
    for name, helps in texts.items():
        shown = " ".join(runner.invoke(app, [*([name] if name else []), "--help"], terminal_width=400).output.split())
        for text in helps:
            for span in re.findall(r"\[[^\]]*\]", " ".join(text.split())):
                assert span in shown, (name, span)


def test_no_arguments_shows_the_commands():
    result = runner.invoke(app, [])
    assert "Commands" in result.output and "pretrain" in result.output and "fit-state" in result.output


# -- Ctrl-C ------------------------------------------------------------------------------------
@pytest.mark.parametrize("checkpointed", [False, True])
def test_pretrain_interrupted_says_how_to_go_on(tmp_path, monkeypatch, checkpointed):
    train = write_corpus(tmp_path / "train.txt", 50)
    out = tmp_path / "out"

    def interrupted(cfg, on_step=None):
        if checkpointed:
            out.mkdir()
            (out / "checkpoint.pt").write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr("spacy_elmo.training.trainer.train", interrupted)
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--no-progress"])
    assert result.exit_code == 130, result.output
    assert "Interrupted" in result.output
    if checkpointed:
        assert "--resume" in result.output
    else:
        assert "no checkpoint" in result.output and "without --resume" in result.output


def test_fit_state_refuses_the_bundled_model(trained, tmp_path):
    from spacy_elmo.bilm.native_io import DEFAULT_MODEL_DIR

    before = files(DEFAULT_MODEL_DIR)
    linked = tmp_path / "linked"  # the bundled directory by another name: a link to it, a path through ..
    linked.symlink_to(DEFAULT_MODEL_DIR, target_is_directory=True)
    try:
        for name in ("default", str(DEFAULT_MODEL_DIR), str(linked), str(DEFAULT_MODEL_DIR / ".." / "default")):
            output = clean_error(runner.invoke(app, ["fit-state", name, str(trained["train"]), "--rows", "4"]))
            assert "bundled default model" in output and "export default NEW_DIR --format native" in output
        assert files(DEFAULT_MODEL_DIR) == before
    finally:  # a guard that let one through wrote into the checkout's bundled model: not left for later tests
        if INITIAL_STATE_NAME not in before:
            (DEFAULT_MODEL_DIR / INITIAL_STATE_NAME).unlink(missing_ok=True)
    # the way out the message gives works
    copy = tmp_path / "copy"
    assert runner.invoke(app, ["export", "default", str(copy), "--format", "native"]).exit_code == 0
    result = runner.invoke(app, ["fit-state", str(copy), str(trained["train"]), "--rows", "4", "--max-sentences", "24"])
    assert result.exit_code == 0, result.output
    assert (copy / INITIAL_STATE_NAME).exists()


def test_version():
    import spacy_elmo
    from spacy_elmo.ops import fused_available

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"spacy-elmo {spacy_elmo.__version__} (torch ")
    assert ("compiled kernels: yes" in result.output) == fused_available()


def test_config_writes_the_shipped_configs(tmp_path):
    from thinc.api import Config

    from spacy_elmo.configs import config_names, config_path

    assert config_names() == ("ner", "parser", "textcat")
    for name in config_names():
        result = runner.invoke(app, ["config", name])  # stdout
        assert result.exit_code == 0, result.output
        assert result.output == config_path(name).read_text(encoding="utf-8")
        out = tmp_path / f"{name}.cfg"
        assert runner.invoke(app, ["config", name, str(out)]).exit_code == 0
        parsed = Config().from_disk(out, interpolate=False)
        assert parsed["components"]["elmo"]["factory"] == "elmo" and name in parsed["components"]
        # an existing file is kept unless --overwrite
        output = clean_error(runner.invoke(app, ["config", name, str(out)]))
        assert "--overwrite" in output
        assert runner.invoke(app, ["config", name, str(out), "--overwrite"]).exit_code == 0
    output = clean_error(runner.invoke(app, ["config", "coref"]), code=2)
    assert "ner, parser, textcat" in output
    help_text = " ".join(runner.invoke(app, ["config", "--help"], terminal_width=200).output.split())
    assert "Which config: ner, parser, textcat." in help_text


def test_config_overwrites_as_export_and_embed_do_and_force_still_works_with_a_warning(tmp_path):
    """config alone spelt it --force, export and embed --overwrite: --overwrite is config's flag now, and
    --force, hidden from the help, still replaces the file, saying once to use --overwrite."""
    out = tmp_path / "ner.cfg"
    out.write_text("old", encoding="utf-8")
    shown = plain(runner.invoke(app, ["config", "--help"], terminal_width=200).output)
    assert re.search(r"--overwrite (<bool> )?Replace OUTPUT if it exists\.", shown) and "--force" not in shown, shown
    result = runner.invoke(app, ["config", "ner", str(out), "--overwrite"])
    assert (result.exit_code, result.stderr) == (0, "") and out.read_text(encoding="utf-8") != "old"
    out.write_text("old", encoding="utf-8")
    result = runner.invoke(app, ["config", "ner", str(out), "--force"])
    assert result.exit_code == 0 and result.stderr == Warnings.W_CONFIG_FORCE + "\n"
    assert out.read_text(encoding="utf-8") != "old" and result.stdout.startswith(f"wrote {out}\n")


def test_config_says_the_train_command_that_saves_the_pipeline(tmp_path):
    """Its help's "Then:" line had no --output, without which spacy train trains and saves nothing: written to a
    file, the config is followed by the command to train it, which spaCy's own train command parses, naming the
    file written and an --output directory; written to stdout, the config alone."""
    import shlex

    import spacy.cli
    import typer.main

    train = typer.main.get_command(spacy.cli.app).commands["train"]
    for name in ("ner", "parser"):
        out = tmp_path / "my configs" / f"{name}.cfg"  # a space: the path is quoted
        out.parent.mkdir(exist_ok=True)
        result = runner.invoke(app, ["config", name, str(out)])
        assert result.exit_code == 0 and result.stderr == "", result.output
        wrote, command, extra = result.stdout.splitlines()
        assert wrote == f"wrote {out}" and command.startswith("train it with: python -m spacy train ")
        assert "--paths.elmo MODEL_DIR" in extra
        words = shlex.split(command.split(": ", 1)[1])
        params = train.make_context("train", words[4:]).params
        assert params["config_path"] == out and str(params["output_path"]) == f"training/{name}"
    from spacy_elmo.configs import config_path

    assert runner.invoke(app, ["config", "ner"]).stdout == config_path("ner").read_text(encoding="utf-8")
    help_text = " ".join(runner.invoke(app, ["config", "--help"], terminal_width=200).output.split())
    assert "python -m spacy train OUTPUT --output training/NAME" in help_text


def test_config_to_a_directory_or_an_unwritable_path_is_a_clear_error(tmp_path):
    """A directory as OUTPUT asked for --force (now --overwrite), which then ended in an IsADirectoryError traceback, and a
    path that cannot be written (below a file; a read-only directory) in a traceback too."""
    folder = tmp_path / "configs"
    folder.mkdir()
    for extra in ([], ["--overwrite"]):
        output = clean_error(runner.invoke(app, ["config", "ner", str(folder), *extra]))
        assert "is a directory" in output and str(folder / "ner.cfg") in output
    assert list(folder.iterdir()) == []
    a_file = tmp_path / "notes.txt"
    a_file.write_text("kept")
    output = clean_error(runner.invoke(app, ["config", "ner", str(a_file / "ner.cfg")]))
    assert "Could not write" in output and "writable OUTPUT" in output
    assert f"{a_file} is a file, not a directory" in plain(output) and "Errno" not in output
    assert a_file.read_text() == "kept"


def _run_with_stdout(argv, sink, unbuffered=False):
    """``python -m spacy_elmo ARGV`` with stdout to /dev/full (``sink`` "full"), to a pipe whose reader
    closed before it started ("closed"), or no stdout at all ("none": descriptor 1 closed, as ``>&-``): the
    finished process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    if sink == "full":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full here")
        with open("/dev/full", "w") as full:
            return subprocess.run([sys.executable, "-m", "spacy_elmo", *argv], stdout=full, stderr=subprocess.PIPE,
                                  text=True, env=env, timeout=300)
    if sink == "none":
        return subprocess.run([sys.executable, "-m", "spacy_elmo", *argv], stderr=subprocess.PIPE, text=True, env=env,
                              timeout=300, preexec_fn=lambda: os.close(1))
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run([sys.executable, "-m", "spacy_elmo", *argv], stdout=writer, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=300)
    finally:
        os.close(writer)


def _stdout_commands(trained):
    return {"evaluate --json": ["evaluate", str(trained["model"]), str(trained["held"]), "--json"],
            "config": ["config", "ner"], "--help": ["--help"]}


@pytest.mark.parametrize("command,unbuffered", [("evaluate --json", False), ("evaluate --json", True),
                                                ("config", False), ("--help", False)])
def test_a_full_stdout_is_one_clear_error(trained, command, unbuffered):
    """`spacy-elmo evaluate MODEL TEXT --json > out.json` on a full disk ended in an OSError traceback
    (config alone had its message): every command now gives E_STDOUT and exit status 1."""
    from spacy_elmo.errors import Errors

    done = _run_with_stdout(_stdout_commands(trained)[command], "full", unbuffered)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == Errors.E_STDOUT.format(error="[Errno 28] No space left on device"), done.stderr


@pytest.mark.parametrize("command,unbuffered", [("evaluate --json", False), ("evaluate --json", True),
                                                ("config", False), ("--help", False)])
def test_a_closed_pipe_on_stdout_ends_quietly(trained, command, unbuffered):
    """`spacy-elmo ... | head` whose reader stopped before the output was written: exit status 0 with nothing on
    stderr, as a reader that stopped after it (config printed "Could not write ... Broken pipe" with 1, the others
    exited 1, and no Python "Exception ignored ... BrokenPipeError" at shutdown)."""
    done = _run_with_stdout(_stdout_commands(trained)[command], "closed", unbuffered)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


@pytest.mark.parametrize("argv", [["config", "ner"], ["info"], ["--help"]])
def test_a_closed_stdout_is_one_clear_error(argv):
    """`spacy-elmo config ner >&-` (stdout closed, as some daemon wrappers leave it) ended in an AttributeError
    traceback ('NoneType' object has no attribute 'write'), and `info >&-` exited 0 having printed nothing: both
    now end with status 1 and E_STDOUT_CLOSED, which says to redirect stdout (E_STDOUT's "a disk with free
    space" is for a full one)."""
    from spacy_elmo.errors import Errors

    done = _run_with_stdout(argv, "none")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == Errors.E_STDOUT_CLOSED, done.stderr


def test_an_oserror_not_of_stdout_keeps_its_own_report():
    """An OSError a command raised without writing to stdout is no stdout error, even with stdout on /dev/full:
    it keeps its traceback and message (an input file's read error: evaluate's own message)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    script = ("import errno, sys, spacy_elmo.ops as ops\n"
              "def fail(): raise OSError(errno.EIO, 'Input/output error', 'weights.bin')\n"
              "ops.fused_available = fail\n"
              "sys.argv = ['spacy-elmo', '--version']\n"
              "from spacy_elmo.cli import main\n"
              "main()\n")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", script], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 1, done.stderr
    assert done.stderr.rstrip().endswith("OSError: [Errno 5] Input/output error: 'weights.bin'"), done.stderr
    assert "Could not write the output to stdout" not in done.stderr, done.stderr
    missing = _run_with_stdout(["evaluate", "default", "no-such-text.txt", "--json"], "full")
    assert missing.returncode == 1 and "no-such-text.txt does not exist" in missing.stderr, missing.stderr
    assert "Could not write the output to stdout" not in missing.stderr, missing.stderr


# -- compressed text ---------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", FORMATS)
def test_evaluate_and_fit_state_read_compressed_text_as_the_text(model, trained, tmp_path, suffix):
    packed = compressed(trained["held"], suffix, to=tmp_path / ("held.txt" + suffix))
    results = [runner.invoke(app, ["evaluate", str(model), str(path), "--json"]) for path in (trained["held"], packed)]
    assert [r.exit_code for r in results] == [0, 0], results[1].output
    assert json.loads(results[0].output.splitlines()[-1]) == json.loads(results[1].output.splitlines()[-1])
    states = []
    for path in (trained["held"], packed):
        result = runner.invoke(app, ["fit-state", str(model), str(path), "--rows", "4"])
        assert result.exit_code == 0, result.output
        states.append((model / INITIAL_STATE_NAME).read_bytes())
    assert states[0] == states[1]


@pytest.mark.parametrize("command", ["evaluate", "fit-state"])
@pytest.mark.parametrize("damage", ["truncated", "damaged"])
def test_evaluate_and_fit_state_name_a_broken_archive(model, trained, tmp_path, command, damage):
    broken = compressed(trained["held"], ".gz", to=tmp_path / "held.gz", damage=damage)
    before = files(model)
    output = clean_error(runner.invoke(app, [command, str(model), str(broken)]))
    assert f"{broken} is a broken gzip file" in plain(output)
    assert files(model) == before


def _tilde_commands(trained, name):
    """Each command with ``name`` (a path starting with a literal ~) as its output argument."""
    return {
        "pretrain": ["pretrain", str(trained["train"]), name, "--options", str(trained["model"].parent / "tiny.json"),
                     "--max-steps", "1", "--batch-size", "4", "--negatives", "8", "--no-progress"],
        "export": ["export", str(trained["model"]), name],
        "embed": ["embed", str(trained["held"]), name, "--model", str(trained["model"]), "--no-progress"],
        "config": ["config", "ner", name],
    }


@pytest.mark.parametrize("command", ["pretrain", "export", "embed", "config"])
def test_an_output_path_with_a_tilde_no_shell_expanded_is_a_usage_error(trained, tmp_path, monkeypatch, command):
    """``pretrain corpus.txt "~/o"`` (or ``--opt=~/o``, which bash does not expand) exited 0 having created a
    directory named ~ in the current directory, "model written to ~/o". A usage error now, naming the path written
    out and $HOME; nothing is written. ``./~/o`` still names a directory ``~`` on purpose."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    name = "~/out.h5" if command == "embed" else "~/out"
    output = plain(clean_error(runner.invoke(app, _tilde_commands(trained, name)[command]), code=2))
    assert "~/out" in output and "starts with a ~ that no shell expanded" in output, output
    assert str(home / "out") in output and "$HOME" in output and "./~/out" in output
    assert not (tmp_path / "~").exists() and list(home.iterdir()) == []


def _workspace(tmp_path):
    """A current directory holding someone's work (hidden files and .git too); returns it and a snapshot."""
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "HEAD").write_text("ref\n")
    (work / ".env").write_text("secret\n")
    (work / "notes.txt").write_text("my work\n")
    return work, _tree(work)


#: Every path argument and option, each given as "" (what "$OUT" with OUT unset gives), and its name in the error.
EMPTY_PATHS = {
    "export-OUT_DIR": (lambda t: ["export", str(t["model"]), "", "--overwrite", "--format", "native"], "OUT_DIR"),
    "export-MODEL_DIR": (lambda t: ["export", "", "out"], "MODEL_DIR"),
    "pretrain-OUTPUT_DIR": (lambda t: ["pretrain", str(t["train"]), "", "--options", str(t["model"].parent / "tiny.json"),
                                       "--max-steps", "1", "--no-progress"], "OUTPUT_DIR"),
    "pretrain-TRAIN_PATH": (lambda t: ["pretrain", "", "out", "--no-progress"], "TRAIN_PATH"),
    "pretrain-heldout": (lambda t: ["pretrain", str(t["train"]), "out", "--heldout", ""], "--heldout"),
    "pretrain-options": (lambda t: ["pretrain", str(t["train"]), "out", "--options", ""], "--options"),
    "pretrain-init": (lambda t: ["pretrain", str(t["train"]), "out", "--init", ""], "--init"),
    "embed-OUTPUT_PATH": (lambda t: ["embed", str(t["held"]), "", "--overwrite", "--no-progress"], "OUTPUT_PATH"),
    "embed-INPUT_PATH": (lambda t: ["embed", "", "v.h5", "--no-progress"], "INPUT_PATH"),
    "embed-model": (lambda t: ["embed", str(t["held"]), "v.h5", "--model", ""], "--model"),
    "evaluate-MODEL_DIR": (lambda t: ["evaluate", "", str(t["held"])], "MODEL_DIR"),
    "evaluate-TEXT_PATH": (lambda t: ["evaluate", str(t["model"]), ""], "TEXT_PATH"),
    "fit-state-MODEL_DIR": (lambda t: ["fit-state", "", "--clear"], "MODEL_DIR"),
    "fit-state-TEXT_PATH": (lambda t: ["fit-state", str(t["model"]), ""], "TEXT_PATH"),
    "config-OUTPUT": (lambda t: ["config", "ner", "", "--overwrite"], "OUTPUT"),
    "demo-model": (lambda t: ["demo", "--model", ""], "--model"),
}


@pytest.mark.parametrize("case", sorted(EMPTY_PATHS))
def test_an_empty_path_is_a_usage_error_naming_an_unset_variable(trained, tmp_path, monkeypatch, case):
    """typer made "" Path("."): ``export MODEL "$OUT" --overwrite`` with OUT unset replaced the whole current
    directory, .git and hidden files included; ``pretrain train.txt "$OUT"`` wrote its run there, and an empty
    TRAIN_PATH read the whole current directory as corpus. Every path argument and option now refuses "" (exit 2,
    naming it), the current directory untouched."""
    work, before = _workspace(tmp_path)
    monkeypatch.chdir(work)
    argv, name = EMPTY_PATHS[case]
    output = plain(clean_error(runner.invoke(app, argv(trained)), code=2))
    assert f"Invalid value for '{name}': an empty path (an unset shell variable?" in output, output
    assert _tree(work) == before


@pytest.mark.parametrize("out", [".", "..", "link", "absolute parent"])
def test_export_overwrite_refuses_the_current_directory_or_one_holding_it(trained, tmp_path, monkeypatch, out):
    """--overwrite deletes everything in OUT_DIR: given the current directory (".", or "$OUT" unset before empty
    paths were refused) or a directory above it, it deleted the user's work, .git and all. Refused, naming the
    current directory (as --help says); an empty current directory still takes the model (nothing is deleted)."""
    work, before = _workspace(tmp_path)
    (work / "sub").mkdir()
    (tmp_path / "link").symlink_to(work, target_is_directory=True)
    cwd = work / "sub" if out == ".." else work
    monkeypatch.chdir(cwd)
    before = _tree(work)
    given = {".": ".", "..": "..", "link": str(tmp_path / "link"), "absolute parent": str(tmp_path)}[out]
    args = ["export", str(trained["model"]), given, "--overwrite", "--format", "native"]
    output = plain(clean_error(runner.invoke(app, args)))
    assert f"{given} is or holds the current directory ({cwd}), and it is not empty" in output, output
    assert "Choose a new directory for OUT_DIR" in output
    assert _tree(work) == before
    if out == ".":  # and --help lists it with the other OUT_DIRs refused
        shown = " ".join(runner.invoke(app, ["export", "--help"], terminal_width=400).output.split())
        assert "a non-empty OUT_DIR that is or holds the current directory (even with --overwrite)" in shown, shown
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    result = runner.invoke(app, ["export", str(trained["model"]), ".", "--format", "native"])
    assert result.exit_code == 0 and (empty / "config.json").exists(), result.output


@pytest.mark.parametrize("where", ["train_path", "heldout", "evaluate", "fit-state", "embed"])
def test_a_text_path_with_a_tilde_no_shell_expanded_names_the_path_written_out(trained, model, tmp_path, monkeypatch,
                                                                                where):
    """``--heldout=~/held.txt`` (no shell expands a ~ after =) said only "~/held.txt does not exist", though a
    model path says what the ~ is and the path written out; ``embed "~/s.txt"`` said "is not a file"."""
    monkeypatch.setenv("HOME", str(trained["held"].parent))  # ~/held.txt is the held-out text
    monkeypatch.chdir(tmp_path)
    options = str(trained["model"].parent / "tiny.json")
    argv = {
        "train_path": ["pretrain", "~/held.txt", str(tmp_path / "out"), "--options", options, "--no-progress"],
        "heldout": ["pretrain", str(trained["train"]), str(tmp_path / "out"), "--options", options,
                    "--heldout=~/held.txt", "--max-steps", "1", "--no-progress"],
        "evaluate": ["evaluate", str(model), "~/held.txt", "--no-progress"],
        "fit-state": ["fit-state", str(model), "~/held.txt", "--no-progress"],
        "embed": ["embed", "~/held.txt", str(tmp_path / "v.h5"), "--model", str(model), "--no-progress"],
    }[where]
    output = plain(clean_error(runner.invoke(app, argv)))
    assert "~/held.txt does not exist: a leading ~ is expanded by a shell" in output, output
    assert str(trained["held"]) in output and "--option=~/x" in output


def test_an_options_path_with_a_tilde_no_shell_expanded_names_the_path_written_out(trained, tmp_path, monkeypatch):
    """``--options=~/tiny.json`` said "[Errno 2] No such file or directory: '~/tiny.json'", not what the ~ is."""
    monkeypatch.setenv("HOME", str(trained["model"].parent))  # ~/tiny.json exists, written out
    monkeypatch.chdir(tmp_path)
    argv = ["pretrain", str(trained["train"]), str(tmp_path / "out"), "--options=~/tiny.json", "--no-progress"]
    output = plain(clean_error(runner.invoke(app, argv), code=2))
    assert "~/tiny.json does not exist: a leading ~ is expanded by a shell" in output, output
    assert str(trained["model"].parent / "tiny.json") in output and "Errno" not in output
    assert not (tmp_path / "out").exists()


def test_embed_says_a_missing_input_does_not_exist_and_a_directory_is_no_file(model, tmp_path):
    """A missing input said "is not a file", where every other command says "does not exist"."""
    missing = tmp_path / "missing.txt"
    output = plain(clean_error(runner.invoke(app, ["embed", str(missing), str(tmp_path / "v.h5"), "--model", str(model)])))
    assert f"{missing} does not exist. Pass a UTF-8 text file" in output, output
    output = plain(clean_error(runner.invoke(app, ["embed", str(tmp_path), str(tmp_path / "v.h5"), "--model", str(model)])))
    assert f"{tmp_path} is not a file (a directory" in output, output


@pytest.mark.parametrize("command", ["pretrain", "embed", "save"])
def test_a_file_where_an_output_directory_belongs_is_named(trained, model, tmp_path, command):
    """pretrain's OUTPUT_DIR, embed's lock beside OUTPUT and BiLM.save made their directories with a bare mkdir:
    "[Errno 17] File exists: '.../afile'" or "[Errno 20] Not a directory", not which path is the file."""
    afile = tmp_path / "afile"
    afile.write_text("kept")
    said = f"{afile} is a file, not a directory, so nothing can be written below it"
    if command == "save":
        with pytest.raises(NotADirectoryError) as err:
            BiLM.load(model).save(afile / "sub" / "m")
        assert str(err.value) == said
    else:
        argv = {"pretrain": ["pretrain", str(trained["train"]), str(afile / "out"), "--options",
                             str(trained["model"].parent / "tiny.json"), "--max-steps", "1", "--no-progress"],
                "embed": ["embed", str(trained["held"]), str(afile / "sub" / "v.h5"), "--model", str(model), "--no-progress"]}
        output = plain(clean_error(runner.invoke(app, argv[command])))
        assert str(afile) in output and "is a file, not a directory" in output and "Errno" not in output, output
    assert afile.read_text() == "kept"


@pytest.mark.parametrize("loop", [False, True], ids=["broken", "loop"])
@pytest.mark.parametrize("command", ["pretrain", "embed", "save", "export", "config"])
def test_a_dangling_link_where_an_output_directory_belongs_is_named_with_its_target(trained, model, tmp_path, command,
                                                                                      loop):
    """An output directory (or one above an output file) that is a symbolic link to nothing: pretrain, embed,
    config and BiLM.save said "[Errno 17] File exists: '.../out'", export wrote the model into the link's target
    (made for it) and crashed on a loop ("RuntimeError: Symlink loop"). Each names the link, where it points and
    the fix, and makes nothing."""
    link = tmp_path / "out"
    link.symlink_to(link if loop else tmp_path / "gone")
    said = (f"{link} is a symbolic link past too many levels" if loop
            else f"{link} is a broken symbolic link: it points to {tmp_path / 'gone'}, which does not exist")
    fix = f"point the link at the directory to write in (ln -sfn TARGET {link}) or remove it."
    if command == "save":
        with pytest.raises(FileNotFoundError) as err:
            BiLM.load(model).save(link)
        output = str(err.value)
    else:
        argv = {"pretrain": ["pretrain", str(trained["train"]), str(link), "--options",
                             str(trained["model"].parent / "tiny.json"), "--max-steps", "1", "--no-progress"],
                "embed": ["embed", str(trained["held"]), str(link / "v.h5"), "--model", str(model), "--no-progress"],
                "export": ["export", str(model), str(link)],
                "config": ["config", "ner", str(link / "ner.cfg")]}
        output = plain(clean_error(runner.invoke(app, argv[command])))
    assert said in output and fix in output.replace("Point", "point") and "Errno" not in output, output
    assert ".." not in output.replace(str(tmp_path), ""), output  # config's "Could not write ...: {error}."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]


PATH_TYPED = {"export": ["OUT_DIR"], "pretrain": ["TRAIN_PATH", "OUTPUT_DIR", "--heldout", "--options"],
              "embed": ["INPUT_PATH", "OUTPUT_PATH"], "evaluate": ["TEXT_PATH"], "fit-state": ["TEXT_PATH"]}


@pytest.mark.parametrize("command", sorted(PATH_TYPED))
def test_help_shows_each_path_as_a_path(command):
    """Refusing "" with typer's ``parser=`` made --help show every argument and option typed Path as ``<Path>``
    (the annotation's name), where it had shown ``<path>``: ``path_type=str`` keeps typer's path type."""
    output = plain(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output)
    for name in PATH_TYPED[command]:
        assert re.search(rf"{name}\s+<path>\s", output), (name, output)
    assert "<Path>" not in output
