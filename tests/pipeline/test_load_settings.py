"""Settings given when a saved pipeline is loaded (``spacy.load(path, config=...)``, a config that trains a loaded
pipeline further) are the ones that run: ``[components.elmo]`` (the component's cfg), its ``[model]`` block, the
listener blocks of the components that listen to it and the biLM of their own that ``nlp.replace_listeners`` gives
them. spaCy put the saved cfg over the first, thinc the saved attrs over the others, while ``nlp.config`` showed
the values given."""

import numpy
import pytest
import spacy
import srsly
import torch
from spacy.training import Example
from thinc.api import Adam
from thinc.model import serialize_attr

import spacy_elmo.ops as ops
from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.pipeline import bilm_layer
from spacy_elmo.pipeline.bilm_layer import get_bilm
from spacy_elmo.pipeline.loaders import weights_loader
from spacy_elmo.pipeline.settings import Setting

from .conftest import N_LAYERS, TINY, WIDTH, make_docs
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


def _spy_on_groups(monkeypatch):
    """The list that each ``group_pieces`` call of the biLM layer appends (the pieces' lengths, batch_tokens) to."""
    calls = []
    group = bilm_layer.group_pieces

    def spy(pieces, batch_tokens):
        pieces = list(pieces)
        calls.append(([p.end - p.start for p in pieces], batch_tokens))
        return group(pieces, batch_tokens)

    monkeypatch.setattr(bilm_layer, "group_pieces", spy)
    return calls


def test_model_settings_given_at_load_run(tiny_dir, tmp_path, monkeypatch):
    """batch_tokens, max_window and backend given at load: the model ran the saved 4096, 128 and "auto"."""
    path = _saved(_elmo_pipeline(tiny_dir), tmp_path / "p")
    over = {"batch_tokens": 7, "max_window": 3, "backend": "reference"}
    nlp = spacy.load(path, config={"components": {"elmo": {"model": over}}})
    calls = _spy_on_groups(monkeypatch)
    got = nlp(TEXT)._.elmo
    assert calls == [([3, 3, 3, 1], 7)]
    assert get_bilm(nlp.get_pipe("elmo").model).backend == "reference"
    built = _elmo_pipeline(tiny_dir, model={"@architectures": V2, **over})  # the oracle: built so, not loaded
    numpy.testing.assert_allclose(got, built(TEXT)._.elmo, rtol=1e-6, atol=1e-6)
    assert not numpy.allclose(got, spacy.load(path)(TEXT)._.elmo, atol=1e-3)  # windows of 3 read less context


def test_model_settings_run_over_the_plain_attrs_of_a_pipeline_saved_before_settings(tiny_dir, monkeypatch):
    """A pipeline saved before settings.py saved its elmo_bilm attrs as plain values (here batch_tokens 4096,
    max_window 128, backend "auto"); loaded into a model whose config gives other values, the config's run and
    stay settings (a later save leaves them out again)."""
    saved = _elmo_pipeline(tiny_dir)
    saved("warm up")
    data = srsly.msgpack_loads(saved.get_pipe("elmo").model.to_bytes())
    assert data["attrs"][0] == {}  # today's pipelines save none of them
    old = {"batch_tokens": 4096, "max_window": 128, "backend": "auto"}
    data["attrs"][0] = {name: serialize_attr(value, value, name, None) for name, value in old.items()}
    given = {"batch_tokens": 7, "max_window": 3, "backend": "reference"}
    nlp = _elmo_pipeline(tiny_dir, model={"@architectures": V2, **given})
    model = nlp.get_pipe("elmo").model
    model.from_bytes(srsly.msgpack_dumps(data))
    for name, value in given.items():
        assert model.attrs[name] == value and isinstance(model.attrs[name], Setting), name
    calls = _spy_on_groups(monkeypatch)
    nlp(TEXT)
    assert calls == [([3, 3, 3, 1], 7)]
    assert srsly.msgpack_loads(model.to_bytes())["attrs"][0] == {}


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


def _softmax(values):
    e = numpy.exp(numpy.asarray(values, "float64") - max(values))
    return e / e.sum()


#: [components.elmo] setting -> (a value other than the default, whether a loaded pipeline's doc shows it)
_RUNS = {
    "store": ("none", lambda nlp, doc: doc._.elmo is None),
    "store_dtype": ("float32", lambda nlp, doc: doc._.elmo.dtype == numpy.float32),
    "user_hooks": (False, lambda nlp, doc: not doc[0].has_vector),  # spacy.blank has no vectors of its own
    "set_doc_tensor": (True, lambda nlp, doc: doc.tensor.shape == (len(doc), WIDTH)),
    "mix": ([0.0, 0.0, 5.0], lambda nlp, doc: numpy.allclose(doc._.elmo_mix, _softmax([0.0, 0.0, 5.0]))),
    "frozen": (False, lambda nlp, doc: all(p.requires_grad for p in get_bilm(nlp.get_pipe("elmo").model).parameters())),
}


@pytest.mark.parametrize("key", list(_RUNS))
def test_component_settings_given_at_load_run(tiny_dir, tmp_path, key):
    """Each [components.elmo] setting given at load: the saved cfg (the defaults here) ran instead."""
    value, shows = _RUNS[key]
    path = _saved(_elmo_pipeline(tiny_dir), tmp_path / "p")
    nlp = spacy.load(path, config={"components": {"elmo": {key: value}}})
    assert nlp.config["components"]["elmo"][key] == value and nlp.get_pipe("elmo").cfg[key] == value
    assert shows(nlp, nlp("Alice went home ."))
    saved = spacy.load(path)
    assert not shows(saved, saved("Alice went home ."))


def test_weights_setting_given_at_load_is_the_one_initialize_reads(tiny_dir, tmp_path):
    """[components.elmo] weights given at load: initialize with an empty loader path (a training config's
    --paths.elmo left out) loads the component's weights setting, which was the saved one."""
    torch.manual_seed(7)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "other")
    path = _saved(_elmo_pipeline(tiny_dir), tmp_path / "p")
    nlp = spacy.load(path, config={"components": {"elmo": {"weights": str(tmp_path / "other")}}})
    elmo = nlp.get_pipe("elmo")
    assert elmo.cfg["weights"] == str(tmp_path / "other")
    elmo.initialize(lambda: [], nlp=nlp, weights_loader=weights_loader(""))
    assert elmo.source == str(tmp_path / "other")
    other = _elmo_pipeline(tmp_path / "other")
    numpy.testing.assert_array_equal(nlp(TEXT)._.elmo, other(TEXT)._.elmo)


def test_store_given_at_load_is_checked_against_the_listeners(tiny_dir, tmp_path):
    """A store other than "all" given at load, with a component listening: refused as when built so (the saved
    store ran, and the override was shown by nlp.config only)."""
    path = _ner_pipeline(tiny_dir, tmp_path / "p")
    with pytest.raises(ValueError, match="The 'elmo' component stores 'mix' but 'ner' listens to it"):
        spacy.load(path, config={"components": {"elmo": {"store": "mix"}}})
    doc = spacy.load(path, config={"components": {"elmo": {"store_dtype": "float32"}}})("Alice went home .")
    assert doc._.elmo.dtype == numpy.float32 and doc._.elmo.shape == (N_LAYERS, 4, WIDTH)


def _own_bilm_trains(nlp) -> bool:
    """Whether ner's own biLM (``replace_listeners``) gets gradients from a training pass."""
    (own,) = _nodes(nlp.get_pipe("ner"), "elmo_own_bilm")
    bilm = get_bilm(own.layers[0])
    bilm.zero_grad()
    outputs, backprop = own.begin_update([nlp.make_doc("Alice went home .")])
    backprop([numpy.ones_like(o) for o in outputs])
    return any(p.grad is not None and bool(p.grad.abs().sum()) for p in bilm.parameters())


def test_frozen_given_at_load_runs_also_in_the_biLM_replace_listeners_gives(tiny_dir, tmp_path):
    """frozen = false given at load: the biLM stayed frozen (the saved cfg), and replace_listeners wrote
    frozen = false into ner's config but built a frozen copy; saved and loaded, its own block's frozen runs."""
    path = _ner_pipeline(tiny_dir, tmp_path / "p")
    nlp = spacy.load(path, config={"components": {"elmo": {"frozen": False}}})
    assert all(p.requires_grad for p in get_bilm(nlp.get_pipe("elmo").model).parameters())
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    assert nlp.config["components"]["ner"]["model"]["tok2vec"]["frozen"] is False and _own_bilm_trains(nlp)
    nlp.to_disk(tmp_path / "replaced")
    assert _own_bilm_trains(spacy.load(tmp_path / "replaced"))
    frozen = spacy.load(tmp_path / "replaced", config={"components": {"ner": {"model": {"tok2vec": {"frozen": True}}}}})
    assert not _own_bilm_trains(frozen)


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
