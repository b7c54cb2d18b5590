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
