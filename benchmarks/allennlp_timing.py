"""Throughput of AllenNLP's own ``_ElmoBiLm`` (allennlp 2.10.1): the AllenNLP column
of the kernel benchmark.

Random weights of a preset are written in the released hdf5 layout with
``BiLM(BiLMConfig.preset(name)).to_allennlp(...)`` and loaded by AllenNLP's real
loader (``benchmarks.allennlp_reference``); inputs are random word-like tokens
(lowercase letters, lengths 1..12, a few capitalised / punctuation tokens), not
zeros. Timed: the whole ``_ElmoBiLm.forward`` (markers, char CNN, highway,
biLSTM) under ``torch.no_grad()``, states reset before every call; tokens
counted without the ``<S>``/``</S>`` markers.

    python -m benchmarks.allennlp_timing small original --batch 32 --length 20 --threads 2
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script too, as the other benchmarks
    sys.path.insert(0, str(ROOT))

from benchmarks.allennlp_reference import allennlp_batch_to_ids, load_elmo_bilm  # noqa: E402
from spacy_elmo import BiLM, BiLMConfig  # noqa: E402

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_PUNCT = [".", ",", "?", "!", ";", "'s", "--"]


def random_sentences(batch: int, length: int, seed: int = 0) -> List[List[str]]:
    """``batch`` sentences of exactly ``length`` word-like tokens."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(batch):
        sentence = []
        for _ in range(length):
            r = rng.random()
            if r < 0.1:
                sentence.append(rng.choice(_PUNCT))
                continue
            word = "".join(rng.choice(_LETTERS) for _ in range(min(12, max(1, int(rng.expovariate(1 / 5)) + 1))))
            sentence.append(word.capitalize() if r > 0.9 else word)
        sentences.append(sentence)
    return sentences


def allennlp_tokens_per_second(
    config_preset: str,
    batch: int,
    length: int,
    threads: int = 2,
    repeats: int = 5,
    warmup: int = 1,
    seed: int = 0,
    details: Optional[Dict] = None,
) -> float:
    """Median tokens/s of AllenNLP's ``_ElmoBiLm`` on CPU for a preset ("small",
    "medium", "original") at ``batch`` x ``length`` tokens, with ``threads`` torch threads.
    ``details``, when given, receives the individual timings."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        with tempfile.TemporaryDirectory() as tmp:
            opt, weights = Path(tmp) / "options.json", Path(tmp) / "weights.hdf5"
            BiLM(BiLMConfig.preset(config_preset), backend="reference").to_allennlp(opt, weights)
            bilm = load_elmo_bilm(opt, weights)
        bilm.eval()
        char_ids = allennlp_batch_to_ids(random_sentences(batch, length, seed))
        times = []
        with torch.no_grad():
            for k in range(warmup + repeats):
                bilm._elmo_lstm.reset_states()
                start = time.perf_counter()
                bilm(char_ids)
                elapsed = time.perf_counter() - start
                if k >= warmup:
                    times.append(elapsed)
    finally:
        torch.set_num_threads(previous_threads)
    median = statistics.median(times)
    if details is not None:
        details.update(preset=config_preset, batch=batch, length=length, threads=threads, seconds=times,
                       median_s=median, tokens_per_s=batch * length / median, torch=torch.__version__)
    return batch * length / median


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=["small", "original"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    for preset in args.presets:
        details: Dict = {}
        allennlp_tokens_per_second(preset, args.batch, args.length, args.threads, repeats=args.repeats, details=details)
        print(json.dumps(details))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
