"""ElmoListener: the proxy through which a downstream component reads the biLM layers.

``List[Doc] -> List[Floats3d (L + 1, n, 2P)]``. In training it returns what
the upstream ``elmo`` component handed over with :meth:`receive` (same batch);
otherwise it reads ``doc._.elmo``. Its backprop returns the gradient of its
output to the upstream (used only when the biLM is fine-tuned); the task's
ScalarMix after it computes its own gradients from the layers it saw, so the
mix trains whichever way the layers arrived.
"""

import sys
import threading
import warnings
from typing import Any, Callable, Iterable, List, Optional, Tuple

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from ..errors import Errors, Warnings
from .callers import called_from
from .doc_data import ELMO_ATTR, aligned_layers


#: attrs key, True once the layers after the listener were sized for its dims (thinc saves it with them)
BUILT_UPON = "built_upon"


class ElmoListener(Model):
    """dims: ``nO`` (2P) and ``nL`` (L + 1), set by the upstream component once it has weights."""

    name = "elmo_listener"

    def __init__(self, upstream_name: str = "*", width: Optional[int] = None) -> None:
        Model.__init__(self, name=self.name, forward=_forward, dims={"nO": width, "nL": None}, init=_init)
        self.upstream_name = upstream_name
        self.upstream: Optional[str] = None  # name of the linked component, set by it
        self.component: Optional[str] = None  # name of the component listening through it, set by the upstream
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None
        self._predicted = _Predicted()
        #: ``id()`` of the upstream component that set its sizes (None: none did, or they were loaded)
        self.sized_by: Optional[int] = None
        self.attrs["width_from_config"] = width

    @property
    def sizes(self) -> Tuple[Optional[int], Optional[int]]:
        """``(nL, nO)``, each None while unset."""
        return self.maybe_get_dim("nL"), self.maybe_get_dim("nO")

    @property
    def built_upon(self) -> bool:
        """Whether the layers after it were sized for its dims (its initialize ran, here or in the pipeline
        its component was saved from): the upstream may no longer give it layers of another shape."""
        return bool(self.attrs.get(BUILT_UPON))

    @classmethod
    def get_batch_id(cls, inputs: Iterable[Doc]) -> int:
        """A content hash of a batch of docs (as spaCy's Tok2VecListener)."""
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop) -> None:
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop

    def receive_predicted(self, batch_id: int, layers: List[Any]) -> None:
        """The layers the upstream stored on a batch of docs at prediction (``doc._.elmo``), kept
        until this listener reads that batch: another elmo component may overwrite ``doc._.elmo``.
        Kept per thread: threads serving one pipeline each run their batch through it (spaCy runs
        a batch's components in the calling thread), and another thread's batch must not replace it."""
        self._predicted.batch = (batch_id, layers)

    def clear(self) -> None:
        self._batch_id, self._outputs, self._backprop, self._predicted = None, None, None, _Predicted()

    def __getstate__(self):
        # What the upstream handed over for one batch (its arrays and a closure over the
        # component) is no model state: pickle the listener without it.
        state = super().__getstate__()
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        attrs = {**attrs, "_batch_id": None, "_outputs": None, "_backprop": None, "_predicted": None}
        return (attrs, slots) if isinstance(state, tuple) else attrs

    def __setstate__(self, state) -> None:
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        self.__dict__.update(attrs, _predicted=_Predicted())
        for key, value in (slots or {}).items():
            setattr(self, key, value)


class _Predicted(threading.local):
    """The upstream's hand-over at prediction, one per thread: ``batch``, ``(batch id, layers)`` or None."""

    batch: Optional[Tuple[int, List[Any]]] = None


def _init(model: ElmoListener, X=None, Y=None) -> None:
    if model.upstream is None:
        raise ValueError(Errors.E_LISTENER_NO_UPSTREAM.format(upstream=model.upstream_name))
    if not model.has_dim("nL"):  # the upstream has no weights yet: the layers after it cannot be sized
        raise ValueError(Errors.E_LISTENER_NO_SIZES.format(upstream=model.upstream, component=model.component))
    # Until the first real batch, docs without ELMo data (initialize's samples) get zeros.
    model.attrs["warming_up"] = True
    model.attrs[BUILT_UPON] = True  # the layers after it are sized from what it gives them now


def _forward(model: ElmoListener, docs: List[Doc], is_train: bool):
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        if batch_id == model._batch_id:
            model.attrs["warming_up"] = False
            return model._outputs, model._backprop
    if model.upstream is None:
        raise ValueError(Errors.E_LISTENER_NO_UPSTREAM.format(upstream=model.upstream_name))
    outputs = []
    nL, nO = model.get_dim("nL"), model.get_dim("nO")
    predicted = _take_predicted(model, docs)
    for i, doc in enumerate(docs):
        if predicted is not None:
            data = predicted[i]
        else:
            data = aligned_layers(doc) if Doc.has_extension(ELMO_ATTR) else None
        if data is not None and data.ndim == 3 and data.shape[0::2] != (nL, nO):
            raise ValueError(
                Errors.E_LISTENER_OTHER_DATA.format(
                    component=model.component, upstream=model.upstream, shape=data.shape, nL=nL, nO=nO
                )
            )
        if data is not None and data.ndim == 3:
            outputs.append(model.ops.asarray3f(data.astype("float32")))
            model.attrs["warming_up"] = False
        elif len(doc) == 0:
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        elif is_train and _in_rehearse():
            raise ValueError(Errors.E_LISTENER_REHEARSE.format(upstream=model.upstream, component=model.component))
        elif is_train and model._batch_id is not None:
            raise ValueError(
                Errors.E_LISTENER_BATCH.format(
                    found=model.get_batch_id(docs), expected=model._batch_id, upstream=model.upstream,
                    component=model.component,
                )
            )
        elif model.attrs.get("warming_up", False):
            if is_train:  # spacy debug model updates a component alone; in spacy train it is a mistake
                warnings.warn(
                    Warnings.W_LISTENER_ZEROS.format(upstream=model.upstream, component=model.component),
                    UserWarning,
                    stacklevel=2,
                )
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        elif is_train:
            raise ValueError(Errors.E_LISTENER_NOT_FED.format(upstream=model.upstream, component=model.component))
        else:
            raise ValueError(Errors.E_LISTENER_NO_DATA.format(upstream=model.upstream, component=model.component))
    return outputs, _no_grad


def _in_rehearse() -> bool:
    """Whether spaCy's ``Language.rehearse`` runs this forward pass (looked up the stack on a path that
    fails anyway): it feeds no listener, so a listening component cannot rehearse."""
    return called_from(sys._getframe(1), "spacy.language", "rehearse")


def _take_predicted(model: ElmoListener, docs: List[Doc]) -> Optional[List[Any]]:
    """The upstream's stored layers of this very batch (its last prediction), once; else None."""
    if model._predicted.batch is None:
        return None
    batch_id, layers = model._predicted.batch
    if batch_id != model.get_batch_id(docs) or [x.shape[-2] for x in layers] != [len(doc) for doc in docs]:
        return None
    model._predicted.batch = None
    return layers


def _no_grad(d_outputs) -> List[Doc]:  # module level: picklable
    return []
