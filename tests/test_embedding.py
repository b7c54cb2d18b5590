"""Embedding a corpus into HDF5: each line's dataset equals the biLM run on that line
alone, a killed run resumes to the identical file, bad input gets clear errors."""

import hashlib
import json
import re
import signal
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import spacy_elmo.embedding
from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.embedding import embed_file, embed_lines, parts_path
from tests.bilm.oracle import NumpyElmo, options, write_model_files
from tests.cli_text import mixed_runner as runner, plain
from tests.compressed import FORMATS, compressed

LINES = [
    "The bank raised its rates .",
    "",
    "We sat on the river bank all afternoon and watched the boats go by .",
    "밥 먹었어요 ?",
    "x",
    "The bank raised its rates .",
    "Ünïcödé   spacing\tand tabs",
]


@pytest.fixture
def model_dir(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    write_model_files(directory, options(), seed=7)
    return directory


@pytest.fixture
def bilm(model_dir):
    return BiLM.load(model_dir)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def interrupted_at_call(n):
    """``embed_lines`` that stops with a KeyboardInterrupt (Ctrl-C) at its ``n``-th call."""
    real, calls = spacy_elmo.embedding.embed_lines, []

    def embed_lines(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return embed_lines


def read_all(path):
    with h5py.File(path, "r") as f:
        data = {name: f[name][()] for name in f if name != "sentence_to_index"}
        mapping = json.loads(f["sentence_to_index"][0])  # how readers of AllenNLP's files get it
    return data, mapping


@pytest.mark.parametrize("cache_size", [0, 50])
@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_every_line_is_its_own_dataset_equal_to_the_bilm_alone(bilm, corpus, tmp_path, layers, cache_size):
    out = tmp_path / "out.h5"
    counts = embed_file(bilm, corpus, out, layers=layers, batch_size=3, part_size=4, cache_size=cache_size,
                        progress=False)
    assert counts["lines"] == len(LINES) and counts["finished"] == 1
    assert not (tmp_path / "out.h5.parts").exists()
    data, mapping = read_all(out)
    assert sorted(data, key=int) == [str(i) for i in range(len(LINES))]
    L1, D = bilm.config.n_output_layers, bilm.config.output_dim
    for i, line in enumerate(LINES):
        tokens = line.split()
        got = data[str(i)]
        if not tokens:
            assert got.shape == ((L1, 0, D) if layers == "all" else (0, D))
            continue
        with torch.no_grad():
            alone = torch.stack(bilm(batch_to_ids([tokens])).activations)[:, 0].numpy()  # (L + 1, n, D)
        want = {"all": alone, "top": alone[-1], "average": alone.mean(0)}[layers]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # AllenNLP's mapping: text -> index, the last occurrence for a repeated line
    assert mapping[LINES[0]] == "5" and mapping[LINES[3]] == "3"


def test_embed_lines_of_a_stateful_bilm_keeps_each_rows_states(model_dir):
    """A stateful biLM runs an empty row too (as AllenNLP does): row i of the next batch starts from
    row i's states, not from those of the row after an empty one; a batch of empty rows only was
    skipped, its rows' states not carried on."""
    bilm = BiLM.load(model_dir, stateful=True)
    oracle = NumpyElmo(options(), model_dir / "weights.hdf5")
    for rows in ([["a", "b"], [], ["c"]], [[], [], []], [["d"], ["e", "f"], ["g"]]):
        for vec, expected in zip(embed_lines(bilm, rows), oracle.batch(rows, stateful=True)):
            assert vec.shape == expected.shape
            np.testing.assert_allclose(vec, expected, atol=1e-5, rtol=0)


def test_files_read_as_allennlp_readers_read_its_elmo_command_output(bilm, tmp_path):
    """AllenNLP's `allennlp elmo` stores sentence_to_index as a (1,) string dataset holding
    json.dumps({line.strip(): str(index)}); ours was a scalar dataset of {line: int}, so
    f["sentence_to_index"][0] raised "Illegal slicing argument for scalar dataspace" and
    f[mapping[sentence]] raised "Accessing a group is done with bytes or str, not int"."""
    path = tmp_path / "in.txt"
    path.write_text("  padded line \t\nplain\n", encoding="utf-8")
    embed_file(bilm, path, tmp_path / "o.h5", layers="top", progress=False)
    with h5py.File(tmp_path / "o.h5", "r") as f:
        assert f["sentence_to_index"].shape == (1,)
        mapping = json.loads(f["sentence_to_index"][0])
        assert mapping == {"padded line": "0", "plain": "1"}
        assert f[mapping["padded line"]].shape == (2, bilm.config.output_dim)
        assert f[mapping["plain"]].dtype == np.float32


def test_line_i_of_the_file_is_dataset_i_whatever_the_line_breaks_and_a_bom_is_no_text(bilm, tmp_path):
    """Lines end at b"\\n" only (wc -l, AllenNLP's file iteration): \\x0b, \\x0c, \\x1c-\\x1e, \\x85,
    U+2028/9 inside a line split tokens, not lines. A leading BOM stuck to the first token
    ("\\ufeffFirst" got other vectors than "First")."""
    raw = (b"\xef\xbb\xbfFirst line\r\n" + "a\x0bb\x0cc\r\n".encode() + "d\x1ce\x1df\x1eg\n".encode()
           + "h\x85i\u2028j\u2029k\n".encode() + b"   \n\n" + "日本語 😀 e\u0301 tab\there\n".encode() + b"last")
    path = tmp_path / "in.txt"
    path.write_bytes(raw)
    pieces = [p.decode("utf-8").rstrip("\r") for p in raw.split(b"\n")]
    pieces[0] = pieces[0].removeprefix("\ufeff")
    assert len(pieces) == raw.count(b"\n") + 1 == 8
    embed_file(bilm, path, tmp_path / "o.h5", progress=False)
    data, mapping = read_all(tmp_path / "o.h5")
    assert sorted(data, key=int) == [str(i) for i in range(len(pieces))]
    for i, piece in enumerate(pieces):
        tokens = piece.split()
        assert data[str(i)].shape[1] == len(tokens), (i, piece)
        if tokens:
            with torch.no_grad():
                alone = torch.stack(bilm(batch_to_ids([tokens])).activations)[:, 0].numpy()
            np.testing.assert_allclose(data[str(i)], alone, rtol=1e-5, atol=1e-6)
    assert mapping["First line"] == "0" and mapping["last"] == "7"


def test_a_killed_run_resumes_to_the_identical_file(bilm, corpus, tmp_path, ended_pid):
    straight, resumed = tmp_path / "straight.h5", tmp_path / "resumed.h5"
    embed_file(bilm, corpus, straight, batch_size=2, part_size=2, progress=False)
    first = embed_file(bilm, corpus, resumed, batch_size=2, part_size=2, progress=False, stop_after_parts=2)
    assert first["finished"] == 0 and not resumed.exists()
    assert len(list((tmp_path / "resumed.h5.parts").glob("part-*.hdf5"))) == 2
    # what a kill in the middle of a part and of the merge leaves behind
    (tmp_path / "resumed.h5.parts" / f".part-000002.hdf5.{ended_pid}.tmp").write_bytes(b"half")
    (tmp_path / f".resumed.h5.{ended_pid}.tmp").write_bytes(b"half")
    second = embed_file(bilm, corpus, resumed, batch_size=2, part_size=2, progress=False)
    assert second["parts_reused"] == 2 and second["parts_written"] == 2 and second["finished"] == 1
    a, map_a = read_all(straight)
    b, map_b = read_all(resumed)
    assert map_a == map_b and a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "resumed.h5", "straight.h5"]


class Killed(BaseException):
    """Stands for a SIGKILL at the point where it is raised (nothing below catches it)."""


def _raise_killed(*args, **kwargs):
    raise Killed


@pytest.mark.parametrize("moment,name", [("after the rename", "out.h5"), ("while removing the parts", "out.h5"),
                                         ("while removing the parts", "run[1].h5")])
def test_a_run_killed_while_finishing_is_finished_by_a_rerun(bilm, corpus, tmp_path, monkeypatch, moment, name):
    """Killed after the merged file was renamed into place but before the parts were removed,
    a rerun with the same arguments said "already exists" (and the parts stayed): it now
    removes them and reports the file, identical to a straight run. The renamed-away parts
    directory was looked for with OUTPUT's name as a glob pattern: with glob characters in it
    (run[1].h5) it was not found, and the rerun said "already exists" too."""
    import spacy_elmo.atomic
    import spacy_elmo.embedding

    straight, out = tmp_path / "straight.h5", tmp_path / name
    embed_file(bilm, corpus, straight, part_size=3, progress=False)
    with monkeypatch.context() as patch:
        if moment == "after the rename":
            patch.setattr(spacy_elmo.embedding, "remove_dir", _raise_killed)
        else:  # remove_dir renamed the directory away, then was killed deleting it
            real = spacy_elmo.atomic.shutil.rmtree
            patch.setattr(spacy_elmo.atomic.shutil, "rmtree",
                          lambda path, **kw: _raise_killed() if path.exists() else real(path, **kw))
        with pytest.raises(Killed):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert out.read_bytes() == straight.read_bytes()
    assert len([p for p in tmp_path.iterdir() if p.name.startswith((f".{name}.parts", f"{name}.parts"))]) == 1
    with pytest.raises(FileExistsError, match="--overwrite"):
        embed_file(bilm, corpus, out, part_size=3, layers="top", progress=False)  # other settings
    with pytest.raises(FileExistsError, match="--overwrite"):  # --restart: not finished from the parts
        embed_file(bilm, corpus, out, part_size=3, restart=True, progress=False)
    assert out.read_bytes() == straight.read_bytes()
    counts = embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert counts["finished"] == 1 and counts["parts_written"] == 0 and counts["parts_reused"] == 3
    assert counts["merged"] == 0  # OUTPUT was complete before this run
    assert out.read_bytes() == straight.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.txt", "model", name, "straight.h5"])
    with pytest.raises(FileExistsError, match="--overwrite"):  # finished: as after a straight run
        embed_file(bilm, corpus, out, part_size=3, layers="top", progress=False)


def test_other_settings_after_a_removal_killed_past_the_manifest_are_refused_and_take_the_leftover(
        bilm, corpus, tmp_path, monkeypatch):
    """Killed while deleting its renamed-away parts, the manifest already gone (merged.json left): another run into
    OUTPUT is refused as existing, and takes that leftover along (no manifest tells whose it is any more: kept, it
    stayed for good unless the same run came again). OUTPUT is untouched."""
    import spacy_elmo.atomic

    out = tmp_path / "out.h5"
    real = spacy_elmo.atomic.shutil.rmtree
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.atomic.shutil, "rmtree",
                      lambda path, **kw: _raise_killed() if path.exists() else real(path, **kw))
        with pytest.raises(Killed):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    written = out.read_bytes()
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".out.h5.parts.")]
    (left / "manifest.json").unlink()  # the removal got that far
    with pytest.raises(FileExistsError, match="--overwrite"):
        embed_file(bilm, corpus, out, part_size=3, layers="top", progress=False)
    assert not left.exists() and out.read_bytes() == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5"]


def test_a_run_killed_while_finishing_whose_manifest_has_no_token_digests_is_finished_by_a_rerun(
        bilm, corpus, tmp_path, monkeypatch):
    """An earlier release's manifest (no part_tokens) in the parts of a run killed after its merge: the rerun with
    the same arguments finishes it (removes the parts, OUTPUT untouched), as it resumes such parts."""
    out = tmp_path / "out.h5"
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "remove_dir", _raise_killed)
        with pytest.raises(Killed):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    written, manifest_path = out.read_bytes(), parts_path(out) / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest[spacy_elmo.embedding.TOKENS]
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    counts = embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert counts["finished"] == 1 and counts["merged"] == 0 and counts["parts_written"] == 0
    assert out.read_bytes() == written and not parts_path(out).exists()


#: JSON nested past Python's recursion limit (json.loads raises RecursionError)
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def test_a_run_killed_while_finishing_whose_manifest_is_damaged_is_finished_by_a_rerun(bilm, corpus, tmp_path,
                                                                                        monkeypatch):
    """The parts of a run killed after its merge, their manifest damaged: as good as none (OUTPUT's own record tells
    the same), the rerun finishes it; a JSON array there (no manifest of this run) refused its own OUTPUT as existing."""
    out = tmp_path / "out.h5"
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "remove_dir", _raise_killed)
        with pytest.raises(Killed):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    written = out.read_bytes()
    (parts_path(out) / "manifest.json").write_text("[1]", encoding="utf-8")
    counts = embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert counts["finished"] == 1 and counts["merged"] == 0 and counts["parts_written"] == 0
    assert out.read_bytes() == written and not parts_path(out).exists()


def test_a_merged_json_nested_past_the_recursion_limit_records_no_merge(bilm, corpus, tmp_path):
    """merged.json is read to tell a run killed after its merge: one nested too deep was a RecursionError's
    traceback (other damage was read as no merge, as this is now); the run goes on from its parts."""
    out, straight = tmp_path / "out.h5", tmp_path / "straight.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    (parts_path(out) / "merged.json").write_text(DEEP_JSON, encoding="utf-8")
    counts = embed_file(bilm, corpus, out, part_size=2, progress=False)
    assert counts["finished"] == 1 and counts["parts_reused"] == 1 and not parts_path(out).exists()
    embed_file(bilm, corpus, straight, part_size=2, progress=False)
    assert out.read_bytes() == straight.read_bytes()


#: part_tokens edited to no list of strings: a TypeError's traceback (a number), a KeyError's (an object); shown as
#: the JSON the manifest holds (it was Python's repr: None, {'x': 1}), cut after 80 characters
TOKENS_EDITED = {"tokens a number": 5, "tokens an object": {"x": 1}, "tokens null": None, "tokens of numbers": [1, 2],
                 "tokens a long string": "x" * 500}
TOKENS_SHOWN = {"tokens a number": "5", "tokens an object": '{"x": 1}', "tokens null": "null",
                "tokens of numbers": "[1, 2]", "tokens a long string": '"' + "x" * 79 + "..."}


@pytest.mark.parametrize("damage", ["not json", "nested", "array", *TOKENS_EDITED])
def test_a_damaged_manifest_of_parts_is_refused_naming_it_and_restart(bilm, corpus, tmp_path, damage):
    """The manifest of unfinished parts that is no JSON object was read as none: the parts were said to be an
    older spacy-elmo's, "which did not record model, input, ..." (an array: an AttributeError's traceback, JSON
    nested too deep: a RecursionError's); one whose part_tokens is no list of strings was a TypeError's or
    KeyError's traceback (a list of numbers: said to be tokenized otherwise). It is named, with --restart, nothing
    removed; --restart starts over."""
    out, straight = tmp_path / "out.h5", tmp_path / "straight.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    manifest = parts_path(out) / "manifest.json"
    if damage in TOKENS_EDITED:
        edited = {**json.loads(manifest.read_text(encoding="utf-8")), "part_tokens": TOKENS_EDITED[damage]}
        manifest.write_text(json.dumps(edited), encoding="utf-8")
    else:
        manifest.write_text({"not json": '{"model": ', "nested": DEEP_JSON, "array": "[1, 2]"}[damage], encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        embed_file(bilm, corpus, out, part_size=2, progress=False)
    said = str(refused.value)
    assert said.startswith(f"{manifest} cannot be read (") and said.endswith(
        f"cannot be checked against this run. Pass --restart (or delete {parts_path(out)}) to embed from the start."), said
    assert ("(it holds a JSON array, not an object)" in said) == (damage == "array"), said
    tokens = f"(its part_tokens is {TOKENS_SHOWN.get(damage)}, not a list of the parts' token digests)"
    assert (tokens in said) == (damage in TOKENS_EDITED), said
    assert not out.exists() and (parts_path(out) / "part-000000.hdf5").exists()
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, restart=True)["parts_reused"] == 0
    embed_file(bilm, corpus, straight, part_size=2, progress=False)
    assert out.read_bytes() == straight.read_bytes()


def test_the_parts_of_an_overwrite_killed_beside_a_complete_output_ask_for_overwrite_again(bilm, corpus, tmp_path):
    """A complete OUTPUT, then the same run again with overwrite, stopped after a part: OUTPUT is the earlier run's
    and the parts are the new one's. A rerun without overwrite is refused naming --overwrite (it is not "already
    complete", which left the parts beside OUTPUT for good); with it, it resumes and removes them."""
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=3, progress=False)
    written = out.read_bytes()
    embed_file(bilm, corpus, out, part_size=3, progress=False, overwrite=True, stop_after_parts=1)
    assert parts_path(out).exists()
    with pytest.raises(FileExistsError, match="--overwrite"):
        embed_file(bilm, corpus, out, part_size=3, progress=False)
    counts = embed_file(bilm, corpus, out, part_size=3, progress=False, overwrite=True)
    assert counts["merged"] == 1 and counts["parts_reused"] == 1 and not parts_path(out).exists()
    assert out.read_bytes() == written


def test_an_output_created_while_the_lock_was_taken_is_refused(bilm, corpus, tmp_path, monkeypatch):
    """OUTPUT is checked again once the lock is held: a file created there between the first check and the lock
    (another program's, another run that finished meanwhile) is refused as existing, not overwritten."""
    out = tmp_path / "out.h5"
    real = spacy_elmo.embedding.output_lock

    def lock_after_another_wrote(path):
        out.write_bytes(b"another program's file")
        return real(path)

    monkeypatch.setattr(spacy_elmo.embedding, "output_lock", lock_after_another_wrote)
    with pytest.raises(FileExistsError, match="--overwrite"):
        embed_file(bilm, corpus, out, progress=False)
    assert out.read_bytes() == b"another program's file" and not parts_path(out).exists()


def test_a_rerun_into_the_complete_output_of_the_same_run_is_already_complete(bilm, model_dir, corpus, tmp_path,
                                                                              monkeypatch, ended_pid):
    """Killed after its parts were removed (printing its summary, exiting), a run left OUTPUT complete and its lock
    file: the rerun of the same command was refused as "already exists" and the lock stayed for good. OUTPUT records
    the run that wrote it: the same run finds it complete (nothing embedded, OUTPUT untouched, the stale lock
    removed); another model, settings, text or tokens, --restart, or a file with no record are still refused."""
    import h5py

    out, lock = tmp_path / "out.h5", tmp_path / ".out.h5.lock"
    words = lambda line: line.split()  # noqa: E731
    assert embed_file(bilm, corpus, out, part_size=3, tokenize=words, progress=False)["merged"] == 1
    written, identity = out.read_bytes(), (out.stat().st_ino, out.stat().st_mtime_ns)
    lock.write_text(f"{ended_pid}\n")  # what a SIGKILL after the parts' removal leaves beside OUTPUT
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "embed_lines", _raise_killed)  # nothing is embedded again
        counts = embed_file(bilm, corpus, out, part_size=3, tokenize=words, progress=False)
    assert counts == {"lines": len(LINES), "tokens": sum(len(line.split()) for line in LINES), "parts_written": 0,
                      "parts_reused": 3, "finished": 1, "merged": 0}
    assert out.read_bytes() == written and (out.stat().st_ino, out.stat().st_mtime_ns) == identity
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5"]  # the lock removed
    with monkeypatch.context() as patch:  # other settings: refused before the text is read
        patch.setattr(spacy_elmo.embedding, "scan_lines", _raise_killed)
        for other in ({"layers": "top"}, {"batch_size": 3}, {"restart": True}):
            with pytest.raises(FileExistsError, match="out.h5 already exists. Pass --overwrite"):
                embed_file(bilm, corpus, out, part_size=3, tokenize=words, progress=False, **other)
        with pytest.raises(FileExistsError, match="already exists. Pass --overwrite"):  # another model
            embed_file(BiLM.load(model_dir).half(), corpus, out, part_size=3, tokenize=words,
                       progress=False)
    upper = lambda line: line.upper().split()  # noqa: E731 (the same name, other tokens)
    with pytest.raises(FileExistsError, match="already exists. Pass --overwrite"):
        embed_file(bilm, corpus, out, part_size=3, tokenize=upper, progress=False)
    other_text = tmp_path / "other.txt"
    other_text.write_text("\n".join(LINES[::-1]) + "\n", encoding="utf-8")
    with pytest.raises(FileExistsError, match="already exists. Pass --overwrite"):
        embed_file(bilm, other_text, out, part_size=3, tokenize=words, progress=False)
    assert out.read_bytes() == written and not parts_path(out).exists()
    with h5py.File(out, "a") as f:  # an output without the record (an earlier release's, AllenNLP's): refused
        del f.attrs[spacy_elmo.embedding.RECORDED]
    with pytest.raises(FileExistsError, match="already exists. Pass --overwrite"):
        embed_file(bilm, corpus, out, part_size=3, tokenize=words, progress=False)
    assert embed_file(bilm, corpus, out, part_size=3, tokenize=words, overwrite=True, progress=False)["merged"] == 1
    assert out.read_bytes() == written


@pytest.mark.parametrize("edit", ["a dataset deleted", "a dataset added", "a line's tokens cut",
                                  "a layer dropped", "the vector size cut", "float64", "sentence_to_index deleted"])
def test_an_edited_complete_output_is_not_already_complete(bilm, corpus, tmp_path, edit):
    """A complete OUTPUT was found complete by its record alone: with a dataset deleted (or one line's vectors cut
    short) the rerun said "already complete" and exited 0. Its structure is checked now (the datasets of every line
    and no other, each of that line's token count, layers and size): another is refused as existing, and
    --overwrite writes it again. Its values are not read: vectors edited in place stay "complete" (README)."""
    import h5py

    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=3, progress=False)
    written = out.read_bytes()
    with h5py.File(out, "r") as f:
        assert f["2"].ndim == 3 and f["2"].shape[1] > 1  # (L + 1, n, 2P): a line of tokens
    with h5py.File(out, "a") as f:
        if edit == "sentence_to_index deleted":
            del f["sentence_to_index"]
        elif edit == "a dataset added":
            f.create_dataset(str(len(LINES)), data=f["2"][...])
        else:
            vectors = f["2"][...]
            del f["2"]
            changed = {"a dataset deleted": None, "a line's tokens cut": vectors[:, 1:],
                       "a layer dropped": vectors[1:], "the vector size cut": vectors[..., 1:],
                       "float64": vectors.astype("float64")}[edit]
            if changed is not None:
                f.create_dataset("2", data=changed)
    with pytest.raises(FileExistsError, match="out.h5 already exists. Pass --overwrite"):
        embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert embed_file(bilm, corpus, out, part_size=3, overwrite=True, progress=False)["merged"] == 1
    assert out.read_bytes() == written
    with h5py.File(out, "a") as f:  # the values are not checked: that is computing them again
        f["2"][...] = 0
    assert embed_file(bilm, corpus, out, part_size=3, progress=False)["merged"] == 0


def _no_space_at_call(n, code, named=None, function="embed_lines"):
    """``spacy_elmo.embedding``'s ``function`` whose ``n``-th call fails as a write that found no room (errno
    ``code``), naming ``named`` (None: no file, as a ``write`` says; the file being written is then named:
    ``atomic.naming``)."""
    import os

    real, calls = getattr(spacy_elmo.embedding, function), []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise OSError(code, os.strerror(code), *([str(named)] if named else []))
        return real(*args, **kwargs)

    return failing


def test_a_full_disk_says_what_is_kept_and_how_to_go_on(bilm, model_dir, corpus, tmp_path, monkeypatch):
    """A full disk (a quota, a file-size limit) ended in a bare "[Errno 28] No space left on device:
    '.../out.h5.parts/.part-000002.hdf5.PID.tmp'": it now names OUTPUT, the parts kept and the fix; the same
    command then goes on from the parts, to a straight run's file, and so does a run into an OUTPUT on another disk
    with the parts moved beside it (it offered "choose an OUTPUT on a larger disk", which started over). A full disk
    elsewhere (/dev/shm) and another error of OUTPUT's disk are left as they are."""
    import errno
    import shutil

    from spacy_elmo.cli import app

    out, straight = tmp_path / "out.h5", tmp_path / "straight.h5"
    embed_file(bilm, corpus, straight, part_size=2, batch_size=2, progress=False)
    for code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        with monkeypatch.context() as patch:
            patch.setattr(spacy_elmo.embedding, "embed_lines", _no_space_at_call(1 if parts_path(out).exists() else 3, code))
            with pytest.raises(OSError, match=rf"writing {out} ran out of space \(\[Errno {code}\] .*part-000002.hdf5"
                                              rf".*The parts it finished are kept in {out}.parts .*Free space on that "
                                              rf"disk .*then rerun the same command to continue"):
                embed_file(bilm, corpus, out, part_size=2, batch_size=2, progress=False)
    assert sorted(p.name for p in parts_path(out).iterdir()) == ["manifest.json", "part-000000.hdf5", "part-000001.hdf5"]
    for code, named in ((errno.ENOSPC, "/dev/shm/torch_123"), (errno.EIO, None)):  # not OUTPUT's disk full: as it was
        with monkeypatch.context() as patch:
            patch.setattr(spacy_elmo.embedding, "embed_lines", _no_space_at_call(1, code, named))
            with pytest.raises(OSError) as raised:
                embed_file(bilm, corpus, out, part_size=2, batch_size=2, progress=False)
        assert raised.value.errno == code and "ran out of space" not in str(raised.value)
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "embed_lines", _no_space_at_call(1, errno.ENOSPC))
        result = runner.invoke(app, ["embed", str(corpus), str(out), "--model", str(model_dir), "--part-size", "2",
                                      "--batch-size", "2", "--no-progress"])
    assert result.exit_code == 1 and f"writing {out} ran out of space" in plain(result.output), result.output
    with monkeypatch.context() as patch:  # the merged file, beside OUTPUT, once every part is written
        patch.setattr(spacy_elmo.embedding, "_json_utf8", _no_space_at_call(1, errno.ENOSPC, function="_json_utf8"))
        with pytest.raises(OSError, match=rf"ran out of space \(\[Errno 28\] .*\.out\.h5\.\d+\.tmp.*kept in {out}.parts") \
                as raised_merge:
            embed_file(bilm, corpus, out, part_size=2, batch_size=2, progress=False)
    # The message's other way on: the parts moved beside an OUTPUT on another disk, named after it, are reused there
    assert f"move {out}.parts beside it as NEW_OUTPUT.parts" in str(raised_merge.value)
    (tmp_path / "larger").mkdir()
    moved = tmp_path / "larger" / "new.h5"
    shutil.copytree(parts_path(out), parts_path(moved))
    counts = embed_file(bilm, corpus, moved, part_size=2, batch_size=2, progress=False)
    assert counts["parts_reused"] == 4 and counts["merged"] == 1 and moved.read_bytes() == straight.read_bytes()
    counts = embed_file(bilm, corpus, out, part_size=2, batch_size=2, progress=False)
    assert counts["parts_reused"] == 4 and counts["merged"] == 1 and out.read_bytes() == straight.read_bytes()


def _interrupted_deleting_parts(patch, first):
    """shutil.rmtree of the parts renamed away for deletion (atomic.remove_dir) stops with Ctrl-C after deleting
    ``first`` of them (its order is the directory's, any)."""
    import shutil

    import spacy_elmo.atomic

    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path).name.startswith(".") and Path(path).is_dir() and any(Path(path).iterdir()):
            (Path(path) / first).unlink()
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    patch.setattr(spacy_elmo.atomic.shutil, "rmtree", rmtree)


@pytest.mark.parametrize("first", ["part-000000.hdf5", "manifest.json", "merged.json"])
def test_ctrl_c_while_removing_the_parts_of_a_complete_output_ends_a_finished_run(bilm, corpus, tmp_path, monkeypatch,
                                                                                   first):
    """Ctrl-C while the parts were deleted, OUTPUT complete, reached the CLI as an interrupt ("nothing was
    written"); and what was left of them (a hidden .OUTPUT.parts.PID.tmp as big as OUTPUT) stayed for good, each
    rerun refusing OUTPUT as existing. The run is now finished, a warning names the leftover, and the next run
    into OUTPUT removes it, whether it can tell that it finished OUTPUT (merged.json still there) or not."""
    straight, out = tmp_path / "straight.h5", tmp_path / "out.h5"
    embed_file(bilm, corpus, straight, part_size=3, progress=False)
    with monkeypatch.context() as patch:
        _interrupted_deleting_parts(patch, first)
        with pytest.warns(RuntimeWarning, match="after it was complete: it holds every line") as caught:
            try:
                counts = embed_file(bilm, corpus, out, part_size=3, progress=False)
            except KeyboardInterrupt:  # a failure of this test, not the end of the pytest session
                pytest.fail("the interrupt after OUTPUT was complete escaped embed_file")
    assert counts["finished"] == 1 and out.read_bytes() == straight.read_bytes()
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".out.h5.parts.")]
    assert len(left) == 1 and str(left[0]) in str(caught[0].message)
    # Known as complete either way: by the parts' merged.json and manifest.json where they are left, or by OUTPUT's
    # own record of the run that wrote it.
    assert embed_file(bilm, corpus, out, part_size=3, progress=False)["parts_reused"] == 3
    assert out.read_bytes() == straight.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5", "straight.h5"]


def test_the_leftover_parts_of_an_output_with_a_comma_in_its_name_are_named_quoted(bilm, corpus, tmp_path, monkeypatch):
    """W_EMBED_CLEANUP_INTERRUPTED joined the leftover paths with ", " as they were: OUTPUT ``a, b.h5`` read as two
    leftovers. Each is shown as the other listings show a name (paths.name_shown)."""
    out = tmp_path / "a, b.h5"
    with monkeypatch.context() as patch:
        _interrupted_deleting_parts(patch, "manifest.json")
        with pytest.warns(RuntimeWarning, match="after it was complete") as caught:
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".a, b.h5.parts.")]
    assert len(left) == 1 and f"({str(left[0])!r})" in str(caught[0].message)


def test_a_run_killed_while_creating_its_parts_directory_starts_afresh(bilm, corpus, tmp_path, monkeypatch, ended_pid):
    """The parts directory was created, then its manifest written: killed between the two, a
    rerun refused the empty directory as parts "written by an older spacy-elmo"."""
    import pathlib

    straight, out = tmp_path / "straight.h5", tmp_path / "out.h5"
    embed_file(bilm, corpus, straight, part_size=3, progress=False)
    real = pathlib.Path.write_text
    with monkeypatch.context() as patch:
        patch.setattr(pathlib.Path, "write_text",
                      lambda self, *a, **kw: _raise_killed() if "manifest" in self.name else real(self, *a, **kw))
        with pytest.raises(Killed):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    (tmp_path / f".out.h5.parts.{ended_pid}.tmp").mkdir()  # what a SIGKILL there leaves
    assert embed_file(bilm, corpus, out, part_size=3, progress=False)["parts_written"] == 3
    assert out.read_bytes() == straight.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5", "straight.h5"]


HOLD_LOCK = """
import sys, time
from pathlib import Path
from spacy_elmo.embedding import output_lock
with output_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_run_into_the_same_output_is_refused_naming_the_running_one(bilm, corpus, tmp_path):
    """Two runs into one OUTPUT (a job started twice): the second failed on the first's parts with HDF5's "Unable to
    synchronously open file ... No such file"; it is refused, naming the running one's pid, before touching them.
    A lock file that a killed run left is taken over, and the lock file is removed at the end."""
    import subprocess
    import sys

    pytest.importorskip("fcntl")
    out = tmp_path / "sub" / "out.h5"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(FileExistsError, match=f"Another embed \\(pid {holder.pid}\\) is writing {out}"):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
        assert sorted(p.name for p in out.parent.iterdir()) == [".out.h5.lock"]  # the holder's, and nothing else
    finally:
        holder.kill()
        holder.wait()
    assert (out.parent / ".out.h5.lock").exists()  # a SIGKILL removes nothing
    assert embed_file(bilm, corpus, out, part_size=3, progress=False)["finished"] == 1
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.h5"]


def test_under_a_hold_of_the_lock_the_same_thread_embeds_and_another_is_refused(bilm, corpus, tmp_path):
    """The CLI holds the lock from before its model loads and calls embed_file within: that call goes on under
    the hold, where another thread's (a second embed in this process) is refused as another process's is."""
    import os
    import threading

    from spacy_elmo.embedding import output_lock

    pytest.importorskip("fcntl")
    out, refused = tmp_path / "out.h5", []

    def other_thread():
        try:
            embed_file(bilm, corpus, out, progress=False)
        except FileExistsError as err:
            refused.append(str(err))

    with output_lock(out):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert embed_file(bilm, corpus, out, part_size=3, progress=False)["finished"] == 1
        assert (tmp_path / ".out.h5.lock").exists()  # still held: the inner call released nothing
    assert len(refused) == 1 and f"Another embed (pid {os.getpid()}) is writing {out}" in refused[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5"]


def test_the_lock_taken_again_by_the_same_thread_after_a_run_is_really_taken(tmp_path):
    """The hold is forgotten when it ends: a second run into the same OUTPUT in this thread (a notebook's next
    cell) takes the lock again, its file holding our pid, and another thread is refused meanwhile; a hold
    remembered past its end let the second run go on unlocked."""
    import os
    import threading

    from spacy_elmo.embedding import output_lock

    pytest.importorskip("fcntl")
    out, lock, refused = tmp_path / "out.h5", tmp_path / ".out.h5.lock", []

    def other_thread():
        try:
            with output_lock(out):
                pass
        except FileExistsError as err:
            refused.append(str(err))

    for run in range(2):
        with output_lock(out):
            assert lock.read_text() == f"{os.getpid()}\n"
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
            assert len(refused) == run + 1 and f"Another embed (pid {os.getpid()}) is writing {out}" in refused[-1]
        assert not lock.exists()


def test_an_output_that_cannot_be_locked_is_warned_of_as_pretrain_warns(model_dir, corpus, tmp_path, no_flock):
    """A file system without flock (some network mounts): pretrain warned that its OUTPUT_DIR was not locked,
    embed went on without a word. The command warns once (its embed_file runs under its hold) and finishes."""
    from spacy_elmo.cli import app
    from spacy_elmo.errors import Warnings
    from tests.conftest import NO_FLOCK

    out = tmp_path / "out.h5"
    with pytest.warns(RuntimeWarning) as said:
        result = runner.invoke(app, ["embed", str(corpus), str(out), "--model", str(model_dir), "--no-progress"])
    assert result.exit_code == 0 and read_all(out)[0].keys() == {str(i) for i in range(len(LINES))}, result.output
    expected = Warnings.W_OUTPUT_NOT_LOCKED.format(name="OUTPUT", path=out, error=NO_FLOCK, command="embed",
                                                   rival="a second embed")
    assert [str(w.message) for w in said] == [expected]
    assert "a second embed into it while this embed runs is not refused" in expected


def test_a_lock_file_removed_as_it_was_locked_is_taken_again(bilm, corpus, tmp_path, monkeypatch):
    """The run holding the lock removes its file and then releases the lock: a run that opened the file before the
    removal and locked it after the release holds the lock on a file no longer there, which a third run would not
    see. It opens the file at that name again."""
    pytest.importorskip("fcntl")
    out, calls = tmp_path / "out.h5", []
    real = spacy_elmo.embedding.try_lock

    def removed_meanwhile(fd):
        calls.append(fd)
        if len(calls) == 1:
            (tmp_path / ".out.h5.lock").unlink()  # the last holder's removal, between our open and our lock
        return real(fd)

    monkeypatch.setattr(spacy_elmo.embedding, "try_lock", removed_meanwhile)
    assert embed_file(bilm, corpus, out, part_size=3, progress=False, stop_after_parts=1)["finished"] == 0
    assert len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5.parts"]


def test_parts_of_other_settings_are_refused_and_restart_drops_them(bilm, corpus, tmp_path):
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    with pytest.raises(ValueError, match="different layers"):
        embed_file(bilm, corpus, out, layers="top", part_size=2, progress=False)
    counts = embed_file(bilm, corpus, out, layers="top", part_size=2, progress=False, restart=True)
    assert counts["parts_reused"] == 0 and counts["finished"] == 1
    assert read_all(out)[0]["0"].ndim == 2


def test_parts_of_other_settings_are_refused_before_the_text_is_read(bilm, corpus, tmp_path, monkeypatch):
    """The settings known up front (the model, layers, sizes, tokenizer) were compared with the parts'
    manifest only after the whole text was read and tokenized (minutes for a big file)."""
    out, tokenized = tmp_path / "out.h5", []
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    monkeypatch.setattr(spacy_elmo.embedding, "scan_lines", lambda *args: tokenized.append(args) or 0)
    with pytest.raises(ValueError, match=r"different layers \(earlier 'all'\), part_size \(earlier 2\).*--restart"):
        embed_file(bilm, corpus, out, layers="top", part_size=3, progress=False)
    assert tokenized == []


@pytest.mark.parametrize("setting,value", [("batch_size", 3), ("batch_tokens", 100), ("cache_size", 0)])
def test_parts_of_other_batch_settings_are_refused(bilm, corpus, tmp_path, setting, value):
    """They decide which lines share a biLM call, and so the vectors' last bits."""
    out = tmp_path / "out.h5"
    earlier = {"batch_size": 2, "batch_tokens": 4096, "cache_size": 50}
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1, **earlier)
    with pytest.raises(ValueError, match=rf"different {setting} \(earlier {earlier[setting]}\)"):
        embed_file(bilm, corpus, out, part_size=2, progress=False, **{**earlier, setting: value})
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, **earlier)["parts_reused"] == 1


def test_parts_of_an_older_version_ask_for_restart(bilm, corpus, tmp_path):
    """A manifest without the batch settings (written before they were recorded) cannot be matched."""
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    manifest = out.with_name("out.h5.parts") / "manifest.json"
    old = {k: v for k, v in json.loads(manifest.read_text()).items() if k not in ("batch_size", "batch_tokens", "cache_size")}
    manifest.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"older spacy-elmo, which did not record batch_size, batch_tokens, cache_size.*--restart"):
        embed_file(bilm, corpus, out, part_size=2, progress=False)
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, restart=True)["parts_reused"] == 0


def test_parts_whose_manifest_was_deleted_ask_for_restart_without_blaming_an_older_version(bilm, corpus, tmp_path):
    """Every spacy-elmo writes a parts directory whole with its manifest: one without it was said to hold parts
    "written by an older spacy-elmo, which did not record format, model, ...", where it was deleted."""
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    parts = out.with_name("out.h5.parts")
    (parts / "manifest.json").unlink()
    with pytest.raises(ValueError) as err:
        embed_file(bilm, corpus, out, part_size=2, progress=False)
    assert str(err.value).startswith(f"{parts} has no manifest.json (deleted?), which records the settings"), err.value
    assert "older" not in str(err.value) and "Pass --restart" in str(err.value)
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, restart=True)["parts_reused"] == 0


def test_parts_whose_manifest_cannot_be_read_say_why(bilm, corpus, tmp_path, monkeypatch):
    """A manifest that could not be opened (a permission; they do not refuse root, so the read is refused here) was
    read as none, and the parts said to be an older spacy-elmo's: the error of a damaged manifest says why."""
    import pathlib

    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    manifest = out.with_name("out.h5.parts") / "manifest.json"
    read_bytes = pathlib.Path.read_bytes

    def refused(self):
        if self == manifest:
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    with monkeypatch.context() as patch:
        patch.setattr(pathlib.Path, "read_bytes", refused)
        with pytest.raises(ValueError) as err:
            embed_file(bilm, corpus, out, part_size=2, progress=False)
    assert str(err.value).startswith(f"{manifest} cannot be read ([Errno 13] Permission denied: "), err.value
    assert "older" not in str(err.value) and "Pass --restart" in str(err.value)


def test_parts_of_another_tokenizer_of_the_same_name_are_refused_naming_the_part(bilm, corpus, tmp_path):
    """The manifest named a tokenize callable by its module and qualified name, which every lambda of a
    function shares: a run resumed with another one reused the parts of the first, one output of two
    tokenizations. The manifest now holds the sha256 of each part's token rows: a written part whose lines
    this run splits otherwise is refused, naming it; parts not written yet take this run's tokens, so a
    tokenizer that splits the written parts' lines alike finishes to an uninterrupted run's file."""
    out, straight = tmp_path / "out.h5", tmp_path / "straight.h5"
    words, lower = (lambda line: line.split()), (lambda line: line.lower().split())  # both "...<locals>.<lambda>"
    x_upper = lambda line: [w.upper() if w == "x" else w for w in line.split()]  # noqa: E731 (line 5: part 2)
    assert embed_file(bilm, corpus, out, tokenize=words, part_size=2, progress=False, stop_after_parts=1)["finished"] == 0
    with pytest.raises(ValueError, match=r"part-000000.hdf5 \(lines 1-2 of .*in.txt\) was written from other tokens"
                                         r".*tokenizer_name"):
        embed_file(bilm, corpus, out, tokenize=lower, part_size=2, progress=False)
    assert embed_file(bilm, corpus, out, tokenize=words, part_size=2, progress=False, stop_after_parts=0)["finished"] == 0
    assert embed_file(bilm, corpus, out, tokenize=x_upper, part_size=2, progress=False) == {
        "lines": len(LINES), "tokens": sum(len(line.split()) for line in LINES), "parts_written": 3, "parts_reused": 1,
        "finished": 1, "merged": 1}
    embed_file(bilm, corpus, straight, tokenize=x_upper, part_size=2, progress=False)
    assert out.read_bytes() == straight.read_bytes()


def test_a_written_part_after_the_first_of_other_tokens_is_refused_naming_it(bilm, corpus, tmp_path):
    """Each written part's tokens are checked against its own digest, not the first part's: a resume whose
    tokenizer splits only a later written part's lines otherwise (LINES[4] == "x": part 2 with part_size=2) is
    refused, naming that part."""
    out = tmp_path / "out.h5"
    words = lambda line: line.split()  # noqa: E731
    x_upper = lambda line: [w.upper() if w == "x" else w for w in line.split()]  # noqa: E731
    assert embed_file(bilm, corpus, out, tokenize=words, part_size=2, progress=False, stop_after_parts=3)["finished"] == 0
    with pytest.raises(ValueError, match=r"part-000002.hdf5 \(lines 5-6 of .*in.txt\) was written from other tokens"):
        embed_file(bilm, corpus, out, tokenize=x_upper, part_size=2, progress=False)


def test_parts_of_a_manifest_without_token_digests_are_trusted_and_it_gets_them(bilm, corpus, tmp_path):
    """A manifest of an earlier release (everything but the digests): its parts are reused, as that release
    would, and the digests of this run's tokens are recorded for the resumes after it."""
    out, straight = tmp_path / "out.h5", tmp_path / "straight.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    manifest = parts_path(out) / "manifest.json"
    recorded = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({k: v for k, v in recorded.items() if k != "part_tokens"}))
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)["parts_reused"] == 1
    assert json.loads(manifest.read_text()) == recorded
    assert embed_file(bilm, corpus, out, part_size=2, progress=False)["parts_reused"] == 2
    embed_file(bilm, corpus, straight, part_size=2, progress=False)
    assert out.read_bytes() == straight.read_bytes()


def test_a_directory_as_output_is_refused_before_any_work(bilm, corpus, tmp_path):
    out = tmp_path / "vectors"
    out.mkdir()
    for overwrite in (False, True):
        with pytest.raises(IsADirectoryError, match=r"is a directory, but the output is one HDF5 file"):
            embed_file(bilm, corpus, out, overwrite=overwrite, progress=False)
    assert not (tmp_path / "vectors.parts").exists() and list(out.iterdir()) == []


def test_a_file_at_the_parts_path_is_refused_and_kept(bilm, corpus, tmp_path):
    """A regular file of the user's at OUTPUT.parts: a resume said its "manifest.json cannot be read", --restart
    renamed the file away for deletion and failed on it (NotADirectoryError), and the next run deleted it as a
    killed removal's leftover. Every run now refuses it, naming it, and leaves it as it is."""
    out = tmp_path / "out.h5"
    parts_path(out).write_text("user data")
    before = sorted(p.name for p in tmp_path.iterdir())
    for kwargs in ({}, {"restart": True}, {}, {"overwrite": True}):
        with pytest.raises(NotADirectoryError, match=f"^{re.escape(str(parts_path(out)))} is not a directory: embed "
                                                     r"keeps the finished parts of .*out\.h5 .*Move .*out\.h5\.parts "
                                                     "elsewhere"):
            embed_file(bilm, corpus, out, part_size=1, progress=False, **kwargs)
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert parts_path(out).read_text() == "user data"


def test_bad_input_gets_clear_errors(bilm, model_dir, corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt does not exist"):
        embed_file(bilm, tmp_path / "missing.txt", tmp_path / "o.h5", progress=False)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc\x00def\n")
    # embed reads one file: pretrain's skipping of such files in a directory is not said of it
    with pytest.raises(ValueError, match=r"binary file \(it contains NUL bytes\), not UTF-8 text\. Pass plain text "
                                         r"\(or gzip, bzip2 or xz of it\)\.$"):
        embed_file(bilm, binary, tmp_path / "o.h5", progress=False)
    wide = tmp_path / "u16.txt"
    wide.write_bytes("Some text\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"looks like UTF-16 text, not UTF-8.*`iconv -f UTF-16 -t UTF-8.*and pass NEW\.txt\.$"):
        embed_file(bilm, wide, tmp_path / "o.h5", progress=False)
    long = tmp_path / "long.txt"
    long.write_text("short line\n" + "w " * 50 + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2 has 50 tokens, more than --max-tokens 20"):
        embed_file(bilm, long, tmp_path / "o.h5", max_tokens=20, progress=False)
    with pytest.raises(ValueError, match="cache_size must be 0 or more"):
        embed_file(bilm, corpus, tmp_path / "o.h5", cache_size=-1, progress=False)
    with pytest.raises(ValueError, match="Unknown layers 'middle'"):
        embed_file(bilm, corpus, tmp_path / "o.h5", layers="middle", progress=False)
    existing = tmp_path / "exists.h5"
    existing.write_bytes(b"")
    with pytest.raises(FileExistsError, match="--overwrite"):
        embed_file(bilm, corpus, existing, progress=False)
    assert embed_file(bilm, corpus, existing, overwrite=True, progress=False)["finished"] == 1
    tokenized = []
    with pytest.raises(ValueError, match="stateful=False"):  # refused before the passes over the text
        embed_file(BiLM.load(model_dir, stateful=True), corpus, tmp_path / "o.h5", progress=False,
                   tokenize=lambda line: tokenized.append(line) or line.split())
    assert tokenized == []


@pytest.mark.parametrize("name", ["batch_size", "batch_tokens", "part_size", "max_tokens"])
def test_embed_file_refuses_a_zero_size_naming_its_keyword(bilm, corpus, tmp_path, name):
    """0 is no size: a batch_size of 0 ran every line of a part in one biLM call, a part_size of 0 died dividing by
    zero, a max_tokens of 0 refused every line as too long; each is refused up front, naming the keyword, nothing
    written (the CLI's own check, positive_int, names the flag before: test_cli_numeric_options_are_named_as_typed)."""
    out = tmp_path / "o.h5"
    with pytest.raises(ValueError, match=rf"^{name} must be at least 1; found 0\.$"):
        embed_file(bilm, corpus, out, progress=False, **{name: 0})
    assert not out.exists() and not parts_path(out).exists()


def test_a_bfloat16_bilm_embeds_a_file(bilm, corpus, tmp_path):
    """The manifest's model fingerprint hashed ``.numpy()`` of each tensor, which numpy refuses for
    bfloat16: embed_file of a bfloat16 biLM (which runs) died after reading and tokenizing the whole file.
    Its datasets are the bfloat16 biLM's own vectors, as float32."""
    low = bilm.to(torch.bfloat16)
    out = tmp_path / "o.h5"
    assert embed_file(low, corpus, out, layers="top", progress=False)["finished"] == 1
    data, _ = read_all(out)
    for i, line in enumerate(LINES):
        want = embed_lines(low, [line.split()], layers="top")[0]
        assert data[str(i)].dtype == np.float32 and np.array_equal(data[str(i)], want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_model_fingerprint_hashes_each_tensors_bytes(bilm, dtype):
    """sha256 of the config and of each tensor's raw bytes, in name order: for float32 the bytes that
    ``.numpy().tobytes()`` gave, so the fingerprints in the manifests of parts written before are the same."""
    from spacy_elmo.embedding import model_fingerprint

    bilm = bilm.to(dtype)
    want = hashlib.sha256(json.dumps(bilm.config.to_dict(), sort_keys=True).encode())
    for name, tensor in sorted(bilm.state_dict().items()):
        want.update(name.encode())
        if dtype == torch.float32:  # the fingerprint as the earlier releases took it
            want.update(tensor.numpy().tobytes())
        else:  # bfloat16: the upper half of each value's float32 bits, little-endian
            bits = tensor.float().numpy().view(np.uint32) >> 16
            want.update(bits.astype("<u2").tobytes())
    assert model_fingerprint(bilm) == want.hexdigest()


def test_undecodable_bytes_are_replaced_and_reported(bilm, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 au lait\nok\n".encode("latin-1"))
    with pytest.warns(RuntimeWarning, match="1 undecodable byte"):
        embed_file(bilm, path, tmp_path / "o.h5", progress=False)
    _, mapping = read_all(tmp_path / "o.h5")
    assert mapping == {"caf\ufffd au lait": "0", "ok": "1"}


def test_the_warning_of_replaced_bytes_quotes_an_odd_input_name(bilm, tmp_path):
    """embed's W_REPLACED_BYTES named its input unquoted: ``in 1 file (a, b.txt)`` read as two files."""
    path = tmp_path / "a, b.txt"
    path.write_bytes(b"caf\xe9\n")
    with pytest.warns(RuntimeWarning, match="1 undecodable byte") as record:
        embed_file(bilm, path, tmp_path / "o.h5", progress=False)
    assert any(f"in 1 file ({str(path)!r}) replaced" in str(w.message) for w in record)


def test_cli_embeds_and_reports_errors(model_dir, corpus, tmp_path):
    from spacy_elmo.cli import app

    out = tmp_path / "cli.h5"
    result = runner.invoke(app, ["embed", str(corpus), str(out), "--model", str(model_dir), "--layers", "top"])
    assert result.exit_code == 0, result.output
    assert f"{len(LINES)} lines" in result.output and read_all(out)[0]["2"].ndim == 2
    again = runner.invoke(app, ["embed", str(corpus), str(out), "--model", str(model_dir)])
    assert again.exit_code == 1 and "--overwrite" in again.output
    replaced = runner.invoke(app, ["embed", str(corpus), str(out), "--model", str(model_dir), "--overwrite"])
    assert replaced.exit_code == 0 and f"wrote {out}" in replaced.output, replaced.output
    assert read_all(out)[0]["2"].ndim == 3  # all layers now
    into_dir = runner.invoke(app, ["embed", str(corpus), str(tmp_path), "--model", str(model_dir), "--overwrite"])
    assert into_dir.exit_code == 1 and "is a directory" in into_dir.output
    # --restart drops the parts of other settings (here embed_file's, stopped after a part) and starts over
    other = tmp_path / "other.h5"
    embed_file(BiLM.load(model_dir), corpus, other, layers="top", part_size=2, stop_after_parts=1, progress=False)
    args = ["embed", str(corpus), str(other), "--model", str(model_dir), "--part-size", "2"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "--restart" in plain(refused.output), refused.output
    restarted = runner.invoke(app, [*args, "--restart"])
    assert restarted.exit_code == 0 and "from an earlier run" not in restarted.output, restarted.output
    assert read_all(other)[0]["2"].ndim == 3 and not parts_path(other).exists()


def test_cli_refuses_a_second_run_into_the_same_output_before_loading_the_model(model_dir, corpus, tmp_path,
                                                                                 monkeypatch):
    """The second embed into an OUTPUT being written was refused (E_EMBED_IN_USE) only after loading its model,
    seconds for a big one: the lock is taken before. Held by this run while the model loads, and released (its
    file and the directories made for it removed) when the load fails."""
    import os
    import subprocess
    import sys

    from spacy_elmo.cli import app

    pytest.importorskip("fcntl")
    out = tmp_path / "sub" / "out.h5"
    lock = out.parent / ".out.h5.lock"
    loads = []

    def load(path, *args, **kwargs):
        loads.append(lock.read_text() if lock.exists() else None)  # the lock file, as the load began
        raise ValueError("not a model")

    monkeypatch.setattr(BiLM, "load", load)
    args = ["embed", str(corpus), str(out), "--model", str(model_dir), "--no-progress"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        refused = runner.invoke(app, args)
        assert refused.exit_code == 1 and loads == [], refused.output
        assert f"Another embed (pid {holder.pid}) is writing {out}" in plain(refused.stderr)
    finally:
        holder.kill()
        holder.wait()
    lock.unlink()  # as the kill left it
    out.parent.rmdir()
    failed = runner.invoke(app, args)
    assert failed.exit_code == 1 and "not a model" in failed.stderr, failed.output
    assert loads == [f"{os.getpid()}\n"]  # this run held the lock while it loaded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]  # no lock file, no sub/


def test_cli_interrupted_says_what_is_kept_and_a_rerun_goes_on(model_dir, corpus, tmp_path, monkeypatch):
    """Ctrl-C ended in a KeyboardInterrupt traceback; it now says where the finished parts are
    and exits 130, and rerunning the command reuses them."""
    from spacy_elmo.cli import app

    out = tmp_path / "out.h5"
    args = ["embed", str(corpus), str(out), "--model", str(model_dir), "--part-size", "2", "--batch-size", "2"]
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "embed_lines", interrupted_at_call(3))  # one call a part here
        stopped = runner.invoke(app, args)
    assert stopped.exit_code == 130, stopped.output
    assert f"finished parts are kept in {out}.parts: rerun the same command" in " ".join(stopped.output.split())
    assert len(list((tmp_path / "out.h5.parts").glob("part-*.hdf5"))) == 2 and not out.exists()
    # The message is the last word, on a line of its own: the progress bar, left open, was drawn again
    # after it (`embedding:   0%|...|Interrupted. The finished parts...` then a bar line below).
    said = stopped.output.index("Interrupted.")
    assert stopped.output[said - 1] == "\n" and "embedding" not in stopped.output[said:], stopped.output
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "(2 parts from an earlier run)" in again.output, again.output
    # Ctrl-C while the text is read, before the parts directory exists: nothing written, no parts named
    early = tmp_path / "early.h5"
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "scan_lines", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        stopped = runner.invoke(app, ["embed", str(corpus), str(early), "--model", str(model_dir)])
    assert stopped.exit_code == 130, stopped.output
    assert "Interrupted before any part was started: nothing was written." in " ".join(stopped.output.split())
    assert "parts are kept" not in stopped.output and not early.exists() and not parts_path(early).exists()


#: Run in a process of its own: ``spacy-elmo ARGS`` (the console script's main()), SIGTERM delivered to itself in
#: the biLM call argv[1] (Slurm's preemption, docker stop, `timeout` at that moment; from inside, so always there),
#: with argv[2] torch threads, as the test's process: the same vectors to the last bit.
_TERMINATED_AT_CALL = """
import signal, sys
import torch
import spacy_elmo.embedding
from spacy_elmo.cli import main
torch.set_num_threads(int(sys.argv[2]))
real, calls, at = spacy_elmo.embedding.embed_lines, [], int(sys.argv[1])
def embed_lines(*args, **kwargs):
    calls.append(1)
    if len(calls) == at:
        signal.raise_signal(signal.SIGTERM)
    return real(*args, **kwargs)
spacy_elmo.embedding.embed_lines = embed_lines
sys.argv = ["spacy-elmo", *sys.argv[3:]]
main()
"""


def test_cli_sigterm_stops_as_ctrl_c_does_and_the_rerun_writes_the_identical_file(model_dir, corpus, tmp_path):
    """SIGTERM ended embed at once, silently, with status -15, its lock file and unfinished part left behind; it
    now stops as Ctrl-C does (pretrain's handling, shared): exit 143, the finished parts kept and named, nothing
    else left, and the rerun finishes a file byte for byte the straight run's."""
    import os
    import subprocess
    import sys

    from spacy_elmo.cli import app

    out, straight = tmp_path / "out.h5", tmp_path / "straight" / "out.h5"
    args = ["embed", str(corpus), str(out), "--model", str(model_dir), "--part-size", "2", "--batch-size", "2", "--no-progress"]
    threads = str(torch.get_num_threads())
    stopped = subprocess.run([sys.executable, "-c", _TERMINATED_AT_CALL, "3", threads, *args], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=300)
    assert stopped.returncode == 128 + signal.SIGTERM, (stopped.returncode, stopped.stderr)
    assert f"finished parts are kept in {out}.parts: rerun the same command" in " ".join(stopped.stderr.split())
    assert "Traceback" not in stopped.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5.parts"]  # no lock file
    assert sorted(p.name for p in (tmp_path / "out.h5.parts").iterdir() if p.name.startswith(".")) == []  # no half part
    assert len(list((tmp_path / "out.h5.parts").glob("part-*.hdf5"))) == 2
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "(2 parts from an earlier run)" in again.output, again.output
    whole = runner.invoke(app, [*args[:2], str(straight), *args[3:]])
    assert whole.exit_code == 0, whole.output
    assert out.read_bytes() == straight.read_bytes()


def test_cli_ctrl_c_while_removing_the_parts_of_a_complete_output_says_it_is_complete(model_dir, corpus, tmp_path,
                                                                                     monkeypatch):
    """It said "Interrupted before any part was started: nothing was written." (exit 130) of a complete OUTPUT."""
    from spacy_elmo.cli import app

    out = tmp_path / "out.h5"
    args = ["embed", str(corpus), str(out), "--model", str(model_dir), "--part-size", "3", "--no-progress"]
    with monkeypatch.context() as patch:
        _interrupted_deleting_parts(patch, "merged.json")
        with pytest.warns(RuntimeWarning, match="after it was complete"):
            result = runner.invoke(app, args)
    assert result.exit_code == 0 and f"wrote {out}: {len(LINES)} lines" in result.output, result.output
    assert "nothing was written" not in result.output and len(read_all(out)[0]) == len(LINES)


def test_cli_really_killed_again_and_again_writes_the_identical_file(model_dir, corpus, tmp_path, kill_runner):
    """The command SIGKILLed (tests/kill_runner.py) in a biLM call, half-way through writing a
    part, half-way through writing the merged file and while removing the parts, each time rerun
    as it was: no half-written file is taken as complete, and the output is a straight run's, bit
    for bit, with nothing left beside it."""
    from spacy_elmo.cli import app

    def command(output):  # 4 parts of 2 lines, one biLM call each
        return ["embed", str(corpus), str(output), "--model", str(model_dir), "--part-size", "2", "--batch-size", "2"]

    straight, out, parts = tmp_path / "straight.h5", tmp_path / "out.h5", tmp_path / "out.h5.parts"
    assert runner.invoke(app, command(straight)).exit_code == 0

    def finished():
        return [int(p.name[len("part-"):-len(".hdf5")]) for p in sorted(parts.glob("part-*.hdf5"))]

    kill_runner.run("embed", 3, command(out))
    assert finished() == [0, 1] and list(parts.glob(".part-000002.hdf5.*.tmp")) and not out.exists()
    kill_runner.run("replace:part-000003.hdf5", 1, command(out))
    assert finished() == [0, 1, 2] and list(parts.glob(".part-000003.hdf5.*.tmp"))
    kill_runner.run("replace:out.h5", 1, command(out))
    assert finished() == [0, 1, 2, 3] and not out.exists() and list(tmp_path.glob(".out.h5.*.tmp"))
    kill_runner.run("replaced:.out.h5.parts.*.tmp", 1, command(out))  # the parts renamed away, not yet deleted
    assert out.read_bytes() == straight.read_bytes() and not parts.exists()
    again = runner.invoke(app, command(out))
    assert again.exit_code == 0 and f"{out} is already complete (7 lines, " in again.output, again.output
    assert out.read_bytes() == straight.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5", "straight.h5"]


def test_cli_refuses_unusable_paths_before_loading_the_model(bilm, corpus, tmp_path):
    """An output below a file ended in a NotADirectoryError traceback; the input as output with
    --overwrite replaced the text with its vectors; a missing input was found only after loading
    the model (here a model that does not exist: the path error comes first). `embed - OUT` said "- does not
    exist"."""
    from spacy_elmo.cli import app

    text = corpus.read_bytes()
    cases = [
        ([str(corpus), str(corpus / "out.h5")], f"{corpus} is a file, not a directory"),
        ([str(corpus), str(tmp_path / "link.h5"), "--overwrite"], "is the input itself"),
        ([str(tmp_path / "missing.txt"), str(tmp_path / "o.h5")], "missing.txt does not exist"),
        ([str(tmp_path), str(tmp_path / "o.h5")], f"{tmp_path} is not a file"),
        (["-", str(tmp_path / "o.h5")], "embed does not read standard input ('-')"),  # it said "- does not exist"
    ]
    (tmp_path / "link.h5").symlink_to(corpus)
    for args, message in cases:
        result = runner.invoke(app, ["embed", *args, "--model", str(tmp_path / "no-model")])
        assert result.exit_code == 1 and message in " ".join(result.output.split()), (args, result.output)
        assert isinstance(result.exception, SystemExit)  # a clean exit, no traceback
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        embed_file(bilm, corpus, corpus / "out.h5", progress=False)
    with pytest.raises(FileExistsError, match="is the input itself"):
        embed_file(bilm, corpus, tmp_path / "link.h5", overwrite=True, progress=False)
    assert corpus.read_bytes() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "link.h5", "model"]


def test_cli_refuses_an_output_directory_where_no_file_can_be_created_before_reading_the_text(corpus, tmp_path):
    """A read-only output directory failed only after the whole text was read and tokenized and the model
    loaded, with a bare `[Errno 13] Permission denied: '.../.out.h5.parts.PID.tmp'`. /sys (sysfs) takes no
    new file even from root, whom a chmod'ed directory would not stop."""
    import tempfile

    from spacy_elmo.cli import app

    if not Path("/sys").is_dir():
        pytest.skip("no /sys (not Linux)")
    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pytest.skip("/sys takes new files here")
    except OSError:
        pass
    out = "/sys/spacy-elmo-test-out.h5"
    result = runner.invoke(app, ["embed", str(corpus), out, "--model", str(tmp_path / "no-model")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    said = " ".join(result.output.split())
    assert f"{out} cannot be written: no file can be created in /sys" in said and "writable directory" in said


def _count_bars_with(monkeypatch, bar) -> None:
    """Every progress bar a tqdm subclass ``bar`` (spacy_elmo.progress's terminal kind, whatever stderr is here)."""
    import spacy_elmo.progress

    monkeypatch.setattr(spacy_elmo.progress, "_redraws_in_place", lambda stream: True)
    monkeypatch.setattr(spacy_elmo.progress, "tqdm", bar)


def test_a_resumed_runs_bar_starts_at_the_reused_lines(bilm, corpus, tmp_path, monkeypatch):
    """The reused lines were an update of the bar, so its first rate and time left counted an
    earlier run's lines as done in an instant; they are now its starting point."""
    import tqdm

    bars = []

    class Bar(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            self.updates, self.started_at, self.label = [], kwargs.get("initial", 0), kwargs.get("desc")
            super().__init__(*args, **kwargs)
            bars.append(self)

        def update(self, n=1):
            self.updates.append(n)
            return super().update(n)

    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)
    _count_bars_with(monkeypatch, Bar)
    embed_file(bilm, corpus, out, part_size=2, progress=False)
    bar = next(b for b in bars if b.label == "embedding")
    assert bar.started_at == 2 and sum(bar.updates) == len(LINES) - 2
    # Every part written (the last one short: 7 lines in parts of 2), killed before the merge: the bar starts full.
    every = tmp_path / "every.h5"
    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "_merge", _raise_killed)
        with pytest.raises(Killed):
            embed_file(bilm, corpus, every, part_size=2, progress=False)
    bars.clear()
    assert embed_file(bilm, corpus, every, part_size=2, progress=False)["parts_reused"] == 4
    bar = next(b for b in bars if b.label == "embedding")
    assert bar.started_at == len(LINES) and sum(bar.updates) == 0


def test_cli_unknown_layers_is_a_usage_error_before_loading_the_model(corpus, tmp_path):
    """--layers was checked only after the model had loaded (minutes for a large model)."""
    from spacy_elmo.cli import app

    result = runner.invoke(app, ["embed", str(corpus), str(tmp_path / "o.h5"), "--model",
                                  str(tmp_path / "no-model"), "--layers", "mean"])
    assert result.exit_code == 2, result.output
    assert "Unknown layers 'mean'" in " ".join(result.output.split())
    assert "no-model" not in result.output  # the model was never looked at
    assert not (tmp_path / "o.h5").exists()


def test_cli_whitespace_and_lang_together_are_a_usage_error_before_loading_the_model(corpus, tmp_path):
    """--whitespace and --lang ask for two readings of the lines: one of them is asked for, before the model loads."""
    from spacy_elmo.cli import app

    result = runner.invoke(app, ["embed", str(corpus), str(tmp_path / "o.h5"), "--model", str(tmp_path / "no-model"),
                                  "--whitespace", "--lang", "en"])
    assert result.exit_code == 2, result.output
    assert "--whitespace splits the lines at whitespace and --lang en reads them with spaCy's tokenizer: give one" in (
        " ".join(plain(result.output).replace("│", " ").split())), result.output
    assert "no-model" not in result.output and not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("flag,value,expected", [
    ("--batch-size", "0", "must be a positive integer (1 or more); found 0."),
    ("--batch-tokens", "-5", "must be a positive integer (1 or more); found -5."),
    ("--part-size", "0", "must be a positive integer (1 or more); found 0."),
    ("--max-tokens", "0", "must be a positive integer (1 or more); found 0."),
    ("--cache-size", "-1", "must be an integer of 0 or more; found -1."),
])
def test_cli_numeric_options_are_named_as_typed(corpus, tmp_path, flag, value, expected):
    """The errors named the Python keywords ("batch_size must be at least 1") after the model had
    loaded; now a usage error naming the flag, before. embed_file keeps naming its keywords."""
    from spacy_elmo.cli import app

    result = runner.invoke(app, ["embed", str(corpus), str(tmp_path / "o.h5"), "--model",
                                  str(tmp_path / "no-model"), flag, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}': {expected}" in plain(result.output)
    assert flag[2:].replace("-", "_") not in result.output  # batch_size, ...: the Python name
    assert not (tmp_path / "o.h5").exists()


def test_cli_defaults_are_embed_files_so_either_resumes_the_others_parts():
    """The settings a manifest records (batch sizes, cache size, part size, layers) default alike in the CLI and in
    embed_file: parts of a Python run with the defaults are resumed by the command with its defaults, and the
    other way round (a default changed on one side only refused them as "other settings")."""
    import inspect

    from spacy_elmo.cli.embed import embed

    cli = inspect.signature(embed).parameters
    api = inspect.signature(embed_file).parameters
    for name in ("layers", "batch_size", "batch_tokens", "part_size", "max_tokens", "cache_size", "overwrite", "restart"):
        assert cli[name].default.default == api[name].default, name


def test_progress_shows_every_stage_that_takes_time_on_a_long_input(bilm, corpus, tmp_path, capsys):
    """Only the embedding had a bar: tokenizing (spaCy's, with --lang: minutes on a big file)
    and merging the parts were silent, and so was the first pass (reading: 11 minutes for 10 GB of bzip2)."""
    embed_file(bilm, corpus, tmp_path / "o.h5", part_size=3, progress=True)
    shown = capsys.readouterr().err.replace("\r", "\n")
    for stage in ("tokenizing", "embedding", "merging"):
        assert f"{stage}: 100%" in shown and f"{len(LINES)}/{len(LINES)}" in shown.split(f"{stage}: 100%")[1]
    size = corpus.stat().st_size
    assert "reading: 100%" in shown and f"{size}/{size}" in shown.split("reading: 100%")[1]
    embed_file(bilm, corpus, tmp_path / "quiet.h5", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("suffix", ["", *FORMATS])
def test_the_first_pass_shows_how_much_of_the_file_was_read(tmp_path, monkeypatch, suffix):
    """The first pass (lines counted, digested, decompressed) had no bar: its bar is of the file's bytes on the
    disk (compressed or not), at the file's position as it is read, and ends at its size."""
    import tqdm

    import spacy_elmo.training.data
    from spacy_elmo.embedding import PartDigests, scan_lines

    rng = np.random.default_rng(0)
    text = tmp_path / "text.txt"
    text.write_text("".join(" ".join(f"w{k}" for k in rng.integers(0, 10**6, 12)) + "\n" for _ in range(40_000)))
    path = compressed(text, suffix) if suffix else text
    bars = []

    class Bar(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.positions = []
            bars.append(self)

        def update(self, n=1):
            super().update(n)
            self.positions.append(self.n)

    _count_bars_with(monkeypatch, Bar)
    monkeypatch.setattr(spacy_elmo.training.data, "ON_READ_BYTES", 1 << 12)
    assert scan_lines(path, PartDigests(100), progress=True) == 40_000
    size = path.stat().st_size
    (bar,) = bars
    assert bar.total == size and bar.unit == "B" and bar.positions[-1] == size
    assert bar.positions == sorted(bar.positions) and any(0 < p < size // 2 for p in bar.positions), bar.positions[:9]


def test_a_carriage_return_inside_a_line_is_warned_of_once(bilm, tmp_path, recwarn):
    """A file whose lines end in \\r alone (classic Mac OS) became one line without a word."""
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"a b\rc d\re f\r")
    counts = embed_file(bilm, mac, tmp_path / "mac.h5", progress=False)
    said = [str(w.message) for w in recwarn if "carriage return" in str(w.message)]
    assert counts["lines"] == 1 and len(said) == 1 and f"{mac} line 1 " in said[0], said
    windows = tmp_path / "windows.txt"  # \r\n ends, and \r at the end of the last line: line ends, no warning
    windows.write_bytes(b"a b\r\nc d\r\n\r\ne\r")
    recwarn.clear()
    assert embed_file(bilm, windows, tmp_path / "windows.h5", progress=False)["lines"] == 4
    assert not [w for w in recwarn if "carriage return" in str(w.message)]
    with pytest.raises(ValueError, match=r"line 1 has 6 tokens.*whose lines end in \\r alone"):
        embed_file(bilm, mac, tmp_path / "long.h5", max_tokens=2, progress=False)
    mixed = tmp_path / "mixed.txt"  # the first line holding a \r inside it is named, once
    mixed.write_bytes(b"a b\nc\rd\ne\rf\n")
    recwarn.clear()
    assert embed_file(bilm, mixed, tmp_path / "mixed.h5", progress=False)["lines"] == 3
    said = [str(w.message) for w in recwarn if "carriage return" in str(w.message)]
    assert len(said) == 1 and f"{mixed} line 2 " in said[0], said


def test_a_line_over_max_tokens_in_a_later_part_is_named_by_its_line_in_the_file(bilm, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a b\nc\nd e\n" + " ".join(["long"] * 30) + "\nf\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 4 has 30 tokens, more than --max-tokens 20"):  # line 2 of part 1
        embed_file(bilm, path, tmp_path / "o.h5", part_size=2, max_tokens=20, progress=False)


def test_max_tokens_accepts_a_line_of_exactly_that_many_tokens_and_refuses_one_more(bilm, tmp_path):
    """--max-tokens is the longest line accepted (README: "up to `--max-tokens` tokens"): a line of exactly
    max_tokens tokens is embedded, whole; one of max_tokens + 1 is refused, nothing written."""
    max_tokens = 5
    exact = tmp_path / "exact.txt"
    exact.write_text("a b\n" + " ".join(["w"] * max_tokens) + "\n", encoding="utf-8")
    counts = embed_file(bilm, exact, tmp_path / "exact.h5", max_tokens=max_tokens, tokenize=str.split, progress=False)
    assert counts["finished"] == 1 and counts["tokens"] == 2 + max_tokens
    with h5py.File(tmp_path / "exact.h5", "r") as f:
        assert f["1"].shape[-2] == max_tokens
    over = tmp_path / "over.txt"
    over.write_text("a b\n" + " ".join(["w"] * (max_tokens + 1)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"line 2 has {max_tokens + 1} tokens, more than --max-tokens {max_tokens}"):
        embed_file(bilm, over, tmp_path / "over.h5", max_tokens=max_tokens, tokenize=str.split, progress=False)
    assert not (tmp_path / "over.h5").exists() and not parts_path(tmp_path / "over.h5").exists()


def test_every_bilm_call_of_embed_file_stays_within_batch_size_and_batch_tokens(bilm, tmp_path, monkeypatch):
    """_batches reads a batch's first row as its longest: that holds because embed_file sorts each part longest
    first. Checked on the calls embed_file makes (an ascending sort padded batches past --batch-tokens)."""
    lengths = [1, 7, 2, 9, 3, 3, 8, 0, 5, 6, 4, 9, 1]
    path = tmp_path / "in.txt"
    path.write_text("".join(" ".join(["w"] * n) + "\n" for n in lengths), encoding="utf-8")
    calls, real = [], spacy_elmo.embedding.embed_lines

    def embed_lines(bilm, rows, *args, **kwargs):
        calls.append([len(row) for row in rows])
        return real(bilm, rows, *args, **kwargs)

    monkeypatch.setattr(spacy_elmo.embedding, "embed_lines", embed_lines)
    embed_file(bilm, path, tmp_path / "o.h5", batch_size=4, batch_tokens=16, part_size=7, progress=False)
    assert sorted(n for call in calls for n in call) == sorted(lengths)
    for call in calls:
        assert len(call) <= 4 and (len(call) == 1 or len(call) * max(max(call), 1) <= 16), calls


def test_a_batch_that_fills_batch_tokens_exactly_is_one_batch():
    from spacy_elmo.embedding import _batches

    rows = [["w"] * 10] * 4  # 4 rows x 10 tokens: 40 padded tokens, the budget exactly
    assert list(_batches([0, 1, 2, 3], rows, batch_size=8, batch_tokens=40)) == [[0, 1, 2, 3]]
    assert list(_batches([0, 1, 2, 3], rows, batch_size=8, batch_tokens=39)) == [[0, 1, 2], [3]]


def test_batches_respect_rows_and_padded_tokens_and_keep_every_line():
    from spacy_elmo.embedding import _batches

    lengths = [50, 30, 9, 9, 8, 3, 1, 0, 0]
    rows = [["w"] * n for n in lengths]
    batches = list(_batches(list(range(len(rows))), rows, batch_size=3, batch_tokens=40))
    assert [i for b in batches for i in b] == list(range(len(rows)))
    assert batches[0] == [0]  # longer than the budget: alone
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(len(rows[b[0]]), 1) <= 40


def test_a_bilm_in_training_mode_with_dropout_embeds_its_eval_vectors(bilm, corpus, tmp_path):
    """A biLM as a trainer leaves it (training mode, LSTM dropout set) embeds without dropout: the vectors are the
    eval biLM's, every run the same (a resume must write the numbers of a straight run), and it is left training."""
    bilm.lstm.dropout = 0.5
    bilm.train()
    embed_file(bilm, corpus, tmp_path / "train.h5", progress=False)
    assert bilm.training
    bilm.eval()
    embed_file(bilm, corpus, tmp_path / "eval.h5", progress=False)
    trained, _ = read_all(tmp_path / "train.h5")
    evaluated, _ = read_all(tmp_path / "eval.h5")
    assert trained.keys() == evaluated.keys() and len(trained) == len(LINES)
    for name, vectors in evaluated.items():
        assert np.array_equal(trained[name], vectors), name


def _punctuation_split(line):
    return line.replace(".", " . ").replace("?", " ? ").split()


def test_custom_tokenize_from_python(bilm, corpus, tmp_path):
    """Each dataset equals the biLM on the custom tokens; a generator works; the model's mode comes
    back as it was, training or eval (it was left in eval mode)."""
    out = tmp_path / "out.h5"
    bilm.train()
    embed_file(bilm, corpus, out, tokenize=lambda line: (t for t in _punctuation_split(line)), progress=False)
    assert bilm.training
    bilm.eval()
    embed_file(bilm, corpus, tmp_path / "eval.h5", part_size=2, stop_after_parts=1, progress=False)
    assert not bilm.training  # not put in training mode on the way out
    data, _ = read_all(out)
    bilm.eval()
    for i, line in enumerate(LINES):
        tokens = _punctuation_split(line)
        assert data[str(i)].shape == (3, len(tokens), 16)
        if tokens:
            with torch.no_grad():
                expected = torch.stack(bilm(batch_to_ids([tokens])).activations)[:, 0].numpy()
            np.testing.assert_allclose(data[str(i)], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "tokenize, match",
    [
        (lambda line: line, r"tokenize returned a str for .* line 1.*one token per character"),
        (lambda line: None, r"tokenize returned a NoneType for .* line 1"),
        (lambda line: [len(w) for w in line.split()], r"returned an int as token 0 of .* line 1; tokens must be strings"),
        (lambda line: bytearray(line.encode()), r"tokenize returned a bytearray for .* line 1"),
    ],
    ids=["str", "None", "ints", "bytearray"],
)
def test_custom_tokenize_returning_no_token_list(bilm, corpus, tmp_path, tokenize, match):
    """A str was split into one token per character without a word."""
    with pytest.raises(TypeError, match=match):
        embed_file(bilm, corpus, tmp_path / "o.h5", tokenize=tokenize, progress=False)
    assert not (tmp_path / "o.h5.parts").exists()


def test_parts_of_another_tokenizer_are_not_reused(bilm, corpus, tmp_path):
    """A custom tokenize without tokenizer_name was recorded as 'whitespace': a resume with it
    reused parts split at whitespace."""
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, stop_after_parts=1, progress=False)
    with pytest.raises(ValueError, match="tokenizer"):
        embed_file(bilm, corpus, out, part_size=2, tokenize=_punctuation_split, progress=False)


def test_cli_spacy_tokens_leave_whitespace_tokens_out(model_dir, bilm, tmp_path):
    """--lang: spaCy makes tokens of extra spaces and tabs ("  Mein Freund\\tliest" gave 5 rows, "  " and
    "\\t" among them); pretraining drops them, so embed must too: the rows are the words' rows alone."""
    from spacy_elmo.cli import app

    text = tmp_path / "spaced.txt"
    text.write_text("Der Junge  isst.\n  Mein Freund\tliest\n \n", encoding="utf-8")
    out = tmp_path / "spaced.h5"
    result = runner.invoke(app, ["embed", str(text), str(out), "--model", str(model_dir), "--lang", "de"])
    assert result.exit_code == 0, result.output
    data, _ = read_all(out)
    words = [["Der", "Junge", "isst", "."], ["Mein", "Freund", "liest"]]
    with torch.no_grad():
        expected = torch.stack(bilm(batch_to_ids(words)).activations).numpy()
    for i, w in enumerate(words):
        assert data[str(i)].shape[1] == len(w)
        np.testing.assert_allclose(data[str(i)], expected[:, i, : len(w)], atol=1e-5)
    assert data["2"].shape[1] == 0


def test_cli_whitespace_splits_at_whitespace_a_model_that_records_its_language(bilm, tmp_path):
    """--whitespace reads the lines as AllenNLP's command does whatever language the model records; without it such
    a model's lines are read with spaCy's tokenizer of that language."""
    from spacy_elmo.cli import app

    bilm.save(tmp_path / "en-model", provenance={"lang": "en", "tokenizer": None})
    text = tmp_path / "text.txt"
    text.write_text("Hello, world\n", encoding="utf-8")
    for option, n_tokens in (("--whitespace", 2), ("--no-progress", 3)):  # "Hello," "world" / "Hello" "," "world"
        out = tmp_path / f"{option}.h5"
        result = runner.invoke(app, ["embed", str(text), str(out), "--model", str(tmp_path / "en-model"), option])
        assert result.exit_code == 0, result.output
        assert read_all(out)[0]["0"].shape[1] == n_tokens, option


def test_cli_parts_of_a_whitespace_run_name_the_option_that_finishes_it(bilm, corpus, model_dir, tmp_path):
    """A run of embed's old default (whitespace) resumed under the new one (the model's language) was refused with
    "Rerun with the earlier settings", though the user had: the refusal names --whitespace, which finishes it."""
    from spacy_elmo.cli import app

    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)  # tokenize=None: whitespace
    args = ["embed", str(corpus), str(out), "--model", str(model_dir), "--part-size", "2", "--no-progress"]
    refused = runner.invoke(app, [*args, "--lang", "en"])
    assert refused.exit_code == 1
    assert ("Rerun with the earlier settings (`spacy-elmo embed` with --whitespace: the earlier run split the lines "
            "at whitespace) to finish it") in " ".join(refused.output.split())
    finished = runner.invoke(app, [*args, "--whitespace"])
    assert finished.exit_code == 0 and "from an earlier run" in finished.output


def test_cli_spacy_parts_of_another_tokenizer_or_older_token_rules_are_not_reused(model_dir, tmp_path, monkeypatch):
    """--lang named its parts' tokenizer "spacy:LANG" only: parts of ja's rule-based fallback were reused
    after installing SudachiPy, and parts of a spacy-elmo that still embedded spaCy's whitespace tokens
    (other rows) were reused too, and so were parts tokenized with the rules of another spaCy. The name now
    holds the tokenizer block and a digest of spaCy's rules, the manifest the token rules."""
    from spacy_elmo.cli import app
    from spacy_elmo.training import data

    text = tmp_path / "spaced.txt"
    text.write_text("Der Junge  isst.\n  Mein Freund\tliest\n", encoding="utf-8")
    out = tmp_path / "spaced.h5"
    args = ["embed", str(text), str(out), "--model", str(model_dir), "--lang", "de", "--part-size", "1"]
    with monkeypatch.context() as m:
        m.setattr(spacy_elmo.embedding, "embed_lines", interrupted_at_call(2))  # one call a part here
        assert runner.invoke(app, args).exit_code == 130
    manifest_path = tmp_path / "spaced.h5.parts" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    block = 'spacy:de {"@tokenizers": "spacy.Tokenizer.v1"}'
    assert manifest["tokenizer"] == f"{block} rules {data.spacy_rules(data.make_nlp('de'))[:16]}"
    assert manifest["token_rules"] == spacy_elmo.embedding.EMBED_TOKEN_RULES == 2
    with monkeypatch.context() as m:
        m.setattr(data, "tokenizer_settings", lambda nlp: {"@tokenizers": "spacy.de.OtherTokenizer"})
        other = runner.invoke(app, args)
    assert other.exit_code == 1
    said = " ".join(other.output.split())
    assert f"different tokenizer (earlier '{block} rules" in said
    # the user ran with --lang de already: the refusal names what changed, not that option (it read as this run)
    assert ("Rerun with the earlier settings (this run reads language 'de' as the earlier one did, but spaCy's "
            'tokenizer was then {"@tokenizers": "spacy.Tokenizer.v1"}, or read with other rules where that is this '
            "run's block: install again the package that tokenizer needs, or the spaCy that read it) "
            "to finish it") in said, said
    assert "with --lang de," not in said
    with monkeypatch.context() as m:  # the same tokenizer block with other rules (a spaCy upgrade)
        m.setattr(data, "spacy_rules", lambda nlp: "0" * 64)
        upgraded = runner.invoke(app, args)
    said = " ".join(upgraded.output.split())
    assert upgraded.exit_code == 1 and "different tokenizer" in said and "reads language 'de' as the earlier one did" in said
    english = runner.invoke(app, [*args, "--lang", "en"])  # another language: the option that reads as it did
    assert english.exit_code == 1
    assert ("Rerun with the earlier settings (`spacy-elmo embed` with --lang de, spaCy's tokenizer then being "
            '{"@tokenizers": "spacy.Tokenizer.v1"}: the earlier run read with it)') in " ".join(english.output.split())
    text.write_text("Der Junge  schläft.\n  Mein Freund\tliest\n", encoding="utf-8")  # the same tokenizer, other text
    edited = runner.invoke(app, args)
    said = " ".join(edited.output.split())
    assert edited.exit_code == 1 and "different input" in said, said
    # the settings are the same: what finishes it is the text that run read, or --restart
    assert f"Rerun on the text the earlier run read ({text} as it was then) to finish it, or delete" in said, said
    assert "(or pass --restart) to start over" in said and "settings" not in said
    assert "--lang" not in said and "--whitespace" not in said
    found = json.loads(manifest_path.read_text(encoding="utf-8"))  # the text and a setting: both said (embed_file
    # refuses another setting before reading the text: this is the check after it, of a manifest edited meanwhile)
    with pytest.raises(ValueError, match=rf"different batch_size \(earlier 64\), input, .*Rerun on the text the earlier "
                                         rf"run read \({re.escape(str(text))} as it was then\) and with the earlier "
                                         rf"settings to finish it"):
        spacy_elmo.embedding._check_settings(found, {**found, "batch_size": 3, "input": "0" * 64}, manifest_path.parent, text)
    text.write_text("Der Junge  isst.\n  Mein Freund\tliest\n", encoding="utf-8")
    older = {k: v for k, v in manifest.items() if k != "token_rules"}
    manifest_path.write_text(json.dumps(dict(older, tokenizer="spacy:de")), encoding="utf-8")
    old = runner.invoke(app, args)
    assert old.exit_code == 1 and "older spacy-elmo, which did not record token_rules" in " ".join(old.output.split())
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    with monkeypatch.context() as m:  # pretraining's token rules (cut_runs) are no part of embed's tokens
        m.setattr(data, "TOKEN_RULES", data.TOKEN_RULES + 1)
        again = runner.invoke(app, args)
    assert again.exit_code == 0 and "(1 part from an earlier run)" in again.output, again.output


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_compressed_input_embeds_as_its_text_and_resumes_from_parts_of_any_packing(bilm, corpus, tmp_path, suffix):
    """gzip, bzip2 and xz inputs are decompressed (by their bytes, whatever their name); the parts'
    manifest records the digest of the text, so parts written from one packing serve another."""
    marked = tmp_path / "marked.txt"  # a leading BOM and CRLF ends: dropped alike
    marked.write_bytes(b"\xef\xbb\xbf" + corpus.read_bytes().replace(b"\n", b"\r\n"))
    straight = tmp_path / "straight.h5"
    embed_file(bilm, marked, straight, part_size=2, progress=False)
    want = read_all(straight)
    packed = compressed(marked, suffix)
    assert embed_file(bilm, packed, tmp_path / "packed.h5", part_size=2, progress=False)["lines"] == len(LINES)
    unnamed = compressed(marked, suffix, to=tmp_path / "unnamed.txt")
    resumed = tmp_path / "resumed.h5"
    assert embed_file(bilm, unnamed, resumed, part_size=2, progress=False, stop_after_parts=2)["finished"] == 0
    counts = embed_file(bilm, marked, resumed, part_size=2, progress=False)  # the plain text goes on
    assert counts["parts_reused"] == 2 and counts["finished"] == 1
    for got in (read_all(tmp_path / "packed.h5"), read_all(resumed)):
        assert got[1] == want[1] and got[0].keys() == want[0].keys()
        assert all(np.array_equal(got[0][k], want[0][k]) for k in want[0])


@pytest.mark.parametrize("damage", ["truncated", "damaged", "misnamed"])
def test_a_broken_or_misnamed_compressed_input_is_a_clear_error_before_any_part(model_dir, corpus, tmp_path, damage):
    from spacy_elmo.cli import app

    if damage == "misnamed":
        broken = tmp_path / "in.txt.xz"
        broken.write_bytes(corpus.read_bytes())
        expected = f"{broken} is named .xz but is not xz data"
    else:
        broken = compressed(corpus, ".xz", damage=damage)
        expected = f"{broken} is a broken xz file"
    out = tmp_path / "o.h5"
    result = runner.invoke(app, ["embed", str(broken), str(out), "--model", str(model_dir)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert expected in plain(result.output)
    assert not out.exists() and not parts_path(out).exists()


@pytest.mark.parametrize("suffix", ["", *FORMATS])
def test_the_input_is_read_in_passes_and_its_digest_is_of_its_text(bilm, corpus, tmp_path, monkeypatch, suffix):
    """The input was read three times (the binary probe, the lines, the manifest's sha256 apart), then
    once, whole into memory; now in passes that each hold one part (the probe, the count with the digest,
    the tokens, the parts, the merge's map). The digest stays the sha256 of the text's bytes
    (decompressed), as before, so parts directories written before resume."""
    from spacy_elmo.training import data

    marked = tmp_path / "marked.txt"  # a BOM, CRLF ends and an undecodable byte: digested as they are
    marked.write_bytes(b"\xef\xbb\xbf" + corpus.read_bytes().replace(b"\n", b"\r\n") + b"\xff tail")
    source = compressed(marked, suffix) if suffix else marked
    read, real = [], data.open_text_file

    def counted(path):
        read.append(path)
        return real(path)

    monkeypatch.setattr(data, "open_text_file", counted)
    out = tmp_path / "out.h5"
    with pytest.warns(RuntimeWarning):
        assert embed_file(bilm, source, out, part_size=2, progress=False, stop_after_parts=2)["finished"] == 0
    assert read == [source] * 4  # the binary probe, the count and digest, the tokens, the parts (stopped)
    manifest = json.loads((parts_path(out) / "manifest.json").read_text())
    assert manifest["input"] == hashlib.sha256(marked.read_bytes()).hexdigest()
    with pytest.warns(RuntimeWarning):
        counts = embed_file(bilm, marked, out, part_size=2, progress=False)
    assert counts["parts_reused"] == 2 and counts["finished"] == 1


def test_the_lines_are_never_all_in_memory_before_the_merge(bilm, tmp_path, monkeypatch):
    """Every line and its tokens were kept for the whole run (1.1 GB of RSS for 53 MB of text:
    benchmarks/embed_memory.py); now one part's, until the merge builds sentence_to_index (which
    holds every distinct line: the format's)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    path = tmp_path / "in.txt"  # 4 MB in 10,000 lines of one token (the biLM's work stays small)
    path.write_text("".join("".join(rng.choice(list("abcdefgh"), 400)) + "\n" for _ in range(10_000)))
    size, peaks, merge = path.stat().st_size, [], spacy_elmo.embedding._merge

    def merge_after_peak(*args, **kwargs):
        peaks.append(tracemalloc.get_traced_memory()[1])
        return merge(*args, **kwargs)

    few = tmp_path / "few.txt"  # the imports and first calls of a run, before the measurement
    few.write_text("warm up .\n", encoding="utf-8")
    embed_file(bilm, few, tmp_path / "few.h5", layers="top", progress=False)
    monkeypatch.setattr(spacy_elmo.embedding, "_merge", merge_after_peak)
    tracemalloc.start()
    try:
        embed_file(bilm, path, tmp_path / "o.h5", layers="top", part_size=250, progress=False)
    finally:
        tracemalloc.stop()
    assert peaks[0] < size / 4, (peaks, size)  # one part: 100 KB of its text (all of them: 4 MB, and the tokens)
    assert read_all(tmp_path / "o.h5")[0]["9999"].shape == (1, bilm.config.output_dim)


def test_sentence_to_index_is_json_dumps_of_the_map(bilm, tmp_path):
    """The map is encoded piece by piece (not json.dumps's one str): its bytes are still json.dumps's,
    quotes, backslashes, control characters, U+2028 and characters outside the BMP included."""
    lines = ['say "hi" \\ there', "tab\tin", "\x01 ctrl", "日本語 😀", "line\u2028sep", " say \"hi\" \\ there ", "x"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    embed_file(bilm, path, tmp_path / "o.h5", layers="top", part_size=2, progress=False)
    want = json.dumps({line.strip(): str(i) for i, line in enumerate(lines)}, ensure_ascii=False).encode()
    with h5py.File(tmp_path / "o.h5", "r") as f:
        assert f["sentence_to_index"][0] == want


@pytest.mark.parametrize("moment", ["before the parts", "before the map"])
def test_an_input_changed_during_the_run_is_an_error_and_its_parts_are_dropped(bilm, corpus, tmp_path, monkeypatch, moment):
    """The lines are read again for the parts and for the map: a file rewritten meanwhile would mix two
    texts under the manifest of the first. No part of the other text is written; those of the manifest's
    text (the earlier run's, and all of them when the map found the change) are kept."""
    out = tmp_path / "o.h5"
    assert embed_file(bilm, corpus, out, part_size=2, progress=False, stop_after_parts=1)["finished"] == 0
    name = {"before the parts": "TokenCache", "before the map": "_merge"}[moment]
    real = getattr(spacy_elmo.embedding, name)

    def rewriting(*args, **kwargs):
        corpus.write_text("\n".join(reversed(LINES)) + "\n", encoding="utf-8")
        return real(*args, **kwargs)

    monkeypatch.setattr(spacy_elmo.embedding, name, rewriting)
    with pytest.raises(ValueError, match="in.txt changed while it was embedded.*--restart"):
        embed_file(bilm, corpus, out, part_size=2, progress=False)
    assert not out.exists()
    kept = ["part-000000.hdf5"] if moment == "before the parts" else [f"part-00000{k}.hdf5" for k in range(4)]
    assert sorted(p.name for p in parts_path(out).glob("part-*")) == kept


@pytest.mark.parametrize("moment", ["after the first pass", "before the parts"])
def test_a_run_stopped_otherwise_after_the_input_changed_leaves_no_part_of_the_other_text(
        bilm, corpus, tmp_path, monkeypatch, moment):
    """The change was seen only at the end of a pass: rewritten before the parts, a file whose new text
    stopped the run earlier (a line over --max-tokens here; a tokenizer error, Ctrl-C or a full disk as
    well) left the parts written from the new text under the manifest of the first, and a rerun once the
    file held the first text again reused them (line 2 of the other text in the output). Each part is now
    checked against its digest from the first pass before it is tokenized: the run stops at the first
    changed part, having written only the parts of the first text."""
    part_size, max_tokens = 2, 15  # parts: lines 0-1, 2-3, 4-5, 6; line 2 has 15 tokens
    clean, out = tmp_path / "clean.h5", tmp_path / "out.h5"
    embed_file(bilm, corpus, clean, part_size=part_size, max_tokens=max_tokens, progress=False)
    first = corpus.read_bytes()
    other = list(LINES)
    other[2] = other[2].replace("river", "sea")  # part 1 differs from the first text's
    other[4] = " ".join(["long"] * (max_tokens + 1))  # part 2 is refused
    name = {"after the first pass": "scan_lines", "before the parts": "TokenCache"}[moment]
    real = getattr(spacy_elmo.embedding, name)

    def rewriting(*args, **kwargs):
        result = real(*args, **kwargs)
        corpus.write_text("\n".join(other) + "\n", encoding="utf-8")
        return result

    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, name, rewriting)
        with pytest.raises(ValueError) as stopped:
            embed_file(bilm, corpus, out, part_size=part_size, max_tokens=max_tokens, progress=False)
    corpus.write_bytes(first)
    counts = embed_file(bilm, corpus, out, part_size=part_size, max_tokens=max_tokens, progress=False)
    # part 0 is the same in both texts: written before the change was seen when the parts were
    reused = {"after the first pass": 0, "before the parts": 1}[moment]
    assert counts["parts_reused"] == reused and counts["parts_written"] == 4 - reused
    a, map_a = read_all(clean)
    b, map_b = read_all(out)
    assert map_a == map_b and a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert out.read_bytes() == clean.read_bytes()
    assert "in.txt changed while it was embedded" in str(stopped.value)  # not the other text's long line


def test_each_part_is_checked_against_the_digest_of_its_bytes_from_the_first_pass(tmp_path):
    """same_parts yields the parts whose bytes have the first pass's sha256 and stops at the first other
    one, a file grown or cut short included; PartDigests' digests are hashlib's of each part's raw lines."""
    from spacy_elmo.embedding import InputChanged, PartDigests, same_parts, scan_lines

    path = tmp_path / "in.txt"
    raw = [b"\xef\xbb\xbfa b\r\n", b"c\n", b"\n", b"d e f\n", b"g"]  # a BOM, CRLF, an empty and an unended line
    path.write_bytes(b"".join(raw))
    digests = PartDigests(2)
    assert scan_lines(path, digests) == 5
    assert digests.whole.hexdigest() == hashlib.sha256(b"".join(raw)).hexdigest()
    expected = [hashlib.sha256(b"".join(raw[k:k + 2])).hexdigest() for k in (0, 2, 4)]
    assert digests.parts() == expected
    assert list(same_parts(path, 2, expected)) == [(0, ["a b", "c"]), (2, ["", "d e f"]), (4, ["g"])]

    def read_until_changed(data, expected=expected):
        path.write_bytes(data)
        seen = []
        with pytest.raises(InputChanged, match="changed while it was embedded"):
            for start, _ in same_parts(path, 2, expected):
                seen.append(start)
        return seen

    assert read_until_changed(b"".join(raw[:3]) + b"d e F\n" + raw[4]) == [0]  # part 1 differs
    assert read_until_changed(b"".join(raw) + b"\nh\n") == [0, 2]  # the last part grew
    assert read_until_changed(b"".join(raw) + b"\n") == [0, 2]  # its last line ended
    assert read_until_changed(b"".join(raw[:4])) == [0, 2]  # cut short: no part 2
    assert read_until_changed(b"".join(raw[:4]) + b"g\n", expected[:2]) == [0, 2]  # a part more
    assert read_until_changed(b"x\n", []) == []  # an empty file that got a line


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="POSIX file-size limits")
def test_a_full_disk_while_embedding_is_an_error_not_a_crash(model_dir, tmp_path):
    """HDF5 writing a part itself met the full disk (here a file-size limit) while it flushed: a RuntimeError,
    then a segmentation fault (exit -11 / 139) and no word of it. Parts go through Python's file now: the
    command's error naming the file, exit 1."""
    import subprocess
    import sys

    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"{LINES[i % len(LINES)]} {i}\n" for i in range(400)), encoding="utf-8")
    out = tmp_path / "out.h5"
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384)); from spacy_elmo.cli import main; "
              "sys.argv = ['spacy-elmo', 'embed', sys.argv[1], sys.argv[2], '--model', sys.argv[3], '--no-progress']; main()")
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(corpus), str(out), str(model_dir)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "File too large" in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert not out.exists()


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="POSIX file-size limits")
def test_a_full_disk_while_merging_goes_on_from_the_parts(model_dir, corpus, tmp_path):
    """The README's promise: a full disk ends the command (exit 1), the parts written stay, and the same
    command then goes on from them to the file an uninterrupted run writes. Here the parts fit under a
    file-size limit and the merged file does not."""
    import subprocess
    import sys

    out = tmp_path / "out.h5"
    args = [str(corpus), str(out), "--model", str(model_dir), "--no-progress", "--part-size", "2"]
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1]))); "
              "from spacy_elmo.cli import main; sys.argv = ['spacy-elmo', 'embed', *sys.argv[2:]]; main()")
    straight = tmp_path / "straight.h5"
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(1 << 30), *args[:1], str(straight), *args[2:]],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    limit = straight.stat().st_size - 1  # each part (2 of the lines) fits, the merged file does not
    stopped = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(limit), *args], capture_output=True, text=True,
                             timeout=300)
    assert stopped.returncode == 1 and "File too large" in stopped.stderr, (stopped.returncode, stopped.stderr[-2000:])
    assert not out.exists()
    resumed = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(1 << 30), *args], capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0 and "parts from an earlier run" in resumed.stdout, resumed.stdout + resumed.stderr[-2000:]
    (got, got_map), (want, want_map) = read_all(out), read_all(straight)
    assert got_map == want_map and sorted(got) == sorted(want)
    assert all(np.array_equal(got[name], want[name]) for name in want)


def test_a_bom_inside_the_input_is_kept_and_warned_of_as_pretraining_warns(bilm, tmp_path):
    """embed kept a U+FEFF after the file's start ('\\ufeffc', a word of its own, as the pipeline reads it) without a
    word, where pretraining, evaluate and fit-state warn (W_BOM_INSIDE): the same warning now, once, told apart from
    the leading byte order mark (dropped, not counted)."""
    import warnings

    from spacy_elmo.training.data import ReadStats, iter_text

    path = tmp_path / "joined.txt"  # `cat a.txt b.txt`, each beginning with a byte order mark, and one in a word
    path.write_bytes("\ufeffa b\n\ufeffc d\ne\ufefff\n".encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(iter_text(path, ReadStats()))
    (expected,) = [str(w.message) for w in caught if "U+FEFF" in str(w.message)]
    assert "has 2 U+FEFF characters (byte order marks) after its start, 1 at the start of a line" in expected
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embed_file(bilm, path, tmp_path / "o.h5", progress=False)
    assert [str(w.message) for w in caught if "U+FEFF" in str(w.message)] == [expected]
    data, mapping = read_all(tmp_path / "o.h5")
    assert set(mapping) == {"a b", "\ufeffc d", "e\ufefff"}  # kept in its word, as the pipeline reads it
    plain_file = tmp_path / "plain.txt"  # a leading byte order mark alone: no text, no warning
    plain_file.write_bytes("\ufeffa b\n".encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embed_file(bilm, plain_file, tmp_path / "p.h5", progress=False)
    assert not [w for w in caught if "U+FEFF" in str(w.message)]



CHECK_PATHS = """
import sys
from spacy_elmo.embedding import check_paths
try:
    check_paths(sys.argv[1], sys.argv[2])
except FileExistsError as err:
    print(err)
"""


def test_an_existing_fifo_output_is_refused_at_once(tmp_path):
    """An OUTPUT that exists as a FIFO: check_paths opened it with h5py to read the record of the run that wrote it,
    which waits for a writer forever, holding the GIL (embed hung before any work); it is refused as existing, as
    any other file. In a child process, which the guard against the hang can kill."""
    import os
    import subprocess
    import sys

    pytest.importorskip("fcntl")  # a POSIX system: os.mkfifo
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    fifo = tmp_path / "out.h5"
    os.mkfifo(fifo)
    try:  # a guard against the hang, not a time limit: the check does no work
        done = subprocess.run([sys.executable, "-c", CHECK_PATHS, str(tmp_path / "in.txt"), str(fifo)],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("check_paths waited on the FIFO")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{fifo} already exists. Pass --overwrite to replace it, or choose another output.\n"


def test_another_text_into_a_complete_output_is_refused_before_it_is_tokenized(bilm, corpus, tmp_path):
    """A rerun of the same settings with another text into a complete OUTPUT: refused as existing, which it was
    only after every line was tokenized; its first pass (the lines' sha256) tells, and no line is tokenized."""
    out = tmp_path / "out.h5"
    embed_file(bilm, corpus, out, part_size=3, progress=False)
    before = out.read_bytes()
    calls = []

    def whitespace(line):
        calls.append(line)
        return line.split()

    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text(encoding="utf-8").replace("the", "a"), encoding="utf-8")
    with pytest.raises(FileExistsError, match="out.h5 already exists. Pass --overwrite"):
        embed_file(bilm, other, out, part_size=3, progress=False, tokenize=whitespace, tokenizer_name="whitespace")
    assert calls == [] and out.read_bytes() == before
    # the same text is tokenized (its tokens compared) and found complete
    assert embed_file(bilm, corpus, out, part_size=3, progress=False, tokenize=whitespace,
                      tokenizer_name="whitespace")["finished"] == 1
    assert len(calls) > 0 and out.read_bytes() == before


def test_an_empty_input_embeds_into_an_output_of_no_dataset(bilm, tmp_path):
    """An empty input has no line and no part: its OUTPUT holds sentence_to_index alone, an empty map, and the
    same run again finds it complete. PartDigests gives no part's digest for it (one digest of no line made every
    later pass find the text changed, E_EMBED_INPUT_CHANGED)."""
    from spacy_elmo.embedding import PartDigests, scan_lines

    path = tmp_path / "in.txt"
    path.write_bytes(b"")
    digests = PartDigests(4)
    assert scan_lines(path, digests) == 0 and digests.parts() == []
    out = tmp_path / "out.h5"
    counts = embed_file(bilm, path, out, part_size=4, progress=False)
    assert counts == {"lines": 0, "tokens": 0, "parts_written": 0, "parts_reused": 0, "finished": 1, "merged": 1}
    assert read_all(out) == ({}, {}) and not parts_path(out).exists()
    assert embed_file(bilm, path, out, part_size=4, progress=False)["merged"] == 0  # complete already


def test_ctrl_c_while_merging_before_output_is_in_place_stays_an_interrupt(bilm, corpus, tmp_path, monkeypatch):
    """Ctrl-C ends a finished run only once OUTPUT is in place (complete): during the merge, before its rename, it
    is an interrupt, no OUTPUT written and the finished parts kept, which the next run reuses for the same file."""
    straight, out = tmp_path / "straight.h5", tmp_path / "out.h5"
    embed_file(bilm, corpus, straight, part_size=3, progress=False)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(spacy_elmo.embedding, "_merge", interrupted)
        with pytest.raises(KeyboardInterrupt):
            embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert not out.exists() and len(list(parts_path(out).glob("part-*.hdf5"))) == 3
    counts = embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert counts["parts_reused"] == 3 and counts["parts_written"] == 0 and out.read_bytes() == straight.read_bytes()


def test_an_existing_output_refused_without_overwrite_takes_a_killed_removals_leftover_along(
        bilm, corpus, tmp_path, ended_pid):
    """OUTPUT exists, not a complete one of this program's (no record of its run), without --overwrite: refused,
    and what a run killed while deleting OUTPUT's parts left beside it (``.OUTPUT.parts.PID.tmp`` of a process that
    has ended) is removed on the way: never reused, it stayed for good, as big as OUTPUT."""
    out = tmp_path / "out.h5"
    out.write_text("someone's file\n")
    left = tmp_path / f".out.h5.parts.{ended_pid}.tmp"
    left.mkdir()
    (left / "part-000000.hdf5").write_bytes(b"half")
    with pytest.raises(FileExistsError):
        embed_file(bilm, corpus, out, part_size=3, progress=False)
    assert not left.exists() and out.read_text() == "someone's file\n"
