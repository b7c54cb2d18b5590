"""The reference ops (spacy_elmo.ops.reference) on their own: no extension, no spaCy."""

import numpy as np
import pytest
import torch

from spacy_elmo.ops import reference as R

from . import numpy_oracle as O


def _sampled_case():
    """h (3, 4), weight (5, 4) needing grad, offset (5,), hits: a column, none, a column."""
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    return h, w, torch.randn(5, generator=gen, dtype=torch.float64), torch.tensor([1, -1, 2])


def _logsumexp_oracle(h, w, offset, hit):
    """torch.logsumexp (autograd all the way, float64) over the logits without each row's hit column."""
    logits = h @ w.T + offset
    rows = (hit >= 0).nonzero().squeeze(1)
    hits = torch.zeros_like(logits, dtype=torch.bool)
    hits[rows, hit[rows]] = True
    return torch.logsumexp(logits.masked_fill(hits, torch.finfo(logits.dtype).min), 1)


@pytest.mark.parametrize("wrt", ["h", "weight", "backward"])
def test_sampled_logsumexp_second_derivative_is_an_error_not_a_wrong_number(wrt):
    """Differentiating the reference's sampled_logsumexp gradient (create_graph=True) went through the
    in-place product of its backward: a second-order gradient of 26.08 where autograd through
    torch.logsumexp gives 3.31, silently. Now the error naming the op and the fix, with respect to h
    or weight (autograd.grad follows only the paths to them) or through .backward(); the first-order
    gradients are torch.logsumexp's (the logits are float32)."""
    h, w, offset, hit = _sampled_case()
    grads = torch.autograd.grad(R.sampled_logsumexp(h, w, offset, hit).sum(), [h, w], create_graph=True)
    expected = torch.autograd.grad(_logsumexp_oracle(h, w, offset, hit).sum(), [h, w])
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    penalty = sum(g.pow(2).sum() for g in grads)
    with pytest.raises(RuntimeError, match="sampled_logsumexp has no second derivative"):
        if wrt == "backward":
            penalty.backward()
        else:
            torch.autograd.grad(penalty, h if wrt == "h" else w)


def test_sampled_logsumexp_backward_twice_is_a_clear_error():
    """Its backward overwrites the saved softmax with the gradient: a second backward through the same
    graph (retain_graph=True) failed with torch's message about a tensor modified in place, which names
    neither the op nor the fix. The first backward is right."""
    h, w, offset, hit = _sampled_case()
    loss = R.sampled_logsumexp(h, w, offset, hit).sum()
    (g,) = torch.autograd.grad(loss, h, retain_graph=True)
    (e,) = torch.autograd.grad(_logsumexp_oracle(h, w, offset, hit).sum(), h)
    torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="backward ran a second time .*retain_graph=True"):
        torch.autograd.grad(loss, h)


def _lstm_loss_oracle(x, lengths, w, h0, c0, clip, reverse, residual, seeds):
    """The NumPy float64 oracle's ``sum(out * seeds[0]) + sum(h_n * seeds[1]) + sum(c_n * seeds[2])``
    over the rows of non-zero length (a row of length 0 returns its initial state, NaN here)."""
    out, h_n, c_n = O.lstm_layer(x, lengths, *w, h0, c0, clip, clip, reverse, residual)
    rows = np.asarray(lengths) > 0
    return float((out * seeds[0]).sum() + (h_n * seeds[1])[rows].sum() + (c_n * seeds[2])[rows].sum())


@pytest.mark.parametrize("reverse,residual", [(False, False), (True, True)])
def test_lstm_unused_nan_does_not_reach_the_gradients(reverse, residual):
    """A NaN where the LSTM never reads (x at a padded position, the initial state of a row of
    length 0) made every weight gradient NaN: the masked steps multiplied it by 0 (0 * NaN). The fused
    kernels never read it. Now the gradients are finite and those of the NumPy float64 oracle's loss
    (central differences; the oracle reads only each row's valid positions), bit for bit those of a run
    with other finite values there, and the outputs the oracle's."""
    gen = torch.Generator().manual_seed(5)
    B, T, I, C, P = 3, 5, 3, 4, 3
    x = torch.randn(B, T, I, generator=gen, dtype=torch.float64)
    w = [t * 0.4 for t in (torch.randn(I, 4 * C, generator=gen, dtype=torch.float64),
                           torch.randn(P, 4 * C, generator=gen, dtype=torch.float64),
                           torch.randn(4 * C, generator=gen, dtype=torch.float64),
                           torch.randn(C, P, generator=gen, dtype=torch.float64))]
    h0, c0 = torch.randn(B, P, generator=gen, dtype=torch.float64), torch.randn(B, C, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 0])
    seeds = [torch.randn(B, T, P, generator=gen, dtype=torch.float64), torch.randn(B, P, generator=gen,
             dtype=torch.float64), torch.randn(B, C, generator=gen, dtype=torch.float64)]
    seeds[1][2], seeds[2][2] = 0.0, 0.0  # the length-0 row's final state is its NaN initial state

    def unused(value):
        xx, hh, cc = x.clone(), h0.clone(), c0.clone()
        xx[1, 3], xx[2, 0] = value, value  # padded positions of rows 1 and 2
        hh[2], cc[2] = value, value  # the initial state of the row of length 0
        return xx, hh, cc

    grads = []
    for value in (float("nan"), 7.0):
        xx, hh, cc = unused(value)
        ws = [t.clone().requires_grad_() for t in w]
        out, h_n, c_n = R.lstm_layer(xx, lengths, *ws, hh, cc, 3.0, 3.0, reverse, residual)
        grads.append(torch.autograd.grad([out, h_n, c_n], ws, seeds))
        if len(grads) == 1:  # NaN there
            want = O.lstm_layer(xx.numpy(), lengths.numpy(), *[t.numpy() for t in w], hh.numpy(), cc.numpy(),
                                3.0, 3.0, reverse, residual)
            np.testing.assert_allclose(out.detach().numpy(), want[0], rtol=1e-12, atol=1e-12)
    for got, other in zip(*grads):
        assert torch.isfinite(got).all()
        assert torch.equal(got, other)
    xx, hh, cc = (t.numpy() for t in unused(float("nan")))
    args = [t.numpy() for t in seeds]
    eps = 1e-6
    for k, g in enumerate(grads[0]):
        fd = np.empty(g.shape)
        for idx in np.ndindex(*g.shape):
            loss = []
            for step in (eps, -eps):
                ws = [t.numpy().copy() for t in w]
                ws[k][idx] += step
                loss.append(_lstm_loss_oracle(xx, lengths.numpy(), ws, hh, cc, 3.0, reverse, residual, args))
            fd[idx] = (loss[0] - loss[1]) / (2 * eps)
        np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("cell_clip,proj_clip", [(0.2, 5.0), (5.0, 0.2)])
def test_lstm_clips_cell_and_projection_each_by_its_own_value(cell_clip, proj_clip, reverse):
    """cell_clip bounds the cell state, proj_clip the projected output: outputs and final states equal the NumPy
    float64 oracle's with the two clips different (every other oracle case gives them equal, so a swap went
    unseen), and the clips swapped give other numbers, so both bind here."""
    rng = np.random.default_rng(0)
    B, T, I, C, P = 2, 5, 4, 6, 4
    x = rng.normal(size=(B, T, I)) * 3
    w = [rng.normal(size=(I, 4 * C)), rng.normal(size=(P, 4 * C)), rng.normal(size=4 * C), rng.normal(size=(C, P)) * 3]
    lengths = np.array([5, 3])
    want = O.lstm_layer(x, lengths, *w, None, None, cell_clip, proj_clip, reverse, False)
    got = R.lstm_layer(torch.from_numpy(x), torch.from_numpy(lengths), *map(torch.from_numpy, w),
                       cell_clip=cell_clip, proj_clip=proj_clip, reverse=reverse)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-12, atol=1e-12)
    swapped = O.lstm_layer(x, lengths, *w, None, None, proj_clip, cell_clip, reverse, False)
    assert not np.allclose(swapped[0], want[0], atol=1e-3)


@pytest.mark.parametrize("transform", ["grad", "vjp", "vmap"])
def test_sampled_logsumexp_is_refused_by_torch_func(transform):
    """What README says of torch.func on the reference sampled_logsumexp: grad, vjp and vmap (which the fused
    op runs, test_fused_inputs.test_torch_func_on_the_fused_ops) are refused with
    torch's "must override the setup_context staticmethod", its autograd Function (ConsumingLogSumExp)
    keeping ctx in forward (the setup_context form costs an argument binding on every call). Its plain
    autograd is the NumPy float64 oracle's: d sum(w_n lse_n) / d h = diag(w) softmax @ weight, / d weight =
    its transpose times h. If this starts passing torch.func, update README ("Defined behaviour for odd input")."""
    h, w, offset, hit = _sampled_case()
    h, w = h.detach(), w.detach()
    rows = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    _, soft = O.sampled_logsumexp(h.numpy(), w.numpy(), offset.numpy(), hit.numpy())
    soft = soft * rows.numpy()[:, None]
    want = (soft @ w.numpy(), soft.T @ h.numpy())

    def lse(a, b):
        return R.sampled_logsumexp(a, b, offset, hit)

    # vmap: refused on the check of the hits' range (data-dependent) before the Function's setup_context
    with pytest.raises(RuntimeError, match="setup_context|data-dependent control flow"):
        if transform == "grad":
            torch.func.grad(lambda a, b: (lse(a, b) * rows).sum(), argnums=(0, 1))(h, w)
        elif transform == "vmap":
            torch.func.vmap(lambda a, t: R.sampled_logsumexp(a[None], w, offset, t[None])[0])(h, hit)
        else:
            torch.func.vjp(lse, h, w)[1](rows)
    a, b = h.clone().requires_grad_(), w.clone().requires_grad_()
    got = torch.autograd.grad((lse(a, b) * rows).sum(), (a, b))
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-6)  # the logits are float32


def _reference_cases():
    """(name, f(x) -> Tensor, x): the reference char CNN (of its embedding table), highway and LSTM layer (of
    its input, ragged lengths, clips and reversal on), float64, tiny."""
    gen = torch.Generator().manual_seed(21)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    ids = torch.randint(0, 261, (3, 6), generator=gen)
    filters, biases = [rand(2, 4, 1), rand(3, 4, 2)], [rand(2), rand(3)]
    w, b = rand(8, 4), rand(8)
    lengths = torch.tensor([3, 1])
    w_in, w_rec, bias, w_proj = rand(4, 4 * 5), rand(3, 4 * 5), rand(4 * 5), rand(5, 3)  # TF layout, C = 5, P = 3

    def lstm(x):
        return R.lstm_layer(x, lengths, w_in, w_rec, bias, w_proj, cell_clip=3.0, proj_clip=3.0, reverse=True)[0]

    return [
        ("char_cnn", lambda table: R.char_cnn(ids, table, filters, biases), rand(261, 4)),
        ("highway", lambda x: R.highway(x, w, b), rand(2, 3, 4)),
        ("lstm_layer", lstm, rand(2, 3, 4)),
    ]


@pytest.mark.parametrize("case", range(3))
def test_reference_ops_take_torch_func_transforms(case):
    """What README promises of backend="reference" under torch.func (the fused ops refuse grad/vjp/jacrev):
    grad, vjp and jacrev give autograd's numbers, and vmap over a leading batch runs each item's op."""
    _, f, x = _reference_cases()[case]
    scale = torch.linspace(-1.0, 1.0, f(x).numel(), dtype=torch.float64).reshape(f(x).shape)
    x_ = x.clone().requires_grad_(True)
    expected = torch.autograd.grad((f(x_) * scale).sum(), x_)[0]
    torch.testing.assert_close(torch.func.grad(lambda a: (f(a) * scale).sum())(x), expected, rtol=1e-12, atol=1e-12)
    out, pull = torch.func.vjp(f, x)
    torch.testing.assert_close(out, f(x), rtol=0, atol=0)
    torch.testing.assert_close(pull(scale)[0], expected, rtol=1e-12, atol=1e-12)
    jac = torch.func.jacrev(f)(x)
    torch.testing.assert_close((jac * scale.reshape(*scale.shape, *([1] * x.dim()))).sum(tuple(range(scale.dim()))),
                               expected, rtol=1e-12, atol=1e-12)
    batch = torch.stack([x, 2 * x])
    got = torch.func.vmap(f)(batch)
    torch.testing.assert_close(got, torch.stack([f(x), f(2 * x)]), rtol=1e-12, atol=1e-12)
