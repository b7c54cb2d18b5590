"""A cache of the biLM's output layers per row (a sentence or window), keyed by the row's words.

While ``spacy train`` runs with a frozen biLM, every epoch runs the biLM on the same training
sentences and every evaluation on the same dev sentences: with a limit > 0 (the ``elmo``
component's ``layer_cache_mb``, set by its ``initialize`` from ``[initialize.components.elmo]``,
so a pipeline loaded for inference starts without it) the ``elmo`` model keeps each row's
``(L + 1, n, 2P)`` layers (the float32 arrays its listeners read, on the model's device) and runs
the biLM only on rows it has not seen. A row's layers depend only on its words (each row is run on
its own, wrapped in ``<S> ... </S>``), not on the other rows of its batch, up to float32 rounding.

Only for a biLM that does not train: the entries are stale once the weights change, so the
model's owner empties it whenever they are set or stepped (:meth:`ElmoRunner.clear_caches`), the
runner whenever they move to another device or dtype (thinc's ``model.to_cpu()``, ``to_gpu(i)``), and
the entries are of one biLM object: a call that still runs the biLM whose weights another thread
replaced (and emptied the cache) neither reads the new biLM's entries nor leaves its own for it.
Not part of any saved or pickled state, and not copied (a copy starts empty); a forked child starts
it empty, with a new lock. No spaCy import.
"""

import threading
import weakref
from collections import OrderedDict
from typing import Any, Hashable, Optional

from ..forksafe import after_fork_in_child

MB = 1 << 20


class LayerCache:
    """Row key -> array, least recently used evicted first once the arrays hold more than
    ``limit_mb`` MB (``nbytes``); an array larger than the whole limit is not stored. 0 = off.
    Safe for several threads at once (a served pipeline's ``nlp(text)`` calls): a lock covers the
    entries, their order, the byte count and the biLM whose layers they are (``owner``)."""

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

    def _drop(self, owner: Any = None) -> None:  # under the lock
        self.entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self.nbytes = 0
        self.owner = None if owner is None else weakref.ref(owner)

    def _owned_by(self, owner: Any) -> bool:  # under the lock
        return (None if self.owner is None else self.owner()) is owner

    def set_limit(self, limit_mb: int) -> None:
        """A new limit (MB, 0 = off): the least recently used entries over it are dropped."""
        with self.lock:
            self.limit = max(int(limit_mb), 0) * MB
            self._evict(0)

    def get(self, key: Hashable, owner: Any = None) -> Optional[Any]:
        """The layers of ``key`` that the biLM ``owner`` gave (None: no biLM's), if kept."""
        with self.lock:
            if not self._owned_by(owner):
                return None
            array = self.entries.get(key)
            if array is not None:
                self.entries.move_to_end(key)
            return array

    def put(self, key: Hashable, array: Any, owner: Any = None) -> None:
        """Keep the layers of ``key`` that the biLM ``owner`` gave (None: no biLM's): those of another go first."""
        size = int(array.nbytes)
        with self.lock:
            if size > self.limit:  # kept by no biLM: the entries of the one owning the cache stay
                return
            if not self._owned_by(owner):
                self._drop(owner)
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

    # never saved, pickled or copied with its contents (nor its lock, which does not pickle, nor its owner)
    def __getstate__(self):
        return {"limit": self.limit}

    def __setstate__(self, state) -> None:
        type(self).__init__(self)
        self.limit = state["limit"]

    def __deepcopy__(self, memo) -> "LayerCache":
        copied = LayerCache()
        copied.limit = self.limit
        return copied
