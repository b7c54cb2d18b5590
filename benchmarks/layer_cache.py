"""A/B of the elmo model's layer cache: the component's predict over the same docs twice (as two epochs
of a frozen-biLM training see them), the component's layer_cache_mb (what [initialize.components.elmo]
sets in spacy train) on vs off, runs alternating (``benchmarks.kernels.round_order``: each first in every
other round).

    python -m benchmarks.layer_cache [--docs 40] [--rounds 3] [--threads 2]
"""

import argparse
import tempfile
import time

from spacy_elmo.pipeline.bilm_layer import get_runner

from .kernels import round_order
from .pipeline import build_nlp, make_texts


def two_passes(nlp, docs) -> str:
    """Seconds of each pass (make_texts: generated text, so the first pass hardly repeats a sentence)."""
    elmo = nlp.get_pipe("elmo")
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        for i in range(0, len(docs), 64):
            elmo.predict(docs[i : i + 64])
        seconds.append(time.perf_counter() - start)
    return " + ".join(f"{t:.3f}" for t in seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        nlps = {mb: build_nlp("elmo", tmp=tmp, layer_cache_mb=mb) for mb in (0, 1024)}
        sentencizer = nlps[0].get_pipe("sentencizer")
        docs = [sentencizer(nlps[0].make_doc(t)) for t in make_texts(args.docs)]
        for nlp in nlps.values():
            nlp.get_pipe("elmo").predict(docs[:8])  # load the weights, warm up
        times: dict[int, list[str]] = {0: [], 1024: []}
        for i in range(args.rounds):
            for mb in round_order(list(nlps), i):  # each setting first in every other round, as the other A/Bs
                nlp = nlps[mb]
                get_runner(nlp.get_pipe("elmo").model).clear_caches()
                times[mb].append(two_passes(nlp, docs))
    for mb, ts in times.items():
        print(f"layer_cache_mb={mb}: " + ", ".join(ts) + f" s (first + second pass over {args.docs} docs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
