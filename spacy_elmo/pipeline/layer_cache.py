"""A cache of the biLM's output layers per row (a sentence or window), keyed by the row's words.

While ``spacy train`` runs with a frozen biLM, every epoch runs the biLM on the same training
sentences and every evaluation on the same dev sentences: with a limit > 0 (the ``elmo``
component's ``layer_cache_mb``, set by its ``initialize`` from ``[initialize.components.elmo]``,
so a pipeline loaded for inference starts without it) the ``elmo`` model keeps each row's
``(L + 1, n, 2P)`` layers (the float32 arrays its listeners read, on the model's device) and runs
the biLM only on rows it has not seen. A row's layers depend only on its words (each row is run on
its own, wrapped in ``<S> ... </S>``), not on the other rows of its batch, up to float32 rounding.

Only for a biLM that does not train: the entries are stale once the weights change, so the
model's owner empties it whenever they are set or stepped (:meth:`ElmoRunner.clear_caches`).
Not part of any saved or pickled state, and not copied (a copy starts empty). No spaCy import.
"""

import threading
from collections import OrderedDict
from typing import Any, Hashable, Optional

MB = 1 << 20


class LayerCache:
    """Row key -> array, least recently used evicted first once the arrays hold more than
    ``limit_mb`` MB (``nbytes``); an array larger than the whole limit is not stored. 0 = off.
    Safe for several threads at once (a served pipeline's ``nlp(text)`` calls): a lock covers the
    entries, their order and the byte count."""

    def __init__(self, limit_mb: int = 0) -> None:
        self.limit = max(int(limit_mb), 0) * MB
        self.lock = threading.Lock()
        self.entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        with self.lock:
            self.entries = OrderedDict()
            self.nbytes = 0

    def set_limit(self, limit_mb: int) -> None:
        """A new limit (MB, 0 = off): the least recently used entries over it are dropped."""
        with self.lock:
            self.limit = max(int(limit_mb), 0) * MB
            self._evict(0)

    def get(self, key: Hashable) -> Optional[Any]:
        with self.lock:
            array = self.entries.get(key)
            if array is not None:
                self.entries.move_to_end(key)
            return array

    def put(self, key: Hashable, array: Any) -> None:
        size = int(array.nbytes)
        with self.lock:
            if size > self.limit or key in self.entries:
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
