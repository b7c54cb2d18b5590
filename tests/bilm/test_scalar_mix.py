import numpy as np
import pytest
import torch

from spacy_elmo import ScalarMix
from tests.bilm.oracle import numpy_scalar_mix


def layers_and_mask(seed=0):
    g = torch.Generator().manual_seed(seed)
    layers = [torch.randn(3, 5, 4, generator=g, dtype=torch.float64) * (i + 1) + i for i in range(3)]
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    return layers, mask


@pytest.mark.parametrize("layer_norm", [False, True])
def test_matches_numpy(layer_norm):
    layers, mask = layers_and_mask()
    mix = ScalarMix(3, do_layer_norm=layer_norm, initial_weights=[0.5, -1.0, 2.0]).double()
    with torch.no_grad():
        mix.gamma.fill_(1.7)
    got = mix(layers, mask).detach().numpy()
    expected = numpy_scalar_mix(
        [a.numpy() for a in layers], np.array([0.5, -1.0, 2.0]), 1.7, mask.numpy() if layer_norm else None
    )
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_uniform_init_and_gradients():
    layers, mask = layers_and_mask()
    mix = ScalarMix(3).double()
    out = mix(layers, mask)
    torch.testing.assert_close(out, sum(layers) / 3)
    out.sum().backward()
    assert mix.scalar_parameters.grad.abs().sum() > 0 and mix.gamma.grad is not None


def test_fixed_mix_is_not_trainable():
    mix = ScalarMix(3, initial_weights=[-1e9, -1e9, 0.0], trainable=False).double()
    layers, mask = layers_and_mask()
    assert not mix.scalar_parameters.requires_grad
    torch.testing.assert_close(mix(layers), layers[2])


def test_errors():
    layers, mask = layers_and_mask()
    with pytest.raises(ValueError, match="built for 2 layers"):
        ScalarMix(2)(layers)
    with pytest.raises(ValueError, match="initial_weights"):
        ScalarMix(3, initial_weights=[0.0])
    with pytest.raises(ValueError, match="needs the mask"):
        ScalarMix(3, do_layer_norm=True)(layers)


@pytest.mark.parametrize("n_layers", [0, -1, 2.0, True])
def test_mixture_size_must_be_a_positive_int(n_layers):
    with pytest.raises(ValueError, match="needs n_layers >= 1"):
        ScalarMix(n_layers)


def test_layers_of_different_shapes_are_an_error():
    layers, mask = layers_and_mask()
    layers[2] = layers[2][:1]  # (1, 5, 4) would broadcast against (3, 5, 4)
    with pytest.raises(ValueError, match=r"layer 2 is \(1, 5, 4\) and layer 0 is \(3, 5, 4\)"):
        ScalarMix(3)(layers)
