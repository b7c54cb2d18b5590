"""The pipeline benchmark's text and its timed pass: varied text (not a few sentences repeated),
the same documents for any count, and every pass encoding its tokens anew (caches emptied)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import pipeline as pb  # noqa: E402


def test_make_texts_is_varied_and_its_prefix_is_stable():
    texts = pb.make_texts(12)
    assert len(texts) == 12 and all(t.strip() for t in texts)
    assert pb.make_texts(3) == texts[:3]  # more docs continue the same text
    assert pb.make_texts(3, seed=1) != texts[:3]
    words = [w for t in texts for w in t.split()]
    # the old text: 16 sentences, the encoder ran on 7.7% of a 64-doc batch's positions
    assert len(set(words)) / len(words) > 0.3
    assert len(set(texts)) == len(texts)


def test_each_timed_pass_empties_the_caches_and_encodes_again(tmp_path):
    nlp = pb.build_nlp("elmo", "small", "reference", str(tmp_path), cache_size=50000)
    texts = pb.make_texts(2)
    from spacy_elmo.pipeline.bilm_layer import get_runner

    run = pb.pipe_pass(nlp, texts)
    n_words = run()  # loads the weights
    assert n_words == sum(len(nlp.make_doc(t)) for t in texts)
    rows = []
    encoder = get_runner(nlp.get_pipe("elmo").model).bilm.token_encoder
    handle = encoder.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    try:
        for _ in range(2):
            rows.clear()
            assert run() == n_words
            # every distinct token again, not served from the cache the pass before filled
            assert sum(rows) == len({t.text for t in texts_tokens(nlp, texts)}) + 2  # + <S>, </S>
    finally:
        handle.remove()


def texts_tokens(nlp, texts):
    return [token for text in texts for token in nlp.make_doc(text)]


def test_a_result_file_records_which_text_it_timed():
    """The text is built from the README and docs as checked out: a docs edit changed it (6,286 tokens for the
    recorded 24 documents, 6,845 later) with nothing in the result file to say which text the numbers came from."""
    import hashlib

    texts = pb.make_texts(2)
    record = pb.describe_text(texts)
    assert record["text_sha1"] == hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest()
    assert record["text_sha1"] != pb.describe_text(pb.make_texts(3))["text_sha1"]
    commit = record["text_commit"]
    assert commit == "unknown" or (len(commit.split("+")[0]) == 40 and commit.split("+")[1:] in ([], ["dirty"]))
