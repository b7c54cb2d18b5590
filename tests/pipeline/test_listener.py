"""Listeners: ScalarMix layer, ELMo dropout, ner/textcat/textcat_multilabel/spancat, errors."""

import collections
import gc
import re
import warnings
import weakref

import numpy
import pytest
import spacy
import torch
from spacy.cli.debug_model import debug_model
from spacy.language import Language
from spacy.schemas import ConfigSchemaTraining
from spacy.training import Example
from spacy.training.loop import train_while_improving
from spacy.util import registry
from thinc.api import SGD, Adam, fix_random_seed, set_dropout_rate

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm.token_cache import run_rows
from spacy_elmo.pipeline.bilm_layer import DEFAULT_LEARN_RATE_SCALE, get_bilm, get_runner, get_shim
from spacy_elmo.pipeline.component import ElmoComponent
from spacy_elmo.pipeline.doc_data import set_doc_data
from spacy_elmo.pipeline.listener import ElmoListener
from spacy_elmo.pipeline.scalar_mix import elmo_dropout, scalar_mix_layer

from .conftest import TINY, make_docs

LISTENER = {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": "*", "width": None}
TOK2VEC = {
    "@architectures": "spacy_elmo.ElmoTok2Vec.v1",
    "embed": {
        "@architectures": "spacy.MultiHashEmbed.v2",
        "width": 16,
        "attrs": ["NORM", "SHAPE"],
        "rows": [500, 100],
        "include_static_vectors": False,
    },
    "elmo": LISTENER,
    "encode": {
        "@architectures": "spacy.MaxoutWindowEncoder.v2",
        "width": 16,
        "depth": 1,
        "window_size": 1,
        "maxout_pieces": 2,
    },
}


def test_elmo_tok2vec_is_the_concatenation_through_a_normalised_three_piece_maxout_then_the_encoder():
    """ElmoTok2Vec.v1 against a float64 oracle from its own parameters: ``[x_k; ELMo_k]`` (embed's columns first),
    a 3-piece Maxout down to the encoder's width (W ``(nO, 3, nI)``, the width a saved pipeline's weights have),
    thinc's LayerNorm, then the encoder."""
    from thinc.api import Linear, Model, with_array

    from spacy_elmo.pipeline.architectures import ElmoTok2Vec

    rng = numpy.random.default_rng(3)
    docs = [spacy.blank("en").make_doc(text) for text in ("Alice lives here .", "Bob went")]
    embedded = [rng.standard_normal((len(doc), 5)).astype("float32") for doc in docs]
    mixed = [rng.standard_normal((len(doc), 4)).astype("float32") for doc in docs]

    def fixed(name, arrays, width):
        return Model(name, lambda model, X, is_train: (arrays, lambda dY: []), dims={"nO": width})

    encode = with_array(Linear(nO=6, nI=6))
    model = ElmoTok2Vec(fixed("embed", embedded, 5), fixed("elmo", mixed, 4), encode)
    model.initialize(X=docs)
    assert model.get_dim("nO") == 6
    maxout, norm = [node for node in model.walk() if node.name in ("maxout", "layernorm")]
    for node, name in [(maxout, "b"), (norm, "G"), (norm, "b"), (encode.layers[0], "b")]:
        node.set_param(name, rng.standard_normal(node.get_param(name).shape).astype("float32"))
    W = maxout.get_param("W").astype(numpy.float64).reshape(6, 3, 9)  # nO, nP, nI
    b = maxout.get_param("b").astype(numpy.float64).reshape(6, 3)
    for X, Y in zip([numpy.concatenate([e, m], axis=1).astype(numpy.float64) for e, m in zip(embedded, mixed)],
                    model.predict(docs)):
        h = (numpy.einsum("opi,ni->nop", W, X) + b).max(axis=2)
        h = (h - h.mean(axis=1, keepdims=True)) / numpy.sqrt(h.var(axis=1, keepdims=True) + 1e-8)
        h = h * norm.get_param("G") + norm.get_param("b")
        want = h @ encode.layers[0].get_param("W").T.astype(numpy.float64) + encode.layers[0].get_param("b")
        numpy.testing.assert_allclose(model.ops.to_numpy(Y), want, rtol=1e-4, atol=1e-5)


def _numpy_layer_norm(X):
    """float64 oracle of elmo-spec §7's layer norm on one doc ``(L + 1, n, D)``: one mean/var per layer."""
    X = X.astype(numpy.float64)
    mean = X.mean(axis=(1, 2), keepdims=True)
    var = ((X - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    return (X - mean) / numpy.sqrt(var + 1e-13)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_layer_gradients(layer_norm):
    mix = scalar_mix_layer(layer_norm=layer_norm)
    assert mix.name == "elmo_scalar_mix"
    rng = numpy.random.default_rng(0)
    # layers on different scales and offsets, as a real biLM's are
    scale = numpy.asarray([3.0, 0.5, 8.0])[:, None, None]
    Xs = [(rng.normal(size=(3, n, 4)) * scale + 2.0).astype("float32") for n in (2, 5)]
    mix.initialize(X=Xs)
    assert set(mix.param_names) == {"w", "gamma"}
    numpy.testing.assert_array_equal(mix.get_param("w"), numpy.zeros(3))
    w0 = numpy.asarray([0.3, -0.2, 0.1])
    mix.set_param("w", w0.astype("float32"))
    mix.set_param("gamma", numpy.asarray([1.5], dtype="float32"))
    Ys, bp = mix.begin_update(Xs)
    s = numpy.exp(w0) / numpy.exp(w0).sum()
    for X, Y in zip(Xs, Ys):
        H = _numpy_layer_norm(X) if layer_norm else X.astype(numpy.float64)
        numpy.testing.assert_allclose(Y, 1.5 * numpy.tensordot(s, H, axes=(0, 0)), rtol=1e-5, atol=1e-5)
    dYs = [rng.normal(size=y.shape).astype("float32") for y in Ys]
    dXs = bp(dYs)
    # against torch autograd on the same function
    w = torch.tensor(w0, dtype=torch.float32, requires_grad=True)
    g = torch.tensor([1.5], requires_grad=True)
    tX = [torch.tensor(x, requires_grad=True) for x in Xs]

    def norm(x):
        if not layer_norm:
            return x
        mean = x.mean(dim=(1, 2), keepdim=True)
        return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(dim=(1, 2), keepdim=True) + 1e-13)

    loss = sum(((g * torch.einsum("l,lnd->nd", torch.softmax(w, 0), norm(x))) * torch.tensor(d)).sum() for x, d in zip(tX, dYs))
    loss.backward()
    numpy.testing.assert_allclose(mix.get_grad("w"), w.grad.numpy(), rtol=1e-4, atol=1e-5)
    numpy.testing.assert_allclose(mix.get_grad("gamma"), g.grad.numpy(), rtol=1e-4, atol=1e-5)
    for dx, tx in zip(dXs, tX):
        numpy.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_initial_weights_of_another_count_name_the_component_and_block(tiny_dir):
    """initialize's error on the count of initial_weights did not say whose they were, as the listener's other
    setting errors do: it names the component and the block to fix."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, "initial_weights": [0.0, 1.0]}})
    with pytest.raises(ValueError, match=r"listener of the 'ner' component has 2 initial_weights \(its spacy_elmo\."
                       r"ElmoListener\.v1 block\), but the layers it mixes are 3"):  # fmt: skip
        nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(2)])


def test_scalar_mix_layer_checks_layer_counts():
    X = [numpy.ones((3, 2, 4), dtype="float32")]
    with pytest.raises(ValueError, match=r"has 2 initial_weights \(its spacy_elmo\.ScalarMix\.v1 block\), but the layers it mixes are 3"):
        scalar_mix_layer(initial_weights=[0.1, 0.2]).initialize(X=X)
    mix = scalar_mix_layer(initial_weights=[0.0, 0.0, 1.0])
    mix.initialize(X=X)
    with pytest.raises(ValueError, match="built for 3 layers but received 2"):
        mix.predict([numpy.ones((2, 2, 4), dtype="float32")])


def test_layer_norm_is_per_doc():
    """A doc's mixed vectors do not depend on the other docs of its batch; empty docs pass through."""
    mix = scalar_mix_layer(layer_norm=True)
    rng = numpy.random.default_rng(1)
    a = rng.normal(size=(3, 4, 6)).astype("float32")
    b = (rng.normal(size=(3, 7, 6)) * 10 + 5).astype("float32")
    empty = numpy.zeros((3, 0, 6), dtype="float32")
    mix.initialize(X=[a])
    alone = mix.predict([a])[0]
    together = mix.predict([a, b, empty])
    numpy.testing.assert_allclose(together[0], alone, rtol=1e-6, atol=1e-6)
    assert together[2].shape == (0, 6)
    # each layer normalised, uniform weights: the mix is the mean of the normalised layers
    numpy.testing.assert_allclose(together[1], _numpy_layer_norm(b).mean(axis=0), rtol=1e-5, atol=1e-5)


def test_layer_norm_leaves_whitespace_rows_out():
    """The component's whitespace tokens are all-zero rows: they change neither the word rows'
    mixed vectors nor their gradients, and stay zero themselves (as AllenNLP's padding)."""
    mix = scalar_mix_layer(layer_norm=True)
    rng = numpy.random.default_rng(2)
    words = (rng.normal(size=(3, 5, 6)) * 4 + 3).astype("float32")
    spaced = numpy.zeros((3, 8, 6), dtype="float32")
    at = [0, 2, 3, 5, 7]  # rows 1, 4 and 6 are whitespace
    spaced[:, at] = words
    mix.initialize(X=[words])
    mix.set_param("w", numpy.asarray([0.4, -0.3, 0.2], dtype="float32"))
    (Y,), bp = mix.begin_update([words])
    (Ys,), bps = mix.begin_update([spaced])
    numpy.testing.assert_allclose(Ys[at], Y, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(Y, _numpy_layer_norm(words).T.dot(mix.ops.softmax(mix.get_param("w"))).T, rtol=1e-5, atol=1e-5)
    assert not Ys[[1, 4, 6]].any()
    dY = rng.normal(size=Y.shape).astype("float32")
    dYs = rng.normal(size=Ys.shape).astype("float32")
    dYs[at] = dY
    (dX,), (dXs,) = bp([dY]), bps([dYs])
    numpy.testing.assert_allclose(dXs[:, at], dX, rtol=1e-4, atol=1e-5)
    assert not dXs[:, [1, 4, 6]].any()
    # an inf gradient at whitespace rows changes nothing in the input gradient (the normalisation's
    # backward dropped those rows by a product with 0/1: inf * 0 = NaN spread over the whole doc)
    dYi = dYs.copy()
    dYi[[1, 4, 6]] = numpy.inf
    (dXi,) = bps([dYi])
    numpy.testing.assert_array_equal(dXi, dXs)
    assert Ys.dtype == dXs.dtype == numpy.float32
    # a doc of whitespace only (or no tokens) passes through as zeros, and gets no gradient, as the
    # whitespace rows above (its gradient went through unnormalised)
    for n in (2, 0):
        (Yw,), bpw = mix.begin_update([numpy.zeros((3, n, 6), dtype="float32")])
        assert Yw.shape == (n, 6) and not Yw.any()
        (dXw,) = bpw([numpy.ones((n, 6), dtype="float32")])
        assert dXw.shape == (3, n, 6) and not dXw.any()


def _mix_grads(layer_norm, X, dY, w, gamma):
    """``(dw, dgamma, dX)`` of a fresh ScalarMix layer with params ``w``, ``gamma`` on one doc."""
    mix = scalar_mix_layer(layer_norm=layer_norm)
    mix.initialize(X=[X])
    mix.set_param("w", w.astype("float32"))
    mix.set_param("gamma", numpy.asarray([gamma], dtype="float32"))
    _, bp = mix.begin_update([X])
    (dX,) = bp([dY])
    return mix.get_grad("w"), mix.get_grad("gamma"), dX


@pytest.mark.parametrize("layer_norm", [False, True])
def test_mix_param_gradients_leave_whitespace_rows_out(layer_norm):
    """dgamma and dw take nothing from the whitespace (all-zero) rows: an inf or NaN gradient arriving
    there leaves them finite and equal to those with that row's gradient 0 (they summed products with
    the rows' zeros: inf * 0 = NaN in both parameters' gradients); a float64 oracle for the finite case."""
    rng = numpy.random.default_rng(5)
    at = [0, 2, 3, 5, 7]  # rows 1, 4 and 6 are whitespace
    space = [1, 4, 6]
    X = numpy.zeros((3, 8, 6), dtype="float32")
    X[:, at] = (rng.normal(size=(3, 5, 6)) * numpy.asarray([3.0, 0.5, 8.0])[:, None, None] + 2.0).astype("float32")
    w, gamma = numpy.asarray([0.4, -0.3, 0.2]), 1.5
    dY = rng.normal(size=(8, 6)).astype("float32")
    dY[space] = 0
    dw0, dgamma0, dX0 = _mix_grads(layer_norm, X, dY, w, gamma)
    # float64 oracle: the word rows alone (normalised by their own statistics) mixed, then the chain rule
    H = X[:, at].astype(numpy.float64)
    H = _numpy_layer_norm(H) if layer_norm else H
    s = numpy.exp(w) / numpy.exp(w).sum()
    dYw = dY[at].astype(numpy.float64)
    ds = gamma * numpy.tensordot(H, dYw, axes=((1, 2), (0, 1)))
    numpy.testing.assert_allclose(dgamma0, [(numpy.tensordot(s, H, axes=(0, 0)) * dYw).sum()], rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(dw0, s * (ds - (s * ds).sum()), rtol=1e-5, atol=1e-5)
    for bad in (numpy.inf, -numpy.inf, numpy.nan, 3.0e38, 2.5):
        dYb = dY.copy()
        dYb[space] = bad
        dw, dgamma, dX = _mix_grads(layer_norm, X, dYb, w, gamma)
        assert numpy.isfinite(dw).all() and numpy.isfinite(dgamma).all(), bad
        numpy.testing.assert_array_equal(dw, dw0)
        numpy.testing.assert_array_equal(dgamma, dgamma0)
        numpy.testing.assert_array_equal(dX[:, at], dX0[:, at])


def test_elmo_dropout_not_overwritten():
    drop = elmo_dropout(0.5)
    set_dropout_rate(drop, 0.1)  # what spaCy does with [training] dropout
    assert drop.attrs["elmo_rate"] == 0.5 and "dropout_rate" not in drop.attrs
    X = [numpy.ones((100, 10), dtype="float32")]
    Y, _ = drop.begin_update(X)
    assert 0.3 < float((Y[0] == 0).mean()) < 0.7
    assert drop.predict(X)[0] is X[0]


def _nlp_with(tiny_dir, factory, model, **cfg):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp.add_pipe(factory, config={"model": model, **cfg})
    return nlp


def _mixes(component):
    return [n for n in component.model.walk() if n.name == "elmo_scalar_mix"]


def _train(nlp, name, docs, steps=3):
    examples = [Example(nlp.make_doc(d.text), d) for d in docs]
    opt = nlp.initialize(lambda: examples)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    for _ in range(steps):
        nlp.update(examples, sgd=opt, drop=0.1)
    for k, v in bilm.state_dict().items():
        assert torch.equal(v, before[k]), f"biLM weight {k} changed"
    (mix,) = _mixes(nlp.get_pipe(name))
    assert not numpy.allclose(mix.get_param("w"), 0.0), "ScalarMix w did not move"
    return nlp


NER = {
    "@architectures": "spacy.TransitionBasedParser.v2",
    "state_type": "ner",
    "extra_state_tokens": False,
    "hidden_width": 16,
    "maxout_pieces": 2,
    "use_upper": True,
    "nO": None,
}


def _read_with_layers(nlp, text, read, zero):
    """``read([doc])`` of a doc whose ``doc._.elmo`` (what the listener reads at prediction, nothing handed over)
    is the elmo component's layers, or zeros of their shape."""
    doc = nlp.make_doc(text)
    (layers,) = nlp.get_pipe("elmo").predict([doc])
    layers = numpy.zeros_like(layers) if zero else layers
    set_doc_data(doc, layers, numpy.ones(len(layers), dtype="float32"), "all", "float32")
    return read([doc])


def _depends_on_the_layers(nlp, text, read):
    """What ``read`` gives of ``text`` (``(rows, width)``) comes from the ELMo layers through the listener: one
    row for every token (or span) where they are zeros (the listening model's biases alone), rows apart with
    the real layers."""
    real, zero = (numpy.asarray(_read_with_layers(nlp, text, read, z)) for z in (False, True))
    assert real.shape == zero.shape and len(real) > 1
    numpy.testing.assert_array_equal(zero, numpy.broadcast_to(zero[:1], zero.shape))
    assert float(numpy.ptp(real, axis=0).max()) > 1e-4


def test_ner_with_listener(tiny_dir):
    nlp = _train(_nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER}), "ner", make_docs(8))
    doc = nlp("Yesterday Alice went home .")
    assert doc._.elmo is not None
    # the token features the entity recognizer's transitions are scored from (its tok2vec: the listener, then its
    # own Linear)
    _depends_on_the_layers(nlp, doc.text, nlp.get_pipe("ner").model.get_ref("tok2vec").predict)


def _textcat_model(factory, tok2vec):
    return {
        "@architectures": "spacy.TextCatReduce.v1",
        "exclusive_classes": factory == "textcat",
        "use_reduce_first": False,
        "use_reduce_last": False,
        "use_reduce_max": True,
        "use_reduce_mean": True,
        "nO": None,
        "tok2vec": tok2vec,
    }


@pytest.mark.parametrize("factory", ["textcat", "textcat_multilabel"])
def test_textcat_with_tok2vec(tiny_dir, factory):
    nlp = _train(_nlp_with(tiny_dir, factory, _textcat_model(factory, TOK2VEC)), factory, make_docs(8))
    assert set(nlp("it was good .").cats) == {"POS", "NEG"}


def test_listener_predictions_do_not_depend_on_store_dtype(tiny_dir):
    """A listener trains on elmo's float32 layers; at prediction it read doc._.elmo rounded to store_dtype
    (float16 in the shipped configs), so a listening component predicted otherwise with store_dtype float16 than
    with float32. It reads the float32 layers at prediction too: what elmo's predict gives, whatever store_dtype."""
    fix_random_seed(0)
    nlp = _train(_nlp_with(tiny_dir, "textcat", _textcat_model("textcat", LISTENER)), "textcat", make_docs(8))
    elmo, listener = nlp.get_pipe("elmo"), _listener_of(nlp.get_pipe("textcat"))
    texts = ["Yesterday Alice went home and it was good .", "London was bad . Bob came to Paris .",
             "It was good and it was bad .", "Paris went home ."]
    cats = {}
    for dtype in ("float16", "float32"):
        elmo.cfg["store_dtype"] = dtype
        docs = [nlp.make_doc(text) for text in texts]
        elmo.set_annotations(docs, elmo.predict(docs))
        assert docs[0]._.elmo.dtype == numpy.dtype(dtype)
        for read, layers in zip(listener.predict(docs), elmo.predict(docs)):
            numpy.testing.assert_array_equal(read, layers)
        cats[dtype] = [doc.cats for doc in nlp.pipe(texts)]
    assert cats["float16"] == cats["float32"]


def test_a_disabled_listening_component_is_handed_nothing(tiny_dir):
    """A hand-over at prediction stays until its listener reads the doc: one to a disabled component (elmo run alone
    over a corpus kept in memory), or one the call skips (nlp.pipe(texts, disable=[...])), kept each doc's float32
    layers beside doc._.elmo for as long as the doc lived. Neither is handed anything; run later on those docs, the
    component reads doc._.elmo."""
    nlp = _train(_nlp_with(tiny_dir, "textcat", _textcat_model("textcat", LISTENER)), "textcat", make_docs(4))
    listener = _listener_of(nlp.get_pipe("textcat"))
    texts = ["Yesterday Alice went home and it was good .", "Paris went home ."]
    with nlp.select_pipes(enable=["elmo"]):
        docs = list(nlp.pipe(texts))
    assert len(listener._predicted) == 0
    assert [set(doc.cats) for doc in nlp.get_pipe("textcat").pipe(docs)] == [{"POS", "NEG"}] * 2
    # skipped by the call alone (spaCy leaves them enabled): nlp.pipe's and nlp(text)'s disable=
    skipped = list(nlp.pipe(texts, disable=["textcat"])) + [nlp(texts[0], disable=["textcat"])]
    assert len(listener._predicted) == 0 and all(not doc.cats for doc in skipped)
    assert [doc.cats for doc in nlp.pipe(texts)] == [nlp(text).cats for text in texts]  # run: handed over and read
    assert len(listener._predicted) == 0
    kept = [nlp.make_doc(text) for text in texts]
    nlp.get_pipe("elmo").set_annotations(kept, nlp.get_pipe("elmo").predict(kept))  # enabled: handed over
    assert len(listener._predicted) == 2


_INNER_ELMO: list = []  # the elmo component that test_listener_run_inner_elmo runs, then the docs it ran on


@Language.component("test_listener_run_inner_elmo")
def _run_inner_elmo(doc):
    _INNER_ELMO.append(_INNER_ELMO[0](doc.copy()))  # kept: a hand-over lasts as long as its doc
    return doc


def test_a_disable_of_another_pipelines_call_does_not_skip_a_listening_component(tiny_dir):
    """The components a call skips are its own pipeline's: elmo run by a component of another pipeline called
    with disable=["textcat"] (a pipeline whose component names mean other components) hands its layers over
    to its own pipeline's textcat, which that call does not skip."""
    nlp = _train(_nlp_with(tiny_dir, "textcat", _textcat_model("textcat", LISTENER)), "textcat", make_docs(4))
    listener = _listener_of(nlp.get_pipe("textcat"))
    _INNER_ELMO[:] = [nlp.get_pipe("elmo")]
    outer = spacy.blank("en")
    outer.add_pipe("test_listener_run_inner_elmo")
    try:
        outer("Yesterday Alice went home .", disable=["textcat"])
        assert len(listener._predicted) == 1  # handed over: textcat runs in nlp
        listener._predicted = type(listener._predicted)()
        nlp("Yesterday Alice went home .", disable=["textcat"])  # its own call's disable: skipped
        assert len(listener._predicted) == 0
    finally:
        _INNER_ELMO.clear()


def test_spancat_with_listener(tiny_dir):
    model = {
        "@architectures": "spacy.SpanCategorizer.v1",
        "tok2vec": LISTENER,
        "reducer": {"@layers": "spacy.mean_max_reducer.v1", "hidden_size": 16},
        "scorer": {"@layers": "spacy.LinearLogistic.v1", "nO": None, "nI": None},
    }
    nlp = _nlp_with(tiny_dir, "spancat", model, spans_key="sc")
    _train(nlp, "spancat", make_docs(8))
    doc = nlp("Yesterday Bob went home .")
    assert doc._.elmo is not None and "sc" in doc.spans
    # every candidate span's label scores
    _depends_on_the_layers(nlp, doc.text, lambda docs: nlp.get_pipe("spancat").predict(docs)[1])


def test_mix_gradients_from_doc_data(tiny_dir):
    """With no receive() (elmo annotating), the listener reads doc._.elmo and the mix still learns."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    docs = make_docs(4)
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    annotated = list(nlp.get_pipe("elmo").pipe([nlp.make_doc(d.text) for d in docs]))
    tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec")
    listener = next(n for n in tok2vec.walk() if isinstance(n, ElmoListener))
    listener.clear()
    chain = next(n for n in tok2vec.walk() if any(isinstance(c, ElmoListener) for c in n.layers))
    Ys, bp = chain.begin_update(annotated)
    bp([numpy.ones_like(y) for y in Ys])
    (mix,) = _mixes(nlp.get_pipe("ner"))
    assert float(numpy.abs(mix.get_grad("gamma")).sum()) > 0


def test_listener_width_mismatch(tiny_dir):
    with pytest.raises(ValueError, match="expects width 99"):
        _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, "width": 99}})
        nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, "width": 99}})
        nlp.initialize()


def test_listener_without_upstream():
    nlp = spacy.blank("en")
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    docs = make_docs(2)
    with pytest.raises(ValueError, match="linked to no elmo component"):
        nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])


DISABLED = r"reads the layers of the elmo component '{upstream}', which is disabled in this pipeline"
DISABLED_FIX = r"nlp\.enable_pipe\('{upstream}'\).*nlp\.replace_listeners\('{upstream}', 'ner', \['model\.tok2vec'\]\)"


@pytest.mark.parametrize("upstream", ["*", "elmo"])
def test_listener_with_disabled_upstream(tiny_dir, upstream):
    """elmo fed ner's listener, then nlp.select_pipes(disable=["elmo"]) (spaCy does not relink): an update on new
    Examples was "a batch it has no upstream output for (... other Doc objects (new Examples))", a prediction
    "no ELMo data", neither saying that elmo is disabled. Both name the disabled elmo and the fix; enabled again,
    it feeds ner as before."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, "upstream": upstream}})
    docs = make_docs(4)
    examples = [Example(nlp.make_doc(d.text), d) for d in docs]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt)
    same_words = [Example(nlp.make_doc(d.text), d) for d in docs]
    other_words = [Example(nlp.make_doc(d.text), d) for d in make_docs(3, seed=5)]
    disabled = f"{DISABLED.format(upstream='elmo')}.*{DISABLED_FIX.format(upstream='elmo')}"
    with nlp.select_pipes(disable=["elmo"]):
        for batch in (same_words, other_words):
            with pytest.raises(ValueError, match=disabled):
                nlp.update(batch, sgd=opt)
        with pytest.raises(ValueError, match=disabled):
            nlp("Yesterday Alice went home .")
        with pytest.raises(ValueError, match=disabled):
            list(nlp.pipe(["Yesterday Alice went home ."]))
    nlp.disable_pipe("elmo")
    with pytest.raises(ValueError, match=disabled):
        nlp.update(same_words, sgd=opt)
    nlp.enable_pipe("elmo")
    nlp.update(same_words, sgd=opt)
    assert nlp("Yesterday Alice went home .")._.elmo is not None
    # the listener called on its own, outside a pipeline: no pipeline to tell, the message as before
    listener = _listener_of(nlp.get_pipe("ner"))
    with pytest.raises(ValueError, match="no ELMo data"):
        listener.predict([nlp.make_doc("Yesterday Alice went home .")])


@pytest.mark.parametrize("how", ["select_pipes", "disable_pipe"])
def test_initialize_with_disabled_upstream_says_it_is_disabled(tiny_dir, how):
    """nlp.initialize with elmo disabled (``with nlp.select_pipes(enable="ner")``) skips elmo, whose weights then
    never load: the error said to put elmo before ner and keep it out of frozen_components, where it stood
    already. It says that elmo is disabled and how to enable it; enabled, the pipeline initializes and trains."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    disabled = r"initialized while its upstream 'elmo' is disabled .*nlp\.enable_pipe\('elmo'\)"
    if how == "select_pipes":
        with nlp.select_pipes(enable="ner"), pytest.raises(ValueError, match=disabled) as err:
            nlp.initialize(lambda: examples)
    else:
        nlp.disable_pipe("elmo")
        with pytest.raises(ValueError, match=disabled) as err:
            nlp.initialize(lambda: examples)
        nlp.enable_pipe("elmo")
    assert "frozen_components" not in str(err.value) and "Remove 'elmo' from [nlp] disabled" not in str(err.value)
    assert str(err.value).endswith("so keep 'elmo' enabled while training.")  # was "keep it enabled there"
    nlp.update(examples, sgd=nlp.initialize(lambda: examples))


def test_listener_with_disabled_upstream_follow_the_fix(tiny_dir):
    """The error's steps, followed literally, run ner without elmo. It said to call nlp.replace_listeners while elmo
    was disabled, which spaCy refuses (E889: it looks the upstream up in nlp.pipe_names, the enabled ones)."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.update(examples, sgd=nlp.initialize(lambda: examples))
    nlp.disable_pipe("elmo")
    with pytest.raises(ValueError, match=DISABLED.format(upstream="elmo")) as err:
        nlp("Yesterday Alice went home .")
    steps = re.search(r"first (nlp\.enable_pipe\('elmo'\)) .*then (nlp\.replace_listeners\([^)]*\)), then "
                      r"(nlp\.disable_pipe\('elmo'\))", str(err.value))
    assert steps is not None, str(err.value)
    for step in steps.groups():
        eval(step)
    assert nlp.pipe_names == ["ner"] and nlp.disabled == ["elmo"]
    assert len(nlp("Yesterday Alice went home .")) == 5


REMOVED = r"reads the layers of the elmo component 'elmo', which was removed from this pipeline"


@pytest.mark.parametrize("way_back", ["config", "source"])
def test_listener_with_removed_upstream_follow_the_fix(tiny_dir, tmp_path, way_back):
    """After nlp.remove_pipe("elmo") a listening ner's next call ("no ELMo data") and nlp.update ("a batch it has no
    upstream output for") said to call nlp.replace_listeners('elmo', 'ner', ...), which spaCy refuses (E889: 'elmo'
    is not in the pipeline). Both name the removed elmo, and its steps (an elmo added back before ner, from its
    weights or the saved pipeline; replace_listeners; remove_pipe), followed literally, run ner and textcat without
    elmo, predicting as they did with it."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    nlp.add_pipe("textcat", config={"model": _textcat_model("textcat", LISTENER)})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt)
    nlp.to_disk(tmp_path / "saved")
    text = "Yesterday Alice went home and it was good ."
    before = nlp(text)
    nlp.remove_pipe("elmo")
    with pytest.raises(ValueError, match=REMOVED):
        nlp.update([Example(nlp.make_doc(d.text), d) for d in make_docs(3, seed=5)], sgd=opt)
    with pytest.raises(ValueError, match=REMOVED) as err:
        nlp(text)
    message = str(err.value)
    add = {"config": r"(nlp\.add_pipe\('elmo', name='elmo', before='ner', config=\{'weights': WEIGHTS\}\))",
           "source": r"(nlp\.add_pipe\('elmo', before='ner', source=spacy\.load\(PIPELINE\)\))"}[way_back]
    steps = re.search(add + r".*then (nlp\.replace_listeners\([^)]*\)), then (nlp\.remove_pipe\('elmo'\))", message)
    assert steps is not None, message
    add_back, replace, remove = steps.groups()
    eval(add_back, {"nlp": nlp, "spacy": spacy, "WEIGHTS": str(tiny_dir), "PIPELINE": tmp_path / "saved"})
    eval(replace)
    eval(replace.replace("'ner'", "'textcat'"))
    eval(remove)
    assert nlp.pipe_names == ["ner", "textcat"]
    after = nlp(text)
    assert [(e.start, e.end, e.label_) for e in after.ents] == [(e.start, e.end, e.label_) for e in before.ents]
    assert after.cats == pytest.approx(before.cats, abs=1e-6)


def test_listener_with_disabled_upstream_initializes_and_passes_empty_docs(tiny_dir):
    """elmo disabled is named only where its layers were needed: nlp.initialize (the listener warms up on zeros for
    initialize's samples) runs, and an empty doc among docs elmo annotated before gets its empty layers."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]  # noqa: E731
    nlp.initialize(examples)
    annotated = nlp("Yesterday Alice went home .")
    with nlp.select_pipes(disable=["elmo"]):
        nlp.initialize(examples)
        assert [len(doc) for doc in nlp.pipe([annotated, nlp.make_doc("")])] == [5, 0]
        with pytest.raises(ValueError, match=DISABLED.format(upstream="elmo")):
            nlp("Yesterday Alice went home .")


def test_a_disabled_elmo_is_looked_up_in_the_pipeline_holding_the_listener(tiny_dir):
    """The pipeline whose disabled components are read is the one holding the listener, not the nearest on the
    stack: another pipeline (its own disabled component named 'elmo') that calls this one's ner from a component
    is not this listener's, and the error is the plain one of a doc without ELMo data."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.update(examples, sgd=nlp.initialize(lambda: examples))
    ner = nlp.get_pipe("ner")

    @Language.component("test_listener_relay_to_other_ner")
    def relay(doc):
        return ner(doc)

    other = spacy.blank("en")
    other.add_pipe("sentencizer", name="elmo")
    other.add_pipe("test_listener_relay_to_other_ner")
    other.disable_pipe("elmo")
    with pytest.raises(ValueError, match="no ELMo data") as err:
        other("Yesterday Alice went home .")
    assert not re.search(DISABLED.format(upstream="elmo"), str(err.value))


def test_listener_with_disabled_upstream_right_after_initialize(tiny_dir, tmp_path):
    """Its initialize leaves the listener "warming up" (zeros for docs without ELMo data) until a real batch, and
    saves it so: with elmo disabled right after nlp.initialize (spacy init nlp, spacy assemble), ner predicted
    from zero vectors without a word, also loaded from disk. Zeros are for a model's initialize only."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4)])
    nlp.to_disk(tmp_path / "p")
    for pipeline in (nlp, spacy.load(tmp_path / "p")):
        with pipeline.select_pipes(disable=["elmo"]):
            with pytest.raises(ValueError, match=DISABLED.format(upstream="elmo")):
                pipeline("Yesterday Alice went home .")
    with pytest.raises(ValueError, match=DISABLED.format(upstream="elmo")):
        spacy.load(tmp_path / "p", disable=["elmo"])("Yesterday Alice went home .")
    # still zeros for a model's initialize (the samples no elmo annotated), here the component's own
    nlp.get_pipe("ner").initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4)], nlp=nlp)


def test_spacy_debug_model_runs_a_listening_component(tiny_dir, corpus_dir):
    """spacy debug model initializes, updates and predicts with the listening component alone (no elmo runs):
    its listener reads zeros there, with a warning for the updates, and the final prediction is no error."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    config = nlp.config
    config["paths"].update(train=str(corpus_dir / "train.spacy"), dev=str(corpus_dir / "dev.spacy"))
    config = config.interpolate()  # as debug_model_cli
    training = registry.resolve(config["training"], schema=ConfigSchemaTraining)
    with pytest.warns(UserWarning, match="spacy debug model updates 'ner' alone"):
        debug_model(config, training, nlp, nlp.get_pipe("ner"), print_settings={})


def test_update_without_elmo_right_after_initialize_is_an_error(tiny_dir):
    """nlp.update(..., exclude=["elmo"]) right after nlp.initialize (elmo never fed the listener a batch): ner
    trained on zero layers for every step, with one warning, where the README promised an error. It is the error
    that elmo did not run update() on the batch, at every step, without a warning; and after elmo fed a batch,
    the error that names the batch. Zeros stay for initialize's samples and spacy debug model (above)."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for annotates in ([], ["ner"]):
            for _ in range(2):
                with pytest.raises(ValueError, match=r"got no ELMo layers for a training batch: its upstream 'elmo' "
                                                     r"did not run update\(\) on it"):
                    nlp.update(examples, sgd=opt, exclude=["elmo"], annotates=annotates)
    nlp.update(examples, sgd=opt)
    with pytest.raises(ValueError, match=r"got a batch it has no upstream output for \(batch id \d+: the same words"):
        nlp.update([Example(nlp.make_doc(e.text), e.reference) for e in examples], sgd=opt, exclude=["elmo"])


def test_listener_needs_all_layers(tiny_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": "mix"})
    with pytest.raises(ValueError, match='store = "all"'):
        nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})


_ANNOTATED: list = []  # the docs that reached "_record_annotated" (Language.update annotates copies of its examples)


@Language.component("_record_annotated")
def _record_annotated(doc):
    _ANNOTATED.append(doc)
    return doc


@pytest.mark.parametrize("frozen", [True, False])
def test_listening_components_annotate_without_elmo_annotating(tiny_dir, frozen):
    """Listening components in ``annotates`` without elmo there (``annotating_components = ["ner", ...]``):
    spaCy has them predict on the docs they just trained on, which elmo left bare; they read the layers
    their update read, and annotate as they predict from those layers on docs that carry them."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    nlp.add_pipe("textcat", config={"model": _textcat_model("textcat", LISTENER)})
    nlp.add_pipe("_record_annotated")
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(6, seed=2)]
    opt = nlp.initialize(lambda: examples)
    for _ in range(3):  # away from the initial predictions
        nlp.update(examples, sgd=opt)
    _ANNOTATED.clear()
    nlp.update(examples, sgd=opt, annotates=["ner", "textcat", "_record_annotated"])
    listener = _listener_of(nlp.get_pipe("ner"))
    handed = [listener.ops.to_numpy(layers).copy() for layers in listener._outputs]
    mix = nlp.get_pipe("elmo").mix_weights()
    assert len(_ANNOTATED) == len(examples)
    for annotated, layers in zip(_ANNOTATED, handed):
        assert annotated._.elmo is None  # elmo did not annotate
        doc = nlp.make_doc(annotated.text)
        set_doc_data(doc, layers, mix, "all", "float32")
        doc = nlp.get_pipe("textcat")(nlp.get_pipe("ner")(doc))
        assert [(e.start, e.end, e.label_) for e in annotated.ents] == [(e.start, e.end, e.label_) for e in doc.ents]
        assert set(annotated.cats) == {"POS", "NEG"}
        for label, score in doc.cats.items():  # continuous: equal only from the same layers
            assert annotated.cats[label] == pytest.approx(score, rel=1e-6, abs=1e-7)
    with nlp.select_pipes(disable=["elmo"]):  # a doc no update saw still has no layers
        with pytest.raises(ValueError, match=DISABLED.format(upstream="elmo")):
            nlp(examples[0].predicted.text)


def _fine_tuned_ner(weights):
    """elmo (fine-tuned) loading ``weights`` (None: no weights, a pipeline to load into) and a listening ner."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"frozen": False, **({} if weights is None else {"weights": str(weights)})})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    return nlp


def test_fine_tuning_changes_bilm(tiny_dir):
    nlp = _fine_tuned_ner(tiny_dir)
    docs = make_docs(4)
    examples = [Example(nlp.make_doc(d.text), d) for d in docs]
    opt = nlp.initialize(lambda: examples)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = bilm.lstm.forward_layers[0].w_proj.detach().clone()
    nlp.update(examples, sgd=opt)
    assert not torch.equal(before, bilm.lstm.forward_layers[0].w_proj.detach())


@pytest.mark.parametrize("frozen", [False, True])
def test_fine_tuned_weights_record_it_in_their_source_through_saving(tiny_dir, tmp_path, frozen):
    """A fine-tuned biLM's source named the weights it started from (e.g. "default"), also in every saved
    pipeline: a sourced elmo then passed for those weights (no warning when --paths.elmo names them). Now
    the first step marks it (", fine-tuned"), kept through to_bytes / to_disk and loading; a frozen biLM
    that trains its listeners' layers keeps the source it was loaded from."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    elmo = nlp.get_pipe("elmo")
    assert elmo.source == str(tiny_dir)
    nlp.update(examples, sgd=opt)
    nlp.update(examples, sgd=opt)
    want = str(tiny_dir) if frozen else f"{tiny_dir}, fine-tuned"
    assert elmo.source == want
    nlp.to_disk(tmp_path / "saved")
    assert spacy.load(tmp_path / "saved").get_pipe("elmo").source == want
    loaded = _fine_tuned_ner(None)
    loaded.from_bytes(nlp.to_bytes())
    assert loaded.get_pipe("elmo").source == want


def test_a_frozen_biLM_copied_by_replace_listeners_keeps_its_source(tiny_dir):
    """ner's own copy of a frozen biLM (nlp.replace_listeners) is reached by ner's finish_update at every update,
    with no gradient: thinc steps nothing, and its source must not say ", fine-tuned" (a saved pipeline, and the
    sourced-weights check, would take the weights it loaded for others)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": True})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    nlp.remove_pipe("elmo")
    (own,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_bilm"]
    before = {k: v.detach().clone() for k, v in get_bilm(own).named_parameters()}
    nlp.update(examples, sgd=opt)
    nlp.update(examples, sgd=opt)
    assert all(torch.equal(v, dict(get_bilm(own).named_parameters())[k]) for k, v in before.items())
    assert get_runner(own).source == str(tiny_dir)


def test_a_step_skipped_for_an_overflowed_gradient_leaves_the_source_unmarked(tiny_dir):
    """thinc skips the step of a shim whose grad scaler found an inf or NaN (mixed precision): the weights are their
    source's still, and the source must not say ", fine-tuned"; the next step that is taken marks it."""
    nlp = spacy.blank("en")
    model = nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": False}).model
    nlp.initialize()
    shim, runner = get_shim(model), get_runner(model)
    before = {k: v.detach().clone() for k, v in runner.named_parameters()}
    opt = SGD(0.5, L2=0.0, grad_clip=0.0, use_averages=False)
    for found_inf in (True, False):
        for p in runner.parameters():
            p.grad = torch.ones_like(p)
        shim._grad_scaler._found_inf = found_inf
        shim.finish_update(opt)
        moved = any(not torch.equal(v, dict(runner.named_parameters())[k]) for k, v in before.items())
        assert (moved, runner.source) == ((False, str(tiny_dir)) if found_inf else (True, f"{tiny_dir}, fine-tuned"))


@pytest.mark.parametrize("frozen", [True, False])
def test_a_listener_given_new_docs_of_the_same_words_says_so(tiny_dir, frozen):
    """nlp.update(new Examples, exclude=["elmo"]) after an update of the same words: the error printed two
    equal batch ids as if they differed ("batch id N, expected N") and named only removing or disabling the
    upstream. Now it says the docs hold the same words in other Doc objects, and names `exclude`; docs of
    other words still show both ids."""
    nlp = _fine_tuned_ner(tiny_dir)
    nlp.get_pipe("elmo").cfg["frozen"] = frozen

    def examples(seed):
        return [Example(nlp.make_doc(d.text), d) for d in make_docs(4, seed=seed)]

    opt = nlp.initialize(lambda: examples(0))
    nlp.update(examples(0), sgd=opt)
    with pytest.raises(ValueError) as same:
        nlp.update(examples(0), sgd=opt, exclude=["elmo"])
    message = str(same.value)
    assert "the same words as the batch 'elmo' last handed over, but other Doc objects (new Examples)" in message
    assert "exclude=[...]" in message and "expected" not in message
    with pytest.raises(ValueError) as other:
        nlp.update(examples(7), sgd=opt, exclude=["elmo"])
    found, expected = re.search(r"batch id (\d+), expected (\d+)\)", str(other.value)).groups()
    assert found != expected and "same words" not in str(other.value)


def _randomize_zero_params(model):
    """The parser's output layer starts at zero, which sends the biLM no gradient: give zero parameters values."""
    rng = numpy.random.default_rng(0)
    for node in model.walk():
        for p in node.param_names:
            if not node.get_param(p).any():
                node.set_param(p, rng.normal(0, 0.1, node.get_param(p).shape).astype("float32"))


def _own_bilm_step(nlp, examples):
    """The change (float64 numpy arrays by name) that one plain SGD step makes to the biLM that ner owns."""
    (bilm,) = [get_bilm(n) for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_bilm"]
    before = {k: v.detach().double().numpy().copy() for k, v in bilm.named_parameters()}
    fix_random_seed(0)  # the same ELMo dropout masks in each run
    nlp.update(examples, sgd=SGD(0.5, L2=0.0, grad_clip=0.0, use_averages=False))
    return {k: v.detach().double().numpy() - before[k] for k, v in bilm.named_parameters()}


def _assert_scaled(step_s, step_1, scale):
    moved = [k for k, d in step_1.items() if numpy.abs(d).max() > 1e-4]
    assert len(moved) > len(step_1) // 2, "the biLM barely moved: nothing to compare"
    for k in step_1:  # float32 weights: the change is off by their rounding (about 1e-7 of a weight near 1)
        numpy.testing.assert_allclose(step_s[k], scale * step_1[k], rtol=1e-3, atol=1e-6, err_msg=k)


def _fine_tuned_ner_at(tiny_dir, scale):
    """An initialized fine-tuned elmo (``learn_rate_scale = scale``) and a listening ner without zero parameters,
    from the same start for every ``scale``; and the examples."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": False, "learn_rate_scale": scale})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    _randomize_zero_params(nlp.get_pipe("ner").model)
    return nlp, examples


def _one_sgd_step(tiny_dir, scale):
    """``(biLM parameter changes, task parameter changes)`` of one SGD step of a fine-tuned elmo (``learn_rate_scale
    = scale``) and a listening ner, from the same start: float64 numpy arrays by name."""
    nlp, examples = _fine_tuned_ner_at(tiny_dir, scale)
    bilm, ner = get_bilm(nlp.get_pipe("elmo").model), nlp.get_pipe("ner").model
    bilm_before = {k: v.detach().double().numpy().copy() for k, v in bilm.named_parameters()}
    task_before = {(n.id, p): n.get_param(p).astype("float64") for n in ner.walk() for p in n.param_names}
    nlp.update(examples, sgd=SGD(0.5, L2=0.0, grad_clip=0.0, use_averages=False))
    bilm_d = {k: v.detach().double().numpy() - bilm_before[k] for k, v in bilm.named_parameters()}
    task_d = {(i, p): n.get_param(p).astype("float64") - task_before[(n.id, p)]
              for i, n in enumerate(ner.walk()) for p in n.param_names}
    return bilm_d, task_d


def test_learn_rate_scale_scales_the_fine_tuned_bilms_step_only(tiny_dir):
    """learn_rate_scale multiplies the biLM's step (the optimizer's lr_scale) and leaves the task layers' alone."""
    bilm_1, task_1 = _one_sgd_step(tiny_dir, 1.0)
    bilm_s, task_s = _one_sgd_step(tiny_dir, 0.25)
    _assert_scaled(bilm_s, bilm_1, 0.25)
    assert set(task_s) == set(task_1) and any(numpy.abs(d).max() > 0 for d in task_1.values())
    for k in task_1:
        numpy.testing.assert_array_equal(task_s[k], task_1[k])


@pytest.mark.parametrize("value", [0, -0.1, float("nan"), float("inf"), True, "0.1", None])
def test_learn_rate_scale_out_of_range_is_refused(value):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="learn_rate_scale must be a number above 0"):
        ElmoComponent(nlp.vocab, nlp.add_pipe("elmo").model, "elmo", learn_rate_scale=value)


def _replaced_ner(tiny_dir, scale):
    """A fine-tuned elmo (learn_rate_scale = scale) whose listening ner was given its own biLM by
    nlp.replace_listeners, then elmo removed; and the examples."""
    nlp, examples = _fine_tuned_ner_at(tiny_dir, scale)
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    nlp.remove_pipe("elmo")
    return nlp, examples


def test_learn_rate_scale_scales_the_step_of_a_biLM_replace_listeners_copied(tiny_dir):
    """nlp.replace_listeners carries elmo's learn_rate_scale over to the copy, as it carries frozen (the listener
    block's setting): ner's optimizer stepped its own biLM at the full task rate, overwriting it within a few
    steps. One SGD step at scale s changes it by s times the change at scale 1."""
    nlp_1, examples = _replaced_ner(tiny_dir, 1.0)
    nlp_s, _ = _replaced_ner(tiny_dir, 0.25)
    assert nlp_s.config["components"]["ner"]["model"]["tok2vec"]["learn_rate_scale"] == 0.25
    _assert_scaled(_own_bilm_step(nlp_s, examples), _own_bilm_step(nlp_1, examples), 0.25)


def test_learn_rate_scale_of_an_own_biLM_config_scales_its_step(tiny_dir, tmp_path):
    """A listener block with its own biLM (a saved pipeline's, frozen = false) steps it at the optimizer's rate
    times the block's learn_rate_scale, the config's at load (default 0.01), never a saved one."""
    nlp, examples = _replaced_ner(tiny_dir, 1.0)
    nlp.to_disk(tmp_path / "p")
    # as a pipeline saved before the setting existed: its block has none
    config = spacy.util.load_config(tmp_path / "p" / "config.cfg")
    del config["components"]["ner"]["model"]["tok2vec"]["learn_rate_scale"]
    config.to_disk(tmp_path / "p" / "config.cfg")
    block = "components.ner.model.tok2vec"
    steps = {scale: _own_bilm_step(spacy.load(tmp_path / "p", config={f"{block}.learn_rate_scale": scale}), examples)
             for scale in (1.0, 0.25)}
    _assert_scaled(steps[0.25], steps[1.0], 0.25)
    default = spacy.load(tmp_path / "p")
    assert default.config["components"]["ner"]["model"]["tok2vec"]["learn_rate_scale"] == DEFAULT_LEARN_RATE_SCALE
    _assert_scaled(_own_bilm_step(default, examples), steps[1.0], DEFAULT_LEARN_RATE_SCALE)


def _fine_tuned_ner_and_textcat(tiny_dir):
    """elmo (fine-tuned) and two listening components, ner and textcat."""
    nlp = _fine_tuned_ner(tiny_dir)
    nlp.add_pipe("textcat", config={"model": _textcat_model("textcat", LISTENER)})
    return nlp


def test_fine_tuned_bilm_runs_its_backward_on_the_sum_of_its_listeners_gradients(tiny_dir):
    """A fine-tuned elmo feeding two listening components (ner, textcat) runs the biLM's backward once both sent
    their gradients, on their sum: the biLM's gradient is that of one backward of d1 + d2. Keeping only the last
    listener's gradient left the existing tests passing."""
    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    elmo = nlp.get_pipe("elmo")
    bilm = get_bilm(elmo.model)
    listeners = elmo.listeners
    assert len(listeners) == 2
    elmo.update(examples)  # hands the batch to both listeners; no optimizer: no step
    rng = numpy.random.default_rng(0)
    shapes = [o.shape for o in listeners[0]._outputs]
    d1, d2 = ([rng.standard_normal(shape).astype("float32") for shape in shapes] for _ in range(2))
    bilm.zero_grad()
    listeners[0]._backprop(d1)
    assert all(p.grad is None or not p.grad.any() for p in bilm.parameters())  # waits for the other listener
    listeners[1]._backprop(d2)
    got = {name: p.grad.clone() for name, p in bilm.named_parameters() if p.grad is not None}
    assert got
    bilm.zero_grad()
    _, backprop = elmo.model.begin_update([eg.predicted for eg in examples])
    backprop([a + b for a, b in zip(d1, d2)])
    for name, p in bilm.named_parameters():
        if p.grad is not None:
            scale = float(p.grad.abs().max()) + 1e-12
            assert float((got[name] - p.grad).abs().max()) / scale < 1e-5, name


class _CountingOptimizer:
    """A thinc optimizer that counts the updates of each parameter (key)."""

    def __init__(self, optimizer):
        self.optimizer, self.calls = optimizer, collections.Counter()

    def __call__(self, key, weights, gradient, **kwargs):
        self.calls[key] += 1
        return self.optimizer(key, weights, gradient, **kwargs)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


@pytest.mark.parametrize("accumulate,exclude", [(1, []), (3, []), (1, ["textcat"])])
def test_fine_tuning_steps_once_per_training_step(tiny_dir, accumulate, exclude):
    """In spaCy's training loop the biLM takes one optimizer step per step, as every other component:
    [training] accumulate_gradient = 3 sums three sub-batches (it took a step per sub-batch), and a
    listening component that does not train (frozen_components: excluded) leaves the others' gradients
    to apply (the biLM never moved when it was the last listener)."""
    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(8)]
    optimizer = _CountingOptimizer(nlp.initialize(lambda: examples))
    steps = 2
    training = train_while_improving(
        nlp, optimizer, iter([(0, examples)] * steps), lambda: (0.0, {}), dropout=0.1, eval_frequency=100,
        accumulate_gradient=accumulate, patience=0, max_steps=0, exclude=exclude, annotating_components=[],
        before_update=None,
    )  # fmt: skip
    for _ in training:
        pass
    shim = nlp.get_pipe("elmo").model.layers[0].shims[0]
    bilm_updates = {name: n for (owner, name), n in optimizer.calls.items() if owner == shim.id}
    assert set(bilm_updates) == {f"bilm.{name}" for name, _ in get_bilm(nlp.get_pipe("elmo").model).named_parameters()}
    assert set(bilm_updates.values()) == {steps}


@pytest.mark.parametrize("leave_out", ["select_pipes", "exclude"])
def test_fine_tuning_steps_in_each_update_that_leaves_a_listener_out(tiny_dir, leave_out):
    """nlp.update(sgd=...) with a listening component disabled (nlp.select_pipes) or excluded
    (exclude=[...]) steps the biLM in that very update with the gradients of the listeners that train,
    as an update with all of them does: it waited for the left-out one, stepping one update late (the
    last update's gradient never applied)."""
    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(8)]
    optimizer = _CountingOptimizer(nlp.initialize(lambda: examples))
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    shim = nlp.get_pipe("elmo").model.layers[0].shims[0]
    steps = 3
    for step in range(1, steps + 1):
        before = {name: p.detach().clone() for name, p in bilm.named_parameters()}
        if leave_out == "select_pipes":
            with nlp.select_pipes(disable=["textcat"]):
                nlp.update(examples, sgd=optimizer)
        else:
            nlp.update(examples, sgd=optimizer, exclude=["textcat"])
        bilm_updates = {name: n for (owner, name), n in optimizer.calls.items() if owner == shim.id}
        assert set(bilm_updates.values()) == {step}, f"update {step}: the biLM took {bilm_updates} steps"
        assert any(not torch.equal(before[name], p.detach()) for name, p in bilm.named_parameters())


def test_fine_tuning_refreshes_token_cache(tiny_dir):
    """Vectors after a fine-tuning step come from the new weights, not the inference cache."""
    nlp = _fine_tuned_ner(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    text = "Yesterday Alice went home and it was good ."
    nlp(text)  # fills the token cache with the initial weights
    for _ in range(2):
        nlp.update(examples, sgd=opt)
    got = nlp(text)._.elmo
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    with torch.no_grad():
        out = run_rows(bilm, [[t.text for t in nlp.make_doc(text)]])  # no cache: whole biLM
    expected = torch.stack(out.activations)[:, 0].numpy()
    numpy.testing.assert_allclose(numpy.asarray(got, dtype="float32"), expected, atol=2e-3)


def test_use_averages_swaps_in_the_fine_tuned_bilms_averages(tiny_dir):
    """spacy train with use_averages = true evaluates and saves inside nlp.use_params(optimizer.averages):
    a fine-tuned biLM there has thinc's moving averages of its weights after each step, as the task layers
    do (it kept its raw weights: averaged heads on a raw biLM), and its raw weights again after it; the
    outputs and a pipeline saved there come from the averages, not from the token cache of the raw ones."""
    nlp = _fine_tuned_ner(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.01, use_averages=True)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    average = {name: torch.zeros_like(p) for name, p in bilm.named_parameters()}
    for step in range(1, 4):
        nlp.update(examples, sgd=optimizer)
        decay = (1 + step) / (10 + step)  # thinc's ops.update_averages, from zeros
        for name, p in bilm.named_parameters():
            average[name] += (1 - decay) * (p.detach() - average[name])
    raw = {name: p.detach().clone() for name, p in bilm.named_parameters()}
    assert any(not torch.allclose(raw[name], average[name]) for name in raw)
    text = "Yesterday Alice went home and it was good ."
    nlp(text)  # fills the token cache with the raw weights
    with nlp.use_params(optimizer.averages):
        for name, p in bilm.named_parameters():
            torch.testing.assert_close(p.detach(), average[name], rtol=1e-5, atol=1e-6)
        got = nlp(text)._.elmo
        saved = nlp.to_bytes()
    for name, p in bilm.named_parameters():
        assert torch.equal(p.detach(), raw[name]), name
    loaded = _fine_tuned_ner(None).from_bytes(saved)
    for name, p in get_bilm(loaded.get_pipe("elmo").model).named_parameters():
        torch.testing.assert_close(p.detach(), average[name], rtol=1e-5, atol=1e-6)
    numpy.testing.assert_array_equal(loaded(text)._.elmo, got)


def _tok2vec_output(nlp, text):
    doc = nlp(text)
    return nlp.get_pipe("ner").model.get_ref("tok2vec").predict([doc])[0]


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("tok2vec,path", [(LISTENER, "model.tok2vec"), (TOK2VEC, "model.tok2vec.elmo")])
def test_replace_listeners(tiny_dir, tmp_path, tok2vec, path, frozen):
    """nlp.replace_listeners gives the listening component its own copy of the biLM (spaCy's pattern
    for tok2vec/transformer); the pipeline then works, saves and loads without the elmo component."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": tok2vec}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(8)]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt)
    text = "Yesterday Alice went home . It was good ."
    expected = _tok2vec_output(nlp, text)
    nlp.replace_listeners("elmo", "ner", [path])
    assert nlp.get_pipe("elmo").listening_components == []
    assert not any(isinstance(n, ElmoListener) for n in nlp.get_pipe("ner").model.walk())
    # float32 rounding only: differences up to ~7e-5 measured over many runs (values up to ~4)
    numpy.testing.assert_allclose(_tok2vec_output(nlp, text), expected, rtol=1e-4, atol=1e-4)
    nlp.remove_pipe("elmo")
    numpy.testing.assert_allclose(_tok2vec_output(nlp, text), expected, rtol=1e-4, atol=1e-4)
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.pipe_names == ["sentencizer", "ner"]
    numpy.testing.assert_allclose(_tok2vec_output(loaded, text), expected, rtol=1e-4, atol=1e-4)
    # training the component afterwards moves its own biLM only when the elmo component was not frozen
    (bilm,) = [get_bilm(n) for n in loaded.get_pipe("ner").model.walk() if n.name == "elmo_bilm"]
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    opt = loaded.resume_training()
    loaded.update(examples, sgd=opt)
    moved = any(not torch.equal(v, before[k]) for k, v in bilm.state_dict().items())
    assert moved == (not frozen)


@pytest.mark.parametrize("updated", [True, False])
def test_rehearse_with_a_listener_names_replace_listeners(tiny_dir, updated):
    """nlp.rehearse (spaCy's rehearsal, which calls the components in random order and never feeds
    listeners) with a listening component is a clear error naming the fix, after nlp.update or
    without one (it blamed frozen_components, or a batch id); after nlp.replace_listeners it rehearses."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    optimizer = nlp.initialize(lambda: examples)
    if updated:
        nlp.update(examples, sgd=optimizer)
    optimizer = nlp.resume_training()
    raw = [Example(nlp.make_doc(t), nlp.make_doc(t)) for t in ("Bob saw London .", "Alice left .")]
    with pytest.raises(ValueError, match=r"nlp\.rehearse.*nlp\.replace_listeners\('elmo', 'ner', \['model\.tok2vec'\]\)"):
        nlp.rehearse(raw, sgd=optimizer)
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    optimizer = nlp.resume_training()
    assert "ner" in nlp.rehearse(raw, sgd=optimizer)


def test_replaced_listener_bilm_has_its_own_optimizer_state(tiny_dir):
    """nlp.replace_listeners copies the biLM with thinc's Model.copy, which kept the shim's id, the key of
    its weights in the optimizer: ner's own fine-tuned copy and the elmo component (still feeding textcat)
    shared Adam's moments, update counts and averages (each key updated twice per step). Now each biLM's
    parameters have keys of their own, each updated once per step."""
    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    optimizer = _CountingOptimizer(nlp.initialize(lambda: examples))
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    steps = 2
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    n_params = len(list(get_bilm(nlp.get_pipe("elmo").model).parameters()))
    bilm_keys = {key: n for key, n in optimizer.calls.items() if key[1].startswith("bilm.")}
    assert len(bilm_keys) == 2 * n_params
    assert set(bilm_keys.values()) == {steps}


def test_replace_listeners_at_the_wrong_path_is_a_clear_error(tiny_dir, tmp_path):
    """With ElmoTok2Vec.v1 the listener is at model.tok2vec.elmo: replacing at model.tok2vec wrote the
    listener's config over the whole tok2vec block and saved a pipeline spacy.load refused ("mismatched
    structure"). Now it is refused before anything changes, naming the right path."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": TOK2VEC})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    with pytest.raises(ValueError, match=r"is at model\.tok2vec\.elmo, not model\.tok2vec.*Pass \['model\.tok2vec\.elmo'\]"):
        nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    text = "Yesterday Alice went home ."
    nlp.to_disk(tmp_path / "p")
    numpy.testing.assert_allclose(_tok2vec_output(spacy.load(tmp_path / "p"), text), _tok2vec_output(nlp, text), atol=1e-6)


def test_own_bilm_without_weights_is_a_clear_error():
    """A config with the listener's own biLM (as replace_listeners writes) only works with saved weights."""
    nlp = spacy.blank("en")
    own = {**LISTENER, "bilm": {"@architectures": "spacy_elmo.ElmoBiLM.v2"}}
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": own}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(2)]
    with pytest.raises(ValueError, match="source the component"):
        nlp.initialize(lambda: examples)


def _two_elmo_pipeline(tiny_dir, other_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", name="elmo_a", config={"weights": str(tiny_dir)})
    nlp.add_pipe("elmo", name="elmo_b", config={"weights": str(other_dir)})
    for name in ("a", "b"):
        nlp.add_pipe("ner", name=f"ner_{name}", config={"model": {**NER, "tok2vec": {**LISTENER, "upstream": f"elmo_{name}"}}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    return nlp


@pytest.mark.parametrize("other", [dict(seed=1), dict(seed=1, projection_dim=4)])
def test_two_elmo_components_each_listener_reads_its_upstream(tiny_dir, tmp_path, other):
    """Listeners bound by name to two elmo components read their own upstream's layers at
    prediction, though both components write doc._.elmo (the second one's data is what it keeps)."""
    torch.manual_seed(other["seed"])
    BiLM(BiLMConfig(**{**TINY, "projection_dim": other.get("projection_dim", 8)})).save(tmp_path / "b")
    nlp = _two_elmo_pipeline(tiny_dir, tmp_path / "b")
    texts = ["Yesterday Alice went home .", "Bob was in Paris and it was good ."]

    def tok2vec(name, doc):
        return nlp.get_pipe(f"ner_{name}").model.get_ref("tok2vec").predict([doc])[0]

    expected = {}
    for name in ("a", "b"):  # each upstream alone
        for text in texts:
            doc = nlp.get_pipe(f"elmo_{name}")(nlp.make_doc(text))
            expected[name, text] = tok2vec(name, doc)
    for text in texts:
        doc = nlp.make_doc(text)
        for pipe in ("elmo_a", "elmo_b"):
            doc = nlp.get_pipe(pipe)(doc)
        for name in ("a", "b"):
            numpy.testing.assert_allclose(tok2vec(name, doc), expected[name, text], atol=1e-6)
    docs = list(nlp.pipe(texts, batch_size=1))  # the whole pipeline, both ner components run
    assert [d._.elmo.shape[-1] for d in docs] == [2 * other.get("projection_dim", 8)] * 2
    # docs whose elmo_a layers were overwritten, read later on their own: elmo_b's layers, refused by
    # shape when they differ (the same shape cannot be told apart)
    if "projection_dim" in other:
        with pytest.raises(ValueError, match="another elmo component wrote doc._.elmo"):
            tok2vec("a", docs[0])


@pytest.mark.parametrize("projection_dim", [8, 4], ids=["same_width", "other_width"])
def test_a_star_listener_after_two_elmo_components_is_fed_by_the_nearest_alone(tiny_dir, tmp_path, projection_dim, monkeypatch):
    """upstream "*" after elmo_a and elmo_b (both fine-tuned): both linked the listener, both listed it, and
    elmo_a ran its biLM with autograd at every update for a listener that read elmo_b's layers and sent its
    gradient to elmo_b only (elmo_a never trained, silently); with elmo_b of another width, linking it was an
    error. Now the nearest elmo before the listening component feeds it alone (as spaCy's tok2vec listeners
    read the last tok2vec before them), also after relinking and after enable_pipe; an elmo after the component
    feeds it not."""
    torch.manual_seed(1)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": projection_dim})).save(tmp_path / "b")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", name="elmo_a", config={"weights": str(tiny_dir), "frozen": False})
    nlp.add_pipe("elmo", name="elmo_b", config={"weights": str(tmp_path / "b"), "frozen": False})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    nlp.add_pipe("elmo", name="elmo_c", config={"weights": str(tiny_dir), "frozen": False})
    listener = _listener_of(nlp.get_pipe("ner"))
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    _randomize_zero_params(nlp.get_pipe("ner").model)

    def linked():
        return {name: nlp.get_pipe(name).listening_components for name in ("elmo_a", "elmo_b", "elmo_c")}

    assert linked() == {"elmo_a": [], "elmo_b": ["ner"], "elmo_c": []}
    assert (listener.upstream, listener.get_dim("nO")) == ("elmo_b", 2 * projection_dim)
    before = {name: {k: v.detach().clone() for k, v in get_bilm(nlp.get_pipe(name).model).named_parameters()}
              for name in ("elmo_a", "elmo_b")}  # fmt: skip
    nlp.update(examples, sgd=opt)
    nlp.update(examples, sgd=opt)
    for name, moved in (("elmo_a", False), ("elmo_b", True)):
        now = dict(get_bilm(nlp.get_pipe(name).model).named_parameters())
        assert any(not torch.equal(v, now[k]) for k, v in before[name].items()) == moved, name
    # elmo_b disabled on the live pipeline (spaCy does not relink): ner was fed by none, warned and trained on
    # zeros, and elmo_a never trained. Now elmo_a, the nearest enabled elmo, feeds it from its next call.
    a_params = dict(get_bilm(nlp.get_pipe("elmo_a").model).named_parameters())
    before_a = {k: v.detach().clone() for k, v in a_params.items()}
    with nlp.select_pipes(disable=["elmo_b"]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if projection_dim != 8:  # ner was trained on elmo_b's width: elmo_a's layers cannot feed it
            with pytest.raises(ValueError, match="'elmo_a' loaded weights .* with 3 layers of width 16"):
                nlp.update(examples, sgd=opt)
        else:
            nlp.update(examples, sgd=opt)
            nlp.update(examples, sgd=opt)
            assert listener.upstream == "elmo_a" and nlp.get_pipe("elmo_a").listening_components == ["ner"]
            assert any(not torch.equal(v, a_params[k]) for k, v in before_a.items())
    assert not [w for w in caught if "got no ELMo layers" in str(w.message)]
    nlp.update(examples, sgd=opt)  # elmo_b enabled again: it feeds ner, elmo_a drops it
    assert linked() == {"elmo_a": [], "elmo_b": ["ner"], "elmo_c": []} and listener.upstream == "elmo_b"
    nlp.rename_pipe("elmo_c", "elmo_d")  # spaCy relinks the whole pipeline
    assert listener.upstream == "elmo_b" and nlp.get_pipe("elmo_a").listening_components == []
    nlp.to_disk(tmp_path / "saved")
    reloaded = spacy.load(tmp_path / "saved")
    assert [reloaded.get_pipe(n).listening_components for n in ("elmo_a", "elmo_b", "elmo_d")] == [[], ["ner"], []]
    if projection_dim == 8:  # elmo_b disabled: elmo_a is the nearest (of another width: an error naming both)
        without_b = spacy.load(tmp_path / "saved", disable=["elmo_b"])
        assert without_b.get_pipe("elmo_a").listening_components == ["ner"]
        without_b("Alice went home .")
        # elmo_b enabled again (spaCy does not relink): elmo_a listed the listener still, ran its biLM with
        # autograd for it at every update, and got no gradient back. Now elmo_b alone feeds it from its next call.
        without_b.enable_pipe("elmo_b")
        texts = [eg.reference.text for eg in examples]
        ents = [[(e.start, e.end, e.label_) for e in d.ents] for d in without_b.pipe(texts)]
        assert ents == [[(e.start, e.end, e.label_) for e in d.ents] for d in reloaded.pipe(texts)]
        assert [without_b.get_pipe(n).listening_components for n in ("elmo_a", "elmo_b")] == [[], ["ner"]]
        assert _listener_of(without_b.get_pipe("ner")).upstream == "elmo_b"
        elmo_a = get_bilm(without_b.get_pipe("elmo_a").model)
        tuned = []  # the biLMs run with autograd

        def counting(bilm, *args, **kwargs):
            if torch.is_grad_enabled():
                tuned.append("elmo_a" if bilm is elmo_a else "other")
            return run_rows(bilm, *args, **kwargs)

        monkeypatch.setattr("spacy_elmo.pipeline.runner.run_rows", counting)
        before_a = {k: v.detach().clone() for k, v in elmo_a.named_parameters()}
        opt = without_b.resume_training()
        examples = [Example(without_b.make_doc(eg.reference.text), eg.reference) for eg in examples]
        without_b.update(examples, sgd=opt)
        without_b.update(examples, sgd=opt)
        assert tuned == ["other", "other"]
        assert all(torch.equal(v, dict(elmo_a.named_parameters())[k]) for k, v in before_a.items())


#: docs of mixed lengths, longest first: spaCy's parser and ner sort a batch by length into smaller ones
MIXED_TEXTS = [
    "Bob was in London and it was good today , as it was yesterday .",
    "Alice went home .",
    "Yesterday Bob went to Paris and it was bad .",
    "Paris .",
    "It was good and Alice was in London .",
    "Bob went home and it was good .",
]


def _listener_of(component) -> ElmoListener:
    (listener,) = [n for n in component.model.walk() if isinstance(n, ElmoListener)]
    return listener


def _two_elmo_listening_pipeline(tiny_dir, tmp_path, projection_dim):
    """elmo_a, elmo_b (another random biLM of projection_dim), then ner and textcat listening to elmo_a
    and ner_b listening to elmo_b."""
    torch.manual_seed(1)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": projection_dim})).save(tmp_path / "b")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", name="elmo_a", config={"weights": str(tiny_dir)})
    nlp.add_pipe("elmo", name="elmo_b", config={"weights": str(tmp_path / "b")})
    to_a, to_b = {**LISTENER, "upstream": "elmo_a"}, {**LISTENER, "upstream": "elmo_b"}
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": to_a}})
    nlp.add_pipe("textcat", config={"model": _textcat_model("textcat", to_a)})
    nlp.add_pipe("ner", name="ner_b", config={"model": {**NER, "tok2vec": to_b}})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4)])
    return nlp


def _record_listener_inputs(monkeypatch, listener: ElmoListener) -> dict:
    """``doc text -> (L + 1, n, 2P)`` layers the listener returned for it, each time it runs."""
    read, forward = {}, listener._func

    def recording(model, docs, is_train):
        outputs, backprop = forward(model, docs, is_train)
        read.update((doc.text, model.ops.to_numpy(out)) for doc, out in zip(docs, outputs))
        return outputs, backprop

    monkeypatch.setattr(listener, "_func", recording)
    return read


@pytest.mark.parametrize("projection_dim", [8, 4], ids=["same_width", "other_width"])
@pytest.mark.parametrize("textcat_batch_size", [None, 2])
def test_two_elmo_components_listeners_read_their_upstream_in_batches(
    tiny_dir, tmp_path, monkeypatch, projection_dim, textcat_batch_size
):
    """nlp.pipe with batches of several docs: ner re-sorts each batch by length into sub-batches (and textcat
    may be given its own batch_size), so the upstream's batch is not the listener's. Each listener still reads
    its own upstream's layers per doc (it read elmo_b's doc._.elmo: silently wrong vectors, or a shape error)."""
    nlp = _two_elmo_listening_pipeline(tiny_dir, tmp_path, projection_dim)
    upstreams = {"ner": "elmo_a", "textcat": "elmo_a", "ner_b": "elmo_b"}
    read = {name: _record_listener_inputs(monkeypatch, _listener_of(nlp.get_pipe(name))) for name in upstreams}
    cfg = {} if textcat_batch_size is None else {"textcat": {"batch_size": textcat_batch_size}}
    docs = list(nlp.pipe(MIXED_TEXTS, batch_size=8, component_cfg=cfg))
    assert [d._.elmo.shape[-1] for d in docs] == [2 * projection_dim] * len(docs)  # elmo_b's, written last
    # the oracle: each biLM alone on a fresh doc of the text (float32; the listeners read float16 doc data)
    alone = {
        (elmo, text): nlp.get_pipe(elmo).predict([nlp.make_doc(text)])[0]
        for elmo in ("elmo_a", "elmo_b")
        for text in MIXED_TEXTS
    }
    for name, elmo in upstreams.items():
        assert sorted(read[name]) == sorted(MIXED_TEXTS)
        for text in MIXED_TEXTS:
            numpy.testing.assert_allclose(read[name][text], alone[elmo, text], rtol=2e-3, atol=2e-3, err_msg=name)
    if projection_dim == 8:  # the two biLMs' layers are told apart by these tolerances
        assert not numpy.allclose(alone["elmo_a", MIXED_TEXTS[0]], alone["elmo_b", MIXED_TEXTS[0]], rtol=2e-3, atol=2e-3)


@Language.component("test_listener_merge_first_two")
def _merge_first_two(doc):
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    return doc


def test_two_elmo_components_listener_after_a_retokenizer(tiny_dir, tmp_path, monkeypatch):
    """A component merging tokens between the elmo components and the listening one: the listener reads its
    own upstream's layers for the current tokens (a merged token: the mean of its rows), not elmo_b's."""
    nlp = _two_elmo_listening_pipeline(tiny_dir, tmp_path, 8)
    nlp.add_pipe("test_listener_merge_first_two", after="elmo_b")
    read = _record_listener_inputs(monkeypatch, _listener_of(nlp.get_pipe("ner")))
    docs = list(nlp.pipe(MIXED_TEXTS, batch_size=8))
    for doc, text in zip(docs, MIXED_TEXTS):
        rows = nlp.get_pipe("elmo_a").predict([nlp.make_doc(text)])[0]
        expected = numpy.concatenate([rows[:, :2].mean(1, keepdims=True), rows[:, 2:]], axis=1)
        numpy.testing.assert_allclose(read[doc.text], expected, rtol=2e-3, atol=2e-3)


def test_two_elmo_components_annotating_in_training(tiny_dir, tmp_path, monkeypatch):
    """nlp.update with the elmo components annotating but not updated (no receive): the listener reads its
    upstream's per-doc layers in ner's update, and again when ner annotates the same docs right after (it
    keeps them through the read in training; taken there, ner read elmo_b's doc._.elmo when annotating)."""
    nlp = _two_elmo_listening_pipeline(tiny_dir, tmp_path, 8)
    listener = _listener_of(nlp.get_pipe("ner"))
    read, forward = [], listener._func

    def recording(model, docs, is_train):
        outputs, backprop = forward(model, docs, is_train)
        read.extend((is_train, doc.text, model.ops.to_numpy(out)) for doc, out in zip(docs, outputs))
        return outputs, backprop

    monkeypatch.setattr(listener, "_func", recording)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4, seed=3)]
    nlp.update(examples, sgd=Adam(0.001), exclude=["elmo_a", "elmo_b"], annotates=["elmo_a", "elmo_b", "ner"])
    assert sorted({is_train for is_train, _, _ in read}) == [False, True]
    for _, text, layers in read:
        numpy.testing.assert_allclose(layers, nlp.get_pipe("elmo_a").predict([nlp.make_doc(text)])[0], rtol=2e-3, atol=2e-3)


def test_layers_handed_to_listeners_do_not_keep_docs(tiny_dir, tmp_path):
    """The upstream hands each listener its layers per doc; that keeps no doc alive, and a listener that read
    a doc at prediction keeps nothing of it."""
    nlp = _two_elmo_listening_pipeline(tiny_dir, tmp_path, 8)
    listener = _listener_of(nlp.get_pipe("ner"))
    # handed over, never read: the component run on its own (a call's disable= would hand ner nothing)
    docs = list(nlp.get_pipe("elmo_a").pipe([nlp.make_doc(text) for text in MIXED_TEXTS], batch_size=8))
    assert len(listener._predicted) == len(MIXED_TEXTS)
    refs = [weakref.ref(doc) for doc in docs]
    del docs
    gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)
    assert len(listener._predicted) == 0
    kept = list(nlp.pipe(MIXED_TEXTS, batch_size=8))  # read by ner at prediction
    assert len(kept) == len(MIXED_TEXTS) and len(listener._predicted) == 0


@pytest.mark.parametrize("exclude", [[], ["textcat"]])
def test_pickle_pipeline_after_fine_tuning(tiny_dir, exclude):
    """A trained pipeline pickles (as nlp.pipe(n_process=2) with spawn needs): the listeners' per-batch
    hand-over (a closure of the component's update) is not pickled, nor the biLM's batch still waiting
    for the gradient of a listening component that did not train on it (excluded)."""
    import pickle

    nlp = _fine_tuned_ner_and_textcat(tiny_dir)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt, exclude=exclude)
    back = pickle.loads(pickle.dumps(nlp))
    text = "Yesterday Alice went home ."
    numpy.testing.assert_array_equal(back(text)._.elmo, nlp(text)._.elmo)
    numpy.testing.assert_array_equal(_tok2vec_output(back, text), _tok2vec_output(nlp, text))


def test_listening_component_disabled_at_load_then_enabled(tiny_dir, tmp_path):
    """spacy.load(..., disable=["ner"]), then nlp.enable_pipe("ner"): ner reads elmo's layers, as with
    spaCy's tok2vec (the relinking at load skips disabled components: its listener lost its upstream)."""
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": LISTENER})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.update(examples, sgd=nlp.initialize(lambda: examples))
    nlp.to_disk(tmp_path / "p")
    text = "Yesterday Alice went home ."
    loaded = spacy.load(tmp_path / "p", disable=["ner"])
    loaded.enable_pipe("ner")
    numpy.testing.assert_allclose(_tok2vec_output(loaded, text), _tok2vec_output(nlp, text), atol=1e-6)


@pytest.mark.parametrize("frozen", [True, False])
def test_renamed_upstream_is_a_clear_error_not_zeros(tiny_dir, frozen):
    """After nlp.rename_pipe the listener (upstream 'elmo') is no longer linked: training and prediction
    say so, instead of training on zero vectors (or on a stale batch of the old link)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": {**LISTENER, "upstream": "elmo"}}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt)
    nlp.rename_pipe("elmo", "elmo2")
    assert nlp.get_pipe("elmo2").listening_components == []
    others = [Example(nlp.make_doc(d.text), d) for d in make_docs(4, seed=3)]
    for run in (lambda: nlp.update(examples, sgd=opt), lambda: nlp.update(others, sgd=opt), lambda: nlp("Alice went home .")):
        with pytest.raises(ValueError, match=r"linked to no elmo component: .* named 'elmo' placed before"):
            run()
    nlp.rename_pipe("elmo2", "elmo")  # linked again
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    nlp.update(examples, sgd=opt)
    nlp("Alice went home .")



@pytest.mark.parametrize(
    "setting, value",
    [("dropout", 1.0), ("dropout", 1.5), ("dropout", -0.1), ("dropout", True), ("dropout", float("nan")),
     ("mix_l2", -0.01), ("mix_l2", float("inf")), ("mix_l2", float("nan")),
     ("initial_weights", [0.0, float("inf"), 0.0]), ("initial_weights", [0.0, float("-inf"), 0.0]),
     ("initial_weights", ["a", "b", "c"]), pytest.param("dropout", 10**400, id="dropout-huge-int"),
     pytest.param("mix_l2", 10**400, id="mix_l2-huge-int"), pytest.param("initial_weights", [0, 10**400, 0], id="weights-huge-int"),
     ("mix_l2", True), ("initial_weights", [True, False, True]), ("initial_weights", numpy.array([True, False, True])),
     ("initial_weights", ["1", "0", "0"]), ("width", True), ("width", 0), ("width", 16.0),
     ("learn_rate_scale", 0), ("learn_rate_scale", -0.1), ("learn_rate_scale", float("nan")),
     ("learn_rate_scale", float("inf")), ("learn_rate_scale", "0.1"), ("learn_rate_scale", None)],
)  # fmt: skip
def test_listener_settings_out_of_range_are_refused(setting, value):
    """spaCy's config checks only the types: ElmoListener.v1's dropout = 1 (or more) trained the task on
    zeroed ELMo features (thinc's dropout mask) and ran it on the real ones, a negative mix_l2 rewarded large
    mix weights, an infinite initial weight made every mixed vector NaN, and an infinite mix_l2 or a -inf
    initial weight made the mix weights NaN after one update; each now fails when the model is built,
    naming the setting (ScalarMix.v1's own key, l2, when it sets mix_l2). Bools (spaCy's config reads true as a
    number), numpy's too, and text were read as numbers: initial_weights = [true, false, true] as [1, 0, 1],
    width = true as 1; they are refused as well."""
    registered = spacy.util.registry.architectures.get("spacy_elmo.ElmoListener.v1")
    with pytest.raises(ValueError, match=setting):
        registered(upstream="elmo", **{setting: value})
    if setting not in ("width", "learn_rate_scale"):  # the thinc layers a config can also name on their own
        with pytest.raises(ValueError, match=r"dropout = |has l2 = .*spacy_elmo.ScalarMix.v1|initial_weights"):
            if setting == "dropout":
                elmo_dropout(value)
            else:
                scalar_mix_layer(**{"l2" if setting == "mix_l2" else setting: value})


@pytest.mark.parametrize(
    "setting, value",
    [("initial_weights", [True, False, True]), ("width", True), ("dropout", False), ("learn_rate_scale", True)],
)
def test_bool_listener_setting_names_the_setting_and_fix(setting, value):
    """A bool listener setting from Python code (spaCy's config validation refuses bools in a config) is refused
    as the other listener settings are: the setting, its value, the block and the fix."""
    registered = spacy.util.registry.architectures.get("spacy_elmo.ElmoListener.v1")
    with pytest.raises(ValueError) as err:
        registered(upstream="elmo", **{setting: value})
    message = str(err.value)
    assert f"The ELMo listener has {setting} = {value!r}" in message, message
    assert "spacy_elmo.ElmoListener.v1" in message and f"Fix {setting}" in message, message


@pytest.mark.parametrize("n_layers", [True, 0, 2.0])
def test_scalar_mix_layer_count_must_be_whole(n_layers):
    """ScalarMix.v1's n_layers = true made a one-layer mix (and 2.0 a float size): refused, naming the value."""
    with pytest.raises(ValueError, match=f"ScalarMix needs n_layers >= 1 .*found {n_layers!r}"):
        scalar_mix_layer(n_layers=n_layers)


@pytest.mark.parametrize(
    "setting, value",
    [("dropout", 0), ("dropout", 0.999), ("dropout", numpy.float32(0.5)), ("mix_l2", 0), ("mix_l2", numpy.float32(0.1)),
     ("initial_weights", numpy.array([0.0, -1e9, 1.0])), ("initial_weights", numpy.array([0, -9, 1])),
     ("initial_weights", [numpy.float32(0.0), 0, 1.0]), ("width", numpy.int64(5)), ("width", 5)],
)  # fmt: skip
def test_listener_settings_in_range_train(setting, value):
    """The bounds' accepted sides (dropout 0 and just under 1, mix_l2 0) and numpy scalars, which Python code
    passes (numpy.float32 was refused by the range check): the listener's mix and dropout train one step to
    finite mix weights, and the values are kept as Python floats (FloatSetting)."""
    registered = spacy.util.registry.architectures.get("spacy_elmo.ElmoListener.v1")
    model = registered(upstream="elmo", **{setting: value})
    _, mix, drop = model.layers
    X = [numpy.random.RandomState(0).randn(3, 4, 5).astype("float32")]
    mix.initialize(X=X)
    Y, backprop = mix(X, is_train=True)
    drop(Y, is_train=True)
    backprop([numpy.ones_like(y) for y in Y])
    mix.finish_update(Adam(0.001, grad_clip=1.0))
    assert numpy.isfinite(mix.get_param("w")).all()
    assert isinstance(drop.attrs["elmo_rate"], float) and isinstance(mix.attrs["l2"], float)
    if setting == "width":
        assert type(model.get_dim("nO")) is int and model.get_dim("nO") == value
    elif setting == "initial_weights":
        assert mix.attrs["initial_weights"] == [float(v) for v in value]
    else:
        expected = float(value)
        assert (drop.attrs["elmo_rate"] if setting == "dropout" else mix.attrs["l2"]) == expected


def test_unlinked_listener_under_nlp_pipe_names_its_component(tiny_dir, tmp_path):
    """Under nlp.pipe spaCy runs each component from spacy.util._pipe; the error's replace_listeners call
    fell back to COMPONENT there (the frame it read held the loop's last component, another one)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    for name in ("ner1", "ner2"):
        nlp.add_pipe("ner", name=name, config={"model": {**NER, "tok2vec": LISTENER}})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4)])
    nlp.to_disk(tmp_path / "pipeline")
    unlinked = spacy.load(tmp_path / "pipeline", exclude=["elmo"])
    for run in (lambda: unlinked("Alice went home ."), lambda: list(unlinked.pipe(["Alice went home ."]))):
        with pytest.raises(ValueError) as err:
            run()
        assert "nlp.replace_listeners(ELMO, 'ner1', ['model.tok2vec'])" in str(err.value), str(err.value)


def _fed_listener(n_docs: int = 2):
    """A listener of "elmo" (nL 3, nO 4) for "ner" that received a training batch of ``n_docs`` docs; the
    docs and their layers."""
    from spacy_elmo.pipeline.doc_data import install_extensions

    install_extensions()
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(text) for text in ("Alice lives in New York .", "Bob went home .")[:n_docs]]
    rng = numpy.random.default_rng(0)
    layers = [rng.standard_normal((3, len(doc), 4)).astype("float32") for doc in docs]
    listener = ElmoListener(upstream_name="elmo")
    listener.upstream, listener.component = "elmo", "ner"
    listener.set_dim("nL", 3)
    listener.set_dim("nO", 4)
    listener.receive(ElmoListener.get_batch_id(docs), layers, None, docs)
    return listener, docs, layers


def test_the_kept_training_layers_serve_only_their_docs_as_tokenized():
    """At prediction a doc without layers of its own gets the layers of the last training batch (an annotating
    listening component predicting on the docs it trained on), one row per current token: a doc retokenized
    since (a merge_entities between components) gets them aligned by character offset (a merged token: the mean
    of its rows), never rows of other tokens; a doc whose ``doc._.elmo`` holds the mixed vectors only
    (store = "mix", 2-D) gets them too; clear() drops them."""
    listener, docs, layers = _fed_listener()
    predicted = listener.predict(docs)
    for got, want in zip(predicted, layers):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)
    mixed = docs[1]
    set_doc_data(mixed, layers[1], numpy.full(3, 1 / 3, dtype="float32"), "mix", "float32")
    assert mixed._.elmo.ndim == 2
    numpy.testing.assert_array_equal(listener.ops.to_numpy(listener.predict([mixed])[0]), layers[1])
    merged = docs[0]
    with merged.retokenize() as retokenizer:
        retokenizer.merge(merged[3:5])  # "New York": 5 tokens, the layers 6 rows
    got = listener.ops.to_numpy(listener.predict([merged])[0])
    numpy.testing.assert_allclose(got, _merged_rows(layers[0], 3, 5), rtol=1e-6)
    listener, docs, layers = _fed_listener()
    listener.clear()
    with pytest.raises(ValueError, match="no ELMo data"):
        listener.predict(docs[:1])


@pytest.mark.parametrize("copy_of", ["pickle", "deepcopy"])
def test_a_copied_listener_without_layers_for_a_doc_says_so(copy_of):
    """An unpickled or deep-copied listener keeps no training batch (no model state) and still has its
    per-doc stores: predicting on a doc without layers is E_LISTENER_NO_DATA, no AttributeError."""
    import copy
    import pickle

    listener, docs, _ = _fed_listener()
    copied = pickle.loads(pickle.dumps(listener)) if copy_of == "pickle" else copy.deepcopy(listener)
    assert len(copied._trained) == 0 and len(copied._predicted) == 0
    with pytest.raises(ValueError, match="no ELMo data"):
        copied.predict(docs[:1])


def _merged_rows(layers, start, end):
    """``layers`` ``(L + 1, n, W)`` with rows start..end-1 replaced by their mean (NumPy float64 oracle)."""
    layers = layers.astype("float64")
    return numpy.concatenate([layers[:, :start], layers[:, start:end].mean(1, keepdims=True), layers[:, end:]], axis=1)


def test_a_training_batch_retokenized_after_the_upstream_reads_its_layers_and_sends_their_gradient():
    """A component between the upstream and the listening one that retokenizes the docs in place (spaCy's
    Language.update runs annotating ones, e.g. merge_entities, on the same docs): the listener's update reads the
    received layers for the current tokens, as at prediction (a merged token: the mean of its rows; a split piece:
    its token's row), and hands the gradient back to the received rows (a merged token's to each of its rows over
    their count). spaCy's Tok2VecListener raises E953 (mismatched IDs) there; ours raised E_LISTENER_BATCH."""
    listener, docs, layers = _fed_listener()
    sent = []
    listener._backprop = lambda d_layers: sent.append(d_layers) or []
    with docs[0].retokenize() as retokenizer:
        retokenizer.merge(docs[0][3:5])  # "New York": 5 tokens, the layers 6 rows
    with docs[1].retokenize() as retokenizer:  # "Bob" -> "B", "ob": 5 tokens, the layers 4 rows
        retokenizer.split(docs[1][0], ["B", "ob"], heads=[(docs[1][0], 1), (docs[1][0], 0)])
    split = numpy.concatenate([layers[1][:, :1], layers[1]], axis=1)
    outputs, backprop = listener.begin_update(docs)
    numpy.testing.assert_allclose(listener.ops.to_numpy(outputs[0]), _merged_rows(layers[0], 3, 5), rtol=1e-6)
    numpy.testing.assert_array_equal(listener.ops.to_numpy(outputs[1]), split)
    rng = numpy.random.default_rng(1)
    d_outputs = [rng.standard_normal(out.shape).astype("float32") for out in outputs]
    assert backprop(d_outputs) == []
    (d_layers,) = sent
    d0, d1 = d_outputs
    want0 = numpy.concatenate([d0[:, :3], d0[:, 3:4] / 2, d0[:, 3:4] / 2, d0[:, 4:]], axis=1)
    want1 = numpy.concatenate([d1[:, :1] + d1[:, 1:2], d1[:, 2:]], axis=1)
    numpy.testing.assert_allclose(listener.ops.to_numpy(d_layers[0]), want0, rtol=1e-6)
    numpy.testing.assert_allclose(listener.ops.to_numpy(d_layers[1]), want1, rtol=1e-6)
    # a doc the listener reads in a batch of its own: zeros for the other one
    sent.clear()
    _, backprop = listener.begin_update(docs[1:])
    backprop(d_outputs[1:])
    numpy.testing.assert_array_equal(listener.ops.to_numpy(sent[0][0]), numpy.zeros_like(layers[0]))
    numpy.testing.assert_allclose(listener.ops.to_numpy(sent[0][1]), want1, rtol=1e-6)
    # docs of another batch (not the received doc objects) are still E_LISTENER_BATCH
    other = [spacy.blank("en").make_doc(doc.text + " Hi") for doc in docs]
    with pytest.raises(ValueError, match="no upstream output"):
        listener.begin_update(other)


def test_a_merged_token_over_whitespace_reads_and_trains_its_words_rows_alone():
    """A training doc whose merged token spans a whitespace token ("New  York": New, "  "... York) averaged the
    whitespace's zero row in (2/3 of the words' mean), where spans and docs leave whitespace out. The listener
    reads the mean of the words' rows, and its backprop (checked against finite differences of that forward)
    gives the whitespace row nothing."""
    from spacy_elmo.pipeline.doc_data import install_extensions

    install_extensions()
    doc = spacy.blank("en").make_doc("I love New  York city .")
    assert [t.text for t in doc] == ["I", "love", "New", " ", "York", "city", "."]
    rng = numpy.random.default_rng(2)
    layers = rng.standard_normal((3, len(doc), 4)).astype("float32")
    layers[:, 3] = 0.0  # the whitespace token's row, as the upstream gives it
    listener = ElmoListener(upstream_name="elmo")
    listener.upstream, listener.component = "elmo", "ner"
    listener.set_dim("nL", 3)
    listener.set_dim("nO", 4)
    sent = []
    listener.receive(ElmoListener.get_batch_id([doc]), [layers], lambda d: sent.append(d) or [], [doc])
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:5])
    assert doc[2].text == "New  York"
    (out,), backprop = listener.begin_update([doc])
    want = numpy.concatenate([layers[:, :2], layers[:, [2, 4]].mean(1, keepdims=True), layers[:, 5:]], axis=1)
    numpy.testing.assert_allclose(listener.ops.to_numpy(out), want, rtol=1e-6)
    d_out = rng.standard_normal(out.shape).astype("float32")
    backprop([d_out])
    (d_layers,) = sent[0]
    d_layers = listener.ops.to_numpy(d_layers)
    assert not d_layers[:, 3].any()
    # finite differences of the forward (linear in the layers: exact up to float32 rounding)
    eps = 1e-2
    for index in [(0, 2, 1), (1, 3, 0), (2, 4, 3), (0, 5, 2)]:
        bumped = layers.copy()
        bumped[index] += eps
        listener.receive(ElmoListener.get_batch_id([doc]), [bumped], None, [doc])  # the doc as it is now: merged
        listener._trained = weakref.WeakKeyDictionary({doc: listener._trained[doc]._replace(
            starts=numpy.asarray([0, 2, 7, 11, 12, 17, 22], dtype="int64"))})  # the rows' original offsets
        listener._outputs = [bumped]
        listener._batch_id = -1  # read through the realignment, as above
        (moved,), _ = listener.begin_update([doc])
        numeric = float(((listener.ops.to_numpy(moved) - listener.ops.to_numpy(out)) * d_out).sum()) / eps
        assert numeric == pytest.approx(float(d_layers[index]), abs=1e-3), index


def test_an_update_on_a_received_doc_beside_a_doc_of_no_batch_is_refused_not_read_from_the_kept_layers():
    """The layers kept from the last training batch serve prediction only: an update whose docs are not all of
    that batch (here a received doc and an empty one) is E_LISTENER_BATCH, not the received doc's stale layers
    with a backprop that hands the upstream no gradient."""
    listener, docs, _ = _fed_listener()
    with pytest.raises(ValueError, match="no upstream output"):
        listener.begin_update([docs[0], spacy.blank("en").make_doc("")])


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("elmo_annotates", [False, True])
def test_update_with_a_retokenizer_between_elmo_and_a_listening_component(tiny_dir, frozen, elmo_annotates):
    """nlp.update with a component merging tokens annotating between elmo and a listening tagger (spacy train
    with annotating_components): the tagger trains on the merged docs from elmo's layers for the current tokens
    (before: E_LISTENER_BATCH; with elmo annotating and fine-tuned, no gradient from the tagger at all), and
    its gradient fine-tunes the biLM when elmo is not frozen."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen})
    nlp.add_pipe("test_listener_merge_first_two")
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "nO": None, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4, parsed=True)]
    opt = nlp.initialize(lambda: examples)
    listener = _listener_of(nlp.get_pipe("tagger"))
    read = []
    forward = listener._func

    def recording(model, docs, is_train):
        outputs, backprop = forward(model, docs, is_train)
        read.extend((doc, model.ops.to_numpy(out).copy()) for doc, out in zip(docs, outputs))
        return outputs, backprop

    listener._func = recording
    elmo = nlp.get_pipe("elmo")
    expected = [elmo.predict([nlp.make_doc(eg.predicted.text)])[0] for eg in examples]
    bilm = get_bilm(elmo.model)
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    annotates = ["elmo", "test_listener_merge_first_two"] if elmo_annotates else ["test_listener_merge_first_two"]
    nlp.update(examples, sgd=opt, drop=0.0, annotates=annotates)
    assert [len(doc) for doc, _ in read] == [8] * len(examples)  # merged (Language.update's copies), 9 tokens before
    for (doc, got), eg, layers in zip(read, examples, expected):
        assert doc.text == eg.predicted.text
        numpy.testing.assert_allclose(got, _merged_rows(layers, 0, 2), rtol=1e-4, atol=1e-5)
    moved = any(not torch.equal(v, before[k]) for k, v in bilm.state_dict().items())
    assert moved == (not frozen)


@pytest.mark.parametrize("call", ["nlp", "pipe"])
def test_a_retokenizer_between_elmo_and_a_listening_component_at_prediction(tiny_dir, monkeypatch, call):
    """nlp(text) and nlp.pipe with a component merging tokens between elmo and the listening one: the listener
    reads elmo's layers for the current tokens (a merged token: the mean of its rows), and so does the listening
    component run again on the doc later (from doc._.elmo and doc._.elmo_idx)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp.add_pipe("test_listener_merge_first_two")
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "nO": None, "tok2vec": LISTENER}})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(4, parsed=True)])
    read = _record_listener_inputs(monkeypatch, _listener_of(nlp.get_pipe("tagger")))
    texts = MIXED_TEXTS[:3]
    docs = [nlp(text) for text in texts] if call == "nlp" else list(nlp.pipe(texts, batch_size=2))
    first = dict(read)
    for doc, text in zip(docs, texts):
        want = _merged_rows(nlp.get_pipe("elmo").predict([nlp.make_doc(text)])[0], 0, 2)
        numpy.testing.assert_allclose(first[doc.text], want, rtol=2e-3, atol=2e-3)  # float16 doc data
        read.clear()
        nlp.get_pipe("tagger")(doc)
        numpy.testing.assert_allclose(read[doc.text], want, rtol=2e-3, atol=2e-3)


def test_a_training_batch_read_in_another_order_or_twice_gets_each_docs_layers_and_sums_its_gradient():
    """The batch id is a sum over the docs' words: the received docs reversed have the same id, and the batch's
    outputs handed back as they came gave each doc the other's layers (here of other lengths: the guard on the
    lengths sends them through the per-doc path). A doc read twice sends the sum of both gradients. The listener
    that reads a received batch is warmed up (its attrs, saved with the model: docs without layers then are
    errors, not zeros), through the per-doc path too."""
    listener, docs, layers = _fed_listener()
    assert len(docs[0]) != len(docs[1]) and ElmoListener.get_batch_id(docs[::-1]) == listener._batch_id
    sent = []
    listener._backprop = lambda d_layers: sent.append(d_layers) or []
    listener.attrs["warming_up"] = True  # as initialize leaves it
    outputs, backprop = listener.begin_update(docs[::-1])
    assert listener.attrs["warming_up"] is False
    for got, want in zip(outputs, layers[::-1]):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)
    rng = numpy.random.default_rng(2)
    d_outputs = [rng.standard_normal(out.shape).astype("float32") for out in outputs]
    backprop(d_outputs)
    for got, want in zip(sent.pop(), d_outputs[::-1]):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)
    outputs, backprop = listener.begin_update([docs[1], docs[1]])
    d_a, d_b = (rng.standard_normal(out.shape).astype("float32") for out in outputs)
    backprop([d_a, d_b])
    numpy.testing.assert_array_equal(listener.ops.to_numpy(sent[0][0]), numpy.zeros_like(layers[0]))
    numpy.testing.assert_allclose(listener.ops.to_numpy(sent[0][1]), d_a + d_b, rtol=1e-6)


def test_a_training_batch_of_docs_of_one_length_read_reversed_gets_each_docs_layers():
    """Docs of the same length read in another order than received: the same batch id and the same lengths, and
    the listener handed back the batch's outputs as received (each doc the other's layers, and its gradient)."""
    from spacy_elmo.pipeline.doc_data import install_extensions

    install_extensions()
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(text) for text in ("Alice went home .", "Bob is here .")]
    rng = numpy.random.default_rng(3)
    layers = [rng.standard_normal((3, 4, 4)).astype("float32") for _ in docs]
    listener = ElmoListener(upstream_name="elmo")
    listener.upstream, listener.component = "elmo", "ner"
    listener.set_dim("nL", 3)
    listener.set_dim("nO", 4)
    listener.receive(ElmoListener.get_batch_id(docs), layers, None, docs)
    sent = []
    listener._backprop = lambda d_layers: sent.append(d_layers) or []
    outputs, backprop = listener.begin_update(docs[::-1])
    for got, want in zip(outputs, layers[::-1]):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)
    d_outputs = [rng.standard_normal(out.shape).astype("float32") for out in outputs]
    backprop(d_outputs)
    for got, want in zip(sent[0], d_outputs[::-1]):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)
    outputs, _ = listener.begin_update(docs)  # in their order: the batch's own outputs
    assert all(got is want for got, want in zip(outputs, layers))


def test_a_copied_listener_is_a_listener_with_its_settings_and_nothing_received():
    """thinc's Model.copy (of the listener or of a model holding it) gives an ElmoListener with the same
    settings, sizes and attrs, linked to nothing and fed nothing (thinc's own gave a plain Model, as it does
    for spaCy's Tok2VecListener); used before a pipeline links it, it says so."""
    from thinc.api import chain, Linear

    listener, docs, _ = _fed_listener()
    listener.initialize()
    for copied in (listener.copy(), chain(listener, Linear()).copy().layers[0]):
        assert type(copied) is ElmoListener and copied is not listener and copied.id != listener.id
        assert copied.upstream_name == "elmo" and copied.sizes == (3, 4) and copied.built_upon
        assert copied.attrs == listener.attrs and copied.attrs is not listener.attrs
        assert copied.upstream is None and copied.component is None and copied._batch_id is None
        assert len(copied._trained) == 0 and len(copied._predicted) == 0
        with pytest.raises(ValueError, match="is a copy"):
            copied.predict(docs)
    assert listener.upstream == "elmo" and len(listener._trained) == len(docs)  # the original as it was


def test_replace_listeners_of_a_tok2vec_that_listens_to_elmo(tiny_dir, tmp_path):
    """A tok2vec component with spacy_elmo.ElmoTok2Vec.v1 listening to elmo, ner listening to tok2vec:
    nlp.replace_listeners("tok2vec", "ner", ...) copies tok2vec's model, its ElmoListener with it, into ner.
    The copy (a plain thinc Model before: AttributeError at nlp(text)) is linked by the next link (a reload
    here; a config that sources ner with replace_listeners links it as it adds ner), then ner reads elmo's
    layers through it as tok2vec did, without the tok2vec component, and trains."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp.add_pipe("tok2vec", config={"model": TOK2VEC})
    t2v_listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 16, "upstream": "*"}
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": t2v_listener}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    opt = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=opt)
    text = "Yesterday Alice went home . It was good ."


    def ner_tok2vec_output(nlp):  # ner's tok2vec, then its projection (reading doc.tensor through Tok2VecListener)
        return nlp.get_pipe("ner").model.get_ref("tok2vec").predict([nlp(text)])

    expected = ner_tok2vec_output(nlp)
    nlp.to_disk(tmp_path / "source")
    nlp.replace_listeners("tok2vec", "ner", ["model.tok2vec"])
    (copied,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_listener"]
    assert type(copied) is ElmoListener
    with pytest.raises(ValueError, match="The ELMo listener in 'ner' is a copy"):
        nlp(text)
    nlp.from_bytes(nlp.to_bytes())
    assert nlp.get_pipe("elmo").listener_map["ner"] == [copied]
    nlp.remove_pipe("tok2vec")
    numpy.testing.assert_allclose(ner_tok2vec_output(nlp), expected, rtol=1e-4, atol=1e-4)
    nlp.update(examples, sgd=opt)  # elmo feeds the copy
    assert copied._batch_id is not None
    sourced = spacy.util.load_model_from_config(
        spacy.util.Config().from_str(
            f"""
            [nlp]
            lang = "en"
            pipeline = ["elmo", "ner"]
            [components]
            [components.elmo]
            source = "{tmp_path / 'source'}"
            [components.ner]
            source = "{tmp_path / 'source'}"
            replace_listeners = ["model.tok2vec"]
            """
        ),
        auto_fill=True,
    )
    assert sourced.get_pipe("elmo").listener_map["ner"]
    numpy.testing.assert_allclose(ner_tok2vec_output(sourced), expected, rtol=1e-4, atol=1e-4)
    # the copy, once linked, is a listener as any: unlinked again (remove_listener, as spaCy's replace_listeners
    # calls it), it says it is linked to no elmo component, not that it is a copy no elmo component linked yet
    assert nlp.get_pipe("elmo").remove_listener(copied, "ner") and copied.upstream is None
    with pytest.raises(ValueError, match="linked to no elmo component") as refused:
        copied.predict([nlp.make_doc(text)])
    assert "is a copy" not in str(refused.value)


def test_a_mix_with_a_large_weight_takes_that_layer_and_stays_finite():
    """The mix's softmax subtracts the largest weight: initial_weights of [0, 0, 100] (the top layer alone, written with a
    large weight where ScalarMix's example writes [-1e9, -1e9, 0]) overflowed exp in float32 and every mixed vector, and
    every gradient, was NaN (inf / inf)."""
    rng = numpy.random.default_rng(3)
    X = rng.normal(size=(3, 4, 5)).astype("float32")
    for weights in ([0.0, 0.0, 100.0], [0.0, 0.0, 1e9]):
        mix = scalar_mix_layer(initial_weights=weights)
        mix.initialize(X=[X])
        (Y,), bp = mix.begin_update([X])
        numpy.testing.assert_allclose(Y, X[2], rtol=1e-6, atol=1e-6)
        (dX,) = bp([numpy.ones((4, 5), dtype="float32")])
        assert numpy.isfinite(dX).all() and numpy.isfinite(mix.get_grad("w")).all(), weights


def test_a_word_row_with_zeros_in_it_is_no_whitespace_row():
    """Only a row that is zero in every element of every layer is a whitespace token's (left out of the layer norm's
    statistics and kept zero): a word's row with exact zeros in it (a float16 store flushes tiny values to 0) is a
    word's, normalised and mixed as the others."""
    rng = numpy.random.default_rng(4)
    X = (rng.normal(size=(3, 5, 6)) * 2 + 1).astype("float32")
    X[:, 1, :3] = 0  # row 1: half zeros in every layer
    X[0, 3] = 0  # row 3: all zeros in layer 0
    mix = scalar_mix_layer(layer_norm=True)
    mix.initialize(X=[X])
    (Y,) = mix.predict([X])
    numpy.testing.assert_allclose(Y, _numpy_layer_norm(X).mean(axis=0), rtol=1e-5, atol=1e-5)
    assert Y[1].any() and Y[3].any()
