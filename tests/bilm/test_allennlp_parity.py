"""Parity with AllenNLP's own ELMo code (allennlp 2.10.1, run from its wheel).

``benchmarks.allennlp_reference`` downloads the wheel once (pip download --no-deps)
and executes AllenNLP's real ``modules/elmo.py``, ``elmo_lstm.py``,
``lstm_cell_with_projection.py``, ``encoder_base.py``, ``highway.py`` and
``nn/util.py`` with stand-ins for the heavy imports they do not use. The test
skips when the wheel cannot be fetched (offline machine).

AllenNLP's activations include ``<S>``/``</S>``: they are removed with AllenNLP's
own ``remove_sentence_boundaries`` before comparing, per layer, at valid positions.
"""

import pytest
import torch

from spacy_elmo import BiLM, batch_to_ids
from tests.bilm.oracle import options, write_model_files
from tests.bilm.test_export_variations import VARIATIONS, export_allennlp, make_model

ATOL = 1e-5

ref = pytest.importorskip("benchmarks.allennlp_reference")  # the `allennlp` fixture (tests/conftest.py) skips offline


SENTENCES = [
    ["The", "bank", "of", "the", "river", "."],
    ["밥", "먹었어요", "?"],
    ["emoji", "🎉🎉", "x" * 60, ""],
    ["a"],
]


def allennlp_layers(bilm, char_ids):
    """AllenNLP's activations with the sentence markers removed by AllenNLP itself."""
    with torch.no_grad():
        out = bilm(char_ids)
    layers = [ref.allennlp_remove_sentence_boundaries(a, out["mask"]) for a in out["activations"]]
    return [a for a, _ in layers], layers[0][1]


def assert_same(ours, theirs, their_mask, sentences, where=""):
    assert len(ours.activations) == len(theirs)
    assert torch.equal(ours.mask, their_mask)
    for i, sent in enumerate(sentences):
        n = len(sent)
        for layer, (a, b) in enumerate(zip(ours.activations, theirs)):
            torch.testing.assert_close(
                a[i, :n], b[i, :n], atol=ATOL, rtol=0, msg=lambda m: f"{where} row {i} layer {layer}: {m}"
            )
            assert torch.all(a[i, n:] == 0)


def test_char_ids_match_allennlp_indexer(allennlp):
    """Our batch_to_ids == AllenNLP's ELMoTokenCharactersIndexer on ordinary text."""
    sentences = SENTENCES + [[]]
    assert torch.equal(batch_to_ids(sentences), allennlp.allennlp_batch_to_ids(sentences))


def test_char_ids_of_markers_and_surrogates_match(allennlp):
    """Like AllenNLP (and bilm-tf), a literal "<S>" / "</S>" is spelled as the sentence marker
    and lone surrogates are dropped (utf-8 'ignore')."""
    sentence = [["<S>", "</S>", "\ud800", "a\ud800b"]]
    ours, theirs = batch_to_ids(sentence), allennlp.allennlp_batch_to_ids(sentence)
    assert theirs[0, 0, :3].tolist() == [259, 257, 260]  # <bow> <bos> <eow>
    assert theirs[0, 1, :3].tolist() == [259, 258, 260]
    assert theirs[0, 2, :3].tolist() == [259, 260, 261]  # empty word
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    "variant",
    [{}, {"n_highway": 0}, {"activation": "tanh"}, {"L": 3}, {"clip": 0.5}],
    ids=["default", "no-highway", "tanh", "three-layers", "clip-binding"],
)
def test_stateless_matches_allennlp(tmp_path, allennlp, variant):
    opts = options(filters=((1, 4), (2, 6), (3, 8)), **variant)
    scale = 3.0 if variant.get("clip") == 0.5 else 1.0
    opt_path, weight_path = write_model_files(tmp_path, opts, lstm_scale=scale)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    theirs_bilm = allennlp.load_elmo_bilm(opt_path, weight_path)
    for sentences in (SENTENCES, [["one", "more", "batch"], []]):
        char_ids = allennlp.allennlp_batch_to_ids(sentences)
        theirs_bilm._elmo_lstm.reset_states()  # AllenNLP is always stateful
        theirs, their_mask = allennlp_layers(theirs_bilm, char_ids)
        with torch.no_grad():
            ours = model(char_ids)
        assert_same(ours, theirs, their_mask, sentences)


def test_stateful_matches_allennlp_over_batches(tmp_path, allennlp):
    opts = options(filters=((1, 4), (2, 6), (3, 8)))
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=1)
    model = BiLM.from_allennlp(opt_path, weight_path, stateful=True, backend="reference")
    theirs_bilm = allennlp.load_elmo_bilm(opt_path, weight_path)
    batches = [
        [["one", "two", "three"], ["a", "b"], ["x"]],
        [["four"], ["c", "d", "e", "f"]],  # smaller batch: row 2 keeps its state
        [["five", "six"], [], ["y", "z", "w"], ["new", "row"]],  # larger: row 3 starts from zeros;
        # an empty row runs <S> </S> (and updates its state) in both implementations
        [["after"], ["the", "empty"], ["row"], ["again"]],
    ]
    for k, sentences in enumerate(batches):
        char_ids = batch_to_ids(sentences)
        theirs, their_mask = allennlp_layers(theirs_bilm, char_ids)
        with torch.no_grad():
            ours = model(char_ids)
        assert_same(ours, theirs, their_mask, sentences, where=f"batch {k}")
    # The carried state matters: a fresh AllenNLP instance gives other numbers.
    fresh = allennlp.load_elmo_bilm(opt_path, weight_path)
    first, _ = allennlp_layers(fresh, batch_to_ids(batches[-1]))
    assert not torch.allclose(first[2], theirs[2], atol=1e-3)


def test_exported_model_runs_unchanged_in_allennlp(tmp_path, allennlp):
    opts = options(filters=((1, 4), (2, 6), (3, 8)))
    opt_path, weight_path = write_model_files(tmp_path, opts, seed=4)
    model = BiLM.from_allennlp(opt_path, weight_path, backend="reference")
    # Perturb every parameter so the export is not just a copy of the input file.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    out_opt, out_weights = tmp_path / "exported_options.json", tmp_path / "exported.hdf5"
    model.to_allennlp(out_opt, out_weights)
    theirs_bilm = allennlp.load_elmo_bilm(out_opt, out_weights)
    char_ids = batch_to_ids(SENTENCES)
    theirs, their_mask = allennlp_layers(theirs_bilm, char_ids)
    with torch.no_grad():
        ours = model(char_ids)
    assert_same(ours, theirs, their_mask, SENTENCES)


#: How AllenNLP 2.10.1 fails on the exported variations the export warns about: a refusal of models without
#: skip connections, and (max_characters_per_token 20) a shape error: AllenNLP always spells a token in 50 slots.
ALLENNLP_REFUSES = {
    "no-skip": ("ConfigurationError", "only support pretrained biLMs with residual connections"),
    "max-chars-20": ("RuntimeError", "shapes cannot be multiplied"),
}


@pytest.mark.parametrize("name", list(VARIATIONS))
def test_every_exported_variation_runs_in_allennlp_or_the_export_says_it_will_not(tmp_path, allennlp, name):
    """``spacy-elmo export --format allennlp`` of each kind of model: AllenNLP loads the files and gives
    our numbers (1 layer and F == P included), or the export warned that it will not (and it does not)."""
    changes, runs = VARIATIONS[name]
    model = make_model(changes)
    model.save(tmp_path / "native")
    shown = export_allennlp(tmp_path / "native", tmp_path / "allen")
    assert bool(shown) == (not runs)
    opt_path, weight_path = tmp_path / "allen" / "options.json", tmp_path / "allen" / "weights.hdf5"
    char_ids = allennlp.allennlp_batch_to_ids(SENTENCES)
    if not runs:
        error, message = ALLENNLP_REFUSES[name]
        with pytest.raises(Exception, match=message) as info:
            allennlp_layers(allennlp.load_elmo_bilm(opt_path, weight_path), char_ids)
        assert type(info.value).__name__ == error
        return
    theirs, their_mask = allennlp_layers(allennlp.load_elmo_bilm(opt_path, weight_path), char_ids)
    with torch.no_grad():
        ours = model(char_ids)
    assert_same(ours, theirs, their_mask, SENTENCES, where=name)


@pytest.mark.parametrize(
    "variant,error",
    [({"skip": False}, "ConfigurationError"), ({"L": 1}, "KeyError"), ({"filters": ((1, 4), (2, 4))}, "KeyError")],
    ids=["no-skip", "one-layer", "no-proj"],
)
def test_files_allennlp_refuses(tmp_path, allennlp, variant, error):
    """Released-format files we read that AllenNLP 2.10.1 cannot load: use_skip_connections
    false (refused on purpose), n_layers 1 as bilm-tf's training dump writes it (its loader always
    looks under MultiRNNCell/Cell{l}), F == P as bilm-tf writes it (no CNN_proj datasets; its loader
    always reads them). The exporter writes the last two in forms it loads (test above)."""
    opts = options(**variant)
    opt_path, weight_path = write_model_files(tmp_path, opts)
    BiLM.from_allennlp(opt_path, weight_path, backend="reference")  # we read them
    with pytest.raises(Exception) as info:
        allennlp.load_elmo_bilm(opt_path, weight_path)
    assert type(info.value).__name__ == error
