"""Full-softmax perplexity of a bidirectional LM on a text, and its OOV rate.

The text is one stream in its natural order (sentences with markers); the
backward LM reads the whole stream reversed (each sentence reversed, and the
sentences in reverse order, which is exactly what it predicts). The stream is
cut into at most ``batch_size`` rows of consecutive sentences, evaluated in
``unroll``-token windows with carried states, as bilm-tf evaluates. Each row starts
at a sentence (its ``<S>``, the backward row at its ``</S>``) from the zero state,
the cut at the sentence start nearest each multiple of ``ceil(targets / batch_size)``
(none where the stream's end is nearer; but where the start or end is a share and
``MID_SENTENCE_CUT_TOKENS`` or more away, in a sentence at least two shares and twice that long, in text the
sentencizer found few ends in: there the cut is at the multiple, mid-sentence):
rows cut at those points exactly began mid-sentence from zeros, and the result rose
with the batch size (the bundled model on 3,723 targets: 211.04 at 1 row, 225.13 at 128;
now 205.25, its rows' first sentences read from zeros as it was trained). Every token but
the first is a target once per direction (a row's first token is the last target of
the row before it, predicted with that row's state); ``<UNK>`` targets count, as in bilm-tf.

``per_sentence=True`` evaluates what a stateless pipeline sees instead: every
sentence alone, ``<S> ... </S>``, from the model's initial state (zeros, or the
fitted one of :meth:`BiLM.fit_initial_state`); each direction predicts the
sentence's tokens and its closing marker.

Under DDP (``rank``, ``world``) every process evaluates its share (stream rows, or
sentence batches) and the sums are all-reduced: every rank returns the result of one
process reading it all, and no rank waits in a collective while another evaluates alone.
"""

import hashlib
import math
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union, overload

import numpy as np
import torch

from .._typing import PathLike
from ..errors import Errors, Warnings
from ..paths import shell_quoted
from .data import Corpus, ReadStats, files_read, make_nlp, text_language, tokenize_file, warn_other_tokens
from ..ops.reference import to_device_nowait
from .lm import BidirectionalLM, encode_batch, target_positions
from .sentences import sentence_rows
from .vocab import BOS, EOS, CharTable, Vocab

#: A stream row starts mid-sentence only where the nearest sentence start (or the stream's end) is a share and this
#: many tokens or more from the share's point (:func:`stream_row_starts`): a row of a few tokens costs a call as a
#: row of 20 does. Fixed, not the window (``unroll``) the stream is read in: pretrain --heldout reads it with the
#: run's --unroll, evaluate with 20, and a run with --unroll 100 cut a long sentence elsewhere and logged another
#: number (43.99 in 29 rows, where evaluate gave 43.95 in 32). The window does not change the result.
MID_SENTENCE_CUT_TOKENS = 20

#: Per-sentence evaluation calls the LM on at most ``batch_size * ROW_TOKENS`` padded tokens
#: (or on one sentence): a text without sentence ends gives sentences of thousands of tokens,
#: and 32 of them in one call would need tens of GB. ``pretrain --max-length``'s default.
ROW_TOKENS = 100


@torch.no_grad()
def evaluate_corpus(
    lm: BidirectionalLM,
    vocab: Vocab,
    corpus: Corpus,
    char_table: Optional[CharTable] = None,
    batch_size: int = 32,
    unroll: int = 20,
    device: Union[str, torch.device] = "cpu",
    progress: bool = False,
    per_sentence: bool = False,
    rank: int = 0,
    world: int = 1,
) -> Dict[str, Any]:
    """Perplexities (forward, backward, and ``exp`` of the mean loss) and OOV rate.
    ``world > 1``: this is rank ``rank`` of an initialised process group, which every rank calls."""
    for name, value in (("batch_size", batch_size), ("unroll", unroll)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what="a positive integer", value=value))
    device = torch.device(device)
    char_table = char_table or CharTable(vocab, lm.bilm.config.max_characters_per_token)
    tokens = corpus.tokens.astype(np.int64)
    words = tokens[(tokens != BOS) & (tokens != EOS)]
    oov = int((words >= vocab.size).sum())
    if len(tokens) < 2 or len(words) == 0:
        raise ValueError(Errors.E_NO_EVAL_WORDS)
    was_training = lm.training
    lm.eval()
    rows = row_starts(corpus, batch_size, per_sentence)  # the same on every rank: each cuts the whole stream alike
    if per_sentence:
        sums, n_pred = _sentence_nll_sums(lm, vocab, corpus, tokens, char_table, batch_size, device, progress, rank, world)
    else:
        sums, n_pred = _stream_nll_sums(lm, vocab, tokens, rows, char_table, unroll, device, progress, rank, world)
    lm.train(was_training)
    if world > 1:
        import torch.distributed as dist

        total = torch.tensor([sums[0], sums[1], float(n_pred)], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        sums, n_pred = [float(total[0]), float(total[1])], int(round(float(total[2])))
    loss_f, loss_b = sums[0] / n_pred, sums[1] / n_pred
    return {
        "perplexity_forward": _perplexity(loss_f),
        "perplexity_backward": _perplexity(loss_b),
        "perplexity": _perplexity(mean_loss(loss_f, loss_b)),
        "loss_forward": loss_f,
        "loss_backward": loss_b,
        "n_targets": n_pred,
        "n_tokens": int(len(words)),
        "n_sentences": int(len(corpus.lengths)),
        "n_rows": len(rows),
        "oov_rate": oov / len(words),
        "vocab_size": vocab.size,
        "mode": "per_sentence" if per_sentence else "stream",
    }


def row_starts(corpus: Corpus, batch_size: int, per_sentence: bool) -> np.ndarray:
    """Where the rows :func:`evaluate_corpus` reads ``corpus`` in start (their count is its result's ``n_rows``):
    int64, ascending; every sentence alone (``corpus.starts``: what it reads does not depend on ``batch_size``), or
    the stream's rows (:func:`stream_row_starts`)."""
    if per_sentence:
        return np.asarray(corpus.starts, dtype=np.int64)
    return stream_row_starts(corpus.starts, len(corpus.tokens), batch_size)


def row_starts_digest(rows: np.ndarray) -> str:
    """A short digest (16 hex digits of sha256) of :func:`row_starts`: two readings of one text with as many rows
    can differ in where the rows start (a stream cut for another batch size, or under an earlier rule)."""
    return hashlib.sha256(np.asarray(rows, dtype="<i8").tobytes()).hexdigest()[:16]


@overload
def mean_loss(loss_f: float, loss_b: float) -> float: ...


@overload
def mean_loss(loss_f: Optional[float], loss_b: Optional[float]) -> Optional[float]: ...


def mean_loss(loss_f: Optional[float], loss_b: Optional[float]) -> Optional[float]:
    """The mean loss of the forward and backward losses (nats), whose exp is the result's ``perplexity`` (their
    geometric mean); None where either is None (a NaN of a :func:`json_ready` result)."""
    return None if loss_f is None or loss_b is None else (loss_f + loss_b) / 2


def _perplexity(loss: float) -> float:
    """``exp(loss)``, or inf past a float's range (a mean loss over about 709 nats: math.exp raised OverflowError,
    and evaluate or pretrain --heldout of a broken model crashed)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def json_ready(result: Dict[str, Any]) -> Dict[str, Any]:
    """An :func:`evaluate_corpus` result as standard JSON holds it (evaluate --json, the held-out lines of
    train_log.jsonl): a value that is no finite number (a perplexity past a float's range: inf) is None (null)
    rather than JSON's nonstandard ``Infinity``; its loss is given."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in result.items()}


def from_json_ready(result: Dict[str, Any]) -> Dict[str, Any]:
    """A :func:`json_ready` result (evaluate --json, a held-out line of train_log.jsonl) as :func:`evaluate_corpus`
    gave it: a null perplexity is inf where its loss is a number (past a float's range), nan where that loss is null
    too (a null loss: nan). Other values, and a result with no nulls, as they are."""
    out = dict(result)
    for key in ("loss_forward", "loss_backward"):
        if key in out and out[key] is None:
            out[key] = math.nan
    loss_f, loss_b = out.get("loss_forward", math.nan), out.get("loss_backward", math.nan)
    for key, loss in (("perplexity_forward", loss_f), ("perplexity_backward", loss_b), ("perplexity", mean_loss(loss_f, loss_b))):
        if key in out and out[key] is None:
            out[key] = math.nan if math.isnan(loss) else math.inf
    return out


#: A perplexity this large or larger is shown with an exponent (:func:`perplexity_text`): a broken model's mean loss
#: of 400 nats printed a perplexity of 174 digits.
PERPLEXITY_SHOWN_EXPONENT_FROM = 1e15


def perplexity_text(result: Dict[str, Any]) -> str:
    """``perplexity (<how the text was read>): forward F, backward B, geometric mean M`` of an :func:`evaluate_corpus`
    result (or its :func:`json_ready` form): its reading is every sentence alone, one stream, or a stream cut into
    ``n_rows`` rows (a result logged before ``n_rows`` was recorded: a stream); a perplexity past a float's range
    is ``inf (mean loss L nats)``."""
    if result["mode"] == "per_sentence":
        reading = "every sentence alone"
    elif result.get("n_rows") is None:
        reading = "stream"
    else:
        reading = "one stream" if result["n_rows"] == 1 else f"stream in {result['n_rows']:,} rows"
    loss_f, loss_b = result["loss_forward"], result["loss_backward"]  # None: a NaN of a json_ready result
    losses = (loss_f, loss_b, mean_loss(loss_f, loss_b))
    forward, backward, mean = (
        perplexity_shown(value, loss)
        for value, loss in zip((result["perplexity_forward"], result["perplexity_backward"], result["perplexity"]), losses))
    return f"perplexity ({reading}): forward {forward}, backward {backward}, geometric mean {mean}"


def perplexity_shown(value: Optional[float], loss: Optional[float] = None) -> str:
    """A perplexity as :func:`perplexity_text` shows it: ``{value:.2f}``, from :data:`PERPLEXITY_SHOWN_EXPONENT_FROM`
    ``{value:.3e}`` (not a number of up to 309 digits), or past a float's range (inf, or None with a finite loss:
    :func:`json_ready`) ``inf (mean loss L nats)``; ``inf`` where the mean ``loss`` it is ``exp`` of is not given."""
    if value is not None and not math.isinf(value):
        return f"{value:.3e}" if value >= PERPLEXITY_SHOWN_EXPONENT_FROM else f"{value:.2f}"
    if value is not None and loss is None:
        return "inf"
    if loss is None or math.isnan(loss):
        return "nan"
    return f"inf (mean loss {loss:,.2f} nats)"


def stream_row_starts(starts: np.ndarray, n_tokens: int, batch_size: int) -> np.ndarray:
    """Where the stream's rows start: int64 ``(R,)``, ascending, ``R <= batch_size``, the first 0.

    ``starts``: the sentences' first tokens (``Corpus.starts``: each an ``<S>``) in a stream of
    ``n_tokens``. Row ``r`` is tokens ``[cuts[r], cuts[r + 1])`` (the last to the end): the sentence
    start nearest each multiple of ``ceil((n_tokens - 1) / batch_size)`` (or the stream's end: no row starts
    there), so every row is whole sentences (fewer rows than ``batch_size`` when sentences are long or few);
    where that start or end is both a row's length and :data:`MID_SENTENCE_CUT_TOKENS` or more from the multiple
    (in a sentence at least twice both long: text the sentencizer found few ends in), the multiple itself,
    mid-sentence, so that such a text is still read in ``batch_size`` rows, not one. (A row of a few tokens costs
    an LSTM call as a longer one does, so a short text keeps its sentences whole, in fewer rows.) The same
    whatever window the stream is then read in."""
    # The stream's end is a sentence boundary too: a point near it moves there, and that row is dropped
    # (the last sentence stays whole in the row before), rather than cutting the last sentence at the point.
    bounds = np.append(np.asarray(starts, dtype=np.int64), n_tokens)
    seg = math.ceil((n_tokens - 1) / batch_size)
    points = np.arange(1, batch_size, dtype=np.int64) * seg
    points = points[points < n_tokens - 1]
    right = np.clip(np.searchsorted(bounds, points), 0, len(bounds) - 1)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(bounds[left] - points) <= np.abs(bounds[right] - points), bounds[left], bounds[right])
    nearest = np.where(np.abs(nearest - points) < max(seg, MID_SENTENCE_CUT_TOKENS), nearest, points)
    return np.unique(np.concatenate([[0], nearest[nearest < n_tokens]]))


def _stream_nll_sums(lm, vocab, tokens, cuts, char_table, unroll, device, progress, rank=0, world=1):
    """``(summed NLL per direction, number of targets)`` over the stream, cut into rows at ``cuts``
    (:func:`stream_row_starts`) read with carried states; of rank ``rank``'s share of the rows
    (contiguous) when ``world > 1``.

    Forward row ``r`` reads tokens ``cuts[r] ..`` and predicts each next one, up to the next row's
    ``<S>``; backward row ``r`` reads the same sentences reversed, from the last one's ``</S>``, up to the
    ``</S>`` before them. The stream's first token (forward) and last (backward) are no targets: the last
    row reads one input fewer forward, the first one fewer backward, each a masked last position."""
    from ..progress import progress_bar

    n_tokens = len(tokens)
    streams = (tokens, tokens[::-1].copy())
    ends = np.append(cuts[1:], n_tokens)
    rows = len(cuts)
    mine = np.arange(rows * rank // world, rows * (rank + 1) // world)  # rows are independent
    size = ends[mine] - cuts[mine]
    n_fwd = size - (mine == rows - 1)  # targets per row and direction
    n_bwd = size - (mine == 0)
    length = np.maximum(n_fwd, n_bwd)  # read by the LSTM (both directions share the lengths)
    first = (cuts[mine], n_tokens - ends[mine])  # each row's first position in the forward and reversed streams
    state = None
    sums, n_pred = [0.0, 0.0], int(n_fwd.sum())  # the backward's total (over the ranks) is the same
    for k in progress_bar(range(math.ceil(length.max() / unroll)) if len(mine) else [], desc="evaluating", unit="window",
                          leave=None, disable=not progress):
        # The last window is as wide as the longest row still needs: a large --unroll reads no padding past it.
        t = k * unroll + np.arange(min(unroll, int(length.max()) - k * unroll))[None, :]
        pos = [np.minimum(f[:, None] + t, n_tokens - 1) for f in first]
        inputs = [torch.from_numpy(s[p]) for s, p in zip(streams, pos)]
        # Every host tensor sent to a GPU through a pinned copy of its own without waiting (to_device_nowait): a
        # plain .to from pageable memory waits for the GPU's queued work, one host sync per tensor. The copy is
        # the helper's, so the host tensors may be dropped or reused at once.
        targets = [to_device_nowait(vocab.target_ids(torch.from_numpy(s[np.minimum(p + 1, n_tokens - 1)])), device)
                   for s, p in zip(streams, pos)]
        chars, idx_f, idx_b = (to_device_nowait(x, device) for x in encode_batch(inputs[0], inputs[1], char_table))
        # Host lengths (the LSTM checks them there and copies them over without a host sync, where lengths on a
        # GPU cost one sync per layer), and the targets' positions from them, sent on without waiting (made by
        # the LM from lengths on a GPU: a nonzero, one sync more), as the trainer's steps.
        lengths = torch.from_numpy((t < length[:, None]).sum(1))
        positions = to_device_nowait(target_positions(lengths, t.shape[1]), device)
        out = lm(chars, idx_f, idx_b, targets[0], targets[1], lengths, state, positions=positions)
        state = out.state
        for d, (nll, n) in enumerate(((out.nll_fwd, n_fwd), (out.nll_bwd, n_bwd))):
            keep = to_device_nowait(torch.from_numpy(t < n[:, None]), device)  # the stream's first token is no target
            sums[d] += float(nll.double().masked_fill(~keep, 0.0).sum())
    return sums, n_pred


def _sentence_nll_sums(lm, vocab, corpus, tokens, char_table, batch_size, device, progress, rank=0, world=1):
    """``(summed NLL per direction, number of targets)`` with every sentence read alone from the
    initial state (of every ``world``-th batch from ``rank`` when ``world > 1``); ``tokens``:
    ``corpus.tokens`` as int64."""
    from ..progress import progress_bar

    sums, n_pred = [0.0, 0.0], 0
    order = np.argsort(corpus.lengths, kind="stable")  # similar lengths together: less padding
    batches = _sentence_batches(order, corpus.lengths, batch_size)[rank::world]
    for rows in progress_bar(batches, desc="evaluating", unit="batch", leave=None, disable=not progress):
        fwd, bwd, lengths = sentence_rows(tokens, corpus.starts[rows], corpus.lengths[rows])
        inputs = (fwd[:, :-1], bwd[:, :-1])
        targets = to_device_nowait(vocab.target_ids(torch.stack([fwd[:, 1:], bwd[:, 1:]])), device)  # as above
        chars, idx_f, idx_b = (to_device_nowait(x, device) for x in encode_batch(inputs[0], inputs[1], char_table))
        state = lm.bilm.start_state(len(rows), lm.softmax.weight)
        positions = to_device_nowait(target_positions(lengths, inputs[0].shape[1]), device)  # host lengths: as above
        out = lm(chars, idx_f, idx_b, targets[0], targets[1], lengths, state, positions=positions)
        sums[0] += float(out.nll_fwd.double().sum())
        sums[1] += float(out.nll_bwd.double().sum())
        n_pred += int(lengths.sum())
    return sums, n_pred


def _sentence_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int) -> List[np.ndarray]:
    """``order`` (sentence indices by ascending length) cut into batches of at most ``batch_size``
    rows and ``batch_size * ROW_TOKENS`` padded tokens (a longer sentence goes alone)."""
    budget = batch_size * ROW_TOKENS
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        # ascending lengths: the last row of a batch is its longest
        while end < len(order) and end - start < batch_size and (end - start + 1) * int(lengths[order[end]]) <= budget:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def read_text(
    text_path: PathLike, lang: str = "en", progress: bool = False, nlp=None
) -> Tuple[List[List[str]], ReadStats]:
    """The sentences of ``text_path`` tokenized with spaCy ``lang`` (as in pretraining; ``nlp``: the pipeline of
    :func:`~spacy_elmo.training.data.make_nlp` of ``lang`` when already built; ``progress``: a bar of the
    tokenizing); ValueError when there are none (empty, blank or binary text)."""
    stats = ReadStats()
    sentences = tokenize_file(text_path, lang, stats, progress, nlp=nlp)
    if not sentences:
        raise ValueError(Errors.E_NO_EVAL_TOKENS.format(path=text_path, files=files_read(stats)))
    return sentences, stats


def evaluate_sentences(
    lm: BidirectionalLM,
    vocab: Vocab,
    sentences: List[List[str]],
    batch_size: int = 32,
    unroll: int = 20,
    device: Union[str, torch.device] = "cpu",
    progress: bool = False,
    per_sentence: bool = False,
    rank: int = 0,
    world: int = 1,
) -> Dict[str, Any]:
    """Evaluate on tokenized sentences (see :func:`read_text`; ``rank``, ``world``: :func:`evaluate_corpus`)."""
    vocab, corpus = _sentences_corpus(vocab, sentences)
    return evaluate_corpus(lm, vocab, corpus, None, batch_size, unroll, device, progress, per_sentence, rank, world)


def heldout_rows(vocab: Vocab, sentences: List[List[str]], batch_size: int, per_sentence: bool) -> Tuple[int, str]:
    """The ``n_rows`` of :func:`evaluate_sentences`'s result on these arguments and the :func:`row_starts_digest` of
    where those rows start, without evaluating (a resume reuses a logged held-out number only of the same rows)."""
    rows = row_starts(_sentences_corpus(vocab, sentences)[1], batch_size, per_sentence)
    return len(rows), row_starts_digest(rows)


def _sentences_corpus(vocab: Vocab, sentences: List[List[str]]) -> Tuple[Vocab, Corpus]:
    """The corpus of ``sentences`` and the vocabulary it is read with: a copy of ``vocab``, since evaluation text
    adds its unknown strings as non-target types."""
    vocab = Vocab(list(vocab.types), vocab.size)
    return vocab, Corpus.from_sentences(sentences, vocab)


def evaluate_text(
    lm: BidirectionalLM,
    vocab: Vocab,
    text_path: PathLike,
    lang: str = "en",
    batch_size: int = 32,
    unroll: int = 20,
    device: Union[str, torch.device] = "cpu",
    progress: bool = False,
    per_sentence: bool = False,
    nlp=None,
) -> Dict[str, Any]:
    """Tokenize ``text_path`` with spaCy ``lang`` (as in pretraining; ``nlp``: as for :func:`read_text`) and evaluate."""
    sentences, stats = read_text(text_path, lang, progress, nlp=nlp)
    result = evaluate_sentences(lm, vocab, sentences, batch_size, unroll, device, progress, per_sentence)
    result["replaced_bytes"] = stats.replaced_bytes
    return result


#: The share of a text's words outside the model's vocabulary above which :func:`evaluate_model_dir` warns
#: that its perplexity means little: a Korean model read English text at 96% OOV and 39.5, "better" than the
#: bundled English model's 273 on that text.
EVAL_OOV_WARNING_RATE = 0.5


def evaluate_model_dir(
    model_dir: PathLike, text_path: PathLike, lang: Optional[str] = None, batch_size: int = 32, unroll: int = 20,
    device: Union[str, torch.device] = "cpu", progress: bool = False, per_sentence: Optional[bool] = None,
) -> Dict[str, Any]:
    """Evaluate a saved model (``"default"`` allowed) on a text file or directory.

    ``per_sentence=None`` reads the text the way the model was trained: every sentence
    alone for a model of ``pretrain --sentences``, one stream otherwise."""
    from .modelio import load_pretrained

    bilm, softmax, vocab, provenance = load_pretrained(model_dir)
    if softmax is None or vocab is None:  # load_pretrained gives both or neither
        raise ValueError(Errors.E_NO_SOFTMAX.format(path=model_dir, shell_path=shell_quoted(model_dir)))
    lm = BidirectionalLM(bilm, softmax).to(device)
    lang, from_model = text_language(lang, provenance)
    if per_sentence is None:
        per_sentence = provenance.get("reading") == "sentences"
    nlp = make_nlp(lang, provenance, from_model=from_model)
    warn_other_tokens(provenance, model_dir, nlp, lang, text_path)
    result = evaluate_text(lm, vocab, text_path, lang, batch_size, unroll, device, progress, per_sentence, nlp=nlp)
    result["lang"] = lang
    if result["oov_rate"] > EVAL_OOV_WARNING_RATE:
        trained = repr(provenance["lang"]) if provenance.get("lang") else "no language"
        warnings.warn(Warnings.W_EVAL_OOV.format(rate=result["oov_rate"], path=text_path, lang=lang, model=model_dir,
                                                 shell_model=shell_quoted(model_dir), size=vocab.size, trained=trained),
                      RuntimeWarning, stacklevel=2)
    return result
