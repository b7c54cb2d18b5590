"""End-to-end pretraining: learning, exact resume, Korean, fine-tuning."""

import copy
import hashlib
import json
import math
import os
import random
import re
import shutil
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.training.data import TOKEN_RULES, Corpus
from spacy_elmo.training.evaluate import evaluate_model_dir
from spacy_elmo.training.stream import StreamBatcher
from spacy_elmo.training.trainer import LOG_NAME, read_log, train

from .conftest import TINY, first_step_lm, first_step_nll, full_softmax_output, tiny_train_config, write_corpus


def unigram_perplexity(train_dir, heldout_sentences_vocab_ids):
    """Perplexity of the add-one unigram model of the training targets on held-out targets."""
    corpus = Corpus.load(train_dir / "data")
    counts = Counter(corpus.tokens.tolist())
    total = sum(counts.values()) + len(corpus.types)
    ids = heldout_sentences_vocab_ids
    nll = [-math.log((counts.get(i, 0) + 1) / total) for i in ids]
    return math.exp(sum(nll) / len(nll))


def test_perplexity_falls_far_below_unigram(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 600)
    held = write_corpus(tmp_path / "held.txt", 80, seed=7)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=120, checkpoint_every=120, optimizer="adam", lr=0.01, log_every=20,
                            state_sentences=2048))
    result = evaluate_model_dir(out, held)
    # Unigram baseline on the same held-out targets (the stream without its first token).
    corpus = Corpus.load(out / "data")
    index = {t: i for i, t in enumerate(corpus.types)}
    from spacy_elmo.training.data import tokenize_file

    ids = []
    for s in tokenize_file(held, "en"):
        ids += [index[t] for t in s] + [1, 0]
    unigram = unigram_perplexity(out, ids[:-1])
    assert result["oov_rate"] == 0.0
    assert result["perplexity"] < 0.4 * unigram, (result, unigram)
    assert result["perplexity_forward"] < 0.5 * unigram and result["perplexity_backward"] < 0.5 * unigram
    log = read_log(out)
    assert log[-1]["sampled_perplexity"] < log[1]["sampled_perplexity"]
    steps = [e for e in log if "loss" in e]
    assert steps and all(e["tokens_per_s"] > 0 for e in steps)
    # tokens counts corpus tokens (batch x unroll a step), as bilm-tf and benchmarks/pretrain.py do
    assert all(e["tokens"] == e["step"] * 8 * 10 for e in steps)
    # The saved model loads with BiLM.load (softmax ignored) and runs.
    bilm = BiLM.load(out)
    with torch.no_grad():
        acts = bilm(batch_to_ids([["The", "cat", "sees", "a", "fish", "."]], bilm.config.max_characters_per_token)).activations
    assert len(acts) == 3 and acts[0].shape == (1, 6, 32)
    # Asked to, the trainer fitted an initial state on the training text, and
    # sentences read alone from it are predicted better than from zeros.
    assert bilm.initial_state is not None
    warm = evaluate_model_dir(out, held, per_sentence=True)
    zero_dir = tmp_path / "zero"
    shutil.copytree(out, zero_dir, ignore=shutil.ignore_patterns("initial_state.safetensors", "data", "*.pt"))
    zero = evaluate_model_dir(zero_dir, held, per_sentence=True)
    assert warm["mode"] == zero["mode"] == "per_sentence"
    assert warm["perplexity"] < 0.9 * zero["perplexity"], (warm, zero)


def test_per_sentence_evaluation_of_one_sentence_equals_the_stream(tmp_path):
    """One sentence from zeros: the stream and the per-sentence evaluation predict the same targets."""
    train_file = write_corpus(tmp_path / "train.txt", 120)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=10, checkpoint_every=10, state_sentences=0))
    assert BiLM.load(out).initial_state is None
    one = tmp_path / "one.txt"
    one.write_text("The cat sees a fish near the river .\n", encoding="utf-8")
    stream = evaluate_model_dir(out, one, batch_size=1)
    alone = evaluate_model_dir(out, one, per_sentence=True)
    assert stream["n_targets"] == alone["n_targets"] == 10  # 9 tokens and </S> (<S> backward)
    for key in ("loss_forward", "loss_backward"):
        assert alone[key] == pytest.approx(stream[key], abs=1e-5)


def test_logged_loss_is_the_mean_of_the_directions_and_sampled_perplexity_that_of_the_window(tmp_path):
    """A deterministic run (sentence batches from the start state, full softmax, no dropout): step 1's logged
    losses are those of the initial weights on its batch, ``loss`` the mean of the two directions', and the
    logged ``sampled_perplexity`` (the full softmax here) ``exp`` of the mean loss of the steps since the last log line."""
    from spacy_elmo.training.sentences import SentenceBatcher

    train_file = write_corpus(tmp_path / "train.txt", 200)
    settings = dict(max_steps=2, checkpoint_every=2, sentences=True, max_length=7, negatives=10_000, dropout=0.0)
    config = tiny_train_config(train_file, tmp_path / "every", log_every=1, **settings)
    with pytest.warns(RuntimeWarning, match="using the full softmax"):
        train(config)
    corpus = Corpus.load(tmp_path / "every" / "data")
    ((sum_f, sum_b, n),) = first_step_nll(config, corpus, [SentenceBatcher(corpus, 8, 7, 0).batch(0, 0)])
    every = [e for e in read_log(tmp_path / "every") if "loss" in e]
    assert [e["step"] for e in every] == [1, 2]
    first = every[0]
    assert first["loss_forward"] == pytest.approx(sum_f / n, rel=1e-5)
    assert first["loss_backward"] == pytest.approx(sum_b / n, rel=1e-5)
    assert first["loss"] == pytest.approx((sum_f / n + sum_b / n) / 2, rel=1e-5)
    for e in every:
        assert e["sampled_perplexity"] == pytest.approx(math.exp(e["loss"]), rel=1e-9)
    # logged every 2 steps: the same (deterministic) steps, one line whose perplexity is of their mean loss
    with pytest.warns(RuntimeWarning, match="using the full softmax"):
        train(tiny_train_config(train_file, tmp_path / "pairs", log_every=2, **settings))
    (pair,) = [e for e in read_log(tmp_path / "pairs") if "loss" in e]
    assert pair["loss"] == pytest.approx(every[1]["loss"], rel=1e-6)
    assert pair["sampled_perplexity"] == pytest.approx(math.exp((every[0]["loss"] + every[1]["loss"]) / 2), rel=1e-6)
    assert abs(every[0]["loss"] - every[1]["loss"]) > 1e-3  # the mean of two differing losses, not the last one


def adagrad_step(weight, grad, lr=0.2):
    """bilm-tf's first Adagrad step (``AdagradOptimizer(lr, initial_accumulator_value=1.0)``), in float64:
    ``w - lr * g / sqrt(1 + g^2)``."""
    weight, grad = np.asarray(weight, np.float64), np.asarray(grad, np.float64)
    return weight - lr * grad / np.sqrt(1.0 + grad * grad)


def test_the_optimizers_take_the_recipes_steps():
    """adagrad: bilm-tf's (lr 0.2, accumulator from 1.0), the accumulator summing squared gradients over steps;
    adam: lr 1e-3, whose first step moves every weight by lr * sign(g) (bias-corrected moments, eps 1e-8). Torch's
    Adagrad adds 1e-10 to the root (bilm-tf's adds nothing): a relative 1e-10 here."""
    from spacy_elmo.training.trainer import build_optimizer

    grads = [np.array([0.01, -0.5, 3.0, 0.0]), np.array([0.2, 0.1, -1.0, 0.7])]
    for lr, want_lr in ((None, 0.2), (0.05, 0.05)):
        w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        opt = build_optimizer("adagrad", lr, [w])
        w.grad = torch.from_numpy(grads[0].copy())
        opt.step()
        np.testing.assert_allclose(w.detach().numpy(), adagrad_step(np.zeros(4), grads[0], want_lr), rtol=1e-9, atol=0)
        w.grad = torch.from_numpy(grads[1].copy())
        opt.step()
        acc = 1.0 + grads[0] ** 2 + grads[1] ** 2
        want = adagrad_step(np.zeros(4), grads[0], want_lr) - want_lr * grads[1] / np.sqrt(acc)
        np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-9, atol=0)
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
    opt = build_optimizer("adam", None, [w])
    w.grad = torch.from_numpy(grads[0].copy())
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), 1.0 - 1e-3 * grads[0] / (np.abs(grads[0]) + 1e-8), rtol=1e-12)


def test_loading_an_optimizer_state_keeps_the_loading_optimizers_device_bound_options():
    """build_optimizer makes Adagrad fused on the CPU only; Optimizer.load_state_dict takes the saved param groups
    whole, ``fused`` and ``foreach`` included: a GPU run's state (fused None) loaded on the CPU stepped with the
    per-tensor loop, a CPU run's (fused True) loaded on a GPU with fused=True there. load_optimizer_state keeps the
    loading optimizer's own choice, and everything else (the state, the other options) from the saved."""
    from spacy_elmo.training.trainer import DEVICE_BOUND_OPTIONS, build_optimizer, load_optimizer_state

    def params():
        gen = torch.Generator().manual_seed(0)
        return [torch.nn.Parameter(torch.randn(6, 3, generator=gen)), torch.nn.Parameter(torch.randn(3, generator=gen))]

    def step(opt, ps, scale):
        for i, p in enumerate(ps):
            p.grad = torch.full_like(p, scale * (i + 1))
        opt.step()

    for name in ("adagrad", "adam"):
        cpu_built = build_optimizer(name, None, params()).param_groups[0]
        assert cpu_built["fused"] is True or name == "adam"  # the CPU's choice (Adam: torch's default)
        # written by a GPU run's optimizer: another implementation (as build_optimizer makes it for CUDA), another lr
        writer_params = params()
        writer = (torch.optim.Adagrad(writer_params, lr=0.05, initial_accumulator_value=1.0, fused=None, foreach=True)
                  if name == "adagrad" else torch.optim.Adam(writer_params, lr=0.05, foreach=True))
        step(writer, writer_params, 0.5)
        saved = copy.deepcopy(writer.state_dict())  # as read from a checkpoint: its tensors not the writer's
        saved_groups = [dict(g) for g in saved["param_groups"]]
        reader_params = params()
        with torch.no_grad():
            for r, w in zip(reader_params, writer_params):
                r.copy_(w)
        reader = build_optimizer(name, None, reader_params)
        load_optimizer_state(reader, saved)
        assert saved["param_groups"] == saved_groups  # the caller's dict is left as it was
        group = reader.param_groups[0]
        assert {"fused", "foreach"} <= set(group)
        for key in set(DEVICE_BOUND_OPTIONS) & set(cpu_built):  # Adagrad has no capturable
            assert group[key] == cpu_built[key], (name, key, group[key])
        assert group["lr"] == 0.05  # the rest is the saved
        step(writer, writer_params, -0.25)
        step(reader, reader_params, -0.25)
        for r, w in zip(reader_params, writer_params):
            torch.testing.assert_close(r, w, rtol=1e-6, atol=1e-7)
    # the other way: a CPU run's fused state into an optimizer built not fused (a GPU run's, here on the CPU)
    cpu_params = params()
    cpu = build_optimizer("adagrad", None, cpu_params)
    step(cpu, cpu_params, 1.0)
    gpu_like = torch.optim.Adagrad(params(), lr=0.2, initial_accumulator_value=1.0, fused=None)
    load_optimizer_state(gpu_like, cpu.state_dict())
    assert gpu_like.param_groups[0]["fused"] is None
    with pytest.raises(ValueError, match="different number of parameter groups"):  # load_state_dict's own check
        saved = cpu.state_dict()
        load_optimizer_state(gpu_like, dict(saved, param_groups=saved["param_groups"] * 2))


@pytest.mark.filterwarnings("ignore:.*full softmax:RuntimeWarning")
def test_clipping_scales_the_steps_gradient_to_the_bound_before_the_step(tmp_path):
    """One deterministic step (sentences from the start state, full softmax, dropout 0) of the trainer's initial
    weights, whose gradient is computed here: with clip inf the saved weights are bilm-tf's Adagrad step of it (and
    the logged grad_norm its global norm); with clip = norm / 4, the step of the gradient scaled by clip / norm
    (torch's global-norm clipping, ``clip / (norm + 1e-6)``), applied before the step."""
    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.modelio import load_pretrained
    from spacy_elmo.training.sentences import SentenceBatcher

    train_file = write_corpus(tmp_path / "train.txt", 200)
    settings = dict(max_steps=1, checkpoint_every=1, sentences=True, max_length=7, negatives=10_000, dropout=0.0)
    free = tiny_train_config(train_file, tmp_path / "free", clip=float("inf"), **settings)
    train(free)
    corpus = Corpus.load(tmp_path / "free" / "data")
    lm, vocab, char_table = first_step_lm(free, corpus)
    batch = SentenceBatcher(corpus, 8, 7, 0).batch(0, 0)
    res = full_softmax_output(lm, vocab, char_table, batch)
    n = int(batch[2].sum())
    ((res.nll_fwd.sum() / n + res.nll_bwd.sum() / n) / 2).backward()
    start = {name: p.detach().double().numpy() for name, p in lm.named_parameters()}
    grads = {name: p.grad.double().numpy() for name, p in lm.named_parameters()}
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    (logged,) = [e["grad_norm"] for e in read_log(tmp_path / "free") if "loss" in e]
    assert logged == pytest.approx(norm, rel=1e-5)
    clip = norm / 4
    train(tiny_train_config(train_file, tmp_path / "clipped", clip=clip, **settings))
    for out, scale in (("free", 1.0), ("clipped", clip / (norm + 1e-6))):
        bilm, softmax, _, _ = load_pretrained(tmp_path / out, backend="reference")
        trained = dict(BidirectionalLM(bilm, softmax).named_parameters())
        assert trained.keys() == start.keys()
        for name, weight in start.items():
            want = adagrad_step(weight, grads[name] * scale)
            step = np.abs(want - weight).max()
            assert step > 0, name  # every tensor moves: each is checked, not just the sum
            # float32 weights: a few ulps of the weight, far below the quarter step clipping takes away
            np.testing.assert_allclose(trained[name].detach().double().numpy(), want, rtol=4e-7, atol=1e-3 * step,
                                       err_msg=f"{out} {name}")


@pytest.mark.parametrize("prefetch", [None, True], ids=["default", "prefetch"])
@pytest.mark.parametrize("sentences", [False, True], ids=["streams", "sentences"])
def test_resume_after_kill_continues_exactly(tmp_path, sentences, prefetch):
    """Also with each step's inputs prepared ahead (forced on: off by default on the CPU), whose draw
    for the step after the checkpoint is made before the checkpoint is written. The stream run without prefetching
    also fits the initial state at each save (--state-sentences; dropout 0.1): the checkpoint captures the RNG before
    the fit, so a fit drawing from it (read in training mode) would break the resume."""
    train_file = write_corpus(tmp_path / "train.txt", 300)
    N = 5
    straight = tmp_path / "straight"
    # with sentences: long ones are cut; log lines every 3 steps and at the checkpoints
    mode = dict(sentences=True, max_length=7, log_every=3) if sentences else dict(log_every=3)
    mode["prefetch"] = prefetch
    if not sentences and prefetch is None:
        mode["state_sentences"] = 40
    train(tiny_train_config(train_file, straight, max_steps=2 * N, checkpoint_every=N, **mode))

    killed = tmp_path / "killed"

    def crash(step, loss):
        if step == N + 2:  # past the checkpoint at N: these two steps are lost
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, killed, max_steps=2 * N, checkpoint_every=N, **mode), on_step=crash)
    train(tiny_train_config(train_file, killed, max_steps=2 * N, checkpoint_every=N, resume=True, **mode))

    for key in ("loss", "sampled_perplexity"):
        a = [e[key] for e in read_log(straight) if "loss" in e]
        b = [e[key] for e in read_log(killed) if "loss" in e]
        assert len(a) == len(b) == 5  # steps 3, 5 (the checkpoint), 6, 9, 10: the log lost the redone steps' lines
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    tokens = [e["tokens"] for e in read_log(killed) if "loss" in e]
    assert tokens == [e["tokens"] for e in read_log(straight) if "loss" in e]
    per_step = np.diff([0] + tokens) / np.diff([0, 3, 5, 6, 9, 10])
    assert (len(set(per_step)) > 1) == sentences  # sentence batches differ in length, windows do not
    # A run cannot switch between streams and sentences on resume: the batches would not match.
    with pytest.raises(ValueError, match="sentences"):
        train(tiny_train_config(train_file, killed, max_steps=3 * N, checkpoint_every=N, resume=True,
                                sentences=not sentences))
    wa, wb = BiLM.load(straight).state_dict(), BiLM.load(killed).state_dict()
    assert ("initial_h" in wa) == ("state_sentences" in mode)  # the fitted state is compared too
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-6, atol=1e-7)


def test_output_dir_guard_and_missing_checkpoint(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 100)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(tiny_train_config(train_file, tmp_path / "new", resume=True))
    train(tiny_train_config(train_file, tmp_path / "out", max_steps=2))
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=2))
    with pytest.raises(ValueError, match="--batch-size 8, but this run uses --batch-size 4"):
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=4, resume=True, batch_size=4))


SYLLABLES = "가나다라마바사아자차카타파하밥집물길책"


def korean_text(n, seed=0):
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(40)]
    lines = []
    for _ in range(n):
        lines.append(" ".join(rng.choice(words) + rng.choice(["은", "는", "이", "가", "을", "를", ""]) for _ in range(rng.randint(3, 8))) + ".")
    return "\n".join(lines) + "\n"


def test_korean_corpus_trains_and_model_runs(tmp_path):
    path = tmp_path / "ko.txt"
    path.write_text(korean_text(150), encoding="utf-8")
    out = tmp_path / "ko"
    train(tiny_train_config(path, out, lang="ko", max_steps=6, checkpoint_every=6))
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert vocab[:3] == ["<S>", "</S>", "<UNK>"] and any("밥" in t or "가" in t for t in vocab)
    bilm = BiLM.load(out)
    tokens = [["밥을", "먹었다", "."], ["책"]]
    with torch.no_grad():
        result = bilm(batch_to_ids(tokens, bilm.config.max_characters_per_token))
    assert result.activations[-1].shape == (2, 3, 32) and torch.isfinite(result.activations[-1]).all()
    assert evaluate_model_dir(out, path)["lang"] == "ko"


def test_fine_tuning_from_a_saved_model(tmp_path):
    base = tmp_path / "base"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=4))
    domain = tmp_path / "domain.txt"
    domain.write_text("The river bank floods . The bank is muddy .\n" * 40, encoding="utf-8")
    tuned = tmp_path / "tuned"
    train(tiny_train_config(domain, tuned, max_steps=4, init=str(base), model={}))  # {} names no model, as None
    # Same vocabulary (softmax rows) as the base model; new words are OOV targets.
    assert (tuned / "vocab.txt").read_text() == (base / "vocab.txt").read_text()
    before, after = BiLM.load(base).state_dict(), BiLM.load(tuned).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # With a new vocabulary, known words keep their trained softmax rows.
    tuned2 = tmp_path / "tuned2"
    train(tiny_train_config(domain, tuned2, max_steps=1, init=str(base), new_vocab=True, model=None, lr=1e-9, optimizer="adam"))
    assert "river" in (tuned2 / "vocab.txt").read_text()
    # A biLM without a softmax (BiLM.save): the vocabulary comes from the corpus, and it says so.
    bare = tmp_path / "bare"
    BiLM.load(base).save(bare)
    with pytest.warns(RuntimeWarning, match="has no softmax"):
        train(tiny_train_config(domain, tmp_path / "tuned3", max_steps=1, init=str(bare), model=None))
    assert "river" in (tmp_path / "tuned3" / "vocab.txt").read_text()


@pytest.mark.parametrize("sentences", [False, True], ids=["streams", "sentences"])
def test_a_fine_tuning_run_logs_the_init_models_heldout_perplexity_at_step_0(tmp_path, sentences):
    """A fine-tuning run (--init, --heldout) measures the held-out text once before its first step: the log's step-0
    held-out line is `evaluate INIT HELD --json`'s number in the run's reading (what fine-tuning is judged against).
    Training is not changed by it; a run from scratch measures nothing at step 0, and a resume does not again."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    base, held = tmp_path / "base", write_corpus(tmp_path / "held.txt", 30, seed=1)
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=4))  # streams, zero start state
    domain = write_corpus(tmp_path / "domain.txt", 120, seed=3)
    mode = dict(sentences=True, max_length=7) if sentences else {}
    settings = dict(max_steps=4, checkpoint_every=2, init=str(base), model=None, **mode)
    tuned = tmp_path / "tuned"
    summary = train(tiny_train_config(domain, tuned, heldout=str(held), **settings))
    result = CliRunner().invoke(app, ["evaluate", str(base), str(held), "--json", "--per-sentence" if sentences else "--stream"])
    assert result.exit_code == 0, result.output
    before = json.loads(result.output.strip().splitlines()[-1])
    log = read_log(tuned)
    events = [e for e in log if e.get("event") == "heldout"]
    assert [e["step"] for e in events] == [0, 2, 4]
    assert [e.get("event") for e in log[:2]] == ["start", "heldout"]  # before the first step's line
    first = events[0]
    assert first["mode"] == before["mode"] == ("per_sentence" if sentences else "stream")
    assert first["n_targets"] == before["n_targets"] and first["heldout_path"] == str(held)
    for key in ("perplexity", "perplexity_forward", "perplexity_backward"):
        assert first[key] == pytest.approx(before[key], rel=1e-5)
    assert summary["heldout"]["perplexity"] == pytest.approx(events[-1]["perplexity"], rel=1e-6)
    # The evaluation draws no random numbers: the steps are those of the run without --heldout (which logs none).
    plain = tmp_path / "plain"
    train(tiny_train_config(domain, plain, **settings))
    assert not [e for e in read_log(plain) if e.get("event") == "heldout"]
    np.testing.assert_allclose([e["loss"] for e in log if "loss" in e],
                               [e["loss"] for e in read_log(plain) if "loss" in e], rtol=1e-6, atol=1e-7)
    # From scratch: held-out lines at the checkpoints only.
    scratch = tmp_path / "scratch"
    train(tiny_train_config(domain, scratch, heldout=str(held), max_steps=4, checkpoint_every=2, **mode))
    assert [e["step"] for e in read_log(scratch) if e.get("event") == "heldout"] == [2, 4]

    # Killed after the step-2 checkpoint, then resumed: the log is the straight run's, one step-0 line.
    killed = tmp_path / "killed"

    def crash(step, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(domain, killed, heldout=str(held), **settings), on_step=crash)
    train(tiny_train_config(domain, killed, heldout=str(held), resume=True, **settings))
    again = [e for e in read_log(killed) if e.get("event") == "heldout"]
    assert [e["step"] for e in again] == [0, 2, 4]
    for x, y in zip(events, again):
        assert y["perplexity"] == pytest.approx(x["perplexity"], rel=1e-6)


def test_a_fine_tuning_run_from_an_init_without_a_softmax_logs_no_step_0_heldout_perplexity(tmp_path):
    """An --init without a softmax (a BiLM.save directory, as AllenNLP or bilm-tf weights) is given a random softmax:
    its step-0 held-out perplexity would be a random softmax's (about the vocabulary size), so none is logged; the
    checkpoints' are."""
    from spacy_elmo.bilm import BiLMConfig

    bare, held = tmp_path / "bare", write_corpus(tmp_path / "held.txt", 10, seed=1)
    BiLM(BiLMConfig.from_dict(TINY)).save(bare)
    tuned = tmp_path / "tuned"
    with pytest.warns(RuntimeWarning, match="has no softmax"):
        train(tiny_train_config(write_corpus(tmp_path / "domain.txt", 60, seed=3), tuned, heldout=str(held), max_steps=2,
                                checkpoint_every=2, init=str(bare), model=None))
    assert [e["step"] for e in read_log(tuned) if e.get("event") == "heldout"] == [2]


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_a_checkpoint_carrying_a_cuda_amp_state_resumes_on_the_cpu(tmp_path, backend):
    """A CUDA run under bf16 autocast carries (and checkpoints) a bfloat16 h beside a float32 c; the CPU runs no
    autocast, where the ops refuse a state of another dtype than their input: the resume carries it on in the
    weights' dtype. Its losses are those of a resume from the float32 state rounded to bfloat16 alike."""
    from spacy_elmo.training import checkpoint as ckpt

    train_file = write_corpus(tmp_path / "train.txt", 200)
    settings = dict(max_steps=4, checkpoint_every=2, backend=backend)
    killed = tmp_path / "killed"

    def crash(step, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, killed, **settings), on_step=crash)
    payload = ckpt.load_checkpoint(killed)
    assert payload["ranks"][0]["lstm_h"].dtype == torch.float32
    losses = {}
    for dtype in (torch.bfloat16, torch.float32):
        out = tmp_path / str(dtype)
        shutil.copytree(killed, out)
        rank = payload["ranks"][0]
        rank["lstm_h"] = rank["lstm_h"].to(torch.bfloat16).to(dtype)  # as a CUDA AMP run saves it / rounded alike
        ckpt.save_checkpoint(out, payload)
        train(tiny_train_config(train_file, out, resume=True, **settings))
        losses[dtype] = [e["loss"] for e in read_log(out) if "loss" in e and e["step"] > 2]
    assert len(losses[torch.float32]) == 2
    assert losses[torch.bfloat16] == losses[torch.float32]


def test_a_gpu_runs_checkpoint_resumed_on_the_cpu_steps_with_the_cpus_fused_adagrad(tmp_path, monkeypatch):
    """build_optimizer makes Adagrad fused on the CPU only, and the checkpoint holds the optimizer's param groups,
    ``fused`` included: a GPU run's checkpoint (fused None) resumed on the CPU stepped with the per-tensor loop for
    the rest of the run (~4x slower softmax updates). The resumed run steps with the CPU's fused Adagrad (cudarev)."""
    from spacy_elmo.training import checkpoint as ckpt

    train_file = write_corpus(tmp_path / "train.txt", 60)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2))
    payload = ckpt.load_checkpoint(out)
    assert payload["optimizer"]["param_groups"][0]["fused"] is True  # a CPU run's
    for group in payload["optimizer"]["param_groups"]:
        group["fused"] = None  # as a GPU run writes it
    ckpt.save_checkpoint(out, payload)
    seen = []
    adagrad_step = torch.optim.Adagrad.step

    def recording_step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["fused"])
        return adagrad_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adagrad, "step", recording_step)
    train(tiny_train_config(train_file, out, max_steps=6, checkpoint_every=2, resume=True))
    assert seen == [True, True]


def test_resume_refuses_other_data_and_settings(tmp_path):
    """--resume continues exactly or not at all: other text, vocabulary or update settings are refused."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    capped = dict(vocab_size=20, negatives=8)  # the vocabulary size of any other corpus too
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2, **capped))

    def resume(path=train_file, **changes):
        return train(tiny_train_config(path, out, max_steps=4, checkpoint_every=2, resume=True, **{**capped, **changes}))

    lines = train_file.read_text(encoding="utf-8").splitlines()
    shuffled = tmp_path / "shuffled.txt"
    shuffled.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="trained on other data"):
        resume(shuffled)  # same words, same vocabulary: other batches
    with pytest.raises(ValueError, match="trained on other data"):
        resume(write_corpus(tmp_path / "other.txt", 200, seed=5))  # other words on the same 20 softmax rows
    with pytest.raises(ValueError, match="--optimizer adagrad, but this run uses --optimizer adam"):
        resume(optimizer="adam")
    with pytest.raises(ValueError, match="--lr 0.2, but this run uses --lr 0.1"):
        resume(lr=0.1)
    with pytest.raises(ValueError, match="--dropout"):
        resume(dropout=0.2)
    with pytest.raises(ValueError, match="--preset/--options ask for"):
        resume(model=dict(TINY, cell_dim=64))
    assert resume(model=None)["steps"] == 4  # no model named: the checkpoint's


def test_a_run_torchrun_restarted_into_its_own_checkpoint_says_to_resume_without_restarts(tmp_path, monkeypatch):
    """torchrun --max-restarts runs the same command again after a failure: once the first attempt wrote a
    checkpoint, it was refused as "already holds a training run. Pass --resume", which a restart cannot pass."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    # a leftover count outside a torchrun job (no run id): the plain message
    with pytest.raises(FileExistsError, match=r"already holds a training run \(checkpoint or model\)\. Pass --resume"):
        train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    with pytest.raises(FileExistsError, match=r"torchrun restarted this job \(restart 1, --max-restarts\).* If this job's "
                                              r"earlier attempt wrote it, .* rerun the command with --resume and without "
                                              r"--max-restarts; if not, choose a new OUTPUT_DIR\."):
        train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))


def test_a_resume_with_another_number_of_processes_is_refused_leaving_output_dir_as_it_was(tmp_path):
    """A checkpoint written by 2 processes (torchrun) resumed by 1 is refused before anything in OUTPUT_DIR changes:
    each process draws its own batches, so another number of them trains on other batches. (No test checked the
    refusal: a run of 2 processes costs a torchrun, so the checkpoint's record is set to 2 here.)"""
    from spacy_elmo.training import checkpoint as ckpt

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    payload = ckpt.load_checkpoint(out)
    assert payload["settings"]["world"] == 1
    payload["settings"]["world"] = 2
    ckpt.save_checkpoint(out, payload)
    before = {p.relative_to(out): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()}
    with pytest.raises(ValueError, match=r"written by 2 processes \(torchrun: --nnodes x --nproc-per-node = 2\), this run has 1 process: .* Rerun with the same torchrun sizes"):
        train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))
    assert {p.relative_to(out): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()} == before


@pytest.mark.filterwarnings("ignore:.*full softmax:RuntimeWarning", "ignore:.*not in the vocabulary of --init:RuntimeWarning")
def test_resume_names_an_init_given_or_left_out(tmp_path):
    """A fine-tuning run resumed without --init, or a from-scratch run resumed with it, was refused as
    "trained on other data": the refusal names --init, the model and the fix. An older checkpoint, which
    did not record --init, is told by the model saved beside it."""
    base, scratch, tuned = tmp_path / "base", tmp_path / "scratch", tmp_path / "tuned"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=2, checkpoint_every=2))
    domain = write_corpus(tmp_path / "domain.txt", 100, seed=3)
    other_base = tmp_path / "other_base"
    train(tiny_train_config(domain, other_base, max_steps=1, vocab_size=10))
    train(tiny_train_config(domain, scratch, max_steps=2, checkpoint_every=2))
    train(tiny_train_config(domain, tuned, max_steps=2, checkpoint_every=2, init=str(base), model=None))

    def resume(out, **changes):
        return train(tiny_train_config(domain, out, max_steps=3, checkpoint_every=2, resume=True, model=None, **changes))

    missing = rf"The run in {tuned} fine-tunes {base} \(it was started with --init {base}\).*Resume with --init {base}"
    with pytest.raises(ValueError, match=missing):
        resume(tuned)
    with pytest.raises(ValueError, match=rf"{scratch} was trained from scratch.*adds --init {base}.*Resume without --init"):
        resume(scratch, init=str(base))
    with pytest.raises(ValueError, match=rf"fine-tunes {base} .*names --init {other_base}, another model"):
        resume(tuned, init=str(other_base))
    # A checkpoint written before --init was recorded: the saved model's provenance names it.
    payload = torch.load(tuned / "checkpoint.pt", weights_only=True)
    del payload["settings"]["init"]
    torch.save(payload, tuned / "checkpoint.pt")
    with pytest.raises(ValueError, match=missing):
        resume(tuned)
    assert resume(tuned, init=str(base))["steps"] == 3


def test_the_model_records_its_corpus_and_init_as_absolute_paths_and_resumes_from_another_directory(tmp_path, monkeypatch):
    """The provenance in the model's config.json recorded train_path and --init as typed: relative ones named nothing
    once the model left the directory it was run from. Absolute now; a resume from another directory, the paths
    spelled from there, goes on (and records the same)."""
    base = tmp_path / "base"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=2))
    domain = write_corpus(tmp_path / "domain.txt", 100, seed=3)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    train(tiny_train_config("../domain.txt", "../tuned", max_steps=2, checkpoint_every=2, init="../base", model=None))

    def recorded():
        provenance = json.loads((tmp_path / "tuned" / "config.json").read_text(encoding="utf-8"))["provenance"]
        return provenance["train_path"], provenance["init"]

    assert recorded() == (str(domain.resolve()), str(base.resolve()))
    monkeypatch.chdir(tmp_path)
    resumed = train(tiny_train_config("domain.txt", "tuned", max_steps=3, checkpoint_every=2, init="base", model=None,
                                      resume=True))
    assert resumed["steps"] == 3 and resumed["resumed_from"] == 2
    assert recorded() == (str(domain.resolve()), str(base.resolve()))


@pytest.mark.filterwarnings("ignore:.*full softmax:RuntimeWarning", "ignore:.*not in the vocabulary of --init:RuntimeWarning")
def test_resume_names_an_init_model_replaced_at_its_path(tmp_path):
    """A fine-tuning run that kept its --init vocabulary, resumed after another model was copied over that path:
    refused as "trained on other data" (the corpus and settings blamed); now it names the --init path, both
    vocabulary sizes and the fix. An older checkpoint that did not record the vocabulary keeps that refusal."""
    init, tuned = tmp_path / "init", tmp_path / "tuned"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), init, max_steps=1))
    domain = write_corpus(tmp_path / "domain.txt", 100, seed=3)
    train(tiny_train_config(domain, tuned, max_steps=2, checkpoint_every=2, init=str(init), model=None))
    size = json.loads((init / "config.json").read_text(encoding="utf-8"))["provenance"]["vocab_size"]
    shutil.rmtree(init)  # another model (a smaller vocabulary) at the same path
    train(tiny_train_config(domain, init, max_steps=1, vocab_size=10))

    def resume():
        return train(tiny_train_config(domain, tuned, max_steps=3, checkpoint_every=2, resume=True, model=None, init=str(init)))

    with pytest.raises(ValueError, match=rf"fine-tunes --init {init} .*the model at {init} has changed.*\({size} words "
                                         rf"when the run started, 10 now\).*Restore the model the run started from"):
        resume()
    payload = torch.load(tuned / "checkpoint.pt", weights_only=True)
    del payload["settings"]["init_vocab"]  # written before the vocabulary was recorded
    torch.save(payload, tuned / "checkpoint.pt")
    with pytest.raises(ValueError, match="trained on other data"):
        resume()


def test_resume_refuses_a_corpus_edited_in_place_with_its_size_and_time_kept(tmp_path):
    """The corpus's lines shuffled on disk with the file's size and mtime kept (cp --preserve, touch -r, rsync -t):
    the cache looked current by its fingerprint and the resume went on silently on the old tokens. Now the resume
    hashes the text and compares it with the digest taken as it was tokenized: other text, refused, OUTPUT_DIR as
    it was."""
    from spacy_elmo.training import data

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    meta = json.loads((out / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta[data.TEXT_DIGESTS] == {str(train_file): hashlib.sha256(train_file.read_bytes()).hexdigest()}
    assert data.same_text(out / "data")
    before = {p.name: p.read_bytes() for p in (out / "data").iterdir()}
    st = os.stat(train_file)
    lines = train_file.read_text(encoding="utf-8").splitlines()
    random.Random(1).shuffle(lines)
    train_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(train_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(train_file).st_size == st.st_size and data.cache_is_current(out / "data", data.fingerprint(train_file, "en"))
    assert not data.same_text(out / "data")
    with pytest.raises(ValueError, match="trained on other data"):
        train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))
    assert {p.name: p.read_bytes() for p in (out / "data").iterdir()} == before


def test_a_resume_reusing_its_cache_reads_its_meta_json_once(tmp_path, monkeypatch):
    """The trainer read a reused cache's meta.json (a digest per file of the corpus: 0.9 MB for 5,000 files) in
    cache_is_current, in same_text (a resume), and again in build_corpus, to return it: now once for all three
    (current_meta, passed on), and once by Corpus.load, which checks the files it loads against it."""
    from spacy_elmo.training import data

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    reads = []
    read_meta = data._read_meta
    monkeypatch.setattr(data, "_read_meta", lambda path: (reads.append(path), read_meta(path))[1])
    assert train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4
    assert reads == [out / "data", out / "data"], reads


def test_a_run_whose_cache_recorded_whole_seconds_resumes_over_it(tmp_path, monkeypatch):
    """The corpus cache now records nanosecond file times: a run started by an older spacy-elmo (whole
    seconds) resumes over the unchanged corpus reusing its cache, not reading the text again."""
    from spacy_elmo.training import data

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    meta_path = out / "data" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["fingerprint"].pop("mtime", None)
    meta["fingerprint"]["files"] = [[f[0], f[1], int(os.stat(f[0]).st_mtime), *f[3:]] for f in meta["fingerprint"]["files"]]
    meta_path.write_text(json.dumps(meta), encoding="utf-8")

    def no_reading(*args, **kwargs):
        raise AssertionError("the corpus was tokenized again")

    monkeypatch.setattr(data, "sentence_stream", no_reading)
    assert train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4
    assert json.loads(meta_path.read_text(encoding="utf-8")) == meta


@pytest.fixture(scope="module")
def resumable_runs(tmp_path_factory):
    """Runs with a checkpoint at step 2 to resume otherwise: ``(runs, base)``, runs mapping a name to
    ``(TRAIN_PATH, the settings it was started with)``; base is the model the fine-tuning runs start from."""
    tmp = tmp_path_factory.mktemp("resumable")
    text, domain = write_corpus(tmp / "a.txt", 200), write_corpus(tmp / "domain.txt", 100, seed=3)
    base = tmp / "base"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    train(tiny_train_config(text, base, max_steps=2))
    BiLM.load(base).save(tmp / "no_softmax")  # the biLM alone: fine-tuning it builds a vocabulary, flag or not
    runs = {"scratch": (text, dict(vocab_size=40)), "sentences": (text, dict(sentences=True)),
            "tuned": (domain, dict(init=str(base), model=None)),
            "tuned_new_vocab": (domain, dict(init=str(base), model=None, new_vocab=True)),
            "tuned_no_softmax": (domain, dict(init=str(tmp / "no_softmax"), model=None))}
    for name, (path, settings) in runs.items():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*has no softmax", category=RuntimeWarning)
            train(tiny_train_config(path, tmp / name, max_steps=2, checkpoint_every=2, **settings))
    torch.set_num_threads(before)
    return {name: (path, settings, tmp / name) for name, (path, settings) in runs.items()}, base


#: Every pretrain option a --resume must match, changed on a run: what the refusal must name.
RESUME_MISMATCHES = {
    "TRAIN_PATH": ("scratch", dict(train_path="OTHER"), r"was trained on other data"),
    # more words: the vocabulary size differs too, which is not --vocab-size's doing (review)
    "TRAIN_PATH, new words": ("scratch", dict(train_path="MORE_WORDS"), r"was trained on other data"),
    "--lang": ("scratch", dict(lang="de"), r"--lang en, but this run uses --lang de"),
    "--vocab-size": ("scratch", dict(vocab_size=30), r"has a vocabulary of 38 entries, but this run's has 30: --vocab-size and --min-count"),
    "--min-count": ("scratch", dict(min_count=50), r"has a vocabulary of 38 entries, but this run's has 8: --vocab-size and --min-count"),
    "--batch-size": ("scratch", dict(batch_size=4), r"--batch-size 8, but this run uses --batch-size 4"),
    "--unroll": ("scratch", dict(unroll=5), r"--unroll 10, but this run uses --unroll 5"),
    "--seed": ("scratch", dict(seed=1), r"--seed 0, but this run uses --seed 1"),
    "--negatives": ("scratch", dict(negatives=8), r"--negatives 16, but this run uses --negatives 8"),
    "--optimizer": ("scratch", dict(optimizer="adam"), r"--optimizer adagrad, but this run uses --optimizer adam"),
    "--lr": ("scratch", dict(lr=0.1), r"--lr 0.2, but this run uses --lr 0.1"),
    "--dropout": ("scratch", dict(dropout=0.2), r"--dropout 0.1, but this run uses --dropout 0.2"),
    "--clip": ("scratch", dict(clip=1.0), r"--clip 10.0, but this run uses --clip 1.0"),
    "--options": ("scratch", dict(model=dict(TINY, cell_dim=64)), r"--preset/--options ask for"),
    "--sentences added": ("scratch", dict(sentences=True), r"streams \(no --sentences\), but this run uses --sentences"),
    "--sentences left out": ("sentences", dict(sentences=False), r"--sentences --max-length 100, but this run uses streams"),
    "--max-length": ("sentences", dict(max_length=50), r"--max-length 100, but this run uses --sentences --max-length 50"),
    "--length-pool": ("sentences", dict(length_pool=4), r"--length-pool 1, but this run uses --length-pool 4"),
    "--init added": ("scratch", dict(init="BASE"), r"trained from scratch \(started without --init\), but this --resume adds --init"),
    "--init left out": ("tuned", dict(init=None), r"leaves --init out: its vocabulary would come from the corpus"),
    "--new-vocab added": ("tuned", dict(new_vocab=True), r"without --new-vocab\), but this --resume adds --new-vocab"),
    "--new-vocab left out": ("tuned_new_vocab", dict(new_vocab=False), r"--new-vocab\), but this --resume leaves --new-vocab out"),
    "--init and --new-vocab left out": ("tuned_new_vocab", dict(init=None, new_vocab=False),
                                        r"leaves --init out: its vocabulary would come from the corpus as before.*Resume "
                                        r"with --init \S+ --new-vocab"),
    # started from a model without a softmax, without --new-vocab: said so, and resumed with --init alone
    # (it said "started with --init MODEL --new-vocab", a flag nobody gave; review)
    "--init left out, init without softmax": ("tuned_no_softmax", dict(init=None),
                                              r"(?s)^(?!.*--new-vocab).*\(it was started from --init \S+, which has no "
                                              r"softmax, so a new vocabulary was built from its corpus\), but this "
                                              r"--resume leaves --init out.*Resume with --init \S+no_softmax \(and the"),
}


@pytest.mark.filterwarnings("ignore:.*full softmax:RuntimeWarning")  # --min-count 50: 8 entries
@pytest.mark.parametrize("option", list(RESUME_MISMATCHES))
def test_resume_mismatch_names_the_option(resumable_runs, tmp_path, option):
    """A --resume that changes an option the run must keep is refused naming that option and its fix:
    --new-vocab given or left out was refused as "trained on other data", and the vocabulary size cut by
    --min-count as "vocabulary size", an option pretrain does not have."""
    runs, base = resumable_runs
    name, changes, message = RESUME_MISMATCHES[option]
    path, settings, out = runs[name]
    settings = {**settings, "model": None, **changes}
    if settings.get("train_path") == "OTHER":
        settings["train_path"] = write_corpus(tmp_path / "other.txt", 200, seed=5)
    if settings.get("train_path") == "MORE_WORDS":
        settings["train_path"] = tmp_path / "more.txt"
        settings["train_path"].write_text(Path(path).read_text(encoding="utf-8") + "Zebras quagga okapis .\n" * 10,
                                          encoding="utf-8")
    if settings.get("init") == "BASE":
        settings["init"] = str(base)
    settings.setdefault("train_path", path)
    with pytest.raises(ValueError, match=message):
        train(tiny_train_config(output_dir=out, max_steps=3, checkpoint_every=2, resume=True, **settings))


def test_a_resume_naming_another_init_says_so_whatever_its_vocabulary():
    """Another --init without a softmax builds its vocabulary from the corpus, flag or not: the run's
    record of new_vocab flips, and the refusal said "adds --new-vocab", a flag nobody gave (review)."""
    from spacy_elmo.training.checkpoint import check_settings

    with pytest.raises(ValueError, match=r"fine-tunes A .* names --init B, another model"):
        check_settings({"init": "A", "new_vocab": False, "vocab_size": 38}, {"init": "B", "new_vocab": True,
                                                                            "vocab_size": 40}, "out")


@pytest.mark.parametrize("sizes, said", [
    ((100000, 100000), "has changed since the run started from it: its vocabulary holds other words than when the "
                       "run started, so"),
    ((100000, 99876), "its vocabulary is another (100,000 words when the run started, 99,876 now), so"),
])
def test_a_resume_whose_init_changed_names_the_sizes_only_where_they_differ(sizes, said):
    """The same --init path holding another model: "another (100000 words when the run started, 100000 now)" told
    nothing where the sizes were the same."""
    from spacy_elmo.training.checkpoint import check_settings

    saved = {"init": "/m/base", "init_vocab": "aaa", "vocab_size": sizes[0], "data": "d1", "new_vocab": False}
    current = {"init": "/m/base", "init_vocab": "bbb", "vocab_size": sizes[1], "data": "d2", "new_vocab": False}
    with pytest.raises(ValueError) as refused:
        check_settings(saved, current, "/runs/tuned")
    assert said in str(refused.value) and "100000" not in str(refused.value)


def test_a_resume_leaving_out_an_init_that_cannot_be_read_gives_advice_right_either_way(tmp_path):
    """A run whose vocabulary was built from its corpus fine-tunes an --init that has no softmax, or was
    given --new-vocab: which one cannot be told once that model is gone, so the refusal says both, and
    its advice (--init MODEL --new-vocab) resumes either run."""
    from spacy_elmo.training.checkpoint import check_settings

    gone = str(tmp_path / "moved")
    with pytest.raises(ValueError, match=rf"by --new-vocab or because {gone} has no softmax.*Resume with --init {gone} --new-vocab "):
        check_settings({"init": gone, "new_vocab": True}, {"init": None}, "out")


def test_checkpoint_without_new_vocab_record_resumes(resumable_runs, tmp_path):
    """A checkpoint written before --new-vocab was recorded resumes (when the rest matches)."""
    runs, _ = resumable_runs
    path, settings, out = runs["tuned_new_vocab"]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    payload = torch.load(copy / "checkpoint.pt", weights_only=True)
    assert payload["settings"].pop("new_vocab") is True
    torch.save(payload, copy / "checkpoint.pt")
    assert train(tiny_train_config(path, copy, max_steps=3, checkpoint_every=2, resume=True, **settings))["steps"] == 3


@pytest.mark.parametrize("damage", ["empty", "truncated", "text", "other"])
def test_damaged_checkpoint_is_named(tmp_path, damage):
    """A damaged checkpoint is named, with torch's own sentence but not its advice (text met its unpickler) to
    load the file with weights_only=False, which runs code from it, nor to file an issue with PyTorch."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    path = out / "checkpoint.pt"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "text":
        path.write_text("garbage\n", encoding="utf-8")
    else:
        torch.save({"step": 1}, path)
    with pytest.raises(ValueError, match="checkpoint.pt is damaged or not a spacy-elmo checkpoint") as err:
        train(tiny_train_config(train_file, out, max_steps=4, resume=True))
    message = str(err.value)
    assert "weights_only" not in message and "issue" not in message and "arbitrary code" not in message
    if damage == "text":
        assert re.search(r"UnpicklingError: \w", message)  # torch's own sentence: what it met


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(clip=0.0), "clip must be positive"),
        (dict(clip=-1.0), "clip must be positive"),
        (dict(lr=0.0), "lr must be positive"),
        (dict(init="x"), "--init fine-tunes an existing model"),  # tiny_train_config names a model
        (dict(new_vocab=True), "--new-vocab only applies with --init"),
        (dict(device="tpu"), "Unknown --device 'tpu'"),
        pytest.param(dict(device="mps"), "MPS .Apple GPU. is not available",
                     marks=pytest.mark.skipif(torch.backends.mps.is_available(), reason="an Apple GPU is here")),
        (dict(vocab_size=2), r"vocab_size must be 0 \(no cap\) or more than 3"),
        (dict(min_count=0), "min_count must be a positive integer"),
        (dict(threads=0), "threads must be a positive integer"),  # was ignored: torch's default thread count
        (dict(threads=-2), "threads must be a positive integer"),
        (dict(state_sentences=-5), "state_sentences must be 0 .no fitted state. or a positive integer"),  # was: zeros
        (dict(seed=-1), "seed must be an integer of 0 or more"),  # was NumPy's error, once the corpus was read
        (dict(min_count=10**6), "No word of the corpus occurs --min-count 1000000 times"),
    ],
)
def test_bad_training_settings(tmp_path, changes, message):
    train_file = write_corpus(tmp_path / "train.txt", 50)
    with pytest.raises((ValueError, RuntimeError), match=message):
        train(tiny_train_config(train_file, tmp_path / "out", **changes))


@pytest.mark.parametrize("content", [b"", b"  \n\n", b"\x00\x01binary\x00"])
def test_bad_heldout_fails_before_training(tmp_path, content):
    train_file = write_corpus(tmp_path / "train.txt", 100)
    held = tmp_path / "held.txt"
    held.write_bytes(content)
    with pytest.raises(ValueError, match="held.txt"):
        train(tiny_train_config(train_file, tmp_path / "out", heldout=str(held)))
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


def _files(directory):
    """Every file under ``directory`` with its bytes (a refused resume must change none)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_refused_resume_leaves_output_dir_untouched(tmp_path, monkeypatch):
    """Refusing a resume (other corpus, other settings, or a kill while reading the other corpus)
    changes no file of OUTPUT_DIR, and resuming with the original corpus then continues exactly."""
    from spacy_elmo.training import data

    train_file = write_corpus(tmp_path / "train.txt", 200)
    capped = dict(vocab_size=20, negatives=8, log_every=1)
    straight, out = tmp_path / "straight", tmp_path / "out"
    train(tiny_train_config(train_file, straight, max_steps=4, checkpoint_every=2, **capped))
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2, **capped))
    before = _files(out)

    def resume(path=train_file, **changes):
        return train(tiny_train_config(path, out, max_steps=4, checkpoint_every=2, resume=True, **{**capped, **changes}))

    other = write_corpus(tmp_path / "other.txt", 200, seed=5)
    with pytest.raises(ValueError, match="trained on other data"):
        resume(other)
    assert _files(out) == before
    with pytest.raises(ValueError, match="--optimizer adagrad, but this run uses --optimizer adam"):
        resume(other, optimizer="adam")  # refused before the other corpus is even read
    assert _files(out) == before

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C just before the other corpus's cache would be complete

    with monkeypatch.context() as m:
        m.setattr(data, "atomic_write_text", killed)
        with pytest.raises(KeyboardInterrupt):
            resume(other)
    assert _files(out) == before

    # The original text, touched since (its cache no longer matches by size and time): the new
    # cache is built beside data/ and moved in once the checkpoint accepted it.
    stamp = train_file.stat().st_mtime + 10
    os.utime(train_file, (stamp, stamp))
    assert resume()["steps"] == 4
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
    assert json.loads((out / "data" / "meta.json").read_text())["fingerprint"]["files"][0][2] == train_file.stat().st_mtime_ns
    a = [(e["step"], e["loss"]) for e in read_log(straight) if "loss" in e]
    b = [(e["step"], e["loss"]) for e in read_log(out) if "loss" in e]
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=1e-6, atol=1e-7)
    wa, wb = BiLM.load(straight).state_dict(), BiLM.load(out).state_dict()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-6, atol=1e-7)


def test_per_sentence_evaluation_bounds_the_padded_tokens_of_a_call(monkeypatch):
    """A very long 'sentence' (text without punctuation) is not batched with 31 others: per-sentence
    evaluation calls the LM on at most batch_size x ROW_TOKENS padded tokens (or one sentence), and
    the result is that of evaluating every sentence alone."""
    from spacy_elmo import BiLMConfig
    from spacy_elmo.training import evaluate as ev
    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.softmax import SoftmaxLayer
    from spacy_elmo.training.vocab import Vocab

    torch.manual_seed(0)
    words = ["the", "cat", "sees", "a", "dog", "."]
    vocab = Vocab(["<S>", "</S>", "<UNK>", *words])
    lm = BidirectionalLM(BiLM(BiLMConfig(**TINY), backend="reference"), SoftmaxLayer(vocab.size, TINY["projection_dim"]))
    rng = random.Random(0)
    sentences = [[rng.choice(words) for _ in range(rng.randint(3, 9))] for _ in range(40)]
    sentences.insert(7, [rng.choice(words) for _ in range(600)])
    calls = []
    forward = BidirectionalLM.forward

    def spy(self, chars, index_fwd, *args, **kwargs):
        calls.append(tuple(index_fwd.shape))  # (rows, padded length)
        return forward(self, chars, index_fwd, *args, **kwargs)

    monkeypatch.setattr(BidirectionalLM, "forward", spy)
    batched = ev.evaluate_sentences(lm, vocab, sentences, batch_size=32, per_sentence=True)
    budget = 32 * ev.ROW_TOKENS
    assert max(rows for rows, _ in calls) == 32  # short sentences still go 32 to a call
    assert all(rows * length <= budget or rows == 1 for rows, length in calls), calls
    calls.clear()
    alone = ev.evaluate_sentences(lm, vocab, sentences, batch_size=1, per_sentence=True)
    assert batched["n_targets"] == alone["n_targets"]
    for key in ("loss_forward", "loss_backward"):
        assert batched[key] == pytest.approx(alone[key], abs=1e-5)


def test_stream_rows_start_at_the_sentence_start_nearest_each_cut():
    """Oracle: each multiple of ceil(targets / batch_size) (below the targets) moved to its nearest sentence
    start or the stream's end (no row there) by brute force, the left one on a tie; 0 first, no row twice,
    at most batch_size rows."""
    from spacy_elmo.training.evaluate import MID_SENTENCE_CUT_TOKENS, stream_row_starts

    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(3, 40, size=int(rng.integers(1, 30)))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        n = int(lengths.sum())
        batch = int(rng.integers(1, 70))
        seg = -(-(n - 1) // batch)
        want = {0}
        for k in range(1, batch):
            if k * seg < n - 1:
                nearest = min(starts.tolist() + [n], key=lambda s: (abs(s - k * seg), s))
                want.add(nearest if abs(nearest - k * seg) < max(seg, MID_SENTENCE_CUT_TOKENS) else k * seg)
        want.discard(n)
        got = stream_row_starts(starts, n, batch)
        assert got.tolist() == sorted(want) and len(got) <= batch


def test_a_stream_with_few_sentence_ends_is_still_read_in_batch_size_rows():
    """Rows start at the sentence start nearest each cut, but a text the sentencizer found no end in (one
    sentence) was one row whatever --batch-size said; where the nearest start is a row or more away, the
    row starts at the cut itself."""
    from spacy_elmo.training.evaluate import stream_row_starts

    assert stream_row_starts(np.array([0]), 1001, 4).tolist() == [0, 250, 500, 750]
    # a short sentence, then one of 900 tokens: the cut at 250 snaps to the start at 100; 500 and 750 cannot
    assert stream_row_starts(np.array([0, 100]), 1001, 4).tolist() == [0, 100, 500, 750]
    # a short text: 3 sentences of 12 tokens at 32 rows of 2 tokens stay whole, 3 rows (each within a window)
    assert stream_row_starts(np.array([0, 12, 24]), 36, 32).tolist() == [0, 12, 24]


def test_the_last_sentence_is_cut_no_sooner_than_any_other():
    """The stream's end was no candidate: a share point in the last sentence nearer its end than its start
    cut it mid-sentence though it was shorter than two shares (17 tokens) and two windows, where the same
    sentence anywhere else stayed whole. The end is a boundary now, and no row starts there."""
    from spacy_elmo.training.evaluate import stream_row_starts

    # six sentences, the last tokens 65..99 (35); the point at 85 is 20 from 65 and 15 from the end at 100
    assert stream_row_starts(np.array([0, 13, 26, 39, 52, 65]), 100, 6).tolist() == [0, 13, 39, 52, 65]
    # the same 35 tokens between two sentences stay whole
    assert stream_row_starts(np.array([0, 13, 26, 39, 52, 65, 100, 113]), 126, 7).tolist() == [
        0, 13, 39, 52, 65, 100, 113]
    # a last sentence over two shares (250) long is still cut at a share a share from both its ends:
    # 250 and 500 move to its start at 300, 750 is 450 from it and 251 from the end
    assert stream_row_starts(np.array([0, 300]), 1001, 4).tolist() == [0, 300, 750]


def test_stream_evaluation_starts_every_row_at_a_sentence(monkeypatch):
    """evaluate --stream cut the stream into rows of ceil(targets / batch_size) tokens, each read from
    the zero state mid-sentence, so the result moved with --batch-size (the bundled model on 62 lines:
    211.04 at 1 row, 225.13 at 128). Every forward row now starts at an <S>, every backward row at an </S>. Oracle for the sums: the
    same sentence three times, 4 rows asked: each row is one sentence from the zero state, so the stream's
    NLL is three per-sentence readings (evaluated independently, per_sentence=True) plus two boundary
    targets per direction (the next row's first token, read with the row's state), and two sentences
    (2 rows) give the boundary's value."""
    from spacy_elmo import BiLMConfig
    from spacy_elmo.training import evaluate as ev
    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.softmax import SoftmaxLayer
    from spacy_elmo.training.vocab import BOS, EOS, Vocab

    torch.manual_seed(0)
    words = ["the", "cat", "sees", "a", "dog", "."]
    vocab = Vocab(["<S>", "</S>", "<UNK>", *words])
    lm = BidirectionalLM(BiLM(BiLMConfig(**TINY), backend="reference"), SoftmaxLayer(vocab.size, TINY["projection_dim"]))
    rng = random.Random(0)
    firsts = []
    encode = ev.encode_batch

    def spy(fwd, bwd, table):
        firsts.append((fwd[:, 0].tolist(), bwd[:, 0].tolist()))
        return encode(fwd, bwd, table)

    monkeypatch.setattr(ev, "encode_batch", spy)
    mixed = [[rng.choice(words) for _ in range(rng.randint(3, 9))] for _ in range(40)]
    result = ev.evaluate_sentences(lm, vocab, mixed, batch_size=8, unroll=5)
    fwd, bwd = firsts[0]
    assert len(fwd) == 8 and set(fwd) == {BOS} and set(bwd) == {EOS}
    assert result["n_targets"] == sum(len(s) + 2 for s in mixed) - 1

    one = ["the", "cat", "sees", "a", "dog", "."]
    alone = ev.evaluate_sentences(lm, vocab, [one], per_sentence=True)
    totals = {}
    for n, rows in ((2, 2), (3, 4)):
        firsts.clear()
        res = ev.evaluate_sentences(lm, vocab, [one] * n, batch_size=rows, unroll=3)
        assert firsts[0] == ([BOS] * n, [EOS] * n)
        assert res["n_targets"] == n * (len(one) + 2) - 1
        totals[n] = {d: res[f"loss_{d}"] * res["n_targets"] for d in ("forward", "backward")}
    for d in ("forward", "backward"):
        per_sentence = alone[f"loss_{d}"] * alone["n_targets"]
        boundary = totals[2][d] - 2 * per_sentence
        assert totals[3][d] == pytest.approx(3 * per_sentence + 2 * boundary, rel=1e-5)


def test_a_stream_reading_does_not_depend_on_the_window_it_is_read_in():
    """pretrain --heldout read the held-out stream with the run's --unroll and evaluate with 20, and the
    cut of a long sentence depended on it (a point a share and 20 tokens from the nearest start cut the
    sentence at 20, not at 100): the same model and text gave 43.99 in 29 rows at the step 0 of a run with
    --unroll 100 and 43.95 in 32 rows from evaluate. The rows no longer depend on the window, and the window
    (states carried between windows) does not change the result."""
    from spacy_elmo import BiLMConfig
    from spacy_elmo.training import evaluate as ev
    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.softmax import SoftmaxLayer
    from spacy_elmo.training.vocab import Vocab

    torch.manual_seed(0)
    words = ["the", "cat", "sees", "a", "dog", "."]
    vocab = Vocab(["<S>", "</S>", "<UNK>", *words])
    lm = BidirectionalLM(BiLM(BiLMConfig(**TINY), backend="reference"), SoftmaxLayer(vocab.size, TINY["projection_dim"]))
    rng = random.Random(0)
    # 152 + 5 + 5 tokens in 8 rows: shares of 21, the first point 21 tokens from the start at 0
    sentences = [[rng.choice(words) for _ in range(150)], ["a", "dog", "."], ["the", "cat", "."]]
    results = {unroll: ev.evaluate_sentences(lm, vocab, sentences, batch_size=8, unroll=unroll) for unroll in (3, 20, 100)}
    assert {r["n_rows"] for r in results.values()} == {8}
    for unroll in (3, 100):
        for key in ("loss_forward", "loss_backward"):
            assert results[unroll][key] == pytest.approx(results[20][key], rel=1e-5)


def test_a_heldout_loss_past_a_floats_range_is_logged_as_standard_json(tmp_path, monkeypatch):
    """pretrain --heldout of a broken model (a mean loss over about 709 nats) crashed with OverflowError from
    math.exp; its perplexity is inf now, logged as null (no nonstandard Infinity) beside its loss, and the
    summary's text says inf with the loss."""
    from spacy_elmo.training import evaluate as ev
    from spacy_elmo.training.evaluate import perplexity_text

    real = ev._stream_nll_sums

    def huge(*args, **kwargs):
        (fwd, bwd), n = real(*args, **kwargs)
        return [800.0 * n, 900.0 * n], n

    monkeypatch.setattr(ev, "_stream_nll_sums", huge)
    train_file, held = write_corpus(tmp_path / "train.txt", 40), write_corpus(tmp_path / "held.txt", 10, seed=2)
    summary = train(tiny_train_config(train_file, tmp_path / "out", heldout=str(held), max_steps=1, checkpoint_every=1))
    assert summary["heldout"]["perplexity"] == math.inf
    assert "geometric mean inf (mean loss 850.00 nats)" in perplexity_text(summary["heldout"])

    def refuse(constant):
        raise ValueError(constant)

    lines = (tmp_path / "out" / LOG_NAME).read_text(encoding="utf-8").splitlines()
    (event,) = [e for e in map(lambda line: json.loads(line, parse_constant=refuse), lines) if e.get("event") == "heldout"]
    assert event["perplexity"] is None and event["loss_forward"] == pytest.approx(800.0)
    # a resume returns the logged number as the run measured it: inf, not the log's null (None)
    again = train(tiny_train_config(train_file, tmp_path / "out", heldout=str(held), max_steps=1, checkpoint_every=1,
                                    resume=True))
    assert again["heldout"]["perplexity"] == again["heldout"]["perplexity_forward"] == math.inf
    assert again["heldout"]["loss_forward"] == pytest.approx(800.0)
    assert len([e for e in read_log(tmp_path / "out") if e.get("event") == "heldout"]) == 1  # not measured again


def test_resume_after_a_kill_inside_a_log_line(tmp_path):
    """A run killed while appending to train_log.jsonl leaves half a line; the resume drops it
    (its step is redone) and the log ends as a straight run's."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train(tiny_train_config(train_file, straight, max_steps=4, checkpoint_every=2))

    def crash(step, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, killed, max_steps=4, checkpoint_every=2), on_step=crash)
    with open(killed / LOG_NAME, "a", encoding="utf-8") as f:
        f.write('{"step": 3, "epoch": 0, "loss": 3.9')  # cut off by the kill
    train(tiny_train_config(train_file, killed, max_steps=4, checkpoint_every=2, resume=True))
    a = [e["loss"] for e in read_log(straight) if "loss" in e]
    b = [e["loss"] for e in read_log(killed) if "loss" in e]
    assert len(b) == 4
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def _heldout_events(out):
    return [{k: v for k, v in e.items()} for e in read_log(out) if e.get("event") == "heldout"]


@pytest.mark.parametrize("kill_at", [2, 4], ids=["mid-run", "last-step"])
def test_resume_after_a_kill_during_heldout_evaluation(tmp_path, monkeypatch, kill_at):
    """A kill after the checkpoint is written but before its held-out perplexity is logged:
    the resume evaluates that checkpoint's held-out text, so the log (and, at the last step,
    the summary) is the straight run's."""
    import spacy_elmo.training.evaluate as ev

    train_file = write_corpus(tmp_path / "train.txt", 200)
    held = write_corpus(tmp_path / "held.txt", 30, seed=1)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    settings = dict(max_steps=4, checkpoint_every=2, heldout=str(held))
    train(tiny_train_config(train_file, straight, **settings))
    real = ev.evaluate_sentences
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == kill_at // 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(ev, "evaluate_sentences", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, killed, **settings))
    monkeypatch.setattr(ev, "evaluate_sentences", real)
    summary = train(tiny_train_config(train_file, killed, resume=True, **settings))
    a, b = _heldout_events(straight), _heldout_events(killed)
    assert [e["step"] for e in b] == [e["step"] for e in a] == [2, 4]
    for x, y in zip(a, b):
        assert y["perplexity"] == pytest.approx(x["perplexity"], rel=1e-6)
    assert summary["heldout"] is not None and summary["heldout"]["perplexity"] == pytest.approx(a[-1]["perplexity"], rel=1e-6)
    np.testing.assert_allclose([e["loss"] for e in read_log(killed) if "loss" in e],
                               [e["loss"] for e in read_log(straight) if "loss" in e], rtol=1e-6, atol=1e-7)


def test_a_kill_while_writing_the_checkpoint_leaves_no_temporary_file(tmp_path, monkeypatch, ended_pid):
    """The checkpoint (model, softmax and optimizer state: 160 MB for the small preset) is written
    beside its final name: Ctrl-C during the write removes that file, and a resume removes the one
    a SIGKILL left; the resumed run is the straight one."""
    import spacy_elmo.training.checkpoint as ck

    train_file = write_corpus(tmp_path / "train.txt", 200)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train(tiny_train_config(train_file, straight, max_steps=4, checkpoint_every=2))
    real_save = torch.save
    calls = []

    def interrupted_save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the step-4 checkpoint: half written, then Ctrl-C
            f.write(b"partial")
            raise KeyboardInterrupt
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(ck.torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, killed, max_steps=4, checkpoint_every=2))
    monkeypatch.setattr(ck.torch, "save", real_save)
    assert sorted(p.name for p in killed.iterdir() if "checkpoint" in p.name) == ["checkpoint.pt"]
    for name in (f".checkpoint.pt.{ended_pid}.tmp", ".checkpoint.pt.tmp4242"):  # what a SIGKILL leaves (now, before)
        (killed / name).write_bytes(b"partial")
    train(tiny_train_config(train_file, killed, max_steps=4, checkpoint_every=2, resume=True))
    assert sorted(p.name for p in killed.iterdir() if "checkpoint" in p.name) == ["checkpoint.pt"]
    np.testing.assert_allclose([e["loss"] for e in read_log(killed) if "loss" in e],
                               [e["loss"] for e in read_log(straight) if "loss" in e], rtol=1e-6, atol=1e-7)


def test_sentences_run_resumes_whatever_unroll_its_checkpoint_recorded(tmp_path):
    """Sentence batches do not depend on --unroll, which --sentences now refuses: a checkpoint that
    recorded another one (older versions ignored --unroll with --sentences) still resumes."""
    from spacy_elmo.training import checkpoint as ckpt

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    mode = dict(sentences=True, max_length=7, checkpoint_every=2)
    train(tiny_train_config(train_file, out, max_steps=2, **mode))
    payload = ckpt.load_checkpoint(out)
    assert "unroll" not in payload["settings"]
    payload["settings"]["unroll"] = 5  # as written by a `--sentences --unroll 5` run of an older version
    ckpt.save_checkpoint(out, payload)
    assert train(tiny_train_config(train_file, out, max_steps=4, resume=True, **mode))["steps"] == 4


def _losses(out):
    return [e["loss"] for e in read_log(out) if "loss" in e]


def test_a_sentence_resume_keeps_the_length_pool_of_its_checkpoint(tmp_path):
    """--length-pool left out: 1 for a new run, the checkpoint's on --resume, which continues exactly; a
    checkpoint written before the option (no record) was sorted in pools of 50 and resumes so, and another
    --length-pool on its resume is refused as any changed option is."""
    from spacy_elmo.training import checkpoint as ckpt
    from spacy_elmo.training.sentences import UNRECORDED_POOL

    train_file = write_corpus(tmp_path / "train.txt", 300)
    mode = dict(sentences=True, max_length=7, checkpoint_every=2, log_every=1)
    default = tmp_path / "default"
    train(tiny_train_config(train_file, default, max_steps=2, **mode))
    assert ckpt.load_checkpoint(default)["settings"]["length_pool"] == 1
    assert next(e for e in read_log(default) if e.get("event") == "start")["config"]["length_pool"] == 1
    for pool in (4, UNRECORDED_POOL):
        straight, resumed = tmp_path / f"straight{pool}", tmp_path / f"resumed{pool}"
        train(tiny_train_config(train_file, straight, max_steps=4, length_pool=pool, **mode))
        train(tiny_train_config(train_file, resumed, max_steps=2, length_pool=pool, **mode))
        if pool == UNRECORDED_POOL:  # as an older version wrote it
            payload = ckpt.load_checkpoint(resumed)
            del payload["settings"]["length_pool"]
            ckpt.save_checkpoint(resumed, payload)
            with pytest.raises(ValueError, match="--length-pool 50, but this run uses --length-pool 1"):
                train(tiny_train_config(train_file, resumed, max_steps=4, length_pool=1, resume=True, **mode))
        train(tiny_train_config(train_file, resumed, max_steps=4, resume=True, **mode))
        assert ckpt.load_checkpoint(resumed)["settings"]["length_pool"] == pool
        np.testing.assert_allclose(_losses(resumed), _losses(straight), rtol=1e-6, atol=1e-7)
    assert not np.allclose(_losses(tmp_path / "straight4")[:2], _losses(default))  # the pool changes the batches


def test_vocabulary_options_unused_by_init_warn(tmp_path):
    """--init of a model with a softmax keeps its vocabulary: --vocab-size / --min-count would be
    silently ignored, so they warn (and name --new-vocab), which does use them."""
    base = tmp_path / "base"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=2))
    domain = write_corpus(tmp_path / "domain.txt", 100, seed=3)
    with pytest.warns(RuntimeWarning, match="--vocab-size 20 and --min-count 2 unused: --init .* --new-vocab") as caught:
        train(tiny_train_config(domain, tmp_path / "kept", max_steps=1, init=str(base), model=None, vocab_size=20, min_count=2))
    assert len([w for w in caught if "unused" in str(w.message)]) == 1
    assert (tmp_path / "kept" / "vocab.txt").read_text() == (base / "vocab.txt").read_text()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with --new-vocab they shape the vocabulary: no warning
        train(tiny_train_config(domain, tmp_path / "new", max_steps=1, init=str(base), model=None, vocab_size=20,
                                min_count=2, new_vocab=True, negatives=8))
    assert len((tmp_path / "new" / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 20


def test_fine_tuning_on_words_the_kept_vocabulary_lacks_warns_with_their_share(tmp_path):
    """--init keeps the model's vocabulary: a corpus of other words trained every target as <UNK>
    without a word. The warning counts the corpus's words outside it (the oracle: the files' words
    against vocab.txt); a corpus the vocabulary covers does not warn."""
    import warnings

    base = tmp_path / "base"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 200), base, max_steps=1))
    known = set((base / "vocab.txt").read_text(encoding="utf-8").split())
    domain = tmp_path / "domain.txt"
    domain.write_text("Zebras jump over lazy foxes .\nThe cat sees a fish .\n" * 30, encoding="utf-8")
    words = domain.read_text(encoding="utf-8").split()
    n_oov = sum(w not in known for w in words)
    assert 0.2 < n_oov / len(words) < 1  # "." and the second line are known
    with pytest.warns(RuntimeWarning, match=rf"{100 * n_oov / len(words):.1f}% of this corpus's words \({n_oov} of "
                                            rf"{len(words)}\) are not in the vocabulary of --init .* --new-vocab"):
        train(tiny_train_config(domain, tmp_path / "tuned", max_steps=1, init=str(base), model=None))
    with warnings.catch_warnings():  # a resume cannot take --new-vocab: the warning is the first run's alone
        warnings.simplefilter("error", RuntimeWarning)
        train(tiny_train_config(domain, tmp_path / "tuned", max_steps=2, init=str(base), model=None, resume=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        train(tiny_train_config(write_corpus(tmp_path / "b.txt", 100, seed=4), tmp_path / "covered", max_steps=1,
                                init=str(base), model=None))


def test_a_word_spelled_in_two_normalization_forms_warns_once(tmp_path):
    """Text is not Unicode-normalized: 'café' precomposed (NFC) and as e + U+0301 (NFD) are two vocabulary types.
    pretrain warns once, when the run begins, counting such words (café, naïve: 2) and naming the most frequent
    one's spellings; a resume and an all-NFC corpus do not warn."""
    import unicodedata
    import warnings

    nfc = "The caf\u00e9 is na\u00efve .\nA caf\u00e9 is here .\n"
    corpus = write_corpus(tmp_path / "a.txt", 60)
    with open(corpus, "a", encoding="utf-8") as f:
        f.write(nfc * 3 + unicodedata.normalize("NFD", nfc))
    out = tmp_path / "out"
    with pytest.warns(RuntimeWarning, match=r"2 words of the corpus are spelled in more than one Unicode normalization "
                                            r"form, e\.g\. 'caf\\xe9' and 'cafe\\u0301', each 'caf\u00e9' in NFC") as caught:
        train(tiny_train_config(corpus, out, max_steps=1))
    assert len([w for w in caught if "normalization form" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        train(tiny_train_config(corpus, out, max_steps=2, resume=True))
        plain = write_corpus(tmp_path / "b.txt", 60)
        with open(plain, "a", encoding="utf-8") as f:
            f.write(nfc * 3)
        train(tiny_train_config(plain, tmp_path / "nfc", max_steps=1))


def test_a_byte_order_mark_at_the_start_of_every_file_is_no_text(tmp_path):
    """pretrain (each file of a directory) and evaluate kept a leading BOM as text: the first token
    became '\\ufeffThe', its own vocabulary entry, and an OOV word for evaluate. One elsewhere in a
    file is the character U+FEFF and stays in its token."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, seed in (("a.txt", 0), ("b.txt", 1)):
        path = write_corpus(corpus / name, 60, seed=seed)
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with open(corpus / "b.txt", "a", encoding="utf-8") as f:
        f.write("The dog sees a \ufefffish .\n")
    out = tmp_path / "out"
    train(tiny_train_config(corpus, out, max_steps=1, checkpoint_every=1))
    assert [t for t in Corpus.load(out / "data").types if "\ufeff" in t] == ["\ufefffish"]
    assert "\ufeff" not in (out / "vocab.txt").read_text(encoding="utf-8").replace("\ufefffish\n", "")
    held = write_corpus(tmp_path / "held.txt", 30, seed=7)
    marked = tmp_path / "marked.txt"
    marked.write_bytes(b"\xef\xbb\xbf" + held.read_bytes())
    plain = evaluate_model_dir(out, held)
    assert plain["oov_rate"] == 0.0
    assert evaluate_model_dir(out, marked) == plain


def _other_tokenizer(monkeypatch, tokens_differ=True):
    """Simulate another tokenizer of --lang en (as installing SudachiPy changes ja's): another tokenizer
    block and, with ``tokens_differ``, spaCy's xx tokenizer, which keeps "doesn't" whole."""
    from spacy_elmo.training import data

    real = data.make_nlp
    if tokens_differ:
        monkeypatch.setattr(data, "make_nlp", lambda lang, **given: real("xx"))
    monkeypatch.setattr(data, "tokenizer_settings", lambda nlp: {"@tokenizers": "spacy.en.OtherTokenizer"})


def _two_steps_with_doesnt(tmp_path):
    """Two steps (a checkpoint) on a corpus with "doesn't" (which tokenizers split differently) into
    ``tmp_path / "out"``: ``(out, resume)``, ``resume()`` going on to step 4."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    with open(train_file, "a", encoding="utf-8") as f:
        f.write("The cat doesn't see a fish .\n")
    out = tmp_path / "out"
    capped = dict(vocab_size=20, negatives=8)
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2, **capped))

    def resume():
        return train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True, **capped))

    return out, resume


def test_resume_after_spacy_rules_changed_is_refused_or_continues(tmp_path, monkeypatch):
    """spaCy's rules (tokenizer exceptions, affixes, sentencizer punctuation) were not in the cache's
    fingerprint: a resume under a spaCy whose rules changed reused the old tokens. Now the text is
    tokenized again: other tokens are refused naming both rule digests (OUTPUT_DIR untouched), a rule
    change that leaves these tokens as they were continues exactly."""
    from spacy_elmo.training import data

    out, resume = _two_steps_with_doesnt(tmp_path)
    before = _files(out)
    earlier = json.loads((out / "data" / "meta.json").read_text(encoding="utf-8"))["fingerprint"]["tokenization"]
    real = data.make_nlp

    def with_special_case(word):
        def make_nlp(lang, **given):
            nlp = real(lang)
            nlp.tokenizer.add_special_case(word, [{"ORTH": word}])
            return nlp
        return make_nlp

    with monkeypatch.context() as m:
        m.setattr(data, "make_nlp", with_special_case("doesn't"))
        with pytest.raises(ValueError, match="other tokens of the same text") as err:
            resume()
        now = data.tokenization(data.make_nlp("en"))
    assert now["tokenizer"] == earlier["tokenizer"] and now["spacy_rules"] != earlier["spacy_rules"]
    assert (f"token rules {TOKEN_RULES}, spaCy rules {earlier['spacy_rules'][:16]}, this run reads it with " in str(err.value)
            and f"token rules {TOKEN_RULES}, spaCy rules {now['spacy_rules'][:16]}, and the tokens differ" in str(err.value))
    assert _files(out) == before
    with monkeypatch.context() as m:
        m.setattr(data, "make_nlp", with_special_case("xylophone's"))  # not in the corpus: the same tokens
        assert resume()["steps"] == 4
    meta = json.loads((out / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta["fingerprint"]["tokenization"]["spacy_rules"] != earlier["spacy_rules"]


def test_resume_with_another_tokenizer_is_refused_naming_it(tmp_path, monkeypatch):
    """The corpus cache data/ was fingerprinted without the tokenizer: a resume after the tokenizer
    changed silently went on with the old tokens. Now the text is tokenized again: other tokens are
    refused (naming both tokenizers, OUTPUT_DIR untouched), the same tokens continue."""
    out, resume = _two_steps_with_doesnt(tmp_path)
    assert "n't" in Corpus.load(out / "data").types
    before = _files(out)

    with monkeypatch.context() as m:
        _other_tokenizer(m)
        with pytest.raises(ValueError, match=r"other tokens of the same text: its corpus was read with tokenizer "
                           rf'\{{"@tokenizers": "spacy.Tokenizer.v1".*token rules {TOKEN_RULES}, spaCy rules \w+, this run reads it '
                           rf'with tokenizer \{{"@tokenizers": "spacy.en.OtherTokenizer"\}}, token rules {TOKEN_RULES}'):
            resume()
    assert _files(out) == before
    # A cache of an older spacy-elmo did not record its tokenization.
    meta_path = out / "data" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    del meta["fingerprint"]["tokenization"]
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with monkeypatch.context() as m:
        _other_tokenizer(m)
        with pytest.raises(ValueError, match=r"read with a tokenizer not recorded .a spacy-elmo before token rules 2."):
            resume()
    with monkeypatch.context() as m:
        _other_tokenizer(m, tokens_differ=False)  # a new tokenizer block, the same tokens: exact
        assert resume()["steps"] == 4
    assert json.loads(meta_path.read_text(encoding="utf-8"))["tokenizer"] == {"@tokenizers": "spacy.en.OtherTokenizer"}


def test_the_first_tokens_per_s_after_a_resume_leaves_out_its_held_out_evaluation(tmp_path, monkeypatch):
    """A resume that measures the checkpoint's held-out perplexity first (a --heldout added on resume) starts its
    first tok/s window after that evaluation, as each checkpoint's evaluation does. A fake clock (trainer.time)
    that the evaluation alone moves by 1,000 s: no timing of the machine."""
    import types

    import spacy_elmo.training.evaluate as ev
    import spacy_elmo.training.trainer as tr

    train_file = write_corpus(tmp_path / "train.txt", 200)
    held = write_corpus(tmp_path / "held.txt", 30, seed=1)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    clock = [0.0]
    real = ev.evaluate_sentences

    def slow_evaluation(*args, **kwargs):
        clock[0] += 1000.0
        return real(*args, **kwargs)

    def perf_counter():
        clock[0] += 1.0  # one second between any two readings outside the evaluation
        return clock[0]

    monkeypatch.setattr(ev, "evaluate_sentences", slow_evaluation)
    monkeypatch.setattr(tr, "time", types.SimpleNamespace(perf_counter=perf_counter, time=time.time))
    train(tiny_train_config(train_file, out, max_steps=3, checkpoint_every=2, resume=True, heldout=str(held)))
    log = read_log(out)
    assert [e["step"] for e in log if e.get("event") == "heldout"] == [2, 3]  # the resume's, then the last step's
    first = [e for e in log if e.get("step") == 3 and "loss" in e][0]
    tokens = first["tokens"] - [e for e in log if e.get("step") == 2 and "loss" in e][0]["tokens"]
    # One step's tokens over the fake seconds between the window's two readings (1 s): not over 1,000 s more.
    assert first["tokens_per_s"] == pytest.approx(tokens / 1.0)


def test_a_resumed_run_starts_each_epoch_from_the_zero_state(tmp_path):
    """A new epoch reshuffles the streams: its first step reads from the zero state, not the state carried from
    the last step of the epoch before, also when that state comes from the checkpoint (a resume at the epoch's
    boundary). Oracle: the step's loss recomputed from the checkpoint's weights with no state (full softmax,
    no dropout: deterministic)."""
    from spacy_elmo.training.checkpoint import load_checkpoint
    from spacy_elmo.training.lm import BidirectionalLM, encode_batch
    from spacy_elmo.training.trainer import _build_model
    from spacy_elmo.training.vocab import CharTable

    train_file = write_corpus(tmp_path / "train.txt", 60)
    out = tmp_path / "out"
    settings = dict(negatives=10_000, dropout=0.0, batch_size=4, unroll=5, checkpoint_every=1000)
    first = tiny_train_config(train_file, out, max_steps=None, epochs=1, **settings)
    with pytest.warns(RuntimeWarning, match="using the full softmax"):
        train(first)  # one epoch: the checkpoint at its last step carries that step's state
    spe = [e for e in read_log(out) if e.get("event") == "start"][0]["steps_per_epoch"]
    payload = load_checkpoint(out)
    assert payload["step"] == spe and "lstm_h" in payload["ranks"][0]
    with pytest.warns(RuntimeWarning, match="using the full softmax"):
        train(tiny_train_config(train_file, out, max_steps=spe + 1, resume=True, **settings))
    logged = [e for e in read_log(out) if e.get("step") == spe + 1 and "loss" in e][0]

    bilm, softmax, vocab, corpus, _ = _build_model(first, Corpus.load(out / "data"), payload)
    lm = BidirectionalLM(bilm, softmax)
    lm.load_state_dict(payload["model"])
    lm.eval()
    fwd, bwd = StreamBatcher(corpus, 4, 5, seed=0).batch(1, 0)
    chars, i_f, i_b = encode_batch(fwd[:, :-1], bwd[:, :-1], CharTable(vocab, bilm.config.max_characters_per_token))
    with torch.no_grad():
        res = lm(chars, i_f, i_b, vocab.target_ids(fwd[:, 1:]), vocab.target_ids(bwd[:, 1:]), torch.full((4,), 5), None)
    n = 4 * 5
    assert logged["loss"] == pytest.approx((float(res.nll_fwd.sum()) / n + float(res.nll_bwd.sum()) / n) / 2, rel=1e-5)


def test_a_row_starts_mid_sentence_where_the_nearest_boundary_is_20_tokens_or_more_away():
    """MID_SENTENCE_CUT_TOKENS is 20 (the shares here are 10): a point 20 tokens or more from the nearest sentence
    start or the stream's end cuts the sentence there, one nearer does not. The value decides the rows a text is read
    in (and their digest, which a resume compares with the log's): 21 left out the row at 20."""
    from spacy_elmo.training.evaluate import stream_row_starts

    # one sentence of 101 tokens in 10 rows: the points 10 and 90 are 10 and 11 from its ends (no rows there),
    # 20 is 20 from its start and 80 21 from its end
    assert stream_row_starts(np.array([0]), 101, 10).tolist() == [0, 20, 30, 40, 50, 60, 70, 80]


def test_the_row_starts_digest_is_sha256_of_the_starts_as_little_endian_int64():
    """A held-out line of train_log.jsonl records the digest of its rows, and a resume reuses the logged number
    only where this run's digest equals it: the digest of given starts stays fixed across versions (16 hex digits of
    sha256 of the starts as little-endian int64), and int32 starts have the digest of the same int64 ones."""
    from spacy_elmo.training.evaluate import row_starts_digest

    rows = [0, 13, 39, 52, 65]
    assert hashlib.sha256(np.array(rows, dtype="<i8").tobytes()).hexdigest()[:16] == "8de742e97cf63546"
    for dtype in (np.int64, np.int32, ">i8"):
        assert row_starts_digest(np.array(rows, dtype=dtype)) == "8de742e97cf63546", dtype


def test_a_nan_result_is_logged_as_null_and_read_back_as_nan():
    """A model with NaN weights gives NaN losses and perplexities: json_ready makes them null as it makes an inf
    perplexity null (json.dumps wrote the nonstandard NaN), and from_json_ready reads a null perplexity back as NaN
    where its loss is null too (inf only beside a number), as perplexity_text shows it."""
    from spacy_elmo.training.evaluate import from_json_ready, json_ready, perplexity_text

    nan = math.nan
    result = {"perplexity_forward": nan, "perplexity_backward": 3.0, "perplexity": nan, "loss_forward": nan,
              "loss_backward": math.log(3.0), "n_targets": 5, "mode": "stream", "n_rows": 1}
    ready = json_ready(result)
    line = json.dumps(ready, allow_nan=False)  # standard JSON: ValueError on NaN
    assert ready["loss_forward"] is ready["perplexity_forward"] is ready["perplexity"] is None
    back = from_json_ready(json.loads(line))
    assert all(math.isnan(back[k]) for k in ("loss_forward", "perplexity_forward", "perplexity")), back
    assert back["perplexity_backward"] == 3.0 and back["loss_backward"] == result["loss_backward"]
    assert perplexity_text(ready) == perplexity_text(back) == (
        "perplexity (one stream): forward nan, backward 3.00, geometric mean nan")


def test_each_log_line_averages_every_step_since_the_line_before_and_a_resume_logs_the_same(tmp_path):
    """The window restarted after each checkpoint: with --log-every 3 and --checkpoint-every 4 the step-6 line
    averaged steps 5-6 only, step 4's loss in no line (review). Every checkpoint step is logged now: each line's
    sampled_perplexity is exp of the mean loss of the window_steps steps since the line before, every step in
    one line; a run killed right after a checkpoint resumes to the same lines, bit for bit."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    settings = dict(max_steps=9, log_every=3, checkpoint_every=4)
    losses = {}
    train(tiny_train_config(train_file, tmp_path / "straight", **settings), on_step=lambda s, l: losses.__setitem__(s, l))
    lines = [e for e in read_log(tmp_path / "straight") if "loss" in e]
    assert [e["step"] for e in lines] == [3, 4, 6, 8, 9]
    previous = 0
    for e in lines:
        assert e["window_steps"] == e["step"] - previous
        window = [losses[s] for s in range(previous + 1, e["step"] + 1)]
        assert e["sampled_perplexity"] == pytest.approx(math.exp(sum(window) / len(window)), rel=1e-12)
        previous = e["step"]

    def crash(step, loss):
        if step == 5:  # right after the checkpoint at 4
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(train_file, tmp_path / "killed", **settings), on_step=crash)
    train(tiny_train_config(train_file, tmp_path / "killed", resume=True, **settings))
    keys = ("step", "window_steps", "loss", "sampled_perplexity", "tokens")
    resumed = [e for e in read_log(tmp_path / "killed") if "loss" in e]
    assert [[e[k] for k in keys] for e in resumed] == [[e[k] for k in keys] for e in lines]


def test_a_resume_is_recorded_in_the_log(tmp_path):
    """train_log.jsonl recorded a run's start (its settings) but never a resume, which may change --max-steps,
    --heldout and more (review). A resume appends a "resume" event as the start's: its step and settings."""
    train_file = write_corpus(tmp_path / "train.txt", 100)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    train(tiny_train_config(train_file, out, max_steps=3, checkpoint_every=2, resume=True))
    events = [e for e in read_log(out) if e.get("event") in ("start", "resume")]
    assert [(e["event"], e["step"], e["total_steps"], e["config"]["max_steps"], e["config"]["resume"]) for e in events] \
        == [("start", 0, 2, 2, False), ("resume", 2, 3, 3, True)]
    assert events[1].keys() == events[0].keys()
    assert [e["step"] for e in read_log(out) if "loss" in e] == [1, 2, 3]
