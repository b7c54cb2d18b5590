"""``spacy-elmo demo``: contextual vectors of the two senses of "bank", and speed."""

import tempfile
import time
from typing import List, Optional

import torch
import typer

from ..bilm import BiLM, BiLMConfig
from ..bilm.native_io import DEFAULT_MODEL_DIR, CONFIG_NAME
from ..chars import batch_to_ids
from ..errors import Warnings, counted
from .app import app, fail, given_text, model_argument, model_name, positive_int, warn

RIVER = [
    "We sat on the bank of the river and watched the water .".split(),
    "The fishermen pulled their boat up onto the muddy bank .".split(),
    "Reeds grew thick along the bank of the stream .".split(),
    "The river flooded its bank after the storm .".split(),
]
MONEY = [
    "She deposited the cheque at the bank on Monday morning .".split(),
    "The bank raised its interest rates again .".split(),
    "He asked the bank for a loan to buy a house .".split(),
    "The bank closed his account last year .".split(),
]
SENTENCES = RIVER + MONEY


def _bank_vectors(bilm: BiLM) -> List[torch.Tensor]:
    """Per layer: ``(8, 2P)`` vectors of "bank" in the demo sentences (river first)."""
    with torch.no_grad():
        out = bilm(batch_to_ids(SENTENCES, bilm.config.max_characters_per_token))
    index = [s.index("bank") for s in SENTENCES]
    return [torch.stack([layer[i, j] for i, j in enumerate(index)]) for layer in out.activations]


def _tokens_per_second(bilm: BiLM, batch: int = 32, length: int = 20, repeats: int = 3) -> float:
    words = [w for s in SENTENCES for w in s]
    gen = torch.Generator().manual_seed(0)
    sents = [[words[int(k)] for k in torch.randint(len(words), (length,), generator=gen)] for _ in range(batch)]
    ids = batch_to_ids(sents, bilm.config.max_characters_per_token)
    with torch.no_grad():
        bilm(ids)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            bilm(ids)
            times.append(time.perf_counter() - start)
    return batch * length / sorted(times)[len(times) // 2]


def _pipeline_words_per_second(model_dir: str, n_docs: int = 200) -> float:
    """Words/s of ``nlp.pipe`` with a sentencizer and the ``elmo`` component (doc data kept)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": model_dir})
    texts = [" ".join(SENTENCES[i % len(SENTENCES)] + SENTENCES[(i + 1) % len(SENTENCES)]) for i in range(n_docs)]
    list(nlp.pipe(texts[:8]))  # warm-up and weight loading
    start = time.perf_counter()
    words = sum(len(doc) for doc in nlp.pipe(texts))
    return words / (time.perf_counter() - start)


@app.command()
def demo(
    model: Optional[str] = typer.Option(None, parser=given_text, callback=model_name, help="Model directory (native or AllenNLP files; default: the bundled model)."),
    threads: int = typer.Option(2, callback=positive_int, help="torch CPU threads."),
) -> None:
    """Show how ELMo tells the river bank from the money bank, layer by layer, and its speed."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model is None and not (DEFAULT_MODEL_DIR / CONFIG_NAME).exists():
        warn(Warnings.W_DEMO_RANDOM_MODEL.format(path=DEFAULT_MODEL_DIR))
        bilm = BiLM(BiLMConfig.preset("small"))
        source = "random small preset"
    else:
        try:
            with model_argument():
                bilm = BiLM.load(model or "default")
        except (ValueError, OSError) as err:
            fail(str(err))
        source = model or "bundled default"
    bilm.eval()
    typer.echo(f"model: {source}; backend: {bilm.backend}; output width {bilm.config.output_dim}")
    for i, s in enumerate(SENTENCES):
        typer.echo(f"  [{i}] {' '.join(s)}")
    n = len(RIVER)
    typer.echo(f"\nmean cosine similarity of 'bank' between sentences (river: 0-{n - 1}; money: {n}-{2 * n - 1})")
    typer.echo(f"{'layer':>8} {'river-river':>12} {'money-money':>12} {'river-money':>12}")
    for k, v in enumerate(_bank_vectors(bilm)):
        cos = torch.nn.functional.cosine_similarity(v.unsqueeze(1), v.unsqueeze(0), dim=-1)
        pairs = n * (n - 1)  # off-diagonal entries of one sense's block
        same_r = float(cos[:n, :n].sum() - n) / pairs
        same_m = float(cos[n:, n:].sum() - n) / pairs
        cross = float(cos[:n, n:].mean())
        typer.echo(f"{k:>8} {same_r:>12.3f} {same_m:>12.3f} {cross:>12.3f}")
    typer.echo("(layer 0 is context-independent: every 'bank' is the same vector there)")
    tps = _tokens_per_second(bilm)
    typer.echo(f"\nbiLM: {tps:,.0f} tokens/s (batch 32 x 20 tokens, {counted(threads, 'thread')}, {bilm.backend} backend)")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model or ("default" if source == "bundled default" else tmp)
        if model_dir == tmp:
            bilm.save(tmp)
        wps = _pipeline_words_per_second(model_dir)
    typer.echo(f"spaCy pipeline (sentencizer + elmo): {wps:,.0f} words/s with nlp.pipe")
