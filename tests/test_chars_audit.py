"""Mutation audit of spacy_elmo/chars.py: the cases its other tests left open."""

import pytest

from spacy_elmo import batch_to_ids
from spacy_elmo.chars import BEGIN_OF_SENTENCE, END_OF_SENTENCE, marker_char_ids, word_char_ids


@pytest.mark.parametrize("text", [b"Hello world", bytearray(b"Hello world"), memoryview(b"Hello world")],
                         ids=["bytes", "bytearray", "memoryview"])
def test_a_bytes_sentence_is_told_to_tokenize_first(text):
    """bytes (and bytearray, memoryview) is a Sequence (of ints): as a sentence it is untokenized text, not 11 tokens
    that are no str (a bytearray got "Token 0 of sentence 0 is an int")."""
    with pytest.raises(TypeError, match=rf"but sentence 0 is a {type(text).__name__}\. Tokenize first"):
        batch_to_ids([text])
    with pytest.raises(TypeError, match=rf"got an object of type {type(text).__name__}\."):
        batch_to_ids(text)


@pytest.mark.parametrize("marker", [BEGIN_OF_SENTENCE, END_OF_SENTENCE])
def test_marker_char_ids_refuses_too_few_characters(marker):
    """Called directly (the vocabulary's and the model's <S>/</S> rows): 2 slots gave 3 ids, not an error."""
    assert marker_char_ids(marker, 3) == [258, marker, 259]
    with pytest.raises(ValueError, match="at least 3"):
        marker_char_ids(marker, 2)


def test_word_char_ids_refuses_too_few_characters():
    """Called directly (the vocabulary's rows): 2 slots gave [bow, eow], every byte dropped, not an error."""
    assert word_char_ids("abc", 3) == [258, ord("a"), 259]
    with pytest.raises(ValueError, match="at least 3"):
        word_char_ids("abc", 2)
