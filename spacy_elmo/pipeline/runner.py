"""ElmoRunner: the torch module behind the ``elmo`` component (no spaCy import).

It holds the :class:`~spacy_elmo.BiLM` (set once weights are loaded) and a
cache of context-independent token vectors keyed by token text. The cache is a
plain attribute, never a buffer, so it is not part of any serialized state.
"""

import os
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor, nn

from ..bilm import BiLM
from ..chars import batch_to_ids


def _single_thread_after_fork() -> None:
    # OpenMP's thread pool does not survive fork(): a forked worker of
    # nlp.pipe(n_process=N) that enters a parallel region hangs. One intra-op
    # thread per worker is also what N processes on N cores want.
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_single_thread_after_fork)


class TokenCache:
    """Token text -> row of a ``(capacity, P)`` matrix of char-CNN outputs.

    Rows 0, 1, 2 hold ``<S>``, ``</S>`` and zeros (padding). When full, the
    cache is emptied (bounded memory; frequent tokens come back quickly).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self.index: Dict[str, int] = {}
        self.matrix: Optional[Tensor] = None

    def clear(self) -> None:
        self.index = {}
        self.matrix = None

    def lookup(self, bilm: BiLM, rows: Sequence[Sequence[str]], device: torch.device) -> Tensor:
        """Row indices ``(B, T + 2)`` for sentences wrapped in ``<S> ... </S>``, padding -> 2.

        Encodes the tokens not yet cached in one call of ``bilm.encode_tokens``.
        """
        P = bilm.config.projection_dim
        W = bilm.config.max_characters_per_token
        fresh = self.matrix is None or self.matrix.device != device or self.matrix.dtype != bilm.token_encoder.char_embedding.dtype
        missing = list({tok for row in rows for tok in row if tok not in self.index})
        if fresh or len(self.index) + len(missing) + 3 > self.capacity:
            self.index = {}
            missing = list({tok for row in rows for tok in row})
            size = max(self.capacity, len(missing) + 3)
            self.matrix = bilm.token_encoder.char_embedding.new_zeros(size, P)
            markers = bilm.marker_ids.unsqueeze(0).to(device)
            self.matrix[:2] = bilm.encode_tokens(markers, torch.ones(1, 2, dtype=torch.bool, device=device))[0]
        if missing:
            ids = batch_to_ids([missing], W).to(device)
            mask = torch.ones(1, len(missing), dtype=torch.bool, device=device)
            start = len(self.index) + 3
            self.matrix[start : start + len(missing)] = bilm.encode_tokens(ids, mask)[0]
            for i, tok in enumerate(missing):
                self.index[tok] = start + i
        T = max((len(r) for r in rows), default=0)
        idx = torch.full((len(rows), T + 2), 2, dtype=torch.long)
        for b, row in enumerate(rows):
            idx[b, 0] = 0
            idx[b, 1 : len(row) + 1] = torch.tensor([self.index[t] for t in row], dtype=torch.long)
            idx[b, len(row) + 1] = 1
        return idx.to(device)


class ElmoRunner(nn.Module):
    """Runs the biLM on token-text rows; the output is stacked layers.

    forward(rows) -> Tensor ``(L + 1, B, T, 2P)`` (zeros at padding), where
    ``rows`` is a list of ``B`` token-text lists of max length ``T``.
    Without gradients (frozen biLM, inference) the char-CNN outputs come from
    the token cache; with gradients the whole biLM runs (fine-tuning).
    """

    def __init__(self, cache_size: int = 50000) -> None:
        super().__init__()
        self.bilm: Optional[BiLM] = None
        self.cache = TokenCache(cache_size)

    def set_bilm(self, bilm: BiLM) -> None:
        self.bilm = bilm
        self.cache.clear()

    def forward(self, rows: List[List[str]]) -> Tensor:
        bilm = self.bilm
        assert bilm is not None, "ElmoRunner.forward before set_bilm"
        device = bilm.token_encoder.char_embedding.device
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long, device=device)
        if torch.is_grad_enabled() or self.cache.capacity == 0:
            ids = batch_to_ids(rows, bilm.config.max_characters_per_token).to(device)
            return torch.stack(bilm(ids).activations)
        idx = self.cache.lookup(bilm, rows, device)
        x = self.cache.matrix[idx]  # (B, T + 2, P)
        return torch.stack(bilm.contextualize(x, lengths).activations)

