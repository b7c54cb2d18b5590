"""Throughput and memory of ``nlp.pipe`` with the ``elmo`` component.

Compares the small and original presets, fused and reference backends (fused
only when the compiled extension loads: ``spacy_elmo.ops.fused_available()``),
against the same blank pipeline with spaCy's own ``tok2vec``. Weights are
random (speed does not depend on their values). Text: ``make_texts``, the lines
of ``benchmarks/tokenize_corpus.py``'s generator (sentences of this repository's
README and docs, 30% of their words replaced by Zipf-distributed pseudo-words):
1-6 sentences, some 200-290 spaCy tokens a doc as the docs change (a result file records the
text's digest and commit), with a sentencizer so the biLM runs
per sentence. Every setting pipes its texts ``--repeats`` times, the settings
interleaved, the order rotated each round (``benchmarks.kernels.time_side_by_side``), each pass
after a short warm-up and with the component's caches emptied; words/s is of
the median pass. A line is printed as each setting is ready and as each pass
ends (a loaded machine takes minutes a round), the rows at the end.

    python benchmarks/pipeline.py --threads 2 [--quick] [--memory-docs 5000]

Writes benchmarks/results/pipeline.json (+ pipeline.png when matplotlib exists).
"""

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results_json import write_json  # noqa: E402
from benchmarks.tokenize_corpus import generate  # noqa: E402

WORDS_PER_DOC = 170  # whitespace words of a line of generate's text, about (spaCy tokens: ~230)


def checkout_commit() -> str:
    """The checkout's commit, ``+dirty`` when README.md or docs/ differ from it ("unknown" outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "README.md", "docs"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def describe_text(texts: list) -> dict:
    """A result file's record of the timed ``texts``. ``generate`` takes its sentence shapes from README.md and
    docs/*.md as checked out, so a docs edit changes the text: the digest and commit say which text it was."""
    return {"text": "benchmarks/pipeline.py make_texts: the first lines of benchmarks/tokenize_corpus.py generate(seed=0), "
                    "built from the README and docs of text_commit",
            "text_sha1": hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest(), "text_commit": checkout_commit()}


def make_texts(n_docs: int, seed: int = 0) -> list:
    """``n_docs`` documents: the first lines of ``tokenize_corpus.generate``'s text for ``seed`` (the same
    lines for any ``n_docs``, since more words only continue the text)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "texts.txt"
        lines: list = []
        n_words = max(1, n_docs) * WORDS_PER_DOC
        while len(lines) < n_docs:
            generate(path, n_words, seed)
            lines = path.read_text(encoding="utf-8").splitlines()
            n_words *= 2
    return lines[:n_docs]


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
    from spacy_elmo.pipeline.component import ElmoComponent

    path = Path(tmp) / preset
    if not (path / "config.json").exists():
        torch.manual_seed(0)
        BiLM(BiLMConfig.preset(preset), backend="reference").save(path)
    elmo = nlp.add_pipe("elmo", config={"weights": str(path), "model": {"backend": backend, "cache_size": cache_size}})
    assert isinstance(elmo, ElmoComponent)  # for the type checker: add_pipe's hint is a Doc -> Doc callable
    elmo.layer_cache_mb = layer_cache_mb  # what [initialize.components.elmo] sets in spacy train
    return nlp


def clear_caches(nlp) -> None:
    """Empty the ``elmo`` component's token and layer caches (none in a ``tok2vec`` pipeline)."""
    if "elmo" in nlp.pipe_names:
        from spacy_elmo.pipeline.bilm_layer import get_runner

        get_runner(nlp.get_pipe("elmo").model).clear_caches()


def pipe_pass(nlp, texts, batch_size: int = 64):
    """A call that pipes ``texts`` through ``nlp`` once, its caches emptied first (each pass sees the
    text new, as the first pass over a stream does); returns the words (tokens) piped."""

    def run() -> int:
        clear_caches(nlp)
        return sum(len(doc) for doc in nlp.pipe(texts, batch_size=batch_size))

    return run


def memory_run(nlp, n_docs: int, batch_size: int = 64, every: int = 250):
    """RSS (MiB) sampled every ``every`` docs while streaming n_docs through nlp.pipe."""
    import tracemalloc

    texts = make_texts(n_docs, seed=1)
    tracemalloc.start()
    samples = []
    start = time.perf_counter()
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


def setting_name(run: tuple) -> str:
    """One setting of the timing, ``(kind, preset, backend, docs, char cache size)``, in words."""
    kind, preset, backend, n_docs, cache = run
    if kind == "tok2vec":
        return f"tok2vec, {n_docs} docs"
    return f"elmo {preset} {backend}" + ("" if cache else " no char cache") + f", {n_docs} docs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=40, help="docs per small/tok2vec timing")
    ap.add_argument("--original-docs", type=int, default=16, help="docs per original-preset timing")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per setting (the median is reported)")
    ap.add_argument("--memory-docs", type=int, default=5000, help="0 = skip the memory run")
    ap.add_argument("--quick", action="store_true", help="fewer docs and repeats, 500-doc memory run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pipeline.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.docs, args.original_docs, args.repeats = 16, 2, 2
        args.memory_docs = min(args.memory_docs, 500)

    import torch

    torch.set_num_threads(args.threads)
    from benchmarks.kernels import cpu_identity, time_side_by_side
    from spacy_elmo.ops import fused_available

    backends = (["fused"] if fused_available() else []) + ["reference"]
    texts = make_texts(max(args.docs, args.original_docs))
    results = {
        "machine": {"cpu_threads": args.threads, "platform": platform.platform(), "python": sys.version.split()[0],
                    "torch": torch.__version__, "fused_available": fused_available(), **cpu_identity()},
        "command": " ".join(["python", "benchmarks/pipeline.py"] + (argv if argv is not None else sys.argv[1:])),
        **describe_text(texts),
        "repeats": args.repeats,
        "throughput": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        # cache_size=0: no token cache, so nothing is carried from one batch to the next; the biLM's
        # forward still encodes each distinct token of a batch once (BiLM.encode_tokens on the CPU).
        runs = [("tok2vec", "-", "-", args.docs, 0)]
        runs += [("elmo", "small", b, args.docs, c) for b in backends for c in (50000, 0)]
        runs += [("elmo", "original", b, args.original_docs, 50000) for b in backends]
        passes, words = {}, {}
        for run in runs:
            kind, preset, backend, n_docs, cache = run
            start = time.perf_counter()
            nlp = build_nlp(kind, preset, backend, tmp, cache)
            for _ in nlp.pipe(texts[:2]):  # loads and warms the weights; the timed passes empty the caches
                pass
            passes[run] = pipe_pass(nlp, texts[:n_docs])
            words[run] = sum(len(nlp.make_doc(t)) for t in texts[:n_docs])
            print(f"ready: {setting_name(run)} ({time.perf_counter() - start:.1f} s to build and warm up)", flush=True)

        def progress(run, round_index, seconds):
            # a slow machine takes minutes a round: each pass says so as it ends, the table comes at the end
            print(f"pass {round_index + 1}/{args.repeats}: {setting_name(run)} {seconds:.2f} s, "
                  f"{words[run] / seconds:,.0f} words/s", flush=True)

        timed = time_side_by_side(passes, args.repeats, 0, torch.device("cpu"), report=progress)
        for run, (seconds, all_seconds) in timed.items():
            kind, preset, backend, n_docs, cache = run
            row = {"pipeline": kind, "preset": preset, "backend": backend, "char_cache": cache > 0, "docs": n_docs,
                   "words": words[run], "seconds": round(seconds, 2), "seconds_all": [round(t, 3) for t in all_seconds],
                   "words_per_s": round(words[run] / seconds, 1)}  # fmt: skip
            print(json.dumps(row), flush=True)
            results["throughput"].append(row)
        if args.memory_docs:
            backend = backends[0]
            nlp = build_nlp("elmo", "small", backend, tmp)
            mem = memory_run(nlp, args.memory_docs, every=max(1, args.memory_docs // 20))
            mem.update({"preset": "small", "backend": backend})
            s = mem["samples"]
            mem["rss_growth_after_first_sample_mb"] = round(s[-1]["rss_mb"] - s[0]["rss_mb"], 1) if s else None
            print(json.dumps({k: v for k, v in mem.items() if k != "samples"}), flush=True)
            results["memory"] = mem
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, results)
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
