"""Stateful mode on both backends against the float64 oracle: batch sizes that change, a batch of
only empty rows, and a module cast or moved after its states exist."""

import contextlib
import functools
import pickle

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.ops import fused_available
from tests.backends import BACKENDS
from tests.bilm.oracle import NumpyElmo, options, write_model_files

BATCHES = [
    [["one", "two", "three"], ["a", "b"], ["x"]],
    [["four"], ["c", "d", "e", "f"]],  # smaller: row 2 keeps its state
    [[], []],  # only empty rows: each still reads <S> </S>
    [["five", "six"], ["g"], ["y", "z"], ["new", "row"]],  # larger: row 3 starts from zeros
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path_factory.mktemp("stateful"), opts, seed=4)
    return opts, opt_path, weight_path


def _worst(out, expected, sentences):
    """The largest error at valid positions, relative to the largest oracle value."""
    worst, scale = 0.0, 1e-30
    for i, sent in enumerate(sentences):
        for layer, act in enumerate(out.activations):
            got = act[i, : len(sent)].detach().double().cpu().numpy()
            worst = max(worst, float(np.abs(got - expected[i][layer]).max(initial=0.0)))
            scale = max(scale, float(np.abs(expected[i][layer]).max(initial=0.0)))
            assert torch.all(act[i, len(sent):] == 0)
    return worst / scale


def _cuda_kernels() -> bool:
    if not (torch.cuda.is_available() and fused_available()):
        return False
    from spacy_elmo.ops import fused

    return fused.built_with_cuda()


@pytest.fixture(scope="module")
def files_tensor_cores(tmp_path_factory):
    """Char dimension 16 and filter counts that are multiples of 16, as in every preset: under
    autocast the char CNN runs on tensor cores (csrc/cuda/char_cnn.cu)."""
    opts = options(filters=((1, 16), (2, 16), (3, 32), (5, 16)), D=16)
    opt_path, weight_path = write_model_files(tmp_path_factory.mktemp("stateful_tc"), opts, seed=5)
    return opts, opt_path, weight_path


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_kernels(), reason="needs a CUDA GPU and the extension's CUDA kernels")
@pytest.mark.parametrize("shapes", ["files", "files_tensor_cores"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16_autocast"])
def test_stateful_batches_on_the_gpu_match_oracle(shapes, autocast, request):
    """The whole biLM on CUDA (fused kernels; the marker ids, the carried states and the new rows'
    zeros on the GPU), stateful over batches of changing sizes, against the float64 oracle; under
    bf16 autocast within bf16's precision. The char CNN runs on tensor cores exactly where the shapes
    allow it under autocast (the profiler names the kernel), so the tensor-core kernel is what matched."""
    from tests.cuda_kernels import launched

    opts, opt_path, weight_path = request.getfixturevalue(shapes)
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="fused").to("cuda")
    oracle = NumpyElmo(opts, weight_path)
    tensor_cores = autocast and shapes == "files_tensor_cores"
    for sentences in BATCHES:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out, names = launched(functools.partial(model, batch_to_ids(sentences).to("cuda")))
        assert any("char_cnn_forward_mma_kernel" in n for n in names) == tensor_cores, names
        assert tensor_cores or any("char_cnn_forward_kernel" in n for n in names), names  # CUDA cores
        assert _worst(out, oracle.batch(sentences, stateful=True), sentences) < (5e-2 if autocast else 1e-5)
    assert model.carried_states[0].device.type == "cuda" and model.carried_states[0].shape[2] == 4


def _after_first_batch(files, backend, context):
    """A stateful model and the oracle after the first batch, which the model read under ``context()``."""
    opts, opt_path, weight_path = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend=backend)
    oracle = NumpyElmo(opts, weight_path)
    with context():
        model(batch_to_ids(BATCHES[0]))
    oracle.batch(BATCHES[0], stateful=True)
    return model, oracle


@pytest.mark.parametrize("backend", BACKENDS)
def test_stateful_batches_match_oracle(files, backend):
    opts, opt_path, weight_path = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend=backend)
    oracle = NumpyElmo(opts, weight_path)
    for sentences in BATCHES:
        with torch.no_grad():
            out = model(batch_to_ids(sentences))
        assert _worst(out, oracle.batch(sentences, stateful=True), sentences) < 1e-5
    assert model.carried_states[0].shape[2] == 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float64, 1e-5), (torch.float16, 5e-3), (torch.bfloat16, 2e-2)],
    ids=["float64", "float16", "bfloat16"],
)
def test_states_follow_a_cast_of_the_module(files, backend, dtype, tolerance):
    """States stored in float32 carry on after .to(dtype) (the reference path raised
    'expected m1 and m2 to have the same dtype')."""
    model, oracle = _after_first_batch(files, backend, torch.no_grad)
    model.to(dtype)
    for sentences in BATCHES[1:]:
        with torch.no_grad():
            out = model(batch_to_ids(sentences))
        assert all(a.dtype == dtype for a in out.activations)
        assert _worst(out, oracle.batch(sentences, stateful=True), sentences) < tolerance
    assert model.carried_states[0].dtype == dtype


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_from_autocast_carry_on_without_it(files, backend):
    """A call under CPU autocast, then a plain one: the states stay in the weights' dtype."""
    opts, opt_path, weight_path = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend=backend)
    oracle = NumpyElmo(opts, weight_path)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(batch_to_ids(BATCHES[0]))
    oracle.batch(BATCHES[0], stateful=True)
    with torch.no_grad():
        out = model(batch_to_ids(BATCHES[1]))
    assert out.activations[-1].dtype == torch.float32
    assert _worst(out, oracle.batch(BATCHES[1], stateful=True), BATCHES[1]) < 2e-2
    with torch.no_grad():
        model(batch_to_ids(BATCHES[1]))
    assert model.carried_states[0].dtype == torch.float32


def test_stateful_backends_agree_and_reset(files):
    if not fused_available():
        pytest.skip("the compiled extension is not built")
    _, opt_path, weight_path = files
    fused = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="fused")
    ref = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference")
    for sentences in BATCHES + BATCHES:
        with torch.no_grad():
            a, b = fused(batch_to_ids(sentences)), ref(batch_to_ids(sentences))
        for x, y in zip(a.activations, b.activations):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    for h, g in zip(fused.carried_states, ref.carried_states):
        torch.testing.assert_close(h, g, atol=1e-5, rtol=0)
    fused.reset_states()
    assert fused.carried_states is None


def _trains_and_matches(model, oracle, sentences):
    """A call with grad (the default) on ``sentences``: matches the oracle and its backward reaches every
    parameter. States carried out of inference mode failed it: 'Inference tensors cannot be saved for backward'."""
    out = model(batch_to_ids(sentences))
    out.activations[-1].sum().backward()
    assert _worst(out, oracle.batch(sentences, stateful=True), sentences) < 1e-5
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_carried_out_of_inference_mode(files, backend):
    """The next call after one under torch.inference_mode() failed: 'Inference tensors cannot be
    saved for backward' (with grad enabled, the default)."""
    model, oracle = _after_first_batch(files, backend, torch.inference_mode)
    _trains_and_matches(model, oracle, BATCHES[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_carried_out_of_inference_mode_through_no_grad(files, backend):
    """Inference mode, then torch.no_grad() with fewer rows (the states it keeps for the other row are
    updated in a copy), then grad with more rows: each matches the oracle and the last one trains."""
    model, oracle = _after_first_batch(files, backend, torch.inference_mode)
    with torch.no_grad():
        out = model(batch_to_ids(BATCHES[1]))
    assert _worst(out, oracle.batch(BATCHES[1], stateful=True), BATCHES[1]) < 1e-5
    _trains_and_matches(model, oracle, BATCHES[3])


@contextlib.contextmanager
def _inference_mode_with_grad():
    """torch.inference_mode() with grad turned back on: the tensors made are inference tensors all the same."""
    with torch.inference_mode(), torch.enable_grad():
        yield


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_from_inference_mode_with_grad_enabled_carry_on_with_grad(files, backend):
    """States kept under torch.inference_mode() with torch.enable_grad() inside it: grad mode was on, so
    they were not marked as maybe inference tensors and the next call with grad failed on the fused
    backend ('Inference tensors cannot be saved for backward')."""
    model, oracle = _after_first_batch(files, backend, _inference_mode_with_grad)
    assert model.carried_states[0].is_inference()
    _trains_and_matches(model, oracle, BATCHES[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_set_from_inference_mode_carry_on_with_grad(files, backend):
    """carried_states set to states read under inference mode: the next call with grad trains. The first
    batch runs with grad, so only the setter can tell the next call that the states may be inference tensors."""
    model, oracle = _after_first_batch(files, backend, contextlib.nullcontext)
    with torch.inference_mode():
        read = tuple(t.clone() for t in model.carried_states)
    model.carried_states = read
    _trains_and_matches(model, oracle, BATCHES[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_of_a_bilm_pickled_without_the_flag_carry_on_with_grad(files, backend):
    """A whole BiLM pickled (torch.save(model)) with carried states before the flag that marks them as maybe
    inference tensors existed: __init__ does not run on unpickling, and its next call with grad raised
    AttributeError. Simulated by pickling a model with the flag removed; its states came from inference mode."""
    model, oracle = _after_first_batch(files, backend, torch.inference_mode)
    del model.__dict__["_states_maybe_inference"]
    old = pickle.loads(pickle.dumps(model))
    _trains_and_matches(old, oracle, BATCHES[1])
