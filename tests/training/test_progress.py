"""Progress bars written to a log file (not a terminal) are redrawn once a minute, not ten times a second."""

import io
import itertools
import re
import sys

import pytest
import tqdm.std

from spacy_elmo.progress import LOG_INTERVAL, progress_bar
from spacy_elmo.training.trainer import train

from .conftest import tiny_train_config, write_corpus


def test_bars_in_a_log_file_are_redrawn_once_a_minute(tmp_path, capsys, monkeypatch):
    """stderr captured, as nohup, Slurm or CI capture it: every redraw stays in the file. With a clock
    that moves 5 s at every reading, a 40-step run redrew its bar 42 times (a day of pretraining
    left ~80 MB of them); now once every LOG_INTERVAL seconds of that clock."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    seconds = itertools.count(0, 5.0)
    monkeypatch.setattr(tqdm.std, "time", lambda: next(seconds))
    # tqdm's monitor thread reads the real clock against the bars' fake one: it would force redraws.
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)
    if tqdm.std.tqdm.monitor is not None:  # one left running by an earlier test
        tqdm.std.tqdm.monitor.exit()
        monkeypatch.setattr(tqdm.std.tqdm, "monitor", None)
    train(tiny_train_config(train_file, tmp_path / "out", max_steps=40, checkpoint_every=40, progress=True))
    redraws = capsys.readouterr().err.count("pretraining:")
    elapsed = next(seconds)  # the clock's reading now
    assert 2 <= redraws <= 2 + elapsed / LOG_INTERVAL  # the first and last draws, and one a minute between


def test_a_log_bar_is_not_redrawn_by_tqdms_monitor_between_minutes(capsys):
    """tqdm's monitor thread redraws a bar whose last redraw is maxinterval (10 s) old: in a log file a slow
    loop was redrawn at 1:00, 1:20, 2:00, 2:20 (review, real clock). The bar's own limits say when it may."""
    with progress_bar(range(3), desc="x") as bar:
        assert bar.mininterval >= LOG_INTERVAL and bar.maxinterval >= LOG_INTERVAL


def test_a_notebook_bar_keeps_tqdms_pace(monkeypatch):
    """ipykernel's stream is no terminal (isatty() is False) but redraws a bar in place: no file grows."""
    stream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})()
    monkeypatch.setattr(sys, "stderr", stream)
    with progress_bar(range(3), desc="x") as bar:
        assert bar.mininterval == 0.1 and bar.maxinterval == 10.0


def test_a_terminal_bar_is_tqdms_own_at_its_pace(monkeypatch):
    """On a terminal (isatty() True) a bar is tqdm's, redrawn in place at tqdm's pace and position: only a log
    gets the once-a-minute line-per-redraw bar."""
    from spacy_elmo.progress import _LogBar

    stream = type("Tty", (io.StringIO,), {"isatty": lambda self: True})()
    monkeypatch.setattr(sys, "stderr", stream)
    with progress_bar(range(3), desc="x", position=1) as bar:
        assert not isinstance(bar, _LogBar) and isinstance(bar, tqdm.std.tqdm)
        assert bar.mininterval == 0.1 and bar.maxinterval == 10.0 and bar.pos == -1  # tqdm's pos: -position
        list(bar)


def test_the_held_out_evaluation_of_pretrain_shows_its_progress(tmp_path, capsys):
    """At each checkpoint pretrain measures --heldout (260 s for the bundled model's held-out text) while its own
    bar stood still, with no bar of the evaluation; now there is one, for each checkpoint's evaluation."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    heldout = write_corpus(tmp_path / "held.txt", 30, seed=2)
    train(tiny_train_config(train_file, tmp_path / "out", max_steps=4, checkpoint_every=2, progress=True,
                            heldout=str(heldout)))
    err = capsys.readouterr().err
    assert "pretraining:" in err and err.count("evaluating: 100%") == 2 and "\x1b[A" not in err, err
    train(tiny_train_config(train_file, tmp_path / "quiet", max_steps=4, checkpoint_every=2, progress=False,
                            heldout=str(heldout)))
    assert "evaluating" not in capsys.readouterr().err


def test_a_log_gets_each_bar_line_once_and_no_line_of_spaces(tmp_path, capsys):
    """Written to a log, tqdm erased the pretraining bar with a line of spaces before each held-out line
    (tqdm.write) and drew its last state twice (the write's redraw, then the close's). Now every redraw is a
    line of its own, ended by a newline (no carriage return), with none blank and the last state once."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    heldout = write_corpus(tmp_path / "held.txt", 30, seed=2)
    train(tiny_train_config(train_file, tmp_path / "out", max_steps=4, checkpoint_every=2, progress=True,
                            heldout=str(heldout)))
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n"), repr(err)
    lines = err[:-1].split("\n")
    assert all(line.strip() for line in lines), repr(err)
    assert len([line for line in lines if line.startswith("pretraining: 100%")]) == 1, err
    held = [i for i, line in enumerate(lines) if line.startswith("step 2: held-out")]
    assert len(held) == 1 and lines[held[0] + 1].startswith("pretraining:  50%"), err  # the bar, redrawn below it


def test_a_log_bar_of_a_loop_writes_its_last_state_once(monkeypatch):
    """Every command's bars (progress_bar), not only pretrain's: a loop's bar closed by its ``with`` and a bar
    closed twice each leave their 100% line once, and a bar with leave=False leaves what it wrote."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with progress_bar(total=3, desc="a") as bar:
        for _ in range(3):
            bar.update(1)
    bar.close()
    for _ in progress_bar(range(2), desc="b", leave=False):
        pass
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and all(line.strip() for line in lines[:-1]), repr(stream.getvalue())
    assert [line[:7] for line in lines[:-1]] == ["a:   0%", "a: 100%", "b:   0%"], lines


def _words(path) -> str:
    """The words of a generated corpus (spaCy splits none of them), as a bar of unit_scale shows them ("1.54k")."""
    return tqdm.std.tqdm.format_sizeof(sum(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()))


def test_pretrain_shows_the_tokenizing_of_its_held_out_text(tmp_path, capsys):
    """--heldout was tokenized with no bar (200k tokens: 2.8 s, a big file minutes of nothing); now it has one, of
    the words read, written without cursor moves in a log, and none with progress off."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    heldout = write_corpus(tmp_path / "held.txt", 30, seed=2)
    train(tiny_train_config(train_file, tmp_path / "out", max_steps=2, checkpoint_every=2, progress=True,
                            heldout=str(heldout)))
    err = capsys.readouterr().err
    assert f"tokenizing held.txt: {_words(heldout)} tok " in err and "\x1b[A" not in err, err
    train(tiny_train_config(train_file, tmp_path / "quiet", max_steps=2, checkpoint_every=2, progress=False,
                            heldout=str(heldout)))
    assert "tokenizing" not in capsys.readouterr().err


def test_evaluate_and_fit_state_show_the_tokenizing_of_their_text(tmp_path):
    """evaluate and fit-state tokenized their text with no bar; now one counts its words, and --no-progress
    (evaluate's --json too) turns it off."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    runner = CliRunner()
    model = tmp_path / "model"
    train(tiny_train_config(write_corpus(tmp_path / "train.txt", 100), model, max_steps=2, checkpoint_every=2))
    text = write_corpus(tmp_path / "text.txt", 200, seed=3)
    shown = f"tokenizing text.txt: {_words(text)} tok "
    for command in (["evaluate", str(model), str(text)], ["fit-state", str(model), str(text), "--rows", "2"]):
        drawn = runner.invoke(app, command)
        assert drawn.exit_code == 0 and shown in drawn.output, drawn.output
        for quiet in (["--no-progress"], ["--json"] if command[0] == "evaluate" else []):
            if quiet:
                result = runner.invoke(app, [*command, *quiet])
                assert result.exit_code == 0 and "tokenizing" not in result.output, result.output


def test_the_pretraining_bar_says_its_perplexity_is_of_the_sampled_softmax(tmp_path, capsys):
    """exp of the sampled-softmax loss is far below the model's perplexity with few negatives (201.3 in full:
    11.3 with 64): the bar called it ``ppl``. It says ``sampled ppl``, and ``ppl`` where the softmax is full."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    train(tiny_train_config(train_file, tmp_path / "sampled", max_steps=2, checkpoint_every=2, progress=True, log_every=1))
    err = capsys.readouterr().err
    assert ", sampled ppl=" in err, err
    # the value as evaluate shows the held-out one (bar_postfix): two decimals, no thousands separator; the bar's
    # last postfix is the last logged window's
    from spacy_elmo.training.evaluate import perplexity_shown
    from spacy_elmo.training.trainer import read_log

    last = [e for e in read_log(tmp_path / "sampled") if "sampled_perplexity" in e][-1]["sampled_perplexity"]
    assert f", sampled ppl={perplexity_shown(last)}]" in err and re.search(r"sampled ppl=\d+\.\d\d\]", err), err
    with pytest.warns(RuntimeWarning, match="using the full softmax"):
        train(tiny_train_config(train_file, tmp_path / "full", max_steps=2, checkpoint_every=2, progress=True, log_every=1,
                                negatives=10_000))
    err = capsys.readouterr().err
    assert ", ppl=" in err and "sampled" not in err, err


def test_the_pretraining_bar_shows_a_huge_perplexity_as_the_held_out_one_is():
    """The bar's sampled perplexity (exp of the window's loss, at most e^50) printed ``{:,.1f}``: e^50 as
    ``5,184,705,528,587,072,045,056.0``, 31 characters of a bar line. It is shown as evaluate shows the held-out
    perplexity (perplexity_shown): with an exponent from 1e15, two decimals below."""
    import math

    from spacy_elmo.training.trainer import bar_postfix

    assert bar_postfix(12_345.6, math.exp(50.0), False) == {"tok/s": "12,346", "sampled ppl": "5.185e+21"}
    assert bar_postfix(10.0, 1e15, True) == {"tok/s": "10", "ppl": "1.000e+15"}
    assert bar_postfix(10.0, 201.3456, True) == {"tok/s": "10", "ppl": "201.35"}


def test_a_stopped_run_closes_its_bar_before_the_message_that_follows(tmp_path, capsys):
    """Stopped by Ctrl-C (or SIGTERM, an error), pretrain left its bar open: it was drawn last when collected,
    after the CLI's "Interrupted ... rerun with --resume" (review). It is closed on every way out of train()."""
    import gc

    train_file = write_corpus(tmp_path / "train.txt", 100)

    def stop(step, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=10, checkpoint_every=2, progress=True),
              on_step=stop)
    print("Interrupted.", file=sys.stderr)  # what the CLI says
    del stopped  # its traceback held train()'s frame, and the bar
    gc.collect()
    err = capsys.readouterr().err
    assert "pretraining:" in err and err.endswith("Interrupted.\n"), err[-300:]


def test_tqdms_monitor_does_not_write_a_log_bar_line_twice(monkeypatch):
    """In a log, some lines were written twice, one step apart in the same second (review). tqdm's monitor thread
    refreshes a bar whose miniters (tqdm's, adjusted to the steps seen a redraw) is above 1 and whose last redraw is
    maxinterval old, setting miniters to 1 but not the last redraw's step and time: the next update() drew the bar
    again. A log bar checks the clock at every update (miniters 1), which the monitor leaves alone. The monitor's
    pass is run here by hand (tqdm's TMonitor.run, one pass) on a fake clock."""
    from types import SimpleNamespace

    from tqdm._monitor import TMonitor

    from spacy_elmo.progress import _LogBar

    now = [0.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)  # no monitor thread of its own on the real clock
    if tqdm.std.tqdm.monitor is not None:
        tqdm.std.tqdm.monitor.exit()
        monkeypatch.setattr(tqdm.std.tqdm, "monitor", None)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    bar = progress_bar(total=1000, desc="x", unit="step")
    assert isinstance(bar, _LogBar) and bar.mininterval == bar.maxinterval == LOG_INTERVAL
    for _ in range(200):  # a step a second: a line a minute
        now[0] += 1.0
        bar.update(1)
    before = stream.getvalue().count("\n")
    now[0] += LOG_INTERVAL + 1  # a slow step (a checkpoint, a held-out evaluation): the monitor wakes meanwhile

    class OnePass:  # the monitor's Event: its second wait ends the run
        waits = 0

        def wait(self, seconds):
            self.waits += 1

        def is_set(self):
            return self.waits > 1

    monitor = SimpleNamespace(tqdm_cls=type(bar), sleep_interval=0, _time=lambda: now[0], was_killed=OnePass(), woken=0,
                              get_instances=lambda: [bar])
    TMonitor.run(monitor)
    now[0] += 0.5
    bar.update(1)  # the slow step ends
    bar.update(1)
    lines = stream.getvalue().splitlines()[before:]
    assert len(lines) == 1 and "201/1000" in lines[0], lines  # drawn once, by the update after the slow step
    bar.close()
