"""The reference ops (spacy_elmo.ops.reference) on their own: no extension, no spaCy."""

import pytest
import torch

from spacy_elmo.ops import reference as R


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
