"""Model directories with a softmax and vocab.txt: round trips through export, and clear errors on bad files."""

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.cli import app
from spacy_elmo.training.modelio import SOFTMAX_FILE, load_pretrained, save_pretrained
from spacy_elmo.training.softmax import SoftmaxLayer
from spacy_elmo.training.vocab import Vocab

runner = CliRunner()
CONFIG = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 3), (2, 3)], n_highway=1)
TOKENS = ["<S>", "</S>", "<UNK>", "river", "bank"]


def pretrained(directory, dtype=None, seed=0):
    torch.manual_seed(seed)
    bilm = BiLM(CONFIG, backend="reference")
    softmax = SoftmaxLayer(len(TOKENS), CONFIG.projection_dim)
    with torch.no_grad():
        softmax.weight.normal_()
        softmax.bias.normal_()
    save_pretrained(directory, bilm, softmax, Vocab(TOKENS), {"seed": seed}, dtype=dtype)
    return directory


def hdf5_datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, (o.dtype, o[...])) if isinstance(o, h5py.Dataset) else None)
    return out


def export(src, dest, fmt):
    result = runner.invoke(app, ["export", str(src), str(dest), "--format", fmt])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_native_allennlp_native_and_back_are_bitwise_equal(tmp_path, dtype):
    native = pretrained(tmp_path / "n0", dtype=dtype)
    export(native, tmp_path / "a1", "allennlp")
    export(tmp_path / "a1", tmp_path / "n2", "native")
    export(tmp_path / "n2", tmp_path / "a3", "allennlp")
    stored = load_file(str(native / "model.safetensors"))
    again = load_file(str(tmp_path / "n2" / "model.safetensors"))
    assert sorted(stored) == sorted(again)
    for name, value in stored.items():  # float16 values are exact in float32
        assert again[name].dtype == torch.float32 and torch.equal(again[name], value.float()), name
    first, last = hdf5_datasets(tmp_path / "a1" / "weights.hdf5"), hdf5_datasets(tmp_path / "a3" / "weights.hdf5")
    assert sorted(first) == sorted(last)
    for name, (dtype_, value) in first.items():
        assert dtype_ == last[name][0] == np.float32 and np.array_equal(value, last[name][1]), name
    assert (tmp_path / "a1" / "options.json").read_bytes() == (tmp_path / "a3" / "options.json").read_bytes()
    for directory in (tmp_path / "a1", tmp_path / "a3"):
        assert (directory / "vocab.txt").read_text() == "".join(t + "\n" for t in TOKENS)
        softmax = load_file(str(directory / SOFTMAX_FILE))
        assert torch.equal(softmax["softmax.weight"], stored["softmax.weight"].float())

    ids = batch_to_ids([["river", "bank"], ["bank"]])
    outputs = []
    for directory in (native, tmp_path / "a1", tmp_path / "n2", tmp_path / "a3"):
        bilm, softmax, vocab, _ = load_pretrained(directory, backend="reference")
        assert vocab.types == TOKENS and torch.equal(softmax.bias, stored["softmax.bias"].float())
        with torch.no_grad():
            outputs.append(bilm.eval()(ids).activations)
    for other in outputs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(outputs[0], other))


@pytest.mark.parametrize(
    "data,match",
    [
        (b"<S>\n</S>\n<UNK>\nriver\n\xff\xfe\n", "is not UTF-8 \\(line 5:"),
        (b"<S>\n</S>\n<UNK>\nriver\nriver\n", "lists 'river' twice \\(lines 4 and 5\\)"),
        (b"<S>\n</S>\n<UNK>\n<S>\nbank\n", "lists '<S>' twice \\(lines 1 and 4\\)"),
    ],
)
def test_bad_vocab_files_are_clear_errors(tmp_path, data, match):
    """A non-UTF-8 vocab.txt raised a bare UnicodeDecodeError; duplicates loaded (one softmax row never a target)."""
    directory = pretrained(tmp_path / "m")
    (directory / "vocab.txt").write_bytes(data)
    with pytest.raises(ValueError, match=match) as err:
        load_pretrained(directory)
    assert str(directory) in str(err.value)


def test_vocab_that_is_a_directory_is_a_clear_error(tmp_path):
    directory = pretrained(tmp_path / "m")
    (directory / "vocab.txt").unlink()
    (directory / "vocab.txt").mkdir()
    with pytest.raises(ValueError, match="vocab.txt could not be read"):
        load_pretrained(directory)


def allennlp_with_softmax(tmp_path, weight, bias):
    directory = tmp_path / "a"
    export(pretrained(tmp_path / "m"), directory, "allennlp")
    tensors = {"softmax.weight": weight, "softmax.bias": bias}
    save_file({k: v for k, v in tensors.items() if v is not None}, str(directory / SOFTMAX_FILE))
    return directory


@pytest.mark.parametrize(
    "weight,bias,match",
    [
        (torch.zeros(5, 4), None, "has 'softmax.weight' but not 'softmax.bias'"),
        (None, torch.zeros(5), "has 'softmax.bias' but not 'softmax.weight'"),
        (torch.zeros(5, 7), torch.zeros(5), "weight \\(5, 7\\) and bias \\(5,\\), but this biLM \\(projection_dim 4\\)"),
        (torch.zeros(5, 4), torch.zeros(3), "weight \\(5, 4\\) and bias \\(3,\\)"),
        (torch.zeros(5, 4, dtype=torch.int32), torch.zeros(5), "'softmax.weight' in .* holds torch.int32 values"),
        (torch.zeros(5, 4), torch.tensor([0.0, 1, float("nan"), 0, 0]), "'softmax.bias' holds 1 NaN"),
    ],
)
def test_bad_softmax_beside_allennlp_weights_is_a_clear_error(tmp_path, weight, bias, match):
    """Half a softmax was dropped silently, a (V, 7) softmax for a P = 4 biLM loaded (and failed in the first
    matmul), and a bias of the wrong length raised a bare RuntimeError from copy_."""
    directory = allennlp_with_softmax(tmp_path, weight, bias)
    with pytest.raises(ValueError, match=match) as err:
        load_pretrained(directory)
    assert str(directory / SOFTMAX_FILE) in str(err.value)


def test_bad_native_softmax_is_a_clear_error(tmp_path):
    directory = pretrained(tmp_path / "m")
    tensors = load_file(str(directory / "model.safetensors"))
    tensors["softmax.weight"] = torch.zeros(5, 7)
    save_file(tensors, str(directory / "model.safetensors"))
    with pytest.raises(ValueError, match="weight \\(5, 7\\) and bias \\(5,\\), but this biLM \\(projection_dim 4\\)"):
        load_pretrained(directory)


def test_export_of_bad_inputs_exits_with_the_message(tmp_path):
    native = pretrained(tmp_path / "m")
    export(native, tmp_path / "a", "allennlp")
    for src, message in [
        (tmp_path / "nowhere", "does not exist"),
        (tmp_path / "a" / "weights.hdf5", "is a file, but a model is a directory"),
    ]:
        result = runner.invoke(app, ["export", str(src), str(tmp_path / "out"), "--format", "native"])
        assert result.exit_code == 1 and message in result.output, result.output
    for name in ("options.json", "weights.hdf5"):  # the AllenNLP files beside the native model
        (native / name).write_bytes((tmp_path / "a" / name).read_bytes())
    result = runner.invoke(app, ["export", str(native), str(tmp_path / "out"), "--format", "native"])
    assert result.exit_code == 1 and "holds two models" in result.output, result.output
    assert not (tmp_path / "out").exists()

