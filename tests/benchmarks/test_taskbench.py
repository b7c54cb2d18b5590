"""How the task benchmarks name a biLM directory in their committed results."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import taskbench as tb  # noqa: E402
from spacy_elmo.bilm.native_io import DEFAULT_MODEL_DIR  # noqa: E402


def test_display_path_never_shows_this_machines_absolute_paths(tmp_path, monkeypatch):
    assert tb.display_path(DEFAULT_MODEL_DIR) == "default (the bundled model, spacy_elmo/data/default)"
    assert tb.display_path(tb.ROOT / "benchmarks" / "results") == "benchmarks/results"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tb.display_path(tmp_path / ".cache" / "spacy-elmo" / "run") == "~/.cache/spacy-elmo/run"
    outside = Path("/opt/models/elmo")
    assert tb.display_path(outside) == str(outside)
