"""Peak memory (RSS) of ``embed_file`` (``spacy-elmo embed``) on a large input, with a tiny random biLM
(so that the biLM costs little and what the run keeps in memory shows).

Usage::

    python benchmarks/embed_memory.py [--mb 100] [--part-size 4096] [--layers top] [--out DIR]

Writes ``--mb`` MB of generated English lines (``tokenize_corpus.generate``) into ``DIR/input.txt`` (kept
for later runs), then embeds it in a child process and prints that process's peak RSS
(``ru_maxrss``), its seconds, and the sha256 of the output file (the same for every spacy-elmo that writes
the same file).
"""

import argparse
import hashlib
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYTES_PER_WORD = 6.4  # of tokenize_corpus.generate's text


def tiny_bilm():
    import torch

    from spacy_elmo.bilm import BiLM, BiLMConfig

    torch.manual_seed(0)
    config = BiLMConfig(projection_dim=4, cell_dim=8, n_layers=1, char_embedding_dim=4,
                        filters=[(1, 4), (2, 4)], n_highway=0)
    return BiLM(config)


def child(args) -> None:
    import torch

    from spacy_elmo.embedding import embed_file

    torch.set_num_threads(1)
    counts = embed_file(tiny_bilm(), args.input, args.output, layers=args.layers, part_size=args.part_size,
                        progress=False, overwrite=True)
    print(counts, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--part-size", type=int, default=4096)
    parser.add_argument("--layers", default="top")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    out = args.out or Path(tempfile.mkdtemp(prefix="embed-memory-"))
    out.mkdir(parents=True, exist_ok=True)
    source = out / f"input-{args.mb:g}mb.txt"
    if not source.exists():
        if str(ROOT) not in sys.path:  # run as a script: make `benchmarks` importable
            sys.path.insert(0, str(ROOT))
        from benchmarks.tokenize_corpus import generate

        generate(source, int(args.mb * 1e6 / BYTES_PER_WORD))
    output = out / "output.h5"
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", "--input", str(source), "--output", str(output),
                    "--layers", args.layers, "--part-size", str(args.part_size)], check=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    digest = hashlib.sha256(output.read_bytes()).hexdigest()
    print(f"input {source.stat().st_size / 1e6:.1f} MB, {sum(1 for _ in open(source, 'rb'))} lines; "
          f"peak RSS {peak:.0f} MiB; {seconds:.1f} s; output {output.stat().st_size / 1e6:.1f} MB sha256 {digest}")


if __name__ == "__main__":
    main()
