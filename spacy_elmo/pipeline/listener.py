"""ElmoListener: the proxy through which a downstream component reads the biLM layers.

``List[Doc] -> List[Floats3d (L + 1, n, 2P)]``. In training it returns what
the upstream ``elmo`` component handed over with :meth:`receive` (same batch);
otherwise it reads ``doc._.elmo``. Its backprop returns the gradient of its
output to the upstream (used only when the biLM is fine-tuned); the task's
ScalarMix after it computes its own gradients from the layers it saw, so the
mix trains whichever way the layers arrived.
"""

from typing import Iterable, List, Optional

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from ..errors import Errors
from .doc_data import ELMO_ATTR, aligned_layers


class ElmoListener(Model):
    """dims: ``nO`` (2P) and ``nL`` (L + 1), set by the upstream component once it has weights."""

    name = "elmo_listener"

    def __init__(self, upstream_name: str = "*", width: Optional[int] = None) -> None:
        Model.__init__(self, name=self.name, forward=_forward, dims={"nO": width, "nL": None}, init=_init)
        self.upstream_name = upstream_name
        self.upstream: Optional[str] = None  # name of the linked component, set by it
        self.component: Optional[str] = None  # name of the component listening through it, set by the upstream
        self._batch_id: Optional[int] = None
        self._outputs = None
        self._backprop = None
        self.attrs["width_from_config"] = width

    @classmethod
    def get_batch_id(cls, inputs: Iterable[Doc]) -> int:
        """A content hash of a batch of docs (as spaCy's Tok2VecListener)."""
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop) -> None:
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop

    def clear(self) -> None:
        self._batch_id, self._outputs, self._backprop = None, None, None


def _init(model: ElmoListener, X=None, Y=None) -> None:
    if model.upstream is None:
        raise ValueError(Errors.E_LISTENER_NO_UPSTREAM.format(upstream=model.upstream_name))
    # Until the first real batch, docs without ELMo data (initialize's samples) get zeros.
    model.attrs["warming_up"] = True


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
    for doc in docs:
        data = aligned_layers(doc) if Doc.has_extension(ELMO_ATTR) else None
        if data is not None and data.ndim == 3:
            outputs.append(model.ops.asarray3f(data.astype("float32")))
            model.attrs["warming_up"] = False
        elif len(doc) == 0:
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        elif is_train and model._batch_id is not None:
            raise ValueError(
                Errors.E_LISTENER_BATCH.format(
                    found=model.get_batch_id(docs), expected=model._batch_id, upstream=model.upstream,
                    component=model.component,
                )
            )
        elif model.attrs.get("warming_up", False):
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        else:
            raise ValueError(Errors.E_LISTENER_NO_DATA.format(upstream=model.upstream, component=model.component))
    return outputs, _no_grad


def _no_grad(d_outputs) -> List[Doc]:  # module level: picklable
    return []
