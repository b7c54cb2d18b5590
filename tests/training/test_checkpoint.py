"""checkpoint.py's file handling on its own: what load_checkpoint refuses, and which leftovers are removed."""

import pytest
import torch

from spacy_elmo.training import checkpoint as ckpt


class NotATensor:
    """Any class: a checkpoint is loaded with weights_only=True, so its pickle cannot name one."""


def _payload(**extra):
    return {"step": 1, "model": {}, "optimizer": {}, "ranks": [], "settings": {"init": None}, **extra}


def test_a_checkpoint_that_pickles_an_object_is_refused_not_run(tmp_path):
    """A checkpoint.pt whose pickle names a class (arbitrary code on load: a file from elsewhere) is refused as
    damaged; a weights_only=False load would have built the object."""
    ckpt.save_checkpoint(tmp_path, _payload(extra=NotATensor()))
    with pytest.raises(ValueError, match="checkpoint.pt is damaged or not a spacy-elmo checkpoint"):
        ckpt.load_checkpoint(tmp_path)
    ckpt.save_checkpoint(tmp_path, _payload())
    assert ckpt.load_checkpoint(tmp_path)["step"] == 1


@pytest.mark.parametrize("payload", [list(ckpt.PAYLOAD_KEYS), "step model optimizer ranks settings", 3])
def test_a_checkpoint_that_holds_no_dict_is_named_damaged(tmp_path, payload):
    """A file that holds a list (or string) of the payload's keys "has" them all to ``in``: named damaged, not a
    TypeError from indexing it."""
    torch.save(payload, tmp_path / ckpt.CHECKPOINT_NAME)
    with pytest.raises(ValueError, match="checkpoint.pt is damaged or not a spacy-elmo checkpoint"):
        ckpt.load_checkpoint(tmp_path)


def test_remove_leftovers_removes_killed_writes_only(tmp_path):
    """The temporary files of killed checkpoint writes (now ``.checkpoint.pt.PID.tmp``, before
    ``.checkpoint.pt.tmpPID``) go; a file that only starts like one is someone else's and stays."""
    import os

    ended = tmp_path / f".{ckpt.CHECKPOINT_NAME}.{2 ** 22 + 7}.tmp"
    old = tmp_path / f".{ckpt.CHECKPOINT_NAME}.tmp4242"
    kept = [tmp_path / f".{ckpt.CHECKPOINT_NAME}.tmpnotes", tmp_path / f".{ckpt.CHECKPOINT_NAME}.tmp",
            tmp_path / f"{ckpt.CHECKPOINT_NAME}.tmp4242", tmp_path / ckpt.CHECKPOINT_NAME]
    for path in (ended, old, *kept):
        path.write_bytes(b"x")
    assert not os.path.exists(f"/proc/{2 ** 22 + 7}")  # (above pid_max: no process runs with it)
    ckpt.remove_leftovers(tmp_path)
    assert not ended.exists() and not old.exists() and all(path.exists() for path in kept)


def _older_checkpoint_beside(tmp_path, provenance, config=None):
    """An older checkpoint (settings without ``init``) beside a saved model's config.json with ``provenance``
    (or the text ``config``)."""
    import json

    from spacy_elmo.bilm.native_io import CONFIG_NAME, FORMAT

    payload = _payload()
    del payload["settings"]["init"]
    ckpt.save_checkpoint(tmp_path, payload)
    if config is None:
        config = json.dumps({"format": FORMAT, "version": 1, "config": {}, "provenance": provenance})
    (tmp_path / CONFIG_NAME).write_text(config)
    return ckpt.load_checkpoint(tmp_path)["settings"]


def test_an_older_checkpoint_takes_its_init_from_the_saved_models_provenance(tmp_path):
    """A checkpoint from before ``init`` was recorded: the model saved with it tells its --init."""
    assert _older_checkpoint_beside(tmp_path, {"steps": 4, "init": "base"})["init"] == "base"


@pytest.mark.parametrize("provenance", [{"steps": 4}, {}, None])
def test_an_older_checkpoint_whose_saved_model_records_no_init_resumes_without_one(tmp_path, provenance):
    """A provenance that records other things but no init (a run from scratch): no init, not a KeyError."""
    assert "init" not in _older_checkpoint_beside(tmp_path, provenance)


@pytest.mark.parametrize("provenance", [["init"], "init", 3])
def test_an_older_checkpoint_beside_a_provenance_that_is_no_object_takes_no_init_from_it(tmp_path, provenance):
    """A config.json provenance that is no object (hand-edited; ``"init" in`` a list or string holding "init" is
    True) records nothing: no init, not a TypeError from indexing it."""
    assert "init" not in _older_checkpoint_beside(tmp_path, provenance)


@pytest.mark.parametrize("config", ["{not json", "[]", '{"format": "bert"}'])
def test_an_older_checkpoint_beside_a_config_json_that_cannot_be_read_takes_no_init_from_it(tmp_path, config):
    """A damaged or foreign config.json beside an older checkpoint (the ValueErrors read_meta raises for it) tells
    no init: the checkpoint still loads."""
    assert "init" not in _older_checkpoint_beside(tmp_path, None, config=config)


@pytest.mark.parametrize("name, value", [("data", "a1b2"), ("lang", "en"), ("optimizer", "adam"), ("lr", 0.1),
                                         ("dropout", 0.1), ("clip", 5.0), ("init", "base"), ("new_vocab", True),
                                         ("init_vocab", "c3d4"), ("padded_epochs", True)])
def test_a_checkpoint_from_before_a_setting_was_recorded_resumes(tmp_path, name, value):
    """Each setting recorded only since a later version: a checkpoint without it resumes (the run it came from
    used what its absence says), not refused as changed."""
    ckpt.check_settings({"batch_size": 2}, {"batch_size": 2, name: value}, tmp_path)


def test_a_resume_leaving_out_an_init_that_is_damaged_now_gives_advice_right_either_way(tmp_path):
    """An --init whose files are damaged now (has_softmax raises ValueError, not OSError) cannot tell whether the
    run built its vocabulary because of --new-vocab or a missing softmax either: the refusal says both, as for
    one that is gone, not the damaged model's own error."""
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=rf"by --new-vocab or because {damaged} has no softmax.*"
                                         rf"Resume with --init {damaged} --new-vocab "):
        ckpt.check_settings({"init": str(damaged), "new_vocab": True}, {"init": None}, "out")


@pytest.mark.parametrize("sizes", [(None, 100), (100, None)])
def test_a_changed_init_vocabulary_whose_size_one_side_did_not_record_says_its_words_differ(sizes):
    """The same --init holding another vocabulary where a vocabulary size is unrecorded on one side: "its
    vocabulary holds other words", not a TypeError formatting None as a size."""
    saved = {"init": "/m/base", "init_vocab": "aaa", "vocab_size": sizes[0]}
    current = {"init": "/m/base", "init_vocab": "bbb", "vocab_size": sizes[1]}
    with pytest.raises(ValueError, match="its vocabulary holds other words than when the run started"):
        ckpt.check_settings({k: v for k, v in saved.items() if v is not None},
                            {k: v for k, v in current.items() if v is not None}, "/runs/tuned")


def test_a_resume_whose_model_differs_names_preset_and_options():
    """Another model than the checkpoint's (its config dict) is named as --preset/--options, not as a setting
    "model_config" no command line spells."""
    with pytest.raises(ValueError, match=r"holds the model \{'cell_dim': 8\}, but --preset/--options ask for "
                                         r"\{'cell_dim': 16\}"):
        ckpt.check_settings({"model_config": {"cell_dim": 8}}, {"model_config": {"cell_dim": 16}}, "/runs/tuned")


def test_a_cuda_checkpoint_resumed_on_the_cpu_leaves_the_cuda_generator_alone(monkeypatch):
    """The CUDA RNG state a GPU run saved is not restored on the CPU (torch.cuda.set_rng_state with the CPU device
    fails once CUDA is initialized; a CPU-only build queues it silently, so it is checked here by a stand-in)."""
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a, **k: pytest.fail("CUDA RNG set on the CPU"))
    sampler = torch.Generator().manual_seed(3)
    state = {"torch_rng": torch.get_rng_state(), "sampler_rng": sampler.get_state(), "cuda_rng": torch.get_rng_state()}
    assert ckpt.restore_rank_state(state, torch.Generator(), torch.device("cpu")) is None


def test_a_checkpoint_of_one_process_resumed_by_several_says_to_rerun_as_one(tmp_path):
    """E_RESUME_WORLD counts processes in agreement and, for a checkpoint of one process (no torchrun), says to rerun
    as one ("written by 1 processes (torchrun: ... = 1)" and "the same torchrun sizes" before)."""
    with pytest.raises(ValueError, match=r"written by 1 process \(one process: no torchrun, or torchrun with one\), "
                                         r"this run has 2 processes: .* Rerun as one process \(without torchrun\), or "):
        ckpt.check_settings({"world": 1}, {"world": 2}, tmp_path)
    with pytest.raises(ValueError, match=r"written by 3 processes \(torchrun: --nnodes x --nproc-per-node = 3\), this "
                                         r"run has 1 process: .* Rerun with the same torchrun sizes, or "):
        ckpt.check_settings({"world": 3}, {"world": 1}, tmp_path)
