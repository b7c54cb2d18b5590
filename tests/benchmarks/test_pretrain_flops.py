"""The pretraining benchmark's FLOP count (its floor) against PyTorch's own
counter on a real reference-backend training step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import pretrain as pb  # noqa: E402
from spacy_elmo.bilm import BiLM, BiLMConfig  # noqa: E402
from spacy_elmo.training.lm import BidirectionalLM  # noqa: E402
from spacy_elmo.training.sampler import LogUniformSampler  # noqa: E402
from spacy_elmo.training.softmax import SoftmaxLayer  # noqa: E402
from spacy_elmo.training.trainer import build_optimizer  # noqa: E402
from spacy_elmo.training.vocab import CharTable  # noqa: E402


def test_step_flops_matches_torchs_flop_counter():
    config = BiLMConfig.preset("small")
    vocab = pb.synthetic_vocab(2000)
    (fwd, bwd), = pb.batches(vocab, batch=3, unroll=4, n=1)
    negatives = 1024
    torch.manual_seed(0)
    bilm = BiLM(config, backend="reference")
    lm = BidirectionalLM(bilm, SoftmaxLayer(len(vocab), config.projection_dim)).train()
    sampler = LogUniformSampler(len(vocab), negatives)
    step = pb.make_step(lm, build_optimizer("adagrad", None, lm.parameters()), sampler,
                        CharTable(vocab, config.max_characters_per_token), vocab, torch.device("cpu"), False,
                        torch.Generator().manual_seed(0), [(fwd, bwd)])
    with FlopCounterMode(display=False) as counter:
        step(0)
    n_unique = torch.unique(torch.cat([fwd[:, :-1], bwd[:, :-1]], 1)).numel()
    B, n_tokens = fwd.shape[0], fwd.shape[0] * (fwd.shape[1] - 1)
    expected = pb.step_flops(config, n_unique, n_tokens, negatives)
    # The counter sees every product and convolution, forward and backward. The
    # count leaves out only what the reference step does not multiply: the first
    # recurrent product's gradient to its zero state (no gradient wanted), per layer
    # and direction, and the true-target logits (an elementwise sum, which the
    # counter does not count; step_flops counts it as one more candidate).
    P, C = config.projection_dim, config.cell_dim
    not_multiplied = config.n_layers * 2 * (2 * B * P * 4 * C) + 3 * 2 * (2 * n_tokens) * P
    assert counter.get_total_flops() == expected - not_multiplied


def test_step_flops_refuses_other_filter_sets():
    config = BiLMConfig.preset("small")
    config.filters = [(1, 4), (2, 8)]
    with pytest.raises(ValueError, match="released filter set"):
        pb.step_flops(config, 10, 10, 8)
