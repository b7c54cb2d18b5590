"""A cache of context-independent token vectors (the char encoder's output), keyed by text.

Repeated words are encoded once: in running text most tokens are frequent
ones, so inference (the spaCy component, ``spacy-elmo embed``) skips most of
the char CNN, highway and projection. Only for inference: the vectors are
computed without gradients. It starts over for another biLM than the one that filled it, and when
the char encoder's weights changed since (an optimizer step, ``load_state_dict``, any in-place
edit: their version counters and storage addresses say so, and a count of every ``torch.optim`` step,
since fused optimizers update weights without bumping their versions). Edits it cannot see: through ``.data``
(a tensor with its own version counter), and of weights that are inference tensors (a model built
under ``torch.inference_mode()``, which keep no version); after those call :meth:`TokenCache.clear`.
The vectors keep the weights' precision under autocast too (encoded with it off; handed out in the
autocast dtype, as ``encode_tokens`` gives them there).

One cache may serve several threads at once (a served spaCy pipeline). Its lock covers the
bookkeeping, never the char CNN: a thread reserves rows for its new words under the lock, encodes
them without it and writes them under it again. A word another thread reserved is read once that
thread wrote it; rows reserved before the cache was cleared or started over are dropped, and their
thread looks its words up again. Threads on CUDA streams of their own (``torch.cuda.stream``) are ordered
too: each write waits for the matrix's earlier writes on its stream and records an event that the next write
and every read wait for, and each stream that writes or reads the matrix is recorded on it (``record_stream``),
so that a matrix dropped while its reads or writes are still queued is not handed out again before they ran (on
the CPU none of this is done). Pickled and copied empty; a forked child starts it empty, with a new
lock (the parent's may be held by a thread the child lacks, whose reserved rows it would wait for).
"""

import threading
import weakref
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch import Tensor

from ..chars import batch_rows, batch_to_ids
from ..errors import Errors
from ..ops import reference
from ..forksafe import after_fork_in_child

_MARKERS = (("<S>",), ("</S>",))  # the keys of rows 0 and 1 while they are reserved: no token's (a str)


def _nobody():
    return None


class _OptimizerSteps:
    """Steps taken by any ``torch.optim`` optimizer in this process, counted by a global post-step hook
    registered with the first cache: a fused optimizer (``fused=True``; the CPU Adagrad of ``pretrain``)
    updates the weights in place without bumping their version counters, which is all the key saw
    otherwise. A step of another model's optimizer makes a cache start over too: only its speed is lost."""

    count = 0
    _registered = False
    _lock = threading.Lock()

    @classmethod
    def watch(cls) -> None:
        with cls._lock:
            if not cls._registered:
                register_optimizer_step_post_hook(cls._stepped)
                cls._registered = True

    @classmethod
    def _stepped(cls, optimizer, args, kwargs) -> None:
        cls.count += 1  # a lost increment of two threads at once still changes it


#: :func:`_weights_key`'s value: optimizer steps, and (version, storage address) of each char-encoder weight.
WeightsKey = Tuple[int, Tuple[Tuple[int, int], ...]]


def _weights_key(bilm) -> WeightsKey:
    """The optimizer steps taken so far and the version counter and storage address of each char-encoder
    weight: another key once a weight changed in place (optimizer step, ``load_state_dict``) or was replaced
    (``.data = ...``). An inference tensor keeps no version (-1). About 15 us for the released encoder's 19
    weights, per batch."""
    weights = tuple([(-1 if p.is_inference() else p._version, p.data_ptr()) for p in bilm.token_encoder.parameters()])
    return _OptimizerSteps.count, weights


_CPU = torch.device("cpu")


def _home(bilm, device: torch.device) -> torch.device:
    """``device`` as the biLM's weights name it, where the matrix lives: ``cuda`` is ``cuda:N`` of the current
    GPU, as ``tensor.to("cuda")`` takes it. Compared unresolved, ``cuda`` never equalled the matrix's ``cuda:0``,
    and every call started the cache over (the whole char CNN, every batch). Another device is an error: the
    matrix cannot serve it.

    Nothing is remembered between calls (the biLM's ``.to()`` moves ``home``, and ``cuda`` is the GPU current
    then): the weights' own device, as callers mostly pass it, and any CPU one are told without a tensor; only a
    device without an index of the weights' type (``cuda``) is resolved by allocating an empty tensor there."""
    home = bilm.token_encoder.char_embedding.device
    if isinstance(device, torch.device) and device == home:  # nothing to resolve (an empty tensor took ~6 us)
        return home
    try:
        asked = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:  # an int where torch has no accelerator; 2**70
        raise ValueError(Errors.E_TOKEN_CACHE_DEVICE.format(found=device, expected=home)) from err
    # cuda -> cuda:N (the current GPU), cpu:0 -> cpu: as a tensor's device names it. A GPU's index given is left as
    # it is (resolving cuda:7 on a machine of one GPU would be CUDA's "invalid device ordinal", not this refusal).
    if asked.type == "cpu":  # every CPU tensor's device is "cpu", whatever index was asked for
        asked = _CPU
    elif asked.type == home.type and asked.index is None:
        asked = torch.empty(0, device=asked).device  # an empty tensor allocates nothing
    if asked != home:
        raise ValueError(Errors.E_TOKEN_CACHE_DEVICE.format(found=asked, expected=home))
    return home


class TokenCache:
    """Token text -> row of a ``(capacity, P)`` matrix of char-CNN outputs.

    Rows 0, 1, 2 hold ``<S>``, ``</S>`` and zeros (padding). When full, the
    cache is emptied (bounded memory; frequent tokens come back quickly).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        _OptimizerSteps.watch()
        self.generation = 0  # bumped whenever the matrix is dropped: rows reserved in it are no one's then
        self._start_over()
        after_fork_in_child(self._start_over)

    def _start_over(self) -> None:
        """A new lock, no rows: at the start and in a forked child."""
        self.lock = threading.Lock()
        self.written = threading.Condition(self.lock)  # notified when reserved rows are written or dropped
        self.clear()

    def clear(self) -> None:
        with self.lock:
            self._drop()

    def _drop(self) -> None:  # under the lock
        self.index: Dict[str, int] = {}  # words whose rows are written
        self.pending: Dict[object, int] = {}  # words (and markers) whose rows a thread is encoding
        self.used = 3  # rows written or reserved
        self.matrix: Optional[Tensor] = None
        self.written_event: Optional[torch.cuda.Event] = None  # CUDA: recorded after the matrix's last write
        self.owner = _nobody  # a weak reference to the biLM that fills the matrix
        self.weights: Optional[WeightsKey] = None  # _weights_key of its weights then
        self.generation += 1
        self.written.notify_all()

    # a cache, never model state: a pickled or copied pipeline (nlp.pipe(n_process=N) under spawn,
    # copy.deepcopy(nlp)) carries no (capacity, P) matrix, and no lock (which does not pickle)
    def __getstate__(self):
        return {"capacity": self.capacity}

    def __setstate__(self, state) -> None:
        type(self).__init__(self, state["capacity"])

    def vectors(self, bilm, rows: Sequence[Sequence[str]], device: torch.device) -> Tensor:
        """``(B, T + 2, P)`` token vectors of the wrapped rows (:meth:`lookup`'s rows of the matrix), in
        the dtype ``bilm.encode_tokens`` returns: the weights', under autocast the autocast dtype (but
        float64, which autocast leaves alone). The matrix keeps the weights' precision whatever the
        autocast: rows filled under bfloat16 autocast were bfloat16-rounded, and a later float32 call
        read them so (layer 0 off by 4e-3 relative to the biLM's), and under autocast layer 0 came back
        float32 with a cache, bfloat16 without."""
        low = bilm._autocast_dtype(bilm.token_encoder.char_embedding)  # first: a module it refuses fills nothing
        x = self._lookup(bilm, rows, device, gather=True)
        return x if low is None or x.dtype in (low, torch.float64) else x.to(low)

    def lookup(self, bilm, rows: Sequence[Sequence[str]], device: torch.device) -> Tensor:
        """Row indices ``(B, T + 2)`` for sentences wrapped in ``<S> ... </S>``, padding -> 2.

        Encodes the tokens not yet cached in one call of ``bilm.encode_tokens``. ``rows`` are
        taken as by :func:`~spacy_elmo.batch_to_ids` (a string row is an error, not its characters).
        The indices are of the matrix as it is now, which another thread may start over: with
        several threads, read the vectors with :meth:`vectors`.
        """
        return self._lookup(bilm, rows, device, gather=False)

    def _lookup(self, bilm, rows, device: torch.device, gather: bool) -> Tensor:
        device = _home(bilm, device)
        # Read more than once below. Every token is checked here, before any row is reserved: a check of the words
        # missing from the cache alone took a non-str equal to a cached str (a UserString), and on a stale index
        # left the rebuilt missing set to _encode's batch_to_ids (the token said at its place there, and the
        # cache dropped).
        rows = batch_rows(rows)
        weights = _weights_key(bilm)
        while True:
            with self.lock:
                generation, missing, mine, start, new_matrix = self._reserve(bilm, rows, device, weights)
            try:
                markers, vectors = self._encode(bilm, mine, new_matrix, device)
            except BaseException:
                with self.lock:
                    if self.generation == generation:  # rows it reserved are never written: drop them
                        self._drop()
                raise
            with self.lock:
                if self.generation == generation:
                    self._write(mine, start, markers, vectors)
                    while self.generation == generation and self._reserved(missing):
                        self.written.wait()  # another thread is encoding some of these words
                if self.generation == generation:
                    idx = self._indices(rows, device)
                    assert self.matrix is not None  # this generation's, written
                    if gather and self.matrix.is_cuda:
                        self._after_writes()
                    return self.matrix[idx] if gather else idx
            # Cleared or started over meanwhile (weights changed, or another thread's words filled the
            # matrix): encode this batch on its own, which no other thread can start over.
            if gather:
                return TokenCache(0).vectors(bilm, rows, device)

    def _reserve(self, bilm, rows: List[List[str]], device: torch.device,
                 weights: WeightsKey) -> Tuple[int, Set[str], List[str], int, bool]:
        """Under the lock: rows ``start, start + 1, ...`` of the matrix for the words of ``rows`` neither
        written nor reserved, in a new matrix when this one is full or not of the biLM's ``weights``
        (:func:`_weights_key`), whose rows 0 and 1
        (the markers) are this thread's to write too. The generation, the words not written (some
        maybe reserved by other threads), those reserved here, ``start`` and whether the markers."""
        matrix = self.matrix
        fresh = (matrix is None or matrix.device != device
                 or matrix.dtype != bilm.token_encoder.char_embedding.dtype
                 # built under torch.inference_mode(): written in place, which only inference mode allows
                 or (matrix.is_inference() and not torch.is_inference_mode_enabled())
                 # another biLM's: a thread that still held it refilled the cache after set_bilm cleared it
                 or self.owner() is not bilm
                 # its weights changed since (an optimizer step, load_state_dict): the vectors are stale
                 or self.weights != weights)
        index, pending = self.index, self.pending
        # the tokens are strs (_lookup checked them); a str subclass without a hash raises here, before any row is
        # reserved
        missing = {tok for row in rows for tok in row if tok not in index}  # one pass: mostly cached
        mine = [w for w in missing if w not in pending] if pending else list(missing)
        start = self.used
        markers = fresh or start + len(mine) > self.capacity
        if markers:
            self._drop()
            missing = {tok for row in rows for tok in row}
            mine, start = list(missing), 3
            size = max(self.capacity, len(mine) + 3)
            self.matrix = bilm.token_encoder.char_embedding.new_zeros(size, bilm.config.projection_dim)
            if self.matrix.is_cuda:  # its zeros (padding row 2) are a write on this thread's stream
                self._wrote()
            self.owner = weakref.ref(bilm)
            self.weights = weights
            self.pending = {key: row for row, key in enumerate(_MARKERS)}
        self.pending.update((w, start + i) for i, w in enumerate(mine))
        self.used = start + len(mine)
        return self.generation, missing, mine, start, markers

    def _reserved(self, words: Set[str]) -> bool:
        """Under the lock: whether a thread is encoding any of ``words`` or the markers."""
        pending = self.pending
        return bool(pending) and (any(key in pending for key in _MARKERS) or not pending.keys().isdisjoint(words))

    def _write(self, mine: List[str], start: int, markers: Optional[Tensor], vectors: Optional[Tensor]) -> None:
        """Under the lock, in the generation that reserved the rows: write them, then index their words."""
        assert self.matrix is not None  # the generation's, made when the rows were reserved
        cuda = self.matrix.is_cuda and (markers is not None or vectors is not None)
        if cuda:
            self._after_writes()
        if markers is not None:
            self.matrix[:2] = markers
            for key in _MARKERS:
                del self.pending[key]
        if vectors is not None:
            self.matrix[start : start + len(mine)] = vectors
            for w in mine:
                self.index[w] = self.pending.pop(w)
        if cuda:
            self._wrote()
        if markers is not None or vectors is not None:
            self.written.notify_all()

    def _after_writes(self) -> None:
        """Under the lock, the matrix on CUDA: what the current stream queues next (a read, a write) waits for the
        matrix's writes so far, whichever threads' streams queued them, and the matrix's memory, once dropped,
        waits for this stream's work before it is handed out again (the allocator's own wait is for the stream
        that allocated it alone)."""
        assert self.matrix is not None
        stream = torch.cuda.current_stream(self.matrix.device)
        if self.written_event is not None:
            stream.wait_event(self.written_event)
        self.matrix.record_stream(stream)

    def _wrote(self) -> None:
        """Under the lock, right after a write of the CUDA matrix on the current stream (which waited for the
        earlier ones, :meth:`_after_writes`): the event the next reads and writes wait for."""
        assert self.matrix is not None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.matrix.device))
        self.written_event = event

    @staticmethod
    def _encode(bilm, words: List[str], markers: bool, device: torch.device):
        """The vectors ``(2, P)`` of ``<S>`` and ``</S>`` (None unless ``markers``), and ``(len(words), P)``
        of ``words`` (None for none): the char CNN, run without the lock and without autocast (in the
        weights' dtype, the matrix's: :meth:`vectors` casts what it hands out)."""
        def encode(ids):
            with reference.no_autocast(device.type):
                return bilm.encode_tokens(ids, torch.ones(ids.shape[:2], dtype=torch.bool, device=device))[0]

        return (encode(bilm.marker_ids.unsqueeze(0).to(device)) if markers else None,
                encode(batch_to_ids([words], bilm.config.max_characters_per_token).to(device)) if words else None)

    def _indices(self, rows: List[List[str]], device: torch.device) -> Tensor:
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
    rows = batch_rows(rows, tokens=False)  # read twice below; batch_to_ids or the cache checks the tokens
    if cache is None or cache.capacity == 0 or torch.is_grad_enabled():
        return bilm(batch_to_ids(rows, bilm.config.max_characters_per_token).to(device))
    # On the host, where contextualize checks them and the LSTM reads them: made on a GPU, they cost a
    # blocking copy there and contextualize's copy back (two host syncs a batch).
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    return bilm.contextualize(cache.vectors(bilm, rows, device), lengths)  # (B, T + 2, P) token vectors in
