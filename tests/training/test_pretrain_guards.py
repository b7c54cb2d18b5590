"""What pretrain refuses or stops on, found by using the command as a new user would: a run that diverged,
an OUTPUT_DIR holding an exported AllenNLP model."""

import errno
import gzip
import json
import math
import os
import signal
import warnings

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.training import checkpoint as ckpt
from spacy_elmo.training.data import build_corpus
from spacy_elmo.training.trainer import LOG_NAME, read_log, train
from tests.cli_text import mixed_runner as runner, plain

from .conftest import locked_by_another_process, tiny_pretrain_args, tiny_train_config, write_corpus



def _losses(out):
    return [(e["step"], e["loss"]) for e in read_log(out) if "loss" in e]


def test_a_diverged_step_stops_the_run_before_it_overwrites_the_last_checkpoint(tmp_path, monkeypatch):
    """A non-finite loss or gradient norm stops the run at that step: its checkpoint, model and log stay
    those of the last checkpoint (they were overwritten with NaN weights, which no loader accepts),
    and the error names the step and the way on; that checkpoint then resumes to the straight run."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    settings = dict(max_steps=6, checkpoint_every=2)
    straight, diverged = tmp_path / "straight", tmp_path / "diverged"
    train(tiny_train_config(train_file, straight, **settings))
    real = torch.nn.utils.clip_grad_norm_
    calls = []

    def nan_at_step_3(parameters, clip):
        calls.append(1)
        norm = real(parameters, clip)
        return norm * math.nan if len(calls) == 3 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", nan_at_step_3)
    with pytest.raises(ValueError, match="diverged at step 3: the gradient norm is nan") as err:
        train(tiny_train_config(train_file, diverged, **settings))
    assert f"{diverged} keeps its checkpoint and model of step 2" in str(err.value)
    assert f"--init {diverged}" in str(err.value)
    monkeypatch.undo()
    assert ckpt.load_checkpoint(diverged)["step"] == 2
    assert max(e["step"] for e in read_log(diverged)) == 2  # nothing logged of the diverged step
    BiLM.load(diverged)  # the model of step 2, finite
    train(tiny_train_config(train_file, diverged, resume=True, **settings))
    a, b = _losses(straight), _losses(diverged)
    assert [s for s, _ in a] == [s for s, _ in b]
    np.testing.assert_allclose([x for _, x in b], [x for _, x in a], rtol=1e-6, atol=1e-7)


def _weights_made_infinite(monkeypatch):
    """Every optimizer step from now on leaves the first weight tensor infinite (a learning rate too large)."""
    real = torch.optim.Adagrad.step

    def step(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].fill_(math.inf)
        return result

    monkeypatch.setattr(torch.optim.Adagrad, "step", step)


def test_weights_that_stopped_being_finite_are_never_saved(tmp_path, monkeypatch):
    """A step can leave its loss and gradient finite but the weights not: the checkpoint due at that step is
    refused, naming the value found (it said "nan" of infinite weights too), and OUTPUT_DIR holds no model that
    would fail to load. Where no checkpoint is due, the next step's loss is what diverges."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    _weights_made_infinite(monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="diverged at step 1: a weight is inf ") as err:
        train(tiny_train_config(train_file, out, checkpoint_every=1))
    assert "keeps its checkpoint" not in str(err.value) and "lower --lr" in str(err.value)
    assert not ckpt.checkpoint_path(out).exists() and not (out / "config.json").exists()
    with pytest.raises(ValueError, match="diverged at step 2: the loss is (nan|inf) "):
        train(tiny_train_config(train_file, tmp_path / "later", checkpoint_every=2))


def test_epochs_too_many_to_count_are_refused_before_the_corpus_is_read(tmp_path):
    """--epochs 1e308 (finite) crashed with an OverflowError counting its steps, after the corpus was read; then it
    was refused, but only once the corpus had been tokenized into OUTPUT_DIR (the count needed its size). The
    bound that holds for every corpus refuses it first, OUTPUT_DIR untouched."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="epochs must be positive and finite, at most 1.949e[+]289 .*--max-steps.*found 1e[+]308"):
        train(tiny_train_config(train_file, out, max_steps=None, epochs=1e308))
    assert not out.exists()


def test_model_sizes_torch_cannot_hold_are_refused_before_the_corpus_is_read(tmp_path):
    """r45: train(TrainConfig(model={"projection_dim": 10**20})) tokenized the corpus into OUTPUT_DIR/data before
    the model's sizes were read. TrainConfig.validate refuses them (BiLMConfig's error), OUTPUT_DIR untouched."""
    train_file = write_corpus(tmp_path / "train.txt", 20)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="These sizes make a biLM of .* at most its default: projection_dim=10{20}\\."):
        train(tiny_train_config(train_file, out, model={"projection_dim": 10**20}))
    assert not out.exists()


class _Tokenizing(Exception):
    pass


@pytest.mark.parametrize("optimizer, copies", [("adagrad", 3), ("adam", 4)])
def test_a_model_past_the_machines_memory_is_warned_of_before_the_corpus_is_read(tmp_path, monkeypatch, optimizer,
                                                                                 copies):
    """r45: sizes that torch can hold but no machine (projection_dim 2**40: 36 PiB of weights) tokenized the whole
    corpus, then failed with "can't allocate memory". A warning as the run begins, with the need counted (the
    weights, gradients and optimizer state) and the memory there is; a model that fits says nothing."""
    from spacy_elmo.bilm import BiLMConfig
    from spacy_elmo.bilm.config import byte_size
    from spacy_elmo.training import trainer

    def tokenizing(*args, **kwargs):
        raise _Tokenizing

    assert trainer.physical_memory() > 2**20  # this machine's, as Linux says it
    monkeypatch.setattr(trainer, "build_corpus", tokenizing)
    train_file = write_corpus(tmp_path / "train.txt", 20)
    need = copies * 4 * BiLMConfig.from_dict(tiny_train_config(train_file, tmp_path).model).n_parameters
    for memory, warned in ((need - 1, True), (need, False)):
        monkeypatch.setattr(trainer, "physical_memory", lambda: memory)
        with warnings.catch_warnings(record=True) as caught, pytest.raises(_Tokenizing):
            warnings.simplefilter("always")
            train(tiny_train_config(train_file, tmp_path / f"out-{memory}", optimizer=optimizer))
        said = [str(w.message) for w in caught if "these model sizes make a biLM" in str(w.message)]
        assert len(said) == warned, said
        if warned:
            assert f"more than this machine's memory ({byte_size(memory)})" in said[0] and "Ctrl-C" in said[0], said


def test_a_cuda_run_counts_the_weights_in_this_machines_memory_and_the_rest_on_the_gpu(monkeypatch):
    """On CUDA the biLM is built in this machine's memory (the weights alone), and trained on the GPU (weights,
    gradients, optimizer state): each is compared with its own memory (the GPU's faked: no GPU needed)."""
    from types import SimpleNamespace

    from spacy_elmo.bilm import BiLMConfig
    from spacy_elmo.training import trainer

    config = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    weights = 4 * config.n_parameters
    cuda = torch.device("cuda:0")

    def said(host, gpu):
        monkeypatch.setattr(trainer, "physical_memory", lambda: host)
        monkeypatch.setattr(trainer.torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=gpu))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer._warn_model_past_memory(config, "adagrad", cuda)
        return [str(w.message) for w in caught]

    assert said(weights, 3 * weights) == []  # the weights fit here, all three copies there
    assert "more than this machine's memory" in said(weights - 1, 10**12)[0]
    assert "more than the memory of cuda:0" in said(10**12, 3 * weights - 1)[0]


def test_the_memory_warning_counts_every_process_of_the_machine_and_is_said_once_there(monkeypatch, tmp_path):
    """Under torchrun each process builds and trains its own biLM: the warning counted one process's need, and only
    global rank 0 gave it (one machine of a job of several). The need is this machine's processes' (torchrun's
    LOCAL_WORLD_SIZE; on CUDA one GPU each) and LOCAL_RANK 0 of every machine says it (diffrev3)."""
    from spacy_elmo.bilm import BiLMConfig
    from spacy_elmo.ranks import Ranks, machine_processes
    from spacy_elmo.training import trainer

    config = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    need = 3 * 4 * config.n_parameters  # Adagrad: weights, gradients, accumulators
    monkeypatch.setattr(trainer, "physical_memory", lambda: 2 * need)
    for processes, warned in ((2, False), (3, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer._warn_model_past_memory(config, "adagrad", torch.device("cpu"), processes)
        assert len([w for w in caught if "these model sizes make a biLM" in str(w.message)]) == warned, processes
    for local_world, expected in (("4", 4), (None, 8), ("3", 8), ("x", 8), ("16", 8)):  # else every process
        if local_world is None:
            monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world)
        assert machine_processes(Ranks(5, 8, 1)) == expected, local_world
    assert machine_processes(Ranks(0, 1, 0)) == 1
    # said where LOCAL_RANK is 0 (a second machine's first process), with this machine's processes counted
    seen = []
    monkeypatch.setattr(trainer, "_warn_model_past_memory", lambda *args: seen.append(args[3]))
    monkeypatch.setattr(trainer, "build_corpus", lambda *a, **k: (_ for _ in ()).throw(_Tokenizing()))
    monkeypatch.setattr(trainer, "torchrun_ranks", lambda: Ranks(4, 8, 0))
    monkeypatch.setattr(trainer, "_setup_distributed", lambda cfg: (0, 1, torch.device("cpu")))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    train_file = write_corpus(tmp_path / "train.txt", 20)
    with pytest.raises(_Tokenizing):
        train(tiny_train_config(train_file, tmp_path / "out"))
    assert seen == [4]


def test_the_epochs_bound_is_the_largest_whose_steps_are_counted_for_every_corpus():
    """MAX_EPOCHS is no arbitrary cap: times the most steps an epoch can have it is a finite number, the next
    number above it is not; the run's count at the bound is finite for every epoch length up to that most."""
    from spacy_elmo.training.trainer import MAX_EPOCHS, MOST_STEPS_PER_EPOCH, TrainConfig, _total_steps

    assert MOST_STEPS_PER_EPOCH == 2**63 - 1  # the most elements a 64-bit array indexes
    above = math.nextafter(MAX_EPOCHS, math.inf)
    assert math.isinf(above * MOST_STEPS_PER_EPOCH)
    for steps in (1, 3, 2**53 + 1, MOST_STEPS_PER_EPOCH):
        cfg = TrainConfig(train_path="t", output_dir="o", epochs=MAX_EPOCHS)
        cfg.validate()
        assert _total_steps(cfg, steps) >= steps  # an int: the float product was finite
    with pytest.raises(ValueError, match="epochs must be positive and finite, at most"):
        TrainConfig(train_path="t", output_dir="o", epochs=above).validate()


@pytest.mark.parametrize("sentences", [False, True], ids=["streams", "sentences"])
def test_an_epoch_has_no_more_steps_than_its_corpus_has_tokens(tmp_path, sentences):
    """MOST_STEPS_PER_EPOCH's premise, at the smallest batches (one row of one token a step, one process)."""
    from spacy_elmo.training.data import Corpus, build_corpus
    from spacy_elmo.training.sentences import SentenceBatcher
    from spacy_elmo.training.stream import StreamBatcher

    train_file = write_corpus(tmp_path / "train.txt", 50)
    build_corpus(str(train_file), "en", tmp_path / "data", progress=False)
    corpus = Corpus.load(tmp_path / "data")
    batcher = SentenceBatcher(corpus, 1, 1, 0, 0, 1) if sentences else StreamBatcher(corpus, 1, 1, 0, 0, 1)
    assert 0 < batcher.steps_per_epoch <= len(corpus.tokens)


@pytest.mark.filterwarnings("ignore:.*holds the weights only:UserWarning", "ignore:.*AllenNLP will not run:UserWarning")
def test_pretrain_refuses_an_output_dir_holding_allennlp_weights(tmp_path):
    """pretrain into an `export --format allennlp` directory wrote its model beside the AllenNLP files, over
    their vocab.txt: the directory then loaded as neither model. It is refused, untouched, by the command."""
    model = tmp_path / "model"
    args, train_file, _ = tiny_pretrain_args(tmp_path, model)
    assert runner.invoke(app, args).exit_code == 0
    exported = tmp_path / "exported"
    result = runner.invoke(app, ["export", str(model), str(exported), "--format", "allennlp"])
    assert result.exit_code == 0, result.output
    before = {p.name: p.read_bytes() for p in exported.iterdir()}
    for extra in ([], ["--resume"]):
        other_args, _, _ = tiny_pretrain_args(tmp_path, exported, *extra)
        result = runner.invoke(app, other_args)
        assert result.exit_code == 1, result.output
        assert f"{exported} holds AllenNLP weights (options.json, weights.hdf5)" in plain(result.output)
        assert {p.name: p.read_bytes() for p in exported.iterdir()} == before
    BiLM.load(exported)  # still one model


@pytest.mark.parametrize("option", ["epochs", "lr"])
def test_an_infinite_epochs_or_learning_rate_is_a_usage_error(tmp_path, option):
    """--epochs inf passed the option's check and crashed computing the number of steps (OverflowError);
    --lr inf was accepted, and its first step always diverged (every weight it moved infinite or NaN)."""
    from spacy_elmo.training.trainer import TrainConfig

    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    if option == "epochs":  # instead of --max-steps: one or the other
        steps = args.index("--max-steps")
        args[steps:steps + 2] = ["--epochs", "inf"]
    else:
        args += ["--lr", "inf"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"--{option}" in plain(result.output) and "must be positive and finite" in plain(result.output)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=f"{option} must be positive and finite"):
        TrainConfig(train_path="t", output_dir="o", **{option: math.inf}).validate()


def test_a_resume_given_another_heldout_measures_that_text(tmp_path):
    """Resuming a finished run with another --heldout printed (and returned) the perplexity its log held of
    the first text. The resume measures the text it is given (evaluate's number on the same model), and
    each held-out line of the log names its text by a digest."""
    from spacy_elmo.training.evaluate import evaluate_model_dir

    train_file = write_corpus(tmp_path / "train.txt", 200)
    first, second = write_corpus(tmp_path / "first.txt", 30, seed=1), write_corpus(tmp_path / "second.txt", 30, seed=2)
    out = tmp_path / "out"
    settings = dict(max_steps=4, checkpoint_every=2)
    done = train(tiny_train_config(train_file, out, heldout=str(first), **settings))
    again = train(tiny_train_config(train_file, out, heldout=str(first), resume=True, **settings))
    assert again["heldout"] == done["heldout"]  # the same text: the logged number, not measured again
    other = train(tiny_train_config(train_file, out, heldout=str(second), resume=True, **settings))
    expected = evaluate_model_dir(out, second)
    assert other["heldout"]["perplexity"] == pytest.approx(expected["perplexity"], rel=1e-6)
    assert other["heldout"]["perplexity"] != pytest.approx(done["heldout"]["perplexity"], rel=1e-6)
    events = [e for e in read_log(out) if e.get("event") == "heldout"]
    assert [e["step"] for e in events] == [2, 4, 4]
    assert events[0]["heldout_digest"] == events[1]["heldout_digest"] != events[2]["heldout_digest"]


def _edit_log(out, edit):
    """Rewrites the train_log.jsonl of the run in ``out`` with ``edit`` applied to its entries (a list of dicts,
    edited in place)."""
    log = out / LOG_NAME
    entries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    edit(entries)
    log.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")


def _heldout_event(entries):
    """The only held-out event of ``entries`` (of train_log.jsonl)."""
    (event,) = [e for e in entries if e.get("event") == "heldout"]
    return event


def test_a_resume_measures_again_a_heldout_number_of_other_rows(tmp_path):
    """A resume reused the logged held-out number of its step on the same text, also where that number was read
    in other rows: logged under an earlier rule of where a stream's rows start, or with another eval_batch_size.
    It measures again where the logged row count is not the one this run reads the text in."""
    from spacy_elmo.training.evaluate import evaluate_model_dir

    train_file, held = write_corpus(tmp_path / "train.txt", 200), write_corpus(tmp_path / "held.txt", 30, seed=1)
    out = tmp_path / "out"
    settings = dict(max_steps=2, checkpoint_every=2, heldout=str(held))
    done = train(tiny_train_config(train_file, out, **settings))
    event = _heldout_event(read_log(out))
    assert event["n_rows"] == done["heldout"]["n_rows"] > 1
    # as an earlier rule logged it: other rows, another number
    event.update(n_rows=event["n_rows"] - 1, perplexity=1.5)
    _edit_log(out, lambda entries: _heldout_event(entries).update(n_rows=event["n_rows"], perplexity=1.5))
    again = train(tiny_train_config(train_file, out, resume=True, **settings))
    assert again["heldout"]["perplexity"] == pytest.approx(done["heldout"]["perplexity"], rel=1e-6)
    assert again["heldout"]["n_rows"] == done["heldout"]["n_rows"]
    # another eval_batch_size cuts the text into other rows: measured again too, as evaluate reads it
    other = train(tiny_train_config(train_file, out, resume=True, eval_batch_size=1, **settings))
    assert other["heldout"]["n_rows"] == 1
    expected = evaluate_model_dir(out, held, batch_size=1)
    assert other["heldout"]["perplexity"] == pytest.approx(expected["perplexity"], rel=1e-6)
    assert [e["n_rows"] for e in read_log(out) if e.get("event") == "heldout"] == [event["n_rows"], done["heldout"]["n_rows"], 1]


#: Sentence lengths (in words, with the full stop) of a held-out text whose stream eval_batch_size 29 and 32 cut
#: into as many rows (21), starting at other places
ALIAS_LENGTHS = [22, 4, 20, 33, 54, 27, 15, 14, 39, 26, 18, 23, 33, 52, 58, 12, 29, 47]


def _text_of_lengths(path, lengths):
    words = "the cat sat on a mat dog ran big red small house bird tree".split()
    lines = [" ".join(words[(i + j) % len(words)] for j in range(n - 1)) + " ." for i, n in enumerate(lengths)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_resume_measures_again_a_heldout_number_of_as_many_rows_cut_elsewhere(tmp_path):
    """A resume matched a logged held-out number on its row count alone: another eval_batch_size that cut the
    stream into as many rows at other places (29 and 32 here: 21 rows each) reused the number read in the other
    rows (38.48692 where this run read 38.48775, on a text alike). The log records a digest of where the rows start and a resume
    matches it; an event without one (logged before it was) is measured again."""
    from spacy_elmo.training.evaluate import _sentences_corpus, evaluate_model_dir, read_text, stream_row_starts
    from spacy_elmo.training.vocab import SPECIALS, Vocab

    train_file, held = write_corpus(tmp_path / "train.txt", 200), _text_of_lengths(tmp_path / "held.txt", ALIAS_LENGTHS)
    corpus = _sentences_corpus(Vocab(list(SPECIALS)), read_text(str(held), "en")[0])[1]
    cut_29, cut_32 = (stream_row_starts(corpus.starts, len(corpus.tokens), b) for b in (29, 32))
    assert len(cut_29) == len(cut_32) == 21 and not np.array_equal(cut_29, cut_32)  # the case itself
    out = tmp_path / "out"
    settings = dict(max_steps=2, checkpoint_every=2, heldout=str(held))
    done = train(tiny_train_config(train_file, out, eval_batch_size=29, **settings))
    again = train(tiny_train_config(train_file, out, resume=True, eval_batch_size=32, **settings))
    expected = evaluate_model_dir(out, held, batch_size=32)
    assert again["heldout"]["perplexity"] == pytest.approx(expected["perplexity"], rel=1e-9)
    assert again["heldout"]["perplexity"] != pytest.approx(done["heldout"]["perplexity"], rel=1e-9)
    events = [e for e in read_log(out) if e.get("event") == "heldout"]
    assert len(events) == 2 and events[0]["rows_digest"] != events[1]["rows_digest"]
    assert events[0]["n_rows"] == events[1]["n_rows"] == len(cut_32)
    # the same reading again: reused (the log's marked number comes back, nothing is measured)

    def last_heldout(entries):  # the last event is a resume's: its held-out event is before it
        return [e for e in entries if e.get("event") == "heldout"][-1]

    _edit_log(out, lambda entries: last_heldout(entries).update(perplexity=1.5))
    assert train(tiny_train_config(train_file, out, resume=True, eval_batch_size=32, **settings))["heldout"]["perplexity"] == 1.5
    assert "rows_digest" not in train(tiny_train_config(train_file, out, resume=True, eval_batch_size=32, **settings))["heldout"]
    # an event logged without the rows' digest: measured again
    _edit_log(out, lambda entries: last_heldout(entries).pop("rows_digest"))
    measured = train(tiny_train_config(train_file, out, resume=True, eval_batch_size=32, **settings))
    assert measured["heldout"]["perplexity"] == pytest.approx(expected["perplexity"], rel=1e-9)
    assert len([e for e in read_log(out) if e.get("event") == "heldout"]) == 3


def test_a_sentences_resume_reuses_a_heldout_number_logged_before_its_row_count(tmp_path):
    """Every sentence read alone is one reading of the text whatever eval_batch_size: a --sentences resume reuses
    the logged number of its step on the same text also where the event has no n_rows (logged before it was),
    rather than measuring it again (up to 260 s a checkpoint for the bundled model); its result has the count."""
    train_file, held = write_corpus(tmp_path / "train.txt", 200), write_corpus(tmp_path / "held.txt", 30, seed=1)
    out = tmp_path / "out"
    settings = dict(max_steps=2, checkpoint_every=2, heldout=str(held), sentences=True)
    done = train(tiny_train_config(train_file, out, **settings))
    event = _heldout_event(read_log(out))
    assert event["mode"] == "per_sentence" and event["n_rows"] == done["heldout"]["n_rows"] == 30

    def older(entries):  # logged before n_rows and rows_digest were; the perplexity a mark: reused, not measured
        held = _heldout_event(entries)
        for key in ("n_rows", "rows_digest"):
            del held[key]
        held["perplexity"] = 1.5

    _edit_log(out, older)
    again = train(tiny_train_config(train_file, out, resume=True, eval_batch_size=5, **settings))
    assert again["heldout"]["perplexity"] == 1.5 and again["heldout"]["n_rows"] == 30
    assert len([e for e in read_log(out) if e.get("event") == "heldout"]) == 1


def test_a_resume_without_the_runs_heldout_says_it_measures_none(tmp_path):
    """`pretrain --resume` without the --heldout the run had (the README's resume example) stopped measuring
    held-out perplexity without a word. It warns once, naming the text the run measured last (a resume may have
    changed it) and its step; a resume given --heldout, and a run that measured none, say nothing. A log of an
    older spacy-elmo, whose held-out lines name no path, is named by the run's start."""
    import warnings

    train_file = write_corpus(tmp_path / "train.txt", 200)
    first, second = write_corpus(tmp_path / "first.txt", 30, seed=1), write_corpus(tmp_path / "second.txt", 30, seed=2)
    out = tmp_path / "out"

    def run(max_steps, **settings):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(tiny_train_config(train_file, out, max_steps=max_steps, checkpoint_every=2, **settings))
        return [str(w.message) for w in caught if "held-out" in str(w.message)]

    assert run(2, heldout=str(first)) == []
    assert run(4, heldout=str(second), resume=True) == []
    (said,) = run(6, resume=True)
    assert said.startswith(f"spacy-elmo: the run in {out} measured held-out perplexity on {second} (last at step 4)")
    assert said.endswith(f"resume with --heldout {second}.")
    assert run(8, resume=True) == [said]  # once a resume, naming the text measured last (step 4)
    _edit_log(out, lambda entries: [e.pop("heldout_path", None) for e in entries])
    (said,) = run(10, resume=True)
    assert f"measured held-out perplexity on {first} (last at step 4)" in said
    never = tmp_path / "never"
    train(tiny_train_config(train_file, never, max_steps=2, checkpoint_every=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(tiny_train_config(train_file, never, max_steps=4, checkpoint_every=2, resume=True))
    assert not [w for w in caught if "held-out" in str(w.message)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A pretrained tiny model and text: ``(model, text)``."""
    tmp_path = tmp_path_factory.mktemp("tiny_model")
    model = tmp_path / "model"
    args, train_file, _ = tiny_pretrain_args(tmp_path, model)
    assert runner.invoke(app, args).exit_code == 0
    return model, train_file


@pytest.mark.parametrize("command, bar", [
    (["evaluate", "{model}", "{text}"], "evaluating"),
    (["fit-state", "{model}", "{text}", "--rows", "2"], "fitting the initial state"),
    (["embed", "{text}", "{out}/vectors.h5", "--model", "{model}"], "embedding"),
])
def test_every_command_with_progress_bars_takes_no_progress(tiny_model, tmp_path, command, bar):
    """README: "Progress bars (--no-progress turns them off) ... every command's alike"; evaluate, fit-state
    and embed drew theirs with no way to turn them off (--no-progress was a usage error)."""
    model, text = tiny_model
    args = [a.format(model=model, text=text, out=tmp_path) for a in command]
    drawn = runner.invoke(app, args)
    assert drawn.exit_code == 0 and bar in drawn.output, drawn.output
    if command[0] == "embed":
        args.append("--overwrite")
    quiet = runner.invoke(app, [*args, "--no-progress"])
    assert quiet.exit_code == 0, quiet.output
    assert bar not in quiet.output and "%|" not in quiet.output


def _snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_second_run_into_an_output_dir_in_use_is_refused(tmp_path):
    """Two pretrain runs into one OUTPUT_DIR (another terminal, a job started again while the first runs)
    mixed their cache, checkpoints and log, or one failed on the other's half-written cache with a bare
    "[Errno 2] ... tokens.raw". The running one holds a lock on the directory: the second is refused and
    changes nothing, not even the running one's cache being staged (a resume building a new one, which the
    refused run deleted); once the first ends, even killed, the directory is free."""
    from spacy_elmo.training.trainer import STAGING_NAME

    pytest.importorskip("fcntl")
    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    (out / STAGING_NAME).mkdir()  # the running run's cache in the making
    (out / STAGING_NAME / "tokens.raw").write_bytes(b"\0" * 1000)
    before = _snapshot(out)
    with locked_by_another_process(out):  # a running pretrain; then killed
        with pytest.raises(FileExistsError, match="in use by another pretrain run"):
            train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))
        assert _snapshot(out) == before
    assert train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4


def test_the_lock_is_held_while_output_dir_is_checked(tmp_path, monkeypatch):
    """The lock was taken only after OUTPUT_DIR's checks (not empty, the --resume checkpoint) and the --heldout
    tokenization: a run ending in that window was then overwritten by one it should have refused. Another run
    into OUTPUT_DIR while this one reads its held-out text is refused; a run refused or failing before it wrote
    anything leaves no OUTPUT_DIR it created."""
    from spacy_elmo.training import evaluate

    pytest.importorskip("fcntl")
    train_file = write_corpus(tmp_path / "train.txt", 200)
    heldout = write_corpus(tmp_path / "heldout.txt", 30, seed=3)
    out = tmp_path / "out"
    real, refused = evaluate.read_text, []

    def read_while_another_run_starts(*args, **kwargs):
        with pytest.raises(FileExistsError, match="in use by another pretrain run") as err:
            train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
        refused.append(err.value)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate, "read_text", read_while_another_run_starts)
    assert train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2, heldout=str(heldout)))["steps"] == 2
    assert len(refused) == 1
    monkeypatch.undo()

    def unreadable(*args, **kwargs):
        raise ValueError("no text")

    monkeypatch.setattr(evaluate, "read_text", unreadable)
    with pytest.raises(ValueError, match="no text"):
        train(tiny_train_config(train_file, tmp_path / "fresh" / "run", heldout=str(heldout)))
    assert not (tmp_path / "fresh").exists()


def test_an_output_dir_that_cannot_be_locked_is_warned_of(tmp_path, no_flock):
    """A file system without flock (some network mounts) left OUTPUT_DIR unlocked without a word."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    with pytest.warns(RuntimeWarning, match="could not lock OUTPUT_DIR"):
        assert train(tiny_train_config(train_file, tmp_path / "out", max_steps=1))["steps"] == 1


def test_the_tokenizing_bar_counts_the_words_the_summary_counts(tmp_path, monkeypatch):
    """The bar counted the sentence markers too: "tokenizing: 3.60k tok" above "corpus 2,999 tokens"."""
    import io

    from tqdm import tqdm

    from spacy_elmo.training import data

    bars = []

    def recorded(enabled, desc):
        bars.append(tqdm(desc=desc, file=io.StringIO()))
        return bars[-1]

    monkeypatch.setattr(data, "_progress", recorded)
    train_file = write_corpus(tmp_path / "train.txt", 200)
    meta = data.build_corpus(train_file, "en", tmp_path / "cache", progress=True, processes=1)
    words = sum(len(line.split()) for line in train_file.read_text(encoding="utf-8").splitlines())  # spaCy splits no word here
    assert bars[0].n == meta["stats"]["n_tokens"] == words


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux), which fails every write with ENOSPC")
@pytest.mark.parametrize("full", ["tokens.raw", "tokens.i32", "types.txt"])
def test_a_full_disk_while_tokenizing_names_the_output_dir_and_the_way_on(tmp_path, full):
    """A disk that filled up while the cache was written ended the run with numpy's "71818 requested and
    29696 written" (no errno, no path, no advice). The cache's arrays are written with their errno, and pretrain
    names OUTPUT_DIR, what it holds and how to go on (rerun: no checkpoint yet). Each file of the cache: the
    token stream and the types, written by plain file writes, said only "[Errno 28]" (no file, so not OUTPUT_DIR's)."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "data" / full).symlink_to("/dev/full")  # every write there: ENOSPC, as on a full disk
    with pytest.raises(OSError, match="ran out of space") as err:
        train(tiny_train_config(train_file, out))
    assert err.value.__cause__.errno == errno.ENOSPC
    assert f"OUTPUT_DIR {out}" in str(err.value) and "rerun the same command (no checkpoint was written yet" in str(err.value)


#: Run in a full disk: a tmpfs of a given size, mounted in a mount namespace of its own (root, Linux).
_FULL_DISK_RUN = """
import json, shutil, sys, warnings
import torch
from pathlib import Path
from spacy_elmo.bilm.native_io import write_safetensors
from spacy_elmo.training import checkpoint as ckpt
from spacy_elmo.training.trainer import train
from tests.training.conftest import tiny_train_config

train_file, disk, kept = (Path(a) for a in sys.argv[1:4])
warnings.simplefilter("ignore")
found = {}
try:
    train(tiny_train_config(train_file, disk / "out", max_steps=4, checkpoint_every=2))
except OSError as err:
    found.update(message=str(err), errno=getattr(err.__cause__, "errno", None))
found["checkpoint_step"] = ckpt.load_checkpoint(disk / "out")["step"]
shutil.copytree(disk / "out", kept)
for name, write in (("safetensors", lambda: write_safetensors({"w": torch.zeros(1 << 20)}, disk / "big.safetensors")),
                    ("checkpoint", lambda: ckpt.save_checkpoint(disk / "big", {"w": torch.zeros(1 << 20)}))):
    try:  # larger than the whole disk
        write()
    except OSError as err:
        found[name + "_errno"] = err.errno
print(json.dumps(found))
"""


def _in_a_full_disk(size, *args):
    """The output (a JSON object) of :data:`_FULL_DISK_RUN` with ``args`` and a disk of ``size`` bytes mounted
    at ``args[1]``; skips where no such disk can be mounted (not root, no mount namespaces)."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs unshare (Linux) to mount a small tmpfs as a full disk")
    disk = args[1]
    disk.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    if subprocess.run([unshare, "-m", "sh", "-c", f"mount -t tmpfs -o size=4096 tmpfs {disk}"], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs in a mount namespace here (needs root)")
    result = subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"',
         "sh", str(size), str(disk), sys.executable, "-c", _FULL_DISK_RUN, *(str(a) for a in args)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=root), cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_full_disk_at_a_checkpoint_says_the_last_one_resumes(tmp_path):
    """The second checkpoint does not fit on OUTPUT_DIR's disk (a real one: a small tmpfs). torch's zip writer
    made the ENOSPC a RuntimeError ("unexpected pos"), so the run ended without the advice; a model write that
    failed (safetensors) kept no errno either. Now: ENOSPC named, with the advice to --resume from the last
    checkpoint (step 2, whole), which then continues to the end."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    first = tmp_path / "first"
    train(tiny_train_config(train_file, first, max_steps=2, checkpoint_every=2))
    pages = sum(-(-p.stat().st_size // 4096) for p in first.rglob("*") if p.is_file())
    # Room for a run at step 2 and half a checkpoint more: the second one, written beside the first, does not fit.
    size = 4096 * (pages + 8) + ckpt.checkpoint_path(first).stat().st_size // 2
    kept = tmp_path / "kept"
    found = _in_a_full_disk(size, train_file, tmp_path / "disk", kept)
    assert "ran out of space" in found["message"] and "rerun the same command with --resume" in found["message"]
    assert found["errno"] == errno.ENOSPC
    assert found.get("safetensors_errno") == found.get("checkpoint_errno") == errno.ENOSPC  # also of a write alone
    assert found["checkpoint_step"] == 2
    assert train(tiny_train_config(train_file, kept, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4


def test_running_out_of_space_elsewhere_is_not_said_of_output_dir(tmp_path, monkeypatch):
    """Every ENOSPC was said to be OUTPUT_DIR's, also another disk's (the tokenizer processes' semaphores on a
    full /dev/shm). An error that names no file in OUTPUT_DIR stays as it was."""
    from spacy_elmo.training import trainer

    def full_shm(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what multiprocessing's SemLock raises

    monkeypatch.setattr(trainer, "build_corpus", full_shm)
    train_file = write_corpus(tmp_path / "train.txt", 200)
    with pytest.raises(OSError) as err:
        train(tiny_train_config(train_file, tmp_path / "out"))
    assert err.value.errno == errno.ENOSPC and "OUTPUT_DIR" not in str(err.value)


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file-size limits")
def test_export_that_cannot_write_its_weights_fails_cleanly(tiny_model, tmp_path):
    """export --format allennlp whose weights could not be written (a full disk; here a file-size limit) died
    with HDF5's RuntimeError traceback, then a segmentation fault, leaving its temporary directory behind.
    Now: the export's error (exit status 1), and nothing left in the parent directory."""
    import subprocess
    import sys

    model, _ = tiny_model
    out = tmp_path / "exported"
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192)); from spacy_elmo.cli import main; "
              "sys.argv = ['spacy-elmo', 'export', sys.argv[1], sys.argv[2], '--format', 'allennlp']; main()")
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(model), str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Could not write the model to" in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("text,problem", [("empty", "No text to train on in .*corpus.txt"),
                                          ("binary", "corpus.txt looks like a binary file"),
                                          ("broken gzip", "corpus.txt is a broken gzip file")],
                         ids=["empty", "binary", "broken gzip"])
def test_a_run_refused_for_its_text_leaves_no_output_dir_behind(tmp_path, text, problem):
    """A new OUTPUT_DIR is removed again when the run fails before writing anything there, but a corpus without
    text (an empty file, a binary file, a truncated download) left ``OUTPUT_DIR/data`` (empty, or holding
    ``tokens.raw``) behind."""
    path = tmp_path / "corpus.txt"
    if text == "empty":
        path.write_text("\n \n", encoding="utf-8")
    elif text == "binary":
        path.write_bytes(b"\x00\x01binary\x00" * 100)
    else:
        path.write_bytes(gzip.compress(write_corpus(tmp_path / "plain.txt", 200).read_bytes())[:200])
    out = tmp_path / "new" / "out"
    with pytest.raises(ValueError, match=problem):
        train(tiny_train_config(path, out))
    assert not (tmp_path / "new").exists()
    cache = tmp_path / "cache"  # an existing cache (of other text) stays a directory; only the raw tokens go
    build_corpus(write_corpus(tmp_path / "other.txt", 60), "en", cache, progress=False)
    with pytest.raises(ValueError, match=problem):
        build_corpus(path, "en", cache, progress=False)
    assert cache.is_dir() and not (cache / "tokens.raw").exists()


@pytest.mark.parametrize("init", ["missing", "pipeline"])
def test_an_init_model_that_cannot_load_is_refused_before_the_corpus_is_tokenized(tmp_path, init):
    """--init naming no model (a typo, a saved spaCy pipeline) was refused only after the whole corpus was
    tokenized into OUTPUT_DIR (hours for a large one), which it left behind; now before OUTPUT_DIR is made."""
    train_file = write_corpus(tmp_path / "train.txt", 200)
    model = tmp_path / "model"
    if init == "pipeline":  # what spacy train writes (model-best): config.cfg and meta.json, no config.json
        model.mkdir()
        (model / "config.cfg").write_text("[nlp]\n", encoding="utf-8")
        (model / "meta.json").write_text("{}", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises((FileNotFoundError, ValueError), match="does not exist" if init == "missing" else "saved spaCy pipeline"):
        train(tiny_train_config(train_file, out, model=None, init=str(model)))
    assert not out.exists()


def test_an_init_file_is_refused_advising_its_directory(tmp_path):
    """--init naming a file of a model (its options.json or .hdf5, a spacy-elmo model's config.json) was told to "load
    AllenNLP files with BiLM.from_allennlp(options_file, weight_file)", a Python API pretrain has no way to take."""
    from tests.bilm.oracle import options, write_model_files

    (tmp_path / "allen").mkdir()
    options_file, weight_file = write_model_files(tmp_path / "allen", options())
    BiLM.from_allennlp(options_file, weight_file).save(tmp_path / "native")
    train_file = write_corpus(tmp_path / "train.txt", 60)
    for path in (options_file, weight_file, tmp_path / "native" / "config.json"):
        with pytest.raises(ValueError, match="is a file, but a model is a directory: pass --init the directory") as err:
            train(tiny_train_config(train_file, tmp_path / "out", model=None, init=str(path)))
        assert str(path) in str(err.value) and "from_allennlp" not in str(err.value)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("vocab", ["missing", "short"])
def test_an_init_softmax_without_its_vocabulary_is_refused_before_the_corpus_is_tokenized(tmp_path, monkeypatch, vocab):
    """An --init model whose softmax has no vocab.txt, or one of another length, was refused only after the whole
    corpus was tokenized (load_pretrained's check); now at the start, with the same error, nothing tokenized."""
    from spacy_elmo.training import trainer
    from spacy_elmo.training.modelio import save_pretrained
    from spacy_elmo.training.softmax import SoftmaxLayer
    from spacy_elmo.training.vocab import Vocab

    from .test_modelio import CONFIG, TOKENS

    model = tmp_path / "model"
    save_pretrained(model, BiLM(CONFIG, backend="reference"), SoftmaxLayer(len(TOKENS), CONFIG.projection_dim),
                    Vocab(TOKENS), {})
    if vocab == "missing":
        (model / "vocab.txt").unlink()
    else:
        (model / "vocab.txt").write_text("\n".join(TOKENS[:-1]) + "\n", encoding="utf-8")
    def tokenize(*args, **kwargs):
        raise AssertionError("the corpus was tokenized before the --init model was checked")

    monkeypatch.setattr(trainer, "build_corpus", tokenize)
    train_file = write_corpus(tmp_path / "train.txt", 200)
    match = "has no vocab.txt" if vocab == "missing" else "vocab.txt in .* has 4 entries but the softmax has 5 rows"
    with pytest.raises((FileNotFoundError, ValueError), match=match):
        train(tiny_train_config(train_file, tmp_path / "out", model=None, init=str(model)))
    assert not (tmp_path / "out").exists()


INT_FIELDS = ["batch_size", "unroll", "negatives", "checkpoint_every", "log_every", "eval_batch_size", "min_count",
              "seed", "state_sentences", "max_steps", "threads", "vocab_size", "tokenize_processes"]
REAL_FIELDS = ["epochs", "lr", "clip", "dropout"]


@pytest.mark.parametrize("name", INT_FIELDS)
def test_train_config_takes_numpy_integers_as_ints_and_refuses_bools_strings_and_floats(name):
    """A sweep's ``np.arange`` value (np.int64) was refused as no integer; True was taken as 1 and a float
    max_steps passed. NumPy integers are stored as Python ints (the run's JSON log writes the config)."""
    from spacy_elmo.training.trainer import TrainConfig

    value = 1000 if name == "vocab_size" else 2
    for numpy_int in (np.int64(value), np.int32(value), np.uint16(value)):
        cfg = TrainConfig(train_path="t", output_dir="o", **{name: numpy_int})
        cfg.validate()
        assert type(getattr(cfg, name)) is int and getattr(cfg, name) == value
    cfg = TrainConfig(train_path="t", output_dir="o")
    setattr(cfg, name, np.int64(value))  # set after construction: validate makes it an int too
    cfg.validate()
    assert type(getattr(cfg, name)) is int
    for wrong in (True, str(value), float(value), np.float32(value)):
        with pytest.raises(ValueError, match=f"^{name} must be .*; found "):
            TrainConfig(train_path="t", output_dir="o", **{name: wrong}).validate()


@pytest.mark.parametrize("name", REAL_FIELDS)
def test_train_config_takes_numpy_reals_as_floats_and_refuses_bools_and_strings(name):
    """np.float32 (no float subclass) is stored as a float; a bool was taken as 0 or 1 and a string crashed
    with a TypeError from the comparison (clip='1') instead of the field's message."""
    from spacy_elmo.training.trainer import TrainConfig

    for number in (np.float32(0.5), np.float64(0.5), np.int64(1) if name != "dropout" else np.int64(0)):
        cfg = TrainConfig(train_path="t", output_dir="o", **{name: number})
        cfg.validate()
        assert type(getattr(cfg, name)) in (int, float) and getattr(cfg, name) == number
    for wrong in (True, False, "0.5"):
        with pytest.raises(ValueError, match=f"^{name} must be .*; found "):
            TrainConfig(train_path="t", output_dir="o", **{name: wrong}).validate()


def test_train_config_holds_plain_numbers_from_construction_without_validate():
    """Converted when built (``__post_init__``), not only by validate(): asdict(cfg) of a config never validated
    (written to a sweep's own JSON record) held the np.int64 that json cannot write."""
    import json
    from dataclasses import asdict

    from spacy_elmo.training.trainer import TrainConfig

    cfg = TrainConfig(train_path="t", output_dir="o", batch_size=np.int64(4), lr=np.float32(0.5))
    record = asdict(cfg)
    assert type(record["batch_size"]) is int and record["batch_size"] == 4
    assert type(record["lr"]) is float and record["lr"] == 0.5
    assert json.loads(json.dumps(record))["batch_size"] == 4


def test_a_run_configured_with_numpy_numbers_trains_and_logs_them_as_json_numbers(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 50)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=np.int64(2), batch_size=np.int32(4), checkpoint_every=np.int64(2),
                            lr=np.float32(0.25)))
    config = next(e["config"] for e in read_log(out) if "config" in e)
    assert (config["max_steps"], config["batch_size"], config["lr"]) == (2, 4, 0.25)
    assert [step for step, _ in _losses(out)] == [1, 2]


@pytest.mark.parametrize("name", ["resume", "new_vocab", "sentences", "progress", "prefetch"])
def test_train_config_flags_must_be_bools(name):
    """sentences="false" (truthy) trained on sentences, and prefetch=1 passed ``in (None, True, False)``."""
    from spacy_elmo.training.trainer import TrainConfig

    for wrong in ("false", 1, 0, np.bool_(True)):
        with pytest.raises(ValueError, match=f"^{name} must be True(, False or None| or False).*; found "):
            TrainConfig(train_path="t", output_dir="o", **{name: wrong}).validate()


def test_a_resume_that_trains_nothing_says_so_and_leaves_the_files(tmp_path):
    """--resume with --max-steps at or below the checkpoint's step trained nothing, rewrote checkpoint.pt and the
    model, and said only "0 steps this run". It warns naming both steps and writes nothing; only a model older than
    the checkpoint (a kill between the two writes) is written again."""
    import json

    train_file = write_corpus(tmp_path / "train.txt", 200)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2))
    files = ("checkpoint.pt", "model.safetensors", "config.json", "vocab.txt")

    def stamps():
        return {name: ((out / name).stat().st_mtime_ns, (out / name).read_bytes()) for name in files}

    before = stamps()
    for max_steps in (2, 4):
        with pytest.warns(RuntimeWarning, match=rf"checkpoint in {out} is at step 4 and this run ends at step {max_steps} "
                                                r"\(--max-steps\): nothing was trained"):
            result = train(tiny_train_config(train_file, out, max_steps=max_steps, checkpoint_every=2, resume=True))
        assert result["steps"] == 4 and not result["model_written"] and stamps() == before
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["provenance"]["steps"] = 2  # the model of step 2: killed after the checkpoint of step 4 was written
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.warns(RuntimeWarning, match=r"nothing was trained\. The checkpoint was left as it is; the model was "
                                            r"written again from it, since .* had left the model of step 2\."):
        result = train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))
    assert result["model_written"]
    (out / "config.json").unlink()  # killed after its first checkpoint, before any model was written
    with pytest.warns(RuntimeWarning, match=r"written again from it, since .* had left no model\."):
        assert train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))["model_written"]
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["provenance"]["steps"] == 4
    assert (out / "model.safetensors").read_bytes() == before["model.safetensors"][1]


@pytest.mark.parametrize("output, refused", [("ro", "ro/data"), ("ro/sub/run", "ro/sub"), ("ro/run", "ro/run/data")])
def test_an_output_dir_that_cannot_be_written_names_it_and_the_fix(tmp_path, monkeypatch, output, refused):
    """pretrain into a directory it may not write ended with a bare "[Errno 1] Operation not permitted: 'ro/data'"
    (embed and export name the problem and the fix). The first write refused (the corpus cache, or a directory of
    OUTPUT_DIR's path being created) names OUTPUT_DIR, the directory that refused and the fix. os.mkdir refuses
    there as in a directory without write permission, which chmod cannot make for root."""
    train_file = write_corpus(tmp_path / "train.txt", 50)
    (tmp_path / "ro").mkdir()
    if output == "ro/run":
        (tmp_path / "ro" / "run").mkdir()  # OUTPUT_DIR exists, its contents cannot be created
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if os.fspath(path) == os.fspath(tmp_path / refused):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    out = tmp_path / output
    with pytest.raises(PermissionError) as err:
        train(tiny_train_config(train_file, out, max_steps=1))
    parent = (tmp_path / refused).parent
    assert str(err.value).startswith(f"{out} cannot be written: no file can be created in {parent} ([Errno 13]")
    assert str(err.value).endswith("Choose an output path in a writable directory.")
    assert err.value.__cause__.errno == errno.EACCES
    assert not (tmp_path / "ro" / "sub").exists()  # what the run created, removed again (nothing was written)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS], ids=["file_mode", "read_only_mount"])
def test_a_refused_existing_file_in_the_output_dir_is_named_not_the_directory(tmp_path, monkeypatch, code):
    """--resume into a writable OUTPUT_DIR whose train_log.jsonl this account may not write (chmod a-w) was told
    "no file can be created in OUTPUT_DIR ... Choose an output path in a writable directory": a false diagnosis,
    and advice that gives up the resume. A refused existing file is named with the fix on it; a read-only mount
    (EROFS) is still the directory's. open() refuses as for a file without write permission (root ignores modes)."""
    from spacy_elmo.training import trainer

    train_file = write_corpus(tmp_path / "train.txt", 50)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2))
    log = out / trainer.LOG_NAME

    def refusing_open(path, mode="r", *args, **kwargs):
        if os.fspath(path) == os.fspath(log) and "a" in mode:
            raise PermissionError(code, os.strerror(code), os.fspath(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(trainer, "open", refusing_open, raising=False)
    with pytest.raises(PermissionError) as err:
        train(tiny_train_config(train_file, out, max_steps=4, checkpoint_every=2, resume=True))
    if code == errno.EROFS:
        assert str(err.value).startswith(f"{out} cannot be written: no file can be created in {out} ([Errno 30]")
    else:
        assert str(err.value).startswith(f"{log}, of the run in {out}, is refused to this account ([Errno 13]")
        assert f"write permission on {out} (chmod u+rw on the file, u+w on the directory" in str(err.value)
        assert "which --resume needs" in str(err.value)
    assert err.value.__cause__.errno == code


def test_a_refused_read_of_a_file_elsewhere_is_not_said_to_be_the_output_dirs(tmp_path, monkeypatch):
    """Only errors naming OUTPUT_DIR's paths become its "cannot be written": a TRAIN_PATH this account may not
    read keeps its own error."""
    from spacy_elmo.training import trainer

    train_file = write_corpus(tmp_path / "train.txt", 50)

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(train_file))

    monkeypatch.setattr(trainer, "_train", refuse)
    with pytest.raises(PermissionError, match=r"^\[Errno 13\] Permission denied"):
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=1))
