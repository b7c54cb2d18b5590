"""Sentences / bounded windows and sub-batches by padded token count."""

import numpy
import spacy

from spacy_elmo.pipeline import runner as runner_mod
from spacy_elmo.pipeline.batching import Piece, group_pieces, make_pieces

from .conftest import N_LAYERS, WIDTH


def test_group_pieces_bounded():
    pieces = [Piece(0, 0, n) for n in (1, 5, 3, 8, 8, 2, 7, 4)]
    groups = group_pieces(pieces, batch_tokens=16)
    assert sorted(p.end for g in groups for p in g) == sorted(p.end for p in pieces)
    for g in groups:
        longest = max(p.end - p.start for p in g)
        assert len(g) * longest <= 16 or len(g) == 1
    assert group_pieces([Piece(0, 0, 50)], batch_tokens=16) == [[Piece(0, 0, 50)]]


def test_windows_and_sentences():
    nlp = spacy.blank("en")
    doc = nlp(" ".join(["w"] * 300))
    assert [(p.start, p.end) for p in make_pieces([doc], 128)] == [(0, 128), (128, 256), (256, 300)]
    nlp.add_pipe("sentencizer")
    doc = nlp("A b . C d e . F .")
    assert [(p.start, p.end) for p in make_pieces([doc], 128)] == [(0, 3), (3, 7), (7, 9)]
    assert make_pieces([nlp("")], 128) == []


def test_long_doc_without_boundaries(tiny_dir, monkeypatch):
    """20,000 tokens, no sentences: rows never exceed max_window, calls never exceed batch_tokens."""
    shapes = []
    original = runner_mod.ElmoRunner.forward

    def spy(self, rows, **kwargs):
        shapes.append((len(rows), max(len(r) for r in rows)))
        return original(self, rows, **kwargs)

    monkeypatch.setattr(runner_mod.ElmoRunner, "forward", spy)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"batch_tokens": 16384, "max_window": 64}})
    words = [f"w{i % 500}" for i in range(20000)]
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=words))
    assert doc._.elmo.shape == (N_LAYERS, 20000, WIDTH)
    assert numpy.isfinite(doc._.elmo).all()
    assert max(t for _, t in shapes) == 64
    assert max(b * t for b, t in shapes) <= 16384
