"""Sentences / bounded windows and sub-batches by padded token count."""

import copy
import pickle
import warnings

import numpy
import pytest
import spacy
import torch
from spacy.training import Example

from spacy_elmo import BiLM, batch_to_ids
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
    # each sub-batch as full as the bound allows: rows x longest == batch_tokens fits (16 = 2 x 8 = 4 x 4)
    assert [[p.end for p in g] for g in groups] == [[8, 8], [7, 5], [4, 3, 2, 1]]


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


def _sentence(n_words: int) -> str:
    """One sentence of ``n_words`` words (the last a "."), for the sentencizer."""
    return " ".join(f"w{i}" for i in range(n_words - 1)) + " ."


def _long_sentence_warnings(nlp, texts):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for text in texts:
            nlp(text)
    return [str(w.message) for w in caught if "max_window" in str(w.message)]


def test_sentence_over_max_window_warns_once(tiny_dir):
    """A doc with boundaries whose sentence exceeds max_window words is read in pieces (see the next test): that
    ran silently. Warned once per biLM (each component's own), naming the length, max_window and the fix; not for a sentence of
    max_window words (whitespace tokens are not words), nor for a doc without boundaries (windowed by design)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    # 128 words and a whitespace token: 129 tokens, but the biLM reads 128 words in one row
    at_limit = _sentence(128).replace("w60 ", "w60  ")
    assert len(nlp(at_limit)) == 129 and len(list(nlp(at_limit).sents)) == 1
    assert _long_sentence_warnings(nlp, [_sentence(128), at_limit]) == []
    (message,) = _long_sentence_warnings(nlp, ["Short one . " + _sentence(129), _sentence(129), _sentence(300)])
    assert "129 words" in message and "max_window = 128" in message and "2 consecutive pieces" in message
    assert "max_window to at least 129" in message and "[components.elmo.model]" in message
    # another component instance warns on its own
    other = spacy.blank("en")
    other.add_pipe("sentencizer")
    other.add_pipe("elmo", config={"weights": str(tiny_dir)})
    assert len(_long_sentence_warnings(other, [_sentence(129)])) == 1
    # and in training (update), as spacy train's predicted docs have the boundaries of annotating components
    trained = spacy.blank("en")
    trained.add_pipe("sentencizer")
    elmo = trained.add_pipe("elmo", config={"weights": str(tiny_dir)})
    doc = trained.get_pipe("sentencizer")(trained.make_doc(_sentence(129)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        elmo.update([Example(doc, doc.copy())])
    assert ["129 words" in str(w.message) for w in caught if "max_window" in str(w.message)] == [True]
    # no boundaries: windows of max_window words are what the component does with such a doc
    plain = spacy.blank("en")
    plain.add_pipe("elmo", config={"weights": str(tiny_dir)})
    assert _long_sentence_warnings(plain, [_sentence(129), _sentence(300)]) == []


def test_sentence_over_max_window_warning_names_the_component_as_now_named(tiny_dir):
    """The warning names the component and its config block by the name it has when it warns, not the one it was
    built with: nlp.rename_pipe and add_pipe(source=, name=) rename it (the block "[components.elmo.model]" no longer
    exists then). Renaming keeps the warned-once flag: a biLM that warned does not warn again."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"max_window": 8}})
    nlp.rename_pipe("elmo", "emb")
    (message,) = _long_sentence_warnings(nlp, [_sentence(20)])
    assert "the biLM of the 'emb' component" in message and "[components.emb.model]" in message
    assert "'elmo'" not in message and "components.elmo" not in message
    nlp.rename_pipe("emb", "ctx")
    assert _long_sentence_warnings(nlp, [_sentence(20)]) == []
    source = spacy.blank("en")
    source.add_pipe("sentencizer")
    source.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"max_window": 8}})
    sourced = spacy.blank("en")
    sourced.add_pipe("sentencizer")
    sourced.add_pipe("elmo", name="vectors", source=source)
    (message,) = _long_sentence_warnings(sourced, [_sentence(20)])
    assert "the biLM of the 'vectors' component" in message and "[components.vectors.model]" in message


def test_sentence_over_max_window_warning_names_an_unpickled_component_as_now_named(tiny_dir):
    """A pipeline unpickled (pickle.loads, copy.deepcopy, nlp.pipe's spawned workers) and then renamed: the warning
    named the component by the name it had when pickled (its biLM's runner keeps a name, a weak reference to the
    component not pickling), "[components.elmo.model]" of a pipeline that has no such block; the component follows
    it again once unpickled. The warned-once flag comes with it: a biLM that warned does not warn again."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"max_window": 8}})
    nlp("A b .")  # weights loaded
    for renamed, copy_of in (("emb", lambda n: pickle.loads(pickle.dumps(n))), ("ctx", copy.deepcopy)):
        other = copy_of(nlp)
        other.rename_pipe("elmo", renamed)
        (message,) = _long_sentence_warnings(other, [_sentence(20)])
        assert f"the biLM of the '{renamed}' component" in message and f"[components.{renamed}.model]" in message
        assert "'elmo'" not in message and "components.elmo" not in message
    assert len(_long_sentence_warnings(nlp, [_sentence(20)])) == 1
    warned = pickle.loads(pickle.dumps(nlp))
    assert _long_sentence_warnings(warned, [_sentence(20)]) == []
    # copy.copy of the component shares its model: the runner keeps following the original, not the copy (which
    # took it, and once collected left the warning unnamed; renamed, it named the copy; diffrev3)
    fresh = spacy.blank("en")
    fresh.add_pipe("sentencizer")
    fresh.add_pipe("elmo", config={"weights": str(tiny_dir), "model": {"max_window": 8}})
    shallow = copy.copy(fresh.get_pipe("elmo"))
    shallow.name = "other"
    (message,) = _long_sentence_warnings(fresh, [_sentence(20)])
    assert "the biLM of the 'elmo' component" in message and "'other'" not in message, message
    del shallow


def test_sentence_over_max_window_is_read_in_pieces(tiny_dir):
    """What the README and the warning say: a 129-word sentence (max_window 128) gets the vectors of its words
    1-128 and of its word 129 each read alone by the biLM, not those of the whole sentence."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    model = {"@architectures": "spacy_elmo.ElmoBiLM.v2", "max_window": 128, "backend": "reference"}
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32", "model": model})
    with pytest.warns(UserWarning, match="a sentence of 129 words"):
        doc = nlp(_sentence(129))
    words = [t.text for t in doc]
    assert len(words) == 129 and len(list(doc.sents)) == 1
    bilm = BiLM.load(tiny_dir, backend="reference").eval()

    def read(rows):
        with torch.no_grad():
            return torch.stack(bilm(batch_to_ids([rows])).activations)[:, 0].numpy()

    pieces = numpy.concatenate([read(words[:128]), read(words[128:])], axis=1)
    numpy.testing.assert_allclose(doc._.elmo, pieces, rtol=1e-5, atol=1e-5)
    whole = read(words)
    assert numpy.abs(doc._.elmo[1:, -1] - whole[1:, -1]).max() > 1e-3  # the cut is visible: not the whole reading


def test_sentence_over_max_window_counts_pieces_and_names_the_longest(tiny_dir):
    """The warning's numbers: a sentence of exactly 2 x max_window words is cut into 2 pieces (not 3), and a batch
    whose first doc has the longest cut sentence names that one, not the last doc's."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    (message,) = _long_sentence_warnings(nlp, [_sentence(256)])
    assert "256 words" in message and "into 2 consecutive pieces" in message
    batch = spacy.blank("en")
    batch.add_pipe("sentencizer")
    batch.add_pipe("elmo", config={"weights": str(tiny_dir)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(batch.pipe([_sentence(300), _sentence(129)]))
    (message,) = [str(w.message) for w in caught if "max_window" in str(w.message)]
    assert "a sentence of 300 words" in message and "into 3 consecutive pieces" in message
    assert "max_window to at least 300" in message


def _listener_pipeline(tiny_dir):
    """sentencizer, elmo and an ner that listens to it, initialized."""
    from .conftest import make_docs
    from .test_listener import LISTENER, NER

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nlp.initialize(lambda: examples)
    return nlp


def test_own_bilm_copy_warns_of_sentence_over_max_window(tiny_dir):
    """A component given its own copy of the biLM by nlp.replace_listeners (elmo then removed) cut long sentences
    silently: the check lived in the elmo component's predict / update. The biLM layer warns now, once per biLM
    (the copy warns afresh), naming the component that owns the copy and where its max_window is, in nlp(doc) and nlp.update."""
    text = _sentence(140)
    for run in ("call", "update"):
        nlp = _listener_pipeline(tiny_dir)
        nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
        nlp.remove_pipe("elmo")
        doc = nlp.get_pipe("sentencizer")(nlp.make_doc(text))
        doc.ents = []  # annotated (no entity): ner trains on it
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                if run == "call":
                    nlp(text)
                else:
                    nlp.update([Example(doc, doc.copy())])
        (message,) = [str(w.message) for w in caught if "max_window" in str(w.message)]
        assert "a sentence of 140 words reached the biLM of the 'ner' component" in message
        assert "[components.ner.model.tok2vec.bilm]" in message and "2 consecutive pieces" in message
