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


def _run_chunks(tmp_path, monkeypatch, result, **settings):
    """train_loop over chunks whose pretraining logs ``result`` as the trainer does (json_ready): its state."""
    (tmp_path / "run").mkdir()

    def chunk(args, train, heldout, target, resume):
        with open(tmp_path / "run" / "train_log.jsonl", "a") as f:
            f.write(json.dumps({"step": target, "event": "heldout", **json_ready(result)}) + "\n")

    monkeypatch.setattr(train_default, "pretrain_chunk", chunk)
    monkeypatch.setattr(train_default, "check_vocab", lambda args: 45)
    monkeypatch.setattr(train_default, "copy_model", lambda src, dst: None)
    args = types.SimpleNamespace(work_dir=tmp_path, **dict(dict(max_chunks=2, chunk_steps=10, max_total_steps=100,
                                                                min_improvement=0.005, patience=3), **settings))
    state: dict = {"stopped": None, "chunks": [], "best": None}
    train_default.train_loop(args, state, tmp_path / "train.txt", tmp_path / "heldout.txt")
    return state


def test_a_held_out_perplexity_past_a_floats_range_is_inf_not_a_crash(tmp_path, monkeypatch, capsys):
    """The trainer logs a perplexity past a float's range as null (json_ready): the loop compared None with a
    float (TypeError) and printed it with :.2f. It reads inf, as its fallback (evaluate_model_dir) gives, and
    shows it as perplexity_text does: with its mean loss."""
    result = {"perplexity_forward": math.inf, "perplexity_backward": 50.0, "perplexity": math.inf,
              "loss_forward": 800.0, "loss_backward": 3.9, "mode": "stream", "n_rows": 32}
    state = _run_chunks(tmp_path, monkeypatch, result, max_chunks=None, max_total_steps=20, patience=1)
    assert [c["perplexity"] for c in state["chunks"]] == [math.inf, math.inf]
    assert state["chunks"][0]["perplexity_backward"] == 50.0
    out = capsys.readouterr().out
    assert ("step 10: held-out perplexity (stream in 32 rows): forward inf (mean loss 800.00 nats), backward 50.00, "
            "geometric mean inf (mean loss 401.95 nats) -- new best") in out, out
    assert "-- no improvement over inf (mean loss 401.95 nats) (step 10)" in out, out
    assert "best step 10, held-out perplexity inf (mean loss 401.95 nats)" in out, out
    # a chunk recorded before its losses were (recipe.json of an earlier run): inf, not nan
    assert train_default._mean_shown({"perplexity": math.inf}) == "inf"
    assert train_default._mean_shown({"perplexity": 12.345}) == "12.35"
    assert train_default.heldout_at(tmp_path / "run", 10)["perplexity_forward"] == math.inf


def test_a_huge_held_out_perplexity_is_shown_as_perplexity_text_shows_it(tmp_path, monkeypatch, capsys):
    """The loop printed perplexities with :.2f: 301 digits for 2.5e300. It shows them as evaluate and pretrain
    do (perplexity_text: from 1e15 in exponent form), in its chunk lines, its "no improvement over" and its end."""
    from spacy_elmo.training.evaluate import perplexity_text

    result = {"perplexity_forward": 2.5e300, "perplexity_backward": 50.0, "perplexity": 1.1e151,
              "loss_forward": 691.0, "loss_backward": 3.9, "mode": "stream", "n_rows": 32}
    _run_chunks(tmp_path, monkeypatch, result, max_chunks=None, max_total_steps=20, patience=1)
    out = capsys.readouterr().out
    assert f"step 10: held-out {perplexity_text(result)} -- new best" in out, out
    assert "forward 2.500e+300, backward 50.00, geometric mean 1.100e+151 -- new best" in out, out
    assert "-- no improvement over 1.100e+151 (step 10)" in out, out
    assert "best step 10, held-out perplexity 1.100e+151" in out, out
    assert max(map(len, out.split())) < 40, out  # no number of hundreds of digits
