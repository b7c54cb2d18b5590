"""The initial LSTM state of a biLM pretrained on running text.

bilm-tf's recipe (and this project's ``pretrain``) trains on continuous streams
with carried states, so after the first batch the LSTMs never start from zero:
each sentence's ``<S>`` is read in the state left by the sentence before. Read
from a zero state, as a stateless pipeline reads every sentence, the first
words of a sentence are far off the training distribution (the bundled
default model: per-sentence perplexity 1,633 from zeros, 571 from the state
fitted here; see ``docs/default-model.md``). The mean state at sentence
boundaries is one fixed, deterministic state in which every sentence starts as
it did in training.

It is opt-in: with the default model it lowered per-sentence perplexity by a
factor of 2.9 but made the features worse for NER and text classification in
all six comparisons run (``docs/default-model.md``), so models
start from zeros, as the references do, unless a state is fitted.
"""

from typing import TYPE_CHECKING, List, Optional, Sequence

import torch

from ..chars import batch_to_ids
from ..errors import Errors
from .config import is_int
from .lstm import LstmState

if TYPE_CHECKING:
    from .model import BiLM

#: Sentences each stream reads before its boundary states count (the default of fit_initial_state).
WARMUP = 2


def sentences_needed(rows: int, warmup: int = WARMUP) -> int:
    """The fewest non-empty sentences that fit a state in ``rows`` streams: more than ``warmup`` each."""
    return rows * (warmup + 1)


def running_streams(sentences: Sequence[Sequence[str]], rows: int) -> List[List[Sequence[str]]]:
    """Cut consecutive ``sentences`` (empty ones dropped) into ``rows`` contiguous
    streams of equal length (the remainder is left out)."""
    kept = [s for s in sentences if len(s)]
    per = len(kept) // rows
    return [kept[r * per : (r + 1) * per] for r in range(rows)]


@torch.no_grad()
def boundary_state_mean(
    bilm: "BiLM", sentences: Sequence[Sequence[str]], rows: int = 32, warmup: int = WARMUP, progress: bool = False
) -> LstmState:
    """Mean carried state of ``bilm`` after a sentence's ``</S>``.

    sentences: consecutive sentences of ordinary text (token lists), in order.
    They are cut into ``rows`` contiguous streams, each read one sentence per
    call with carried states (as in pretraining); the state after every
    sentence past the first ``warmup`` of its stream is averaged (in float64).
    Both directions read the streams in text order (the backward LSTM reverses
    each sentence, so its boundary state follows the previous sentence read
    backwards rather than the next one: the same distribution for a mean).

    Streams start from zeros, so the result depends on the weights and the
    text only. Returns ``(h (2, L, P), c (2, L, C))`` in the biLM's dtype; the
    biLM is left as it was (mode, carried states, initial state).
    """
    from ..progress import progress_bar

    if not is_int(rows) or not is_int(warmup) or rows < 1 or warmup < 0:
        raise ValueError(Errors.E_FIT_STATE_ARGS.format(rows=rows, warmup=warmup))
    rows, warmup = int(rows), int(warmup)
    sentences = list(sentences)  # read twice below: a generator only once
    streams = running_streams(sentences, rows)
    per = len(streams[0])
    if per <= warmup:
        n = sum(1 for s in sentences if len(s))
        raise ValueError(Errors.E_FIT_STATE_TOO_FEW.format(n=n, needed=sentences_needed(rows, warmup), rows=rows, warmup=warmup))
    saved = (bilm.stateful, bilm.carried_states, bilm.training, bilm.initial_state)
    device = bilm.token_encoder.char_embedding.device
    W = bilm.config.max_characters_per_token
    sum_h: Optional[torch.Tensor] = None
    sum_c: Optional[torch.Tensor] = None
    count = 0
    bilm.stateful = True
    bilm.reset_states()
    bilm.set_initial_state(None)  # streams start from zeros: the mean depends on the weights and text only
    bilm.eval()
    # The bar counts the sentences read: each call reads one of every stream (the remainder is left out).
    bar = progress_bar(total=per * rows, desc="fitting the initial state", unit="sentence", disable=not progress)
    try:
        for k in range(per):
            bilm(batch_to_ids([stream[k] for stream in streams], W).to(device))
            bar.update(rows)
            if k < warmup:
                continue
            carried = bilm.carried_states
            assert carried is not None  # stateful: every call carries its final states
            h, c = carried[0].double().sum(2), carried[1].double().sum(2)
            sum_h = h if sum_h is None else sum_h + h
            sum_c = c if sum_c is None else sum_c + c
            count += rows
    finally:
        bar.close()
        bilm.stateful = saved[0]
        bilm.carried_states = saved[1]
        bilm.train(saved[2])
        bilm.set_initial_state(saved[3])
    assert sum_h is not None and sum_c is not None  # per > warmup: every stream read a sentence past it
    dtype = bilm.token_encoder.char_embedding.dtype
    return (sum_h / count).to(dtype), (sum_c / count).to(dtype)
