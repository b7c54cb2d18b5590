"""The elmo component: gaps a mutation audit of component.py found (each test fails with its mutant)."""

import numpy
import pytest
import spacy
import torch

from spacy_elmo import BiLM, BiLMConfig

from .conftest import N_LAYERS, TINY, WIDTH


def test_a_mix_of_large_weights_stays_finite(tiny_dir):
    """mix_weights subtracts the largest weight before exp: [0, 0, 100] overflowed float32 to inf, and the
    softmax, the stored mix, token vectors and doc.tensor to NaN, without it."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "mix": [0.0, 0.0, 100.0], "store": "mix",
                                 "store_dtype": "float32", "set_doc_tensor": True})
    doc = nlp("a b c")
    numpy.testing.assert_allclose(nlp.get_pipe("elmo").mix_weights(), [0.0, 0.0, 1.0], atol=1e-30)
    assert numpy.isfinite(doc._.elmo).all() and numpy.isfinite(doc.tensor).all()
    assert doc.tensor.shape == (3, WIDTH)


def _other_weights(tmp_path):
    torch.manual_seed(1)
    BiLM(BiLMConfig(**TINY), backend="reference").save(tmp_path / "other")
    return tmp_path / "other"


def _pipeline(weights, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(weights), "store_dtype": "float32", **config})
    return nlp


def test_the_components_own_bytes_carry_its_vocab_unless_excluded(tiny_dir, tmp_path):
    """elmo.from_bytes / from_disk set the vocab they read once the weights are accepted (a vector of the saving
    pipeline's vocab reaches the loading one), and leave it alone under exclude=["vocab"]."""
    saving = _pipeline(tiny_dir)
    saving.vocab.set_vector("riverbank", numpy.array([1.0, 2.0, 3.0], dtype="float32"))
    saving("warm up")
    data = saving.get_pipe("elmo").to_bytes()
    saving.get_pipe("elmo").to_disk(tmp_path / "elmo")
    loads = (lambda elmo, **kw: elmo.from_bytes(data, **kw), lambda elmo, **kw: elmo.from_disk(tmp_path / "elmo", **kw))
    for load in loads:
        loading = _pipeline(tiny_dir)
        load(loading.get_pipe("elmo"), exclude=["vocab"])
        assert not loading.vocab.has_vector("riverbank")
        loading = _pipeline(tiny_dir)
        load(loading.get_pipe("elmo"))
        assert loading.vocab.has_vector("riverbank")
        numpy.testing.assert_array_equal(loading.vocab.get_vector("riverbank"), [1.0, 2.0, 3.0])


def test_the_components_bytes_without_its_model_keep_the_weights_serving(tiny_dir, tmp_path):
    """exclude=["model"] loads no weights: the ones serving stay (their layers, their source); without it, the saved
    weights replace them."""
    saving = _pipeline(_other_weights(tmp_path))
    text = "I went to the bank ."
    saved_layers = saving(text)._.elmo
    data = saving.get_pipe("elmo").to_bytes()
    saving.get_pipe("elmo").to_disk(tmp_path / "elmo")
    loads = (lambda elmo, **kw: elmo.from_bytes(data, **kw), lambda elmo, **kw: elmo.from_disk(tmp_path / "elmo", **kw))
    for load in loads:
        loading = _pipeline(tiny_dir)
        own_layers = loading(text)._.elmo
        assert not numpy.allclose(own_layers, saved_layers)
        load(loading.get_pipe("elmo"), exclude=["model"])
        numpy.testing.assert_array_equal(loading(text)._.elmo, own_layers)
        assert loading.get_pipe("elmo").source == str(tiny_dir)
        load(loading.get_pipe("elmo"))
        numpy.testing.assert_array_equal(loading(text)._.elmo, saved_layers)


def test_a_fine_tuned_update_that_no_listener_trains_on_keeps_no_autograd_batch(tiny_dir):
    """A fine-tuned elmo whose every listening component sits out the update (exclude=) runs the biLM without
    autograd and keeps no batch waiting for gradients (its graph held every activation until the next update)."""
    from spacy.training import Example

    from spacy_elmo.pipeline.component import _BATCHES

    from .conftest import make_docs
    from .test_listener import _fine_tuned_ner

    nlp = _fine_tuned_ner(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    optimizer = nlp.initialize(lambda: examples)
    elmo = nlp.get_pipe("elmo")
    nlp.update(examples, sgd=optimizer, exclude=["ner"])
    assert _BATCHES.get(elmo) is None
    nlp.update(examples, sgd=optimizer)  # the listener trains: the batch waits for its gradient, then steps
    assert _BATCHES.get(elmo) is None and elmo.source.endswith(", fine-tuned")


def _ready_to_fine_tune(nlp):
    """``nlp`` initialized on four examples with a counting optimizer: (examples, optimizer, elmo, its biLM, a copy
    of the biLM's parameters before any step)."""
    from spacy.training import Example

    from spacy_elmo.pipeline.bilm_layer import get_bilm

    from .conftest import make_docs
    from .test_listener import _CountingOptimizer

    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    optimizer = _CountingOptimizer(nlp.initialize(lambda: examples))
    elmo = nlp.get_pipe("elmo")
    bilm = get_bilm(elmo.model)
    before = {name: p.detach().clone() for name, p in bilm.named_parameters()}
    return examples, optimizer, elmo, bilm, before


def test_a_fine_tuning_batch_no_listener_sent_a_gradient_for_takes_no_step(tiny_dir):
    """A batch that no listener sent a gradient for (elmo updated alone, twice) runs no backward and so no step:
    a backward of zeros marked the weights as stepped and the next finish_update stepped the optimizer on them
    (moving weights with a momentum, and marking them fine-tuned)."""
    from .test_listener import _fine_tuned_ner

    nlp = _fine_tuned_ner(tiny_dir)
    examples, optimizer, elmo, bilm, before = _ready_to_fine_tune(nlp)
    elmo.update(examples)
    elmo.update(examples)
    elmo.finish_update(optimizer)
    shim = elmo.model.layers[0].shims[0]
    assert not [key for key in optimizer.calls if key[0] == shim.id]
    assert all(torch.equal(before[name], p.detach()) for name, p in bilm.named_parameters())
    assert not elmo.source.endswith(", fine-tuned")


def test_weights_a_frozen_component_loads_from_a_saved_pipeline_stay_frozen(tiny_dir, tmp_path):
    """spacy.load / from_bytes of a frozen elmo give weights that require no gradient (else the biLM counts as
    training: no layer cache, no token cache, autograd at every call); a fine-tuned one's require them."""
    from spacy_elmo.pipeline.bilm_layer import get_bilm

    for frozen in (True, False):
        nlp = _pipeline(tiny_dir, frozen=frozen)
        nlp("warm up")
        nlp.to_disk(tmp_path / f"p{frozen}")
        from_bytes = _pipeline(tiny_dir, frozen=frozen).from_bytes(nlp.to_bytes())
        for loaded in (spacy.load(tmp_path / f"p{frozen}"), from_bytes):
            assert {p.requires_grad for p in get_bilm(loaded.get_pipe("elmo").model).parameters()} == {not frozen}


def test_bytes_of_a_pipeline_saved_before_first_use_carry_the_weights(tiny_dir, tmp_path):
    """nlp.to_bytes() as the first thing after add_pipe (no to_disk or call before it to load the weights) holds
    the weights: loaded where the weights directory is gone, the pipeline runs them (they were missing)."""
    import shutil

    shutil.copytree(tiny_dir, tmp_path / "weights")
    text = "I went to the bank ."
    expected = _pipeline(tiny_dir)(text)._.elmo
    nlp = _pipeline(tmp_path / "weights")
    data = nlp.to_bytes()
    shutil.rmtree(tmp_path / "weights")
    loaded = _pipeline(tmp_path / "weights").from_bytes(data)
    numpy.testing.assert_array_equal(loaded(text)._.elmo, expected)


def test_finish_update_steps_on_the_gradients_of_the_listeners_that_sent_them(tiny_dir):
    """Of two listening components, one trained on the batch (its update called alone) before elmo's finish_update:
    that finish_update runs the biLM's backward on the gradient that came and steps (it waited for the other
    listener, stepping an update late or never)."""
    from .test_listener import _fine_tuned_ner_and_textcat

    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples, optimizer, elmo, bilm, before = _ready_to_fine_tune(nlp)
    elmo.update(examples)
    nlp.get_pipe("ner").update(examples)
    elmo.finish_update(optimizer)
    shim = elmo.model.layers[0].shims[0]
    assert set(n for key, n in optimizer.calls.items() if key[0] == shim.id) == {1}
    assert any(not torch.equal(before[name], p.detach()) for name, p in bilm.named_parameters())


def test_lookups_that_fail_midway_through_being_set_are_put_back(tiny_dir, monkeypatch):
    """spaCy's Lookups.from_bytes empties the tables before it reads the saved ones: one that fails there (bytes
    msgpack cannot read) left the pipeline's shared lookups empty; they are put back as they were."""
    saved = _pipeline(tiny_dir)
    saved.vocab.lookups.add_table("saved", {"river": "RIVER"})
    saved("warm up")
    data = saved.get_pipe("elmo").to_bytes()
    nlp = _pipeline(tiny_dir)
    nlp("warm up")
    nlp.vocab.lookups.add_table("mine", {"bank": "BANK"})
    lookups = nlp.vocab.lookups

    def fails_midway(data, **kwargs):
        lookups._tables = {}  # as spaCy's does before reading
        raise ValueError("unreadable lookups")

    monkeypatch.setattr(lookups, "from_bytes", fails_midway)
    with pytest.raises(ValueError, match="unreadable lookups"):
        nlp.get_pipe("elmo").from_bytes(data)
    assert nlp.vocab.lookups.has_table("mine") and nlp.vocab.lookups.get_table("mine")["bank"] == "BANK"


@pytest.mark.parametrize("store", ["mix", "none"])
def test_a_listener_of_an_elmo_that_stores_fewer_than_all_layers_is_refused(tiny_dir, store):
    """A listening component reads every layer: store = "mix" (one mixed layer) is refused as "none" is."""
    from .test_listener import LISTENER, NER

    nlp = _pipeline(tiny_dir, store=store)
    with pytest.raises(ValueError, match=f"stores '{store}' but 'ner' listens to it and needs all layers"):
        nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})


def test_a_listener_the_component_sized_is_resized_by_weights_its_bytes_load(tiny_dir, tmp_path):
    """elmo.from_bytes of weights of another shape (two output layers, not three) resizes the listeners it sized,
    nothing being built on them yet: they read the new layers (they kept the old sizes)."""
    from spacy_elmo.pipeline.bilm_layer import get_bilm

    from .test_listener import LISTENER, NER

    torch.manual_seed(2)
    BiLM(BiLMConfig(**{**TINY, "n_layers": 1}), backend="reference").save(tmp_path / "shallow")
    shallow = _pipeline(tmp_path / "shallow")
    shallow("warm up")
    data = shallow.get_pipe("elmo").to_bytes()
    nlp = _pipeline(tiny_dir)
    nlp("warm up")
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    elmo = nlp.get_pipe("elmo")
    (listener,) = elmo.listeners
    assert (listener.get_dim("nL"), listener.get_dim("nO")) == (N_LAYERS, WIDTH)
    elmo.from_bytes(data, exclude=["vocab"])
    assert get_bilm(elmo.model).config.n_output_layers == 2
    assert (listener.get_dim("nL"), listener.get_dim("nO")) == (2, WIDTH)


def test_an_update_that_trains_nothing_reports_the_loss_of_elmo_as_zero(nlp):
    """A frozen elmo's update (the default; or one no listener trains on) computes no loss, but reports 0.0 under its
    name, as spaCy's trainable pipes do: spacy train's console logger reads losses[NAME] of every trainable
    component (a KeyError at the first logged step without it)."""
    from spacy.training import Example

    examples = [Example.from_dict(nlp.make_doc("The bank of the river ."), {})]
    assert nlp.update(examples) == {"elmo": 0.0}
    assert nlp.get_pipe("elmo").update(examples, losses={"ner": 1.5}) == {"ner": 1.5, "elmo": 0.0}


def test_layers_predicted_before_weights_of_other_depth_were_loaded_are_mixed_by_their_own_count(nlp, tmp_path):
    """set_annotations of layers predicted before load_weights set a biLM with another number of layers (another
    thread's load between the two; a caller of predict and set_annotations apart) mixes them by their own count of
    layers: the mix of the new weights' count failed to broadcast (store "mix", doc.tensor) or was stored beside
    layers it does not fit (doc._.elmo_mix)."""
    torch.manual_seed(3)
    BiLM(BiLMConfig(**{**TINY, "n_layers": 3})).save(tmp_path / "deeper")
    elmo = nlp.get_pipe("elmo")
    docs = [nlp.make_doc("The bank of the river .")]
    outputs = elmo.predict(docs)
    assert len(outputs[0]) == N_LAYERS
    elmo.load_weights(str(tmp_path / "deeper"))
    assert elmo.mix_weights().shape == (4,)
    elmo.set_annotations(docs, outputs)
    assert docs[0]._.elmo.shape == (N_LAYERS, 6, WIDTH)
    numpy.testing.assert_allclose(docs[0]._.elmo_mix, numpy.full(N_LAYERS, 1 / N_LAYERS), rtol=1e-6)


def test_a_late_gradient_for_an_earlier_batch_leaves_the_current_batch_waiting(tiny_dir):
    """A listener's backprop of an earlier batch called after elmo's next update (a training loop of one's own that
    keeps it) is dropped: the earlier batch's backward already ran. Its last gradient took the current batch's
    backward (none came for it yet) along with it, so that the gradient the current batch then got was lost and
    finish_update took no step."""
    from .test_listener import _fine_tuned_ner

    nlp = _fine_tuned_ner(tiny_dir)
    examples, optimizer, elmo, bilm, before = _ready_to_fine_tune(nlp)
    (listener,) = elmo.listeners
    elmo.update(examples[:2])
    late, shapes = listener._backprop, [o.shape for o in listener._outputs]
    elmo.update(examples[2:])
    late([elmo.model.ops.alloc3f(*shape) + 1.0 for shape in shapes])
    nlp.get_pipe("ner").update(examples[2:])  # the current batch's gradient
    elmo.finish_update(optimizer)
    shim = elmo.model.layers[0].shims[0]
    assert set(n for key, n in optimizer.calls.items() if key[0] == shim.id) == {1}
    assert any(not torch.equal(before[name], p.detach()) for name, p in bilm.named_parameters())


def test_find_listeners_of_a_component_outside_the_pipeline_links_its_star_listener(nlp):
    """elmo.find_listeners(component) called by hand (spaCy's Tok2Vec API) for a component of no pipeline elmo is in
    links its "*" listener, as spaCy's Tok2Vec.find_listeners does: nothing tells of a nearer elmo component. (In a
    pipeline, spaCy's relinking asks only for the components after elmo.)"""
    from spacy_elmo.pipeline.listener import ElmoListener

    from .test_listener import LISTENER, NER

    ner = spacy.blank("en").add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    (listener,) = [node for node in ner.model.walk() if isinstance(node, ElmoListener)]
    elmo = nlp.get_pipe("elmo")
    assert elmo.listening_components == []
    elmo.find_listeners(ner)
    assert elmo.listener_map == {"ner": [listener]} and listener.upstream == "elmo"
