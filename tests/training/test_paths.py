"""Where pretrain reads and writes: OUTPUT_DIR against TRAIN_PATH and the user's own files,
and which files of a TRAIN_PATH directory are the corpus."""

import os
import shutil

import pytest

from spacy_elmo.training.trainer import train

from .conftest import tiny_train_config, write_corpus
from .test_train import _files


def test_a_data_directory_of_the_users_is_neither_written_nor_deleted(tmp_path):
    """OUTPUT_DIR/data is where the tokenized corpus goes, and a resume that reads the text again
    replaces that whole directory: a project directory given as OUTPUT_DIR whose data/ holds the
    corpus lost it (and everything beside it) on such a resume. It is refused untouched."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    corpus = write_corpus(project / "data" / "corpus.txt", 100)
    (project / "data" / "notes.md").write_text("mine\n")
    before = _files(project)
    with pytest.raises(ValueError, match=r"data is not a corpus cache of spacy-elmo: it holds 2 .*corpus.txt, notes.md"):
        train(tiny_train_config(corpus, project, max_steps=2, checkpoint_every=2))
    assert _files(project) == before
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "data").write_text("a file named data\n")
    with pytest.raises(ValueError, match="data is not a corpus cache of spacy-elmo: it is a file"):
        train(tiny_train_config(corpus, tmp_path / "file", max_steps=2, checkpoint_every=2))


def test_what_a_killed_tokenization_left_in_data_is_the_runs_own(tmp_path):
    corpus = write_corpus(tmp_path / "train.txt", 100)
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    for name in ("tokens.raw", "types.txt", ".meta.json.99999999.tmp"):  # a run killed while tokenizing
        (out / "data" / name).write_bytes(b"\x00")
    assert train(tiny_train_config(corpus, out, max_steps=2, checkpoint_every=2))["steps"] == 2
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "counts.i64", "meta.json", "sent_lengths.i64", "tokens.i32", "types.txt"]
    # What Finder, Explorer and NFS leave in a directory keeps it the run's own: the resume goes on.
    for name in (".DS_Store", "._meta.json", "Thumbs.db", ".nfs000000000123abcd"):
        (out / "data" / name).write_bytes(b"\x00")
    assert train(tiny_train_config(corpus, out, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4


def test_an_output_dir_inside_the_corpus_directory_is_refused_unless_hidden(tmp_path):
    """Every non-hidden file under a TRAIN_PATH directory is text: an OUTPUT_DIR there read the run's
    own cache, vocabulary and log as corpus (the first run an empty tokens.raw as a file), and a
    --resume was then refused as 'trained on other data'."""
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    write_corpus(corpus_dir / "a.txt", 100)
    for out in (corpus_dir / "out", corpus_dir / "sub" / "out", corpus_dir):
        with pytest.raises(ValueError, match="is inside TRAIN_PATH"):
            train(tiny_train_config(corpus_dir, out, max_steps=2, checkpoint_every=2))
    assert sorted(p.name for p in corpus_dir.iterdir()) == ["a.txt"]
    hidden = corpus_dir / ".runs" / "out"  # not read: trains, and resumes over the same corpus
    assert train(tiny_train_config(corpus_dir, hidden, max_steps=2, checkpoint_every=2))["corpus"]["n_files"] == 1
    assert train(tiny_train_config(corpus_dir, hidden, max_steps=4, checkpoint_every=2, resume=True))["steps"] == 4


def test_an_output_dir_reached_through_a_linked_directory_of_the_corpus_is_refused(tmp_path):
    """The reader follows links to directories: an OUTPUT_DIR under a linked directory's target (or under
    a hidden directory a non-hidden link points at) is read as corpus, though its real path is outside
    TRAIN_PATH's. A hidden link is not followed: a directory only it reaches is not read."""
    corpus, elsewhere, unread = tmp_path / "corpus", tmp_path / "elsewhere", tmp_path / "unread"
    for directory in (corpus / ".runs", elsewhere, unread):
        directory.mkdir(parents=True)
    write_corpus(corpus / "a.txt", 100)
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "runs").symlink_to(corpus / ".runs", target_is_directory=True)
    (corpus / ".hidden").symlink_to(unread, target_is_directory=True)
    for out in (elsewhere / "out", elsewhere, corpus / "linked" / "out", corpus / ".runs" / "out"):
        with pytest.raises(ValueError, match="is inside TRAIN_PATH"):
            train(tiny_train_config(corpus, out, max_steps=2, checkpoint_every=2))
    assert not any(p.name == "out" for p in tmp_path.rglob("*"))
    assert train(tiny_train_config(corpus, unread / "out", max_steps=2, checkpoint_every=2))["corpus"]["n_files"] == 1


def test_linked_directories_are_read_once_and_other_entries_are_no_text(tmp_path):
    """A symbolic link to a directory (corpus/wiki -> /data/wiki) was silently not read; links back
    up or to a directory read already end the walk there. A FIFO was opened and waited on forever."""
    import os

    from spacy_elmo.training.data import ReadStats, iter_text, list_text_files

    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    (corpus / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    a = write_corpus(corpus / "sub" / "a.txt", 30)
    b = write_corpus(elsewhere / "b.txt", 60, seed=1)
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "sub" / "again").symlink_to(elsewhere, target_is_directory=True)  # read already
    (corpus / "sub" / "up").symlink_to(corpus, target_is_directory=True)  # a loop
    (corpus / "self").symlink_to(".", target_is_directory=True)
    os.mkfifo(corpus / "pipe")
    assert list_text_files(corpus) == [corpus / "linked" / "b.txt", corpus / "sub" / "a.txt"]
    lines = [line for f in (b, a) for line in f.read_text(encoding="utf-8").splitlines()]
    assert list(iter_text(corpus, ReadStats())) == lines


def test_a_file_reached_through_two_links_is_read_once_under_its_first_name(tmp_path):
    """Directories were deduplicated by real path and files were not: a file linked from a
    subdirectory (corpus/sub/link_to_a.txt -> corpus/a.txt) was read twice, once through every name."""
    from spacy_elmo.training.data import ReadStats, iter_text, list_text_files

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    a = write_corpus(corpus / "a.txt", 20)
    b = write_corpus(corpus / "b.txt", 10, seed=1)
    (corpus / "sub" / "link_to_a.txt").symlink_to(a)
    (corpus / "z_link_to_b.txt").symlink_to(corpus / "sub" / ".." / "b.txt")  # after b.txt, sorted
    (corpus / "link_to_sub").symlink_to(corpus / "sub", target_is_directory=True)
    assert list_text_files(corpus) == [a, b]
    stats = ReadStats()
    lines = [line for f in (a, b) for line in f.read_text(encoding="utf-8").splitlines()]
    assert list(iter_text(corpus, stats)) == lines and stats.n_files == 2


def test_a_pipe_as_train_path_is_refused_naming_it(tmp_path):
    """``pretrain <(zcat corpus.gz) out`` said 'No text to train on: 0 file(s) read'."""
    import os

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(ValueError, match="pipe is neither a file nor a directory .* Write it to a file first"):
        train(tiny_train_config(pipe, tmp_path / "out", max_steps=2))


@pytest.mark.parametrize("where", ["same file", "hard link", "copy", "in the corpus directory", "linked into it"])
def test_heldout_text_that_is_training_text_warns(tmp_path, where):
    """--heldout equal to TRAIN_PATH, or a file of a TRAIN_PATH directory, gave the perplexity of
    trained text without a word; held-out text elsewhere does not warn. A hard link to the training file is
    the same file under another real path (compared by path, it gave no warning); a byte-identical copy is
    another file with its text (compared by file, it gave none)."""
    import warnings

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    train_file = write_corpus(corpus / "a.txt", 100)
    (tmp_path / "h").mkdir()
    held = write_corpus(tmp_path / "h" / "held.txt", 20, seed=3)
    train_path = train_file if where in ("same file", "hard link", "copy") else corpus
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # none: the text is apart
        train(tiny_train_config(train_path, tmp_path / "apart", max_steps=1, heldout=str(held)))
    if where == "same file":
        held = train_file
    elif where == "hard link":
        held = tmp_path / "h" / "hard.txt"
        os.link(train_file, held)
    elif where == "copy":
        held = tmp_path / "h" / "a.txt"
        shutil.copyfile(train_file, held)
    elif where == "in the corpus directory":
        held = write_corpus(corpus / "held.txt", 20, seed=3)
    else:
        (corpus / "more").symlink_to(held.parent, target_is_directory=True)  # corpus/more/held.txt is held.txt
    same_as = {"same file": train_file, "hard link": train_file, "copy": train_file, "in the corpus directory": held}.get(
        where, corpus / "more" / "held.txt")
    with pytest.warns(RuntimeWarning, match=r"--heldout .*(held|a|hard).txt is training text too \(1 of its file") as got:
        train(tiny_train_config(train_path, tmp_path / "out", max_steps=1, heldout=str(held)))
    # the training file it is: a hard link's real path is another, a copy another file
    (message,) = [str(w.message) for w in got if "is training text too" in str(w.message)]
    how = "a copy of" if where == "copy" else "the same file as"
    assert f"{held}, {how} {same_as})" in message and "a link to one or a byte-identical copy of one" in message


def test_heldout_copies_are_found_by_size_then_hash(tmp_path, monkeypatch):
    """A byte-identical copy of a training file among many held-out files warns, naming it and the training file it
    copies; only files of a size some file of the other side has are hashed, each once, and empty files never: a
    file of a training file's size with other bytes is no copy."""
    import warnings

    from spacy_elmo.training import trainer

    corpus, held = tmp_path / "corpus", tmp_path / "held"
    corpus.mkdir()
    held.mkdir()
    for i in range(6):
        (corpus / f"t{i}.txt").write_text("word " * (10 + i) + "\n", encoding="utf-8")
        (held / f"h{i}.txt").write_text("other " * (30 + i) + "\n", encoding="utf-8")  # no training file's size
    (corpus / "empty.txt").write_text("", encoding="utf-8")
    (held / "empty.txt").write_text("", encoding="utf-8")
    (held / "same_size.txt").write_text("wOrd " * 12 + "\n", encoding="utf-8")  # t2.txt's size, other bytes
    hashed, real = [], trainer.file_sha256
    monkeypatch.setattr(trainer, "file_sha256", lambda f, limit=None: (hashed.append(f.name), real(f, limit))[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trainer._warn_heldout_in_training(str(held), str(corpus))
    assert sorted(hashed) == ["same_size.txt", "t2.txt"]
    hashed.clear()
    shutil.copyfile(corpus / "t3.txt", held / "h_copy.txt")
    with pytest.warns(RuntimeWarning, match="is training text too") as got:
        trainer._warn_heldout_in_training(str(held), str(corpus))
    (message,) = [str(w.message) for w in got]
    assert "(1 of its file(s) under TRAIN_PATH" in message and f"{held / 'h_copy.txt'}, a copy of {corpus / 't3.txt'})" in message
    assert sorted(hashed) == ["h_copy.txt", "same_size.txt", "t2.txt", "t3.txt"]


def test_heldout_copies_of_equal_size_shards_read_their_starts_first(tmp_path, monkeypatch):
    """r1: `split -b` shards all have one size, and each was hashed whole (204 MiB read for 51 files). Files of one
    size are compared by their first HEAD_BYTES, each file's start read once; only a held-out file whose start
    matches a training file's is read whole, with that file; a copy is found, and a file that differs past the
    start is no copy."""
    import random

    from spacy_elmo.training import trainer

    corpus, held = tmp_path / "corpus", tmp_path / "held"
    corpus.mkdir()
    held.mkdir()
    size = trainer.HEAD_BYTES * 2 + 100
    rng = random.Random(0)
    shards = [bytes(rng.getrandbits(8) for _ in range(size)) for _ in range(3)]
    for i, data in enumerate(shards):
        (corpus / f"x{i}.txt").write_bytes(data)
    (held / "h0.txt").write_bytes(bytes(reversed(shards[0])))  # another start
    (held / "h1.txt").write_bytes(bytes(reversed(shards[1])))
    late = bytearray(shards[2])
    late[-1] ^= 1  # x2's start, another last byte
    (held / "late.txt").write_bytes(bytes(late))
    calls, real = [], trainer.file_sha256
    monkeypatch.setattr(trainer, "file_sha256", lambda f, limit=None: (calls.append((f.name, limit)), real(f, limit))[1])
    read = lambda: sum(size if limit is None else min(size, limit) for _, limit in calls)  # noqa: E731
    trainer._warn_heldout_in_training(str(held), str(corpus))
    head = trainer.HEAD_BYTES
    assert sorted(calls, key=repr) == sorted([(n, head) for n in ("h0.txt", "h1.txt", "late.txt", "x0.txt", "x1.txt", "x2.txt")]
                                             + [("late.txt", None), ("x2.txt", None)], key=repr)
    assert read() == 6 * head + 2 * size
    calls.clear()
    (held / "late.txt").write_bytes(shards[2])
    with pytest.warns(RuntimeWarning, match="is training text too") as got:
        trainer._warn_heldout_in_training(str(held), str(corpus))
    assert f"{held / 'late.txt'}, a copy of {corpus / 'x2.txt'})" in str(got[0].message)
    assert read() == 6 * head + 2 * size


def test_file_sha256_limit_hashes_the_first_bytes(tmp_path):
    """file_sha256(path, limit): the sha256 of the first ``limit`` bytes, also across a chunk boundary and for a
    file shorter than ``limit``."""
    import hashlib

    from spacy_elmo.paths import HASH_CHUNK, file_sha256

    data = bytes(range(256)) * (HASH_CHUNK // 256 + 3)
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    for limit in (0, 1, 1000, HASH_CHUNK, HASH_CHUNK + 7, len(data) + 5):
        assert file_sha256(path, limit) == hashlib.sha256(data[:limit]).hexdigest()


def test_an_earlier_runs_output_dir_inside_a_corpus_directory_is_skipped_with_one_warning(tmp_path):
    """repro_nested_run.sh: ``pretrain corpus/a.txt corpus/run1`` then ``pretrain corpus/ out2`` read run1's
    config.json, vocab.txt and train_log.jsonl as text (vocabulary 46 -> 207, with ", :, { as words). Every
    directory spacy-elmo writes is skipped, named in one warning: a run, a model, a corpus cache, embed's parts."""
    import warnings

    from spacy_elmo import BiLM
    from spacy_elmo.bilm.native_io import find_allennlp_files
    from spacy_elmo.training.data import list_text_files

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    a = write_corpus(corpus / "a.txt", 60)
    alone = train(tiny_train_config(a, tmp_path / "alone", max_steps=2, checkpoint_every=2))
    train(tiny_train_config(a, corpus / "run1", max_steps=2, checkpoint_every=2))
    BiLM.load(corpus / "run1").save(corpus / "model")  # a model alone
    with warnings.catch_warnings():  # TINY's token width, which AllenNLP would not run
        warnings.simplefilter("ignore")
        BiLM.load(corpus / "run1").to_allennlp(corpus / "export" / "options.json", corpus / "export" / "weights.hdf5")
    assert find_allennlp_files(corpus / "export") is not None
    (corpus / "v.h5.parts").mkdir()
    (corpus / "v.h5.parts" / "manifest.json").write_text('{"version": 1}')
    (corpus / "sub").mkdir()  # a plain subdirectory of text stays corpus, its config.json too
    b = write_corpus(corpus / "sub" / "b.txt", 10, seed=1)
    (corpus / "sub" / "config.json").write_text('{"format": "mine"}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = list_text_files(corpus)
    assert files == [a, b, corpus / "sub" / "config.json"]
    said = [str(w.message) for w in caught if "holding a model or spacy-elmo's output" in str(w.message)]
    assert len(said) == 1 and "skipped 4 directories under" in said[0]
    for name in ("export", "model", "run1"):
        assert str(corpus / name) in said[0]
    shutil.rmtree(corpus / "sub")
    with pytest.warns(RuntimeWarning, match=r"skipped 4 directories under .*holding a model or spacy-elmo's output"):
        nested = train(tiny_train_config(corpus, tmp_path / "out2", max_steps=2, checkpoint_every=2))
    assert nested["vocab_size"] == alone["vocab_size"] and nested["corpus"]["n_files"] == 1
    vocab = (tmp_path / "out2" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert not {'"', ":", "{", "}"} & set(vocab)
    for name in ("export", "model", "v.h5.parts"):  # one left: "1 directory", not "1 director(y/ies)"
        shutil.rmtree(corpus / name)
    with pytest.warns(RuntimeWarning, match=r"skipped 1 directory under .*holding a model"):
        assert list_text_files(corpus) == [a]


def test_the_skipped_outputs_and_a_users_data_entries_are_listed_with_odd_names_quoted(tmp_path):
    """W_TRAIN_PATH_OUTPUTS_SKIPPED and E_CACHE_DIR_HOLDS joined the names with ", " as they were: a name with a
    comma read as two entries, one with a newline broke the line; and the rest was an unsaid "..." (or dropped).
    Each name is shown as the other listings show it (paths.name_shown), the rest counted ("and N more")."""
    import warnings

    from spacy_elmo.training.data import CACHE_DIR, list_text_files
    from spacy_elmo.training.trainer import _check_output_place

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = write_corpus(corpus / "t.txt", 10)
    for name in ("a, b.h5.parts", "new\nline.h5.parts", "c.h5.parts", "d.h5.parts"):  # embed's parts directories
        (corpus / name).mkdir()
        (corpus / name / "manifest.json").write_text('{"version": 1}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list_text_files(corpus) == [text]
    said = [str(w.message) for w in caught if "holding a model or spacy-elmo's output" in str(w.message)]
    assert len(said) == 1
    assert f"{str(corpus / 'a, b.h5.parts')!r}, {str(corpus / 'c.h5.parts')}, {str(corpus / 'd.h5.parts')} " \
           "and 1 more." in said[0]
    assert "\n" not in said[0]
    out = tmp_path / "out"
    (out / CACHE_DIR).mkdir(parents=True)
    for name in ("notes, v2.txt", "x\ny", "1", "2", "3", "4"):
        (out / CACHE_DIR / name).write_text("mine\n")
    with pytest.raises(ValueError) as caught_error:
        _check_output_place(out, text)
    assert "it holds 6 entries of another kind (1, 2, 3, 4, 'notes, v2.txt' and 1 more)." in str(caught_error.value)
    assert "\n" not in str(caught_error.value)


def test_a_run_or_model_directory_given_as_the_text_is_refused(tmp_path):
    """The subdirectories of a corpus that spacy-elmo wrote are skipped, but a run or model directory given as
    TRAIN_PATH itself (``pretrain out/ out2/`` for ``pretrain corpus.txt out2/``) was read whole: its config.json,
    vocab.txt and log as corpus text."""
    from spacy_elmo import BiLM
    from spacy_elmo.training.data import list_text_files

    run = tmp_path / "run"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 60), run, max_steps=2, checkpoint_every=2))
    BiLM.load(run).save(tmp_path / "model")
    for given in (run, tmp_path / "model"):
        with pytest.raises(ValueError, match=r"holds a model or spacy-elmo's output .*Pass the text file"):
            list_text_files(given)
    with pytest.raises(ValueError, match=r"holds a model or spacy-elmo's output"):
        train(tiny_train_config(run, tmp_path / "out2", max_steps=2))
    assert not (tmp_path / "out2").exists()


def test_a_users_data_meta_json_or_checkpoint_pt_marks_no_output(tmp_path):
    """A directory counted as spacy-elmo's output by its file names alone: a dataset's own ``data/meta.json`` or
    another tool's ``checkpoint.pt`` refused the text beside them (given as the text) or skipped it (a
    subdirectory). A corpus cache's meta.json holds its fingerprint, a run's checkpoint lies beside its log."""
    import warnings

    from spacy_elmo.training.data import is_spacy_elmo_output, list_text_files

    wiki = tmp_path / "corpus" / "wiki"
    (wiki / "data").mkdir(parents=True)
    (wiki / "data" / "meta.json").write_text('{"source": "wikipedia"}')
    part = write_corpus(wiki / "data" / "part-000.txt", 5)
    notes = tmp_path / "corpus" / "notes"
    notes.mkdir()
    (notes / "checkpoint.pt").write_bytes(b"\x80\x02}q\x00.")
    text = write_corpus(notes / "text.txt", 5, seed=1)
    assert not is_spacy_elmo_output(wiki) and not is_spacy_elmo_output(notes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the binary checkpoint.pt is skipped as such
        assert text in list_text_files(notes) and part in list_text_files(wiki)
        assert {part, text} <= set(list_text_files(tmp_path / "corpus"))
    run = tmp_path / "run"
    train(tiny_train_config(write_corpus(tmp_path / "a.txt", 60), run, max_steps=2, checkpoint_every=2))
    assert is_spacy_elmo_output(run)
    shutil.rmtree(run / "data")  # the checkpoint beside the log still marks it
    assert is_spacy_elmo_output(run)


def test_file_sha256_streams_a_file_larger_than_its_chunk(tmp_path):
    """file_sha256 reads in HASH_CHUNK pieces: the digest of the whole bytes (hashlib's, at once), also across
    a chunk boundary; one byte changed past the first chunk changes it."""
    import hashlib

    from spacy_elmo.paths import HASH_CHUNK, file_sha256

    data = bytes(range(256)) * (HASH_CHUNK // 256 * 2 + 3)  # two chunks and a part
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[: HASH_CHUNK + 5] + b"x" + data[HASH_CHUNK + 6 :])
    assert file_sha256(path) != hashlib.sha256(data).hexdigest()


def test_a_tilde_naming_no_home_directory_is_a_plain_path(tmp_path, monkeypatch):
    """``~`` and ``~/x`` are a shell's to expand: an input naming nothing says so, an output is refused. A ``~user``
    naming no user (``~nosuchuser``) expands to nothing, so it is a plain relative path: the plain error of a missing
    input, and an output accepted, as ``./~/x`` (a directory ``~`` named on purpose) is."""
    from spacy_elmo.paths import check_output_path, missing_path_error, unexpanded_home

    monkeypatch.setenv("HOME", str(tmp_path))
    assert unexpanded_home("~/x") == str(tmp_path / "x") and unexpanded_home("~") == str(tmp_path)
    with pytest.raises(ValueError, match="starts with a ~ that no shell expanded"):
        check_output_path("~/out")
    nobody = "~spacy-elmo-no-such-user/x"
    assert os.path.expanduser(nobody) == nobody  # no such user here
    for plain in (nobody, "./~/x", "a/~/x"):
        assert unexpanded_home(plain) is None
        check_output_path(plain)  # no error
        assert str(missing_path_error(plain, "plain message")) == "plain message"


def test_a_missing_path_that_is_a_link_is_said_to_be_one(tmp_path):
    """An input path that is a dangling symbolic link (an annex file not fetched) said "does not exist. Check the
    path", naming no link; one in a loop of links the same: now E_BROKEN_LINK (where it points) and E_LINK_LOOP."""
    from spacy_elmo.paths import missing_path_error

    dangling, loop = tmp_path / "options.json", tmp_path / "loop.json"
    dangling.symlink_to(tmp_path / "gone.json")
    loop.symlink_to(loop)
    said = str(missing_path_error(dangling, "plain message"))
    assert said.startswith(f"{dangling} is a broken symbolic link: it points to {tmp_path / 'gone.json'}"), said
    said = str(missing_path_error(loop, "plain message"))
    assert said.startswith(f"{loop} is a symbolic link past too many levels of symbolic links"), said
    assert str(missing_path_error(tmp_path / "none.json", "plain message")) == "plain message"


def test_file_identity_falls_back_to_the_real_path_where_inodes_are_zero(tmp_path, monkeypatch):
    """A file system reporting st_ino 0 (it identifies a file only if non-zero): every file had the identity
    (st_dev, 0), and list_text_files kept the first of a directory's files alone."""
    from spacy_elmo import paths
    from spacy_elmo.training.data import list_text_files

    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name + "\n", encoding="utf-8")
    (tmp_path / "d.txt").symlink_to(tmp_path / "a.txt")  # one file by its real path still
    stat = os.stat

    class ZeroInode:
        def __init__(self, st):
            self.st, self.st_ino = st, 0

        def __getattr__(self, name):
            return getattr(self.st, name)

    monkeypatch.setattr(paths.os, "stat", lambda p, *a, **k: ZeroInode(stat(p, *a, **k)))
    assert list_text_files(tmp_path) == [tmp_path / f"{name}.txt" for name in "abc"]
    assert paths.file_identity(tmp_path / "d.txt") == paths.file_identity(tmp_path / "a.txt")
