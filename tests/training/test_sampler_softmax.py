"""Log-uniform sampler and the sampled / full softmax."""

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.torch_ops import TorchOps
from spacy_elmo.training.sampler import LogUniformSampler, Sample
from spacy_elmo.training.softmax import SoftmaxLayer


def test_sampler_unique_and_log_uniform():
    sampler = LogUniformSampler(1000, 50)
    gen = torch.Generator().manual_seed(0)
    s = sampler.sample(gen)
    assert s.candidates.numel() == 50 and s.candidates.unique().numel() == 50
    assert s.num_tries >= 50 and int(s.candidates.min()) >= 0 and int(s.candidates.max()) < 1000
    # The raw draws follow P(k) = log((k+2)/(k+1)) / log(V+1).
    draws = sampler._draw(200_000, gen)
    freq = torch.from_numpy(np.bincount(draws, minlength=1000) / draws.size)
    p = sampler.probability(torch.arange(1000))
    assert torch.allclose(freq[:5], p[:5], rtol=0.03)
    assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-9)


def _oracle_sample(sampler, seed):
    """TF's unique sampling, one draw at a time in plain Python over the same chunked draws
    (``max(2 * S, 64)``, then as many again as drawn so far): the first S distinct ids and
    the draws it took to see them."""
    gen = torch.Generator().manual_seed(seed)
    draws, size = [], max(2 * sampler.num_sampled, 64)
    while True:
        draws += sampler._draw(size, gen).tolist()
        seen = {}
        for i, d in enumerate(draws):
            seen.setdefault(d, i)
            if len(seen) == sampler.num_sampled:
                return list(seen), i + 1
        size = max(len(draws), 64)


@pytest.mark.parametrize("vocab_size,num_sampled", [(50_000, 8192), (1000, 50), (300, 300), (200, 150), (5, 3), (70, 64)])
def test_sampler_takes_the_first_distinct_draws_in_order(vocab_size, num_sampled):
    sampler = LogUniformSampler(vocab_size, num_sampled)
    for seed in range(3):
        s = sampler.sample(torch.Generator().manual_seed(seed))
        candidates, tries = _oracle_sample(sampler, seed)
        assert s.candidates.tolist() == candidates and s.num_tries == tries
        assert s.candidates.dtype == torch.long


def test_sampled_softmax_with_every_candidate_is_the_full_softmax():
    torch.manual_seed(0)
    V, P, N = 12, 5, 7
    softmax = SoftmaxLayer(V, P)
    h, targets = torch.randn(N, P), torch.randint(V, (N,))
    sampler = LogUniformSampler(V, V)
    # Every id sampled, with a huge number of tries: expected counts are 1, log q = 0,
    # and removing the accidental hit (the target among the candidates) leaves exactly
    # the full softmax over the vocabulary.
    sample = Sample(torch.randperm(V), 10**9)
    sampled = softmax.sampled_nll(h, targets, sample, sampler)
    assert torch.allclose(sampled, softmax.full_nll(h, targets), atol=1e-5)


@pytest.mark.parametrize("n", [10, 12, 4, 3, 0])
def test_full_nll_in_chunks_against_a_float64_oracle(n):
    """Rows in several chunks (a last one short or full), one chunk, none: each row scored against its
    own target; float64 log-softmax in NumPy as the oracle."""
    torch.manual_seed(2)
    softmax = SoftmaxLayer(13, 5)
    h, targets = torch.randn(n, 5), torch.randint(13, (n,))
    with torch.no_grad():
        got = softmax.full_nll(h, targets, chunk=4)
    logits = h.double().numpy() @ softmax.weight.detach().double().numpy().T + softmax.bias.detach().double().numpy()
    top = logits.max(1, keepdims=True) if n else 0.0
    log_z = (top + np.log(np.exp(logits - top).sum(1, keepdims=True)))[:, 0]
    want = log_z - logits[np.arange(n), targets.numpy()]
    assert got.dtype == torch.float32 and got.shape == (n,)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_accidental_hits_removed():
    torch.manual_seed(1)
    softmax = SoftmaxLayer(20, 4)
    sampler = LogUniformSampler(20, 3)
    h = torch.randn(2, 4)
    targets = torch.tensor([3, 9])
    with_hit = softmax.sampled_nll(h, targets, Sample(torch.tensor([3, 5, 7]), 10), sampler)
    without = softmax.sampled_nll(h, targets, Sample(torch.tensor([5, 7]), 10), sampler)
    # Row 0's target is a candidate: removing it equals not sampling it.
    assert torch.allclose(with_hit[0], without[0], atol=1e-6)


def _oracle_sampled_nll(h, weight, bias, targets, cand, true_logq, cand_logq):
    """float64 oracle of TF's sampled softmax with accidental hits removed (plain torch ops, for
    autograd): the full ``(N, S)`` logits, each hit selected to -inf, the true logit as column 0."""
    true = (h * weight[targets]).sum(-1) + bias[targets] - true_logq
    logits = h @ weight[cand].T + bias[cand] - cand_logq
    logits = torch.where(targets[:, None] == cand[None, :], -math.inf, logits)
    return torch.logsumexp(torch.cat([true[:, None], logits], 1), 1) - true


def _oracle_log_expected_count(ids, vocab_size, num_tries):
    """float64 log of the expected count of each id among ``num_tries`` log-uniform draws, from the closed
    form: ``P(k) = (log(k + 2) - log(k + 1)) / log(V + 1)``, expected count ``1 - (1 - P(k)) ** num_tries``."""
    k = ids.cpu().numpy().astype(np.float64)
    p = (np.log(k + 2) - np.log(k + 1)) / np.log(vocab_size + 1)
    return torch.from_numpy(np.log(1 - (1 - p) ** num_tries))


def _oracle_grads(softmax, h, targets, sample, sampler, g):
    """``(nll, dh, dweight, dbias)`` of ``sum(g * nll)`` by float64 autograd through the oracle."""
    h, w, b = (t.detach().double().requires_grad_() for t in (h, softmax.weight, softmax.bias))
    tq = _oracle_log_expected_count(targets, sampler.vocab_size, sample.num_tries).to(h.device)
    cq = _oracle_log_expected_count(sample.candidates, sampler.vocab_size, sample.num_tries).to(h.device)
    nll = _oracle_sampled_nll(h, w, b, targets, sample.candidates, tq, cq)
    (nll * g.double()).sum().backward()
    return nll.detach(), h.grad, w.grad, b.grad


def test_sampled_nll_and_gradients_match_float64_oracle():
    torch.manual_seed(3)
    V, P, N = 40, 6, 25
    softmax = SoftmaxLayer(V, P).double()
    sampler = LogUniformSampler(V, 12)
    sample = sampler.sample(torch.Generator().manual_seed(0))
    targets = torch.cat([sample.candidates[:5], torch.randint(V, (N - 5,))])  # several hits
    h = torch.randn(N, P, dtype=torch.float64, requires_grad=True)
    nll = softmax.sampled_nll(h, targets, sample, sampler)
    want = _oracle_grads(softmax, h, targets, sample, sampler, torch.ones(N))
    # the logits are float32 whatever the model's dtype: compare to float32 precision
    torch.testing.assert_close(nll.detach().double(), want[0], rtol=1e-5, atol=1e-5)
    nll.sum().backward()
    # every gradient, the softmax's own included (the accidental hits' zeros reach them)
    for got, expected in zip((h.grad, softmax.weight.grad, softmax.bias.grad), want[1:]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("num_sampled", [1, 3, 12])
def test_accidental_hits_give_finite_gradients_on_both_backends(backend, num_sampled):
    """A removed accidental hit is the lowest float, not -inf, and its softmax an exact 0 that only
    multiplies finite numbers: finite inputs with hits (at num_sampled = 1 rows whose every candidate
    is a hit, whose lse is the lowest float) give finite gradients equal to float64 autograd."""
    from spacy_elmo.ops import fused_available

    if backend == "fused" and not fused_available():
        pytest.skip("spacy_elmo._C is not built")
    torch.manual_seed(num_sampled)
    V, P, N = 40, 6, 25
    softmax = SoftmaxLayer(V, P)
    sampler = LogUniformSampler(V, num_sampled)
    sample = sampler.sample(torch.Generator().manual_seed(num_sampled))
    targets = torch.cat([sample.candidates[torch.arange(6) % num_sampled], torch.randint(V, (N - 6,))])
    h = (torch.randn(N, P) * 3).requires_grad_()
    g = torch.rand(N) + 0.5
    nll = softmax.sampled_nll(h, targets, sample, sampler, backend=backend)
    nll.backward(g)
    want = _oracle_grads(softmax, h, targets, sample, sampler, g)
    torch.testing.assert_close(nll.detach().double(), want[0], rtol=1e-5, atol=1e-5)
    for got, expected in zip((h.grad, softmax.weight.grad, softmax.bias.grad), want[1:]):
        assert bool(got.isfinite().all())
        torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-5)


def test_every_candidate_a_hit_stays_finite():
    softmax = SoftmaxLayer(10, 4)
    h = torch.randn(2, 4, requires_grad=True)
    nll = softmax.sampled_nll(h, torch.tensor([3, 3]), Sample(torch.tensor([3]), 5), LogUniformSampler(10, 1))
    nll.sum().backward()
    assert torch.allclose(nll, torch.zeros(2))
    # nothing to learn from such a row: every gradient is exactly zero, and finite
    for grad in (h.grad, softmax.weight.grad, softmax.bias.grad):
        assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_lm_scores_both_directions_like_separate_softmax_calls(backend):
    """BidirectionalLM runs one softmax call over both directions' rows (ragged lengths
    masked out): each direction's losses and the softmax gradients equal separate calls
    (of the reference softmax: with the fused backend the LM's own call is the fused one)."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.ops import fused_available
    from spacy_elmo.training.lm import BidirectionalLM

    from .conftest import TINY

    if backend == "fused" and not fused_available():
        pytest.skip("spacy_elmo._C is not built")
    torch.manual_seed(0)
    config = BiLMConfig.from_dict(dict(TINY, cell_clip=3.0, proj_clip=3.0))
    V, B, T, U = 40, 3, 5, 9
    lm = BidirectionalLM(BiLM(config, backend=backend), SoftmaxLayer(V, config.projection_dim)).eval()
    chars = torch.randint(1, 200, (U, config.max_characters_per_token))
    idx_f, idx_b = torch.randint(U, (B, T)), torch.randint(U, (B, T))
    tg_f, tg_b = torch.randint(V, (B, T)), torch.randint(V, (B, T))
    lengths = torch.tensor([5, 2, 4])
    sampler = LogUniformSampler(V, 12)
    sample = sampler.sample(torch.Generator().manual_seed(1))
    for s in (sample, None):
        lm.zero_grad()
        out = lm(chars, idx_f, idx_b, tg_f, tg_b, lengths, None, s, sampler)
        (out.nll_fwd.sum() + 2 * out.nll_bwd.sum()).backward()
        got_grad = lm.softmax.weight.grad.clone()

        lm.zero_grad()
        tokens = lm.bilm.token_encoder(chars)
        outs_f, outs_b, _ = lm.bilm.lstm(tokens[idx_f], tokens[idx_b], lengths, None, reverse_backward=False)
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        total = 0
        for weight, h, tg, got in ((1, outs_f[-1], tg_f, out.nll_fwd), (2, outs_b[-1], tg_b, out.nll_bwd)):
            h, tg = h[mask], tg[mask]
            want = lm.softmax.full_nll(h, tg) if s is None else lm.softmax.sampled_nll(h, tg, s, sampler)
            torch.testing.assert_close(got[mask], want.detach())
            assert bool((got[~mask] == 0).all())
            total = total + weight * want.sum()
        total.backward()
        torch.testing.assert_close(got_grad, lm.softmax.weight.grad)


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_lm_padded_positions_take_no_gradient(backend):
    """The padded positions of a window are left out of the softmax by a gather and their losses put
    back by a scatter (selects): an inf or NaN gradient arriving at a padded loss (fp16 loss scaling)
    changes no parameter's gradient, and the softmax's gradients equal float64 autograd over the
    window's real positions, accidental hits included."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.ops import fused_available
    from spacy_elmo.training.lm import BidirectionalLM

    from .conftest import TINY

    if backend == "fused" and not fused_available():
        pytest.skip("spacy_elmo._C is not built")
    torch.manual_seed(0)
    config = BiLMConfig.from_dict(dict(TINY, cell_clip=3.0, proj_clip=3.0))
    V, B, T, U = 40, 3, 5, 9
    lm = BidirectionalLM(BiLM(config, backend=backend), SoftmaxLayer(V, config.projection_dim))
    chars = torch.randint(1, 200, (U, config.max_characters_per_token))
    idx_f, idx_b = torch.randint(U, (B, T)), torch.randint(U, (B, T))
    sampler = LogUniformSampler(V, 12)
    sample = sampler.sample(torch.Generator().manual_seed(1))
    tg_f, tg_b = sample.candidates[torch.randint(12, (B, T))], torch.randint(V, (B, T))  # forward: all hits
    lengths = torch.tensor([5, 2, 4])
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    grads = []
    for pad in (0.0, math.inf, -math.inf, math.nan):
        lm.zero_grad()
        out = lm(chars, idx_f, idx_b, tg_f, tg_b, lengths, None, sample, sampler)
        g = torch.where(mask, torch.linspace(0.5, 1.5, B * T).reshape(B, T), torch.full((B, T), pad))
        torch.autograd.backward([out.nll_fwd, out.nll_bwd], [g, 2 * g])
        grads.append({name: p.grad.clone() for name, p in lm.named_parameters() if p.grad is not None})
    assert len(grads[0]) == len(list(lm.parameters()))
    for got in grads[1:]:
        for name, grad in got.items():
            assert bool(grad.isfinite().all()), name
            assert torch.equal(grad, grads[0][name]), name
    # the softmax's gradients against the oracle on the real positions' top-layer states
    with torch.no_grad():
        tokens = lm.bilm.token_encoder(chars)
        outs_f, outs_b, _ = lm.bilm.lstm(tokens[idx_f], tokens[idx_b], lengths, None, reverse_backward=False)
    h = torch.cat([outs_f[-1][mask], outs_b[-1][mask]])
    targets, weights = torch.cat([tg_f[mask], tg_b[mask]]), torch.cat([g[mask], 2 * g[mask]])
    _, _, dw, db = _oracle_grads(lm.softmax, h, targets, sample, sampler, weights)
    torch.testing.assert_close(grads[0]["softmax.weight"].double(), dw, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0]["softmax.bias"].double(), db, rtol=1e-4, atol=1e-5)


def test_lm_refuses_a_sample_without_its_sampler():
    """A sample without the sampler that drew it (whose expected counts correct the logits) was an
    AttributeError on None deep in the softmax; it is a ValueError naming both arguments."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.training.lm import BidirectionalLM

    from .conftest import TINY

    config = BiLMConfig.from_dict(TINY)
    V, B, T, U = 40, 2, 3, 5
    lm = BidirectionalLM(BiLM(config, backend="reference"), SoftmaxLayer(V, config.projection_dim)).eval()
    chars = torch.randint(1, 200, (U, config.max_characters_per_token))
    idx, tg, lengths = torch.randint(U, (B, T)), torch.randint(V, (B, T)), torch.tensor([3, 2])
    sample = LogUniformSampler(V, 12).sample(torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=r"a sample but no sampler.*sampler=.*sample=None"):
        lm(chars, idx, idx, tg, tg, lengths, None, sample)


class _HostCopies(TorchDispatchMode):
    """Records every copy of a tensor from another device to the CPU (a ``.cpu()``, ``.to("cpu")``)."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            source, target = args[0], kwargs.get("device")
        elif func is torch.ops.aten.copy_.default:
            source, target = args[1], args[0].device
        else:
            source = target = None
        if isinstance(source, torch.Tensor) and source.device.type != "cpu" and target is not None \
                and torch.device(target).type == "cpu":
            self.found.append(func)
        return func(*args, **kwargs)


def test_sampled_softmax_copies_nothing_back_to_the_host(monkeypatch):
    """On a device that is not the host (meta: shapes only) the sampled loss runs without a copy to the
    host: on a GPU each such copy waited for every kernel queued before it. (The reference backend's
    accidental-hit rows are a nonzero, whose data-dependent size meta can only assume.)"""
    import torch.fx.experimental._config as fx_config

    monkeypatch.setattr(fx_config, "meta_nonzero_assume_all_nonzero", True, raising=False)
    V, P, N = 40, 6, 25
    softmax = SoftmaxLayer(V, P).to("meta")
    sampler = LogUniformSampler(V, 12)
    sample = sampler.sample(torch.Generator().manual_seed(0))  # drawn on the host, as always
    h, targets = torch.empty(N, P, device="meta"), torch.empty(N, dtype=torch.long, device="meta")
    with _HostCopies() as copies:
        nll = softmax.sampled_nll(h, targets, sample, sampler)
    assert nll.shape == (N,) and nll.device.type == "meta"
    assert copies.found == []



@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_lm_with_precomputed_positions_waits_for_nothing(backend):
    """The training step passes the targets' positions computed on the host: the same losses and
    gradients, bit for bit, as positions found from the lengths, and none of the ops that wait for a
    GPU (nonzero, masked_scatter and its backward's masked_select) in the LM's forward and backward."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.ops import fused_available
    from spacy_elmo.training.lm import BidirectionalLM, target_positions

    from .conftest import TINY

    if backend == "fused" and not fused_available():
        pytest.skip("spacy_elmo._C is not built")
    torch.manual_seed(0)
    config = BiLMConfig.from_dict(TINY)
    V, B, T, U = 40, 4, 5, 9
    lm = BidirectionalLM(BiLM(config, backend=backend), SoftmaxLayer(V, config.projection_dim))
    chars = torch.randint(1, 200, (U, config.max_characters_per_token))
    idx_f, idx_b = torch.randint(U, (B, T)), torch.randint(U, (B, T))
    tg_f, tg_b = torch.randint(V, (B, T)), torch.randint(V, (B, T))
    sampler = LogUniformSampler(V, 12)
    sample = sampler.sample(torch.Generator().manual_seed(1))
    lengths = torch.tensor([5, 0, 3, 1])
    positions = target_positions(lengths, T)
    assert positions.tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 15]
    runs = []
    for given in (None, positions):
        lm.zero_grad()
        with TorchOps() as ops:
            out = lm(chars, idx_f, idx_b, tg_f, tg_b, lengths, None, sample, sampler, positions=given)
            (out.nll_fwd.sum() + 2 * out.nll_bwd.sum()).backward()
        runs.append((out, {n: p.grad.clone() for n, p in lm.named_parameters()}, ops.names))
    (a, grads_a, _), (b, grads_b, names) = runs
    assert torch.equal(a.nll_fwd, b.nll_fwd) and torch.equal(a.nll_bwd, b.nll_bwd)
    assert bool((b.nll_fwd[1] == 0).all()) and bool((b.nll_fwd[3, 1:] == 0).all())
    for name, grad in grads_a.items():
        assert torch.equal(grad, grads_b[name]), name
    if backend == "fused":  # the reference LSTM's own Python (ragged rows) is not the step's GPU path
        assert not names & {"nonzero", "masked_scatter", "masked_select"}, names


def test_an_interrupted_draw_leaves_the_sampler_as_new(monkeypatch):
    # An interrupt (Ctrl-C) between a chunk's scatter into the kept table and its bookkeeping must not leave
    # entries set: every later sample from that sampler would be wrong, silently.
    sampler = LogUniformSampler(300, 100)
    real = np.minimum

    class ScatterThenInterrupt:
        @staticmethod
        def at(*args):
            real.at(*args)
            raise KeyboardInterrupt

    monkeypatch.setattr(np, "minimum", ScatterThenInterrupt)
    with pytest.raises(KeyboardInterrupt):
        sampler.sample(torch.Generator().manual_seed(0))
    monkeypatch.undo()
    got = sampler.sample(torch.Generator().manual_seed(1))
    want = LogUniformSampler(300, 100).sample(torch.Generator().manual_seed(1))
    assert torch.equal(got.candidates, want.candidates) and got.num_tries == want.num_tries
