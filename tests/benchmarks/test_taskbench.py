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


def test_finetune_bilm_runs_pretrain_once_then_reuses_it(tmp_path, monkeypatch):
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    text, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    args = _finetune_args(tmp_path / "work", finetune_args="--lr 0.1")
    out = tb.finetune_bilm(args, Path("/models/elmo"), text, dev, False, "the test text")
    cmd = fake.calls[0]
    assert cmd[cmd.index("pretrain") + 1:cmd.index("pretrain") + 3] == [str(text), str(out)]
    assert cmd[cmd.index("--init") + 1] == "/models/elmo" and cmd[cmd.index("--heldout") + 1] == str(dev)
    assert cmd[cmd.index("--epochs") + 1] == "2.0" and "--sentences" in cmd and cmd[-2:] == ["--lr", "0.1"]
    assert "--resume" not in cmd and cmd[cmd.index("--device") + 1] == "cpu"
    assert tb.finetune_bilm(args, Path("/models/elmo"), text, dev, False, "the test text") == out
    assert len(fake.calls) == 1  # the finished fine-tuning is re-used
    # other parameters, another directory; the stream reading drops --sentences
    other = tb.finetune_bilm(_finetune_args(tmp_path / "work", finetune_reading="stream"), Path("/models/elmo"),
                             text, dev, False, "the test text")
    assert other != out and "--sentences" not in fake.calls[1]


def test_finetune_bilm_resumes_an_interrupted_run_and_names_a_failed_command(tmp_path, monkeypatch):
    from spacy_elmo.training.checkpoint import checkpoint_path

    args = _finetune_args(tmp_path / "work")
    text, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    fail = _FakePretrain(code=3)
    monkeypatch.setattr(tb.subprocess, "run", fail)
    with pytest.raises(SystemExit, match=r"(?s)exit 3\).*spacy_elmo pretrain"):
        tb.finetune_bilm(args, Path("/m"), text, dev, True, "the test text")
    out = Path(fail.calls[0][fail.calls[0].index("pretrain") + 2])
    assert "--resume" not in fail.calls[0] and fail.calls[0][fail.calls[0].index("--device") + 1] == "cuda"
    out.mkdir(parents=True)
    checkpoint_path(out).write_bytes(b"")  # what a killed run leaves
    ok = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", ok)
    assert tb.finetune_bilm(args, Path("/m"), text, dev, True, "the test text") == out
    assert ok.calls[0][-1] == "--resume" and (out / "finetune.json").exists()


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


@pytest.mark.parametrize("reading", ["sentences", "stream"])
def test_quick_finetune_passes_unroll_only_to_streams(tmp_path, monkeypatch, reading):
    """`pretrain --sentences` refuses --unroll (sentence rows have no windows): the quick
    fine-tuning gives its short window to the stream reading only."""
    fake = _FakePretrain()
    monkeypatch.setattr(tb.subprocess, "run", fake)
    args = _finetune_args(tmp_path / "work", finetune_reading=reading)
    args.quick = True
    tb.finetune_bilm(args, Path("/models/elmo"), tmp_path / "t.txt", tmp_path / "d.txt", False, "the test text")
    cmd = fake.calls[0]
    assert ("--sentences" in cmd) == (reading == "sentences")
    assert ("--unroll" in cmd) == (reading == "stream")
