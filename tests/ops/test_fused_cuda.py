"""CUDA kernels vs the reference (run on a GPU machine; skipped elsewhere). No spaCy imports."""

import warnings

import pytest
import torch

from spacy_elmo import switches
from spacy_elmo.ops import reference as R
from tests.cuda_kernels import launched

from . import test_fused_inputs as inputs

fused = pytest.importorskip("spacy_elmo.ops.fused", reason="spacy_elmo._C is not built")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not fused.built_with_cuda(), reason="extension built without CUDA kernels"),
]

DEV = "cuda"


@pytest.fixture(autouse=True)
def _float32_convolutions():
    """cuDNN's float32 convolutions in float32: torch lets them round to TF32 by default, and the CUDA
    char-CNN backward goes through cuDNN (fused.char_cnn_backward_composed); the kernels' tolerance is
    float32's."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    holder, name, off = ((conv, "fp32_precision", "ieee") if hasattr(conv, "fp32_precision")
                         else (torch.backends.cudnn, "allow_tf32", False))
    before = getattr(holder, name)
    setattr(holder, name, off)
    try:
        yield
    finally:
        setattr(holder, name, before)


def _params(gen, shapes, scale=0.3, dtype=torch.float32):
    return [((torch.rand(*s, generator=gen, dtype=torch.float64) * 2 - 1) * scale).to(dtype) for s in shapes]


def _ids(gen, n, w=50):
    ids = torch.full((n, w), 261, dtype=torch.long)
    for r in range(n):
        k = int(torch.randint(1, w - 1, (1,), generator=gen))
        ids[r, 0], ids[r, 1 + k] = 259, 260
        ids[r, 1 : 1 + k] = torch.randint(1, 257, (k,), generator=gen)
    ids[-1] = 0
    return ids


def _bilstm_shapes(B, T, P, C):
    """bilstm_layer's two inputs, both directions' weights and an initial state (h, c)."""
    return [(B, T, P), (B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2 + [(2, B, P), (2, B, C)]


def _bilstm_from_state(impl, lengths, dev):
    """bilstm_layer of ``_bilstm_shapes``' tensors: clips 3.0, reversed backward, residual."""
    def fn(xf, xb, *w):
        return impl.bilstm_layer(xf, xb, lengths.to(dev), w[:4], w[4:8], (w[8], w[9]), 3.0, 3.0, True, True)
    return fn


def _char_cnn_highway(impl, ids, dev):
    """char_cnn with two filters, then highway: the token encoder's ops."""
    def fn(e, w1, w2, b1, b2, hw, hb):
        return impl.highway(impl.char_cnn(ids.to(dev), e, [w1, w2], [b1, b2]), hw, hb)
    return fn


def _grads(fn, tensors, device):
    ts = [t.detach().to(device).requires_grad_() for t in tensors]
    out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * (k + 1) * torch.linspace(-1, 1, o.numel(), device=device).view_as(o)).sum()
               for k, o in enumerate(outs))
    loss.backward()
    # an input the outputs do not depend on (the reference's x at T = 0) has no grad: zeros
    return [o.detach().cpu() for o in outs], [(t.grad if t.grad is not None else torch.zeros_like(t)).cpu()
                                              for t in ts]


def _check(a, b, tol):
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y.float(), rtol=tol, atol=tol)


def _against_float64(fused_fn, ref_fn, tensors):
    """``(outputs, grads)`` of ``fused_fn`` on the GPU and of ``ref_fn`` in float64 on the CPU."""
    return _grads(fused_fn, tensors, DEV), _grads(ref_fn, [t.double() for t in tensors], "cpu")


def _assert_matches_float64(fused_fn, ref_fn, tensors):
    (o1, g1), (o2, g2) = _against_float64(fused_fn, ref_fn, tensors)
    _check(o1, o2, 1e-5)
    _check(g1, g2, 1e-4)


def test_char_cnn_cuda():
    gen = torch.Generator().manual_seed(0)
    filters = [(1, 32), (2, 32), (3, 64), (7, 100)]
    ids = _ids(gen, 13)
    ps = _params(gen, [(261, 16)] + [(c, 16, w) for w, c in filters] + [(c,) for _, c in filters])
    n = len(filters)

    def mk(impl, dev):
        return lambda e, *p: impl.char_cnn(ids.to(dev), e, p[:n], p[n:])

    _assert_matches_float64(mk(fused, DEV), mk(R, "cpu"), ps)


def test_highway_cuda():
    gen = torch.Generator().manual_seed(1)
    ps = _params(gen, [(17, 64), (128, 64), (128,)], scale=0.5)
    _assert_matches_float64(fused.highway, R.highway, ps)


@pytest.mark.parametrize("reverse_backward,residual", [(True, True), (False, False)])
def test_bilstm_cuda(reverse_backward, residual):
    gen = torch.Generator().manual_seed(2)
    B, T, P, C = 5, 7, 16, 40
    lengths = torch.tensor([7, 3, 0, 1, 5])
    ps = _params(gen, _bilstm_shapes(B, T, P, C), scale=0.6)

    def mk(impl, dev):
        def fn(xf, xb, *w):
            return impl.bilstm_layer(xf, xb, lengths.to(dev), w[:4], w[4:8], (w[8], w[9]), 0.5, 0.4,
                                     reverse_backward, residual)
        return fn

    _assert_matches_float64(mk(fused, DEV), mk(R, "cpu"), ps)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_low_precision(dtype):
    gen = torch.Generator().manual_seed(3)
    B, T, P, C = 4, 6, 32, 64
    lengths = torch.tensor([6, 2, 5, 1])
    ps = [p.to(DEV) for p in _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.3)]
    with torch.autocast("cuda", dtype=dtype):
        of, ob, h, c = fused.bilstm_layer(ps[0], ps[0], lengths, ps[1:5], ps[5:9], None, 3.0, 3.0, True, True)
        ref = R.bilstm_layer(ps[0], ps[0], lengths, ps[1:5], ps[5:9], None, 3.0, 3.0, True, True)
    # the reference's dtypes (float32 here: the residual adds the float32 x, the states start from its zeros)
    assert [t.dtype for t in (of, ob, h, c)] == [t.dtype for t in ref] == [torch.float32] * 4
    rf, rb, rh, rc = R.bilstm_layer(ps[0].double(), ps[0].double(), lengths.to(DEV), [p.double() for p in ps[1:5]],
                                    [p.double() for p in ps[5:9]], None, 3.0, 3.0, True, True)
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-2
    _check([of, ob, h, c], [rf, rb, rh, rc], tol)


# ---------------------------------------------------------- review additions
# Cases the tests above miss: more than one thread block along every kernel
# dimension, tanh, a filter as wide as the token, no clips and no initial state,
# one direction, the inference (save=False) path, low-precision backward, NaN,
# bad lengths, the custom-op contract (opcheck: no aliased outputs).


def _rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_char_cnn_cuda_blocks_tanh_wide_filter(activation):
    # F = 307 > 256 threads: two blocks along gridDim.y, the second filter
    # straddling the block boundary; a filter as wide as the token (one position);
    # an all-zero token and a token of one repeated id (every window ties).
    gen = torch.Generator().manual_seed(4)
    W, D = 12, 5
    filters = [(1, 200), (2, 100), (W, 7)]
    ids = _ids(gen, 9, W)
    ids[3] = 261
    ps = _params(gen, [(261, D)] + [(c, D, w) for w, c in filters] + [(c,) for _, c in filters])
    n = len(filters)

    def mk(impl, dev):
        return lambda e, *p: impl.char_cnn(ids.to(dev), e, p[:n], p[n:], activation)

    _assert_matches_float64(mk(fused, DEV), mk(R, "cpu"), ps)


def test_char_cnn_cuda_rejects_filter_wider_than_tokens():
    ids = torch.full((2, 5), 261, dtype=torch.long, device=DEV)
    emb = torch.zeros(261, 4, device=DEV)
    with pytest.raises(RuntimeError, match="wider than the tokens"):
        torch.ops.spacy_elmo.char_cnn_forward(ids, emb, [torch.zeros(3, 4, 7, device=DEV)],
                                              [torch.zeros(3, device=DEV)], 0)


def test_char_cnn_cuda_past_the_kernels_limits_runs_the_reference(monkeypatch):
    """17 filters (the op takes 16) and a token past the GPU's opt-in shared memory (W * D * 4 bytes): the
    wrapper runs the reference, warned once each; the op itself names W, D and the limit."""
    from spacy_elmo.ops import cuda_route

    monkeypatch.setattr(cuda_route, "_warned", set())
    limit = cuda_route.shared_memory_limit(torch.device(DEV))
    assert limit is not None and limit >= 48 * 1024
    gen = torch.Generator().manual_seed(11)
    for n_filters, w, d in ((17, 20, 16), (2, limit // 64 + 1, 16)):
        ids = _ids(gen, 3, w).to(DEV)
        emb, *wb = _params(gen, [(261, d)] + [(2, d, 1 + k % 5) for k in range(n_filters)] + [(2,)] * n_filters)
        emb, wb = emb.to(DEV), [t.to(DEV) for t in wb]
        ws, bs = wb[:n_filters], wb[n_filters:]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fused.char_cnn(ids, emb, ws, bs)
            fused.char_cnn(ids, emb, ws, bs)
        assert len([w_ for w_ in caught if "reference path" in str(w_.message)]) == 1
        torch.testing.assert_close(out, R.char_cnn(ids, emb, ws, bs))
    with pytest.raises(RuntimeError, match=f"W={w} characters x D={d} dims x 4.*limit of {limit}"):
        torch.ops.spacy_elmo.char_cnn_forward(ids, emb, ws, bs, 0)


def test_highway_cuda_ragged_size():
    gen = torch.Generator().manual_seed(5)
    ps = _params(gen, [(3, 2, 37), (74, 37), (74,)], scale=0.8)  # N*F = 222: one partial block; 3-d input
    _assert_matches_float64(fused.highway, R.highway, ps)


def test_bilstm_cuda_multi_block_no_clip_no_state():
    # C = 300 > 256 (two gate blocks, h_prev copied by block 0 only), P = 136 > 128
    # (two projection blocks), no clips, zero initial state, zero-length and full rows.
    gen = torch.Generator().manual_seed(6)
    B, T, P, C = 3, 6, 136, 300
    lengths = torch.tensor([6, 0, 4])
    ps = _params(gen, [(B, T, P), (B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.15)

    def mk(impl, dev):
        def fn(xf, xb, *w):
            return impl.bilstm_layer(xf, xb, lengths.to(dev), w[:4], w[4:8], None, None, None, True, True)
        return fn

    _assert_matches_float64(mk(fused, DEV), mk(R, "cpu"), ps)


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_layer_cuda_one_direction(reverse):
    gen = torch.Generator().manual_seed(7)
    B, T, I, P, C = 4, 5, 9, 6, 10
    lengths = torch.tensor([2, 5, 0, 3])
    ps = _params(gen, [(B, T, I), (I, 4 * C), (P, 4 * C), (4 * C,), (C, P), (B, P), (B, C)], scale=0.7)

    def mk(impl, dev):
        return lambda *a: impl.lstm_layer(a[0], lengths.to(dev), *a[1:5], a[5], a[6], 0.3, 0.2, reverse, False)

    _assert_matches_float64(mk(fused, DEV), mk(R, "cpu"), ps)


def test_bilstm_cuda_inference_path_matches_training_path():
    # No input requires grad: lstm_forward runs with save=False (per-step m / hp
    # buffers, no saved tensors); it must give the training path's outputs.
    gen = torch.Generator().manual_seed(8)
    B, T, P, C = 5, 7, 16, 40
    lengths = torch.tensor([7, 3, 0, 1, 5], device=DEV)
    ps = [p.to(DEV) for p in _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2 +
                                     [(2, B, P), (2, B, C)], scale=0.6)]
    with torch.no_grad():
        a = fused.bilstm_layer(ps[0], ps[0], lengths, ps[1:5], ps[5:9], (ps[9], ps[10]), 0.5, 0.4, True, True)
    x = ps[0].clone().requires_grad_()
    b = fused.bilstm_layer(x, x, lengths, ps[1:5], ps[5:9], (ps[9], ps[10]), 0.5, 0.4, True, True)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_low_precision_backward(dtype):
    # The fp16/bf16 instantiations of every backward kernel (saved tensors,
    # dz / dhp / dh_new in the low dtype, fp32 carried dh / dc): gradients within
    # a relative norm of the float64 reference (an indexing bug is O(1)). Inputs
    # are rounded to the low dtype first, so that both sides see the same values
    # (else the char CNN's max over positions may pick another window).
    gen = torch.Generator().manual_seed(9)
    B, T, P, C = 4, 6, 32, 64
    lengths = torch.tensor([6, 2, 0, 5])
    ps = _params(gen, [(B, T, P), (B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.3)
    ps = [p.to(dtype).float() for p in ps]

    def fn_fused(xf, xb, *w):
        with torch.autocast("cuda", dtype=dtype):
            return fused.bilstm_layer(xf, xb, lengths.to(DEV), w[:4], w[4:8], None, 3.0, 3.0, True, True)

    def fn_ref(xf, xb, *w):
        return R.bilstm_layer(xf, xb, lengths, w[:4], w[4:8], None, 3.0, 3.0, True, True)

    (o1, g1), (o2, g2) = _against_float64(fn_fused, fn_ref, ps)
    tol = 5e-2 if dtype == torch.bfloat16 else 2e-2
    for a, b in zip(o1 + g1, o2 + g2):
        assert torch.isfinite(a.float()).all()
        assert _rel(a, b) < tol

    gen = torch.Generator().manual_seed(10)
    filters = [(1, 32), (3, 64)]
    ids = _ids(gen, 11, 20)
    cps = _params(gen, [(261, 16)] + [(c, 16, w) for w, c in filters] + [(c,) for _, c in filters]
                  + [(96 * 2, 96), (96 * 2,)])
    cps = [p.to(dtype).float() for p in cps]

    def cnn(impl, autocast):
        def fn(e, w1, w2, b1, b2, hw, hb):
            with torch.autocast("cuda", dtype=dtype, enabled=autocast):
                x = impl.char_cnn(ids.to(e.device), e, [w1, w2], [b1, b2])
                return impl.highway(x, hw, hb)
        return fn

    (o1, g1), (o2, g2) = _against_float64(cnn(fused, True), cnn(R, False), cps)
    assert o1[0].dtype == dtype
    for a, b in zip(o1 + g1, o2 + g2):
        assert torch.isfinite(a.float()).all()
        assert _rel(a, b) < tol


@pytest.mark.parametrize("clip", [None, 3.0])
def test_bilstm_cuda_nan_propagates_like_the_reference(clip):
    # A NaN input token makes its row NaN from there on (both directions), as in
    # the reference: the clips must not turn NaN into -clip (or -inf).
    gen = torch.Generator().manual_seed(11)
    B, T, P, C = 3, 5, 8, 12
    lengths = torch.tensor([5, 3, 5])
    ps = _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.5)
    ps[0][0, 2, 0] = float("nan")  # row 0 is full length: no padded positions
    f = fused.bilstm_layer(ps[0].to(DEV), ps[0].to(DEV), lengths.to(DEV), [p.to(DEV) for p in ps[1:5]],
                           [p.to(DEV) for p in ps[5:9]], None, clip, clip, True, True)
    r = R.bilstm_layer(ps[0].double(), ps[0].double(), lengths, [p.double() for p in ps[1:5]],
                       [p.double() for p in ps[5:9]], None, clip, clip, True, True)
    for a, b in zip(f, r):
        assert torch.equal(a.cpu().isnan(), b.isnan())
    assert f[0][0, 2:].isnan().all() and f[1][0, :3].isnan().all() and not f[0][1:].isnan().any()


@pytest.mark.parametrize("where", ["cpu", DEV])
def test_lstm_cuda_rejects_lengths_beyond_t(where):
    # host lengths are checked on the host (no sync), device ones on the device: one message
    B, T, P, C = 2, 5, 4, 3
    x = torch.zeros(B, T, P, device=DEV)
    w = [torch.zeros(P, 4 * C, device=DEV), torch.zeros(P, 4 * C, device=DEV), torch.zeros(4 * C, device=DEV),
         torch.zeros(C, P, device=DEV)]
    for bad, index in (([7, 3], 0), ([3, -1], 1)):
        message = rf"lstm: lengths holds {bad[index]} at flat index {index}; its values must lie in \[0, 5\]"
        with pytest.raises(RuntimeError, match=message):
            fused.lstm_layer(x, torch.tensor(bad, device=where), *w, reverse=True)
        with pytest.raises(RuntimeError, match=message):
            torch.ops.spacy_elmo.lstm_forward([x], torch.tensor(bad, device=where), w, x.new_zeros(1, B, P),
                                              x.new_zeros(1, B, C), None, None, [0], False, False)


@pytest.mark.parametrize("backend", ["fused", "reference"])
def test_bilstm_cuda_host_lengths_make_no_host_sync(backend, capfd):
    """Lengths on the host: checked there and copied to the GPU without waiting for it (fused:
    csrc/cuda/cuda_ops.cpp step_lengths; reference: R.to_device_nowait), in the forward and the
    backward; the same numbers as lengths on the GPU, which cost the fused op one sync per call
    (forward and backward: the count shows the test sees syncs)."""
    from spacy_elmo import ops

    gen = torch.Generator().manual_seed(31)
    B, T, P, C = 5, 7, 8, 6
    lengths = torch.tensor([7, 0, 3, 1, 6])
    params = _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.5)
    results = {}
    for where in ("cpu", DEV):
        ts = [p.to(DEV).requires_grad_() for p in params]
        given = lengths.to(where)

        def run():
            f, b, h, c = ops.bilstm_layer(ts[0], ts[0], given, ts[1:5], ts[5:9], None, 3.0, 3.0, True, True,
                                          backend=backend)
            (f.sum() + 2 * b.sum() + 3 * h.sum() + 4 * c.sum()).backward()
            return [t.detach() for t in (f, b, h, c)], [t.grad for t in ts]

        got: list = []
        for _ in range(2):  # the first call warms up (cuBLAS handles, the pinned memory pool)
            for t in ts:
                t.grad = None
            got.clear()
            syncs = _syncs(lambda: got.append(run()), capfd)
        results[where] = got[0]
        if where == "cpu":
            assert syncs == 0
        elif backend == "fused":
            assert syncs == 2  # the forward's and the backward's check of device lengths
    (outs_host, grads_host), (outs_dev, grads_dev) = results["cpu"], results[DEV]
    for x, y in zip(outs_host, outs_dev):
        assert torch.equal(x, y)
    _check(grads_host, grads_dev, 1e-6)


def test_bilm_forward_cuda_host_syncs(capfd):
    """BiLM.forward on CUDA (fused backend, eager) makes at most 2 host syncs, where it made 7 (H200
    profile, session 40: benchmarks/results/profile_pretrain_step_h200_s40.txt):
    1. BiLM._checked_mask: the verdicts of the ids' checks (range, ragged, malformed) and the lengths
       come to the host in one copy (the LSTM then reads host lengths: no sync in its op);
    2. the char CNN op's own range check of the ids it reads (csrc/cuda/cuda_ops.cpp, min_max_on_host:
       a public op keeps its check).
    contextualize with lengths on the GPU: one sync more (it brings them to the host once)."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.chars import batch_to_ids

    torch.manual_seed(0)
    model = BiLM(BiLMConfig.preset("small"), backend="fused").to(DEV).eval()
    ids = batch_to_ids([["The", "cat", "sat", "."], ["A", "dog"], []]).to(DEV)
    for autocast in (False, True):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            for _ in range(2):  # the first call warms up
                syncs = _syncs(lambda: model(ids), capfd)
            assert syncs <= 2
            x = torch.randn(3, 6, model.config.projection_dim, device=DEV)
            lengths = torch.tensor([4, 2, 0])
            on_device = lengths.to(DEV)  # here: a blocking copy to the GPU is a sync of its own
            got: list = []
            syncs_host = _syncs(lambda: got.append(model.contextualize(x, lengths)), capfd)
            syncs_device = _syncs(lambda: got.append(model.contextualize(x, on_device)), capfd)
            assert syncs_host == 0 and syncs_device <= 1, (syncs_host, syncs_device)
            host, device = got
            for a, b in zip(host.activations + [host.mask], device.activations + [device.mask]):
                assert torch.equal(a, b)
    # the reference forward, which it equals, has the same checks (and their messages: tests/bilm)
    ref = BiLM(BiLMConfig.preset("small"), backend="reference").to(DEV).eval()
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(ids).activations[2], ref(ids).activations[2], rtol=1e-4, atol=1e-4)


def test_cached_rows_cuda_contextualize_makes_no_host_sync(capfd):
    """run_rows with a token cache (the spaCy component's inference path) made its lengths on the GPU, a blocking
    copy there, and contextualize brought them back to check them: two host syncs a batch. Host lengths now: the
    biLSTM part adds none to the cache's lookup of the vectors. The layers are the whole biLM's."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.bilm.token_cache import TokenCache, run_rows

    torch.manual_seed(0)
    model = BiLM(BiLMConfig.preset("small"), backend="fused").to(DEV).eval()
    cache = TokenCache(100)
    rows = [["The", "cat", "sat", "."], ["A", "dog"], []]
    device = torch.device(DEV)
    with torch.no_grad():
        for _ in range(2):  # the first call fills the cache, the second warms up
            lookup = _syncs(lambda: cache.vectors(model, rows, device), capfd)
            cached = _syncs(lambda: run_rows(model, rows, cache), capfd)
        assert cached == lookup, (cached, lookup)
        whole = run_rows(model, rows)
        for a, b in zip(run_rows(model, rows, cache).activations, whole.activations):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_token_cache_takes_cuda_without_an_index():
    """A lookup for torch.device("cuda") never equalled the matrix's cuda:0, and the cache started over at every
    call (the whole char CNN again; found by test_cached_rows_cuda_contextualize_makes_no_host_sync, whose lookup
    synced 4 times to run_rows' 1). "cuda" is the current GPU, as tensor.to("cuda") takes it."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.bilm.token_cache import TokenCache, run_rows

    torch.manual_seed(0)
    model = BiLM(BiLMConfig.preset("small"), backend="fused").to(DEV).eval()
    cache = TokenCache(100)
    rows = [["The", "cat", "sat", "."], ["A", "dog"]]
    with torch.no_grad():
        first = cache.vectors(model, rows, torch.device("cuda"))
        generation, used = cache.generation, cache.used
        n = torch.cuda.current_device()
        for device in ("cuda", torch.device("cuda"), torch.device(DEV), torch.device("cuda", n), f"cuda:{n}", n):
            torch.testing.assert_close(cache.vectors(model, rows, device), first, rtol=0, atol=0)
            assert (cache.generation, cache.used) == (generation, used), device  # read, not encoded again
        for a, b in zip(run_rows(model, rows, cache).activations, run_rows(model, rows).activations):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        with pytest.raises(ValueError, match=r"device cpu is not the biLM's \(cuda:"):
            cache.vectors(model, rows, torch.device("cpu"))


def test_pretraining_step_cuda_host_syncs(capfd):
    """One pretraining step as benchmarks/pretrain.py times it (make_step: the small preset, fused, bf16
    autocast, sampled softmax, Adagrad; what scripts/profile_pretrain_step.py profiles) makes at most 3
    host syncs, where the profile counted 8 cudaStreamSynchronize (H200, session 40):
    1. the char CNN op's check of the ids' range (csrc/cuda/cuda_ops.cpp, min_max_on_host);
    2. make_step's float(loss), and 3. its torch.cuda.synchronize() (the benchmark's own, to time the step;
       a device sync, which the debug mode may not count).
    Gone: the LSTM ops' checks of device lengths (2 layers, forward and backward: make_step passes the
    host's lengths) and the sampled softmax's nonzero (the accidental hits, now one scatter). Of the 8,
    these account for 7 (the profile's aminmax and nonzero counts agree); should this fail by one, that
    eighth is the one to find."""
    from benchmarks import pretrain as P

    config = P.BiLMConfig.preset("small")
    vocab = P.synthetic_vocab(2000)
    data = P.batches(vocab, 8, 20, 4)
    torch.manual_seed(0)
    bilm = P.BiLM(config, backend="fused")
    bilm.lstm.dropout = 0.1
    lm = P.BidirectionalLM(bilm, P.SoftmaxLayer(len(vocab), config.projection_dim)).to(DEV).train()
    opt = P.build_optimizer("adagrad", None, lm.parameters())
    step = P.make_step(lm, opt, P.LogUniformSampler(len(vocab), 256), P.CharTable(vocab, config.max_characters_per_token),
                       vocab, torch.device(DEV), True, torch.Generator().manual_seed(0), data, False)
    try:
        for i in range(3):  # warm-up (cuBLAS, cuDNN, the pinned memory pool)
            step(i)
        losses: list = []
        syncs = _syncs(lambda: losses.append(step(3)), capfd)
    finally:
        step.close()
    assert losses[0] == losses[0]  # not NaN
    assert syncs <= 3


def test_opcheck_cuda():
    # The custom-op contract on the CUDA kernels: schema (no output aliases
    # another), fake tensors, autograd registration.
    gen = torch.Generator().manual_seed(12)
    ops = torch.ops.spacy_elmo
    ids = _ids(gen, 3, 8).to(DEV)
    filters = [(1, 2), (3, 4)]
    emb, *cp = [p.to(DEV).requires_grad_() for p in _params(gen, [(261, 3)] + [(c, 3, w) for w, c in filters] +
                                                             [(c,) for _, c in filters])]
    ws, bs = cp[:2], cp[2:]
    torch.library.opcheck(ops.char_cnn_forward.default, (ids, emb, ws, bs, 0))
    out, arg = ops.char_cnn_forward(ids, emb.detach(), [w.detach() for w in ws], [b.detach() for b in bs], 0)
    torch.library.opcheck(ops.char_cnn_backward.default,
                          (torch.ones_like(out), out, arg, ids, emb.detach(), [w.detach() for w in ws], 0),
                          test_utils=("test_schema", "test_faketensor"))
    x, w, b = [p.to(DEV).requires_grad_() for p in _params(gen, [(4, 5), (10, 5), (10,)])]
    torch.library.opcheck(ops.highway_forward.default, (x, w, b))
    B, T, P, C = 2, 3, 4, 5
    ts = [p.to(DEV).requires_grad_() for p in _params(gen, _bilstm_shapes(B, T, P, C))]
    xs, weights, h0, c0 = ts[:2], ts[2:10], ts[10], ts[11]
    lengths = torch.tensor([3, 1], device=DEV)
    torch.library.opcheck(ops.lstm_forward.default, (xs, lengths, weights, h0, c0, 3.0, 0.5, [0, 1], True, True),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    torch.library.opcheck(ops.lstm_forward.default, (xs, lengths, weights, h0, c0, None, None, [0, 1], False, False),
                          test_utils=("test_schema", "test_faketensor"))
    # host lengths with the tensors on the GPU (what BiLM.forward passes: no host sync)
    torch.library.opcheck(ops.lstm_forward.default, (xs, lengths.cpu(), weights, h0, c0, 3.0, 0.5, [0, 1], True, True),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_kernels_on_second_gpu_match_first():
    # Tensors on cuda:1 while cuda:0 is current: the device guard and the stream of
    # cuda:1 must be used (a launch on the wrong device fails or reads garbage).
    gen = torch.Generator().manual_seed(13)
    B, T, P, C = 3, 4, 8, 10
    lengths = torch.tensor([4, 0, 2])
    ps = _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.5)
    res = []
    for dev in ("cuda:0", "cuda:1"):
        with torch.cuda.device(0):
            q = [p.to(dev) for p in ps]
            res.append(fused.bilstm_layer(q[0], q[0], lengths.to(dev), q[1:5], q[5:9], None, 3.0, 3.0, True, True))
    for a, b in zip(*res):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


def test_bilstm_cuda_more_sentences_than_grid_y_allows():
    # B = 70000 > 65535: one block per sentence along gridDim.x (gridDim.y stops at
    # 65535, where the CPU path has no limit); forward and backward, ragged, both directions.
    gen = torch.Generator().manual_seed(14)
    B, T, P, C = 70000, 3, 3, 5
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[-1] = T
    ps = _params(gen, [(B, T, P), (B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.5)

    def mk(impl, dev):
        def fn(xf, xb, *w):
            return impl.bilstm_layer(xf, xb, lengths.to(dev), w[:4], w[4:8], None, 3.0, 3.0, True, True)
        return fn

    (o1, g1), (o2, g2) = _against_float64(mk(fused, DEV), mk(R, "cpu"), ps)
    _check(o1, o2, 1e-5)
    _check(g1[:2], g2[:2], 1e-4)  # dx of every row, the last 4,465 included
    for a, b in zip(g1[2:], g2[2:]):  # weight gradients: sums over 210,000 positions, up to 1e5
        assert _rel(a, b) < 1e-4


def test_cuda_ops_refuse_what_the_cpu_ops_refuse():
    # Shapes the kernels index by: on CUDA a w_recurrent of (P, 4C + 4) made mm_out resize
    # the step buffer view (a warning) and the gate kernel read it with stride 4C; a
    # negative clip made the clips return garbage; a (1,) highway bias broadcast silently.
    B, T, P, C = 2, 3, 4, 5
    x = torch.zeros(B, T, P, device=DEV)
    lengths = torch.tensor([3, 1])
    w = [torch.zeros(P, 4 * C, device=DEV), torch.zeros(P, 4 * C, device=DEV), torch.zeros(4 * C, device=DEV),
         torch.zeros(C, P, device=DEV)]
    with pytest.raises(RuntimeError, match=r"w_recurrent \(P, 4C\) must have shape \[4, 20\], got \[4, 24\]"):
        fused.lstm_layer(x, lengths, w[0], torch.zeros(P, 4 * C + 4, device=DEV), w[2], w[3])
    with pytest.raises(RuntimeError, match=r"w_input \(I, 4C\) must have shape \[4, 20\], got \[4, 24\]"):
        fused.lstm_layer(x, lengths, torch.zeros(P, 4 * C + 4, device=DEV), *w[1:])
    with pytest.raises(RuntimeError, match="cell_clip must be >= 0"):
        fused.lstm_layer(x, lengths, *w, cell_clip=-1.0)
    with pytest.raises(RuntimeError, match="proj_clip must be >= 0"):
        fused.lstm_layer(x, lengths, *w, proj_clip=-1.0)
    with pytest.raises(RuntimeError, match=r"bias \(2F,\) must have shape \[8\], got \[1\]"):
        fused.highway(torch.zeros(3, 4, device=DEV), torch.zeros(8, 4, device=DEV), torch.zeros(1, device=DEV))


@pytest.mark.parametrize("case", ["no_tokens", "no_sentences", "no_steps", "no_positions"])
def test_cuda_kernels_on_empty_inputs(case):
    # Zero tokens / sentences / steps: no kernel may be launched with a 0-sized grid
    # (an "invalid configuration" error), forward or backward, and the results are the
    # reference's (empty outputs, zero gradients; the initial state comes back as the final).
    gen = torch.Generator().manual_seed(15)
    if case == "no_tokens":
        filters = [(1, 4), (3, 5)]
        ids = torch.zeros(0, 6, dtype=torch.long)
        ps = _params(gen, [(261, 3)] + [(c, 3, w) for w, c in filters] + [(c,) for _, c in filters]
                     + [(18, 9), (18,)])
        _assert_matches_float64(_char_cnn_highway(fused, ids, DEV), _char_cnn_highway(R, ids, "cpu"), ps)
        return
    B, T = {"no_sentences": (0, 4), "no_steps": (3, 4), "no_positions": (3, 0)}[case]
    P, C = 6, 7
    lengths = torch.zeros(B, dtype=torch.long)
    ps = _params(gen, _bilstm_shapes(B, T, P, C))
    _assert_matches_float64(_bilstm_from_state(fused, lengths, DEV), _bilstm_from_state(R, lengths, "cpu"), ps)


def test_cuda_kernels_on_a_side_stream():
    # Every launch must go to torch's current stream: a kernel sent to the legacy default
    # stream instead would race the cuBLAS products on this (non-blocking) side stream.
    # The default stream is kept busy meanwhile, so that such a kernel would not simply
    # run late enough by chance.
    gen = torch.Generator().manual_seed(16)
    B, T, P, C = 48, 12, 32, 96
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    ps = _params(gen, _bilstm_shapes(B, T, P, C), scale=0.4)
    filters = [(1, 40), (2, 300)]
    ids = _ids(gen, 37, 10)
    cps = _params(gen, [(261, 8)] + [(c, 8, w) for w, c in filters] + [(c,) for _, c in filters]
                  + [(680, 340), (680,)])

    busy = torch.randn(4096, 4096, device=DEV)
    with torch.cuda.stream(torch.cuda.Stream()):  # non-blocking: no implicit sync with the default stream
        for _ in range(3):
            with torch.cuda.stream(torch.cuda.default_stream()):
                for _ in range(8):  # ~0.1 s of work queued ahead of anything sent there
                    torch.mm(busy, busy)
            for fn, data, args in ((_bilstm_from_state, lengths, ps), (_char_cnn_highway, ids, cps)):
                # a race gives O(0.1) errors: looser than the other tests (sums over 576 positions here)
                (o1, g1), (o2, g2) = _against_float64(fn(fused, data, DEV), fn(R, data, "cpu"), args)
                _check(o1, o2, 1e-4)
                _check(g1, g2, 1e-3)
    torch.cuda.synchronize()


# ------------------------------------------------------------ bad input
# test_fused_inputs.py's bad-input cases with their tensors on the GPU: the CUDA ops
# refuse what the CPU ops refuse, with the same messages (csrc/include/checks.h). Before,
# char_cnn read (and its backward wrote) row id - 1 of the table at any id (262: an illegal
# address), trusted argmax, and the backward ops checked fewer shapes.


@pytest.mark.parametrize("bad_id,rows", inputs.BAD_CHAR_IDS)
def test_cuda_char_ids_without_a_table_row_are_an_error(bad_id, rows):
    inputs.test_char_ids_without_a_table_row_are_an_error(bad_id, rows, device=DEV)


@pytest.mark.parametrize("dtype", inputs.NOT_CHAR_ID_DTYPES)
def test_cuda_char_ids_must_be_integers(dtype):
    inputs.test_char_ids_must_be_integers(dtype, device=DEV)


@pytest.mark.parametrize("case", [
    inputs.test_char_ids_int32_and_the_last_row_are_fine,
    inputs.test_char_filter_of_width_zero_is_an_error,
    inputs.test_char_filter_without_channels_is_an_error,
    inputs.test_char_cnn_backward_op_checks_what_it_indexes_with,
    inputs.test_highway_bias_must_be_one_dimensional,
    inputs.test_highway_backward_op_checks_its_shapes,
    inputs.test_lstm_state_of_the_wrong_shape_is_an_error_not_reshaped,
    inputs.test_lstm_op_refuses_a_bias_of_another_shape,
    inputs.test_lstm_lengths_must_be_integers,
    inputs.test_lstm_without_cells_or_projection_is_an_error,
    inputs.test_lstm_without_input_features_is_an_error,
    inputs.test_lstm_negative_or_nan_clip_is_an_error,
    inputs.test_bilstm_directions_of_other_shapes_are_an_error,
    inputs.test_char_cnn_needs_one_bias_per_filter,
    inputs.test_fakes_match_the_kernels_for_transposed_inputs,
], ids=lambda case: case.__name__[len("test_"):])
def test_cuda_bad_input(case):
    case(device=DEV)


@pytest.mark.parametrize("backend", ["reference", "fused"])
@pytest.mark.parametrize("which,bad,match", inputs.LSTM_BROADCAST_STATES, ids=inputs.LSTM_BROADCAST_IDS)
def test_cuda_lstm_state_and_lengths_are_not_broadcast(backend, which, bad, match):
    inputs.test_lstm_state_and_lengths_are_not_broadcast(backend, which, bad, match, device=DEV)


# bfloat16 with counts of whole 16s: the tensor-core kernel (float32: the CUDA-core kernel)
@pytest.mark.parametrize("dtype,filters,kernel", [
    (torch.float32, inputs.NAN_CHAR_FILTERS, "char_cnn_forward_kernel"),
    (torch.bfloat16, [(1, 16), (2, 32), (3, 48), (7, 16)], "char_cnn_forward_mma_kernel"),
], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_cuda_nan_in_char_cnn_stays_nan(activation, dtype, filters, kernel):
    """The window max and relu of each CUDA kernel keep a NaN (``> best`` and fmaxf(v, 0) dropped it).
    bfloat16 under autocast: outside it a bfloat16 module runs the float32 kernels."""
    def run():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            inputs.test_nan_in_char_cnn_stays_nan(activation, dtype, filters=filters, device=DEV)

    _, names = launched(run)
    assert any(kernel in n for n in names), names


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_cuda_several_nan_windows_send_the_gradient_to_the_first(activation):
    """The CUDA-core kernel's max keeps the first NaN window, as torch.max (it took the last)."""
    _, names = launched(lambda: inputs.test_several_nan_windows_send_the_gradient_to_the_first(
        activation, torch.float32, device=DEV))
    assert any("char_cnn_forward_kernel" in n for n in names), names


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_nan_in_highway_stays_nan(dtype):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):  # the bfloat16 kernel
        inputs.test_nan_in_highway_stays_nan(dtype, device=DEV)


@pytest.mark.parametrize("clips", inputs.NAN_LSTM_CLIPS, ids=inputs.NAN_LSTM_CLIP_IDS)
def test_cuda_nan_cell_without_a_clip_passes_the_gradient(clips):
    """The CUDA LSTM backward's clip tests pass a NaN where there is no clip (``lo <= v <= hi`` with
    infinite bounds stopped it), as the CPU kernels' and the reference's."""
    inputs.test_nan_cell_without_a_clip_passes_the_gradient(clips, device=DEV)


# sampled_logsumexp has no CUDA kernel: on the GPU fused runs the reference
@pytest.mark.parametrize("which", ["highway", "char_cnn", "lstm_layer"])
def test_cuda_integer_inputs_are_an_error_not_truncated(which):
    inputs.test_integer_inputs_are_an_error_not_truncated(which, device=DEV)


@pytest.mark.parametrize("change,match", inputs.LSTM_SAVED_CHANGES, ids=inputs.LSTM_SAVED_CHANGE_IDS)
def test_cuda_lstm_backward_op_checks_what_the_forward_saved(change, match):
    inputs.test_lstm_backward_op_checks_what_the_forward_saved(change, match, device=DEV)


def test_cuda_ops_refuse_float64_and_tensors_on_another_device():
    """The kernels have no float64 version (dtype_of refused it only after the other checks), and
    they read their tensors through raw pointers on the table's / the input's device."""
    ids, emb, ws, bs = inputs._char_inputs(device=DEV)
    with pytest.raises(RuntimeError, match="embedding must be float32, float16 or bfloat16 on CUDA .* got Double"):
        torch.ops.spacy_elmo.char_cnn_forward(ids, emb.double(), [w.double() for w in ws], [b.double() for b in bs], 0)
    with pytest.raises(RuntimeError, match="char_cnn: a filter weight is on cpu, the other arguments on cuda"):
        torch.ops.spacy_elmo.char_cnn_forward(ids, emb, [ws[0].cpu(), ws[1]], bs, 0)
    x, w, b = torch.randn(6, 4, device=DEV), torch.randn(8, 4, device=DEV), torch.randn(8, device=DEV)
    _, h = torch.ops.spacy_elmo.highway_forward(x, w, b)
    with pytest.raises(RuntimeError, match="highway_backward: h is on cpu, the other arguments on cuda"):
        torch.ops.spacy_elmo.highway_backward(torch.ones_like(x), x, w, h.cpu())


def test_cuda_ops_name_the_argument_left_on_the_cpu():
    """One argument on CUDA makes the dispatcher pick the CUDA kernel: with the table / the input on the
    CPU, its device guard failed with a message that named neither the op nor the argument."""
    ops = torch.ops.spacy_elmo
    ids, emb, ws, bs = inputs._char_inputs(device=DEV)
    with pytest.raises(RuntimeError, match="char_cnn: embedding is on cpu while other arguments are on CUDA"):
        ops.char_cnn_forward(ids, emb.cpu(), [w.cpu() for w in ws], [b.cpu() for b in bs], 0)
    x, w, b = torch.randn(6, 4), torch.randn(8, 4, device=DEV), torch.randn(8, device=DEV)
    with pytest.raises(RuntimeError, match="highway: x is on cpu while other arguments are on CUDA"):
        ops.highway_forward(x, w, b)
    x, lengths, w = inputs._lstm_case()
    with pytest.raises(RuntimeError, match="lstm: x is on cpu while other arguments are on CUDA"):
        fused.lstm_layer(x, lengths, *w, h0=torch.zeros(3, 4, device=DEV))


@pytest.mark.parametrize("autocast", [False, True], ids=["plain", "bf16_autocast"])
def test_float64_on_the_gpu_runs_the_reference(autocast):
    """The CUDA kernels have no float64 version (the op refuses it, above): a float64 module on the GPU
    (bilm.double(), for checks) failed in every fused call. The wrappers run the reference there:
    float64 results and gradients, the CPU's float64 reference's; under autocast too, which leaves
    float64 alone (the bfloat16 kernels ran: the autocast dtype was chosen before float64 was seen)."""
    gen = torch.Generator().manual_seed(17)
    lengths = torch.tensor([4, 0, 2])
    ps = _params(gen, _bilstm_shapes(3, 4, 6, 7), dtype=torch.float64)
    ids = _ids(gen, 5, 10)
    filters = [(1, 4), (3, 5)]
    cps = _params(gen, [(261, 3)] + [(c, 3, w) for w, c in filters] + [(c,) for _, c in filters] + [(18, 9), (18,)],
                  dtype=torch.float64)

    def one_direction(impl, dev):
        return lambda x, wi, wr, b, wp: impl.lstm_layer(x, lengths.to(dev), wi, wr, b, wp, None, None, 3.0, 3.0, True)

    def under_autocast(fn):
        def run(*args):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                return fn(*args)
        return run

    for fused_fn, ref_fn, args in ((_bilstm_from_state(fused, lengths, DEV), _bilstm_from_state(R, lengths, "cpu"), ps),
                                   (one_direction(fused, DEV), one_direction(R, "cpu"), ps[:1] + ps[2:6]),
                                   (_char_cnn_highway(fused, ids, DEV), _char_cnn_highway(R, ids, "cpu"), cps)):
        (o1, g1), (o2, g2) = _against_float64(under_autocast(fused_fn), ref_fn, args)
        for a, b in zip(o1 + g1, o2 + g2):
            assert a.dtype == torch.float64
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)  # the losses weigh in float32


SYNC_WARNING = "called a synchronizing CUDA operation"


def _syncs(fn, capfd):
    """The synchronizing CUDA calls fn makes: torch's sync debug mode warns at each, as a Python
    warning or, where C++ warnings are not routed to Python (a custom op's own sync under torch 2.11),
    on stderr, so both are counted (2026-11-26, H200: stderr only, and the count read 0)."""
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return sum(SYNC_WARNING in str(w.message) for w in caught) + capfd.readouterr().err.count(SYNC_WARNING)


def test_syncs_counts_a_known_sync_exactly_once(capfd):
    """The calibration of the sync-count tests: their bounds (0 syncs, 1 sync) would hold trivially should torch's
    sync debug mode go silent (its message renamed, its warnings routed elsewhere). A ``.item()`` of a CUDA tensor
    is one synchronizing call, which _syncs counts once (not twice: a Python warning and a line on stderr);
    queued work alone is none."""
    t = torch.arange(4.0, device=DEV)
    assert _syncs(lambda: t.sum().item(), capfd) == 1
    assert _syncs(lambda: (t * 2).sum(), capfd) == 0


def test_cuda_range_checks_sync_once_per_call(capfd):
    """The ids (and argmax) / lengths range checks copy one small tensor of minima and maxima
    to the host: one sync per op call, none more (inputs already on the device)."""
    ops = torch.ops.spacy_elmo
    ids, emb, ws, bs = inputs._char_inputs(device=DEV)
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, 0)
    assert _syncs(lambda: ops.char_cnn_forward(ids, emb, ws, bs, 0), capfd) == 1
    assert _syncs(lambda: ops.char_cnn_backward(torch.ones_like(out), out, arg, ids, emb, ws, 0), capfd) == 1
    # through the dispatcher: it leaves the ids to the op (it synced once more for its own check)
    assert _syncs(lambda: inputs.dispatch.char_cnn(ids, emb, ws, bs, backend="fused"), capfd) == 1
    args = inputs._lstm_saved(device=DEV)
    forward_args = (args["xs"], args["lengths"], args["weights"], torch.zeros(2, 3, 4, device=DEV), args["c0"],
                    None, None, [0, 1], False, True)
    assert _syncs(lambda: ops.lstm_forward(*forward_args), capfd) == 1
    assert _syncs(lambda: ops.lstm_backward(*args.values()), capfd) == 1
    # lengths on the host: checked there, copied over without a sync (step_lengths, csrc/cuda/cuda_ops.cpp)
    host = dict(args, lengths=args["lengths"].cpu())
    assert _syncs(lambda: ops.lstm_forward(forward_args[0], host["lengths"], *forward_args[2:]), capfd) == 0
    assert _syncs(lambda: ops.lstm_backward(*host.values()), capfd) == 0


@pytest.mark.parametrize("activation", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_char_cnn_autograd_backward_on_cuda_matches_the_kernel(activation, dtype, capfd):
    """The CUDA autograd backward runs fused.char_cnn_backward_composed (ATen ops, cuDNN), not the
    CUDA kernel (76-80 ms of global atomics a pretraining step): the two agree, in the op's dtypes,
    and the composition never synchronizes."""
    from spacy_elmo.bilm.config import BiLMConfig

    assert fused._char_cnn_backward_for(torch.device(DEV)) is fused.char_cnn_backward_composed
    gen = torch.Generator().manual_seed(21)
    filters = BiLMConfig.preset("small").filters
    ids = _ids(gen, 40).to(DEV)
    emb, *p = [t.to(DEV, dtype) for t in _params(gen, [(261, 16)] + [(c, 16, w) for w, c in filters]
                                                  + [(c,) for _, c in filters], scale=0.1)]
    ws, bs = p[: len(filters)], p[len(filters):]
    ops = torch.ops.spacy_elmo
    out, arg = ops.char_cnn_forward(ids, emb, ws, bs, activation)
    grad = (torch.rand(out.shape, generator=gen) - 0.5).to(DEV, dtype)
    args = (grad, out, arg, ids, emb, ws, activation)
    kernel = ops.char_cnn_backward(*args)
    composed = fused.char_cnn_backward_composed(*args)
    assert _syncs(lambda: fused.char_cnn_backward_composed(*args), capfd) == 0
    for a, e in zip([composed[0], *composed[1], *composed[2]], [kernel[0], *kernel[1], *kernel[2]]):
        assert a.dtype == e.dtype and a.shape == e.shape and a.device == e.device
        if dtype == torch.float32:
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
        else:
            assert _rel(a, e) < 1e-2


def test_build_info_names_the_architectures_the_kernels_were_compiled_for():
    """spacy-elmo info's CUDA line: nvcc's __CUDA_ARCH_LIST__ (csrc/cuda/build_info.cu), the virtual
    architectures; where TORCH_CUDA_ARCH_LIST chose them (scripts/gpu_session.sh sets it), exactly those;
    this GPU runs the kernels (the tests above), so one of them is at most its own capability."""
    import os
    import re

    from spacy_elmo.ops import build_info

    info = build_info()
    assert info.cuda and info.cuda_archs, info
    major, minor = torch.cuda.get_device_capability()
    assert min(tuple(map(int, a.split("."))) for a in info.cuda_archs) <= (major, minor)
    asked = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if asked:  # "9.0", "8.6+PTX 9.0a", "7.5;9.0": the arch-specific "a" is no other virtual architecture
        assert sorted(set(info.cuda_archs)) == sorted({re.sub(r"(\+PTX|a)$", "", a) for a in re.split(r"[ ;]+", asked.strip())})


# ------------------------------------------------------------ tensor-core char CNN
# fp16 / bf16 (autocast) with D a multiple of 16 and every filter count one (every preset) run
# char_cnn_forward_mma_kernel (csrc/cuda/char_cnn.cu); float32 and other shapes the CUDA-core kernel.


def _char_cnn_float64(ids, emb, ws, bs, activation):
    """``(out (N, F), convs)`` in float64 on the CPU; ``convs[i]`` ``(N, count_i, npos_i)`` before the max."""
    table = torch.cat([torch.zeros(1, emb.shape[1], dtype=torch.float64), emb.double().cpu()])
    e = table[ids.cpu()].transpose(1, 2)  # (N, D, W); id 0 is the zero vector
    convs = [torch.nn.functional.conv1d(e, w.double().cpu()) for w in ws]
    pre = torch.cat([c.max(-1).values + b.double().cpu() for c, b in zip(convs, bs)], 1)
    return (pre.relu() if activation == 0 else pre.tanh()), convs


def _assert_first_of_equal_windows(arg, ids, widths):
    """The argmax is the first position of its window's ids: identical windows (the tokens' tails of
    padding ids) give the kernel identical values, and it keeps the first position of the maximum. (An
    oracle's values cannot say so: float64 convolutions sum identical windows in different orders.)"""
    start, ids = 0, ids.cpu()
    for width, count in widths:
        windows = ids.unfold(1, width, 1)  # (N, npos, width)
        same = (windows[:, :, None, :] == windows[:, None, :, :]).all(-1)  # (N, npos, npos)
        first_same = same.double().argmax(-1)  # the first position with each position's window
        a = arg[:, start : start + count]
        assert torch.equal(first_same.gather(1, a), a)
        start += count


def _preset_char_inputs(gen, preset, n, dtype):
    from spacy_elmo.bilm.config import BiLMConfig

    filters = BiLMConfig.preset(preset).filters
    ids = _ids(gen, n)
    ids[-2] = 261  # every window of this token is the same: the first position is the argmax
    emb, *p = [t.to(DEV, dtype) for t in _params(gen, [(261, 16)] + [(c, 16, w) for w, c in filters]
                                                  + [(c,) for _, c in filters], scale=0.3)]
    return ids.to(DEV), emb, p[: len(filters)], p[len(filters):]


@pytest.mark.parametrize("preset", ["original", "small"])
@pytest.mark.parametrize("activation", [0, 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_char_cnn_tensor_core_kernel_matches_float64(preset, activation, dtype, monkeypatch):
    """The tensor-core kernel runs (the profiler names it) and matches a float64 oracle fed the same
    rounded values, within the output dtype's rounding; each argmax holds its filter's maximum (to fp32
    accumulation), the first position where every window is equal. 203 tokens: the last token group
    is partial; a token of only id 0 gives act(bias). With SPACY_ELMO_CHAR_CNN_MMA=0 the CUDA-core kernel
    runs instead and agrees."""
    gen = torch.Generator().manual_seed(41)
    ids, emb, ws, bs = _preset_char_inputs(gen, preset, 203, dtype)
    ops = torch.ops.spacy_elmo
    (out, arg), names = launched(lambda: ops.char_cnn_forward(ids, emb, ws, bs, activation))
    assert any("char_cnn_forward_mma_kernel" in n for n in names), names
    expected, convs = _char_cnn_float64(ids, emb, ws, bs, activation)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert out.dtype == dtype and arg.dtype == torch.int32
    torch.testing.assert_close(out.double().cpu(), expected, rtol=tol, atol=tol)
    arg = arg.long().cpu()
    start = 0
    for conv in convs:
        count, npos = conv.shape[1:]
        a = arg[:, start : start + count]
        assert a.min() >= 0 and a.max() < npos
        at_arg = conv.gather(2, a.unsqueeze(-1)).squeeze(-1)
        assert (conv.max(-1).values - at_arg).abs().max() <= 1e-4
        start += count
    assert (arg[-2] == 0).all()
    _assert_first_of_equal_windows(arg, ids, [(w.shape[2], w.shape[0]) for w in ws])
    bias = torch.cat([b.double().cpu() for b in bs])
    torch.testing.assert_close(out[-1].double().cpu(), bias.relu() if activation == 0 else bias.tanh(),
                               rtol=tol, atol=tol)

    monkeypatch.setenv("SPACY_ELMO_CHAR_CNN_MMA", "0")
    (out0, arg0), names0 = launched(lambda: ops.char_cnn_forward(ids, emb, ws, bs, activation))
    assert not any("char_cnn_forward_mma_kernel" in n for n in names0)
    assert any("char_cnn_forward_kernel" in n for n in names0), names0
    torch.testing.assert_close(out0.double().cpu(), expected, rtol=tol, atol=tol)
    assert (arg0.long().cpu()[-2] == 0).all()
    _assert_first_of_equal_windows(arg0.long().cpu(), ids, [(w.shape[2], w.shape[0]) for w in ws])


@pytest.mark.parametrize("value", ["0", "1", "0x", "false", "off", ""])
def test_char_cnn_mma_switch_takes_exactly_0_or_1(value, monkeypatch):
    """SPACY_ELMO_CHAR_CNN_MMA turns the tensor-core kernel off for exactly "0" (the C++ looked at the
    first character: "0x" turned it off, "false" and "off" did not, silently); 1 leaves it on, and any
    other value leaves it on with a warning naming the variable and the value. Run under bf16 autocast:
    outside it the wrapper computes a bfloat16 input in float32 (``_kernel_dtype``), on CUDA cores."""
    gen = torch.Generator().manual_seed(45)
    ids, emb, ws, bs = _preset_char_inputs(gen, "small", 37, torch.bfloat16)
    monkeypatch.setattr(switches, "_warned", set())
    monkeypatch.setenv("SPACY_ELMO_CHAR_CNN_MMA", value)
    with warnings.catch_warnings(record=True) as caught, torch.autocast("cuda", dtype=torch.bfloat16):
        warnings.simplefilter("always")
        _, names = launched(lambda: fused.char_cnn(ids, emb, ws, bs, "relu"))
    assert any("char_cnn_forward_mma_kernel" in n for n in names) == (value != "0"), names
    assert any("char_cnn_forward_kernel" in n for n in names) == (value == "0"), names
    said = [str(w.message) for w in caught if issubclass(w.category, switches.SwitchWarning)]
    assert said == ([] if value in ("0", "1") else [switches.problem("SPACY_ELMO_CHAR_CNN_MMA", value)])
    assert value in ("0", "1") or f"SPACY_ELMO_CHAR_CNN_MMA={value!r}" in said[0]


def test_char_cnn_tensor_core_kernel_only_where_it_applies():
    """float32 stays on the exact CUDA-core kernel; bf16 with a count that is no multiple of 16, or a
    char dimension that is none, too (and still matches the oracle)."""
    gen = torch.Generator().manual_seed(42)
    ops = torch.ops.spacy_elmo
    ids, emb, ws, bs = _preset_char_inputs(gen, "small", 37, torch.float32)
    (out, _), names = launched(lambda: ops.char_cnn_forward(ids, emb, ws, bs, 0))
    assert not any("mma_kernel" in n for n in names) and any("char_cnn_forward_kernel" in n for n in names)
    torch.testing.assert_close(out.double().cpu(), _char_cnn_float64(ids, emb, ws, bs, 0)[0], rtol=1e-5, atol=1e-5)
    for shapes in ([(261, 16), (24, 16, 3), (24,)], [(261, 8), (32, 8, 3), (32,)]):
        emb, w, b = [t.to(DEV, torch.bfloat16) for t in _params(gen, shapes)]
        (out, _), names = launched(lambda: ops.char_cnn_forward(ids, emb, [w], [b], 0))
        assert not any("mma_kernel" in n for n in names), shapes
        torch.testing.assert_close(out.double().cpu(), _char_cnn_float64(ids, emb, [w], [b], 0)[0],
                                   rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("products", [None, "batched", "per-direction", "auto", "Batched", "per_direction"])
def test_bilstm_cuda_direction_products_batched_or_not(products, monkeypatch):
    """The time loop's products for both directions: one batched GEMM, or one per direction (float32
    with an inner dimension >= 2048: 4C = 2400 here, the backward's dz @ W_rec^T; the recurrent product,
    K = P, stays batched); forced either way by SPACY_ELMO_LSTM_PRODUCTS, forward and backward match the
    float64 oracle. auto is the choice unset; another value (it was ignored without a word) the same,
    with a warning naming it."""
    monkeypatch.setattr(switches, "_warned", set())
    if products is not None:
        monkeypatch.setenv("SPACY_ELMO_LSTM_PRODUCTS", products)
    unknown = products not in (None, "batched", "per-direction", "auto")
    gen = torch.Generator().manual_seed(43)
    B, T, P, C = 6, 5, 16, 600
    lengths = torch.tensor([5, 2, 0, 5, 1, 4])
    ps = _params(gen, _bilstm_shapes(B, T, P, C), scale=0.2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _assert_matches_float64(_bilstm_from_state(fused, lengths, DEV), _bilstm_from_state(R, lengths, "cpu"), ps)
    bmm = sum(e.count for e in prof.key_averages() if e.key == "aten::bmm")
    # forward: the recurrent product (K = P) and the projection (K = C), backward: dhp @ W_proj^T (K = P)
    # and dz @ W_rec^T (K = 4C = 2400), each once a step; the CPU reference runs no bmm
    steps = int(lengths.max())
    assert bmm == {"batched": 4, "per-direction": 0}.get(products, 3) * steps
    said = [str(w.message) for w in caught if issubclass(w.category, switches.SwitchWarning)]
    assert said == ([switches.problem("SPACY_ELMO_LSTM_PRODUCTS", products)] if unknown else [])


def test_char_cnn_tensor_core_kernel_falls_back_for_misaligned_filters():
    """wmma::load_matrix_sync needs 32-byte aligned addresses, and a weight that is already a view in the
    packed (width * D, count) layout reaches the kernel as it is, its storage offset too: 2 bytes here.
    The CUDA-core kernel runs then (a misaligned tensor-core load would break the CUDA context)."""
    gen = torch.Generator().manual_seed(44)
    ids, emb, _, _ = _preset_char_inputs(gen, "small", 19, torch.bfloat16)
    width, D, count = 3, 16, 32
    base = _params(gen, [(1 + width * D * count,)])[0].to(DEV, torch.bfloat16)
    w = base[1:].view(width, D, count).permute(2, 1, 0)  # (count, D, width), packed layout underneath
    b = _params(gen, [(count,)])[0].to(DEV, torch.bfloat16)
    (out, _), names = launched(lambda: torch.ops.spacy_elmo.char_cnn_forward(ids, emb, [w], [b], 0))
    assert not any("mma_kernel" in n for n in names) and any("char_cnn_forward_kernel" in n for n in names)
    torch.testing.assert_close(out.double().cpu(), _char_cnn_float64(ids, emb, [w], [b], 0)[0], rtol=1e-2, atol=1e-2)
