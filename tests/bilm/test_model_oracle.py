"""The biLM against the independent NumPy float64 oracle, on hdf5 files in the released layout."""

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids, ops
from spacy_elmo.bilm.model import BiLMOutput, remove_boundaries
from tests.backends import BACKENDS
from tests.bilm.oracle import BOS, EOS, NumpyElmo, options, spell, spell_marker, write_model_files

ATOL = 1e-5

SENTENCES = [
    ["The", "bank", "of", "the", "river", "."],
    ["밥", "먹었어요", "?"],
    [],
    ["emoji", "🎉🎉", "x" * 60],
    ["a"],
]


def assert_matches(out, expected, sentences):
    """Valid positions equal the oracle; padded positions are exactly zero."""
    for i, sent in enumerate(sentences):
        n = len(sent)
        assert out.mask[i].sum().item() == n
        for layer, act in enumerate(out.activations):
            got = act[i, :n].double().numpy()
            np.testing.assert_allclose(got, expected[i][layer], atol=ATOL, rtol=0, err_msg=f"row {i} layer {layer}")
            assert torch.all(act[i, n:] == 0)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"skip": False},
        {"n_highway": 0},
        {"activation": "tanh"},
        {"clip": None},
        {"max_chars": 12},
        {"L": 1},
        {"L": 3},
        {"filters": ((1, 4), (2, 4)), "P": 8},  # F == P: no projection layer in the file
    ],
    ids=["default", "no-skip", "no-highway", "tanh", "no-clip", "max-chars-12", "one-layer", "three-layers", "no-proj"],
)
def test_stateless_matches_oracle(tmp_path, variant):
    opts = options(**variant)
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    oracle = NumpyElmo(opts, weight_path)
    W = opts["char_cnn"]["max_characters_per_token"]
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES, max_characters_per_token=W))
    assert len(out.activations) == opts["lstm"]["n_layers"] + 1
    assert_matches(out, oracle.batch(SENTENCES), SENTENCES)


def test_exported_file_reads_the_same_under_allennlp_conventions(tmp_path):
    """AllenNLP negates the carry gate, reorders gates and folds the forget bias at load time:
    the oracle doing exactly that on our exported file must give our numbers."""
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    model.to_allennlp(tmp_path / "out_options.json", tmp_path / "out.hdf5")
    oracle = NumpyElmo(opts, tmp_path / "out.hdf5", convention="allennlp")
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert_matches(out, oracle.batch(SENTENCES), SENTENCES)


def test_stateful_carries_states_over_consecutive_batches(tmp_path):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=1)
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference")
    oracle = NumpyElmo(opts, weight_path)
    batches = [
        [["one", "two", "three"], ["a", "b"], ["x"]],
        [["four"], ["c", "d", "e", "f"]],  # smaller batch: row 2 keeps its state
        [["five", "six"], ["g"], ["y", "z"], ["new", "row"]],  # larger: row 3 starts from zeros
    ]
    for sentences in batches:
        with torch.no_grad():
            out = model(batch_to_ids(sentences))
        assert_matches(out, oracle.batch(sentences, stateful=True), sentences)
    # Carried states really change the numbers, and reset_states forgets them.
    fresh = NumpyElmo(opts, weight_path).batch(batches[0])
    model.reset_states()
    with torch.no_grad():
        out = model(batch_to_ids(batches[0]))
    assert_matches(out, fresh, batches[0])
    with torch.no_grad():
        again = model(batch_to_ids(batches[0]))
    assert not torch.allclose(again.activations[2], out.activations[2])


@pytest.mark.parametrize("cell_clip,proj_clip", [(0.5, 0.5), (0.5, 1.0), (1.0, 0.5)])
def test_clipping_binds_and_matches(tmp_path, cell_clip, proj_clip):
    """options.json's lstm.cell_clip bounds the cell state, lstm.proj_clip the projected output: the model equals
    the oracle, with both clips binding. Different clips too: with equal ones only, a swap (in the options mapping
    or in the LSTM) passed."""
    opts = options()
    opts["lstm"].update(cell_clip=cell_clip, proj_clip=proj_clip)
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=2, lstm_scale=3.0)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    assert (model.config.cell_clip, model.config.proj_clip) == (cell_clip, proj_clip)
    oracle = NumpyElmo(opts, weight_path)
    sentences = [["clip", "me", "hard", "please", "now"], ["short"]]
    expected = oracle.batch(sentences)
    assert oracle.clip_hits["cell"] > 0 and oracle.clip_hits["proj"] > 0
    with torch.no_grad():
        out = model(batch_to_ids(sentences))
    assert_matches(out, expected, sentences)
    # Without the clip, or with the two swapped, the numbers differ, so the test above really exercised them.
    unclipped = NumpyElmo(options(clip=None), weight_path).batch(sentences)
    assert not np.allclose(unclipped[0][2], expected[0][2], atol=1e-3)
    if cell_clip != proj_clip:
        swapped = dict(opts, lstm={**opts["lstm"], "cell_clip": proj_clip, "proj_clip": cell_clip})
        assert not np.allclose(NumpyElmo(swapped, weight_path).batch(sentences)[0][2], expected[0][2], atol=1e-3)


@pytest.mark.parametrize("carry_bias", [20.0, -20.0])
def test_highway_gate_sign(tmp_path, carry_bias):
    """TF semantics: a large carry bias passes the transform branch, a negative one the input."""
    opts = options(n_highway=1, filters=((1, 4), (2, 4)), P=6)
    F = 8
    overrides = {"CNN_high_0/b_carry": np.full(F, carry_bias)}
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=3, overrides=overrides)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    oracle = NumpyElmo(opts, weight_path)
    ids = batch_to_ids([["gate"]])[0]
    enc = model.token_encoder
    with torch.no_grad():
        feats = ops.char_cnn(ids, enc.char_embedding, list(enc.conv_weights), list(enc.conv_biases), "relu")
        y = ops.highway(feats, enc.highway_weights[0], enc.highway_biases[0]).double().numpy()[0]
    x = feats.double().numpy()[0]
    transform = np.maximum(x @ oracle.w["CNN_high_0/W_transform"] + oracle.w["CNN_high_0/b_transform"], 0)
    np.testing.assert_allclose(y, transform if carry_bias > 0 else x, atol=1e-6)
    with torch.no_grad():
        out = model(batch_to_ids([["gate", "sign"]]))
    assert_matches(out, oracle.batch([["gate", "sign"]]), [["gate", "sign"]])


def test_a_fresh_token_encoder_starts_near_the_identity_as_bilm_tf():
    """elmo-spec section 8's init: char embedding U(-1, 1); CNN U(-0.05, 0.05), bias 0; highway carry bias -2,
    where the carry gate g = sigmoid(x Wc + bc) multiplies the transform branch (section 2.5), so each highway
    layer starts passing (1 - sigmoid(-2)) = 88% of its input. Weight rows here are [transform; carry] (the
    NumPy oracle's highway); a -2 on the transform half instead (a gate of one half) went unseen."""
    torch.manual_seed(0)
    config = BiLMConfig(projection_dim=8, cell_dim=16, n_layers=1, char_embedding_dim=4, filters=((1, 4), (2, 8)),
                        n_highway=2)
    enc = BiLM(config, backend="reference").token_encoder
    F = config.n_filters
    assert enc.char_embedding.abs().max() <= 1.0
    for w, b in zip(enc.conv_weights, enc.conv_biases):
        assert w.abs().max() <= 0.05 and torch.all(b == 0)
    x = torch.randn(5, F, dtype=torch.float64)
    for w, b in zip(enc.highway_weights, enc.highway_biases):
        assert torch.all(b[:F] == 0) and torch.all(b[F:] == -2.0)  # bt = 0, bc = -2
        # with the weights zeroed, y = g * relu(bt) + (1 - g) * x with g = sigmoid(bc) (section 2.5, float64 here)
        y = ops.highway(x, torch.zeros_like(w, dtype=torch.float64), b.detach().double(), backend="reference")
        np.testing.assert_allclose(y.numpy(), (1.0 - 1.0 / (1.0 + np.exp(2.0))) * x.numpy(), rtol=1e-12)


def test_same_sentence_same_vectors_in_any_batch(tmp_path):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    target = ["Deterministic", "by", "default"]
    with torch.no_grad():
        alone = model(batch_to_ids([target]))
        batched = model(batch_to_ids([["other", "words", "here", "and", "longer"], target, []]))
        twice = model(batch_to_ids([target]))
    for a, b, c in zip(alone.activations, batched.activations, twice.activations):
        torch.testing.assert_close(a[0], b[1, :3], atol=1e-6, rtol=0)
        assert torch.equal(a, c)


def test_all_empty_batch(tmp_path):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    out = model(batch_to_ids([[], []]))
    assert out.mask.shape == (2, 0)
    assert all(a.shape == (2, 0, 16) for a in out.activations)


def test_gradients_flow_to_every_parameter(tmp_path):
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    out = model(batch_to_ids([["grad", "check"], ["x"]]))
    sum(a.sum() for a in out.activations).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_keep_boundaries_returns_the_marker_positions(tmp_path, backend):
    """``keep_boundaries=True``: ``<S>`` first, each ``</S>`` right after its row's last token, zero
    padding after it, the mask covering the markers; removing them gives the default output."""
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    oracle = NumpyElmo(opts, weight_path)
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        full, inner = model(ids, keep_boundaries=True), model(ids)
    T = ids.shape[1]
    assert full.mask.sum(1).tolist() == [len(s) + 2 for s in SENTENCES]
    wrapped = [["<S>", *s, "</S>"] for s in SENTENCES]
    assert_matches(full, oracle.batch(SENTENCES, keep_boundaries=True), wrapped)
    assert all(a.shape[1] == T + 2 for a in full.activations)
    for layer, a in enumerate(full.activations):
        stripped, mask = remove_boundaries(a, full.mask)
        assert torch.equal(mask, inner.mask)
        torch.testing.assert_close(stripped, inner.activations[layer], atol=1e-6, rtol=0)
    with pytest.raises(TypeError, match="keep_boundaries must be True or False; found 'false'"):
        model(ids, keep_boundaries="false")  # truthy: would have returned the markers


@pytest.mark.parametrize("backend", BACKENDS)
def test_encoding_every_position_equals_encoding_each_distinct_token(tmp_path, backend, monkeypatch):
    """A GPU (and torch.compile) encodes every position, the CPU each distinct token once: the same
    vectors, zeros at padding; forced here on the CPU. Batches of no rows or no positions: the first
    version asked reshape(B, T, -1) of 0 elements ('cannot reshape tensor of 0 elements')."""
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    ids = batch_to_ids([["the", "bank", "the"], ["bank"], []])
    mask = ids.gt(0).any(-1)
    with torch.no_grad():
        distinct = model.encode_tokens(ids, mask)
        monkeypatch.setattr(model, "_encodes_every_position", lambda char_ids: True)
        every = model.encode_tokens(ids, mask)
        torch.testing.assert_close(every, distinct, rtol=1e-6, atol=1e-6)
        assert torch.all(every[~mask] == 0)
        for B, T in ((0, 3), (2, 0), (0, 0)):
            empty = torch.zeros(B, T, ids.shape[-1], dtype=torch.long)
            got = model.encode_tokens(empty, torch.zeros(B, T, dtype=torch.bool))
            assert got.shape == (B, T, opts["lstm"]["projection_dim"])
        out = model(torch.zeros(0, 3, ids.shape[-1], dtype=torch.long))
        assert all(a.shape[0] == 0 for a in out.activations)


def _oracle_with_dropout(oracle, tokens, masks, top):
    """The oracle's ``(L + 1, n, 2P)`` layers of one sentence with the dropout of bilm-tf's training graph:
    ``masks[l][d]`` ``(n + 2, P)`` (0 or 1 / (1 - p)) scales layer ``l``'s input of direction ``d`` (the
    residual adds the dropped input: the dropout wraps the residual cell), ``top[d]`` the top layer's output."""
    W = oracle.max_chars
    xs = np.stack([oracle.token_vector(i) for i in
                   [spell_marker(BOS, W)] + [spell(t, W) for t in tokens] + [spell_marker(EOS, W)]])
    directions = []
    for d in (0, 1):
        inp, outputs = xs, []
        for layer in range(oracle.L):
            dropped = inp * masks[layer][d]
            seq = dropped if d == 0 else dropped[::-1]
            h, c, out = np.zeros(oracle.P), np.zeros(oracle.C), []
            for t in range(len(seq)):
                h, c = oracle._cell(d, layer, seq[t], h, c)
                out.append(h + seq[t] if (oracle.skip and layer > 0) else h)
            out = np.stack(out) if d == 0 else np.stack(out)[::-1]
            outputs.append(out)
            inp = out
        outputs[-1] = outputs[-1] * top[d]
        directions.append(outputs)
    layers = [np.concatenate([xs, xs], -1)] + [np.concatenate(fb, -1) for fb in zip(*directions)]
    return np.stack(layers)[:, 1:-1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_dropout_scales_every_layer_input_and_the_top_output(tmp_path, backend):
    """``lstm.dropout`` in training mode (bilm-tf's recipe, BiLstm's docstring): each direction's input of
    every layer and its top output, nothing else (layer 0, the token vectors, and the lower layers' outputs as
    returned are not dropped). Against the oracle with the same masks, drawn in the order BiLstm draws them:
    no test ran a dropout above 0 on the CPU, and dropping none of the layer inputs (or not the top output) passed."""
    import torch.nn.functional as F

    opts = options(L=3)
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=3)
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend).train()
    model.lstm.dropout = p = 0.5
    oracle = NumpyElmo(opts, weight_path)
    sentences = [["The", "bank", "of", "the", "river", "."], ["a", "b"]]
    B, T2, P = len(sentences), 8, opts["lstm"]["projection_dim"]

    def draw():  # one mask per F.dropout call, as the model draws them: same shape, dtype, RNG order
        return F.dropout(torch.ones(B, T2, P), p, True)

    torch.manual_seed(7)
    masks = [(draw(), draw()) for _ in range(oracle.L)]
    top = (draw(), draw())
    torch.manual_seed(7)
    with torch.no_grad():
        out = model(batch_to_ids(sentences))
    for i, tokens in enumerate(sentences):
        n = len(tokens)
        row = [[m[i, : n + 2].numpy().astype(np.float64) for m in pair] for pair in masks]
        expected = _oracle_with_dropout(oracle, tokens, row, [m[i, : n + 2].numpy().astype(np.float64) for m in top])
        assert_matches(BiLMOutput([a[i : i + 1] for a in out.activations], out.mask[i : i + 1]), [expected], [tokens])
    # the dropout really dropped: without it the top layer differs
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(model(batch_to_ids(sentences)).activations[3], out.activations[3], atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_contextualize_zeroes_padding_whatever_the_vectors_there(tmp_path, backend):
    """contextualize reads only each row's ``lengths + 2`` positions of ``x``: vectors beyond them (a cache
    row or a buffer reused, not zeros) change no valid position, every layer is zero at padding with and
    without the markers, and no gradient flows to them. ``keep_boundaries=True`` returned layer 0 (``[x; x]``)
    unmasked: the padding's vectors came back, as did their gradient."""
    opts = options()
    opt_path, weight_path = write_model_files(tmp_path, opts)
    model = BiLM.from_allennlp(opt_path, weight_path, backend=backend)
    lengths = torch.tensor([4, 1, 0])
    B, T2, P = 3, 6, opts["lstm"]["projection_dim"]
    torch.manual_seed(0)
    clean = torch.randn(B, T2, P)
    padded = torch.arange(T2).unsqueeze(0) >= (lengths + 2).unsqueeze(1)
    clean[padded] = 0
    dirty = clean + padded.unsqueeze(-1) * torch.randn(B, T2, P)
    for keep in (True, False):
        x = dirty.clone().requires_grad_(True)
        out = model.contextualize(x, lengths, keep_boundaries=keep)
        with torch.no_grad():
            expected = model.contextualize(clean, lengths, keep_boundaries=keep)
        assert torch.equal(out.mask, expected.mask)
        for layer, (got, want) in enumerate(zip(out.activations, expected.activations)):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0, msg=f"layer {layer}, keep_boundaries={keep}")
            assert torch.all(got[~out.mask] == 0), (layer, keep)
        sum(a.sum() for a in out.activations).backward()
        assert torch.all(x.grad[padded] == 0), keep
        assert x.grad[~padded].abs().sum() > 0
