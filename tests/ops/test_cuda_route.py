"""The fused ops' CUDA calls that run the reference instead (spacy_elmo/ops/cuda_route.py), on the CPU:
the decision from plain facts, and the wrappers with the device and the build's facts faked. No spaCy."""

import warnings

import pytest
import torch

from spacy_elmo.errors import Errors, Warnings
from spacy_elmo.ops import cuda_route
from spacy_elmo.ops import reference as R

from .test_fused_cpu import char_params, lstm_params, random_char_ids

fused = pytest.importorskip("spacy_elmo.ops.fused", reason="spacy_elmo._C is not built")

T4_OPTIN = 65536  # bytes of opt-in shared memory per block on sm_75 (T4)
NO_KERNELS = Warnings.W_FUSED_NO_CUDA_KERNELS.format(cuda=torch.version.cuda)


@pytest.mark.parametrize("facts, expected", [
    (dict(device_type="cpu", cuda_kernels=False, n_filters=40, width=1000, dim=512, shmem_limit=1), None),
    (dict(device_type="cuda", cuda_kernels=False), NO_KERNELS),
    (dict(device_type="cuda", cuda_kernels=True), None),
    (dict(device_type="cuda", cuda_kernels=True, n_filters=16, width=50, dim=16, shmem_limit=T4_OPTIN), None),
    (dict(device_type="cuda", cuda_kernels=True, n_filters=17, width=50, dim=16, shmem_limit=T4_OPTIN),
     Warnings.W_FUSED_CUDA_MANY_FILTERS.format(n=17, limit=16)),
    # W * D * 4 = 102400 > 65536 (T4); 51200 fits
    (dict(device_type="cuda", cuda_kernels=True, n_filters=7, width=50, dim=512, shmem_limit=T4_OPTIN),
     Warnings.W_FUSED_CUDA_SHARED_MEMORY.format(need=102400, width=50, dim=512, limit=T4_OPTIN, fit=16384)),
    (dict(device_type="cuda", cuda_kernels=True, n_filters=7, width=50, dim=256, shmem_limit=T4_OPTIN), None),
    (dict(device_type="cuda", cuda_kernels=True, n_filters=7, width=64, dim=256, shmem_limit=T4_OPTIN), None),
    (dict(device_type="cuda", cuda_kernels=True, n_filters=7, width=1000, dim=64, shmem_limit=None), None),
])
def test_reason_from_plain_facts(facts, expected):
    assert cuda_route.reason(**facts) == expected


@pytest.fixture
def fake_gpu(monkeypatch):
    """Every tensor counts as on CUDA, the warnings are fresh, and the kernel calls are recorded."""

    class Recorder:
        def __init__(self, real):
            self.real, self.called = real, []

        def __getattr__(self, name):
            self.called.append(name)
            return getattr(self.real, name)

    monkeypatch.setattr(cuda_route, "on_cuda", lambda device: True)
    monkeypatch.setattr(cuda_route, "_warned", set())
    monkeypatch.setattr(cuda_route, "shared_memory_limit", lambda device: T4_OPTIN)
    ops = Recorder(fused._ops)
    monkeypatch.setattr(fused, "_ops", ops)
    return ops


def _char_case(filters, n_chars=20, dim=16):
    gen = torch.Generator().manual_seed(3)
    ids = random_char_ids(gen, 6, n_chars=n_chars)
    emb, ws, bs = char_params(gen, filters, dim)
    return ids, emb, ws, bs


def _run_all(dtype=torch.float32):
    """Every fused wrapper and the reference on one input each: [(fused, reference)] results with gradients."""
    gen = torch.Generator().manual_seed(5)
    ids, emb, ws, bs = _char_case([(1, 4), (3, 8)])
    x = torch.randn(2, 3, 12, generator=gen)
    hw, hb = torch.randn(24, 12, generator=gen) * 0.3, torch.randn(24, generator=gen) * 0.1
    lengths = torch.tensor([3, 1])
    xl = torch.randn(2, 3, 4, generator=gen)
    p = list(lstm_params(gen, 4, 5, 4))
    q = list(lstm_params(gen, 4, 5, 4))
    pairs = []
    for impl in (fused, R):
        leaves = [t.clone().requires_grad_() for t in (emb, x, xl)]
        outs = [impl.char_cnn(ids, leaves[0], ws, bs, "relu"), impl.highway(leaves[1], hw, hb),
                *impl.lstm_layer(leaves[2], lengths, *p, cell_clip=3.0, proj_clip=3.0),
                *impl.bilstm_layer(leaves[2], leaves[2].flip(1), lengths, p, q)]
        sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
        pairs.append((outs, [t.grad for t in leaves]))
    return pairs


def test_a_build_without_cuda_kernels_runs_the_reference_on_cuda_and_warns_once(fake_gpu, monkeypatch):
    """A CPU-only spacy_elmo._C (setup.py found no nvcc) under backend 'auto': the CUDA ops do not exist
    (torch's "Could not run 'spacy_elmo::char_cnn_forward' ... 'CUDA' backend"), so every fused op runs
    the reference, bit for bit, with one warning naming the rebuild."""
    monkeypatch.setattr(fused, "built_with_cuda", lambda: False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (f_outs, f_grads), (r_outs, r_grads) = _run_all()
    assert fake_gpu.called == []
    for a, e in zip(f_outs + f_grads, r_outs + r_grads):
        assert torch.equal(a, e)
    assert [str(w.message) for w in caught] == [NO_KERNELS]
    # the rebuild, for a checkout and for an installed copy (an sdist from an index: past pip's wheel cache)
    assert "SPACY_ELMO_CUDA=1 set: in a source checkout `SPACY_ELMO_CUDA=1 pip install --no-cache-dir" in NO_KERNELS
    assert "--no-cache-dir --no-build-isolation --no-deps --force-reinstall SOURCE" in NO_KERNELS


def test_kernels_the_gpu_runs_are_called(fake_gpu, monkeypatch):
    monkeypatch.setattr(fused, "built_with_cuda", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run_all()
    assert {"char_cnn_forward", "highway_forward", "lstm_forward"} <= set(fake_gpu.called)


@pytest.mark.parametrize("n_filters, n_chars, dim, message", [
    (17, 20, 16, Warnings.W_FUSED_CUDA_MANY_FILTERS.format(n=17, limit=16)),
    (2, 50, 512, Warnings.W_FUSED_CUDA_SHARED_MEMORY.format(need=102400, width=50, dim=512, limit=T4_OPTIN,
                                                           fit=16384)),
    (16, 50, 256, None),
])
def test_char_cnn_past_the_cuda_kernels_limits_runs_the_reference(fake_gpu, monkeypatch, n_filters, n_chars, dim,
                                                                   message):
    """More than 16 filters (cuda::kMaxFilters: the CUDA op refused them) or a token whose W * D * 4 bytes
    pass the GPU's opt-in shared memory (the launch failed with 'invalid argument'): the reference, warned
    once; within both limits the kernel."""
    monkeypatch.setattr(fused, "built_with_cuda", lambda: True)
    ids, emb, ws, bs = _char_case([(1 + k % 7, 2) for k in range(n_filters)], n_chars=n_chars, dim=dim)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [fused.char_cnn(ids, emb, ws, bs, "tanh") for _ in range(2)]
    expected = R.char_cnn(ids, emb, ws, bs, "tanh")
    if message is None:
        assert fake_gpu.called == ["char_cnn_forward"] * 2 and caught == []
        torch.testing.assert_close(outs[0], expected)
    else:
        assert fake_gpu.called == [] and [str(w.message) for w in caught] == [message]
        assert all(torch.equal(o, expected) for o in outs)


def test_cpu_tensors_run_the_kernels_whatever_the_build():
    """The real device check: CPU tensors never take the route (a CPU-only build runs them fused)."""
    assert not cuda_route.reference_instead(torch.device("cpu"), lambda: False, 40, 1000, 512)
    assert cuda_route.on_cuda(torch.device("cuda")) and not cuda_route.on_cuda(torch.device("meta"))


def test_explicit_fused_on_cuda_with_a_build_without_cuda_kernels_raises(fake_gpu, monkeypatch):
    """backend='fused' asked for the kernels: a clear error naming the rebuild (as resolve_backend's for
    'fused' without the extension), where 'auto' (handed on as ops.AUTO_FUSED) runs the reference."""
    from spacy_elmo import ops

    monkeypatch.setattr(fused, "built_with_cuda", lambda: False)
    ids, emb, ws, bs = _char_case([(1, 4), (2, 4)])
    x = torch.randn(3, 8)
    hw, hb = torch.randn(16, 8), torch.randn(16)
    expected = Errors.E_FUSED_NO_CUDA_KERNELS.format(cuda=torch.version.cuda)
    for call in (lambda b: ops.char_cnn(ids, emb, ws, bs, "relu", backend=b),
                 lambda b: ops.char_cnn(ids, embedding=emb, weights=ws, biases=bs, backend=b),
                 lambda b: ops.highway(x, hw, hb, backend=b)):
        with pytest.raises(RuntimeError) as err:
            call("fused")
        assert str(err.value) == expected
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(ops.AUTO_FUSED)
    assert fake_gpu.called == []
    # the rebuild, for a checkout and for an installed copy (an sdist from an index: past pip's wheel cache)
    assert "SPACY_ELMO_CUDA=1 set: in a source checkout `SPACY_ELMO_CUDA=1 pip install --no-cache-dir" in expected
    assert "--no-cache-dir --no-build-isolation --no-deps --force-reinstall SOURCE" in expected


def test_bilm_auto_runs_the_reference_and_fused_raises_on_cuda_with_a_build_without_cuda_kernels(fake_gpu,
                                                                                                   monkeypatch):
    from spacy_elmo import BiLM, BiLMConfig, batch_to_ids, ops

    monkeypatch.setattr(fused, "built_with_cuda", lambda: False)
    cfg = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=1, n_layers=2)
    torch.manual_seed(0)
    auto = BiLM(cfg, backend="auto")
    assert auto.backend == "fused" and auto.token_encoder.backend == auto.lstm.backend == ops.AUTO_FUSED
    ref = BiLM(cfg, backend="reference")
    ref.load_state_dict(auto.state_dict())
    ids = batch_to_ids([["a", "bc"], ["d"]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = auto(ids).activations
    assert [str(w.message) for w in caught] == [NO_KERNELS] and fake_gpu.called == []
    assert all(torch.equal(a, e) for a, e in zip(got, ref(ids).activations))
    explicit = BiLM(cfg, backend="fused")
    assert explicit.token_encoder.backend == explicit.lstm.backend == "fused"
    with pytest.raises(RuntimeError, match="backend='fused' on CUDA tensors needs the CUDA kernels"):
        explicit(ids)
