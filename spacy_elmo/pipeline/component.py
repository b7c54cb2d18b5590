"""The ``elmo`` pipeline component.

Runs the biLM over docs (sentences or bounded windows, sub-batched by padded
token count), stores per-token layers on the docs, and feeds downstream
:class:`~spacy_elmo.pipeline.listener.ElmoListener` layers during training.
Frozen by default: ``update`` runs the biLM without gradients and
``finish_update`` does nothing, so each listener's ScalarMix is all that
trains (keep the component *out of* ``[training] frozen_components``: spaCy
never initializes components listed there).
"""

import contextlib
import copy
import functools
import json
import math
import operator
import os
import re
import sys
import threading
import warnings
import weakref
from collections.abc import Container
from numbers import Real
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy
from spacy import util as spacy_util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example
from spacy.lookups import Lookups
from spacy.vectors import Vectors
from spacy.vocab import Vocab

from thinc.api import Config, Model, Optimizer, set_dropout_rate
from thinc.types import Floats3d

from ..bilm import BiLM
from ..bilm.native_io import NotAModelDir
from ..errors import Errors, TokenizerMismatchWarning, Warnings
from ..forksafe import after_fork_in_child
from ..training.data import (
    default_tokenizer_settings,
    pretrain_reads,
    reading_tokenizer_settings,
    reads_other_tokens,
    tokenizer_cfg,
    tokenizer_settings,
)
from .bilm_layer import (
    DEFAULT_LEARN_RATE_SCALE,
    ModelState,
    StagedWeights,
    check_layer_cache_mb,
    get_bilm,
    get_runner,
    load_model_bytes,
    name_owner,
    own_bilm_layer,
    renew_shim_ids,
    set_bilm,
    set_layer_cache_mb,
    step_bilm,
    weights_checked,
)
from .callers import called_from, runs, skipped_by_the_call, user_stacklevel
from .doc_data import IDX_ATTR, install_extensions, install_hooks, set_doc_data
from .layer_cache import MB
from .listener import ElmoListener, find_listener_path, running_pipeline
from .loaders import WeightsLoader, load_weights, names_no_weights, requests_nothing, weights_target
from .runner import fine_tuned
from .scalar_mix import is_setting

STORE_CHOICES = ("all", "mix", "none")
DTYPE_CHOICES = ("float16", "float32")

DEFAULT_MODEL = """
[model]
@architectures = "spacy_elmo.ElmoBiLM.v2"
batch_tokens = 4096
max_window = 128
backend = "auto"
cache_size = 50000
"""


#: The factory name of spacy-elmo's component (``nlp.add_pipe("elmo")``).
ELMO_FACTORY = "elmo"


@Language.factory(
    ELMO_FACTORY,
    default_config={
        "model": Config().from_str(DEFAULT_MODEL)["model"],
        "weights": None,
        "frozen": True,
        "learn_rate_scale": DEFAULT_LEARN_RATE_SCALE,
        "store": "all",
        "store_dtype": "float16",
        "mix": None,
        "user_hooks": True,
        "set_doc_tensor": False,
    },
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model,
    weights: Optional[str],
    frozen: bool,
    learn_rate_scale: float,
    store: str,
    store_dtype: str,
    mix: Optional[List[float]],
    user_hooks: bool,
    set_doc_tensor: bool,
) -> "ElmoComponent":
    """weights: a model directory (native or AllenNLP), loaded at first use; None = the
    bundled default or an initialize-time ``weights_loader``. mix: the layer weights
    (before softmax) of ``token._.elmo_vector`` and store "mix"; None = average.
    learn_rate_scale: the fine-tuned biLM's learning rate over the optimizer's (frozen = false).
    The biLM reads each sentence of a doc with boundaries (a doc without them, in windows) in rows of at most
    ``model``'s ``max_window`` words: a longer sentence is read in consecutive pieces, each from the start
    state (warned once; :func:`~spacy_elmo.pipeline.architectures.ElmoBiLM_v2`)."""
    component = ElmoComponent(
        nlp.vocab,
        model,
        name,
        weights=weights,
        frozen=frozen,
        learn_rate_scale=learn_rate_scale,
        store=store,
        store_dtype=store_dtype,
        mix=mix,
        user_hooks=user_hooks,
        set_doc_tensor=set_doc_tensor,
    )
    component.pipeline_tokens = {"lang": nlp.lang, "tokenizer": tokenizer_settings(nlp)}
    _PIPELINES[component] = weakref.ref(nlp)
    return component


def _no_backprop(d_outputs: Any) -> List[Doc]:  # module level: picklable
    return []


class _TrainingBatch:
    """A fine-tuning batch of the biLM: its backward, the gradient summed over listeners so far,
    the listeners (by index) not yet heard from of those expected to train on it, and how many
    gradients came."""

    def __init__(self, backprop: Callable, d_outputs: List[Floats3d], waiting: Iterable[int]) -> None:
        self.backprop, self.d_outputs = backprop, d_outputs
        self.waiting = set(waiting)
        self.heard = 0


#: component -> its batch waiting for gradients: kept off the component, whose __dict__ spaCy's pickling
#: copies (the batch holds autograd closures, which do not pickle; a pipeline pickles between updates)
_BATCHES: "weakref.WeakKeyDictionary[Any, _TrainingBatch]" = weakref.WeakKeyDictionary()


#: component -> the lock it holds while it loads its weights at first use (threads serving one pipeline
#: that all start with a call load them once) and while it sets weights (never overwritten by a first-use
#: load running meanwhile). Kept off the component, which pickles; a forked child starts without them
#: (another thread of the parent may hold one, which nothing would release in the child).
_LOADING: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
after_fork_in_child(_LOADING.clear)


#: component -> (a weak reference to) the pipeline the factory built it for, whose config tells where a weights path
#: loaded without ``nlp`` at hand (first use, to_bytes / to_disk of ``spacy assemble``) came from. Kept off the
#: component, which pickles; weak both ways: neither keeps the other alive.
_PIPELINES: "weakref.WeakKeyDictionary[Any, weakref.ref]" = weakref.WeakKeyDictionary()


#: component -> the pipelines its current weights were checked against (:meth:`ElmoComponent._check_tokens`, recorded by
#: :meth:`ElmoComponent._checked_in` once they serve: weights refused record nothing), so that
#: one joining another pipeline with its weights loaded (``add_pipe(source=)``, initialize) is checked there once.
#: Kept off the component, which pickles; weak: it keeps no pipeline alive.
_CHECKED_IN: "weakref.WeakKeyDictionary[Any, weakref.WeakSet]" = weakref.WeakKeyDictionary()


def _loading_lock(component: Any) -> Any:
    lock = _LOADING.get(component)
    return lock if lock is not None else _LOADING.setdefault(component, threading.RLock())

LOADER = "spacy_elmo.WeightsLoader.v1"


def _requested_weights(nlp: Language, name: str) -> Optional[str]:
    """The path the pipeline config's ``[initialize.components.NAME.weights_loader]`` names (this package's
    loader only), None without one or with an empty path (nothing requested)."""
    try:
        loader = nlp.config.interpolate()["initialize"]["components"][name]["weights_loader"]
    except (KeyError, TypeError):
        return None
    if not isinstance(loader, dict) or loader.get("@misc") != LOADER or names_no_weights(loader.get("path")):
        return None
    return str(loader["path"])


#: a setting that is one config variable, as the shipped configs' ``path = ${paths.elmo}``: its section and key
_VARIABLE = re.compile(r"^\$\{(\w+)\.(\w+)\}$")


def _variable_of(nlp: Optional[Language], keys: Sequence[str]) -> Optional[Tuple[str, str]]:
    """``(section, key)`` of the variable (``${paths.elmo}``: ``("paths", "elmo")``) that the setting at ``keys`` of
    ``nlp``'s config (not interpolated: spaCy keeps the variables) is; None for another value, or without ``nlp``."""
    try:
        value = functools.reduce(operator.getitem, keys, nlp.config) if nlp is not None else None
    except (KeyError, TypeError):
        return None
    match = _VARIABLE.match(value.strip()) if isinstance(value, str) else None
    return None if match is None else (match.group(1), match.group(2))


def _same_weights(requested: str, source: Optional[str]) -> bool:
    """Whether a requested weights path names the weights recorded as ``source`` (a path or "default"; never
    weights that training has stepped since, :func:`~.runner.fine_tuned`: no path names those)."""
    if source is not None and fine_tuned(source):
        return False

    def canonical(path: Optional[str]) -> str:
        target = weights_target(path)
        return target if target == "default" else os.path.realpath(target.strip())

    return canonical(requested) == canonical(source)


def _is_init_nlp(frame: Any) -> bool:
    """Whether ``frame`` runs spaCy's ``init_nlp`` (``spacy train``): the only relinking whose
    ``nlp.meta`` lists this run's sourced components (a pipeline saved by ``spacy assemble`` keeps
    that list, and ``spacy.load`` or a later ``add_pipe`` relink it too)."""
    return runs(frame, "spacy.training.initialize", "init_nlp")


def _nearest_elmo(nlp: Language, component_name: str) -> Optional[Tuple[str, "ElmoComponent"]]:
    """``(name, component)`` of the nearest enabled elmo component before ``component_name`` in ``nlp``: the one
    that feeds its ``"*"`` listeners; None where there is none, or ``component_name`` is not in ``nlp``."""
    nearest = None
    for name, proc in nlp.components:
        if name == component_name:
            return nearest
        if isinstance(proc, ElmoComponent) and name not in nlp.disabled:
            nearest = (name, proc)
    return None


def _components_updating(frame: Any) -> Optional[Set[str]]:
    """The names of the components that ``Language.update`` updates on this batch, when ``frame`` runs it
    (the enabled ones, less its ``exclude``); None for another caller (all may train, as far as known).

    ``nlp.select_pipes(disable=...)`` leaves a disabled component linked, and ``exclude`` does not unlink
    one: a listener of such a component sends no gradient, and the biLM must not wait for it."""
    if not (runs(frame, "spacy.language", "update") and isinstance(frame.f_locals.get("self"), Language)):
        return None
    exclude = frame.f_locals.get("exclude") or ()
    if not isinstance(exclude, Container):  # an iterator: reading it here would consume it for spaCy
        return None
    return {name for name, proc in frame.f_locals["self"].pipeline if name not in exclude and hasattr(proc, "update")}


def _path_being_replaced() -> Optional[Tuple[str, str]]:
    """``(component, listener path)`` of the ``Language.replace_listeners`` call running this hook, or None.

    spaCy passes the hook the component's whole ``[model.tok2vec]`` block but writes what it returns at
    the path it was given: at a wrong path the saved config no longer matches the model, and the
    pipeline does not load ("mismatched structure"). The hook is not given the path, so it reads it from
    spaCy's frame (a missing frame or local, as in another spaCy version, skips the check)."""
    frame: FrameType = sys._getframe(1)
    for _ in range(4):
        back = frame.f_back
        if back is None:
            return None
        frame = back
        names = frame.f_locals
        if frame.f_code.co_name == "replace_listeners" and isinstance(names.get("listener_path"), str):
            return str(names.get("pipe_name", "?")), names["listener_path"]
    return None


def replace_listener_cfg(
    tok2vec_model_cfg: Dict[str, Any], listener_model_cfg: Dict[str, Any], *, name: str, frozen: bool, learn_rate_scale: float
):
    """``nlp.replace_listeners``: the config of the listener block with the biLM's own config in it.

    spaCy passes the listening component's whole ``[model.tok2vec]`` block, which may
    hold the listener deeper (``ElmoTok2Vec.v1``'s ``elmo``).
    """
    path = find_listener_path(listener_model_cfg)
    if path is None:
        raise ValueError(Errors.E_REPLACE_LISTENER_CFG.format(upstream=name))
    expected = ".".join(("model", "tok2vec") + path)
    replacing = _path_being_replaced()
    if replacing is not None and replacing[1] != expected:
        component, given = replacing
        raise ValueError(
            Errors.E_REPLACE_LISTENER_PATH.format(upstream=name, component=component, given=given, expected=expected)
        )
    result = copy.deepcopy(dict(functools.reduce(operator.getitem, path, listener_model_cfg)))
    result["bilm"] = copy.deepcopy(dict(tok2vec_model_cfg))
    result["frozen"] = frozen
    result["learn_rate_scale"] = learn_rate_scale
    return result


def replace_listener(model: Model, listener: Model, component: "ElmoComponent") -> Model:
    """``nlp.replace_listeners``: the node that takes the listener's place (a copy of ``model``)."""
    if get_bilm(model) is None:  # weights not loaded yet (lazy): load them, copy again
        component._ensure_weights()
        model = component.model.copy()
    renew_shim_ids(model)
    # the copy's component, and the block its ElmoBiLM.v2 is written in (replace_listener_cfg's "bilm")
    replacing = _path_being_replaced()
    if replacing is None:
        name_owner(model, None)
    else:
        name_owner(model, replacing[0], f"components.{replacing[0]}.{replacing[1]}.bilm")
    return own_bilm_layer(model, component.cfg["frozen"], component.cfg["learn_rate_scale"])


def _is_number_list(values: Any) -> bool:
    """A list or tuple of finite real numbers (not bools)."""
    return isinstance(values, (list, tuple)) and all(
        isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


#: the settings of a :class:`Vectors` table that ``Vectors._set_cfg`` sets (all of them: its ``_get_cfg`` leaves
#: out those of floret mode in default mode, which from_bytes would then reset)
_VECTORS_CFG = ("mode", "minn", "maxn", "hash_count", "hash_seed", "bow", "eow", "attr")


def _set_vocab(vocab: Vocab, data: bytes, exclude: Iterable[str]) -> None:
    """``vocab.from_bytes(data, exclude=exclude)``; should it fail, the vectors and lookups it replaces (spaCy sets the
    strings, then the vectors, then the lookups) are put back as they were. Strings it added stay: a StringStore only
    grows (the tokenizers of other threads add to it meanwhile, under no lock of ours), and a string that nothing
    uses changes nothing.

    Kept by reference, not serialized (a copy of the table per load, and lookups msgpack cannot write would fail
    it): spaCy's ``Vectors.from_bytes`` assigns a new ``data`` array and its settings, and adds to ``key2row`` (so
    its entries are copied); ``Lookups.from_bytes`` assigns a new dict of tables. Put back, the table holds the
    same array (writeable as before) and the same ``key2row`` dict."""
    vectors = vocab.vectors if "vectors" not in exclude and isinstance(vocab.vectors, Vectors) else None
    lookups = vocab.lookups if "lookups" not in exclude and isinstance(vocab.lookups, Lookups) else None
    if vectors is not None:  # not another vectors type
        kept_data, key2row, rows = vectors.data, vectors.key2row, dict(vectors.key2row)
        settings = {name: getattr(vectors, name) for name in _VECTORS_CFG}
    tables = lookups._tables if lookups is not None else None
    try:
        vocab.from_bytes(data, exclude=exclude)
    except BaseException:
        if vectors is not None and (
            vectors.data is not kept_data or vectors.key2row is not key2row or vectors.key2row != rows
            or any(getattr(vectors, name) != value for name, value in settings.items())
        ):  # else not reached: its rows left unset (``_unset``, which Python cannot read) stay as they were
            vectors.data = kept_data
            key2row.clear()
            key2row.update(rows)
            vectors.key2row = key2row
            vectors._set_cfg(settings)
            vectors._sync_unset()  # as spaCy's from_bytes leaves it: the rows no key maps
        if lookups is not None and tables is not None:
            lookups._tables = tables
        raise


class ElmoComponent(TrainablePipe):
    """predict: ``List[Doc] -> List[Floats3d (L + 1, n, 2P)]`` (float32, current ops)."""

    def __init__(
        self,
        vocab,
        model: Model,
        name: str = "elmo",
        *,
        weights: Optional[str] = None,
        frozen: bool = True,
        learn_rate_scale: float = DEFAULT_LEARN_RATE_SCALE,
        store: str = "all",
        store_dtype: str = "float16",
        mix: Optional[Sequence[float]] = None,
        user_hooks: bool = True,
        set_doc_tensor: bool = False,
    ) -> None:
        for option, value, choices in (("store", store, STORE_CHOICES), ("store_dtype", store_dtype, DTYPE_CHOICES)):
            if value not in choices:
                raise ValueError(Errors.E_ELMO_BAD_OPTION.format(name=name, option=option, choices=choices, value=value))
        if mix is not None and not _is_number_list(mix):
            raise ValueError(Errors.E_ELMO_MIX_VALUES.format(name=name, value=mix))
        if not is_setting(learn_rate_scale, lambda v: v > 0):
            raise ValueError(Errors.E_ELMO_LEARN_RATE_SCALE.format(name=name, value=learn_rate_scale))
        self.vocab = vocab
        self.model = model
        self.name = name
        #: ``{"lang", "tokenizer"}`` of the pipeline as last read (the factory's, then :meth:`_reading`'s): what
        #: :meth:`_check_tokens` compares loaded weights with when the pipeline itself is out of reach.
        self.pipeline_tokens: Optional[Dict[str, Any]] = None
        self._listener_map: Dict[str, List[ElmoListener]] = {}
        self.cfg: Dict[str, Any] = {
            "weights": None if weights is None else str(weights),
            "frozen": bool(frozen),
            "learn_rate_scale": float(learn_rate_scale),
            "store": store,
            "store_dtype": store_dtype,
            "mix": list(mix) if mix is not None else None,
            "user_hooks": bool(user_hooks),
            "set_doc_tensor": bool(set_doc_tensor),
        }
        # spaCy's nlp.replace_listeners reads these (as for tok2vec / transformer)
        model.attrs["replace_listener"] = replace_listener
        model.attrs["replace_listener_cfg"] = functools.partial(
            replace_listener_cfg, name=name, frozen=bool(frozen), learn_rate_scale=float(learn_rate_scale)
        )
        name_owner(model, pipe=self)  # W_ELMO_SENTENCE_OVER_WINDOW names it, as named when it warns
        install_extensions()

    # -- weights -------------------------------------------------------------
    @property
    def is_loaded(self) -> bool:
        return get_bilm(self.model) is not None

    @property
    def source(self) -> Optional[str]:
        """Where the weights came from (a path or "default"), None before loading."""
        runner = self.model.layers[0].shims[0]._model
        return getattr(runner, "source", None) if runner.bilm is not None else None

    def load_weights(
        self, path: Optional[str] = None, loader: Optional[WeightsLoader] = None, *, nlp: Optional[Language] = None
    ) -> None:
        """Load weights now (from ``loader``, else ``path``; empty = the bundled default). ``nlp``: the pipeline whose
        language and tokenizer they are checked against (None: the one running this component, else the one the
        factory built it for)."""
        backend = self.model.attrs["backend"]
        is_default = loader is None and weights_target(path) == "default"
        try:
            bilm, source = loader(backend) if loader is not None else load_weights(path, backend)
        except FileNotFoundError as err:
            if is_default or "bundled default" in str(err):
                raise ValueError(Errors.E_ELMO_NO_WEIGHTS.format(name=self.name, reason=err)) from err
            raise
        checked_in = self._check_tokens(bilm, source, nlp)
        bilm.requires_grad_(not self.cfg["frozen"])
        # loaded without the lock (calls of other threads go on meanwhile), set with it: a first-use load
        # that another thread runs sets its weights before these, never after (see from_bytes). Checked
        # before they are set: weights refused leave the old ones, their caches, the listeners and the pipelines
        # the old ones were checked against (:data:`_CHECKED_IN`) as they were.
        with _loading_lock(self):
            self._check_weights(bilm, source)
            set_bilm(self.model, bilm, source)
            self._checked_in(checked_in, new_weights=True)
            for listener in self.listeners:
                self._size_listener(listener, bilm)

    def _ensure_weights(self, nlp: Optional[Language] = None) -> None:
        """The weights of ``[components.NAME] weights`` loaded, unless loaded; ``nlp``: the pipeline (initialize;
        None: the one the factory built this component for, if it still holds it), whose config tells where a path
        that names nothing came from."""
        # Always under the lock (uncontended once loaded): load_weights sets the biLM before it sizes
        # the listeners, so a thread that saw is_loaded without the lock could run unsized listeners.
        with _loading_lock(self):
            if not self.is_loaded:  # not loaded by another thread meanwhile
                weights = self.cfg.get("weights")
                pipeline = nlp if nlp is not None else self._pipeline()
                self._load_named(lambda: self.load_weights(weights, nlp=nlp), pipeline,
                                 ("components", self.name, "weights"), Errors.E_ELMO_WEIGHTS_PATH)  # fmt: skip
            elif nlp is not None:  # loaded (and checked) in another pipeline, say the one it was sourced from
                self._check_joined(nlp)

    def _pipeline(self) -> Optional[Language]:
        """The pipeline the factory built this component for, while it holds it under its name (not after
        pickling or a rename), else None. spaCy's ``source`` shares the component object: while the pipeline it
        was built for still holds it, a message reached through the other pipeline names that one's setting."""
        ref = _PIPELINES.get(self)
        nlp = ref() if ref is not None else None
        if nlp is None or self.name not in nlp.component_names or nlp.get_pipe(self.name) is not self:
            return None
        return nlp

    def _load_named(self, load: Callable[[], None], nlp: Optional[Language], keys: Tuple[str, ...], message: str) -> None:
        """``load()``; a path that names nothing (FileNotFoundError) or another tool's model (NotAModelDir: a foreign
        config.json, a TensorFlow checkpoint) is raised again naming the setting it came from: the one at ``keys`` of
        the pipeline config (``message``), or the config variable it reads (``${paths.elmo}``: ``--paths.elmo``, which
        the user set). Other errors say what to do in their own words (a saved pipeline: source its component)."""
        try:
            load()
        except (FileNotFoundError, NotAModelDir) as err:
            setting = f"[{'.'.join(keys[:-1])}] {keys[-1]}"
            variable = _variable_of(nlp, keys)
            if variable is None:
                text = message.format(name=self.name, setting=setting, reason=err)
            else:
                section, key = variable
                text = Errors.E_ELMO_WEIGHTS_VARIABLE.format(
                    name=self.name, setting=setting, section=section, key=key, reason=err
                )
            raise (NotAModelDir if isinstance(err, NotAModelDir) else FileNotFoundError)(text) from err

    def _reading(self, nlp: Optional[Language] = None) -> Optional[Dict[str, Any]]:
        """``{"lang", "tokenizer"}`` of the pipeline now: read from ``nlp`` (the one handed to initialize), else the
        pipeline running this component (spaCy's frames: one sourced into another pipeline, ``add_pipe(source=)``,
        is the same object as the source's), else the one the factory built it for while it holds it, else what was
        last read (pickled, renamed, the pipeline gone). Read when the
        weights load (initialize or first use), not in the factory: Language.from_config (spacy train, init_nlp,
        spacy.load) builds the components while nlp.config is still the language class's default and sets the
        real one (``--nlp.tokenizer``, a fallback block) only at its end. What is read from the pipeline is kept in
        :attr:`pipeline_tokens`, for a later use out of its reach (pickled: :meth:`__reduce__`)."""
        return self._read_from(self._reading_pipeline(nlp))

    def _read_from(self, pipeline: Optional[Language]) -> Optional[Dict[str, Any]]:
        """:meth:`_reading` of the pipeline :meth:`_reading_pipeline` resolved (None: what was last read)."""
        if pipeline is not None:
            self.pipeline_tokens = {"lang": pipeline.lang, "tokenizer": tokenizer_settings(pipeline)}
        return self.pipeline_tokens

    def _reading_pipeline(self, nlp: Optional[Language] = None) -> Optional[Language]:
        """The pipeline :meth:`_reading` reads: ``nlp``, else the one running this component, else the one the factory
        built it for while it holds it; None where none is in reach."""
        if nlp is None:
            nlp = running_pipeline(self.model)
        return nlp if nlp is not None else self._pipeline()

    def __reduce__(self):
        # Pickled (pickle.dumps(nlp), nlp.pipe(n_process=2) under spawn) before its weights load, the copy checks
        # them at first use against pipeline_tokens alone (no pipeline to read): record the pipeline's reading now,
        # while it is in reach, not the factory's (the language class's default, in a pipeline built from a config).
        self._reading()
        return super().__reduce__()

    def __setstate__(self, state) -> None:
        # Unpickled (pickle.loads, copy.deepcopy, a spawned nlp.pipe worker): its biLM's runner kept the name this
        # component had when pickled (a weak reference does not pickle): follow this component again, so that
        # W_ELMO_SENTENCE_OVER_WINDOW names it as named when it warns (after nlp.rename_pipe), the warned-once
        # flag carried as pickled.
        # A shallow copy.copy shares the model, whose runner still follows the live original: that one keeps it.
        super().__setstate__(state)
        owner = get_runner(self.model).owner
        followed = owner() if isinstance(owner, weakref.ReferenceType) else None
        if followed is None or followed is self:
            name_owner(self.model, pipe=self, warn_again=False)

    def _check_joined(self, nlp: Language) -> None:
        """The loaded weights checked against ``nlp`` (:meth:`_check_tokens`) unless they were already: a component
        whose weights loaded in another pipeline (the one it was sourced from, saved or not) and that joins ``nlp``
        (``add_pipe(source=)``, initialize), once per pipeline."""
        bilm = get_bilm(self.model)
        if bilm is not None and nlp not in _CHECKED_IN.get(self, ()):
            self._checked_in(self._check_tokens(bilm, self.source or "", nlp), new_weights=False)

    def _checked_in(self, pipeline: Optional[Language], new_weights: bool) -> None:
        """``pipeline`` (None: none in reach) kept among those the weights now serving were checked against
        (:data:`_CHECKED_IN`); ``new_weights``: they were just set, and were checked against none before it. Called
        once the weights checked serve, never before: weights refused (:meth:`_check_weights`) or put back leave
        the record of the old ones as it was, so that the next load or join checks them again."""
        checked = _CHECKED_IN.get(self) if not new_weights else None
        if checked is None:
            checked = _CHECKED_IN[self] = weakref.WeakSet()
        if pipeline is not None:
            checked.add(pipeline)

    def _check_tokens(self, bilm: BiLM, source: str, nlp: Optional[Language] = None) -> Optional[Language]:
        """Warn when ``pretrain`` read the model's text with another language or tokenizer than this
        pipeline's (e.g. Japanese phrases of the fallback tokenizer against SudachiPy's words); ``nlp``: as
        :meth:`_reading`'s. Returns the pipeline read (None: none in reach), for :meth:`_checked_in` once ``bilm``
        serves."""
        pipeline = self._reading_pipeline(nlp)
        trained, here = bilm.provenance, self._read_from(pipeline)  # resolved once: the frames walked once
        if here is not None and reads_other_tokens(trained, here["lang"], here["tokenizer"]):
            tokenizer = trained.get("tokenizer")  # absent in models pretrained before it was recorded
            message = Warnings.W_ELMO_OTHER_TOKENS if tokenizer is not None else Warnings.W_ELMO_OTHER_LANG
            # pretrain reads with make_nlp(LANG)'s tokenizer (spacy.blank's, or its rule-based fallback where the
            # packages it needs are missing), or with the block of --tokenizer, one that a model can record
            if here["tokenizer"] == reading_tokenizer_settings(here["lang"]):
                again = Warnings.W_ELMO_PRETRAIN_AGAIN.format(nlp_lang=here["lang"])
            elif pretrain_reads(here["lang"], here["tokenizer"]):
                # not a block pretrain refuses (segmenter = "pkuseg": its model loads in an initialize step)
                again = Warnings.W_ELMO_PRETRAIN_AGAIN_TOKENIZER.format(
                    nlp_lang=here["lang"], tokenizer_cfg=tokenizer_cfg(here["tokenizer"]))
            else:
                again = ""
            # an older model is checked by language alone: any block of its language silences the warning, and the
            # one shown is one that builds here (the default's needs packages that may be missing: ko, ja, th, vi)
            shown = tokenizer if tokenizer is not None else reading_tokenizer_settings(trained["lang"])
            python = (Warnings.W_ELMO_BLANK if shown == default_tokenizer_settings(trained["lang"])
                      else Warnings.W_ELMO_BLANK_TOKENIZER).format(lang=trained["lang"], tokenizer=shown)
            warnings.warn(
                message.format(name=self.name, source=source, lang=trained["lang"], tokenizer=tokenizer, python=python,
                               tokenizer_json=json.dumps(shown, ensure_ascii=False), nlp_lang=here["lang"],
                               nlp_tokenizer=here["tokenizer"],
                               again=again),
                TokenizerMismatchWarning,
                stacklevel=user_stacklevel(),  # the user's nlp(text) or load_weights, not the loading's frames
            )
        return pipeline

    def _check_weights(self, bilm: BiLM, source: str) -> None:
        """Raise unless ``bilm`` can replace the weights in place: its layers fit ``mix`` and every listener."""
        self._check_mix(bilm, source)
        for listener in self.listeners:
            self._check_listener(listener, self._component_of(listener), bilm, source)

    def _check_mix(self, bilm: BiLM, source: str) -> None:
        """A given ``mix`` needs one weight per output layer of the biLM."""
        mix, expected = self.cfg["mix"], bilm.config.n_output_layers
        if mix is not None and len(mix) != expected:
            raise ValueError(
                Errors.E_ELMO_MIX_LENGTH.format(name=self.name, found=len(mix), source=source, expected=expected)
            )

    # -- layer cache -------------------------------------------------------------
    @property
    def layer_cache_mb(self) -> int:
        """MB of biLM output layers kept per sentence (or window), keyed by its words, so that a sentence
        seen before is copied instead of run again; 0 = off (least recently used dropped first; only at
        prediction, never for a biLM that trains). A training-run setting: ``initialize`` sets it from
        ``[initialize.components.NAME] layer_cache_mb`` (``spacy train``); it is no part of the saved
        pipeline, so ``spacy.load`` gives it 0. Set it here to cache repeated texts at inference."""
        return get_runner(self.model).layer_cache.limit // MB

    @layer_cache_mb.setter
    def layer_cache_mb(self, value: int) -> None:
        set_layer_cache_mb(self.model, value, self.name)

    # -- listeners (as spaCy's Tok2Vec) ------------------------------------------
    @property
    def listener_map(self) -> Dict[str, List[ElmoListener]]:
        return self._listener_map

    @listener_map.setter
    def listener_map(self, value: Dict[str, List[ElmoListener]]) -> None:
        # spaCy relinks the pipeline (rename_pipe, add_pipe, ...) by resetting this map and calling
        # find_listeners again on the enabled components (their names already updated): a listener
        # whose upstream name is no longer this component's (rename_pipe) must fail clearly, not train
        # on zeros or a stale batch. One that still names it stays linked: it belongs to a disabled
        # component (spacy.load(disable=...)), which reads doc._.elmo once enable_pipe enables it.
        for listeners in self._listener_map.values():
            for listener in listeners:
                if not self._feeds(listener):
                    listener.upstream, listener.component = None, None
                listener.clear()
        self._listener_map = value
        linking = sys._getframe(1)  # Language._link_components, when spaCy relinks the pipeline
        if _is_init_nlp(linking.f_back):
            self._check_sourced_weights(linking.f_locals.get("self"))
        joined = linking.f_locals.get("self")
        # add_pipe(source=) of a component whose weights are loaded: checked against the pipeline it joins now (spaCy
        # never initializes a frozen sourced component), unless that is still being built (Language.from_config:
        # its config, the tokenizer block included, is set at its end; spacy train's init_nlp relinks it complete)
        if (isinstance(joined, Language) and self.is_loaded and runs(linking, "spacy.language", "_link_components")
                and not called_from(linking, "spacy.language", "from_config")):
            self._check_joined(joined)

    def _check_sourced_weights(self, nlp: Any) -> None:
        """Warn (once) when this component was sourced from another pipeline into ``nlp`` but ``nlp``'s
        config names other weights in ``[initialize.components.NAME.weights_loader]``.

        spaCy copies a sourced component with its weights and never initializes it, so that loader is never
        run, and it gives the component no view of the new config. ``init_nlp`` (``spacy train``) relinks the
        listeners (``nlp._link_components``, which sets this map) once the config is complete and before
        ``initialize`` forgets which components were sourced (``nlp.meta["_sourced_vectors_hashes"]``)."""
        if (
            self.__dict__.get("_sourced_weights_warned")
            or not isinstance(nlp, Language)
            or self.name not in nlp.meta.get("_sourced_vectors_hashes", {})
        ):
            return
        requested = _requested_weights(nlp, self.name)
        if requested is not None and not _same_weights(requested, self.source):
            self._sourced_weights_warned = True
            warnings.warn(
                Warnings.W_ELMO_SOURCED_OTHER_WEIGHTS.format(
                    name=self.name, source=self.source, requested=requested,
                    keep=(Warnings.W_ELMO_SOURCED_KEEP_TUNED if fine_tuned(self.source or "")
                          else Warnings.W_ELMO_SOURCED_KEEP.format(source=self.source)),
                ),
                UserWarning,
                stacklevel=user_stacklevel(),
            )

    def _listeners_skipped_by(self, nlp: Language) -> List[Tuple[str, ElmoListener]]:
        """``(component name, listener)`` of the disabled components after this one that listen to it.

        ``nlp.initialize`` relinks only the enabled components, and ``spacy train`` initializes with
        the sourced components it resumes disabled: without linking these at the first update, a
        sourced listening component would get none of this component's layers in training."""
        names = nlp.component_names
        if self.name not in names:
            return []
        later = names[names.index(self.name) + 1 :]
        return [
            (name, node) for name in later if name in nlp.disabled for node in self._listeners_in(nlp.get_pipe(name), nlp)
        ]

    @property
    def listeners(self) -> List[ElmoListener]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map.keys())

    def _component_of(self, listener: ElmoListener) -> str:
        return next((c for c, ls in self.listener_map.items() if listener in ls), "?")

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream = self.name
        listener.component = component_name
        listener.copied = False
        self._configure_listener(listener, component_name)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            listener.upstream = None
            listener.component = None
            return True
        return False

    def _feeds(self, listener: ElmoListener, nlp: Optional[Language] = None, component_name: str = "") -> bool:
        """Whether the listener's upstream setting names this component, or is ``"*"`` and this is the nearest
        enabled elmo component before ``component_name`` (the listener's) in ``nlp`` (any, where ``nlp`` does not
        tell). spaCy links a ``"*"`` listener to every elmo component before it, of which the nearest alone can feed
        it: each hands it a batch, it reads the last one's layers and sends its gradient there, while the others
        ran their biLM for it (with autograd, fine-tuned) and got none back (spaCy's tok2vec listeners read the
        last tok2vec before them likewise)."""
        if listener.upstream_name != "*" or nlp is None:
            return listener.upstream_name in ("*", self.name)
        nearest = _nearest_elmo(nlp, component_name)
        return nearest is None or nearest[1] is self  # None: none before it, or not in nlp (nothing to tell)

    def _fed_listeners(self) -> List[ElmoListener]:
        """:attr:`listeners`, as the pipeline stands at this call. spaCy links a pipeline when its components change,
        not when one is enabled or disabled, and a ``"*"`` listener reads the nearest enabled elmo component before
        it (:meth:`_feeds`): the ``"*"`` listeners that another elmo component now feeds are dropped from
        :attr:`listener_map` (linked while that one was disabled, ``spacy.load(PATH, disable=["elmo_b"])``, they
        stayed here after ``nlp.enable_pipe("elmo_b")``: this component handed them a batch they did not read, with
        autograd, fine-tuned, and got no gradient back), and those this one now feeds are added
        (:meth:`_adopt_star_listeners`: linked to ``elmo_b``, they were fed by none while
        ``nlp.select_pipes(disable=["elmo_b"])`` held, zeros in training). Called wherever a batch is handed over."""
        nlp = self._pipeline()
        if nlp is None:  # pickled or renamed: nothing to tell
            return self.listeners
        for component, listeners in list(self.listener_map.items()):
            for listener in [n for n in listeners if n.upstream_name == "*"]:
                nearest = _nearest_elmo(nlp, component)
                if nearest is not None and nearest[1] is not self and listener in listeners:  # (another thread's call)
                    listeners.remove(listener)
                    if listener.upstream == self.name:  # errors and warnings name the one that feeds it
                        listener.upstream = nearest[0]
            if not listeners:
                self.listener_map.pop(component, None)
        self._adopt_star_listeners(nlp)
        return self.listeners

    def _predicting_listeners(self) -> List[ElmoListener]:
        """:meth:`_fed_listeners` less those of the components that do not run: the pipeline's disabled ones and
        those the running ``nlp(text, disable=...)`` / ``nlp.pipe(texts, disable=...)`` skips
        (:func:`skipped_by_the_call`). A hand-over at prediction stays until its listener reads the doc, so one to
        a component that does not run would keep each doc's float32 layers beside ``doc._.elmo`` for as long as the
        doc lives (``nlp.select_pipes(enable=["elmo"])`` over a corpus kept in memory). Run later on such docs,
        that component reads ``doc._.elmo``."""
        listeners = self._fed_listeners()
        if not listeners:
            return listeners
        nlp = self._pipeline()
        off = skipped_by_the_call(self).union(nlp.disabled if nlp is not None else ())
        if not off:
            return listeners
        return [m for c in self.listening_components if c not in off for m in self.listener_map[c]]

    def _adopt_star_listeners(self, nlp: Language) -> None:
        """Link the ``"*"`` listeners of ``nlp``'s enabled components that this component is now the nearest enabled
        elmo before (:func:`_nearest_elmo`) and that another elmo component lists: linked while that one was the
        nearest, disabled since. Read from the other components' :attr:`listener_map` at each call (no model is
        walked, nothing is kept that could go stale); nothing to do where none lists a ``"*"`` listener."""
        for _, proc in nlp.components:
            if proc is self or not isinstance(proc, ElmoComponent):
                continue
            for component, listeners in list(proc.listener_map.items()):
                for listener in [n for n in listeners if n.upstream_name == "*"]:
                    if component in nlp.disabled or listener in self.listener_map.get(component, ()):
                        continue
                    nearest = _nearest_elmo(nlp, component)
                    if nearest is not None and nearest[1] is self:
                        self.add_listener(listener, component)

    def _listeners_in(self, component, nlp: Optional[Language] = None) -> List[ElmoListener]:
        """The listeners in ``component``'s model (one of ``nlp``'s) that this component feeds (:meth:`_feeds`)."""
        if not isinstance(getattr(component, "model", None), Model):
            return []
        return [
            n for n in component.model.walk() if isinstance(n, ElmoListener) and self._feeds(n, nlp, component.name)
        ]

    def find_listeners(self, component) -> None:
        # spaCy's Language._link_components calls it for each component after this one: its pipeline
        linking = sys._getframe(1)
        nlp = linking.f_locals.get("self") if runs(linking, "spacy.language", "_link_components") else self._pipeline()
        for node in self._listeners_in(component, nlp if isinstance(nlp, Language) else None):
            self.add_listener(node, component.name)

    def _check_listener(
        self, listener: ElmoListener, component_name: str, bilm: Optional[BiLM], source: Optional[str]
    ) -> None:
        """Raise unless ``listener`` can read the layers of ``bilm`` (None: not loaded yet): all layers stored,
        a configured width equal to its width, and sizes it has equal to its own, unless this component set
        them and nothing was built on them yet: sizes from elsewhere (its component loaded or sourced, so
        trained on a biLM of that shape), or ones the layers after it were sized for (:attr:`built_upon`:
        its component initialized) stay."""
        if self.cfg["store"] != "all":
            raise ValueError(Errors.E_LISTENER_NEEDS_ALL.format(name=self.name, store=self.cfg["store"], component=component_name))
        if bilm is None:
            return
        width = bilm.config.output_dim
        configured = listener.attrs.get("width_from_config")
        if configured is not None and configured != width:
            raise ValueError(
                Errors.E_LISTENER_WIDTH.format(component=component_name, width=configured, upstream=self.name, expected=width)
            )
        trained, layers = listener.sizes, bilm.config.n_output_layers
        if None in trained or trained == (layers, width):
            return
        own = getattr(listener, "sized_by", None) == id(self)  # else loaded with them, or set by another pipeline's upstream
        if own and not listener.built_upon:
            return  # resized with the weights
        refusal = Errors.E_LISTENER_BUILT_UPON if own else Errors.E_LISTENER_OTHER_BILM
        raise ValueError(
            refusal.format(
                component=component_name, nL=trained[0], nO=trained[1], upstream=self.name, source=source,
                layers=layers, width=width,
            )
        )

    def _size_listener(self, listener: ElmoListener, bilm: BiLM) -> None:
        listener.set_dim("nO", bilm.config.output_dim, force=True)
        listener.set_dim("nL", bilm.config.n_output_layers, force=True)
        listener.sized_by = id(self)

    def _configure_listener(self, listener: ElmoListener, component_name: str) -> None:
        """Give the listener the biLM's sizes, once it can read its layers (:meth:`_check_listener`)."""
        bilm = get_bilm(self.model)
        self._check_listener(listener, component_name, bilm, self.source)
        if bilm is not None:
            self._size_listener(listener, bilm)

    # -- prediction ------------------------------------------------------------
    def predict(self, docs: Iterable[Doc]) -> List[Floats3d]:
        docs = list(docs)
        self._ensure_weights()
        return self.model.predict(docs)

    def mix_weights(self, nL: Optional[int] = None) -> numpy.ndarray:
        """``(L + 1,)`` float32: softmax of ``mix`` (uniform by default); nL: L + 1 of the layers to mix,
        None = the current weights'."""
        if nL is None:  # the runner's biLM, as its layers are sized: set_bilm sets the model's dims just after it
            bilm = get_bilm(self.model)
            nL = self.model.get_dim("nL") if bilm is None else bilm.config.n_output_layers
        w = numpy.zeros((nL,), dtype="float32") if self.cfg["mix"] is None else numpy.asarray(self.cfg["mix"], "float32")
        e = numpy.exp(w - w.max())
        return (e / e.sum()).astype("float32")

    def set_annotations(self, docs: Sequence[Doc], outputs: List[Floats3d]) -> None:
        """outputs[i]: ``docs[i]``'s ``(L + 1, n, 2P)`` float32 layers (:meth:`predict`'s)."""
        # the layers' own count: weights of another shape may have been set since they were predicted
        mix = self.mix_weights(len(outputs[0]) if outputs else None)
        listeners = self._predicting_listeners()
        handed = []
        for doc, layers in zip(docs, outputs):
            layers = self.model.ops.to_numpy(layers)
            set_doc_data(doc, layers, mix, self.cfg["store"], self.cfg["store_dtype"])
            if self.cfg["user_hooks"] and self.cfg["store"] != "none":  # no data: keep spaCy's own vectors
                install_hooks(doc)
            if self.cfg["set_doc_tensor"]:
                doc.tensor = numpy.tensordot(mix, layers, axes=(0, 0)).astype("float32")
            if listeners:
                # the float32 layers, as the listeners read them in training, not doc._.elmo rounded to store_dtype:
                # predictions do not depend on it. predict allocates each doc's own array; a view of a larger one
                # (a caller's batch buffer) is copied, so that no entry keeps a whole batch alive
                own = layers if layers.base is None else layers.copy()
                handed.append((own, getattr(doc._, IDX_ATTR)))
        # each listener reads these layers even if another elmo component overwrites doc._.elmo (kept per doc,
        # weakly, until the listener reads that doc)
        for listener in listeners:
            listener.receive_predicted(docs, handed)

    # -- training ----------------------------------------------------------------
    # Fine-tuning (frozen = false): each listener sends the gradient of the layers it read; the
    # biLM's backward runs once per batch, when all of them have (or, for listeners of components
    # that did not train on the batch, at the next finish_update or update; Language.update's own
    # disabled and excluded components are not waited for), and the optimizer
    # steps once per finish_update, so that [training] accumulate_gradient = N sums N sub-batches
    # into one step. spaCy's nlp.update(sgd=...) calls finish_update right after update(), before
    # the listening components send their gradients: that optimizer steps as soon as they have.
    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Run the biLM on the batch and hand its layers to every listener."""
        losses = {} if losses is None else losses
        losses.setdefault(self.name, 0.0)
        docs = [eg.predicted for eg in examples]
        self._ensure_weights()
        for name, listener in self.__dict__.pop("_skipped_listeners", []):
            if self._feeds(listener):
                self.add_listener(listener, name)
        batch_id = ElmoListener.get_batch_id(docs)
        listeners = self._fed_listeners()
        updating = _components_updating(sys._getframe(1))
        training = [i for i, node in enumerate(listeners) if updating is None or node.component in updating]
        if self.cfg["frozen"] or not training:
            outputs = self.model.predict(docs)  # no autograd graph at all
            for listener in listeners:
                listener.receive(batch_id, outputs, _no_backprop, docs)
            return losses
        self._run_backward()  # the last batch's, if a listening component did not train on it
        self._step_with = sgd
        set_dropout_rate(self.model, drop)
        outputs, bp_outputs = self.model.begin_update(docs)
        batch = _TrainingBatch(bp_outputs, [self.model.ops.alloc3f(*o.shape) for o in outputs], training)
        _BATCHES[self] = batch
        for i, listener in enumerate(listeners):
            listener.receive(batch_id, outputs, functools.partial(self._receive_gradient, batch, i, losses), docs)
        return losses

    def _receive_gradient(self, batch: "_TrainingBatch", index: int, losses: Dict[str, float], d_outputs: List[Floats3d]) -> List[Doc]:
        """A listener's backprop: add its gradient; the last one runs the backward (and the step
        when an optimizer is already known for this batch)."""
        for total, d in zip(batch.d_outputs, d_outputs):
            total += d
            # thinc's stubs type a bare sum() of a Floats3d as an error (every overload wants keepdims=)
            losses[self.name] = losses.get(self.name, 0.0) + float((d**2).sum())  # type: ignore[call-overload]
        batch.waiting.discard(index)
        batch.heard += 1
        if not batch.waiting and batch is _BATCHES.get(self):
            self._run_backward()
            if self._step_with is not None:
                self._apply_gradients(self._step_with)
        return []

    def _run_backward(self) -> None:
        """The biLM's backward for the current batch, if any listener sent a gradient for it."""
        batch = _BATCHES.pop(self, None)
        if batch is not None and batch.heard:
            batch.backprop(batch.d_outputs)
            self._unapplied = True

    def _apply_gradients(self, sgd: Optimizer) -> None:
        if getattr(self, "_unapplied", False):
            step_bilm(self.model, sgd, self.cfg["learn_rate_scale"])
            self._unapplied = False

    def finish_update(self, sgd: Optimizer) -> None:
        """Frozen: nothing. Else apply the gradients of the batches since the last step."""
        if self.cfg["frozen"]:
            return
        batch = _BATCHES.get(self)
        if batch is not None and not batch.heard:
            # called before any listener sent its gradient (nlp.update(sgd=...)): step when they have
            self._step_with = sgd
        else:
            self._run_backward()
        self._apply_gradients(sgd)

    def get_loss(self, examples, scores) -> None:
        pass

    def add_label(self, label: str) -> int:
        raise NotImplementedError

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        weights_loader: Optional[WeightsLoader] = None,
        layer_cache_mb: Any = 0,  # Any: spaCy's validation would turn true or "10" into an int
    ) -> None:
        """Load weights (``weights_loader`` first, unless its path is empty; else ``weights``, else the bundled
        default) and set
        :attr:`layer_cache_mb` (``[initialize.components.NAME]``; 0 = off), once they are loaded: weights
        refused leave the cache (limit and entries) as it was."""
        check_layer_cache_mb(layer_cache_mb, self.name)
        weights = None if names_no_weights(self.cfg["weights"]) else self.cfg["weights"]
        if weights_loader is not None and requests_nothing(weights_loader) and weights is not None:
            # paths.elmo left empty: the component's own weights setting, not the bundled default
            self._load_named(lambda: self.load_weights(weights, nlp=nlp), nlp, ("components", self.name, "weights"),
                             Errors.E_ELMO_WEIGHTS_SETTING)  # fmt: skip
        elif weights_loader is not None:
            requested = getattr(weights_loader, "path", None)
            if not names_no_weights(requested) and weights is not None and not _same_weights(str(requested), weights):
                warnings.warn(
                    Warnings.W_ELMO_WEIGHTS_TWICE.format(name=self.name, weights=weights, requested=str(requested)),
                    UserWarning,
                    stacklevel=user_stacklevel(),
                )
            loader_path = ("initialize", "components", self.name, "weights_loader", "path")
            if hasattr(weights_loader, "path"):  # this package's loader: a missing path is its path's
                self._load_named(lambda: self.load_weights(loader=weights_loader, nlp=nlp), nlp, loader_path,
                                 Errors.E_ELMO_LOADER_PATH)  # fmt: skip
            else:
                self.load_weights(loader=weights_loader, nlp=nlp)
        else:
            self._ensure_weights(nlp)
        self.layer_cache_mb = layer_cache_mb
        self.model.initialize()
        if nlp is not None:
            self._skipped_listeners = self._listeners_skipped_by(nlp)
        for listener in self.listeners:
            self._configure_listener(listener, self._component_of(listener))

    # A saved pipeline carries the weights themselves, never just the path they
    # would be loaded from at first use (lazy loading).
    def to_bytes(self, *, exclude=tuple()):
        self._ensure_weights()
        return super().to_bytes(exclude=exclude)

    def to_disk(self, path, *, exclude=tuple()):
        self._ensure_weights()
        super().to_disk(path, exclude=exclude)

    # Under the lock of first-use loading: weights that another thread's call is loading at first use
    # are set before these, never after them (and that call runs on either, whole: bilm_layer._forward).
    # The loaded weights are checked (:meth:`_check_weights`) before they replace the old ones; weights
    # refused leave the component as it was and the shared vocab too: spaCy loads it before the model, so it
    # is read first into a vocab of its own (a vocab that cannot be read is an error before anything changes)
    # and set once they are accepted, within the same all-or-nothing: one that fails to be set puts weights and
    # model state back (:meth:`_all_or_nothing`). The saved cfg is not read: the settings (``[components.NAME]``)
    # are those the component was built with, as its model's are (.settings). spacy.load builds it from the
    # saved config.cfg with the overrides given, so what nlp.config says runs; spaCy's own loading put the
    # saved cfg over them. (The cfg is still saved, for versions that read it.)
    def from_bytes(self, bytes_data, *, exclude=tuple()):
        def read(staged: Vocab) -> None:
            spacy_util.from_bytes(bytes_data, {"vocab": lambda b: staged.from_bytes(b, exclude=exclude)}, [])

        def read_model() -> None:
            spacy_util.from_bytes(bytes_data, {"model": lambda b: load_model_bytes(self.model, b)}, exclude)

        return self._load(exclude, read, read_model)

    def from_disk(self, path, *, exclude=tuple()):
        def read(staged: Vocab) -> None:
            def read_dir(p: Path) -> None:
                staged.from_disk(p, exclude=exclude)

            spacy_util.from_disk(path, {"vocab": read_dir}, [])

        def read_model() -> None:
            def read_file(p: Path) -> None:
                load_model_bytes(self.model, Path(p).read_bytes(), str(p))  # the file named by its errors

            spacy_util.from_disk(path, {"model": read_file}, exclude)

        return self._load(exclude, read, read_model)

    def _load(
        self, exclude: Iterable[str], read_vocab: Callable[[Vocab], None], read_model: Callable[[], None]
    ) -> "ElmoComponent":
        """``read_model()`` (its weights checked and staged, :func:`weights_checked`) within one all-or-nothing: the
        vocab (unless excluded), read first by ``read_vocab(staged)``, is set once the weights are accepted, then the
        weights with their sizes (until then the old ones serve, with theirs); setting the vocab fails, and the
        model's state is put back."""
        vocab_bytes: Optional[bytes] = None
        if "vocab" not in exclude:
            staged = Vocab()
            read_vocab(staged)
            vocab_bytes = staged.to_bytes(exclude=exclude)

        def set_vocab() -> None:
            if vocab_bytes is not None:
                _set_vocab(self.vocab, vocab_bytes, exclude)

        with _loading_lock(self):
            with self._all_or_nothing() as staged:
                read_model()
                self._after_load(staged, set_vocab)
        return self

    @contextlib.contextmanager
    def _all_or_nothing(self):
        """Within: a load; yields its :class:`StagedWeights`, checked as read. An error puts the model's state back
        (and its weights, if they were set)."""
        state = ModelState(self.model)
        try:
            with weights_checked(self.model, self._check_weights, f"The '{self.name}' component") as staged:
                yield staged
        except BaseException:
            state.restore()
            raise

    def _after_load(self, staged: StagedWeights, set_vocab: Callable[[], None]) -> None:
        """The vocab set, then the loaded weights (else the current ones, when the model was excluded) set, with
        their sizes, and set up: nothing after ``set_vocab`` fails, so a failing vocab leaves the old weights
        serving, with their sizes, gradients and listeners as they were. The loaded weights were checked as they
        were read (:func:`weights_checked`), and nothing the check reads changes in between: the saved cfg is not
        read. A load that excluded the model changes no setting, so the current weights need no new check. Loaded
        weights are checked against the pipeline's tokenizer (:meth:`_check_tokens`: that of the pipeline loading
        them, ``spacy.load``, ``nlp.from_bytes``), as those loaded at first use or initialize are; the pipeline read
        is recorded (:meth:`_checked_in`) once they are set, not when a failing vocab leaves the old ones serving."""
        checked_in = self._check_tokens(staged.bilm, staged.source) if staged.bilm is not None else None
        bilm, source = (staged.bilm, staged.source) if staged.bilm is not None else (get_bilm(self.model), self.source)
        set_vocab()
        if bilm is not None:
            bilm.requires_grad_(not self.cfg["frozen"])
            set_bilm(self.model, bilm, source or "")
            if staged.bilm is not None:
                self._checked_in(checked_in, new_weights=True)
            for listener in self.listeners:  # those it sized (checked: nothing built on them), not yet loaded ones
                if getattr(listener, "sized_by", None) == id(self):
                    self._size_listener(listener, bilm)
