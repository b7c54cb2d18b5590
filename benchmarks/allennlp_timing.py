"""Throughput of AllenNLP's own ``_ElmoBiLm`` (allennlp 2.10.1): the AllenNLP column
of the kernel benchmark.

Random weights of a preset are written in the released hdf5 layout with
``BiLM(BiLMConfig.preset(name)).to_allennlp(...)`` and loaded by AllenNLP's real
loader (``benchmarks.allennlp_reference``); inputs are random word-like tokens
(lowercase letters, lengths 1..12, a few capitalised / punctuation tokens), not
zeros. Timed: the whole ``_ElmoBiLm.forward`` (markers, char CNN, highway,
biLSTM) under ``torch.no_grad()``, its states reset in every timed call; tokens
counted without the ``<S>``/``</S>`` markers. This script times it alone;
``benchmarks/kernels.py --whole-model --allennlp`` times the same call
(:func:`allennlp_bilm_runner`) interleaved with the others, on their sentences
and weights.

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
from typing import Callable, Dict, List, Optional, Sequence

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


def allennlp_bilm_runner(model: BiLM, sentences: Sequence[Sequence[str]]) -> Callable[[], object]:
    """One call of AllenNLP's ``_ElmoBiLm`` holding ``model``'s weights (written in the released hdf5 layout
    with ``BiLM.to_allennlp`` and read by AllenNLP's own loader) on ``sentences`` (AllenNLP's own character ids):
    the callable resets the LSTM states first (``_ElmoBiLm`` is stateful; each call starts from zero, as a
    ``BiLM`` call does), so a reset is part of what it times. Call it under ``torch.no_grad()``."""
    with tempfile.TemporaryDirectory() as tmp:
        opt, weights = Path(tmp) / "options.json", Path(tmp) / "weights.hdf5"
        model.to_allennlp(opt, weights)
        bilm = load_elmo_bilm(opt, weights)
    bilm.eval()
    char_ids = allennlp_batch_to_ids(sentences)

    def run() -> object:
        bilm._elmo_lstm.reset_states()
        return bilm(char_ids)

    return run


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
    """Median tokens/s of AllenNLP's ``_ElmoBiLm`` alone on CPU (:func:`allennlp_bilm_runner`) for a preset
    ("small", "medium", "original") at ``batch`` x ``length`` tokens, with ``threads`` torch threads.
    ``details``, when given, receives the individual timings. (``benchmarks/kernels.py --allennlp`` times it
    interleaved with the other implementations instead.)"""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        run = allennlp_bilm_runner(BiLM(BiLMConfig.preset(config_preset), backend="reference"),
                                   random_sentences(batch, length, seed))
        times = []
        with torch.no_grad():
            for k in range(warmup + repeats):
                start = time.perf_counter()
                run()
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
