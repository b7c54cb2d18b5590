"""Tokenizing the corpus in worker processes (``build_corpus(processes=N)``, ``pretrain
--tokenize-processes``): the cache is the one-process cache byte for byte, in the text's order, its
fingerprint does not depend on N, and no worker outlives its parent, killed or failed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training import data
from spacy_elmo.training.trainer import TrainConfig

from ..compressed import compressed

CACHE_FILES = ("tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt", "meta.json")


def _corpus(tmp_path: Path) -> Path:
    """A directory of a BOM, undecodable bytes, a line longer than PIECE_CHARS and a gzip file."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [f"Line {i} says: the {i % 7}th cat isn't here. Dr. Smith paid $3.50 in N.Y. again!" for i in range(300)]
    (corpus / "a.txt").write_bytes("\ufeff".encode() + "\n".join(lines[:150]).encode() + b"\nbad \xff\xfe bytes here.\n")
    long_line = " ".join(f"w{i % 997}." for i in range(data.PIECE_CHARS // 3))
    (corpus / "b.txt").write_text(long_line + "\n" + "\n".join(lines[150:]) + "\n", encoding="utf-8")
    plain = tmp_path / "c.txt"
    plain.write_bytes(b"Compressed text, more \xc3 bytes.\n" + "\n".join(reversed(lines)).encode())
    compressed(plain, ".gz", to=corpus / "c.txt.gz")
    return corpus


def _slow_iter_sentences(texts, nlp, batch_size=256):
    """iter_sentences, with the even batches delayed: the workers answer out of the text's order."""
    texts = list(texts)
    if len(texts[0]) % 2 == 0:
        time.sleep(0.02)
    return _ITER_SENTENCES(texts, nlp, batch_size)


_ITER_SENTENCES = data.iter_sentences


def test_two_processes_write_the_one_process_cache(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path)
    with pytest.warns(RuntimeWarning):
        one = data.build_corpus(corpus, "en", tmp_path / "one", progress=False, processes=1)
    # Small batches: many of them, more than the two on their way per worker; the workers (forked
    # with this module) answer some out of order.
    monkeypatch.setattr(data, "BATCH_CHARS", 500)
    monkeypatch.setattr(data, "iter_sentences", _slow_iter_sentences)
    with pytest.warns(RuntimeWarning):
        two = data.build_corpus(corpus, "en", tmp_path / "two", progress=False, processes=2)
    assert one["stats"]["replaced_bytes"] == 3 and one["stats"]["files_with_replacements"] == 2
    assert one["stats"]["long_lines"] == 1 and one["stats"]["n_files"] == 3
    assert two == one  # statistics (replaced bytes, long lines...) and fingerprint
    for name in CACHE_FILES:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert not (tmp_path / "one" / "types.txt").read_text(encoding="utf-8").startswith("<S>\n</S>\n<UNK>\n\ufeff")


def test_workers_started_by_forkserver(tmp_path, monkeypatch):
    # Python 3.14's default on Linux: the workers' parent is the fork server, not this process
    # (they took it for gone and ended at once), and they build the pipeline from what they are given.
    import multiprocessing

    get_context = multiprocessing.get_context
    monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: get_context("forkserver"))
    path = tmp_path / "t.txt"
    path.write_text("One line. Another one, Dr. Smith's.\n" * 50, encoding="utf-8")
    one = data.build_corpus(path, "en", tmp_path / "one", progress=False, processes=1)
    assert data.build_corpus(path, "en", tmp_path / "two", progress=False, processes=2) == one
    assert (tmp_path / "two" / "tokens.i32").read_bytes() == (tmp_path / "one" / "tokens.i32").read_bytes()


#: A stand-in for jieba (which this environment may lack): ``cut`` gives the runs between spaces, the spaces too.
FAKE_JIEBA = """import re


def cut(text, cut_all=False):
    return [piece for piece in re.split(r"(\\s+)", text) if piece]
"""


def test_workers_started_by_spawn_read_a_jieba_block(tmp_path, monkeypatch):
    # pretrain --tokenizer's segmenter = "jieba" (the README's example): spaCy's ChineseTokenizer holds the jieba
    # module, which pickle refuses (spawn: macOS's default); the workers build the pipeline themselves instead.
    import multiprocessing

    (tmp_path / "fake" / "jieba").mkdir(parents=True)
    (tmp_path / "fake" / "jieba" / "__init__.py").write_text(FAKE_JIEBA, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))  # the spawned workers get this sys.path
    monkeypatch.delitem(sys.modules, "jieba", raising=False)  # a real one, or the fake once the test ends
    get_context = multiprocessing.get_context
    monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: get_context("spawn"))
    block = {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "jieba"}
    nlp = data.make_nlp("zh", tokenizer=block)
    path = tmp_path / "t.txt"
    path.write_text("".join(f"我喜欢茶 你好 {i} 。\n" for i in range(200)), encoding="utf-8")
    one = data.build_corpus(path, "zh", tmp_path / "one", progress=False, nlp=nlp, processes=1)
    assert data.build_corpus(path, "zh", tmp_path / "two", progress=False, nlp=nlp, processes=2) == one
    assert one["tokenizer"] == block
    for name in CACHE_FILES:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert "我喜欢茶\n" in (tmp_path / "two" / "types.txt").read_text(encoding="utf-8")  # jieba's runs, not characters


def test_cache_of_one_process_is_reused_with_four(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("One line. Another one.\n", encoding="utf-8")
    meta = data.build_corpus(path, "en", tmp_path / "cache", progress=False, processes=1)

    def refuse(*args):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(data, "sentence_stream", refuse)
    assert data.build_corpus(path, "en", tmp_path / "cache", progress=False, processes=4) == meta


def test_auto_processes(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("A small corpus.\n", encoding="utf-8")
    assert data.tokenize_processes(0, path) == 1  # below AUTO_MIN_BYTES: one process
    assert data.tokenize_processes(3, path) == 3
    monkeypatch.setattr(data, "AUTO_MIN_BYTES", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert data.tokenize_processes(0, path) == data.AUTO_MAX_PROCESSES
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert data.tokenize_processes(0, path) == 2


def test_an_error_while_reading_stops_the_workers(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path)
    compressed(corpus / "b.txt", ".gz", to=corpus / "d.txt.gz", damage="truncated")
    monkeypatch.setattr(data, "BATCH_CHARS", 500)
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="d.txt.gz"):
        data.build_corpus(corpus, "en", tmp_path / "cache", progress=False, processes=2)
    import multiprocessing

    assert multiprocessing.active_children() == []
    assert not (tmp_path / "cache" / "meta.json").exists()


def _dying_iter_sentences(texts, nlp, batch_size=256):
    os._exit(3)


def test_a_dead_worker_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "iter_sentences", _dying_iter_sentences)
    path = tmp_path / "t.txt"
    path.write_text("One line.\n" * 10, encoding="utf-8")
    with pytest.raises(RuntimeError, match=r"exit code 3.*--tokenize-processes 1"):
        data.build_corpus(path, "en", tmp_path / "cache", progress=False, processes=2)
    assert not (tmp_path / "cache" / "meta.json").exists()


class _LateError(ValueError):
    pass


_RELEASE = None  # a multiprocessing Event (forked workers inherit it): the workers fail once it is set


def _failing_iter_sentences(texts, nlp, batch_size=256):
    """A worker's error, sent after the parent's wait for results timed out (on _RELEASE)."""
    _RELEASE.wait()
    raise _LateError("bad batch: the worker's own message")


def test_a_failed_worker_shows_its_error_not_death(tmp_path, monkeypatch):
    # The interleaving that made a failed worker read as a dead one: the parent's wait for results
    # times out, the worker then sends its error and ends, and only then does the parent see it ended.
    # Forced: the workers fail when the parent's liveness check lets them, and it waits for their end.
    import multiprocessing
    from multiprocessing.process import BaseProcess

    monkeypatch.setattr(sys.modules[__name__], "_RELEASE", multiprocessing.get_context("fork").Event())
    monkeypatch.setattr(data, "iter_sentences", _failing_iter_sentences)
    monkeypatch.setattr(data, "WORKER_POLL", 0.05)
    monkeypatch.setattr(data, "BATCH_CHARS", 100)  # two batches: each worker gets one and fails
    parent, is_alive = os.getpid(), BaseProcess.is_alive

    def ended_after_release(process):
        if os.getpid() != parent:
            return is_alive(process)
        _RELEASE.set()
        process.join()
        return False

    monkeypatch.setattr(BaseProcess, "is_alive", ended_after_release)
    path = tmp_path / "t.txt"
    path.write_text("One line here.\n" * 12, encoding="utf-8")  # 180 characters
    with pytest.raises(RuntimeError, match=r"(?s)failed.*_LateError: bad batch: the worker's own message") as info:
        data.build_corpus(path, "en", tmp_path / "cache", progress=False, processes=2)
    assert "ended before" not in str(info.value)
    assert multiprocessing.active_children() == []
    assert not (tmp_path / "cache" / "meta.json").exists()


def test_a_worker_that_cannot_build_the_pipeline_says_so(tmp_path, monkeypatch):
    """A worker that failed to build its pipeline (a tokenizer registered by code only the parent ran) was told to
    "run again with --tokenize-processes 1 to see it in this process", as a failure in tokenizing: the error names
    the build, its language and block, and --tokenize-processes 1 as the fix (the parent built the pipeline)."""
    import multiprocessing

    nlp = data.make_nlp("en")  # the parent's: built

    def unbuildable(lang, **kwargs):
        raise ValueError("no tokenizer 'custom.v1' in the registry")

    monkeypatch.setattr(data, "make_nlp", unbuildable)  # the forked workers' (fork: the default on Linux)
    path = tmp_path / "t.txt"
    path.write_text("One line here.\n" * 12, encoding="utf-8")
    with pytest.raises(RuntimeError) as info:
        data.build_corpus(path, "en", tmp_path / "cache", progress=False, processes=2, nlp=nlp)
    said = str(info.value)
    assert said.startswith("A tokenizing worker process could not build the pipeline"), said
    assert """language 'en', tokenizer block {"@tokenizers": "spacy.Tokenizer.v1"}""" in said, said
    assert "no tokenizer 'custom.v1' in the registry" in said and "to see it" not in said, said
    assert said.endswith("Run again with --tokenize-processes 1: the corpus is then tokenized in this process, "
                         "with the pipeline it built."), said
    assert multiprocessing.active_children() == []
    assert not (tmp_path / "cache" / "meta.json").exists()


def _children(pid: int):
    """Live (not zombie) processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_parent_killed_while_tokenizing_leaves_no_worker_and_no_cache(tmp_path, signum):
    """SIGKILL: nothing runs in the parent; SIGINT (Ctrl-C, here to the parent alone): it stops its workers."""
    path = tmp_path / "t.txt"
    path.write_text("The cat sat on the mat, didn't it? Yes.\n" * 400_000, encoding="utf-8")  # ~16 MB
    cache = tmp_path / "cache"
    # Python keeps SIGINT ignored when it starts so (under `nohup cmd &` or a job runner): the test's
    # Ctrl-C then did nothing and the corpus was built. A terminal's Ctrl-C reaches a default handler.
    script = (f"import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"from spacy_elmo.training.data import build_corpus\n"
              f"build_corpus({str(path)!r}, 'en', {str(cache)!r}, progress=False, processes=2)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 60
        while len(_children(parent.pid)) < 2 or not (cache / "tokens.raw").exists():
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        workers = _children(parent.pid)
        parent.send_signal(signum)
        # generous: on a machine busy with other builds the parent took over 10 s to stop its
        # workers (2026-11-26, load 11 on 2 cores); a parent that never exits still fails here
        assert parent.wait(timeout=60) != 0
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
        assert not (cache / "meta.json").exists()
    finally:
        parent.kill()


def test_option_checked_and_passed(tmp_path, monkeypatch):
    result = CliRunner().invoke(app, ["pretrain", str(tmp_path), str(tmp_path / "out"), "--tokenize-processes", "-1"])
    assert result.exit_code == 2 and "--tokenize-processes" in result.output
    with pytest.raises(ValueError, match="tokenize_processes"):
        TrainConfig(train_path="x", output_dir="y", tokenize_processes=-1).validate()
    seen = {}

    def fake_train(cfg, on_step=None):
        seen["cfg"] = cfg
        raise ValueError("stop")

    import spacy_elmo.training.trainer as trainer

    monkeypatch.setattr(trainer, "train", fake_train)
    result = CliRunner().invoke(app, ["pretrain", str(tmp_path), str(tmp_path / "out"), "--tokenize-processes", "3"])
    assert result.exit_code == 1 and seen["cfg"].tokenize_processes == 3


_STUCK_WORKER = """
import multiprocessing, os, sys, time
from spacy_elmo.training import data

def stuck():  # as a worker reading a batch its killed parent had half sent: waits forever
    data._die_with_parent()
    read, write = os.pipe()
    os.read(read, 1)

if __name__ == "__main__":
    child = multiprocessing.get_context("fork").Process(target=stuck)
    child.start()
    print(child.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_waiting_in_a_read_dies_with_its_parent(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK_WORKER, encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(child):
            os.kill(child, signal.SIGKILL)
            pytest.fail("the worker outlived its killed parent")
    finally:
        parent.kill()


def test_pretrain_with_two_tokenizing_processes(tmp_path, monkeypatch):
    from .conftest import tiny_pretrain_args

    stream, used = data.sentence_stream, []

    def recorded(texts, nlp, processes=1):
        used.append(processes)
        return stream(texts, nlp, processes)

    monkeypatch.setattr(data, "sentence_stream", recorded)
    args, train, _ = tiny_pretrain_args(tmp_path, tmp_path / "out", "--tokenize-processes", "2", max_steps=1)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert used == [2]
    data.build_corpus(train, "en", tmp_path / "one", progress=False, processes=1)
    for name in CACHE_FILES:
        assert (tmp_path / "out" / "data" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


@pytest.mark.parametrize("where", ["build", "read"])
def test_a_worker_error_carries_its_traceback(monkeypatch, where):
    """A tokenizing worker's error (building its pipeline, E_TOKENIZE_WORKER_BUILD; reading a batch,
    E_TOKENIZE_WORKER_FAILED) reaches the parent with the worker's traceback, the raising line in it. Run here, in
    this process (its parent-death and signal settings left out)."""
    import queue

    monkeypatch.setattr(data, "_die_with_parent", lambda: None)
    monkeypatch.setattr(data.signal, "signal", lambda *args: None)
    reading = ("en", {"@tokenizers": "spacy.Tokenizer.v1"})
    if where == "build":
        reading = ("en", {"@tokenizers": "no.such.tokenizer.v1"})
    else:
        def broken(*args, **kwargs):
            raise RuntimeError("the batch could not be read")

        monkeypatch.setattr(data, "iter_sentences", broken)
    tasks, results = queue.Queue(), queue.Queue()
    tasks.put((0, ["a b."]))
    tasks.put(None)
    data._tokenize_worker(reading, tasks, results)
    seq, sentences, error = results.get_nowait()
    assert (seq, sentences) == (0, None)
    assert "Traceback (most recent call last):" in error, error
    if where == "build":
        assert "no.such.tokenizer.v1" in error and "in make_nlp" in error, error
        # the block shown as JSON, as the inner error shows it, which names the worker's rebuild, not TrainConfig
        assert 'tokenizer block {"@tokenizers": "no.such.tokenizer.v1"})' in error, error
        assert ("(the block of the pipeline the process that started this worker reads with)" in error
                and "TrainConfig.tokenizer" not in error), error
    else:
        assert 'raise RuntimeError("the batch could not be read")' in error, error
        assert "RuntimeError: the batch could not be read" in error, error
