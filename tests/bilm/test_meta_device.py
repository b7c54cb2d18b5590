"""A model built on the meta device (no memory) and given its weights afterwards, as large models are
loaded: ``with torch.device("meta"): model = BiLM(config)``, then ``model.to_empty(device=...)`` and
``load_state_dict``, or ``load_state_dict(..., assign=True)``."""

import pytest
import torch

from spacy_elmo import BiLM, ScalarMix, batch_to_ids
from spacy_elmo.allennlp_compat import Elmo
from tests.backends import BACKENDS
from tests.bilm.oracle import NumpyElmo, options, write_model_files
from tests.bilm.test_model_oracle import SENTENCES, assert_matches


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("way", ["to_empty", "assign"])
def test_bilm_built_on_meta_then_loaded_matches_oracle(tmp_path, backend, way):
    """The sentence markers' ids are a buffer no state_dict holds: to_empty() left them uninitialised
    memory (<S> and </S> read as garbage tokens: wrong vectors, or an id-range error from the kernel),
    and assign=True left them on the meta device ("Cannot copy out of meta tensor")."""
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    loaded = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    with torch.device("meta"):
        model = BiLM(loaded.config, backend=backend)
    if way == "to_empty":
        model.to_empty(device="cpu")
        model.load_state_dict(loaded.state_dict())
    else:
        model.load_state_dict(loaded.state_dict(), assign=True)
    assert torch.equal(model.marker_ids, loaded.marker_ids)
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert_matches(out, NumpyElmo(opts, weight_path).batch(SENTENCES), SENTENCES)


def test_elmo_built_on_meta_then_assigned_gives_the_same_vectors(tmp_path):
    """ScalarMix checked its initial weights on the default device: under torch.device("meta") that
    was "Tensor.item() cannot be called on meta tensors", so no Elmo could be built there."""
    opt_path, weight_path = write_model_files(tmp_path, options())
    elmo = Elmo(opt_path, weight_path, 2, dropout=0.0, stateful=False)
    with torch.no_grad():
        for k, mix in enumerate((elmo.scalar_mix_0, elmo.scalar_mix_1)):
            mix.scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]) * (k + 1))
            mix.gamma.fill_(0.7 + k)
    with torch.device("meta"):
        assert ScalarMix(3).gamma.is_meta
        meta = Elmo(None, None, 2, dropout=0.0, module=BiLM(elmo.bilm.config), stateful=False)
    meta.load_state_dict(elmo.state_dict(), assign=True)
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        expected, got = elmo(ids), meta(ids)
    assert torch.equal(got["mask"], expected["mask"])
    for a, b in zip(got["elmo_representations"], expected["elmo_representations"]):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_marker_ids_stay_the_buffer_that_apply_kept():
    """_apply replaced the marker ids with a new tensor every time: after share_memory() they were the one
    buffer not in shared memory, and a .to() where the model already was, under inference_mode, made them
    an inference tensor. (to_empty() still writes them: test_bilm_built_on_meta_then_loaded_matches_oracle.)"""
    from tests.bilm.test_config import TINY

    model = BiLM(TINY)
    expected = model.marker_ids.clone()
    model.share_memory()
    assert model.marker_ids.is_shared()
    with torch.inference_mode():
        model.to("cpu")
    assert not model.marker_ids.is_inference()
    assert torch.equal(model.marker_ids, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bilm_pickled_without_the_marker_hook_follows_assigned_weights(backend):
    """A whole BiLM pickled before the load_state_dict post-hook existed (torch.save(model)) lacks it, as
    __init__ does not run on unpickling: its marker ids stayed on meta under load_state_dict(assign=True)
    ("Cannot copy out of meta tensor"). Simulated by pickling a model with the hook removed."""
    import pickle

    from tests.bilm.test_config import TINY

    model = BiLM(TINY, backend=backend)
    model._load_state_dict_post_hooks.clear()
    old = pickle.loads(pickle.dumps(model)).to("meta")
    old.load_state_dict(model.state_dict(), assign=True)
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(old(ids).activations[2], model(ids).activations[2], atol=0, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_type_keeps_the_marker_ids_integer(tmp_path, backend):
    """nn.Module.type(dtype) converts integer buffers too: once _apply copied the constant into the
    float64 tensor it returned, and the next forward failed ("Index put requires the source and
    destination dtypes match"). The model converted by .type() gives what .double() gives."""
    opt_path, weight_path = write_model_files(tmp_path, options())
    typed = BiLM.from_allennlp(opt_path, weight_path, backend=backend).type(torch.float64)
    doubled = BiLM.from_allennlp(opt_path, weight_path, backend=backend).double()
    assert typed.marker_ids.dtype == torch.int64
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        for a, b in zip(typed(ids).activations, doubled(ids).activations):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
