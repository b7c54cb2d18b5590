"""The elmo component: loading, doc data, vectors and hooks, errors."""

import warnings

import numpy
import pytest
import spacy
import torch

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.bilm import native_io
from spacy_elmo.errors import Errors, Warnings
from spacy_elmo.pipeline.bilm_layer import get_bilm, get_runner

from .conftest import N_LAYERS, TINY, WIDTH


def test_weights_without_initialize(nlp, tiny_dir):
    doc = nlp("The bank of the river .")
    assert doc._.elmo.shape == (N_LAYERS, 6, WIDTH)
    assert doc._.elmo.dtype == numpy.float16
    assert nlp.get_pipe("elmo").source == str(tiny_dir)
    assert doc.tensor.size == 0  # doc.tensor belongs to tok2vec
    # only plain numpy on the CPU in user_data (kept torch tensors leak memory, break msgpack)
    for value in doc.user_data.values():
        assert value is None or isinstance(value, numpy.ndarray)


def test_matches_bilm(nlp, tiny_dir):
    """The cached char-CNN + LSTM path gives BiLM.forward's layers."""
    words = "The bank of the river flows .".split()
    doc = nlp(" ".join(words))
    bilm = BiLM.load(tiny_dir, backend="reference")
    with torch.no_grad():
        out = bilm(batch_to_ids([words]))
    expected = torch.stack(out.activations)[:, 0].numpy()
    numpy.testing.assert_allclose(doc._.elmo.astype("float32"), expected, atol=2e-3, rtol=1e-2)
    runner = get_runner(nlp.get_pipe("elmo").model)
    runner.cache.capacity = 0  # uncached path
    uncached = nlp.get_pipe("elmo").predict([nlp.make_doc(" ".join(words))])[0]
    runner.cache.capacity = 50000
    runner.cache.clear()
    cached = nlp.get_pipe("elmo").predict([nlp.make_doc(" ".join(words))])[0]
    numpy.testing.assert_allclose(cached, uncached, atol=1e-5)
    numpy.testing.assert_allclose(cached, expected, atol=1e-5)


def test_sentences_run_separately(tiny_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    doc = nlp("I went to the bank. It was closed.")
    alone = nlp("It was closed.")
    numpy.testing.assert_allclose(doc._.elmo[:, 6:], alone._.elmo, atol=1e-3)


def test_store_options(tiny_dir):
    for store, ndim in (("mix", 2), ("none", None)):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": store, "store_dtype": "float32"})
        doc = nlp("a b c")
        if ndim is None:
            assert doc._.elmo is None and doc[0]._.elmo_vector is None
        else:
            assert doc._.elmo.shape == (3, WIDTH) and doc._.elmo.dtype == numpy.float32
            assert doc[1]._.elmo_vector.shape == (WIDTH,)
    with pytest.raises(ValueError, match="store"):
        spacy.blank("en").add_pipe("elmo", config={"store": "some"})


def test_store_none_leaves_spacys_vectors(tiny_dir):
    """store = "none" keeps no ELMo data and sets no user hooks, so the pipeline's static vectors stay
    (they once were replaced by the hooks' empty ones: token.vector [], has_vector False, similarity 0.0)."""
    nlp = spacy.blank("en")
    nlp.vocab.set_vector("bank", numpy.array([1.0, 2.0, 0.0], dtype="float32"))
    nlp.vocab.set_vector("river", numpy.array([2.0, 1.0, 0.0], dtype="float32"))
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": "none", "set_doc_tensor": True})
    doc = nlp("bank river")
    numpy.testing.assert_array_equal(doc[0].vector, [1.0, 2.0, 0.0])
    assert doc[1].has_vector and abs(doc[0].similarity(doc[1]) - 0.8) < 1e-6
    assert doc.tensor.shape == (2, WIDTH)


def test_store_none_with_doc_tensor_and_no_static_vectors(tiny_dir):
    """As the README says: store = "none" sets no hooks, but spaCy's own token.vector reads doc.tensor
    (the ELMo mix set_doc_tensor writes) when the pipeline has no static vectors."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": "none", "set_doc_tensor": True})
    doc = nlp("bank river")
    assert not doc.user_token_hooks and doc._.elmo is None
    numpy.testing.assert_array_equal(doc[0].vector, doc.tensor[0])
    assert doc[0].has_vector and doc.tensor.shape == (2, WIDTH)


def test_vectors_and_hooks(nlp):
    doc = nlp("I sat by the bank of the river . I put money in the bank .")
    a, b = doc[4], doc[14]
    assert a.text == b.text == "bank"
    numpy.testing.assert_allclose(a.vector, a._.elmo_vector)
    assert a.has_vector and doc[0:3].has_vector and doc.has_vector
    assert a.vector.shape == (WIDTH,)
    assert doc[0:3]._.elmo_vector.shape == (WIDTH,)
    numpy.testing.assert_allclose(doc[0:3].vector, doc[0:3]._.elmo_vector)
    sim = a.similarity(b)
    assert -1.0 <= sim < 0.9999  # context changes the vector: spaCy's own would say 1.0
    assert abs(a.similarity(a) - 1.0) < 1e-5
    assert 0 < doc.similarity(doc[0:5]) <= 1.0 + 1e-6
    # mixed vector = uniform mix of the stored layers
    numpy.testing.assert_allclose(a._.elmo_vector, doc._.elmo[:, 4].astype("float32").mean(0), atol=1e-5)


def test_similarity_of_vectors_from_other_weights_names_both_widths(nlp, tmp_path):
    """Docs annotated by elmo components of two widths: similarity() failed in numpy ("shapes (16,) and (6,)
    not aligned"); now the error names both widths and the fix."""
    torch.manual_seed(0)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 3})).save(tmp_path / "narrow")
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"weights": str(tmp_path / "narrow")})
    a, b = nlp("the bank ."), other("the bank .")
    assert b.vector.shape == (6,) != a.vector.shape
    for x, y in ((a, b), (a[1], b[1]), (a[0:2], b[0:2]), (b, a[0:2])):
        with pytest.raises(ValueError, match=r"ELMo vectors of width (16 and 6|6 and 16): .*same weights"):
            x.similarity(y)
    assert abs(a.similarity(nlp("the bank ."))) <= 1.0 + 1e-6  # same weights: a cosine


def test_similarity_with_a_lexeme_is_1_for_the_word_else_0_with_a_warning(nlp, tiny_dir):
    """token / span / doc.similarity(lexeme): a lexeme is a word without context, with no ELMo vector. 1.0 for a
    single token of that word, as spaCy's own; else 0.0 with W_ELMO_SIMILARITY_LEXEME (pointing at the caller),
    whatever static vector the lexeme has: one of another width gave 0.0 silently (elmo on an _md/_lg pipeline),
    one of the ELMo width its cosine with the ELMo vector, two spaces whose cosine means nothing. (Before that, the
    hook asked the lexeme for its vector, and Lexeme.vector raised spaCy's E010 in a vocab without vectors.)"""
    doc = nlp("I sat on the bank of the river .")
    bank, river = nlp.vocab["bank"], nlp.vocab["river"]
    plain = spacy.blank("en")("I sat on the bank of the river .")  # spaCy's own similarity, no hooks
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same word: no warning
        for ours in (doc[4], doc[4:5], nlp("bank")):
            assert ours.similarity(bank) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # spaCy's W007 / W008
        assert plain[4].similarity(bank) == plain[4:5].similarity(bank) == 1.0

    def zero_with_the_warning(obj, lexeme):
        with pytest.warns(UserWarning, match=r"^spacy-elmo: .*\.similarity\(\) with the Lexeme") as warned:
            assert obj.similarity(lexeme) == 0.0
        assert {w.filename for w in warned} == {__file__}
        return str(warned[0].message)

    message = zero_with_the_warning(doc[4], river)
    assert message == Warnings.W_ELMO_SIMILARITY_LEXEME.format(obj="Token", word="river")
    assert "cannot be compared" in message and "nlp('river')" in message
    for obj in (doc[3:5], doc, doc[6]):
        zero_with_the_warning(obj, river)
    nlp.vocab.set_vector("river", numpy.arange(1.0, WIDTH + 1.0, dtype="float32"))  # the ELMo width: no cosine
    zero_with_the_warning(doc[4], nlp.vocab["river"])
    wide = spacy.blank("en")
    wide.vocab.set_vector("river", numpy.ones(300, dtype="float32"))  # an _md / _lg pipeline's width
    wide.add_pipe("elmo", config={"weights": str(tiny_dir)})
    zero_with_the_warning(wide("the bank")[1], wide.vocab["river"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wide("river")[0].similarity(wide.vocab["river"]) == 1.0



def test_similarity_with_no_elmo_data_is_1_for_the_same_words_else_0_with_a_warning(nlp, tiny_dir):
    """similarity() where one side is a Token / Span / Doc of a doc the elmo component did not annotate (another
    pipeline's, store "none", or hooks installed on a doc without doc._.elmo): as with a Lexeme, 1.0 for the same
    words, else 0.0 with W_ELMO_SIMILARITY_NO_ELMO. It fell back to the other's static vector: of the ELMo width,
    a cosine between a contextual and a static space (0.8 here); of another width, or none, 0.0 silently (also
    where the caller's own doc had no ELMo data, where spaCy's own warns W008)."""
    from spacy_elmo.pipeline import install_hooks

    doc = nlp("I sat on the bank of the river .")
    plain = spacy.blank("en")
    plain.vocab.set_vector("river", doc[4].vector * 0.5 + 1.0)  # the ELMo width: the old cosine was not 0
    wide = spacy.blank("en")
    wide.vocab.set_vector("river", numpy.ones(300, dtype="float32"))  # an _md / _lg pipeline's width
    stored_none = spacy.blank("en")
    stored_none.add_pipe("elmo", config={"weights": str(tiny_dir), "store": "none"})
    hooked = spacy.blank("en")("a river")
    install_hooks(hooked)  # hooks, but no doc._.elmo

    def zero_with_the_warning(obj, other, which):
        _zero_with_the_warning(obj, other, Warnings.W_ELMO_SIMILARITY_NO_ELMO, which)

    for other in (plain("the river")[1], wide("the river")[1], stored_none("the river")[1]):
        zero_with_the_warning(doc[4], other, "the other Token has no ELMo data")
    zero_with_the_warning(doc[3:5], plain("the river"), "the other Doc has no ELMo data")
    zero_with_the_warning(doc, plain("the river")[0:2], "the other Span has no ELMo data")
    zero_with_the_warning(hooked[1], doc[4], "this Token has no ELMo data")
    zero_with_the_warning(hooked, plain("a bank"), "neither has ELMo data")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same words: 1.0, as spaCy's own, no warning
        assert doc[7].similarity(plain("the river")[1]) == 1.0
        assert doc[7].similarity(plain("river")) == 1.0
        assert doc[3:5].similarity(wide("the bank")) == 1.0
        assert hooked[1].similarity(doc[7]) == 1.0
        assert hooked.similarity(plain("a river")) == 1.0
        assert abs(doc[7].similarity(nlp("the river")[1])) <= 1.0 + 1e-6  # both annotated: their cosine


def _zero_with_the_warning(obj, other, warning: str, which: str) -> None:
    """``obj.similarity(other)`` is 0.0 with exactly ``warning`` (filled in), reported at this test file's line."""
    with pytest.warns(UserWarning, match=r"^spacy-elmo: .*\.similarity\(\) with a .* is 0\.0") as warned:
        assert obj.similarity(other) == 0.0
    assert {w.filename for w in warned} == {__file__}
    assert str(warned[0].message) == warning.format(obj=type(obj).__name__, other=type(other).__name__, which=which)


def test_similarity_of_empty_or_whitespace_only_is_1_for_the_same_words_else_0_with_a_warning(nlp):
    """Two annotated sides where one has no ELMo vector (an empty or whitespace-only doc / span / token: a zero or
    no vector): as spaCy's own, 1.0 for the same words, else 0.0 with W_ELMO_SIMILARITY_EMPTY (spaCy's W008). Both
    sides annotated gave 0.0 silently (the cosine of zero vectors), where one side plain gave 1.0."""
    doc = nlp("the river  bank")  # doc[2] is the whitespace token " "
    assert not doc[2].vector.any() and doc[1].vector.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nlp("").similarity(nlp("")) == 1.0
        assert nlp("  ").similarity(nlp("  ")) == 1.0
        assert doc[0:0].similarity(doc[1:1]) == 1.0
        assert doc[2].similarity(nlp("a  b")[1]) == 1.0
        assert doc[2:3].similarity(doc[2]) == 1.0
        # both with words: the cosine, not 1.0 for the same word in another context (the point of ELMo)
        cosine = doc[1].similarity(nlp("a river")[1])
        assert cosine != 1.0 and 0.0 < cosine < 1.0

    def zero_with_the_warning(obj, other, which):
        _zero_with_the_warning(obj, other, Warnings.W_ELMO_SIMILARITY_EMPTY, which)

    zero_with_the_warning(nlp(""), nlp("the"), "this one is")
    zero_with_the_warning(nlp("the"), nlp("  "), "the other is")
    zero_with_the_warning(nlp("  "), nlp(""), "both are")
    zero_with_the_warning(doc[2], doc[1], "this one is")
    zero_with_the_warning(doc[0:2], doc[3:3], "the other is")


def test_similarity_of_a_vector_whose_norm_underflows_is_0_not_inf():
    """A nonzero float32 vector of tiny values (set by hand) passes the hook's empty check, but its norm underflows
    to 0.0 (numpy sums the squares in float32): the cosine guards its division, 0.0 where it gave inf."""
    from spacy_elmo.pipeline.doc_data import install_extensions, install_hooks, set_doc_data

    install_extensions()
    doc = spacy.blank("en").make_doc("tiny word")
    layers = numpy.ones((N_LAYERS, 2, WIDTH), dtype="float32")
    layers[:, 0] = 1e-30
    set_doc_data(doc, layers, numpy.full(N_LAYERS, 1 / N_LAYERS, dtype="float32"), "all", "float32")
    install_hooks(doc)
    assert doc[0].vector.any() and numpy.linalg.norm(doc[0].vector) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert doc[0].similarity(doc[1]) == 0.0
        assert doc[1].similarity(doc[0]) == 0.0


def test_similarity_with_not_a_token_span_doc_or_lexeme_is_a_type_error(nlp):
    """similarity("bank") / similarity(None): was 0.0 with a warning that "the other str has no ELMo data"; spaCy's
    own raises (AttributeError). Now a TypeError naming the type given and what is accepted."""
    doc = nlp("the river bank")
    for obj in (doc[1], doc[0:2], doc):
        for other, said in (("bank", "a str"), (None, "a NoneType"), (1, "an int")):
            with pytest.raises(TypeError) as raised:
                obj.similarity(other)
            assert str(raised.value) == Errors.E_ELMO_SIMILARITY_TYPE.format(obj=type(obj).__name__, a_type=said)


def test_hooks_off(tiny_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "user_hooks": False, "set_doc_tensor": True})
    doc = nlp("a b")
    assert "vector" not in doc.user_token_hooks
    assert doc.tensor.shape == (2, WIDTH)


def test_no_weights_error_at_first_use(monkeypatch, tmp_path):
    monkeypatch.setattr(native_io, "DEFAULT_MODEL_DIR", tmp_path / "missing")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # construction is fine ...
    with pytest.raises(ValueError) as err:
        nlp("a b")  # ... first use names the fix
    assert "weights" in str(err.value) and "weights_loader" in str(err.value)
    with pytest.raises(ValueError, match="weights_loader"):
        nlp.initialize()


def test_weights_loaded_at_first_use_go_to_the_models_ops_not_the_current_ones(tiny_dir, nlp):
    """The weights load at the first call onto the device of the model's ops (fixed when the pipeline was built), not
    of thinc's current ops: a pipeline built on the CPU and first called after ``spacy.require_gpu()`` put its biLM
    on the GPU, whose cupy layers its numpy outputs refused (TypeError). The GPU is stood in for by MPSOps (mps: a
    RuntimeError on a torch without it, before the fix)."""
    from thinc.api import MPSOps, NumpyOps, get_current_ops, use_ops

    assert isinstance(nlp.get_pipe("elmo").model.ops, NumpyOps)
    expected = _elmo_of(tiny_dir, "The cat sat .")
    with use_ops("mps"):
        assert isinstance(get_current_ops(), MPSOps)
        found = nlp("The cat sat .")._.elmo
    assert get_bilm(nlp.get_pipe("elmo").model).marker_ids.device == torch.device("cpu")
    numpy.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-6)


def _elmo_of(tiny_dir, text):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    return nlp(text)._.elmo


def test_ops_device_names_the_device_of_thincs_ops(monkeypatch):
    """As thinc's ``get_torch_default_device`` names the current ops' device: CupyOps -> the current GPU (its own
    ``device_id`` is 0 whatever GPU was chosen), MPSOps -> mps, others -> the CPU."""
    from thinc.api import CupyOps, MPSOps, NumpyOps

    from spacy_elmo.pipeline.bilm_layer import ops_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert ops_device(CupyOps()) == torch.device("cuda", 3)
    assert ops_device(MPSOps()) == torch.device("mps")
    assert ops_device(NumpyOps()) == torch.device("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_pipeline_built_on_the_cpu_first_called_under_gpu_ops_gives_its_own_arrays(tiny_dir, nlp):
    """On a GPU (with cupy): built on the CPU, first called after ``require_gpu`` (here ``use_ops("cupy")``), the
    biLM runs on the CPU and the layers are numpy arrays, those of a pipeline that never saw a GPU; and a biLM that
    runs on the GPU under a model of numpy ops (one thinc's ``from_bytes`` put on the current ops' GPU) gives numpy
    arrays too."""
    pytest.importorskip("cupy")
    from thinc.api import use_ops

    from spacy_elmo.pipeline.bilm_layer import _convert_outputs

    expected = _elmo_of(tiny_dir, "The cat sat .")
    with use_ops("cupy"):
        found = nlp("The cat sat .")._.elmo
    assert isinstance(found, numpy.ndarray)
    numpy.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-6)
    wrapper = nlp.get_pipe("elmo").model.layers[0]
    Y, _ = _convert_outputs(wrapper, (None, torch.ones(2, 3, device="cuda")), False)
    assert isinstance(Y, numpy.ndarray) and Y.shape == (2, 3)


def test_bad_path_error(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "nope")})
    with pytest.raises(FileNotFoundError, match="BiLM.save"):
        nlp("a")


@pytest.mark.parametrize("inside", ["", "elmo"])
def test_saved_pipeline_as_weights_names_sourcing(nlp, tmp_path, inside):
    """A saved pipeline (model-last) or its elmo directory given as weights (--paths.elmo) is not a
    model directory ("no config.json" before): the error names sourcing the trained component, or exporting it."""
    nlp.to_disk(tmp_path / "trained")
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"weights": str(tmp_path / "trained" / inside)})
    with pytest.raises(ValueError, match=r"saved spaCy pipeline.*source = .*trained") as err:
        other("a")
    pipeline = tmp_path / "trained"
    # one wording for both said "model-last is (in) the saved spaCy pipeline model-last"
    given = (f"{pipeline} is a saved spaCy pipeline" if not inside
             else f"{pipeline / 'elmo'} is the directory of the 'elmo' component of the saved spaCy pipeline {pipeline}")
    assert str(err.value).startswith(f"{given}, not biLM weights (a directory written by "), str(err.value)
    assert "(in)" not in str(err.value)
    assert f"`spacy-elmo export {tmp_path / 'trained'} ELMO_DIR --format native`" in str(err.value)


@pytest.mark.parametrize("inside", ["", "elmo"])
def test_a_saved_pipeline_given_to_bilm_load_is_named_as_such(nlp, tmp_path, inside):
    """BiLM.load and every spacy-elmo command given a saved pipeline (spacy-elmo embed --model model-best) said
    it was "not a spacy-elmo model directory (no config.json)", beside spaCy's config.cfg: the error says what
    the directory is and what to pass instead."""
    nlp.to_disk(tmp_path / "trained")
    with pytest.raises(FileNotFoundError, match=r"saved spaCy pipeline.*, not biLM weights") as err:
        BiLM.load(tmp_path / "trained" / inside)
    given = (f"{tmp_path / 'trained'} is a saved spaCy pipeline, " if not inside
             else f"{tmp_path / 'trained' / 'elmo'} is the directory of the 'elmo' component of the saved spaCy pipeline ")
    assert str(err.value).startswith(given), str(err.value)
    assert f"spacy-elmo export {tmp_path / 'trained'} ELMO_DIR --format native" in str(err.value)
    assert "doc._.elmo" in str(err.value)


def test_a_saved_pipelines_path_in_suggested_code_pastes_as_that_path(nlp, tmp_path):
    """The code the saved-pipeline errors suggest put the path between quotes as it was: a path with a quote
    pasted as a SyntaxError (``spacy.load('.../it's')``) or a config that read another value. The Python literal
    evaluates, and the config's value reads, to the pipeline's path."""
    import ast
    import re

    from spacy_elmo.bilm.native_io import SavedPipelineGiven

    pipeline = tmp_path / 'my "models"' / "it's a\\b ünï"
    pipeline.parent.mkdir()
    nlp.to_disk(pipeline)
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"weights": str(pipeline)})
    with pytest.raises(ValueError) as as_weights:
        other("a")
    with pytest.raises(SavedPipelineGiven) as as_bilm:
        BiLM.load(pipeline)
    literal = r"spacy\.load\(('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)"
    for message in (str(as_weights.value), str(as_bilm.value)):
        found = re.findall(literal, message)
        assert found and all(ast.literal_eval(code) == str(pipeline) for code in found), message
    value = re.search(r"source = (\"(?:[^\"\\]|\\.)*\") in a training config", str(as_weights.value))
    assert value, str(as_weights.value)
    config = spacy.util.Config().from_str(f"[components]\n\n[components.elmo]\nsource = {value.group(1)}\n")
    assert config["components"]["elmo"]["source"] == str(pipeline)


@pytest.mark.parametrize(
    "path", ["/data/cost$5/m", "/data/${x}/m", "/data/$${x}/m", "/data/a$/b$$c$", "/data/it's \"q\" a\\b", "/data/100%/m"]
)
def test_a_config_quoted_path_reads_back_through_spacys_config(path):
    """config_quoted is the value a message suggests for ``source = ...`` in a config, which spaCy interpolates
    before it reads the JSON: a ``$`` in the path was an InterpolationSyntaxError (``/data/cost$5/m``)."""
    from spacy_elmo.paths import config_quoted

    text = f"[components]\n\n[components.elmo]\nsource = {config_quoted(path)}\n"
    assert spacy.util.Config().from_str(text)["components"]["elmo"]["source"] == path


def test_allennlp_dir(tmp_path, tiny_dir):
    bilm = BiLM.load(tiny_dir, backend="reference")
    bilm.to_allennlp(tmp_path / "options.json", tmp_path / "weights.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path)})
    ref = spacy.blank("en")
    ref.add_pipe("elmo", config={"weights": str(tiny_dir)})
    numpy.testing.assert_allclose(nlp("a b c")._.elmo, ref("a b c")._.elmo, atol=1e-3)


def test_frozen_by_default(nlp):
    nlp("warm up")
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    assert not any(p.requires_grad for p in bilm.parameters())
    assert nlp.get_pipe("elmo").cfg["frozen"] is True


def test_korean_rule_based_tokenizer(tiny_dir):
    nlp = spacy.blank("ko", config={"nlp": {"tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}})
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    doc = nlp("강에 있는 은행에 갔다. 은행에 돈을 넣었다.")
    assert len(doc) > 3
    assert doc._.elmo.shape == (N_LAYERS, len(doc), WIDTH)
    assert numpy.isfinite(doc._.elmo).all()
    assert doc[0].has_vector


def test_empty_docs(nlp):
    doc = nlp("")
    assert doc._.elmo.shape == (N_LAYERS, 0, WIDTH)
    assert not doc.has_vector
    docs = list(nlp.pipe(["", "a b", "", " "]))
    assert [d._.elmo.shape[1] for d in docs] == [0, 2, 0, 1]
    assert docs[0].vector.shape == (WIDTH,)


def test_whitespace_has_no_vector(nlp):
    """A whitespace token's ELMo vector is all zeros: has_vector said True; spaCy's convention for a token
    without a vector is False. A span or doc of whitespace only has none either; one word among them does."""
    doc = nlp("hello   world \n")
    assert [t.is_space for t in doc] == [False, True, False, True]
    assert [t.has_vector for t in doc] == [True, False, True, False]
    assert float(doc[1].vector_norm) == 0.0 and float(doc[0].vector_norm) > 0.0
    assert not doc[1:2].has_vector and not doc[3:4].has_vector and doc[1:3].has_vector and doc.has_vector
    assert not nlp("  \n ").has_vector and not doc[1:1].has_vector


@pytest.mark.parametrize(
    "setting,value",
    [("max_window", 0), ("max_window", -1), ("batch_tokens", 0), ("batch_tokens", -5), ("cache_size", -1)],
)
def test_bad_model_settings_fail_at_construction(tiny_dir, setting, value):
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLM.v2", setting: value}
    with pytest.raises(ValueError, match=rf"{setting} = {value}; it must be an integer >= "):
        nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": model})


@pytest.mark.parametrize("value", ["fusd", "", "Fused", " auto"])
def test_unknown_backend_fails_at_construction(tiny_dir, value):
    """An unknown backend was accepted when the pipeline was built (and by spacy debug config): it failed only at
    the first call, with ops' message, which names no config setting. Refused now as the other model settings are,
    naming the choices and the block; the names it lists build."""
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLM.v2", "backend": value}
    with pytest.raises(ValueError) as refused:
        nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": model})
    said = str(refused.value)
    assert f"got backend = {value!r}; it must be one of 'auto', 'fused', 'reference'" in said, said
    assert "[components.elmo.model]" in said
    for backend in ("auto", "fused", "reference"):  # whether fused can run is checked where it runs
        spacy.blank("en").add_pipe("elmo", config={"weights": str(tiny_dir), "model": {**model, "backend": backend}})


def test_numpy_integer_model_settings_are_stored_as_ints():
    """is_int takes NumPy integers (a hyper-parameter grid's): the model keeps them as Python ints."""
    from spacy_elmo.pipeline.bilm_layer import build_elmo_bilm

    model = build_elmo_bilm(batch_tokens=numpy.int64(64), max_window=numpy.int32(16), cache_size=numpy.int64(3))
    for key, value in (("batch_tokens", 64), ("max_window", 16)):
        assert model.attrs[key] == value and isinstance(model.attrs[key], int)
        assert not isinstance(model.attrs[key], numpy.integer)
    assert get_runner(model).cache.capacity == 3


def test_mix_is_checked(tiny_dir):
    from spacy_elmo.pipeline import ElmoComponent
    from spacy_elmo.pipeline.bilm_layer import build_elmo_bilm

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "mix": [0.0, 0.0, 5.0], "store_dtype": "float32"})
    doc = nlp("a b")
    expected = doc._.elmo[:, 0].T @ nlp.get_pipe("elmo").mix_weights()
    numpy.testing.assert_allclose(doc[0]._.elmo_vector, expected, atol=1e-6)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "mix": [1.0, 2.0]})  # weights load at first use ...
    with pytest.raises(ValueError, match=rf"mix has 2 value\(s\), but its biLM .* has {N_LAYERS} output layers"):
        nlp("a b")  # ... and are checked then, before any vector is computed
    for bad in (["a", 1, 2], [True, 0, 0], [float("nan"), 0, 0], "abc"):
        with pytest.raises(ValueError, match="mix must be null"):
            ElmoComponent(nlp.vocab, build_elmo_bilm(), mix=bad)


def test_doc_tensor_is_the_mix_of_the_layers(tiny_dir):
    """set_doc_tensor = true writes softmax(mix) . layers (float64 oracle), the token._.elmo_vector of each token;
    a plain mean of the layers, which ignores mix, left the existing tests passing."""
    nlp = spacy.blank("en")
    mix = [0.0, 0.0, 5.0]
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "mix": mix, "set_doc_tensor": True, "store_dtype": "float32"})
    doc = nlp("I sat by the bank .")
    weights = numpy.exp(numpy.asarray(mix, dtype=numpy.float64) - 5.0)
    weights /= weights.sum()
    expected = numpy.tensordot(weights, doc._.elmo.astype(numpy.float64), axes=(0, 0))
    assert doc.tensor.dtype == numpy.float32 and doc.tensor.shape == (len(doc), WIDTH)
    numpy.testing.assert_allclose(doc.tensor, expected, rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(doc.tensor, numpy.stack([t._.elmo_vector for t in doc]), rtol=1e-5, atol=1e-6)


def test_store_mix_keeps_the_mix_of_the_layers_store_all_keeps(tiny_dir):
    """store = "mix" keeps softmax(mix) . layers (float64 oracle over the layers a store = "all" pipeline on the
    same weights keeps): a mix whose top layer is not the largest weight, so storing the top layer alone (or any
    one layer, or their mean) fails."""
    mix = [0.0, 1.0, -1.0]
    text = "The cat sat on the mat ."
    docs = {}
    for store in ("all", "mix"):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": store, "store_dtype": "float32", "mix": mix})
        docs[store] = nlp(text)
    weights = numpy.exp(numpy.asarray(mix, dtype=numpy.float64))
    weights /= weights.sum()
    expected = numpy.tensordot(weights, docs["all"]._.elmo.astype(numpy.float64), axes=(0, 0))
    got = docs["mix"]._.elmo
    assert got.shape == (len(docs["mix"]), WIDTH) and got.dtype == numpy.float32
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(numpy.stack([t._.elmo_vector for t in docs["mix"]]), expected, rtol=1e-5, atol=1e-6)


def test_batch_composition_changes_vectors_only_by_rounding(tiny_dir):
    """The README's promise: other batches give the same vectors up to float32 rounding (not bit for bit)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32"})
    texts = ["The bank raised its rates .", "We sat on the river bank .", "x", "", "Money in the bank ."] * 4
    one = [d._.elmo for d in nlp.pipe(texts, batch_size=1)]
    many = [d._.elmo for d in nlp.pipe(texts, batch_size=64)]
    for a, b in zip(one, many):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_retokenized_doc_keeps_vectors_aligned(tiny_dir):
    """Merging or splitting tokens after the elmo component (merge_entities, merge_noun_chunks,
    doc.retokenize()) must not shift later tokens onto other tokens' rows."""
    from spacy.tokens import Doc

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32"})
    doc = nlp("I sat on the bank of the river .")
    before = [t._.elmo_vector.copy() for t in doc]
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[3:5])  # "the bank"
    assert len(doc) == 8 and doc[3].text == "the bank"
    numpy.testing.assert_allclose(doc[3]._.elmo_vector, (before[3] + before[4]) / 2, atol=1e-6)
    numpy.testing.assert_allclose(doc[7].vector, before[8], atol=1e-6)
    numpy.testing.assert_allclose(doc[5:7]._.elmo_vector, (before[6] + before[7]) / 2, atol=1e-6)
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[6], ["riv", "er"], heads=[(doc[6], 1), doc[5]])
    assert [t.text for t in doc[6:9]] == ["riv", "er", "."]
    for i, j in ((6, 7), (7, 7), (8, 8), (0, 0)):
        numpy.testing.assert_allclose(doc[i]._.elmo_vector, before[j], atol=1e-6)
    back = Doc(nlp.vocab).from_bytes(doc.to_bytes())  # the token offsets travel with the data
    numpy.testing.assert_allclose(back[3]._.elmo_vector, doc[3]._.elmo_vector)
    # a listener reads one row per current token
    from spacy_elmo.pipeline.listener import ElmoListener

    listener = ElmoListener(upstream_name="elmo")
    nlp.get_pipe("elmo").add_listener(listener, "test")
    (layers,) = listener.predict([doc])
    assert layers.shape == (N_LAYERS, len(doc), WIDTH)
    numpy.testing.assert_allclose(layers[:, 8], doc._.elmo[:, 8], atol=1e-6)  # "."
    numpy.testing.assert_allclose(layers[:, 3], doc._.elmo[:, 3:5].mean(1), atol=1e-6)  # "the bank"


def test_a_merge_and_a_split_that_keep_the_token_count_keep_vectors_aligned():
    """A merge then a split leave as many tokens as rows, and the merged token starts where its first word did:
    its vector is still the mean of the rows it covers (its next token no longer starts where a row does),
    not its first word's row; the token-by-token read agrees with the whole doc's."""
    from spacy_elmo.pipeline.doc_data import aligned_layers, install_extensions, set_doc_data

    install_extensions()
    doc = spacy.blank("en")("New York is big")
    layers = numpy.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)  # (L + 1, n, 2P): rows all distinct
    set_doc_data(doc, layers, numpy.asarray([0.25, 0.75], dtype="float32"), "all", "float32")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])  # "New York"
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[2], ["b", "ig"], heads=[(doc[2], 1), doc[1]])  # "big" -> "b", "ig"
    assert [t.text for t in doc] == ["New York", "is", "b", "ig"]
    mixed = 0.25 * layers[0] + 0.75 * layers[1]  # (n, 2P): each word's row, mixed
    want = [mixed[0:2].mean(0), mixed[2], mixed[3], mixed[3]]
    for token, row in zip(doc, want):
        numpy.testing.assert_allclose(token._.elmo_vector, row, rtol=1e-6)
    whole = aligned_layers(doc)
    numpy.testing.assert_allclose(whole[:, 0], layers[:, 0:2].mean(1), rtol=1e-6)
    numpy.testing.assert_allclose(doc[0]._.elmo_vector, numpy.tensordot([0.25, 0.75], whole, axes=(0, 0))[0], rtol=1e-6)


def test_a_merged_token_over_whitespace_leaves_its_zero_row_out(nlp):
    """merge_entities / doc.retokenize() over "New  York" (New, " ", York): the merged token's vector averaged the
    whitespace token's zero row in (2/3 of the words' mean), where the span's vector before the merge leaves it
    out. Now both are the mean of the words' rows, token by token and for the whole doc (what listeners read)."""
    from spacy_elmo.pipeline.doc_data import aligned_layers

    doc = nlp("I love New  York city .")
    assert [t.text for t in doc][2:5] == ["New", " ", "York"]
    before, rows = doc[2:5].vector.copy(), doc._.elmo.astype("float32")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:5])
    assert doc[2].text == "New  York"
    numpy.testing.assert_allclose(doc[2].vector, before, rtol=1e-6)
    numpy.testing.assert_allclose(aligned_layers(doc)[:, 2], rows[:, [2, 4]].mean(1), rtol=1e-6)
    numpy.testing.assert_allclose(doc[1:4].vector, numpy.mean([doc[1].vector, before, doc[3].vector], 0), rtol=1e-5)



def test_a_merged_token_counts_a_word_row_whose_text_begins_with_a_space(nlp):
    """A row is whitespace by its token's whole text (spaCy's ``is_space``: ``text.isspace()``), as a span decides:
    a word token " York" (``Doc(words=...)``; not ``is_space``, read by the biLM, a non-zero row) was taken for one
    by its first character, and the merged "New York"'s vector was New's row alone."""
    from spacy.tokens import Doc

    from spacy_elmo.pipeline.doc_data import aligned_layers

    doc = nlp(Doc(nlp.vocab, words=["New", " York", "now"], spaces=[False, True, False]))
    assert [t.is_space for t in doc] == [False, False, False]
    before, rows = doc[0:2].vector.copy(), doc._.elmo.astype("float32")
    assert numpy.linalg.norm(rows[:, 1]) > 0
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    assert doc[0].text == "New York"
    numpy.testing.assert_allclose(aligned_layers(doc)[:, 0], rows[:, 0:2].mean(1), rtol=1e-6)
    numpy.testing.assert_allclose(doc[0].vector, before, rtol=1e-6)


def test_a_row_is_whitespace_by_its_tokens_whole_text_and_the_languages_rule():
    """The text given is the row's token's and its trailing space (up to the next row): decided whole, by the
    vocab's ``is_space`` rule (which set ``token.is_space``), with and without that space."""
    from spacy.attrs import IS_SPACE

    from spacy_elmo.pipeline.doc_data import _is_space_rule, _row_is_space

    vocab = spacy.blank("en").vocab
    rule = _is_space_rule(vocab)
    assert [_row_is_space(t, rule) for t in [" York", " York ", "York ", " ", "  ", "\n "]] == [
        False, False, False, True, True, True,
    ]
    vocab.lex_attr_getters[IS_SPACE] = lambda text: text == " "  # a language's own rule: one space only
    rule = _is_space_rule(vocab)
    assert [_row_is_space(t, rule) for t in [" ", "  ", "\n", " x "]] == [True, True, False, False]


def test_a_whole_doc_read_of_merged_tokens_asks_the_rule_once_per_distinct_row_text(nlp):
    """source_rows on a doc of many merged tokens looked the is_space rule up and called it about 1.5 times a row
    (30,594 calls for 20,400 rows: 2.5-5x slower on whole-doc reads); now each distinct row text is decided once,
    with the same rows marked."""
    from spacy.attrs import IS_SPACE

    from spacy_elmo.pipeline.doc_data import source_rows

    doc = nlp("New  York and  the river  bank " * 50)
    n_rows, space = doc._.elmo.shape[-2], numpy.array([t.is_space for t in doc])
    with doc.retokenize() as retokenizer:
        for i in range(0, len(doc) - 4, 4):
            retokenizer.merge(doc[i : i + 4])
    calls = []

    def rule(text):
        calls.append(text)
        return text.isspace()

    nlp.vocab.lex_attr_getters[IS_SPACE] = rule
    try:
        lo, hi, own = source_rows(doc, 0, len(doc), n_rows)
    finally:
        del nlp.vocab.lex_attr_getters[IS_SPACE]
    assert len(calls) < 20 and n_rows == 450  # was 672 calls
    expected = ~space  # a merged token's rows of whitespace tokens are not its own; a token not merged: its row
    expected[lo[hi - lo == 1]] = True
    assert space.sum() == 150 and numpy.array_equal(own, expected) and (~own).sum() > 100


def _bilm_layers(tiny_dir, sentences):
    """Every layer of each sentence from BiLM.forward (no cache, no spaCy): ``[(L + 1, n, 2P)]``."""
    bilm = BiLM.load(tiny_dir, backend="reference")
    with torch.no_grad():
        out = bilm(batch_to_ids(sentences))
    layers = torch.stack(out.activations).numpy()
    return [layers[:, i, : len(s)] for i, s in enumerate(sentences)]


def test_whitespace_tokens_are_not_read_by_the_bilm(tiny_dir):
    """spaCy makes tokens of extra spaces and newlines; pretraining drops them (and the released models
    never saw any), so the biLM must read the words alone. They were read as words: every other token
    of "The bank  of the river\\n was steep." changed by up to 1.0 (default model) against single spaces."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32"})
    doc = nlp("The bank  of the river\n was steep.\n\n  \n It rose.  ")
    space = [t.is_space for t in doc]
    assert sum(space) == 4 and doc._.elmo.shape == (N_LAYERS, len(doc), WIDTH)
    words = [[t.text for t in s if not t.is_space] for s in doc.sents]
    assert words == [["The", "bank", "of", "the", "river", "was", "steep", "."], ["It", "rose", "."], []]
    words = words[:2]  # the trailing "  " is a sentence of its own: nothing to read
    expected = numpy.concatenate(_bilm_layers(tiny_dir, words), axis=1)
    numpy.testing.assert_allclose(doc._.elmo[:, [not s for s in space]], expected, atol=1e-5)
    assert not doc._.elmo[:, space].any()  # whitespace tokens: zero vectors
    assert not doc[2]._.elmo_vector.any() and doc[3]._.elmo_vector.any()


@pytest.mark.parametrize("store", ["all", "mix"])
def test_docs_of_whitespace_only(tiny_dir, store):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store": store})
    docs = list(nlp.pipe(["", "   ", "\n\n\t", "a  b", " \n "]))
    assert [len(d) for d in docs] == [0, 1, 1, 3, 1]
    for doc in docs:
        assert doc._.elmo.shape[-2:] == (len(doc), WIDTH)
        assert not doc._.elmo[..., [t.is_space for t in doc], :].any()
    assert docs[3]._.elmo[..., [0, 2], :].any(axis=-1).all()


def test_extra_whitespace_leaves_doc_and_span_vectors_as_they_are(tiny_dir):
    """doc.vector and span.vector averaged every token's row, whitespace tokens' zero rows too: extra spaces and
    newlines shrank them (by 10/13 for three whitespace tokens among ten words). They average the tokens with a
    vector of their own, so the same text with extra whitespace has the same vectors; a span of whitespace only
    has zeros."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32"})
    single, spaced = nlp("He went to the bank. Then he left."), nlp("He went to the  bank.\n\nThen   he left.")
    assert sum(t.is_space for t in spaced) == 3 and len(spaced) == len(single) + 3
    words = numpy.stack([t.vector for t in spaced if not t.is_space])
    numpy.testing.assert_allclose(words, numpy.stack([t.vector for t in single]), atol=1e-6)
    numpy.testing.assert_allclose(spaced.vector, words.astype("float64").mean(0), atol=1e-6)  # the oracle: words alone
    numpy.testing.assert_allclose(spaced.vector, single.vector, atol=1e-6)
    assert spaced.vector_norm == pytest.approx(single.vector_norm, rel=1e-5)
    numpy.testing.assert_allclose(spaced[0:6].vector, single[0:5].vector, atol=1e-6)  # "He went to the  bank"
    assert spaced.similarity(single) == pytest.approx(1.0, abs=1e-5)
    blank = spaced[4:5]  # "  "... spaCy's token for the extra space
    assert blank[0].is_space and blank.vector.shape == (WIDTH,) and not blank.vector.any()


def test_span_vector_norm_is_the_norm_of_span_vector(nlp):
    """span.vector_norm returned the span's vector itself: spaCy 3.8's Span.vector_norm calls the "vector" hook
    where a "vector_norm" span hook is set. It is the norm of span.vector, one number, as the doc's and token's."""
    doc = nlp("He went to the  bank.")
    for span in (doc[1:4], doc[0:6], doc[4:5]):
        assert numpy.ndim(span.vector_norm) == 0, span.text
        assert float(span.vector_norm) == pytest.approx(float(numpy.linalg.norm(span.vector.astype("float64"))), rel=1e-6)
    assert float(doc[1:4].vector_norm) > 0.0 and float(doc[4:5].vector_norm) == 0.0
    assert isinstance(doc.vector_norm, float) and isinstance(doc[1].vector_norm, float)


def test_fine_tuning_through_whitespace_tokens(tiny_dir):
    """With gradients (frozen = false) the words' rows carry gradients back; whitespace rows have none."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": False})
    model = nlp.get_pipe("elmo").model
    nlp("warm up")
    docs = [nlp.make_doc("a  b\nc"), nlp.make_doc("d e")]
    outputs, backprop = model.begin_update(docs)
    assert [o.shape[1] for o in outputs] == [5, 2] and not outputs[0][:, [1, 3]].any()
    bilm = get_bilm(model)
    bilm.zero_grad()
    backprop([numpy.ones_like(o) for o in outputs])
    grad = bilm.token_encoder.char_embedding.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_fine_tuning_gradient_matches_the_bilm_run_per_piece(tiny_dir):
    """The elmo model's backward (frozen = false) routes each doc row's gradient to the row of the piece the biLM
    ran it in: equal to autograd of the biLM run directly on each piece (a sentence, then windows of max_window
    words, whitespace tokens left out), over several sub-batches (batch_tokens). A gradient routed to other rows
    (reversed within a piece, say) left the existing tests passing."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    model_cfg = {"@architectures": "spacy_elmo.ElmoBiLM.v2", "max_window": 4, "batch_tokens": 8,
                 "backend": "reference", "cache_size": 0}
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": False, "model": model_cfg})
    nlp.initialize()
    texts = ["Alice  went to the big old house . Bob\tcame too !", "a b\nc d e f g"]
    docs = [nlp.get_pipe("sentencizer")(nlp.make_doc(text)) for text in texts]
    model = nlp.get_pipe("elmo").model
    bilm = get_bilm(model)
    outputs, backprop = model.begin_update(docs)
    rng = numpy.random.default_rng(0)
    d_outputs = [rng.standard_normal(o.shape).astype("float32") for o in outputs]
    bilm.zero_grad()
    backprop(d_outputs)
    got = {name: p.grad.clone() for name, p in bilm.named_parameters() if p.grad is not None}
    assert got
    bilm.zero_grad()
    loss = torch.zeros(())
    for doc, d_out in zip(docs, d_outputs):
        for sent in doc.sents:
            words = [t.i for t in sent if not t.is_space]
            for k in range(0, len(words), 4):
                rows = words[k : k + 4]
                layers = torch.stack(bilm(batch_to_ids([[doc[i].text for i in rows]])).activations)[:, 0]
                loss = loss + (layers * torch.from_numpy(d_out[:, rows])).sum()
    loss.backward()
    for name, p in bilm.named_parameters():
        if p.grad is not None:
            scale = float(p.grad.abs().max()) + 1e-12
            assert float((got[name] - p.grad).abs().max()) / scale < 1e-4, name


@pytest.mark.parametrize(
    "lang,tokenizer,warns",
    [
        ("zh", {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}, False),
        ("zh", {"@tokenizers": "spacy.Tokenizer.v1"}, True),  # e.g. jieba's words vs characters
        ("en", {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}, True),
    ],
)
def test_pipeline_of_other_tokens_than_pretraining_warns(tmp_path, tiny_dir, lang, tokenizer, warns):
    """A model pretrained on one tokenizer's tokens ran silently in a pipeline that reads others
    (Japanese fallback phrases vs SudachiPy words, Chinese characters vs jieba words, another language)."""
    import warnings

    bilm = BiLM.load(tiny_dir)
    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh",
                  "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}}
    bilm.save(tmp_path / "zh", provenance=provenance)
    nlp = spacy.blank(lang, config={"nlp": {"tokenizer": tokenizer}})
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = nlp("我喜欢茶")
    messages = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(messages) == int(warns)
    if warns:
        assert "spacy.blank('zh', config={'nlp': {'tokenizer': {'@tokenizers': 'spacy.zh.ChineseTokenizer'" in messages[0]
    assert doc._.elmo.shape == (N_LAYERS, len(doc), WIDTH)


def test_other_language_of_a_model_without_its_tokenizer_recorded_warns_in_plain_words(tmp_path, tiny_dir):
    """Models pretrained before the tokenizer was recorded (the bundled default among them) are checked by
    language only; the warning said "tokenizer its default" and suggested
    spacy.blank('zh', config={'nlp': {'tokenizer': its default}}), which is no Python."""
    import warnings

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp("tea please")
    messages = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(messages) == 1
    assert "its default" not in messages[0] and "this pipeline is 'en'" in messages[0]
    assert "spacy.blank('zh')" in messages[0]


@pytest.mark.parametrize("recorded", ["ko", "ja", "zh"])
def test_the_other_tokens_warning_names_the_block_the_model_records(tmp_path, tiny_dir, recorded):
    """A model of the rule-based fallback's tokens (ko or ja pretrained without their packages; zh likewise) in an
    English pipeline: the advice names the block the model records, spacy.Tokenizer.v1, not its language's
    default, which reads other tokens (and needs packages where the fallback was taken)."""
    import json
    import re
    import warnings

    rules = {"@tokenizers": "spacy.Tokenizer.v1"}
    BiLM.load(tiny_dir).save(tmp_path / "m", provenance={"trained_by": "spacy-elmo pretrain", "lang": recorded,
                                                          "tokenizer": rules})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "m")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp("tea please")
    (message,) = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    found = re.search(r"--nlp\.lang (\S+) --nlp\.tokenizer '([^']+)'", message)
    assert (found.group(1), json.loads(found.group(2))) == (recorded, rules)
    assert f"spacy.blank({recorded!r}, config={{'nlp': {{'tokenizer': {rules}}}}})" in message


def _other_tokens(run) -> list:
    """The messages of the other-tokens warnings (TokenizerMismatchWarning) that ``run()`` gives."""
    import warnings

    from spacy_elmo.errors import TokenizerMismatchWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if issubclass(w.category, TokenizerMismatchWarning)]


def test_a_recorded_block_lacking_a_default_setting_is_the_pipelines_it_builds_as(tmp_path, tiny_dir):
    """A model recording a block of a spaCy whose tokenizer had fewer settings (zh's without segmenter) in a
    spacy.blank("zh") pipeline, whose block is that one with the default filled in: the same tokens, no warning."""
    BiLM.load(tiny_dir).save(tmp_path / "m", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh",
                                                          "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer"}})
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "m")})
    assert _other_tokens(lambda: nlp("我喜欢茶")) == []


def test_the_tokenizer_mismatch_warnings_have_a_category_a_strict_suite_can_ignore(tmp_path, tiny_dir):
    """A suite run with filterwarnings = error had to ignore all UserWarnings (the elmo component's) and
    RuntimeWarnings (embed's, evaluate's) to run a model on another tokenizer's tokens: they are
    TokenizerMismatchWarning, still UserWarning and RuntimeWarning for the filters of those."""
    import warnings

    from spacy_elmo.errors import TokenizerMismatchWarning
    from spacy_elmo.training.data import make_nlp, warn_other_tokens

    assert issubclass(TokenizerMismatchWarning, UserWarning) and issubclass(TokenizerMismatchWarning, RuntimeWarning)
    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh"}
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance=provenance)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=TokenizerMismatchWarning)
        assert nlp("tea please")._.elmo is not None
        warn_other_tokens(provenance, "MODEL", make_nlp("en"), "en", "TEXT")
    with pytest.warns(TokenizerMismatchWarning, match="pretrained on the tokens"):
        warn_other_tokens(provenance, "MODEL", make_nlp("en"), "en", "TEXT")


@pytest.mark.parametrize("how", ["weights, empty loader", "loader path", "loader of the user's"])
def test_initialize_checks_weights_a_loader_loads_against_the_pipeline_it_is_handed(tmp_path, tiny_dir, how):
    """Each way initialize loads weights (the component's weights under a loader naming none, the loader's path, a
    loader of the user's) checks them against the pipeline handed to it, not the one the factory built the
    component for."""
    from spacy_elmo.pipeline.loaders import load_weights, weights_loader

    model = str(tmp_path / "zh")
    BiLM.load(tiny_dir).save(model, provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    built_for = spacy.blank("zh")
    elmo = built_for.add_pipe("elmo", config={"weights": model if how.startswith("weights") else None})
    loader = {"weights, empty loader": weights_loader(""), "loader path": weights_loader(model),
              "loader of the user's": lambda backend="auto": load_weights(model, backend)}[how]
    messages = _other_tokens(lambda: elmo.initialize(lambda: [], nlp=spacy.blank("en"), weights_loader=loader))
    assert elmo.is_loaded and len(messages) == 1 and "this pipeline is 'en'" in messages[0], messages


@pytest.mark.parametrize("lang", ["ko", "ja", "th", "vi"])
def test_a_pipeline_of_the_fallback_tokenizer_is_told_pretrain_reads_with_it(tmp_path, tiny_dir, lang):
    """A ko/ja/th/vi pipeline of the rule-based block, where the packages of spaCy's own tokenizer are missing, is
    the tokenizer pretrain --lang reads with here (make_nlp's fallback, not the language's default block): the
    other-tokens warning offers pretraining again on its tokens."""
    from spacy_elmo.training.data import RULE_BASED, reading_tokenizer_settings

    if reading_tokenizer_settings(lang) != RULE_BASED:
        pytest.skip(f"spaCy's {lang} tokenizer builds here")
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    nlp = spacy.blank(lang, config={"nlp": {"tokenizer": RULE_BASED}})
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    (message,) = _other_tokens(lambda: nlp("abc"))
    assert f"`spacy-elmo pretrain TEXT OUT_DIR --lang {lang}` reads the text with this very tokenizer" in message


def test_a_component_built_without_a_pipeline_loads_a_pretrained_model_without_a_check(tmp_path, tiny_dir):
    """An ElmoComponent built directly (no factory, no pipeline: nothing tells its language or tokenizer) loads
    a model that records both, silently: nothing to compare with is no mismatch, and no error."""
    import warnings

    from spacy.vocab import Vocab

    from spacy_elmo.pipeline import ElmoComponent
    from spacy_elmo.pipeline.bilm_layer import build_elmo_bilm

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh",
                                                           "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}})
    elmo = ElmoComponent(Vocab(), build_elmo_bilm(), "elmo", weights=str(tmp_path / "zh"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = elmo(spacy.blank("en").make_doc("tea please"))
    assert not [w for w in caught if "pretrained on the tokens" in str(w.message)]
    assert doc._.elmo.shape == (N_LAYERS, 2, WIDTH)


def test_a_model_spacy_elmo_did_not_pretrain_is_never_told_apart_by_its_language(tmp_path, tiny_dir):
    """A model saved with a provenance of its own (BiLM.save(provenance={"lang": "zh"}), no trained_by) was not
    read by pretrain, whose tokens the check compares: it runs in an English pipeline silently."""
    import warnings

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"lang": "zh"})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp("tea please")
    assert not [w for w in caught if "pretrained on the tokens" in str(w.message)]


@pytest.mark.parametrize("source_lang,target_lang,warns", [("en", "zh", False), ("zh", "en", True)])
def test_a_sourced_component_is_checked_against_the_pipeline_running_it(tmp_path, tiny_dir, source_lang, target_lang,
                                                                        warns):
    """add_pipe(source=) shares the component object, whose weights loaded at first use in the new pipeline were
    checked against the source pipeline's language and tokenizer: a model of Chinese characters warned in a
    Chinese pipeline sourced from an English one and ran silently in an English one sourced from a Chinese one."""
    import warnings

    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh",
                  "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}}
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance=provenance)
    source = spacy.blank(source_lang)
    source.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    target = spacy.blank(target_lang)
    target.add_pipe("elmo", source=source)
    assert target.get_pipe("elmo") is source.get_pipe("elmo")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target("我喜欢茶")
    messages = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(messages) == int(warns), messages
    if warns:
        assert "this pipeline is 'en'" in messages[0]


@pytest.mark.parametrize("given", ["zh", "en"])
def test_initialize_checks_the_weights_against_the_pipeline_it_is_handed(tmp_path, tiny_dir, given):
    """initialize(nlp=...) names the pipeline the component serves: its language and tokenizer, not the one the
    factory built the component for, are what the weights are checked against."""
    import warnings

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    built_for = spacy.blank("zh" if given == "en" else "en")
    elmo = built_for.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        elmo.initialize(lambda: [], nlp=spacy.blank(given))
    messages = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(messages) == int(given == "en"), messages


@pytest.mark.parametrize("how", ["live", "saved"])
def test_an_elmo_sourced_with_its_weights_loaded_is_checked_once_in_the_pipeline_it_joins(tmp_path, tiny_dir, how):
    """A component whose weights loaded (and were checked) in its source pipeline, live or spacy.load-ed, was never
    checked against the pipeline it was sourced into: a zh model of characters ran silently in an en pipeline, where
    adding it directly warns. It is checked when it joins (add_pipe relinks the pipeline; spaCy never initializes a
    frozen sourced component), once per pipeline: initialize, calls and the source's calls warn no more."""
    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh",
                  "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}}
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance=provenance)
    source = spacy.blank("zh")
    source.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    assert _other_tokens(lambda: source("我喜欢茶")) == []
    if how == "saved":
        source.to_disk(tmp_path / "saved")
        source = spacy.load(tmp_path / "saved")
    target = spacy.blank("en")
    messages = _other_tokens(lambda: (target.add_pipe("elmo", source=source), target("tea")))  # frozen: no initialize
    assert len(messages) == 1 and "this pipeline is 'en'" in messages[0], messages
    assert _other_tokens(lambda: (target.initialize(), target("tea"), source("我喜欢茶"))) == []


@pytest.mark.parametrize("given", ["zh", "en"])
def test_initialize_checks_weights_loaded_elsewhere_against_the_pipeline_it_is_handed(tmp_path, tiny_dir, given):
    """initialize(nlp=...) of a component whose weights already loaded in the pipeline it was built for checks them
    against ``nlp`` (once), as it does weights it loads."""
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    built_for = spacy.blank("zh")
    elmo = built_for.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    other = spacy.blank(given)
    messages = _other_tokens(lambda: (built_for("我喜欢茶"), elmo.initialize(lambda: [], nlp=other),
                                      elmo.initialize(lambda: [], nlp=other)))
    assert len(messages) == int(given == "en"), messages


@pytest.mark.parametrize("call", ["nlp(text)", "nlp.initialize()", "load_weights"])
def test_the_other_language_warning_points_at_the_users_call(tmp_path, tiny_dir, call):
    """The warning named a line of spacy_elmo/pipeline/component.py (the loading's own frames), not the user's
    call that loaded the weights: Python prints that line under the warning, so the user saw library code."""
    import warnings

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={"trained_by": "spacy-elmo pretrain", "lang": "zh"})
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if call == "nlp(text)":
            nlp("tea please")
        elif call == "nlp.initialize()":
            nlp.initialize()
        else:
            elmo.load_weights(str(tmp_path / "zh"))
    shown = [w for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(shown) == 1
    assert shown[0].filename == __file__, shown[0].filename


def test_outputs_are_the_bilm_rows_exactly(tiny_dir):
    """Each doc's rows are, bit for bit, what the biLM gives its sub-batch (run directly on the same rows
    with the same cached token vectors); whitespace tokens stay zero; doc._.elmo is numpy's float16
    rounding of them and doc._.elmo_idx the tokens' offsets."""
    from spacy_elmo.bilm.token_cache import run_rows
    from spacy_elmo.pipeline.batching import group_pieces, make_pieces

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"batch_tokens": 24, "max_window": 5}})
    texts = ["The bank  of the river\n was steep. It rose.", "", "  ", "A b c d e f g h i j k l. m",
             "Heavy rain caused flooding in several villages , and the roads were closed.\n\n"]  # fmt: skip
    docs = [nlp.get_pipe("sentencizer")(nlp.make_doc(t)) for t in texts]
    component = nlp.get_pipe("elmo")
    outputs = component.predict(docs)
    runner = get_runner(component.model)
    groups = group_pieces(make_pieces(docs, 5), 24)
    assert len(groups) > 2
    covered = [numpy.zeros(len(doc), dtype=bool) for doc in docs]
    for group in groups:
        positions = []
        for p in group:
            words = [i for i, t in enumerate(docs[p.doc]) if not t.is_space]
            positions.append(words[p.start : p.end])
        rows = [[docs[p.doc][i].text for i in pos] for p, pos in zip(group, positions)]
        with torch.no_grad():
            Y = torch.stack(run_rows(runner.bilm, rows, runner.cache).activations).numpy()
        for b, (p, pos) in enumerate(zip(group, positions)):
            assert numpy.array_equal(outputs[p.doc][:, pos], Y[:, b, : len(pos)])
            covered[p.doc][pos] = True
    component.set_annotations(docs, outputs)
    for doc, out, seen in zip(docs, outputs, covered):
        assert numpy.array_equal(seen, [not t.is_space for t in doc])
        assert not out[:, ~seen].any()
        assert doc._.elmo.dtype == numpy.float16
        assert numpy.array_equal(doc._.elmo.view(numpy.uint16), out.astype(numpy.float16).view(numpy.uint16))
        assert doc._.elmo_idx.dtype == numpy.int64 and doc._.elmo_idx.tolist() == [t.idx for t in doc]


#: Whether torch's float32 -> float16 keeps a quiet NaN's sign and payload (not 2.6.0; 2.9.1 and 2.13.0 do).
_NEGATIVE_NAN = numpy.array([0xFFC02000], dtype=numpy.uint32).view(numpy.float32)
_TORCH_KEEPS_NAN_BITS = bool(torch.from_numpy(_NEGATIVE_NAN).half().view(torch.int16).numpy()
                             == _NEGATIVE_NAN.astype(numpy.float16).view(numpy.int16))


def test_float16_store_rounds_as_numpy():
    """stored_copy's float32 -> float16 (torch's conversion) gives numpy's bits: a sample of every
    float32 pattern, the halfway cases around each float16, the subnormal and overflow edges. The one
    difference: a signalling NaN (which no arithmetic produces) comes out as a quiet NaN."""
    from spacy_elmo.pipeline.doc_data import stored_copy

    bits = numpy.arange(0, 2**32, 4099, dtype=numpy.uint64).astype(numpy.uint32)
    halves = numpy.arange(2**16, dtype=numpy.uint32).astype(numpy.uint16).view(numpy.float16).astype(numpy.float32)
    ties = (halves.view(numpy.uint32)[:, None] + numpy.arange(-2, 3, dtype=numpy.int64) * 2**12).astype(numpy.uint32)
    edges = numpy.array([0x33000000, 0x33000001, 0x387FC000, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x7F800000,
                         0x7FC00000, 0x7F800001, 0xFFC00001, 0x80000000, 0x00000001], dtype=numpy.uint32)  # fmt: skip
    for b in (bits, ties.ravel(), edges):
        data = b.view(numpy.float32).reshape(1, -1, 1)
        with numpy.errstate(over="ignore"):
            expected = numpy.array(data, dtype="float16", copy=True)
        got = stored_copy(data, "float16")
        assert got.dtype == numpy.float16 and got.shape == data.shape and got.flags.owndata
        signalling = numpy.isnan(data) & (data.view(numpy.uint32) & 0x00400000 == 0)
        # torch 2.6.0's conversion gives every NaN as 0x7FFF (its sign and payload lost, still a NaN): there
        # only the numbers must match bit for bit
        kept = ~signalling if _TORCH_KEEPS_NAN_BITS else ~numpy.isnan(data)
        assert numpy.array_equal(got.view(numpy.uint16)[kept], expected.view(numpy.uint16)[kept])
        assert numpy.isnan(got[numpy.isnan(data)]).all()
    data = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)[:, ::2]  # not contiguous, read-only
    data.flags.writeable = False
    assert numpy.array_equal(stored_copy(data, "float16"), data.astype(numpy.float16))
    assert stored_copy(data, "float32").flags.owndata


@pytest.mark.parametrize("how", ["load_weights refused", "from_bytes put back"])
def test_weights_not_set_leave_the_pipelines_the_old_ones_were_checked_against(tmp_path, tiny_dir, monkeypatch, how):
    """A load whose weights never serve (refused by the mix check after the tokenizer check ran; a vocab that
    fails to be set, which puts the old weights back) recorded the old weights as checked against the pipeline the
    load read: a zh model of characters then joined that en pipeline silently, where it warns once."""
    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh",
                  "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}}
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance=provenance)
    torch.manual_seed(3)
    if how == "load_weights refused":  # a model of one LSTM layer, which the mix of three weights refuses
        BiLM(BiLMConfig(**TINY, n_layers=1), backend="reference").save(tmp_path / "other")
        built_for = spacy.blank("zh")
        elmo = built_for.add_pipe("elmo", config={"weights": str(tmp_path / "zh"), "mix": [0.0] * N_LAYERS})
        assert _other_tokens(lambda: built_for("我喜欢茶")) == []
        target = spacy.blank("en")
        with pytest.raises(ValueError, match="mix has 3 value"):
            elmo.load_weights(str(tmp_path / "other"), nlp=target)
        joining = lambda: (target.add_pipe("elmo", source=built_for), target("tea"))  # noqa: E731
    else:
        BiLM(BiLMConfig(**TINY), backend="reference").save(tmp_path / "other")
        saved = spacy.blank("en")
        saved.add_pipe("elmo", config={"weights": str(tmp_path / "other")})
        data = saved.get_pipe("elmo").to_bytes()
        target = spacy.blank("en")
        elmo = target.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
        assert _other_tokens(lambda: elmo.load_weights(str(tmp_path / "zh"), nlp=spacy.blank("zh"))) == []

        def broken(*args, **kwargs):
            raise OSError("lookups could not be set")

        monkeypatch.setattr(target.vocab.lookups, "from_bytes", broken)
        with pytest.raises(OSError, match="lookups could not be set"):
            elmo.from_bytes(data)  # read against ``target``, the pipeline the factory built it for
        monkeypatch.undo()
        assert elmo.source == str(tmp_path / "zh")
        joining = lambda: elmo.initialize(lambda: [], nlp=target)  # noqa: E731
    messages = _other_tokens(joining)
    assert len(messages) == 1 and "this pipeline is 'en'" in messages[0], messages


def test_a_pipeline_of_another_block_is_told_pretrain_tokenizer_reads_with_it(tmp_path, tiny_dir):
    """A zh pipeline of the rule-based block (not zh's default characters, which pretrain --lang zh reads): the
    other-tokens warning offered no way to pretrain on its tokens, as pretrain read spacy.blank(LANG)'s alone; it
    names pretrain --tokenizer and the block its file holds."""
    from spacy_elmo.training.data import RULE_BASED

    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={
        "trained_by": "spacy-elmo pretrain", "lang": "zh",
        "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}})
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": RULE_BASED}})
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    (message,) = _other_tokens(lambda: nlp("我喜欢茶"))
    assert message.endswith("Or pretrain a model on this pipeline's tokens: `spacy-elmo pretrain TEXT OUT_DIR --lang zh "
                            "--tokenizer tokenizer.cfg` reads the text with this very tokenizer, tokenizer.cfg holding "
                            "these lines:\n[nlp.tokenizer]\n@tokenizers = \"spacy.Tokenizer.v1\""), message


def test_a_pipeline_of_a_block_pretrain_refuses_is_not_told_pretrain_tokenizer_reads_with_it(tmp_path, tiny_dir):
    """A zh pipeline of segmenter = "pkuseg" (the zh_core_web_* pipelines'): pretrain --tokenizer refuses that block
    (E_TOKENIZER_BLOCK_CANNOT_READ: its model loads in an initialize step that no block records), so the
    other-tokens warning offers no tokenizer.cfg holding it; it offered one that pretrain then refused."""
    BiLM.load(tiny_dir).save(tmp_path / "zh", provenance={
        "trained_by": "spacy-elmo pretrain", "lang": "zh",
        "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}})
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer",
                                                          "segmenter": "pkuseg"}}})
    elmo = nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zh")})
    # what first use runs (the pipeline's own initialize loads pkuseg's model, which needs spacy-pkuseg)
    (message,) = _other_tokens(lambda: elmo._ensure_weights(nlp))
    assert "with tokenizer {'@tokenizers': 'spacy.zh.ChineseTokenizer', 'segmenter': 'pkuseg'}" in message, message
    assert "--tokenizer tokenizer.cfg" not in message and "Or pretrain" not in message, message
    assert message.endswith("--nlp.tokenizer '{\"@tokenizers\": \"spacy.zh.ChineseTokenizer\", \"segmenter\": \"char\"}'."), message
