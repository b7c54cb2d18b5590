"""doc_data behaviour a mutation audit found untested (session 50), on docs annotated by hand (no biLM)."""

import warnings

import numpy
import pytest
import spacy
from spacy.tokens import Token

from spacy_elmo.errors import Errors
from spacy_elmo.pipeline.doc_data import aligned_layers, install_extensions, set_doc_data, span_vector, stored_copy, token_vector

from .conftest import N_LAYERS, WIDTH


def _annotated(text: str = "the river bank", store: str = "all", dtype: str = "float16"):
    install_extensions()
    doc = spacy.blank("en").make_doc(text)
    layers = numpy.arange(N_LAYERS * len(doc) * WIDTH, dtype="float32").reshape(N_LAYERS, len(doc), WIDTH) / 100
    mix = numpy.array([0.2, 0.3, 0.5], dtype="float64")
    set_doc_data(doc, layers, mix, store, dtype)
    return doc, layers, mix


def test_install_extensions_keeps_an_elmo_vector_extension_registered_before():
    """Idempotent: a second call (every component built, every ``install_hooks``) re-registers nothing, so a getter
    set on ``token._.elmo_vector`` before it stays."""
    install_extensions()
    default = Token.get_extension("elmo_vector")

    def mine(token):
        return None

    Token.set_extension("elmo_vector", getter=mine, force=True)
    try:
        install_extensions()
        assert Token.get_extension("elmo_vector")[2] is mine
    finally:
        Token.set_extension("elmo_vector", getter=default[2], force=True)
    assert Token.get_extension("elmo_vector")[2] is token_vector


def test_store_none_clears_what_an_earlier_run_stored():
    """A doc run again through a component of ``store: none`` keeps no ELMo data of the earlier run: not its layers,
    nor their mix or offsets (read without the layers they belong to)."""
    doc, layers, mix = _annotated()
    assert doc._.elmo is not None and doc._.elmo_mix is not None and doc._.elmo_idx is not None
    set_doc_data(doc, layers, mix, "none", "float16")
    assert (doc._.elmo, doc._.elmo_mix, doc._.elmo_idx) == (None, None, None)


def test_the_stored_mix_and_offsets_are_float32_and_int64():
    """As documented (and as msgpack carries them): ``doc._.elmo_mix`` float32 whatever the mix given (a float64
    softmax), ``doc._.elmo_idx`` int64 character offsets (spaCy's ``to_array`` gives uint64)."""
    doc, layers, mix = _annotated("New York  is big")
    assert doc._.elmo_mix.dtype == numpy.float32
    numpy.testing.assert_array_equal(doc._.elmo_mix, mix.astype("float32"))
    assert doc._.elmo_idx.dtype == numpy.int64
    numpy.testing.assert_array_equal(doc._.elmo_idx, [t.idx for t in doc])


@pytest.mark.parametrize("view", ["reversed", "read-only", "strided"])
def test_stored_copy_to_float16_of_any_float32_view(view):
    """torch's float16 conversion reads a C-contiguous, writeable array: a view of another layout (a batch buffer's
    rows reversed or strided) or a read-only one (a doc read back) is copied first, without a warning, and comes out
    as numpy rounds it."""
    data = numpy.linspace(-3, 3, 4 * 6, dtype="float32").reshape(4, 6) / 7
    given = {"reversed": data[:, ::-1], "strided": data[::2, ::3], "read-only": data.copy()}[view]
    if view == "read-only":
        given.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = stored_copy(given, "float16")
    assert out.dtype == numpy.float16 and out.flags.c_contiguous and not numpy.shares_memory(out, given)
    numpy.testing.assert_array_equal(out, given.astype("float16"))


def test_rows_without_offsets_are_trusted_by_the_token_count_alone():
    """ELMo data set by hand, without ``doc._.elmo_idx`` (or with offsets of another row count): one row per token
    is read as is; a row count other than the doc's tokens is an error naming both, never rows read at offsets
    that are not theirs."""
    doc, layers, _ = _annotated("a b c")
    doc._.elmo_idx = None
    numpy.testing.assert_allclose(token_vector(doc[2]), doc._.elmo[:, 2].astype("float32").T @ doc._.elmo_mix, rtol=1e-6)
    doc._.elmo_idx = numpy.array([0, 2], dtype="int64")  # offsets of two rows, three rows stored
    numpy.testing.assert_allclose(token_vector(doc[2]), doc._.elmo[:, 2].astype("float32").T @ doc._.elmo_mix, rtol=1e-6)
    doc._.elmo = doc._.elmo[:, :2]  # two rows, three tokens, offsets of three rows
    doc._.elmo_idx = numpy.array([0, 2, 4], dtype="int64")
    for idx in (None, doc._.elmo_idx):
        doc._.elmo_idx = idx
        with pytest.raises(ValueError) as raised:
            token_vector(doc[2])
        assert str(raised.value) == Errors.E_ELMO_TOKENS_CHANGED.format(rows=2, n_tokens=3)


def test_tokens_merged_at_the_end_of_the_doc_read_the_mean_of_their_rows():
    """A merge of the last tokens leaves every token's offset as it was, one token fewer: the offsets alone matched
    the rows' (the whole doc, the merged token), and the merged token read its first row only."""
    doc, _, _ = _annotated("a b c d", dtype="float32")
    rows = numpy.tensordot(doc._.elmo_mix, doc._.elmo, axes=(0, 0))  # (4, W) mixed rows
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:4])
    assert [t.idx for t in doc] == [0, 2, 4]
    want = numpy.stack([rows[0], rows[1], rows[2:4].mean(0)])
    numpy.testing.assert_allclose(token_vector(doc[2]), want[2], rtol=1e-6)
    numpy.testing.assert_allclose(span_vector(doc), want.mean(0), rtol=1e-6)
    assert aligned_layers(doc).shape == (N_LAYERS, 3, WIDTH)


def test_a_merged_tokens_last_row_at_the_end_of_the_doc_is_whitespace_by_its_whole_text():
    """The doc's last row has no next row to end its text: it runs to the merged token's end. A word token " York"
    there was decided by its first character, taken for whitespace and left out of the merged token's mean."""
    from spacy.tokens import Doc

    install_extensions()
    doc = Doc(spacy.blank("en").vocab, words=["New", " York"], spaces=[False, False])
    layers = numpy.random.default_rng(0).random((N_LAYERS, 2, WIDTH), dtype="float32") + 0.5
    set_doc_data(doc, layers, numpy.full(N_LAYERS, 1 / N_LAYERS), "all", "float32")
    rows = numpy.tensordot(doc._.elmo_mix, doc._.elmo, axes=(0, 0))
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    assert doc[0].text == "New York" and len(doc) == 1
    numpy.testing.assert_allclose(token_vector(doc[0]), rows.mean(0), rtol=1e-6)
    numpy.testing.assert_allclose(aligned_layers(doc)[:, 0], layers.mean(1), rtol=1e-6)


def test_a_merged_token_of_whitespace_only_reads_the_mean_of_its_rows():
    """Every row of the merged token is whitespace: none is left out (zero rows from the component), never the mean
    of no rows (nan, with numpy's warning)."""
    from spacy.tokens import Doc

    install_extensions()
    doc = Doc(spacy.blank("en").vocab, words=["a", " ", "\n", "b"], spaces=[False, False, False, False])
    layers = numpy.random.default_rng(0).random((N_LAYERS, 4, WIDTH), dtype="float32")
    set_doc_data(doc, layers, numpy.full(N_LAYERS, 1 / N_LAYERS), "all", "float32")
    rows = numpy.tensordot(doc._.elmo_mix, doc._.elmo, axes=(0, 0))
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[1:3])
    assert doc[1].text == " \n" and doc[1].is_space
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        numpy.testing.assert_allclose(token_vector(doc[1]), rows[1:3].mean(0), rtol=1e-6)
