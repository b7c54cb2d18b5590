"""Where a pretraining step's time goes (torch.profiler), per backend and preset; and the inference forward's.

    python scripts/profile_pretrain_step.py --device cuda --out $OUT/profile_pretrain_step.txt

Builds the step of benchmarks/pretrain.py (B x 20 tokens, 8192 sampled negatives of a
50k vocabulary, Adagrad; bf16 autocast on CUDA; its inputs prepared one step ahead on a thread
where pretrain does, --prefetch), warms up 3 steps, times --steps steps, profiles the --steps
after them, prints per step the top ops and kernels by self device time (self CPU time on
the CPU) and the top CPU ops, and writes the profiler's full tables to --out.
Then the same for the whole biLM's inference forward (--forward-runs, --forward-batch x 20
tokens, as benchmarks/kernels.py's bf16 target row). Each run also prints its wall time a
step without the profiler: against the profiled device time it says whether the host
(launches, syncs) or the device bounds it.
The first GPU run (2026-11-26, H200) found the fused CUDA char-CNN backward kernel
taking 76-80 ms of a ~106 ms step: benchmarks/results/profile_pretrain_step_h200_s31/.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import pretrain as P  # noqa: E402
from benchmarks.kernels import char_ids_of, random_sentences, sync, timeit  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", nargs="+", default=["fused:small", "reference:small", "fused:original"],
                    help="BACKEND:PRESET pairs")
    ap.add_argument("--forward-runs", nargs="*", default=["fused:original"],
                    help="BACKEND:PRESET pairs whose inference forward is profiled (none: skip)")
    ap.add_argument("--forward-batch", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=12)
    ap.add_argument("--prefetch", choices=["auto", "on", "off"], default="auto",
                    help="the step's inputs prepared one step ahead on a thread (auto: as pretrain does, on with CUDA)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/profile_pretrain_step.txt"))
    return ap


def profile_run(title, run, inputs, args, device, tables, out) -> None:
    """Warm up on 3 inputs, time the next ``args.steps`` without the profiler, profile the ``args.steps`` after
    them (``inputs``: 3 + 2 x steps), print and keep the tables."""
    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    n = args.steps
    for x in inputs[:3]:
        run(*x)
    timed = iter(inputs[3 : 3 + n])
    wall = timeit(lambda: run(*next(timed)), n, 0, device)[0] * 1e3  # median, synchronised
    with profile(activities=acts) as prof:
        for x in inputs[3 + n : 3 + 2 * n]:
            run(*x)
        sync(device)
    ka = prof.key_averages()
    key = "device_time_total" if cuda else "self_cpu_time_total"
    tables.append(f"##### {title}, {n} steps\n"
                  + ka.table(sort_by=key, row_limit=60) + "\n\n" + ka.table(sort_by="self_cpu_time_total", row_limit=60))
    out.write_text("\n\n".join(tables))  # what was profiled so far survives a run stopped at its limit
    total_cpu = sum(e.self_cpu_time_total for e in ka) / 1e3 / n
    device_us, launches = device_totals(ka)
    total_dev, launches = device_us / 1e3 / n, launches // n
    print(f"\n##### {title}: per step wall {wall:.1f} ms unprofiled; profiled: self CPU {total_cpu:.1f} ms,"
          f" self device {total_dev:.1f} ms, {launches} device kernels")
    rows = sorted(ka, key=lambda e: -getattr(e, "self_device_time_total" if cuda else "self_cpu_time_total", 0))
    for e in rows[:args.rows]:
        d = getattr(e, "self_device_time_total", 0) / 1e3 / n
        print(f"  dev {d:8.2f} ms  cpu {e.self_cpu_time_total / 1e3 / n:8.2f} ms  n {e.count // n:6d}  {e.key[:90]}")
    rows = sorted(ka, key=lambda e: -e.self_cpu_time_total)
    print("  -- top self CPU")
    for e in rows[:args.rows]:
        print(f"  cpu {e.self_cpu_time_total / 1e3 / n:8.2f} ms  n {e.count // n:6d}  {e.key[:90]}")


def device_totals(events) -> tuple:
    """``(microseconds, count)`` of the device's own work among ``key_averages()`` rows: the kernels
    (and copies), not the CPU ops or annotations that launched them, whose self device time repeats
    the kernels' (summing every row counted each kernel about twice), as torch's own table total does."""
    rows = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)]
    return sum(e.self_device_time_total for e in rows), sum(e.count for e in rows)


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    tables: list = []
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    prefetch = P.prefetch_default(device) if args.prefetch == "auto" else args.prefetch == "on"
    for run in args.runs:
        backend, preset = run.split(":")
        config = P.BiLMConfig.preset(preset)
        vocab = P.synthetic_vocab(50000)
        data = P.batches(vocab, args.batch_size, 20, 3 + 2 * args.steps)
        torch.manual_seed(0)
        bilm = P.BiLM(config, backend=backend)
        bilm.lstm.dropout = 0.1
        lm = P.BidirectionalLM(bilm, P.SoftmaxLayer(len(vocab), config.projection_dim)).to(device).train()
        opt = P.build_optimizer("adagrad", None, lm.parameters())
        step = P.make_step(lm, opt, P.LogUniformSampler(len(vocab), 8192),
                           P.CharTable(vocab, config.max_characters_per_token), vocab, device, cuda,
                           torch.Generator().manual_seed(0), data, prefetch)
        # the first 3 batches warm up, the next steps are timed, the last ones profiled
        try:
            profile_run(f"pretraining step {backend} {preset} B={args.batch_size}"
                        + (" (prefetched)" if prefetch else ""), step, [(i,) for i in range(len(data))],
                        args, device, tables, out)
        finally:
            step.close()
    for run in args.forward_runs:
        backend, preset = run.split(":")
        torch.manual_seed(0)
        model = P.BiLM(P.BiLMConfig.preset(preset), backend=backend).to(device).eval()
        ids = char_ids_of(random_sentences(args.forward_batch, 20)).to(device)

        def forward(ids, model=model):
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                return model(ids)

        profile_run(f"inference forward {backend} {preset} B={args.forward_batch} x 20"
                    + (" (bf16 autocast)" if cuda else ""), forward, [(ids,)] * (3 + 2 * args.steps),
                    args, device, tables, out)


if __name__ == "__main__":
    main()
