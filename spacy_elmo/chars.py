"""Token characters: UTF-8 bytes plus ELMo's marker ids.

A token becomes ``max_characters_per_token`` slots::

    [begin_of_word, b1 .. bn, end_of_word, padding, padding, ...]

with the bytes cut to ``max_characters_per_token - 2`` (a cut may split a
multi-byte character: the released models were trained that way). Every id
is shifted by +1 so that 0 means "no token" (a padded row of zeros).

Defined behaviour for odd input (tested in ``tests/test_chars.py``):

* any Unicode string is encoded as its UTF-8 bytes: Korean, emoji, control
  characters and whitespace are ordinary bytes;
* as in bilm-tf and AllenNLP (so that the released models see what they were
  trained on): a token that is literally ``<S>`` or ``</S>`` is spelled as the
  sentence marker, and lone surrogates, which have no UTF-8 encoding, are
  dropped from the token (``"a\ud800"`` is spelled as ``"a"``);
* the empty string ``""`` is a real token ``[bow, eow, pad, ...]``;
* an empty sentence gives a row of zeros (all positions masked).
"""

import numbers
from itertools import chain
from collections.abc import Iterator, Mapping, MappingView, Set
from typing import Dict, Iterable, List, Sequence

import torch

from .errors import Errors, with_article

BEGIN_OF_SENTENCE = 256
END_OF_SENTENCE = 257
BEGIN_OF_WORD = 258
END_OF_WORD = 259
PADDING_CHAR = 260
#: Size of the id space before the +1 shift (bytes 0..255 plus five markers).
N_CHAR_IDS = 261
#: Largest id after the +1 shift.
MAX_SHIFTED_ID = N_CHAR_IDS
DEFAULT_MAX_CHARS = 50
#: Literal tokens the references spell as sentence markers.
_MARKER_TOKENS = {"<S>": BEGIN_OF_SENTENCE, "</S>": END_OF_SENTENCE}


def _check_max_chars(max_characters_per_token: int) -> None:
    value = max_characters_per_token
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 3:
        raise ValueError(Errors.E_MAX_CHARS_TOO_SMALL.format(value=value))


#: Text, not tokens: each a Sequence (of characters or of ints), which would otherwise pass for a sentence of
#: one-character or int "tokens" (a bytearray got "Token 0 of sentence 0 is an int").
TEXT_TYPES = (str, bytes, bytearray, memoryview)


def token_list(sentence, index: int) -> Sequence[str]:
    """One sentence as a sequence of tokens: a list or tuple as it is, a 1-D NumPy array or an
    iterator (generator) as a list; a string (untokenized text) or an unordered or unsized
    object is a TypeError naming the fix."""
    if isinstance(sentence, TEXT_TYPES):
        raise TypeError(Errors.E_SENTENCES_NOT_LISTS.format(index=index, a_type=with_article(type(sentence).__name__)))
    if isinstance(sentence, Sequence):
        return sentence
    if getattr(sentence, "ndim", None) == 1 and hasattr(sentence, "tolist"):  # NumPy array of strings
        return sentence.tolist()
    if isinstance(sentence, Iterator):
        return list(sentence)
    if hasattr(sentence, "text"):  # a spaCy Doc or Span (iterates over Tokens), a Token: list() would not do
        said = Errors.E_SENTENCE_HAS_TEXT if isinstance(sentence, Iterable) else Errors.E_SENTENCE_IS_TOKEN
        raise TypeError(said.format(index=index, type_name=type(sentence).__name__))
    raise TypeError(Errors.E_SENTENCE_NOT_LIST.format(index=index, a_type=with_article(type(sentence).__name__)))


def check_tokens(sentences: Sequence[Sequence[str]]) -> None:
    """A TypeError naming the first token of ``sentences`` (each a :func:`token_list`) that is no str, by its
    place in them (``Token 1 of sentence 2``), and the fix. ``sentences`` and its rows are read twice where a token
    fails: sequences, not one-shot iterators (:func:`batch_rows` makes them so).

    Every token is checked, a cached one too: a non-str equal to a str and of its hash (a ``UserString``) would
    find the str's row of a token cache. First at C speed, the whole batch at once (``str.join`` takes a str and
    its subclasses, ``numpy.str_`` too, and nothing else; about 10% of a cached lookup of 10k tokens, where the walk
    took 28%); the walk that finds the token's place is for a batch that fails it."""
    try:
        "".join(chain.from_iterable(sentences))
        return
    except TypeError:
        pass
    for i, sentence in enumerate(sentences):
        for j, token in enumerate(sentence):
            if not isinstance(token, str):
                said = Errors.E_TOKEN_NOT_STR
                if hasattr(token, "text"):  # a spaCy Doc or Span (iterates over Tokens), a Token
                    said = Errors.E_TOKEN_HAS_TEXTS if isinstance(token, Iterable) else Errors.E_TOKEN_HAS_TEXT
                name = type(token).__name__
                raise TypeError(said.format(token_index=j, sentence_index=i, type_name=name, a_type=with_article(name)))


def check_batch(batch) -> None:
    """A TypeError naming the fix unless ``batch`` is an iterable of sentences in order: a string, a mapping, a
    non-iterable or an unordered set (its rows would come in hash order, which no caller can map back) is refused;
    a dict's keys or values, and an ordered set that is a Sequence too (SortedSet, OrderedSet), are in order."""
    if isinstance(batch, Mapping):  # its keys or its values may be the sentences: which, the caller knows
        raise TypeError(Errors.E_BATCH_IS_MAPPING.format(type_name=type(batch).__name__))
    if isinstance(batch, TEXT_TYPES) or not isinstance(batch, Iterable):
        raise TypeError(Errors.E_BATCH_NOT_LIST.format(type_name=type(batch).__name__))
    if isinstance(batch, Set) and not isinstance(batch, (MappingView, Sequence)):
        raise TypeError(Errors.E_BATCH_UNORDERED.format(type_name=type(batch).__name__))


def batch_rows(batch, tokens: bool = True) -> List[Sequence[str]]:
    """A batch of sentences (:func:`check_batch`) as a list of :func:`token_list` rows, as every entry point takes
    one (batch_to_ids, run_rows, TokenCache, ElmoEmbedder). With ``tokens``, each token is checked to be a str
    (:func:`check_tokens`); a caller that checks them itself passes False."""
    check_batch(batch)
    rows = [token_list(sentence, i) for i, sentence in enumerate(batch)]
    if tokens:
        check_tokens(rows)
    return rows


def word_char_ids(token: str, max_characters_per_token: int = DEFAULT_MAX_CHARS) -> List[int]:
    """Unshifted character ids of one token: a list of ``max_characters_per_token`` ints."""
    _check_max_chars(max_characters_per_token)
    marker = _MARKER_TOKENS.get(token)
    if marker is not None:
        return marker_char_ids(marker, max_characters_per_token)
    data = token.encode("utf-8", errors="ignore")[: max_characters_per_token - 2]
    ids = [BEGIN_OF_WORD, *data, END_OF_WORD]
    ids.extend([PADDING_CHAR] * (max_characters_per_token - len(ids)))
    return ids


def marker_char_ids(marker: int, max_characters_per_token: int = DEFAULT_MAX_CHARS) -> List[int]:
    """Unshifted ids of a sentence marker (``BEGIN_OF_SENTENCE`` or ``END_OF_SENTENCE``)."""
    _check_max_chars(max_characters_per_token)
    ids = [BEGIN_OF_WORD, marker, END_OF_WORD]
    ids.extend([PADDING_CHAR] * (max_characters_per_token - 3))
    return ids


def batch_to_ids(
    sentences: Iterable[Sequence[str]], max_characters_per_token: int = DEFAULT_MAX_CHARS
) -> torch.Tensor:
    """Character ids of a batch of tokenized sentences.

    sentences: list of sentences, each a list of token strings (tuples, 1-D NumPy
    arrays of strings and generators are taken too).
    Returns: LongTensor ``(batch, max_len, max_characters_per_token)``, ids
    shifted by +1, zeros for padded tokens.
    """
    _check_max_chars(max_characters_per_token)
    max_characters_per_token = int(max_characters_per_token)
    sentences = batch_rows(sentences)
    max_len = max((len(s) for s in sentences), default=0)
    out = torch.zeros((len(sentences), max_len, max_characters_per_token), dtype=torch.long)
    # One small tensor per distinct token: sentences repeat tokens a lot.
    cache: Dict[str, torch.Tensor] = {}
    for i, sentence in enumerate(sentences):
        for j, token in enumerate(sentence):
            row = cache.get(token)
            if row is None:
                row = torch.tensor(word_char_ids(token, max_characters_per_token), dtype=torch.long) + 1
                cache[token] = row
            out[i, j] = row
    return out
