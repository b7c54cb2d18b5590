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
