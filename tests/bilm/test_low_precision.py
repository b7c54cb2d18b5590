"""float16 / bfloat16 modules and CPU autocast: both backends run and stay near the float64 oracle.

The fused CPU kernels compute in float32 and hand back the module's dtype; the reference
path computes in that dtype. Under ``torch.autocast("cpu")`` the matrix products run in
bfloat16, and every layer comes back in bfloat16 on both backends."""

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, batch_to_ids
from tests.backends import BACKENDS
from tests.bilm.oracle import NumpyElmo, options, write_model_files

SENTENCES = [["The", "bank", "of", "the", "river", "."], ["밥", "먹었어요", "?"], ["a"]]
#: Largest error against the float64 oracle, relative to the activations' largest magnitude.
TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2}  # measured: 7e-4 and 3e-3


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path_factory.mktemp("lowp"), opts)
    return opt_path, weight_path, NumpyElmo(opts, weight_path).batch(SENTENCES)


def _relative_error(out, expected):
    worst, scale = 0.0, 0.0
    for i, sent in enumerate(SENTENCES):
        for layer, act in enumerate(out.activations):
            got = act[i, : len(sent)].detach().double().numpy()
            worst = max(worst, float(np.abs(got - expected[i][layer]).max()))
            scale = max(scale, float(np.abs(expected[i][layer]).max()))
    return worst / scale


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_low_precision_module(model_files, backend, dtype):
    opt_path, weight_path, expected = model_files
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend).to(dtype)
    out = model(batch_to_ids(SENTENCES))
    assert all(a.dtype == dtype for a in out.activations)
    assert _relative_error(out, expected) < TOLERANCE[dtype]
    sum(a.float().sum() for a in out.activations).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == dtype and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_autocast_bfloat16(model_files, backend):
    opt_path, weight_path, expected = model_files
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch_to_ids(SENTENCES))
    assert _relative_error(out, expected) < TOLERANCE[torch.bfloat16]
    # Every layer in autocast's dtype, as products under autocast return (the fused top
    # layers came back float32 beside a bfloat16 layer 0).
    assert [a.dtype for a in out.activations] == [torch.bfloat16] * len(out.activations)
    for i, sent in enumerate(SENTENCES):  # padding stays exactly zero
        assert all(torch.all(a[i, len(sent):] == 0) for a in out.activations)
