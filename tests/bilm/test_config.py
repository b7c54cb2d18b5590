import json
import re
import reprlib

import numpy as np
import pytest

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.bilm.config import MOST_TENSOR_BYTES, InvalidConfigValue
from spacy_elmo.errors import Errors
from tests.backends import BACKENDS
from tests.bilm.oracle import options

TINY = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)


@pytest.mark.parametrize(
    "name,C,P,highway,params",
    [("small", 1024, 128, 1, 13_593_296), ("medium", 2048, 256, 1, 28_027_728), ("original", 4096, 512, 2, 93_600_848)],
)
def test_presets_have_the_released_sizes(name, C, P, highway, params):
    config = BiLMConfig.preset(name)
    assert (config.cell_dim, config.projection_dim, config.n_highway) == (C, P, highway)
    assert config.n_filters == 2048 and config.output_dim == 2 * P
    if name == "small":
        # The released parameter count of the hdf5 file (the table has 261 rows there too).
        model = BiLM(config, backend="reference")
        assert sum(p.numel() for p in model.parameters()) == params


def test_options_round_trip_and_defaults():
    opts = options(clip=None)
    config = BiLMConfig.from_allennlp_options(opts)
    assert config.cell_clip is None and config.proj_clip is None
    assert BiLMConfig.from_allennlp_options(config.to_allennlp_options()) == config
    assert BiLMConfig.from_dict(config.to_dict()) == config
    del opts["char_cnn"]["n_highway"]
    opts["lstm"]["unknown_training_key"] = 1
    assert BiLMConfig.from_allennlp_options(opts).n_highway == 0


@pytest.mark.parametrize("section,key,none", [("lstm", "cell_clip", None), ("lstm", "proj_clip", None),
                                              ("char_cnn", "n_highway", 0)])
def test_only_null_a_missing_key_or_zero_mean_none_in_options(section, key, none):
    """`lstm.get("cell_clip") or None` and `cnn.get("n_highway") or 0` took false, "", [] and {} for no clipping /
    no highway layers, silently. Only a missing key, null or the number 0 say none; anything else is refused by
    its key."""
    for value in (None, 0, 0.0, "missing"):
        opts = options()
        if value == "missing":
            del opts[section][key]
        else:
            opts[section][key] = value
        assert getattr(BiLMConfig.from_allennlp_options(opts), key) == none
    for value in (False, True, "", [], {}, "0"):
        opts = options()
        opts[section][key] = value
        with pytest.raises(ValueError, match=rf"have an invalid {section}\.{key} \(BiLMConfig\.{key}\): {key} must be "
                                             rf".*; found {re.escape(repr(value))}\."):
            BiLMConfig.from_allennlp_options(opts)


@pytest.mark.parametrize("value", [0, -1, 1, 2, True, 50.0, "50", None])
def test_max_characters_per_token_is_refused_with_one_message(value):
    """0 said "must be a positive integer", then 1 or 2 "at least 3": two errors to fix one field. Any bad value is
    now the one message, a non-integer or a bool named as found."""
    with pytest.raises(InvalidConfigValue, match=rf"^max_characters_per_token must be a whole number of at least 3 "
                                                 rf"\(.*\); found {re.escape(repr(value))}\.$") as err:
        BiLMConfig(max_characters_per_token=value)
    assert err.value.field == "max_characters_per_token"


def test_numpy_integers_are_stored_as_ints():
    """A NumPy integer is a whole number (is_int), kept as a Python int so that the config stays JSON,
    whether given to the constructor or set before the biLM is built (which validates it)."""
    as_ints = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    config = BiLMConfig(projection_dim=np.int64(4), cell_dim=np.int32(6), filters=[(np.int64(1), 2), (2, np.int64(2))],
                        n_highway=np.int64(0))
    assert config == as_ints and json.loads(json.dumps(config.to_dict())) == as_ints.to_dict()
    config.cell_dim = np.int64(6)
    assert BiLM(config).config.cell_dim == 6 and type(config.cell_dim) is int
    with pytest.raises(ValueError, match="n_highway"):
        BiLMConfig(n_highway=True)


def test_clips_take_any_real_number_and_are_stored_as_floats():
    """np.float32(3.0) was refused ("must be a finite positive number") while np.float64 (a float subclass) and
    np.int64 passed, each stored as given; now any real number but a bool, a NumPy one stored as a float (JSON).
    A Python int stays an int: the released options.json has "cell_clip": 3, and the config's JSON is part of
    embed's model fingerprint (turned into 3.0, it refused to resume parts written before)."""
    for value in (np.float32(3.0), np.float64(3.0), np.int64(3), 3, 3.0, np.float16(3.0)):
        config = BiLMConfig(cell_clip=value, proj_clip=value)
        assert type(config.cell_clip) in (int, float) and type(config.proj_clip) in (int, float) and config.cell_clip == 3.0
        assert json.loads(json.dumps(config.to_dict()))["cell_clip"] == 3.0 and config == BiLMConfig()
    assert json.dumps(BiLMConfig(cell_clip=3, proj_clip=3).to_dict()["cell_clip"]) == "3"
    config = BiLMConfig()
    config.proj_clip = np.float32(2.5)  # set after validation: the biLM validates it
    assert BiLM(config).config.proj_clip == 2.5 and type(config.proj_clip) is float
    for bad in (True, np.float32("nan"), np.float32(-1.0), "3.0"):
        with pytest.raises(ValueError, match="cell_clip must be a finite positive number"):
            BiLMConfig(cell_clip=bad)


@pytest.mark.parametrize("sign, digits", [(1, 400), (-1, 400), (1, 5000)])
def test_a_clip_past_a_floats_range_is_a_bad_clip(sign, digits):
    """{"cell_clip": 10**400} (JSON holds such an int) raised OverflowError from math.isfinite, a traceback out of
    pretrain; 10**5000's repr, past Python's 4,300 digits, a ValueError of its own. Each is E_BAD_CLIP, its value
    shortened."""
    with pytest.raises(InvalidConfigValue, match=r"cell_clip must be a finite positive number, or null for no "
                                                 r"clipping; found -?1000+\.\.\.0+\.$") as err:
        BiLMConfig.from_dict({"cell_clip": sign * 10**digits})
    assert err.value.field == "cell_clip" and len(str(err.value)) < 200


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"activation": "gelu"}, "activation"),
        ({"filters": []}, "filters"),
        ({"filters": [(60, 4)]}, "wider than"),
        ({"n_characters": 300}, "n_characters"),
        # "n_characters='262' is not supported ... Use 261 or 262.": the type said, not only the value
        ({"n_characters": "262"}, r"^n_characters must be 261 or 262, a whole number \(.*\); found '262' \(a string\), "
                                  r"not a number\.$"),
        # was accepted, saved as 262.0; then "262.0 (a float), not a number"
        ({"n_characters": 262.0}, r"found 262\.0 \(a float\), not a whole number\.$"),
        ({"n_characters": 261.5}, r"found 261\.5 \(a float\), not a whole number\.$"),
        ({"n_characters": [262]}, r"found \[262\] \(a list\), not a number\.$"),
        ({"n_characters": True}, r"found True \(a boolean\), not a number\.$"),
        ({"n_characters": None}, r"found None \(null\), not a number\.$"),
        # "must be the JSON number" for BiLMConfig(n_characters=263) from Python too
        ({"n_characters": 263}, r"^n_characters must be 261 or 262, a whole number \(.*\); found 263\.$"),
        ({"cell_clip": -1.0}, "cell_clip"),
        ({"cell_clip": float("nan")}, "cell_clip must be a finite"),  # NaN vectors (reference) or a kernel error
        ({"proj_clip": float("inf")}, "proj_clip must be a finite.*null for no clipping"),  # written as Infinity
        ({"projection_dim": 0}, "projection_dim"),
    ],
)
def test_bad_config_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BiLMConfig(**kwargs)
    config = BiLMConfig()
    for name, value in kwargs.items():
        setattr(config, name, value)  # set after validation: BiLM built a model from it
    with pytest.raises(ValueError, match=match):
        BiLM(config)


@pytest.mark.parametrize("config", [
    BiLMConfig.preset("small"), BiLMConfig.preset("medium"), BiLMConfig.preset("original"), TINY,
    BiLMConfig(projection_dim=2048, n_highway=0, filters=[(1, 1024), (2, 1024)], n_layers=3, char_embedding_dim=5,
               max_characters_per_token=9),  # F == P: no projection
    BiLMConfig(projection_dim=7, cell_dim=3, n_layers=1, filters=[(2, 3)], n_highway=3, max_characters_per_token=4),
])
def test_n_parameters_and_n_bytes_are_the_built_models(config):
    """What the size check counts is what a BiLM of the config holds, exactly (built on the meta device)."""
    import torch

    with torch.device("meta"):
        model = BiLM(config, backend="reference")
    assert config.n_parameters == sum(p.numel() for p in model.parameters())
    tensors = [*model.parameters(), *model.buffers()]
    assert config.n_bytes == sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("kwargs, field", [
    ({"projection_dim": 10**20}, "projection_dim"),  # past int64: torch's TypeError "Overflow when unpacking long long"
    ({"projection_dim": 2**70}, "projection_dim"),
    ({"cell_dim": 2**61}, "cell_dim"),  # fits int64, not its bytes: torch's "Storage size calculation overflowed"
    ({"n_layers": 2**60}, "n_layers"),
    ({"max_characters_per_token": 2**62}, "max_characters_per_token"),  # the <S>/</S> char ids (2, W) int64
    ({"filters": [(1, 32), (2, 2**62)]}, "filters"),
])
def test_sizes_torch_cannot_hold_are_refused_naming_them(kwargs, field):
    """r45: sizes were checked only to be positive: BiLMConfig(projection_dim=10**20) was accepted, and pretrain
    tokenized the whole corpus before torch's C++ overflow error. Refused by the config (and by BiLM, for sizes set
    after), naming the size, the parameter count and the fix."""
    said = rf"These sizes make a biLM of [\d,]+ parameters, .* EiB of tensors .*at most its default: {field}=(\d+|\[[^]]*\])\. Use"
    with pytest.raises(ValueError, match=said) as err:
        BiLMConfig(**kwargs)
    assert err.value.field == field and "original preset" in str(err.value)
    config = BiLMConfig()
    for name, value in kwargs.items():
        setattr(config, name, value)
    with pytest.raises(ValueError, match=said):
        BiLM(config)


#: n_highway too large with filters=[(1, 2049)] (F one past the default's 2048), not with the default filters
_HIGHWAY_EDGE = MOST_TENSOR_BYTES // (4 * (2 * 2048 * 2048 + 2 * 2048)) - 1000


@pytest.mark.parametrize("kwargs, named, said", [
    # 8 EiB of char ids torch can hold; cell_dim 2**55 with the default projection_dim it cannot: the largest value
    # was named, max_characters_per_token, which alone makes no model too large
    ({"max_characters_per_token": 2**56, "cell_dim": 2**55}, ["cell_dim"], "alone"),
    ({"cell_dim": 2**61, "max_characters_per_token": 2**62}, ["cell_dim", "max_characters_per_token"], "alone"),  # both
    ({"n_highway": 2**40, "filters": [(1, 2**20)], "projection_dim": 2**40}, ["n_highway"], "alone"),  # 2*F*F*H
    # none too large alone: the LSTM's sizes, which multiply to most of the bytes, not the largest value alone
    ({"projection_dim": 2**22, "cell_dim": 2**22, "n_layers": 2**14}, ["projection_dim", "cell_dim", "n_layers"],
     "together"),
    ({"projection_dim": 2**22, "cell_dim": 2**22, "n_layers": 2**14, "max_characters_per_token": 2**58},
     ["projection_dim", "cell_dim", "n_layers"], "together"),
    # of the LSTM's sizes, those larger than their defaults: not n_layers=1, nor n_layers=2 not given
    ({"projection_dim": 2**33, "cell_dim": 2**33, "n_layers": 1}, ["projection_dim", "cell_dim"], "together"),
    ({"projection_dim": 2**40, "cell_dim": 2**40}, ["projection_dim", "cell_dim"], "together"),
    # "at most its default" of filters has fewer bytes, not fewer filters: n_highway was said too large alone
    ({"n_highway": _HIGHWAY_EDGE, "filters": [(1, 2049)]}, ["n_highway", "filters"], "together"),
    # one size of the largest part, too large only with the other sizes given: not "together", of one size
    ({"char_embedding_dim": int(0.9 * MOST_TENSOR_BYTES) // (4 * 262), "filters": [(1, 1)], "projection_dim": 2**27,
      "cell_dim": 2**28, "n_layers": 1}, ["char_embedding_dim"], "with_others"),
])
def test_the_sizes_named_are_those_that_make_the_model_too_large(kwargs, named, said):
    """The size error named the largest value, not necessarily one that makes the model too large: {"cell_dim":
    2**55, "max_characters_per_token": 2**56} named max_characters_per_token, whose 8 EiB of char ids torch can
    hold, and shrinking it changed nothing. Named now: each size too large even with the others at most their
    defaults, and at their defaults; where none is, the sizes of the part holding the most bytes that make it
    larger than their defaults do, said to be together (one alone: too large with the other sizes given)."""
    with pytest.raises(ValueError) as err:
        BiLMConfig(**kwargs)
    shown = ", ".join(f"{name}={kwargs.get(name, getattr(BiLMConfig(), name))!r}" for name in named)
    phrase = {"alone": Errors.E_MODEL_TOO_LARGE_ALONE, "together": Errors.E_MODEL_TOO_LARGE_TOGETHER,
              "with_others": Errors.E_MODEL_TOO_LARGE_WITH_OTHERS}[said].format(sizes=shown)
    assert f"torch can address; {phrase}. Use the sizes" in str(err.value), str(err.value)
    assert err.value.field == named[0]
    assert err.value.together == (tuple(named) if said == "together" else ())
    assert err.value.alone == (tuple(named) if said == "alone" and len(named) > 1 else ())
    for name, value in kwargs.items():  # alone (the other sizes the defaults), a named size is too large; no other is
        if name in named and said == "alone":
            with pytest.raises(ValueError, match="These sizes make"):
                BiLMConfig(**{name: value})
        elif name not in named or said == "together":  # with_others: too large with the default filters, not [(1, 1)]
            BiLMConfig(**{name: value})
    BiLMConfig(**{**kwargs, **{name: getattr(BiLMConfig(), name) for name in named}})  # the named shrunk: it can be
    if said == "together":  # any one of them shrunk: it can be ("fix one of them")
        for name in named:
            BiLMConfig(**{**kwargs, name: getattr(BiLMConfig(), name)})


def _options_refusal(opts: dict, **kwargs) -> str:
    """The ValueError's message refusing AllenNLP ``opts`` read as from opts.json."""
    with pytest.raises(ValueError) as err:
        BiLMConfig.from_allennlp_options(opts, source="opts.json", **kwargs)
    return str(err.value)


def test_sizes_too_large_together_in_options_say_to_shrink_their_keys():
    """Sizes too large together in AllenNLP options ended "Fix lstm.projection_dim there." after naming two or three:
    now they are named by their keys, to shrink (then "Fix one of them there.", false where one alone is not
    enough: test_sizes_too_large_together_where_no_one_suffices_say_so)."""
    opts = BiLMConfig(projection_dim=2**33, cell_dim=2**20, n_layers=1).to_allennlp_options()
    opts["lstm"]["dim"] = 2**33
    said = _options_refusal(opts)
    assert said.startswith("The ELMo options in opts.json have sizes too large together, lstm.projection_dim, "
                           "lstm.dim: These sizes make"), said
    assert said.endswith(" One alone may not be enough: shrink them there.") and "n_layers=" not in said, said


def test_sizes_too_large_together_where_no_one_suffices_say_so():
    """projection_dim=dim=2**40, n_layers=2**20 are too large together, and still with any one of them at 1: the
    options' "Fix one of them there." was false. Their message says one alone may not be enough."""
    kwargs = {"projection_dim": 2**40, "cell_dim": 2**40, "n_layers": 2**20}
    for name in kwargs:  # no one of them shrunk is enough
        with pytest.raises(ValueError, match="These sizes make"):
            BiLMConfig(**{**kwargs, name: 1})
    opts = BiLMConfig().to_allennlp_options()
    opts["lstm"].update(projection_dim=2**40, dim=2**40, n_layers=2**20)
    said = _options_refusal(opts)
    assert said.startswith("The ELMo options in opts.json have sizes too large together, lstm.projection_dim, "
                           "lstm.dim, lstm.n_layers: These sizes make"), said
    assert said.endswith(" One alone may not be enough: shrink them there.") and "one of them" not in said, said


def test_sizes_each_too_large_alone_in_options_say_to_fix_each_key():
    """lstm.dim and char_cnn.max_characters_per_token each too large alone, both named, ended "Fix lstm.dim there.",
    naming the first only: shrinking it alone left the model too large. Each key is named, each to fix."""
    opts = BiLMConfig().to_allennlp_options()
    opts["lstm"]["dim"] = 2**60
    opts["char_cnn"]["max_characters_per_token"] = 2**62
    said = _options_refusal(opts, weight_file="w.hdf5")
    assert said.startswith("The ELMo options in opts.json have sizes each too large alone, lstm.dim, "
                           "char_cnn.max_characters_per_token: These sizes make"), said
    assert said.endswith(" Fix each of them there, or use the options.json that came with the weight file w.hdf5."), said
    assert "Fix lstm.dim" not in said, said


def test_huge_sizes_are_said_in_the_size_message():
    """BiLMConfig(cell_dim=10**5000) ended with Python's "Exceeds the limit (4300 digits) for integer string
    conversion" (the parameter count formatted with {:,}), cell_dim=10**400 with "int too large to convert to float"
    (the bytes in EiB), and 2,000 filters were each printed in the message (kB of text): the size message, its
    numbers and values shortened."""
    for value in (10**400, 10**5000):
        with pytest.raises(ValueError, match=r"These sizes make a biLM of \d\.\d\de\d+ parameters, \d\.\d\de\d+ EiB "
                                             r"of tensors .*: cell_dim=1000+\.\.\.0+\. Use") as err:
            BiLMConfig(cell_dim=value)
        assert err.value.field == "cell_dim" and len(str(err.value)) < 500
    with pytest.raises(ValueError, match=r"filters=\[\(1, 4611686018427387904\), .*, \.\.\.\]\. Use") as err:
        BiLMConfig(filters=[(1, 2**62)] * 2000)
    assert len(str(err.value)) < 600


def test_big_number_and_short_repr_write_ints_of_any_size():
    from spacy_elmo.bilm.config import big_number, short_repr

    assert big_number(93_600_000) == "93,600,000" and big_number(10**40 - 1) == f"{10**40 - 1:,}"
    assert [big_number(n) for n in (10**40, 4_625 * 10**5000, 9_996 * 10**50, -10**41)] == [
        "1.00e40", "4.63e5003", "1.00e54", "-1.00e41"]
    assert short_repr(10**39 + 7) == repr(10**39 + 7)  # reprlib's own below its 40 digits
    x = 12345678901234567890123456789012345678901234567890
    assert short_repr(x) == reprlib.repr(x) == "123456789012345678...2345678901234567890"
    assert short_repr(10**5000 + 7) == "100000000000000000...0000000000000000007"
    # the sign is one of reprlib's first characters: one digit more was shown
    assert short_repr(-x) == reprlib.repr(-x) == "-12345678901234567...2345678901234567890"
    assert short_repr(-(10**5000)) == "-10000000000000000...0000000000000000000"


def test_sizes_below_what_torch_can_hold_are_accepted():
    """Only what torch cannot hold is refused: sizes past any machine's memory, as a model built on the meta device
    may have, are accepted, as every real model's sizes."""
    import torch

    big = BiLMConfig(projection_dim=2**40)  # 36 PiB of weights: the meta device holds none of it
    with torch.device("meta"):
        assert sum(p.numel() for p in BiLM(big).parameters()) == big.n_parameters
    # just under the bound: 8 EiB of char ids
    BiLMConfig(max_characters_per_token=(2**63 - 1 - 4 * BiLMConfig().n_parameters) // 16)
    BiLMConfig(projection_dim=4096, cell_dim=16384, n_layers=8)


def test_unknown_preset_and_backend():
    with pytest.raises(ValueError, match="Choose one of"):
        BiLMConfig.preset("huge")
    with pytest.raises(ValueError, match="Unknown backend"):
        BiLM(BiLMConfig.preset("small"), backend="gpu")


def test_bad_model_inputs():
    model = BiLM(BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0), backend="reference")
    with pytest.raises(ValueError, match="max_characters_per_token"):
        model(batch_to_ids([["a"]], max_characters_per_token=20))
    ids = batch_to_ids([["a", "b"]])
    ids[0, 0] = 0
    with pytest.raises(ValueError, match="left-aligned"):
        model(ids)
    ids = batch_to_ids([["a"]])
    ids[0, 0, 5] = 999
    with pytest.raises(ValueError, match="must lie in"):
        model(ids)
    with pytest.raises(TypeError, match="integer character ids"):
        model(batch_to_ids([["a"]]).float())


@pytest.mark.parametrize("value", ["false", 0, 1, None])
def test_booleans_must_be_json_booleans(value):
    opts = options()
    opts["lstm"]["use_skip_connections"] = value
    with pytest.raises(ValueError, match="use_skip_connections must be true or false"):
        BiLMConfig.from_allennlp_options(opts)
    with pytest.raises(ValueError, match="use_skip_connections must be true or false"):
        BiLMConfig.from_dict({"use_skip_connections": value})


@pytest.mark.parametrize(
    "section,key,values,fix",
    [
        ("lstm", "use_skip_connections", (True, False), r'"use_skip_connections": true for a released model.*or false'),
        ("char_cnn", "activation", ("relu", "tanh"), r'"activation": "relu" for a released model.*or "tanh"'),
    ],
)
def test_options_without_a_key_no_default_is_safe_for_are_refused(tmp_path, section, key, values, fix):
    """A missing key loaded a no-skip model silently (AllenNLP refuses such options, bilm-tf's inference model
    fails on them; every released model has skip connections); null was refused: now both are. A missing
    char_cnn.activation loaded as relu, silently another model for a tanh-trained one (AllenNLP and bilm-tf raise
    KeyError): refused the same way, the fix said."""
    opts = options(activation="tanh")
    del opts[section][key]
    path = tmp_path / "options.json"
    path.write_text(json.dumps(opts))
    for given in (opts, path):
        with pytest.raises(ValueError, match=rf"lack '{key}' in the '{section}' section, and no default is safe.*{fix}") as err:
            BiLMConfig.from_allennlp_options(given)
        assert str(given if given is path else "dict") in str(err.value)
    for value in values:  # the writer always writes the key: every config round-trips
        config = BiLMConfig(**{**TINY.to_dict(), key: value})
        assert config.to_allennlp_options()[section][key] == value
        assert BiLMConfig.from_allennlp_options(config.to_allennlp_options()) == config


def test_swapped_options_and_weight_files_are_named_as_such(tmp_path):
    """A weight file given as the options said "'utf-8' codec can't decode byte 0x89": now that it is HDF5 and the
    two arguments look swapped."""
    from tests.bilm.oracle import write_options, write_weights

    opts = options()
    write_weights(tmp_path / "w.hdf5", opts, np.random.default_rng(0))
    write_options(tmp_path / "o.json", opts)
    for call in (lambda: BiLM.from_allennlp(tmp_path / "w.hdf5", tmp_path / "o.json"),
                 lambda: BiLMConfig.from_allennlp_options(tmp_path / "w.hdf5")):
        with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'w.hdf5'))} is an HDF5 file \(ELMo weights\), "
                                             r"not an options\.json: the options file and the weight file look swapped\. "
                                             r"Pass the options\.json first") as err:
            call()
        assert "codec" not in str(err.value)
    (tmp_path / "latin1.json").write_bytes(b"\xe9{}")  # other undecodable bytes: still "could not read"
    with pytest.raises(ValueError, match=r"Could not read ELMo options .*codec can't decode byte 0xe9"):
        BiLMConfig.from_allennlp_options(tmp_path / "latin1.json")


def test_options_json_with_a_utf8_byte_order_mark_is_read(tmp_path):
    """An options.json saved by Notepad or PowerShell (a UTF-8 BOM first) was refused: "Could not read ELMo options
    ...: Unexpected UTF-8 BOM ... Pass the options.json that came with the weight file", though it was that file.
    The BOM is no part of the JSON: the options read as without it."""
    path = tmp_path / "options.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(options()).encode("utf-8"))
    assert BiLMConfig.from_allennlp_options(path) == BiLMConfig.from_allennlp_options(options())


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_options_json_in_utf16_or_utf32_is_read(tmp_path, encoding):
    """Windows PowerShell 5.1's `>` writes UTF-16 LE with a byte order mark: such an options.json said "Could not read
    ELMo options ...: 'utf-8' codec can't decode byte 0xff ... Pass the options.json that came with the weight file".
    JSON may be UTF-8, UTF-16 or UTF-32 (told apart as json.loads does); bytes of none still can not be read."""
    path = tmp_path / "options.json"
    path.write_bytes(json.dumps(options()).encode(encoding))
    assert BiLMConfig.from_allennlp_options(path) == BiLMConfig.from_allennlp_options(options())
    path.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + json.dumps(options()).encode())  # one BOM too many: no JSON
    with pytest.raises(ValueError, match=r"^Could not read ELMo options from .*: Unexpected UTF-8 BOM"):
        BiLMConfig.from_allennlp_options(path)
    path.write_bytes(b'{"lstm": "\xed\xa0\x80"}')  # a UTF-8-encoded lone surrogate: no UTF-8 (json.loads took it)
    with pytest.raises(ValueError, match=r"^Could not read ELMo options from .*codec can't decode byte 0xed"):
        BiLMConfig.from_allennlp_options(path)


def test_options_nested_past_the_recursion_limit_are_could_not_read(tmp_path):
    """An options.json nested deeper than Python's recursion limit raised a bare RecursionError (only pretrain
    --options said it); read_json_file, the one reader of a user's JSON file, says it as any unreadable options."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"^Could not read ELMo options from .*deep\.json: maximum recursion depth .*"
                                         r"Pass the options\.json that came with the weight file\.$"):
        BiLMConfig.from_allennlp_options(tmp_path / "deep.json")


@pytest.mark.parametrize(
    "change,what,found",
    [
        (lambda o: [1, 2], "the top level", r"\[1, 2\]"),
        (lambda o: {**o, "lstm": [1]}, "'lstm'", r"\[1\]"),
        (lambda o: {**o, "char_cnn": "relu"}, "'char_cnn'", "'relu'"),
        (lambda o: {**o, "char_cnn": {**o["char_cnn"], "embedding": 16}}, "'char_cnn\\.embedding'", "16"),
    ],
    ids=["file-list", "lstm-list", "char_cnn-string", "embedding-number"],
)
def test_a_section_that_is_no_object_is_named_with_what_was_found(tmp_path, change, what, found):
    """'"lstm": [1]' (or a whole file that is a JSON list) was reported as a missing key ('lack the key
    lstm.projection_dim ... check that you passed the options file and not the weight file'): now the key that must
    be a JSON object, and what the file holds instead. "In the ELMo options the given dict, 'lstm' must be" read
    wrong: "in the given dict"; the options.json that came with the weight file is named only where there is one."""
    from tests.bilm.oracle import write_weights

    path = tmp_path / "options.json"
    path.write_text(json.dumps(change(options())))
    start = rf"^In the ELMo options in {re.escape(str(path))}, {what} must be a JSON object \(.*\); found {found}\. "
    with pytest.raises(ValueError, match=rf"{start}Fix {what} there\.$") as err:
        BiLMConfig.from_allennlp_options(path)
    assert " lack " not in str(err.value)
    if isinstance(change(options()), dict):  # a list is taken as a path
        with pytest.raises(ValueError, match=rf"^In the ELMo options in the given dict, {what} must be a JSON object"):
            BiLMConfig.from_allennlp_options(change(options()))
    write_weights(tmp_path / "w.hdf5", options(), np.random.default_rng(0))
    with pytest.raises(ValueError, match=rf"{start}Fix {what} there, or use the options\.json that came with the weight "
                                         rf"file {re.escape(str(tmp_path / 'w.hdf5'))}\.$"):
        BiLM.from_allennlp(path, tmp_path / "w.hdf5")


def unreadable_options(tmp_path, monkeypatch):
    """An options.json in ``tmp_path`` whose reading raises PermissionError (a chmod 000 file reads as root)."""
    import errno
    from pathlib import Path

    path = tmp_path / "options.json"
    path.write_text(json.dumps(options()))
    read_bytes = Path.read_bytes

    def denied(self):
        if self == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    return path


def test_an_options_file_that_cannot_be_read_says_the_os_error_not_to_pass_another(tmp_path, monkeypatch):
    """An OSError reading the options (no read permission, an I/O error) said "Pass the options.json that came with
    the weight file", though it was that file: the OS error is said, and to check it (read permission)."""
    path = unreadable_options(tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=rf"^Could not read the ELMo options file {re.escape(str(path))}: \[Errno 13\] "
                                         r"Permission denied.*check what the error says \(e\.g\. give this account "
                                         r"read permission, chmod\)") as err:
        BiLMConfig.from_allennlp_options(path)
    assert "came with the weight file" not in str(err.value)


def test_options_lacking_a_key_are_not_said_to_be_maybe_the_weight_file():
    """"check that you passed the options file and not the weight file": no weight file reaches it (an HDF5 one is
    said to be swapped, any other is no JSON). Said: another tool's JSON has other keys, or add the key."""
    with pytest.raises(ValueError, match=r"lack 'lstm' at the top level\..*check that you passed the options\.json of an ELMo "
                                         r"model \(another tool's JSON, e\.g\. a Hugging Face config\.json, has other "
                                         r"keys\), or add 'lstm' at the top level\.$") as err:
        BiLMConfig.from_allennlp_options({"model_type": "bert"})
    assert "weight file" not in str(err.value)


@pytest.mark.parametrize("path,said", [
    (("lstm", "dim"), "lack 'dim' in the 'lstm' section. .* or add 'dim' in the 'lstm' section."),
    (("char_cnn", "embedding"), "lack 'embedding' in the 'char_cnn' section. .* or add 'embedding' in the 'char_cnn' section."),
    (("char_cnn", "embedding", "dim"), "lack 'dim' in the 'embedding' object of the 'char_cnn' section. .* or add 'dim' in the 'embedding' object of the 'char_cnn' section."),
])
def test_a_missing_key_is_to_be_added_where_it_goes(path, said):
    """"add 'lstm.dim' there": a dotted path, no key a file can hold. The key is named where it goes; and the error
    opened with the dotted path ("lack the key 'lstm.dim'") while it ended "add 'dim' to the 'lstm' section": it
    opens with the key and its place."""
    opts = options()
    section = opts
    for key in path[:-1]:
        section = section[key]
    del section[path[-1]]
    with pytest.raises(ValueError, match="^The ELMo options in the given dict " + re.escape(said).replace(r"\.\*", ".*")
                       + "$"):
        BiLMConfig.from_allennlp_options(opts)


@pytest.mark.parametrize(
    "section,key,value,match",
    [
        ("char_cnn", "filters", 5, "char_cnn.filters must be"),
        ("char_cnn", "filters", [5, 6], "char_cnn.filters must be"),
        ("char_cnn", "filters", [[1]], "char_cnn.filters must be"),
        ("char_cnn", "filters", [[True, 4]], "char_cnn.filters must be"),
        ("char_cnn", "filters", [[2, -4]], "char_cnn.filters must be"),
        ("char_cnn", "n_highway", True, "n_highway"),
        ("char_cnn", "n_highway", -1, "n_highway"),
        ("lstm", "n_layers", -2, "n_layers"),
    ],
)
def test_malformed_allennlp_options_are_clear_errors(section, key, value, match):
    opts = options()
    opts[section][key] = value
    with pytest.raises(ValueError, match=match):
        BiLMConfig.from_allennlp_options(opts)


@pytest.mark.parametrize(
    "section,key,value,said",
    [
        ("lstm", "dim", "24", r"lstm\.dim \(BiLMConfig\.cell_dim\): cell_dim must be a positive integer; found '24'\."),
        ("lstm", "projection_dim", 8.0, r"lstm\.projection_dim \(BiLMConfig\.projection_dim\): .*found 8\.0"),
        ("lstm", "cell_clip", "3", r"lstm\.cell_clip \(BiLMConfig\.cell_clip\): cell_clip must be a finite"),
        ("lstm", "use_skip_connections", "true", r"lstm\.use_skip_connections \(BiLMConfig\.use_skip_connections\)"),
        ("char_cnn", "activation", "sigmoid", r"char_cnn\.activation \(BiLMConfig\.activation\): Unsupported"),
        ("char_cnn", "n_characters", 263, r"char_cnn\.n_characters \(BiLMConfig\.n_characters\): n_characters must be "
                                          r"261 or 262, a whole number .*; found 263\."),
        ("char_cnn", "max_characters_per_token", 2, r"char_cnn\.max_characters_per_token \(BiLMConfig\.max_chara"),
        ("char_cnn", "n_highway", -1, r"char_cnn\.n_highway \(BiLMConfig\.n_highway\)"),
        ("char_cnn", "filters", [[60, 4]], r"char_cnn\.filters \(BiLMConfig\.filters\): Filter width 60 is wider"),
        ("embedding", "dim", 0, r"char_cnn\.embedding\.dim \(BiLMConfig\.char_embedding_dim\)"),
        ("lstm", "projection_dim", 10**20, r"lstm\.projection_dim \(BiLMConfig\.projection_dim\): These sizes make"),
    ],
)
def test_a_bad_options_value_names_the_file_and_its_options_key(tmp_path, section, key, value, said):
    """'cell_dim must be a positive integer' named the config's field, neither the options key (lstm.dim) nor the
    file: each is now said, as for a native config.json."""
    opts = options()
    (opts["char_cnn"]["embedding"] if section == "embedding" else opts[section])[key] = value
    path = tmp_path / "options.json"
    path.write_text(json.dumps(opts))
    with pytest.raises(ValueError, match=rf"The ELMo options in {re.escape(str(path))} have an invalid {said}") as err:
        BiLMConfig.from_allennlp_options(path)
    assert str(err.value).endswith("Fix {} there.".format(said.split(" ")[0].replace("\\", "")))


def test_a_bad_options_value_read_with_weights_names_their_options_json(tmp_path):
    """The fix 'use the options.json that came with the weight file' is said where there is one (BiLM.from_allennlp),
    naming it; options read alone (pretrain --options, with no weights) are told to fix the key."""
    from tests.bilm.oracle import write_options, write_weights

    opts = options()
    write_weights(tmp_path / "w.hdf5", opts, np.random.default_rng(0))
    opts["lstm"]["dim"] = 0
    write_options(tmp_path / "o.json", opts)
    with pytest.raises(ValueError, match=rf"Fix lstm\.dim there, or use the options\.json that came with the weight "
                                         rf"file {re.escape(str(tmp_path / 'w.hdf5'))}\.$"):
        BiLM.from_allennlp(tmp_path / "o.json", tmp_path / "w.hdf5")
    with pytest.raises(ValueError, match=r"The ELMo options in opts\.json have an invalid lstm\.dim .* there\.$"):
        BiLMConfig.from_allennlp_options(opts, source="opts.json")


def test_options_without_n_layers_name_the_key_and_the_layers_of_the_weight_file(tmp_path):
    """Refused as 'lack the key' with 'check that you passed the options file and not the weight file', wrong here;
    bilm-tf's default of 1 is not assumed either. The weight file's layer count is the fix, where it says."""
    import h5py

    from tests.bilm.oracle import write_options, write_weights

    for layers in (1, 3):
        opts = options(L=layers)
        write_weights(tmp_path / f"w{layers}.hdf5", opts, np.random.default_rng(0))
        del opts["lstm"]["n_layers"]
        write_options(tmp_path / "o.json", opts)
        with pytest.raises(ValueError, match=rf"lack 'n_layers' in the 'lstm' section.*not taken as 1.* The weight file "
                                             rf".*w{layers}\.hdf5 holds {layers} layer\(s\) per direction: add "
                                             rf'"n_layers": {layers} to the \'lstm\' section\.$') as err:
            BiLM.from_allennlp(tmp_path / "o.json", tmp_path / f"w{layers}.hdf5")
        assert "not the weight file" not in str(err.value)
    with h5py.File(tmp_path / "w1.hdf5", "a") as f:  # the oracle wrote bilm-tf's training dump: now the written form
        f.create_group("RNN_0/RNN/MultiRNNCell/Cell0")
        f.move("RNN_0/RNN/LSTMCell", "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell")
    with pytest.raises(ValueError, match=r'holds 1 layer\(s\) per direction: add "n_layers": 1'):
        BiLM.from_allennlp(tmp_path / "o.json", tmp_path / "w1.hdf5")
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5")
    with h5py.File(tmp_path / "no_lstm.hdf5", "w") as f:  # hdf5, no LSTM: no count either (not "holds 0 layer(s)")
        f.create_dataset("char_embed", data=np.zeros((262, 4), dtype=np.float32))
    for given in ((tmp_path / "o.json", tmp_path / "bad.hdf5"), (tmp_path / "o.json", tmp_path / "no_lstm.hdf5"),
                  (opts,)):  # no count to give: N, and the released 2
        with pytest.raises(ValueError, match=r"lack 'n_layers' in the 'lstm' section.* Add \"n_layers\": N to the 'lstm' "
                                             r"section, N the layers .* \(the released models have 2\), or, for a model to "
                                             r"pretrain, the layers it should have\.$"):
            BiLM.from_allennlp(*given) if len(given) == 2 else BiLMConfig.from_allennlp_options(*given)


def test_invalid_config_value_pickles_with_its_field():
    """A worker process's error reaches the parent with its field, which from_allennlp_options reads."""
    import pickle

    from spacy_elmo.bilm.config import InvalidConfigValue

    with pytest.raises(InvalidConfigValue) as err:
        BiLMConfig.from_dict({"cell_dim": 0})
    again = pickle.loads(pickle.dumps(err.value))
    assert (type(again), again.field, str(again)) == (InvalidConfigValue, "cell_dim", str(err.value))
    with pytest.raises(InvalidConfigValue) as err:  # and the sizes it names, too large together or each alone
        BiLMConfig(cell_dim=2**61, max_characters_per_token=2**62)
    again = pickle.loads(pickle.dumps(err.value))
    assert (again.field, again.together, again.alone) == ("cell_dim", (), ("cell_dim", "max_characters_per_token"))


@pytest.mark.parametrize("value", [-3, 999])
def test_char_id_range_error_reports_the_offending_id(value):
    model = BiLM(BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0), backend="reference")
    ids = batch_to_ids([["a"]])  # its largest id is 261: a negative one must be reported, not 261
    ids[0, 0, 5] = value
    with pytest.raises(ValueError, match=f"found {value}\\."):
        model(ids)


def test_public_api_argument_errors_name_the_fix():
    """Each raised AttributeError or 'too many values to unpack' before, or was accepted."""
    import torch

    config = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    for bad in ({"projection_dim": 4}, None, "small"):
        with pytest.raises(TypeError, match="BiLM expects a BiLMConfig.*BiLMConfig.from_dict"):
            BiLM(bad)
    with pytest.raises(TypeError, match="stateful must be True"):
        BiLM(config, stateful="yes")
    model = BiLM(config, backend="reference")
    with pytest.raises(TypeError, match=r"tensor of character ids.*got a list\. .*batch_to_ids\(sentences\)"):
        model([["a", "b"]])
    with pytest.raises(TypeError, match=r"tensor of character ids.*got an ndarray\. .*bilm\(torch\.from_numpy\(ids\)\)"):
        model(batch_to_ids([["a"]]).numpy())  # ids already: converted, not made again
    with pytest.raises(ValueError, match=r"carried_states expects None or a pair \(h, c\) of two tensors, "
                                         r"h \(2, 2, B, 4\) and c \(2, 2, B, 6\) \(direction, layer, row, width\); "
                                         r"got a tensor of shape \(2, 2, 1, 4\)\."):
        model.carried_states = torch.zeros(2, 2, 1, 4)
    with pytest.raises(ValueError, match=r"set_initial_state expects None or a pair \(h, c\) of two tensors, "
                                         r"h \(2, 2, 4\) and c \(2, 2, 6\) \(direction, layer, width\); got a tensor"):
        model.set_initial_state(torch.zeros(2, 2, 4))


def test_a_bad_state_message_says_what_is_wrong_with_the_tuple():
    """A tuple of the wrong content was reported as 'got a tuple': now its length and its items."""
    import torch

    model = BiLM(TINY, backend="reference")
    h, c = torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 6)
    per_direction = ((h[0], h[1]), (c[0], c[1]))
    with pytest.raises(ValueError, match=r"h \(2, 2, B, 4\) .*; got a tuple of 2 items \(a tuple of 2 items \(a tensor "
                                         r"of shape \(2, 1, 4\), a tensor of shape \(2, 1, 4\)\), a tuple of 2"):
        model.carried_states = per_direction
    with pytest.raises(ValueError, match=r"got a tuple of 3 items \(a tensor of shape \(2, 2, 1, 4\), a tensor of "
                                         r"shape \(2, 2, 1, 6\), a tensor of shape \(2, 2, 1, 6\)\)\.$"):
        model.carried_states = (h, c, c)
    with pytest.raises(ValueError, match=r"got a list of 1 item \(a tensor of shape \(2, 2, 4\)\)\.$"):
        model.set_initial_state([h[:, :, 0]])
    with pytest.raises(ValueError, match=r"got a tuple of 2 items \(a tensor of shape \(2, 2, 4\), a NoneType\)\.$"):
        model.set_initial_state((h[:, :, 0], None))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_encode_tokens_and_contextualize_check_their_shapes(backend):
    """Kernel RuntimeErrors ('lstm: w_input must be (I, 4C)'), an IndexError, or (reference path,
    lengths too long) a silent run before."""
    import torch

    config = BiLMConfig(projection_dim=4, cell_dim=6, filters=[(1, 2), (2, 2)], n_highway=0)
    model = BiLM(config, backend=backend)
    with pytest.raises(ValueError, match=r"contextualize expects token vectors x \(batch, max_len \+ 2, 4\)"):
        model.contextualize(torch.zeros(2, 5, 7), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"contextualize expects"):
        model.contextualize(torch.zeros(2, 5, 4), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"must lie in 0..3 \(x.shape\[1\] - 2\); got \[4, 3\]"):
        model.contextualize(torch.zeros(2, 5, 4), torch.tensor([4, 3]))
    ids = batch_to_ids([["a", "b"], ["c"]])
    with pytest.raises(ValueError, match=r"the mask has shape \(2, 1\) but the character ids need \(2, 2\)"):
        model.encode_tokens(ids, torch.ones(2, 1, dtype=torch.bool))
    out = model.contextualize(model.encode_tokens(ids, ids.gt(0).any(-1)).new_zeros(2, 4, 4), torch.tensor([2, 1]))
    assert out.activations[0].shape == (2, 2, 8)
    # (B, W) ids: "not enough values to unpack"; 49 characters a token ran silently as other tokens
    for bad in (ids[0], ids[..., :49]):
        with pytest.raises(ValueError, match=r"character ids of shape \(batch, max_len, 50\) .*got shape "
                                             + re.escape(str(tuple(bad.shape)))):
            model.encode_tokens(bad, torch.ones(bad.shape[:2], dtype=torch.bool))
    with pytest.raises(TypeError, match="a tensor of character ids .*got a list"):
        model.encode_tokens(ids.tolist(), ids.gt(0).any(-1))
    # was "a ndarray"; its fix is torch.from_numpy, not batch_to_ids
    with pytest.raises(TypeError, match=r"a tensor of character ids .*got an ndarray\. .*bilm\(torch\.from_numpy\("):
        model.encode_tokens(ids.numpy(), ids.gt(0).any(-1))
    # an array of token strings (or objects): torch.from_numpy fails on it, batch_to_ids is the fix
    for strings in (np.array([["a", "b"]]), np.array([["a", "b"]], dtype=object)):
        with pytest.raises(TypeError, match=r"got an ndarray\. Convert token lists first: .*batch_to_ids"):
            model(strings)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", [-1, 262, 5000])
def test_encode_tokens_refuses_ids_outside_the_table(backend, value):
    """The fused char CNN read table rows past the 261 stored ones (memory beyond the table) or a
    zero vector for negative ids; the reference raised a bare IndexError from F.embedding. Each
    backend checks the ids it reads once: the reference in Python, the fused op in C++
    (csrc/include/checks.h, the same message as torch.ops.spacy_elmo.char_cnn_forward)."""
    import torch

    bad_dtype = (TypeError, "integer character ids")  # one rule, checked in Python on both backends
    if backend == "reference":
        bad_id = (ValueError, f"must lie in 0..261 .*found {value}\\.")
    else:
        bad_id = (RuntimeError, f"char_ids holds {value} at flat index \\d+; its values must lie in \\[0, 261\\]")
    model = BiLM(TINY, backend=backend)
    ids = batch_to_ids([["a", "b"]])
    ids[0, 1, 3] = value
    mask = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(bad_id[0], match=bad_id[1]):
        model.encode_tokens(ids, mask)
    with pytest.raises(bad_id[0], match=bad_id[1]):
        model.token_encoder(ids[0])
    with pytest.raises(bad_dtype[0], match=bad_dtype[1]):
        model.token_encoder(batch_to_ids([["a"]])[0].float())  # the fused kernel truncated floats
    with pytest.raises(ValueError, match=f"must lie in 0..261 .*found {value}\\."):  # forward: on both backends
        model(ids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_entry_point_takes_the_same_char_id_dtypes(backend):
    """The fused char CNN took int8 / int16 / uint8 ids through encode_tokens and token_encoder
    (its message said int64 or int32) while forward refused them: now torch.long and torch.int32
    everywhere, on both backends, and int32 gives what torch.long gives."""
    import torch

    model = BiLM(TINY, backend=backend)
    ids = batch_to_ids([["a", "bc"], ["d"]])
    mask = (ids > 0).any(-1)
    expected = (model(ids).activations, model.encode_tokens(ids, mask), model.token_encoder(ids[0]))
    got = (model(ids.int()).activations, model.encode_tokens(ids.int(), mask), model.token_encoder(ids[0].int()))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    for dtype in (torch.int8, torch.int16, torch.uint8, torch.bool, torch.float32):
        narrow = ids.clamp(max=127).to(dtype)  # values that fit (int8: ids up to 261 do not)
        for call in (lambda: model(narrow), lambda: model.encode_tokens(narrow, mask),
                     lambda: model.token_encoder(narrow[0])):
            with pytest.raises(TypeError, match=rf"integer character ids \(torch.long or torch.int32.*got {dtype}"):
                call()


def test_ids_on_another_device_than_the_weights_are_a_clear_error():
    """Both ran into torch internals: .item() of a meta tensor, or copying out of one."""
    import torch

    model = BiLM(TINY, backend="reference")
    with pytest.raises(ValueError, match=r"ids are on meta but the biLM's weights are on cpu.*ids.to\('cpu'\)"):
        model(batch_to_ids([["a"]]).to("meta"))
    with pytest.raises(ValueError, match="ids are on cpu but the biLM's weights are on meta"):
        BiLM(TINY, backend="reference").to("meta")(batch_to_ids([["a"]]))
    assert model(batch_to_ids([["a"]]).to(torch.int32)).mask.tolist() == [[True]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_checks_the_ids_values_in_order_with_their_messages(backend):
    """forward brings the verdicts of its three checks of the ids' values to the host at once (one host
    sync on a GPU, BiLM._checked_mask): each still raises its own message, in the order they were checked
    one by one (range, then padding before a token, then a token not spelled as batch_to_ids spells it),
    check_ids as forward, and int32 ids as torch.long."""
    import torch

    from spacy_elmo.errors import Errors

    model = BiLM(TINY, backend=backend)
    good = batch_to_ids([["ab", "c"], ["d", "e"]])

    def bad(range_=False, ragged=False, malformed=False):
        ids = good.clone()
        if range_:
            ids[1, 1, 4] = 300
        if ragged:
            ids[1, 0] = 0
        if malformed:
            ids[0, 1, 0] = 5
        return ids

    range_msg = Errors.E_CHAR_IDS_RANGE.format(max_id=261, found=300)
    ragged_msg = Errors.E_RAGGED_MASK.format(row=1)
    malformed_msg = Errors.E_CHAR_IDS_MALFORMED.format(row=0, position=1, ids=bad(malformed=True)[0, 1, :12].tolist(),
                                                       bow=259)
    cases = [((True, False, False), range_msg), ((False, True, False), ragged_msg),
             ((False, False, True), malformed_msg), ((True, True, True), range_msg), ((False, True, True), ragged_msg),
             ((True, False, True), range_msg)]
    for flags, message in cases:
        for ids in (bad(*flags), bad(*flags).int()):
            for call in (model, model.check_ids):
                with pytest.raises(ValueError) as err:
                    call(ids)
                assert str(err.value) == message, flags
    torch.testing.assert_close(model(good.int()).activations[2], model(good).activations[2], rtol=0, atol=0)
    x = torch.randn(2, 4, 4)
    for lengths, found in (([3, 1], [3, 1]), ([-1, 1], [-1, 1])):
        with pytest.raises(ValueError) as err:
            model.contextualize(x, torch.tensor(lengths))
        assert str(err.value) == Errors.E_CONTEXTUALIZE_LENGTHS.format(max_len=2, found=found)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tokens_not_spelled_by_batch_to_ids_are_refused(backend):
    """Both ran silently: every character read as its neighbour's (bilm-tf's ids have no +1
    shift), or zero slots read as zero vectors the released models never saw."""
    import torch
    import torch.nn.functional as F

    model = BiLM(TINY, backend=backend)
    ids = batch_to_ids([["The", "bank"], ["a"]])
    unshifted = torch.where(ids > 0, ids - 1, ids)
    with pytest.raises(ValueError, match=r"Token 0 of row 0 .* begin \[258, 84, 104, 101, 259, 260, 260.*add 1"):
        model(unshifted)
    narrow = F.pad(batch_to_ids([["a"], ["b", "c"]], max_characters_per_token=20), (0, 30))
    with pytest.raises(ValueError, match=r"Token 0 of row 0 .* holds no 0"):
        model(narrow)
    # A token is any position with a nonzero id, not only a nonzero first id: a last token whose first slot
    # is 0 is a malformed token, never padding (as padding it ran silently, </S> written over it).
    first_zero = ids.clone()
    first_zero[0, 1, 0] = 0
    with pytest.raises(ValueError, match=r"Token 1 of row 0 .* begin \[0, 99, 98, 111"):
        model(first_zero)
    odd = batch_to_ids([["", "\x00", "<S>", "x" * 60, "é" * 30], []])  # real tokens, and a NUL byte is id 1
    out = model(odd)
    assert out.mask.tolist() == [[True] * 5, [False] * 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_encode_tokens_and_contextualize_check_their_dtypes(backend):
    """A conv1d or kernel shape error for an integer mask (it indexed rows), and on the fused path
    float lengths (1.5 read as 1) and integer token vectors ran silently; a list of lengths was an
    AttributeError."""
    import torch

    model = BiLM(TINY, backend=backend)
    ids = batch_to_ids([["a", "b"], ["c"]])
    for mask in (ids.gt(0).any(-1).long(), ids.gt(0).any(-1).float()):
        with pytest.raises(TypeError, match=f"needs a torch.bool mask .*got a {mask.dtype} tensor"):
            model.encode_tokens(ids, mask)
    with pytest.raises(TypeError, match=r"needs a torch.bool mask .*got an ndarray\. "):  # was "a ndarray"
        model.encode_tokens(ids, ids.gt(0).any(-1).numpy())
    x = torch.zeros(2, 4, 4)
    for bad_x, lengths, found in [(x, torch.tensor([1.5, 1.0]), "lengths torch.float32 tensor"),
                                  (x, [2, 1], "lengths list"),
                                  (x, torch.tensor([True, False]), "lengths torch.bool tensor"),
                                  (x.long(), torch.tensor([2, 1]), "x torch.int64 tensor")]:
        with pytest.raises(TypeError, match=f"contextualize expects floating-point .*{found}"):
            model.contextualize(bad_x, lengths)
    assert model.contextualize(x, torch.tensor([2, 1], dtype=torch.int32)).mask.tolist() == [[True, True], [True, False]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_contextualize_takes_vectors_of_the_weights_dtype_and_device(backend):
    """Before, the backends differed: for float64 or float16 vectors on a float32 model the fused path ran in
    the vectors' dtype and the reference raised torch's "expected m1 and m2 to have the same dtype"; vectors on
    the meta device gave meta outputs from the fused path (CPU weights) and torch's device error from the
    reference. Under autocast the vectors come in the autocast dtype (what encode_tokens returns there), but
    no other: before, any dtype passed there, and float64 (which autocast never casts) or float16 (which CPU
    bfloat16 autocast fails on) ran on the fused path (float64 outputs) while the reference raised torch's errors."""
    import torch

    model = BiLM(TINY, backend=backend)
    x, lengths = torch.randn(2, 4, 4), torch.tensor([2, 1])
    for other in (torch.float64, torch.float16):
        with pytest.raises(TypeError, match=f"x are {other} but the biLM takes torch.float32: convert x"):
            model.contextualize(x.to(other), lengths)
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
                TypeError, match=f"x are {other} but the biLM takes torch.float32 or, under this autocast, "
                                 r"torch.bfloat16: convert x \(x.to\(torch.float32\)\)"):
            model.contextualize(x.to(other), lengths)
    with pytest.raises(ValueError, match=r"x are on meta but the biLM's weights are on cpu: move x there \(x.to\('cpu'\)\)"):
        model.contextualize(x.to("meta"), lengths)
    expected = model.contextualize(x, lengths)
    torch.testing.assert_close(model.double().contextualize(x.double(), lengths).activations[2],
                               expected.activations[2].double(), atol=1e-6, rtol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model.float().contextualize(x.bfloat16(), lengths)
    assert all(a.dtype == torch.bfloat16 for a in low.activations)
    torch.testing.assert_close(low.activations[2].float(), expected.activations[2], atol=0.05, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_half_model_under_an_autocast_in_the_other_dtype_is_refused(backend):
    """A float16 model under CPU bfloat16 autocast (or bfloat16 under float16): the fused backend ran, the
    reference raised torch's "Unexpected floating ScalarType in at::autocast::prioritize". Now both raise
    the same TypeError naming the fixes, in forward, encode_tokens and contextualize (the check
    contextualize runs on its x); the module in the autocast's dtype, or float32, still runs."""
    import torch

    ids = batch_to_ids([["a", "bb"], ["c"]])
    mask = ids.gt(0).any(-1)
    for weights, autocast in ((torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16)):
        torch.manual_seed(0)
        model = BiLM(TINY, backend=backend).to(weights).eval()
        message = (rf"weights are {weights} but cpu autocast is on in {autocast}.*bilm.float\(\).*"
                   rf"torch.autocast\('cpu', dtype={weights}\)")
        with torch.no_grad(), torch.autocast("cpu", dtype=autocast):
            for call in (lambda: model(ids), lambda: model.encode_tokens(ids, mask),
                         lambda: model.contextualize(torch.zeros(2, 4, 4, dtype=autocast), torch.tensor([2, 1]))):
                with pytest.raises(TypeError, match=message):
                    call()
        with torch.no_grad(), torch.autocast("cpu", dtype=weights):
            assert all(a.dtype == weights for a in model(ids).activations)
        with torch.no_grad(), torch.autocast("cpu", dtype=autocast):
            assert all(a.dtype == autocast for a in model.float()(ids).activations)


def test_an_unknown_field_error_survives_pickling():
    """A worker process's error is pickled back to its parent: UnknownConfigFields(message) failed to unpickle
    (TypeError: its two arguments), so a ProcessPoolExecutor reported BrokenProcessPool, not the message."""
    import pickle

    from spacy_elmo.bilm.config import UnknownConfigFields

    with pytest.raises(UnknownConfigFields) as caught:
        BiLMConfig.from_dict({"no_such_field": 1})
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is UnknownConfigFields and str(again) == str(caught.value)
    assert (again.names, again.choices) == (caught.value.names, caught.value.choices)


def test_byte_size_names_the_unit_of_the_value_shown():
    """Sizes in messages: the unit is that of the rounded value (2**20 - 1 bytes read "1,024.0 KiB")."""
    from spacy_elmo.bilm.config import byte_size

    assert [byte_size(n) for n in (0, 1023, 1024, 2**20 - 1, 2**20, 357 * 2**20 + 2**16, 2**63 - 1, 2**70)] == [
        "0 bytes", "1023 bytes", "1.0 KiB", "1.0 MiB", "1.0 MiB", "357.1 MiB", "8.0 EiB", "1,024.0 EiB"]
