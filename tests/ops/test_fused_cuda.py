"""CUDA kernels vs the reference (run on a GPU machine; skipped elsewhere). No spaCy imports."""

import pytest
import torch

from spacy_elmo.ops import reference as R

fused = pytest.importorskip("spacy_elmo.ops.fused", reason="spacy_elmo._C is not built")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not fused.built_with_cuda(), reason="extension built without CUDA kernels"),
]

DEV = "cuda"


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


def _grads(fn, tensors, device):
    ts = [t.detach().to(device).requires_grad_() for t in tensors]
    out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * (k + 1) * torch.linspace(-1, 1, o.numel(), device=device).view_as(o)).sum()
               for k, o in enumerate(outs))
    loss.backward()
    return [o.detach().cpu() for o in outs], [t.grad.cpu() for t in ts]


def _check(a, b, tol):
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y.float(), rtol=tol, atol=tol)


def test_char_cnn_cuda():
    gen = torch.Generator().manual_seed(0)
    filters = [(1, 32), (2, 32), (3, 64), (7, 100)]
    ids = _ids(gen, 13)
    ps = _params(gen, [(261, 16)] + [(c, 16, w) for w, c in filters] + [(c,) for _, c in filters])
    n = len(filters)

    def mk(impl, dev):
        return lambda e, *p: impl.char_cnn(ids.to(dev), e, p[:n], p[n:])

    o1, g1 = _grads(mk(fused, DEV), ps, DEV)
    o2, g2 = _grads(mk(R, "cpu"), [p.double() for p in ps], "cpu")
    _check(o1, o2, 1e-5)
    _check(g1, g2, 1e-4)


def test_highway_cuda():
    gen = torch.Generator().manual_seed(1)
    ps = _params(gen, [(17, 64), (128, 64), (128,)], scale=0.5)
    o1, g1 = _grads(fused.highway, ps, DEV)
    o2, g2 = _grads(R.highway, [p.double() for p in ps], "cpu")
    _check(o1, o2, 1e-5)
    _check(g1, g2, 1e-4)


@pytest.mark.parametrize("reverse_backward,residual", [(True, True), (False, False)])
def test_bilstm_cuda(reverse_backward, residual):
    gen = torch.Generator().manual_seed(2)
    B, T, P, C = 5, 7, 16, 40
    lengths = torch.tensor([7, 3, 0, 1, 5])
    ps = _params(gen, [(B, T, P), (B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2 + [(2, B, P), (2, B, C)],
                 scale=0.6)

    def mk(impl, dev):
        def fn(xf, xb, *w):
            return impl.bilstm_layer(xf, xb, lengths.to(dev), w[:4], w[4:8], (w[8], w[9]), 0.5, 0.4,
                                     reverse_backward, residual)
        return fn

    o1, g1 = _grads(mk(fused, DEV), ps, DEV)
    o2, g2 = _grads(mk(R, "cpu"), [p.double() for p in ps], "cpu")
    _check(o1, o2, 1e-5)
    _check(g1, g2, 1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_low_precision(dtype):
    gen = torch.Generator().manual_seed(3)
    B, T, P, C = 4, 6, 32, 64
    lengths = torch.tensor([6, 2, 5, 1])
    ps = [p.to(DEV) for p in _params(gen, [(B, T, P)] + [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2, scale=0.3)]
    with torch.autocast("cuda", dtype=dtype):
        of, ob, h, c = fused.bilstm_layer(ps[0], ps[0], lengths, ps[1:5], ps[5:9], None, 3.0, 3.0, True, True)
    assert of.dtype == dtype
    rf, rb, rh, rc = R.bilstm_layer(ps[0].double(), ps[0].double(), lengths.to(DEV), [p.double() for p in ps[1:5]],
                                    [p.double() for p in ps[5:9]], None, 3.0, 3.0, True, True)
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-2
    _check([of, ob, h, c], [rf, rb, rh, rc], tol)
