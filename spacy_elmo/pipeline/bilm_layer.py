"""The thinc model of the ``elmo`` component: ``List[Doc] -> List[Floats3d]``.

Each output is ``(L + 1, n_tokens, 2P)``: every biLM layer for every token of
one doc. The torch :class:`ElmoRunner` sits inside thinc's PyTorch wrapper
(device placement, gradients when fine-tuning); its weights serialize as
safetensors + config JSON (no pickle).
"""

import contextlib
import functools
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import srsly
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, CupyOps, Model, MPSOps, Ops, Optimizer, PyTorchShim, torch2xp, xp2torch
from thinc.layers.pytorchwrapper import forward as pytorch_forward
from thinc.shims.shim import Shim
from thinc.types import Floats3d
from thinc.util import convert_recursive, is_xp_array

from ..bilm import BiLM, BiLMConfig
from ..bilm.config import is_int
from ..bilm.native_io import cast_for_save, check_weight, reading_provenance
from ..errors import Errors, Warnings
from ..ops import BACKENDS
from .batching import Piece, group_pieces, longest_cut_sentence, make_pieces, word_positions
from .callers import user_stacklevel
from .runner import ElmoRunner, trains
from .settings import setting


def build_elmo_bilm(
    batch_tokens: int = 4096,
    max_window: int = 128,
    backend: str = "auto",
    cache_size: int = 50000,
) -> Model[List[Doc], List[Floats3d]]:
    """The component model; the biLM arrives later through :func:`set_bilm` (weights decide its shape).
    Its settings are the config's also when a saved model is loaded into it (:mod:`.settings`)."""
    for name, value, minimum, meaning in (
        ("batch_tokens", batch_tokens, 1, "padded tokens per biLM call"),
        ("max_window", max_window, 1, "the longest row of tokens the biLM reads at once"),
        ("cache_size", cache_size, 0, "char-CNN cache entries, 0 for none"),
    ):
        if not is_int(value) or value < minimum:
            raise ValueError(
                Errors.E_ELMO_MODEL_SETTING.format(setting=name, value=value, minimum=minimum, meaning=meaning)
            )
    if not isinstance(backend, str) or backend not in BACKENDS:  # whether "fused" can run is checked when it runs
        raise ValueError(Errors.E_ELMO_MODEL_BACKEND.format(value=backend, choices=", ".join(map(repr, BACKENDS))))
    runner = ElmoRunner(int(cache_size))  # a NumPy integer as an int (setting() makes the attrs below ints)
    runner.backend_name = backend
    # thinc's PyTorchWrapper_v3, with the shim that swaps in the optimizer's averages
    wrapper: Model[Any, Any] = Model(
        "pytorch",
        pytorch_forward,
        attrs={"convert_inputs": _convert_inputs, "convert_outputs": _convert_outputs},
        shims=[AveragingPyTorchShim(runner, serialize_model=_serialize_runner, deserialize_model=_deserialize_runner)],
        dims={"nI": None, "nO": None},
    )
    return Model(
        "elmo_bilm",
        _forward,
        layers=[wrapper],
        dims={"nO": None, "nL": None},
        attrs={"batch_tokens": setting(batch_tokens), "max_window": setting(max_window), "backend": setting(backend)},
        init=_init,
    )


#: a fine-tuned biLM's learning rate over the optimizer's (the ``elmo`` component's ``learn_rate_scale`` and
#: ``spacy_elmo.ElmoListener.v1``'s, for a biLM of its own). The task's Adam rate (0.001 in the shipped configs)
#: rewrites a pretrained biLM within a few steps (three steps changed a small biLM's output layers by 60-120%,
#: relative RMS); 0.01 of it (1e-5, the range pretrained encoders are fine-tuned at) by 0.5%
DEFAULT_LEARN_RATE_SCALE = 0.01


class AveragingPyTorchShim(PyTorchShim):
    """thinc's PyTorchShim whose ``use_params`` swaps in the parameter averages the optimizer keeps, and whose
    ``finish_update`` steps the biLM at the optimizer's learning rate times :attr:`lr_scale`.

    thinc's optimizer records a torch parameter's average under ``(shim.id, name)`` (the key
    ``PyTorchShim.finish_update`` passes it), but ``PyTorchShim.use_params`` reads only keys
    ``"pytorch_{id}_{name}"``, which no optimizer writes: ``nlp.use_params(optimizer.averages)``
    (``spacy train`` with ``use_averages = true`` evaluates and saves inside it) left a fine-tuned
    biLM at its raw weights next to averaged task layers. The token and layer caches hold
    outputs of the weights in place: they are emptied on entering and leaving.

    thinc's ``PyTorchShim.finish_update`` calls the optimizer without ``lr_scale``, and every ``finish_update`` of a
    model that holds the biLM (the ``elmo`` component's, or that of a component owning a copy) reaches the shim
    through thinc's ``Model.finish_update``, once per call: the scale is applied here, so that each of them steps
    the biLM once, at the rate of the setting that owns it (:func:`step_bilm`, :func:`_own_forward` set it).
    """

    #: the biLM's learning rate over the optimizer's (thinc's ``lr_scale``); 1.0 until its owner sets it
    lr_scale: float = 1.0

    def finish_update(self, optimizer: Optimizer) -> None:
        # Model.finish_update only calls the optimizer (key, weights, gradient), as the partial does
        scaled = optimizer if self.lr_scale == 1.0 else functools.partial(optimizer, lr_scale=self.lr_scale)
        # thinc steps the weights that hold a gradient (none: frozen, or no backward yet), unless one overflowed
        steps = not self._grad_scaler.found_inf and any(p.grad is not None for p in self._model.parameters())
        super().finish_update(cast(Optimizer, scaled))
        if steps:  # the weights are no longer their source's: a saved pipeline and the sourced-weights check say so
            cast(ElmoRunner, self._model).mark_fine_tuned()

    @contextlib.contextmanager
    def use_params(self, params):
        parameters = dict(self._model.named_parameters())
        found = {name: params[(self.id, name)] for name in parameters if (self.id, name) in params}
        if not found:
            with super().use_params(params):
                yield
            return
        backup = {name: parameters[name].detach().clone() for name in found}
        with torch.no_grad():
            for name, value in found.items():
                parameters[name].copy_(xp2torch(value, device=parameters[name].device))
        self._model.clear_caches()
        try:
            yield
        finally:
            with torch.no_grad():
                for name, value in backup.items():
                    parameters[name].copy_(value)
            self._model.clear_caches()


def renew_shim_ids(model: Model) -> None:
    """Give the shims of a copied model ids of their own.

    thinc's ``Model.copy`` deep-copies a shim with its id, which keys its parameters in the optimizer
    (Adam's moments, the update counts, the averages): a copy of the biLM that trains next to the
    original (``nlp.replace_listeners`` while ``elmo`` still feeds other listeners) would share all of
    that with it, and ``use_params`` would give both the same averages."""
    for node in model.walk():
        for shim in node.shims:
            with Shim.global_id_lock:
                Shim.global_id += 1
                shim.id = Shim.global_id


def get_runner(model: Model) -> ElmoRunner:
    return model.layers[0].shims[0]._model


def get_shim(model: Model) -> AveragingPyTorchShim:
    """The shim of an ``elmo_bilm`` model (thinc types shims as the base Shim)."""
    return cast(AveragingPyTorchShim, model.layers[0].shims[0])


def check_layer_cache_mb(value: Any, name: str) -> None:
    """Raise unless ``value`` is a layer cache limit (MB, an integer >= 0); ``name``: the component it is
    checked for (the ``elmo`` component's ``layer_cache_mb`` and ``spacy_elmo.ElmoBiLM.v1``'s setting)."""
    if not is_int(value) or value < 0:
        raise ValueError(Errors.E_ELMO_LAYER_CACHE.format(name=name, value=value))


def set_layer_cache_mb(model: Model, value: Any, name: str) -> None:
    """Set the limit (MB, 0 = off) of the model's layer cache (checked: :func:`check_layer_cache_mb`)."""
    check_layer_cache_mb(value, name)
    get_runner(model).layer_cache.set_limit(value)


#: what a load reads, for its errors, where no component names it (``spacy_elmo.ElmoBiLM.v1`` in another component)
_SAVED_LAYER = "The saved elmo biLM layer"


class StagedWeights:
    """What a load (:func:`weights_checked`) read: the weights that ``check(bilm, source)`` accepted, kept here
    instead of replacing the model's own (``bilm`` None: none read, as with ``exclude=["model"]``). ``where``: what
    is read (e.g. "The 'elmo' component"), named by the errors for weights that cannot serve."""

    def __init__(self, check: Callable[[BiLM, str], None], where: str = _SAVED_LAYER) -> None:
        self.check = check
        self.where = where
        self.bilm: Optional[BiLM] = None
        self.source = ""


#: runner -> the load whose weights are deserialized into it (:func:`weights_checked`)
_STAGED: "weakref.WeakKeyDictionary[ElmoRunner, StagedWeights]" = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def weights_checked(model: Model, check: Callable[[BiLM, str], None], where: str = _SAVED_LAYER):
    """Within: weights that :func:`load_model_bytes` reads into ``model`` are checked by ``check(bilm, source)`` (an
    error it raises is the load's) and kept in the :class:`StagedWeights` yielded, not set: the model serves its
    own weights, with their sizes (``nO``, ``nL``: calls of other threads read them without a lock), until the
    caller sets the new ones with :func:`set_bilm`. Reading them sets the model's attrs (thinc's ``from_dict``):
    a :class:`ModelState` taken first puts those back. ``where``: what is read, for the errors."""
    runner = get_runner(model)
    staged = StagedWeights(check, where)
    _STAGED[runner] = staged
    try:
        yield staged
    finally:
        _STAGED.pop(runner, None)


#: the sizes of the elmo model that its weights decide (:func:`set_bilm` sets them)
_WEIGHTS_DIMS = ("nO", "nL")


def load_model_bytes(model: Model, data: bytes, path: str = "The elmo component's saved model") -> None:
    """thinc's ``model.from_bytes(data)`` but for the model's own sizes (``nO``, ``nL``), which the weights decide:
    :func:`set_bilm` sets them with the weights. thinc sets a model's sizes before it reads its weights and refuses
    to change one once set, so weights of another shape would never reach the check, and sizes set then would
    describe weights not yet (or never) serving. ``path``: the file read (or what the bytes are), for the error
    when they cannot be unpacked: thinc opens ``elmo/model`` before the save that :func:`_serialize_runner`
    refuses, which leaves it empty."""
    try:
        msg = srsly.msgpack_loads(data)
    except ValueError as err:  # srsly's msgpack errors (incomplete input, extra data, format) are all ValueErrors
        raise ValueError(Errors.E_ELMO_MODEL_INCOMPLETE.format(path=path, err=str(err) or type(err).__name__)) from err
    nodes = msg.get("nodes") if isinstance(msg, dict) else None
    if isinstance(nodes, list) and nodes and isinstance(nodes[0], dict) and isinstance(nodes[0].get("dims"), dict):
        nodes[0]["dims"] = {name: value for name, value in nodes[0]["dims"].items() if name not in _WEIGHTS_DIMS}
    model.from_dict(convert_recursive(is_xp_array, model.ops.asarray, msg))


class ModelState:
    """The dims and attrs of a model's nodes (what thinc's ``from_bytes`` sets before any weights) and its
    weights, to put back."""

    def __init__(self, model: Model) -> None:
        self.saved = [(node, dict(node._dims), dict(node.attrs)) for node in model.walk()]
        self.runner = get_runner(model)
        self.bilm, self.source = self.runner.bilm, getattr(self.runner, "source", None)

    def restore(self) -> None:
        for node, dims, attrs in self.saved:
            put_back(node._dims, dims)
            put_back(node.attrs, attrs)
        if self.runner.bilm is not self.bilm:  # replaced: the caches, emptied then, are emptied again
            self.runner.set_bilm(self.bilm)
            if self.source is not None:
                self.runner.source = self.source


def put_back(target: Dict[str, Any], saved: Dict[str, Any]) -> None:
    """Make ``target`` equal ``saved`` in place, never without a key both have: calls of other threads
    (which take no lock) read it meanwhile. Updated first, then the keys ``saved`` lacks are deleted."""
    target.update(saved)
    for key in [key for key in target if key not in saved]:
        target.pop(key, None)


def get_bilm(model: Model) -> Optional[BiLM]:
    return get_runner(model).bilm


def ops_device(ops: Ops) -> torch.device:
    """The torch device of thinc ``ops``, named as thinc's ``get_torch_default_device`` names that of its current
    ops: CupyOps -> ``cuda:N`` of the current GPU (a CupyOps holds no GPU of its own: its ``device_id`` is 0
    whichever GPU ``require_gpu(N)`` or ``to_gpu(N)`` chose), MPSOps -> ``mps``, any other -> the CPU."""
    if isinstance(ops, CupyOps):
        return torch.device("cuda", torch.cuda.current_device())
    if isinstance(ops, MPSOps):
        return torch.device("mps")
    return torch.device("cpu")


def set_bilm(model: Model, bilm: BiLM, source: str) -> None:
    """Put loaded weights into the model, on the device of the model's ops (:func:`ops_device`), then set the dims:
    a call of another thread (which takes no lock) that reads both in between sees the new weights with the old
    dims, never the reverse (readers that need both read the sizes from the biLM they run, as :func:`_forward`
    does).

    The model's ops, not thinc's current ones: weights loaded at the first call, after the pipeline was built
    (``PyTorchShim.device``, with no weights yet, is the device of the current ops) went to the GPU of a
    ``spacy.require_gpu()`` called in between, while the model's ops, fixed when it was built (thinc's
    ``PyTorchWrapper`` also places its module then), allocate numpy outputs. ``model.to_gpu(i)`` / ``to_cpu()``
    change the model's ops with its weights."""
    bilm.backend = model.attrs["backend"]
    runner = get_runner(model)
    runner.set_bilm(bilm.to(ops_device(model.ops)))
    runner.source = source
    _set_dims(model)


def step_bilm(model: Model, optimizer, lr_scale: float = 1.0) -> None:
    """Apply the biLM's gradients with ``optimizer``, its learning rate times ``lr_scale`` (thinc's ``Optimizer``
    takes ``lr_scale`` per call: :class:`AveragingPyTorchShim` passes it, and marks the weights fine-tuned in their
    source when it steps them); the token and layer caches are stale after it."""
    get_shim(model).lr_scale = lr_scale
    model.finish_update(optimizer)
    get_runner(model).clear_caches()


def _set_dims(model: Model) -> None:
    """The model's sizes set from its biLM, both in one store: a call of another thread (which takes no lock)
    reads the old pair or the new one, never one of each."""
    bilm = get_bilm(model)
    if bilm is not None:
        sizes = {"nO": bilm.config.output_dim, "nL": bilm.config.n_output_layers}
        model._dims = {**model._dims, **sizes}  # thinc's set_dim(force=True) without params, in one step


def _init(model: Model, X: Any = None, Y: Any = None) -> None:
    _set_dims(model)


def _forward(model: Model, docs: List[Doc], is_train: bool):
    """docs -> per-doc ``(L + 1, n, 2P)`` arrays, running sub-batches of bounded padded size.
    Whitespace tokens are not read (see :mod:`.batching`): their rows stay zero.

    With a layer cache (the component's ``layer_cache_mb``; only at prediction and for a biLM that does not
    train) a piece whose words were run before is copied from it, and a piece repeated in the
    batch runs once: only the other pieces go to the biLM, grouped as without the cache.

    The biLM is taken once, here, for the whole call: weights that another thread sets meanwhile
    (``load_weights``, ``from_disk``) replace the runner's biLM, never this call's. The layer cache's generation is
    read with the biLM, under the cache's lock (:meth:`ElmoRunner.set_bilm` changes both under it); every change
    of the weights (set, stepped, moved or cast in place) empties the cache and starts a new one, so this call
    neither reads the entries of weights changed meanwhile nor keeps its layers, made by the weights before the
    change, for the calls after it (:mod:`.layer_cache`)."""
    runner = get_runner(model)
    with runner.layer_cache.lock:  # together, as ElmoRunner.set_bilm changes them
        generation, bilm = runner.layer_cache.generation, runner.bilm
    assert bilm is not None, "the elmo model runs before set_bilm"
    nL, D = bilm.config.n_output_layers, bilm.config.output_dim  # the model's dims follow the current biLM
    words = [word_positions(doc) for doc in docs]
    texts = [[t.text for t in doc] for doc in docs]
    outputs = [model.ops.alloc3f(nL, len(doc), D) for doc in docs]
    callbacks = []
    pieces = make_pieces(docs, model.attrs["max_window"], words)
    if not runner.warned_long_sentence:
        _warn_cut_sentence(model, runner, docs, pieces, words)
    cache = runner.layer_cache if runner.layer_cache.limit and not is_train and not trains(bilm) else None
    # each piece's words as the biLM reads them, also its layer-cache key
    rows = {p: tuple([texts[p.doc][i] for i in words[p.doc][p.start : p.end].tolist()]) for p in pieces}

    def rows_of(p: Piece):  # the piece's rows of its doc's output
        return _token_index(model.ops, words[p.doc][p.start : p.end])

    same: Dict[Piece, List[Piece]] = {}  # with a cache: piece to run -> the pieces of the same words
    if cache is not None:
        first: Dict[Tuple[str, ...], Piece] = {}
        for p in pieces:
            hit = cache.get(rows[p], generation)
            if hit is not None:
                outputs[p.doc][:, rows_of(p)] = hit
            elif rows[p] in first:
                same[first[rows[p]]].append(p)
            else:
                first[rows[p]] = p
                same[p] = [p]
        pieces = list(same)
    for group in group_pieces(pieces, model.attrs["batch_tokens"]):
        where = [rows_of(p) for p in group]
        Y, bp = model.layers[0](([rows[p] for p in group], bilm), is_train)  # (nL, B, T, D)
        for b, p in enumerate(group):
            outputs[p.doc][:, where[b]] = Y[:, b, : p.end - p.start]
            if cache is not None:
                layers = model.ops.xp.ascontiguousarray(Y[:, b, : p.end - p.start])
                cache.put(rows[p], layers, generation)
                for q in same[p][1:]:
                    outputs[q.doc][:, rows_of(q)] = layers
        callbacks.append((group, where, Y.shape, bp))

    def backprop(dYs: List[Floats3d]) -> List[Doc]:
        for group, where, shape, bp in callbacks:
            dY = model.ops.alloc4f(*shape)
            for b, p in enumerate(group):
                dY[:, b, : p.end - p.start] = dYs[p.doc][:, where[b]]
            bp(dY)
        return []

    return outputs, backprop


def name_owner(
    model: Model, component: Optional[str] = None, block: Optional[str] = None, *, pipe: Any = None,
    warn_again: bool = True,
) -> None:
    """Record the owner of ``model`` (an ``elmo_bilm`` model), for its messages: either ``pipe``, the component
    whose model it is (the ``elmo`` component), whose ``name`` the messages read when they are given (spaCy keeps
    it current through ``nlp.rename_pipe`` and ``add_pipe(source=, name=)``, which leave the warned-once flag as it
    was); or, for a biLM no component object holds (a component's own copy, ``nlp.replace_listeners``; an
    ElmoListener.v1 ``bilm`` block), the name of the ``component`` it is built in and the config block
    (``components.NAME.model...``) its spacy_elmo.ElmoBiLM.v2 block lies in (None: unknown). Give one or the other:
    with ``pipe``, ``component`` and ``block`` are not read. ``warn_again``: a fresh copy (``nlp.
    replace_listeners``) warns anew, once; False keeps the flag (the same biLM unpickled with its component)."""
    runner = get_runner(model)
    if pipe is not None:
        runner.owner = weakref.ref(pipe)
    else:
        runner.owner = None if component is None else (component, block)
    if warn_again:
        runner.warned_long_sentence = False


def _warn_cut_sentence(
    model: Model, runner: ElmoRunner, docs: Sequence[Doc], pieces: List[Piece], words: Sequence[Any]
) -> None:
    """W_ELMO_SENTENCE_OVER_WINDOW, once per biLM (a copy carries the flag; the copy that ``nlp.replace_listeners``
    makes warns afresh), when a doc with sentence boundaries had a sentence over
    ``max_window`` words cut into pieces (:func:`.batching.longest_cut_sentence`). Here, in the model's forward, so
    that every path that runs it warns: the ``elmo`` component's predict and update, and a component's own copy
    (``nlp.replace_listeners``)."""
    max_window = int(model.attrs["max_window"])
    longest = longest_cut_sentence(docs, pieces, max_window, words)
    if not longest:
        return
    runner.warned_long_sentence = True
    owner = runner.owner_names()
    if owner is None:
        reader, setting = Warnings.W_ELMO_OVER_WINDOW_READER_UNNAMED, Warnings.W_ELMO_OVER_WINDOW_SETTING_UNNAMED
    else:
        name, block = owner
        reader = Warnings.W_ELMO_OVER_WINDOW_READER.format(name=name)
        setting = (
            Warnings.W_ELMO_OVER_WINDOW_SETTING_UNNAMED
            if block is None
            else Warnings.W_ELMO_OVER_WINDOW_SETTING.format(block=block, raise_to=longest)
        )
    warnings.warn(
        Warnings.W_ELMO_SENTENCE_OVER_WINDOW.format(
            words=longest, reader=reader, max_window=max_window, pieces=-(-longest // max_window),
            raise_to=longest, setting=setting,
        ),
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _token_index(ops, positions):
    """Token positions (sorted) as an index of a doc's output rows: a slice when contiguous."""
    first, last = int(positions[0]), int(positions[-1])
    return slice(first, last + 1) if last - first + 1 == len(positions) else ops.xp.asarray(positions)


def own_bilm_layer(
    bilm: Model[List[Doc], List[Floats3d]], frozen: bool = True, learn_rate_scale: float = DEFAULT_LEARN_RATE_SCALE
) -> Model[List[Doc], List[Floats3d]]:
    """A component's own biLM (what ``nlp.replace_listeners`` puts where an ElmoListener was).

    ``bilm`` is an ``elmo_bilm`` model; its weights come with the component's
    saved model. frozen: run it without gradients also in training (as the
    ``elmo`` component with ``frozen = true`` did); else the component's
    optimizer fine-tunes it, at its learning rate times ``learn_rate_scale``
    (above 0, checked by the caller).
    """
    attrs = {"frozen": setting(bool(frozen)), "learn_rate_scale": setting(float(learn_rate_scale))}
    return Model("elmo_own_bilm", _own_forward, layers=[bilm], init=_own_init, attrs=attrs)


def _check_own_weights(model: Model) -> Model:
    bilm = model.layers[0]
    if get_bilm(bilm) is None:
        raise ValueError(Errors.E_OWN_BILM_NO_WEIGHTS)
    return bilm


def _own_init(model: Model, X: Any = None, Y: Any = None) -> None:
    _check_own_weights(model).initialize()


def _own_forward(model: Model, docs: List[Doc], is_train: bool):
    bilm = _check_own_weights(model)
    if model.attrs["frozen"] or not is_train:
        return bilm.predict(docs), _no_input_grad
    runner = get_runner(bilm)
    runner.clear_caches()  # the weights change at the next finish_update
    # the component's model.finish_update steps the biLM through its shim: at the scale of these gradients' run
    get_shim(bilm).lr_scale = float(model.attrs["learn_rate_scale"])
    outputs, bp = bilm.begin_update(docs)

    def backprop(d_outputs: List[Floats3d]) -> List[Doc]:
        runner.clear_caches()
        return bp(d_outputs)

    return outputs, backprop


def _convert_inputs(model: Model, rows_bilm: Tuple[Sequence[Sequence[str]], BiLM], is_train: bool):
    rows, bilm = rows_bilm
    return ArgsKwargs(args=(rows,), kwargs={"bilm": bilm}), _no_input_grad


def _no_input_grad(d_inputs: Any) -> List[Any]:  # module level: picklable
    return []


def _convert_outputs(model: Model, X_Ytorch, is_train: bool):
    _, Ytorch = X_Ytorch
    # the arrays of the model's ops wherever the biLM runs: without ops, torch2xp gives cupy arrays for a biLM on a
    # GPU, which numpy outputs refuse (one loaded onto the current ops' GPU by thinc's from_bytes, as a copy that
    # nlp.replace_listeners made is, into a model built on the CPU)
    Y = torch2xp(Ytorch.float() if Ytorch.dtype != torch.float32 else Ytorch, ops=model.ops)

    def reverse(dY) -> ArgsKwargs:
        return ArgsKwargs(args=((Ytorch,),), kwargs={"grad_tensors": (xp2torch(dY, device=Ytorch.device),)})

    return Y, reverse


def _compact(tensor: torch.Tensor) -> torch.Tensor:
    """float16 when that holds every value exactly (weights loaded from a float16 model, such as the
    bundled default, run in float32): half the bytes in every saved pipeline, the same weights loaded."""
    if tensor.dtype == torch.float32:
        half = tensor.half()
        if torch.equal(half.float(), tensor):
            return half
    return tensor


def _serialize_runner(runner: ElmoRunner) -> bytes:
    """The biLM (config, weights, where they came from); refused (:func:`cast_for_save`) when a weight holds NaN or
    infinities: a fine-tuning that diverged is saved by ``spacy train`` at every checkpoint, and a pipeline so saved
    gives NaN vectors. ``spacy train`` stops at the first such checkpoint, its earlier model-best kept."""
    if runner.bilm is None:
        return srsly.msgpack_dumps({"config": None})
    state = {
        k: _compact(cast_for_save(k, v.detach().cpu(), None, not_finite=Errors.E_ELMO_SAVE_NOT_FINITE).contiguous())
        for k, v in runner.bilm.state_dict().items()
    }
    return srsly.msgpack_dumps(
        {"config": runner.bilm.config.to_dict(), "source": getattr(runner, "source", ""), "weights": st_save(state),
         # how the biLM reads text (pretrain's language and tokenizer): export writes it, the language check reads it
         "provenance": reading_provenance(runner.bilm)}
    )


def _deserialize_runner(runner: ElmoRunner, data: bytes, device: torch.device) -> ElmoRunner:
    msg = srsly.msgpack_loads(data)
    if msg.get("config") is None:
        return runner
    backend = getattr(runner, "backend_name", "auto")
    bilm = BiLM(BiLMConfig.from_dict(msg["config"]), backend=backend)
    staged = _STAGED.get(runner)
    own = bilm.state_dict()
    where = staged.where if staged is not None else _SAVED_LAYER
    # checked as every reader checks a weight, before load_state_dict copies an integer table into a float parameter
    # without a word: a NaN (a pipeline saved by an older spacy-elmo after its fine-tuning diverged) gives NaN vectors
    weights = {
        name: check_weight(value, name, where, Errors.E_ELMO_LOAD_DTYPE, dtype=own[name].dtype if name in own else None,
                           not_finite=Errors.E_ELMO_LOAD_NOT_FINITE)
        for name, value in st_load(msg["weights"]).items()
    }
    bilm.load_state_dict(weights)
    provenance = msg.get("provenance")  # absent in pipelines saved before it was kept
    bilm.provenance = dict(provenance) if isinstance(provenance, dict) else {}
    if staged is not None:  # a checked load (weights_checked): its caller sets them
        staged.check(bilm, msg.get("source", ""))
        staged.bilm, staged.source = bilm.eval(), msg.get("source", "")
        return runner
    runner.set_bilm(bilm.eval().to(device))
    runner.source = msg.get("source", "")
    return runner
