"""Backend selection: works without the extension, says so once, and refuses 'fused' clearly."""

import os
import sys
import warnings

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig, ops
from spacy_elmo.ops import extension


@pytest.fixture
def no_extension(monkeypatch):
    monkeypatch.setattr(ops, "fused_available", lambda: False)
    monkeypatch.setattr(ops, "load_extension", lambda: (None, "simulated: not built"))


def test_auto_falls_back_to_reference(no_extension):
    model = BiLM(BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0))
    assert model.backend == "reference"
    assert model.token_encoder.backend == "reference" and model.lstm.backend == "reference"


def test_auto_with_the_extension_hands_its_modules_auto_fused():
    """'auto' resolved to fused: the modules get ops.AUTO_FUSED (the fused kernels, which on CUDA tensors a
    build without CUDA kernels replaces by the reference), an explicit 'fused' stays 'fused' (which raises there)."""
    if not ops.fused_available():
        pytest.skip("spacy_elmo._C is not built")
    cfg = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    auto, fused = BiLM(cfg), BiLM(cfg, backend="fused")
    assert auto.backend == fused.backend == "fused"
    assert auto.token_encoder.backend == auto.lstm.backend == ops.AUTO_FUSED
    assert fused.token_encoder.backend == fused.lstm.backend == "fused"
    assert ops.implementation(ops.AUTO_FUSED) is ops.implementation("fused")


def test_fused_without_extension_names_the_fix(no_extension):
    with pytest.raises(RuntimeError, match="--no-build-isolation") as err:
        ops.resolve_backend("fused")
    assert "simulated: not built" in str(err.value)


@pytest.mark.parametrize("name", ["fussed", "cuda", "Fused", ""])
def test_ops_refuse_an_unknown_backend_name(name):
    """ops.char_cnn(..., backend=...) and the others ran the reference for any name but "fused" (a
    typo silently ran the slow path): the error resolve_backend gives for it."""
    with pytest.raises(ValueError, match=f"Unknown backend {name!r}"):
        ops.implementation(name)
    x, w, b = torch.randn(2, 3), torch.randn(6, 3), torch.randn(6)
    with pytest.raises(ValueError, match="use 'auto', 'fused' or 'reference'"):
        ops.highway(x, w, b, backend=name)


def test_ops_resolve_auto():
    """backend="auto" is what resolve_backend picks (it ran the reference whatever was built)."""
    assert ops.implementation("auto").__name__ == f"spacy_elmo.ops.{ops.resolve_backend('auto')}"


def test_ops_auto_without_the_extension_is_the_reference(no_extension):
    assert ops.implementation("auto") is ops.reference


def _load_failing(monkeypatch, message):
    """load_extension() afresh while importing spacy_elmo._C raises ImportError(message);
    returns the warnings it gave about the extension and its result."""
    import builtins

    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if fromlist and "_C" in fromlist:
            raise ImportError(message)
        return real_import(name, globals, locals, fromlist, level)

    extension.load_extension.cache_clear()
    monkeypatch.setattr(builtins, "__import__", fake_import)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not extension.fused_available()
            assert not extension.fused_available()
            result = extension.load_extension()
        return [str(w.message) for w in caught if "spacy_elmo._C" in str(w.message)], result
    finally:
        monkeypatch.undo()
        extension.load_extension.cache_clear()


def test_missing_extension_warns_once(monkeypatch):
    messages, _ = _load_failing(monkeypatch, "simulated missing extension")
    assert len(messages) == 1 and "reference path" in messages[0]


def test_extension_built_for_another_torch_says_so_and_how_to_rebuild_an_installed_copy(monkeypatch):
    """An installed spacy-elmo whose torch changed afterwards fails with 'undefined symbol':
    the warning and the 'fused' error name that cause, this torch, and a rebuild command
    that works without a checkout."""
    import torch

    messages, (module, reason) = _load_failing(
        monkeypatch, "/x/spacy_elmo/_C.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104impl3fooEv")
    assert module is None and len(messages) == 1
    monkeypatch.setattr(ops, "fused_available", lambda: False)
    monkeypatch.setattr(ops, "load_extension", lambda: (None, reason))
    with pytest.raises(RuntimeError) as err:
        ops.resolve_backend("fused")
    for text in (messages[0], str(err.value)):
        assert "undefined symbol: _ZN3c104impl3fooEv" in text
        assert f"another torch than the installed {torch.__version__}" in text
        assert "--force-reinstall SOURCE" in text and "-e ." in text


def test_extension_built_for_another_torch_on_macos_says_so(monkeypatch):
    """macOS's loader words the missing symbol of another torch's ABI differently from glibc's."""
    import torch

    _, (module, reason) = _load_failing(
        monkeypatch, "dlopen(/x/spacy_elmo/_C.cpython-311-darwin.so, 0x0002): symbol not found in flat "
        "namespace '__ZN3c104impl3fooEv'")
    assert module is None
    assert f"another torch than the installed {torch.__version__}" in reason


def test_no_extension_on_windows_says_none_is_built_there_and_not_to_rebuild(monkeypatch):
    """setup.py builds no extension on Windows: the warning and the 'fused' error say so and
    point to WSL2, not to a rebuild that would build nothing again."""
    monkeypatch.setattr(extension.sys, "platform", "win32")
    messages, (module, reason) = _load_failing(monkeypatch, "cannot import name '_C' from 'spacy_elmo'")
    assert module is None and len(messages) == 1
    monkeypatch.setattr(extension.sys, "platform", "win32")  # _load_failing undid it
    monkeypatch.setattr(ops, "fused_available", lambda: False)
    monkeypatch.setattr(ops, "load_extension", lambda: (None, reason))
    with pytest.raises(RuntimeError) as err:
        ops.resolve_backend("fused")
    for text in (messages[0], str(err.value)):
        assert "builds none on Windows" in text and "cannot import name '_C'" in text
        assert "WSL2" in text and "--no-build-isolation" not in text


def test_an_install_without_the_extension_says_it_was_not_built_and_how_to_build_it(monkeypatch):
    """No _C file at all (an install with SPACY_ELMO_NO_EXTENSION=1, a checkout never built): the warning
    says it was not built, instead of Python's bare "cannot import name '_C'", and the fix says to build
    with the switch at 0, set in the pasted command (a 1 still exported would build nothing again)."""
    if sys.platform == "win32":
        pytest.skip("Windows has its own message (builds none there)")
    monkeypatch.setattr(extension, "built_file", lambda: None)
    messages, (module, reason) = _load_failing(monkeypatch, "cannot import name '_C' from 'spacy_elmo'")
    assert module is None and len(messages) == 1
    assert "not built" in reason and "has no _C file" in reason and "SPACY_ELMO_NO_EXTENSION=1" in reason
    assert "cannot import name" not in reason
    assert "with SPACY_ELMO_NO_EXTENSION=0" in messages[0] and "`SPACY_ELMO_NO_EXTENSION=0 pip install" in messages[0]
    assert "--no-build-isolation" in messages[0]


def test_built_file_finds_the_extension_file_without_loading_it():
    """The check behind the message above: this checkout's _C where a build put one, None where none."""
    import glob
    import importlib.machinery

    folder = os.path.dirname(os.path.dirname(extension.__file__))
    present = [f for suffix in importlib.machinery.EXTENSION_SUFFIXES
               for f in glob.glob(os.path.join(folder, "_C" + suffix))]
    found = extension.built_file()
    assert (found is None) == (not present)
    if present:
        assert os.path.samefile(found, present[0])


@pytest.mark.parametrize("backend", ["reference", "fused"])
def test_modules_refuse_integer_inputs_alike_on_both_backends(backend):
    """The modules a user calls with activations: BiLstm given an integer x (or state) failed on the
    reference with "Pass every floating argument in torch.int64 (e.g. module.to(torch.int64) ...)" (an
    integer dtype no module can take), the fused backend named the integer x. Both name it now; BiLM
    checks its own inputs (integer character ids, floating contextualize vectors) before either."""
    if backend == "fused" and not ops.fused_available():
        pytest.skip("spacy_elmo._C is not built")
    from spacy_elmo.bilm.lstm import BiLstm
    cfg = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=1)
    lstm, bilm = BiLstm(cfg, backend=backend), BiLM(cfg, backend=backend)
    x, lengths = torch.ones(2, 5, 4, dtype=torch.long), torch.tensor([5, 3])
    with pytest.raises(TypeError, match=r"^The lstm op computes in real floating point, but x is torch\.int64: "):
        lstm(x, x, lengths)
    state = (torch.zeros(2, 2, 2, 4, dtype=torch.long), torch.zeros(2, 2, 2, 6))
    with pytest.raises(TypeError, match=r"^The lstm op computes in real floating point, but h0 is torch\.int64: "):
        lstm(x.float(), x.float(), lengths, state)
    with pytest.raises(TypeError, match="BiLM expects integer character ids"):
        bilm(torch.ones(2, 3, 50))
    with pytest.raises(TypeError, match="contextualize expects floating-point token vectors x"):
        bilm.contextualize(x, torch.tensor([3, 1]))
