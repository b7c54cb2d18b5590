"""An inf output gradient at padded positions (fp16 loss scaling overflows there first) must give the
same finite gradients as a zero one: padded positions are outside the model's function, so their
gradients are dropped by selects, never by products with a 0/1 mask (inf * 0 = NaN)."""

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.bilm.scalar_mix import masked_layer_norm

from ..backends import BACKENDS

TINY = BiLMConfig(projection_dim=6, cell_dim=10, char_embedding_dim=4, filters=[(1, 4), (2, 6)], n_highway=1)
SENTENCES = [["a", "bc", "def"], ["gh"], []]  # ragged, and a row of padding only


def _grads(backend, keep_boundaries, inf):
    torch.manual_seed(0)
    model = BiLM(TINY, backend=backend).double()
    out = model(batch_to_ids(SENTENCES), keep_boundaries=keep_boundaries)
    gen = torch.Generator().manual_seed(1)
    for layer in out.activations:
        padded = ~out.mask.unsqueeze(-1).expand_as(layer)
        grad = torch.where(padded, torch.tensor(float("inf") if inf else 0.0, dtype=layer.dtype),
                           torch.randn(layer.shape, generator=gen, dtype=layer.dtype))
        layer.backward(grad, retain_graph=True)
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("keep_boundaries", [False, True])
def test_an_inf_gradient_at_padded_positions_gives_the_gradients_of_a_zero_one(backend, keep_boundaries):
    """remove_boundaries and the keep_boundaries mask multiplied by the mask: for the position after
    a row's last token, `</S>` (a real position) took inf * 0 = NaN, and every parameter's gradient was NaN."""
    got = _grads(backend, keep_boundaries, inf=True)
    expected = _grads(backend, keep_boundaries, inf=False)
    assert got.keys() == expected.keys() and len(got) > 10
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


def test_masked_layer_norm_of_a_layer_without_tokens_passes_no_nan():
    """A layer with no unmasked element gives zeros; its backward multiplied them by (count > 0)."""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    out = masked_layer_norm(x, torch.zeros(2, 3, dtype=torch.bool))
    assert torch.equal(out, torch.zeros_like(out))
    out.backward(torch.full_like(out, float("inf")))
    assert torch.equal(x.grad, torch.zeros_like(x))
