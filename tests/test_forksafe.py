"""spacy_elmo.forksafe: the hooks a forked child runs (that the child of a process whose threads hold
the component's locks does not hang: tests/pipeline/test_serving.py)."""

import gc
import multiprocessing
import os
import warnings

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


class _Failing:
    def fail(self) -> None:
        raise RuntimeError("planted failure")


def test_a_failing_hook_is_reported_and_the_others_still_run(tmp_path):
    """One hook that raises skipped every hook after it (the child's thread count among them)."""
    if not hasattr(os, "register_at_fork"):
        pytest.skip("no fork on this platform")
    failing, counter = _Failing(), _Counter()
    forksafe.after_fork_in_child(failing.fail)  # runs first: hooks run in the order registered
    forksafe.after_fork_in_child(counter.count)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: stderr into the pipe was set up after the hooks ran, so report by hand
        try:
            os.close(r)
            os.write(w, str(counter.calls).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as child_out:
        calls = child_out.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert calls == "1", "the hook after the failing one did not run"
    del failing, counter
    gc.collect()


def test_a_failing_hook_warns_naming_it(recwarn, monkeypatch):
    # this process's own hooks set aside: run here, they would renew its caches and set it to one thread
    monkeypatch.setattr(forksafe, "_METHODS", {})
    monkeypatch.setattr(forksafe, "_FUNCTIONS", [])
    failing, counter = _Failing(), _Counter()
    forksafe.after_fork_in_child(failing.fail)
    forksafe.after_fork_in_child(counter.count)
    forksafe._run_hooks()  # as a forked child runs them
    assert counter.calls == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # -W error: the warning raises, after every hook ran
        with pytest.raises(RuntimeWarning, match="planted failure"):
            forksafe._run_hooks()
    assert counter.calls == 2
    messages = [str(w.message) for w in recwarn.list]
    assert any("_Failing.fail" in m and "planted failure" in m for m in messages), messages
