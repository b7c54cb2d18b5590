"""Pretraining throughput: fused vs reference backend, small and original presets.

One training step = both LMs forward + backward over a ``(B, U)`` window, the
sampled softmax (8192 log-uniform negatives of a 50k vocabulary), global-norm
clipping and an Adagrad update: exactly what ``spacy-elmo pretrain`` runs
(the data pipeline excluded), its inputs prepared by the same function
(``prepare_step``: char encoding, targets, the sampler's draw) and, as
``pretrain`` does on the device (``--prefetch auto``: on with CUDA), one step
ahead on a thread. ``host_prepare_ms``: that preparation alone, per step;
``--prefetch both`` times each backend with the other setting too. tokens/s
counts ``B * U`` tokens per step (each token is read by both directions, as in
bilm-tf's words-per-second).

Both backends (``--backends``: one of them alone too) run in one process, side by
side, from the same weights and batches (the machines are shared: compare the
ratio). The steppers (one per backend and prefetch setting, and with ``--twin`` a
second copy of each backend's main one) are interleaved step by step: one step
of each per round, the order rotated each round (``benchmarks.kernels.round_order``,
a balanced Latin square: each stepper first, and right after each other one,
equally often). With a fixed order, on an H200 (session 39), the fused stepper
with prefetching, always third and always right after the reference without it,
timed 38-39 ms a step against 23.5 ms without prefetching; a probe that changed
which came first found them equal or prefetching 0.5-1.6 ms faster, and whichever
stepper came first in a round slow early in the process.

Warm-up (untimed rounds): 1 on the CPU; on CUDA, by default, enough rounds for
``CUDA_WARMUP_STEPS`` (64) steps of the process, since in that probe a process's
first ~60 steps were the slow ones (the process's start, whichever stepper ran
first), and ``CUDA_REPEATS`` (20) timed rounds, a whole number of the order's
periods (each stepper first equally often among the timed rounds): the GPU step
times varied 2x from one step to the next, which leaves a median of 3 to chance.
Every step's loss is recorded
(``losses``, warm-up included) with how each pair that must agree differs
(``loss_diff``: the step-0 difference, where weights and inputs are the same,
the first timed step's and the first step past ``LOSS_TOLERANCE``): prefetching
on and off (``--prefetch both``) and a stepper and its ``--twin`` (the same
setting; on a GPU their difference is the device's own nondeterminism, atomics
adding in another order, grown through training: the floor the on/off
difference is read against). On the CPU all are 0. The JSON is standard JSON (``benchmarks.results_json``): a
diverged loss and the infinite difference it makes are the strings ``"nan"`` / ``"inf"`` there (``NONFINITE_KEYS``).

Synthetic words of realistic lengths (Zipf-distributed), never zeros. No spaCy import.

    python benchmarks/pretrain.py [--presets small original] [--threads 2] [--backends fused] [--twin]
"""

import argparse
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np
import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kernels import (  # noqa: E402
    bilm_flops, cpu_identity, device_problem, measure_gemm_gflops, order_period, round_order, sync)
from benchmarks.results_json import nonfinite_as_text, write_json  # noqa: E402
from spacy_elmo.bilm import BiLM, BiLMConfig  # noqa: E402
from spacy_elmo.ops import extension_fix, fused_available  # noqa: E402
from spacy_elmo.training.lm import BidirectionalLM, encode_batch  # noqa: E402
from spacy_elmo.training.malloc import keep_freed_memory  # noqa: E402
from spacy_elmo.training.prefetch import StepPrefetcher, prefetch_default, prepare_step  # noqa: E402
from spacy_elmo.training.sampler import LogUniformSampler  # noqa: E402
from spacy_elmo.training.softmax import SoftmaxLayer  # noqa: E402
from spacy_elmo.training.trainer import build_optimizer  # noqa: E402
from spacy_elmo.training.vocab import SPECIALS, CharTable, Vocab  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BACKENDS = ("reference", "fused")
#: CUDA's default warm-up: rounds enough for this many steps of the process (module docstring)
CUDA_WARMUP_STEPS = 64
#: CUDA's default timed rounds, rounded up to a whole number of the interleaving order's periods
CUDA_REPEATS = 20
#: the loss difference past which two steppers that must agree are reported as parted (``first_step_above``)
LOSS_TOLERANCE = 1e-3
#: the record's keys whose numbers may be non-finite by meaning (a stepper's loss diverged: NaN or infinite, and its
#: difference from another's infinite, :func:`loss_diff`); the JSON holds them as "nan" / "inf" / "-inf"
NONFINITE_KEYS = ("losses", "first_loss", "loss_diff", "loss_max_abs_diff")


class StepperKey(NamedTuple):
    """One interleaved stepper: its backend, whether it prefetches, and its copy (1: the ``--twin``)."""

    backend: str
    prefetch: bool
    copy: int = 0


def stepper_keys(backends: Sequence[str], main_prefetch: bool, both: bool, twin: bool) -> List[StepperKey]:
    """The steppers of one preset, in the order of round 0: each backend with ``main_prefetch``, with
    ``both`` also with the other setting, with ``twin`` also a second copy of the main one."""
    keys = []
    for name in backends:
        keys.append(StepperKey(name, main_prefetch))
        if both:
            keys.append(StepperKey(name, not main_prefetch))
        if twin:
            keys.append(StepperKey(name, main_prefetch, 1))
    return keys


def step_counts(warmup: Optional[int], repeats: Optional[int], device: torch.device, n_steppers: int) -> Tuple[int, int]:
    """(warm-up rounds, timed rounds): ``warmup`` and ``repeats`` where given, else the device's defaults:
    1 and 3 on the CPU; on CUDA enough rounds for ``CUDA_WARMUP_STEPS`` steps of the process and
    ``CUDA_REPEATS`` rounded up to a whole number of :func:`~benchmarks.kernels.order_period`'s rounds."""
    if device.type != "cuda":
        return (1 if warmup is None else warmup), (3 if repeats is None else repeats)
    period = order_period(n_steppers)
    return (-(-CUDA_WARMUP_STEPS // n_steppers) if warmup is None else warmup,
            period * -(-CUDA_REPEATS // period) if repeats is None else repeats)


def loss_diff(a: Sequence[float], b: Sequence[float], warmup: int) -> Dict[str, Any]:
    """How two steppers' per-step losses (every step, warm-up included) differ: the largest difference, the
    one at step 0 (the same weights and inputs: only the forward's rounding can differ), at the first timed
    step (``warmup``), and the first step where it exceeds ``LOSS_TOLERANCE`` (None: none). A difference
    that grows smoothly from step 0 is nondeterminism compounding through the updates; one that jumps at a
    step, or is large at step 0, is different inputs. A NaN or infinite loss on either side counts as an
    infinite difference: above the tolerance, and the maximum (``abs(nan) > tol`` is False, and ``max`` of a
    list with a NaN depends on where the NaN stands: a NaN loss read as agreement)."""
    diffs = [d if math.isfinite(d) else math.inf for d in (abs(x - y) for x, y in zip(a, b))]
    return {"max_abs": max(diffs), "step0": diffs[0], "first_timed": diffs[warmup],
            "first_step_above": next((i for i, d in enumerate(diffs) if d > LOSS_TOLERANCE), None)}


def synthetic_vocab(n: int, seed: int = 0) -> Vocab:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: List[str] = []
    seen: Set[str] = set()
    while len(words) < n:
        w = "".join(rng.choice(letters, size=int(rng.integers(1, 12))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return Vocab(SPECIALS + words)


def batches(vocab: Vocab, batch: int, unroll: int, n: int, seed: int = 0):
    """``n`` windows ``(fwd, bwd)`` of Zipf-distributed type ids ``(B, U + 1)``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = [np.minimum(rng.zipf(1.2, size=(batch, unroll + 1)) + 2, len(vocab.types) - 1) for _ in range(2)]
        out.append(tuple(torch.from_numpy(x.astype(np.int64)) for x in ids))
    return out


def step_flops(config: BiLMConfig, n_unique: int, n_tokens: int, negatives: int) -> float:
    """FLOPs of one training step (multiply-add = 2, backward = 2x forward, as in
    benchmarks/kernels.py): the biLM forward (:func:`~benchmarks.kernels.bilm_flops`) with the token
    encoder on the ``n_unique`` distinct input tokens (each encoded once) and both LSTM stacks on
    ``n_tokens`` positions per direction, and the sampled softmax's ``(2 n_tokens, negatives)`` product."""
    softmax = 2 * (2 * n_tokens) * (negatives + 1) * config.projection_dim
    return 3.0 * (bilm_flops(config, n_unique, n_tokens) + softmax)


class Stepper:
    """What :func:`make_step` returns: ``stepper(i)`` runs step ``i`` (its loss), ``stepper.close()`` stops
    its prefetch thread."""

    def __init__(self, step: Callable[[int], float], close: Callable[[], None]) -> None:
        self.step, self.close = step, close

    def __call__(self, i: int) -> float:
        return self.step(i)


def make_step(lm, optimizer, sampler, char_table, vocab, device, use_amp, gen, data, prefetch=False) -> Stepper:
    """``step(i)``: one training step on window ``data[i]`` (asked in order), its inputs prepared as
    ``pretrain`` prepares them (:func:`~spacy_elmo.training.prefetch.prepare_step`), with ``prefetch`` one
    step ahead on a thread (:class:`~spacy_elmo.training.prefetch.StepPrefetcher`). A prefetching step ends
    once the next step's preparation, which overlaps it, is done too: its time is counted in this step's,
    not in the next one's nor in another stepper's interleaved between them. ``step.close()`` stops the thread."""
    state: List[Optional[Tuple[torch.Tensor, torch.Tensor]]] = [None]  # the LSTM state step to step
    pin = device.type == "cuda"
    prefetcher = StepPrefetcher(lambda i: prepare_step(data[i], vocab, char_table, sampler, gen, pin), gen, len(data),
                                prefetch, device)

    def step(i):
        host = prefetcher.get(i)
        inputs = host.to(device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_amp):
            # the host's lengths, as pretrain's (one process): the LSTM's op reads them without a host sync
            res = lm(inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd,
                     host.lengths, state[0], inputs.sample, sampler, inputs.logq, inputs.positions)
        loss = (res.nll_fwd.mean() + res.nll_bwd.mean()) / 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 10.0)
        optimizer.step()
        state[0] = (res.state[0].detach(), res.state[1].detach())
        sync(device)
        prefetcher.wait()
        return float(loss.detach())

    return Stepper(step, prefetcher.close)


def _rng_state(device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(device, state):
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)


def host_prepare_seconds(data, sampler, char_table, vocab, device):
    """Median seconds of one step's host preparation alone (:func:`prepare_step`, pinned on CUDA), on the
    main thread, nothing else running: what prefetching takes off the step's critical path."""
    gen = torch.Generator().manual_seed(1)
    times = []
    for batch in data:
        start = time.perf_counter()
        prepare_step(batch, vocab, char_table, sampler, gen, pin=device.type == "cuda")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_preset(preset, keys, main_prefetch, args, device):
    """One preset's row: ``keys`` (:func:`stepper_keys`) interleaved step by step in :func:`round_order`,
    ``args.warmup`` untimed rounds then ``args.repeats`` timed ones."""
    config = BiLMConfig.preset(preset)
    vocab = synthetic_vocab(args.vocab_size)
    data = batches(vocab, args.batch_size, args.unroll, args.warmup + args.repeats)
    torch.manual_seed(0)
    base = BiLM(config, backend="reference")
    softmax0 = SoftmaxLayer(len(vocab), config.projection_dim)
    # One character table for every backend and the floor (it fills lazily, in the untimed warm-up).
    table = CharTable(vocab, config.max_characters_per_token)
    # The steppers: one per key, each its own model from the same weights, with steps prepared as `pretrain`
    # prepares them on this device (--prefetch: one step ahead on a thread or not).
    steppers: Dict[StepperKey, Stepper] = {}
    times: Dict[StepperKey, List[float]] = {key: [] for key in keys}
    losses: Dict[StepperKey, List[float]] = {key: [] for key in keys}
    for key in keys:
        bilm = BiLM(config, backend=key.backend)
        bilm.load_state_dict(base.state_dict())
        bilm.lstm.dropout = 0.1
        softmax = SoftmaxLayer(len(vocab), config.projection_dim)
        softmax.load_state_dict(softmax0.state_dict())
        lm = BidirectionalLM(bilm, softmax).to(device).train()
        opt = build_optimizer("adagrad", None, lm.parameters())  # what `pretrain` uses
        sampler = LogUniformSampler(len(vocab), args.negatives)
        steppers[key] = make_step(lm, opt, sampler, table, vocab, device, device.type == "cuda" and args.bf16,
                                  torch.Generator().manual_seed(0), data, key.prefetch)
    # Interleave the steppers step by step so all see the same machine load, the order rotated each round
    # (round_order: each first, and right after each other one, equally often; on an H200 a fixed order left
    # one stepper slow, docs/benchmarks.md). Each draws its dropout masks from its own copy of the RNG
    # (swapped outside the timed step), so all see the same masks.
    rng = {key: _rng_state(device) for key in keys}
    try:
        for i in range(len(data)):
            for key in round_order(keys, i):
                _set_rng_state(device, rng[key])
                start = time.perf_counter()
                losses[key].append(steppers[key](i))
                if i >= args.warmup:
                    times[key].append(time.perf_counter() - start)
                rng[key] = _rng_state(device)
    finally:
        for stepper in steppers.values():
            stepper.close()
    prepare_s = host_prepare_seconds(data[args.warmup:], LogUniformSampler(len(vocab), args.negatives), table, vocab, device)
    tokens = args.batch_size * args.unroll
    # The floor: this step's FLOPs at the GEMM rate (the encoder's share depends on
    # how many distinct tokens each window holds).
    unique = [encode_batch(f[:, :-1], b[:, :-1], table)[0].shape[0] for f, b in data[args.warmup:]]
    flops = statistics.mean(step_flops(config, u, tokens, args.negatives) for u in unique)
    floor_tokens_per_s = tokens / (flops / (args.peak_gflops * 1e9))
    row = {"preset": preset, "batch": args.batch_size, "unroll": args.unroll, "negatives": args.negatives,
           "vocab": len(vocab), "unique_tokens_mean": statistics.mean(unique), "gflop_per_step": flops / 1e9,
           "floor_tokens_per_s": floor_tokens_per_s, "host_prepare_ms": prepare_s * 1e3, "prefetch": main_prefetch,
           "warmup": args.warmup, "repeats": args.repeats, "steppers": [list(k) for k in keys], "backends": {}}

    def measured(key):
        median = statistics.median(times[key])
        return {"tokens_per_s": tokens / median, "step_s_median": median, "step_s_all": times[key],
                "gflops": flops / median / 1e9, "floor_fraction": tokens / median / floor_tokens_per_s,
                "first_loss": losses[key][0], "losses": losses[key]}

    backends = list(dict.fromkeys(key.backend for key in keys))
    for name in backends:
        row["backends"][name] = measured(StepperKey(name, main_prefetch))
    other = not main_prefetch
    if StepperKey(backends[0], other) in steppers:
        # --prefetch both: each backend with the other setting too, and whether the losses agree
        diffs = {name: loss_diff(losses[StepperKey(name, True)], losses[StepperKey(name, False)], args.warmup)
                 for name in backends}
        row["other_prefetch"] = {"prefetch": other, "backends": {name: measured(StepperKey(name, other)) for name in backends},
                                 "loss_max_abs_diff": max(d["max_abs"] for d in diffs.values()), "loss_diff": diffs}
    if StepperKey(backends[0], main_prefetch, 1) in steppers:
        # --twin: a second copy of each main stepper; their losses differ by the device's own nondeterminism only
        twin = [StepperKey(name, main_prefetch, 1) for name in backends]
        row["twin"] = {"prefetch": main_prefetch, "backends": {key.backend: measured(key) for key in twin},
                       "loss_diff": {key.backend: loss_diff(losses[key._replace(copy=0)], losses[key], args.warmup)
                                     for key in twin}}
    if "fused" in backends and "reference" in backends:
        row["speedup_fused_vs_reference"] = row["backends"]["fused"]["tokens_per_s"] / row["backends"]["reference"]["tokens_per_s"]
    if "reference" in backends:
        # The ratio to the reference a backend reaches at the floor. Not a hard bound: the
        # fused char CNN skips repeated padding windows the count includes.
        row["floor_vs_reference"] = floor_tokens_per_s / row["backends"]["reference"]["tokens_per_s"]
    return row


def bench_logsumexp(args, device, repeats=10):
    """The sampled softmax's ``(B*U, S)`` log-sum-exp with its product, forward + backward:
    torch's, the reference backend's consuming one (it reuses the logits buffer, no
    temporaries) and, when built, the fused op (product and softmax per block of rows
    in cache; the backward folds the softmax scale into its products). Interleaved in
    :func:`round_order`, medians."""
    from spacy_elmo import ops
    from spacy_elmo.ops.reference import ConsumingLogSumExp

    n, dim = args.batch_size * args.unroll, 128
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(n, dim, generator=gen).to(device).requires_grad_()
    w = (torch.randn(args.negatives, dim, generator=gen) * 0.1).to(device).requires_grad_()
    off = torch.zeros(args.negatives, device=device)
    hit = torch.full((n,), -1, dtype=torch.long, device=device)
    impls = {"torch.logsumexp": lambda: torch.logsumexp(torch.nn.functional.linear(h, w), 1),
             "ConsumingLogSumExp": lambda: ConsumingLogSumExp.apply(torch.nn.functional.linear(h, w))[0]}
    if ops.fused_available():
        impls["fused"] = lambda: ops.sampled_logsumexp(h, w, off, hit, backend="fused")
    times: Dict[str, List[float]] = {name: [] for name in impls}
    for i in range(repeats + 2):
        for name in round_order(list(impls), i):
            start = time.perf_counter()
            impls[name]().sum().backward()
            sync(device)
            if i >= 2:
                times[name].append(time.perf_counter() - start)
    row = {"rows": n, "negatives": args.negatives, "dim": dim}
    row.update({name: statistics.median(ts) for name, ts in times.items()})
    row["speedup"] = row["torch.logsumexp"] / row["ConsumingLogSumExp"]
    if "fused" in row:
        row["speedup_fused_vs_consuming"] = row["ConsumingLogSumExp"] / row["fused"]
    return row


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["small", "original"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--unroll", type=int, default=20)
    parser.add_argument("--negatives", type=int, default=8192)
    parser.add_argument("--vocab-size", type=int, default=50_000)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=None,
                        help="the backends to time (default: reference, and fused when spacy_elmo._C loads)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed rounds (one step of each stepper each) before the timed ones (default: 1 on the "
                             f"CPU; on CUDA enough for {CUDA_WARMUP_STEPS} steps of the process, whose first tens of "
                             "steps run slow on a GPU)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"timed rounds (default: 3 on the CPU; on CUDA {CUDA_REPEATS}, rounded up to a whole "
                             "number of the interleaving order's periods)")
    parser.add_argument("--twin", action="store_true",
                        help="a second copy of each backend's main stepper, the same setting: the loss difference "
                             "between the two is the device's own nondeterminism (twin.loss_diff)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--prefetch", choices=["auto", "on", "off", "both"], default="auto",
                        help="prepare each step's inputs one step ahead on a thread (auto: as pretrain does on this "
                             "device, on with CUDA); both: auto's setting, and each backend with the other one beside it")
    parser.add_argument("--peak-gflops", type=float, default=None,
                        help="GFLOP/s of the floor (default: a GEMM measured at start, as benchmarks/kernels.py, in "
                             "the dtype the steps run in: bfloat16 on CUDA with --bf16, else float32)")
    parser.add_argument("--keep-freed-memory", action=argparse.BooleanOptionalAction, default=True,
                        help="glibc keeps freed memory, as the pretrain command does (spacy_elmo/training/malloc.py)")
    parser.add_argument("--out", type=Path, default=None)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    problem = device_problem(device)
    if device.type == "cuda" and problem:
        # without a GPU or the CUDA kernels the fused steps die in the dispatcher mid-run
        print(problem, file=sys.stderr)
        return 1
    backends = list(dict.fromkeys(args.backends or [b for b in BACKENDS if b != "fused" or fused_available()]))
    if "fused" in backends and not fused_available():
        print(f"--backends fused: spacy_elmo._C is not built. {extension_fix()}", file=sys.stderr)
        return 1
    main_prefetch = prefetch_default(device) if args.prefetch in ("auto", "both") else args.prefetch == "on"
    keys = stepper_keys(backends, main_prefetch, args.prefetch == "both", args.twin)
    args.warmup, args.repeats = step_counts(args.warmup, args.repeats, device, len(keys))
    if args.warmup < 0 or args.repeats < 1:
        print(f"--warmup {args.warmup} --repeats {args.repeats}: at least 0 and 1", file=sys.stderr)
        return 1
    kept = keep_freed_memory() if args.keep_freed_memory else False
    torch.set_num_threads(args.threads)
    bf16 = device.type == "cuda" and args.bf16
    peak_dtype = torch.bfloat16 if bf16 else torch.float32
    if args.peak_gflops is None:
        args.peak_gflops = round(measure_gemm_gflops(device, repeats=20, dtype=peak_dtype), 1)
    print(f"{peak_dtype} GEMM rate here: {args.peak_gflops} GFLOP/s (the floor's peak); {len(keys)} steppers, "
          f"{args.warmup} warm-up and {args.repeats} timed rounds, the order rotated each round", flush=True)
    out = args.out or RESULTS / f"pretrain_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for preset in args.presets:
        row = bench_preset(preset, keys, main_prefetch, args, device)
        rows.append(row)
        # the presets so far survive a run stopped at a time limit ("complete": false)
        write_json(out, _result(args, device, kept, bf16, peak_dtype, rows, None), default=str)
        cells = "  ".join(f"{b}: {row['backends'][b]['tokens_per_s']:8.0f} tok/s ({row['backends'][b]['floor_fraction']:.2f} of floor)"
                          for b in backends)
        ratio = row.get("speedup_fused_vs_reference")
        floor_ratio = row.get("floor_vs_reference")
        print(f"{preset:>9}  B={args.batch_size} U={args.unroll}  {cells}" + (f"  fused/reference {ratio:.2f}x" if ratio else "")
              + f"  floor {row['floor_tokens_per_s']:.0f} tok/s" + (f" = {floor_ratio:.2f}x reference" if floor_ratio else "")
              + f"  host prep {row['host_prepare_ms']:.1f} ms/step, prefetch {'on' if row['prefetch'] else 'off'}", flush=True)
        for part, label in (("other_prefetch", "prefetch {}"), ("twin", "twin, prefetch {}")):
            if part in row:
                other = row[part]
                print(f"{'':>9}  " + "  ".join(
                    f"{b}: {1 / row['backends'][b]['step_s_median']:.3f} steps/s prefetch {'on' if row['prefetch'] else 'off'}, "
                    f"{1 / other['backends'][b]['step_s_median']:.3f} {label.format('on' if other['prefetch'] else 'off')}"
                    for b in backends) + "; losses differ by " + ", ".join(
                    f"{b} {d['max_abs']:.3g} at most ({d['step0']:.2g} at step 0, {d['first_timed']:.2g} at step "
                    f"{args.warmup}, above {LOSS_TOLERANCE:g} " + ("never" if d["first_step_above"] is None
                                                                else f"from step {d['first_step_above']}") + ")"
                    for b, d in other["loss_diff"].items()), flush=True)
    lse = bench_logsumexp(args, device)
    print(f"sampled-softmax logsumexp ({lse['rows']} x {lse['negatives']}, fwd+bwd with its product): "
          f"torch {lse['torch.logsumexp'] * 1e3:.0f} ms, consuming {lse['ConsumingLogSumExp'] * 1e3:.0f} ms, "
          f"{lse['speedup']:.2f}x" + (f"; fused {lse['fused'] * 1e3:.0f} ms" if "fused" in lse else ""), flush=True)
    write_json(out, _result(args, device, kept, bf16, peak_dtype, rows, lse), default=str)
    print(f"wrote {out}")
    return 0


def _result(args, device, kept, bf16, peak_dtype, rows, lse):
    result = {
        # the options as run (as benchmarks/kernels.py records them; --warmup, --repeats and --peak-gflops resolved)
        "benchmark": "pretrain", "args": vars(args), "device": str(device), "threads": torch.get_num_threads(),
        "dtype": "bfloat16 autocast" if bf16 else "float32", "complete": lse is not None,
        "fused_available": fused_available(), "torch": torch.__version__, "machine": platform.machine(),
        "processor": platform.processor(), **cpu_identity(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "keep_freed_memory": kept,
        "peak_gflops": args.peak_gflops, "peak_dtype": str(peak_dtype).replace("torch.", ""),
        "floor_note": "floor = tokens/s at peak_gflops (step_flops)",
        "rows": nonfinite_as_text(rows, NONFINITE_KEYS), "logsumexp": lse,
        "loss_tolerance": LOSS_TOLERANCE,
        "note": "tokens/s = batch*unroll per training step (fwd+bwd LMs, sampled softmax, clip, Adagrad, its inputs "
                "prepared as pretrain does: prefetched one step ahead where a row's prefetch is true); medians of "
                "the timed rounds (step_s_all) after a row's warmup rounds; the steppers (a row's steppers: backend, "
                "prefetch, copy) interleaved one step each per round, the order rotated each round "
                "(benchmarks.kernels.round_order: each first, and right after each other one, equally often); "
                "losses: every step's, warm-up included; loss_diff: how two steppers that must agree differ "
                "(step 0, the first timed step, the first step past loss_tolerance; a NaN or infinite loss on either "
                "side: an infinite difference); a non-finite loss or difference is written as the string \"nan\", "
                "\"inf\" or \"-inf\" (standard JSON has no such number; float() reads it back); "
                "host_prepare_ms: one step's input preparation alone (prepare_step), median",
    }
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    if not fused_available():
        result["fused_missing"] = "spacy_elmo._C not loaded: only the reference backend was measured"
    return result


if __name__ == "__main__":
    sys.exit(main())
