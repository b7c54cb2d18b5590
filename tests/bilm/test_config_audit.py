"""Mutation audit of spacy_elmo/bilm/config.py: the cases its other tests left open."""

import errno
import os

import pytest

from spacy_elmo.bilm.config import BiLMConfig, byte_size, read_options_bytes
from spacy_elmo.errors import Errors


def released_options(**cnn_extra):
    """A small options dict in the released layout (as from_allennlp_options reads it)."""
    options = BiLMConfig(projection_dim=4, cell_dim=8, n_layers=1, filters=[(1, 4), (2, 4)]).to_allennlp_options()
    options["char_cnn"].update(cnn_extra)
    return options


@pytest.mark.parametrize("name", ["cell_clip", "proj_clip"])
@pytest.mark.parametrize("value", [0, 0.0])
def test_a_zero_clip_is_refused_in_the_python_api(name, value):
    """0 is "no clipping" in an options.json (none_or_zero), but BiLMConfig's no clipping is None: a clip of 0
    would clamp every value to 0."""
    with pytest.raises(ValueError, match=name):
        BiLMConfig(**{name: value})


def test_bilm_tf_training_n_characters_261_is_taken_and_written_as_262():
    """261 (bilm-tf training options) and 262 describe the same 261 embedding rows: both are taken, and the
    released layout always says 262."""
    assert BiLMConfig(n_characters=261).n_characters == 261
    assert BiLMConfig(n_characters=261).to_allennlp_options()["char_cnn"]["n_characters"] == 262
    assert BiLMConfig.from_allennlp_options(released_options(n_characters=261)).n_characters == 261


def test_options_without_n_characters_mean_262():
    options = released_options()
    del options["char_cnn"]["n_characters"]
    assert BiLMConfig.from_allennlp_options(options).n_characters == 262


def test_a_filter_as_wide_as_a_token_is_taken_one_wider_is_not():
    assert BiLMConfig(max_characters_per_token=7, filters=[(7, 8)]).filters == [(7, 8)]
    with pytest.raises(ValueError, match="filters"):
        BiLMConfig(max_characters_per_token=7, filters=[(8, 8)])


def test_unknown_fields_are_named_in_sorted_order():
    names = ["zeta", "alpha", "mid", "beta", "omega"]
    with pytest.raises(ValueError) as info:
        BiLMConfig.from_dict({name: 1 for name in names})
    assert info.value.names == "'alpha', 'beta', 'mid', 'omega', 'zeta'"  # type: ignore[attr-defined]


def test_byte_size_writes_10_to_the_40_eib_as_a_big_number():
    """From exactly 10**40 EiB, the EiB as big_number writes them (float would print 41 digits of noise)."""
    assert byte_size((10**40) << 60) == "1.00e40 EiB"
    assert byte_size((10**40 - 1) << 60).endswith(" EiB") and "e" not in byte_size((10**40 - 1) << 60)


def test_reading_options_through_a_loop_of_links_is_a_missing_file(tmp_path):
    """ELOOP: no file to read (the caller says missing), not "unreadable" (a permission to fix)."""
    os.symlink(tmp_path / "b.json", tmp_path / "a.json")
    os.symlink(tmp_path / "a.json", tmp_path / "b.json")
    with pytest.raises(FileNotFoundError) as info:
        read_options_bytes(tmp_path / "a.json")
    assert info.value.errno == errno.ELOOP


def test_n_output_layers_is_the_token_layer_and_one_per_lstm_layer():
    assert BiLMConfig(n_layers=1).n_output_layers == 2 and BiLMConfig(n_layers=3).n_output_layers == 4


def test_an_options_file_removed_before_it_is_read_is_said_missing(tmp_path, monkeypatch):
    """Removed between the exists() check and the read: the same message as a path that never existed."""
    import spacy_elmo.bilm.config as config_module

    path = tmp_path / "options.json"
    path.write_text("{}")

    def removed(p):
        os.remove(p)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(p))

    monkeypatch.setattr(config_module, "read_options_bytes", removed)
    with pytest.raises(FileNotFoundError) as info:
        BiLMConfig.from_allennlp_options(path)
    assert str(info.value) == Errors.E_OPTIONS_FILE_MISSING.format(path=path)
