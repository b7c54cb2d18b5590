"""The console script prints spacy-elmo's warnings as one line, and others as Python does."""

import sys
import warnings

import pytest

from spacy_elmo import cli
from spacy_elmo.errors import Warnings


def _shown(message, category=UserWarning):
    return warnings.formatwarning(message, category, "/site-packages/x/module.py", 94, "    warnings.warn(...)")


def test_main_prints_our_warnings_as_one_line_and_others_unchanged(monkeypatch):
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    python_default = warnings.formatwarning
    monkeypatch.setattr(sys, "argv", ["spacy-elmo", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    ours = Warnings.W_NEGATIVES_CLAMPED.format(negatives=9, vocab=5)
    assert _shown(ours, RuntimeWarning) == f"RuntimeWarning: {ours}\n"
    theirs = "some library's own warning"
    assert _shown(theirs) == python_default(theirs, UserWarning, "/site-packages/x/module.py", 94,
                                            "    warnings.warn(...)")
    assert "module.py:94" in _shown(theirs)


def test_main_prints_a_switch_warning_as_one_line(monkeypatch):
    """A SPACY_ELMO_* switch with a value it does not take (SPACY_ELMO_CPU_ISA=AVX2) was printed in Python's form,
    extension.py's path and source line: its message names the switch first, not "spacy-elmo:"."""
    from spacy_elmo.switches import CPU_ISA, SwitchWarning

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    monkeypatch.setattr(sys, "argv", ["spacy-elmo", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    switch = Warnings.W_SWITCH_UNKNOWN.format(name=CPU_ISA, value="AVX2", accepted="base | avx2 | avx512",
                                              instead="the base CPU kernel table runs")
    assert _shown(switch, SwitchWarning) == f"SwitchWarning: {switch}\n"
