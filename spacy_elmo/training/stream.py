"""Batches of the bilm-tf training streams, a pure function of (epoch, step).

Every epoch, sentences are shuffled (one permutation per direction, seeded by
``(seed, epoch, direction)``) and concatenated into one forward stream and one
backward stream of individually reversed sentences (bilm-tf: the backward LM
reads an independently shuffled reversed stream). Each stream is cut into
``world * batch_size`` contiguous rows; rank ``k`` owns rows ``k*B .. k*B+B-1``
(data sharded by rank). Step ``s`` feeds positions ``s*U .. s*U+U-1`` of each
row and predicts positions ``+1``, so consecutive steps continue each row and
the LSTM states carry over (truncated BPTT). Because a batch depends only on
``(epoch, step)``, resuming needs nothing but those two numbers.
"""

from typing import Optional, Tuple

import numpy as np
import torch

from ..errors import Errors
from .data import Corpus


class StreamBatcher:
    def __init__(
        self, corpus: Corpus, batch_size: int, unroll: int, seed: int = 0, rank: int = 0, world: int = 1, shuffle: bool = True
    ) -> None:
        self.corpus = corpus
        self.batch_size = batch_size
        self.unroll = unroll
        self.seed = seed
        self.rank = rank
        self.world = world
        self.shuffle = shuffle
        rows = world * batch_size
        self.row_len = len(corpus.tokens) // rows
        self.steps_per_epoch = (self.row_len - 1) // unroll
        if self.steps_per_epoch < 1:
            raise ValueError(
                Errors.E_CORPUS_TOO_SMALL.format(
                    n_tokens=len(corpus.tokens), n_rows=rows, batch_size=batch_size, world=world, unroll=unroll
                )
            )
        self._epoch: Optional[int] = None
        self._orders: Optional[Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]] = None

    def _order(self, epoch: int, direction: int) -> Tuple[np.ndarray, np.ndarray]:
        n = len(self.corpus.lengths)
        perm = np.random.default_rng([self.seed, epoch, direction]).permutation(n) if self.shuffle else np.arange(n)
        cum = np.concatenate([[0], np.cumsum(self.corpus.lengths[perm])])
        return perm, cum

    def _gather(self, positions: np.ndarray, perm: np.ndarray, cum: np.ndarray, reverse: bool) -> np.ndarray:
        """Type ids at ``positions`` of the permuted (and per-sentence reversed) stream."""
        k = np.searchsorted(cum, positions, side="right") - 1
        sent = perm[k]
        offset = positions - cum[k]
        if reverse:
            offset = self.corpus.lengths[sent] - 1 - offset
        return self.corpus.tokens[self.corpus.starts[sent] + offset]

    def batch(self, epoch: int, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(fwd, bwd)`` LongTensors ``(B, U + 1)`` of type ids: inputs ``[:, :-1]``, targets ``[:, 1:]``."""
        if epoch != self._epoch or self._orders is None:
            self._orders = (self._order(epoch, 0), self._order(epoch, 1))
            self._epoch = epoch
        rows = np.arange(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        pos = rows[:, None] * self.row_len + step * self.unroll + np.arange(self.unroll + 1)[None, :]
        fwd = self._gather(pos, *self._orders[0], reverse=False)
        bwd = self._gather(pos, *self._orders[1], reverse=True)
        return torch.from_numpy(fwd.astype(np.int64)), torch.from_numpy(bwd.astype(np.int64))
