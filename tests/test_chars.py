"""Character ids: the released encoding and defined behaviour for odd input."""

import collections.abc
import re

import pytest
import torch

from spacy_elmo import batch_to_ids
from spacy_elmo.chars import word_char_ids


def test_first_matches_the_released_encoding():
    ids = batch_to_ids([["First"]])[0, 0].tolist()
    assert ids[:8] == [259, 71, 106, 115, 116, 117, 260, 261]
    assert ids[8:] == [261] * 42


def test_korean_is_utf8_bytes():
    ids = batch_to_ids([["밥"]])[0, 0].tolist()
    assert ids[:5] == [259, 236, 177, 166, 260]  # bytes 235, 176, 165 shifted by +1


def test_long_tokens_are_cut_to_48_bytes():
    ids = word_char_ids("x" * 60)
    assert len(ids) == 50 and ids[0] == 258 and ids[49] == 259
    assert ids[1:49] == [ord("x")] * 48
    # A cut may split a multi-byte character, as the released models saw it.
    ids = word_char_ids("밥" * 17)  # 51 bytes
    assert ids[1:49] == list(("밥" * 16).encode()) and ids[49] == 259


def test_padding_rows_are_zero_and_shape():
    out = batch_to_ids([["a", "b", "c"], [], ["d"]])
    assert out.shape == (3, 3, 50) and out.dtype == torch.long
    assert torch.all(out[1] == 0) and torch.all(out[2, 1:] == 0)
    assert batch_to_ids([]).shape == (0, 0, 50)


@pytest.mark.parametrize("token", ["", " ", "\t\n", "\x00\x07", "🎉", "a\u0301", "<s>", "S"])
def test_odd_tokens_are_real_tokens(token):
    ids = batch_to_ids([[token]])[0, 0]
    assert ids[0] == 259 and (ids > 0).all()
    raw = token.encode("utf-8")[:48]
    assert ids[1 : 1 + len(raw)].tolist() == [b + 1 for b in raw]
    assert ids[1 + len(raw)] == 260


def test_errors_on_untokenized_input():
    with pytest.raises(TypeError, match="Tokenize first"):
        batch_to_ids(["Hello world"])
    with pytest.raises(TypeError, match="Token 1 of sentence 0 is an int"):
        batch_to_ids([["ok", 3]])
    with pytest.raises(ValueError, match="at least 3"):
        batch_to_ids([["x"]], max_characters_per_token=2)


def test_other_widths():
    out = batch_to_ids([["abcdefgh"]], max_characters_per_token=6)
    assert out[0, 0].tolist() == [259, 98, 99, 100, 101, 260]


def test_reference_conventions_for_markers_and_surrogates():
    """bilm-tf and AllenNLP spell a literal <S> / </S> as the markers and drop lone surrogates."""
    ids = batch_to_ids([["<S>", "</S>", "a\ud800b", "\ud800"]])[0]
    assert ids[0, :4].tolist() == [259, 257, 260, 261]
    assert ids[1, :4].tolist() == [259, 258, 260, 261]
    assert ids[2, :5].tolist() == [259, ord("a") + 1, ord("b") + 1, 260, 261]
    assert ids[3, :3].tolist() == [259, 260, 261]  # an empty word, still a real token


@pytest.mark.parametrize("batch", ["Hello world", b"Hello", None, 3], ids=["str", "bytes", "None", "int"])
def test_a_batch_that_is_not_a_list_of_sentences(batch):
    with pytest.raises(TypeError, match=r"^Expected a list of sentences.*but got an object of type .*text.split\(\)"):
        batch_to_ids(batch)


#: A dict batch's error: its keys or values may be the sentences, and the error says how to pass either.
DICT_BATCH = (r"^Expected a list of sentences, each a list of token strings, but got a mapping \(type dict\), whose "
              r"keys would be taken for the sentences\. Pass the sentences as a list in order: list\(d\.values\(\)\) "
              r"where they are its values, list\(d\.keys\(\)\) where they are its keys\.$")


def test_a_dict_batch_is_told_to_pass_its_values_or_keys():
    """A dict batch said "got an object of type dict ... for one text: [text.split()]", no help for sentences held
    as a dict's values (or keys); the error names both."""
    with pytest.raises(TypeError, match=DICT_BATCH):
        batch_to_ids({"a": ["b"]})


class OrderedSentenceSet(collections.abc.Set, collections.abc.Sequence):
    """An ordered set that is a Sequence too, as sortedcontainers.SortedSet and ordered_set.OrderedSet are."""

    def __init__(self, items):
        self.items = list(items)

    def __contains__(self, item):
        return item in self.items

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize("batch", [{("hello", "world"), ("bye",)}, frozenset([("a",)])], ids=["set", "frozenset"])
def test_a_batch_that_is_a_set_is_refused_as_unordered(batch):
    """A set of sentences was accepted, its rows in hash order (no way to tell which row is which sentence): refused
    as a set sentence is, "in order"."""
    with pytest.raises(TypeError, match=rf"^Expected a list of sentences in order, but got an unordered set \(type "
                                        rf"{type(batch).__name__}\).*Pass the sentences as a list"):
        batch_to_ids(batch)
    ordered = {("hello", "world"): 1, ("bye",): 2}  # a dict's keys are a Set too, but in order: taken
    assert torch.equal(batch_to_ids(ordered.keys()), batch_to_ids([["hello", "world"], ["bye"]]))


def test_an_ordered_set_that_is_a_sequence_is_a_batch_in_order():
    """A Set that is also a Sequence (SortedSet, OrderedSet) was refused as "no order" (and named "a OrderedSet")."""
    batch = OrderedSentenceSet([("hello", "world"), ("bye",)])
    assert torch.equal(batch_to_ids(batch), batch_to_ids([["hello", "world"], ["bye"]]))


@pytest.mark.parametrize("sentence, said", [({"a", "b"}, "a set"), (None, "a NoneType"), (7, "an int")],
                         ids=["set", "None", "int"])
def test_a_sentence_that_is_not_an_ordered_list(sentence, said):
    with pytest.raises(TypeError, match=f"sentence 1 is {said}\\. .*list\\(tokens\\)"):
        batch_to_ids([["ok"], sentence])


class _Token:
    """A spaCy Token as batch_to_ids sees it (chars is below the spaCy layer: duck-typed, no spaCy here)."""

    def __init__(self, text):
        self.text = text


class _Span:
    """A spaCy Doc or Span: .text, iterates over tokens, neither a Sequence nor an Iterator."""

    def __init__(self, words):
        self.tokens = [_Token(w) for w in words]
        self.text = " ".join(words)

    def __iter__(self):
        return iter(self.tokens)


_DOC_TEXTS = re.escape("e.g. [[t.text for t in doc]] (the doc as one sentence), or "
                       "[[t.text for t in s] for s in doc.sents] where sentence boundaries are set.")


def test_spacy_docs_spans_and_tokens_are_told_to_pass_their_texts():
    """batch_to_ids([doc]) said "sentence 0 is a Doc ... e.g. list(tokens)", and list(doc) then "Token 0 of sentence 0
    is a Token"; batch_to_ids(doc) said "sentence 0 is a Token ... e.g. list(tokens)", though the batch was the
    Doc; batch_to_ids([[doc]]) said "Token 0 of sentence 0 ... like a spaCy Token ... [t.text for t in span]". Each
    names the texts to pass: first the form that works on any doc ([s for s in doc.sents] raises spaCy's
    E030 on a doc without sentence boundaries, spacy.blank's), and no batch_to_ids call (ElmoEmbedder's embed_batch
    says these too)."""
    doc = _Span(["Hello", "world"])
    for batch in ([doc], iter([doc])):  # batch_to_ids([doc]), batch_to_ids(doc.sents)
        with pytest.raises(TypeError, match=rf"^Expected a list of sentences, each a list of token strings, but "
                                            rf"sentence 0 is an object of type _Span with \.text \(like a spaCy Doc "
                                            rf"or Span\)\. Pass its tokens' texts, {_DOC_TEXTS}$") as err:
            batch_to_ids(batch)
        assert "list(tokens)" not in str(err.value)
    with pytest.raises(TypeError, match=rf"sentence 0 is an object of type _Token with \.text \(like a spaCy Token\): "
                                        rf"the batch given is one document or sentence, not a list of sentences\. "
                                        rf".*{_DOC_TEXTS}$"):
        batch_to_ids(doc)
    with pytest.raises(TypeError, match=r"^Token 1 of sentence 0 is an object of type _Token with \.text \(like a "
                                        r"spaCy Token\), not a str: pass its text \(token\.text\), e\.g\. "
                                        r"\[t\.text for t in span\] for a sentence\.$"):
        batch_to_ids([["ok", _Token("x")]])
    for batch in ([[doc]], [["ok"], iter([doc])]):  # a Doc one level too deep: not "like a spaCy Token"
        with pytest.raises(TypeError, match=rf"^Token 0 of sentence {len(batch) - 1} is an iterable object of type _Span "
                                            r"with \.text \(like a spaCy Doc or Span\), not a str: a sentence "
                                            r"is a list of token texts\. Pass its tokens' texts as the sentence, e\.g\. "
                                            r"\[\[t\.text for t in doc\]\] rather than \[\[doc\]\], or "
                                            r"\[\[t\.text for t in d\] for d in docs\]\.$"):
            batch_to_ids(batch)
    assert torch.equal(batch_to_ids([[t.text for t in doc]]), batch_to_ids([["Hello", "world"]]))


def test_numpy_arrays_generators_and_tuples_of_tokens_are_sentences():
    """A generator of sentences failed with "object of type 'generator' has no len()" and a 1-D
    NumPy array of tokens with "Tokenize first"."""
    import numpy as np

    sentences = [["The", "bank"], ["밥"], []]
    expected = batch_to_ids(sentences)
    assert torch.equal(batch_to_ids(s for s in sentences), expected)
    assert torch.equal(batch_to_ids([iter(s) for s in sentences]), expected)
    assert torch.equal(batch_to_ids([np.array(s, dtype=str) for s in sentences]), expected)
    assert torch.equal(batch_to_ids(tuple(tuple(s) for s in sentences)), expected)
    assert torch.equal(batch_to_ids(np.array([["a", "b"], ["c", "d"]])), batch_to_ids([["a", "b"], ["c", "d"]]))


@pytest.mark.parametrize("width", [2, 5.0, "50", True, None])
def test_max_characters_per_token_must_be_a_whole_number(width):
    with pytest.raises(ValueError, match="whole number of at least 3"):
        batch_to_ids([["x"]], max_characters_per_token=width)
