"""Log-uniform sampler and the sampled / full softmax."""

import math

import torch

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
    freq = torch.bincount(draws, minlength=1000).double() / draws.numel()
    p = sampler.probability(torch.arange(1000))
    assert torch.allclose(freq[:5], p[:5], rtol=0.03)
    assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-9)


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
