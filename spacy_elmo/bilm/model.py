"""BiLM: the complete ELMo biLM (token encoder + two LSTM stacks)."""

from typing import List, NamedTuple, Optional, Tuple, cast

import numpy as np
import torch
from torch import Tensor, nn

from .. import ops
from .._typing import PathLike
from ..chars import BEGIN_OF_SENTENCE, BEGIN_OF_WORD, END_OF_SENTENCE, MAX_SHIFTED_ID, marker_char_ids
from ..errors import Errors, with_article
from ..paths import refuse_empty_path
from .char_encoder import CharEncoder
from .config import BiLMConfig, check_bool
from .initial_state import WARMUP
from .lstm import BiLstm, LstmCellWeights, LstmState


class BiLMOutput(NamedTuple):
    """``activations``: ``L + 1`` tensors ``(batch, max_len, 2P)`` (layer 0 is ``[x; x]``),
    sentence markers removed, zero at padded positions; ``mask``: BoolTensor ``(batch, max_len)``."""

    activations: List[Tensor]
    mask: Tensor


# torch.export.save stores the structure of an exported program's output by this name (it refused
# an unnamed namedtuple); torch.export.load finds it again once this module is imported (spacy_elmo.bilm,
# as load_exported does; ``import spacy_elmo`` alone imports nothing until used). A private
# torch function: a torch without it (or a second import, already registered) must not stop
# `import spacy_elmo`, only the saving of an exported program.
try:
    torch.utils._pytree._register_namedtuple(BiLMOutput, serialized_type_name="spacy_elmo.BiLMOutput")
except (AttributeError, ValueError):
    pass


def _state_pair(state, what: str, expected_h: str, expected_c: str, axes: str) -> LstmState:
    """``state`` as ``(h, c)``: a pair of finite tensors, else a ValueError naming ``what``, the
    shapes it expects and what ``state`` is (its length, its items' types)."""
    if (not isinstance(state, (tuple, list)) or len(state) != 2
            or not all(isinstance(t, Tensor) for t in state)):
        raise ValueError(Errors.E_STATE_NOT_PAIR.format(
            what=what, expected_h=expected_h, expected_c=expected_c, axes=axes, found=ops.reference.describe_state(state)))
    if not all(bool(torch.isfinite(t).all()) for t in state):  # every vector would be NaN
        raise ValueError(Errors.E_STATE_NOT_FINITE.format(what=what))
    return state[0], state[1]


def _describe(value) -> str:
    """A tensor's dtype, else the type's name (for error messages)."""
    return f"{value.dtype} tensor" if isinstance(value, Tensor) else type(value).__name__


def char_ids_type_error(value: object, cls: str, call: str, shape: str) -> TypeError:
    """The TypeError for character ids ``value`` that are not a tensor, given to ``cls`` (called as
    ``call(ids)``), which expects a tensor of ``shape``: its type named, with the fix for it (an ndarray:
    torch.from_numpy; else, an array of token strings too, token lists or nested lists of ids)."""
    ids = isinstance(value, np.ndarray) and value.dtype.kind in "iu"  # torch.from_numpy fails on strings, objects
    fix = Errors.E_CHAR_IDS_FROM_NUMPY if ids else Errors.E_CHAR_IDS_FROM_TOKENS
    return TypeError(Errors.E_CHAR_IDS_NOT_TENSOR.format(
        cls=cls, shape=shape, a_type=with_article(type(value).__name__), fix=fix.format(call=call)))


def _marker_ids_follow_weights(module: "BiLM", incompatible_keys) -> None:
    """After ``load_state_dict``: ``assign=True`` gives a model built on the meta device the state
    dict's tensors but leaves the marker ids (no part of it) on meta; they follow the weights."""
    device = module.token_encoder.char_embedding.device
    if module.marker_ids.device != device:
        module._marker_ids = module._fresh_marker_ids(device)


def remove_boundaries(tensor: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """``tensor`` ``(B, T + 2, D)`` and ``mask`` ``(B, T + 2)`` of rows wrapped in ``<S> ... </S>``
    (``keep_boundaries=True``) -> ``(B, T, D)`` without the markers, zero at padded positions, and
    the mask ``(B, T)`` (AllenNLP's ``remove_sentence_boundaries``)."""
    inner = mask[:, 2:]
    # a select, not a product with the mask: an inf gradient at a padded position must give 0, not NaN
    return torch.where(inner.unsqueeze(-1), tensor[:, 1 : tensor.shape[1] - 1], tensor.new_zeros(())), inner


class BiLM(nn.Module):
    """The ELMo biLM, numerically equal to the released models.

    ``stateful=False`` (default): every call starts from the same initial
    state, so a sentence gets the same vectors in any batch (up to float32
    rounding, about 1e-6: other batch shapes block the products differently).
    ``stateful=True``: the final (c, h) of each batch row becomes that row's
    initial state in the next call, exactly like AllenNLP and bilm-tf (call
    :meth:`reset_states` to forget).

    The initial state is zero (as in the references) unless the model carries a
    fitted one (:meth:`fit_initial_state`): biLMs pretrained on running text
    with carried states (bilm-tf's recipe) never saw a zero state after their
    first batch, and predict the first words of a sentence read from zeros
    far worse; the mean state at sentence boundaries puts every sentence in
    the context the model was trained in, and stays deterministic. Opt-in:
    it lowers per-sentence perplexity but has not helped downstream features
    (``docs/default-model.md``).

    ``backend``: ``"auto"`` (fused kernels when the compiled extension is
    loaded), ``"fused"`` or ``"reference"``.
    """

    # Buffers (register_buffer): declared for type checkers, which otherwise see nn.Module.__getattr__'s Tensor | Module.
    _marker_ids: Tensor
    initial_h: Optional[Tensor]
    initial_c: Optional[Tensor]

    def __init__(self, config: BiLMConfig, stateful: bool = False, backend: str = "auto") -> None:
        super().__init__()
        if not isinstance(config, BiLMConfig):
            raise TypeError(Errors.E_BILM_CONFIG_TYPE.format(a_type=with_article(type(config).__name__)))
        config.validate()  # again: a dataclass's fields can be set after it was built
        if not isinstance(stateful, bool):
            raise TypeError(Errors.E_STATEFUL_NOT_BOOL.format(value=stateful))
        self.config = config
        self.stateful = stateful
        #: What config.json's "provenance" says (e.g. pretrain's "lang" and "tokenizer"); {} if unknown.
        self.provenance: dict = {}
        self.token_encoder = CharEncoder(config)
        self.lstm = BiLstm(config)
        self.backend = backend
        self._states: Optional[LstmState] = None
        # Whether the carried states may be inference tensors (see _initial_states): a Python bool, not
        # Tensor.is_inference(), which torch.compile cannot trace (its guard on the bool recompiles instead).
        self._states_maybe_inference = False
        self.register_buffer("_marker_ids", self._fresh_marker_ids(None), persistent=False)
        self.register_load_state_dict_post_hook(_marker_ids_follow_weights)
        # Fitted initial state: (2, L, P) and (2, L, C), or None for zeros.
        self.register_buffer("initial_h", None)
        self.register_buffer("initial_c", None)

    def _fresh_marker_ids(self, device: Optional[torch.device]) -> Tensor:
        """The shifted ids of ``<S>`` and ``</S>`` ``(2, W)`` on ``device`` (None: the default device)."""
        W = self.config.max_characters_per_token
        ids = [marker_char_ids(BEGIN_OF_SENTENCE, W), marker_char_ids(END_OF_SENTENCE, W)]
        return torch.tensor(ids, device=device) + 1

    def _apply(self, fn, recurse=True):
        # The marker ids are a constant no state_dict restores: .to_empty() (how a model built on the
        # meta device gets its memory) left them uninitialised, and <S> / </S> ran as garbage tokens. New
        # memory gets the constant written in; a buffer fn kept (share_memory(), .to() where it already
        # is, e.g. under inference_mode) stays that tensor: a new one was not shared, or an inference tensor.
        before = self._marker_ids
        super()._apply(fn, recurse)
        after = self._marker_ids
        if after is not before and after.device.type != "meta":
            if after.dtype != before.dtype:  # .type(torch.float64) converts integer buffers too
                self._marker_ids = self._fresh_marker_ids(after.device)
            else:
                with torch.no_grad():
                    after.copy_(self._fresh_marker_ids(torch.device("cpu")))
        return self

    def __setstate__(self, state) -> None:
        # A whole BiLM pickled (torch.save(model)) before the hook or the states' flag existed: __init__,
        # which sets them, does not run on unpickling. Unpickled carried states are ordinary tensors (unpickled
        # under inference mode, the weights are inference tensors too, and no call with grad can run), so False
        # would do; True is the safe default, costing one clone of the carried states at the next call with
        # grad (see _initial_states).
        super().__setstate__(state)
        if _marker_ids_follow_weights not in self._load_state_dict_post_hooks.values():
            self.register_load_state_dict_post_hook(_marker_ids_follow_weights)
        self.__dict__.setdefault("_states_maybe_inference", True)

    # -- backend ---------------------------------------------------------
    @property
    def backend(self) -> str:
        """The resolved backend: ``"fused"`` or ``"reference"``."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        resolved = ops.resolve_backend(name)
        self._backend = resolved
        # "auto" that resolved to fused: on CUDA tensors a build without CUDA kernels runs the reference
        # for it, and raises for an explicit "fused" (spacy_elmo.ops)
        inner = ops.AUTO_FUSED if name == "auto" and resolved == "fused" else resolved
        self.token_encoder.backend = inner
        self.lstm.backend = inner

    # -- states ------------------------------------------------------------
    def reset_states(self) -> None:
        """Forget the carried states of stateful mode."""
        self._states = None

    @property
    def carried_states(self) -> Optional[LstmState]:
        """Stateful mode: the states carried to the next call, ``(h (2, L, B, P), c (2, L, B, C))``, or None.

        Settable (e.g. to restore a value read earlier); None forgets them like :meth:`reset_states`.
        """
        return self._states

    @carried_states.setter
    def carried_states(self, state: Optional[LstmState]) -> None:
        if state is None:
            self._states = None
            return
        L, P, C = self.config.n_layers, self.config.projection_dim, self.config.cell_dim
        h, c = _state_pair(state, "carried_states", f"(2, {L}, B, {P})", f"(2, {L}, B, {C})",
                            "direction, layer, row, width")
        if (h.dim() != 4 or c.dim() != 4 or tuple(h.shape[:2]) != (2, L) or tuple(c.shape[:2]) != (2, L)
                or h.shape[2] != c.shape[2] or h.shape[3] != P or c.shape[3] != C):
            raise ValueError(Errors.E_CARRIED_STATE_SHAPE.format(
                layers=L, proj=P, cell=C, found_h=tuple(h.shape), found_c=tuple(c.shape)))
        self._states = (h.detach(), c.detach())
        self._states_maybe_inference = True  # from outside: they may have been read under inference mode

    @property
    def initial_state(self) -> Optional[LstmState]:
        """The fitted initial state ``(h (2, L, P), c (2, L, C))`` (direction, layer), or None (zeros)."""
        if self.initial_h is None or self.initial_c is None:  # set and cleared together
            return None
        return self.initial_h, self.initial_c

    def set_initial_state(self, state: Optional[LstmState]) -> None:
        """Use ``state = (h (2, L, P), c (2, L, C))`` instead of zeros at the start of
        every sentence (stateless mode) and of every new row (stateful mode); None: zeros."""
        if state is None:
            self.initial_h = self.initial_c = None
            return
        L, P, C = self.config.n_layers, self.config.projection_dim, self.config.cell_dim
        h, c = _state_pair(state, "set_initial_state", f"(2, {L}, {P})", f"(2, {L}, {C})",
                            "direction, layer, width")
        if tuple(h.shape) != (2, L, P) or tuple(c.shape) != (2, L, C):
            raise ValueError(
                Errors.E_INITIAL_STATE_SHAPE.format(
                    expected_h=(2, L, P), expected_c=(2, L, C), found_h=tuple(h.shape), found_c=tuple(c.shape)
                )
            )
        like = self.token_encoder.char_embedding
        self.initial_h = h.detach().to(device=like.device, dtype=like.dtype).clone()
        self.initial_c = c.detach().to(device=like.device, dtype=like.dtype).clone()

    def fit_initial_state(self, sentences, rows: int = 32, warmup: int = WARMUP, progress: bool = False) -> LstmState:
        """Fit and set the initial state: the mean state at sentence boundaries of
        ``sentences`` (consecutive sentences of running text, token lists) read
        with carried states. See :func:`spacy_elmo.bilm.initial_state.boundary_state_mean`."""
        from .initial_state import boundary_state_mean

        state = boundary_state_mean(self, sentences, rows=rows, warmup=warmup, progress=progress)
        self.set_initial_state(state)
        return state

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # The initial state is optional: a state dict with it sets it, one without clears it.
        h, c = state_dict.get(prefix + "initial_h"), state_dict.get(prefix + "initial_c")
        self.set_initial_state(None if h is None or c is None else (h, c))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def start_state(self, batch: int, like: Tensor) -> Optional[LstmState]:
        """The state every row starts from, expanded to ``batch`` rows (None: zeros)."""
        if self.initial_h is None or self.initial_c is None:  # set and cleared together
            return None
        h = self.initial_h.to(like.dtype).unsqueeze(2).expand(-1, -1, batch, -1).contiguous()
        c = self.initial_c.to(like.dtype).unsqueeze(2).expand(-1, -1, batch, -1).contiguous()
        return h, c

    def _initial_states(self, batch: int, like: Tensor) -> Optional[LstmState]:
        if not self.stateful or self._states is None:
            return self.start_state(batch, like)
        h, c = self.lstm.carry(self._states, like.device)  # .to: the same tensors when they fit
        if torch.is_grad_enabled() and self._states_maybe_inference:
            # Carried out of a torch.inference_mode() call: autograd cannot save such tensors ("Inference
            # tensors cannot be saved for backward"). The flag, set by _keep_states, is a Python bool:
            # torch.compile traces neither Tensor.is_inference() nor torch.is_inference_mode_enabled()
            # (fullgraph=True failed from the second call on). A call with grad after one without clones
            # states it need not have: a copy of (2, L, B, P + C). Grad mode first: without grad the flag
            # is not read, so torch.compile does not guard on it (no second graph for it).
            h, c = h.clone(), c.clone()
        stored = h.shape[2]
        if batch > stored:
            # New rows start afresh (zeros unless fitted), as in AllenNLP's _EncoderBase.
            start = self.start_state(batch - stored, h)
            extra_h, extra_c = start if start is not None else self.lstm.zero_state(batch - stored, h)
            h, c = torch.cat([h, extra_h], 2), torch.cat([c, extra_c], 2)
        self._keep_states(h, c)
        return h[:, :, :batch], c[:, :, :batch]

    def _keep_states(self, h: Tensor, c: Tensor) -> None:
        """Carry ``h (2, L, B, P)`` and ``c (2, L, B, C)`` to the next call. Kept under torch.inference_mode()
        they are inference tensors: the next call with grad clones them (:meth:`_initial_states`)."""
        self._states = (h, c)
        # Inference mode turns grad off, but torch.enable_grad() inside it turns grad back on while the tensors
        # made are still inference tensors: grad mode alone missed them and the next call with grad failed
        # ("Inference tensors cannot be saved for backward"). Eager code also asks the mode itself (one global
        # flag, which covers every tensor made here: a tensor made outside inference mode is never an inference
        # tensor, so a False flag stays true of states kept with it). torch.compile traces neither that nor
        # Tensor.is_inference() (fullgraph=True failed), so compiled code goes by grad mode alone.
        self._states_maybe_inference = not torch.is_grad_enabled() or (
            not torch.compiler.is_compiling() and torch.is_inference_mode_enabled())

    def _update_states(self, final: LstmState) -> None:
        h_new, c_new = final[0].detach(), final[1].detach()
        batch = h_new.shape[2]
        if self._states is None or self._states[0].shape[2] <= batch:
            self._keep_states(h_new, c_new)
        else:
            # Rows beyond this batch keep their states (AllenNLP semantics).
            h, c = self._states[0].clone(), self._states[1].clone()
            h[:, :, :batch] = h_new
            c[:, :, :batch] = c_new
            self._keep_states(h, c)

    # -- forward -------------------------------------------------------------
    def __prepare_scriptable__(self):
        """torch.jit.script calls this first: TorchScript cannot compile the biLM (its ops dispatch
        on the backend in Python), so it gets an error saying what to use instead."""
        raise RuntimeError(Errors.E_BILM_TORCHSCRIPT.format(tool="torch.jit.script"))

    def _check_traceable(self) -> None:
        """A RuntimeError for the tracers that would record a wrong program: torch.jit.trace (it
        fixes the sentence length and drops the checks of the ids' values), torch.export of a
        stateful model (the states carried between calls live in Python, outside the program) and
        torch.export under a torch before ``reference.GRAPH_CHECKS_SINCE`` (the checks of the ids would
        break the graph: torch's own error named a data-dependent branch, not the release)."""
        if torch.jit.is_tracing():
            raise RuntimeError(Errors.E_BILM_TORCHSCRIPT.format(tool="torch.jit.trace"))
        if self.stateful and ops.reference.exporting():
            raise RuntimeError(Errors.E_EXPORT_STATEFUL)
        if not ops.reference.GRAPH_CHECKS and ops.reference.exporting():
            since = ".".join(map(str, ops.reference.GRAPH_CHECKS_SINCE))
            raise RuntimeError(Errors.E_EXPORT_NEEDS_GRAPH_CHECKS.format(since=since, torch=torch.__version__))

    def _check_shape(self, char_ids: Tensor) -> None:
        """A TypeError for a non-tensor, a RuntimeError for ids batched by torch.func.vmap, a ValueError for
        ids not shaped ``(B, T, W)``."""
        W = self.config.max_characters_per_token
        if not isinstance(char_ids, Tensor):
            raise char_ids_type_error(char_ids, "BiLM", "bilm", "(batch, max_len, W)")
        if torch._C._functorch.is_batchedtensor(char_ids):
            # The checks of the ids' values bring them to the host: under vmap torch's bare "Cannot access
            # data pointer of Tensor that doesn't have storage".
            raise RuntimeError(Errors.E_BILM_VMAP.format(max_chars=W))
        if char_ids.dim() != 3 or char_ids.shape[-1] != W:
            raise ValueError(Errors.E_CHAR_IDS_SHAPE.format(max_chars=W, shape=tuple(char_ids.shape)))

    def _check_inputs(self, char_ids: Tensor) -> None:
        """The checks of :meth:`_checked_mask` that read no values: type, shape, device, dtype."""
        self._check_shape(char_ids)
        weights = self.token_encoder.char_embedding.device
        if char_ids.device != weights:
            raise ValueError(Errors.E_CHAR_IDS_DEVICE.format(found=char_ids.device, expected=weights))
        ops.reference.check_char_ids_dtype(char_ids)

    @staticmethod
    def _encodes_every_position(char_ids: Tensor) -> bool:
        """Whether :meth:`encode_tokens` encodes every position (padding too) rather than each distinct
        token once. Traced by torch.compile / torch.export: no shapes that depend on the ids' values (the
        selection and torch.unique). On a GPU: there torch.unique's sort took 3 ms of a 15 ms bf16 forward
        of the original preset at 256 x 20 (H200), and the selection and the scatter each wait for the device."""
        return torch.compiler.is_compiling() or char_ids.is_cuda

    def _autocast_dtype(self, weights: Tensor) -> Optional[torch.dtype]:
        """The dtype of the autocast that is on for the device of ``weights`` (one of the biLM's), None
        where it is off (or the device has none). A TypeError for float16 weights under bfloat16 autocast
        or bfloat16 weights under float16 autocast: torch's autocast cannot combine the two (its cat
        raised "Unexpected floating ScalarType in at::autocast::prioritize" on the reference backend,
        while the fused one ran). float32 and float64 weights run under either."""
        device = weights.device.type
        if not ops.reference.autocast_on(device):
            return None
        low = torch.get_autocast_dtype(device)
        if weights.dtype in (torch.float16, torch.bfloat16) and weights.dtype != low:
            raise TypeError(Errors.E_BILM_AUTOCAST_DTYPE.format(weights=weights.dtype, device=device, autocast=low))
        return low

    def encode_tokens(self, char_ids: Tensor, mask: Tensor) -> Tensor:
        """Token vectors of the valid positions.

        char_ids: ``(B, T, W)``; mask: BoolTensor ``(B, T)``. Returns ``(B, T, P)``,
        zero where ``mask`` is False. Eagerly on the CPU each distinct token is encoded once; on a GPU,
        and under torch.compile / torch.export, every position is (padding too): cheaper on a GPU than
        finding the distinct ones, and shapes that do not depend on the ids' values when traced. A
        float16 or bfloat16 biLM under an autocast in the other dtype is a TypeError (:meth:`_autocast_dtype`).
        """
        self._check_shape(char_ids)  # (B, T): a ValueError "not enough values to unpack" below
        B, T, W = char_ids.shape
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise TypeError(Errors.E_ENCODE_MASK_DTYPE.format(found=with_article(_describe(mask))))
        if tuple(mask.shape) != (B, T):
            raise ValueError(Errors.E_ENCODE_MASK_SHAPE.format(found=tuple(mask.shape), expected=(B, T)))
        self._autocast_dtype(self.token_encoder.char_embedding)
        if self._encodes_every_position(char_ids):
            encoded = self.token_encoder(char_ids.reshape(B * T, W))
            encoded = encoded.reshape(B, T, encoded.shape[-1])  # not -1: B or T may be 0
            return torch.where(mask.unsqueeze(-1), encoded, encoded.new_zeros(()))
        valid = char_ids[mask]
        if valid.shape[0] == 0:
            return self.token_encoder.char_embedding.new_zeros(B, T, self.config.projection_dim)
        unique, inverse = torch.unique(valid, dim=0, return_inverse=True)
        encoded = self.token_encoder(unique)
        # in the encoder's output dtype: under autocast that is not the weights' dtype
        return encoded.new_zeros(B, T, self.config.projection_dim).masked_scatter(mask.unsqueeze(-1), encoded[inverse])

    def check_ids(self, char_ids: Tensor) -> None:
        """The checks :meth:`forward` runs on its input, eagerly: the same TypeError / ValueError
        naming the problem. Call it before a model compiled with torch.compile or exported with
        torch.export when the ids come from outside (a served request) on CUDA: there the traced
        checks are device-side assertions, and a failed one breaks the process's CUDA context
        (every later CUDA call fails) instead of raising."""
        self._checked_mask(char_ids)

    def _checked_mask(self, char_ids: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`check_ids`; returns the ids as torch.long ``(B, T, W)``, the token mask BoolTensor
        ``(B, T)``, the lengths ``(B,)`` on the ids' device and the same lengths on the host, for the LSTM
        (:meth:`contextualize`). Eagerly the verdicts of the checks of the ids' values (range, ragged,
        malformed) come to the host with the lengths in one transfer: on a GPU one host sync for all of
        them. With one sync each, one for contextualize's check and one a layer for the LSTM op's check of
        device lengths, the forward made 7 (the char CNN op's check of its ids is the seventh, which stays):
        1.3 ms of a 7.7 ms bf16 forward (H200, original preset, 256 x 20), the host unable to queue work
        ahead. A failed check computes its detailed error after the transfer (there syncs do not matter).
        Traced by torch.compile / torch.export: each check an assertion in the graph
        (:func:`~spacy_elmo.ops.reference.any_bad`), and the "host" lengths are the device ones."""
        self._check_inputs(char_ids)
        ids = char_ids.long()
        T = ids.shape[1]
        device = ids.device
        mask = (ids > 0).any(-1)
        lengths = mask.sum(1)
        positions = torch.arange(T, device=device)
        ragged = mask != (positions.unsqueeze(0) < lengths.unsqueeze(1))
        # Every real token starts with the begin-of-word id and holds no 0 (the id of "no token"):
        # bilm-tf's unshifted ids or zero-padded narrower tokens would run as other characters.
        bow = BEGIN_OF_WORD + 1  # shifted
        malformed = mask & ((ids[..., 0] != bow) | (ids == 0).any(-1))
        if torch.compiler.is_compiling():
            ops.check_char_ids(char_ids, MAX_SHIFTED_ID)
            failed = [False, ops.reference.any_bad(ragged, Errors.E_RAGGED_MASK_IN_GRAPH),
                      ops.reference.any_bad(malformed, Errors.E_CHAR_IDS_MALFORMED_IN_GRAPH.format(bow=bow))]
            host_lengths = lengths
        else:
            out_of_range = ops.reference.char_ids_out_of_range(ids, MAX_SHIFTED_ID)
            verdicts = torch.stack([out_of_range.any(), ragged.any(), malformed.any()]).long()
            host = torch.cat([verdicts, lengths]).cpu()  # the one host sync (none on the CPU)
            failed, host_lengths = [bool(v) for v in host[:3].tolist()], host[3:]
            if failed[0]:
                ops.check_char_ids(char_ids, MAX_SHIFTED_ID)  # raises, naming the first id outside
        if failed[1]:
            row = int(ragged.any(1).nonzero()[0])
            raise ValueError(Errors.E_RAGGED_MASK.format(row=row))
        if failed[2]:
            row, position = (int(i) for i in malformed.nonzero()[0])
            raise ValueError(Errors.E_CHAR_IDS_MALFORMED.format(
                row=row, position=position, ids=ids[row, position, :12].tolist(), bow=bow))
        return ids, mask, lengths, host_lengths

    def forward(self, char_ids: Tensor, keep_boundaries: bool = False) -> BiLMOutput:
        """Every layer's vectors for a batch of tokenized sentences.

        char_ids: integer tensor ``(batch, max_len, W)`` (torch.long or torch.int32), ``W =
        config.max_characters_per_token``, from :func:`spacy_elmo.batch_to_ids`: tokens
        left-aligned, padding rows all zero. Returns :class:`BiLMOutput`: ``activations``, ``L + 1``
        tensors ``(batch, max_len, 2P)`` in the weights' dtype (under autocast, its dtype) (layer 0 ``[x; x]``, then
        ``[forward_l; backward_l]``; zero at padded positions), and ``mask``, BoolTensor
        ``(batch, max_len)``. Raises TypeError for a non-tensor or non-integer input or a float16
        (bfloat16) biLM under bfloat16 (float16) autocast, and ValueError for another shape or device than the weights', ids out of range, padding
        before a real token or a token not spelled as batch_to_ids spells it (in a graph that
        torch.compile or torch.export traced, these checks of the ids' values are assertions: a
        RuntimeError on the CPU, a device-side assert on CUDA, which breaks the CUDA context: there
        call :meth:`check_ids` first on ids that come from outside).

        ``keep_boundaries=True`` keeps the ``<S>`` / ``</S>`` positions: ``(batch, max_len + 2, 2P)``
        layers and mask, ``<S>`` first and each ``</S>`` right after its row's last token (AllenNLP's
        ``_ElmoBiLm`` output, which its ``Elmo`` mixes before removing them).
        """
        self._check_traceable()
        check_bool("keep_boundaries", keep_boundaries)
        char_ids, mask, lengths, host_lengths = self._checked_mask(char_ids)
        B, T, W = char_ids.shape
        device = char_ids.device
        # Wrap every sentence in <S> ... </S> (each </S> right after its own last token).
        wrapped = char_ids.new_zeros(B, T + 2, W)
        wrapped[:, 1 : T + 1] = char_ids
        rows = torch.arange(B, device=device)
        wrapped[:, 0] = self._marker_ids[0]
        wrapped[rows, lengths + 1] = self._marker_ids[1]
        mask2 = torch.arange(T + 2, device=device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
        return self.contextualize(self.encode_tokens(wrapped, mask2), host_lengths, keep_boundaries)

    @property
    def marker_ids(self) -> Tensor:
        """LongTensor ``(2, W)``: the shifted character ids of ``<S>`` and ``</S>``."""
        return self._marker_ids

    def contextualize(self, x: Tensor, lengths: Tensor, keep_boundaries: bool = False) -> BiLMOutput:
        """The biLSTM part of :meth:`forward`, on token vectors already wrapped in markers.

        x: ``(B, T + 2, P)`` = ``<S>``, the row's tokens, ``</S>``, then zeros (e.g.
        from a cache of :meth:`encode_tokens` outputs); lengths: LongTensor ``(B,)``
        of tokens without the markers. Returns the same :class:`BiLMOutput` as
        :meth:`forward` (and carries states in stateful mode); ``keep_boundaries`` as there.
        ``x`` is on the weights' device and in their dtype (under autocast also in the autocast
        dtype of that device, :func:`torch.get_autocast_dtype`, which :meth:`encode_tokens` returns there).
        ``lengths`` may be on the host or on x's device: on a GPU, host lengths cost no host sync, and
        lengths there one (for their check and every layer's).
        """
        P = self.config.projection_dim
        if not (isinstance(x, Tensor) and x.is_floating_point() and isinstance(lengths, Tensor)
                and not lengths.is_floating_point() and not lengths.is_complex() and lengths.dtype != torch.bool):
            raise TypeError(Errors.E_CONTEXTUALIZE_DTYPE.format(found_x=_describe(x), found_lengths=_describe(lengths)))
        if x.dim() != 3 or x.shape[1] < 2 or x.shape[2] != P or lengths.shape != (x.shape[0],):
            raise ValueError(Errors.E_CONTEXTUALIZE_SHAPE.format(
                proj=P, found_x=tuple(x.shape), found_lengths=tuple(lengths.shape)))
        weights = cast(LstmCellWeights, self.lstm.forward_layers[0]).w_input  # nn.ModuleList items are untyped
        if x.device != weights.device:  # fused: meta outputs from CPU weights; reference: torch's device error
            raise ValueError(Errors.E_CONTEXTUALIZE_DEVICE.format(found=x.device, expected=weights.device))
        # Under autocast also its dtype (what encode_tokens returns there), but no other: autocast never
        # casts float64, and on the CPU float16 vectors under bfloat16 autocast fail in it, where the
        # backends differed (fused ran in x's dtype, the reference raised torch's matmul or autocast
        # error), as they do without autocast.
        low = self._autocast_dtype(weights)
        if x.dtype != weights.dtype and x.dtype != low:
            accepted = f"{weights.dtype}" + ("" if low in (None, weights.dtype) else f" or, under this autocast, {low}")
            raise TypeError(Errors.E_CONTEXTUALIZE_X_DTYPE.format(found=x.dtype, expected=weights.dtype,
                                                                  accepted=accepted))
        B, T = x.shape[0], x.shape[1] - 2
        # Eagerly the lengths are checked on the host, and the LSTM reads them there (the fused CUDA op
        # copies them to the GPU without a host sync): lengths on a GPU come over once, one sync for the
        # check and every layer, where the layers' own check took one each. forward hands on host lengths.
        # Traced: where they are, the check an assertion in the graph.
        host = lengths
        if lengths.device.type == "cuda" and not torch.compiler.is_compiling():
            host = lengths.cpu()
        if ops.reference.any_bad((host < 0) | (host > T), Errors.E_CONTEXTUALIZE_LENGTHS_IN_GRAPH):
            raise ValueError(Errors.E_CONTEXTUALIZE_LENGTHS.format(max_len=T, found=lengths.tolist()))
        lengths = ops.reference.to_device_nowait(lengths, x.device)
        state = self._initial_states(B, x)
        outs_f, outs_b, final = self.lstm(x, x, host + 2, state, reverse_backward=True)
        if self.stateful:
            self._update_states(final)
        layers = [torch.cat([x, x], -1)] + [torch.cat([f, b], -1) for f, b in zip(outs_f, outs_b)]
        mask = torch.arange(T + 2, device=x.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
        if keep_boundaries:
            keep = mask.unsqueeze(-1)
            return BiLMOutput([torch.where(keep, layer, layer.new_zeros(())) for layer in layers], mask)
        return BiLMOutput([remove_boundaries(layer, mask)[0] for layer in layers], mask[:, 2:])

    # -- persistence (implemented in allennlp_io / native_io) ----------------
    @classmethod
    def from_allennlp(
        cls, options_file: PathLike, weight_file: PathLike, stateful: bool = False, backend: str = "auto"
    ) -> "BiLM":
        """A model from an AllenNLP/bilm-tf ``options.json`` and ``.hdf5`` weight file."""
        from .allennlp_io import read_allennlp

        refuse_empty_path(weight_file, Errors.E_PATH_EMPTY_WEIGHTS)  # before the options (read first) name it
        config = BiLMConfig.from_allennlp_options(options_file, weight_file=weight_file)
        model = cls(config, stateful=stateful, backend=backend)
        read_allennlp(model, weight_file)
        return model

    def to_allennlp(self, options_file: PathLike, weight_file: PathLike) -> None:
        """Write ``options.json`` and the ``.hdf5`` weight file in the released layout."""
        from .allennlp_io import write_allennlp

        write_allennlp(self, options_file, weight_file)

    def save(
        self,
        directory: PathLike,
        extra_tensors: Optional[dict] = None,
        dtype: Optional[torch.dtype] = None,
        provenance: Optional[dict] = None,
        initial_state: Optional[LstmState] = None,
    ) -> None:
        """Write ``config.json`` + ``model.safetensors`` into ``directory`` (atomically).

        extra_tensors: more named tensors to store beside the biLM (e.g. the
        softmax of a pretrained model); dtype: store floats in this dtype (e.g.
        torch.float16 for a compact bundle; None: the model's own, float64 for a float64 model,
        which :meth:`load` reads into a float32 model unless float64 is the default dtype then;
        the initial state is stored in float32 whatever ``dtype``); provenance: JSON-able facts about
        where the weights came from (stored in config.json; None: how the model reads text,
        from ``self.provenance``, which loading set: its ``trained_by``, ``lang``, ``tokenizer``
        and ``reading``, not the facts of its training, which weights changed since loading may
        no longer match: pass them to keep them); initial_state:
        ``(h, c)`` saved instead of the model's own (None: its own).
        """
        from .native_io import save_native

        save_native(self, directory, extra_tensors=extra_tensors, dtype=dtype, provenance=provenance,
                    initial_state=initial_state)

    @classmethod
    def load(cls, directory: PathLike, stateful: bool = False, backend: str = "auto") -> "BiLM":
        """Load a directory written by :meth:`save`, a directory of AllenNLP weights
        (one ``options.json`` + one ``.hdf5``), or ``"default"`` for the bundled model.

        The model is built in torch's default dtype (float32), whatever dtype the file stores, each
        weight cast to it (a value beyond its range is an error): a float64 save loads rounded to
        float32, and ``.double()`` afterwards cannot restore it. Load it under
        ``torch.set_default_dtype(torch.float64)`` to get its float64 weights bit for bit."""
        from .native_io import load_model

        return load_model(cls, directory, stateful=stateful, backend=backend)
