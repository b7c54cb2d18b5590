"""Pure-PyTorch reference implementations of the ELMo kernels (and of the
sampled softmax's log-sum-exp of pretraining).

These define the semantics the fused kernels (``spacy_elmo._C``) must match.
They are exact (float32 or float64, whatever the inputs are) and
differentiable through ordinary autograd.

Conventions shared with the fused kernels:

* character ids are shifted by +1 (0 = "no character", a zero vector);
  the embedding table has the 261 stored rows, row ``id - 1`` for ``id >= 1``;
* conv weights use the ``nn.Conv1d`` layout ``(count, D, width)``;
* highway weights are one ``(2F, F)`` matrix with rows ``[transform; carry]``
  (TF semantics: ``y = g * relu(t) + (1 - g) * x``, ``g = sigmoid(carry)``);
* LSTM weights use the TF layout: ``w_input (I, 4C)``, ``w_recurrent (P, 4C)``,
  ``bias (4C,)`` with gate blocks in the order i, j, f, o, ``w_proj (C, P)``;
  the forget bias of 1.0 is added at run time (it is not in ``bias``).
"""

import contextlib
import functools
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import Errors, counted, with_article

FORGET_BIAS = 1.0


# The dtypes character ids may have, on every backend and entry point (BiLM.forward, encode_tokens,
# token_encoder, ops.char_cnn): checked by check_char_ids_dtype alone.
CHAR_ID_DTYPES = (torch.long, torch.int32)


def check_char_ids_dtype(char_ids: Tensor) -> None:
    """A TypeError (``Errors.E_CHAR_IDS_DTYPE``) unless ``char_ids`` hold one of :data:`CHAR_ID_DTYPES`:
    the one rule both backends apply (the fused op alone took any integer dtype, int8 too, and
    ``BiLM.forward`` refused those). A dtype is known while tracing: no host sync, no graph break."""
    if char_ids.dtype not in CHAR_ID_DTYPES:
        raise TypeError(Errors.E_CHAR_IDS_DTYPE.format(dtype=char_ids.dtype))


def check_char_ids(char_ids: Tensor, max_id: int) -> None:
    """:func:`check_char_ids_dtype`, then a ValueError naming the
    first id outside ``0..max_id``; vectorised, one host sync (traced by torch.compile or torch.export: an
    assertion in the graph, :func:`any_bad`). :func:`char_cnn` checks its ids with
    it (``F.embedding`` gave a bare IndexError, on CUDA a device-side assert), as does
    ``BiLM.forward``; the fused ops check the range of theirs in C++ (``csrc/include/checks.h``)."""
    check_char_ids_dtype(char_ids)
    bad = char_ids_out_of_range(char_ids, max_id)
    if any_bad(bad, Errors.E_CHAR_IDS_RANGE_IN_GRAPH.format(max_id=max_id)):
        raise ValueError(Errors.E_CHAR_IDS_RANGE.format(max_id=max_id, found=int(char_ids[bad][0])))


def char_ids_out_of_range(char_ids: Tensor, max_id: int) -> Tensor:
    """BoolTensor of ``char_ids``' shape: True where an id lies outside ``0..max_id`` (:func:`check_char_ids`)."""
    return (char_ids < 0) | (char_ids > max_id)


#: From this torch release on, :func:`any_bad` puts its checks into the graphs torch.compile and
#: torch.export trace. Before it they were dropped (2.4, 2.5 and 2.9: inductor ran bad ids without a word) or
#: the model did not compile or export (2.7; README, "Building by hand"): there a compiled caller checks
#: in Python, through a graph break (fullgraph and torch.export then fail, with torch's message).
GRAPH_CHECKS_SINCE = (2, 11)
GRAPH_CHECKS = torch.__version__ >= GRAPH_CHECKS_SINCE  # type: ignore[operator]  # TorchVersion compares with tuples


def autocast_available(device_type: str) -> bool:
    """Whether the device type has autocast (meta and some others: no). A constant to torch.compile and
    torch.export (it never changes in a process): their tracer up to torch 2.11 (2.13 can) does not trace
    ``torch.amp.is_autocast_available``, a graph break, so fullgraph and export failed on every model."""
    return torch.amp.is_autocast_available(device_type)


# What torch.compiler.assume_constant_result does, without the import of torch._dynamo it makes when it
# is applied (about 1.2 s added to every `import spacy_elmo`); a test checks the decorator still sets it.
autocast_available._dynamo_marked_constant = True  # type: ignore[attr-defined]


def exporting() -> bool:
    """Whether torch.export traces the caller (not torch.compile). ``torch.compiler.is_exporting()``
    says so from torch 2.13 on, but torch 2.7 to 2.11 answer True under every torch.compile too (their
    tracer folds the call to a constant): inductor then got ``torch._assert_async`` on the CPU, and bad
    ids aborted the process (see :func:`any_bad`). So this reads the flag torch.export sets, the one
    ``is_exporting()`` returns. Before 2.7 torch has neither (2.6.0: no ``torch.compiler.is_exporting``): False,
    and the model's export refusals (a stateful model, a dynamic time on the reference backend, a torch before
    :data:`GRAPH_CHECKS_SINCE`) give way to torch's own error on the data-dependent checks of the ids."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    if flag is None:
        return bool(getattr(torch.compiler, "is_exporting", bool)())
    return bool(flag)


def autocast_on(device_type: str) -> bool:
    """Whether autocast is on for the device (meta and other devices without autocast: no)."""
    return autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def no_autocast(device_type: str):
    """Autocast off on the device (a no-op where the device has none, e.g. meta): for the fused kernels'
    own casts, and the token cache's vectors, kept in the weights' dtype."""
    if autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


@torch.library.custom_op("spacy_elmo_checks::fail_if_any", mutates_args=())
def fail_if_any(bad: Tensor, message: str) -> None:
    """RuntimeError(``message``) when bool tensor ``bad`` holds a True: :func:`any_bad`'s assertion in a
    graph that torch.compile traced on the CPU, run in Python by the compiled code (see there)."""
    if bool(bad.any()):
        raise RuntimeError(message)


@fail_if_any.register_fake
def _fail_if_any_fake(bad: Tensor, message: str) -> None:
    return None


# An operator without outputs is dead code to the graph passes unless it is marked as having an effect
# (as torch._assert_async is).
torch.fx.node.has_side_effect(torch.ops.spacy_elmo_checks.fail_if_any.default)


def any_bad(bad: Tensor, in_graph: str) -> bool:
    """Whether bool tensor ``bad`` (True where the input is wrong) holds a True, for the caller to
    raise its detailed error (one host sync). While torch.compile or torch.export traces the
    caller, a Python branch on tensor values would break the graph (fullgraph and export fail):
    there the check becomes an assertion inside the graph (a RuntimeError saying ``in_graph`` when
    the graph runs on such input) and this returns False.

    The assertion is ``torch._assert_async`` (a device-side assert on CUDA), but not in a CPU graph
    that torch.compile traces: inductor's C++ code throws it from inside an OpenMP parallel region,
    where an exception ends the process (std::terminate) instead of raising. There it is
    :func:`fail_if_any`, which the compiled code calls in Python. torch.export keeps
    ``torch._assert_async``: an exported program needs no operator of this package for its checks.
    Before torch :data:`GRAPH_CHECKS_SINCE` the check stays in Python (a graph break) when compiled."""
    if torch.compiler.is_compiling() and GRAPH_CHECKS:
        if bad.device.type == "cpu" and not exporting():
            fail_if_any(bad, in_graph)
        else:
            torch._assert_async(torch.logical_not(bad.any()), in_graph)
        return False
    return bool(bad.any())


def to_device_nowait(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device`` without the host waiting for it where ``t`` is on the host and ``device`` a GPU
    (eagerly): through a pinned copy of its own, copied ``non_blocking`` (torch's caching host allocator
    keeps the copy until the transfer has run; a caller changing ``t`` afterwards changes nothing the
    device reads). A plain ``.to`` from pageable memory waits for the GPU to finish its queued work (a host
    sync). Elsewhere, and while torch.compile or torch.export traces, ``t.to(device)``. For the LSTM's host
    lengths (:func:`lstm_layer`, ``BiLM.contextualize``)."""
    if t.device.type == "cpu" and device.type == "cuda" and not torch.compiler.is_compiling():
        pinned = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        pinned.copy_(t)
        return pinned.to(device, non_blocking=True)
    return t.to(device)


def char_cnn(
    char_ids: Tensor,
    embedding: Tensor,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor],
    activation: str = "relu",
) -> Tensor:
    """Char embedding, every convolution, max over positions, bias and activation.

    char_ids: LongTensor ``(N, W)``, shifted ids 0..261.
    embedding: ``(261, D)``, the stored table (row ``id - 1``).
    weights[i]: ``(count_i, D, width_i)``; biases[i]: ``(count_i,)``, one per filter.
    Returns ``(N, sum(count_i))``. Padding characters are real inputs:
    every convolution runs over all W slots. A NaN bias: the same NaN outputs as
    the fused kernels', its gradient through another window (docs/architecture.md).
    """
    if activation not in ("relu", "tanh"):  # as the fused op: anything else is not silently tanh
        raise ValueError(Errors.E_BAD_ACTIVATION.format(value=activation))
    if len(biases) != len(weights):  # as the fused op: zip below dropped the filters without a bias
        raise ValueError(Errors.E_CHAR_CNN_BIASES.format(biases=len(biases), filters=len(weights)))
    for i, (w, b) in enumerate(zip(weights, biases)):  # as the fused op (check_char_cnn_filters, _biases)
        if w.dim() != 3 or w.shape[1] != embedding.shape[1]:
            raise ValueError(Errors.E_CHAR_CNN_WEIGHT.format(index=i, D=embedding.shape[1], found=list(w.shape)))
        check_shape(b, (w.shape[0],), f"bias {i}", Errors.E_CHAR_CNN_BIAS)
    check_same_dtype("char_cnn", ("embedding", embedding), *[("a filter weight", w) for w in weights],
                     *[("a bias", b) for b in biases])
    check_char_ids(char_ids, embedding.shape[0])  # shifted ids: 0 (no character) .. the table's rows
    table = torch.cat([embedding.new_zeros(1, embedding.shape[1]), embedding], 0)
    x = F.embedding(char_ids, table).transpose(1, 2)  # (N, D, W)
    act = torch.relu if activation == "relu" else torch.tanh
    outs = []
    for w, b in zip(weights, biases):
        if x.shape[1]:
            conv = F.conv1d(x, w, b)  # (N, count, W - width + 1)
        else:  # D = 0: every window sums no features, so is the bias (torch's conv1d gave (N, 0, positions))
            conv = b.view(1, -1, 1).expand(x.shape[0], w.shape[0], x.shape[2] - w.shape[2] + 1)
        outs.append(act(conv.max(dim=-1).values))
    return torch.cat(outs, dim=-1)


def highway(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """One highway layer. x: ``(N, F)``, weight ``(2F, F)``, bias ``(2F,)`` -> ``(N, F)``."""
    n = x.shape[-1]
    check_highway(x, weight, bias)
    h = F.linear(x, weight, bias)
    transform = torch.relu(h[..., :n])
    gate = torch.sigmoid(h[..., n:])
    return gate * transform + (1.0 - gate) * x


def check_highway(x: Tensor, weight: Tensor, bias: Tensor) -> None:
    """The fused op's checks of a highway layer's weight ``(2F, F)`` and bias ``(2F,)`` for x ``(..., F)``
    (``check_highway_forward`` in ``csrc/include/checks.h``), in its words: a ValueError (torch's bare
    product errors before, or a bias broadcast over the rows), and :func:`check_same_dtype`."""
    n = x.shape[-1]
    check_shape(weight, (2 * n, n), "weight (2F, F)", Errors.E_HIGHWAY_SHAPE)
    check_shape(bias, (2 * n,), "bias (2F,)", Errors.E_HIGHWAY_SHAPE)
    check_same_dtype("highway", ("x", x), ("weight", weight), ("bias", bias))


def _clip(x: Tensor, value: Optional[float]) -> Tensor:
    return x if value is None else x.clamp(-value, value)


def reversal_index(lengths: Tensor, total: int) -> Tensor:
    """``(B, total)`` gather index that reverses each row within its own length.

    Positions at or beyond a row's length map to themselves.
    """
    pos = torch.arange(total, device=lengths.device).unsqueeze(0)
    lens = lengths.unsqueeze(1)
    return torch.where(pos < lens, lens - 1 - pos, pos)


def lstm_layer(
    x: Tensor,
    lengths: Tensor,
    w_input: Tensor,
    w_recurrent: Tensor,
    bias: Tensor,
    w_proj: Tensor,
    h0: Optional[Tensor] = None,
    c0: Optional[Tensor] = None,
    cell_clip: Optional[float] = None,
    proj_clip: Optional[float] = None,
    reverse: bool = False,
    residual: bool = False,
) -> Tuple[Tensor, Tensor, Tensor]:
    """One LSTM-with-projection layer over a ragged batch.

    x: ``(B, T, I)``; lengths: LongTensor ``(B,)`` (0 allowed; on the host or x's device: host
    lengths are checked without a host sync, :func:`to_device_nowait`); h0 ``(B, P)``,
    c0 ``(B, C)`` or None for zeros. ``reverse`` runs each row from its own
    last valid position to 0 (per-sentence reversal). ``residual`` adds the
    layer input to the output (needs I == P).

    Returns ``(out (B, T, P), h_n (B, P), c_n (B, C))``: outputs are zero at
    padded positions; the final state of a row is its state after its last
    processed token (its initial state when its length is 0). ``x`` at a padded
    position and the initial state of a row of length 0 enter no product: a NaN
    there reaches no other row and no weight's gradient, as in the fused kernels.
    """
    batch, total, _ = x.shape
    if isinstance(total, torch.SymInt) and exporting():
        # The loop below runs once per time step: traced, it is unrolled for one length.
        raise RuntimeError(Errors.E_REFERENCE_EXPORT_DYNAMIC_TIME)
    cells = w_proj.shape[0]
    proj = w_proj.shape[1]
    if cells == 0 or proj == 0:  # as the fused op (csrc/include/checks.h): no split of zero cells below
        raise ValueError(Errors.E_LSTM_NO_UNITS.format(found=list(w_proj.shape)))
    if x.shape[2] == 0:  # as the fused op, whose float32 kernels gave wrong numbers for it
        raise ValueError(Errors.E_LSTM_NO_INPUT.format(found=list(x.shape)))
    check_lstm_weights(x.shape[2], (w_input, w_recurrent, bias, w_proj), residual)
    check_same_dtype("lstm", ("x", x), ("w_input", w_input), ("w_recurrent", w_recurrent), ("bias", bias),
                     ("w_proj", w_proj), ("h0", h0), ("c0", c0))
    check_clips(cell_clip, proj_clip)
    # Exact shapes, as the fused op (csrc/include/checks.h): a (P,) or (1, P) state or a short
    # lengths broadcast over the rows. Shapes only: no host sync.
    check_shape(lengths, (batch,), "lengths (B,)", Errors.E_LSTM_SHAPE)
    check_shape(h0, (batch, proj), "h0 (B, P)", Errors.E_LSTM_SHAPE)
    check_shape(c0, (batch, cells), "c0 (B, C)", Errors.E_LSTM_SHAPE)
    # checked before they move: host lengths (BiLM.forward passes them, on every device) with no host sync
    lengths = to_device_nowait(check_lstm_lengths(lengths, total), x.device)
    if reverse:
        index = reversal_index(lengths, total)
        x_run = x.gather(1, index.unsqueeze(-1).expand_as(x))
    else:
        x_run = x
    # Padded positions (at or past a row's length: in place when reversed) are never used, as in the fused
    # kernels: selected to 0 here, so that a NaN there does not reach the weights' gradients (0 * NaN through
    # the masked steps made every one NaN). A select: the valid positions are unchanged, bit for bit.
    valid = (torch.arange(total, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    x_run = torch.where(valid, x_run, x_run.new_zeros(()))
    forget = torch.zeros_like(bias)
    forget[2 * cells : 3 * cells] = FORGET_BIAS
    # The input-to-hidden product for every timestep at once: one GEMM.
    xi = torch.matmul(x_run, w_input) + (bias + forget)
    h_start = x.new_zeros(batch, proj) if h0 is None else h0
    c_start = x.new_zeros(batch, cells) if c0 is None else c0
    # A row of length 0 runs no step: its initial state is its final state, and enters the (discarded) steps'
    # products as 0, for the same reason (a NaN there made every weight's gradient NaN). A finished row's state
    # stays in them: it is the row's own result. Selected once, not at every step (two selects a step cost the
    # small preset's layer 50.4 against 44.9 ms in one A/B on a loaded machine); a started row's state is unchanged.
    started = (lengths > 0).unsqueeze(1)
    h = torch.where(started, h_start, h_start.new_zeros(()))
    c = torch.where(started, c_start, c_start.new_zeros(()))
    steps: List[Tensor] = []
    for t in range(total):
        active = (t < lengths).unsqueeze(1)
        z = xi[:, t] + h.matmul(w_recurrent)
        i, j, f, o = z.split(cells, dim=1)
        c_new = _clip(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j), cell_clip)
        h_new = _clip((torch.sigmoid(o) * torch.tanh(c_new)).matmul(w_proj), proj_clip)
        c = torch.where(active, c_new, c)
        h = torch.where(active, h_new, h)
        steps.append(torch.where(active, h_new, h_new.new_zeros(())))  # a select: no inf * 0 = NaN gradient
    out = torch.stack(steps, 1) if steps else x.new_zeros(batch, 0, proj)
    if residual:
        out = out + x_run  # zero at the padded positions (above)
    if reverse:
        out = out.gather(1, index.unsqueeze(-1).expand_as(out))
    return out, torch.where(started, h, h_start), torch.where(started, c, c_start)


def check_lstm_lengths(lengths: Tensor, total: int) -> Tensor:
    """The fused op's checks of an LSTM's ``(B,)`` lengths (``check_integer`` and ``check_lstm_lengths``
    in ``csrc/include/checks.h``), in its words: a TypeError unless they are integers (a float length
    2.5 ran ``t < 2.5``, 3 steps, or failed in the reversal's gather), a ValueError naming the first
    outside ``[0, T]`` (a longer row ran T steps as if complete, or failed to reverse; a negative one
    none). One host sync (:func:`any_bad`: an assertion where torch.compile or torch.export traces).
    Returns them as int64 (the op reads any integer dtype as int64): torch has no comparisons for
    uint16/uint32/uint64 ("lt_cpu" not implemented), the checks' and the LSTM's own."""
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(Errors.E_LSTM_LENGTHS_DTYPE.format(dtype=lengths.dtype))
    lengths = lengths.long()  # no copy for int64
    bad = (lengths < 0) | (lengths > total)
    if any_bad(bad, Errors.E_LSTM_LENGTHS_RANGE_IN_GRAPH):
        index = int(bad.nonzero()[0, 0])
        raise ValueError(Errors.E_LSTM_LENGTHS_RANGE.format(value=int(lengths[index]), index=index, T=total))
    return lengths


def check_lstm_weights(inputs: int, weights: Sequence[Tensor], residual: bool) -> None:
    """The fused op's checks of one direction's ``(w_input (I, 4C), w_recurrent (P, 4C), bias (4C,),
    w_proj (C, P))`` for ``inputs`` (I) features (``check_lstm`` in ``csrc/include/checks.h``), in its
    words, and of ``residual`` (it adds x to the output: I == P). ValueErrors: torch's bare product and
    broadcast errors before. Host shapes only: no sync."""
    w_input, w_recurrent, bias, w_proj = weights
    cells, proj = w_proj.shape[0], w_proj.shape[-1]
    check_shape(w_input, (inputs, 4 * cells), "w_input (I, 4C)", Errors.E_LSTM_WEIGHT_SHAPE)
    check_shape(w_recurrent, (proj, 4 * cells), "w_recurrent (P, 4C)", Errors.E_LSTM_WEIGHT_SHAPE)
    check_shape(bias, (4 * cells,), "bias (4C,)", Errors.E_LSTM_WEIGHT_SHAPE)
    if residual and inputs != proj:
        raise ValueError(Errors.E_LSTM_RESIDUAL.format(I=inputs, P=proj))


def check_same_dtype(op: str, main: Tuple[str, Tensor], *others: Tuple[str, Optional[Tensor]]) -> None:
    """A TypeError (``Errors.E_MIXED_DTYPES``) unless every tensor of ``others`` (``(name, tensor or
    None)``) has the dtype of ``main`` (``(name, tensor)``), outside autocast on main's device: both
    backends' one rule (the reference's products refused mixed dtypes with torch's words, the fused
    wrappers cast everything to main's dtype, silently rounding float64 weights to float32). Under
    autocast mixed dtypes are the rule (a float32 state beside a bfloat16 x), except float64 beside another
    floating dtype (Errors.E_MIXED_FLOAT64_AUTOCAST): autocast casts no float64 tensor, so the reference's
    products failed with torch's bare "self and mat2 must have the same dtype" where the fused wrappers
    rounded the float64 one to float32. A dtype is known while tracing: no sync."""
    name, like = main
    for other, t in (main, *others):  # before the dtypes: an integer x is no dtype to convert the rest to
        if t is not None:
            check_floating(op, other, t)
    if autocast_on(like.device.type):
        wide = like.dtype == torch.float64
        for other, t in others:
            if t is not None and t.dtype != like.dtype and (wide or t.dtype == torch.float64):
                raise TypeError(Errors.E_MIXED_FLOAT64_AUTOCAST.format(op=op, name=other, dtype=t.dtype, main=name,
                                                                       main_dtype=like.dtype))
        return
    for other, t in others:
        if t is not None and t.dtype != like.dtype:
            raise TypeError(Errors.E_MIXED_DTYPES.format(op=op, name=other, dtype=t.dtype, main=name,
                                                         main_dtype=like.dtype))


def check_floating(op: str, name: str, t: Tensor) -> None:
    """A TypeError (``Errors.E_NOT_FLOAT``) unless ``t`` (argument ``name`` of ``op``) is a floating
    tensor: both backends' check of an op's floating arguments (:func:`check_same_dtype` runs it on each;
    the fused wrappers before they pick the dtype their kernels run in). Without it an integer ``x`` met
    the reference's dtype check, whose advice was to convert the weights to that integer dtype. A dtype is
    known while tracing: no sync."""
    if not t.is_floating_point():
        raise TypeError(Errors.E_NOT_FLOAT.format(op=op, name=name, dtype=t.dtype))


def check_clips(cell_clip: Optional[float], proj_clip: Optional[float]) -> None:
    """The fused op's check of an LSTM's clips (``check_lstm`` in ``csrc/include/checks.h``), in its
    words: a ValueError (``Errors.E_LSTM_CLIP``) for a negative or NaN one (the reference clamped to an
    empty range, or to NaN). None: no clip. Python numbers: no host sync."""
    for name, value in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
        if value is not None and not value >= 0:
            raise ValueError(Errors.E_LSTM_CLIP.format(name=name, value=value))


def check_shape(t: Optional[Tensor], expected: Tuple[int, ...], name: str, message: str) -> None:
    """A ValueError (``message``, an ``Errors`` entry with the fields ``name``, ``expected`` and ``found``)
    unless ``t`` is None or has exactly the shape ``expected``: the ops' one check of
    an argument's shape where torch would broadcast it, read part of it or fail with its own words (the
    fused ops check theirs in C++, ``check_sizes`` in ``csrc/include/checks.h``, in the same words). Host
    shapes only: no sync."""
    if t is not None and tuple(t.shape) != tuple(expected):
        raise ValueError(message.format(name=name, expected=list(expected), found=list(t.shape)))


def check_sampled_inputs(h: Tensor, weight: Tensor, offset: Tensor, hit: Tensor) -> Tensor:
    """:func:`sampled_logsumexp`'s checks, on both backends (the fused wrapper calls it before its op, whose
    ``check_inputs`` in ``csrc/cpu/sampled_softmax.cpp`` says the same): h ``(N, P)`` and weight ``(S, P)``
    with ``S >= 1`` and one dtype (:func:`check_same_dtype`; offset is read in float32), offset ``(S,)``,
    hit ``(N,)`` of an integer dtype. A shorter hit wrote only its rows (the others kept their hit
    column), a longer one failed in torch's scatter, a float one in its gather. ValueErrors (a TypeError
    for the dtypes); host shapes and dtypes only: no sync. Returns hit as int64 (the op's dtype, and the
    reference's gather takes no uint8)."""
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(Errors.E_SAMPLED_H_WEIGHT.format(h=list(h.shape), weight=list(weight.shape)))
    if weight.shape[0] == 0:  # as the fused op: the max over the candidates has no column to reduce
        raise ValueError(Errors.E_SAMPLED_NO_CANDIDATES.format(shape=list(weight.shape)))
    check_shape(offset, (weight.shape[0],), "offset (S,)", Errors.E_SAMPLED_SHAPE)
    if hit.is_floating_point() or hit.is_complex() or hit.dtype == torch.bool:
        raise TypeError(Errors.E_SAMPLED_HIT_DTYPE.format(dtype=hit.dtype))
    check_same_dtype("sampled_logsumexp", ("h", h), ("weight", weight))
    check_shape(hit, (h.shape[0],), "hit (N,)", Errors.E_SAMPLED_SHAPE)
    return hit.long()  # no copy for int64


#: :func:`bilstm_layer`'s ``state``: ``(h0 (2, B, P), c0 (2, B, C))``, each also as a pair ``(forward, backward)``.
BiLstmState = Tuple[Union[Tensor, Sequence[Tensor]], Union[Tensor, Sequence[Tensor]]]


def bilstm_state(state) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """:func:`bilstm_layer`'s ``state`` as ``(h0 (2, B, P), c0 (2, B, C))`` tensors, ``(None,
    None)`` for None: a tensor is passed on as it is (the ops check its shape), a pair of
    per-direction tensors is stacked. Anything else (one tensor in place of the pair, h0 without
    c0, a part holding one direction only) is a TypeError (``Errors.E_BILSTM_STATE``) in both
    backends."""
    if state is None:
        return None, None
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(Errors.E_BILSTM_STATE.format(found=describe_state(state)))
    out = []
    for part in state:
        if isinstance(part, Tensor):
            out.append(part)
        elif isinstance(part, (tuple, list)) and len(part) == 2 and all(isinstance(t, Tensor) for t in part):
            out.append(torch.stack(list(part)))
        else:
            raise TypeError(Errors.E_BILSTM_STATE.format(found=describe_state(state)))
    return out[0], out[1]


def describe_state(state) -> str:
    """A short description of a bad ``state`` for a message: its nesting, lengths, leaf types and
    tensor shapes, e.g. ``a tuple of 2 items (a tensor of shape (2, 3, 4), a list of 0 items ())``."""
    if isinstance(state, Tensor):
        return f"a tensor of shape {tuple(state.shape)}"
    if isinstance(state, (tuple, list)):
        return f"{with_article(type(state).__name__)} of {counted(len(state), 'item')} ({', '.join(describe_state(s) for s in state)})"
    return with_article(type(state).__name__)


def bilstm_layer(
    x_fwd: Tensor,
    x_bwd: Tensor,
    lengths: Tensor,
    fwd: Sequence[Tensor],
    bwd: Sequence[Tensor],
    state: Optional[BiLstmState] = None,
    cell_clip: Optional[float] = None,
    proj_clip: Optional[float] = None,
    reverse_backward: bool = True,
    residual: bool = False,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Both directions of one biLM layer (independent weights, shared lengths).

    fwd / bwd: ``(w_input, w_recurrent, bias, w_proj)`` of each direction.
    state: ``(h0 (2, B, P), c0 (2, B, C))`` indexed by direction, or None for
    zeros; h0 and c0 may each also be a pair ``(forward, backward)`` of
    ``(B, P)`` / ``(B, C)`` tensors (both backends accept the same states:
    :func:`bilstm_state`).
    reverse_backward: the backward direction reverses each row within its
    length (inference); False when the caller already feeds a reversed stream
    (pretraining).
    Returns ``(out_fwd (B, T, P), out_bwd (B, T, P), h_n (2, B, P), c_n (2, B, C))``.
    """
    h0, c0 = bilstm_state(state)
    if x_bwd.shape != x_fwd.shape:  # as the fused op: a backward stream of another T ran unnoticed
        raise ValueError(Errors.E_BILSTM_INPUT_SHAPES.format(fwd=list(x_fwd.shape), bwd=list(x_bwd.shape)))
    batch = x_fwd.shape[0]
    check_shape(h0, (2, batch, fwd[3].shape[1]), "h0 (2, B, P)", Errors.E_LSTM_SHAPE)  # a third direction was ignored
    check_shape(c0, (2, batch, fwd[3].shape[0]), "c0 (2, B, C)", Errors.E_LSTM_SHAPE)
    h0_f, h0_b = (None, None) if h0 is None else (h0[0], h0[1])
    c0_f, c0_b = (None, None) if c0 is None else (c0[0], c0[1])
    (wi_f, wr_f, b_f, wp_f), (wi_b, wr_b, b_b, wp_b) = fwd, bwd
    out_f, h_f, c_f = lstm_layer(x_fwd, lengths, wi_f, wr_f, b_f, wp_f, h0_f, c0_f, cell_clip, proj_clip, False, residual)
    out_b, h_b, c_b = lstm_layer(x_bwd, lengths, wi_b, wr_b, b_b, wp_b, h0_b, c0_b, cell_clip, proj_clip, reverse_backward,
                                 residual)
    return out_f, out_b, torch.stack([h_f, h_b]), torch.stack([c_f, c_b])


class NotTwiceDifferentiable(torch.autograd.Function):
    """The identity on gradients that a backward formula without a second derivative computed under
    ``create_graph=True`` (:func:`first_order_only`): differentiating them raises
    RuntimeError(``message``) instead of silently giving no second-order term, or a wrong one."""

    @staticmethod
    def forward(ctx, message: str, count: int, *tensors: Tensor):
        # tensors: the ``count`` gradients, then the anchors (first_order_only), not returned.
        # ctx in forward, not the setup_context form: for that form Function.apply binds the arguments
        # to forward's signature (inspect) on every call, which made sampled_logsumexp 1.65x slower at
        # small sizes (CUDA pretraining runs it twice a step, host-bound); torch.func is not supported.
        ctx.message = message
        return tensors[:count]

    @staticmethod
    def backward(ctx, *_grads):
        raise RuntimeError(ctx.message)


def _flat_tensors(items) -> List[Tensor]:
    """The tensors in ``items``, a sequence of tensors, None and lists or tuples of them (the LSTM's
    incoming gradients: a list of per-direction outputs' gradients, then tensors), in order."""
    out: List[Tensor] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out.extend(_flat_tensors(item))
        elif isinstance(item, Tensor):
            out.append(item)
    return out


def first_order_only(message: str) -> Callable[[Callable], Callable]:
    """Decorates a backward formula that has no second derivative: the fused ops' (their backward
    kernels have no autograd formulas of their own) and :class:`ConsumingLogSumExp`'s (an in-place
    product on a saved tensor). It runs without recording a graph, and under ``create_graph=True``
    its gradients (tensors, lists of tensors, None; a tuple of them) come back through
    :class:`NotTwiceDifferentiable`, which raises RuntimeError(``message``) when they are
    differentiated. The marks hang from the saved tensors that require grad (read before the
    backward runs: the forward's inputs, ConsumingLogSumExp's anchors) and from the incoming
    gradients that do (a head on top of the op, ``s`` in ``(op(x) * s).sum()``, a gradient
    penalty's critic: what reaches the op only through its incoming gradient), so a second
    derivative with respect to any of them meets the error: ``autograd.grad`` follows only the
    paths to the tensors it is asked about, and marks hanging from nothing gave torch's "appears
    to not have been used in the graph", or a number without the marked term (the reference's
    sampled_logsumexp, whose product's backward is differentiable in h and weight; every op with
    respect to what only its incoming gradient depends on). Without ``create_graph`` (first-order
    training) the backward runs as it is: no anchors, no marks."""

    def decorate(backward):
        @functools.wraps(backward)
        def wrapper(ctx, *grads):
            graph = torch.is_grad_enabled()
            anchors = [t for t in (*ctx.saved_tensors, *_flat_tensors(grads)) if t.requires_grad] if graph else []
            with torch.no_grad():
                result = backward(ctx, *grads)
            if not graph:
                return result
            flat = [t for item in result for t in (item if isinstance(item, list) else [item]) if t is not None]
            if not flat:
                return result
            marked = iter(NotTwiceDifferentiable.apply(message, len(flat),
                                                       *flat, *anchors))

            def mark(item):
                if isinstance(item, list):
                    return [mark(t) for t in item]
                return None if item is None else next(marked)

            return tuple(mark(item) for item in result)

        return wrapper

    return decorate


def sampled_logsumexp(h: Tensor, weight: Tensor, offset: Tensor, hit: Tensor) -> Tensor:
    """The log-sum-exp over the sampled candidates of TF's ``sampled_softmax_loss``.

    h ``(N, P)``; weight ``(S, P)``, S >= 1, the candidates' softmax rows; offset ``(S,)``
    their bias minus ``log(expected count)``; hit ``(N,)`` int64: the column of
    row n's own target among the candidates (an accidental hit, removed), or -1.
    Returns ``(N,)`` float32 (float64 for float64 inputs on the fused path):
    ``logsumexp(h @ weight.T + offset, 1)`` without the hit columns.
    """
    hit = check_sampled_inputs(h, weight, offset, hit)
    # The (N, S) logits dominate the cost, so they take as few passes as possible: the
    # product (without bias: addmm would first write the broadcast offset over all of
    # it), then one in-place pass adding the offset (neither the product's backward nor
    # this add's needs the output).
    logits = F.linear(h, weight).float()
    logits.add_(offset.float())
    # The lowest float rather than -inf keeps a row whose every candidate is a hit
    # finite. Written outside autograd: the gradient there is exactly zero anyway (its
    # softmax exp(lowest - max) underflows to 0; a row of only hits gets no gradient
    # from the caller's logaddexp with its true logit), and index_put_'s backward
    # would clone the whole (N, S) gradient to write those zeros.
    if hit.device.type == "cpu":
        # As the fused op, which runs on the CPU only (elsewhere it runs this function): a hit below -1 was
        # taken for none, one past the candidates failed in index_put_. Not on a GPU, where reading the
        # check's answer would be a copy to the host, which the training step never makes (its hits are
        # built in range: SoftmaxLayer.sampled_nll).
        candidates = weight.shape[0]
        bad = (hit < -1) | (hit >= candidates)
        if any_bad(bad, Errors.E_SAMPLED_HIT_RANGE_IN_GRAPH.format(S=candidates)):
            index = int(bad.nonzero()[0, 0])
            raise ValueError(Errors.E_SAMPLED_HIT_RANGE.format(index=index, value=int(hit[index]), S=candidates))
    with torch.no_grad():
        # Every row written, without a host sync: the lowest float at its hit, and where it has none its
        # own value back at column 0 (bit for bit). Selecting the rows with a hit (nonzero) waited for the
        # device: a host sync in every pretraining step on a GPU.
        has = hit >= 0
        column = torch.where(has, hit, 0).unsqueeze(1)
        lowest = torch.finfo(logits.dtype).min
        logits.scatter_(1, column, torch.where(has.unsqueeze(1), lowest, logits.gather(1, column)))
    # h and weight ride along as anchors only (ConsumingLogSumExp): F.linear's backward takes the
    # logits' gradient on to them, differentiably, so a second derivative reaches them that way too
    return ConsumingLogSumExp.apply(logits, h, weight)[0]


class ConsumingLogSumExp(torch.autograd.Function):
    """``logsumexp(x, 1)`` of a ``(N, S)`` float tensor that nothing else needs: ``x`` is
    overwritten with ``exp(x - max)`` and reused as the softmax of the backward.
    Returns ``(lse (N,), x)``; the overwritten ``x`` comes back only because
    autograd wants every input changed in place among the outputs. ``anchors``: tensors
    ``x`` was computed from (they get no gradient here), for the error of a second
    derivative (:func:`first_order_only`).

    ``torch.logsumexp`` and its backward make about five ``(N, S)`` temporaries; at
    ``N = B * U = 2560``, ``S = 8192`` that is 84 MB each, per direction and step, all
    freshly mapped (page faults) and streamed through memory. Here: none.

    So the backward runs once per forward (a second one, after ``retain_graph=True``, raises
    ``Errors.E_SAMPLED_LOGSUMEXP_BACKWARD_TWICE``: the softmax is gone) and has no second
    derivative (:func:`first_order_only`: differentiating its gradient raises
    ``Errors.E_SAMPLED_LOGSUMEXP_DOUBLE_BACKWARD``; autograd through the in-place product gave a
    wrong number).
    """

    @staticmethod
    def forward(ctx, x: Tensor, *anchors: Tensor) -> Tuple[Tensor, Tensor]:
        # ctx in forward (not the setup_context form, whose Function.apply binds the arguments with inspect
        # on every call: NotTwiceDifferentiable)
        top = x.amax(1, keepdim=True)
        # A row of only the lowest float (every candidate a hit) keeps a finite max.
        x.sub_(top).exp_()
        total = x.sum(1, keepdim=True)
        ctx.mark_dirty(x)
        ctx.mark_non_differentiable(x)
        # The second output never gets a gradient: without this, autograd would fill an
        # (N, S) tensor of zeros for it on every backward.
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, total, *anchors)
        ctx.consumed = False
        return (total.log() + top).squeeze(1), x

    @staticmethod
    @first_order_only(Errors.E_SAMPLED_LOGSUMEXP_DOUBLE_BACKWARD)
    def backward(ctx, grad: Tensor, _unused: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        # Checked before the saved tensors are read: torch's own error there (a saved tensor
        # modified by an in-place operation) names neither the op nor the fix.
        if ctx.consumed:
            raise RuntimeError(Errors.E_SAMPLED_LOGSUMEXP_BACKWARD_TWICE)
        ctx.consumed = True
        x, total, *anchors = ctx.saved_tensors
        # d lse / dx = softmax = exp(x - max) / total, scaled in place.
        return (x.mul_(grad.unsqueeze(1) / total), *[None] * len(anchors))
