"""The SPACY_ELMO_* environment switches (spacy_elmo/switches.py): each takes exactly its values, and any
other is a warning that names the switch, the value, the values it takes and what runs instead."""

import os
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from spacy_elmo import switches
from spacy_elmo.errors import Warnings
from spacy_elmo.ops import build_info, fused_available

ROOT = Path(__file__).resolve().parent.parent

# (switch, value set, value in force): written out here, not derived from switches.SWITCHES. The values
# that used to be read loosely are among them: MMA looked at the first character ("0x" was off, "false"
# on), KEEP_FREED_MEMORY took false/no/off and any case, the others ignored an unknown value unsaid.
TAKEN = [
    ("SPACY_ELMO_NO_EXTENSION", "0", "0"), ("SPACY_ELMO_NO_EXTENSION", "1", "1"),
    ("SPACY_ELMO_CUDA", "0", "0"), ("SPACY_ELMO_CUDA", "1", "1"), ("SPACY_ELMO_CUDA", "auto", "auto"),
    ("SPACY_ELMO_CPU_ISA", "base", "base"), ("SPACY_ELMO_CPU_ISA", "avx2", "avx2"),
    ("SPACY_ELMO_CPU_ISA", "avx512", "avx512"),
    ("SPACY_ELMO_CHAR_CNN_MMA", "0", "0"), ("SPACY_ELMO_CHAR_CNN_MMA", "1", "1"),
    ("SPACY_ELMO_LSTM_PRODUCTS", "batched", "batched"), ("SPACY_ELMO_LSTM_PRODUCTS", "per-direction", "per-direction"),
    ("SPACY_ELMO_LSTM_PRODUCTS", "auto", "auto"),
    ("SPACY_ELMO_KEEP_FREED_MEMORY", "0", "0"), ("SPACY_ELMO_KEEP_FREED_MEMORY", "1", "1"),
    ("SPACY_ELMO_CACHE", "/tmp/elmo cache", "/tmp/elmo cache"),
]
NOT_TAKEN = [  # (switch, value set, value in force instead, the values it takes as the warning lists them)
    ("SPACY_ELMO_NO_EXTENSION", "true", "0", "0 | 1"), ("SPACY_ELMO_NO_EXTENSION", "yes", "0", "0 | 1"),
    ("SPACY_ELMO_CUDA", "yes", "auto", "0 | 1 | auto"), ("SPACY_ELMO_CUDA", "Auto", "auto", "0 | 1 | auto"),
    ("SPACY_ELMO_CPU_ISA", "AVX2", "base", "base | avx2 | avx512"), ("SPACY_ELMO_CPU_ISA", "", "base", "base | avx2 | avx512"),
    ("SPACY_ELMO_CHAR_CNN_MMA", "0x", "1", "0 | 1"), ("SPACY_ELMO_CHAR_CNN_MMA", "false", "1", "0 | 1"),
    ("SPACY_ELMO_CHAR_CNN_MMA", "off", "1", "0 | 1"), ("SPACY_ELMO_CHAR_CNN_MMA", " 0", "1", "0 | 1"),
    ("SPACY_ELMO_CHAR_CNN_MMA", "", "1", "0 | 1"),
    ("SPACY_ELMO_LSTM_PRODUCTS", "Batched", "auto", "batched | per-direction | auto"),
    ("SPACY_ELMO_LSTM_PRODUCTS", "per_direction", "auto", "batched | per-direction | auto"),
    ("SPACY_ELMO_KEEP_FREED_MEMORY", "false", "1", "0 | 1"), ("SPACY_ELMO_KEEP_FREED_MEMORY", "OFF", "1", "0 | 1"),
    ("SPACY_ELMO_CACHE", "", "~/.cache/spacy-elmo", "a directory path, not empty"),
]
UNSET = {"SPACY_ELMO_NO_EXTENSION": "0", "SPACY_ELMO_CUDA": "auto", "SPACY_ELMO_CPU_ISA": "avx512",
         "SPACY_ELMO_CHAR_CNN_MMA": "1", "SPACY_ELMO_LSTM_PRODUCTS": "auto", "SPACY_ELMO_KEEP_FREED_MEMORY": "1",
         "SPACY_ELMO_CACHE": "~/.cache/spacy-elmo"}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """No switch set and none warned for yet."""
    for name in switches.SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(switches, "_warned", set())


def _read(name):
    """read(name) and the texts of the SwitchWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = switches.read(name)
    return value, [str(w.message) for w in caught if issubclass(w.category, switches.SwitchWarning)]


def test_every_switch_is_known_and_unset_means_its_default():
    assert set(switches.SWITCHES) == set(UNSET)
    assert {name: _read(name) for name in UNSET} == {name: (value, []) for name, value in UNSET.items()}


@pytest.mark.parametrize("name, value, in_force", TAKEN)
def test_a_value_the_switch_takes_is_read_as_it_is(monkeypatch, name, value, in_force):
    monkeypatch.setenv(name, value)
    assert _read(name) == (in_force, [])
    assert switches.problem(name, value) is None and switches.set_now() == {name: (value, None)}


@pytest.mark.parametrize("name, value, in_force, values", NOT_TAKEN)
def test_another_value_warns_naming_the_switch_the_value_its_values_and_what_runs(monkeypatch, name, value, in_force,
                                                                                  values):
    monkeypatch.setenv(name, value)
    got, said = _read(name)
    assert got == in_force and len(said) == 1
    text = said[0]
    assert f"{name}={value!r} is none of the values" in text and f"({values})" in text
    instead = getattr(Warnings, "W_SWITCH_INSTEAD_" + name[len("SPACY_ELMO_"):])
    assert f", so {instead}." in text and text.endswith("Unset it, or set one of those.")
    assert switches.set_now() == {name: (value, text)}


def test_a_value_warns_once_per_process_and_another_warns_again(monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_LSTM_PRODUCTS", "fast")
    assert len(_read("SPACY_ELMO_LSTM_PRODUCTS")[1]) == 1
    assert _read("SPACY_ELMO_LSTM_PRODUCTS") == ("auto", [])
    monkeypatch.setenv("SPACY_ELMO_LSTM_PRODUCTS", "slow")
    assert len(_read("SPACY_ELMO_LSTM_PRODUCTS")[1]) == 1


def _sources():
    for pattern in ("spacy_elmo/**/*.py", "benchmarks/**/*.py", "scripts/**/*.py", "csrc/**/*.c*", "*.py"):
        yield from (p for p in ROOT.glob(pattern) if ".venv" not in p.parts)


def test_every_switch_read_anywhere_is_read_through_switches():
    """Each SPACY_ELMO_* the code reads from the environment is in the table, and only switches.py reads
    one from Python (the C++ reads its three itself, with the same exact comparisons)."""
    read_in_cpp, read_in_python = set(), []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".cpp", ".cu", ".cc"):
            read_in_cpp |= set(re.findall(r'getenv\("(SPACY_ELMO_\w+)"\)', text))
        elif path.name != "switches.py":
            read_in_python += [(path.name, m) for m in re.findall(r'environ(?:\.get\(|\[)"(SPACY_ELMO_\w+)"', text)]
            read_in_python += [(path.name, m) for m in re.findall(r'getenv\("(SPACY_ELMO_\w+)"', text)]
    assert read_in_cpp == {"SPACY_ELMO_CPU_ISA", "SPACY_ELMO_CHAR_CNN_MMA", "SPACY_ELMO_LSTM_PRODUCTS"}
    assert read_in_cpp <= set(switches.SWITCHES)
    # extension.py passes SPACY_ELMO_CPU_ISA's raw value on to `spacy-elmo info`, which checks it
    assert read_in_python == [], read_in_python


def test_setup_py_reads_its_switches_through_the_same_table():
    """build_flags.py loads switches.py by path (setup.py runs before the package imports): the same
    values, the same messages."""
    import build_flags

    assert build_flags.switches.SWITCHES == switches.SWITCHES
    assert build_flags.Warnings.W_SWITCH_UNKNOWN == Warnings.W_SWITCH_UNKNOWN


@pytest.mark.skipif(not fused_available(), reason="spacy_elmo._C is not built")
@pytest.mark.parametrize("cap, warns", [("avx2", False), ("AVX2", True), ("", True)])
def test_loading_the_extension_warns_for_a_cpu_isa_the_dispatch_does_not_take(cap, warns):
    """The kernel dispatch reads SPACY_ELMO_CPU_ISA once per process and runs base for a value it does not
    take: the load says so (a fresh process: the extension loads once)."""
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    code = ("import warnings; warnings.simplefilter('always'); from spacy_elmo.ops import fused; "
            "print(fused.cpu_isa())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "SPACY_ELMO_CPU_ISA": cap})
    widest = build_info().cpu_isa_supported
    assert res.stdout.strip() == ("avx2" if cap == "avx2" and widest in ("avx2", "avx512") else "base")
    said = switches.problem("SPACY_ELMO_CPU_ISA", cap)
    assert (said is not None and said in res.stderr) == warns
    assert ("SwitchWarning" in res.stderr) == warns


@pytest.mark.skipif(not fused_available(), reason="spacy_elmo._C is not built")
def test_the_cuda_calls_check_their_switches_and_the_cpu_calls_do_not(monkeypatch):
    """fused.char_cnn and the LSTM check SPACY_ELMO_CHAR_CNN_MMA / _LSTM_PRODUCTS through _check_switch
    on CUDA tensors only (the CUDA kernels read them; the CPU ones do not): the check itself, here with a
    CUDA device that needs no GPU (the GPU tests run the calls, tests/ops/test_fused_cuda.py)."""
    from spacy_elmo.ops import fused

    monkeypatch.setenv("SPACY_ELMO_CHAR_CNN_MMA", "false")
    on_cpu = types.SimpleNamespace(device=torch.device("cpu"))
    on_cuda = types.SimpleNamespace(device=torch.device("cuda"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fused._check_switch(switches.CHAR_CNN_MMA, on_cpu)
        assert caught == []
        fused._check_switch(switches.CHAR_CNN_MMA, on_cuda)
    assert [str(w.message) for w in caught] == [switches.problem("SPACY_ELMO_CHAR_CNN_MMA", "false")]
