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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_layer_norm_in_low_precision_matches_numpy(dtype):
    """The statistics are summed in float32: in float16 the sum over a (64, 50, 64) layer of mean 5
    overflowed to inf and the whole output was NaN."""
    g = torch.Generator().manual_seed(1)
    layers = [torch.randn(64, 50, 64, generator=g, dtype=torch.float64) * 3 + 5 for _ in range(3)]
    mask = torch.ones(64, 50, dtype=torch.bool)
    mask[5:, 40:] = False
    expected = numpy_scalar_mix([a.numpy() for a in layers], np.zeros(3), 1.0, mask.numpy())
    for mix in (ScalarMix(3, do_layer_norm=True), ScalarMix(3, do_layer_norm=True).to(dtype)):
        got = mix([a.to(dtype) for a in layers], mask)
        assert torch.isfinite(got).all()
        np.testing.assert_allclose(got.detach().double().numpy(), expected, atol=0.05 if dtype == torch.bfloat16 else 5e-3)


def test_layer_norm_of_an_all_masked_batch_is_zero_not_nan():
    layers, _ = layers_and_mask()
    layers = [a.clone().requires_grad_() for a in layers]
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mix = ScalarMix(3, do_layer_norm=True).double()
    out = mix(layers, mask)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert all(torch.isfinite(a.grad).all() for a in layers)
    assert torch.isfinite(mix.scalar_parameters.grad).all() and torch.isfinite(mix.gamma.grad).all()


def test_mask_of_another_shape_is_a_clear_error():
    layers, mask = layers_and_mask()
    for bad in (mask[:, :2], mask.unsqueeze(-1)):
        for layer_norm in (False, True):
            with pytest.raises(ValueError, match=r"the mask has shape .* but the layers need \(3, 5\)"):
                ScalarMix(3, do_layer_norm=layer_norm)(layers, bad)


def test_one_layer_tensor_is_refused_and_stacked_layers_or_a_generator_work():
    """A (B, T, D) tensor with B == n_layers was silently mixed over its batch rows."""
    layers, mask = layers_and_mask()
    mix = ScalarMix(3, initial_weights=[0.5, -1.0, 2.0]).double()
    with pytest.raises(ValueError, match="one tensor of shape \\(3, 5, 4\\).*out.activations"):
        mix(layers[2], mask)
    expected = mix(layers, mask)
    torch.testing.assert_close(mix(torch.stack(layers), mask), expected)
    torch.testing.assert_close(mix((a for a in layers), mask), expected)


def test_one_docs_layers_are_refused_saying_how_to_add_the_batch_dimension():
    """ScalarMix(3)(torch.from_numpy(doc._.elmo)), one doc's (layers, time, dim) float16 array as the spaCy component
    stores it, was told about (batch, time, dim) only: the message gives the reshaping, which then mixes that doc's
    layers (numpy float64 oracle)."""
    g = torch.Generator().manual_seed(1)
    doc_layers = (torch.randn(3, 7, 4, generator=g) * 2).half()  # (layers, time, dim), as doc._.elmo
    mix = ScalarMix(3, initial_weights=[0.5, -1.0, 2.0])
    with torch.no_grad():
        mix.gamma.fill_(1.5)
    with pytest.raises(ValueError, match=r"\(3, 7, 4\).*doc\._\.elmo.*mix\(torch\.from_numpy\(doc\._\.elmo\)\[:, None\]\) gives "
                       r"\(1, time, dim\)"):
        mix(doc_layers)
    mixed = mix(doc_layers[:, None])
    assert mixed.shape == (1, 7, 4)
    w = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    expected = 1.5 * np.einsum("l,ltd->td", w, doc_layers.double().numpy())
    # float16 layers: the weighted sum is float16 (a 0-d weight does not promote them), the result float32 (gamma)
    np.testing.assert_allclose(mixed[0].detach().double().numpy(), expected, rtol=2e-3, atol=2e-3)


def test_initial_weights_that_are_not_numbers():
    for bad in ("abc", [0.0, "x", 1.0], [None, 0.0, 0.0], [0, 10**400, 0]):  # an int beyond float's range
        with pytest.raises(ValueError, match="initial_weights must be a list of numbers"):
            ScalarMix(3, initial_weights=bad)


@pytest.mark.parametrize(
    "weights", [[0.0, float("nan"), 0.0], [0.0, float("inf"), 0.0], [float("-inf")] * 3, [1e39, 0, 0], [float("-inf"), 0.0, 0.0]]
)
def test_initial_weights_that_are_not_finite(weights):
    """Accepted before: every mixed vector came out NaN; a -inf beside finite weights was accepted, and its
    mix weights turned NaN at the first training step with weight decay (-inf * decay in Adam's moments)."""
    with pytest.raises(ValueError, match="must all be finite numbers.*-1e9"):
        ScalarMix(3, initial_weights=weights)


def test_a_very_negative_initial_weight_leaves_its_layer_out_and_trains():
    """The fix the error names for a -inf: -1e9 mixes the other layers only and stays finite in training."""
    layers, _ = layers_and_mask()
    top_only = ScalarMix(3, initial_weights=[-1e9, -1e9, 0.0])
    torch.testing.assert_close(top_only(layers), layers[2])
    optimizer = torch.optim.Adam(top_only.parameters(), weight_decay=0.01)
    top_only(layers).sum().backward()
    optimizer.step()
    assert torch.isfinite(top_only.scalar_parameters).all()
    torch.testing.assert_close(top_only(layers), top_only.gamma * layers[2])


@pytest.mark.parametrize("name,value", [("do_layer_norm", "false"), ("do_layer_norm", 1), ("trainable", "no"), ("trainable", None)])
def test_flags_must_be_booleans(name, value):
    """do_layer_norm="false" switched layer norm on; trainable="no" failed inside nn.Parameter."""
    with pytest.raises(TypeError, match=f"ScalarMix's {name} must be True or False; found {value!r}"):
        ScalarMix(3, **{name: value})


def test_layers_that_are_not_tensors():
    """An AttributeError ('list' object has no attribute 'shape') before."""
    layers, mask = layers_and_mask()
    with pytest.raises(TypeError, match="layer 1 is a list"):
        ScalarMix(3)([layers[0], layers[1].tolist(), layers[2]], mask)
    with pytest.raises(TypeError, match=r"layer 1 is an ndarray\. "):  # was "a ndarray"
        ScalarMix(3)([layers[0], layers[1].numpy(), layers[2]], mask)


def test_layers_or_mask_on_another_device_than_the_mix():
    """torch's "Tensor on device meta is not on the expected device cpu!" (CUDA layers on a CPU mix: "Expected
    all tensors to be on the same device"), naming neither the mix nor the fix."""
    layers, mask = layers_and_mask()
    mix = ScalarMix(3, do_layer_norm=True).double()
    with pytest.raises(ValueError, match=r"ScalarMix: layer 0 is on meta but the mix's weights are on cpu.*mix.to\(device\)"):
        mix([a.to("meta") for a in layers], mask)
    with pytest.raises(ValueError, match=r"ScalarMix: layer 2 is on meta"):
        mix(layers[:2] + [layers[2].to("meta")], mask)
    with pytest.raises(ValueError, match=r"ScalarMix: the mask is on meta but the mix's weights are on cpu"):
        mix(layers, mask.to("meta"))
    meta = mix.to("meta")(torch.stack(layers).to("meta"), mask.to("meta"))  # all on one device: mixed there
    assert meta.is_meta and meta.shape == (3, 5, 4)
