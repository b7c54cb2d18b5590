"""Fixtures shared by the test directories."""

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
