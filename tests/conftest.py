"""Fixtures shared by the test directories."""

import errno
import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def kill_runner(tmp_path_factory):
    """Runs spacy-elmo commands in child processes that SIGKILL themselves at a chosen point
    (tests/kill_runner.py): ``kill_runner.run(point, n, args)``."""
    from tests.kill_runner import KillRunner

    runner = KillRunner(tmp_path_factory.mktemp("kill-runs"))
    yield runner
    runner.close()


@pytest.fixture
def ended_pid():
    """The id of a process that has ended (and been waited for): what a SIGKILLed writer's
    temporary file ``.NAME.PID.tmp`` holds (a running process's is left alone)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


#: The error of flock on a file system without locks (some network mounts), which :func:`no_flock` gives.
NO_FLOCK = OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


@pytest.fixture
def no_flock(monkeypatch):
    """A file system without flock: every ``flock`` of pretrain's and embed's locks (``spacy_elmo.atomic.fcntl``)
    fails with :data:`NO_FLOCK`'s error. Skipped where there is no fcntl (Windows)."""
    from spacy_elmo import atomic

    pytest.importorskip("fcntl")

    class NoLocks:
        LOCK_EX, LOCK_NB = atomic.fcntl.LOCK_EX, atomic.fcntl.LOCK_NB

        @staticmethod
        def flock(fd, operation):
            raise OSError(NO_FLOCK.errno, NO_FLOCK.strerror)

    monkeypatch.setattr(atomic, "fcntl", NoLocks)


@pytest.fixture(scope="session")
def allennlp():
    """``benchmarks.allennlp_reference`` with AllenNLP 2.10.1's real modules loaded from its wheel
    (downloaded once); the test is skipped when the wheel or the benchmarks package is unavailable."""
    ref = pytest.importorskip("benchmarks.allennlp_reference")
    try:
        ref.load_allennlp_elmo()
    except ref.AllenNLPUnavailable as err:
        pytest.skip(f"allennlp {ref.ALLENNLP_VERSION} wheel unavailable: {err}")
    return ref
