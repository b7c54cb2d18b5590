"""Model directories with a softmax and vocab.txt: round trips through export, and clear errors on bad files."""

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.cli import app
from spacy_elmo.training.modelio import SOFTMAX_FILE, load_pretrained, save_pretrained
from spacy_elmo.training.softmax import SoftmaxLayer
from spacy_elmo.training.vocab import Vocab
from tests.cli_text import mixed_runner as runner

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
    """Named a directory where the file belongs (it was 'could not be read', with chmod as the fix)."""
    directory = pretrained(tmp_path / "m")
    (directory / "vocab.txt").unlink()
    (directory / "vocab.txt").mkdir()
    with pytest.raises(ValueError, match="vocab.txt is a directory, but the model's vocab.txt is a file") as err:
        load_pretrained(directory)
    assert "chmod" not in str(err.value)


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



def model_dirs(tmp_path):
    """name -> (model directory, whether it has a softmax): native and AllenNLP, with and without one."""
    native = pretrained(tmp_path / "native")
    BiLM(CONFIG, backend="reference").save(tmp_path / "native_bare")  # the biLM alone
    export(native, tmp_path / "allennlp", "allennlp")
    export(native, tmp_path / "allennlp_bare", "allennlp")
    (tmp_path / "allennlp_bare" / SOFTMAX_FILE).unlink()
    return {"native": (native, True), "native without softmax": (tmp_path / "native_bare", False),
            "allennlp": (tmp_path / "allennlp", True), "allennlp without softmax": (tmp_path / "allennlp_bare", False)}


def refuse_weight_loading(monkeypatch):
    """Make every read of tensors (safetensors, hdf5) or of a whole model fail the test."""
    from spacy_elmo.bilm import allennlp_io, native_io
    from spacy_elmo.training import modelio

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(native_io, "load_file", refuse)
    monkeypatch.setattr(allennlp_io.h5py, "File", refuse)
    monkeypatch.setattr(modelio, "load_pretrained", refuse)


def test_has_softmax_says_what_load_pretrained_finds_without_loading_weights(tmp_path, monkeypatch):
    from spacy_elmo.training.modelio import has_softmax

    dirs = model_dirs(tmp_path)
    for directory, expected in dirs.values():
        assert (load_pretrained(directory, backend="reference")[1] is not None) is expected  # the oracle: a full load
    half = allennlp_with_softmax(tmp_path / "half", torch.zeros(5, 4), None)
    with pytest.raises(ValueError, match="has 'softmax.weight' but not 'softmax.bias'"):
        load_pretrained(half)
    refuse_weight_loading(monkeypatch)
    for directory, expected in [*dirs.values(), ("default", True)]:
        assert has_softmax(directory) is expected, directory
    with pytest.raises(ValueError, match="has 'softmax.weight' but not 'softmax.bias'"):  # the same refusal
        has_softmax(half)


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors"])
def test_has_softmax_refuses_a_native_directory_load_pretrained_refuses(tmp_path, missing):
    """A native directory without its config.json or weights is no model: has_softmax refuses it
    with load_pretrained's error (it answered from the header without a config.json, and called a
    missing weights file damaged)."""
    from spacy_elmo.training.modelio import has_softmax

    native = pretrained(tmp_path / "native")
    (native / missing).unlink()
    with pytest.raises(FileNotFoundError, match=f"no {missing}") as loading:
        load_pretrained(native, backend="reference")
    with pytest.raises(FileNotFoundError) as checking:
        has_softmax(native)
    assert str(checking.value) == str(loading.value)


@pytest.mark.parametrize("name", ["native", "native without softmax", "allennlp", "allennlp without softmax"])
def test_resume_leaving_out_init_names_how_the_vocabulary_was_made_without_loading_it(tmp_path, monkeypatch, name):
    """The refusal of a --resume that leaves out the --init of a run whose vocabulary came from its corpus
    says whether --new-vocab did that or the model has no softmax; it loaded the whole model (weights and
    all: about 1 s and 180 MB for the bundled default) to tell, where the header of a file says it."""
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.checkpoint import check_settings

    directory, with_softmax = model_dirs(tmp_path)[name]
    init = str(directory)
    if with_softmax:
        started, resume_with = f"it was started with --init {init} --new-vocab", f"--init {init} --new-vocab"
    else:
        started = f"it was started from --init {init}, which has no softmax, so a new vocabulary was built from its corpus"
        resume_with = f"--init {init}"
    refuse_weight_loading(monkeypatch)
    with pytest.raises(ValueError) as err:
        check_settings({"init": init, "new_vocab": True}, {"init": None}, "out")
    assert str(err.value) == Errors.E_RESUME_INIT_MISSING.format(
        path="out", init=init, started=started, resume_with=resume_with, why=Errors.E_RESUME_INIT_MISSING_RECORD.format(init=init))


def test_a_provenance_that_is_no_object_records_no_reading(tmp_path):
    """BiLM.load takes a config.json whose "provenance" is a list (hand-edited, another tool's); pretrain --init
    asked it for its reading with .get and ended in an AttributeError traceback."""
    import json

    from spacy_elmo.training.modelio import recorded_reading

    BiLM(BiLMConfig.preset("small")).save(tmp_path / "m", provenance={"reading": "sentences"})
    assert recorded_reading(tmp_path / "m") == "sentences"
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for odd in (["sentences"], "sentences", 3):
        (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "provenance": odd}))
        assert isinstance(BiLM.load(tmp_path / "m"), BiLM)
        assert recorded_reading(tmp_path / "m") is None


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_softmax_is_refused_when_written_beside_allennlp_weights(tmp_path, value):
    """The softmax export writes beside AllenNLP weights refuses NaN/inf as BiLM.save does, and writes nothing."""
    from spacy_elmo.training.modelio import write_softmax

    softmax = SoftmaxLayer(5, 8)
    with torch.no_grad():
        softmax.weight[1, 2] = value
    with pytest.raises(ValueError, match=r"Cannot save 'softmax\.weight': it holds 1 NaN or infinite value"):
        write_softmax(tmp_path / SOFTMAX_FILE, softmax)
    assert not (tmp_path / SOFTMAX_FILE).exists()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_the_softmax_beside_allennlp_weights_is_written_as_float32(tmp_path, dtype):
    """AllenNLP/bilm-tf weights are float32, and so is the softmax written beside them, whatever the model's
    dtype; a float64 value beyond float32's range is refused (it would be inf in the file), nothing written."""
    from spacy_elmo.training.modelio import write_softmax

    softmax = SoftmaxLayer(5, 8).to(dtype)
    write_softmax(tmp_path / SOFTMAX_FILE, softmax)
    written = load_file(str(tmp_path / SOFTMAX_FILE))
    assert {name: t.dtype for name, t in written.items()} == {"softmax.weight": torch.float32,
                                                            "softmax.bias": torch.float32}
    torch.testing.assert_close(written["softmax.weight"], softmax.weight.detach().float(), rtol=0, atol=0)
    if dtype == torch.float64:
        (tmp_path / SOFTMAX_FILE).unlink()
        with torch.no_grad():
            softmax.bias[3] = 1e39
        with pytest.raises(ValueError, match=r"Cannot save 'softmax\.bias' as torch\.float32: its values reach "
                                             r"1e\+39, beyond torch\.float32's range.* AllenNLP/bilm-tf weights are "
                                             r"float32"):
            write_softmax(tmp_path / SOFTMAX_FILE, softmax)
        assert not (tmp_path / SOFTMAX_FILE).exists()


@pytest.mark.parametrize("n_tokens", [len(TOKENS) - 1, len(TOKENS) + 1])
def test_load_pretrained_refuses_a_vocabulary_of_another_length_than_its_softmax(tmp_path, n_tokens):
    """vocab.txt with fewer or more lines than the softmax has rows: ids would name other words (or none)."""
    model = pretrained(tmp_path / "m")
    tokens = TOKENS[:3] + [f"w{i}" for i in range(n_tokens - 3)]
    (model / "vocab.txt").write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    with pytest.raises(ValueError, match=f"has {n_tokens} entries but the softmax has {len(TOKENS)} rows"):
        load_pretrained(model, backend="reference")


@pytest.mark.parametrize("odd", [None, ["sentences"], "sentences", 3])
def test_load_pretrained_gives_a_provenance_that_is_no_object_as_empty(tmp_path, odd):
    """A config.json whose "provenance" is no object (hand-edited, another tool's) came back from load_pretrained
    as it was: evaluate then ended in "AttributeError: 'list' object has no attribute 'get'". BiLM.load and
    recorded_reading take it as recording nothing; load_pretrained now too."""
    import json

    model = pretrained(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "provenance": odd}))
    assert load_pretrained(model, backend="reference")[3] == {}


@pytest.mark.parametrize("name", ["native", "native without softmax", "allennlp", "allennlp without softmax"])
def test_check_init_model_passes_a_loadable_model_from_its_headers_alone(tmp_path, monkeypatch, name):
    """pretrain's early --init check passes every model load_pretrained loads, reading no weights; a model without a
    softmax needs no vocab.txt (its vocabulary is built from the corpus), so none is asked for."""
    from spacy_elmo.training.modelio import check_init_model

    directory, with_softmax = model_dirs(tmp_path)[name]
    if not with_softmax:
        (directory / "vocab.txt").unlink(missing_ok=True)
        assert load_pretrained(directory, backend="reference")[2] is None
    refuse_weight_loading(monkeypatch)
    assert check_init_model(directory) is None


@pytest.mark.parametrize("name", ["native", "allennlp"])
@pytest.mark.parametrize("vocab", ["missing", "short"])
def test_check_init_model_refuses_the_vocabulary_load_pretrained_refuses(tmp_path, monkeypatch, name, vocab):
    """With a softmax, a vocab.txt that is missing or not one token per softmax row is refused before the run, with
    load_pretrained's very error."""
    from spacy_elmo.training.modelio import check_init_model

    directory = model_dirs(tmp_path)[name][0]
    if vocab == "missing":
        (directory / "vocab.txt").unlink()
    else:
        (directory / "vocab.txt").write_text("".join(f"{token}\n" for token in TOKENS[:-1]), encoding="utf-8")
    with pytest.raises((OSError, ValueError)) as loading:
        load_pretrained(directory, backend="reference")
    refuse_weight_loading(monkeypatch)
    with pytest.raises(type(loading.value)) as checking:
        check_init_model(directory)
    assert str(checking.value) == str(loading.value)
    assert ("vocab.txt" in str(checking.value)) and (vocab == "missing" or "has 4 entries but the softmax has 5 rows"
                                                     in str(checking.value))


def test_check_init_model_leaves_a_softmax_of_another_shape_to_load_pretrained(tmp_path, monkeypatch):
    """A softmax.weight that is no matrix has no row count to check vocab.txt against: the check passes it, and
    load_pretrained refuses its shape (with the weights read) rather than a vocabulary of "3 rows"."""
    from spacy_elmo.training.modelio import check_init_model

    directory = allennlp_with_softmax(tmp_path, torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"weight \(3,\) and bias \(3,\)"):
        load_pretrained(directory, backend="reference")
    refuse_weight_loading(monkeypatch)
    assert check_init_model(directory) is None


def test_check_init_model_advises_init_a_directory_for_a_file(tmp_path):
    """A model's file given as --init is refused advising --init its directory, not BiLM's Python loaders."""
    from spacy_elmo.bilm.native_io import ModelPathIsFile
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.modelio import check_init_model

    directory = model_dirs(tmp_path)["allennlp"][0]
    with pytest.raises(ModelPathIsFile) as err:
        check_init_model(directory / "weights.hdf5")
    assert str(err.value).endswith(Errors.E_MODEL_PATH_FIX_INIT), str(err.value)
    assert err.value.__suppress_context__ and err.value.__cause__ is None


def test_check_init_model_says_what_a_directory_without_a_model_holds(tmp_path):
    """A directory that is no model is refused with the commands' advice (which commands write one) and what it
    holds, not BiLM.load's (BiLM.save, BiLM.from_allennlp)."""
    from spacy_elmo.bilm.native_io import NativeDirMissing
    from spacy_elmo.errors import Errors
    from spacy_elmo.training.modelio import check_init_model

    directory = tmp_path / "notes"
    directory.mkdir()
    (directory / "readme.md").write_text("x")
    with pytest.raises(NativeDirMissing) as err:
        check_init_model(directory)
    message = str(err.value)
    assert Errors.E_NATIVE_DIR_FIX_CLI in message and f"{directory} holds readme.md." in message, message
    assert Errors.E_NATIVE_DIR_FIX_LOAD not in message
    assert err.value.__suppress_context__ and err.value.__cause__ is None


def test_check_init_model_reads_the_bundled_default(monkeypatch):
    """--init default names the bundled model, as load_pretrained takes it (model_path), not a directory "default"."""
    from spacy_elmo.training.modelio import check_init_model

    refuse_weight_loading(monkeypatch)
    assert check_init_model("default") is None
