"""A cache of context-independent token vectors (the char encoder's output), keyed by text.

Repeated words are encoded once: in running text most tokens are frequent
ones, so inference (the spaCy component, ``spacy-elmo embed``) skips most of
the char CNN, highway and projection. Only for inference: the vectors are
computed without gradients and are stale once the weights change (call
:meth:`TokenCache.clear`). One cache may serve several threads at once (a served spaCy pipeline):
a lock covers the index, the matrix and the rows read from it. Pickled and copied empty.
"""

import threading
from typing import Dict, Optional, Sequence

import numpy
import torch
from torch import Tensor

from ..chars import _token_list, batch_to_ids


class TokenCache:
    """Token text -> row of a ``(capacity, P)`` matrix of char-CNN outputs.

    Rows 0, 1, 2 hold ``<S>``, ``</S>`` and zeros (padding). When full, the
    cache is emptied (bounded memory; frequent tokens come back quickly).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self.lock = threading.Lock()
        self.index: Dict[str, int] = {}
        self.matrix: Optional[Tensor] = None

    def clear(self) -> None:
        with self.lock:
            self.index = {}
            self.matrix = None

    # a cache, never model state: a pickled or copied pipeline (nlp.pipe(n_process=N) under spawn,
    # copy.deepcopy(nlp)) carries no (capacity, P) matrix, and no lock (which does not pickle)
    def __getstate__(self):
        return {"capacity": self.capacity}

    def __setstate__(self, state) -> None:
        self.__init__(state["capacity"])

    def vectors(self, bilm, rows: Sequence[Sequence[str]], device: torch.device) -> Tensor:
        """``(B, T + 2, P)`` token vectors of the wrapped rows (:meth:`lookup`'s rows of the matrix),
        read under the lock: another thread's lookup may write rows or start the matrix over."""
        with self.lock:
            idx = self.lookup(bilm, rows, device)  # may replace the matrix
            return self.matrix[idx]

    def lookup(self, bilm, rows: Sequence[Sequence[str]], device: torch.device) -> Tensor:
        """Row indices ``(B, T + 2)`` for sentences wrapped in ``<S> ... </S>``, padding -> 2.

        Encodes the tokens not yet cached in one call of ``bilm.encode_tokens``. ``rows`` are
        taken as by :func:`~spacy_elmo.batch_to_ids` (a string row is an error, not its characters).
        The indices are of the matrix as it is now: hold :attr:`lock` until they are read (:meth:`vectors`).
        """
        rows = [_token_list(row, i) for i, row in enumerate(rows)]  # read three times below
        P = bilm.config.projection_dim
        W = bilm.config.max_characters_per_token
        fresh = (self.matrix is None or self.matrix.device != device
                 or self.matrix.dtype != bilm.token_encoder.char_embedding.dtype
                 # built under torch.inference_mode(): written in place below, which only inference mode allows
                 or (self.matrix.is_inference() and not torch.is_inference_mode_enabled()))
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
        # One pass over the tokens, then whole-array writes (a tensor per row cost more than the rest).
        lengths = numpy.fromiter((len(r) for r in rows), dtype=numpy.int64, count=len(rows))
        T = int(lengths.max()) if len(rows) else 0
        idx = numpy.full((len(rows), T + 2), 2, dtype=numpy.int64)
        idx[:, 0] = 0
        index = self.index
        idx[:, 1 : T + 1][numpy.arange(T) < lengths[:, None]] = [index[t] for row in rows for t in row]
        idx[numpy.arange(len(rows)), lengths + 1] = 1
        return torch.from_numpy(idx).to(device)



def run_rows(bilm, rows: Sequence[Sequence[str]], cache: Optional[TokenCache] = None):
    """The :class:`~spacy_elmo.BiLMOutput` of ``bilm(batch_to_ids(rows))`` for token-text
    ``rows`` (non-empty). The token vectors come from ``cache`` when there is one
    with room and no gradient is wanted (inference); otherwise the whole biLM runs.
    """
    device = bilm.token_encoder.char_embedding.device
    rows = [_token_list(row, i) for i, row in enumerate(rows)]  # as batch_to_ids takes them, read twice below
    if cache is None or cache.capacity == 0 or torch.is_grad_enabled():
        return bilm(batch_to_ids(rows, bilm.config.max_characters_per_token).to(device))
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long, device=device)
    return bilm.contextualize(cache.vectors(bilm, rows, device), lengths)  # (B, T + 2, P) token vectors in
