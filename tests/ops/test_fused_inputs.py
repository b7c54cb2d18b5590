"""Bad and unusual input to the fused kernels: a clear error or the right answer,
never an out-of-bounds read or write, a silent reinterpretation, or a gradient
that silently lacks its second-order term. No spaCy here.

The tests of bad input take ``device`` (a keyword with a default, so not a pytest
fixture): test_fused_cuda.py runs them with their tensors on the GPU, where the
CUDA ops must refuse the same input with the same message (csrc/include/checks.h).
"""

import functools
import warnings

import numpy as np
import pytest
import torch

import spacy_elmo.ops as dispatch
from spacy_elmo.ops import reference as R

from . import numpy_oracle as O
from .test_fused_cpu import TOL32, _close, _run_with_isa, char_params, lstm_params, random_char_ids

fused = pytest.importorskip("spacy_elmo.ops.fused", reason="spacy_elmo._C is not built")
ops = torch.ops.spacy_elmo


def _char_inputs(n_tok=5, n_chars=8, filters=((1, 3), (2, 4)), device="cpu"):
    gen = torch.Generator().manual_seed(11)
    ids = random_char_ids(gen, n_tok, n_chars)
    emb, ws, bs = char_params(gen, list(filters), 4)
    return ids.to(device), emb.to(device), [w.to(device) for w in ws], [b.to(device) for b in bs]


def _reference(fn, *args, **kwargs):
    """``fn`` of spacy_elmo.ops.reference with every tensor argument on the CPU: float32 there
    (on a GPU cuDNN may run the reference's convolutions in TF32)."""

    def cpu(a):
        if isinstance(a, (list, tuple)):
            return type(a)(cpu(t) for t in a)
        return a.cpu() if isinstance(a, torch.Tensor) else a

    return fn(*cpu(args), **{k: cpu(v) for k, v in kwargs.items()})


# ----------------------------------------------------------------- char CNN


BAD_CHAR_IDS = [(262, 261), (-1, 261), (11, 10), (10**9, 261)]


@pytest.mark.parametrize("bad_id,rows", BAD_CHAR_IDS)
def test_char_ids_without_a_table_row_are_an_error(bad_id, rows, device="cpu"):
    """Id k reads row k - 1 of the table unchecked: 262 read past the end (garbage), 10**9 crashed."""
    ids, emb, ws, bs = _char_inputs(device=device)
    ids = ids.clamp(0, rows)
    out, arg = ops.char_cnn_forward(ids, emb[:rows], ws, bs, 0)
    ids[2, 3] = bad_id
    with pytest.raises(RuntimeError, match=rf"char_ids holds {bad_id} at flat index 19; .*\[0, {rows}\]"):
        fused.char_cnn(ids, emb[:rows], ws, bs)
    with pytest.raises(RuntimeError, match=rf"char_ids holds {bad_id}"):
        ops.char_cnn_backward(torch.ones_like(out), out, arg, ids, emb[:rows], ws, 0)


def test_the_dispatcher_leaves_the_ids_to_each_backend():
    """ops.char_cnn checked the ids in Python before the fused op checked them again in C++ (on
    CUDA two device-to-host syncs per call), and its data-dependent branch broke torch.compile's
    fullgraph tracing. Now each backend checks the ids it reads, once."""
    ids, emb, ws, bs = _char_inputs()
    bad = ids.clone()
    bad[2, 3] = 262
    with pytest.raises(RuntimeError, match=r"char_ids holds 262 at flat index 19"):  # the op's own check
        dispatch.char_cnn(bad, emb, ws, bs, backend="fused")
    with pytest.raises(ValueError, match=r"must lie in 0..261 .*found 262\."):
        dispatch.char_cnn(bad, emb, ws, bs, backend="reference")
    compiled = torch.compile(lambda i, e: dispatch.char_cnn(i, e, ws, bs, backend="fused"), backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(ids, emb), fused.char_cnn(ids, emb, ws, bs))


NOT_CHAR_ID_DTYPES = [torch.float32, torch.bool, torch.int8, torch.int16, torch.uint8]


@pytest.mark.parametrize("dtype", NOT_CHAR_ID_DTYPES)
def test_char_ids_must_be_integers(dtype, device="cpu"):
    """Float ids were truncated, bool ids read as 0/1; int8 / int16 / uint8 ran, though BiLM.forward
    refuses them: the fused wrapper applies the reference's rule (torch.long or torch.int32), with its
    message. The op itself still refuses what is not an integer."""
    ids, emb, ws, bs = _char_inputs(device=device)
    narrow = ids.clamp(max=100).to(dtype)
    for backend in ("fused", "reference"):
        with pytest.raises(TypeError, match=rf"integer character ids \(torch.long or torch.int32.*got {dtype}"):
            dispatch.char_cnn(narrow, emb, ws, bs, backend=backend)
    if dtype in (torch.float32, torch.bool):
        with pytest.raises(RuntimeError, match="char_ids must be an integer tensor"):
            ops.char_cnn_forward(narrow, emb, ws, bs, 0)


def test_char_ids_int32_and_the_last_row_are_fine(device="cpu"):
    ids, emb, ws, bs = _char_inputs(device=device)
    ids[0, 1] = 261  # the last stored row
    _close(fused.char_cnn(ids.int(), emb, ws, bs), _reference(R.char_cnn, ids, emb, ws, bs))


def test_char_filter_of_width_zero_is_an_error(device="cpu"):
    """It gave the bias alone (the reference's conv1d refuses it)."""
    ids, emb, _, _ = _char_inputs(device=device)
    with pytest.raises(RuntimeError, match="filter 0 has width 0"):
        fused.char_cnn(ids, emb, [torch.zeros(3, 4, 0, device=device)], [torch.zeros(3, device=device)])


def test_char_filter_without_channels_is_an_error(device="cpu"):
    """The reference's conv1d refuses a filter of no channels; the fused CPU op returned no column for
    it, and the CUDA kernels launched an empty grid when every filter had none ("invalid
    configuration argument")."""
    ids, emb, ws, bs = _char_inputs(device=device)
    empty_w, empty_b = torch.zeros(0, 4, 2, device=device), torch.zeros(0, device=device)
    for filters, biases, i in (([empty_w], [empty_b], 0), ([ws[0], empty_w], [bs[0], empty_b], 1)):
        with pytest.raises(RuntimeError, match=f"char_cnn: filter {i} has no channels"):
            fused.char_cnn(ids, emb, filters, biases)
        with pytest.raises(RuntimeError, match="expected weight to be at least 1 at dimension 0"):
            R.char_cnn(ids, emb, filters, biases)
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, 0)
    with pytest.raises(RuntimeError, match="char_cnn_backward: filter 0 has no channels"):
        ops.char_cnn_backward(out[:, :0], out[:, :0], arg[:, :0], ids, emb, [empty_w], 0)


def test_char_cnn_needs_one_bias_per_filter(device="cpu"):
    """Fewer biases than filters: the reference's zip dropped the filters without one (an output of 3
    channels for 7, silently), and ignored extra biases; the fused op refused. Both name the counts."""
    ids, emb, ws, bs = _char_inputs(device=device)  # filters of 3 and 4 channels
    for biases in (bs[:1], [*bs, bs[0]]):
        match = rf"char_cnn: one bias per filter, got {len(biases)} biases for 2 filters"
        with pytest.raises(RuntimeError, match=match):
            fused.char_cnn(ids, emb, ws, biases)
        with pytest.raises(ValueError, match=match):
            R.char_cnn(ids, emb, ws, biases)


def test_char_cnn_backward_op_checks_what_it_indexes_with(device="cpu"):
    """argmax positions and the gradient's shape index raw pointers: a negative position crashed."""
    ids, emb, ws, bs = _char_inputs(device=device)
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, 0)
    grad = torch.ones_like(out)
    bad = arg.clone()
    bad[1, 4] = 7  # filter 1 has width 2: its windows start at 0..6
    with pytest.raises(RuntimeError, match=r"argmax\[1, 4\] = 7 is not a window position of filter 1 \(0..6\)"):
        ops.char_cnn_backward(grad, out, bad, ids, emb, ws, 0)
    bad[1, 4] = -1000
    with pytest.raises(RuntimeError, match="is not a window position"):
        ops.char_cnn_backward(grad, out, bad, ids, emb, ws, 0)
    with pytest.raises(RuntimeError, match=r"argmax must have shape \[5, 7\], got \[2, 7\]"):
        ops.char_cnn_backward(grad, out, arg[:2], ids, emb, ws, 0)
    with pytest.raises(RuntimeError, match=r"grad must have shape \[5, 7\]"):
        ops.char_cnn_backward(grad[:, :3], out, arg, ids, emb, ws, 0)
    with pytest.raises(RuntimeError, match=r"grad must have shape \[5, 3\], got \[5, 7\]"):
        ops.char_cnn_backward(grad, out, arg, ids, emb, ws[:1], 0)  # one filter fewer: F = 3
    with pytest.raises(RuntimeError, match="activation must be 0"):
        ops.char_cnn_backward(grad, out, arg, ids, emb, ws, 7)


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_char_cnn_without_embedding_features(activation, backend):
    """An embedding of D = 0 features: every window sums nothing, so each channel is act(bias). The fused
    op gave that, (N, F); the reference returned (N, 0) (torch's conv1d of no input channels gives no
    output channels). Both give the NumPy float64 oracle's now, and the bias's gradient."""
    ids = torch.ones(3, 5, dtype=torch.long)
    emb, ws = torch.randn(4, 0, dtype=torch.float64), [torch.randn(2, 0, 2, dtype=torch.float64),
                                                         torch.randn(3, 0, 5, dtype=torch.float64)]
    bs = [torch.tensor([0.5, -0.25], dtype=torch.float64, requires_grad=True),
          torch.tensor([1.5, 0.0, -2.0], dtype=torch.float64, requires_grad=True)]
    impl = R if backend == "reference" else fused
    out = impl.char_cnn(ids, emb, ws, bs, activation)
    _close(out, O.char_cnn(ids.numpy(), emb.numpy(), [w.numpy() for w in ws], [b.detach().numpy() for b in bs],
                           activation), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    act = np.array([0.5, -0.25, 1.5, 0.0, -2.0])
    slope = (act > 0).astype(float) if activation == "relu" else 1 - np.tanh(act) ** 2
    _close(torch.cat([b.grad for b in bs]), 3 * slope, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ highway


def test_highway_bias_must_be_one_dimensional(device="cpu"):
    """A (2F, 1) bias was broadcast over the rows when N == 2F: a silently wrong result."""
    x, w, b = torch.randn(8, 4, device=device), torch.randn(8, 4, device=device), torch.randn(8, device=device)
    with pytest.raises(RuntimeError, match=r"bias \(2F,\) must have shape \[8\], got \[8, 1\]"):
        fused.highway(x, w, b[:, None])
    _close(fused.highway(x, w, b), _reference(R.highway, x, w, b))


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("shape", [(3, 0), (2, 3, 0), (0, 0)])
def test_highway_without_features(shape, backend):
    """F = 0: the reference returned x's empty shape, the fused wrapper died in x.reshape(-1, 0) (torch:
    "cannot reshape tensor of 0 elements"). Both give x's shape now, and gradients of the inputs' shapes."""
    x = torch.randn(*shape, requires_grad=True)
    w, b = torch.randn(0, 0, requires_grad=True), torch.randn(0, requires_grad=True)
    impl = R if backend == "reference" else fused
    y = impl.highway(x, w, b)
    assert y.shape == x.shape
    grads = torch.autograd.grad(y.sum(), [x, w, b], allow_unused=True, materialize_grads=True)
    assert [g.shape for g in grads] == [x.shape, w.shape, b.shape]


def test_highway_backward_op_checks_its_shapes(device="cpu"):
    """h with fewer rows crashed; a (N, F) h wrote past the buffers; a short grad was read past its end."""
    x, w, b = torch.randn(6, 4, device=device), torch.randn(8, 4, device=device), torch.randn(8, device=device)
    y, h = ops.highway_forward(x, w, b)
    g = torch.randn(6, 4, device=device)
    # another kernel dtype (CUDA has no float64 kernels: float64 is refused as such there)
    other, name = (torch.float64, "Double") if device == "cpu" else (torch.float16, "Half")
    for args, what in [((g, x, w, h[:3]), r"h \(the forward's \(N, 2F\) pre-activations\) must have shape \[6, 8\]"),
                       ((g, x, w, h[:, :4]), r"must have shape \[6, 8\], got \[6, 4\]"),
                       ((g[:3], x, w, h), r"grad must have shape \[6, 4\], got \[3, 4\]"),
                       ((g, x, w, h.to(other)), f"h is {name} but the other arguments are Float")]:
        with pytest.raises(RuntimeError, match=what):
            ops.highway_backward(*args)


# ---------------------------------------------------------------------- NaN

# Filters of counts that are whole vectors of every ISA and partial ones (5, 37), widths 1 to 7, over a
# 16-wide char dimension: the float32 vector kernels (and on CUDA with bfloat16, filters_mma: the
# tensor-core kernel, which needs counts of whole 16s).
NAN_CHAR_FILTERS = [(1, 5), (2, 16), (3, 37), (7, 32)]
NAN_CHAR = 67  # a shifted id: table row 66
NAN_TOL = {torch.float32: TOL32, torch.float64: TOL32, torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_nan_in_char_cnn_stays_nan(activation, dtype, filters=NAN_CHAR_FILTERS, device="cpu"):
    """A NaN in the char table or in a filter is NaN in every output whose windows read it, as in the
    NumPy oracle (and the reference: torch.max and relu keep a NaN). The max over windows skipped a NaN
    window (``acc > best`` is false for a NaN) and relu made a NaN 0, so a corrupt table gave finite
    numbers. The NaN char at a token's first window, mid-token, and as its trailing run (where the
    float32 kernel computes one window of the run); the other outputs are unchanged. An infinite char
    too (its windows are NaN, inf - inf, where its products have both signs): the float32 kernel sends
    such tokens, and every token for such a filter, to the generic path, whose max keeps a NaN."""
    gen = torch.Generator().manual_seed(7)
    ids = random_char_ids(gen, 6, 20, zero_rows=[5], word_lengths=[3, 9, 4, 12, 6, 1])
    ids[ids == NAN_CHAR] = NAN_CHAR + 1
    ids[0, 1] = NAN_CHAR
    ids[1, 6] = NAN_CHAR
    ids[2, 8:] = NAN_CHAR
    emb, ws, bs = char_params(gen, filters, 16, dtype=dtype)
    bad_emb = emb.clone()
    bad_emb[NAN_CHAR - 1] = float("nan")
    inf_emb = emb.clone()
    inf_emb[NAN_CHAR - 1] = float("inf")
    bad_ws = [w.clone() for w in ws]
    bad_ws[2][3, 5, 1] = float("nan")  # channel 3 of the third filter, for every token (0 * NaN too)
    channel = filters[0][1] + filters[1][1] + 3
    for table, filts in [(bad_emb, ws), (inf_emb, ws), (emb, bad_ws)]:
        out = fused.char_cnn(ids.to(device), table.to(device), [w.to(device) for w in filts],
                             [b.to(device) for b in bs], activation).cpu()
        expected = O.char_cnn(ids.numpy(), table.double().numpy(), [w.double().numpy() for w in filts],
                              [b.double().numpy() for b in bs], activation)
        assert out.dtype == dtype
        _close(out, expected, **NAN_TOL[dtype])  # NaN where the oracle has NaN (equal_nan), nowhere else
        assert np.isnan(expected).any() and not np.isnan(expected).all()
    assert torch.isnan(out[:, channel]).all()
    # The gradient passes relu at a NaN output (torch's does; a zero there hid the NaN from every
    # filter's gradient): each filter's holds a NaN, as the reference's.
    filts = [w.to(device).requires_grad_() for w in ws]
    fused.char_cnn(ids.to(device), bad_emb.to(device), filts, [b.to(device) for b in bs], activation).sum().backward()
    assert all(torch.isnan(w.grad).any() for w in filts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_several_nan_windows_send_the_gradient_to_the_first(activation, dtype, filters=((2, 5), (3, 37)),
                                                            device="cpu"):
    """Where several windows of a token are NaN, the max is the first of them, as torch.max's (the
    reference's): the kernels took the last (``acc > best || isnan(acc)`` replaced a NaN by a later one),
    so the table's gradient went to other characters' rows. A NaN char at position 2 of a 9-char token
    makes windows 1-2 (width 2) and 0-2 (width 3) NaN; the table's and the filters' gradients agree with
    the reference's, NaN for NaN."""
    gen = torch.Generator().manual_seed(11)
    ids = random_char_ids(gen, 3, 12, zero_rows=[], word_lengths=[9, 5, 11])
    ids[ids == NAN_CHAR] = NAN_CHAR + 1
    ids[0, 2] = NAN_CHAR
    emb, ws, bs = char_params(gen, list(filters), 16, dtype=dtype)
    emb[NAN_CHAR - 1] = float("nan")
    grads = []
    for impl in (fused, R):
        # copies: .to() of a tensor already there is the tensor itself, whose .grad both runs would fill
        table = emb.clone().to(device).requires_grad_()
        filts = [w.clone().to(device).requires_grad_() for w in ws]
        impl.char_cnn(ids.to(device), table, filts, [b.to(device) for b in bs], activation).sum().backward()
        grads.append([table.grad.cpu(), *(w.grad.cpu() for w in filts)])
    (table_got, *filters_got), (table_want, *filters_want) = grads
    assert torch.equal(torch.isnan(table_got), torch.isnan(table_want))
    torch.testing.assert_close(table_got, table_want, equal_nan=True, **NAN_TOL[dtype])
    for got, want in zip(filters_got, filters_want):
        # conv1d's weight gradient sums over every window, 0 * NaN where a NaN char meets a zero gradient: NaN
        # wherever the token has one; the kernel's reads the max's window only, NaN only where the reference's is
        assert not (torch.isnan(got) & ~torch.isnan(want)).any()
        both = ~torch.isnan(got) & ~torch.isnan(want)
        torch.testing.assert_close(got[both], want[both], **NAN_TOL[dtype])
    # the first NaN window of width 2 (0) reads the token's first char, the last (1) does not: the reference's
    # gradient reaches that char's row (a number for relu, NaN for tanh), so the check above could tell
    assert (grads[1][0][ids[0, 0] - 1] != 0).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nan_in_highway_stays_nan(dtype, device="cpu"):
    """A NaN in a transform row of the weight is NaN in its output column, as in the NumPy oracle (relu
    keeps a NaN): ``t > 0 ? t : 0`` made it 0 and the column came out (1 - g) * x. A NaN in a carry row
    (the gate) and in x too; 37 columns: the vector loop's tail."""
    gen = torch.Generator().manual_seed(8)
    F = 37
    x = (torch.rand(5, F, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    w = ((torch.rand(2 * F, F, generator=gen, dtype=torch.float64) * 2 - 1) * 0.3).to(dtype)
    b = ((torch.rand(2 * F, generator=gen, dtype=torch.float64) * 2 - 1) * 0.1).to(dtype)
    w[3, 7] = float("nan")  # the transform of column 3
    w[F + 5, 2] = float("nan")  # the gate of column 5
    x[4, 1] = float("nan")  # every column of row 4
    y = fused.highway(x.to(device), w.to(device), b.to(device)).cpu()
    expected = O.highway(x.double().numpy(), w.double().numpy(), b.double().numpy())
    assert y.dtype == dtype
    _close(y, expected, **NAN_TOL[dtype])
    assert torch.isnan(y[:, 3]).all() and torch.isnan(y[:, 5]).all() and torch.isnan(y[4]).all()
    assert torch.isnan(y).sum() == 5 + 5 + F - 2


# (cell_clip, proj_clip): no clip at all; a NaN cell past no cell clip into a clipped projection; a NaN
# cell stopped by a cell clip (where the gradient is 0 in both), its NaN output past no projection clip.
# The first two failed before. (The projection's test, step_dh in kernels_impl.h, changes no gradient
# here: the NaN it let through reaches the same entries through the next step's NaN state anyway.)
NAN_LSTM_CLIPS = [(None, None), (None, 3.0), (3.0, None)]
NAN_LSTM_CLIP_IDS = ["no_clips", "proj_clip", "cell_clip"]


@pytest.mark.parametrize("clips", NAN_LSTM_CLIPS, ids=NAN_LSTM_CLIP_IDS)
def test_nan_cell_without_a_clip_passes_the_gradient(clips, device="cpu"):
    """Without a clip, a NaN cell or projected output passes the gradient on, NaN, as the reference's
    (no clamp there, so nothing stops it) and the float64 kernel's do: the float32 kernels tested
    ``lo <= v <= hi`` with infinite bounds, false at a NaN, and the gradient stopped there (0), so
    ``c0``'s and the weights' gradients were finite where the reference's are NaN. A NaN in one channel
    of row 0's ``c0``; every gradient against the reference's float64 autograd, NaN for NaN (with a
    clip, a NaN value stops the gradient in both: clamp's is 0 outside its bounds)."""
    gen = torch.Generator().manual_seed(17)
    B, T, I, C, P = 3, 4, 5, 20, 6
    cell_clip, proj_clip = clips
    base = [torch.randn(B, T, I, generator=gen, dtype=torch.float64),
            *lstm_params(gen, I, C, P, dtype=torch.float64, scale=0.4),
            torch.randn(B, C, generator=gen, dtype=torch.float64)]
    base[-1][0, 3] = float("nan")
    lengths = torch.tensor([4, 2, 3])
    weight = torch.randn(B, T, P, generator=gen, dtype=torch.float64)  # d loss / d out
    grads = []
    for impl, dtype, dev in ((fused, torch.float32, device), (R, torch.float64, "cpu")):
        ts = [t.to(dtype).to(dev).requires_grad_() for t in base]
        out, h_n, c_n = impl.lstm_layer(ts[0], lengths.to(dev), *ts[1:5], None, ts[5], cell_clip, proj_clip)
        # the outputs' gradient given (a loss summing them is NaN, and nansum's gradient is 0 at a NaN)
        seeds = [weight.to(out), torch.ones_like(h_n), torch.ones_like(c_n)]
        grads.append([g.cpu() for g in torch.autograd.grad([out, h_n, c_n], ts, seeds)])
    tol = 1e-4 if device == "cpu" else 1e-3  # the CUDA LSTM tests' tolerance for gradients
    for got, want in zip(*grads):
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        _close(got, want, rtol=tol, atol=tol, equal_nan=True)
    # row 0's gradients are NaN, the other rows' finite: the check above could tell a stopped gradient
    assert torch.isnan(grads[1][0][0]).any() and not torch.isnan(grads[1][0][1:]).any()
    assert all(torch.isnan(g).any() for g in grads[1][1:])


@pytest.mark.parametrize("isa", ["base", "avx2"])
def test_nan_stays_nan_other_isas(isa):
    """The NaN tests above with the other kernel tables (each has its own vector window max and relu,
    and its own LSTM step kernels; this process runs the widest the CPU has)."""
    res = _run_with_isa(isa, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "test_nan_in_char_cnn_stays_nan or test_nan_in_highway_stays_nan or "
                        "test_nan_cell_without_a_clip_passes_the_gradient")
    assert res.returncode == 0 and "9 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]


@pytest.mark.parametrize("which", ["highway", "char_cnn", "lstm_layer", "sampled_logsumexp"])
def test_integer_inputs_are_an_error_not_truncated(which, device="cpu"):
    """Integer activations were run in float32 and truncated back (highway: 10 for the reference's 10.9997)."""
    x = (torch.randn(6, 4) * 5).long().to(device)
    ids, emb, ws, bs = _char_inputs(device=device)
    gen = torch.Generator().manual_seed(0)

    def on(*ts):
        return [t.to(device) for t in ts]

    calls = {
        "highway": lambda: fused.highway(x, *on(torch.randn(8, 4), torch.randn(8))),
        "char_cnn": lambda: fused.char_cnn(ids, emb.long(), ws, bs),
        "lstm_layer": lambda: fused.lstm_layer(x.view(2, 3, 4), *on(torch.tensor([3, 1]), *lstm_params(gen, 4, 5, 4))),
        "sampled_logsumexp": lambda: fused.sampled_logsumexp(x, *on(torch.randn(3, 4), torch.randn(3),
                                                                    torch.full((6,), -1))),
    }
    with pytest.raises(TypeError, match="computes in real floating point, but .* is torch.int64"):
        calls[which]()


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("op", ["char_cnn", "highway", "lstm", "bilstm", "sampled_logsumexp"])
def test_non_floating_arguments_are_refused_alike_on_both_backends(op, backend):
    """An integer (or bool) x, weight or state: the reference met it in check_same_dtype, whose advice was
    to "Pass every floating argument in torch.int64 (e.g. module.to(torch.int64) ...)"; the fused wrappers
    refused an integer input in their own words (and an integer weight with the reference's). One
    TypeError now on both backends (reference.check_floating), naming the argument, under autocast too."""
    impl = R if backend == "reference" else fused
    x, lengths, w = _lstm_case()
    a = _bad_shape_args("highway")
    ids, emb, ws, bs = _char_inputs()
    xi = x.long()
    calls = {
        "char_cnn": [(lambda: impl.char_cnn(ids, emb.long(), ws, bs), "embedding is torch.int64"),
                     (lambda: impl.char_cnn(ids, emb, [ws[0].int(), ws[1]], bs), "a filter weight is torch.int32")],
        "highway": [(lambda: impl.highway(a["x"].long(), a["weight"], a["bias"]), "x is torch.int64"),
                    (lambda: impl.highway(a["x"][:, :0].long(), a["weight"][:0, :0], a["bias"][:0]),
                     "x is torch.int64"),  # no features: the fused wrapper runs the reference
                    (lambda: impl.highway(a["x"], a["weight"], a["bias"].bool()), "bias is torch.bool")],
        "lstm": [(lambda: impl.lstm_layer(xi, lengths, *w), "x is torch.int64"),
                 (lambda: impl.lstm_layer(x, lengths, *w[:3], w[3].long()), "w_proj is torch.int64")],
        "bilstm": [(lambda: impl.bilstm_layer(xi, xi, lengths, w, w), "x is torch.int64"),
                   (lambda: impl.bilstm_layer(x, x, lengths, w, w, (torch.zeros(2, 3, 4, dtype=torch.long),
                                                                    torch.zeros(2, 3, 6))), "h0 is torch.int64")],
        "sampled_logsumexp": [(lambda: impl.sampled_logsumexp(xi[0], torch.randn(3, 4), torch.randn(3),
                                                              torch.full((5,), -1)), "h is torch.int64")],
    }[op]
    for call, match in calls:
        for autocast in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), pytest.raises(
                    TypeError, match=f"^The {op.replace('bilstm', 'lstm')} op computes in real floating point, but {match}: "):
                call()


# --------------------------------------------------------------------- LSTM


def _lstm_case(B=3, T=5, I=4, C=6, P=4, seed=2, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, I, generator=gen)
    return x.to(device), torch.tensor([5, 2, 0][:B], device=device), [w.to(device) for w in lstm_params(gen, I, C, P)]


def test_lstm_state_of_the_wrong_shape_is_an_error_not_reshaped(device="cpu"):
    """A (P, B) h0, a (C, B) c0 or a (B, 2, P) biLSTM state was reshaped: the wrong numbers, silently.
    The wrappers pass the state on as it is (lstm_layer with a leading direction axis of 1): the op
    checks its shape."""
    x, lengths, w = _lstm_case(device=device)

    def randn(*shape):
        return torch.randn(*shape, device=device)

    with pytest.raises(RuntimeError, match=r"h0 \(ndir, B, P\) must have shape \[1, 3, 4\], got \[1, 4, 3\]"):
        fused.lstm_layer(x, lengths, *w, h0=randn(4, 3), c0=randn(3, 6))
    with pytest.raises(RuntimeError, match=r"c0 \(ndir, B, C\) must have shape \[1, 3, 6\], got \[1, 6, 3\]"):
        fused.lstm_layer(x, lengths, *w, h0=randn(3, 4), c0=randn(6, 3))
    with pytest.raises(RuntimeError, match=r"h0 \(ndir, B, P\) must have shape \[2, 3, 4\], got \[3, 2, 4\]"):
        fused.bilstm_layer(x, x, lengths, w, w, state=(randn(3, 2, 4), randn(3, 2, 6)))
    with pytest.raises(RuntimeError, match=r"h0 \(ndir, B, P\) must have shape \[1, 3, 4\], got \[4, 3\]"):
        ops.lstm_forward([x], lengths, w, randn(4, 3), randn(1, 3, 6), None, None, [0], False, False)
    h0, c0 = randn(3, 4), randn(3, 6)
    for a, b in zip(fused.lstm_layer(x, lengths, *w, h0=h0, c0=c0),
                    _reference(R.lstm_layer, x, lengths, *w, h0=h0, c0=c0)):
        _close(a, b)


def test_lstm_op_refuses_a_bias_of_another_shape(device="cpu"):
    """torch.ops.spacy_elmo.lstm_forward / lstm_backward called directly with a (2, 2C) or (1, 4C) bias ran: their
    check (csrc/include/checks.h, CPU and CUDA alike) read only its number of values. Each refuses it by shape,
    naming the (4C,) expected, in either direction of a biLSTM; the (4C,) bias runs."""
    x, lengths, w = _lstm_case(device=device)  # C = 6: a (24,) bias
    h0, c0 = torch.zeros(1, 3, 4, device=device), torch.zeros(1, 3, 6, device=device)
    args = _lstm_saved(device=device)
    for bad in (w[2].view(2, 12), w[2].view(1, 24), w[2].view(24, 1)):
        shown = ", ".join(str(n) for n in bad.shape)
        match = rf"lstm: bias \(4C,\) must have shape \[24\], got \[{shown}\]"
        with pytest.raises(RuntimeError, match=match):
            ops.lstm_forward([x], lengths, [w[0], w[1], bad, w[3]], h0, c0, None, None, [0], False, False)
        with pytest.raises(RuntimeError, match=match):  # the backward direction's bias
            ops.lstm_forward([x, x], lengths, w + [w[0], w[1], bad, w[3]], torch.cat([h0, h0]), torch.cat([c0, c0]),
                             None, None, [0, 1], False, False)
        weights = list(args["weights"])
        weights[6] = bad
        with pytest.raises(RuntimeError, match=match.replace("lstm:", "lstm_backward:")):
            ops.lstm_backward(*{**args, "weights": weights}.values())
    outs = ops.lstm_forward([x], lengths, w, h0, c0, None, None, [0], False, False)[0]
    _close(outs[0], _reference(R.lstm_layer, x, lengths, *w, h0=h0[0], c0=c0[0])[0])


def test_lstm_without_cells_or_projection_is_an_error(device="cpu"):
    """A w_proj of no cells or no projection units: the CPU kernels died of a division by zero
    (SIGFPE: the process ended) or returned unwritten memory, the CUDA ones launched an empty grid;
    the reference failed on a split or ran. Both backends name the problem."""
    x = torch.randn(2, 3, 4, device=device)
    lengths = torch.tensor([3, 1], device=device)
    for C, P in ((0, 4), (6, 0)):
        w = [torch.zeros(*s, device=device) for s in ((4, 4 * C), (P, 4 * C), (4 * C,), (C, P))]
        _both_refuse(x, lengths, w, rf"lstm: w_proj \(C, P\) must have at least one cell and one projection unit, "
                                    rf"got \[{C}, {P}\]")


def _both_refuse(x, lengths, w, match, **kwargs):
    """Both backends' lstm_layer and bilstm_layer refuse ``x, lengths, w`` (``kwargs``: the clips) with
    ``match``: the fused ops a RuntimeError (csrc/include/checks.h), the reference a ValueError."""
    with pytest.raises(RuntimeError, match=match):
        fused.lstm_layer(x, lengths, *w, **kwargs)
    with pytest.raises(RuntimeError, match=match):
        fused.bilstm_layer(x, x, lengths, w, w, **kwargs)
    with pytest.raises(ValueError, match=match):
        R.lstm_layer(x, lengths, *w, **kwargs)
    with pytest.raises(ValueError, match=match):
        R.bilstm_layer(x, x, lengths, w, w, **kwargs)


def test_lstm_without_input_features_is_an_error(device="cpu"):
    """x (B, T, 0): the float32 kernels' input product of width 0 never wrote its accumulator, and
    each row after the first added the one before it into its gates (wrong numbers for B > 1, no
    error); the reference ran. No biLM layer reads none (its input is projection_dim wide): both
    backends refuse it, naming the problem."""
    B, T, C, P = 3, 4, 6, 4
    x = torch.zeros(B, T, 0, device=device)
    lengths = torch.tensor([4, 2, 3], device=device)
    w = [torch.randn(*s).to(device) for s in ((0, 4 * C), (P, 4 * C), (4 * C,), (C, P))]
    _both_refuse(x, lengths, w, r"lstm: x \(B, T, I\) must have at least one input feature, got \[3, 4, 0\]")


def test_lstm_negative_or_nan_clip_is_an_error(device="cpu"):
    """A negative or NaN clip: the fused op refused it, the reference clamped to an empty range (a
    negative one: every value the clip's negative) or to NaN, silently. Both refuse it."""
    x, lengths, w = _lstm_case(device=device)
    for name in ("cell_clip", "proj_clip"):
        for value in (-1.0, float("nan")):
            _both_refuse(x, lengths, w, rf"lstm: {name} must be >= 0", **{name: value})
    for a, b in zip(fused.lstm_layer(x, lengths, *w, cell_clip=0.0, proj_clip=0.0),
                    _reference(R.lstm_layer, x, lengths, *w, cell_clip=0.0, proj_clip=0.0)):
        _close(a, b)  # 0 is a clip (every output 0), not an error


def test_bilstm_directions_of_other_shapes_are_an_error(device="cpu"):
    """x_bwd of another T (shorter or longer): the fused op refused it, the reference ran each direction over
    its own positions and returned outputs of two lengths. Both refuse it."""
    x, lengths, w = _lstm_case(device=device)
    match = r"lstm: every direction's input must have the same shape"
    for other in (x[:, :-1], torch.cat([x, x[:, :1]], 1)):
        with pytest.raises(RuntimeError, match=match):
            fused.bilstm_layer(x, other, lengths, w, w)
        with pytest.raises(ValueError, match=match + r", got x_fwd \[.*\] and x_bwd \[.*\]"):
            R.bilstm_layer(x, other, lengths, w, w)


# (which, make the bad argument from (B, P, C), what both backends' messages name)
LSTM_BROADCAST_STATES = [
    ("lstm", lambda B, P, C: dict(h0=torch.randn(P)), r"h0 \(.*B, P\) must have shape"),
    ("lstm", lambda B, P, C: dict(h0=torch.randn(1, P)), r"h0 \(.*B, P\) must have shape"),
    ("lstm", lambda B, P, C: dict(c0=torch.randn(C)), r"c0 \(.*B, C\) must have shape"),
    ("lstm", lambda B, P, C: dict(c0=torch.randn(1, C)), r"c0 \(.*B, C\) must have shape"),
    ("lstm", lambda B, P, C: dict(lengths=torch.tensor([5, 2])), r"lengths .*\(B,\)"),
    ("lstm", lambda B, P, C: dict(lengths=torch.tensor([[5], [2], [0]])), r"lengths .*\(B,\)"),
    ("bilstm", lambda B, P, C: dict(state=(torch.randn(2, P), torch.randn(2, B, C))), r"h0 \(.*B, P\) must have shape"),
    ("bilstm", lambda B, P, C: dict(state=(torch.randn(2, 1, P), torch.randn(2, B, C))), r"h0 \(.*B, P\) must have shape"),
    ("bilstm", lambda B, P, C: dict(state=(torch.randn(3, B, P), torch.randn(3, B, C))), r"h0 \(.*B, P\) must have shape"),
    ("bilstm", lambda B, P, C: dict(state=(torch.randn(2, B, P), torch.randn(2, 1, C))), r"c0 \(.*B, C\) must have shape"),
    ("bilstm", lambda B, P, C: dict(state=((torch.randn(P), torch.randn(P)), torch.randn(2, B, C))),
     r"h0 \(.*B, P\) must have shape"),
    ("bilstm", lambda B, P, C: dict(lengths=torch.tensor([5, 2])), r"lengths .*\(B,\)"),
]
LSTM_BROADCAST_IDS = ["h0_P", "h0_1P", "c0_C", "c0_1C", "short_lengths", "column_lengths", "bi_h0_2P", "bi_h0_21P",
                      "bi_three_directions", "bi_c0_21C", "bi_pair_of_P", "bi_short_lengths"]


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("which,bad,match", LSTM_BROADCAST_STATES, ids=LSTM_BROADCAST_IDS)
def test_lstm_state_and_lengths_are_not_broadcast(backend, which, bad, match, device="cpu"):
    """The reference broadcast a (P,) or (1, P) state, a (C,) cell state or short lengths over the
    rows (and ignored a third direction's state) and returned numbers; the fused op refused them.
    Both refuse them now: the reference with a ValueError, the op with a RuntimeError."""
    x, lengths, w = _lstm_case(device=device)
    B, C, P = x.shape[0], w[3].shape[0], w[3].shape[1]
    impl = R if backend == "reference" else fused
    args = dict(lengths=lengths)
    for name, value in bad(B, P, C).items():
        args[name] = value.to(device) if isinstance(value, torch.Tensor) else tuple(
            v.to(device) if isinstance(v, torch.Tensor) else tuple(t.to(device) for t in v) for v in value)
    error = ValueError if backend == "reference" else RuntimeError
    with pytest.raises(error, match=match):
        if which == "lstm":
            impl.lstm_layer(x, args.pop("lengths"), *w, **args)
        else:
            impl.bilstm_layer(x, x, args.pop("lengths"), w, w, **args)


def test_lstm_lengths_must_be_integers(device="cpu"):
    """Float lengths were truncated (4.7 -> 4 steps; the reference runs t < 4.7, 5 steps). The
    wrappers pass them on as they are: the op checks them."""
    x, lengths, w = _lstm_case(device=device)
    float_lengths = torch.tensor([4.7, 2.0, 0.0], device=device)
    with pytest.raises(RuntimeError, match="lstm: lengths must be an integer tensor .* got Float"):
        fused.lstm_layer(x, float_lengths, *w)
    h0, c0 = torch.zeros(1, 3, 4, device=device), torch.zeros(1, 3, 6, device=device)
    with pytest.raises(RuntimeError, match="lengths must be an integer tensor"):
        ops.lstm_forward([x], float_lengths, w, h0, c0, None, None, [0], False, False)
    for a, b in zip(fused.lstm_layer(x, lengths.int(), *w), _reference(R.lstm_layer, x, lengths, *w)):
        _close(a, b)


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.uint32,
                                   torch.uint64])
def test_lstm_lengths_of_any_integer_dtype(dtype, backend):
    """Errors.E_LSTM_LENGTHS_DTYPE promises any integer dtype: the reference failed on uint16, uint32
    and uint64 lengths with torch's "lt_cpu" not implemented (its checks compared them). Both backends
    give the NumPy float64 oracle's numbers for each, reversed too."""
    x, lengths, w = _lstm_case()
    impl = R if backend == "reference" else fused
    for reverse in (False, True):
        got = impl.lstm_layer(x, lengths.to(dtype), *w, reverse=reverse)
        want = O.lstm_layer(x.double().numpy(), lengths.numpy(), *[t.double().numpy() for t in w], None, None,
                            None, None, reverse, False)
        for g, e in zip(got, want):
            _close(g, e)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("bad,error,match", [
    ([6, 2, 0], ValueError, r"lstm: lengths holds 6 at flat index 0; its values must lie in \[0, 5\]"),
    ([5, -1, 0], ValueError, r"lstm: lengths holds -1 at flat index 1; its values must lie in \[0, 5\]"),
    ([2.5, 1.0, 0.0], TypeError, r"lstm: lengths must be an integer tensor \(any integer dtype, read as int64\)"),
], ids=["past_T", "negative", "float"])
def test_lstm_lengths_are_checked_alike_on_both_backends(bad, error, match, backend, reverse, device="cpu"):
    """The reference ran a length past T (as if the row were complete; reversed: an IndexError), a
    negative one (no step) and a float one (2.5: 3 steps; reversed: a gather error) without a word,
    where the op refused them: both give the op's message now (the reference a ValueError or
    TypeError, the op a RuntimeError), in lstm_layer and bilstm_layer."""
    x, _, w = _lstm_case(device=device)
    lengths = torch.tensor(bad, device=device)
    impl, error = (R, error) if backend == "reference" else (fused, RuntimeError)
    with pytest.raises(error, match=match):
        impl.lstm_layer(x, lengths, *w, reverse=reverse)
    with pytest.raises(error, match=match):
        impl.bilstm_layer(x, x, lengths, w, w, reverse_backward=reverse)


def _lstm_saved(device="cpu"):
    x, lengths, w = _lstm_case(device=device)
    w2 = [t.to(device) for t in lstm_params(torch.Generator().manual_seed(9), 4, 6, 4)]
    xs, weights = [x, x.flip(1)], w + w2
    h0, c0 = torch.zeros(2, 3, 4, device=device), torch.zeros(2, 3, 6, device=device)
    saved = ops.lstm_forward(xs, lengths, weights, h0, c0, None, None, [0, 1], False, True)[3:]
    ones = functools.partial(torch.ones, device=device)
    args = dict(grad_outs=[ones(3, 5, 4)] * 2, grad_hn=ones(2, 3, 4), grad_cn=ones(2, 3, 6),
                xs=xs, lengths=lengths, weights=weights, c0=c0, gates=saved[0], c_raw=saved[1], hp_raw=saved[2],
                h_prev=saved[3], m=saved[4], cell_clip=None, proj_clip=None, reverse=[0, 1], residual=False)
    return args


LSTM_SAVED_CHANGES = [
    (dict(grad_outs="one"), "one output gradient per direction, got 1 for 2"),  # crashed
    (dict(lengths=torch.tensor([9, 2, 0])), r"lengths holds 9 at flat index 0; .*\[0, 5\]"),  # corrupted the heap
    (dict(lengths=torch.tensor([5, -3, 0])), r"lengths holds -3"),
    (dict(grad_outs="short"), r"each output gradient \(B, T, P\) must have shape \[3, 5, 4\], got \[3, 2, 4\]"),
    (dict(grad_hn="transposed"), r"grad_hn \(ndir, B, P\) must have shape \[2, 3, 4\], got \[3, 2, 4\]"),
    (dict(c_raw="short"), r"c_raw \(ndir, T, B, C\) must have shape \[2, 5, 3, 6\], got \[2, 2, 3, 6\]"),
    (dict(gates="non-contiguous"), r"gates \(ndir, T, B, 4C\) must be contiguous"),  # gave NaN
]
LSTM_SAVED_CHANGE_IDS = ["one_grad_out", "lengths_past_T", "negative_length", "short_grad_out", "transposed_grad_hn",
                         "short_c_raw", "non_contiguous_gates"]


@pytest.mark.parametrize("change,match", LSTM_SAVED_CHANGES, ids=LSTM_SAVED_CHANGE_IDS)
def test_lstm_backward_op_checks_what_the_forward_saved(change, match, device="cpu"):
    args = _lstm_saved(device=device)
    key, how = next(iter(change.items()))
    if how == "one":
        args[key] = args[key][:1]
    elif how == "short":
        args[key] = [g[:, :2] for g in args[key]] if key == "grad_outs" else args[key][:, :2]
    elif how == "transposed":
        args[key] = args[key].transpose(0, 1).contiguous()
    elif how == "non-contiguous":
        args[key] = args[key].transpose(1, 2).contiguous().transpose(1, 2)
    else:
        args[key] = how.to(device)
    with pytest.raises(RuntimeError, match=match):
        ops.lstm_backward(*args.values())


# ---------------------------------------------------------- sampled softmax


def test_sampled_logsumexp_backward_op_checks_its_shapes():
    """A weight of another width gave a gradient of that width, silently."""
    h, w, off = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    _, p = ops.sampled_logsumexp_forward(h, w, off, torch.tensor([0, 4, -1]))
    with pytest.raises(RuntimeError, match=r"h must be \(N, P\) and weight \(S, P\), got \[3, 4\] and \[5, 2\]"):
        ops.sampled_logsumexp_backward(torch.ones(3), h, torch.randn(5, 2), p)
    with pytest.raises(RuntimeError, match=r"grad \(N,\) must have shape \[3\], got \[3, 1\]"):
        ops.sampled_logsumexp_backward(torch.ones(3, 1), h, w, p)


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_sampled_logsumexp_hit_must_be_integers(backend):
    """A float hit: the fused wrapper refused it, the reference failed in torch's gather ("Expected dtype
    int32/int64 for index"). One TypeError for both now (reference.check_sampled_inputs); integer hits
    of other dtypes give the NumPy float64 oracle's numbers."""
    h, w, off = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    impl = R if backend == "reference" else fused
    for bad in (torch.tensor([0.0, 4.0, -1.0]), torch.tensor([True, False, True])):
        with pytest.raises(TypeError, match=r"sampled_logsumexp: hit must be an integer tensor .* got torch\.(float|bool)"):
            impl.sampled_logsumexp(h, w, off, bad)
    hit = torch.tensor([0, 4, 1])
    want, _ = O.sampled_logsumexp(h.double().numpy(), w.double().numpy(), off.double().numpy(), hit.numpy())
    for dtype in (torch.int32, torch.uint8, torch.int16):
        _close(impl.sampled_logsumexp(h, w, off, hit.to(dtype)), want)


def test_sampled_logsumexp_hit_outside_the_candidates_is_an_error():
    """A hit below -1: the fused op refused it, the reference took it for none (a number, silently);
    one past the candidates: the reference failed in index_put_ (IndexError; on CUDA a device-side
    assert). Both name the row and the range."""
    h, w, off = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    for index, bad in ((0, -2), (2, 5), (1, 10**9)):
        hit = torch.tensor([0, 4, -1])
        hit[index] = bad
        match = rf"sampled_logsumexp: hit\[{index}\] = {bad} is outside \[-1, 5\)"
        with pytest.raises(RuntimeError, match=match):
            fused.sampled_logsumexp(h, w, off, hit)
        with pytest.raises(ValueError, match=match):
            R.sampled_logsumexp(h, w, off, hit)


@pytest.mark.parametrize("n", [0, 3])
def test_sampled_logsumexp_without_candidates_is_an_error(n):
    """S = 0: the fused op refused it (its check_inputs), while the reference, which GPUs run, failed in its max
    with torch's bare "amax(): Expected reduction dim 1 to have non-zero size". Both name the problem now."""
    h, w, off, hit = torch.randn(n, 4), torch.randn(0, 4), torch.randn(0), torch.full((n,), -1)
    match = r"sampled_logsumexp: no candidates \(S = 0\)"
    with pytest.raises(RuntimeError, match=match):
        ops.sampled_logsumexp_forward(h, w, off, hit)
    for impl in (fused, R):  # one check for both backends (reference.check_sampled_inputs)
        with pytest.raises(ValueError, match=match + r": weight \(S, P\) is \[0, 4\].*Pass at least one candidate"):
            impl.sampled_logsumexp(h, w, off, hit)


# (the bad argument from h (3, 4), weight (5, 4), offset (5,), hit (3,), what both backends' messages say)
SAMPLED_BAD_SHAPES = [
    (dict(hit=torch.tensor([1, 2])), r"hit \(N,\) must have shape \[3\], got \[2\]"),
    (dict(hit=torch.tensor([1, 2, -1, 4])), r"hit \(N,\) must have shape \[3\], got \[4\]"),
    (dict(hit=torch.tensor([[1], [2], [-1]])), r"hit \(N,\) must have shape \[3\], got \[3, 1\]"),
    (dict(hit=torch.tensor(2)), r"hit \(N,\) must have shape \[3\], got \[\]"),
    (dict(offset=torch.randn(4)), r"offset \(S,\) must have shape \[5\], got \[4\]"),
    (dict(offset=torch.randn(1, 5)), r"offset \(S,\) must have shape \[5\], got \[1, 5\]"),
    (dict(weight=torch.randn(5, 3)), r"h must be \(N, P\) and weight \(S, P\), got \[3, 4\] and \[5, 3\]"),
    (dict(h=torch.randn(4)), r"h must be \(N, P\) and weight \(S, P\), got \[4\] and \[5, 4\]"),
]


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("bad,match", SAMPLED_BAD_SHAPES,
                         ids=["short_hit", "long_hit", "column_hit", "scalar_hit", "short_offset", "row_offset",
                              "narrow_weight", "vector_h"])
def test_sampled_logsumexp_shapes_are_checked_alike_on_both_backends(bad, match, backend):
    """The reference took a hit shorter than N (scatter_ wrote only its rows: the others kept their hit
    column, a wrong number silently) and failed with torch's words for the other shapes; the fused op
    refused them. Both give one ValueError now (reference.check_sampled_inputs), and the right shapes
    give the NumPy float64 oracle's numbers."""
    gen = torch.Generator().manual_seed(8)
    args = dict(h=torch.randn(3, 4, generator=gen), weight=torch.randn(5, 4, generator=gen),
                offset=torch.randn(5, generator=gen), hit=torch.tensor([1, 2, -1]))
    impl = R if backend == "reference" else fused
    want, _ = O.sampled_logsumexp(*(t.double().numpy() for t in list(args.values())[:3]), args["hit"].numpy())
    _close(impl.sampled_logsumexp(**args), want)
    with pytest.raises(ValueError, match="sampled_logsumexp: " + match):
        impl.sampled_logsumexp(**{**args, **bad})


# (op, make the arguments from good ones with one wrong, what both backends' messages say)
BAD_SHAPES = [
    ("char_cnn", lambda a: {**a, "biases": [a["biases"][0], a["biases"][1][:2]]}, r"char_cnn: bias 1 must .*got \[2\]"),
    ("char_cnn", lambda a: {**a, "biases": [a["biases"][0], a["biases"][1][:, None]]},
     r"char_cnn: bias 1 must .*got \[4, 1\]"),
    ("char_cnn", lambda a: {**a, "weights": [a["weights"][0], a["weights"][1][:, :3]]},
     r"char_cnn: weight 1 must be \(count, D, width\) with D = 4, got \[4, 3, 2\]"),
    ("highway", lambda a: {**a, "weight": a["weight"][:, :3]}, r"highway: weight \(2F, F\) must have shape \[8, 4\], got \[8, 3\]"),
    ("highway", lambda a: {**a, "bias": a["bias"][:4]}, r"highway: bias \(2F,\) must have shape \[8\], got \[4\]"),
    ("lstm", lambda a: {**a, "w_input": a["w_input"][:2]}, r"lstm: w_input \(I, 4C\) must have shape \[4, 24\], got \[2, 24\]"),
    ("lstm", lambda a: {**a, "w_recurrent": a["w_recurrent"][:, :20]},
     r"lstm: w_recurrent \(P, 4C\) must have shape \[4, 24\], got \[4, 20\]"),
    ("lstm", lambda a: {**a, "bias": a["bias"].view(2, 12)}, r"lstm: bias \(4C,\) must have shape \[24\], got \[2, 12\]"),
    ("lstm", lambda a: {**a, "x": a["x"][..., :3], "w_input": a["w_input"][:3], "residual": True},
     r"lstm: residual needs input dim == projection dim"),
]


def _bad_shape_args(op):
    if op == "char_cnn":
        ids, emb, ws, bs = _char_inputs()
        return dict(char_ids=ids, embedding=emb, weights=ws, biases=bs)
    if op == "highway":
        gen = torch.Generator().manual_seed(13)
        return dict(x=torch.randn(5, 4, generator=gen), weight=torch.randn(8, 4, generator=gen),
                    bias=torch.randn(8, generator=gen))
    x, lengths, w = _lstm_case()
    return dict(x=x, lengths=lengths, **dict(zip(("w_input", "w_recurrent", "bias", "w_proj"), w)))


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("op,bad,match", BAD_SHAPES, ids=["char_bias", "char_bias_column", "char_weight_D",
                                                          "highway_weight", "highway_bias", "lstm_w_input",
                                                          "lstm_w_recurrent", "lstm_bias_2x2C", "lstm_residual"])
def test_weights_of_the_wrong_shape_are_named_alike_on_both_backends(op, bad, match, backend):
    """The reference failed with torch's bare product or broadcast errors ("mat1 and mat2 shapes cannot be
    multiplied", "The size of tensor a (16) must match ...") where the fused op named the argument; the
    fused op ran a (2, 2C) LSTM bias (it checked only its number of values) where the reference failed.
    Both name it now: the reference with the op's words (a ValueError), the fused op in C++ (a
    RuntimeError), the LSTM bias's shape included (test_lstm_op_refuses_a_bias_of_another_shape)."""
    args = _bad_shape_args(op)
    impl = R if backend == "reference" else fused
    with pytest.raises(ValueError if backend == "reference" else RuntimeError, match=match):
        getattr(impl, "lstm_layer" if op == "lstm" else op)(**bad(args))


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("op", ["char_cnn", "highway", "lstm", "bilstm", "sampled_logsumexp"])
def test_mixed_dtypes_are_refused_alike_on_both_backends(op, backend):
    """float64 weights or states with float32 inputs: the fused wrappers cast them to float32 (rounded,
    silently), the reference failed with torch's "expected m1 and m2 to have the same dtype". Both give
    one TypeError now (reference.check_same_dtype), naming the argument; under autocast mixed dtypes
    stay allowed (a float32 state beside bfloat16 products) and give the reference's numbers, but float64
    beside another dtype is the same TypeError's autocast form on both backends."""
    impl = R if backend == "reference" else fused
    x, lengths, w = _lstm_case()
    state = (torch.zeros(2, 3, 4, dtype=torch.float64), torch.zeros(2, 3, 6))
    calls = {
        "char_cnn": [(lambda a: impl.char_cnn(a["char_ids"], a["embedding"], [a["weights"][0].double(), a["weights"][1]],
                                              a["biases"]), "a filter weight is torch.float64 but embedding is torch.float32"),
                     (lambda a: impl.char_cnn(a["char_ids"], a["embedding"], a["weights"],
                                              [a["biases"][0], a["biases"][1].double()]),
                      "a bias is torch.float64 but embedding is torch.float32")],
        "highway": [(lambda a: impl.highway(a["x"], a["weight"], a["bias"].double()), "bias is torch.float64 but x"),
                    (lambda a: impl.highway(a["x"].double(), a["weight"], a["bias"]), "weight is torch.float32 but x is "
                                                                                      "torch.float64")],
        "lstm": [(lambda a: impl.lstm_layer(x, lengths, w[0], w[1].double(), *w[2:]), "w_recurrent is torch.float64"),
                 (lambda a: impl.lstm_layer(x, lengths, *w, c0=torch.zeros(3, 6, dtype=torch.float64)),
                  "c0 is torch.float64 but x is torch.float32")],
        "bilstm": [(lambda a: impl.bilstm_layer(x, x, lengths, w, [t.double() for t in w]), "w_input is torch.float64"),
                   (lambda a: impl.bilstm_layer(x, x, lengths, w, w, state), "h0 is torch.float64")],
        "sampled_logsumexp": [(lambda a: impl.sampled_logsumexp(torch.randn(3, 4), torch.randn(5, 4, dtype=torch.float64),
                                                                torch.randn(5), torch.tensor([0, -1, 2])),
                               "weight is torch.float64 but h is torch.float32")],
    }[op]
    args = _bad_shape_args("char_cnn" if op == "char_cnn" else "highway")
    for call, match in calls:
        with pytest.raises(TypeError, match=f"{op.replace('bilstm', 'lstm')}: {match}.*outside torch.autocast"):
            call(args)
        # float64 beside float32 under autocast, which casts no float64: the reference failed with torch's bare
        # "self and mat2 must have the same dtype", the fused wrappers returned float32 (the float64 one rounded)
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
                TypeError, match=f"{op.replace('bilstm', 'lstm')}: {match}.*under torch.autocast, which casts no float64"):
            call(args)
    if op in ("lstm", "bilstm"):  # under autocast: allowed, the reference's numbers
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = impl.bilstm_layer(x, x, lengths, w, w, (state[0].float(), state[1]))
            want = R.bilstm_layer(x, x, lengths, w, w, (state[0].float(), state[1]))
        for g, e in zip(got, want):
            assert g.dtype == e.dtype
            _close(g, e, rtol=2e-2, atol=2e-2)


# -------------------------------------------------------------- autograd


def _every_op_outputs(dtype=torch.float64):
    """(name, inputs needing grad, impl -> fn(*inputs) -> list of the op's outputs through ``impl``)"""
    ids, emb, ws, bs = _char_inputs()
    bs = [b.to(dtype) for b in bs]
    gen = torch.Generator().manual_seed(4)
    x, lengths, w = _lstm_case()
    hit = torch.tensor([0, -1, 4])

    def lstm(impl):
        # every output, the LSTM's incoming gradients a list (the outputs') then tensors
        return lambda xx, *ww: list(impl.bilstm_layer(xx, xx, lengths, ww, ww, None, 1.0, 1.0))

    cases = [
        ("char_cnn", [emb, *ws], lambda impl: lambda e, *p: [impl.char_cnn(ids, e, p, bs, "tanh")]),
        ("highway", [torch.randn(5, 4, generator=gen), torch.randn(8, 4, generator=gen)],
         lambda impl: lambda a, b: [impl.highway(a, b, torch.zeros(8, dtype=dtype))]),
        ("lstm", [x, *w], lstm),
        ("sampled_logsumexp", [torch.randn(3, 4, generator=gen), torch.randn(5, 4, generator=gen)],
         lambda impl: lambda a, b: [impl.sampled_logsumexp(a, b, torch.zeros(5, dtype=dtype), hit)]),
    ]
    return [(name, [t.to(dtype).requires_grad_() for t in ins], f) for name, ins, f in cases]


def _every_op(dtype=torch.float64):
    """(name, inputs needing grad, fn(*inputs) -> scalar, same through the reference)"""

    def scalar(outputs):
        return lambda *ins: sum(t.pow(2).sum() for t in outputs(*ins))

    return [(name, ins, scalar(f(fused)), scalar(f(R))) for name, ins, f in _every_op_outputs(dtype)]


def _no_second_derivative(name, backend):
    """The error a second derivative through op ``name`` on ``backend`` meets."""
    # sampled_logsumexp has none on either backend (tests/ops/test_reference.py)
    if name == "sampled_logsumexp":
        return f"{name} has no second derivative"
    return f"fused {name} kernel has no second derivative"


@pytest.mark.parametrize("index", range(4))
def test_double_backward_is_a_clear_error(index):
    """create_graph=True through a fused op gave gradients without their second-order term (highway,
    char_cnn, sampled_logsumexp: silently; lstm: an error about mm() out= arguments). The first-order
    gradients are still right (the reference; its sampled_logsumexp runs in float32). A second
    derivative with respect to one input (autograd.grad follows only the paths to it) gave torch's
    "appears to not have been used in the graph": the error too now."""
    name, ins, f, ref = _every_op()[index]
    grads = torch.autograd.grad(f(*ins), ins, create_graph=True)
    expected = torch.autograd.grad(ref(*ins), ins)
    for g, e in zip(grads, expected):
        _close(g, e)
    message = _no_second_derivative(name, "fused")
    with pytest.raises(RuntimeError, match=message):
        sum(g.pow(2).sum() for g in grads).backward()
    for t in ins:
        grads = torch.autograd.grad(f(*ins), ins, create_graph=True)
        with pytest.raises(RuntimeError, match=message):
            torch.autograd.grad(sum(g.pow(2).sum() for g in grads), t)


def _scaled(name, backend, dtype=torch.float64):
    """(inputs, scales, loss): op ``name`` on ``backend`` (fused.py or reference.py), ``loss(*inputs,
    *scales)`` the sum of its outputs times ``scales`` (needing grad, one per output): what reaches the
    op only through its incoming gradients, as a head on top of it does."""
    _, ins, f = next(case for case in _every_op_outputs(dtype) if case[0] == name)
    outputs = f(fused if backend == "fused" else R)
    gen = torch.Generator().manual_seed(9)
    scales = [torch.randn(t.shape, generator=gen, dtype=dtype).requires_grad_() for t in outputs(*ins)]

    def loss(*args):
        return sum((t * s).sum() for t, s in zip(outputs(*args[: len(ins)]), args[len(ins) :]))

    return ins, scales, loss


FIRST_ORDER_ONLY = [("fused", name) for name in ("char_cnn", "highway", "lstm", "sampled_logsumexp")] + [
    ("reference", "sampled_logsumexp")]


@pytest.mark.parametrize("backend,name", FIRST_ORDER_ONLY)
def test_double_backward_through_the_incoming_gradient_is_a_clear_error(backend, name):
    """A second derivative with respect to what reaches an op only through its incoming gradient (a
    head on top of it, ``s`` in ``(op(x) * s).sum()``, a gradient penalty's critic) came back without
    the op's second-order term, silently (here d/ds of ``|d loss / d x|^2 + sum(s)`` was ``sum(s)``'s
    1 alone): the marks hung only from the saved inputs. The project's error now, through
    ``autograd.grad`` with respect to the scales and through ``backward``; the first-order gradients
    are the reference's (without create_graph, through the same marks-free path as training)."""
    ins, scales, loss = _scaled(name, backend)
    _, _, ref = _scaled(name, "reference")
    for create_graph in (False, True):
        grads = torch.autograd.grad(loss(*ins, *scales), [*ins, *scales], create_graph=create_graph)
        expected = torch.autograd.grad(ref(*ins, *scales), [*ins, *scales])
        for g, e in zip(grads, expected):
            _close(g, e)
    message = _no_second_derivative(name, backend)
    for wrt in range(len(ins)):
        (g,) = torch.autograd.grad(loss(*ins, *scales), ins[wrt], create_graph=True)
        penalty = g.pow(2).sum() + sum(s.sum() for s in scales)
        with pytest.raises(RuntimeError, match=message):
            torch.autograd.grad(penalty, scales)
    # one input needing grad, the others constants (no saved tensor to hang a mark from): the incoming
    # gradient alone leads to the scales
    ins = [t.detach() for t in ins]
    ins[-1].requires_grad_()
    (g,) = torch.autograd.grad(loss(*ins, *scales), ins[-1], create_graph=True)
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(g.pow(2).sum(), scales)


def test_first_order_gradients_carry_no_marks():
    """Without create_graph (first-order training) the backward formulas return their gradients as
    they are: no NotTwiceDifferentiable node, no anchors, whatever requires grad around the op."""
    for backend, name in FIRST_ORDER_ONLY:
        ins, scales, loss = _scaled(name, backend)
        for g in torch.autograd.grad(loss(*ins, *scales), ins):
            assert g.grad_fn is None and not g.requires_grad


@pytest.mark.parametrize("name", ["char_cnn", "highway", "lstm"])
def test_reference_second_derivatives_stay_exact(name):
    """The reference's char CNN, highway and LSTM are plain autograd: their second derivatives,
    through the inputs and through the incoming gradients (a scale on each output), are right
    (gradgradcheck: central differences of the first derivative, float64) and not refused as the
    fused ops' are."""
    gen = torch.Generator().manual_seed(6)

    def randn(*shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()

    if name == "char_cnn":
        ids = random_char_ids(gen, 3, 5)
        ins = [randn(261, 2), randn(2, 2, 2), randn(3, 2, 3), randn(2), randn(3)]
        op = lambda e, w1, w2, b1, b2: [R.char_cnn(ids, e, [w1, w2], [b1, b2], "tanh")]  # noqa: E731
    elif name == "highway":
        ins = [randn(3, 2), randn(4, 2), randn(4)]
        op = lambda *a: [R.highway(*a)]  # noqa: E731
    else:
        B, T, I, C, P = 2, 3, 2, 2, 2
        lengths = torch.tensor([3, 2])
        ins = [randn(B, T, I), randn(I, 4 * C), randn(P, 4 * C), randn(4 * C), randn(C, P), randn(B, P), randn(B, C)]
        op = lambda x, *w: list(R.lstm_layer(x, lengths, *w, cell_clip=3.0, proj_clip=3.0, reverse=True))  # noqa: E731
    scales = [randn(*t.shape) for t in op(*ins)]

    def loss(*args):
        return sum((t * s).sum() for t, s in zip(op(*args[: len(ins)]), args[len(ins) :]))

    assert torch.autograd.gradgradcheck(loss, [*ins, *scales])


def test_torch_func_on_the_fused_ops():
    """What README promises of torch.func on the fused ops: vmap runs them (torch's per-sample fallback)
    with the reference's numbers; grad (and so vjp, jacrev) is refused with torch's error, the
    Function that torch.library.register_autograd makes having no setup_context. If a torch lifts
    that, this test fails: update README ("Defined behaviour for odd input")."""
    gen = torch.Generator().manual_seed(12)
    x, w, b = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((2, 3, 4), (8, 4), (8,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's "performance drop" warning
        got = torch.func.vmap(lambda a: fused.highway(a, w, b))(x)
    _close(got, R.highway(x, w, b), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda a: fused.highway(a, w, b).sum())(x[0])
    # pretraining's sampled_logsumexp too: vmap runs it (the reference's is refused, test_reference.py), grad not
    h, weight, offset = (torch.randn(*shape, generator=gen) for shape in ((3, 4), (5, 4), (5,)))
    hit = torch.tensor([0, -1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.func.vmap(lambda a, t: fused.sampled_logsumexp(a[None], weight, offset, t[None])[0])(h, hit)
    _close(got, R.sampled_logsumexp(h, weight, offset, hit), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda a: fused.sampled_logsumexp(a, weight, offset, hit).sum())(h)


def test_kernel_dtype_keeps_float64_under_cuda_autocast():
    """float64 runs in float64 whatever autocast is on (autocast never casts it; on CUDA the wrappers
    then run the reference): under CUDA autocast a float64 module ran the bfloat16 kernels, the
    autocast dtype being chosen before float64 was looked at. The other choices stay: CUDA autocast's
    dtype, else float32 (CPU autocast included: the CPU kernels compute in float32)."""
    k = fused._kernel_dtype
    assert k(torch.float64, "cuda", torch.bfloat16) == k(torch.float64, "cuda", None) == torch.float64
    assert k(torch.float64, "cpu", torch.bfloat16) == k(torch.float64, "cpu", None) == torch.float64
    assert k(torch.float32, "cuda", torch.bfloat16) == torch.bfloat16
    assert k(torch.bfloat16, "cuda", torch.float16) == torch.float16
    assert k(torch.bfloat16, "cuda", None) == k(torch.float16, "cpu", None) == torch.float32
    assert k(torch.float32, "cpu", torch.bfloat16) == torch.float32


def test_meta_tensors_give_shapes():
    """The wrappers opened torch.autocast('meta'), which failed with 'unsupported scalarType'."""
    ids, emb, ws, bs = _char_inputs()
    meta = [t.to("meta") for t in (ids, emb, *ws, *bs)]
    assert fused.char_cnn(meta[0], meta[1], meta[2:4], meta[4:]).shape == (5, 7)
    assert fused.highway(torch.empty(2, 3, 4, device="meta"), torch.empty(8, 4, device="meta"),
                         torch.empty(8, device="meta")).shape == (2, 3, 4)
    x, lengths, w = _lstm_case()
    out = fused.bilstm_layer(x.to("meta"), x.to("meta"), lengths, [t.to("meta") for t in w],
                             [t.to("meta") for t in w])
    assert [tuple(t.shape) for t in out] == [(3, 5, 4), (3, 5, 4), (2, 3, 4), (2, 3, 6)]


def _transposed(t):
    """``t``'s values with its last two dimensions' strides swapped (a non-contiguous tensor)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def test_fakes_match_the_kernels_for_transposed_inputs(device="cpu"):
    """What torch.compile plans with (the fakes) is what the kernels return: new contiguous tensors in
    the dtype of x. The fakes gave each gradient its input's strides (a transposed input: another
    layout than the kernel's result) and lstm_backward's dh0 / dc0 the dtype of grad_hn."""
    fake = ("test_faketensor",)
    ids, emb, ws, bs = _char_inputs(device=device)
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, 0)
    torch.library.opcheck(ops.char_cnn_backward.default,
                          (torch.ones_like(out), out, arg, ids, _transposed(emb), [_transposed(w) for w in ws], 0),
                          test_utils=fake)
    x, w, b = (torch.randn(*s, device=device) for s in ((6, 4), (8, 4), (8,)))
    torch.library.opcheck(ops.highway_forward.default, (_transposed(x), w, b), test_utils=fake)
    h = ops.highway_forward(x, w, b)[1]
    torch.library.opcheck(ops.highway_backward.default, (torch.ones_like(x), _transposed(x), _transposed(w), h),
                          test_utils=fake)
    args = _lstm_saved(device=device)
    args["xs"] = [_transposed(x) for x in args["xs"]]
    args["weights"] = [_transposed(w) if w.dim() == 2 else w for w in args["weights"]]
    args["grad_hn"], args["grad_cn"] = args["grad_hn"].double(), args["grad_cn"].double()
    torch.library.opcheck(ops.lstm_backward.default, tuple(args.values()), test_utils=fake)
    if device == "cpu":  # no CUDA kernel: on a GPU fused.sampled_logsumexp runs the reference
        h, w = torch.randn(3, 4), torch.randn(5, 4)
        _, p = ops.sampled_logsumexp_forward(h, w, torch.randn(5), torch.tensor([0, 4, -1]))
        torch.library.opcheck(ops.sampled_logsumexp_backward.default, (torch.randn(3), _transposed(h), _transposed(w), p),
                              test_utils=fake)


def test_opcheck_backward_ops_outputs_do_not_share_storage():
    """A width-1 filter's weight gradient was a view of the other filters' buffer, the offset
    gradient a row of the weight gradient's product: outputs of a custom op must not alias."""
    ids, emb, ws, bs = _char_inputs()
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, 0)
    torch.library.opcheck(ops.char_cnn_backward.default, (torch.randn(5, 7), out, arg, ids, emb, ws, 0))
    h, w = torch.randn(3, 4), torch.randn(5, 4)
    _, p = ops.sampled_logsumexp_forward(h, w, torch.randn(5), torch.tensor([0, 4, -1]))
    torch.library.opcheck(ops.sampled_logsumexp_backward.default, (torch.randn(3), h, w, p))
    x, y, z = torch.randn(6, 4), torch.randn(8, 4), torch.randn(8)
    torch.library.opcheck(ops.highway_backward.default, (torch.randn(6, 4), x, y, ops.highway_forward(x, y, z)[1]))


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_bilstm_state_as_per_direction_pairs(backend):
    """bilstm_layer's state (h0 (2, B, P), c0 (2, B, C)) may give h0 and c0 each as a pair (forward,
    backward) of per-direction tensors: both backends then compute what the stacked tensors give
    (the reference with the documented tensors is the oracle), gradients included. The fused
    backend used to call .to() on the tuple (AttributeError) while the reference indexed it."""
    gen = torch.Generator().manual_seed(5)
    B, T, P, C = 3, 4, 4, 6
    lengths = torch.tensor([4, 1, 0])
    x = torch.randn(B, T, P, generator=gen, dtype=torch.float64)
    fw, bw = (list(lstm_params(gen, P, C, P, dtype=torch.float64)) for _ in range(2))
    h0 = torch.randn(2, B, P, generator=gen, dtype=torch.float64)
    c0 = torch.randn(2, B, C, generator=gen, dtype=torch.float64)

    def run(impl, make_state, leaves):
        leaves = [t.clone().requires_grad_() for t in leaves]
        res = impl(x, x, lengths, fw, bw, make_state(*leaves), 3.0, 0.5, True, True)
        sum((r * (k + 1)).sum() for k, r in enumerate(res)).backward()
        return [r.detach() for r in res], [t.grad for t in leaves]

    expected, (gh, gc) = run(R.bilstm_layer, lambda h, c: (h, c), [h0, c0])
    impl = functools.partial(dispatch.bilstm_layer, backend=backend)
    for make_state in (lambda hf, hb, cf, cb: ((hf, hb), (cf, cb)),
                       lambda hf, hb, cf, cb: [[hf, hb], [cf, cb]],
                       lambda hf, hb, cf, cb: (torch.stack([hf, hb]), (cf, cb))):
        res, grads = run(impl, make_state, [h0[0], h0[1], c0[0], c0[1]])
        for a, e in zip(res, expected):
            _close(a, e, rtol=1e-10, atol=1e-10)
        for a, e in zip(grads, [gh[0], gh[1], gc[0], gc[1]]):
            _close(a, e, rtol=1e-10, atol=1e-10)
    # anything else: one clear error, the same in both backends
    bad = [h0, (h0,), (h0, None), (h0, c0, c0), ((h0[0],), c0), ((h0[0], h0[1], h0[0]), c0), (h0, (c0[0], None))]
    for state in bad:
        with pytest.raises(TypeError, match=r"bilstm_layer's state must be None \(zeros\) or a pair \(h0, c0\)"):
            impl(x, x, lengths, fw, bw, state)
