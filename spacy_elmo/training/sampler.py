"""Log-uniform (Zipf) candidate sampler, as TF's ``log_uniform_candidate_sampler``.

``P(k) = log((k + 2) / (k + 1)) / log(V + 1)`` for ids ``0 .. V-1`` (the
vocabulary is sorted by frequency, so this approximates the unigram
distribution). Like TF with ``unique=True`` it draws with replacement until
``num_sampled`` distinct ids are found and reports the number of draws, so the
expected count of id ``k`` is ``1 - (1 - P(k)) ** num_tries``.
"""

import math
from typing import NamedTuple

import torch
from torch import Tensor


class Sample(NamedTuple):
    """``candidates (S,)`` distinct ids in draw order; ``num_tries``: draws made."""

    candidates: Tensor
    num_tries: int


class LogUniformSampler:
    def __init__(self, vocab_size: int, num_sampled: int) -> None:
        self.vocab_size = vocab_size
        self.num_sampled = min(num_sampled, vocab_size)
        self._log_range = math.log(vocab_size + 1)

    def probability(self, ids: Tensor) -> Tensor:
        ids = ids.double()
        return (torch.log(ids + 2) - torch.log(ids + 1)) / self._log_range

    def expected_count(self, ids: Tensor, num_tries: int) -> Tensor:
        """Expected number of times each id appears among ``num_tries`` draws (float32)."""
        p = self.probability(ids)
        return (-torch.expm1(num_tries * torch.log1p(-p))).float()

    def _draw(self, n: int, generator: torch.Generator) -> Tensor:
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        ids = torch.floor(torch.exp(u * self._log_range)).long() - 1
        return ids.clamp_(0, self.vocab_size - 1)

    def sample(self, generator: torch.Generator) -> Sample:
        """``num_sampled`` distinct ids (CPU), drawn in chunks until enough are distinct."""
        want = self.num_sampled
        draws = self._draw(max(2 * want, 64), generator)
        while True:
            unique, inverse = torch.unique(draws, return_inverse=True)
            if unique.numel() >= want:
                break
            draws = torch.cat([draws, self._draw(max(draws.numel(), 64), generator)])
        # First draw index of each distinct id: the sample is the first `want` distinct ids.
        first = torch.full((unique.numel(),), draws.numel(), dtype=torch.long)
        first.scatter_reduce_(0, inverse, torch.arange(draws.numel()), reduce="amin")
        order = first.argsort()[:want]
        num_tries = int(first[order[-1]]) + 1
        return Sample(unique[order], num_tries)
