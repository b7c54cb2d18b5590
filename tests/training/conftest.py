"""Small corpora and tiny models for the pretraining tests."""

import json
import random
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

#: A tiny biLM: every test trains in seconds on 2 cores.
TINY = {
    "projection_dim": 16,
    "cell_dim": 32,
    "n_layers": 2,
    "filters": [[1, 8], [2, 8], [3, 16]],
    "n_highway": 1,
    "char_embedding_dim": 8,
    "max_characters_per_token": 20,
}

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird"]
VERBS = ["sees", "likes", "follows", "feeds", "watches"]
OBJECTS = ["the ball", "a fish", "the red car", "her friend", "the garden", "a book"]
PLACES = ["in the park", "at home", "near the river", "after school"]


def generated_sentences(n: int, seed: int = 0):
    """A strongly structured language: subject verb object [place] ."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        if rng.random() < 0.5:
            s += " " + rng.choice(PLACES)
        out.append(s + " .")
    return out


def write_corpus(path: Path, n: int, seed: int = 0, per_line: int = 3) -> Path:
    sents = generated_sentences(n, seed)
    lines = [" ".join(s[0].upper() + s[1:] for s in sents[i : i + per_line]) for i in range(0, n, per_line)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tiny_config():
    return dict(TINY)


@pytest.fixture
def corpus_file(tmp_path):
    return write_corpus(tmp_path / "train.txt", 600)


def tiny_pretrain_args(tmp_path, out, *extra, max_steps=3):
    """``spacy-elmo pretrain`` of the tiny model on a generated corpus (written into ``tmp_path``
    with the model options) into ``out``: ``(args, train, options)``."""
    train = write_corpus(tmp_path / "train.txt", 200)
    options = tmp_path / "tiny.json"
    options.write_text(json.dumps(TINY))
    windows = [] if "--sentences" in extra else ["--unroll", "5"]
    args = ["pretrain", str(train), str(out), "--options", str(options), "--max-steps", str(max_steps), "--batch-size", "4",
            *windows, "--negatives", "8", "--threads", "1", "--backend", "reference", "--no-progress", *extra]
    return args, train, options


@contextmanager
def locked_by_another_process(directory: Path):
    """Within: another process holds the lock on ``directory``, as a running pretrain does (flock on the directory
    itself); killed on leaving, as by a SIGKILL of that run (the kernel releases its lock). POSIX only."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)", str(directory)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


def tiny_train_config(train_path, output_dir, **overrides):
    from spacy_elmo.training.trainer import TrainConfig

    settings = dict(
        train_path=str(train_path), output_dir=str(output_dir), model=dict(TINY), batch_size=8, unroll=10,
        negatives=16, max_steps=20, checkpoint_every=10, log_every=1, progress=False, backend="reference", seed=0,
    )
    if overrides.get("sentences"):
        del settings["unroll"]  # sentence batches have no windows: --unroll is an error with --sentences
    settings.update(overrides)
    return TrainConfig(**settings)


def first_step_lm(config, corpus):
    """``(lm, vocab, char_table)`` of ``train(config)`` on ``corpus`` (its ``data`` directory) before its first step:
    the initial weights seeded as the trainer seeds them, in training mode (no dropout: the trainer sets it)."""
    import torch

    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.trainer import _build_model
    from spacy_elmo.training.vocab import CharTable

    torch.manual_seed(config.seed)
    bilm, softmax, vocab, *_ = _build_model(config, corpus, None)
    return BidirectionalLM(bilm, softmax), vocab, CharTable(vocab, bilm.config.max_characters_per_token)


def full_softmax_output(lm, vocab, char_table, batch):
    """``lm``'s output on ``batch`` (:meth:`SentenceBatcher.batch`'s ``(fwd, bwd, lengths)``), every row from the start
    state, over the full softmax: what a deterministic first step reads (a ``--sentences`` run with negatives >= the
    vocabulary and dropout 0). Its targets number ``lengths.sum()``."""
    from spacy_elmo.training.lm import encode_batch

    fwd, bwd, lengths = batch
    chars, i_f, i_b = encode_batch(fwd[:, :-1], bwd[:, :-1], char_table)
    return lm(chars, i_f, i_b, vocab.target_ids(fwd[:, 1:]), vocab.target_ids(bwd[:, 1:]), lengths,
              lm.bilm.start_state(fwd.shape[0], lm.softmax.weight), None, None)


def first_step_nll(config, corpus, batches):
    """What the first step of ``train(config)`` on ``corpus`` (its ``data`` directory) computes, per batch of ``batches``
    (:meth:`SentenceBatcher.batch`'s ``(fwd, bwd, lengths)``): ``(summed forward NLL, summed backward NLL, targets)``
    of the initial weights (seeded as the trainer seeds them), every row from the start state, over the full softmax.
    These are the step's losses when it is deterministic: a ``--sentences`` run with negatives >= the vocabulary
    and dropout 0."""
    import torch

    lm, vocab, char_table = first_step_lm(config, corpus)
    lm.eval()
    result = []
    with torch.no_grad():
        for batch in batches:
            res = full_softmax_output(lm, vocab, char_table, batch)
            result.append((float(res.nll_fwd.double().sum()), float(res.nll_bwd.double().sum()), int(batch[2].sum())))
    return result


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models on shared cores: one thread avoids oversubscription stalls (60x here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
