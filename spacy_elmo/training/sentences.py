"""Batches of whole sentences, each read from the start state: the stateless pipeline's regime.

bilm-tf trains on continuous streams with carried states, so its LMs almost never
start from the zero state; the ``elmo`` component reads every sentence alone from it,
and there a stream-trained model predicts the first ten or so words much worse (see
``docs/default-model.md``). ``pretrain --sentences`` trains on what the component sees:
every row is one sentence ``<S> w1 .. wn </S>`` (its reversal for the backward LM),
ragged lengths, no carried state. A sentence with more than ``max_length`` targets is
cut into pieces of ``max_length`` targets that overlap by one token, so every target is
predicted once per direction; each piece starts from the start state too.

Every epoch the pieces are shuffled (seeded by ``(seed, epoch)``), sorted by length
within pools of ``pool`` batches, cut into batches of ``batch_size`` rows and the batches
shuffled; rank ``r`` of ``world`` takes batches ``k * world + r``. An epoch has
``ceil(n_batches / world)`` steps, its batch order padded by repeating its first batches (the
``drop_last=False`` of torch's ``DistributedSampler``): every batch trains every epoch, and up to
``world - 1`` batches twice (the ``n_batches % world`` left over were never trained before; checkpoints
of those runs keep that, ``pad=False``, to resume exactly). A batch is a pure function of
``(epoch, step)``, so resuming needs only those two numbers.

``pool=1`` (``pretrain --length-pool``'s default) makes every batch a random draw of
pieces, of mixed lengths. A larger pool pads less (sorted pools of 50 batches trained
about 1.6x more tokens a second on the CPU) but gives every batch one narrow band of
lengths, and a step on a band of short pieces ("Boo !") made held-out perplexity worse
(fine-tuning the bundled model: 162.61 -> 174.04 on one such step, where random batches
lowered it every step). 50 was the only behaviour before the option existed
(:data:`UNRECORDED_POOL`).
"""

from typing import Optional, Tuple

import numpy as np
import torch

from ..errors import Errors, counted
from .data import Corpus
from .vocab import EOS

#: The pool of runs whose checkpoints recorded none (written before ``--length-pool`` existed): their
#: batches were sorted within pools of 50 batches, and a resume of them keeps it to continue exactly.
UNRECORDED_POOL = 50

class SentenceBatcher:
    def __init__(
        self, corpus: Corpus, batch_size: int, max_length: int, seed: int = 0, rank: int = 0, world: int = 1,
        pool: int = 1, pad: bool = True,
    ) -> None:
        for name, value in (("max_length", max_length), ("length_pool", pool)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what="a positive integer", value=value))
        self.corpus = corpus
        self.batch_size = batch_size
        self.max_length = max_length
        self.seed = seed
        self.rank = rank
        self.world = world
        self.pool = pool
        starts, lengths = [], []  # pieces: token offset and number of tokens (targets + 1)
        for start, n in zip(corpus.starts.tolist(), corpus.lengths.tolist()):
            for offset in range(0, max(n - 1, 1), max_length):
                starts.append(start + offset)
                lengths.append(min(max_length + 1, n - offset))
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.n_batches = -(-len(self.starts) // batch_size)
        if self.n_batches < world:
            n = len(self.starts)
            # the largest batch that gives every process one (world - 1 full batches and one row), where one does:
            # none with fewer rows than processes, nor for one process (it lacks rows, not batches)
            most = (n - 1) // (world - 1) if world > 1 and n >= world else 0
            fixes = ([Errors.E_TOO_FEW_SENTENCES_BATCH.format(most=f"{most:,}")] if most else []) + (
                [Errors.E_TOO_FEW_SENTENCES_WORLD] if world > 1 else []) + [Errors.E_TOO_FEW_SENTENCES_TEXT]
            raise ValueError(Errors.E_TOO_FEW_SENTENCES.format(  # a batch for each process: world - 1 full ones and one row
                rows=counted(len(self.starts), "sentence row"), processes=counted(world, "process", "processes"),
                batch_size=counted(batch_size, "row"), needed=counted((world - 1) * batch_size + 1, "row"),
                fix=", ".join(fixes[:-1]) + (", or " if len(fixes) > 1 else "") + fixes[-1]))
        #: Whether the epoch is padded to a multiple of ``world`` batches (the module's docstring); one process: the same.
        self.pad = pad
        self.steps_per_epoch = -(-self.n_batches // world) if pad else self.n_batches // world
        self._epoch: Optional[int] = None
        self._batches: Optional[list] = None

    def _epoch_batches(self, epoch: int) -> list:
        rng = np.random.default_rng([self.seed, epoch, 2])  # 0 and 1 are the streams' directions
        order = rng.permutation(len(self.starts))
        size = self.pool * self.batch_size
        batches = []  # pool 1: each batch is sorted alone, which orders its rows and keeps its pieces
        for p in range(0, len(order), size):
            chunk = order[p : p + size]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def batch(self, epoch: int, step: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(fwd, bwd, lengths)``: type ids ``(b, T + 1)`` (inputs ``[:, :-1]``, targets
        ``[:, 1:]``, padded with ``</S>``) and targets per row ``(b,)``, ``b <= batch_size``."""
        if epoch != self._epoch or self._batches is None:
            self._batches = self._epoch_batches(epoch)
            self._epoch = epoch
        rows = self._batches[(step * self.world + self.rank) % self.n_batches]  # past the end: the first ones again (pad)
        return sentence_rows(self.corpus.tokens, self.starts[rows], self.lengths[rows])


def sentence_rows(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of ``tokens[start : start + n]`` (forward) and their reversals (backward).

    Returns int64 ``(fwd (b, T + 1), bwd (b, T + 1), targets (b,))``: inputs are
    ``[:, :-1]``, targets ``[:, 1:]``, padding ``</S>``; ``targets = n - 1`` per row.
    """
    targets = np.asarray(lengths, dtype=np.int64) - 1
    T = int(targets.max())
    seqs = np.full((2, len(targets), T + 1), EOS, dtype=np.int64)
    for r, (start, n) in enumerate(zip(np.asarray(starts).tolist(), np.asarray(lengths).tolist())):
        piece = tokens[start : start + n]
        seqs[0, r, :n] = piece
        seqs[1, r, :n] = piece[::-1]
    return torch.from_numpy(seqs[0]), torch.from_numpy(seqs[1]), torch.from_numpy(targets)
