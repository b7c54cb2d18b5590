"""The log-uniform sampler's draw, which runs on the host before every pretraining step:
``LogUniformSampler.sample`` (NumPy, one thread; first draws found by a minimum scattered
into a ``(V,)`` table) against the way it replaced (torch ops, ``torch.unique`` of every
draw, then an argsort of the first positions), on the same generator seeds, interleaved
(the order rotated each round: ``benchmarks.kernels.round_order``), medians. Both must
return the same sample; the run fails otherwise. Run it with ``--threads 1`` and ``2``:
torch's ops enter OpenMP regions, which wait on busy cores.

    python benchmarks/sampler.py [--vocab-sizes 50000 793471] [--negatives 8192] [--threads 2]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kernels import machine_info, round_order  # noqa: E402
from benchmarks.results_json import write_json  # noqa: E402
from spacy_elmo.training.sampler import LogUniformSampler, Sample  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def sort_based_sample(sampler: LogUniformSampler, generator: torch.Generator) -> Sample:
    """The baseline, as the sampler was before session 34: the same chunked draws computed by torch
    ops, distinct ids by ``torch.unique`` (a sort), their first draws by an argsort."""
    want = sampler.num_sampled

    def draw(n: int) -> torch.Tensor:
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        return (torch.floor(torch.exp(u * sampler._log_range)).long() - 1).clamp_(0, sampler.vocab_size - 1)

    draws = draw(max(2 * want, 64))
    while True:
        unique, inverse = torch.unique(draws, return_inverse=True)
        if unique.numel() >= want:
            break
        draws = torch.cat([draws, draw(max(draws.numel(), 64))])
    first = torch.full((unique.numel(),), draws.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(draws.numel()), reduce="amin")
    order = first.argsort()[:want]
    return Sample(unique[order], int(first[order[-1]]) + 1)


def bench(vocab_size: int, negatives: int, repeats: int) -> dict:
    sampler = LogUniformSampler(vocab_size, negatives)
    impls = {"numpy_scatter": lambda g: sampler.sample(g), "torch_sort": lambda g: sort_based_sample(sampler, g)}
    times: dict[str, list[float]] = {name: [] for name in impls}
    tries = []
    for i in range(repeats + 3):
        results = {}
        for name in round_order(list(impls), i):  # each first in every other round
            gen = torch.Generator().manual_seed(i)
            start = time.perf_counter()
            results[name] = impls[name](gen)
            if i >= 3:
                times[name].append(time.perf_counter() - start)
        a, b = results["numpy_scatter"], results["torch_sort"]
        if not (torch.equal(a.candidates, b.candidates) and a.num_tries == b.num_tries):
            raise SystemExit(f"the two samplers differ at seed {i} (V={vocab_size}, S={negatives})")
        tries.append(a.num_tries)
    row = {"vocab_size": vocab_size, "negatives": negatives, "draws_mean": statistics.mean(tries)}
    row.update({f"{name}_ms": statistics.median(ts) * 1e3 for name, ts in times.items()})
    row["speedup"] = row["torch_sort_ms"] / row["numpy_scatter_ms"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[50_000, 793_471])
    parser.add_argument("--negatives", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "sampler_cpu.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for v in args.vocab_sizes:
        row = bench(v, args.negatives, args.repeats)
        rows.append(row)
        print(f"V={v:>8,} S={args.negatives}: numpy scatter {row['numpy_scatter_ms']:.2f} ms, "
              f"torch sort {row['torch_sort_ms']:.2f} ms, "
              f"{row['speedup']:.2f}x ({row['draws_mean']:,.0f} draws)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # the options and the machine as benchmarks/kernels.py records them (the CPU decides these times)
    write_json(args.out, {"benchmark": "sampler", "args": vars(args), "machine": machine_info(torch.device("cpu")),
                          "threads": args.threads, "torch": torch.__version__,
                          # a loaded machine slows the sort's parallel regions most: say how loaded
                          "load_average": os.getloadavg(), "rows": rows}, default=str)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
