"""ElmoListener: the proxy through which a downstream component reads the biLM layers.

``List[Doc] -> List[Floats3d (L + 1, n, 2P)]``. In training it returns what
the upstream ``elmo`` component handed over with :meth:`receive` (same batch; the
same docs retokenized since get it aligned to their current tokens);
otherwise, per doc, the float32 layers the upstream computed for that doc (handed
over with :meth:`receive_predicted`, before ``store_dtype`` rounds the copy it
stores: predictions read what training read; another elmo component may have
overwritten ``doc._.elmo`` since), else ``doc._.elmo``, else the layers that doc got in the
last training batch (an annotating listening component predicts on the docs it
just trained on, which an upstream not listed as annotating left bare). Its
backprop returns the gradient of its output to the upstream (used only when the biLM is fine-tuned); the task's
ScalarMix after it computes its own gradients from the layers it saw, so the
mix trains whichever way the layers arrived.
"""

import copy
import functools
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, cast

import numpy
from spacy.attrs import IDX
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from ..errors import Errors, Warnings
from .callers import called_from, runs, user_stacklevel
from .doc_data import ELMO_ATTR, aligned_layers, mean_rows, mean_rows_grad, source_rows


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
        #: doc of the last received batch -> its place there, layers and token offsets, by the doc itself
        #: (weakly), replaced with the batch
        self._trained: "weakref.WeakKeyDictionary[Doc, _Received]" = weakref.WeakKeyDictionary()
        self._predicted = _Predicted()
        #: ``id()`` of the upstream component that set its sizes (None: none did, or they were loaded)
        self.sized_by: Optional[int] = None
        #: made by :meth:`_copy` and not linked since (an elmo component's ``add_listener`` clears it)
        self.copied = False
        self.attrs["width_from_config"] = width

    @property
    def sizes(self) -> Tuple[Optional[int], Optional[int]]:
        """``(nL, nO)``, each None while unset."""
        return self.maybe_get_dim("nL"), self.maybe_get_dim("nO")

    @property
    def built_upon(self) -> bool:
        """Whether the layers after it were sized for its dims (its initialize ran, here or in the pipeline
        its component was saved from): the upstream may no longer give it layers of another shape."""
        # _init's "warming_up", saved with the model since the first release: pipelines saved before this
        # check existed carry it too, and a listener never initialized (added, or sourced so) has none
        return "warming_up" in self.attrs

    @classmethod
    def get_batch_id(cls, inputs: Iterable[Doc]) -> int:
        """A content hash of a batch of docs (as spaCy's Tok2VecListener)."""
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop, docs: Sequence[Doc]) -> None:
        """The upstream's layers of a training batch (``outputs[i]``: ``docs[i]``'s) and their backprop. Also kept
        per doc until the next batch, with its tokens' character offsets: spaCy's ``Language.update`` has an
        annotating listening component predict on these same docs after its update, which the upstream
        annotates only when it is annotating too, and an annotating component between the upstream and this
        listener's (``merge_entities``, ``doc.retokenize()``) may retokenize them first."""
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop
        self._trained = weakref.WeakKeyDictionary(
            (doc, _Received(i, layers, doc.to_array(IDX).astype("int64")))
            for i, (doc, layers) in enumerate(zip(docs, outputs))
        )

    def receive_predicted(self, docs: Sequence[Doc], handed: Sequence[Tuple[Any, Any]]) -> None:
        """The upstream's layers of each doc at prediction (``(layers, doc._.elmo_idx)``: its float32
        ``(L + 1, n, 2P)`` layers, as a training batch hands them over, not ``doc._.elmo`` rounded to its
        ``store_dtype``, and their tokens' character offsets), kept per doc until this listener reads that
        doc at prediction: another elmo component may overwrite ``doc._.elmo`` meanwhile. Per doc, not per batch: the listening component may batch the docs
        otherwise (spaCy's parser and ner sort a batch by length into smaller ones; a component's own
        ``batch_size``), and threads serving one pipeline each hand over their own docs."""
        self._predicted.put(docs, handed)

    def clear(self) -> None:
        self._batch_id, self._outputs, self._backprop, self._predicted = None, None, None, _Predicted()
        self._trained = weakref.WeakKeyDictionary()

    def _copy(self, seen: Optional[dict] = None) -> "ElmoListener":
        """thinc's ``Model.copy`` of this listener or of a model holding it (``nlp.replace_listeners`` copies
        a listening ``tok2vec`` component's model, e.g. ``ElmoTok2Vec.v1``, into each component listening to
        that one): thinc's own builds a plain ``Model``, which no elmo component links and whose forward
        fails on the missing listener state. An ElmoListener with the same settings, sizes and attrs (built
        upon or not), as spaCy builds from the config when it loads the pipeline: linked, as that one, by the
        pipeline it runs in (``nlp.add_pipe``, loading, ``nlp.initialize``), nothing received."""
        copied = ElmoListener(self.upstream_name)
        copied._dims = dict(self._dims)  # ints or None
        copied._attrs = copy.deepcopy(self._attrs)
        copied.sized_by = self.sized_by
        copied.copied = True
        return copied

    def __getstate__(self):
        # What the upstream handed over for one batch (its arrays and a closure over the
        # component) is no model state: pickle the listener without it.
        state = super().__getstate__()
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        attrs = {**attrs, "_batch_id": None, "_outputs": None, "_backprop": None, "_predicted": None,
                 "_trained": None}
        return (attrs, slots) if isinstance(state, tuple) else attrs

    def __setstate__(self, state) -> None:
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        self.__dict__.update(attrs, _predicted=_Predicted(), _trained=weakref.WeakKeyDictionary())
        for key, value in (slots or {}).items():
            setattr(self, key, value)


class _Received(NamedTuple):
    """A doc's part of the last training batch: its place in the batch, its layers ``(L + 1, n, 2P)`` and the
    character offsets ``(n,)`` int64 of the tokens they were computed for."""

    place: int
    layers: Floats3d
    starts: numpy.ndarray


class _Predicted:
    """The upstream's hand-over at prediction: ``doc -> (layers, doc._.elmo_idx)`` (float32 layers),
    keyed by the doc itself through a weak reference, so an entry goes with its doc (never keeps it alive)."""

    def __init__(self) -> None:
        self._by_doc: "weakref.WeakKeyDictionary[Doc, Tuple[Any, Any]]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # threads serving one pipeline hand over and read at once

    def put(self, docs: Sequence[Doc], handed: Sequence[Tuple[Any, Any]]) -> None:
        with self._lock:
            self._by_doc.update(zip(docs, handed))

    def take(self, doc: Doc, keep: bool) -> Optional[Tuple[Any, Any]]:
        """The doc's entry (None: none), removed unless ``keep``."""
        with self._lock:
            return self._by_doc.get(doc) if keep else self._by_doc.pop(doc, None)

    def __len__(self) -> int:
        return len(self._by_doc)


def _init(model: ElmoListener, X=None, Y=None) -> None:
    if model.upstream is None:
        raise ValueError(_no_upstream(model))
    if not model.has_dim("nL"):  # the upstream has no weights yet: the layers after it cannot be sized
        raise ValueError(_no_sizes(model))
    # Until the first real batch, docs without ELMo data get zeros while a model initializes (its samples) and in
    # spacy debug model (see _initializing); elsewhere, in training or at prediction, they are an error.
    model.attrs["warming_up"] = True  # also marks it built upon: the layers after it are sized from it now


def _no_sizes(model: ElmoListener) -> str:
    """The error for a listener initialized before its upstream has weights, one of:

    - :attr:`Errors.E_LISTENER_NO_SIZES_FROZEN_AND_DISABLED`: the upstream in both spacy train's [training]
      frozen_components and its [nlp] disabled (one run names both fixes: the frozen message alone left the other
      for the next run);
    - :attr:`Errors.E_LISTENER_NO_SIZES_DISABLED_CONFIG`: spacy train's ``init_nlp`` initializing with the upstream
      in its config's [nlp] disabled (``--nlp.disabled``);
    - :attr:`Errors.E_LISTENER_NO_SIZES_DISABLED`: the pipeline initializing it has the upstream disabled otherwise
      (``nlp.select_pipes``, ``nlp.disable_pipe``: ``nlp.initialize`` skips it);
    - :attr:`Errors.E_LISTENER_NO_SIZES` else: the upstream after it, or in frozen_components (spaCy's ``init_nlp``
      disables those while it initializes)."""
    nlp = running_pipeline(model)
    init_nlp = _init_nlp_locals()
    frozen = model.upstream in tuple(init_nlp.get("frozen_components") or ())
    config_disabled = model.upstream in _config_disabled(init_nlp.get("config"))
    if frozen and config_disabled:
        message = Errors.E_LISTENER_NO_SIZES_FROZEN_AND_DISABLED
    elif nlp is not None and model.upstream in nlp.disabled and not frozen:
        message = Errors.E_LISTENER_NO_SIZES_DISABLED_CONFIG if config_disabled else Errors.E_LISTENER_NO_SIZES_DISABLED
    else:
        message = Errors.E_LISTENER_NO_SIZES
    return message.format(upstream=model.upstream, component=model.component)


def _init_nlp_locals() -> Dict[str, Any]:
    """The local variables of the spaCy ``init_nlp`` (``spacy train``) running this call (its
    ``frozen_components``, its interpolated ``config``), read from its frame; empty where none runs."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if runs(frame, "spacy.training.initialize", "init_nlp"):
            return dict(frame.f_locals)
        frame = frame.f_back
    return {}


def _config_disabled(config: Any) -> Tuple[str, ...]:
    """A training config's [nlp] disabled (empty where it has none, or ``config`` is none)."""
    try:
        return tuple(config["nlp"]["disabled"] or ())
    except (KeyError, TypeError):
        return ()


def _no_upstream(model: ElmoListener) -> str:
    """:attr:`Errors.E_LISTENER_NO_UPSTREAM` for a listener that no elmo component linked, with the
    ``replace_listeners`` call that gives its component its own biLM (its name and the listener's path
    when spaCy's frames tell them)."""
    star = model.upstream_name == "*"
    named = "" if star else f" named {model.upstream_name!r}"
    component, path = _run_by(model)
    if getattr(model, "copied", False):  # getattr: a listener pickled before copies were ElmoListeners has none
        return Errors.E_LISTENER_COPY_UNLINKED.format(component=repr(component) if component else "a component")
    elmo, quoted = "ELMO" if star else repr(model.upstream_name), repr(component) if component else "COMPONENT"
    replace = _replace_call(elmo, quoted, path)
    return Errors.E_LISTENER_NO_UPSTREAM.format(upstream=model.upstream_name, named=named, component=quoted, replace=replace)


def _replace_call(elmo: str, component: str, path: Optional[str]) -> str:
    """The ``nlp.replace_listeners`` call (``elmo``, ``component``: as written in it) that gives the component its
    own biLM; both usual listener paths where ``path`` (the listener's) is not known."""
    if path is None:
        return Errors.E_LISTENER_REPLACE_CALLS.format(elmo=elmo, component=component)
    return Errors.E_LISTENER_REPLACE_CALL.format(elmo=elmo, component=component, path=path)


def _upstream_not_running(model: ElmoListener) -> Optional[str]:
    """The error for a listener whose linked elmo component (``model.upstream``: :func:`_forward` asks only a linked
    listener) does not run in the pipeline running ``model`` (spaCy's frames: a ``Language`` ``self`` whose components
    hold it): :attr:`Errors.E_LISTENER_UPSTREAM_DISABLED` when it is disabled there (``nlp.select_pipes``,
    ``nlp.disable_pipe``, ``spacy.load(disable=...)``), :attr:`Errors.E_LISTENER_UPSTREAM_REMOVED` when it is no
    longer among its components (``nlp.remove_pipe``). spaCy relinks at neither, so the listener stays linked to a
    component that no longer runs. None otherwise (no pipeline found: the listener called on its own). Looked up on
    error paths only."""
    nlp = running_pipeline(model)
    if nlp is None or model.upstream is None:
        return None
    if model.upstream in nlp.disabled:
        return _upstream_error(model, Errors.E_LISTENER_UPSTREAM_DISABLED, model.upstream)
    if model.upstream not in nlp.component_names:
        return _upstream_error(model, Errors.E_LISTENER_UPSTREAM_REMOVED, model.upstream)
    return None


def _upstream_error(model: ElmoListener, message: str, upstream: str) -> str:
    """``message`` (:func:`_upstream_not_running`'s) for ``upstream``, with the ``replace_listeners`` call that lets
    the listening component run without it."""
    quoted, replace = _replace_for(model, upstream)
    return message.format(upstream=upstream, component=quoted, replace=replace)


def _replace_for(model: ElmoListener, upstream: Optional[str]) -> Tuple[str, str]:
    """``(component, call)``: the name of the component listening through ``model`` as a message quotes it
    (``'ner'``; ``COMPONENT`` where not known) and the ``nlp.replace_listeners`` call that gives it its own copy of
    ``upstream``'s biLM, with the listener's path where spaCy's frames tell it (``model.tok2vec.elmo`` in the shipped
    configs), both usual paths otherwise (:func:`_replace_call`). Looked up on error paths only."""
    component, path = _run_by(model)
    quoted = repr(component) if component else "COMPONENT"
    return quoted, _replace_call(repr(upstream), quoted, path)


def running_pipeline(model: Model) -> Optional[Language]:
    """The pipeline (a ``Language`` ``self`` of a spaCy frame: ``nlp(text)``, ``nlp.pipe``, ``nlp.update``,
    ``nlp.from_disk``) running the component whose model holds ``model`` (a listener, or a component's own model),
    read from the frames; None where none does."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        nlp = frame.f_locals.get("self")
        models = [getattr(proc, "model", None) for _, proc in nlp.components] if isinstance(nlp, Language) else []
        if any(isinstance(held, Model) and any(node is model for node in held.walk()) for held in models):
            return nlp
        frame = frame.f_back
    return None


def _run_by(model: ElmoListener) -> Tuple[Optional[str], Optional[str]]:
    """``(component, listener path)`` of the pipeline component whose model holds ``model``, read from the spaCy
    frames running it: the component's (locals ``name`` and ``proc``: ``Language.__call__``, ``initialize``,
    ``update``, or ``spacy.util._pipe`` under ``nlp.pipe``), then the pipeline's (a ``Language`` ``self``, for its
    config); the path is the one ``nlp.replace_listeners`` takes. Where no frame runs a component holding ``model``
    (spaCy's ``rehearse`` runs a copy of the component's model), the component the upstream linked it to
    (``model.component``) and its path in the nearest pipeline that has it. Either is None where not found."""
    frame: Any = sys._getframe(1)
    component: Optional[str] = None
    nearest: Optional[Language] = None  # the nearest pipeline on the stack
    while frame is not None:
        names = frame.f_locals
        if component is None and frame.f_globals.get("__name__") in _SPACY_RUNNERS and isinstance(names.get("name"), str):
            proc_model = getattr(names.get("proc"), "model", None)
            if isinstance(proc_model, Model) and any(node is model for node in proc_model.walk()):
                component = names["name"]
        if isinstance(names.get("self"), Language):
            if component is not None:
                return component, _listener_path(names["self"], component)
            nearest = nearest or names["self"]
        frame = frame.f_back
    if component is None and model.component is not None and nearest is not None:
        if model.component in nearest.component_names:
            return model.component, _listener_path(nearest, model.component)
    return component or model.component, None


def _listener_path(nlp: Language, component: str) -> Optional[str]:
    """The path ``nlp.replace_listeners`` takes to the listener of ``component`` in ``nlp``'s config (None: none)."""
    try:
        tok2vec = nlp.config["components"][component]["model"]["tok2vec"]
    except (KeyError, TypeError):
        return None
    found = find_listener_path(tok2vec)
    return None if found is None else ".".join(("model", "tok2vec") + found)


#: The modules whose functions run a pipeline's components (their locals ``name`` and ``proc``).
_SPACY_RUNNERS = ("spacy.language", "spacy.util")


LISTENER_ARCH = "spacy_elmo.ElmoListener.v1"


def find_listener_path(cfg: Any, path: Tuple[str, ...] = ()) -> Optional[Tuple[str, ...]]:
    """The keys to the first ElmoListener.v1 block (without its own biLM) in a model config, depth first."""
    if not isinstance(cfg, dict):
        return None
    if cfg.get("@architectures") == LISTENER_ARCH and cfg.get("bilm") is None:
        return path
    for key, value in cfg.items():
        found = find_listener_path(value, path + (key,))
        if found is not None:
            return found
    return None


def _forward(model: ElmoListener, docs: List[Doc], is_train: bool):
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        # the received docs themselves, in their places and as tokenized then: the batch id (a sum over the docs'
        # words) is the same for the docs in another order, and may be for other docs
        received = model._outputs or []
        same_docs = len(docs) == len(received) and all(
            getattr(model._trained.get(doc), "place", None) == i and len(doc) == out.shape[1]
            for i, (doc, out) in enumerate(zip(docs, received)))
        if batch_id == model._batch_id and same_docs:
            model.attrs["warming_up"] = False
            return model._outputs, model._backprop
        realigned = _realigned(model, docs)
        if realigned is not None:
            model.attrs["warming_up"] = False
            return realigned
    if model.upstream is None:
        raise ValueError(_no_upstream(model))
    outputs = []
    checked_upstream = False  # whether :func:`_upstream_not_running` was looked up (once a call: frames walked)
    nL, nO = model.get_dim("nL"), model.get_dim("nO")
    for doc in docs:
        # in training kept: an annotating listening component predicts on the same docs after its update
        handed = model._predicted.take(doc, keep=is_train)
        if handed is not None:
            data = aligned_layers(doc, *handed)
        else:
            data = aligned_layers(doc) if Doc.has_extension(ELMO_ATTR) else None
        if (data is None or data.ndim != 3) and not is_train:
            trained = model._trained.get(doc)  # as its update read them, float32 (copied below)
            if trained is not None:  # one row per current token: the doc may have been retokenized since
                data = aligned_layers(doc, model.ops.to_numpy(trained.layers), trained.starts)
        if data is not None and data.ndim == 3 and data.shape[0::2] != (nL, nO):
            raise ValueError(
                Errors.E_LISTENER_OTHER_DATA.format(
                    component=model.component, upstream=model.upstream, shape=data.shape, nL=nL, nO=nO,
                    replace=_replace_for(model, model.upstream)[1],
                )
            )
        missing = (data is None or data.ndim != 3) and len(doc) > 0
        if missing and not checked_upstream and not (model.attrs.get("warming_up", False) and _initializing()):
            # spaCy does not relink at select_pipes or remove_pipe: a disabled or removed upstream is named, not a stale
            # batch or missing data
            checked_upstream = True
            not_running = _upstream_not_running(model)
            if not_running is not None:
                raise ValueError(not_running)
        if data is not None and data.ndim == 3:
            outputs.append(model.ops.asarray3f(cast(Floats3d, data.astype("float32"))))  # ndim checked above
            model.attrs["warming_up"] = False
        elif len(doc) == 0:
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        elif is_train and _in_rehearse():
            raise ValueError(Errors.E_LISTENER_REHEARSE.format(
                upstream=model.upstream, component=model.component, replace=_replace_for(model, model.upstream)[1]))
        elif is_train and model._batch_id is not None:
            found = model.get_batch_id(docs)
            batch = (Errors.E_LISTENER_BATCH_NEW_DOCS if found == model._batch_id else Errors.E_LISTENER_BATCH_OTHER)
            raise ValueError(
                Errors.E_LISTENER_BATCH.format(
                    batch=batch.format(found=found, expected=model._batch_id, upstream=model.upstream),
                    upstream=model.upstream, component=model.component, replace=_replace_for(model, model.upstream)[1],
                )
            )
        elif model.attrs.get("warming_up", False) and _initializing():
            # initialize's samples, and spacy debug model, which updates a component alone; a training step that
            # no elmo fed (nlp.update(..., exclude=["elmo"]), frozen_components) is an error below
            if is_train:
                warnings.warn(
                    Warnings.W_LISTENER_ZEROS.format(upstream=model.upstream, component=model.component),
                    UserWarning,
                    stacklevel=user_stacklevel(),
                )
            outputs.append(model.ops.alloc3f(nL, len(doc), nO))
        elif is_train:
            raise ValueError(Errors.E_LISTENER_NOT_FED.format(
                upstream=model.upstream, component=model.component, replace=_replace_for(model, model.upstream)[1]))
        else:
            raise ValueError(Errors.E_LISTENER_NO_DATA.format(
                upstream=model.upstream, component=model.component, replace=_replace_for(model, model.upstream)[1]))
    return outputs, _no_grad


def _realigned(model: ElmoListener, docs: List[Doc]) -> Optional[Tuple[List[Floats3d], Callable]]:
    """In training, the layers received for ``docs`` when each is a doc of the received batch (the same object)
    that a component between the upstream and this listener's retokenized since (spaCy's ``Language.update``
    runs annotating components, e.g. ``merge_entities``, on the docs in place), with one row per current token
    as at prediction (:func:`aligned_layers`: a merged token the mean of its words' rows, a split piece its token's
    row), and the backprop that hands the gradient back to the received rows. None unless all are such docs."""
    if not docs or model._outputs is None:
        return None
    received = [model._trained.get(doc) for doc in docs]
    outputs: List[Floats3d] = []
    picks: List[Tuple[int, Optional[Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]]] = []
    for doc, entry in zip(docs, received):
        if entry is None:
            return None
        ranges = source_rows(doc, 0, len(doc), entry.layers.shape[1], entry.starts)
        layers = entry.layers if ranges is None else mean_rows(model.ops.to_numpy(entry.layers), *ranges)
        outputs.append(model.ops.asarray3f(cast(Floats3d, layers)))
        picks.append((entry.place, ranges))
    shapes = [out.shape for out in model._outputs]
    backprop = _no_grad if model._backprop is None else model._backprop
    return outputs, functools.partial(_realigned_backprop, model.ops, backprop, shapes, picks)


def _realigned_backprop(
    ops,
    backprop: Callable,
    shapes: Sequence[Tuple[int, ...]],
    picks: Sequence[Tuple[int, Any]],
    d_outputs: List[Floats3d],
) -> List[Doc]:
    """:func:`_realigned`'s backprop: ``d_outputs[j]`` (one row per current token of the listener's doc j) added
    to the gradient of the received batch's doc ``picks[j][0]`` (zeros for a doc the listener was not given),
    through the mean of :func:`mean_rows` when that doc was retokenized; then the upstream's backprop."""
    d_received = [ops.alloc3f(*shape) for shape in shapes]
    for (index, ranges), d in zip(picks, d_outputs):
        if ranges is None:
            d_received[index] += d
        else:
            lo, hi, own = ranges
            d_received[index] += ops.asarray3f(mean_rows_grad(ops.to_numpy(d), lo, hi, shapes[index][1], own))
    return backprop(d_received)


def _initializing() -> bool:
    """Whether a model's ``initialize`` (thinc's ``Model.initialize``: spaCy's ``nlp.initialize``, a component's
    own, ``spacy debug model``'s) or ``spacy debug model`` runs this prediction, looked up the stack on a path
    that fails otherwise: shape inference runs the layers on sample docs no elmo annotated, and debug model
    predicts with its listening component alone. Anywhere else docs without ELMo data are an error, also for
    a listener saved or left "warming up" by its initialize: its component would predict from zeros."""
    frame = sys._getframe(1)
    return called_from(frame, "thinc.model", "initialize") or called_from(frame, "spacy.cli.debug_model", "debug_model")


def _in_rehearse() -> bool:
    """Whether spaCy's ``Language.rehearse`` runs this forward pass (looked up the stack on a path that
    fails anyway): it feeds no listener, so a listening component cannot rehearse."""
    return called_from(sys._getframe(1), "spacy.language", "rehearse")


def _no_grad(d_outputs) -> List[Doc]:  # module level: picklable
    return []
