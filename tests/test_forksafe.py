"""spacy_elmo.forksafe: the hooks a forked child runs (that the child of a process whose threads hold
the component's locks does not hang: tests/pipeline/test_serving.py)."""

import gc
import multiprocessing
import os

import pytest

from spacy_elmo import forksafe
from spacy_elmo.bilm.token_cache import TokenCache


def test_an_object_gone_leaves_no_hook():
    """Each cache registers its hook: one held for ever would keep every cache a process made (and
    its matrix) alive."""
    gc.collect()
    before = len(forksafe._METHODS)
    caches = [TokenCache(0) for _ in range(20)]
    assert len(forksafe._METHODS) == before + 20
    del caches
    gc.collect()
    assert len(forksafe._METHODS) == before


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def count(self) -> None:
        self.calls += 1


def _report(counter, path):  # run in the forked child
    path.write_text(str(counter.calls))


def test_hooks_run_in_a_forked_child_only(tmp_path):
    if not hasattr(os, "register_at_fork"):
        pytest.skip("no fork on this platform")
    counter = _Counter()
    forksafe.after_fork_in_child(counter.count)
    child = multiprocessing.get_context("fork").Process(target=_report, args=(counter, tmp_path / "calls"))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert (tmp_path / "calls").read_text() == "1" and counter.calls == 0
