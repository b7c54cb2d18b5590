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


class _FakeNlp:
    """Stands in for a built pipeline: whitespace tokens, a sentencizer and an elmo component that do nothing."""

    def __init__(self, name, log):
        self.name, self.log = name, log
        self.model = self  # the elmo component's model, what get_runner is given

    def pipe(self, texts, **kw):
        return iter(texts)

    def make_doc(self, text):
        return text.split()

    def get_pipe(self, name):
        return self if name == "elmo" else (lambda doc: doc)

    def predict(self, docs):
        self.log.append(("predict", self.name))


def test_pipeline_prints_each_setting_when_ready_and_each_pass_as_it_ends(monkeypatch, tmp_path, capsys):
    """`--quick` ran past 5 minutes on a loaded 2-core machine saying nothing until the end: each setting says
    when it is built and warmed up, each timed pass right after it ends (before the next one runs)."""
    import json

    import spacy_elmo.ops

    def pass_of(nlp, texts):
        def run():
            print(f"PASS {nlp.name}")
            return len(texts)
        return run

    monkeypatch.setattr(spacy_elmo.ops, "fused_available", lambda: False)
    monkeypatch.setattr(pb, "build_nlp", lambda kind, preset, backend, tmp, cache: _FakeNlp(f"{kind}-{preset}-{cache}", []))
    monkeypatch.setattr(pb, "pipe_pass", pass_of)
    monkeypatch.setattr(pb, "chart", lambda results, path: None)
    out = tmp_path / "p.json"
    assert pb.main(["--docs", "2", "--original-docs", "1", "--repeats", "2", "--memory-docs", "0", "--threads", "1",
                    "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {"tok2vec---0": "tok2vec, 2 docs", "elmo-small-50000": "elmo small reference, 2 docs",
             "elmo-small-0": "elmo small reference no char cache, 2 docs",
             "elmo-original-50000": "elmo original reference, 1 docs"}
    assert [line.split(" (")[0] for line in lines[:4]] == [f"ready: {n}" for n in names.values()]
    passes = [k for k, line in enumerate(lines) if line.startswith("PASS ")]
    assert len(passes) == 4 * 2
    for k in passes:  # the pass's line comes right after it, not at the end
        assert lines[k + 1].startswith("pass ") and names[lines[k][5:]] in lines[k + 1]
    assert [lines[k + 1].split(":")[0] for k in passes] == ["pass 1/2"] * 4 + ["pass 2/2"] * 4
    assert len(json.loads(out.read_text())["throughput"]) == 4  # the rows, at the end as before


def test_layer_cache_alternates_which_setting_runs_first(monkeypatch, capsys):
    """benchmarks/layer_cache.py ran layer_cache_mb=0 first in every round; now in round_order, as the other A/Bs."""
    from benchmarks import kernels as kb
    from benchmarks import layer_cache as lc

    log = []
    monkeypatch.setattr(lc, "build_nlp", lambda kind, tmp, layer_cache_mb: _FakeNlp(layer_cache_mb, log))
    monkeypatch.setattr(lc, "make_texts", lambda n: ["a b"] * n)
    monkeypatch.setattr(lc, "get_runner", lambda model: type("R", (), {"clear_caches": lambda self: log.append(("clear", model.name))})())
    assert lc.main(["--docs", "2", "--rounds", "4", "--threads", "1"]) == 0
    cleared = [name for what, name in log if what == "clear"]
    assert [cleared[k:k + 2] for k in range(0, 8, 2)] == [kb.round_order([0, 1024], i) for i in range(4)]
    assert cleared[0::2] == [0, 1024, 0, 1024]
    assert "layer_cache_mb=1024" in capsys.readouterr().out
