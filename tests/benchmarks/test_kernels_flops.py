"""The kernel benchmark's FLOP counts: the biLM forward's count against PyTorch's own counter,
and the whole-model rows counting the work each implementation does (the CPU biLM encodes each
distinct token once; the AllenNLP-style loop every position)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import kernels as kb  # noqa: E402
from spacy_elmo.bilm import BiLM, BiLMConfig  # noqa: E402
from spacy_elmo.ops import fused_available  # noqa: E402


def _oracle_flops(config, n_encoded, n_positions):
    """The forward's FLOPs written out from the shapes (multiply-add = 2), independently of kernels.py."""
    W, D, F = config.max_characters_per_token, config.char_embedding_dim, config.n_filters
    P, C = config.projection_dim, config.cell_dim
    per_row = sum(2 * (W - w + 1) * w * D * c for w, c in config.filters)  # every window
    per_row += config.n_highway * 2 * F * 2 * F + 2 * F * P
    # per layer, direction and position: input (P -> 4C), recurrent (P -> 4C), projection (C -> P)
    per_position = config.n_layers * 2 * 2 * (P * 4 * C + P * 4 * C + C * P)
    return per_row * n_encoded + per_position * n_positions


def test_bilm_flops_matches_torchs_flop_counter_on_a_forward():
    config = BiLMConfig.preset("small")
    sentences = [["a", "bb", "a", "ccc"], ["bb", "dddd", "a", "ee"]]
    torch.manual_seed(0)
    model = BiLM(config, backend="reference").eval()
    ids = kb.char_ids_of(sentences)
    n_unique = len({w for s in sentences for w in s}) + 2  # + <S>, </S>
    positions = len(sentences) * (len(sentences[0]) + 2)
    assert kb.encoder_rows(model.token_encoder, lambda: model(ids)) == n_unique
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(ids)
    assert kb.bilm_flops(config, n_unique, positions) == _oracle_flops(config, n_unique, positions)
    assert counter.get_total_flops() == kb.bilm_flops(config, n_unique, positions)
    original = BiLMConfig.preset("original")
    assert kb.bilm_flops(original, 5, 7) == _oracle_flops(original, 5, 7)


def test_bilm_flops_refuses_other_filter_sets():
    config = BiLMConfig.preset("small")
    config.filters = [(1, 4), (2, 8)]
    with pytest.raises(ValueError, match="released filter set"):
        kb.bilm_flops(config, 1, 1)


@pytest.mark.skipif(not fused_available(), reason="the fused backend needs the compiled extension")
def test_whole_model_rows_count_the_work_each_implementation_does(monkeypatch):
    """The CPU biLM's rows count its encoder on the distinct tokens; the AllenNLP-style loop's on
    every position; tokens/s against the nominal floor (every position) is the comparable one."""
    monkeypatch.setattr(kb, "time_side_by_side",  # no timing: fixed seconds
                        lambda impls, *a: {name: (0.5, [0.5]) for name in impls})
    batch, length = 3, 4
    args = argparse.Namespace(max_slow_tokens=10_000, repeats=1, warmup=0, allennlp=False)
    rec = kb.Recorder(peak_gflops=100.0)
    torch.manual_seed(0)
    kb.bench_whole(rec, "small", batch, length, args, torch.device("cpu"))
    config = BiLMConfig.preset("small")
    words = {w for s in kb.random_sentences(batch, length) for w in s}
    positions = batch * (length + 2)
    rows = {r["impl"]: r for r in rec.rows}
    assert set(rows) == {"fused", "reference", "AllenNLP-style loop"}
    nominal = _oracle_flops(config, positions, positions)
    deduped = _oracle_flops(config, len(words) + 2, positions)
    for name in ("fused", "reference"):
        assert rows[name]["flops"] == deduped
        assert rows[name]["gflops"] == pytest.approx(deduped / 0.5 / 1e9)
        assert rows[name]["work_fraction"] == pytest.approx(deduped / 0.5 / 1e9 / 100.0)
    style = rows["AllenNLP-style loop"]
    assert style["flops"] == nominal
    for row in rows.values():
        assert row["nominal_flops"] == nominal
        assert row["floor_fraction"] == pytest.approx(nominal / 0.5 / 1e9 / 100.0)


@pytest.mark.skipif(not fused_available(), reason="the fused kernels need the compiled extension")
def test_the_lstm_baselines_run_in_inference_mode(monkeypatch):
    """Every module timed under no_grad is in eval mode: cuDNN decides by the train flag (training
    mode keeps a reserve buffer for the backward), not by grad mode."""
    seen = []
    for cls in (torch.nn.LSTM, kb.StepLstmWithProjection):
        forward = cls.forward

        def spy(self, *args, _forward=forward, _name=cls.__name__, **kwargs):
            seen.append((_name, self.training))
            return _forward(self, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", spy)
    monkeypatch.setattr(kb, "time_side_by_side",  # each implementation once, no timing
                        lambda impls, *a: {name: (fn(), (0.5, [0.5]))[1] for name, fn in impls.items()})
    args = argparse.Namespace(max_slow_tokens=10_000, repeats=1, warmup=0)
    kb.bench_kernels(kb.Recorder(peak_gflops=100.0), "small", 2, 3, args, torch.device("cpu"))
    assert {name for name, _ in seen} == {"LSTM", "StepLstmWithProjection"}
    assert not any(training for _, training in seen)
