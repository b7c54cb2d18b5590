"""A step's inputs prepared on the host (prepare_step) and one step ahead on a thread (StepPrefetcher):
the same draws and losses as without, the checkpoint's sampler state at the step boundary, errors and
interrupts that leave no thread behind."""

import math
import threading
import traceback

import pytest
import torch

from tests.torch_ops import TorchOps
from spacy_elmo.training import trainer as trainer_module
from spacy_elmo.training.prefetch import THREAD_NAME, StepPrefetcher, prepare_step
from spacy_elmo.training.sampler import LogUniformSampler
from spacy_elmo.training.softmax import SoftmaxLayer
from spacy_elmo.training.trainer import TrainConfig, train

from .conftest import tiny_train_config, write_corpus


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def draws(n):
    """The values drawn by ``n`` steps, one ``rand`` each, in the caller's thread."""
    gen = torch.Generator().manual_seed(5)
    return [float(torch.rand(1, generator=gen)) for _ in range(n)], gen


@pytest.mark.parametrize("background", [False, True])
def test_prefetcher_draws_in_step_order_and_keeps_the_boundary_state(background):
    """Each step's draw is the one a plain loop makes; the state at every step boundary is the generator's
    before the draw of the step prepared ahead; nothing is prepared (drawn) past the last step."""
    n = 6
    want, _ = draws(n)
    states = []  # the plain loop's state at each boundary: before the draw of step s
    gen = torch.Generator().manual_seed(5)
    for _ in range(n):
        states.append(gen.get_state())
        torch.rand(1, generator=gen)
    end_state = gen.get_state()

    gen = torch.Generator().manual_seed(5)
    prepared = []

    def prepare(step):
        prepared.append(step)
        return float(torch.rand(1, generator=gen))

    with StepPrefetcher(prepare, gen, n, background) as prefetcher:
        got = []
        for step in range(n):
            got.append(prefetcher.get(step))
            # the boundary after step `step`: the state the next step draws from
            following = states[step + 1] if step + 1 < n else end_state
            assert torch.equal(prefetcher.boundary_state(), following)
        assert got == want
        assert prepared == list(range(n))  # no step past the end
        assert torch.equal(gen.get_state(), end_state)
        assert len(prefetch_threads()) == (1 if background else 0)
    assert not prefetch_threads()


def test_prefetcher_reraises_the_threads_error_with_its_traceback():
    gen = torch.Generator().manual_seed(0)

    def prepare_that_fails(step):
        if step == 2:
            raise ValueError("bad batch 2")
        return step

    prefetcher = StepPrefetcher(prepare_that_fails, gen, 5, background=True)
    try:
        assert [prefetcher.get(0), prefetcher.get(1)] == [0, 1]
        with pytest.raises(ValueError, match="bad batch 2") as raised:
            prefetcher.get(2)
        # raised on the thread, where prepare ran: its frame is in the traceback
        assert "prepare_that_fails" in [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    finally:
        prefetcher.close()
    assert not prefetch_threads()


def test_prefetcher_refuses_steps_out_of_order():
    with StepPrefetcher(lambda step: step, torch.Generator(), 5, background=True) as prefetcher:
        prefetcher.get(0)
        with pytest.raises(ValueError, match="step 3 .* step 1 was prepared ahead"):
            prefetcher.get(3)


def _losses(cfg: TrainConfig):
    losses = []
    train(cfg, on_step=lambda step, loss: losses.append(loss))
    return losses


@pytest.mark.parametrize("mode", ["streams", "sentences", "full_softmax"])
def test_prefetching_gives_the_same_losses_bit_for_bit(tmp_path, mode):
    """Forced on (the CPU's default is off), over epoch boundaries: the losses equal a run without, exactly."""
    train_file = write_corpus(tmp_path / "train.txt", 60)
    settings = {"streams": dict(), "sentences": dict(sentences=True, max_length=7, batch_size=16),
                "full_softmax": dict(negatives=10_000)}[mode]
    runs = {}
    for prefetch in (False, True):
        cfg = tiny_train_config(train_file, tmp_path / f"out_{prefetch}", max_steps=12, checkpoint_every=12, **settings,
                                prefetch=prefetch)
        with pytest.warns(RuntimeWarning, match="full softmax") if mode == "full_softmax" else _nothing():
            runs[prefetch] = _losses(cfg)
    log = trainer_module.read_log(tmp_path / "out_True")
    assert log[0]["steps_per_epoch"] < 12  # the run crossed an epoch boundary
    assert len(runs[True]) == 12 and runs[True] == runs[False]
    assert not prefetch_threads()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_an_interrupted_run_leaves_no_prefetch_thread(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 60)
    seen = []

    def interrupt(step, loss):
        seen.append(len(prefetch_threads()))
        if step == 3:
            raise KeyboardInterrupt

    # the error kept (as a caller reporting it keeps it): the run's frames stay alive, its thread must not
    with pytest.raises(KeyboardInterrupt) as raised:
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=10, prefetch=True), on_step=interrupt)
    assert seen == [1, 1, 1]  # the thread ran
    assert not prefetch_threads(), raised


def test_an_error_preparing_a_step_stops_the_run_and_its_thread(tmp_path, monkeypatch):
    """Raised on the thread, the error reaches train()'s caller (with the thread's frames), the thread ends."""
    prepare_step = trainer_module.prepare_step
    calls = []

    def failing_prepare_step(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) == 4:
            raise RuntimeError("could not prepare step 3")
        return prepare_step(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "prepare_step", failing_prepare_step)
    train_file = write_corpus(tmp_path / "train.txt", 60)
    with pytest.raises(RuntimeError, match="could not prepare step 3") as raised:
        train(tiny_train_config(train_file, tmp_path / "out", max_steps=10, prefetch=True))
    assert calls[0] == threading.current_thread().name and all(name.startswith(THREAD_NAME) for name in calls[1:])
    assert "failing_prepare_step" in [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert not prefetch_threads()


def test_prefetch_must_be_a_bool_or_none(tmp_path):
    with pytest.raises(ValueError, match="prefetch must be True, False or None"):
        TrainConfig(train_path="t", output_dir="o", prefetch="yes").validate()


def test_lm_with_corrections_prepared_on_the_host_equals_computing_them():
    """prepare_step's corrections (of every target position, selected by the LM) give the losses the
    softmax computes from the selected targets itself."""
    from spacy_elmo.bilm import BiLM, BiLMConfig
    from spacy_elmo.training.lm import BidirectionalLM
    from spacy_elmo.training.prefetch import prepare_step
    from spacy_elmo.training.vocab import CharTable, Vocab

    from .conftest import TINY

    torch.manual_seed(0)
    vocab = Vocab(["<S>", "</S>", "<UNK>"] + [f"w{i}" for i in range(30)], size=20)  # types 20..32 are <UNK> targets
    config = BiLMConfig.from_dict(TINY)
    lm = BidirectionalLM(BiLM(config, backend="reference"), SoftmaxLayer(vocab.size, config.projection_dim)).eval()
    sampler = LogUniformSampler(vocab.size, 8)
    fwd, bwd = torch.randint(33, (3, 6)), torch.randint(33, (3, 6))
    batch = (fwd, bwd, torch.tensor([5, 2, 4]))
    inputs = prepare_step(batch, vocab, CharTable(vocab, config.max_characters_per_token), sampler,
                          torch.Generator().manual_seed(1))
    assert inputs.n_targets == 11 and inputs.logq is not None and inputs.sample is not None
    moved = inputs.to(torch.device("meta"))  # every tensor goes to the device, the counts stay
    tensors = [*moved[:6], moved.sample.candidates, *moved.logq]
    assert len(tensors) == 10 and all(t.device.type == "meta" for t in tensors)
    assert (moved.n_targets, moved.sample.num_tries) == (11, inputs.sample.num_tries)
    args = (inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd, inputs.lengths)
    with torch.no_grad():
        given = lm(*args, None, inputs.sample, sampler, inputs.logq)
        computed = lm(*args, None, inputs.sample, sampler)
    for a, b in zip(given[:2], computed[:2]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        assert bool((a > 0).any())



def _tiny_preparation(n_batches=2):
    """``(vocab, char table, sampler, ids (n_batches, 8, 11))``: 300 types, 200 of them targets, 64 negatives."""
    from spacy_elmo.training.vocab import CharTable, Vocab

    vocab = Vocab(["<S>", "</S>", "<UNK>"] + [f"w{i}" for i in range(300)], size=200)
    ids = torch.randint(0, 303, (n_batches, 8, 11), generator=torch.Generator().manual_seed(0))
    return vocab, CharTable(vocab, 50), LogUniformSampler(200, 64), ids


def test_prepare_step_does_its_math_in_numpy():
    # torch's sort, gathers and transcendental ops on a step's ~10^4 draws enter OpenMP regions that wait
    # for a scheduler slice on busy cores (ms each); NumPy's run in the calling thread. What torch still
    # does here is creation, views, the generator's uniforms and a few elementwise ops on the (B, T) ids.
    vocab, table, sampler, ids = _tiny_preparation()
    gen = torch.Generator().manual_seed(0)
    prepare_step((ids[0], ids[1]), vocab, table, sampler, gen)  # the char table fills on first use
    with TorchOps() as ops:
        inputs = prepare_step((ids[0], ids[1]), vocab, table, sampler, gen)
    allowed = {"full", "full_like", "slice", "select", "view", "detach", "lift_fresh", "alias", "max", "_local_scalar_dense",
               "lt", "where", "rand", "_to_copy", "sum"}
    assert ops.names <= allowed, ops.names - allowed
    # and the inputs are what the torch path gives
    both = torch.cat([ids[0][:, :-1], ids[1][:, :-1]], 1)
    unique, inverse = torch.unique(both, return_inverse=True)
    assert torch.equal(inputs.index_fwd, inverse[:, :10]) and torch.equal(inputs.index_bwd, inverse[:, 10:])
    assert torch.equal(inputs.chars, table(unique)) and inputs.chars.dtype == torch.long
    # contiguous, each one block for a copy from pinned memory
    assert all(t.is_contiguous() for t in (inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.positions))
    # log q against float64 arithmetic of its own: log(1 - (1 - P(k)) ** tries)
    k = inputs.targets_fwd.double()
    p = torch.log((k + 2) / (k + 1)) / math.log(200 + 1)
    want = torch.log(1 - (1 - p) ** inputs.sample.num_tries)
    assert inputs.logq.targets_fwd.dtype == torch.float32
    assert torch.allclose(inputs.logq.targets_fwd.double(), want, rtol=1e-6, atol=0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_prefetched_inputs_reach_the_gpu_from_pinned_memory_unchanged():
    # what pretrain does on a GPU: prepared on the thread in pinned memory, copied without waiting
    vocab, table, sampler, ids = _tiny_preparation(4)
    device = torch.device("cuda")
    gen_plain, gen_ahead = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    prepare = lambda i: prepare_step((ids[i, :4], ids[i, 4:]), vocab, table, sampler, gen_ahead, pin=True)  # noqa: E731
    with StepPrefetcher(prepare, gen_ahead, len(ids), background=True, device=device) as prefetcher:
        for i in range(len(ids)):
            host = prefetcher.get(i)
            assert host.chars.is_pinned() and host.sample.candidates.is_pinned() and host.logq.candidates.is_pinned()
            on_gpu = host.to(device)
            want = prepare_step((ids[i, :4], ids[i, 4:]), vocab, table, sampler, gen_plain)
            torch.cuda.synchronize()
            for got, ref in ((on_gpu.chars, want.chars), (on_gpu.index_fwd, want.index_fwd),
                             (on_gpu.targets_bwd, want.targets_bwd), (on_gpu.sample.candidates, want.sample.candidates),
                             (on_gpu.logq.targets_fwd, want.logq.targets_fwd)):
                assert got.device.type == "cuda" and torch.equal(got.cpu(), ref)
            assert on_gpu.sample.num_tries == want.sample.num_tries


def test_the_thread_pins_for_the_callers_gpu_when_the_device_names_no_index(monkeypatch):
    # `pretrain --device cuda` on one GPU (no torchrun) passes torch.device("cuda"): torch.cuda.set_device
    # refuses a device without an index, which broke the thread pool at step 1. The caller's current GPU is meant.
    seen = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch._C, "_cuda_setDevice", lambda i: seen.append(i), raising=False)
    with StepPrefetcher(lambda s: s, torch.Generator(), 4, background=True, device=torch.device("cuda")) as p:
        assert [p.get(i) for i in range(4)] == [0, 1, 2, 3]
    assert seen == [3]
