"""Backend selection: works without the extension, says so once, and refuses 'fused' clearly."""

import warnings

import pytest

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


def test_fused_without_extension_names_the_fix(no_extension):
    with pytest.raises(RuntimeError, match="--no-build-isolation") as err:
        ops.resolve_backend("fused")
    assert "simulated: not built" in str(err.value)


def test_missing_extension_warns_once(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if fromlist and "_C" in fromlist:
            raise ImportError("simulated missing extension")
        return real_import(name, globals, locals, fromlist, level)

    extension.load_extension.cache_clear()
    monkeypatch.setattr(builtins, "__import__", fake_import)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not extension.fused_available()
            assert not extension.fused_available()
        messages = [str(w.message) for w in caught if "spacy_elmo._C" in str(w.message)]
        assert len(messages) == 1 and "reference path" in messages[0]
    finally:
        monkeypatch.undo()
        extension.load_extension.cache_clear()
