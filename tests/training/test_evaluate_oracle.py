"""Stream evaluation against an independent float64 oracle: the whole row read in one call of the biLM,
and the full softmax's log-likelihoods of its targets computed in NumPy float64. Every test reads one row
(batch_size=1): how a stream is cut into rows is not what they check."""

import math

import numpy as np
import pytest
import torch

from spacy_elmo.training.evaluate import evaluate_sentences
from spacy_elmo.training.lm import BidirectionalLM
from spacy_elmo.training.modelio import load_pretrained
from spacy_elmo.training.trainer import train
from spacy_elmo.training.vocab import BOS, EOS, UNK, CharTable, Vocab

from .conftest import generated_sentences, tiny_train_config, write_corpus

#: Held-out sentences in order, one with words the model's vocabulary lacks (UNK targets count).
HELD = [s.split() for s in generated_sentences(12, seed=7)] + [["Zebras", "quietly", "sees", "the", "ball", "."]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model trained for 10 steps (no fitted initial state: rows start from zeros)."""
    tmp = tmp_path_factory.mktemp("evaluate_oracle")
    train_file = write_corpus(tmp / "train.txt", 120)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(tiny_train_config(train_file, tmp / "out", max_steps=10, checkpoint_every=10, state_sentences=0))
    finally:
        torch.set_num_threads(before)
    return tmp / "out"


@pytest.fixture(scope="module")
def lm_and_vocab(model_dir):
    """The model of ``model_dir`` in eval mode, its backward LM made worse than its forward one: the mean of the
    two perplexities is then far from the perplexity of the mean loss, which is the one reported."""
    bilm, softmax, vocab, _ = load_pretrained(model_dir, backend="reference")
    assert bilm.initial_state is None
    with torch.no_grad():
        bilm.lstm.backward_layers[-1].w_proj.mul_(-3.0)
    return BidirectionalLM(bilm, softmax).eval(), vocab


def _oracle_losses(lm, vocab, sentences):
    """``(mean NLL forward, mean NLL backward, targets)`` of the stream ``<S> s1 </S> <S> s2 </S> ...``
    (the backward LM reads it reversed), each direction's row read by the biLM in one call from zeros,
    and the log-softmax of its top layer's outputs over the whole vocabulary in NumPy float64."""
    vocab = Vocab(list(vocab.types), vocab.size)  # the evaluation's unknown strings become non-target types
    stream = np.array([t for s in sentences for t in [BOS, *vocab.lookup(s), EOS]], dtype=np.int64)
    char_table = CharTable(vocab, lm.bilm.config.max_characters_per_token)
    weight = lm.softmax.weight.detach().double().numpy()  # (V, P)
    bias = lm.softmax.bias.detach().double().numpy()  # (V,)
    rows = (stream, stream[::-1].copy())  # the backward LM's row: the stream reversed
    inputs = [torch.from_numpy(row[:-1]) for row in rows]
    with torch.no_grad():
        x_f, x_b = (lm.bilm.token_encoder(char_table(i)).unsqueeze(0) for i in inputs)  # (1, T, D)
        # the forward stack reads the stream, the backward stack the reversed stream, both from zeros
        outs_f, outs_b, _ = lm.bilm.lstm(x_f, x_b, torch.tensor([len(stream) - 1]), None, reverse_backward=False)
    losses = []
    for row, outs in zip(rows, (outs_f, outs_b)):
        targets = np.where(row[1:] < vocab.size, row[1:], UNK)
        h = outs[-1][0].double().numpy()  # (T, P): the top layer
        logits = h @ weight.T + bias  # (T, V)
        top = logits.max(1, keepdims=True)
        log_softmax = logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True))
        losses.append(float(-log_softmax[np.arange(len(targets)), targets].mean()))
    return losses[0], losses[1], len(stream) - 1


@pytest.mark.parametrize("unroll", [3, 20, None], ids=["3", "20", "one_window"])
def test_stream_losses_and_perplexity_match_the_float64_oracle(lm_and_vocab, unroll):
    lm, vocab = lm_and_vocab
    loss_f, loss_b, n = _oracle_losses(lm, vocab, HELD)
    unroll = unroll or n  # the whole row in one window (a longer one would only pad it)
    result = evaluate_sentences(lm, vocab, HELD, batch_size=1, unroll=unroll)
    assert result["n_targets"] == n and result["oov_rate"] > 0
    assert result["loss_forward"] == pytest.approx(loss_f, rel=1e-5)
    assert result["loss_backward"] == pytest.approx(loss_b, rel=1e-5)
    assert loss_b - loss_f > 0.5  # (exp(loss_f) + exp(loss_b)) / 2 is then > 1.03 x the perplexity
    assert result["perplexity_forward"] == pytest.approx(math.exp(loss_f), rel=1e-5)
    assert result["perplexity_backward"] == pytest.approx(math.exp(loss_b), rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp((loss_f + loss_b) / 2), rel=1e-5)


def test_stream_perplexity_does_not_depend_on_the_window(lm_and_vocab):
    """States carry from window to window: windows of 3 tokens read the row as one window does."""
    lm, vocab = lm_and_vocab
    windows = evaluate_sentences(lm, vocab, HELD, batch_size=1, unroll=3)
    n = windows["n_targets"]
    assert n == sum(len(s) + 2 for s in HELD) - 1 and n > 3 * 20
    whole = evaluate_sentences(lm, vocab, HELD, batch_size=1, unroll=n)
    for key in ("perplexity", "perplexity_forward", "perplexity_backward"):
        assert windows[key] == pytest.approx(whole[key], rel=1e-5), key


def test_a_window_longer_than_the_stream_reads_no_padding(lm_and_vocab):
    """--unroll past the stream's length gave the same numbers but padded its one window to ``unroll``
    positions (10**5 took 20-36 s on a 113-token row): the last window is as wide as the row needs."""
    lm, vocab = lm_and_vocab
    widths = []
    hook = lm.register_forward_pre_hook(lambda module, args: widths.append(args[1].shape[1]))  # idx_f: (batch, time)
    try:
        whole = evaluate_sentences(lm, vocab, HELD, batch_size=1, unroll=10**5)
        windows = evaluate_sentences(lm, vocab, HELD, batch_size=1, unroll=40)
    finally:
        hook.remove()
    n = whole["n_targets"]
    assert widths == [n, 40, 40, n - 80] and n > 80
    for key in ("perplexity", "perplexity_forward", "perplexity_backward"):
        assert whole[key] == pytest.approx(windows[key], rel=1e-5), key


@pytest.mark.parametrize("per_sentence", [False, True], ids=["stream", "per_sentence"])
def test_the_lm_reads_host_lengths_and_the_targets_positions_made_from_them(lm_and_vocab, per_sentence):
    """Evaluation handed the LM its lengths on the device (on a GPU one host sync per LSTM layer and batch, and
    one more for the positions of the targets the LM made from them): the lengths on the host and the positions
    made there, sent on without waiting (as the trainer's steps). The same numbers as positions made by the LM."""
    lm, vocab = lm_and_vocab
    seen = []

    def record(module, args, kwargs):
        lengths, positions = args[5], kwargs["positions"]
        seen.append((lengths.device, positions))
        T = args[3].shape[1]  # targets_fwd (B, T)
        assert torch.equal(positions, (torch.arange(T)[None, :] < lengths[:, None]).reshape(-1).nonzero().squeeze(1))

    def by_the_lm(module, args, kwargs):
        return args, dict(kwargs, positions=None)

    results = []
    for hook in (record, by_the_lm):
        handle = lm.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            results.append(evaluate_sentences(lm, vocab, HELD, batch_size=4, unroll=5, per_sentence=per_sentence))
        finally:
            handle.remove()
    assert len(seen) > 1 and all(device == torch.device("cpu") and positions is not None for device, positions in seen)
    assert results[0] == results[1]


@pytest.mark.parametrize("per_sentence", [False, True], ids=["stream", "per_sentence"])
def test_evaluation_sends_every_host_tensor_through_to_device_nowait(lm_and_vocab, monkeypatch, per_sentence):
    """The chars, the token indices and the targets (and the stream's target mask) went to a GPU with a plain
    ``.to(device)`` from pageable memory, each a host sync: every tensor the LM is handed, but the lengths it reads
    on the host, now comes from to_device_nowait (on the CPU, the path a GPU takes but the pinned copy); the
    same numbers."""
    from spacy_elmo.ops.reference import to_device_nowait
    from spacy_elmo.training import evaluate

    lm, vocab = lm_and_vocab
    plain = evaluate_sentences(lm, vocab, HELD, batch_size=4, unroll=5, per_sentence=per_sentence)
    sent, handed = [], []

    def recording(t, device):
        assert device == torch.device("cpu")
        moved = to_device_nowait(t, device)
        sent.append(moved)
        return moved

    def record(module, args, kwargs):
        handed.append((args[:5], args[5], kwargs["positions"]))

    monkeypatch.setattr(evaluate, "to_device_nowait", recording)
    handle = lm.register_forward_pre_hook(record, with_kwargs=True)
    try:
        assert evaluate_sentences(lm, vocab, HELD, batch_size=4, unroll=5, per_sentence=per_sentence) == plain
    finally:
        handle.remove()
    assert handed
    for tensors, lengths, positions in handed:
        targets = tensors[3:5]
        if per_sentence:  # one (2, B, T) tensor sent, its rows handed over
            assert all(t._base is not None and any(t._base is s for s in sent) for t in targets)
        else:
            assert all(any(t is s for s in sent) for t in targets)
        assert all(any(t is s for s in sent) for t in (*tensors[:3], positions))
        assert not any(lengths is s for s in sent)  # the LSTM reads them on the host
    if not per_sentence:  # the target masks, one per direction and window
        assert len(sent) == len(handed) * (5 + 1 + 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("per_sentence", [False, True], ids=["stream", "per_sentence"])
def test_evaluation_on_a_gpu_sends_its_inputs_without_host_syncs(lm_and_vocab, monkeypatch, capfd, per_sentence):
    """On a GPU each plain ``.to(device)`` of a pageable host tensor (chars, indices, targets, the stream's target
    masks) waited for the GPU's queued work: through to_device_nowait the evaluation makes fewer host syncs than
    with those copies put back, with the same numbers as on the CPU."""
    import copy

    from spacy_elmo.training import evaluate
    from tests.ops.test_fused_cuda import _syncs

    lm, vocab = lm_and_vocab
    on_cpu = evaluate_sentences(lm, vocab, HELD, batch_size=4, unroll=5, per_sentence=per_sentence)
    gpu_lm = copy.deepcopy(lm).to("cuda")

    def run():
        return evaluate_sentences(gpu_lm, vocab, HELD, batch_size=4, unroll=5, device="cuda", per_sentence=per_sentence)

    run()  # warms up (cuBLAS handles, the pinned memory pool)
    got: list = []
    syncs = {"nowait": _syncs(lambda: got.append(run()), capfd)}
    monkeypatch.setattr(evaluate, "to_device_nowait", lambda t, device: t.to(device))  # the plain copies back
    syncs["plain"] = _syncs(lambda: got.append(run()), capfd)
    assert syncs["nowait"] < syncs["plain"], syncs
    for result in got:
        for key in ("perplexity", "perplexity_forward", "perplexity_backward"):
            assert result[key] == pytest.approx(on_cpu[key], rel=1e-4), key


@pytest.mark.parametrize("per_sentence", [False, True], ids=["stream", "per_sentence"])
def test_oov_rate_and_word_count_match_a_count_of_the_held_out_words(model_dir, lm_and_vocab, per_sentence):
    """n_tokens is the held-out words (no markers) and oov_rate the share of them that are not targets in the model's
    vocab.txt, counted here from the strings. The first unknown type gets the id ``vocab.size`` (the loaded
    vocabulary is its targets, and evaluation appends new strings after them): counting ``id > size`` as OOV
    missed it."""
    lm, vocab = lm_and_vocab
    targets = set((model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1])
    assert len(targets) == vocab.size == len(vocab.types)  # new strings get ids from vocab.size on
    words = [w for s in HELD for w in s]
    unknown = [w for w in words if w not in targets]
    assert unknown  # "Zebras" at least: the first of them is type vocab.size
    result = evaluate_sentences(lm, vocab, HELD, batch_size=4, unroll=5, per_sentence=per_sentence)
    assert result["n_tokens"] == len(words)
    assert result["oov_rate"] == pytest.approx(len(unknown) / len(words), rel=1e-12)
    assert result["n_sentences"] == len(HELD)
    # per direction: every sentence's words and one marker; a stream one more per sentence boundary
    assert result["n_targets"] == len(words) + len(HELD) + (0 if per_sentence else len(HELD) - 1)


@pytest.mark.parametrize("per_sentence", [False, True], ids=["stream", "per_sentence"])
def test_evaluation_reads_in_eval_mode_and_leaves_the_lm_in_the_mode_it_found(lm_and_vocab, per_sentence):
    """evaluate_corpus reads without dropout (eval mode) and gives the LM back in its mode: one in training (a
    caller's, between its steps) is in training again, one in eval mode stays so."""
    lm, vocab = lm_and_vocab
    seen = []
    hook = lm.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    try:
        for training in (True, False):
            lm.train(training)
            evaluate_sentences(lm, vocab, HELD[:3], batch_size=2, unroll=5, per_sentence=per_sentence)
            assert lm.training == training and all(m.training == training for m in lm.modules())
    finally:
        hook.remove()
        lm.eval()
    assert seen and not any(seen)
