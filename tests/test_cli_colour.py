"""Colour on a terminal, and NO_COLOR (https://no-color.org)."""

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _on_a_terminal(args, env_changes):
    """``python -m spacy_elmo ARGS`` with a pseudo-terminal as stdout and stderr: its exit status and output."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", **env_changes}
    for name in [k for k, v in env.items() if v is None]:
        del env[name]
    proc = subprocess.Popen([sys.executable, "-m", "spacy_elmo", *args], stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=follower, env=env, cwd=ROOT)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("no_color", [None, "1"])
def test_errors_are_red_on_a_terminal_unless_no_color_is_set(tmp_path, no_color):
    """spacy-elmo's own error lines (typer.secho) were red on a terminal even with NO_COLOR set."""
    existing = tmp_path / "ner.cfg"
    existing.write_text("mine\n", encoding="utf-8")
    status, shown = _on_a_terminal(["config", "ner", str(existing)], {"NO_COLOR": no_color})
    assert status == 1 and "exists" in shown
    assert ("\x1b[" in shown) == (no_color is None)


#: click's codes for the colours: an error red, a warning and an interruption yellow.
RED, YELLOW = "\x1b[31m", "\x1b[33m"


def _coloured(monkeypatch, args, env=None):
    """``spacy-elmo ARGS`` in-process with colour kept (as on a terminal): the result."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    monkeypatch.delenv("NO_COLOR", raising=False)
    return CliRunner().invoke(app, args, color=True, env=env)


@pytest.mark.parametrize("no_color, coloured", [(None, True), ("", True), ("1", False)], ids=["unset", "empty", "set"])
def test_an_error_is_red_a_warning_yellow_and_an_empty_no_color_is_no_setting(tmp_path, monkeypatch, no_color, coloured):
    """fail's lines are red and warn's yellow; NO_COLOR set to the empty string asks for nothing (no-color.org:
    "present and not an empty string")."""
    from spacy_elmo.errors import Warnings

    existing = tmp_path / "ner.cfg"
    existing.write_text("mine\n", encoding="utf-8")
    env = None if no_color is None else {"NO_COLOR": no_color}
    failed = _coloured(monkeypatch, ["config", "ner", str(existing)], env)
    assert failed.exit_code == 1 and "exists" in failed.stderr
    assert failed.stderr.startswith(RED) == coloured and (YELLOW not in failed.stderr), repr(failed.stderr)
    warned = _coloured(monkeypatch, ["config", "ner", str(existing), "--force"], env)  # deprecated: a warning
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.startswith(YELLOW + Warnings.W_CONFIG_FORCE[:20]) == coloured, repr(warned.stderr)
    assert (("\x1b[" in failed.stderr + warned.stderr) == coloured)


def test_an_interruption_is_yellow(tmp_path, monkeypatch):
    """Ctrl-C ends a command with a yellow line (not an error's red): what was kept and how to go on."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("spacy_elmo.cli.config.atomic_write_text", interrupted)
    result = _coloured(monkeypatch, ["config", "ner", str(tmp_path / "ner.cfg")])
    assert result.exit_code == 130 and result.stderr.startswith(YELLOW), repr(result.stderr)
