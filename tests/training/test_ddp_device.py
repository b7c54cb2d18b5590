"""The GPU each DDP process trains on (trainer._setup_distributed), with the GPUs and the process group mocked: the
CPU suffices. No spaCy."""

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
