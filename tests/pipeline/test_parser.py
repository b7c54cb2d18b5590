"""The dependency parser listening to `elmo`: it trains (frozen and fine-tuned biLM), its trees are
valid, and saving / loading, batching and ``replace_listeners`` leave its parses unchanged; the
trainable lemmatizer, which shares the parser's gold docs, trains and round-trips too."""

import random

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example

from spacy_elmo.pipeline.bilm_layer import get_bilm

from .test_listener import TOK2VEC, _mixes

# a tiny grammar: det [adj] noun  verb  [det [adj] noun]  [prep det [adj] noun]  .
NOUNS = ["dog", "cat", "teacher", "bird", "house", "river"]
ADJS = ["big", "old", "red"]
DETS = ["the", "a", "every"]


def _noun_phrase(rng, words, heads, deps, dep):
    """Appends a noun phrase whose head noun gets ``dep`` (its head is set by the caller); returns the noun's index."""
    noun = len(words) + 1 + (rng.random() < 0.5)
    for word, label in [(rng.choice(DETS), "det"), (rng.choice(ADJS), "amod")][: noun - len(words)]:
        words.append(word), heads.append(noun), deps.append(label)
    words.append(rng.choice(NOUNS)), heads.append(None), deps.append(dep)
    return noun


def parsed_docs(vocab, n, seed=0):
    """``n`` projective one-sentence trees (the gold docs)."""
    rng, docs = random.Random(seed), []
    for _ in range(n):
        words, heads, deps = [], [], []
        subj = _noun_phrase(rng, words, heads, deps, "nsubj")
        verb = len(words)
        words.append(rng.choice(["saw", "liked", "found"])), heads.append(verb), deps.append("ROOT")
        heads[subj] = verb
        if rng.random() < 0.7:
            heads[_noun_phrase(rng, words, heads, deps, "dobj")] = verb
        if rng.random() < 0.5:
            prep = len(words)
            words.append(rng.choice(["near", "in"])), heads.append(verb), deps.append("prep")
            heads[_noun_phrase(rng, words, heads, deps, "pobj")] = prep
        words.append("."), heads.append(verb), deps.append("punct")
        docs.append(Doc(vocab, words=words, heads=heads, deps=deps))
    return docs


def _parses(docs):
    return [[(t.head.i, t.dep_) for t in doc] for doc in docs]


def _uas(docs, gold):
    pairs = [(p.head.i, g.head.i) for d, e in zip(docs, gold) for p, g in zip(d, e)]
    return sum(a == b for a, b in pairs) / len(pairs)


def _assert_trees(docs):
    """Each sentence is one tree: a single root, heads inside the sentence, every token reaches the root."""
    for doc in docs:
        assert doc.has_annotation("DEP")
        for sent in doc.sents:
            roots = [t for t in sent if t.head.i == t.i]
            assert len(roots) == 1 and roots[0].dep_ == "ROOT", [(t.text, t.dep_) for t in sent]
            for token in sent:
                assert sent.start <= token.head.i < sent.end
                seen, node = set(), token
                while node.head.i != node.i:
                    assert node.i not in seen, "cycle"
                    seen.add(node.i)
                    node = node.head


def test_spacy_parser_drops_shift_and_reduce_under_min_action_freq():
    """What the README's parser paragraph says of spaCy (no spacy-elmo here): with the default
    ``min_action_freq = 30`` a corpus with fewer than 29 leftward (or rightward) arcs loses the unlabelled
    shift and reduce moves, and the first update fails with E1031 on correct trees."""
    nlp = spacy.blank("en")
    gold = parsed_docs(nlp.vocab, 2)
    examples = [Example(nlp.make_doc(d.text), d) for d in gold]
    for min_action_freq, works in [(30, False), (1, True)]:
        parser = nlp.add_pipe("parser", config={"min_action_freq": min_action_freq})
        optimizer = nlp.initialize(lambda: examples)
        shift_reduce = {"S", "D"} & set(parser.move_names)
        assert shift_reduce == ({"S", "D"} if works else set()), parser.move_names
        if works:
            nlp.update(examples, sgd=optimizer)
        else:
            with pytest.raises(ValueError, match="E1031"):
                nlp.update(examples, sgd=optimizer)
        nlp.remove_pipe("parser")


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "fine-tuned"])
def test_parser_with_listener(tiny_dir, tmp_path, frozen):
    torch.manual_seed(0)
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    # float32 store: what the listener reads at inference is then what the parser's own biLM gives
    # after replace_listeners (a float16 doc._.elmo rounds it), so the vectors compare to float32 rounding
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": frozen, "store_dtype": "float32"})
    parser = nlp.add_pipe("parser", config={"min_action_freq": 1, "model": {"hidden_width": 32, "tok2vec": TOK2VEC}})
    gold = parsed_docs(nlp.vocab, 16)
    examples = [Example(nlp.make_doc(d.text), d) for d in gold]
    texts = [d.text for d in gold]
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 0.01  # a few updates
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    uas_before = _uas(nlp.pipe(texts), gold)
    epoch_losses = []
    for _ in range(10):
        losses = {}
        for i in range(0, len(examples), 8):
            nlp.update(examples[i : i + 8], sgd=optimizer, losses=losses, drop=0.1)
        epoch_losses.append(losses["parser"])
    assert epoch_losses[-1] < epoch_losses[0] / 4, epoch_losses
    moved = [k for k, v in bilm.state_dict().items() if not torch.equal(v, before[k])]
    assert (not moved) if frozen else moved
    (mix,) = _mixes(parser)
    assert not numpy.allclose(mix.get_param("w"), 0.0), "ScalarMix w did not move"

    docs = list(nlp.pipe(texts, batch_size=16))
    _assert_trees(docs)
    uas = _uas(docs, gold)
    assert uas > 0.85 and uas > uas_before + 0.5, (uas_before, uas)  # chance: a head among ~8 tokens
    parses, vectors = _run(nlp, texts)
    _assert_same(_run(nlp, texts, batch_size=1), parses, vectors)

    nlp.to_disk(tmp_path / "nlp")
    _assert_same(_run(spacy.load(tmp_path / "nlp"), texts), parses, vectors, atol=0.0)

    nlp.replace_listeners("elmo", "parser", ["model.tok2vec.elmo"])
    nlp.remove_pipe("elmo")
    _assert_same(_run(nlp, texts), parses, vectors)
    nlp.to_disk(tmp_path / "alone")
    _assert_same(_run(spacy.load(tmp_path / "alone"), texts), parses, vectors)


def _run(nlp, texts, batch_size=16):
    """The parses of ``texts`` and the parser's token vectors for them (ELMo's mix in them), as the
    parser saw them: of the docs before it ran (its sentence boundaries change what a biLM reads)."""
    parses = _parses(nlp.pipe(texts, batch_size=batch_size))
    with nlp.select_pipes(disable=["parser"]):
        docs = list(nlp.pipe(texts, batch_size=batch_size))
    return parses, numpy.concatenate(nlp.get_pipe("parser").model.get_ref("tok2vec").predict(docs))


def _assert_same(run, parses, vectors, atol=1e-5):
    """Same parses; the same vectors up to ``atol`` (float32 rounding of other batch shapes)."""
    assert run[0] == parses
    numpy.testing.assert_allclose(run[1], vectors, rtol=0, atol=atol)


LEMMAS = {"saw": "see", "liked": "like", "found": "find"}


def test_trainable_lemmatizer_with_listener(tiny_dir, tmp_path):
    """The edit-tree lemmatizer (spacy.Tagger.v2 on the ELMo tok2vec) learns the verbs' lemmas and
    keeps them through a save / load round trip."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    model = {"@architectures": "spacy.Tagger.v2", "nO": None, "normalize": False, "tok2vec": TOK2VEC}
    nlp.add_pipe("trainable_lemmatizer", config={"model": model, "min_tree_freq": 1})
    gold = parsed_docs(nlp.vocab, 16)
    for doc in gold:
        for token in doc:
            token.lemma_ = LEMMAS.get(token.text, token.text)
    examples = [Example(nlp.make_doc(d.text), d) for d in gold]
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 0.01
    epoch_losses = []
    for _ in range(6):
        losses = {}
        for i in range(0, len(examples), 8):
            nlp.update(examples[i : i + 8], sgd=optimizer, losses=losses)
        epoch_losses.append(losses["trainable_lemmatizer"])
    assert epoch_losses[-1] < epoch_losses[0] / 4, epoch_losses
    texts = [d.text for d in gold]
    lemmas = [[t.lemma_ for t in doc] for doc in nlp.pipe(texts)]
    pairs = [(p, g.lemma_) for doc, gold_doc in zip(lemmas, gold) for p, g in zip(doc, gold_doc)]
    assert sum(p == g for p, g in pairs) / len(pairs) > 0.95, lemmas
    nlp.to_disk(tmp_path / "nlp")
    assert [[t.lemma_ for t in doc] for doc in spacy.load(tmp_path / "nlp").pipe(texts)] == lemmas
