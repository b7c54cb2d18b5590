"""Log-uniform (Zipf) candidate sampler, as TF's ``log_uniform_candidate_sampler``.

``P(k) = log((k + 2) / (k + 1)) / log(V + 1)`` for ids ``0 .. V-1`` (the
vocabulary is sorted by frequency, so this approximates the unigram
distribution). Like TF with ``unique=True`` it draws with replacement until
``num_sampled`` distinct ids are found and reports the number of draws, so the
expected count of id ``k`` is ``1 - (1 - P(k)) ** num_tries``.
"""

import math
import threading
from typing import NamedTuple

import torch
from torch import Tensor


_NEVER = torch.iinfo(torch.long).max


class Sample(NamedTuple):
    """``candidates (S,)`` distinct ids in draw order; ``num_tries``: draws made."""

    candidates: Tensor
    num_tries: int


class LogUniformSampler:
    def __init__(self, vocab_size: int, num_sampled: int) -> None:
        self.vocab_size = vocab_size
        self.num_sampled = min(num_sampled, vocab_size)
        self._log_range = math.log(vocab_size + 1)
        # (V,) first draw position of each id, all "never" between calls: allocating and filling it
        # per call cost more than the search at V = 793k (6 MB of fresh pages). The lock keeps two
        # threads that share a sampler from interleaving their scatters.
        self._first = torch.full((vocab_size,), _NEVER, dtype=torch.long)
        self._lock = threading.Lock()

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
        """``num_sampled`` distinct ids (CPU), drawn in chunks until enough are distinct.

        The sample is the first ``num_sampled`` distinct ids in draw order. Each id's
        first draw is found by a scatter into a ``(V,)`` table kept between calls rather
        than by sorting the draws (``torch.unique``): O(draws), and this runs on the
        host before every training step (benchmarks/sampler.py compares the two).
        """
        want = self.num_sampled
        draws = self._draw(max(2 * want, 64), generator)
        with self._lock:
            first = self._first
            done = 0  # draws already scattered: a new chunk's positions only lower ids not seen before
            try:
                while True:
                    n = draws.numel()
                    first.scatter_reduce_(0, draws[done:], torch.arange(done, n), reduce="amin")
                    done = n
                    firsts = (first.index_select(0, draws) == torch.arange(n)).nonzero().squeeze(1)
                    if firsts.numel() >= want:
                        break
                    draws = torch.cat([draws, self._draw(max(n, 64), generator)])
            finally:
                first.index_fill_(0, draws[:done], _NEVER)
        firsts = firsts[:want]
        return Sample(draws.index_select(0, firsts), int(firsts[-1]) + 1)
