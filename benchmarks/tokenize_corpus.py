"""Corpus tokenization speed of ``build_corpus`` with 1 and more worker processes (``pretrain --tokenize-processes``).

Usage::

    python benchmarks/tokenize_corpus.py [--words 3000000] [--processes 1,2] [--out DIR]

Writes a generated English text of ``--words`` words into ``DIR/corpus.txt`` (sentences of this
repository's README and docs, shuffled with a fixed seed, 30% of their words replaced by pseudo-words of
a Zipf-distributed vocabulary of 300,000, so that spaCy's tokenizer cache misses as in real text), then
builds its cache once per process count, in this one run, and prints seconds, tokens/s and a digest
of the cache files (the same for every count).
"""

import argparse
import glob
import hashlib
import itertools
import os
import random
import re
import resource
import string
import tempfile
import time
from pathlib import Path

from spacy_elmo.training import data

ROOT = Path(__file__).resolve().parent.parent


def generate(path: Path, n_words: int, seed: int = 0) -> None:
    texts = [Path(p).read_text(encoding="utf-8") for p in sorted(glob.glob(str(ROOT / "docs" / "*.md")))]
    text = re.sub(r"\s+", " ", " ".join(texts + [(ROOT / "README.md").read_text(encoding="utf-8")]))
    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) > 3]
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 11))) for _ in range(300_000)]
    cum = list(itertools.accumulate(1 / (r + 10) for r in range(len(vocab))))
    words = 0
    with open(path, "w", encoding="utf-8") as f:
        while words < n_words:
            out: list[str] = []
            for _ in range(rng.randint(1, 6)):
                ws = rng.choice(sents).split()
                picks = rng.choices(vocab, cum_weights=cum, k=len(ws))
                out.extend(p + w[len(w.rstrip(".,;:)!?")):] if w[:1].isalpha() and rng.random() < 0.3 else w
                           for w, p in zip(ws, picks))
            f.write(" ".join(out) + "\n")
            words += len(out)


def cpu_seconds() -> tuple:
    """CPU seconds of this process and its ended workers, and of the whole machine (/proc/stat; 0 without
    it): on a shared machine their difference is what other processes took during a measurement."""
    mine = sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        machine = (sum(map(int, fields)) - int(fields[3]) - int(fields[4])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        machine = 0.0
    return mine, machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=3_000_000)
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="tokenize-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    generate(corpus, args.words)
    print(f"{corpus}: {corpus.stat().st_size / 1e6:.1f} MB")
    nlp = data.make_nlp("en")
    for n in (int(x) for x in args.processes.split(",")):
        cache = out / f"cache-{n}"
        cpu, machine = cpu_seconds()
        start = time.perf_counter()
        meta = data.build_corpus(corpus, "en", cache, progress=False, nlp=nlp, processes=n)
        seconds = time.perf_counter() - start
        cpu_after, machine_after = cpu_seconds()
        cpu, others = cpu_after - cpu, (machine_after - machine) - (cpu_after - cpu)
        h = hashlib.sha256(b"".join((cache / f).read_bytes() for f in ("tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt")))
        tokens = meta["stats"]["n_tokens"]
        print(f"processes {n}: {seconds:.2f} s, {tokens:,} tokens, {tokens / seconds:,.0f} tokens/s, cache {h.hexdigest()[:16]}; "
              f"CPU s: this run {cpu:.1f}, other processes {max(others, 0):.1f}", flush=True)


if __name__ == "__main__":
    main()
