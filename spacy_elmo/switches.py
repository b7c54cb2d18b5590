"""The ``SPACY_ELMO_*`` environment switches: the values each one takes, read and checked in one place.

Each switch takes a fixed set of values, compared exactly (case and spaces count; ``SPACY_ELMO_CACHE``
takes any directory path that is not empty). :func:`read` gives the value in force: the one set when the
switch takes it, the default when it is unset, and for any other value (the empty one included) the
switch's fallback, with a :class:`SwitchWarning` (once per switch and value in a process) that names the
switch, the value, the values it takes and what runs instead (``Warnings.W_SWITCH_UNKNOWN``).

Who reads what:

* setup.py (through build_flags.py): ``SPACY_ELMO_NO_EXTENSION`` and ``SPACY_ELMO_CUDA``.
* the compiled extension itself, with the same exact comparisons (an unknown value runs the fallback
  there too): ``SPACY_ELMO_CPU_ISA`` (csrc/cpu/dispatch.cpp, once per process), ``SPACY_ELMO_CHAR_CNN_MMA``
  (csrc/cuda/char_cnn.cu) and ``SPACY_ELMO_LSTM_PRODUCTS`` (csrc/cuda/cuda_ops.cpp), these two at each
  call. Python warns for it: :func:`spacy_elmo.ops.load_extension` for the first, the CUDA calls of
  :mod:`spacy_elmo.ops.fused` for the others.
* ``spacy_elmo.training.malloc``: ``SPACY_ELMO_KEEP_FREED_MEMORY``; benchmarks/: ``SPACY_ELMO_CACHE``.

``spacy-elmo info`` lists the switches set and says of each whether it is valid (:func:`problem`).

Stdlib only: build_flags.py (run by setup.py before the package is importable) loads this file by path,
after loading errors.py by path as the module ``_spacy_elmo_errors``.
"""

import os
import sys
import warnings
from typing import Dict, NamedTuple, Optional, Set, Tuple

if __package__:
    from .errors import Warnings
else:  # loaded by path by build_flags.py, which loaded errors.py by path first, as this module
    Warnings = sys.modules["_spacy_elmo_errors"].Warnings  # type: ignore[misc]


class SwitchWarning(RuntimeWarning):
    """A ``SPACY_ELMO_*`` switch set to a value it does not take."""


class Switch(NamedTuple):
    name: str
    values: Tuple[str, ...]  #: the values it takes (empty: any text but the empty one, a path)
    default: str  #: in force when unset
    fallback: str  #: in force for any other value
    instead: str  #: what the fallback means (the end of the warning)


NO_EXTENSION = "SPACY_ELMO_NO_EXTENSION"
CUDA = "SPACY_ELMO_CUDA"
CPU_ISA = "SPACY_ELMO_CPU_ISA"
CHAR_CNN_MMA = "SPACY_ELMO_CHAR_CNN_MMA"
LSTM_PRODUCTS = "SPACY_ELMO_LSTM_PRODUCTS"
KEEP_FREED_MEMORY = "SPACY_ELMO_KEEP_FREED_MEMORY"
CACHE = "SPACY_ELMO_CACHE"

SWITCHES: Dict[str, Switch] = {s.name: s for s in (
    # 1: build nothing (the pure-PyTorch reference path only)
    Switch(NO_EXTENSION, ("0", "1"), "0", "0", Warnings.W_SWITCH_INSTEAD_NO_EXTENSION),
    # the CUDA kernels: never, always, or when torch has CUDA and nvcc exists
    Switch(CUDA, ("0", "1", "auto"), "auto", "auto", Warnings.W_SWITCH_INSTEAD_CUDA),
    # caps the CPU kernel table; unset: the widest this CPU runs. An unknown value runs base (the C++ rule)
    Switch(CPU_ISA, ("base", "avx2", "avx512"), "avx512", "base", Warnings.W_SWITCH_INSTEAD_CPU_ISA),
    # 0: the fp16/bf16 char CNN on CUDA cores; 1: on tensor cores where it can
    Switch(CHAR_CNN_MMA, ("0", "1"), "1", "1", Warnings.W_SWITCH_INSTEAD_CHAR_CNN_MMA),
    # the CUDA LSTM's products of both directions: one batched GEMM, one per direction, or by dtype and K
    Switch(LSTM_PRODUCTS, ("batched", "per-direction", "auto"), "auto", "auto",
           Warnings.W_SWITCH_INSTEAD_LSTM_PRODUCTS),
    # 0: pretrain returns freed memory to the system as glibc does by default
    Switch(KEEP_FREED_MEMORY, ("0", "1"), "1", "1", Warnings.W_SWITCH_INSTEAD_KEEP_FREED_MEMORY),
    # the benchmarks' download and work directory
    Switch(CACHE, (), "~/.cache/spacy-elmo", "~/.cache/spacy-elmo", Warnings.W_SWITCH_INSTEAD_CACHE),
)}

#: The switches setup.py alone reads (through build_flags.py), when it builds the extension: set at run time, they
#: change nothing (``spacy-elmo info`` says so).
BUILD_TIME = (NO_EXTENSION, CUDA)

_warned: Set[Tuple[str, str]] = set()


def accepted(name: str) -> str:
    """The values ``name`` takes, as the warning names them."""
    values = SWITCHES[name].values
    return " | ".join(values) if values else Warnings.W_SWITCH_ANY_PATH


def problem(name: str, value: Optional[str]) -> Optional[str]:
    """What is wrong with ``name=value`` (the warning's text), None when the switch takes it or it is
    unset (``value`` None)."""
    switch = SWITCHES[name]
    if value is None or (value in switch.values if switch.values else value != ""):
        return None
    return Warnings.W_SWITCH_UNKNOWN.format(name=name, value=value, accepted=accepted(name), instead=switch.instead)


def read(name: str) -> str:
    """The value of ``name`` in force now: as set, the default when unset, the fallback (and a
    :class:`SwitchWarning`, once per value) when set to a value it does not take."""
    switch = SWITCHES[name]
    value = os.environ.get(name)
    if value is None:
        return switch.default
    message = problem(name, value)
    if message is None:
        return value
    if (name, value) not in _warned:
        _warned.add((name, value))
        warnings.warn(message, SwitchWarning, stacklevel=2)
    return switch.fallback


def set_now() -> Dict[str, Tuple[str, Optional[str]]]:
    """The switches set in this process's environment now: name -> (value, what is wrong with it, None
    where the switch takes it: :func:`problem`)."""
    return {name: (os.environ[name], problem(name, os.environ[name])) for name in SWITCHES if name in os.environ}
