"""Throughput and memory of ``nlp.pipe`` with the ``elmo`` component.

Compares the small and original presets, fused and reference backends (fused
only when the compiled extension loads: ``spacy_elmo.ops.fused_available()``),
against the same blank pipeline with spaCy's own ``tok2vec``. Weights are
random (speed does not depend on their values). Text: ordinary English prose
sentences, ~25 words per doc, with a sentencizer so the biLM runs per sentence.

    python benchmarks/pipeline.py --threads 2 [--quick] [--memory-docs 50000]

Writes benchmarks/results/pipeline.json (+ pipeline.png when matplotlib exists).
"""

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

PROSE = """The river bank was quiet in the early morning, and a few boats drifted past the old mill.
She walked to the bank to deposit her wages before the doors closed for the weekend.
Researchers at the university published a study on how children learn new words from context.
The committee will meet again next Tuesday to discuss the budget for the coming year.
Heavy rain caused flooding in several villages, and the roads were closed for two days.
He said that the new policy would help small businesses hire more workers in rural areas.
After the concert, the musicians signed autographs and talked with fans outside the hall.
The company reported higher profits this quarter, driven by strong sales of its software.
Many people believe that reading every day improves both memory and concentration.
The museum opened a new exhibition of paintings from the nineteenth century last month.
Scientists warned that rising temperatures could threaten coral reefs around the world.
The train was delayed by an hour because of a signal failure near the central station.
Local farmers sell fresh vegetables, bread and cheese at the market every Saturday morning.
The minister promised to answer questions from journalists at a press conference tomorrow.
Our neighbours adopted a small dog that barks whenever someone walks past the garden gate.
The football team won the final match after a dramatic penalty shootout in the rain.""".split("\n")


def make_texts(n_docs: int, seed: int = 0):
    rng = random.Random(seed)
    return [" ".join(rng.sample(PROSE, 2)) for _ in range(n_docs)]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_nlp(
    kind: str, preset: str = "small", backend: str = "auto", tmp: str = "", cache_size: int = 50000, layer_cache_mb: int = 0
):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    if kind == "tok2vec":
        nlp.add_pipe("tok2vec")
        nlp.initialize()
        return nlp
    import torch

    from spacy_elmo import BiLM, BiLMConfig

    path = Path(tmp) / preset
    if not (path / "config.json").exists():
        torch.manual_seed(0)
        BiLM(BiLMConfig.preset(preset), backend="reference").save(path)
    elmo = nlp.add_pipe("elmo", config={"weights": str(path), "model": {"backend": backend, "cache_size": cache_size}})
    elmo.layer_cache_mb = layer_cache_mb  # what [initialize.components.elmo] sets in spacy train
    return nlp


def words_per_second(nlp, texts, batch_size: int = 64, warmup: int = 32):
    for _ in nlp.pipe(texts[:warmup], batch_size=batch_size):
        pass
    n_words = 0
    start = time.perf_counter()
    for doc in nlp.pipe(texts, batch_size=batch_size):
        n_words += len(doc)
    seconds = time.perf_counter() - start
    return n_words / seconds, n_words, seconds


def memory_run(nlp, n_docs: int, batch_size: int = 64, every: int = 2500):
    """RSS (MiB) sampled every ``every`` docs while streaming n_docs through nlp.pipe."""
    import tracemalloc

    tracemalloc.start()
    samples = []
    start = time.perf_counter()
    texts = (t for t in make_texts(n_docs, seed=1))
    n_words = 0
    for i, doc in enumerate(nlp.pipe(texts, batch_size=batch_size), 1):
        n_words += len(doc)
        if i % every == 0:
            samples.append({"docs": i, "rss_mb": round(rss_mb(), 1), "py_heap_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 2)})
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    seconds = time.perf_counter() - start
    return {
        "docs": n_docs,
        "words": n_words,
        "seconds": round(seconds, 1),
        "words_per_s": round(n_words / seconds, 1),
        "samples": samples,
        "py_heap_peak_mb": round(py_peak / 2**20, 2),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=400, help="docs per small/tok2vec timing")
    ap.add_argument("--original-docs", type=int, default=48, help="docs per original-preset timing")
    ap.add_argument("--memory-docs", type=int, default=50000, help="0 = skip the memory run")
    ap.add_argument("--quick", action="store_true", help="fewer docs, 5,000-doc memory run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pipeline.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.docs, args.original_docs, args.memory_docs = 160, 16, min(args.memory_docs, 5000)

    import torch

    torch.set_num_threads(args.threads)
    from benchmarks.kernels import cpu_identity
    from spacy_elmo.ops import fused_available

    backends = (["fused"] if fused_available() else []) + ["reference"]
    results = {
        "machine": {"cpu_threads": args.threads, "platform": platform.platform(), "python": sys.version.split()[0],
                    "torch": torch.__version__, "fused_available": fused_available(), **cpu_identity()},
        "command": " ".join(["python", "benchmarks/pipeline.py"] + (argv if argv is not None else sys.argv[1:])),
        "throughput": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        # The prose has a small vocabulary, so the char-CNN cache nearly always hits;
        # the cache_size=0 rows show the cost without it (every token encoded).
        runs = [("tok2vec", "-", "-", args.docs, 0)]
        runs += [("elmo", "small", b, args.docs, c) for b in backends for c in (50000, 0)]
        runs += [("elmo", "original", b, args.original_docs, 50000) for b in backends]
        for kind, preset, backend, n_docs, cache in runs:
            nlp = build_nlp(kind, preset, backend, tmp, cache)
            wps, n_words, seconds = words_per_second(nlp, make_texts(n_docs))
            row = {"pipeline": kind, "preset": preset, "backend": backend, "char_cache": cache > 0, "docs": n_docs,
                   "words": n_words, "seconds": round(seconds, 2), "words_per_s": round(wps, 1)}  # fmt: skip
            print(json.dumps(row), flush=True)
            results["throughput"].append(row)
        if args.memory_docs:
            backend = backends[0]
            nlp = build_nlp("elmo", "small", backend, tmp)
            mem = memory_run(nlp, args.memory_docs)
            mem.update({"preset": "small", "backend": backend})
            s = mem["samples"]
            mem["rss_growth_after_first_sample_mb"] = round(s[-1]["rss_mb"] - s[0]["rss_mb"], 1) if s else None
            print(json.dumps({k: v for k, v in mem.items() if k != "samples"}), flush=True)
            results["memory"] = mem
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    chart(results, out.with_suffix(".png"))
    return 0


def chart(results, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = results["throughput"]
    mem = results.get("memory")
    fig, axes = plt.subplots(1, 2 if mem else 1, figsize=(11 if mem else 6, 4))
    axes = axes if mem else [axes]
    labels = [r["pipeline"] if r["pipeline"] == "tok2vec" else f"elmo {r['preset']}\n{r['backend']}" + ("" if r["char_cache"] else "\nno cache") for r in rows]
    axes[0].bar(range(len(rows)), [r["words_per_s"] for r in rows], color="tab:blue")
    axes[0].set_xticks(range(len(rows)), labels, fontsize=8)
    axes[0].set_ylabel("words / s (nlp.pipe)")
    axes[0].set_yscale("log")
    axes[0].axhline(2000, color="tab:red", ls="--", lw=1, label="target 2,000 (small, fused)")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"{results['machine']['cpu_threads']} CPU threads")
    if mem:
        s = mem["samples"]
        axes[1].plot([x["docs"] for x in s], [x["rss_mb"] for x in s], marker=".")
        axes[1].set_xlabel("docs streamed")
        axes[1].set_ylabel("RSS (MiB)")
        axes[1].set_title(f"memory, elmo small {mem['backend']}")
        axes[1].set_ylim(0, max(x["rss_mb"] for x in s) * 1.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
