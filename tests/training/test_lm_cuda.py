"""A pretraining step on a GPU (run on a GPU machine; skipped elsewhere): the bidirectional LM's forward and
backward with the fused CUDA kernels under bf16 autocast, as ``pretrain`` runs it there, against the same
step in float64 on the CPU (reference ops)."""

import copy

import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm.config import BiLMConfig
from spacy_elmo.training.lm import BidirectionalLM
from spacy_elmo.training.prefetch import prepare_step
from spacy_elmo.training.sampler import LogUniformSampler
from spacy_elmo.training.softmax import SoftmaxLayer
from spacy_elmo.training.vocab import SPECIALS, CharTable, Vocab
from tests.bilm.test_stateful import _cuda_kernels
from tests.ops.test_fused_cuda import _rel

from .conftest import TINY

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not _cuda_kernels(), reason="needs a CUDA GPU and the extension's CUDA kernels"),
]

#: The tiny model (CUDA-core char CNN), and one whose char dimension and filter counts are multiples of 16
#: as in every preset (under autocast its char CNN runs on tensor cores).
SHAPES = {"tiny": TINY, "tensor_cores": {**TINY, "filters": [[1, 16], [2, 16], [3, 32]], "char_embedding_dim": 16}}

#: The relative-norm bound of bf16 (as in tests/ops/test_fused_cuda.py::test_autocast_low_precision_backward):
#: bf16 keeps 8 bits of mantissa; an indexing or gate bug is O(1).
BF16_TOL = 5e-2


def _step(lm, inputs, state, sampler, device, autocast):
    """One step as the trainer takes it (its loss, the mean of the directions' mean NLLs, backward):
    ``(nll_fwd (B, T), nll_bwd (B, T), final state, {parameter name: gradient})``."""
    inputs = inputs.to(torch.device(device))
    state = tuple(s.to(device, next(lm.parameters()).dtype) for s in state)
    lm.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast):
        res = lm(inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd,
                 inputs.lengths, state, inputs.sample, sampler, inputs.logq, inputs.positions)
    n = int(inputs.lengths.sum())
    loss = (res.nll_fwd.sum() / n + res.nll_bwd.sum() / n) / 2
    loss.backward()
    grads = {name: p.grad for name, p in lm.named_parameters()}
    return res.nll_fwd, res.nll_bwd, res.state, grads


@pytest.mark.parametrize("sampled", [False, True], ids=["full_softmax", "sampled_softmax"])
@pytest.mark.parametrize("shapes", list(SHAPES))
def test_bf16_autocast_training_step_on_the_gpu_matches_float64_on_the_cpu(shapes, sampled):
    torch.manual_seed(0)
    config = BiLMConfig.from_dict(SHAPES[shapes])
    words = [f"w{i}x{'y' * (i % 7)}" for i in range(40)]
    vocab = Vocab(SPECIALS + words, 33)  # the last 10 words: non-target types (UNK targets)
    gpu_bilm = BiLM(config, backend="fused")
    softmax = SoftmaxLayer(vocab.size, config.projection_dim)
    with torch.no_grad():  # every weight a bf16 value: both sides start from the same numbers
        for p in list(gpu_bilm.parameters()) + list(softmax.parameters()):
            p.copy_(p.to(torch.bfloat16).float())
    cpu_bilm = BiLM(config, backend="reference")
    cpu_bilm.load_state_dict(gpu_bilm.state_dict())
    cpu_lm = BidirectionalLM(cpu_bilm, copy.deepcopy(softmax)).to("cpu", torch.float64).train()
    gpu_lm = BidirectionalLM(gpu_bilm, softmax).to("cuda").train()  # moves softmax: copied above first
    B, T = 3, 9
    gen = torch.Generator().manual_seed(1)
    fwd = torch.randint(0, len(vocab.types), (B, T + 1), generator=gen)
    bwd = torch.randint(0, len(vocab.types), (B, T + 1), generator=gen)
    lengths = torch.tensor([T, 4, 7])  # ragged rows: padding takes no gradient
    sampler = LogUniformSampler(vocab.size, 12) if sampled else None
    inputs = prepare_step((fwd, bwd, lengths), vocab, CharTable(vocab, config.max_characters_per_token), sampler,
                          torch.Generator().manual_seed(2))
    L, P, C = config.n_layers, config.projection_dim, config.cell_dim
    state = ((torch.randn(2, L, B, P, generator=gen) * 0.3).to(torch.bfloat16).float(),
             (torch.randn(2, L, B, C, generator=gen) * 0.5).to(torch.bfloat16).float())

    got = _step(gpu_lm, inputs, state, sampler, "cuda", autocast=True)
    want = _step(cpu_lm, inputs, state, sampler, "cpu", autocast=False)
    for name, a, b in (("nll_fwd", got[0], want[0]), ("nll_bwd", got[1], want[1]),
                       ("state h", got[2][0], want[2][0]), ("state c", got[2][1], want[2][1])):
        assert a.device.type == "cuda" and torch.isfinite(a.float()).all(), name
        assert _rel(a, b) < BF16_TOL, (name, _rel(a, b))
    for k in range(B):  # the padded positions predict nothing
        assert not got[0][k, lengths[k]:].any() and not got[1][k, lengths[k]:].any()
    assert set(got[3]) == set(want[3])
    for name, grad in got[3].items():
        assert grad is not None and grad.device.type == "cuda" and torch.isfinite(grad.float()).all(), name
        assert _rel(grad, want[3][name]) < BF16_TOL, (name, _rel(grad, want[3][name]))
