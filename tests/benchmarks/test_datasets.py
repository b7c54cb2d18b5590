"""Dataset parsers, splits and DocBin output on small data written here (no network)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

spacy = pytest.importorskip("spacy")

from benchmarks.datasets import (  # noqa: E402
    Example,
    conll_to_docs,
    decode_text,
    load_split,
    parse_bbc,
    parse_conll,
    parse_tweets_csv,
    read_bbc_dir,
    stratified_split,
    textcat_docs,
    to_docbin,
)

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

New NNP B-NP B-LOC
York NNP I-NP I-LOC
Times NNP I-NP B-ORG
reporter NN I-NP O
John NNP I-NP I-PER
Smith NNP I-NP I-PER
"""


def test_parse_conll_docstart_and_counts():
    sents = parse_conll(CONLL)
    assert len(sents) == 3  # -DOCSTART- lines are not sentences; no trailing blank line needed
    assert [s.document for s in sents] == [0, 0, 1]
    assert sents[0].words == ("EU", "rejects", "German", "call", ".")
    assert sents[0].pos[0] == "NNP" and sents[0].chunks[1] == "B-VP"
    assert sents[1].ner == ("B-PER", "I-PER")


def test_parse_conll_rejects_bad_lines():
    with pytest.raises(ValueError, match="expected 4"):
        parse_conll("EU NNP B-ORG\n")


def test_conll_to_docs_entities():
    nlp = spacy.blank("en")
    docs = conll_to_docs(nlp, parse_conll(CONLL))
    assert len(docs) == 3
    assert [(e.text, e.label_) for e in docs[0].ents] == [("EU", "ORG"), ("German", "MISC")]
    assert [(e.text, e.label_) for e in docs[1].ents] == [("Peter Blackburn", "PER")]
    # B-ORG right after I-LOC starts a new entity; I-PER after O... of another type too
    assert [(e.text, e.label_) for e in docs[2].ents] == [
        ("New York", "LOC"), ("Times", "ORG"), ("John Smith", "PER")]
    assert docs[0].text == "EU rejects German call ."


def test_conll_to_docs_groups_within_documents():
    nlp = spacy.blank("en")
    docs = conll_to_docs(nlp, parse_conll(CONLL), n_sents=10)
    assert len(docs) == 2  # never across -DOCSTART-
    assert len(list(docs[0].sents)) == 2
    assert [e.text for e in docs[0].ents] == ["EU", "German", "Peter Blackburn"]


def test_bbc_dir_with_latin1_file(tmp_path):
    for label, name, raw in [
        ("business", "001.txt", "Profits up\n\nShares rose 5%.\n".encode("utf-8")),
        ("sports", "001.txt", "Mutu fee\n\nA \xa315.8m signing.".encode("latin-1")),
        ("sports", "002.txt", "Caf\u00e9 win\n\nUTF-8 text.".encode("utf-8")),
    ]:
        (tmp_path / label).mkdir(exist_ok=True)
        (tmp_path / label / name).write_bytes(raw)
    exs = parse_bbc(read_bbc_dir(tmp_path))
    assert [e.id for e in exs] == ["business/001.txt", "sports/001.txt", "sports/002.txt"]
    assert [e.label for e in exs] == ["business", "sports", "sports"]
    assert "\u00a315.8m" in exs[1].text and exs[0].text.startswith("Profits up")
    assert "Caf\u00e9" in exs[2].text
    assert decode_text(b"\xe9t\xe9") == "\u00e9t\u00e9"


def test_tweets_csv():
    text = ('sentiment,confidence,text\n'
            'negative,0.75,"I don\'t trust it, no"\n'
            'positive,,Love it \ufffd\n'
            'neutral,0.5,  \n'
            'neutral,1.0,"multi\nline"\n')
    exs = parse_tweets_csv(text)
    assert [(e.id, e.label) for e in exs] == [("0", "negative"), ("1", "positive"), ("3", "neutral")]
    assert exs[0].text == "I don't trust it, no" and exs[2].text == "multi\nline"
    with pytest.raises(ValueError, match="lacks columns"):
        parse_tweets_csv("label,body\nx,y\n")


def _examples(n_per_label=(50, 30, 20)):
    exs = []
    for label, n in zip("abc", n_per_label):
        exs += [Example(f"{label}{i}", f"text {label} {i}", label) for i in range(n)]
    return exs


def test_stratified_split_deterministic_and_stratified():
    exs = _examples()
    s1 = stratified_split(exs, seed=0)
    s2 = stratified_split(list(reversed(exs)), seed=0)
    assert s1 == s2  # independent of input order
    assert s1 != stratified_split(exs, seed=1)
    ids = [i for v in s1.values() for i in v]
    assert sorted(ids) == sorted(e.id for e in exs) and len(ids) == len(set(ids))
    label = {e.id: e.label for e in exs}
    for name, frac in (("train", 0.7), ("dev", 0.1), ("test", 0.2)):
        counts = Counter(label[i] for i in s1[name])
        for lab, n in zip("abc", (50, 30, 20)):
            assert abs(counts[lab] - frac * n) <= 1, (name, lab, counts)


def test_stratified_split_keeps_duplicates_together():
    exs = _examples() + [Example("dup1", "Same  TEXT", "a"), Example("dup2", "same text", "b")]
    split = stratified_split(exs, seed=3)
    where = {i: k for k, v in split.items() for i in v}
    assert where["dup1"] == where["dup2"]


def test_load_split_written_once_and_reused(tmp_path):
    exs = _examples()
    first = load_split("toy", exs, "toy==1.0", seed=0, splits_dir=tmp_path)
    path = tmp_path / "toy.json"
    record = json.loads(path.read_text())
    assert record["counts"] == {k: len(v) for k, v in first.items()}
    assert set(record) >= {"dev", "test", "seed", "source"}
    # re-used: a different seed does not change an existing split file
    again = load_split("toy", exs, "toy==1.0", seed=99, splits_dir=tmp_path)
    assert {k: [e.id for e in v] for k, v in again.items()} == {k: [e.id for e in v] for k, v in first.items()}
    with pytest.raises(ValueError, match="regenerate"):
        load_split("toy", exs, "toy==2.0", splits_dir=tmp_path)
    with pytest.raises(ValueError, match="regenerate"):
        load_split("toy", exs[:10], "toy==1.0", splits_dir=tmp_path)


def test_textcat_docs_and_docbin_roundtrip(tmp_path):
    nlp = spacy.blank("en")
    exs = [Example("1", "Shares rose.", "business"), Example("2", "A goal!", "sports")]
    docs = textcat_docs(nlp, exs, ["business", "sports", "tech"])
    assert docs[0].cats == {"business": 1.0, "sports": 0.0, "tech": 0.0}
    path = to_docbin(docs + conll_to_docs(nlp, parse_conll(CONLL)), tmp_path / "x" / "train.spacy")
    from spacy.tokens import DocBin

    back = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    assert back[1].cats["sports"] == 1.0 and back[1].text == "A goal!"
    assert [e.label_ for e in back[4].ents] == ["LOC", "ORG", "PER"]
    with pytest.raises(ValueError, match="not one of"):
        textcat_docs(nlp, [Example("3", "x", "weather")], ["business"])
