"""ElmoRunner: the torch module behind the ``elmo`` component (no spaCy import).

It holds the :class:`~spacy_elmo.BiLM` (set once weights are loaded), a
cache of context-independent token vectors keyed by token text and the
``elmo`` model's cache of output layers per row (:mod:`.layer_cache`, filled
by ``bilm_layer._forward``; off until the component's ``layer_cache_mb`` sets a limit). The caches are plain attributes, never buffers,
so they are not part of any serialized state.
"""

import itertools
import multiprocessing
import weakref
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..bilm import BiLM
from ..bilm.token_cache import TokenCache, run_rows
from ..forksafe import after_fork_in_child
from .layer_cache import LayerCache


def _single_thread_after_fork() -> None:
    # OpenMP's thread pool does not survive fork(): a forked worker of
    # nlp.pipe(n_process=N) that enters a parallel region hangs. One intra-op
    # thread per worker is also what N processes on N cores want.
    torch.set_num_threads(1)


after_fork_in_child(_single_thread_after_fork)


def _single_thread_in_child_process() -> None:
    # A spawned (or forkserver) worker of nlp.pipe(n_process=N) unpickles the component and starts
    # with torch's default of one thread per core: N such workers oversubscribe the cores. One
    # thread, as in a forked worker.
    # (while a spawned child unpickles its target's arguments, parent_process() is still None)
    if multiprocessing.parent_process() is not None or multiprocessing.current_process().name != "MainProcess":
        torch.set_num_threads(1)


#: what the source of weights that training stepped ends with, after where they came from ("default, fine-tuned"):
#: no path names them any more (:func:`fine_tuned`)
FINE_TUNED = ", fine-tuned"


def fine_tuned(source: str) -> bool:
    """Whether weights recorded as ``source`` (:attr:`ElmoRunner.source`) were stepped by training since they were
    loaded from where it names: saved pipelines keep the mark (those saved before it was kept have none)."""
    return source.endswith(FINE_TUNED)


def trains(bilm: Optional[BiLM]) -> bool:
    """Whether any weight of ``bilm`` requires a gradient (fine-tuning)."""
    return bilm is not None and any(p.requires_grad for p in bilm.parameters())


class ElmoRunner(nn.Module):
    """Runs the biLM on token-text rows; the output is stacked layers.

    forward(rows) -> Tensor ``(L + 1, B, T, 2P)`` (zeros at padding), where
    ``rows`` is a list of ``B`` token-text lists of max length ``T``.
    Without gradients (frozen biLM, inference) the char-CNN outputs come from
    the token cache; with gradients the whole biLM runs (fine-tuning).
    """

    backend_name: str  # set by bilm_layer.build_elmo_bilm
    source: str  # where the weights came from, set with them (bilm_layer.set_bilm); FINE_TUNED once stepped
    #: the biLM's owner, for its messages (``bilm_layer.name_owner``; read with :meth:`owner_names`): a weak
    #: reference to the component whose model it is (its name read when a message is given, so that it follows
    #: ``nlp.rename_pipe`` and ``add_pipe(source=, name=)``), else ``(component, config block)``; None: unknown.
    #: Class-level defaults: a runner unpickled from an older version has neither attribute.
    owner: Optional[Union["weakref.ReferenceType[Any]", Tuple[str, Optional[str]]]] = None
    #: whether W_ELMO_SENTENCE_OVER_WINDOW was given for this biLM: once per biLM, carried by a copy of it
    #: (``model.copy()``, pickling); the copy that ``nlp.replace_listeners`` makes warns afresh
    warned_long_sentence: bool = False

    def __init__(self, cache_size: int = 50000) -> None:
        super().__init__()
        self.bilm: Optional[BiLM] = None
        self.cache = TokenCache(cache_size)
        self.layer_cache = LayerCache()

    def owner_names(self) -> Optional[Tuple[str, Optional[str]]]:
        """``(component, config block)`` of the biLM's owner now (:attr:`owner`); None: unknown (or gone)."""
        owner = self.owner
        if isinstance(owner, weakref.ReferenceType):
            pipe = owner()
            return None if pipe is None else (pipe.name, f"components.{pipe.name}.model")
        return owner

    def __getstate__(self) -> Any:  # pickled or deep-copied: a weak reference does not pickle; keep the name now
        state = super().__getstate__()
        if isinstance(state.get("owner"), weakref.ReferenceType):
            state = {**state, "owner": self.owner_names()}
        return state

    def __setstate__(self, state) -> None:  # unpickled: maybe in a spawned worker
        super().__setstate__(state)
        _single_thread_in_child_process()

    def set_bilm(self, bilm: Optional[BiLM]) -> None:  # None: back to no weights (a load put back)
        # The biLM, the layer cache's generation and the token cache change together, under the layer cache's lock,
        # under which bilm_layer._forward reads the first two: set in turn, a call starting in between read the old
        # generation with the new biLM, and read (or put) the old biLM's layers there; or, the token cache emptied
        # after the lock, read the new generation and the token cache's char vectors of the weights before (the
        # same biLM edited through .data, which its weights key cannot see), and kept layers made of them in the
        # new generation. One emptying each: one new generation. Lock order: the layer cache's, then the token
        # cache's (the token cache takes no other lock; nothing takes the layer cache's while holding it).
        with self.layer_cache.lock:
            self.bilm = bilm
            self.layer_cache._drop()
            self.cache.clear()

    def mark_fine_tuned(self) -> None:
        """Record that training stepped the weights (:data:`FINE_TUNED`): they are no longer those of their source."""
        source = getattr(self, "source", "")
        if not fine_tuned(source):
            self.source = (source or "unknown") + FINE_TUNED

    def clear_caches(self) -> None:
        """Empty the token and layer caches: call it whenever the weights change."""
        self.cache.clear()
        self.layer_cache.clear()

    def _placement(self) -> Tuple[Tuple[torch.device, torch.dtype], ...]:
        """The device and dtype of every weight and buffer (the biLM's): what the caches' entries were made on."""
        return tuple((t.device, t.dtype) for t in itertools.chain(self.parameters(), self.buffers()))

    def _apply(self, fn: Any, recurse: bool = True) -> "ElmoRunner":
        """Every move or cast of the module (``.to()``, ``.cpu()``, ``.cuda(i)``, ``.half()``) goes through here,
        thinc's too: ``model.to_cpu()`` -> ``PyTorchShim.to_device`` -> ``runner.cpu()``, and ``model.to_gpu(i)`` ->
        ``runner.cuda(0)`` (thinc 8.3 passes the device id of its ``CupyOps()``, 0 whatever ``i``; the weights go to
        torch's GPU 0). It moves the biLM in place, the same object, so the layer cache (whose entries are arrays of
        the old device) and the token cache (a matrix on the old device) are emptied when a weight's device or dtype
        changed, also when the move fails part way (an out-of-memory error in ``.cuda()``: some weights moved): a
        cupy entry put into the numpy outputs of a model moved to the CPU was a TypeError, one of another GPU a
        copy across devices. Emptying starts a new generation of the layer cache: a call whose biLM run overlapped
        the move keeps none of its layers (:mod:`.layer_cache`)."""
        before = self._placement()
        try:
            return super()._apply(fn, recurse)
        finally:
            if self._placement() != before:
                self.clear_caches()

    def forward(self, rows: Sequence[Sequence[str]], bilm: Optional[BiLM] = None) -> Tensor:
        """``bilm``: the biLM to run, taken once for a whole call (:func:`.bilm_layer._forward`): one
        whose weights another thread replaced meanwhile; None = the current one."""
        bilm = self.bilm if bilm is None else bilm
        assert bilm is not None, "ElmoRunner.forward before set_bilm"
        return torch.stack(run_rows(bilm, rows, self.cache).activations)

