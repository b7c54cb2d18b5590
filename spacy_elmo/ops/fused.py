"""The fused kernels of ``spacy_elmo._C`` as PyTorch custom operators.

The C++ side registers the operators ``torch.ops.spacy_elmo.*`` (``TORCH_LIBRARY``
in ``csrc/bindings.cpp``; CPU kernels in ``csrc/cpu``, CUDA kernels in
``csrc/cuda``). This module adds what makes them first-class PyTorch ops, as in
PyTorch's extension-cpp example: fake (meta) implementations for
``torch.compile`` / ``opcheck`` (``torch.library.register_fake``) and backward
formulas (``torch.library.register_autograd``). The public functions have
exactly the signatures and semantics of :mod:`spacy_elmo.ops.reference`.

Autocast: on CUDA the kernels run in the autocast dtype (bf16/fp16 inputs, fp32
accumulation inside); on the CPU they always run in float32 (or float64), and a
float16/bfloat16 input gets its results back in its own dtype. Under autocast every result
has the reference's dtype: the autocast dtype of its products, promoted with the dtype of
what the reference adds to them (highway's ``x``, the LSTM's initial state and bias:
a float32 cell state stays float32, unrounded, for a stateful model's next call). The CUDA
kernels have no float64 version: float64 on a GPU runs the reference. A float16/bfloat16 module on
CUDA outside autocast runs the float32 kernels too (its weights cast to float32 on every call, its
results cast back): exact results; autocast runs the low-precision kernels.

Where this build or GPU cannot run a CUDA kernel (an extension built without them, a char CNN with
more than 16 filters or a token past the GPU's shared memory), CUDA tensors run the reference, with a
warning once (:mod:`spacy_elmo.ops.cuda_route`).
"""

from types import ModuleType
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import switches
from ..errors import Errors
from . import cuda_route, reference
from .extension import extension_fix, load_extension
from .reference import first_order_only

_LOADED, _REASON = load_extension()
if _LOADED is None:  # pragma: no cover - dispatch only imports this module when available
    raise ImportError(Errors.E_FUSED_UNAVAILABLE.format(reason=_REASON, fix=extension_fix()))
_C: ModuleType = _LOADED

_ops = torch.ops.spacy_elmo
_ACTIVATIONS = {"relu": 0, "tanh": 1}


def cpu_isa() -> str:
    """The CPU kernel variant chosen for this machine: ``base``, ``avx2`` or ``avx512``."""
    return _C.cpu_isa()


_BUILT_WITH_CUDA = bool(_C.built_with_cuda())  # read once: torch.compile cannot trace the pybind call


def built_with_cuda() -> bool:
    """Whether spacy_elmo._C has its CUDA kernels (setup.py builds them where it finds a CUDA toolkit)."""
    return _BUILT_WITH_CUDA


def cpu_buffer_bytes() -> int:
    """Bytes the CPU kernels keep between calls: recycled blocks for the tensors a
    training forward saves (process-wide, at most :func:`cpu_recycle_limit`) and the
    calling thread's work buffers (packed weights, input products, gate gradients)."""
    return int(_C.cpu_buffer_bytes())


def cpu_recycle_limit() -> int:
    """The most bytes the process-wide list of recycled blocks holds (default 1 GiB)."""
    return int(_C.cpu_recycle_limit())


def set_cpu_recycle_limit(nbytes: int) -> int:
    """Cap the recycled blocks at ``nbytes`` (0: every block goes back to the system
    when its tensor dies, as with ``torch.empty``). The oldest blocks above a lower
    cap are freed at once. Returns the previous cap."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(Errors.E_BAD_RECYCLE_LIMIT.format(value=nbytes, default=_C.DEFAULT_CPU_RECYCLE_LIMIT))
    return int(_C.set_cpu_recycle_limit(nbytes))


def release_cpu_buffers() -> int:
    """Free what :func:`cpu_buffer_bytes` counts (like ``torch.cuda.empty_cache``;
    other threads' work buffers are freed when those threads end). The next call
    allocates afresh. Returns the bytes freed."""
    return int(_C.release_cpu_buffers())


# --------------------------------------------------------------------- fakes
# The kernels' results are new contiguous tensors in the dtype of the operator's main input
# (the embedding, x or h; not the incoming gradients of a backward), whatever the strides of the inputs: so are the fakes' (empty_like kept a
# transposed input's strides, and grad_hn's dtype where the kernels return x's).


def _like(t: Tensor, shape) -> Tensor:
    """A new contiguous tensor of ``shape`` with ``t``'s dtype and device."""
    return t.new_empty(tuple(shape))


@torch.library.register_fake("spacy_elmo::char_cnn_forward")
def _char_cnn_forward_fake(char_ids, embedding, weights, biases, activation):
    n = char_ids.shape[0]
    f = sum(w.shape[0] for w in weights)
    return embedding.new_empty(n, f), embedding.new_empty(n, f, dtype=torch.int32)


@torch.library.register_fake("spacy_elmo::char_cnn_backward")
def _char_cnn_backward_fake(grad, out, argmax, char_ids, embedding, weights, activation):
    return (
        _like(embedding, embedding.shape),
        [_like(w, w.shape) for w in weights],
        [w.new_empty(w.shape[0]) for w in weights],
    )


@torch.library.register_fake("spacy_elmo::highway_forward")
def _highway_forward_fake(x, weight, bias):
    return _like(x, x.shape), x.new_empty(x.shape[0], 2 * x.shape[1])


@torch.library.register_fake("spacy_elmo::highway_backward")
def _highway_backward_fake(grad, x, weight, h):
    return _like(x, x.shape), _like(x, weight.shape), x.new_empty(weight.shape[0])


@torch.library.register_fake("spacy_elmo::lstm_forward")
def _lstm_forward_fake(xs, lengths, weights, h0, c0, cell_clip, proj_clip, reverse, residual, save):
    ndir = len(xs)
    b, t, _ = xs[0].shape
    c, p = weights[3].shape
    x = xs[0]
    outs = [x.new_empty(b, t, p) for _ in range(ndir)]
    if save:
        saved = (
            x.new_empty(ndir, t, b, 4 * c),
            x.new_empty(ndir, t, b, c),
            x.new_empty(ndir, t, b, p),
            x.new_empty(ndir, b, t, p),
            x.new_empty(ndir, t, b, c),
        )
    else:
        saved = tuple(x.new_empty(0) for _ in range(5))
    return (outs, x.new_empty(ndir, b, p), x.new_empty(ndir, b, c)) + saved


@torch.library.register_fake("spacy_elmo::lstm_backward")
def _lstm_backward_fake(grad_outs, grad_hn, grad_cn, xs, lengths, weights, c0, gates, c_raw, hp_raw, h_prev, m,
                        cell_clip, proj_clip, reverse, residual):
    x = xs[0]
    return (
        [_like(x, t.shape) for t in xs],
        [_like(x, w.shape) for w in weights],
        _like(x, grad_hn.shape),
        _like(x, grad_cn.shape),
    )


@torch.library.register_fake("spacy_elmo::sampled_logsumexp_forward")
def _sampled_logsumexp_forward_fake(h, weight, offset, hit):
    return h.new_empty(h.shape[0]), h.new_empty(h.shape[0], weight.shape[0])


@torch.library.register_fake("spacy_elmo::sampled_logsumexp_backward")
def _sampled_logsumexp_backward_fake(grad, h, weight, softmax):
    return _like(h, h.shape), _like(h, weight.shape), h.new_empty(weight.shape[0])


# ------------------------------------------------------------------ autograd


def _char_cnn_setup(ctx, inputs, output):
    char_ids, embedding, weights, biases, activation = inputs
    out, argmax = output
    ctx.set_materialize_grads(False)
    ctx.activation = activation
    ctx.n_filters = len(weights)
    ctx.save_for_backward(char_ids, embedding, out, argmax, *weights)


def char_cnn_backward_composed(grad: Tensor, out: Tensor, argmax: Tensor, char_ids: Tensor, embedding: Tensor,
                               weights: Sequence[Tensor], activation: int):
    """``char_cnn_backward`` (same arguments, results, dtypes and shapes) as ATen operators on any
    device: the gradient at each channel's maximum is scattered to its window position, and
    ``aten.convolution_backward`` (cuDNN on CUDA) gives the embedded characters' and the filters'
    gradients, one filter at a time (so only one filter's (N, count, positions) float32 gradient is
    alive: 1112 tokens x 1024 channels x 44 positions = 0.2 GB; all 2048 channels at once, 0.4 GB).
    The characters' gradients go to the table by ``index_add_``; id 0 (no character) has no row,
    padding ids are real rows.
    The CUDA autograd backward runs this: the CUDA kernel's global atomics (every token's padding
    character lands on the same table row) took 76-80 ms of a 106 ms pretraining step
    (docs/benchmarks.md). Computes in float32 (float64 for float64 inputs); on CUDA cuDNN rounds
    float32 to TF32 where torch lets it (``torch.backends.cudnn.allow_tf32``, on by default, or
    ``torch.backends.cudnn.conv.fp32_precision``), as for every cuDNN convolution, the reference's
    included: turn it off for float32 gradients. (A switch here would be process-wide state that
    other threads' convolutions see, and torch.compile traces it away.) Trusts its inputs as the
    autograd backward may (the forward checked the ids and made argmax); the operator checks them."""
    device = embedding.device
    acc = torch.float64 if embedding.dtype == torch.float64 else torch.float32
    n, width_all = char_ids.shape
    dim = embedding.shape[1]
    with reference.no_autocast(device.type):
        o = out.to(acc)
        # relu: where, not a product, so an inf gradient at a zero output gives 0, not inf * 0 = NaN
        # (fp16 loss scaling), and it passes at a NaN output, as the kernel's branch and torch's
        # threshold_backward do
        g = torch.where(o <= 0, 0, grad.to(acc)) if activation == _ACTIVATIONS["relu"] else grad.to(acc) * (1 - o * o)
        ids = char_ids.to(device=device, dtype=torch.long).reshape(-1)
        table = torch.nn.functional.pad(embedding.to(acc), (0, 0, 1, 0))  # row 0: id 0, no character
        # (N, D, W), contiguous: as a transposed view cuDNN would read it as channels-last and copy each
        # filter's (N, count, positions) gradient to match
        x = table.index_select(0, ids).view(n, width_all, dim).transpose(1, 2).contiguous()
        d_x = torch.zeros_like(x)
        d_ws, d_bs, first = [], [], 0
        for w in weights:
            count, width = w.shape[0], w.shape[2]
            g_i = g[:, first : first + count]
            d_bs.append(g_i.sum(0).to(w.dtype))
            if n == 0:
                d_ws.append(torch.zeros(w.shape, dtype=w.dtype, device=device))
            else:
                g_full = x.new_zeros(n, count, width_all - width + 1)
                g_full.scatter_(2, argmax[:, first : first + count].to(torch.long).unsqueeze(2), g_i.unsqueeze(2))
                d_xi, d_w, _ = torch.ops.aten.convolution_backward(
                    g_full, x, w.to(acc), None, [1], [0], [1], False, [0], 1, [True, True, False])
                del g_full
                d_x += d_xi
                d_ws.append(d_w.to(w.dtype).contiguous())
            first += count
        d_table = table.new_zeros(table.shape).index_add_(0, ids, d_x.transpose(1, 2).reshape(n * width_all, dim))
    return d_table[1:].to(embedding.dtype, copy=True), d_ws, d_bs  # a tensor of its own, as the op's


def _char_cnn_backward_for(device: torch.device):
    """The char CNN's backward for tensors on ``device``: on CUDA the ATen composition, elsewhere the op."""
    return char_cnn_backward_composed if device.type == "cuda" else _ops.char_cnn_backward


@first_order_only(Errors.E_FUSED_DOUBLE_BACKWARD.format(op="char_cnn"))
def _char_cnn_backward(ctx, grad_out, _grad_argmax):
    char_ids, embedding, out, argmax, *weights = ctx.saved_tensors
    if grad_out is None:
        nones = [None] * len(weights)
        return None, None, nones, list(nones), None
    backward = _char_cnn_backward_for(embedding.device)
    d_emb, d_w, d_b = backward(grad_out, out, argmax, char_ids, embedding, weights, ctx.activation)
    # A width-1 filter's (C, D, 1) gradient comes with strides (D, 1, D): contiguous to PyTorch,
    # but DDP compares strides with its buckets' and warns on every rank of every run.
    d_w = [g if g.stride() == w.stride() else g.clone(memory_format=torch.contiguous_format) for g, w in zip(d_w, weights)]
    return None, d_emb, d_w, list(d_b), None


torch.library.register_autograd("spacy_elmo::char_cnn_forward", _char_cnn_backward, setup_context=_char_cnn_setup)


def _highway_setup(ctx, inputs, output):
    x, weight, _bias = inputs
    _y, h = output
    ctx.set_materialize_grads(False)  # never build zero grads for the saved pre-activations
    ctx.save_for_backward(x, weight, h)


@first_order_only(Errors.E_FUSED_DOUBLE_BACKWARD.format(op="highway"))
def _highway_backward(ctx, grad_y, _grad_h):
    x, weight, h = ctx.saved_tensors
    if grad_y is None:
        return None, None, None
    dx, dw, db = _ops.highway_backward(grad_y, x, weight, h)
    return dx, dw, db


torch.library.register_autograd("spacy_elmo::highway_forward", _highway_backward, setup_context=_highway_setup)


def _lstm_setup(ctx, inputs, output):
    xs, lengths, weights, h0, c0, cell_clip, proj_clip, reverse, residual, save = inputs
    outs, h_n, c_n, gates, c_raw, hp_raw, h_prev, m = output
    # the saved tensors are outputs only for autograd's sake: no zero grads for them
    ctx.set_materialize_grads(False)
    ctx.ndir = len(xs)
    ctx.cfg = (cell_clip, proj_clip, list(reverse), residual)
    ctx.save_for_backward(lengths, c0, gates, c_raw, hp_raw, h_prev, m, *xs, *weights)


@first_order_only(Errors.E_FUSED_DOUBLE_BACKWARD.format(op="lstm"))
def _lstm_backward(ctx, grad_outs, grad_hn, grad_cn, *_unused):
    lengths, c0, gates, c_raw, hp_raw, h_prev, m, *rest = ctx.saved_tensors
    xs, weights = rest[: ctx.ndir], rest[ctx.ndir :]
    cell_clip, proj_clip, reverse, residual = ctx.cfg
    b, t, _ = xs[0].shape
    c, p = weights[3].shape
    grad_outs = [g if g is not None else xs[0].new_zeros(b, t, p) for g in grad_outs]
    if grad_hn is None:
        grad_hn = xs[0].new_zeros(ctx.ndir, b, p)
    if grad_cn is None:
        grad_cn = xs[0].new_zeros(ctx.ndir, b, c)
    dxs, dws, dh0, dc0 = _ops.lstm_backward(
        grad_outs, grad_hn, grad_cn, list(xs), lengths, list(weights), c0, gates, c_raw, hp_raw, h_prev, m,
        cell_clip, proj_clip, reverse, residual,
    )
    return list(dxs), None, list(dws), dh0, dc0, None, None, None, None, None


torch.library.register_autograd("spacy_elmo::lstm_forward", _lstm_backward, setup_context=_lstm_setup)


def _sampled_logsumexp_setup(ctx, inputs, output):
    h, weight, _offset, _hit = inputs
    _lse, softmax = output
    ctx.set_materialize_grads(False)  # no (N, S) zeros for the softmax output
    ctx.save_for_backward(h, weight, softmax)


@first_order_only(Errors.E_SAMPLED_LOGSUMEXP_DOUBLE_BACKWARD)
def _sampled_logsumexp_backward(ctx, grad_lse, _grad_softmax):
    if grad_lse is None:
        return None, None, None, None
    h, weight, softmax = ctx.saved_tensors
    dh, dw, doffset = _ops.sampled_logsumexp_backward(grad_lse, h, weight, softmax)
    return dh, dw, doffset, None


torch.library.register_autograd("spacy_elmo::sampled_logsumexp_forward", _sampled_logsumexp_backward,
                                setup_context=_sampled_logsumexp_setup)


# ------------------------------------------------------------------ wrappers


def _run_dtype(t: Tensor, op: str, name: str) -> torch.dtype:
    """The dtype the kernels run in for floating ``t`` (:func:`_kernel_dtype`).
    Raises TypeError for a non-floating ``t`` (argument ``name`` of ``op``)."""
    reference.check_floating(op, name, t)
    cuda_autocast = t.device.type == "cuda" and torch.is_autocast_enabled("cuda")
    return _kernel_dtype(t.dtype, t.device.type, torch.get_autocast_dtype("cuda") if cuda_autocast else None)


def _kernel_dtype(dtype: torch.dtype, device_type: str, autocast_dtype: Optional[torch.dtype]) -> torch.dtype:
    """The dtype the kernels run in for an input of floating ``dtype`` on ``device_type``, with
    ``autocast_dtype`` the dtype of the autocast that is on there (None: off). float64 stays float64
    (autocast never casts it; on CUDA the wrappers then run the reference, as the float64
    reference under autocast runs): it was checked after autocast, so a float64 module ran the
    bfloat16 kernels under CUDA autocast. Else the autocast dtype on CUDA, and float32."""
    if dtype == torch.float64:
        return dtype
    if device_type == "cuda" and autocast_dtype is not None:
        return autocast_dtype
    return torch.float32


def _float64_on_gpu(t: Tensor, op: str, name: str) -> bool:
    """Whether ``t`` runs in float64 on a GPU, where the kernels have no float64 version (the op
    refuses it): the wrappers run the reference there, in float64, as a float64 module's
    checks expect (``bilm.double()`` on CUDA failed in the kernel's dtype check)."""
    return t.device.type == "cuda" and _run_dtype(t, op, name) == torch.float64


def _reference_instead(t: Tensor, weights: Optional[Sequence[Tensor]] = None,
                       char_ids: Optional[Tensor] = None) -> bool:
    """Whether the op on ``t`` runs the reference where this build or GPU cannot run its CUDA kernel: no
    CUDA kernels compiled in; for the char CNN (``t`` the (V, D) embedding, its filter ``weights`` and
    (N, W) ``char_ids``) also too many filters or too much shared memory
    (:func:`spacy_elmo.ops.cuda_route.reference_instead`, which warns). Other shapes: the op names them."""
    width = char_ids.shape[1] if char_ids is not None and char_ids.dim() == 2 and t.dim() == 2 else None
    return cuda_route.reference_instead(t.device, built_with_cuda, None if weights is None else len(weights),
                                        width, None if width is None else t.shape[1])


def _cast(ts, dtype):
    return [x if x.dtype == dtype else x.to(dtype) for x in ts]


def _as_input(t: Tensor, like: Tensor, *mixed: torch.dtype) -> Tensor:
    """A kernel result ``t`` in the dtype of the input ``like``: a float16/bfloat16 module on
    the CPU runs the kernels in float32 and gets its own dtype back, as from the reference
    path. Under autocast (``t`` not float64, which autocast leaves alone) it comes back in
    the dtype the reference's result has there: the autocast dtype of its products,
    promoted with ``mixed``, the dtypes of the tensors the reference combines with them
    (highway's ``x``: float32 for a float32 ``x``). On the CPU the kernels still compute in
    float32, but every layer of one call has the reference's dtypes (the top layers came
    back float32 beside a bfloat16 layer 0; a float32 cell state came back rounded to
    bfloat16)."""
    device = like.device.type
    if reference.autocast_on(device):
        if t.dtype == torch.float64:
            return t
        dtype = torch.get_autocast_dtype(device)
        for other in mixed:
            dtype = torch.promote_types(dtype, other)
        return t if t.dtype == dtype else t.to(dtype)
    return t if t.dtype == like.dtype else t.to(like.dtype)


def char_cnn(
    char_ids: Tensor,
    embedding: Tensor,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor],
    activation: str = "relu",
) -> Tensor:
    """Fused :func:`spacy_elmo.ops.reference.char_cnn` (same arguments and result)."""
    if activation not in _ACTIVATIONS:
        raise ValueError(Errors.E_BAD_ACTIVATION.format(value=activation))
    reference.check_char_ids_dtype(char_ids)  # the range: the op, in C++
    if _float64_on_gpu(embedding, "char_cnn", "embedding") or _reference_instead(
            embedding, weights, char_ids):
        return reference.char_cnn(char_ids, embedding, weights, biases, activation)
    dtype = _run_dtype(embedding, "char_cnn", "embedding")
    # as the reference, before the casts below would round a float64 filter silently (its shapes: the op)
    reference.check_same_dtype("char_cnn", ("embedding", embedding), *[("a filter weight", w) for w in weights],
                               *[("a bias", b) for b in biases])
    _check_switch(switches.CHAR_CNN_MMA, embedding)
    with reference.no_autocast(embedding.device.type):
        emb, *params = _cast([embedding, *weights, *biases], dtype)
        n = len(weights)
        out, _ = _ops.char_cnn_forward(char_ids, emb, params[:n], params[n:], _ACTIVATIONS[activation])
    return _as_input(out, embedding)


def highway(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Fused :func:`spacy_elmo.ops.reference.highway` (same arguments and result)."""
    # F = 0 (no features: y is x's empty shape) too, which x.reshape(-1, 0) below cannot flatten
    if _float64_on_gpu(x, "highway", "x") or _reference_instead(x) or x.shape[-1] == 0:
        return reference.highway(x, weight, bias)
    dtype = _run_dtype(x, "highway", "x")
    reference.check_same_dtype("highway", ("x", x), ("weight", weight), ("bias", bias))  # as the reference (_cast)
    shape = x.shape
    with reference.no_autocast(x.device.type):
        x2, w, b = _cast([x.reshape(-1, shape[-1]), weight, bias], dtype)
        y, _ = _ops.highway_forward(x2, w, b)
    return _as_input(y.reshape(shape), x, x.dtype)  # the reference's g * relu(t) + (1 - g) * x


def _check_switch(name: str, t: Tensor) -> None:
    """Warn (once per value) where ``t``'s CUDA kernel reads the switch ``name`` and it holds a value the
    kernel does not take (:func:`spacy_elmo.switches.read`); not inside a graph being compiled."""
    if t.device.type == "cuda" and not torch.compiler.is_compiling():
        switches.read(name)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _lstm(
    xs: List[Tensor],
    lengths: Tensor,
    weights: List[Tensor],
    h0: Optional[Tensor],
    c0: Optional[Tensor],
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    reverse: List[int],
    residual: bool,
):
    ndir = len(xs)
    b = xs[0].shape[0]
    c, p = weights[3].shape[0], weights[3].shape[-1]  # (C, P): the kernel names any other shape
    like = xs[0]
    # Under autocast the reference's dtypes (_as_input): its outputs are products (plus x with a
    # residual), its h_n a product or h0 (x's zeros without one), its c_n a sum of the bias's
    # pre-activations and c0 (x's zeros).
    out_mixed = (like.dtype,) if residual else ()
    h_mixed = (like.dtype if h0 is None else h0.dtype,)
    c_mixed = (weights[2].dtype, like.dtype if c0 is None else c0.dtype)
    dtype = _run_dtype(like, "lstm", "x")
    # As the reference: one dtype outside autocast (the casts below rounded float64 weights or states
    # silently). The weights' shapes, the biases' included, the op checks (check_lstm in csrc/include/checks.h).
    names = ("w_input", "w_recurrent", "bias", "w_proj")
    reference.check_same_dtype("lstm", ("x", like), *[("x", x) for x in xs[1:]],
                               *[(names[k % 4], w) for k, w in enumerate(weights)], ("h0", h0), ("c0", c0))
    _check_switch(switches.LSTM_PRODUCTS, like)
    with reference.no_autocast(like.device.type):
        xs = _cast(xs, dtype)
        weights = _cast(weights, dtype)
        h0 = xs[0].new_zeros(ndir, b, p) if h0 is None else h0.to(dtype)
        c0 = xs[0].new_zeros(ndir, b, c) if c0 is None else c0.to(dtype)
        save = _needs_grad(*xs, *weights, h0, c0)
        # The op checks them: integers in [0, T] (csrc/include/checks.h). Host lengths stay on the host:
        # the CUDA op checks them there and copies them to the GPU without a host sync (step_lengths in
        # csrc/cuda/cuda_ops.cpp), where lengths on the GPU cost one a call.
        if lengths.device.type != "cpu":
            lengths = lengths.to(xs[0].device)
        outs, h_n, c_n, *_saved = _ops.lstm_forward(
            xs, lengths, weights, h0, c0,
            None if cell_clip is None else float(cell_clip),
            None if proj_clip is None else float(proj_clip),
            reverse, bool(residual), save,
        )
    return ([_as_input(o, like, *out_mixed) for o in outs], _as_input(h_n, like, *h_mixed),
            _as_input(c_n, like, *c_mixed))


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
    """Fused :func:`spacy_elmo.ops.reference.lstm_layer` (same arguments and result)."""
    if _float64_on_gpu(x, "lstm", "x") or _reference_instead(x):
        return reference.lstm_layer(x, lengths, w_input, w_recurrent, bias, w_proj, h0, c0, cell_clip, proj_clip,
                                    reverse, residual)
    h0 = None if h0 is None else h0.unsqueeze(0)
    c0 = None if c0 is None else c0.unsqueeze(0)
    outs, h_n, c_n = _lstm([x], lengths, [w_input, w_recurrent, bias, w_proj], h0, c0, cell_clip, proj_clip,
                           [int(reverse)], residual)
    return outs[0], h_n[0], c_n[0]


def bilstm_layer(
    x_fwd: Tensor,
    x_bwd: Tensor,
    lengths: Tensor,
    fwd: Sequence[Tensor],
    bwd: Sequence[Tensor],
    state: Optional[reference.BiLstmState] = None,
    cell_clip: Optional[float] = None,
    proj_clip: Optional[float] = None,
    reverse_backward: bool = True,
    residual: bool = False,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fused :func:`spacy_elmo.ops.reference.bilstm_layer`: both directions in one
    kernel call, interleaved step by step (they run concurrently)."""
    if _float64_on_gpu(x_fwd, "lstm", "x") or _reference_instead(x_fwd):
        return reference.bilstm_layer(x_fwd, x_bwd, lengths, fwd, bwd, state, cell_clip, proj_clip, reverse_backward,
                                      residual)
    h0, c0 = reference.bilstm_state(state)
    outs, h_n, c_n = _lstm([x_fwd, x_bwd], lengths, [*fwd, *bwd], h0, c0, cell_clip, proj_clip,
                           [0, int(reverse_backward)], residual)
    return outs[0], outs[1], h_n, c_n


def sampled_logsumexp(h: Tensor, weight: Tensor, offset: Tensor, hit: Tensor) -> Tensor:
    """Fused :func:`spacy_elmo.ops.reference.sampled_logsumexp` on the CPU: each block of
    rows goes through the product and the whole softmax while in cache, and the
    backward folds ``softmax * grad`` into its two products (``csrc/cpu/sampled_softmax.cpp``).
    Other devices run the reference (a cuBLAS product and PyTorch's kernels)."""
    if h.device.type != "cpu":
        return reference.sampled_logsumexp(h, weight, offset, hit)
    dtype = _run_dtype(h, "sampled_logsumexp", "h")
    # the reference's checks (the op's say the same), before the casts below would hide a float hit or weight
    hit = reference.check_sampled_inputs(h, weight, offset, hit)
    with torch.autocast("cpu", enabled=False):
        h, weight, offset = _cast([h, weight, offset], dtype)
        lse, _ = _ops.sampled_logsumexp_forward(h, weight, offset, hit)
    return lse


__all__ = ["char_cnn", "highway", "lstm_layer", "bilstm_layer", "sampled_logsumexp", "cpu_isa", "built_with_cuda",
           "cpu_buffer_bytes", "release_cpu_buffers", "cpu_recycle_limit", "set_cpu_recycle_limit"]
