"""The CUDA-only Python paths that the kernels' tests leave out, run as pretraining and inference run them (cudarev,
session 45): a step prepared on the prefetch thread in pinned memory and copied without waiting while the GPU is
busy, with the host's lengths, under bf16 autocast; a GPU checkpoint's RNG, carried bf16 state and optimizer
through save / load / restore; a CPU run's optimizer state stepping on the GPU; NCCL's object collectives as the
trainer uses them (one rank); the token cache shared by threads on CUDA streams of their own. Seconds each; run on
a GPU machine, skipped elsewhere. No spaCy.

The tests are written for ``DEV``: with ``DEV = torch.device("cpu")`` (and the skip removed) the same logic runs on
the CPU where it can (no pinning, no busy stream, no CUDA RNG), which is how they were checked where there is no GPU.
"""

import copy
import threading

import pytest
import torch

from spacy_elmo.bilm import BiLM, BiLMConfig
from spacy_elmo.ops import fused_available
from spacy_elmo.ops.reference import to_device_nowait
from spacy_elmo.training import checkpoint as ckpt
from spacy_elmo.training.lm import BidirectionalLM
from spacy_elmo.training.prefetch import StepPrefetcher, _each_tensor, prepare_step
from spacy_elmo.training.sampler import LogUniformSampler
from spacy_elmo.training.softmax import SoftmaxLayer
from spacy_elmo.training.trainer import build_optimizer, load_optimizer_state
from spacy_elmo.training.vocab import SPECIALS, CharTable, Vocab

DEV = torch.device("cuda")
GPU = DEV.type == "cuda"

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TINY = {"projection_dim": 16, "cell_dim": 32, "n_layers": 2, "filters": [[1, 8], [2, 8], [3, 16]], "n_highway": 1,
        "char_embedding_dim": 8, "max_characters_per_token": 20}


def _kernels() -> bool:
    """Whether the extension has kernels for ``DEV`` (its CUDA kernels on a GPU)."""
    if not fused_available():
        return False
    from spacy_elmo.ops import fused

    return fused.built_with_cuda() if GPU else True


needs_kernels = pytest.mark.skipif(not _kernels(), reason="needs the extension's CUDA kernels")
needs_streams = pytest.mark.skipif(not GPU, reason="CUDA streams")


def _busy(n: int = 8) -> None:
    """Queue ~tens of ms of work (n 4096-square matmuls) on the current stream, so that what is queued next runs
    late: a copy from a host buffer freed or reused meanwhile would read what is there by then."""
    if GPU:
        a = torch.randn(4096, 4096, device=DEV)
        for _ in range(n):
            torch.mm(a, a)


def _scribble_pinned(like) -> list:
    """Pinned blocks of the ``(shape, dtype)`` just freed, filled with garbage: the caching host allocator hands a
    freed block out again only once the copies queued from it have run (its recorded events). Kept alive by the
    caller."""
    if not GPU:
        return []
    return [torch.full(shape, -7, dtype=dtype).pin_memory() for shape, dtype in like]


def _tensors(inputs):
    """Every tensor of a StepInputs, in a fixed order."""
    out = [inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd, inputs.lengths,
           inputs.positions]
    if inputs.sample is not None:
        out.append(inputs.sample.candidates)
    if inputs.logq is not None:
        out.extend(inputs.logq)
    return out


def _preparation(n_batches=6, B=8, T=10, seed=0):
    """``(vocab, char table, sampler, batches)``: 303 types (200 targets), 64 negatives, ``(fwd, bwd)`` windows."""
    vocab = Vocab(SPECIALS + [f"w{i}x{'y' * (i % 5)}" for i in range(300)], size=200)
    gen = torch.Generator().manual_seed(seed)
    batches = [(torch.randint(0, 303, (B, T + 1), generator=gen), torch.randint(0, 303, (B, T + 1), generator=gen))
               for _ in range(n_batches)]
    return vocab, CharTable(vocab, TINY["max_characters_per_token"]), LogUniformSampler(200, 64), batches


# --------------------------------------------------------------------------------------------------------------
# Host buffers behind non-blocking copies


def test_prefetched_pinned_inputs_survive_the_host_dropping_and_reusing_their_memory():
    """What pretrain does on a GPU (prepare_step on the prefetch thread, pinned; StepInputs.to non_blocking), with
    the copies queued behind busy work and the host's tensors dropped at once and their blocks asked for again and
    scribbled on: every tensor on the GPU is the one prepared. Fails should a step's pinned memory ever come from
    anywhere but the caching host allocator (a buffer kept and refilled per step, a tensor already pinned that
    Tensor.pin_memory hands back as it is) without waiting for the copies from it."""
    vocab, table, sampler, batches = _preparation()
    gen_plain, gen_ahead = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    want = [prepare_step(b, vocab, table, sampler, gen_plain) for b in batches]
    got, junk = [], []
    prepare = lambda i: prepare_step(batches[i], vocab, table, sampler, gen_ahead, pin=GPU)  # noqa: E731
    with StepPrefetcher(prepare, gen_ahead, len(batches), background=True, device=DEV) as prefetcher:
        for i in range(len(batches)):
            host = prefetcher.get(i)
            if GPU:
                assert all(t.is_pinned() for t in _tensors(host))
            _busy()
            on_device = host.to(DEV)
            # snapshots on the stream, ordered after the copies: what the step's kernels would read
            got.append([t.clone() for t in _tensors(on_device)])
            shapes = [(t.shape, t.dtype) for t in _tensors(host)]  # no reference kept: the blocks are freed
            del host, on_device
            junk.append(_scribble_pinned(shapes))
    if GPU:
        torch.cuda.synchronize()
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(_tensors(w)) == 11
        for k, (a, b) in enumerate(zip(g, _tensors(w))):
            assert a.device.type == DEV.type and torch.equal(a.cpu(), b), (i, k)


@needs_streams
def test_to_device_nowait_copy_is_its_own_while_the_gpu_is_busy():
    """to_device_nowait's contract (spacy_elmo/ops/reference.py): "a caller changing t afterwards changes nothing
    the device reads". Changed at once, the copy still queued behind busy work."""
    t = torch.arange(1000, dtype=torch.long)
    original = t.clone()
    _busy()
    d = to_device_nowait(t, DEV)
    t.fill_(-1)
    junk = _scribble_pinned([(original.shape, original.dtype)])  # noqa: F841 - the freed staging block, asked for again
    torch.cuda.synchronize()
    assert torch.equal(d.cpu(), original)


@needs_kernels
def test_lstm_host_lengths_changed_right_after_the_call_change_nothing():
    """The fused CUDA LSTM copies host lengths to the GPU without waiting (step_lengths, csrc/cuda/cuda_ops.cpp:
    a pinned copy of its own): the caller's tensor changed right after the call, with the kernels still queued
    behind busy work, gives the same outputs as lengths left alone."""
    from spacy_elmo import ops

    gen = torch.Generator().manual_seed(3)
    B, T, P, C = 6, 9, 8, 12
    x = (torch.randn(B, T, P, generator=gen) * 0.5).to(DEV)
    w = [((torch.rand(*s, generator=gen) * 2 - 1) * 0.3).to(DEV) for s in [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2]
    lengths = torch.tensor([9, 0, 4, 1, 7, 3])
    with torch.no_grad():
        want = ops.bilstm_layer(x, x, lengths.clone(), w[:4], w[4:], None, 3.0, 3.0, True, True, backend="fused")
        if GPU:
            torch.cuda.synchronize()
        given = lengths.clone()
        _busy()
        got = ops.bilstm_layer(x, x, given, w[:4], w[4:], None, 3.0, 3.0, True, True, backend="fused")
        given.fill_(T)  # every row full: read now, the outputs would differ
        junk = _scribble_pinned([(lengths.shape, lengths.dtype)])  # noqa: F841
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------------------------
# A pretraining step as the trainer composes it


def _lm(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    bilm = BiLM(BiLMConfig.from_dict(TINY), backend="fused" if _kernels() else "reference")
    bilm.lstm.dropout = dropout
    return BidirectionalLM(bilm, SoftmaxLayer(200, TINY["projection_dim"])).to(DEV).train()


def _step(lm, inputs, lengths, state, sampler):
    """trainer.py's step: bf16 autocast on CUDA, the loss as the trainer forms it (one process), backward."""
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=GPU):
        res = lm(inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd,
                 lengths, state, inputs.sample, sampler, inputs.logq, inputs.positions)
    n = inputs.positions.numel()
    loss_f, loss_b = res.nll_fwd.sum() / n, res.nll_bwd.sum() / n
    loss = (loss_f + loss_b) / 2
    lm.zero_grad(set_to_none=True)
    loss.backward()
    return res, loss


@needs_kernels
def test_trainer_step_composition_on_the_gpu_equals_the_plain_blocking_path():
    """trainer.py's loop on a GPU: the step prepared ahead on the thread in pinned memory, sent without waiting
    behind busy work, the LSTM reading the host's pinned lengths (forward and backward), bf16 autocast, the state
    carried step to step; against the same steps prepared in the main thread, copied with a plain .to and the
    lengths on the GPU. Weights held still (no update: the GPU's backward atomics would make later steps differ),
    so every step's loss and state must agree exactly. tests/training/test_lm_cuda.py passes device lengths and
    no prefetcher, and no GPU test runs train() (it needs spaCy): this is the composition pretrain runs."""
    vocab, table, sampler, batches = _preparation(5)
    runs = {}
    for mode in ("trainer", "plain"):
        lm = _lm()
        gen = torch.Generator().manual_seed(11)
        ahead = mode == "trainer"
        prepare = lambda i, g=gen, p=ahead and GPU: prepare_step(batches[i], vocab, table, sampler, g, pin=p)  # noqa: E731
        losses, states, dtypes = [], [], set()
        state = None
        with StepPrefetcher(prepare, gen, len(batches), background=ahead, device=DEV) as prefetcher:
            for i in range(len(batches)):
                host = prefetcher.get(i)
                if ahead:
                    _busy()
                    inputs = host.to(DEV)  # non_blocking from pinned memory
                    lengths = host.lengths  # as the trainer passes them (one process)
                else:
                    inputs = _each_tensor(host, lambda t: t.to(DEV))  # blocking copies from pageable memory
                    lengths = inputs.lengths
                res, loss = _step(lm, inputs, lengths, state, sampler)
                state = (res.state[0].detach(), res.state[1].detach())
                losses.append(float(loss.detach()))
                states.append([s.float().cpu() for s in state])
                dtypes.add((res.nll_fwd.dtype, loss.dtype, state[1].dtype))
                assert all(p.grad is None or p.grad.dtype == torch.float32 for p in lm.parameters())
        runs[mode] = losses, states, dtypes
    (l_t, s_t, d_t), (l_p, s_p, d_p) = runs["trainer"], runs["plain"]
    assert l_t == l_p, (l_t, l_p)
    for a, b in zip(s_t, s_p):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # the losses and the carried cell state are float32 under bf16 autocast (nothing accumulated in bf16)
    assert d_t == d_p == {(torch.float32, torch.float32, torch.float32)}


# --------------------------------------------------------------------------------------------------------------
# A checkpoint of a GPU run: RNG states, the carried bf16 state, the optimizer; resumed on the GPU and the CPU


@needs_kernels
def test_gpu_checkpoint_resumes_the_next_step_exactly(tmp_path):
    """A GPU run with dropout (CUDA RNG), bf16 autocast and carried states, checkpointed as trainer.save does it
    (rank_state at the step boundary, save_checkpoint, load_checkpoint with map_location='cpu'), resumed into a
    fresh model after the RNGs were disturbed (restore_rank_state, BiLSTM.carry of the bf16 h, the optimizer as
    the trainer loads it): the resumed step's loss equals the straight run's bit for bit (same dropout masks from
    the restored CUDA RNG, same sampler draw)."""
    vocab, table, sampler, batches = _preparation(4)

    def run_step(lm, optimizer, gen, i, state):
        host = prepare_step(batches[i], vocab, table, sampler, gen, pin=GPU)
        res, loss = _step(lm, host.to(DEV), host.lengths, state, sampler)
        optimizer.step()
        return (res.state[0].detach(), res.state[1].detach()), float(loss.detach())

    lm = _lm(dropout=0.3)
    opt = build_optimizer("adagrad", None, lm.parameters())
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(99)
    state = None
    for i in range(2):
        state, _ = run_step(lm, opt, gen, i, state)
    if GPU:
        assert state[0].dtype == torch.bfloat16 and state[1].dtype == torch.float32  # as the checkpoint holds them
    payload = {"step": 2, "model": lm.state_dict(), "optimizer": opt.state_dict(),
               "ranks": [ckpt.rank_state(gen.get_state(), state, DEV)], "settings": {"init": None}}
    ckpt.save_checkpoint(tmp_path, payload)
    _, straight = run_step(lm, opt, gen, 2, state)

    loaded = ckpt.load_checkpoint(tmp_path)
    assert all(t.device.type == "cpu" for t in loaded["model"].values())
    if GPU:
        assert "cuda_rng" in loaded["ranks"][0]
    lm2 = _lm(seed=1, dropout=0.3)
    lm2.load_state_dict(loaded["model"])
    opt2 = build_optimizer("adagrad", None, lm2.parameters())
    load_optimizer_state(opt2, loaded["optimizer"])
    for i, p in enumerate(lm2.parameters()):  # the accumulators (the resumed step's loss is before its update)
        assert torch.equal(opt2.state[p]["sum"].cpu(), loaded["optimizer"]["state"][i]["sum"]), i
    gen2 = torch.Generator().manual_seed(1234)
    torch.manual_seed(4321)  # disturbed: the restore must set the CPU and the CUDA generators
    restored = ckpt.restore_rank_state(loaded["ranks"][0], gen2, DEV)
    restored = lm2.bilm.lstm.carry(restored, DEV)
    _, resumed = run_step(lm2, opt2, gen2, 2, restored)
    assert resumed == straight, (resumed, straight)

    # the same GPU checkpoint resumed on the CPU: the CUDA RNG state is left alone, the bf16 h carried to float32,
    # and the optimizer is the CPU's (fused Adagrad) with the GPU run's accumulators
    if GPU:
        before = torch.cuda.get_rng_state()
        restored_cpu = ckpt.restore_rank_state(loaded["ranks"][0], torch.Generator(), torch.device("cpu"))
        assert torch.equal(torch.cuda.get_rng_state(), before)
        cpu_lm = BidirectionalLM(BiLM(BiLMConfig.from_dict(TINY), backend="reference"),
                                 SoftmaxLayer(200, TINY["projection_dim"]))
        h, c = cpu_lm.bilm.lstm.carry(restored_cpu, torch.device("cpu"))
        assert h.device.type == c.device.type == "cpu" and h.dtype == c.dtype == torch.float32
        cpu_lm.load_state_dict(loaded["model"])
        cpu_opt = build_optimizer("adagrad", None, cpu_lm.parameters())
        load_optimizer_state(cpu_opt, loaded["optimizer"])
        assert cpu_opt.param_groups[0]["fused"] is True
        for i, p in enumerate(cpu_lm.parameters()):
            assert torch.equal(cpu_opt.state[p]["sum"], loaded["optimizer"]["state"][i]["sum"]), i


def test_cpu_run_optimizer_state_steps_on_the_gpu():
    """A checkpoint written on the CPU resumed on a GPU: build_optimizer makes the CPU's Adagrad fused, the GPU's
    not ("PyTorch's fused Adagrad is CPU-only"), and Optimizer.load_state_dict took the saved param groups whole,
    ``fused`` included: the GPU optimizer stepped as the CPU's said (on a torch without a CUDA _fused_adagrad_, the
    step raised). The trainer's load_optimizer_state keeps the GPU's own choice; the step is the CPU's step."""
    gen = torch.Generator().manual_seed(0)
    cpu_params = [torch.nn.Parameter(torch.randn(50, 16, generator=gen)), torch.nn.Parameter(torch.randn(50, generator=gen))]
    cpu_opt = build_optimizer("adagrad", None, cpu_params)
    for p in cpu_params:
        p.grad = torch.ones_like(p)
    cpu_opt.step()
    saved = copy.deepcopy(cpu_opt.state_dict())
    dev_params = [torch.nn.Parameter(p.detach().to(DEV).clone()) for p in cpu_params]
    dev_opt = build_optimizer("adagrad", None, dev_params)
    chosen = {k: dev_opt.param_groups[0][k] for k in ("fused", "foreach")}
    load_optimizer_state(dev_opt, saved)
    assert {k: dev_opt.param_groups[0][k] for k in chosen} == chosen
    for p, q in zip(dev_params, cpu_params):
        p.grad = torch.full_like(p, -0.5)
        q.grad = torch.full_like(q, -0.5)
    dev_opt.step()
    cpu_opt.step()
    for p, q in zip(dev_params, cpu_params):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# NCCL's object collectives as the trainer uses them (one rank: NCCL takes one GPU per rank)


@needs_streams
def test_nccl_object_collectives_carry_a_rank_state_that_restores(tmp_path):
    """trainer.save gathers every rank's rank_state with all_gather_object on the default (NCCL) group and a
    resume gives them to torch.set_rng_state / torch.cuda.set_rng_state, which take CPU ByteTensors: through NCCL
    (objects go through the current GPU, trainer._setup_distributed set it) they come back on the CPU, equal, and
    they restore. broadcast_object_list and the float64 all_reduce of the losses likewise."""
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("torch built without NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        state = (torch.randn(2, 2, 3, 16, device=DEV).to(torch.bfloat16), torch.randn(2, 2, 3, 32, device=DEV))
        mine = ckpt.rank_state(torch.Generator().manual_seed(3).get_state(), state, torch.device("cuda", 0))
        gathered = [None]
        dist.all_gather_object(gathered, mine)
        got = gathered[0]
        assert set(got) == set(mine)
        for k, v in mine.items():
            assert got[k].device.type == "cpu" and got[k].dtype == v.dtype and torch.equal(got[k], v), k
        restored = ckpt.restore_rank_state(got, torch.Generator(), torch.device("cuda", 0))
        assert torch.equal(restored[0].cpu(), state[0].cpu()) and restored[0].device.type == "cuda"
        flag = [True]
        dist.broadcast_object_list(flag, src=0)
        assert flag == [True]
        stats = torch.tensor([1.5, 2.5], dtype=torch.float64, device=DEV)
        dist.all_reduce(stats)
        assert stats.cpu().tolist() == [1.5, 2.5]
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------------------
# The token cache shared by threads that run on streams of their own


def _cache_model():
    torch.manual_seed(0)
    return BiLM(BiLMConfig.from_dict(TINY), backend="reference").to(DEV).eval()


@needs_streams
def test_token_cache_matrix_gathered_on_another_stream_is_not_reused_before_the_gather(monkeypatch):
    """TokenCache is shared by threads (the component's workers, a server's). A thread on a CUDA stream of its own
    (torch.cuda.stream(s)) gathers its rows from the matrix on that stream and returns while the gather may still
    be queued there; another thread then starts the cache over (clear(), a full matrix, new weights): the matrix is
    freed, and the caching allocator handed its block out again at once on the stream it was allocated on (nothing
    called record_stream for the reading stream). Here the reader's gather is made to run late (busy work queued on
    its stream just before it) and the freed block is asked for again and filled with NaN: the reader must still
    get its vectors."""
    from spacy_elmo.bilm.token_cache import TokenCache

    model = _cache_model()
    rows = [[f"w{i}{j}" for j in range(15)] for i in range(6)]
    other = [[f"v{i}{j}" for j in range(15)] for i in range(6)]
    cache = TokenCache(1000)
    with torch.no_grad():
        want = cache.vectors(model, rows, DEV).clone()  # fills the matrix on the default stream
    torch.cuda.synchronize()

    gathered = threading.Event()
    indices = TokenCache._indices

    def late_indices(self, rows_, device):
        idx = indices(self, rows_, device)
        if threading.current_thread().name == "reader":
            _busy(40)  # on the reader's stream: its gather queues behind ~100 ms
        return idx

    monkeypatch.setattr(TokenCache, "_indices", late_indices)
    got = {}

    def reader():
        stream = torch.cuda.Stream()
        with torch.no_grad(), torch.cuda.stream(stream):
            out = cache.vectors(model, rows, DEV)
            gathered.set()
            got["rows"] = out.clone()  # on the reader's stream, after its gather
        stream.synchronize()

    thread = threading.Thread(target=reader, name="reader")
    thread.start()
    assert gathered.wait(30)
    with torch.no_grad():
        cache.clear()  # the matrix freed while the reader's gather is still queued on its stream
        junk = [torch.full((1000, TINY["projection_dim"]), float("nan"), device=DEV) for _ in range(64)]  # noqa: F841
        cache.vectors(model, other, DEV)
    thread.join(30)
    torch.cuda.synchronize()
    assert torch.equal(got["rows"], want)


@needs_streams
def test_token_cache_rows_written_on_another_stream_are_read_after_the_write(monkeypatch):
    """A thread on a stream of its own writes its words' rows (the write queued there behind ~100 ms of busy
    work) and returns; a thread on another stream then reads the same words, cached: its gather waits for that
    write. It held only because _indices' blocking copy, made under the lock by the writer right after its write,
    drained the writer's stream; a writer waiting meanwhile for another thread's words releases the lock before
    that. Here _indices copies without blocking, and the reader still gets the vectors."""
    from spacy_elmo.bilm.token_cache import TokenCache

    model = _cache_model()
    rows = [[f"w{i}{j}" for j in range(15)] for i in range(6)]
    with torch.no_grad():
        want = TokenCache(1000).vectors(model, rows, DEV).clone()  # another cache's
    torch.cuda.synchronize()
    cache = TokenCache(1000)
    indices, write = TokenCache._indices, TokenCache._write

    def nonblocking_indices(self, rows_, device):
        return indices(self, rows_, torch.device("cpu")).pin_memory().to(device, non_blocking=True)

    def late_write(self, *args):
        if threading.current_thread().name == "writer":
            _busy(40)  # on the writer's stream, just before its write
        return write(self, *args)

    monkeypatch.setattr(TokenCache, "_indices", nonblocking_indices)
    monkeypatch.setattr(TokenCache, "_write", late_write)

    def writer():
        with torch.no_grad(), torch.cuda.stream(torch.cuda.Stream()):
            cache.vectors(model, rows, DEV)  # returns with its write still queued

    thread = threading.Thread(target=writer, name="writer")
    thread.start()
    thread.join(30)
    stream = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(stream):
        used = cache.used
        got = cache.vectors(model, rows, DEV).clone()  # on the reader's stream, after its gather
        assert cache.used == used  # read, not encoded again
    stream.synchronize()
    torch.cuda.synchronize()
    assert torch.equal(got, want)
