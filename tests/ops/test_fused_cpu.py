"""Fused kernels (spacy_elmo._C) vs the reference ops vs an independent NumPy float64 oracle.

No spaCy anywhere here: these tests also run on the GPU machine.
"""

import gc
import multiprocessing

import numpy as np
import pytest
import torch

from spacy_elmo.ops import reference as R

from . import numpy_oracle as O

fused = pytest.importorskip("spacy_elmo.ops.fused", reason="spacy_elmo._C is not built")

PAD_CHAR = 261
TOL32 = dict(rtol=1e-5, atol=1e-5)


def _close(actual, expected, **tol):
    tol = tol or TOL32
    a = actual.detach().double().cpu().numpy() if isinstance(actual, torch.Tensor) else actual
    e = expected.detach().double().cpu().numpy() if isinstance(expected, torch.Tensor) else expected
    np.testing.assert_allclose(a, e, **tol)


def _preset_filters():
    from spacy_elmo.bilm.config import BiLMConfig

    return {name: BiLMConfig.preset(name).filters for name in ("small", "medium", "original")}


def random_char_ids(gen, n_tok, n_chars=50, zero_rows=(), word_lengths=None):
    """Realistic tokens: [258, bytes.., 259, 260, 261...] shifted, some all-zero rows."""
    ids = torch.full((n_tok, n_chars), PAD_CHAR, dtype=torch.long)
    for n in range(n_tok):
        k = int(torch.randint(1, n_chars - 1, (1,), generator=gen)) if word_lengths is None else word_lengths[n]
        k = min(k, n_chars - 2)
        ids[n, 0] = 259
        ids[n, 1 : 1 + k] = torch.randint(1, 257, (k,), generator=gen)
        ids[n, 1 + k] = 260
    for r in zero_rows:
        ids[r] = 0
    return ids


def char_params(gen, filters, dim, dtype=torch.float32, scale=0.2):
    emb = torch.rand(261, dim, generator=gen, dtype=torch.float64) * 2 - 1
    ws = [(torch.rand(c, dim, w, generator=gen, dtype=torch.float64) * 2 - 1) * scale for w, c in filters]
    bs = [(torch.rand(c, generator=gen, dtype=torch.float64) * 2 - 1) * 0.1 for _, c in filters]
    return emb.to(dtype), [w.to(dtype) for w in ws], [b.to(dtype) for b in bs]


# ----------------------------------------------------------------- char CNN


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("n_tok,n_chars", [(1, 50), (7, 50), (19, 9), (3, 4)])
def test_char_cnn_forward_small_filters(activation, n_tok, n_chars):
    gen = torch.Generator().manual_seed(n_tok * 31 + n_chars)
    filters = [(1, 3), (2, 17), (3, 16), (4, 40)]
    filters = [(w, c) for w, c in filters if w <= n_chars]
    ids = random_char_ids(gen, n_tok, n_chars, zero_rows=[0] if n_tok > 1 else [])
    emb, ws, bs = char_params(gen, filters, 5)
    out = fused.char_cnn(ids, emb, ws, bs, activation)
    _close(out, O.char_cnn(ids.numpy(), emb.numpy(), [w.numpy() for w in ws], [b.numpy() for b in bs], activation))
    _close(out, R.char_cnn(ids, emb, ws, bs, activation))


@pytest.mark.parametrize("preset", ["small", "medium", "original"])
def test_char_cnn_each_preset_filter_set(preset):
    filters = _preset_filters()[preset]
    gen = torch.Generator().manual_seed(3)
    # 50-character tokens included: 48 bytes, no padding character at all
    ids = random_char_ids(gen, 5, 50, zero_rows=[4], word_lengths=[48, 1, 5, 20, 3])
    emb, ws, bs = char_params(gen, filters, 16, scale=0.05)
    out = fused.char_cnn(ids, emb, ws, bs)
    _close(out, O.char_cnn(ids.numpy(), emb.numpy(), [w.numpy() for w in ws], [b.numpy() for b in bs]))


def test_char_cnn_padding_chars_are_real_inputs():
    gen = torch.Generator().manual_seed(5)
    filters = [(1, 4), (3, 8)]
    emb, ws, bs = char_params(gen, filters, 4)
    ids = random_char_ids(gen, 2, 12, word_lengths=[2, 2])
    base = fused.char_cnn(ids, emb, ws, bs)
    emb2 = emb.clone()
    emb2[PAD_CHAR - 1] += 5.0
    assert not torch.allclose(base, fused.char_cnn(ids, emb2, ws, bs))
    _close(fused.char_cnn(ids, emb2, ws, bs), R.char_cnn(ids, emb2, ws, bs))


@pytest.mark.parametrize("pad_shift", [0.0, 3.0, -3.0])
def test_char_cnn_trailing_run_windows(pad_shift):
    """The float32 kernel computes one window inside each token's trailing run of a
    repeated id (the padding) and skips the identical rest: forward and gradients
    must equal the full computation whether a padding window wins the max
    (pad_shift > 0), loses it (< 0) or either, for runs of padding, of a real char,
    no run at all (a full-length token) and all-zero rows."""
    gen = torch.Generator().manual_seed(17)
    filters = [(1, 7), (2, 16), (3, 9), (6, 20), (7, 33)]
    ids = random_char_ids(gen, 8, 30, zero_rows=[5], word_lengths=[1, 2, 3, 5, 28, 0, 9, 27])
    ids[6, 10:] = 97  # a run of one real char, no padding
    ids[7, 28] = 97   # full length: the run is the last id alone
    emb, ws, bs = char_params(gen, filters, 6)
    emb[PAD_CHAR - 1] += pad_shift
    np_w = [w.numpy().astype(np.float64) for w in ws]
    expected = O.char_cnn(ids.numpy(), emb.double().numpy(), np_w, [b.double().numpy() for b in bs])
    _close(fused.char_cnn(ids, emb, ws, bs), expected)
    grads = []
    for impl, dtype in ((fused, torch.float32), (R, torch.float64)):
        params = [p.to(dtype).clone().requires_grad_() for p in [emb, *ws, *bs]]
        out = impl.char_cnn(ids, params[0], params[1:6], params[6:])
        (out * torch.linspace(-1, 2, out.numel(), dtype=dtype).view_as(out)).sum().backward()
        grads.append([p.grad for p in params])
    for a, e in zip(*grads):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
# dim 16: every filter's window is whole vectors under every ISA (the backward's
# register path); dim 6: partial vectors (its generic path). 9 tokens: two tiles.
@pytest.mark.parametrize("dim", [6, 16])
def test_char_cnn_gradients_float32_vs_reference(activation, dim):
    gen = torch.Generator().manual_seed(11)
    filters = [(1, 5), (2, 16), (5, 33)]
    ids = random_char_ids(gen, 9, 20, zero_rows=[2])
    emb, ws, bs = char_params(gen, filters, dim)
    grads = []
    for impl in (fused, R):
        params = [p.clone().requires_grad_() for p in [emb, *ws, *bs]]
        out = impl.char_cnn(ids, params[0], params[1:4], params[4:], activation)
        (out * torch.linspace(-1, 2, out.numel()).view_as(out)).sum().backward()
        grads.append([p.grad for p in params])
    for a, e in zip(*grads):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("filters", [[(1, 5)], "small"])
def test_char_cnn_backward_repeats_bit_for_bit(threads, filters):
    """The same call gives the same gradients to the last bit (work stealing summed the table's
    gradient from partials that differed from call to call), and they are right for any team
    size, also one larger than the number of filter blocks."""
    filters = _preset_filters()["small"] if filters == "small" else filters
    gen = torch.Generator().manual_seed(17)
    ids = random_char_ids(gen, 48, 50, zero_rows=[5])
    emb, ws, bs = char_params(gen, filters, 16, scale=0.05)
    g_out = torch.rand(48, sum(c for _, c in filters), generator=gen) - 0.5
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        grads = []
        for impl in [fused] * 6 + [R]:
            params = [p.clone().requires_grad_() for p in [emb, *ws]]
            (impl.char_cnn(ids, params[0], params[1:], bs) * g_out).sum().backward()
            grads.append([p.grad for p in params])
    finally:
        torch.set_num_threads(before)
    for other in grads[1:-1]:
        for a, b in zip(grads[0], other):
            assert torch.equal(a, b)
    for a, e in zip(grads[0], grads[-1]):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_char_cnn_gradcheck_float64(activation):
    gen = torch.Generator().manual_seed(13)
    filters = [(1, 2), (2, 3), (4, 3)]
    ids = random_char_ids(gen, 4, 7, zero_rows=[3])
    emb, ws, bs = char_params(gen, filters, 3, dtype=torch.float64, scale=1.0)
    params = [p.requires_grad_() for p in [emb, *ws, *bs]]

    def fn(e, *p):
        return fused.char_cnn(ids, e, p[:3], p[3:], activation)

    assert torch.autograd.gradcheck(fn, tuple(params))


# The CUDA autograd backward runs char_cnn_backward_composed (ATen ops, cuDNN's convolution_backward)
# instead of the CUDA kernel, whose atomics took 76-80 ms a step: checked here on the CPU against
# the CPU op and the float64 oracle (tests/ops/test_fused_cuda.py checks it against the kernel).
COMPOSED_CASES = {
    "small_filters": ([(1, 3), (2, 17), (3, 16), (4, 40)], 7, 12, 5),
    "width_equals_token": ([(1, 2), (6, 3), (9, 4)], 4, 9, 3),  # one window position for width 9
    "small": ("small", 5, 50, 16),
    "original": ("original", 3, 50, 16),
}


def _composed_case(name, dtype, seed=23):
    filters, n_tok, n_chars, dim = COMPOSED_CASES[name]
    filters = _preset_filters()[filters] if isinstance(filters, str) else filters
    gen = torch.Generator().manual_seed(seed)
    lengths = [min(n_chars - 2, k) for k in (1, 48, 0, 3, 7, 2, 20)[:n_tok]]
    ids = random_char_ids(gen, n_tok, n_chars, zero_rows=[n_tok - 1], word_lengths=lengths)
    emb, ws, bs = char_params(gen, filters, dim, dtype=dtype, scale=0.3)
    return ids, emb, ws, bs, gen


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("case", sorted(COMPOSED_CASES))
def test_char_cnn_backward_composed_matches_the_op_and_the_oracle(activation, case):
    act = 0 if activation == "relu" else 1
    for dtype in (torch.float32, torch.float64):
        ids, emb, ws, bs, gen = _composed_case(case, dtype)
        out, arg = torch.ops.spacy_elmo.char_cnn_forward(ids, emb, ws, bs, act)
        grad = (torch.rand(out.shape, generator=gen, dtype=torch.float64) - 0.5).to(dtype)
        got = fused.char_cnn_backward_composed(grad, out, arg, ids, emb, ws, act)
        d_emb, d_ws, d_bs = got
        assert d_emb.dtype == dtype and d_emb.shape == emb.shape
        assert [t.shape for t in d_ws] == [w.shape for w in ws] and [t.shape for t in d_bs] == [b.shape for b in bs]
        assert all(t.dtype == dtype for t in [*d_ws, *d_bs])
        if dtype == torch.float32:
            op = torch.ops.spacy_elmo.char_cnn_backward(grad, out, arg, ids, emb, ws, act)
            for a, e in zip([d_emb, *d_ws, *d_bs], [op[0], *op[1], *op[2]]):
                _close(a, e, rtol=1e-5, atol=1e-5)
        else:
            o_emb, o_ws, o_bs = O.char_cnn_backward(ids.numpy(), emb.numpy(), [w.numpy() for w in ws], grad.numpy(),
                                                    out.numpy(), arg.numpy(), activation)
            for a, e in zip([d_emb, *d_ws, *d_bs], [o_emb, *o_ws, *o_bs]):
                _close(a, e, rtol=1e-10, atol=1e-12)


def test_char_cnn_backward_composed_dtypes_and_no_tokens():
    """Low-precision inputs (CUDA autocast's) come back in their dtypes, computed in float32;
    int32 ids are fine; no tokens give zero gradients."""
    ids, emb, ws, bs, gen = _composed_case("small_filters", torch.float32)
    out, arg = torch.ops.spacy_elmo.char_cnn_forward(ids, emb, ws, bs, 1)
    grad = torch.rand(out.shape, generator=gen) - 0.5
    ref = fused.char_cnn_backward_composed(grad, out, arg, ids, emb, ws, 1)
    low = fused.char_cnn_backward_composed(grad.bfloat16(), out.bfloat16(), arg, ids.int(), emb.bfloat16(),
                                           [w.bfloat16() for w in ws], 1)
    for a, e in zip([low[0], *low[1], *low[2]], [ref[0], *ref[1], *ref[2]]):
        assert a.dtype == torch.bfloat16 and a.shape == e.shape
        _close(a, e, rtol=5e-2, atol=2e-2)
    empty = fused.char_cnn_backward_composed(out[:0], out[:0], arg[:0], ids[:0], emb, ws, 1)
    for a, e in zip([empty[0], *empty[1], *empty[2]], [emb, *ws, *bs]):
        assert a.shape == e.shape and not a.any()


def test_cuda_char_cnn_autograd_runs_the_composition(monkeypatch):
    """The CUDA autograd backward runs the ATen composition, the CPU one the CPU op; and the
    autograd glue around it (arguments, results, the width-1 strides) gives the reference's
    gradients when the composition runs (forced here on the CPU)."""
    assert fused._char_cnn_backward_for(torch.device("cuda", 0)) is fused.char_cnn_backward_composed
    assert fused._char_cnn_backward_for(torch.device("cpu")) is torch.ops.spacy_elmo.char_cnn_backward
    ids, emb, ws, bs, gen = _composed_case("small_filters", torch.float32)
    calls = []

    def composed(*args):
        calls.append(True)
        return fused.char_cnn_backward_composed(*args)

    monkeypatch.setattr(fused, "_char_cnn_backward_for", lambda device: composed)
    grads = []
    for impl in (fused, R):
        params = [p.clone().requires_grad_() for p in [emb, *ws, *bs]]
        out = impl.char_cnn(ids, params[0], params[1:5], params[5:], "tanh")
        (out * torch.linspace(-1, 2, out.numel()).view_as(out)).sum().backward()
        grads.append([p.grad for p in params])
    assert calls
    for a, e, p in zip(*grads, [emb, *ws, *bs]):
        assert a.stride() == p.stride()
        _close(a, e, rtol=1e-4, atol=1e-5)


def test_char_cnn_composed_relu_passes_no_nan_for_an_inf_gradient_at_a_zero_output():
    """ReLU's backward masked by a product: an inf gradient (fp16 loss scaling) at a channel whose output
    is 0 gave inf * 0 = NaN in the table and filter gradients; the kernel's branch and torch's
    threshold_backward give 0 there. The table gradient is a tensor of its own, as the op returns (it was a
    view one row into the padded table)."""
    from spacy_elmo.bilm.config import BiLMConfig

    gen = torch.Generator().manual_seed(5)
    filters = BiLMConfig.preset("small").filters
    ids = torch.randint(1, 262, (6, 50), generator=gen)
    emb = torch.randn(261, 16, generator=gen) * 0.1
    ws = [torch.randn(c, 16, w, generator=gen) * 0.1 for w, c in filters]
    bs = [torch.randn(c, generator=gen) * 0.1 - 0.3 for _, c in filters]
    out, arg = torch.ops.spacy_elmo.char_cnn_forward(ids, emb, ws, bs, 0)
    dead = out == 0
    assert dead.any() and (~dead).any()
    grad = torch.where(dead, torch.tensor(float("inf")), torch.rand(out.shape, generator=gen))
    d_emb, d_ws, d_bs = fused.char_cnn_backward_composed(grad, out, arg, ids, emb, ws, 0)
    for t in [d_emb, *d_ws, *d_bs]:
        assert torch.isfinite(t).all()
    finite = torch.where(dead, torch.zeros(()), grad)
    expected = fused.char_cnn_backward_composed(finite, out, arg, ids, emb, ws, 0)
    for a, e in zip([d_emb, *d_ws, *d_bs], [expected[0], *expected[1], *expected[2]]):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    assert d_emb.storage_offset() == 0 and d_emb.untyped_storage().nbytes() == d_emb.numel() * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_char_cnn_cpu_relu_backward_selects_for_an_inf_gradient_at_a_zero_output(dtype):
    """The CPU op masked ReLU's gradient by a product, grad * (out > 0): an inf gradient (fp16 loss
    scaling) at a channel whose output is 0 gave inf * 0 = NaN in every gradient. Now a select, as
    the composed CUDA backward and the oracle: the op and the autograd path give the oracle's
    (finite) gradients, and the same as a gradient that is 0 there."""
    ids, emb, ws, bs, gen = _composed_case("small", dtype, seed=5)
    bs = [b - 0.3 for b in bs]  # plenty of dead channels
    out, arg = torch.ops.spacy_elmo.char_cnn_forward(ids, emb, ws, bs, 0)
    dead = out == 0
    assert dead.any() and (~dead).any()
    grad = torch.where(dead, torch.tensor(float("inf"), dtype=dtype), torch.rand(out.shape, generator=gen, dtype=dtype))
    d_emb, d_ws, d_bs = torch.ops.spacy_elmo.char_cnn_backward(grad, out, arg, ids, emb, ws, 0)
    o_emb, o_ws, o_bs = O.char_cnn_backward(ids.numpy(), emb.numpy(), [w.numpy() for w in ws], grad.numpy(),
                                            out.numpy(), arg.numpy(), "relu")
    tol = TOL32 if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    for a, e in zip([d_emb, *d_ws, *d_bs], [o_emb, *o_ws, *o_bs]):
        assert np.isfinite(e).all()
        _close(a, e, **tol)
    params = [p.clone().requires_grad_() for p in [emb, *ws, *bs]]
    fused.char_cnn(ids, params[0], params[1 : 1 + len(ws)], params[1 + len(ws) :]).backward(grad)
    for p, e in zip(params, [o_emb, *o_ws, *o_bs]):
        _close(p.grad, e, **tol)


def _lstm_padded_inf_grads(impl, residual, inf):
    """Gradients of an LSTM layer (x and weights) for an output gradient that is inf at the padded
    positions (``inf``) or 0 there, random elsewhere."""
    gen = torch.Generator().manual_seed(12)
    B, T, I, C, P = 3, 5, 4, 6, 4
    lengths = torch.tensor([5, 2, 0])
    base = [torch.randn(B, T, I, generator=gen), *lstm_params(gen, I, C, P, scale=0.8)]
    padded = (torch.arange(T).unsqueeze(0) >= lengths.unsqueeze(1)).unsqueeze(-1).expand(B, T, P)
    grad = torch.where(padded, torch.tensor(float("inf") if inf else 0.0), torch.randn(B, T, P, generator=gen))
    ts = [t.clone().requires_grad_() for t in base]
    out, _, _ = impl.lstm_layer(ts[0], lengths, *ts[1:], None, None, 0.5, 0.5, True, residual)
    assert not out[padded].any()  # the padded outputs are 0 whatever the input: their derivative is 0
    out.backward(grad)
    return [t.grad for t in ts]


@pytest.mark.parametrize("impl", ["fused", "reference"])
@pytest.mark.parametrize("residual", [False, True])
def test_lstm_backward_passes_no_nan_for_an_inf_gradient_at_padded_positions(impl, residual):
    """The padded outputs are 0 whatever the input, but the backward masked their gradient by a product
    with the 0/1 valid mask (the fused ops' residual term, the reference's steps and residual): an inf
    gradient there (fp16 loss scaling) gave inf * 0 = NaN in the input and weight gradients. Now
    selects: the gradients are those of a gradient that is 0 there."""
    impl = fused if impl == "fused" else R
    got = _lstm_padded_inf_grads(impl, residual, inf=True)
    expected = _lstm_padded_inf_grads(impl, residual, inf=False)
    for a, e in zip(got, expected):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, e, rtol=0, atol=0)


# ------------------------------------------------------------------ highway


@pytest.mark.parametrize("n,f", [(1, 1), (7, 13), (33, 64)])
def test_highway_forward(n, f):
    gen = torch.Generator().manual_seed(n + f)
    x = torch.randn(n, f, generator=gen)
    w = torch.randn(2 * f, f, generator=gen) / f**0.5
    b = torch.randn(2 * f, generator=gen)
    y = fused.highway(x, w, b)
    _close(y, O.highway(x.numpy(), w.numpy(), b.numpy()))
    _close(y, R.highway(x, w, b))


def test_highway_leading_dims_and_gradients():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fused.highway, (x, w, b))
    _close(fused.highway(x, w, b), R.highway(x, w, b), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------- LSTM


def lstm_params(gen, i, c, p, dtype=torch.float32, scale=0.5):
    def rnd(*s):
        return ((torch.rand(*s, generator=gen, dtype=torch.float64) * 2 - 1) * scale).to(dtype)

    return rnd(i, 4 * c), rnd(p, 4 * c), rnd(4 * c), rnd(c, p)


LSTM_CASES = [
    # B, T, I, C, P, lengths, reverse, residual, state, cell_clip, proj_clip
    (1, 1, 4, 3, 4, [1], False, False, False, None, None),
    (1, 5, 4, 6, 4, [5], True, True, True, 3.0, 3.0),
    (4, 6, 5, 7, 3, [6, 0, 3, 1], False, False, True, 0.4, 0.25),
    (4, 6, 5, 7, 3, [6, 0, 3, 1], True, False, True, 0.4, 0.25),
    (3, 7, 6, 5, 6, [2, 7, 5], True, True, False, 0.3, None),
    (5, 4, 3, 300, 3, [4, 4, 1, 0, 3], False, False, False, None, 0.2),  # more than one channel chunk
    (2, 3, 4, 5, 4, [0, 0], True, True, True, 1.0, 1.0),  # all rows empty
]


@pytest.mark.parametrize("case", LSTM_CASES)
def test_lstm_layer_forward_vs_oracle(case):
    B, T, I, C, P, lens, reverse, residual, state, cc, pc = case
    gen = torch.Generator().manual_seed(B * 100 + T * 10 + C)
    x = torch.randn(B, T, I, generator=gen)
    lengths = torch.tensor(lens)
    w = lstm_params(gen, I, C, P, scale=0.8)
    h0 = torch.randn(B, P, generator=gen) if state else None
    c0 = torch.randn(B, C, generator=gen) * 2 if state else None
    out, h_n, c_n = fused.lstm_layer(x, lengths, *w, h0, c0, cc, pc, reverse, residual)
    np_args = [t.numpy() for t in w]
    eo, eh, ec = O.lstm_layer(x.numpy(), lens, *np_args, None if h0 is None else h0.numpy(),
                              None if c0 is None else c0.numpy(), cc, pc, reverse, residual)
    _close(out, eo)
    _close(h_n, eh)
    _close(c_n, ec)
    ro, rh, rc = R.lstm_layer(x, lengths, *w, h0, c0, cc, pc, reverse, residual)
    _close(out, ro)
    _close(h_n, rh)
    _close(c_n, rc)


def test_clipping_binds():
    """The clip cases above must really clip (else they test nothing): on each case's own inputs (those of
    test_lstm_layer_forward_vs_oracle), the oracle without its clips gives other outputs; so does it without
    each clip below ELMo's 3.0 (put there to bind) alone."""
    binding = 0
    for B, T, I, C, P, lens, reverse, residual, state, cc, pc in LSTM_CASES:
        if (cc is None and pc is None) or max(lens) == 0:
            continue  # nothing to clip
        gen = torch.Generator().manual_seed(B * 100 + T * 10 + C)
        x = torch.randn(B, T, I, generator=gen)
        w = lstm_params(gen, I, C, P, scale=0.8)
        h0 = torch.randn(B, P, generator=gen).numpy() if state else None
        c0 = (torch.randn(B, C, generator=gen) * 2).numpy() if state else None
        args = (x.numpy(), lens, *[t.numpy() for t in w], h0, c0)
        clipped = O.lstm_layer(*args, cc, pc, reverse, residual)

        def change(cell_clip, proj_clip):
            free = O.lstm_layer(*args, cell_clip, proj_clip, reverse, residual)
            return max(float(np.abs(a - b).max()) for a, b in zip(clipped, free))

        assert change(None, None) > 0.1, (B, T, C, cc, pc)
        for name, clip, removed in (("cell", cc, change(None, pc)), ("proj", pc, change(cc, None))):
            if clip is not None and clip < 3.0:
                assert removed > 0.1, (B, T, C, name, clip)
                binding += 1
    assert binding == 6  # two cases' cell and proj clips, one case's cell clip, one's proj clip


@pytest.mark.parametrize("case", LSTM_CASES)
def test_lstm_layer_gradients_float64_vs_reference(case):
    B, T, I, C, P, lens, reverse, residual, state, cc, pc = case
    gen = torch.Generator().manual_seed(B * 7 + T)
    lengths = torch.tensor(lens)
    base = [torch.randn(B, T, I, generator=gen, dtype=torch.float64),
            *lstm_params(gen, I, C, P, dtype=torch.float64, scale=0.8),
            torch.randn(B, P, generator=gen, dtype=torch.float64),
            torch.randn(B, C, generator=gen, dtype=torch.float64) * 2]
    weights_out = torch.randn(B, T, P, generator=gen, dtype=torch.float64)
    grads = []
    for impl in (fused, R):
        ts = [t.clone().requires_grad_() for t in base]
        h0, c0 = (ts[5], ts[6]) if state else (None, None)
        out, h_n, c_n = impl.lstm_layer(ts[0], lengths, *ts[1:5], h0, c0, cc, pc, reverse, residual)
        loss = (out * weights_out).sum() + (h_n * 0.7).sum() - (c_n * 1.3).sum()
        loss.backward()
        grads.append([t.grad for t in (ts if state else ts[:5])])
    for a, e in zip(*grads):
        _close(a, e, rtol=1e-10, atol=1e-10)


def test_a_call_under_inference_mode_leaves_later_backwards_working():
    """The work buffers made by a call under torch.inference_mode() were inference tensors: every
    later backward on this thread, of any model, failed ('Inplace update to inference tensor
    outside InferenceMode')."""
    gen = torch.Generator().manual_seed(9)
    B, T, I, C, P = 4, 6, 5, 7, 3
    lengths = torch.tensor([6, 2, 5, 1])
    w = lstm_params(gen, I, C, P, scale=0.8)
    fused.release_cpu_buffers()  # the next call allocates them
    with torch.inference_mode():
        fused.bilstm_layer(*(torch.randn(2, B, T, I, generator=gen)), lengths, w, w,
                           (torch.zeros(2, B, P), torch.zeros(2, B, C)), 3.0, 3.0, True, False)
    base = [torch.randn(B, T, I, generator=gen), *w, torch.randn(B, P, generator=gen), torch.randn(B, C, generator=gen)]
    grads = []
    for impl in (fused, R):
        ts = [t.clone().requires_grad_() for t in base]
        out, h_n, c_n = impl.lstm_layer(ts[0], lengths[:B], *ts[1:5], ts[5], ts[6], 3.0, 3.0, True, False)
        ((out * 0.3).sum() + h_n.sum() - c_n.sum()).backward()
        grads.append([t.grad for t in ts])
    for a, e in zip(*grads):
        _close(a, e)


@pytest.mark.parametrize("reverse,residual", [(False, False), (True, True)])
def test_lstm_layer_gradcheck(reverse, residual):
    gen = torch.Generator().manual_seed(4)
    B, T, I, C, P = 3, 4, 3, 3, 3
    lengths = torch.tensor([4, 0, 2])
    ts = [torch.randn(B, T, I, generator=gen, dtype=torch.float64),
          *lstm_params(gen, I, C, P, dtype=torch.float64, scale=0.9),
          torch.randn(B, P, generator=gen, dtype=torch.float64),
          torch.randn(B, C, generator=gen, dtype=torch.float64)]
    ts = [t.requires_grad_() for t in ts]

    def fn(x, wi, wr, b, wp, h0, c0):
        return fused.lstm_layer(x, lengths, wi, wr, b, wp, h0, c0, 0.7, 0.5, reverse, residual)

    assert torch.autograd.gradcheck(fn, tuple(ts))


@pytest.mark.parametrize("reverse_backward", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_bilstm_layer_vs_reference(reverse_backward, with_state):
    gen = torch.Generator().manual_seed(9)
    B, T, P, C = 3, 5, 4, 6
    lengths = torch.tensor([5, 2, 0])
    xf = torch.randn(B, T, P, generator=gen, dtype=torch.float64)
    xb = torch.randn(B, T, P, generator=gen, dtype=torch.float64)
    fw = list(lstm_params(gen, P, C, P, dtype=torch.float64))
    bw = list(lstm_params(gen, P, C, P, dtype=torch.float64))
    state = (torch.randn(2, B, P, generator=gen, dtype=torch.float64),
             torch.randn(2, B, C, generator=gen, dtype=torch.float64)) if with_state else None
    results, grads = [], []
    for impl in (fused, R):
        ts = [t.clone().requires_grad_() for t in [xf, xb, *fw, *bw]]
        st = None if state is None else tuple(s.clone().requires_grad_() for s in state)
        res = impl.bilstm_layer(ts[0], ts[1], lengths, ts[2:6], ts[6:], st, 3.0, 0.5, reverse_backward, True)
        sum((r * (k + 1)).sum() for k, r in enumerate(res)).backward()
        results.append(res)
        grads.append([t.grad for t in ts] + ([] if st is None else [s.grad for s in st]))
    for a, e in zip(*results):
        _close(a, e, rtol=1e-12, atol=1e-12)
    for a, e in zip(*grads):
        _close(a, e, rtol=1e-10, atol=1e-10)


def test_bilstm_float32_vs_oracle_both_directions():
    gen = torch.Generator().manual_seed(21)
    B, T, P, C = 4, 6, 8, 16
    lengths = torch.tensor([6, 1, 4, 0])
    x = torch.randn(B, T, P, generator=gen)
    fw, bw = lstm_params(gen, P, C, P), lstm_params(gen, P, C, P)
    _bilstm_float32_vs_oracle(x, x, lengths, fw, bw)


def _bilstm_float32_vs_oracle(xf, xb, lengths, fw, bw):
    """The fused float32 biLSTM layer (clips 3.0, backward direction reversed, residual)
    against the NumPy oracle run on each direction alone: outputs, final h and c."""
    of, ob, h, c = fused.bilstm_layer(xf, xb, lengths, fw, bw, None, 3.0, 3.0, True, True)
    for k, (x, w, o, rev) in enumerate([(xf, fw, of, False), (xb, bw, ob, True)]):
        eo, eh, ec = O.lstm_layer(x.numpy(), lengths.tolist(), *[t.numpy() for t in w], None, None, 3.0, 3.0, rev, True)
        _close(o, eo)
        _close(h[k], eh)
        _close(c[k], ec)


# ----------------------------------------------------------- sampled softmax


def _softmax_inputs(gen, n, s, p, dtype=torch.float32, hits=True):
    h = torch.randn(n, p, generator=gen, dtype=torch.float64)
    w = torch.randn(s, p, generator=gen, dtype=torch.float64) / p**0.5
    off = torch.randn(s, generator=gen, dtype=torch.float64) * 2
    hit = torch.randint(-1, s, (n,), generator=gen) if hits else torch.full((n,), -1)
    return h.to(dtype), w.to(dtype), off.to(dtype), hit


# S = 1, 17, 70, 200: every tail of the 4-vector and 1-vector loops under each ISA;
# N = 300 crosses the 128-row blocks of the forward.
@pytest.mark.parametrize("n,s,p", [(1, 1, 3), (6, 17, 5), (9, 70, 8), (300, 200, 16)])
def test_sampled_logsumexp_vs_float64_oracle(n, s, p):
    gen = torch.Generator().manual_seed(n * 7 + s)
    h, w, off, hit = _softmax_inputs(gen, n, s, p)
    if s > 1:
        hit[0] = -1  # at least one row without a hit
    hs, ws, offs = (t.clone().requires_grad_() for t in (h, w, off))
    lse = fused.sampled_logsumexp(hs, ws, offs, hit)
    want, soft = O.sampled_logsumexp(h.numpy(), w.numpy(), off.numpy(), hit.numpy())
    finite = np.isfinite(want)
    _close(lse[finite], want[finite])
    # a row whose only candidate is removed: the lowest float, as the reference
    assert bool((lse[~torch.from_numpy(finite)] == torch.finfo(torch.float32).min).all())
    g = torch.randn(n, generator=gen)
    g[~torch.from_numpy(finite)] = 0  # (the caller's logaddexp gives such rows no gradient)
    lse.backward(g)
    dlogits = soft * g.double().numpy()[:, None]
    _close(hs.grad, dlogits @ w.double().numpy())
    _close(ws.grad, dlogits.T @ h.double().numpy())
    _close(offs.grad, dlogits.sum(0))


def test_sampled_logsumexp_matches_reference_and_gradcheck():
    gen = torch.Generator().manual_seed(11)
    h, w, off, hit = _softmax_inputs(gen, 40, 33, 7, dtype=torch.float64)
    ts = [t.clone().requires_grad_() for t in (h, w, off)]
    assert torch.autograd.gradcheck(lambda a, b, c: fused.sampled_logsumexp(a, b, c, hit), tuple(ts))
    # float32 against the reference (the trainer's other backend), values and gradients
    h, w, off = (t.float() for t in (h, w, off))
    grads = []
    for impl in (fused, R):
        ts = [t.clone().requires_grad_() for t in (h, w, off)]
        lse = impl.sampled_logsumexp(*ts, hit)
        lse.backward(torch.linspace(-1, 1, 40))
        grads.append([lse.detach()] + [t.grad for t in ts])
    for a, b in zip(*grads):
        _close(a, b)


def test_sampled_logsumexp_rejects_bad_input():
    ops = torch.ops.spacy_elmo
    h, w, off = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    with pytest.raises(RuntimeError, match=r"hit\[1\] = 5 is outside \[-1, 5\)"):
        ops.sampled_logsumexp_forward(h, w, off, torch.tensor([0, 5, -1]))
    with pytest.raises(RuntimeError, match="share one dtype"):
        ops.sampled_logsumexp_forward(h, w.double(), off, torch.tensor([0, 1, -1]))
    with pytest.raises(RuntimeError, match=r"offset must be \(S,\)"):
        ops.sampled_logsumexp_forward(h, w, off[:4], torch.tensor([0, 1, -1]))


# ------------------------------------------------------- custom-op machinery


def test_opcheck_all_ops():
    gen = torch.Generator().manual_seed(0)
    ops = torch.ops.spacy_elmo
    ids = random_char_ids(gen, 3, 8, zero_rows=[1])
    emb, ws, bs = char_params(gen, [(1, 2), (3, 4)], 3)
    emb.requires_grad_()
    for t in ws + bs:
        t.requires_grad_()
    torch.library.opcheck(ops.char_cnn_forward.default, (ids, emb, ws, bs, 0))
    x = torch.randn(4, 5, generator=gen, requires_grad=True)
    w = torch.randn(10, 5, generator=gen, requires_grad=True)
    b = torch.randn(10, generator=gen, requires_grad=True)
    torch.library.opcheck(ops.highway_forward.default, (x, w, b))
    B, T, P, C = 2, 3, 4, 5
    xs = [torch.randn(B, T, P, generator=gen, requires_grad=True) for _ in range(2)]
    weights = [t.requires_grad_() for t in [*lstm_params(gen, P, C, P), *lstm_params(gen, P, C, P)]]
    h0 = torch.randn(2, B, P, generator=gen, requires_grad=True)
    c0 = torch.randn(2, B, C, generator=gen, requires_grad=True)
    lengths = torch.tensor([3, 1])
    # Without opcheck's test_aot_dispatch_*: they compare every output of two runs, and with save=True
    # and a row shorter than T the saved gates and c_raw (hp_raw too, on some paths) hold uninitialised
    # memory past the row's length (csrc/cpu/lstm.cpp: no step writes there, the backward never reads
    # there), so two runs differ exactly where no result comes from. With every row of length T, or
    # nothing saved, they pass.
    torch.library.opcheck(ops.lstm_forward.default, (xs, lengths, weights, h0, c0, 3.0, 0.5, [0, 1], True, True),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    torch.library.opcheck(ops.lstm_forward.default, (xs, torch.tensor([T, T]), weights, h0, c0, 3.0, 0.5, [0, 1], True,
                                                     True))
    no_grad = [t.detach() for t in xs], lengths, [w.detach() for w in weights], h0.detach(), c0.detach()
    torch.library.opcheck(ops.lstm_forward.default, (*no_grad, None, None, [0, 1], False, False))
    # the backward with an initial state and clips, and from zeros without: its weight
    # gradients are rows of one product, each returned in a storage of its own
    for state, clips, residual in [((h0, c0), (3.0, 0.5), True), (None, (None, None), False)]:
        h, c = (torch.zeros(2, B, P), torch.zeros(2, B, C)) if state is None else (s.detach() for s in state)
        ins = [t.detach() for t in xs], lengths, [w.detach() for w in weights], h, c, *clips, [0, 1], residual
        outs, h_n, c_n, *saved = ops.lstm_forward(*ins, True)
        grads = [torch.randn(o.shape, generator=gen) for o in outs]
        g_h = torch.zeros_like(h_n) if state is None else torch.randn(h_n.shape, generator=gen)
        g_c = torch.zeros_like(c_n) if state is None else torch.randn(c_n.shape, generator=gen)
        torch.library.opcheck(ops.lstm_backward.default,
                              (grads, g_h, g_c, ins[0], lengths, ins[2], c, *saved, *clips, [0, 1], residual))
    h = torch.randn(5, 3, generator=gen, requires_grad=True)
    w = torch.randn(7, 3, generator=gen, requires_grad=True)
    off = torch.randn(7, generator=gen, requires_grad=True)
    torch.library.opcheck(ops.sampled_logsumexp_forward.default, (h, w, off, torch.tensor([2, -1, 6, 0, -1])))


def test_torch_compile_fullgraph():
    gen = torch.Generator().manual_seed(0)
    ids = random_char_ids(gen, 4, 10)
    emb, ws, bs = char_params(gen, [(1, 3), (2, 5)], 4)
    hw_w = torch.randn(16, 8, generator=gen) * 0.3
    hw_b = torch.zeros(16)
    lengths = torch.tensor([2, 2])
    lw = lstm_params(gen, 8, 6, 8)

    def model(ids, emb):
        tok = fused.highway(fused.char_cnn(ids, emb, ws, bs), hw_w, hw_b).view(2, 2, 8)
        of, ob, h, c = fused.bilstm_layer(tok, tok, lengths, lw, lw, None, 3.0, 3.0, True, True)
        return of + ob

    expected = model(ids, emb)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    _close(compiled(ids, emb), expected, rtol=1e-6, atol=1e-6)
    e = emb.clone().requires_grad_()
    compiled(ids, e).sum().backward()
    e2 = emb.clone().requires_grad_()
    model(ids, e2).sum().backward()
    _close(e.grad, e2.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("state", [False, True])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_cpu_autocast_results_have_the_reference_dtypes(x_dtype, state, residual):
    """Under CPU autocast each fused result has the reference's dtype: the autocast dtype of its
    products promoted with what it adds to them (x for highway and a residual, the initial state,
    the bias). The kernels compute in float32 there, so a float32 h_n / c_n is that computation's,
    unrounded: it came back in bfloat16 (a stateful model carries it to its next call), as did
    highway's output for a float32 x."""
    gen = torch.Generator().manual_seed(21)
    B, T, P, C = 3, 4, 8, 16
    x = torch.randn(B, T, P, generator=gen).to(x_dtype)
    w = [t.to(x_dtype) for t in lstm_params(gen, P, C, P)]
    lengths = torch.tensor([4, 2, 0])
    st = (torch.randn(2, B, P, generator=gen), torch.randn(2, B, C, generator=gen)) if state else None

    def bilstm(impl, x, w):
        return impl.bilstm_layer(x, x, lengths, w, w, st, 3.0, 3.0, True, residual)

    hx, hw, hb = torch.randn(5, P, generator=gen).to(x_dtype), torch.randn(2 * P, P, generator=gen), torch.randn(2 * P)
    ids, emb, ws, bs = random_char_ids(gen, 4, 10), *char_params(gen, [(1, 3), (2, 4)], 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, expected = bilstm(fused, x, w), bilstm(R, x, w)
        assert fused.highway(hx, hw, hb).dtype == R.highway(hx, hw, hb).dtype
        assert fused.char_cnn(ids, emb, ws, bs).dtype == R.char_cnn(ids, emb, ws, bs).dtype == torch.bfloat16
    assert [t.dtype for t in got] == [t.dtype for t in expected]
    for a, e in zip(got, expected):
        _close(a, e, rtol=3e-2, atol=3e-2)
    plain = bilstm(fused, x.float(), [t.float() for t in w])  # the same float32 computation
    for a, p in zip(got, plain):
        assert torch.equal(a, p.to(a.dtype))


def test_no_grad_skips_saved_tensors_and_matches():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 3, generator=gen)
    w = lstm_params(gen, 3, 4, 3)
    lengths = torch.tensor([4, 2])
    with torch.no_grad():
        a = fused.lstm_layer(x, lengths, *w, cell_clip=0.5, proj_clip=0.5)
    wg = [t.clone().requires_grad_() for t in w]
    b = fused.lstm_layer(x, lengths, *wg, cell_clip=0.5, proj_clip=0.5)
    for p, q in zip(a, b):
        assert torch.equal(p, q.detach())


def _run_with_isa(isa, *args):
    """``python *args`` in a subprocess capped at kernel table ``isa`` (chosen once per process)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPACY_ELMO_CPU_ISA=isa)
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)


def test_isa_variants_agree(monkeypatch):
    """The baseline / AVX2 / AVX-512 kernel tables give the same results (run in subprocesses)."""
    code = (
        "import torch; from spacy_elmo.ops import fused, reference as R; torch.manual_seed(0);"
        "ids=torch.randint(0,262,(9,50)); emb=torch.randn(261,16);"
        "ws=[torch.randn(c,16,w)*0.1 for w,c in [(1,5),(3,40),(7,70)]]; bs=[torch.randn(w.shape[0]) for w in ws];"
        "x=torch.randn(3,5,8); L=torch.tensor([5,2,0]); lw=[torch.randn(8,400)*.3,torch.randn(8,400)*.3,torch.randn(400)*.1,torch.randn(100,8)*.3];"
        "a=fused.char_cnn(ids,emb,ws,bs); b=R.char_cnn(ids,emb,ws,bs);"
        "xg=x.clone().requires_grad_(); o=fused.lstm_layer(xg,L,*lw,cell_clip=.5,proj_clip=.5,reverse=True)[0]; o.sum().backward();"
        "xr=x.clone().requires_grad_(); r=R.lstm_layer(xr,L,*lw,cell_clip=.5,proj_clip=.5,reverse=True)[0]; r.sum().backward();"
        "o=torch.cat([o.flatten(),xg.grad.flatten()]); r=torch.cat([r.flatten(),xr.grad.flatten()]);"
        "h=torch.randn(20,16); sw=torch.randn(70,16)/4; so=torch.randn(70); hit=torch.randint(-1,70,(20,));"
        "o=torch.cat([o,fused.sampled_logsumexp(h,sw,so,hit)]); r=torch.cat([r,R.sampled_logsumexp(h,sw,so,hit)]);"
        "print(fused.cpu_isa(), float((a-b).abs().max()), float((o-r).abs().max()))"
    )
    # what csrc/cpu/dispatch.cpp requires of each table: where /proc/cpuinfo lists it, that table must be the one run
    needs = {"base": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq"}}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(f.read().split())
    except OSError:  # not Linux: which table ran is not checked beyond base
        flags = set()
    ran = []
    for isa in ("base", "avx2", "avx512"):
        res = _run_with_isa(isa, "-c", code)
        assert res.returncode == 0, res.stderr[-2000:]
        name, e1, e2 = res.stdout.split()
        assert float(e1) < 1e-5 and float(e2) < 1e-5, (isa, res.stdout)
        if needs[isa] <= flags:
            assert name == isa, (isa, res.stdout)
            ran.append(isa)
    assert ran[0] == "base"


def _bilstm_grads_vs_float64(B, T, C, P, lengths, seed, dtype=torch.float32):
    """The fused biLSTM layer in ``dtype`` (initial states, both clips, the backward
    direction reversed, residual) against the reference's float64 autograd: outputs,
    final states and every gradient, float32 at float32 rounding, float64 at 1e-10."""
    gen = torch.Generator().manual_seed(seed)
    base = [torch.randn(B, T, P, generator=gen, dtype=torch.float64),
            torch.randn(B, T, P, generator=gen, dtype=torch.float64),
            *lstm_params(gen, P, C, P, dtype=torch.float64, scale=0.4),
            *lstm_params(gen, P, C, P, dtype=torch.float64, scale=0.4),
            torch.randn(2, B, P, generator=gen, dtype=torch.float64) * 0.5,
            torch.randn(2, B, C, generator=gen, dtype=torch.float64)]
    wout = [torch.randn(B, T, P, generator=gen, dtype=torch.float64) for _ in range(2)]
    outs, grads = [], []
    for impl, dt in ((fused, dtype), (R, torch.float64)):
        ts = [t.to(dt).requires_grad_() for t in base]
        of, ob, h, c = impl.bilstm_layer(ts[0], ts[1], lengths, ts[2:6], ts[6:10], (ts[10], ts[11]), 0.8, 0.5,
                                         True, True)
        loss = (of * wout[0].to(dt)).sum() + (ob * wout[1].to(dt)).sum() + h.sum() * 0.3 + c.sum() * 0.2
        loss.backward()
        outs.append([of, ob, h, c])
        grads.append([t.grad for t in ts])
    if dtype == torch.float64:
        for a, e in zip(outs[0] + grads[0], outs[1] + grads[1]):
            _close(a, e, rtol=1e-10, atol=1e-10)
        return
    for a, e in zip(*outs):
        _close(a, e, rtol=1e-4, atol=1e-5)
    for a, e in zip(*grads):
        scale = max(1.0, float(e.abs().max()))
        _close(a, e, rtol=1e-4, atol=2e-5 * scale)


# 10 rows x 127 steps: two chunks of steps (at most 1,024 rows a chunk), of 64 and
# 63 steps; ragged lengths ending before, at and after the chunk border, one row empty.
_CHUNKED_LENGTHS = [127, 44, 0, 64, 63, 65, 1, 127, 100, 5]


def test_bilstm_float32_input_products_in_several_chunks():
    """The float32 forward computes its input products a chunk of steps at a time, the
    reversed direction's rows gathered per step: outputs and states against the NumPy
    oracle, each direction with its own input; then the gradients (the backward's
    chunks of gate gradients, their weight-gradient sums and scattered input
    gradients) against float64 autograd."""
    gen = torch.Generator().manual_seed(31)
    B, T, P, C = 10, 130, 8, 16
    lengths = torch.tensor(_CHUNKED_LENGTHS)
    xf, xb = torch.randn(B, T, P, generator=gen), torch.randn(B, T, P, generator=gen)
    fw, bw = lstm_params(gen, P, C, P), lstm_params(gen, P, C, P)
    _bilstm_float32_vs_oracle(xf, xb, lengths, fw, bw)
    _bilstm_grads_vs_float64(B, T, C, P, lengths, 31)


def test_bilstm_float32_large_layer_input_products_in_several_chunks():
    """Up to 16 MB of packed W_in and W_rec (both directions; the small preset's 8 MB)
    the float32 forward computes its input products inside the recurrent pass, as the
    test above does; a larger layer (here 32 MB, the original preset's 128 MB) computes
    them a chunk of steps at a time into a work buffer the step reads back: that path,
    over two chunks with the ragged lengths above, against the NumPy oracle."""
    gen = torch.Generator().manual_seed(33)
    B, T, P, C = 10, 130, 256, 2048
    assert 2 * (P + P) * 4 * C * 4 > 16 << 20
    lengths = torch.tensor(_CHUNKED_LENGTHS)
    xf, xb = torch.randn(B, T, P, generator=gen), torch.randn(B, T, P, generator=gen)
    fw, bw = lstm_params(gen, P, C, P, scale=0.1), lstm_params(gen, P, C, P, scale=0.1)
    _bilstm_float32_vs_oracle(xf, xb, lengths, fw, bw)


def test_bilstm_float64_backward_in_several_chunks_vs_reference():
    """The float64 path (scalar gate loops, MKL step products) chunks its backward the
    same way: outputs and every gradient against the reference's autograd at rounding level."""
    _bilstm_grads_vs_float64(10, 130, 6, 4, torch.tensor(_CHUNKED_LENGTHS), 32, dtype=torch.float64)


@pytest.mark.parametrize("B,T,C,P", [(13, 6, 100, 20), (2, 3, 5, 4), (7, 4, 70, 64), (1, 1030, 6, 4)])
def test_bilstm_float32_gradients_vs_float64_reference(B, T, C, P):
    """The float32 fused backward (packed-weight step kernels) against float64 autograd;
    one sentence of 1,030 tokens is two chunks of 515 steps (the forward runs its
    one-row path there, the backward its packed steps)."""
    gen = torch.Generator().manual_seed(B + T + C + P)
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[0] = T
    _bilstm_grads_vs_float64(B, T, C, P, lengths, B + T + C + P)


def test_bilstm_float32_many_rows_and_long_panels():
    """Shapes that split the step kernels' work: more rows than one pass over a panel
    takes (48 with AVX-512, 24 with AVX2), whole row tiles and a whole pass with no
    active row at some steps, and panels longer than one K block (P, C > 128) whose
    widths are not multiples of the panel width (zero-padded packing)."""
    B, T, C, P = 53, 3, 136, 136
    lengths = torch.tensor([3, 1, 2, 0, 3, 2] * 4 + [0] * 6 + [2, 3, 1] * 6 + [1, 1, 1, 0, 0])
    assert len(lengths) == B
    _bilstm_grads_vs_float64(B, T, C, P, lengths, 53)


@pytest.mark.parametrize("isa", ["base", "avx2"])
def test_bilstm_many_rows_and_long_panels_other_isas(isa):
    """The same shapes with the other kernel tables (other tile sizes and pass lengths)."""
    test = f"{__file__}::test_bilstm_float32_many_rows_and_long_panels"
    res = _run_with_isa(isa, "-m", "pytest", "-q", "-p", "no:cacheprovider", test)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_lstm_work_buffers_follow_size_changes_and_threads():
    """The packed weights, the input products and the gate gradients live in per-thread
    buffers that are reused across calls: a call after one of another size (larger or
    smaller) and calls running at once on two threads must each see their own data."""
    import threading

    gen = torch.Generator().manual_seed(9)
    cases = []
    for C, P in [(300, 136), (7, 3), (300, 136), (40, 20)]:
        x = torch.randn(3, 4, P, generator=gen)
        lengths = torch.tensor([4, 1, 3])
        w = lstm_params(gen, P, C, P)
        with torch.no_grad():
            want = R.lstm_layer(x, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0]
        cases.append((x, lengths, w, want))
    for x, lengths, w, want in cases:  # sequential: sizes grow, shrink, grow
        xg = x.clone().requires_grad_()
        got = fused.lstm_layer(xg, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0]
        got.sum().backward()  # the backward packs into the same buffers
        _close(got, want)
    errors = []

    def worker(case):
        x, lengths, w, want = case
        try:
            for _ in range(20):
                with torch.no_grad():
                    _close(fused.lstm_layer(x, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0], want)
        except AssertionError as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(case,)) for case in (cases[0], cases[3])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("update", ["in_place", "fused_adagrad", "data_copy", "new_tensors"])
def test_lstm_reads_the_current_weights_after_every_kind_of_update(update):
    """The fused LSTM must use the weights as they are now, however they were changed:
    PyTorch's fused optimizers and ``p.data.copy_`` change a tensor without bumping its
    version counter, so no cache keyed on (tensor, version) may stand between calls
    (one did: pretraining with fused Adagrad ran its forward on stale packed weights)."""
    gen = torch.Generator().manual_seed(8)
    B, T, P, C = 3, 4, 8, 20
    x = torch.randn(B, T, P, generator=gen)
    lengths = torch.tensor([4, 2, 3])
    w = [torch.nn.Parameter(t.clone()) for t in lstm_params(gen, P, C, P)]
    opt = torch.optim.Adagrad(w, lr=0.5, fused=True)
    for _ in range(3):
        for grad_mode in (True, False):  # a training forward, then inference
            with torch.set_grad_enabled(grad_mode):
                got = fused.lstm_layer(x, lengths, *w, cell_clip=1.0)[0]
            with torch.no_grad():
                _close(got.detach(), R.lstm_layer(x, lengths, *[t.detach() for t in w], cell_clip=1.0)[0])
        with torch.no_grad():
            if update == "in_place":
                w[1].mul_(-1.5)
                w[3].add_(0.1)
            elif update == "fused_adagrad":
                for t in w:
                    t.grad = torch.randn(t.shape, generator=gen)
                opt.step()
            elif update == "data_copy":
                w[1].data.copy_(torch.randn(w[1].shape, generator=gen))
                w[3].data.copy_(torch.randn(w[3].shape, generator=gen) * 0.3)
            else:  # new tensors (possibly at recycled addresses)
                w = [torch.nn.Parameter(t.detach().clone() * 0.9) for t in w]
                opt = torch.optim.Adagrad(w, lr=0.5, fused=True)


# B, T, P, C whose saved gates (T * B * 4C floats) are 1 MB, the smallest recycled block;
# the layer's other saved tensors are smaller, so the gates are the only recycled tensor.
RECYCLED_SHAPE = (8, 4, 8, 2048)


def _training_forward(x, lengths, w):
    """The one-direction op as a training forward calls it (saving for the backward)."""
    B, C, P = x.shape[0], w[1].shape[1] // 4, w[1].shape[0]
    zeros = (torch.zeros(1, B, P), torch.zeros(1, B, C))
    return torch.ops.spacy_elmo.lstm_forward([x], lengths, w, *zeros, 1.0, 1.0, [0], False, True)


def test_saved_tensors_reuse_recycled_memory_and_release_frees_it():
    """A training forward's saved tensors (1 MB or more) come from blocks their
    predecessors returned: a forward whose rows are all empty writes none of its
    saved gates, so they still hold the previous forward's (fresh memory would
    not). release_cpu_buffers frees the blocks and this thread's work buffers."""
    gen = torch.Generator().manual_seed(4)
    B, T, P, C = RECYCLED_SHAPE
    x = torch.randn(B, T, P, generator=gen)
    w = list(lstm_params(gen, P, C, P))

    fused.release_cpu_buffers()
    first = _training_forward(x, torch.full((B,), T), w)
    gates = first[3].clone()
    assert gates.abs().sum() > 0
    del first
    held = fused.cpu_buffer_bytes()
    assert held >= gates.numel() * 4
    second = _training_forward(x, torch.zeros(B, dtype=torch.long), w)
    assert torch.equal(second[3], gates)
    del second
    assert fused.release_cpu_buffers() >= gates.numel() * 4
    assert fused.cpu_buffer_bytes() == 0
    # and everything still computes from fresh memory
    xg = x.clone().requires_grad_()
    lengths = torch.tensor([4, 0, 3, 1, 4, 2, 4, 4])
    out = fused.lstm_layer(xg, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0]
    out.sum().backward()
    xr = x.clone().requires_grad_()
    ref = R.lstm_layer(xr, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0]
    ref.sum().backward()
    _close(out, ref)
    _close(xg.grad, xr.grad, rtol=1e-4, atol=1e-4)  # float32 sums over 2,048 cells


def test_recycle_limit_frees_the_oldest_blocks_and_zero_turns_recycling_off():
    """Blocks freed in order 0..3 under a limit of 2.5 blocks: lowering the limit
    frees the two oldest at once, and a later forward reuses the oldest that is
    left (its rows all empty, so its saved gates still hold forward 2's). With a
    limit of 0 nothing is kept."""
    gen = torch.Generator().manual_seed(5)
    B, T, P, C = RECYCLED_SHAPE
    w = list(lstm_params(gen, P, C, P))
    xs = [torch.randn(B, T, P, generator=gen) for _ in range(4)]

    fused.release_cpu_buffers()
    previous = fused.set_cpu_recycle_limit(64 << 20)
    try:
        outs = [_training_forward(x, torch.full((B,), T), w) for x in xs]
        gates = [o[3].clone() for o in outs]
        block = gates[0].numel() * 4
        base = fused.cpu_buffer_bytes()  # this thread's work buffers; no recycled block yet
        while outs:
            outs.pop(0)  # frees 0, 1, 2, 3 in that order
        assert fused.cpu_buffer_bytes() - base == 4 * block
        assert fused.set_cpu_recycle_limit(block * 5 // 2) == 64 << 20
        assert fused.cpu_recycle_limit() == block * 5 // 2
        assert fused.cpu_buffer_bytes() - base == 2 * block
        reused = _training_forward(xs[0], torch.zeros(B, dtype=torch.long), w)[3]
        assert torch.equal(reused, gates[2]) and not torch.equal(gates[2], gates[3])
        del reused
        fused.set_cpu_recycle_limit(0)
        assert fused.cpu_buffer_bytes() == base
        _training_forward(xs[1], torch.full((B,), T), w)
        assert fused.cpu_buffer_bytes() == base
    finally:
        fused.set_cpu_recycle_limit(previous)
    assert previous == fused._C.DEFAULT_CPU_RECYCLE_LIMIT == fused.cpu_recycle_limit()


def _forward_in_child(x, lengths, w, send):
    """A forked child's training forwards (each takes a block of the pool; the first one's goes back to it
    in between); sends the output and the pool's limit."""
    torch.set_num_threads(1)  # as spacy_elmo.pipeline.runner's fork hook: OpenMP's threads do not survive fork
    _training_forward(x, lengths, w)
    out = _training_forward(x, lengths, w)
    send.send((out[0][0].numpy(), fused.cpu_recycle_limit()))


def test_a_child_forked_while_another_thread_holds_the_pool_lock_runs():
    """A process forks (nlp.pipe(n_process=N) under fork) while another of its threads holds the lock of the
    recycled blocks (a training forward taking one, a deleter giving one back): the child's own forwards,
    which take and give blocks, run and give the reference's output, with the parent's limit. The child
    inherited the lock locked, with no thread to release it, and hung for ever (killed here)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    gen = torch.Generator().manual_seed(6)
    B, T, P, C = RECYCLED_SHAPE
    x = torch.randn(B, T, P, generator=gen)
    w = list(lstm_params(gen, P, C, P))
    lengths = torch.tensor([4, 0, 3, 1, 4, 2, 4, 4])
    previous = fused.set_cpu_recycle_limit(64 << 20)
    _training_forward(x, lengths, w)  # its saved tensors freed: the pool holds a block
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    # No collection while the lock is held: one freeing a recycled tensor (in a cycle) would call its deleter,
    # which waits for the lock with the GIL held, and the thread holding the lock could never let it go.
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        fused._C._test_hold_pool_lock(True)
        child = context.Process(target=_forward_in_child, args=(x, lengths, w, send))
        child.start()
        got = receive.recv() if receive.poll(120) else None
        if got is None:
            child.kill()
        child.join()
    finally:
        fused._C._test_hold_pool_lock(False)
        if gc_was_enabled:
            gc.enable()
        fused.set_cpu_recycle_limit(previous)
    assert got is not None, "the forked child hung on the pool's lock"
    out, limit = got
    assert child.exitcode == 0 and limit == 64 << 20
    with torch.no_grad():
        _close(out, R.lstm_layer(x, lengths, *w, cell_clip=1.0, proj_clip=1.0)[0])


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1024"])
def test_bad_recycle_limit_names_the_problem(bad):
    with pytest.raises(ValueError, match="whole number of bytes >= 0"):
        fused.set_cpu_recycle_limit(bad)


def test_unknown_char_cnn_activation_is_an_error_on_both_backends():
    """The reference path computed tanh for any name other than 'relu'; the fused op refused it."""
    gen = torch.Generator().manual_seed(3)
    ids = random_char_ids(gen, 4, 10)
    emb = torch.randn(261, 4, generator=gen)
    weights, biases = [torch.randn(3, 4, 2, generator=gen)], [torch.zeros(3)]
    for op in (R.char_cnn, fused.char_cnn):
        with pytest.raises(ValueError, match="Unsupported char-CNN activation 'gelu': use 'relu' or 'tanh'"):
            op(ids, emb, weights, biases, "gelu")
