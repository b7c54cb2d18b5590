"""Cutting docs into biLM rows and grouping rows into sub-batches.

The biLM was trained on sentences wrapped in ``<S> ... </S>``: a doc with
sentence boundaries is run sentence by sentence, a doc without them in windows
of at most ``max_window`` tokens (so a 20,000-token doc never becomes one
20,000-step row). A sentence longer than ``max_window`` words is cut the same
way, into consecutive pieces read independently (the biLM layer warns once per
model when it meets one: :func:`longest_cut_sentence`). Rows are sorted by length and grouped so that each
sub-batch holds at most ``batch_tokens`` padded tokens (rows x longest row).

Whitespace tokens (``token.is_space``: spaCy's tokens for extra spaces, tabs and
newlines) are left out of the rows, as ``pretrain`` leaves them out of its
corpus (and the released models never saw them): the biLM reads the doc's
other tokens exactly as it reads the same text with single spaces, and the
whitespace tokens get zero vectors.
"""

from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy
from spacy.attrs import IS_SPACE
from spacy.tokens import Doc


class Piece(NamedTuple):
    """Words ``start:end`` of doc number ``doc`` in the batch: positions in
    :func:`word_positions` of the doc (its token indices when it has no whitespace tokens)."""

    doc: int
    start: int
    end: int


def has_sentences(doc: Doc) -> bool:
    """True when ``doc.sents`` is usable (a sentencizer/parser has run)."""
    return doc.has_annotation("SENT_START") or doc.has_annotation("DEP")


def word_positions(doc: Doc) -> numpy.ndarray:
    """``(n_words,)`` int64: the indices of the doc's tokens that the biLM reads (all but whitespace tokens)."""
    if len(doc) == 0:
        return numpy.zeros((0,), dtype="int64")
    return numpy.flatnonzero(doc.to_array(IS_SPACE) == 0).astype("int64", copy=False)


def sentence_words(doc: Doc, words: numpy.ndarray) -> List[Tuple[int, int]]:
    """``(first, stop)`` of each sentence of the doc (the whole doc when it has no boundaries) as positions in
    ``words``, its :func:`word_positions`."""
    spans = [(s.start, s.end) for s in doc.sents] if has_sentences(doc) else [(0, len(doc))]
    return [(int(first), int(stop)) for first, stop in numpy.searchsorted(words, spans)]


def doc_pieces(doc: Doc, index: int, max_window: int, words: numpy.ndarray) -> List[Piece]:
    """Sentences (or windows) of one doc's words (its :func:`word_positions`), each at most
    ``max_window`` words; a sentence of whitespace tokens only gives none. A longer sentence is cut into
    consecutive pieces of ``max_window`` words (the last shorter), with no overlap: the biLM reads each on its
    own, from its start state, so a word near a cut has no context across it."""
    if len(words) == 0:
        return []
    pieces = []
    for first, stop in sentence_words(doc, words):
        for s in range(first, stop, max_window):
            pieces.append(Piece(index, s, min(s + max_window, stop)))
    return pieces


def longest_cut_sentence(
    docs: Sequence[Doc], pieces: Iterable[Piece], max_window: int, words: Sequence[numpy.ndarray]
) -> int:
    """The words of the longest sentence that :func:`make_pieces` cut (into ``pieces``, from the docs' ``words``)
    because it is over ``max_window`` words, in the docs that have sentence boundaries; 0 when there is none. A doc
    without boundaries is windowed by design, and not counted. Cheap where nothing was cut: only a doc with a piece
    of a full ``max_window`` words (a cut sentence's first) has its sentences walked again."""
    longest = 0
    for i in sorted({p.doc for p in pieces if p.end - p.start == max_window}):
        if has_sentences(docs[i]):
            ranges = sentence_words(docs[i], words[i])
            longest = max([longest] + [stop - first for first, stop in ranges if stop - first > max_window])
    return longest


def make_pieces(
    docs: Sequence[Doc], max_window: int, words: Optional[Sequence[numpy.ndarray]] = None
) -> List[Piece]:
    """The pieces of all docs; words: their :func:`word_positions`, if already computed."""
    if words is None:
        words = [word_positions(doc) for doc in docs]
    return [p for i, doc in enumerate(docs) for p in doc_pieces(doc, i, max_window, words[i])]


def group_pieces(pieces: Iterable[Piece], batch_tokens: int) -> List[List[Piece]]:
    """Sub-batches of pieces, longest first, each with rows x max_len <= batch_tokens.

    A piece longer than ``batch_tokens`` gets a sub-batch of its own.
    """
    ordered = sorted(pieces, key=lambda p: p.end - p.start, reverse=True)
    groups: List[List[Piece]] = []
    current: List[Piece] = []
    longest = 0
    for piece in ordered:
        n = piece.end - piece.start
        if current and (len(current) + 1) * longest > batch_tokens:
            groups.append(current)
            current = []
        if not current:
            longest = n
        current.append(piece)
    if current:
        groups.append(current)
    return groups
