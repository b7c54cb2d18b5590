"""The task benchmarks' shared machinery: how results name a biLM directory, where runs are
kept, and the cached fine-tuning."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import taskbench as tb  # noqa: E402
from spacy_elmo.bilm.native_io import DEFAULT_MODEL_DIR  # noqa: E402


def test_display_path_never_shows_this_machines_absolute_paths(tmp_path, monkeypatch):
    assert tb.display_path(DEFAULT_MODEL_DIR) == "default (the bundled model, spacy_elmo/data/default)"
    assert tb.display_path(tb.ROOT / "benchmarks" / "results") == "benchmarks/results"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tb.display_path(tmp_path / ".cache" / "spacy-elmo" / "run") == "~/.cache/spacy-elmo/run"
    outside = Path("/opt/models/elmo")
    assert tb.display_path(outside) == str(outside)


def _finetune_args(work_dir, **kw):
    import argparse

    p = argparse.ArgumentParser()
    tb.add_finetune_args(p, 2.0, "the test text")
    args = p.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])
    args.quick, args.work_dir = False, work_dir
    return args


class _FakePretrain:
    """Stands in for ``subprocess.run`` of ``spacy_elmo pretrain``: records the command and
    writes the model's config.json (or fails with ``code``)."""

    def __init__(self, code=0):
        self.code, self.calls = code, []

    def __call__(self, cmd, *a, **kw):
        import subprocess

        self.calls.append(cmd)
        if self.code == 0:
            out = Path(cmd[cmd.index("pretrain") + 2])
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text("{}")
        return subprocess.CompletedProcess(cmd, self.code)


def _finetune_inputs(tmp_path):
    """A biLM directory (a config.json is all the key reads) and the training and held-out texts, written: the
    fine-tuning is keyed on their content."""
    elmo = tmp_path / "models" / "elmo"
    elmo.mkdir(parents=True)
    (elmo / "config.json").write_text("{}")
    text, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    text.write_text("a b c\n")
    dev.write_text("a b\n")
    return elmo, text, dev


def _old_key(text):
    """The key the fine-tuning of ``test_finetune_bilm_runs_pretrain_once_then_reuses_it`` had before the batching
    was named."""
    return {"elmo": "/models/elmo", "steps": ["--epochs", "2.0"], "extra": ["--sentences", "--lr", "0.1"], "text": str(text)}


def test_finetune_bilm_runs_pretrain_once_then_reuses_it(tmp_path, monkeypatch):
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    elmo, text, dev = _finetune_inputs(tmp_path)
    args = _finetune_args(tmp_path / "work", finetune_args="--lr 0.1")
    out = tb.finetune_bilm(args, elmo, text, dev, -1, "the test text")
    cmd = fake.calls[0]
    assert cmd[cmd.index("pretrain") + 1:cmd.index("pretrain") + 3] == [str(text), str(out)]
    assert cmd[cmd.index("--init") + 1] == str(elmo) and cmd[cmd.index("--heldout") + 1] == str(dev)
    assert cmd[cmd.index("--epochs") + 1] == "2.0" and "--sentences" in cmd and cmd[-4:-2] == ["--lr", "0.1"]
    # the batching is named (pretrain's default changed from pools of 50 to random batches): the recorded
    # tweets fine-tuning in pools of 50 had this key without it, and was re-used for the new default
    assert cmd[-2:] == ["--length-pool", "1"] and out.name != f"finetuned-{tb.short_hash(_old_key(text))}"
    assert "--resume" not in cmd and cmd[cmd.index("--device") + 1] == "cpu"
    assert tb.finetune_bilm(args, elmo, text, dev, -1, "the test text") == out
    assert len(fake.calls) == 1  # the finished fine-tuning is re-used
    # other parameters, another directory; the stream reading drops --sentences
    other = tb.finetune_bilm(_finetune_args(tmp_path / "work", finetune_reading="stream"), elmo,
                             text, dev, -1, "the test text")
    assert other != out and "--sentences" not in fake.calls[1] and "--length-pool" not in fake.calls[1]
    pools = tb.finetune_bilm(_finetune_args(tmp_path / "work", finetune_args="--length-pool=50"), elmo,
                             text, dev, -1, "the test text")
    assert pools != out and fake.calls[2][-1] == "--length-pool=50" and fake.calls[2].count("--length-pool") == 0


def test_finetune_bilm_resumes_an_interrupted_run_and_names_a_failed_command(tmp_path, monkeypatch):
    from spacy_elmo.training.checkpoint import checkpoint_path

    args = _finetune_args(tmp_path / "work")
    elmo, text, dev = _finetune_inputs(tmp_path)
    fail = _FakePretrain(code=3)
    monkeypatch.setattr(tb.subprocess, "run", fail)
    with pytest.raises(SystemExit, match=r"(?s)exit 3\).*spacy_elmo pretrain"):
        tb.finetune_bilm(args, elmo, text, dev, 1, "the test text")
    out = Path(fail.calls[0][fail.calls[0].index("pretrain") + 2])
    assert "--resume" not in fail.calls[0] and fail.calls[0][fail.calls[0].index("--device") + 1] == "cuda:1"
    out.mkdir(parents=True)
    checkpoint_path(out).write_bytes(b"")  # what a killed run leaves
    ok = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", ok)
    assert tb.finetune_bilm(args, elmo, text, dev, 1, "the test text") == out
    assert ok.calls[0][-1] == "--resume" and (out / "finetune.json").exists()


def test_a_finetuning_is_not_reused_after_another_model_or_text_is_written_at_the_same_path(tmp_path, monkeypatch):
    """The key is the content of the biLM's model files and of both texts (as a training run's ident is), not
    their paths: a fine-tuning of the old biLM is never handed out as the fine-tuning of the new one."""
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    args = _finetune_args(tmp_path / "work")
    elmo = tmp_path / "elmo"
    _tiny_bilm(0).save(elmo)
    text, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    text.write_text("a b c\n")
    dev.write_text("a b\n")
    outs = [tb.finetune_bilm(args, elmo, text, dev, -1, "the test text")]
    assert tb.finetune_bilm(args, elmo, text, dev, -1, "the test text") == outs[0] and len(fake.calls) == 1
    _tiny_bilm(1).save(elmo)  # another biLM (same shapes, other weights) at the same path
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    text.write_text("d e f\n")  # another training text at the same path
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    dev.write_text("d e\n")  # another held-out text
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    assert len(fake.calls) == 4 and len(set(outs)) == 4
    assert all(c[c.index("--init") + 1] == str(elmo) for c in fake.calls)


@pytest.mark.parametrize("layout", ["native", "allennlp"])
def test_a_finetuning_is_not_reused_after_another_vocabulary_or_softmax_is_written_at_the_same_path(
        tmp_path, monkeypatch, layout):
    """``pretrain --init`` reads the biLM's vocab.txt and softmax too (an AllenNLP directory's softmax.safetensors
    beside its weights): the key hashes them where present, so a fine-tuning from another vocabulary or softmax is
    not handed out. (The key hashed config.json, model.safetensors and initial_state.safetensors alone.)"""
    import warnings

    args = _finetune_args(tmp_path / "work")
    elmo = tmp_path / "elmo"
    if layout == "native":
        _tiny_bilm(0).save(elmo)
    else:
        with warnings.catch_warnings():  # what AllenNLP will not run, said elsewhere
            warnings.simplefilter("ignore")
            _tiny_bilm(0).to_allennlp(elmo / "options.json", elmo / "weights.hdf5")
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)  # after h5py, which runs `uname -p`
    text, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    text.write_text("a b c\n")
    dev.write_text("a b\n")
    outs = [tb.finetune_bilm(args, elmo, text, dev, -1, "the test text")]
    (elmo / "vocab.txt").write_text("<S>\n</S>\n<UNK>\na\n")  # a vocabulary (and softmax) beside
    (elmo / "softmax.safetensors").write_bytes(b"first")
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    (elmo / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nb\n")  # another vocabulary at the same path
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    (elmo / "softmax.safetensors").write_bytes(b"other")  # another softmax at the same path
    outs.append(tb.finetune_bilm(args, elmo, text, dev, -1, "the test text"))
    assert tb.finetune_bilm(args, elmo, text, dev, -1, "the test text") == outs[-1]  # unchanged: re-used
    assert len(fake.calls) == 4 and len(set(outs)) == 4
    # a training run reads the biLM through BiLM.load alone: its ident hashes no vocabulary or softmax
    assert set(tb.bilm_digest(elmo)) == ({"config.json", "model.safetensors"} if layout == "native"
                                         else {"options.json", "weights.hdf5"})


def test_runs_that_differ_in_their_overrides_keep_their_own_directories(tmp_path):
    root = tmp_path / "runs"
    short, long = ({"config": "[x]", "overrides": {"training.max_steps": n}} for n in (1000, 3000))
    a, b = tb.run_dir_for(root, "tok2vec-f1-seed0", short), tb.run_dir_for(root, "tok2vec-f1-seed0", long)
    assert a != b and a.parent == b.parent == root and a.name.startswith("tok2vec-f1-seed0-")
    assert tb.run_dir_for(root, "tok2vec-f1-seed0", short) == a  # stable
    a.mkdir(parents=True)
    tb.store_result(a, short, {"f": 1.0})
    assert tb.cached_result(tb.run_dir_for(root, "tok2vec-f1-seed0", short), short, False) == {"f": 1.0}
    assert tb.cached_result(b, long, False) is None
    assert tb.cached_result(a, short, True) is None  # --force retrains
    # a finished run stored by the earlier layout (no hash) with the same ident is still found
    legacy = root / "baseline-f1-seed0"
    legacy.mkdir()
    tb.store_result(legacy, long, {"f": 2.0})
    assert tb.run_dir_for(root, "baseline-f1-seed0", long) == legacy
    assert tb.run_dir_for(root, "baseline-f1-seed0", short) != legacy


def test_finetune_bilm_runs_on_the_gpu_the_run_was_given_and_records_it(tmp_path, monkeypatch):
    """``--gpu-id N`` trains spaCy on GPU N (``train(use_gpu=N)``, ``require_gpu(N)``): the fine-tuning ran
    ``pretrain --device cuda``, GPU 0 in the new process, and the result recorded GPU 0's name. Now ``cuda:N`` and
    GPU N's name; the CPU (-1) as before."""
    import torch

    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    elmo, text, dev = _finetune_inputs(tmp_path)
    for gpu_id, device in ((2, "cuda:2"), (0, "cuda:0"), (-1, "cpu")):
        tb.finetune_bilm(_finetune_args(tmp_path / f"work{gpu_id}"), elmo, text, dev, gpu_id, "the test text")
        assert fake.calls[-1][fake.calls[-1].index("--device") + 1] == device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"GPU {device}")
    assert [tb.environment(gpu_id)["cuda"] for gpu_id in (2, 0, -1)] == ["GPU 2", "GPU 0", "GPU 0"]


@pytest.mark.parametrize("reading", ["sentences", "stream"])
def test_quick_finetune_passes_unroll_only_to_streams(tmp_path, monkeypatch, reading):
    """`pretrain --sentences` refuses --unroll (sentence rows have no windows): the quick
    fine-tuning gives its short window to the stream reading only."""
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    args = _finetune_args(tmp_path / "work", finetune_reading=reading)
    args.quick = True
    tb.finetune_bilm(args, *_finetune_inputs(tmp_path), -1, "the test text")
    cmd = fake.calls[0]
    assert ("--sentences" in cmd) == (reading == "sentences")
    assert ("--unroll" in cmd) == (reading == "stream")


def _tiny_bilm(seed, projection_dim=4):
    import torch

    from spacy_elmo import BiLM, BiLMConfig

    torch.manual_seed(seed)
    return BiLM(BiLMConfig(projection_dim=projection_dim, cell_dim=8, n_layers=1, char_embedding_dim=4,
                           filters=[(1, 4), (2, 4)], n_highway=0))


def _write_train(path, n_words, label=None):
    import spacy
    from spacy.tokens import Doc

    nlp = spacy.blank("en")
    docs = [Doc(nlp.vocab, words=[f"w{i}"] * n_words) for i in range(50)]
    for i, doc in enumerate(docs):
        doc.cats = {"A": float(i % 2 == 0), "B": float(i % 2 == 1)}
    tb.write_docbin(docs, path)


def _fake_training(monkeypatch):
    """train_pipeline / evaluate_pipeline stand-ins: count the trainings, nothing trained."""
    trained = []

    def train(cfg, run_dir, overrides, gpu_id):
        trained.append(run_dir)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return {"model": str(run_dir), "best_dev": {}}

    monkeypatch.setattr(tb, "train_pipeline", train)
    monkeypatch.setattr(tb, "evaluate_pipeline", lambda *a, **k: {"ents_f": 0.5, "cats_accuracy": 0.5})
    return trained


@pytest.mark.parametrize("bench", ["ner", "textcat"])
def test_a_run_is_not_reused_after_another_model_or_data_is_written_at_the_same_path(tmp_path, monkeypatch, bench):
    import argparse

    from benchmarks import ner_conll2003, textcat_bench

    trained = _fake_training(monkeypatch)
    data = tmp_path / "data"
    data.mkdir()
    paths = {s: data / f"{s}.spacy" for s in ("train", "dev", "test")}
    for split in paths.values():
        _write_train(split, 3)
    elmo = tmp_path / "elmo"
    _tiny_bilm(0).save(elmo)
    args = argparse.Namespace(data_seed=0, max_steps=10, eval_frequency=None, patience=None, work_dir=tmp_path, force=False)

    def run(fraction=1.0):
        if bench == "ner":
            base = tb.load_base_config(tb.CONFIGS / "ner.cfg")
            return ner_conll2003.run_one(args, base, "tok2vec", fraction, 0, paths, elmo, -1)
        base = tb.load_base_config(tb.CONFIGS / "textcat.cfg")
        return textcat_bench.run_one(args, base, "bbc", "tok2vec", fraction, 0, paths, elmo, -1)

    run()
    run()
    assert len(trained) == 1  # the same model and data: re-used
    before = tb.elmo_description(elmo)["files_sha1"]
    _tiny_bilm(1, projection_dim=8).save(elmo)  # another model at the same path
    assert tb.elmo_description(elmo)["files_sha1"] != before
    run()
    assert len(trained) == 2 and trained[1] != trained[0]
    _write_train(paths["dev"], 5)  # other dev data at the same path
    run()
    assert len(trained) == 3
    run(0.1)
    _write_train(paths["train"], 7)  # train.spacy rewritten: a new subset, a new run
    run(0.1)
    assert len(trained) == 5


@pytest.mark.parametrize("bench", ["ner", "textcat"])
def test_a_run_selects_its_model_on_dev_and_scores_it_on_test_once(tmp_path, monkeypatch, bench):
    """spacy train's paths.dev (where model-best is chosen) is the dev split, never test, and the one evaluation
    reads test: a model selected on test would score on the data it was picked with."""
    import argparse

    from benchmarks import ner_conll2003, textcat_bench

    trained, evaluated = [], []

    def train(cfg, run_dir, overrides, gpu_id):
        trained.append(dict(overrides))
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return {"model": str(run_dir), "best_dev": {}}

    def evaluate(model_dir, test_path, *a, **k):
        evaluated.append(Path(test_path))
        return {"ents_f": 0.5, "cats_accuracy": 0.5}

    monkeypatch.setattr(tb, "train_pipeline", train)
    monkeypatch.setattr(tb, "evaluate_pipeline", evaluate)
    data = tmp_path / "data"
    data.mkdir()
    paths = {s: data / f"{s}.spacy" for s in ("train", "dev", "test")}
    for n, split in enumerate(paths.values()):
        _write_train(split, 3 + n)
    elmo = tmp_path / "elmo"
    _tiny_bilm(0).save(elmo)
    args = argparse.Namespace(data_seed=0, max_steps=10, eval_frequency=None, patience=None, work_dir=tmp_path, force=False)
    if bench == "ner":
        ner_conll2003.run_one(args, tb.load_base_config(tb.CONFIGS / "ner.cfg"), "tok2vec", 1.0, 0, paths, elmo, -1)
    else:
        textcat_bench.run_one(args, tb.load_base_config(tb.CONFIGS / "textcat.cfg"), "bbc", "tok2vec", 1.0, 0, paths,
                              elmo, -1)
    (overrides,), = [trained]
    assert overrides["paths.dev"] == str(paths["dev"])
    assert Path(overrides["paths.train"]).parent == data and str(paths["test"]) not in overrides.values()
    assert overrides["paths.elmo"] == str(elmo) and overrides["training.max_steps"] == 10
    assert evaluated == [paths["test"]]


def test_train_subset_is_rebuilt_when_train_spacy_changes(tmp_path):
    train = tmp_path / "train.spacy"
    _write_train(train, 3)
    first, n1 = tb.train_subset(train, 0.1, 0)
    assert n1 == 5 and [len(d) for d in tb.read_docs(first)] == [3] * 5
    assert tb.train_subset(train, 0.1, 0) == (first, n1)  # the same file again
    _write_train(train, 7)
    second, n2 = tb.train_subset(train, 0.1, 0)
    assert second != first and [len(d) for d in tb.read_docs(second)] == [7] * 5
    # stratified by a key: each label keeps its share
    by_label, n = tb.train_subset(train, 0.2, 0, key=lambda d: max(d.cats, key=d.cats.get))
    labels = [max(d.cats, key=d.cats.get) for d in tb.read_docs(by_label)]
    assert n == 10 and labels.count("A") == labels.count("B") == 5
    assert tb.train_subset(train, 1.0, 0) == (train, 50)


def test_a_metric_no_run_scored_is_null_in_standard_json_and_n_a_in_the_table(tmp_path):
    """mean_std gave NaN for a metric no seed scored (missing, or NaN), which json wrote as NaN: a file strict
    readers (jq, JSON.parse) refuse. Now null, with the table's n/a, the chart skipping it and the baseline
    column empty."""
    import json
    import math

    runs = [{"setting": s, "seed": seed, "test": {"f": f, "acc": acc}}
            for s, seed, f, acc in (("baseline", 0, 0.5, 0.9), ("baseline", 1, 0.7, float("nan")),
                                    ("elmo", 0, None, None), ("elmo", 1, float("nan"), None))]
    rows = tb.summarize(runs, ("setting",), ["f", "acc"])
    base, elmo = rows
    assert base["f"]["mean"] == pytest.approx(0.6) and base["acc"] == {"mean": 0.9, "std": 0.0, "values": [0.9, None]}
    assert elmo["f"] == {"mean": None, "std": None, "values": [None, None]} and elmo["acc"]["mean"] is None
    table = tb.markdown_table(rows, ("setting",), {"f": "F1", "acc": "accuracy"}, "t", baseline_key="f")
    assert "| elmo | n/a |  | n/a | 0,1 |" in table and "| baseline | 60.00 ± 14.14 |  | 90.00 ± 0.00 | 0,1 |" in table

    def refuse(token):
        raise ValueError(f"not standard JSON: {token}")

    charted = []
    paths = tb.write_outputs({"rows": rows}, table, charted.append, tmp_path, "task")
    assert json.loads(paths[0].read_text(encoding="utf-8"), parse_constant=refuse)["rows"] == rows
    assert charted == [paths[2]]
    pytest.importorskip("matplotlib")
    tb.bar_chart(rows, "setting", "setting", {"f": "F1"}, "t", tmp_path / "c.png")  # math.isnan(None) failed
    assert (tmp_path / "c.png").stat().st_size > 0 and not math.isnan(base["f"]["std"])
