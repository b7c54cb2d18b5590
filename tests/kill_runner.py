"""Run spacy-elmo commands in child processes that SIGKILL themselves at a chosen point.

A kill comes from ``os.kill(os.getpid(), SIGKILL)`` in the child: nothing runs after it (no
``finally``, no ``atexit``, no flush), as for a kill from outside, but always at the same point,
whatever the timing. Points (the N-th time the child gets there):

  step             before an optimizer step (pretraining; N - 1 steps are done)
  embed            before a biLM call of the embedding (``embedding.embed_lines``)
  replace:GLOB     an atomic write (``os.replace``) onto a name matching GLOB: its temporary
                   file is cut to half its size (what a kill in the middle of writing it
                   leaves) and the process is killed before the rename
  replaced:GLOB    right after such a rename

Starting Python, torch, spaCy and the package takes seconds per process, more than a tiny run:
``python tests/kill_runner.py`` imports them once and then, for every request read from its
stdin (a JSON line: point, n, args, log, threads), forks a child that runs ``spacy-elmo ARGS`` as
``python -m spacy_elmo`` does (its output going to the file ``log``), waits for it and answers
a JSON line: the signal that ended it, or its exit status. Nothing has computed with torch
before the fork, so no thread pool is copied half-alive into the child.
"""

import fnmatch
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence


class KillRunner:
    """The test side: one ``kill_runner.py`` process, started on the first request."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process = None
        self.runs = 0

    def run(self, point: str, n: int, args: Sequence) -> str:
        """Run ``spacy-elmo ARGS`` killed at ``point`` (the n-th time); its output. An AssertionError
        with that output when the child was not killed there."""
        if self.process is None:
            import spacy_elmo

            root = str(Path(spacy_elmo.__file__).resolve().parent.parent)  # this checkout's package
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
            self.process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            env=env, text=True)
        import torch

        self.runs += 1
        log = self.directory / f"run-{self.runs}.log"
        request = {"point": point, "n": n, "args": [str(a) for a in args], "log": str(log), "threads": torch.get_num_threads()}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"kill_runner.py ended (exit {self.process.wait()})"
        output = log.read_text(encoding="utf-8", errors="replace")
        ended = json.loads(answer)
        assert ended == {"signal": int(signal.SIGKILL)}, f"not killed at {point} #{n} ({ended}):\n{output}"
        return output

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()  # idle between requests; its interpreter's exit takes seconds
            self.process.wait()


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _install(point: str, n: int) -> None:
    calls = []

    def reached() -> bool:
        calls.append(1)
        return len(calls) == n

    if point == "step":
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(lambda *args: _kill() if reached() else None)
    elif point == "embed":
        import spacy_elmo.embedding as embedding

        real_embed = embedding.embed_lines

        def embed_lines(*args, **kwargs):
            if reached():
                _kill()
            return real_embed(*args, **kwargs)

        embedding.embed_lines = embed_lines
    elif point.startswith(("replace:", "replaced:")):
        when, pattern = point.split(":", 1)
        real_replace = os.replace

        def replace(src, dst, *args, **kwargs):
            if not fnmatch.fnmatchcase(Path(dst).name, pattern) or not reached():
                return real_replace(src, dst, *args, **kwargs)
            if when == "replaced":
                real_replace(src, dst, *args, **kwargs)
            elif Path(src).is_file():
                os.truncate(src, Path(src).stat().st_size // 2)
            _kill()

        os.replace = replace
    else:
        raise ValueError(f"unknown kill point {point!r}")


def _child(request: dict) -> None:
    """Run the command of ``request`` in this (forked) process, killed at its point; never returns."""
    code = 1
    try:
        with open(request["log"], "wb") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        _install(request["point"], request["n"])
        import torch

        # As many threads as the test process: their number changes the last bits of the
        # numbers (and the package's fork handler sets one; pipeline/runner.py).
        torch.set_num_threads(request["threads"])
        from spacy_elmo.cli import app

        app(request["args"], prog_name="spacy-elmo")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve() -> None:
    import h5py  # noqa: F401  (what the commands import, once, before any fork)
    import torch._dynamo  # noqa: F401  (the optimizers import it on first use: a second per process)

    import spacy_elmo.cli  # noqa: F401
    import spacy_elmo.embedding  # noqa: F401
    import spacy_elmo.training.trainer  # noqa: F401
    from spacy_elmo.training.data import make_nlp

    make_nlp("en")  # imports spaCy's English
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        ended = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.WEXITSTATUS(status)}
        print(json.dumps(ended), flush=True)


if __name__ == "__main__":
    _serve()
