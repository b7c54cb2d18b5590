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


#: seconds the stubbed timing gives each whole-model implementation (fused the fastest)
_SECONDS = {"fused": 0.5, "reference": 1.0, "AllenNLP-style loop": 3.0, "AllenNLP _ElmoBiLm": 2.0}


@pytest.mark.skipif(not fused_available(), reason="the fused backend needs the compiled extension")
def test_allennlp_bilm_is_timed_in_the_interleaved_rounds_on_the_same_sentences_and_weights(monkeypatch):
    """`--allennlp`: AllenNLP's _ElmoBiLm is one more implementation of the one interleaved timing (the issue's
    4x / 15x targets are its ratio to fused), not timed alone afterwards; its row's tokens are the words (B x T,
    no markers) and each baseline's fused_speedup_vs_this is its seconds over fused's."""
    from benchmarks import allennlp_timing

    interleaved = []

    def side_by_side(impls, repeats, warmup, device):
        interleaved.append(list(impls))
        return {name: (_SECONDS[name], [_SECONDS[name]]) for name in impls}

    built = []

    def runner(model, sentences):
        built.append((model, sentences))
        return lambda: None

    monkeypatch.setattr(kb, "time_side_by_side", side_by_side)
    monkeypatch.setattr(allennlp_timing, "allennlp_bilm_runner", runner)
    monkeypatch.setattr(allennlp_timing, "allennlp_tokens_per_second",
                        lambda *a, **k: pytest.fail("AllenNLP's _ElmoBiLm timed on its own"))
    batch, length = 3, 4
    args = argparse.Namespace(max_slow_tokens=10_000, repeats=1, warmup=0, allennlp=True)
    rec = kb.Recorder(peak_gflops=100.0)
    kb.bench_whole(rec, "small", batch, length, args, torch.device("cpu"))
    kb.add_ratios(rec.rows)
    assert interleaved == [["fused", "reference", "AllenNLP-style loop", "AllenNLP _ElmoBiLm"]]
    (model, sentences), = built
    assert sentences == kb.random_sentences(batch, length)  # the sentences the others run
    assert model.backend == "fused"  # the fused model's weights
    rows = {r["impl"]: r for r in rec.rows}
    assert set(rows) == set(_SECONDS)
    config = BiLMConfig.preset("small")
    positions = batch * (length + 2)
    assert rows["AllenNLP _ElmoBiLm"]["flops"] == _oracle_flops(config, positions, positions)  # every position
    assert rows["fused"]["fused_speedup_vs_this"] is None
    for name, row in rows.items():
        assert row["tokens"] == 12 and row["seconds"] == _SECONDS[name] and row["times"] == [_SECONDS[name]]
        assert row["tokens_per_s"] == pytest.approx(12 / _SECONDS[name])
        if name != "fused":
            assert row["fused_speedup_vs_this"] == pytest.approx(_SECONDS[name] / 0.5)


def test_allennlp_bilm_runner_computes_the_bilm_from_the_zero_state_every_call(allennlp):
    """The timed AllenNLP call holds the given biLM's weights and resets its state in each call: a second call
    gives the first call's activations, both the biLM's (markers kept)."""
    from benchmarks.allennlp_timing import allennlp_bilm_runner

    torch.manual_seed(0)
    model = BiLM(BiLMConfig(projection_dim=8, cell_dim=16, n_layers=2, char_embedding_dim=4,
                            filters=[(1, 4), (2, 8)], n_highway=1), backend="reference").eval()
    sentences = kb.random_sentences(3, 4)
    run = allennlp_bilm_runner(model, sentences)
    with torch.no_grad():
        first, second = run(), run()
        ours = model(kb.char_ids_of(sentences), keep_boundaries=True)
    for a, b, c in zip(first["activations"], second["activations"], ours.activations):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=0)
        assert torch.equal(a, b)
