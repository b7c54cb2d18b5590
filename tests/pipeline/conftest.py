"""Shared fixtures: a tiny biLM saved with BiLM.save, tiny generated training data."""

import random

import pytest
import spacy
import torch
from spacy.tokens import DocBin

from spacy_elmo import BiLM, BiLMConfig

TINY = dict(projection_dim=8, cell_dim=16, filters=[[1, 4], [2, 4]])
WIDTH = 16  # 2 x projection_dim
N_LAYERS = 3  # L + 1


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A directory written by BiLM.save with a tiny random biLM."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_bilm")
    BiLM(BiLMConfig(**TINY), backend="reference").save(path)
    return path


@pytest.fixture
def nlp(tiny_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    return nlp


NAMES = {"Alice": "PER", "Bob": "PER", "Paris": "LOC", "London": "LOC"}
# the tree and tags of every make_docs sentence: "Yesterday NAME went home and it was MOOD ."
PARSE = {
    "heads": [2, 2, 2, 2, 2, 6, 2, 6, 2],
    "deps": ["npadvmod", "nsubj", "ROOT", "advmod", "cc", "nsubj", "conj", "acomp", "punct"],
    "tags": ["NN", "NNP", "VBD", "RB", "CC", "PRP", "VBD", "JJ", "."],
}


def make_docs(n: int, seed: int = 0, parsed: bool = False):
    """Short docs with one entity, cats POS/NEG and a span group "sc" (and :data:`PARSE` if ``parsed``)."""
    rng = random.Random(seed)
    nlp = spacy.blank("en")
    docs = []
    for i in range(n):
        name = rng.choice(sorted(NAMES))
        mood = "good" if i % 2 else "bad"
        words = ["Yesterday", name, "went", "home", "and", "it", "was", mood, "."]
        doc = spacy.tokens.Doc(nlp.vocab, words=words, spaces=[True] * 8 + [False], **(PARSE if parsed else {}))
        doc.ents = [spacy.tokens.Span(doc, 1, 2, label=NAMES[name])]
        doc.spans["sc"] = [spacy.tokens.Span(doc, 1, 2, label=NAMES[name])]
        doc.cats = {"POS": float(i % 2), "NEG": float(1 - i % 2)}
        docs.append(doc)
    return docs


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus")
    DocBin(docs=make_docs(16, 0, parsed=True), store_user_data=True).to_disk(path / "train.spacy")
    DocBin(docs=make_docs(6, 1, parsed=True), store_user_data=True).to_disk(path / "dev.spacy")
    return path
