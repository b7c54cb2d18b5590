"""benchmarks/train_default.py's chunk loop on held-out lines written here (no pretraining run)."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import train_default  # noqa: E402
from spacy_elmo.training.evaluate import json_ready  # noqa: E402


def test_a_held_out_perplexity_past_a_floats_range_is_inf_not_a_crash(tmp_path, monkeypatch, capsys):
    """The trainer logs a perplexity past a float's range as null (json_ready): the loop compared None with a
    float (TypeError) and printed it with :.2f. It reads inf, as its fallback (evaluate_model_dir) gives."""
    (tmp_path / "run").mkdir()
    result = {"perplexity_forward": math.inf, "perplexity_backward": 50.0, "perplexity": math.inf,
              "loss_forward": 800.0, "loss_backward": 3.9, "mode": "stream", "n_rows": 32}

    def chunk(args, train, heldout, target, resume):
        with open(tmp_path / "run" / "train_log.jsonl", "a") as f:
            f.write(json.dumps({"step": target, "event": "heldout", **json_ready(result)}) + "\n")

    monkeypatch.setattr(train_default, "pretrain_chunk", chunk)
    monkeypatch.setattr(train_default, "check_vocab", lambda args: 45)
    monkeypatch.setattr(train_default, "copy_model", lambda src, dst: None)
    args = types.SimpleNamespace(work_dir=tmp_path, max_chunks=2, chunk_steps=10, max_total_steps=100,
                                 min_improvement=0.005, patience=3)
    state: dict = {"stopped": None, "chunks": [], "best": None}
    train_default.train_loop(args, state, tmp_path / "train.txt", tmp_path / "heldout.txt")
    assert [c["perplexity"] for c in state["chunks"]] == [math.inf, math.inf]
    assert state["chunks"][0]["perplexity_backward"] == 50.0
    out = capsys.readouterr().out
    assert "held-out perplexity forward inf, backward 50.00, mean inf -- new best" in out, out
    assert train_default.heldout_at(tmp_path / "run", 10)["perplexity_forward"] == math.inf
