"""The fitted initial state: numbers against the NumPy float64 oracle, persistence, errors."""

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.bilm.initial_state import boundary_state_mean
from spacy_elmo.bilm.native_io import INITIAL_STATE_NAME
from tests.backends import BACKENDS
from tests.bilm.oracle import NumpyElmo, options, write_model_files

from .test_model_oracle import SENTENCES, assert_matches


TEXT = [
    ["The", "river", "ran", "fast", "."],
    ["Money", "went", "to", "the", "bank", "."],
    ["It", "rained", "."],
    [],
    ["밥", "먹었어요", "?"],
    ["They", "walked", "along", "the", "shore", "for", "hours", "."],
    ["Rates", "rose", "again", "."],
    ["x"],
    ["The", "end", "came", "soon", "enough", "."],
    ["Nobody", "knew", "."],
    ["Then", "silence", "."],
    ["Good", "night", "!"],
    ["Another", "day", "began", "."],
]


def streams_of(text, rows):
    """The docstring's split, written here (not the implementation's): empty sentences dropped, then
    ``rows`` contiguous streams of ``len(kept) // rows`` sentences each, the remainder left out."""
    kept = [s for s in text if s]
    per = len(kept) // rows
    return [kept[r * per : (r + 1) * per] for r in range(rows)]


#: TEXT's 12 non-empty sentences in 3 streams: 4 sentences each (13 // 3 with the empty one counted: also 4).
TEXT_PER_STREAM = 4


def random_state(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    L, P, C = model.config.n_layers, model.config.projection_dim, model.config.cell_dim
    return torch.randn(2, L, P, generator=g) * 0.5, torch.randn(2, L, C, generator=g)


def preset_oracle(oracle, state, rows):
    h, c = (t.double().numpy() for t in state)
    for row in range(rows):
        oracle.states[row] = {(d, k): (h[d, k].copy(), c[d, k].copy()) for d in range(2) for k in range(h.shape[1])}


@pytest.fixture
def files(tmp_path):
    opts = options(clip=0.5)
    return opts, write_model_files(tmp_path, opts, seed=3, lstm_scale=2.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_sentence_starts_from_the_initial_state(files, backend):
    opts, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    state = random_state(model)
    model.set_initial_state(state)
    oracle = NumpyElmo(opts, weight_path)
    preset_oracle(oracle, state, len(SENTENCES))
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert_matches(out, oracle.batch(SENTENCES, stateful=True), SENTENCES)
    # Stateless stays deterministic: the same again, and a sentence alone gives the same vectors.
    with torch.no_grad():
        again = model(batch_to_ids(SENTENCES))
        alone = model(batch_to_ids([SENTENCES[0]]))
    assert torch.equal(again.activations[2], out.activations[2])
    assert torch.allclose(alone.activations[2][0], out.activations[2][0, : alone.activations[2].shape[1]], atol=1e-6)
    # It really is used: clearing it gives the zero-state numbers.
    model.set_initial_state(None)
    with torch.no_grad():
        zero = model(batch_to_ids(SENTENCES))
    assert_matches(zero, NumpyElmo(opts, weight_path).batch(SENTENCES), SENTENCES)
    assert not torch.allclose(zero.activations[2], out.activations[2])


def test_the_initial_state_is_a_copy_of_the_tensors_given(files):
    """set_initial_state keeps its own copy: the caller's tensors (fit_initial_state's return value, a state
    read from another model) edited in place afterwards leave the model's numbers alone. Kept by reference
    (same dtype and device: .to() returns the tensor itself), the edit changed every sentence's start."""
    opts, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    state = random_state(model, seed=2)
    oracle = NumpyElmo(opts, weight_path)
    preset_oracle(oracle, state, len(SENTENCES))
    model.set_initial_state(state)
    state[0].add_(1.0)
    state[1].zero_()
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert_matches(out, oracle.batch(SENTENCES, stateful=True), SENTENCES)


def test_new_rows_of_a_stateful_model_start_from_the_initial_state(files):
    opts, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference")
    state = random_state(model, seed=1)
    model.set_initial_state(state)
    oracle = NumpyElmo(opts, weight_path)
    preset_oracle(oracle, state, 4)
    for batch in ([["one", "two"], ["a"]], [["three"], ["b", "c"], ["new", "row"], ["d"]]):
        with torch.no_grad():
            out = model(batch_to_ids(batch))
        assert_matches(out, oracle.batch(batch, stateful=True), batch)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fitted_state_is_the_oracle_mean_at_sentence_boundaries(files, backend):
    opts, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    rows, warmup = 3, 1
    h, c = model.fit_initial_state(TEXT, rows=rows, warmup=warmup)
    assert model.initial_state is not None and not model.stateful and model.carried_states is None
    oracle = NumpyElmo(opts, weight_path)
    sums_h, sums_c, n = 0.0, 0.0, 0
    streams = streams_of(TEXT, rows)
    assert [len(stream) for stream in streams] == [TEXT_PER_STREAM] * rows
    for row, stream in enumerate(streams):
        for k, sentence in enumerate(stream):
            oracle.sentence(sentence, row=row)
            if k >= warmup:
                st = oracle.states[row]
                sums_h = sums_h + np.stack([[st[(d, k2)][0] for k2 in range(2)] for d in range(2)])
                sums_c = sums_c + np.stack([[st[(d, k2)][1] for k2 in range(2)] for d in range(2)])
                n += 1
    assert n == rows * (TEXT_PER_STREAM - warmup)
    np.testing.assert_allclose(h.double().numpy(), sums_h / n, atol=1e-5, rtol=0)
    np.testing.assert_allclose(c.double().numpy(), sums_c / n, atol=1e-5, rtol=0)
    assert oracle.clip_hits["cell"] > 0  # the clipped regime, not just the linear one


def test_fitting_leaves_a_stateful_model_as_it_was(files):
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference").train()
    with torch.no_grad():
        model(batch_to_ids([["carried"], ["state"]]))
    before = [t.clone() for t in model.carried_states]
    model.fit_initial_state(TEXT, rows=2)
    assert model.stateful and model.training
    assert all(torch.equal(a, b) for a, b in zip(before, model.carried_states))


def test_the_fit_starts_from_zeros_and_restores_everything_it_changed(files):
    """boundary_state_mean's contract: "Streams start from zeros ... the biLM is left as it was (mode, carried
    states, initial state)". A stateful model with carried states and one with an initial state fit exactly what
    a fresh model fits, and keep their mode, carried states and initial state."""
    _, (opt_path, weight_path) = files

    def load(**kw):
        return BiLM.from_allennlp(opt_path, weight_path, backend="reference", **kw)

    want = boundary_state_mean(load(), TEXT, rows=2, warmup=1)

    carrying = load(stateful=True).train()  # has read something: 2 rows carried
    with torch.no_grad():
        carrying(batch_to_ids([["carried", "state"], ["other", "words"]]))
    carried = [t.clone() for t in carrying.carried_states]
    got = boundary_state_mean(carrying, TEXT, rows=2, warmup=1)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert carrying.stateful and carrying.training and carrying.initial_state is None
    assert all(torch.equal(a, b) for a, b in zip(carrying.carried_states, carried))

    started = load().eval()  # a state it already starts from: not the fit's start
    initial = random_state(started)
    started.set_initial_state(initial)
    got = boundary_state_mean(started, TEXT, rows=2, warmup=1)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert not started.stateful and not started.training and started.carried_states is None
    assert all(torch.equal(a, b) for a, b in zip(started.initial_state, initial))


def test_the_fit_reads_without_dropout_and_leaves_the_global_rng_alone(files):
    """A training model with LSTM dropout (as pretrain's, which fits at every save with --state-sentences): the fit
    reads in eval mode, so two fits agree and the global torch RNG is not drawn from (the checkpoint captured it
    before the fit: a draw there broke the exact resume)."""
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference").train()
    model.lstm.dropout = 0.5
    torch.manual_seed(0)
    rng = torch.get_rng_state()
    first = boundary_state_mean(model, TEXT, rows=2, warmup=1)
    assert torch.equal(torch.get_rng_state(), rng)
    second = boundary_state_mean(model, TEXT, rows=2, warmup=1)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert model.training


def test_carried_states_can_be_restored_and_are_checked(files):
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference").eval()
    first, second = batch_to_ids([["carried"], ["state"]]), batch_to_ids([["next", "call"], ["here"]])
    with torch.no_grad():
        model(first)
        saved = model.carried_states
        want = model(second).activations[-1]
        model.carried_states = None  # forgotten: the next call starts afresh, so it differs
        assert not torch.allclose(model(second).activations[-1], want)
        model.carried_states = saved
        assert torch.equal(model(second).activations[-1], want)
    h, c = saved
    for bad in ((h[:, :, :1], c), (h[..., :-1], c), (h[0], c)):
        with pytest.raises(ValueError, match="Carried states must be"):
            model.carried_states = bad


def test_save_load_and_state_dict_round_trips(files, tmp_path):
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    model.fit_initial_state(TEXT, rows=2)
    model.save(tmp_path / "native")
    assert (tmp_path / "native" / INITIAL_STATE_NAME).exists()
    loaded = BiLM.load(tmp_path / "native", backend="reference")
    assert all(torch.equal(a, b) for a, b in zip(loaded.initial_state, model.initial_state))
    ids = batch_to_ids(TEXT[:3])
    with torch.no_grad():
        assert torch.equal(loaded(ids).activations[2], model(ids).activations[2])
    # The state dict carries it; a state dict without it clears it.
    fresh = BiLM(model.config, backend="reference")
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.initial_h, model.initial_h)
    plain = {k: v for k, v in model.state_dict().items() if not k.startswith("initial_")}
    fresh.load_state_dict(plain)
    assert fresh.initial_state is None
    # Saving a model without one removes the stale file (it belonged to other weights).
    fresh.save(tmp_path / "native")
    assert not (tmp_path / "native" / INITIAL_STATE_NAME).exists()
    assert BiLM.load(tmp_path / "native").initial_state is None


def test_allennlp_export_says_the_state_is_left_out(files, tmp_path):
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    model.to_allennlp(tmp_path / "a.json", tmp_path / "a.hdf5")  # no state: no warning
    model.fit_initial_state(TEXT, rows=2)
    with pytest.warns(UserWarning, match="initial state"):
        model.to_allennlp(tmp_path / "b.json", tmp_path / "b.hdf5")


def test_bad_states_and_too_little_text_are_clear_errors(files):
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    h, c = random_state(model)
    with pytest.raises(ValueError, match=r"must be h \(2, 2, 8\).*found h \(2, 2, 4\)"):
        model.set_initial_state((h[..., :4], c))
    with pytest.raises(ValueError, match="at least 6 non-empty sentences"):
        model.fit_initial_state(TEXT[:5], rows=2, warmup=2)
    # accepted before (a state dict too, though loading initial_state.safetensors refuses them): NaN vectors
    nan_h = h.clone()
    nan_h[1, 0, 2] = float("nan")
    for set_it in (model.set_initial_state, lambda s: model.load_state_dict({**model.state_dict(), "initial_h": s[0], "initial_c": s[1]}),
                   lambda s: setattr(model, "carried_states", (s[0].unsqueeze(2), s[1].unsqueeze(2)))):
        for state in ((nan_h, c), (h, c * float("inf"))):
            with pytest.raises(ValueError, match="holding NaN or infinite values"):
                set_it(state)
    with pytest.raises(ValueError, match="rows >= 1"):
        model.fit_initial_state(TEXT, rows=0)
    # a TypeError inside range() and fits with rows=1 / warmup=1 before
    for rows, warmup in ((2.5, 1), (True, 1), (2, True), (2, 0.5)):
        with pytest.raises(ValueError, match=f"whole numbers rows >= 1 and warmup >= 0; found rows={rows!r}, warmup={warmup!r}"):
            model.fit_initial_state(TEXT, rows=rows, warmup=warmup)
    with pytest.raises(ValueError, match="at least 6 non-empty sentences .* found 4"):  # a generator's were counted as 0
        model.fit_initial_state((s for s in TEXT[:5]), rows=2, warmup=2)
    assert model.initial_state is None


def test_the_fitting_bar_counts_the_sentences_it_reads(files, capsys):
    """Its unit read "sentence row" and it counted calls (one sentence of every stream each): now it counts
    the sentences read, those of the streams (the empty ones and the remainder left out)."""
    _, (opt_path, weight_path) = files
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    model.fit_initial_state(TEXT, rows=3, warmup=1, progress=True)
    read = sum(len(stream) for stream in streams_of(TEXT, 3))
    assert read == 3 * TEXT_PER_STREAM  # 12 sentences of words: 4 a stream
    shown = capsys.readouterr().err.replace("\r", "\n")
    assert f"| {read}/{read} [" in shown.split("fitting the initial state: 100%")[1], shown
    assert "sentence/s" in shown and "row" not in shown, shown
