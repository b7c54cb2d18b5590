"""A cache of the biLM's output layers per row (a sentence or window), keyed by the row's words.

While ``spacy train`` runs with a frozen biLM, every epoch runs the biLM on the same training
sentences and every evaluation on the same dev sentences: with a limit > 0 (the ``elmo``
component's ``layer_cache_mb``, set by its ``initialize`` from ``[initialize.components.elmo]``,
so a pipeline loaded for inference starts without it) the ``elmo`` model keeps each row's
``(L + 1, n, 2P)`` layers (the float32 arrays its listeners read, on the model's device) and runs
the biLM only on rows it has not seen. A row's layers depend only on its words (each row is run on
its own, wrapped in ``<S> ... </S>``), not on the other rows of its batch, up to float32 rounding.

Only for a biLM that does not train: the entries are stale once the weights change, so the
model's owner empties it whenever they are set or stepped (:meth:`ElmoRunner.clear_caches`), and the
runner whenever they move to another device or dtype (``runner.to()``, ``.double()``; thinc's
``model.to_cpu()`` -> ``runner.cpu()``, and its ``model.to_gpu(i)`` -> ``runner.cuda(0)``: thinc 8.3 passes
the device id of its ``CupyOps()``, 0, whatever ``i``). Each emptying starts a new :attr:`~LayerCache.generation`:
a call reads it before it runs the biLM and reads and keeps layers only in that generation, so a call whose
biLM run overlapped a change of the weights (another thread's ``load_weights``, a move, training's averaged
weights put in and back) neither reads the entries of the new weights nor leaves its own in the emptied
cache (a change then an emptying: a call's layers are either emptied with the old entries or refused).
Not part of any saved or pickled state, and not copied (a copy starts empty); a forked child starts
it empty, with a new lock. No spaCy import.
"""

import threading
from collections import OrderedDict
from typing import Any, Hashable, Optional

from ..forksafe import after_fork_in_child

MB = 1 << 20


class LayerCache:
    """Row key -> array, least recently used evicted first once the arrays hold more than
    ``limit_mb`` MB (``nbytes``); an array larger than the whole limit is not stored. 0 = off.
    Safe for several threads at once (a served pipeline's ``nlp(text)`` calls): a lock covers the
    entries, their order, the byte count and the :attr:`generation` they are of."""

    #: bumped by every emptying (:meth:`clear`): a caller reads it before it makes the layers it puts, and
    #: passes it to :meth:`get` and :meth:`put`, which refuse another generation's (the weights changed meanwhile)
    generation: int = 0

    def __init__(self, limit_mb: int = 0) -> None:
        self.limit = max(int(limit_mb), 0) * MB
        self._start_over()
        after_fork_in_child(self._start_over)

    def _start_over(self) -> None:
        """A new lock, no entries: at the start and in a forked child (whose copy of the lock another
        thread of the parent may hold, and of the entries be half-way through changing)."""
        self.lock = threading.Lock()
        self._drop()

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        with self.lock:
            self._drop()

    def _drop(self) -> None:  # under the lock
        self.entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self.nbytes = 0
        self.generation += 1

    def _current(self, generation: Optional[int]) -> bool:  # under the lock
        return generation is None or generation == self.generation

    def set_limit(self, limit_mb: int) -> None:
        """A new limit (MB, 0 = off): the least recently used entries over it are dropped."""
        with self.lock:
            self.limit = max(int(limit_mb), 0) * MB
            self._evict(0)

    def get(self, key: Hashable, generation: Optional[int] = None) -> Optional[Any]:
        """The layers of ``key``, if kept, and ``generation`` is still the current one (None: the current one)."""
        with self.lock:
            if not self._current(generation):
                return None
            array = self.entries.get(key)
            if array is not None:
                self.entries.move_to_end(key)
            return array

    def put(self, key: Hashable, array: Any, generation: Optional[int] = None) -> None:
        """Keep the layers of ``key``, made in ``generation`` (None: the current one): not if the cache was emptied
        since (they may be of the weights before a change), nor if they are larger than the whole limit."""
        size = int(array.nbytes)
        with self.lock:
            if size > self.limit or not self._current(generation):
                return
            if key in self.entries:
                return
            self._evict(size)
            self.entries[key] = array
            self.nbytes += size

    def _evict(self, room: int) -> None:
        """Drop the least recently used entries until ``room`` more bytes fit under the limit (under the lock)."""
        while self.entries and self.nbytes + room > self.limit:
            _, old = self.entries.popitem(last=False)
            self.nbytes -= int(old.nbytes)

    # never saved, pickled or copied with its contents (nor its lock, which does not pickle)
    def __getstate__(self):
        return {"limit": self.limit}

    def __setstate__(self, state) -> None:
        type(self).__init__(self)
        self.limit = state["limit"]

    def __deepcopy__(self, memo) -> "LayerCache":
        copied = LayerCache()
        copied.limit = self.limit
        return copied
