"""ElmoListener behaviours that the mutation audit of ``spacy_elmo/pipeline/listener.py`` found untested (session 49):
each test here fails for a one-line change of the listener that the other tests let through."""

import pickle

import numpy
import pytest
import spacy

from spacy_elmo.pipeline.doc_data import install_extensions, set_doc_data
from spacy_elmo.pipeline.listener import ElmoListener

from .test_listener import _fed_listener, _merged_rows


def test_clear_forgets_the_batch_so_an_unfed_update_is_not_fed_not_a_stale_batch():
    """clear() (spaCy relinking the pipeline) forgets the last training batch entirely: an update on docs that no
    upstream fed afterwards is E_LISTENER_NOT_FED, not E_LISTENER_BATCH against the batch id of the forgotten one."""
    listener, docs, _ = _fed_listener()
    listener.clear()
    with pytest.raises(ValueError, match="got no ELMo layers for a training batch") as raised:
        listener.begin_update(docs)
    assert "no upstream output" not in str(raised.value)


def test_a_copy_keeps_which_upstream_sized_it():
    """Model.copy keeps ``sized_by``: the upstream that sized the original resizes its copies with new weights
    (a copy whose sizes came with a saved pipeline has None and is checked instead)."""
    listener, _, _ = _fed_listener()
    listener.sized_by = 12345
    assert listener.copy().sized_by == 12345
    listener.sized_by = None
    assert listener.copy().sized_by is None


def test_a_listener_pickles_without_the_upstreams_backprop():
    """What the upstream handed over for a batch is no model state: a listener whose received backprop cannot be
    pickled (a closure over the component) pickles, and comes back with none."""
    listener, docs, _ = _fed_listener()
    listener.receive(ElmoListener.get_batch_id(docs), listener._outputs, lambda d_layers: [], docs)
    copied = pickle.loads(pickle.dumps(listener))
    assert copied._backprop is None and copied._batch_id is None and copied._outputs is None
    assert copied.sizes == (3, 4) and copied.upstream == "elmo"


def test_an_error_outside_a_pipeline_names_the_linked_component_in_its_replace_call():
    """Called outside any pipeline (no spaCy frame names the component), the listener's errors name the component
    its upstream linked it to in the replace_listeners call, not a COMPONENT placeholder."""
    listener, docs, _ = _fed_listener()
    listener.clear()
    with pytest.raises(ValueError) as raised:
        listener.predict(docs[:1])
    message = str(raised.value)
    assert "nlp.replace_listeners('elmo', 'ner', ['model.tok2vec.elmo'])" in message
    assert "COMPONENT" not in message


def test_find_listener_path_skips_a_listener_with_its_own_bilm():
    """find_listener_path finds the first ElmoListener.v1 block that listens (no ``bilm`` of its own): one that
    nlp.replace_listeners already gave a biLM is no listener any more."""
    from spacy_elmo.pipeline.listener import LISTENER_ARCH, find_listener_path

    own = {"@architectures": LISTENER_ARCH, "bilm": {"@architectures": "spacy_elmo.ElmoBiLM.v2"}}
    listening = {"@architectures": LISTENER_ARCH, "upstream": "*"}
    assert find_listener_path({"a": own}) is None
    assert find_listener_path({"a": own, "b": {"c": listening}}) == ("b", "c")
    assert find_listener_path({"a": listening, "b": own}) == ("a",)


def test_a_received_doc_retokenized_to_as_many_tokens_reads_its_realigned_rows():
    """A received doc that a component retokenized in place to the same number of tokens (a merge and a split)
    is read realigned to its current tokens by character offset, never its received rows as they are: its batch
    id (a sum over its words) changed, though its place and length did not."""
    listener, docs, layers = _fed_listener()
    doc = docs[0]  # Alice lives in New York .
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[3:5])  # "New York"
    with doc.retokenize() as retokenizer:  # "Alice" -> "Al", "ice"
        retokenizer.split(doc[0], ["Al", "ice"], heads=[(doc[0], 1), (doc[0], 0)])
    assert len(doc) == layers[0].shape[1]
    outputs, _ = listener.begin_update(docs)
    merged = _merged_rows(layers[0], 3, 5)
    want = numpy.concatenate([merged[:, :1], merged], axis=1)
    numpy.testing.assert_allclose(listener.ops.to_numpy(outputs[0]), want, rtol=1e-6)
    numpy.testing.assert_array_equal(listener.ops.to_numpy(outputs[1]), layers[1])


def _handed(doc, layers):
    return layers, doc.to_array("IDX").astype("int64")


def _listener():
    install_extensions()
    listener = ElmoListener(upstream_name="elmo")
    listener.upstream, listener.component = "elmo", "ner"
    listener.set_dim("nL", 3)
    listener.set_dim("nO", 4)
    return listener


def test_the_layers_handed_at_prediction_are_read_once():
    """At prediction the listener reads the layers handed over for a doc once: read again later (another elmo
    component, or the user, wrote doc._.elmo since), the doc gives its doc._.elmo, not the stale hand-over."""
    listener = _listener()
    doc = spacy.blank("en").make_doc("Alice went home")
    rng = numpy.random.default_rng(0)
    handed, stored = (rng.standard_normal((3, 3, 4)).astype("float32") for _ in range(2))
    listener.receive_predicted([doc], [_handed(doc, handed)])
    numpy.testing.assert_array_equal(listener.ops.to_numpy(listener.predict([doc])[0]), handed)
    assert len(listener._predicted) == 0
    set_doc_data(doc, stored, numpy.full(3, 1 / 3, dtype="float32"), "all", "float32")
    numpy.testing.assert_array_equal(listener.ops.to_numpy(listener.predict([doc])[0]), stored)


def test_the_layers_handed_over_serve_an_update_and_then_the_prediction_after_it():
    """An update reads the layers handed over for its docs and keeps them: an annotating listening component
    predicts on the same docs after its update (spaCy's Language.update), and reads the same float32 layers."""
    listener = _listener()
    doc = spacy.blank("en").make_doc("Alice went home")
    handed = numpy.random.default_rng(0).standard_normal((3, 3, 4)).astype("float32")
    listener.receive_predicted([doc], [_handed(doc, handed)])
    outputs, _ = listener.begin_update([doc])
    numpy.testing.assert_array_equal(listener.ops.to_numpy(outputs[0]), handed)
    numpy.testing.assert_array_equal(listener.ops.to_numpy(listener.predict([doc])[0]), handed)


def test_an_update_on_a_received_doc_beside_an_annotated_doc_of_no_batch_is_refused():
    """The layers kept from the last training batch serve prediction only: an update on a received doc beside a
    doc of no batch that carries its own doc._.elmo is E_LISTENER_BATCH, not the received doc's kept layers (whose
    gradient would reach no upstream) beside the other doc's."""
    listener, docs, _ = _fed_listener()
    other = spacy.blank("en").make_doc("Carol left")
    layers = numpy.random.default_rng(1).standard_normal((3, 2, 4)).astype("float32")
    set_doc_data(other, layers, numpy.full(3, 1 / 3, dtype="float32"), "all", "float32")
    with pytest.raises(ValueError, match="no upstream output"):
        listener.begin_update([docs[0], other])


# -- spacy_elmo/pipeline/architectures.py ---------------------------------------------------------------------------


def test_the_registered_blocks_defaults_are_the_documented_ones():
    """A config that leaves a setting out gets the default spaCy fills in and writes into the saved pipeline: the
    README's ElmoBiLM.v2 batch_tokens 4096, max_window 128, backend "auto", and the paper's ELMo dropout 0.5 after
    ElmoListener.v1's mix (elmo-spec)."""
    from spacy.util import registry

    from spacy_elmo.pipeline.bilm_layer import get_runner

    bilm = registry.architectures.get("spacy_elmo.ElmoBiLM.v2")()
    assert (bilm.attrs["batch_tokens"], bilm.attrs["max_window"], bilm.attrs["backend"]) == (4096, 128, "auto")
    listener = registry.architectures.get("spacy_elmo.ElmoListener.v1")()
    (dropout,) = [node for node in listener.walk() if node.name == "elmo_dropout"]
    assert dropout.attrs["elmo_rate"] == 0.5
    v1 = registry.architectures.get("spacy_elmo.ElmoBiLM.v1")()
    assert v1.attrs["max_window"] == 128 and get_runner(v1).layer_cache.limit == 0


def test_a_listener_block_with_a_width_has_its_output_width_before_initialize():
    """ElmoListener.v1 with ``width`` has that output width as built (spaCy's parser and ner read their tok2vec's
    nO when they are built), as a Python int also for a NumPy one."""
    from spacy.util import registry

    for width in (16, numpy.int64(16)):
        model = registry.architectures.get("spacy_elmo.ElmoListener.v1")(upstream="elmo", width=width)
        assert model.get_dim("nO") == 16 and type(model.get_dim("nO")) is int
        (listener,) = [node for node in model.walk() if isinstance(node, ElmoListener)]
        assert type(listener.get_dim("nO")) is int and type(listener.attrs["width_from_config"]) is int


def test_an_own_bilm_block_is_named_after_its_component():
    """ElmoListener.v1's own biLM (as nlp.replace_listeners writes it) records the component it is built in, which
    its messages (a sentence cut at max_window) name."""
    from spacy_elmo.pipeline.bilm_layer import get_runner

    nlp = spacy.blank("en")
    own = {"@architectures": "spacy_elmo.ElmoListener.v1", "bilm": {"@architectures": "spacy_elmo.ElmoBiLM.v2"}}
    ner = nlp.add_pipe("ner", name="my_ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 8, "maxout_pieces": 2, "use_upper": True, "nO": None, "tok2vec": own}})
    (bilm,) = [node for node in ner.model.walk() if node.name == "elmo_bilm"]
    assert get_runner(bilm).owner is not None and get_runner(bilm).owner[0] == "my_ner"


def test_elmo_tok2vec_takes_the_encoders_output_width():
    """ElmoTok2Vec.v1 reduces to the encoder's own width (its nO), not that of the encoder's first layer: an
    encoder that changes width inside runs, and the model's nO is what comes out. Its name is elmo_tok2vec (as
    spacy debug model shows it)."""
    from thinc.api import Linear, Model, chain, with_array

    from spacy_elmo.pipeline.architectures import ElmoTok2Vec

    docs = [spacy.blank("en").make_doc(text) for text in ("Alice lives here .", "Bob went")]
    rng = numpy.random.default_rng(0)

    def fixed(name, width):
        arrays = [rng.standard_normal((len(doc), width)).astype("float32") for doc in docs]
        return Model(name, lambda model, X, is_train: (arrays, lambda dY: []), dims={"nO": width})

    encode = chain(with_array(Linear(nO=8, nI=6)), with_array(Linear(nO=6, nI=8)))
    model = ElmoTok2Vec(fixed("embed", 5), fixed("elmo", 4), encode)
    assert model.name == "elmo_tok2vec" and model.get_dim("nO") == 6
    model.initialize(X=docs)
    assert [model.ops.to_numpy(Y).shape for Y in model.predict(docs)] == [(4, 6), (2, 6)]


def test_prediction_on_the_docs_of_the_last_training_batch_reads_their_new_layers():
    """The batch received in training serves updates only: predicting on those same docs reads the layers the
    upstream handed over at prediction (a fine-tuned biLM's, changed by the step since), not the batch's."""
    listener, docs, layers = _fed_listener()
    rng = numpy.random.default_rng(5)
    new = [rng.standard_normal(one.shape).astype("float32") for one in layers]
    listener.receive_predicted(docs, [_handed(doc, one) for doc, one in zip(docs, new)])
    for got, want in zip(listener.predict(docs), new):
        numpy.testing.assert_array_equal(listener.ops.to_numpy(got), want)


def _predict_while_initializing(listener, docs):
    """What ``listener.predict(docs)`` gives inside a thinc Model.initialize (shape inference on sample docs)."""
    from thinc.api import Model

    got = []
    Model("probe", lambda model, X, is_train: (X, lambda dY: dY), init=lambda model, X=None, Y=None: got.extend(
        listener.predict(docs))).initialize()
    return got


@pytest.mark.parametrize("first", ["update", "predict"])
def test_the_first_real_layers_end_the_warm_up_zeros(first):
    """A freshly initialized listener gives zeros for a doc without ELMo data while a model initializes (its
    sample docs); once it has read real layers (a training batch, or a doc's own at prediction), such a doc is
    E_LISTENER_NO_DATA there too, never zeros."""
    listener, docs, _ = _fed_listener()
    listener.initialize()
    bare = spacy.blank("en").make_doc("Carol left")
    (zeros,) = _predict_while_initializing(listener, [bare])
    assert zeros.shape == (3, 2, 4) and not zeros.any()
    if first == "update":
        listener.begin_update(docs)
    else:
        own = spacy.blank("en").make_doc("Dave stayed")
        layers = numpy.random.default_rng(2).standard_normal((3, 2, 4)).astype("float32")
        set_doc_data(own, layers, numpy.full(3, 1 / 3, dtype="float32"), "all", "float32")
        listener.predict([own])
    with pytest.raises(ValueError, match="no ELMo data"):
        _predict_while_initializing(listener, [bare])


def test_the_warm_up_zeros_warn_in_an_update_only():
    """While a model initializes (or spacy debug model runs), a doc without ELMo data gets zeros; an update on
    them (spacy debug model's, which trains the listening component alone) warns W_LISTENER_ZEROS, the
    predictions of shape inference do not."""
    import warnings

    from thinc.api import Model

    listener = _listener()  # fed nothing yet
    listener.initialize()
    bare = spacy.blank("en").make_doc("Carol left")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _predict_while_initializing(listener, [bare])
    got = []
    with pytest.warns(UserWarning, match="reads zeros for the ELMo layers"):
        Model("probe", lambda model, X, is_train: (X, lambda dY: dY), init=lambda model, X=None, Y=None: got.extend(
            listener.begin_update([bare])[0])).initialize()
    assert got[0].shape == (3, 2, 4) and not got[0].any()
