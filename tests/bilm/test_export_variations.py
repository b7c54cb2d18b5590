"""Every kind of valid BiLMConfig through the model's three ways out and back in.

For each variation (tiny sizes): ``BiLM.save`` / ``BiLM.load`` gives bit-identical outputs;
``spacy-elmo export --format allennlp`` writes files that ``BiLM.load`` reads back to
bit-identical outputs, and that the independent NumPy oracle reads to the same numbers under
both readers' rules (bilm-tf's, and AllenNLP's: CNN_proj always, MultiRNNCell/Cell{l} always,
negated carry gate, reordered gates). AllenNLP itself runs the same files in
test_allennlp_parity.py. ``ALLENNLP_RUNS`` False: the file is a valid bilm-tf file that
AllenNLP will not run, and the export warns so. ``BILM_TF``: what bilm-tf's model.py does with the
exported file when that is not this model (the oracle's ``"bilm-tf"`` convention builds its graph), and
the export warns so.
"""

import json
import warnings

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.cli import app
from tests.bilm.oracle import NumpyElmo

ATOL = 1e-5
SENTENCES = [["The", "bank", "of", "the", "river", "."], ["밥", "먹었어요", "?"], [], ["x" * 30, "a"]]
BASE = dict(projection_dim=6, cell_dim=10, filters=[(1, 3), (2, 4), (3, 5)], char_embedding_dim=4)

# name: (changes to BASE, AllenNLP runs the exported file)
VARIATIONS = {
    "default": ({}, True),
    "one-layer": ({"n_layers": 1}, True),
    "three-layers": ({"n_layers": 3}, True),
    "no-skip": ({"use_skip_connections": False}, False),
    "f-equals-p": ({"filters": [(1, 3), (2, 3)]}, True),
    "f-below-p": ({"filters": [(1, 2), (2, 2)]}, True),
    "p-equals-c": ({"cell_dim": 6}, True),
    "p-above-c": ({"cell_dim": 4}, True),
    "no-highway": ({"n_highway": 0}, True),
    "two-highway": ({"n_highway": 2}, True),
    "no-clips": ({"cell_clip": None, "proj_clip": None}, True),
    "cell-clip-only": ({"proj_clip": None, "cell_clip": 0.5}, True),
    "tanh": ({"activation": "tanh"}, True),
    "one-filter": ({"filters": [(3, 7)]}, True),
    "max-chars-20": ({"max_characters_per_token": 20}, False),
    "one-layer-f-equals-p-no-highway": ({"n_layers": 1, "filters": [(1, 3), (2, 3)], "n_highway": 0}, True),
}

# name: what bilm-tf does with the exported file (an exception it raises, or "computes another model")
BILM_TF = {"f-below-p": AssertionError, "p-equals-c": "computes another model", "p-above-c": ValueError}


def make_model(changes, backend="reference"):
    """A model of BASE + ``changes`` with every parameter random (nothing left at its zero init)."""
    torch.manual_seed(0)
    model = BiLM(BiLMConfig(**{**BASE, **changes}), backend=backend)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    return model


def outputs(model, sentences=SENTENCES):
    with torch.no_grad():
        return model(batch_to_ids(sentences, max_characters_per_token=model.config.max_characters_per_token))


def assert_identical(a, b):
    assert torch.equal(a.mask, b.mask)
    assert len(a.activations) == len(b.activations)
    for layer, (x, y) in enumerate(zip(a.activations, b.activations)):
        assert torch.equal(x, y), f"layer {layer}"


def export_allennlp(model_dir, out, about="AllenNLP will not run"):
    """``spacy-elmo export MODEL OUT --format allennlp``: the warnings it gave that say ``about``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["export", str(model_dir), str(out), "--format", "allennlp"])
    assert result.exit_code == 0, result.output
    return [str(w.message) for w in caught if about in str(w.message)]


@pytest.mark.parametrize("name", list(VARIATIONS))
def test_the_export_warns_when_bilm_tf_would_not_run_the_file_as_this_model(tmp_path, name):
    """bilm-tf builds LSTM cells with a projection only when projection_dim < dim, and asserts
    n_filters > projection_dim when they differ: with P == C it read the exported file without error
    and computed h = o * tanh(c) (W_P_0 unread), with P > C or F < P it failed, and the export said
    nothing. The bilm-tf oracle gives this model's numbers exactly when the export does not warn."""
    model = make_model(VARIATIONS[name][0])
    model.save(tmp_path / "native")
    shown = export_allennlp(tmp_path / "native", tmp_path / "allen", about="but bilm-tf")
    assert len(shown) == (1 if name in BILM_TF else 0), shown
    opts = json.loads((tmp_path / "allen" / "options.json").read_text())
    oracle = NumpyElmo(opts, tmp_path / "allen" / "weights.hdf5", convention="bilm-tf")
    expected = outputs(model).activations[-1]
    if BILM_TF.get(name, "") in (AssertionError, ValueError):
        assert "refuses to load it" in shown[0] or "builds no graph" in shown[0]
        with pytest.raises(BILM_TF[name]):
            oracle.batch(SENTENCES)
        return
    top = [o[-1] for o in oracle.batch(SENTENCES)]
    same = all(np.allclose(expected[i, : len(s)].double().numpy(), top[i], atol=ATOL, rtol=0)
               for i, s in enumerate(SENTENCES))
    assert same == (name not in BILM_TF)
    if name in BILM_TF:
        assert "computes another model" in shown[0] and "projection_dim below the LSTM's dim" in shown[0]


@pytest.mark.parametrize("name", list(VARIATIONS))
def test_save_load_and_allennlp_export_round_trips(tmp_path, name):
    changes, allennlp_runs = VARIATIONS[name]
    model = make_model(changes)
    expected = outputs(model)
    assert len(expected.activations) == model.config.n_layers + 1

    model.save(tmp_path / "native")
    assert_identical(outputs(BiLM.load(tmp_path / "native", backend="reference")), expected)

    shown = export_allennlp(tmp_path / "native", tmp_path / "allen")
    assert len(shown) == (0 if allennlp_runs else 1), shown
    assert all(str(tmp_path / "allen" / "weights.hdf5") in message for message in shown)
    assert sorted(p.name for p in (tmp_path / "allen").iterdir()) == ["options.json", "weights.hdf5"]
    assert_identical(outputs(BiLM.load(tmp_path / "allen", backend="reference")), expected)

    opts = json.loads((tmp_path / "allen" / "options.json").read_text())
    for convention in ("tf", "allennlp") if allennlp_runs else ("tf",):
        oracle = NumpyElmo(opts, tmp_path / "allen" / "weights.hdf5", convention=convention).batch(SENTENCES)
        for i, sent in enumerate(SENTENCES):
            for layer, act in enumerate(expected.activations):
                np.testing.assert_allclose(act[i, : len(sent)].double().numpy(), oracle[i][layer], atol=ATOL, rtol=0,
                                           err_msg=f"{convention} row {i} layer {layer}")
