"""Kernel and whole-model benchmarks: fused vs reference vs AllenNLP-style vs nn.LSTM.

Per kernel (char CNN, one highway layer, one biLSTM layer with both
directions) and, with ``--whole-model``, the whole biLM and a training step
(forward + backward) of the small preset. Every comparison is measured side
by side in one process: median of ``--repeats`` after ``--warmup`` calls, the
implementations interleaved in an order rotated each round (``round_order``), on
random word-like tokens (never zeros). Prints a table, writes JSON and a PNG
chart to ``benchmarks/results/`` with machine info, threads and shapes.

    python benchmarks/kernels.py --quick                       # 32 x 20, both presets
    python benchmarks/kernels.py --whole-model --batches 32 --lengths 20
    python benchmarks/kernels.py --whole-model                 # full grid (slow on 2 cores)
    python benchmarks/kernels.py --whole-model --allennlp      # + AllenNLP's own _ElmoBiLm

FLOP counts follow docs/performance.md (multiply-add = 2 FLOP); the floor is
the token rate at ``--peak-gflops``, by default the float32 GEMM rate measured
at start on this machine and thread count (a 2048^3 ``torch.mm``; with 2 threads
328-356 GFLOP/s recorded on the Intel Xeons with AVX-512 and AMX, 175-190 on the
AMD EPYC Zen 4s: docs/benchmarks.md, "Machines"). Each row records two rates:
``floor_fraction``, tokens/s against the nominal per-token floor (the whole model
counted at every position, as AllenNLP runs it): the one that compares
implementations; and ``gflops`` / ``work_fraction``, the rate of the FLOPs the
implementation does. They differ for the whole model and the training step on
the CPU, where ``BiLM`` encodes each distinct token once (the markers of all
sentences are 2 rows, repeated words one): the encoder's rows are counted on one
untimed call. The char CNN's FLOPs are those of every window; the fused kernel
skips the repeated windows inside a token's padding, so its rates can exceed the
GEMM rate. ``nn.LSTM(proj_size=...)`` has no projection clip, so it is not exact
ELMo: shown for speed only.
"""

import argparse
import functools
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.allennlp_style import AllenNLPStyleBiLM, ConvTokenEncoder, StepLstmWithProjection  # noqa: E402
from benchmarks.results_json import write_json  # noqa: E402
from spacy_elmo.ops import extension_fix, fused_available  # noqa: E402
from spacy_elmo.ops import reference as R  # noqa: E402
from spacy_elmo.training.malloc import keep_freed_memory  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PRESETS = {"small": (1024, 128, 1), "medium": (2048, 256, 1), "original": (4096, 512, 2)}
FILTERS = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]
W, D = 50, 16


# ----------------------------------------------------------------- helpers


def sync(device):
    """Wait for the work queued on ``device``: for a GPU that GPU's, not the current one's (``--device cuda:1`` while
    the current GPU is 0; the timings of every benchmark go through here and :func:`timeit`)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timeit(fn, repeats, warmup, device):
    """(median, every time) in seconds of ``fn()`` on ``device``: on a GPU from CUDA events recorded on the current
    stream of ``device`` (where the work on its tensors is queued), not of the current GPU."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            stream = torch.cuda.current_stream(device)
            start.record(stream)
            fn()
            end.record(stream)
            sync(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


#: the dtype every implementation runs under (torch.autocast; None: none), set by main from --autocast
AUTOCAST: Dict[str, Optional[torch.dtype]] = {"dtype": None}


def _autocast_wrap(fn, device):
    dtype = AUTOCAST["dtype"]
    if dtype is None:
        return fn

    def run():
        with torch.autocast(device.type, dtype=dtype):
            return fn()

    return run


T = TypeVar("T")


def order_period(n: int) -> int:
    """Rounds after which :func:`round_order` repeats for ``n`` items: ``n`` when ``n`` is even, ``2 n`` when odd
    (1 for one item)."""
    if n <= 1:
        return 1
    return n if n % 2 == 0 else 2 * n


def round_order(items: Sequence[T], round_index: int) -> List[T]:
    """``items`` in the order an interleaved benchmark runs them in round ``round_index``: row
    ``round_index`` of a balanced Latin square (Williams' design), so over any :func:`order_period`
    consecutive rounds each item comes first equally often and right after each other item
    equally often. Round ``i`` (``i < n``) starts with item ``i``.

    With a fixed order, on an H200 (session 39), the fused pretraining step with prefetching (always
    third, right after the reference without it) timed 38 against 23.5 ms without, and a probe found
    whichever stepper ran first in a round slow early in the process (docs/benchmarks.md). A plain
    rotation (``i, i+1, ...``) still leaves each item right after the same one in ``n - 1`` of ``n`` rounds."""
    n = len(items)
    if n == 0:
        return []
    # Williams' first row 0, 1, n-1, 2, n-2, ...; row r adds r (mod n); for odd n the rows
    # n..2n-1 are the first n reversed (an odd square alone cannot balance the neighbours).
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    r = round_index % order_period(n)
    row = [(x + r % n) % n for x in first]
    return [items[k] for k in (row if r < n else row[::-1])]


def time_side_by_side(impls, repeats, warmup, device, report: Optional[Callable[[Any, int, float], None]] = None):
    """Median seconds of each implementation, interleaved so that the machine's noise
    hits every implementation alike: one call of each per round, in :func:`round_order`
    (each first, and right after each other, equally often). ``report(name, round, seconds)``,
    when given, is called after each timed call (a long run's progress)."""
    impls = {name: _autocast_wrap(fn, device) for name, fn in impls.items()}
    for fn in impls.values():
        for _ in range(warmup):
            fn()
    sync(device)
    times: Dict[str, List[float]] = {name: [] for name in impls}
    for i in range(repeats):
        for name in round_order(list(impls), i):
            times[name].append(timeit(impls[name], 1, 0, device)[0])
            if report is not None:
                report(name, i, times[name][-1])
    return {name: (statistics.median(ts), ts) for name, ts in times.items()}


def random_sentences(batch, length, seed=0):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [["".join(rng.choice(letters) for _ in range(rng.randint(1, 12))) for _ in range(length)]
            for _ in range(batch)]


def char_ids_of(sentences):
    from spacy_elmo import batch_to_ids

    return batch_to_ids(sentences)


def cnn_flops(n_tok):
    return 2 * n_tok * sum((W - w + 1) * w * D * c for w, c in FILTERS)


def highway_flops(n_tok, f=2048):
    return 2 * n_tok * f * 2 * f


def lstm_layer_flops(n_tok, C, P):  # both directions
    return 2 * 2 * n_tok * (P * 4 * C + P * 4 * C + C * P)


def bilm_flops(config, n_encoded, n_positions):
    """FLOPs of one biLM forward: the token encoder (char CNN on every window, highways,
    projection) on ``n_encoded`` token rows and the ``config.n_layers`` biLSTM layers (both
    directions) on ``n_positions`` positions. ``BiLM.encode_tokens`` encodes each distinct token
    once eagerly on the CPU (``n_encoded`` < ``n_positions``: the markers of every sentence are 2
    rows), every position on a GPU and in AllenNLP (``n_encoded == n_positions``)."""
    if [tuple(f) for f in config.filters] != FILTERS:
        raise ValueError("bilm_flops counts the released filter set only")
    n_filters, P, C = config.n_filters, config.projection_dim, config.cell_dim
    encoder = cnn_flops(n_encoded) + config.n_highway * highway_flops(n_encoded, n_filters)
    if n_filters != P:
        encoder += 2 * n_encoded * n_filters * P
    return encoder + config.n_layers * lstm_layer_flops(n_positions, C, P)


def encoder_rows(encoder, run):
    """Token rows ``encoder`` (a token-encoder module) encodes in one call of ``run()``, without
    gradients: what an implementation really runs its encoder on (the FLOPs it does)."""
    rows = []
    handle = encoder.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return sum(rows)


def measure_gemm_gflops(device, n=2048, repeats=5, dtype=torch.float32):
    """Best GEMM rate of ``(n, n) @ (n, n)`` in ``dtype`` on ``device`` (this thread count):
    the best of ``repeats``, since a shared machine only ever slows a run down."""
    if device.type == "cuda":
        n = 8192  # fills the chip
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    _, times = timeit(lambda: torch.mm(a, b), repeats, 1, device)
    return 2 * n**3 / min(times) / 1e9


# The extensions that set a CPU's float32 GEMM peak per core and cycle.
_PEAK_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_identity(cpuinfo="/proc/cpuinfo"):
    """The first CPU's model name, family / model numbers and peak-deciding flags.

    Machines of one kind here come with different CPUs (an Intel Xeon with two 512-bit
    FMA units per core, an AMD EPYC Zen 4 that runs AVX-512 on 256-bit units): their
    float32 GEMM peaks differ about 2x, and with them every product-bound time and the
    ratios against a reference, so each result must say which CPU it ran on.
    """
    fields = {}
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough: the cores are alike
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return {}
    info: Dict[str, Union[str, List[str]]] = {}
    if "model name" in fields:
        info["cpu"] = fields["model name"]
    if "vendor_id" in fields:
        info["cpu_vendor"] = fields["vendor_id"]
    if "cpu family" in fields and "model" in fields:
        info["cpu_family_model"] = f"{fields['cpu family']}/{fields['model']}"
    flags = set(fields.get("flags", "").split())
    info["cpu_peak_flags"] = [f for f in _PEAK_FLAGS if f in flags]
    return info


def machine_info(device):
    info = {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "device": str(device),
        "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    info.update(cpu_identity())
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["tf32"] = {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    if fused_available():
        from spacy_elmo.ops import fused

        info["fused_cpu_isa"] = fused.cpu_isa()
        info["fused_cuda"] = fused.built_with_cuda()
    return info


def device_problem(device):
    """Why the fused kernels cannot run on ``device`` (None when they can): on CUDA a
    GPU must be visible and the extension built with its CUDA kernels, or the first
    fused call dies in the dispatcher with a message that names neither."""
    if not fused_available():
        return f"spacy_elmo._C is not built. {extension_fix()}"
    if device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return f"--device {device}: torch {torch.__version__} sees no CUDA GPU"
    from spacy_elmo.ops import fused

    if not fused.built_with_cuda():
        return (f"--device {device}: spacy_elmo._C was built without its CUDA kernels "
                "(rebuild with SPACY_ELMO_CUDA=1 where nvcc and a CUDA torch are present)")
    return None


def result_paths(out, stem):
    """The JSON and PNG paths of ``--out``: a bare stem goes to benchmarks/results/;
    a value with a directory in it (``/tmp/x/kernels_cuda``) is used as it is."""
    name = out or stem
    base = Path(name) if ("/" in name or os.sep in name) else RESULTS / name
    if base.suffix in (".json", ".png"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".json"), base.with_name(base.name + ".png")


class Recorder:
    def __init__(self, peak_gflops):
        self.rows = []
        self.peak = peak_gflops

    def add(self, section, preset, batch, length, impl, seconds, times, tokens, flops, exact=True, nominal_flops=None):
        """One row. ``flops``: the work this implementation does; ``nominal_flops`` (default
        ``flops``): the section's per-token count, the same for every implementation (the whole
        model: every position encoded). ``gflops`` / ``work_fraction``: the rate of the work done,
        against the peak; ``floor_fraction``: tokens/s against the nominal per-token floor (tokens/s
        at the peak for ``nominal_flops``), comparable across implementations: above 1 where an
        implementation does less work than the nominal count (the whole model on the CPU encodes
        each distinct token once)."""
        nominal = flops if nominal_flops is None else nominal_flops
        row = dict(section=section, preset=preset, batch=batch, length=length, impl=impl, seconds=seconds,
                   times=times, tokens=tokens, tokens_per_s=tokens / seconds, flops=flops, nominal_flops=nominal,
                   gflops=flops / seconds / 1e9, work_fraction=(flops / seconds / 1e9) / self.peak,
                   floor_fraction=(nominal / seconds / 1e9) / self.peak, exact=exact)
        self.rows.append(row)
        return row


# ---------------------------------------------------------------- sections


def _with_env(name, value, fn):
    """fn() with the environment variable ``name`` set to ``value``: the CUDA kernels' diagnostic
    switches, read at each call (SPACY_ELMO_CHAR_CNN_MMA, SPACY_ELMO_LSTM_PRODUCTS)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        return fn()
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def bench_kernels(rec, preset, batch, length, args, device):
    from spacy_elmo.ops import fused

    C, P, _ = PRESETS[preset]
    g = torch.Generator().manual_seed(0)
    n_tok = batch * length
    ids = char_ids_of(random_sentences(batch, length)).view(-1, W).to(device)
    emb = (torch.rand(261, D, generator=g) * 2 - 1).to(device)
    ws = [((torch.rand(c, D, w, generator=g) * 2 - 1) * 0.05).to(device) for w, c in FILTERS]
    bs = [torch.zeros(c, device=device) for _, c in FILTERS]
    enc = ConvTokenEncoder(FILTERS, D, 0, P).to(device)
    with torch.no_grad():
        enc.embedding.weight[1:] = emb
        for conv, w, b in zip(enc.convs, ws, bs):
            # for the type checker: a ModuleList yields Modules; nn.Conv1d has a bias unless told not to
            assert isinstance(conv, torch.nn.Conv1d) and conv.bias is not None
            conv.weight.copy_(w)
            conv.bias.copy_(b)
    slow_ok = n_tok <= args.max_slow_tokens
    # what each implementation returns differs (a tensor, a tuple, a list): only its time counts
    impls: Dict[str, Callable[[], object]] = {"fused": lambda: fused.char_cnn(ids, emb, ws, bs),
                                              "nn.Conv1d (AllenNLP-style)": lambda: enc.char_cnn(ids)}
    if slow_ok:
        impls["reference"] = lambda: R.char_cnn(ids, emb, ws, bs)
    if device.type == "cuda" and AUTOCAST["dtype"] is not None:
        # the same op on the CUDA-core kernel: what the tensor-core one (fp16/bf16, csrc/cuda/char_cnn.cu) gains
        impls["fused, CUDA cores"] = lambda: _with_env("SPACY_ELMO_CHAR_CNN_MMA", "0",
                                                       lambda: fused.char_cnn(ids, emb, ws, bs))
    with torch.no_grad():
        for name, (s, ts) in time_side_by_side(impls, args.repeats, args.warmup, device).items():
            rec.add("char_cnn", preset, batch, length, name, s, ts, n_tok, cnn_flops(n_tok))
        x = torch.randn(n_tok, 2048, generator=g).to(device)
        hw = (torch.randn(4096, 2048, generator=g) / 2048**0.5).to(device)
        hb = torch.zeros(4096, device=device)
        hw_impls = {"fused": lambda: fused.highway(x, hw, hb), "reference": lambda: R.highway(x, hw, hb)}
        for name, (s, ts) in time_side_by_side(hw_impls, args.repeats, args.warmup, device).items():
            rec.add("highway", preset, batch, length, name, s, ts, n_tok, highway_flops(n_tok))

        xs = (torch.randn(batch, length, P, generator=g) * 0.5).to(device)
        lengths = torch.full((batch,), length, dtype=torch.long)
        wts = [(torch.rand(*s, generator=g) * 2 - 1).mul(0.05).to(device)
               for s in [(P, 4 * C), (P, 4 * C), (4 * C,), (C, P)] * 2]
        flops = lstm_layer_flops(n_tok, C, P)
        def bilstm():
            return fused.bilstm_layer(xs, xs, lengths, wts[:4], wts[4:], None, 3.0, 3.0, True, True)

        impls = {"fused": bilstm}
        if device.type == "cuda":  # the two directions' products: one batched GEMM or one per direction
            for how in ("batched", "per-direction"):
                impls[f"fused, {how} products"] = functools.partial(_with_env, "SPACY_ELMO_LSTM_PRODUCTS", how, bilstm)
        if slow_ok:
            impls["reference"] = lambda: R.bilstm_layer(xs, xs, lengths, wts[:4], wts[4:], None, 3.0, 3.0, True, True)
            steps = [StepLstmWithProjection(P, C, P, 3.0, 3.0).to(device).eval() for _ in range(2)]
            lens_d = lengths.to(device)
            impls["AllenNLP-style loop"] = lambda: [m(xs, lens_d) for m in steps]
        # eval(): cuDNN picks its mode by the module's train flag, not by grad mode; in training mode it runs
        # CUDNN_FWD_MODE_TRAINING and fills a reserve buffer for a backward that never comes
        lstm = torch.nn.LSTM(P, C, batch_first=True, bidirectional=True, proj_size=P).to(device).eval()
        impls["nn.LSTM(proj_size) [no clip, inexact]"] = lambda: lstm(xs)
        for name, (s, ts) in time_side_by_side(impls, args.repeats, args.warmup, device).items():
            rec.add("bilstm_layer", preset, batch, length, name, s, ts, n_tok, flops, exact="nn.LSTM" not in name)


def bench_whole(rec, preset, batch, length, args, device):
    from spacy_elmo import BiLM, BiLMConfig

    config = BiLMConfig.preset(preset)
    n_tok = batch * length
    ids = char_ids_of(random_sentences(batch, length)).to(device)
    positions = batch * (length + 2)  # the <S>, </S> markers are run too
    nominal = bilm_flops(config, positions, positions)  # every position encoded, as AllenNLP does
    torch.manual_seed(0)
    fused_model = BiLM(config, backend="fused").to(device).eval()
    # name -> (run the model, its token encoder; None: one that encodes every position)
    impls: Dict[str, Tuple[Callable[[], object], Optional[torch.nn.Module]]] = {
        "fused": (lambda: fused_model(ids), fused_model.token_encoder)}
    if n_tok <= args.max_slow_tokens:
        ref_model = BiLM(config, backend="reference").to(device).eval()
        ref_model.load_state_dict(fused_model.state_dict())
        impls["reference"] = (lambda: ref_model(ids), ref_model.token_encoder)
        style = AllenNLPStyleBiLM(config).to(device).eval()
        wrapped = char_ids_of([["<S>"] + s + ["</S>"] for s in random_sentences(batch, length)]).to(device)
        impls["AllenNLP-style loop"] = (lambda: style(wrapped), style.encoder)
    if args.allennlp and device.type == "cpu" and n_tok <= args.max_slow_tokens:
        try:  # AllenNLP's own _ElmoBiLm, the same weights and sentences, one more interleaved implementation
            from benchmarks.allennlp_timing import allennlp_bilm_runner

            # no encoder to count: _ElmoBiLm's character encoder runs on every position (the nominal count)
            impls["AllenNLP _ElmoBiLm"] = (allennlp_bilm_runner(fused_model, random_sentences(batch, length)), None)
        except Exception as err:  # AllenNLP not fetchable here: say so, keep going
            print(f"  (AllenNLP _ElmoBiLm skipped: {type(err).__name__}: {err})")
    # The FLOPs each one does: its encoder's rows counted on one untimed call.
    flops = {name: nominal if encoder is None else bilm_flops(config, encoder_rows(encoder, fn), positions)
             for name, (fn, encoder) in impls.items()}
    with torch.no_grad():
        timed = time_side_by_side({name: fn for name, (fn, _) in impls.items()}, args.repeats, args.warmup, device)
        for name, (s, ts) in timed.items():
            rec.add("whole_model", preset, batch, length, name, s, ts, n_tok, flops[name], nominal_flops=nominal)


def bench_train(rec, preset, batch, length, args, device):
    from spacy_elmo import BiLM, BiLMConfig

    config = BiLMConfig.preset(preset)
    ids = char_ids_of(random_sentences(batch, length)).to(device)
    n_tok = batch * length
    positions = batch * (length + 2)
    nominal = 3 * bilm_flops(config, positions, positions)  # forward + ~2x backward, every position encoded
    torch.manual_seed(0)
    models = {"fused": BiLM(config, backend="fused").to(device).train()}
    models["reference"] = BiLM(config, backend="reference").to(device).train()
    models["reference"].load_state_dict(models["fused"].state_dict())
    flops = {name: 3 * bilm_flops(config, encoder_rows(model.token_encoder, lambda m=model: m(ids)), positions)
             for name, model in models.items()}

    def step(model):
        def run():
            model.zero_grad(set_to_none=True)
            out = model(ids)
            loss = sum((layer * layer).mean() for layer in out[0])
            loss.backward()
        return run

    impls = {name: step(model) for name, model in models.items()}
    for name, (s, ts) in time_side_by_side(impls, args.repeats, args.warmup, device).items():
        rec.add("train_step", preset, batch, length, name, s, ts, n_tok, flops[name], nominal_flops=nominal)


# ------------------------------------------------------------------ report

BASELINES = {
    "char_cnn": ["nn.Conv1d (AllenNLP-style)", "reference"],
    "highway": ["reference"],
    "bilstm_layer": ["reference", "AllenNLP-style loop", "nn.LSTM(proj_size) [no clip, inexact]"],
    "whole_model": ["reference", "AllenNLP-style loop", "AllenNLP _ElmoBiLm"],
    "train_step": ["reference"],
}


def add_ratios(rows):
    key = lambda r: (r["section"], r["preset"], r["batch"], r["length"])  # noqa: E731
    fused = {key(r): r for r in rows if r["impl"] == "fused"}
    for r in rows:
        f = fused.get(key(r))
        r["fused_speedup_vs_this"] = None if f is None or r["impl"] == "fused" else r["seconds"] / f["seconds"]


FLOOR_NOTE = ("floor_fraction: tokens/s against the nominal per-token floor (tokens/s at peak_gflops for "
              "nominal_flops, which counts every position, as AllenNLP runs it): comparable across implementations; "
              "gflops / work_fraction: the rate of the FLOPs this implementation does (flops: on the CPU the biLM "
              "encodes each distinct token once), against peak_gflops. The char CNN's count is every window; the "
              "fused kernel skips the repeated windows of a token's padding, so its rates can exceed the peak.")


def print_table(rows):
    """The rows as a table: ``GF/s`` and ``work`` are the rate of the FLOPs this implementation does
    (``work`` against the peak); ``floor`` is tokens/s against the nominal per-token floor, the one
    column that compares implementations that do different work (FLOOR_NOTE)."""
    hdr = (f"{'section':13} {'preset':8} {'B':>4} {'T':>3} {'impl':40} {'ms':>9} {'tok/s':>9} {'GF/s':>7} {'work':>5} "
           f"{'floor':>6} {'fused x':>8}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        sp = r.get("fused_speedup_vs_this")
        print(f"{r['section']:13} {r['preset']:8} {r['batch']:4d} {r['length']:3d} {r['impl']:40} "
              f"{r['seconds'] * 1e3:9.1f} {r['tokens_per_s']:9.0f} {r['gflops']:7.1f} {r['work_fraction']:5.2f} "
              f"{r['floor_fraction']:6.2f} {'' if sp is None else f'{sp:8.2f}'}")
    print(FLOOR_NOTE)


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no chart)")
        return None
    sections = [s for s in BASELINES if any(r["section"] == s for r in rows)]
    fig, axes = plt.subplots(len(sections), 1, figsize=(11, 3.2 * len(sections)), squeeze=False)
    for ax, sec in zip(axes[:, 0], sections):
        sub = [r for r in rows if r["section"] == sec]
        shapes = sorted({(r["preset"], r["batch"], r["length"]) for r in sub})
        impls = list(dict.fromkeys(r["impl"] for r in sub))
        # Linear speed relative to the section's first baseline (1.0): a log axis of raw
        # tokens/s made 6% look like 5x. Absolute tokens/s are in the table and the JSON.
        base_name = next((b for b in BASELINES[sec] if b in impls), impls[0])
        rate = {(r["preset"], r["batch"], r["length"], r["impl"]): r["tokens_per_s"] for r in sub}
        width = 0.8 / max(1, len(impls))
        for k, impl in enumerate(impls):
            xs, vals = [], []
            for i, sh in enumerate(shapes):
                base, mine = rate.get((*sh, base_name)), rate.get((*sh, impl))
                if base and mine:
                    xs.append(i + k * width)
                    vals.append(mine / base)
            bars = ax.bar(xs, vals, width, label=impl)
            ax.bar_label(bars, labels=[f"{v:.2f}x" for v in vals], fontsize=6)
        ax.axhline(1.0, color="grey", linewidth=0.6)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))])
        ax.set_xticklabels([f"{p}\n{b}x{t}" for p, b, t in shapes], fontsize=7)
        ax.set_ylabel(f"speed vs {base_name}")
        ax.set_title(sec)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=["small", "original"], choices=list(PRESETS))
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128])
    ap.add_argument("--lengths", nargs="+", type=int, default=[20, 50])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per impl (default 3; --quick: 2)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--whole-model", action="store_true", help="also the whole biLM and the training step")
    ap.add_argument("--no-kernels", action="store_true", help="skip the per-kernel section")
    ap.add_argument("--allennlp", action="store_true", help="also time AllenNLP's own _ElmoBiLm (CPU)")
    ap.add_argument("--train-preset", default="small")
    ap.add_argument("--max-slow-tokens", type=int, default=1280,
                    help="skip the slow baselines (reference, AllenNLP-style) above this many tokens")
    ap.add_argument("--peak-gflops", type=float, default=None,
                    help="GFLOP/s of the floor (default: a float32 GEMM measured at start)")
    ap.add_argument("--quick", action="store_true", help="32 x 20 only, 2 repeats unless --repeats")
    ap.add_argument("--autocast", choices=["bf16", "fp16"], default=None,
                    help="run every implementation under torch.autocast (GPU)")
    ap.add_argument("--allow-tf32", action="store_true",
                    help="CUDA float32: let cuBLAS and cuDNN use TF32 (default: neither does; cuDNN's default is on, "
                         "which gave nn.LSTM and the reference's convolutions TF32 against true float32 kernels)")
    ap.add_argument("--keep-freed-memory", action="store_true",
                    help="glibc keeps freed memory, as `pretrain` does (spacy_elmo/training/malloc.py); the "
                         "default is glibc's, which inference and spaCy training get")
    ap.add_argument("--out", default=None,
                    help="result stem: a bare name goes to benchmarks/results/ (default kernels_<device>[_<autocast>]"
                         "[_quick]); a path with a directory (/tmp/x/kernels_cuda) is used as given; .json and .png "
                         "are appended")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.keep_freed_memory and not keep_freed_memory():
        print("--keep-freed-memory: not applied (not glibc, or SPACY_ELMO_KEEP_FREED_MEMORY=0)", file=sys.stderr)
        args.keep_freed_memory = False
    if args.quick:
        args.batches, args.lengths = [32], [20]
        args.repeats = args.repeats or 2
    args.repeats = args.repeats or 3
    device = torch.device(args.device)
    problem = device_problem(device)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    if device.type == "cuda":  # every float32 implementation in true float32, or all in TF32
        torch.backends.cuda.matmul.allow_tf32 = args.allow_tf32
        torch.backends.cudnn.allow_tf32 = args.allow_tf32
    AUTOCAST["dtype"] = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[args.autocast]
    if args.peak_gflops is None:
        gemm_dtype = AUTOCAST["dtype"] or torch.float32
        args.peak_gflops = round(measure_gemm_gflops(device, dtype=gemm_dtype), 1)
        print(f"{gemm_dtype} GEMM rate here: {args.peak_gflops} GFLOP/s (the floor's peak)", flush=True)
    rec = Recorder(args.peak_gflops)
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    stem = f"kernels_{device.type}" + (f"_{args.autocast}" if args.autocast else "") + ("_quick" if args.quick else "")
    json_path, png_path = result_paths(args.out, stem)
    json_path.parent.mkdir(parents=True, exist_ok=True)

    def write(complete):
        add_ratios(rec.rows)
        machine = machine_info(device)
        machine["loadavg_at_start"] = load_start
        payload = {"machine": machine, "args": vars(args), "complete": complete,
                   "dtype": "float32" if args.autocast is None else f"autocast {args.autocast}",
                   "peak_gflops": args.peak_gflops, "floor_note": FLOOR_NOTE,
                   "order_note": "implementations interleaved one call each per round, the order rotated each round "
                                 "(round_order: each first, and right after each other one, equally often)",
                   "rows": rec.rows}
        write_json(json_path, payload, indent=1, default=str)

    for preset in args.presets:
        for batch in args.batches:
            for length in args.lengths:
                print(f"[{preset} {batch}x{length}]", flush=True)
                if not args.no_kernels:
                    bench_kernels(rec, preset, batch, length, args, device)
                if args.whole_model:
                    bench_whole(rec, preset, batch, length, args, device)
                    if preset == args.train_preset and batch * length <= args.max_slow_tokens:
                        bench_train(rec, preset, batch, length, args, device)
                # the shapes so far survive a run stopped at a time limit ("complete": false)
                write(complete=False)
    write(complete=True)
    print_table(rec.rows)
    png = plot(rec.rows, png_path)
    print(f"wrote {json_path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
