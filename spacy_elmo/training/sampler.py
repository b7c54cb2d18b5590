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

import numpy as np
import torch
from torch import Tensor

_NEVER = np.iinfo(np.int64).max


class Sample(NamedTuple):
    """``candidates (S,)`` distinct ids in draw order; ``num_tries``: draws made."""

    candidates: Tensor
    num_tries: int


class LogUniformSampler:
    """The host side of the sampled softmax, run before every training step: the draws and their
    corrections. On the CPU it computes in NumPy, single-threaded on purpose: torch's elementwise ops
    on ~10^4 elements enter an OpenMP region, and when the other cores are busy (a shared machine, the
    step's own threads) each region waited for a scheduler slice, 3-8 ms an op instead of microseconds
    (benchmarks/sampler.py)."""

    def __init__(self, vocab_size: int, num_sampled: int) -> None:
        self.vocab_size = vocab_size
        self.num_sampled = min(num_sampled, vocab_size)
        self._log_range = math.log(vocab_size + 1)
        # (V,) first draw position of each id, all "never" between calls: allocating and filling it
        # per call cost more than the search at V = 793k (6 MB of fresh pages). The lock keeps two
        # threads that share a sampler from interleaving their scatters.
        self._first = np.full(vocab_size, _NEVER, dtype=np.int64)
        self._lock = threading.Lock()

    def probability(self, ids: Tensor) -> Tensor:
        """``P(k)`` of ``ids`` (any shape, any device), float64."""
        return self._on_ids(ids, self._probability)

    def expected_count(self, ids: Tensor, num_tries: int) -> Tensor:
        """Expected number of times each id appears among ``num_tries`` draws (float32)."""
        return self._on_ids(ids, lambda xp, k: self._expected_count(xp, k, num_tries)).float()

    def log_expected_count(self, ids: Tensor, num_tries: int) -> Tensor:
        """The sampled softmax's correction of ``ids``: the log of their expected count (float32),
        computed in float64 where the ids are."""
        return self._on_ids(ids, lambda xp, k: xp.log(self._expected_count(xp, k, num_tries))).float()

    def _probability(self, xp, k):
        """``xp``: numpy or torch; ``k``: float64 ids of that namespace."""
        return (xp.log(k + 2) - xp.log(k + 1)) / self._log_range

    def _expected_count(self, xp, k, num_tries: int):
        return -xp.expm1(num_tries * xp.log1p(-self._probability(xp, k)))

    @staticmethod
    def _on_ids(ids: Tensor, fn) -> Tensor:
        """``fn(xp, float64 ids)`` in NumPy for CPU ids (one thread), in torch on ``ids``' device otherwise."""
        if ids.device.type == "cpu":
            return torch.from_numpy(np.asarray(fn(np, ids.numpy().astype(np.float64))))
        return fn(torch, ids.double())

    def _draw(self, n: int, generator: torch.Generator) -> np.ndarray:
        """``n`` ids drawn with replacement, int64. The uniforms come from ``generator``: the stream a
        checkpoint's generator state resumes."""
        u = torch.rand(n, generator=generator, dtype=torch.float64).numpy()
        ids = np.floor(np.exp(u * self._log_range)).astype(np.int64) - 1
        return np.clip(ids, 0, self.vocab_size - 1, out=ids)

    def sample(self, generator: torch.Generator) -> Sample:
        """``num_sampled`` distinct ids (CPU), drawn in chunks until enough are distinct.

        The sample is the first ``num_sampled`` distinct ids in draw order. Each id's
        first draw is found by a minimum scattered into a ``(V,)`` table kept between calls
        rather than by sorting the draws (``torch.unique``): O(draws), on the host before
        every training step (benchmarks/sampler.py compares the two).
        """
        want = self.num_sampled
        draws = self._draw(max(2 * want, 64), generator)
        with self._lock:
            first = self._first
            done = 0  # draws already scattered: a new chunk's positions only lower ids not seen before
            try:
                while True:
                    n = draws.size
                    np.minimum.at(first, draws[done:], np.arange(done, n))
                    done = n
                    firsts = np.flatnonzero(first[draws] == np.arange(n))
                    if firsts.size >= want:
                        break
                    draws = np.concatenate([draws, self._draw(max(n, 64), generator)])
            finally:  # every draw, not just those scattered: an interrupt mid-scatter leaves none set
                first[draws] = _NEVER
        firsts = firsts[:want]
        return Sample(torch.from_numpy(draws[firsts]), int(firsts[-1]) + 1)
