"""The GPU each DDP process trains on (trainer._setup_distributed), with the GPUs and the process group mocked: the
CPU suffices. No spaCy."""

import os
import socket

import pytest
import torch

from spacy_elmo.training import trainer
from spacy_elmo.training.trainer import TrainConfig


def _setup(monkeypatch, n_gpus, visible=None, **env):
    """``(result of _setup_distributed on cuda, the devices it set)`` with ``n_gpus`` GPUs visible and ``env``."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpus)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(torch.device(d)))
    backends = []
    monkeypatch.setattr(trainer.dist, "init_process_group", lambda backend, *a, **k: backends.append(backend))
    monkeypatch.setattr(trainer.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(trainer.dist, "get_rank", lambda: int(env["RANK"]))
    monkeypatch.setattr(trainer.dist, "get_world_size", lambda: int(env["WORLD_SIZE"]))
    result = trainer._setup_distributed(TrainConfig(train_path="t", output_dir="o", device="cuda"))
    assert backends == ["nccl"]
    return result, chosen


@pytest.mark.parametrize("env", [
    {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"},  # a CUDA_VISIBLE_DEVICES per rank under torchrun
    {"WORLD_SIZE": "8", "RANK": "5"},  # a launcher that sets no LOCAL_RANK (defaults to RANK), over machines
])
def test_a_process_that_sees_one_gpu_of_its_own_trains_on_it(monkeypatch, env):
    """A launcher (Slurm's --gpus-per-task=1, a CUDA_VISIBLE_DEVICES per rank) gives each process one GPU, which
    it sees as cuda:0: _setup_distributed refused rank 1 ("needs one GPU per process but only 1 are visible"),
    taking LOCAL_RANK (or RANK, where no LOCAL_RANK is set) as an index into the visible GPUs (cudarev)."""
    (rank, world, device), chosen = _setup(monkeypatch, 1, visible="3", **env)
    assert (rank, world, device) == (int(env["RANK"]), int(env["WORLD_SIZE"]), torch.device("cuda", 0))
    assert chosen == [torch.device("cuda", 0)]


def test_a_process_that_sees_the_machines_gpus_trains_on_gpu_local_rank(monkeypatch):
    """torchrun on one machine of four GPUs: rank 2's GPU is cuda:2."""
    (rank, world, device), chosen = _setup(monkeypatch, 4, WORLD_SIZE="4", RANK="2", LOCAL_RANK="2")
    assert (rank, world, device) == (2, 4, torch.device("cuda", 2)) and chosen == [device]


@pytest.mark.parametrize("n_gpus, visible, shown", [(2, "0,1", "CUDA_VISIBLE_DEVICES=0,1"),
                                                    (3, None, "CUDA_VISIBLE_DEVICES=unset")])
def test_a_local_rank_past_the_visible_gpus_is_refused_naming_both(monkeypatch, n_gpus, visible, shown):
    """More processes on a machine than it has GPUs (or a LOCAL_RANK defaulted to a RANK of another machine): the
    message names LOCAL_RANK, the GPUs visible in agreement ("2 GPUs are") and CUDA_VISIBLE_DEVICES."""
    with pytest.raises(RuntimeError) as err:
        _setup(monkeypatch, n_gpus, visible=visible, WORLD_SIZE="6", RANK="5", LOCAL_RANK="5")
    message = str(err.value)
    assert "rank 5 of 6 and LOCAL_RANK 5" in message
    assert f"but {n_gpus} GPUs are visible ({shown})" in message


# -- two ranks on one GPU (trainer._refuse_shared_gpu) ---------------------------------------------------------
_GROUPS = trainer._Groups("setup", "loop", "leave")  # the gloo groups, mocked: the collectives below are


def _refusal(monkeypatch, rank, gpus, device=torch.device("cuda", 0)):
    """The error (None: none) of ``_refuse_shared_gpu`` on rank ``rank`` of a job whose ranks train on ``gpus``
    (``(machine, GPU UUID, CUDA_VISIBLE_DEVICES)`` by rank), and the collectives it ran. Every rank gathers the same
    list, so every rank fails alike or none: the settled block's all-reduce is the lowest of their verdicts."""
    calls = []
    monkeypatch.setattr(trainer.dist, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(trainer.dist, "get_world_size", lambda group=None: len(gpus))
    monkeypatch.setattr(trainer.socket, "gethostname", lambda: gpus[rank][0])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("Props", (), {"uuid": gpus[rank][1]})())
    if gpus[rank][2] == "unset":
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus[rank][2])

    def all_gather_object(out, mine, group):
        calls.append(("all_gather_object", group))
        assert mine == gpus[rank]
        out[:] = gpus

    def all_reduce(tensor, op, group):
        calls.append(("all_reduce", group))
        failed = int(tensor) < len(gpus)  # this rank's verdict, every other rank's too (the same list gathered)
        tensor.fill_(min(r if failed else len(gpus) for r in range(len(gpus))))

    monkeypatch.setattr(trainer.dist, "all_gather_object", all_gather_object)
    monkeypatch.setattr(trainer.dist, "all_reduce", all_reduce)
    try:
        trainer._refuse_shared_gpu(_GROUPS, device)
    except RuntimeError as err:
        return err, calls
    return None, calls


@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_on_one_gpu_are_refused_by_every_rank_and_said_by_rank_0(monkeypatch, rank):
    """torchrun --nproc-per-node 2 on a machine of one GPU: each rank sees one GPU and takes it (a CUDA_VISIBLE_DEVICES
    per process looks the same), and NCCL failed only in DDP's constructor, after rank 0 tokenized the corpus
    ("Duplicate GPU detected", no word of ours; before the one-GPU rule E_DDP_DEVICE refused rank 1 at once). Every
    rank now refuses it once the group is up, naming both ranks, the GPU and the fix; rank 0 says it, every rank
    leaves the run together."""
    gpus = [("node1", "GPU-aaaa", "unset")] * 2
    err, calls = _refusal(monkeypatch, rank, gpus)
    assert err is not None
    message = str(err)
    assert message.startswith("Ranks 0, 1 of this torchrun job of 2 processes train on the same GPU (GPU-aaaa on "
                              "machine node1, CUDA_VISIBLE_DEVICES=unset)")
    assert "--nproc-per-node" in message and "a CUDA_VISIBLE_DEVICES per process" in message
    assert trainer.said_by_this_rank(err, rank) == (rank == 0)
    assert getattr(err, trainer._SETTLED) == "leave"  # leave_failed_run waits for every rank
    assert not trainer._lost_peer(err)  # not taken for a peer that died
    assert calls == [("all_gather_object", "setup"), ("all_reduce", "setup")]


def test_only_the_ranks_that_share_a_gpu_are_named(monkeypatch):
    """Of three ranks, 0 and 2 share a GPU (their CUDA_VISIBLE_DEVICES named), 1 has its own: rank 1 too refuses it."""
    gpus = [("b", "GPU-1", "1"), ("b", "GPU-2", "2"), ("b", "GPU-1", "3")]
    err, _ = _refusal(monkeypatch, 1, gpus)
    assert err is not None and trainer.said_by_this_rank(err, 1) is False
    assert str(err).startswith("Ranks 0, 2 of this torchrun job of 3 processes train on the same GPU (GPU-1 on "
                               "machine b, CUDA_VISIBLE_DEVICES=1 or 3)")


@pytest.mark.parametrize("gpus", [
    [("node1", "GPU-aaaa", "0"), ("node1", "GPU-bbbb", "1")],  # a GPU each on one machine
    [("node1", "GPU-aaaa", "unset"), ("node2", "GPU-aaaa", "unset")],  # one machine each, whatever the UUIDs
], ids=["distinct_gpus", "other_machines"])
@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_on_gpus_of_their_own_train(monkeypatch, gpus, rank):
    err, calls = _refusal(monkeypatch, rank, gpus)
    assert err is None and calls == [("all_gather_object", "setup"), ("all_reduce", "setup")]


@pytest.mark.parametrize("groups, device", [(None, torch.device("cuda", 0)), (_GROUPS, torch.device("cpu"))],
                         ids=["one_process", "cpu"])
def test_one_process_or_the_cpu_gathers_nothing(monkeypatch, groups, device):
    """No collective, no GPU asked: one process has no peer, gloo's CPU ranks no GPU."""
    for name in ("all_gather_object", "all_reduce", "get_world_size", "get_rank"):
        monkeypatch.setattr(trainer.dist, name, lambda *a, **k: pytest.fail("a collective"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: pytest.fail("a GPU asked"))
    trainer._refuse_shared_gpu(groups, device)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_shared_gpu_is_refused_before_output_dir_is_made_or_the_corpus_read(monkeypatch, tmp_path, rank):
    """train() checks it right after the process group is up: no OUTPUT_DIR made (rank 0's lock), nothing tokenized."""
    monkeypatch.setattr(trainer, "_setup_distributed", lambda cfg: (rank, 2, torch.device("cuda", 0)))
    monkeypatch.setattr(trainer, "_wait_groups", lambda world: _GROUPS)
    monkeypatch.setattr(trainer, "build_corpus", lambda *a, **k: pytest.fail("tokenized"))
    monkeypatch.setattr(trainer, "check_init_model", lambda *a, **k: pytest.fail("--init read"))
    out = tmp_path / "out"
    _refusal(monkeypatch, rank, [("node1", "GPU-aaaa", "unset")] * 2, device=torch.device("cpu"))  # the mocks alone
    with pytest.raises(RuntimeError, match="train on the same GPU") as err:
        trainer.train(TrainConfig(train_path=str(tmp_path / "t.txt"), output_dir=str(out), device="cuda",
                                  init=str(tmp_path / "init")))
    assert trainer.said_by_this_rank(err.value, rank) == (rank == 0)
    assert not out.exists()


def _shared_gpu_worker(rank: int, port: int, uuids: tuple, result_dir: str) -> None:
    """Rank ``rank`` of 2 on a real gloo group, its GPU's UUID ``uuids[rank]`` (mocked; the machine is this one):
    what ``_refuse_shared_gpu`` does, whether this rank says it, then the run left as the command line leaves it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.get_device_properties = lambda d: type("Props", (), {"uuid": uuids[rank]})()
    trainer.dist.init_process_group("gloo")
    try:
        trainer._refuse_shared_gpu(trainer._wait_groups(2), torch.device("cuda", 0))
        outcome = "ran"
    except RuntimeError as err:
        outcome = f"{err}; says it: {trainer.said_by_this_rank(err, rank)}"
        trainer.leave_failed_run(err)
    with open(os.path.join(result_dir, f"rank{rank}.txt"), "w", encoding="utf-8") as f:
        f.write(outcome)
    if trainer.dist.is_initialized():
        trainer.dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("uuids", [("GPU-a", "GPU-a"), ("GPU-a", "GPU-b")], ids=["shared", "own"])
def test_two_real_ranks_on_one_gpu_both_refuse_it_and_rank_0_says_it(tmp_path, uuids):
    """Two processes on a gloo group: no rank hangs; on one GPU both refuse the run, rank 0 alone saying it."""
    from .test_ddp import _run_ranks

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _run_ranks(_shared_gpu_worker, (port, uuids, str(tmp_path)), timeout=120)
    outcomes = [(tmp_path / f"rank{r}.txt").read_text(encoding="utf-8") for r in range(2)]
    if uuids[0] != uuids[1]:
        assert outcomes == ["ran", "ran"]
        return
    for rank, outcome in enumerate(outcomes):
        assert outcome.startswith(f"Ranks 0, 1 of this torchrun job of 2 processes train on the same GPU (GPU-a on "
                                  f"machine {socket.gethostname()}, CUDA_VISIBLE_DEVICES=")
        assert outcome.endswith(f"says it: {rank == 0}")
