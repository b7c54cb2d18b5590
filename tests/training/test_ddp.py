"""DistributedDataParallel with 2 CPU processes (gloo), data sharded by rank."""

import os
import re
import socket
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from spacy_elmo import BiLM
from spacy_elmo.training.trainer import read_log

from .conftest import first_step_nll, tiny_train_config, write_corpus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, train_path: str, out: str, result_dir: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from spacy_elmo.training.trainer import train
    from spacy_elmo.training.stream import StreamBatcher
    from spacy_elmo.training.data import Corpus

    # state_sentences: rank 0 fits the initial state at the step-2 checkpoint, then DDP trains on.
    train(tiny_train_config(train_path, out, max_steps=4, checkpoint_every=2, state_sentences=64))
    torch.save({"rank": rank, "first_batch": StreamBatcher(Corpus.load(os.path.join(out, "data")), 8, 10, 0, rank, world).batch(0, 0)[0]},
               os.path.join(result_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 400)
    out = tmp_path / "out"
    mp.spawn(_worker, args=(2, _free_port(), str(train_file), str(out), str(tmp_path)), nprocs=2, join=True)
    log = read_log(out)
    start = log[0]
    assert start["event"] == "start" and start["world"] == 2
    steps = [e for e in log if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3, 4]
    # 2 processes x 8 rows x 10 steps x 2 directions per step.
    assert start["config"]["batch_size"] == 8
    shards = [torch.load(tmp_path / f"rank{r}.pt")["first_batch"] for r in range(2)]
    assert not torch.equal(shards[0], shards[1])  # each rank reads its own rows
    from spacy_elmo.training.checkpoint import load_checkpoint

    states = load_checkpoint(out)["ranks"]
    for rng in ("torch_rng", "sampler_rng"):  # each rank draws its own dropout masks and negatives
        assert not torch.equal(states[0][rng], states[1][rng]), rng
    assert BiLM.load(out).initial_state is not None  # rank 0 wrote the model, with its fitted state


def _resume_worker(rank: int, world: int, port: int, train_path: str, root: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from spacy_elmo.training.trainer import train

    def run(out, on_step=None, **kw):
        # each rank's steps prepared ahead (off by default on the CPU): its sampler state saved at the step boundary
        cfg = tiny_train_config(train_path, os.path.join(root, out), max_steps=6, checkpoint_every=3, log_every=1,
                                prefetch=True, **kw)
        train(cfg, on_step=on_step)

    run("straight")

    def crash(step, loss):
        if step == 5:  # both ranks stop past the checkpoint at step 3: steps 4 and 5 are redone
            raise KeyboardInterrupt

    try:
        run("killed", on_step=crash)
    except KeyboardInterrupt:
        pass
    run("killed", resume=True)
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_resume_continues_exactly(tmp_path):
    """Each rank's dropout, sampler and carried states come back from the checkpoint: with
    2 processes, 6 straight steps log the losses of 3 steps + kill + resume 3 steps."""
    train_file = write_corpus(tmp_path / "train.txt", 400)
    mp.spawn(_resume_worker, args=(2, _free_port(), str(train_file), str(tmp_path)), nprocs=2, join=True)
    straight = [e for e in read_log(tmp_path / "straight") if "loss" in e]
    resumed = [e for e in read_log(tmp_path / "killed") if "loss" in e]
    assert [e["step"] for e in resumed] == [e["step"] for e in straight] == [1, 2, 3, 4, 5, 6]
    for key in ("loss_forward", "loss_backward", "grad_norm"):
        np.testing.assert_allclose([e[key] for e in resumed], [e[key] for e in straight], rtol=1e-6, atol=1e-7)
    wa, wb = BiLM.load(tmp_path / "straight").state_dict(), BiLM.load(tmp_path / "killed").state_dict()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-6, atol=1e-7)


def _sync_worker(rank: int, world: int, port: int, train_path: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from spacy_elmo.training.trainer import train

    train(tiny_train_config(train_path, out, batch_size=8, **_DETERMINISTIC))
    dist.destroy_process_group()


#: Full softmax (negatives >= vocabulary) and no dropout: nothing random in a step.
_DETERMINISTIC = dict(max_steps=4, checkpoint_every=4, negatives=10_000, dropout=0.0, log_every=1)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*full softmax:RuntimeWarning")
def test_ddp_equals_one_process_on_the_same_rows(tmp_path):
    """2 ranks x 8 streams average their gradients: the same updates as one process reading
    all 16 streams (rank k owns streams 8k .. 8k + 7 of the 16)."""
    train_file = write_corpus(tmp_path / "train.txt", 400)
    mp.spawn(_sync_worker, args=(2, _free_port(), str(train_file), str(tmp_path / "ddp")), nprocs=2, join=True)
    from spacy_elmo.training.trainer import train

    train(tiny_train_config(train_file, tmp_path / "one", batch_size=16, **_DETERMINISTIC))
    ddp = [e for e in read_log(tmp_path / "ddp") if "loss" in e]
    one = [e for e in read_log(tmp_path / "one") if "loss" in e]
    assert len(ddp) == len(one) == 4
    for key in ("loss_forward", "loss_backward", "grad_norm", "tokens"):
        np.testing.assert_allclose([e[key] for e in ddp], [e[key] for e in one], rtol=1e-5, atol=1e-6)
    wa, wb = BiLM.load(tmp_path / "one").state_dict(), BiLM.load(tmp_path / "ddp").state_dict()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_gradients_have_the_layout_of_their_parameters(backend):
    """DDP copies every gradient into a bucket laid out like its parameter and warns ('Grad
    strides do not match bucket view strides', on every rank, at every DDP run) when they
    differ: the fused char CNN gave the width-1 filter's (C, D, 1) gradient strides (D, 1, D)."""
    from spacy_elmo import batch_to_ids
    from spacy_elmo.bilm import BiLMConfig
    from spacy_elmo.ops import fused_available

    if backend == "fused" and not fused_available():
        pytest.skip("compiled kernels not built")
    from .conftest import TINY

    torch.manual_seed(0)
    bilm = BiLM(BiLMConfig.from_dict(TINY), backend=backend)
    words = [["The", "bank", "of", "a", "river"], ["밥", "먹었어요"], ["x"]]
    out = bilm(batch_to_ids(words, max_characters_per_token=TINY["max_characters_per_token"]))
    sum(t.float().sum() for t in out.activations).backward()
    for name, p in bilm.named_parameters():
        if p.grad is not None:
            assert p.grad.stride() == p.stride(), name


def _padded_epochs_worker(rank: int, world: int, port: int, train_path: str, root: str) -> None:
    """Sentence runs of 7 steps over 9 batches per epoch (2 ranks: 5 steps, the last one padded with the epoch's first
    batch), straight and killed at step 4 then resumed from the checkpoint of step 3; the same as a run from before
    the padding (its epochs of 4 steps), whose checkpoint recorded none."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from spacy_elmo.training import checkpoint as ckpt
    from spacy_elmo.training import trainer
    from spacy_elmo.training.sentences import SentenceBatcher

    class Unpadded(SentenceBatcher):  # the batcher of an older version
        def __init__(self, *args, pad=True, **kwargs):
            super().__init__(*args, pad=False, **kwargs)

    def run(out, on_step=None, **kw):
        train_cfg = tiny_train_config(train_path, os.path.join(root, out), max_steps=7, checkpoint_every=3, log_every=1,
                                      sentences=True, max_length=7, batch_size=32, **kw)
        trainer.train(train_cfg, on_step=on_step)

    def crash(step, loss):
        if step == 4:
            raise KeyboardInterrupt

    for name in ("padded", "unpadded"):
        trainer.SentenceBatcher = Unpadded if name == "unpadded" else SentenceBatcher
        run(f"{name}-straight")
        try:
            run(f"{name}-killed", on_step=crash)
        except KeyboardInterrupt:
            pass
        if name == "unpadded" and rank == 0:  # as the older version wrote it
            payload = ckpt.load_checkpoint(os.path.join(root, "unpadded-killed"))
            del payload["settings"][ckpt.PADDED_EPOCHS]
            ckpt.save_checkpoint(os.path.join(root, "unpadded-killed"), payload)
        dist.barrier()
        trainer.SentenceBatcher = SentenceBatcher  # this version resumes it
        run(f"{name}-killed", resume=True)
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_sentence_epochs_are_padded_and_resume_exactly(tmp_path):
    """--sentences under DDP trained n_batches // world steps an epoch: the n_batches % world batches left over
    (a different few each epoch) were never trained. The epoch is padded with its first batches (9 batches, 2 ranks:
    5 steps, not 4), a resume continues it exactly, and a checkpoint of a run from before goes on unpadded, exactly."""
    from spacy_elmo.training import checkpoint as ckpt

    train_file = write_corpus(tmp_path / "train.txt", 150)
    mp.spawn(_padded_epochs_worker, args=(2, _free_port(), str(train_file), str(tmp_path)), nprocs=2, join=True)

    def losses(name):
        return [[e[key] for key in ("loss_forward", "loss_backward", "grad_norm")] for e in read_log(tmp_path / name) if "loss" in e]

    start = {name: next(e for e in read_log(tmp_path / f"{name}-straight") if e.get("event") == "start") for name in ("padded", "unpadded")}
    assert start["padded"]["steps_per_epoch"] == 5 and start["unpadded"]["steps_per_epoch"] == 4
    for name in ("padded", "unpadded"):
        assert len(losses(f"{name}-killed")) == 7
        np.testing.assert_allclose(losses(f"{name}-killed"), losses(f"{name}-straight"), rtol=1e-6, atol=1e-7)
        assert ckpt.load_checkpoint(tmp_path / f"{name}-killed")["settings"][ckpt.PADDED_EPOCHS] is (name == "padded")
    padded, unpadded = losses("padded-straight"), losses("unpadded-straight")
    np.testing.assert_allclose(padded[:4], unpadded[:4], rtol=1e-6, atol=1e-7)  # the same batches until the epoch's end
    assert not np.allclose(padded[4], unpadded[4])  # step 5: epoch 0's last batch (padded), or epoch 1's first


def _cli_worker(rank: int, world: int, port: int, args: list, result_dir: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, args)
    with open(os.path.join(result_dir, f"cli{rank}.txt"), "w", encoding="utf-8") as f:
        f.write(f"{result.exit_code}\n{result.stdout}")
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_cli_reports_once(tmp_path):
    """`torchrun --nproc-per-node 2 -m spacy_elmo pretrain ...`: rank 0 prints the summary (with
    the held-out perplexity), the model's place and the second stage's command (under torchrun too); the other
    ranks, which wrote nothing, print nothing."""
    import json

    from .conftest import TINY

    train_file = write_corpus(tmp_path / "train.txt", 400)
    held = write_corpus(tmp_path / "held.txt", 40, seed=1)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY), encoding="utf-8")
    args = ["pretrain", str(train_file), str(tmp_path / "out"), "--heldout", str(held), "--options", str(tmp_path / "tiny.json"),
            "--max-steps", "3", "--batch-size", "4", "--unroll", "5", "--negatives", "16", "--threads", "1",
            "--no-progress", "--backend", "reference"]
    mp.spawn(_cli_worker, args=(2, _free_port(), args, str(tmp_path)), nprocs=2, join=True)
    outputs = [(tmp_path / f"cli{r}.txt").read_text(encoding="utf-8") for r in range(2)]
    assert [o.split("\n", 1)[0] for o in outputs] == ["0", "0"]
    assert "trained 3 steps" in outputs[0] and "held-out perplexity" in outputs[0] and "model written to" in outputs[0]
    assert outputs[1].split("\n", 1)[1].strip() == ""
    # the second stage's command, once, started as this run was: on 2 processes, not `spacy-elmo pretrain` on one
    stage = [line for line in outputs[0].splitlines() if "go on with whole sentences" in line]
    assert len(stage) == 1 and stage[0].split(": ", 1)[1].startswith(
        f"torchrun --nproc-per-node 2 -m spacy_elmo pretrain {train_file} {tmp_path / 'out-sentences'} --init ")


def _sentences_worker(rank: int, world: int, port: int, train_path: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from spacy_elmo.training.trainer import train

    train(tiny_train_config(train_path, out, **_SENTENCES))
    dist.destroy_process_group()


#: Sentence batches of different lengths on the ranks (length-sorted: the ranks' means differ clearly); full
#: softmax and no dropout: nothing random.
_SENTENCES = dict(max_steps=4, checkpoint_every=4, log_every=1, sentences=True, max_length=7, length_pool=50, negatives=10_000,
                  dropout=0.0)


@pytest.mark.slow
def test_ddp_sentences_count_every_ranks_tokens(tmp_path):
    """With --sentences the ranks' batches differ in length: the log's tokens (and tokens/s) are the
    sum of every rank's targets, not rank 0's count times the number of processes."""
    from spacy_elmo.training.data import Corpus
    from spacy_elmo.training.sentences import SentenceBatcher

    train_file = write_corpus(tmp_path / "train.txt", 400)
    out = tmp_path / "out"
    mp.spawn(_sentences_worker, args=(2, _free_port(), str(train_file), str(out)), nprocs=2, join=True)
    corpus = Corpus.load(out / "data")
    batchers = [SentenceBatcher(corpus, 8, 7, 0, rank, 2, pool=_SENTENCES["length_pool"]) for rank in range(2)]
    per_step = [sum(int(b.batch(0, k)[2].sum()) for b in batchers) for k in range(4)]
    log = [e for e in read_log(out) if "loss" in e]
    assert [e["tokens"] for e in log] == list(np.cumsum(per_step))
    # Every target weighs the same: step 1's loss (on the initial weights) is the mean over both
    # ranks' targets, not the mean of the ranks' means.
    nll = first_step_nll(tiny_train_config(train_file, out, **_SENTENCES), corpus, [b.batch(0, 0) for b in batchers])
    sums, counts = [f for f, _, _ in nll], [n for _, _, n in nll]
    assert counts[0] != counts[1]
    expected = sum(sums) / sum(counts)
    assert log[0]["loss_forward"] == pytest.approx(expected, rel=1e-5)
    assert abs(expected - (sums[0] / counts[0] + sums[1] / counts[1]) / 2) > 1e-3  # the two weightings differ here


def _heldout_worker(rank: int, world: int, port: int, train_path: str, held: str, out: str, sentences: bool, result_dir: str,
                    init: Optional[str]) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import json

    import torch.distributed as dist

    from spacy_elmo.training import evaluate
    from spacy_elmo.training.trainer import LOG_NAME, train

    evaluated = []  # the targets this rank evaluated, per evaluation

    def counting(sums):
        def wrapper(*args, **kwargs):
            result = sums(*args, **kwargs)
            evaluated.append(result[1])
            return result
        return wrapper

    evaluate._stream_nll_sums = counting(evaluate._stream_nll_sums)
    evaluate._sentence_nll_sums = counting(evaluate._sentence_nll_sums)
    mode = dict(sentences=True, max_length=7) if sentences else {}
    if init:  # fine-tuning: also the init model's held-out perplexity, before the first step
        mode.update(init=init, model=None)
    summary = train(tiny_train_config(train_path, out, max_steps=2, checkpoint_every=2, heldout=held, **mode))
    # A resume whose log lost the last held-out line (killed while evaluating): rank 0's log
    # decides, and every rank evaluates again (that step's only: the log's step-0 line is kept).
    if rank == 0:
        log = os.path.join(out, LOG_NAME)
        kept = [l for l in open(log, encoding="utf-8") if not ('"heldout"' in l and json.loads(l)["step"] == 2)]
        open(log, "w", encoding="utf-8").writelines(kept)
    dist.barrier()
    resumed = train(tiny_train_config(train_path, out, max_steps=2, checkpoint_every=2, heldout=held, resume=True, **mode))
    with open(os.path.join(result_dir, f"held{rank}.json"), "w", encoding="utf-8") as f:
        json.dump({"evaluated": evaluated, "heldout": summary["heldout"], "resumed": resumed["heldout"]}, f)
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("sentences, init", [(False, False), (True, False), (False, True)], ids=["streams", "sentences", "init"])
def test_ddp_heldout_is_shared_by_the_ranks_and_equals_one_process(tmp_path, sentences, init):
    """Every rank evaluates its share of the held-out text (none waits in a collective, against
    gloo's 30-minute timeout, while rank 0 evaluates alone), and the all-reduced perplexity is the
    one a single process measures on the saved model; with --init also before the first step, the
    init model's (logged as step 0, once: the resume does not measure it again)."""
    import json

    from spacy_elmo.training.evaluate import evaluate_model_dir

    train_file = write_corpus(tmp_path / "train.txt", 400)
    held = write_corpus(tmp_path / "held.txt", 120, seed=5)
    out, base = tmp_path / "out", tmp_path / "base"
    if init:
        from spacy_elmo.training.trainer import train

        train(tiny_train_config(write_corpus(tmp_path / "base.txt", 200, seed=3), base, max_steps=2))
    mp.spawn(_heldout_worker, args=(2, _free_port(), str(train_file), str(held), str(out), sentences, str(tmp_path),
                                    str(base) if init else None), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"held{r}.json").read_text(encoding="utf-8")) for r in range(2)]
    one = evaluate_model_dir(out, held, unroll=10, per_sentence=sentences)  # the step-2 weights, one process
    logged = [e for e in read_log(out) if e.get("event") == "heldout"]
    if init:  # the init model, every rank its share, before the first step
        before = evaluate_model_dir(base, held, unroll=10, per_sentence=sentences)
        assert logged[0]["step"] == 0 and logged[0]["n_targets"] == before["n_targets"]
        assert logged[0]["perplexity"] == pytest.approx(before["perplexity"], rel=1e-5)
        assert logged[0]["perplexity"] != pytest.approx(one["perplexity"], rel=1e-3)
        shares = [r["evaluated"].pop(0) for r in ranks]
        assert min(shares) > 0 and sum(shares) == before["n_targets"], shares
        logged.pop(0)
    assert [len(r["evaluated"]) for r in ranks] == [2, 2]  # at step 2, and again on the resume
    for k in range(2):
        shares = [r["evaluated"][k] for r in ranks]
        assert min(shares) > 0 and sum(shares) == one["n_targets"], shares
    assert len(logged) == 1 and logged[0]["step"] == 2
    for result in [logged[0]] + [r[key] for r in ranks for key in ("heldout", "resumed")]:
        assert result["n_targets"] == one["n_targets"] and result["mode"] == one["mode"]
        for key in ("perplexity_forward", "perplexity_backward", "perplexity"):
            assert result[key] == pytest.approx(one[key], rel=1e-5)


def _nothing_to_train_worker(rank: int, world: int, port: int, train_path: str, held: str, out: str, result_dir: str) -> None:
    """2 steps with --heldout, then twice a resume with nothing to train: its log holding the held-out line of its
    step, then its model left by a run killed before the last model write (its config.json of step 1)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import json
    import warnings

    import torch.distributed as dist

    from spacy_elmo.training import evaluate
    from spacy_elmo.training.trainer import train

    evaluated = []
    sums = evaluate._stream_nll_sums

    def counting(*args, **kwargs):
        evaluated.append(1)
        return sums(*args, **kwargs)

    evaluate._stream_nll_sums = counting
    train(tiny_train_config(train_path, out, max_steps=2, checkpoint_every=2, heldout=held))
    written = []
    for stale in (False, True):
        if stale and rank == 0:
            config = json.loads(open(os.path.join(out, "config.json"), encoding="utf-8").read())
            config["provenance"]["steps"] = 1
            open(os.path.join(out, "config.json"), "w", encoding="utf-8").write(json.dumps(config))
        dist.barrier()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rank 0's: nothing to train
            resumed = train(tiny_train_config(train_path, out, max_steps=2, checkpoint_every=2, heldout=held, resume=True))
        written.append(resumed["model_written"])
    with open(os.path.join(result_dir, f"nothing{rank}.json"), "w", encoding="utf-8") as f:
        json.dump({"evaluated": len(evaluated), "written": written}, f)
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_a_resume_with_nothing_to_train_keeps_the_ranks_together(tmp_path):
    """Rank 0's files decide what a resume with nothing to train does, and every rank does it: no held-out
    evaluation where rank 0's log holds the checkpoint's (else rank 1 evaluated alone, waiting in its all-reduce),
    and a save where rank 0 finds the model older than the checkpoint (else rank 0 saved alone, waiting in its
    gather)."""
    import json

    from spacy_elmo.training.trainer import _model_steps

    train_file = write_corpus(tmp_path / "train.txt", 400)
    held = write_corpus(tmp_path / "held.txt", 120, seed=5)
    out = tmp_path / "out"
    _run_ranks(_nothing_to_train_worker, (2, _free_port(), str(train_file), str(held), str(out), str(tmp_path)), timeout=150)
    ranks = [json.loads((tmp_path / f"nothing{r}.json").read_text(encoding="utf-8")) for r in range(2)]
    assert ranks == [{"evaluated": 1, "written": [False, True]}] * 2  # the held-out text at step 2 only
    assert _model_steps(out) == 2


def _slow_tokenizing_worker(rank: int, world: int, port: int, train_path: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import datetime
    import time

    import torch.distributed as dist

    from spacy_elmo.training import trainer

    # A process group whose timeout (8 s) stands for gloo's default 30 minutes, and a rank 0 that
    # tokenizes for longer than that, as on a large corpus.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
    build = trainer.build_corpus

    def slow_build(*args, **kwargs):
        time.sleep(14)
        return build(*args, **kwargs)

    trainer.build_corpus = slow_build
    trainer.train(tiny_train_config(train_path, out, max_steps=1, checkpoint_every=1))
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_ranks_wait_for_a_tokenization_longer_than_the_group_timeout(tmp_path):
    """Rank 0 alone tokenizes the corpus while the others wait: that wait must not time out
    with the process group (a large corpus takes hours; gloo's default timeout is 30 minutes)."""
    train_file = write_corpus(tmp_path / "train.txt", 400)
    mp.spawn(_slow_tokenizing_worker, args=(2, _free_port(), str(train_file), str(tmp_path / "out")), nprocs=2, join=True)
    assert [e["step"] for e in read_log(tmp_path / "out") if "loss" in e] == [1]


def _main_worker(rank: int, world: int, port: int, args: list, result_dir: str, env: Optional[dict] = None) -> None:
    """``spacy-elmo ARGS`` (the console entry point) as rank ``rank`` of torchrun, without the
    compiled extension (whose absence every process warns of); exit status and stderr to files.
    ``env``: more environment variables."""
    import sys

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      **(env or {}))
    sys.modules["spacy_elmo._C"] = None  # the import fails: W_NO_EXTENSION
    import torch.distributed as dist

    from spacy_elmo.cli import main

    with open(os.path.join(result_dir, f"stderr{rank}.txt"), "w", encoding="utf-8") as err:
        os.dup2(err.fileno(), 2)
        sys.argv = ["spacy-elmo", *args]
        try:
            main()
            status = 0
        except SystemExit as exit_:
            status = exit_.code
        sys.stderr.flush()
    with open(os.path.join(result_dir, f"status{rank}.txt"), "w", encoding="utf-8") as f:
        f.write(str(status))
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["refused_resume", "usage_error", "corpus_too_small", "empty_vocabulary"])
def test_ddp_an_error_of_every_rank_is_printed_once(tmp_path, case):
    """Under torchrun a refused resume, a usage error, a corpus too small for the batches of every process,
    a --min-count that leaves no word and a warning of every process were printed by every rank: rank 0
    prints them, and every rank still exits with the error's status."""
    train_file = write_corpus(tmp_path / "train.txt", 50)
    args = ["pretrain", str(train_file), str(tmp_path / "out"), "--no-progress", "--threads", "1", "--backend", "auto"]
    if case == "refused_resume":
        args.append("--resume")  # OUTPUT_DIR holds no checkpoint: refused by every rank alike
        status, said = 1, "holds no checkpoint"
    elif case == "corpus_too_small":
        args += ["--batch-size", "128"]  # 2 x 128 rows of 21 tokens: more than the corpus's 400 or so
        status, said = 1, "too few for 256 rows"
    elif case == "empty_vocabulary":
        args += ["--min-count", "100000"]
        status, said = 1, "No word of the corpus occurs --min-count 100000 times"
    else:
        args += ["--batch-size", "0"]
        status, said = 2, "must be a positive integer"
    mp.spawn(_main_worker, args=(2, _free_port(), args, str(tmp_path)), nprocs=2, join=True)
    stderr, statuses = _rank_outputs(tmp_path)
    assert statuses == [str(status)] * 2
    assert said in stderr[0] and said not in stderr[1]
    assert stderr[0].count("spacy-elmo: the compiled extension") == 1
    assert "spacy-elmo:" not in stderr[1]


def _joined(ranks, timeout: float) -> None:
    """Each rank's process joined (``timeout`` seconds each), then killed where it still runs."""
    try:
        for process in ranks.processes:
            process.join(timeout)
    finally:
        for process in ranks.processes:
            process.kill()


def _rank_outputs(directory: Path, world: int = 2):
    """What each rank's worker wrote as it ended: its stderr and its exit status (``stderr{r}.txt``, ``status{r}.txt``)."""
    stderr = [(directory / f"stderr{r}.txt").read_text(encoding="utf-8") for r in range(world)]
    return stderr, [(directory / f"status{r}.txt").read_text() for r in range(world)]


def _spawn_under_agent_store(worker, args: list, result_dir: Path):
    """2 ranks of ``worker`` (:func:`_main_worker`'s arguments) started as torchrun starts them: its agent (here
    this process) holds the job's store, which outlives the ranks. ``(ranks, store)``: keep the store while they run."""
    port = _free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    ranks = mp.spawn(worker, args=(2, port, args, str(result_dir), {"TORCHELASTIC_USE_AGENT_STORE": "True"}),
                     nprocs=2, join=False)
    return ranks, store


def _wait_for(ready: Path, ranks, timeout: float = 180, holding: str = "") -> None:
    """Until the file ``ready`` exists (and holds the text ``holding``); an assertion error, not a hang, when a rank
    exits first or ``timeout`` passes."""
    import time

    deadline = time.monotonic() + timeout
    while not ready.exists() or holding not in ready.read_text(encoding="utf-8", errors="replace"):
        assert all(p.is_alive() for p in ranks.processes) and time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("signalled", [(0, 1), (1,)], ids=["every_rank", "one_rank"])
def test_ddp_a_sigterm_says_how_to_go_on_once(tmp_path, signalled):
    """SIGTERM to every rank (torchrun passing its signal on, Slurm's scancel) printed "Interrupted ... --resume"
    once per rank: it is said once, and every rank still exits with 143, its temporary files removed.
    SIGTERM to one rank alone (a kill of one PID) is said too, by that rank: its peer, which only lost it,
    says its own error."""
    import signal

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "2", "--log-every", "1", max_steps=100_000)
    ranks, store = _spawn_under_agent_store(_main_worker, args, tmp_path)
    try:
        _wait_for(out / "checkpoint.pt", ranks)
        for rank in signalled:
            os.kill(ranks.processes[rank].pid, signal.SIGTERM)
        for process in ranks.processes:
            process.join(120)
    finally:
        for process in ranks.processes:
            process.kill()
    stderr, status = _rank_outputs(tmp_path)
    said = [e.count("Interrupted.") for e in stderr]
    assert sum(said) == 1, stderr
    assert "--resume" in stderr[said.index(1)]
    for rank in signalled:
        assert status[rank] == str(128 + signal.SIGTERM), stderr
        assert "Traceback" not in stderr[rank]
    if signalled == (1,):
        assert said == [0, 1] and status[0] == "1"  # rank 0 lost its peer: gloo's error, no word of a signal
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    del store


def _failing_worker(rank: int, world: int, port: int, args: list, result_dir: str, env: Optional[dict] = None) -> None:
    """:func:`_main_worker` whose rank 1 fails with an error of its own (an I/O error) in its 5th step, past the
    checkpoint of step 2."""
    from spacy_elmo.training import trainer

    original = trainer.prepare_step
    calls = []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(5, "Input/output error (on rank 1)")
        return original(*a, **k)

    if rank == 1:
        trainer.prepare_step = failing
    _main_worker(rank, world, port, args, result_dir, env)


@pytest.mark.slow
def test_ddp_a_rank_failing_mid_run_says_its_rank_and_rank_0_names_it(tmp_path):
    """A rank that failed mid-run with an error of its own (an I/O error, CUDA out of memory) printed that error
    alone, naming no rank, and rank 0, its peer lost, guessed at the OOM killer: the failed rank prefixes its rank,
    and records it in torchrun's store, so that rank 0 names it and says how to go on."""
    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "2", "--log-every", "1", max_steps=100)
    ranks, store = _spawn_under_agent_store(_failing_worker, args, tmp_path)
    _joined(ranks, 180)
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["1", "1"], stderr
    assert "Rank 1 of this torchrun job: [Errno 5] Input/output error (on rank 1)" in stderr[1], stderr
    assert "Rank 1 of this torchrun job failed mid-run" in stderr[0] and "checkpoint of step 4" in stderr[0], stderr
    assert "--resume" in stderr[0] and "OOM" not in stderr[0] and "Traceback" not in "".join(stderr), stderr
    del store


def _holding_worker(rank: int, world: int, port: int, args: list, result_dir: str, env: Optional[dict] = None,
                    held: str = "save_pretrained", nth: int = 1) -> None:
    """:func:`_main_worker` whose rank 0, on calling the trainer's ``held`` (or torch's ``DistributedDataParallel``),
    writes ``holding`` in ``result_dir`` and waits until the file ``killed`` is there: a peer dies meanwhile.
    ``save_pretrained``: the model's save, once the first checkpoint is written (mid-save); ``build_corpus``: the
    tokenization (the set-up, the others waiting in its block's all-reduce); ``DistributedDataParallel``: DDP's
    constructor, the set-up's last collectives. ``nth``: on its nth call, the earlier ones going through.
    (:func:`functools.partial` gives ``held`` and ``nth`` to :func:`mp.spawn`.)"""
    import time

    from spacy_elmo.training import trainer

    owner = trainer if held != "DistributedDataParallel" else torch.nn.parallel
    original = getattr(owner, held)

    calls = []

    def holding(*a, **k):
        calls.append(1)
        if len(calls) < nth:
            return original(*a, **k)
        open(os.path.join(result_dir, "holding"), "w").close()
        while not os.path.exists(os.path.join(result_dir, "killed")):
            time.sleep(0.05)
        return original(*a, **k)

    if rank == 0:
        setattr(owner, held, holding)
    _main_worker(rank, world, port, args, result_dir, env)


def _rank_0_after_rank_1_killed(worker, args: list, result_dir: Path, ready: Optional[Path] = None) -> str:
    """Rank 0's stderr, once it exited 1, of 2 ranks of ``worker`` (:func:`_main_worker`'s arguments) whose rank 1
    was SIGKILLed when the file ``ready`` existed (None: :func:`_holding_worker`'s ``holding``; rank 0 then let go)."""
    import signal

    ranks = mp.spawn(worker, args=(2, _free_port(), args, str(result_dir)), nprocs=2, join=False)
    try:
        _wait_for(result_dir / "holding" if ready is None else ready, ranks)
        os.kill(ranks.processes[1].pid, signal.SIGKILL)
        ranks.processes[1].join(30)
        (result_dir / "killed").touch()
        ranks.processes[0].join(120)
    finally:
        for process in ranks.processes:
            process.kill()
    stderr = (result_dir / "stderr0.txt").read_text(encoding="utf-8")
    assert (result_dir / "status0.txt").read_text() == "1", stderr
    return stderr


@pytest.mark.slow
@pytest.mark.parametrize("when", ["between_steps", "mid_save"])
def test_ddp_a_peer_killed_mid_run_is_said_with_the_checkpoint_to_resume_from(tmp_path, when):
    """A rank SIGKILLed mid-run (the OOM killer), which says nothing: rank 0 printed only gloo's "Connection closed
    by peer ... GLHF!". It now says that another process of the job died, that OUTPUT_DIR's checkpoint (its step)
    is whole, and --resume; gloo's words are kept. Killed while rank 0 finished a save whose checkpoint was already
    on disk, rank 0 said "no checkpoint was written yet" (it counted the save once the collective ending it passed)."""
    from spacy_elmo.training.checkpoint import load_checkpoint

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "2", "--log-every", "1", max_steps=100_000)
    worker = _main_worker if when == "between_steps" else _holding_worker
    stderr = _rank_0_after_rank_1_killed(worker, args, tmp_path, out / "checkpoint.pt" if when == "between_steps" else None)
    step = int(load_checkpoint(out)["step"])
    assert "by peer" in stderr and "died" in stderr, stderr  # gloo: "closed by peer" or "reset by peer"
    assert f"checkpoint of step {step:,}" in stderr and "--resume" in stderr and "Traceback" not in stderr, stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["before_first_checkpoint", "rank_0_mid_save"])
def test_ddp_a_peer_killed_says_resume_only_where_a_checkpoint_is_on_disk(tmp_path, case):
    """A peer SIGKILLed before the first checkpoint: rank 0 says to rerun the same command, no --resume (no
    checkpoint to resume from). Rank 0 SIGKILLed mid-save, its checkpoint already on disk: rank 1, whose save
    counted once the collective ending it passed, said "no checkpoint was written yet"; it now says the checkpoint
    in OUTPUT_DIR and --resume, without a step (it knows none: rank 0 writes it; the step of an earlier save it
    counted is not the one on disk)."""
    import functools
    import signal

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    every = "1000" if case == "before_first_checkpoint" else "2"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", every, "--log-every", "1", max_steps=100_000)
    killed, said = (1, 0) if case == "before_first_checkpoint" else (0, 1)
    # rank 0 held in its second save: rank 1 counted the first one's step, not the one now on disk
    worker = _main_worker if case == "before_first_checkpoint" else functools.partial(_holding_worker, nth=2)
    ranks, store = _spawn_under_agent_store(worker, args, tmp_path)  # the store outlives rank 0
    try:
        # a step logged: the loop runs (the log's start entry comes before the set-up's last collectives)
        if case == "before_first_checkpoint":
            _wait_for(out / "train_log.jsonl", ranks, holding='"loss"')
        else:
            _wait_for(tmp_path / "holding", ranks)
        os.kill(ranks.processes[killed].pid, signal.SIGKILL)
        ranks.processes[killed].join(30)
        ranks.processes[said].join(120)
    finally:
        for process in ranks.processes:
            process.kill()
    stderr = (tmp_path / f"stderr{said}.txt").read_text(encoding="utf-8")
    assert (tmp_path / f"status{said}.txt").read_text() == "1", stderr
    assert "by peer" in stderr and "died" in stderr and "Traceback" not in stderr, stderr
    if case == "before_first_checkpoint":
        assert not (out / "checkpoint.pt").exists()
        assert "no checkpoint was written yet" in stderr and "--resume" not in stderr, stderr
    else:
        assert (out / "checkpoint.pt").exists()
        assert f"after the last checkpoint in {out}" in stderr and "--resume" in stderr, stderr
        assert "checkpoint of step" not in stderr and "no checkpoint" not in stderr, stderr
    del store


@pytest.mark.slow
@pytest.mark.parametrize("held", ["build_corpus", "DistributedDataParallel"], ids=["tokenizing", "ddp"])
def test_ddp_a_peer_killed_in_the_set_up_says_it_died_and_to_rerun(tmp_path, held):
    """A rank SIGKILLed in the set-up, once the process group is up and before the first step (while rank 0
    tokenizes, the others waiting in the all-reduce that ends it; in DDP's constructor, which broadcasts the
    weights): rank 0 printed only gloo's bare error ("Connection reset by peer ... GLHF!"), where one killed in the
    loop was said. It is said alike: another process of the job died, and no checkpoint yet: rerun, no --resume."""
    import functools

    from spacy_elmo.errors import Errors

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "2", "--log-every", "1")
    stderr = _rank_0_after_rank_1_killed(functools.partial(_holding_worker, held=held), args, tmp_path)
    died = Errors.E_PEER_DIED.split("\n", 1)[1].split("{saved}")[0]  # the words after gloo's error
    assert "by peer" in stderr and died in stderr and "Traceback" not in stderr, stderr
    assert not (out / "checkpoint.pt").exists()
    assert not (out / "train_log.jsonl").exists() or not [e for e in read_log(out) if "loss" in e]  # no step taken
    assert Errors.E_PRETRAIN_NO_SPACE_RERUN in stderr and "--resume" not in stderr, stderr


def test_a_failed_peers_error_is_not_taken_for_a_lost_peer():
    """:class:`PeerFailed` (a rank that failed and says why) is not the process group's error: its message never
    names gloo, so it is not said as a peer that died."""
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.trainer import PeerFailed, _lost_peer

    assert not _lost_peer(PeerFailed(Errors.E_PEER_FAILED.format(rank=1)))
    assert _lost_peer(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    # NCCL's (a CUDA job), whose message need not name its backend
    assert _lost_peer(torch.distributed.DistBackendError("NCCL communicator was aborted on rank 1"))
    assert not _lost_peer(RuntimeError("CUDA out of memory"))  # this rank's own


def test_leaving_a_failed_run_without_a_process_group_does_nothing():
    """An error of a :func:`_settled` block met once the process group is gone (destroyed, or never started in this
    process) leaves at once: no barrier on a group that no longer is (torch's ValueError, a traceback)."""
    from spacy_elmo.training.trainer import _SETTLED, leave_failed_run

    assert not torch.distributed.is_initialized()
    err = ValueError("refused on rank 0")
    setattr(err, _SETTLED, object())
    leave_failed_run(err)
    wrapped = OSError("the disk is full")
    wrapped.__cause__ = err
    leave_failed_run(wrapped)
    leave_failed_run(ValueError("no block's"))


def test_who_says_an_error_of_a_torchrun_job():
    """Rank 0 says an error every rank met alike and names a failed peer (:class:`PeerFailed`); any other error
    (one rank's out of memory, its lost peer) is said by the rank that met it, whichever that is."""
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.trainer import PeerFailed, _same_on_every_rank, said_by_this_rank

    with pytest.raises(ValueError) as alike:
        with _same_on_every_rank():
            raise ValueError("refused: the settings differ")
    peer = PeerFailed(Errors.E_PEER_FAILED.format(rank=1))
    own = [RuntimeError("CUDA out of memory"), OSError(5, "Input/output error"), ValueError("this rank's alone")]
    assert [said_by_this_rank(e, 0) for e in (alike.value, peer, *own)] == [True] * 5
    assert [said_by_this_rank(e, 1) for e in (alike.value, peer, *own)] == [False, False, True, True, True]


@pytest.mark.parametrize("saved, last_saved", [(False, None), (True, 4), (True, None)])
def test_a_lost_peer_says_what_to_resume_from(tmp_path, saved, last_saved):
    """:func:`_peer_died`: where OUTPUT_DIR holds a checkpoint, --resume, with its step where this rank knows it
    (rank 0, which wrote it); without one, run again."""
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.checkpoint import checkpoint_path
    from spacy_elmo.training.trainer import _peer_died

    if saved:
        checkpoint_path(tmp_path).write_bytes(b"")
    message = _peer_died(RuntimeError("Connection closed by peer\n"), tmp_path, last_saved)
    assert message.startswith("Connection closed by peer\nAnother process of this torchrun job died"), message
    on = Errors.E_PRETRAIN_NO_SPACE_RESUME if saved else Errors.E_PRETRAIN_NO_SPACE_RERUN
    assert message.endswith(on) and ("--resume" in message) is saved, message
    at_step = Errors.E_PEER_DIED_CHECKPOINT.format(step=4, path=tmp_path)
    in_dir = Errors.E_PEER_DIED_CHECKPOINT_IN.format(path=tmp_path)
    assert (at_step in message, in_dir in message) == (saved and last_saved == 4, saved and last_saved is None), message


def test_a_lost_peer_that_recorded_its_failure_is_named_and_a_ranks_own_error_names_it():
    """A peer that recorded its rank as it failed with its own error (:func:`~spacy_elmo.training.jobstore.record_failure`)
    is named, not guessed at as killed; a rank other than 0 prefixes its rank to what it says, once."""
    import torch.distributed as dist

    from spacy_elmo.cli.pretrain import _by_rank
    from spacy_elmo.ranks import Ranks
    from spacy_elmo.training import jobstore

    store = dist.HashStore()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
        patch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
        patch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
        assert jobstore.failed_rank() is None
        jobstore.record_failure(3)
        assert jobstore.failed_rank() == 3
        patch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # an elastic restart starts afresh
        assert jobstore.failed_rank() is None
    assert jobstore.failed_rank() is None  # not under torchrun's agent: no store asked
    assert _by_rank("[Errno 5] Input/output error", Ranks(1, 2, 1)) == "Rank 1 of this torchrun job: [Errno 5] Input/output error"
    assert _by_rank("[Errno 5] Input/output error", Ranks(0, 2, 0)) == "[Errno 5] Input/output error"
    assert _by_rank("Rank 1 of this torchrun job cannot read", Ranks(1, 2, 1)) == "Rank 1 of this torchrun job cannot read"


def test_the_wait_groups_time_out_as_their_blocks_need(monkeypatch):
    """The set-up's blocks wait for rank 0's tokenization (:data:`TOKENIZE_TIMEOUT`), the loop's the process
    group's default timeout, :func:`leave_failed_run` :data:`LEAVE_TIMEOUT`; one process: no groups."""
    from spacy_elmo.training import trainer

    made = []
    monkeypatch.setattr(trainer.dist, "new_group", lambda **kwargs: made.append(kwargs) or len(made))
    assert trainer._wait_groups(1) is None and made == []
    groups = trainer._wait_groups(2)
    timeouts = {name: made[getattr(groups, name) - 1].get("timeout") for name in groups._fields}
    assert timeouts == {"setup": trainer.TOKENIZE_TIMEOUT, "loop": None, "leave": trainer.LEAVE_TIMEOUT}
    assert {kwargs["backend"] for kwargs in made} == {"gloo"}


def _full_disk_worker(rank: int, world: int, port: int, args: list, result_dir: str) -> None:
    """:func:`_main_worker` whose rank 0 finds the disk full when it writes its first checkpoint."""
    import errno

    from spacy_elmo.training import checkpoint

    def no_space(out, payload):
        raise OSError(errno.ENOSPC, "No space left on device", os.path.join(out, "checkpoint.pt"))

    if rank == 0:
        checkpoint.save_checkpoint = no_space  # the trainer calls it as ckpt.save_checkpoint
    _main_worker(rank, world, port, args, result_dir)


def _run_ranks(worker, args: tuple, timeout: float = 240) -> None:
    """``worker(rank, *args)`` as 2 processes; an assertion error, not a hang, when one outlives ``timeout``."""
    import time

    ranks = mp.spawn(worker, args=args, nprocs=2, join=False)
    try:
        deadline = time.monotonic() + timeout
        for process in ranks.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        assert not any(p.is_alive() for p in ranks.processes), "a rank still waits"
    finally:
        for process in ranks.processes:
            process.kill()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["in_use", "not_empty", "heldout_missing", "no_text", "full_disk"])
def test_ddp_a_failure_of_rank_0_alone_ends_every_rank_at_once_and_quietly(tmp_path, case):
    """What rank 0 alone checks or does (OUTPUT_DIR's lock, OUTPUT_DIR already holding a run, the held-out
    text and the corpus it alone tokenizes, the checkpoints it alone writes) failed rank 0 while the other
    ranks waited in a collective: until torchrun killed them (SIGTERM, reported as their failure) or rank 0's
    exit broke the connection, a second error ("Connection closed by peer"). Every rank now learns it: rank 0
    says its error once, the others exit with the same status, saying nothing."""
    import fcntl

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "2")
    worker, held = _main_worker, None
    if case == "in_use":  # another run holds the lock
        out.mkdir()
        held = os.open(out, os.O_RDONLY)
        fcntl.flock(held, fcntl.LOCK_EX)
        said = "is in use by another pretrain run"
    elif case == "not_empty":
        out.mkdir()
        (out / "config.json").write_text("{}", encoding="utf-8")
        said = "already holds a training run"
    elif case == "heldout_missing":
        args += ["--heldout", str(tmp_path / "no-such-heldout.txt")]
        said = "no-such-heldout.txt does not exist"
    elif case == "no_text":
        (tmp_path / "empty").mkdir()
        args[1] = str(tmp_path / "empty")
        said = "No text to train on"
    else:
        worker, said = _full_disk_worker, "No space left on device"
    try:
        _run_ranks(worker, (2, _free_port(), args, str(tmp_path)))
    finally:
        if held is not None:
            os.close(held)
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["1", "1"], stderr
    assert stderr[0].count(said) == 1, stderr
    assert stderr[1] == "", stderr


@pytest.mark.slow
def test_ddp_only_rank_0_draws_the_progress_bar(tmp_path):
    """--progress under torchrun: rank 0 draws the pretraining bar (and the tokenizing one, as it alone tokenizes);
    the other ranks, which train the same steps, draw none (their bars would interleave with rank 0's)."""
    from .conftest import tiny_pretrain_args

    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    args[args.index("--no-progress")] = "--progress"
    _run_ranks(_main_worker, (2, _free_port(), args, str(tmp_path)))
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["0", "0"], stderr
    assert "pretraining" in stderr[0] and "3/3" in stderr[0], stderr
    assert stderr[1] == "", stderr


def _elsewhere_worker(rank: int, world: int, port: int, args: list, result_dir: str, cwd: list) -> None:
    """:func:`_main_worker` in directory ``cwd[rank]``: a job of several machines without a shared file system,
    where a relative path names another directory (or none) on another machine."""
    os.chdir(cwd[rank])
    _main_worker(rank, world, port, args, result_dir)


@pytest.mark.slow
def test_ddp_train_path_and_heldout_need_be_on_rank_0s_machine_only(tmp_path):
    """Rank 0 alone reads TRAIN_PATH and --heldout (it tokenizes both; the others read OUTPUT_DIR's cache and the
    broadcast held-out text): a job whose other machine sees neither (relative paths naming nothing there) trains,
    as E_CACHE_NOT_SHARED and the README say (they said TRAIN_PATH must be reachable from every machine)."""
    import shutil

    from .conftest import tiny_pretrain_args

    here, other = tmp_path / "here", tmp_path / "other"
    here.mkdir()
    other.mkdir()
    out = tmp_path / "out"
    args, train, _ = tiny_pretrain_args(tmp_path, out, "--checkpoint-every", "3")
    shutil.move(str(train), here / "train.txt")
    write_corpus(here / "heldout.txt", 5)
    args[args.index(str(train))] = "train.txt"
    args += ["--heldout", "heldout.txt"]
    _run_ranks(_elsewhere_worker, (2, _free_port(), args, str(tmp_path), [str(here), str(other)]), timeout=150)
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["0", "0"], stderr
    assert (out / "config.json").exists() and (out / "checkpoint.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["init", "output_dir", "other_meta"])
def test_ddp_a_file_one_rank_cannot_see_is_said_by_that_rank_and_named_by_rank_0(tmp_path, case):
    """A file that one rank alone cannot read (another machine, where the path names nothing): --init missing there
    was checked before the process group started, as if every rank met it, so that rank exited 1 saying nothing and
    rank 0 waited in init_process_group until torchrun killed it; an OUTPUT_DIR that machine does not share gave a
    bare "[Errno 2] ... meta.json"; another meta.json there, no JSON object (not the file rank 0 wrote), a
    JSONDecodeError's traceback. That rank says why, and rank 0 names it."""
    from spacy_elmo.bilm import BiLMConfig

    from .conftest import TINY, tiny_pretrain_args

    here, other = tmp_path / "here", tmp_path / "other"
    here.mkdir()
    other.mkdir()
    if case == "init":
        args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
        at = args.index("--options")
        del args[at : at + 2]
        BiLM(BiLMConfig(**TINY)).save(here / "model")
        args += ["--init", "model"]  # rank 0's directory alone holds it
        said = "model does not exist"
    else:
        args, _, _ = tiny_pretrain_args(tmp_path, "out")  # rank 0 tokenizes into here/out; rank 1 reads other/out
        said = "cannot read the corpus that rank 0 tokenized into OUTPUT_DIR out"
        if case == "other_meta":
            (other / "out" / "data").mkdir(parents=True)
            (other / "out" / "data" / "meta.json").write_text("[1]", encoding="utf-8")
    _run_ranks(_elsewhere_worker, (2, _free_port(), args, str(tmp_path), [str(here), str(other)]), timeout=150)
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["1", "1"], stderr
    assert stderr[1].count(said) == 1 and "Traceback" not in stderr[1], stderr
    assert "Rank 1 of this torchrun job failed" in stderr[0] and said not in stderr[0], stderr
    if case == "other_meta":
        assert "out/data/meta.json: it holds a JSON array, not an object)" in stderr[1], stderr
    if case == "output_dir":
        assert "same path" in stderr[1] and "Errno" in stderr[1]  # the OS's words kept, after ours
        assert "every machine mounts." in stderr[1] and "make it readable" not in stderr[1]  # that advice: a PermissionError's
        # What every rank reads, and no more: TRAIN_PATH and --heldout are rank 0's alone (the test below).
        assert "--init, --options and --tokenizer" in stderr[1] and "TRAIN_PATH and --heldout are read by rank 0 alone" in stderr[1]
    else:
        assert not (tmp_path / "out").exists()  # refused before OUTPUT_DIR was made


def _meta_refused_worker(rank: int, world: int, port: int, args: list, result_dir: str) -> None:
    """:func:`_main_worker` where rank 1 may not read the cache's meta.json (a PermissionError: another user on its
    machine; the permission bits themselves cannot refuse root, who runs the tests in CI's containers)."""
    if rank == 1:
        from spacy_elmo.training import trainer

        read_json_file = trainer.read_json_file

        def refused(path, *args, **kwargs):
            if Path(path).name == "meta.json":
                raise PermissionError(13, "Permission denied", str(path))
            return read_json_file(path, *args, **kwargs)

        trainer.read_json_file = refused
    _main_worker(rank, world, port, args, result_dir)


@pytest.mark.slow
def test_ddp_a_rank_that_may_not_read_the_cache_says_so_in_our_words(tmp_path):
    """Another rank reading a meta.json it may not read said the OS's words alone ("[Errno 13] Permission denied:
    .../meta.json"), where a missing one said E_CACHE_NOT_SHARED: it says that too now, read permission included."""
    from .conftest import tiny_pretrain_args

    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    _run_ranks(_meta_refused_worker, (2, _free_port(), args, str(tmp_path)), timeout=150)
    stderr, status = _rank_outputs(tmp_path)
    assert status == ["1", "1"], stderr
    said = f"Rank 1 of this torchrun job cannot read the corpus that rank 0 tokenized into OUTPUT_DIR {tmp_path / 'out'} "
    assert stderr[1].count(said) == 1 and "Traceback" not in stderr[1], stderr
    assert "[Errno 13] Permission denied" in stderr[1] and "each rank's user must be allowed to read them" in stderr[1]
    assert "every machine mounts, or make it readable by every rank's user." in stderr[1], stderr
    assert "Rank 1 of this torchrun job failed" in stderr[0] and said not in stderr[0], stderr


@pytest.mark.slow
def test_torchrun_reports_every_rank_exiting_with_rank_0s_status(tmp_path):
    """Under torchrun itself, which stops the other ranks (SIGTERM) as soon as one exits with an error: its report
    named the rank that waited for a refused rank 0 killed (exitcode -15), or aborted on its way out ("terminate
    called without an active exception", -6). Every rank now exits 1, and the error is printed once."""
    import subprocess
    import sys

    import spacy_elmo

    from .conftest import tiny_pretrain_args

    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("{}", encoding="utf-8")  # already holds a run: rank 0 alone refuses it
    args, _, _ = tiny_pretrain_args(tmp_path, out)
    root = str(Path(spacy_elmo.__file__).resolve().parent.parent)  # this checkout's package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                             str(_free_port()), "-m", "spacy_elmo", *args], capture_output=True, text=True, env=env, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    # torchrun records the exit of the ranks it stopped only where it has _capture_process_failures (not in
    # 2.6.0, in 2.9.1): before, its report names only the ranks that had exited when it polled, one or both
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext
    codes = re.findall(r"exitcode\s+: (-?[0-9]+)", report)
    if hasattr(SubprocessContext, "_capture_process_failures"):
        assert codes == ["1", "1"], report
    else:
        assert codes in (["1"], ["1", "1"]), report
    assert report.count("already holds a training run") == 1, report
    assert "terminate called" not in report and "Connection closed" not in report, report


def _settled_worker(rank: int, world: int, port: int, failing: tuple, result_dir: str, error: type = ValueError,
                    gone: tuple = (), late: float = 0.0, slow: Optional[int] = None, wrapped: bool = False) -> None:
    """A :func:`_settled` block that raises ``error`` (ValueError: one of every rank's) on the ranks ``failing``:
    who says what. Another error escapes, as one the command line does not catch, ending the process. The ranks
    ``gone`` exit in the block, as a killed process does. ``late``: the ranks that did not fail wait that many
    seconds before they leave the run (hung but alive), the failed ones waiting for them 1 s at most; they then
    say whether a failed rank left before them. ``slow``: that rank takes 2 s to say its error (the others wait for
    it 30 s at most), the others then saying whether it came before they left. ``wrapped``: a failed rank's error
    is raised again as the cause of an OSError outside the block, as ``train`` says a full disk."""
    import time
    from datetime import timedelta

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from spacy_elmo.training import trainer

    trainer.LEAVE_TIMEOUT = timedelta(seconds=1 if slow is None else 30)
    dist.init_process_group("gloo")
    came = os.path.join(result_dir, f"came{slow}")
    try:
        try:
            with trainer._settled(trainer._wait_groups(world)), trainer._same_on_every_rank():
                if rank in gone:
                    time.sleep(0.5)  # the others are in the block's all-reduce
                    os._exit(9)
                if rank in failing:
                    raise error(f"refused on rank {rank}")
        except ValueError as err:
            if not wrapped:
                raise
            raise OSError(f"wrapped: {err}") from err
        outcome = "ran"
    except (ValueError, OSError, trainer.PeerFailed) as err:
        outcome = f"{type(err).__name__}: {err}; says it: {trainer.said_by_this_rank(err, rank)}"
        if late and rank not in failing:
            time.sleep(late)
            outcome += f"; left after the failed rank: {all(os.path.exists(os.path.join(result_dir, f'settled{r}.txt')) for r in failing)}"
        if rank == slow:
            time.sleep(2)
            open(came, "w").close()
        trainer.leave_failed_run(err)
        if slow is not None and rank != slow:
            outcome += f"; left after rank {slow} came: {os.path.exists(came)}"
    with open(os.path.join(result_dir, f"settled{rank}.txt"), "w", encoding="utf-8") as f:
        f.write(outcome)
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_rank_whose_failure_escapes_the_command_line_does_not_hold_the_others(tmp_path):
    """A failure the command line does not catch (a bug's TypeError: a traceback) ends that rank without
    :func:`leave_failed_run`: the others, waiting there for it, exit once it is gone, as they did before."""
    _run_ranks(_settled_worker, (2, _free_port(), (0,), str(tmp_path), TypeError), timeout=120)
    assert not (tmp_path / "settled0.txt").exists()
    assert (tmp_path / "settled1.txt").read_text(encoding="utf-8").startswith("PeerFailed: Rank 0 of this torchrun job")


@pytest.mark.slow
@pytest.mark.parametrize("failing", [(), (0,), (1,), (0, 1)], ids=["none", "rank_0", "rank_1", "both"])
def test_a_settled_block_tells_every_rank_and_the_lowest_failed_rank_says_it(tmp_path, failing):
    """The lowest rank that failed says its error, also one of every rank's that rank 0 did not meet (it is
    said by rank 0 otherwise): the others raise PeerFailed naming that rank, which rank 0 says (the terminal
    of a job of several machines shows rank 0's words alone) and no other rank."""
    _run_ranks(_settled_worker, (2, _free_port(), failing, str(tmp_path)), timeout=120)
    outcomes = [(tmp_path / f"settled{r}.txt").read_text(encoding="utf-8") for r in range(2)]
    lowest = min(failing, default=None)
    for rank, outcome in enumerate(outcomes):
        if lowest is None:
            assert outcome == "ran"
        elif rank in failing:
            assert outcome == f"ValueError: refused on rank {rank}; says it: {rank == lowest}"
        else:
            assert outcome.startswith(f"PeerFailed: Rank {lowest} of this torchrun job failed") and outcome.endswith(f"says it: {rank == 0}")


@pytest.mark.slow
def test_a_peer_gone_in_a_settled_block_leaves_this_ranks_error_to_say(tmp_path):
    """A peer that dies in the block (killed, out of memory) broke its all-reduce: gloo's "Connection closed by
    peer" replaced this rank's own error, which no rank then said. This rank's error now stays, said by it,
    also one of every rank's (the lowest failed rank, which would say it, may be the one gone)."""
    _run_ranks(_settled_worker, (2, _free_port(), (1,), str(tmp_path), ValueError, (0,)), timeout=120)
    assert not (tmp_path / "settled0.txt").exists()
    assert (tmp_path / "settled1.txt").read_text(encoding="utf-8") == "ValueError: refused on rank 1; says it: True"


@pytest.mark.slow
@pytest.mark.parametrize("slow, wrapped", [(0, False), (1, False), (1, True)], ids=["failed_rank_slow", "peer_slow", "peer_slow_wrapped"])
def test_the_ranks_of_a_failed_block_leave_the_run_together(tmp_path, slow, wrapped):
    """Every rank of a failed :func:`_settled` block waits in :func:`leave_failed_run` until every rank got there:
    the ranks that raised :class:`PeerFailed` for the failed one still saying its error (torchrun stops every rank
    once the first exits), and the failed rank for those, also when ``train`` raised its error again as the cause
    of another (a full disk's)."""
    _run_ranks(_settled_worker, (2, _free_port(), (0,), str(tmp_path), ValueError, (), 0.0, slow, wrapped), timeout=120)
    outcomes = [(tmp_path / f"settled{r}.txt").read_text(encoding="utf-8") for r in range(2)]
    assert outcomes[1 - slow].endswith(f"; left after rank {slow} came: True"), outcomes
    assert outcomes[0].startswith("OSError: wrapped: refused on rank 0" if wrapped else "ValueError: refused on rank 0"), outcomes
    assert outcomes[1].startswith("PeerFailed: Rank 0 of this torchrun job failed"), outcomes


@pytest.mark.slow
def test_a_failed_rank_waits_for_a_hung_peer_a_bounded_time(tmp_path):
    """A failed rank waited in :func:`leave_failed_run`, ignoring Ctrl-C and SIGTERM, for a peer hung but alive:
    up to the 48 hours of the tokenization's group. It now waits :data:`LEAVE_TIMEOUT` (here 1 s) and exits
    before that peer comes."""
    _run_ranks(_settled_worker, (2, _free_port(), (0,), str(tmp_path), ValueError, (), 10.0), timeout=120)
    assert (tmp_path / "settled0.txt").read_text(encoding="utf-8") == "ValueError: refused on rank 0; says it: True"
    assert (tmp_path / "settled1.txt").read_text(encoding="utf-8").endswith("says it: False; left after the failed rank: True")


@pytest.mark.parametrize("error, ours", [
    (ValueError("refused: the settings differ"), True),
    (FileNotFoundError("OUTPUT_DIR holds no checkpoint"), True),
    (TypeError("--epochs must be a number"), True),
    (FileExistsError("OUTPUT_DIR is in use by another pretrain run"), True),
    (FileNotFoundError(2, "No such file or directory", "out/data"), False),  # the OS's: this rank's disk
    (OSError(5, "Input/output error"), False),
    (MemoryError(), False),
    (RuntimeError("torch.load failed"), False),
])
def test_only_the_packages_own_refusals_count_as_every_ranks(error, ours):
    """Rank 0 alone prints what every rank raised alike; an I/O or memory failure of one rank is not that
    (review: a checkpoint one rank could not read made it exit silently)."""
    from spacy_elmo.training.trainer import _same_on_every_rank, raised_on_every_rank

    with pytest.raises(type(error)) as caught:
        with _same_on_every_rank():
            raise error
    assert raised_on_every_rank(caught.value) is ours
    wrapped = ValueError("the checkpoint is damaged")  # E_BAD_CHECKPOINT: raised from torch's error
    with pytest.raises(ValueError) as caught:
        with _same_on_every_rank():
            raise wrapped from error
    assert not raised_on_every_rank(caught.value)


def test_a_usage_error_of_typer_or_plain_click_gives_its_status():
    """Ranks other than 0 run typer without standalone mode and exit with a usage error's status. typer
    before 0.26 raises plain click's classes and has no typer.TyperException: the name alone crashed
    there with an AttributeError (review, typer 0.15.1)."""
    import click
    import typer

    from spacy_elmo.cli import _usage_status

    assert _usage_status(click.UsageError("no such option")) == 2
    assert _usage_status(click.exceptions.Abort()) == 1
    assert _usage_status(typer.Abort()) == 1
    assert _usage_status(ValueError("not a usage error")) is None


@pytest.mark.parametrize("env, expected", [
    ({}, (0, 1, 0)),
    ({"WORLD_SIZE": "1", "RANK": "zz"}, (0, 1, 0)),  # one process: RANK means nothing
    ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}, (3, 4, 1)),  # torchrun, 2 machines of 2
    # A launcher that sets no LOCAL_RANK: the trainer's GPU is the rank (one machine)
    ({"WORLD_SIZE": "2", "RANK": "1"}, (1, 2, 1)),
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'.* from 1 to"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'.* from 1 to"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2'.* from 0 to 1"),
    ({"WORLD_SIZE": "2", "RANK": "1.0"}, "RANK='1.0'.* from 0 to 1"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1'.* from 0 to 1"),
])
def test_the_command_line_and_the_trainer_read_one_rank_from_the_environment(monkeypatch, env, expected):
    """``(RANK, WORLD_SIZE, LOCAL_RANK)`` as both the command line (whose warnings and errors rank 0 and
    LOCAL_RANK 0 print) and the trainer (its GPU, its share of the rows) read them: the two read the
    environment apart, with other defaults, and ``int()``'s traceback for a value that was no rank."""
    from spacy_elmo.ranks import torchrun_ranks
    from spacy_elmo.training import trainer

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = tiny_train_config("train.txt", "out")
    if isinstance(expected, tuple):
        assert torchrun_ranks() == expected
        if expected[1] == 1:
            assert trainer._setup_distributed(cfg)[:2] == (0, 1)
        return
    with pytest.raises(ValueError, match=expected):
        torchrun_ranks()
    with pytest.raises(ValueError, match=expected):
        trainer._setup_distributed(cfg)


@pytest.mark.parametrize("device, local, n_gpus, expected", [
    ("cpu", 1, 0, ("gloo", "cpu")),
    ("cuda", 1, 2, ("nccl", "cuda:1")),  # the GPU of this machine's rank (rank 2 of the job: the second machine's)
    ("cuda", 1, 1, ("nccl", "cuda:0")),  # the only GPU visible is the process's own, whatever its LOCAL_RANK
    ("cuda", 2, 2, "rank 2 of 4 and LOCAL_RANK 2; DDP on CUDA needs a GPU per process"),
])
def test_each_process_of_a_job_takes_its_machines_gpu(monkeypatch, device, local, n_gpus, expected):
    """Under torchrun the trainer starts the process group (NCCL on CUDA, gloo on the CPU) and takes the GPU of its
    LOCAL_RANK (the only one visible whatever its LOCAL_RANK), refusing a LOCAL_RANK past the GPUs visible (no GPU
    needed here: torch's calls are stubs)."""
    from spacy_elmo.training import trainer

    _clear_ranks(monkeypatch, WORLD_SIZE="4", RANK="2", LOCAL_RANK=str(local))
    calls = []
    monkeypatch.setattr(trainer, "torch_device", torch.device)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", str(d))))
    monkeypatch.setattr(trainer.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(trainer.dist, "init_process_group", lambda backend: calls.append(("init", backend)))
    monkeypatch.setattr(trainer.dist, "get_rank", lambda: 2)
    monkeypatch.setattr(trainer.dist, "get_world_size", lambda: 4)
    cfg = tiny_train_config("train.txt", "out", device=device)
    if isinstance(expected, str):
        with pytest.raises(RuntimeError, match=re.escape(expected)):
            trainer._setup_distributed(cfg)
        assert calls == []
        return
    backend, taken = expected
    rank, world, got = trainer._setup_distributed(cfg)
    assert (rank, world, str(got)) == (2, 4, taken)
    assert calls == ([("set_device", taken)] if device == "cuda" else []) + [("init", backend)]


def _clear_ranks(monkeypatch, **env) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("env, expected", [
    ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}, (3, 4, 1)),
    # No LOCAL_RANK: a launcher that may span machines, where RANK says nothing of the machine; every process
    # shows what is the same on every process of a machine (the trainer still takes the rank for its GPU)
    ({"WORLD_SIZE": "4", "RANK": "3"}, (3, 4, 0)),
    ({"WORLD_SIZE": "abc"}, (0, 1, 0)),  # pretrain itself refuses these
    ({"WORLD_SIZE": "2", "RANK": "5"}, (0, 1, 0)),
])
def test_the_command_line_decides_who_prints_leniently(monkeypatch, env, expected):
    from spacy_elmo.ranks import printing_ranks

    _clear_ranks(monkeypatch, **env)
    assert printing_ranks() == expected


def _run_main(monkeypatch, argv) -> int:
    """The exit status of ``spacy-elmo ARGV`` run by main(), its warning filters and format undone after."""
    import sys
    import warnings

    from spacy_elmo.cli import main

    monkeypatch.setattr(sys, "argv", ["spacy-elmo", *argv])
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    with warnings.catch_warnings():
        with pytest.raises(SystemExit) as stopped:
            main()
        muted = [f for f in warnings.filters if f[1] is not None and f[1].pattern.startswith("spacy-elmo")]
    assert not muted or argv[0] == "pretrain"
    return stopped.value.code


def test_a_malformed_rank_refuses_pretrain_alone_with_its_name(monkeypatch, capsys, tmp_path):
    """WORLD_SIZE=abc ended every command with int()'s ValueError traceback before it ran; then every
    command (--help too) with the variable's name. Only pretrain runs as a rank of torchrun: it refuses."""
    from .conftest import tiny_pretrain_args

    _clear_ranks(monkeypatch, WORLD_SIZE="abc")
    assert _run_main(monkeypatch, ["--help"]) == 0
    assert "pretrain" in capsys.readouterr().out
    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    assert _run_main(monkeypatch, args) == 1
    err = capsys.readouterr().err
    assert "WORLD_SIZE='abc'" in err and "unset WORLD_SIZE" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_rank_not_below_the_world_size_is_one_refusal(monkeypatch, tmp_path):
    """WORLD_SIZE=2 RANK=5, pretrain run in-process (CliRunner): the trainer raised the ValueError, and
    reporting it read the environment again, raising it anew inside the handler (a chained traceback)."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    from .conftest import tiny_pretrain_args

    _clear_ranks(monkeypatch, WORLD_SIZE="2", RANK="5")
    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert "RANK='5'" in result.output and "from 0 to 1" in result.output


def test_other_commands_run_whole_on_any_rank(monkeypatch, capsys):
    """Only pretrain runs as one of torchrun's processes: another command on a rank other than 0 (its
    environment inherited) printed no usage error and no warning, exiting 2 without a word."""
    _clear_ranks(monkeypatch, WORLD_SIZE="2", RANK="1", LOCAL_RANK="1")
    assert _run_main(monkeypatch, ["embed", "--bogus"]) == 2
    assert "No such option" in capsys.readouterr().err


def test_the_first_rank_to_stop_is_counted_afresh_after_an_elastic_restart(monkeypatch):
    """torchrun's store outlives a restart of its workers (--max-restarts): the count of stopped ranks went
    on, so after a restart no rank was the first and a stop said nothing of how to go on."""
    import torch.distributed as dist

    from spacy_elmo.cli import pretrain
    from spacy_elmo.ranks import Ranks

    store = dist.HashStore()
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    ranks = [Ranks(1, 2, 1), Ranks(0, 2, 0)]  # rank 1 stopped first
    assert [pretrain._first_to_stop(r) for r in ranks] == [True, False]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert [pretrain._first_to_stop(r) for r in ranks] == [True, False]


def test_a_store_that_does_not_answer_leaves_the_word_to_rank_0(monkeypatch):
    """torchrun's store whose host stopped answering (a hung node, its connection still open) blocked the
    stopped rank's count for ever, whatever set_timeout said, and Ctrl-C could not break it (the signal is
    recorded while the end is reported): the rank waits a bounded time, then rank 0 speaks."""
    import threading

    import torch.distributed as dist

    from spacy_elmo.cli import pretrain
    from spacy_elmo.ranks import Ranks

    answered = threading.Event()

    class Stopped:
        def set_timeout(self, timeout):
            pass

        def add(self, key, amount):
            answered.wait(20)  # the host came back: this rank would have been the first
            return 1

    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", Stopped)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setattr(pretrain, "STORE_WAIT_S", 0.05, raising=False)
    try:
        assert [pretrain._first_to_stop(Ranks(r, 2, r)) for r in (1, 0)] == [False, True]
    finally:
        answered.set()


def test_only_the_blocks_before_the_loop_wait_hours(tmp_path, monkeypatch):
    """Every :func:`_settled` block waited on the group of the tokenization's 48-hour timeout, also a checkpoint's,
    a held-out evaluation's and a log line's: a rank hung in the loop held the others 48 hours, not the process
    group's timeout as before. The blocks before the loop (OUTPUT_DIR, the held-out text, the corpus, its cache)
    wait hours; those in the loop wait on a group of the default timeout."""
    import inspect

    from spacy_elmo.training import trainer

    used = []

    def lowest_failed(group, failed):  # what _settled all-reduces on, and for which block
        caller = next(f.function for f in inspect.stack() if f.filename == trainer.__file__
                      and f.function not in ("_settled", "lowest_failed"))
        used.append((caller, group))
        return None

    monkeypatch.setattr(trainer, "_wait_groups", lambda world: trainer._Groups("setup", "loop", "leave"))
    monkeypatch.setattr(trainer, "_lowest_failed", lowest_failed)
    monkeypatch.setattr(trainer.dist, "get_rank", lambda group=None: 0)
    held = write_corpus(tmp_path / "held.txt", 30, seed=1)
    trainer.train(tiny_train_config(write_corpus(tmp_path / "train.txt", 200), tmp_path / "out", max_steps=4,
                                    checkpoint_every=2, log_every=1, heldout=str(held)))
    groups = [group for _, group in used]
    in_loop = groups.index("loop")  # the first log line's
    assert set(groups[:in_loop]) == {"setup"} and set(groups[in_loop:]) == {"loop"}, used
    assert {caller for caller, _ in used[:in_loop]} == {"_train"}, used
    assert {caller for caller, _ in used[in_loop:]} == {"_train", "save", "evaluate_heldout"}, used
