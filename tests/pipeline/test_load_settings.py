"""Settings given when a saved pipeline is loaded (``spacy.load(path, config=...)``, a config that trains a loaded
pipeline further) are the ones that run: the ``[model]`` block of ``[components.elmo]``, the listener blocks of the
components that listen to it and the biLM of their own that ``nlp.replace_listeners`` gives them. thinc put the
saved attrs over the values built from the config, while ``nlp.config`` showed the values given."""

import numpy
import pytest
import spacy
from spacy.training import Example
from thinc.api import Adam

import spacy_elmo.ops as ops
from spacy_elmo.pipeline import bilm_layer
from spacy_elmo.pipeline.bilm_layer import get_bilm

from .conftest import N_LAYERS, WIDTH, make_docs
from .test_listener import LISTENER, NER, _nlp_with

TEXT = "one two three four five six seven eight nine ten"
V2 = "spacy_elmo.ElmoBiLM.v2"


def _elmo_pipeline(weights, **settings):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(weights), **settings})
    return nlp


def _saved(nlp, path):
    nlp("warm up")
    nlp.to_disk(path)
    return path


def _ner_pipeline(tiny_dir, path, **listener):
    """A pipeline whose ner listens to elmo, initialized and saved at ``path``."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, **listener}})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    return _saved(nlp, path)


def _nodes(component, name):
    return [node for node in component.model.walk() if node.name == name]


def test_model_settings_given_at_load_run(tiny_dir, tmp_path, monkeypatch):
    """batch_tokens, max_window and backend given at load: the model ran the saved 4096, 128 and "auto"."""
    path = _saved(_elmo_pipeline(tiny_dir), tmp_path / "p")
    over = {"batch_tokens": 7, "max_window": 3, "backend": "reference"}
    nlp = spacy.load(path, config={"components": {"elmo": {"model": over}}})
    calls = []
    group = bilm_layer.group_pieces

    def spy(pieces, batch_tokens):
        pieces = list(pieces)
        calls.append(([p.end - p.start for p in pieces], batch_tokens))
        return group(pieces, batch_tokens)

    monkeypatch.setattr(bilm_layer, "group_pieces", spy)
    got = nlp(TEXT)._.elmo
    assert calls == [([3, 3, 3, 1], 7)]
    assert get_bilm(nlp.get_pipe("elmo").model).backend == "reference"
    built = _elmo_pipeline(tiny_dir, model={"@architectures": V2, **over})  # the oracle: built so, not loaded
    numpy.testing.assert_allclose(got, built(TEXT)._.elmo, rtol=1e-6, atol=1e-6)
    assert not numpy.allclose(got, spacy.load(path)(TEXT)._.elmo, atol=1e-3)  # windows of 3 read less context


def test_fused_pipeline_loads_with_the_reference_backend_given_where_the_kernels_are_missing(tiny_dir, tmp_path, monkeypatch):
    """A pipeline saved with backend = "fused" where the kernels load, loaded where they do not: the error says to
    use backend='reference', and the pipeline loaded so ran "fused" (its saved attr), failing at the first call."""
    monkeypatch.setattr(ops, "fused_available", lambda: True)  # saved where they load (nothing runs them)
    nlp = _elmo_pipeline(tiny_dir, model={"@architectures": V2, "backend": "fused"})
    nlp.get_pipe("elmo").load_weights(str(tiny_dir))
    nlp.to_disk(tmp_path / "p")
    monkeypatch.setattr(ops, "fused_available", lambda: False)
    with pytest.raises(RuntimeError, match="backend='reference'"):
        spacy.load(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p", config={"components": {"elmo": {"model": {"backend": "reference"}}}})
    assert get_bilm(loaded.get_pipe("elmo").model).backend == "reference"
    built = _elmo_pipeline(tiny_dir, model={"@architectures": V2, "backend": "reference"})
    numpy.testing.assert_allclose(loaded(TEXT)._.elmo, built(TEXT)._.elmo, rtol=1e-6, atol=1e-6)


def test_listener_settings_given_at_load_run(tiny_dir, tmp_path):
    """dropout, mix_l2 and trainable_mix of a listener block given at load (saved: 0.5, 0.0, true) ran the saved
    values. What runs: the dropout layer in training, a step of the mix, and its gradient's l2 term."""
    path = _ner_pipeline(tiny_dir, tmp_path / "p")

    def load(**listener):
        nlp = spacy.load(path, config={"components": {"ner": {"model": {"tok2vec": listener}}}})
        ner = nlp.get_pipe("ner")
        assert all(nlp.config["components"]["ner"]["model"]["tok2vec"][k] == v for k, v in listener.items())
        return _nodes(ner, "elmo_scalar_mix")[0], _nodes(ner, "elmo_dropout")[0]

    saved_mix, saved_drop = load()
    mix, drop = load(dropout=0.0, mix_l2=0.5, trainable_mix=False)
    ones = [numpy.ones((200, WIDTH), dtype="float32")]
    assert (drop.begin_update(ones)[0][0] == 1).all() and not (saved_drop.begin_update(ones)[0][0] == 1).all()
    X = [numpy.random.RandomState(0).randn(N_LAYERS, 5, WIDTH).astype("float32")]
    w = numpy.asarray([0.5, -1.0, 2.0], dtype="float32")

    def stepped(mix):  # the mix's w after one step, and its gradient
        mix.set_param("w", w.copy())
        Y, backprop = mix.begin_update(X)
        backprop([numpy.ones_like(y) for y in Y])
        grad = mix.get_grad("w").copy() if mix.has_grad("w") else None
        mix.finish_update(Adam(0.1))
        return mix.get_param("w"), grad

    assert numpy.array_equal(stepped(mix)[0], w) and not numpy.array_equal(stepped(saved_mix)[0], w)
    (_, with_l2), (_, without) = stepped(load(mix_l2=0.5)[0]), stepped(load()[0])  # from the saved gamma
    numpy.testing.assert_allclose(with_l2 - without, 2 * 0.5 * w, rtol=1e-5, atol=1e-6)
