"""Reading TRAIN_PATH into the corpus cache: directories that cannot be read, links, NUL bytes and carriage
returns inside the text, long lines without spaces, and a cache whose files were cut short."""

import errno
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from spacy_elmo.training import data
from spacy_elmo.training.data import (BINARY_PROBE, PIECE_CHARS, Corpus, ReadStats, build_corpus, iter_text,
                                      list_text_files, split_long)


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "locked").mkdir(parents=True)
    (corpus / "ok").mkdir()
    (corpus / "c.txt").write_text("top words .\n", encoding="utf-8")
    (corpus / "locked" / "b.txt").write_text("hidden away .\n", encoding="utf-8")
    (corpus / "ok" / "a.txt").write_text("fine words .\n", encoding="utf-8")
    return corpus


def _denied(path) -> OSError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))


def _refuse_listing(monkeypatch, directory) -> None:
    """``os.scandir`` of ``directory`` fails as without read permission (tests run as root, which has it)."""
    scandir = os.scandir

    def refusing(path="."):
        if os.fspath(path) == os.fspath(directory):
            raise _denied(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)


def test_a_directory_that_cannot_be_listed_is_an_error_naming_it(tmp_path, monkeypatch):
    """os.walk without onerror skipped a subdirectory it could not list (no read permission): its text was
    silently left out of the corpus."""
    corpus = _corpus(tmp_path)
    locked = corpus / "locked"
    _refuse_listing(monkeypatch, locked)
    with pytest.raises(ValueError, match=f"cannot read the directory {locked} under {corpus} "
                                         r"\(Permission denied\).*Fix its permissions.*, move it out of"):
        list_text_files(corpus)


def test_a_directory_that_cannot_be_entered_is_an_error_naming_it(tmp_path, monkeypatch):
    """A subdirectory without execute permission: looking for a model's files in it raised PermissionError
    naming a checkpoint.pt that does not exist."""
    corpus = _corpus(tmp_path)
    locked = corpus / "locked"
    stat = os.stat

    def refusing(path, *args, **kwargs):
        if Path(os.fspath(path)).parent == locked:
            raise _denied(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refusing)
    with pytest.raises(ValueError, match=f"cannot read the directory {locked} under {corpus}") as err:
        list_text_files(corpus)
    assert "checkpoint.pt" not in str(err.value)


@pytest.mark.parametrize("mode", [0o300, 0o600])  # not listable; not enterable
def test_a_directory_without_permissions_is_an_error(tmp_path, mode):
    """The same with real permissions, where they are enforced (not for root)."""
    corpus = _corpus(tmp_path)
    locked = corpus / "locked"
    locked.chmod(mode)
    try:
        if os.access(locked, os.R_OK | os.X_OK):
            pytest.skip("permissions are not enforced for this user (root)")
        with pytest.raises(ValueError, match=f"cannot read the directory {locked}"):
            list_text_files(corpus)
    finally:
        locked.chmod(0o755)


def test_the_output_check_skips_an_unreadable_directory_inside_an_earlier_run(tmp_path, monkeypatch):
    """The OUTPUT_DIR check walks every directory of TRAIN_PATH, earlier runs' too, which the reader skips: one
    it could not read there raised E_TRAIN_DIR_UNREADABLE, "its files would be left out", for files never read."""
    from spacy_elmo.training.trainer import _check_output_place

    corpus = tmp_path / "corpus"
    (corpus / "oldrun" / "locked").mkdir(parents=True)
    (corpus / "t.txt").write_text("some words .\n", encoding="utf-8")
    (corpus / "oldrun" / "checkpoint.pt").write_bytes(b"x")
    (corpus / "oldrun" / "train_log.jsonl").write_text("{}\n", encoding="utf-8")
    locked = corpus / "oldrun" / "locked"
    _refuse_listing(monkeypatch, locked)
    with pytest.warns(RuntimeWarning, match="skipped 1 directory"):
        assert list_text_files(corpus) == [corpus / "t.txt"]
    _check_output_place(tmp_path / "out", corpus)
    with pytest.raises(ValueError, match="cannot read the directory"):  # where the reader goes, still an error
        list(data.walk_text_dirs(corpus))


def test_an_unreadable_train_path_is_named_as_train_path(tmp_path, monkeypatch):
    """TRAIN_PATH itself unreadable read "cannot read the directory D under D ... move it out of D"."""
    corpus = _corpus(tmp_path)
    _refuse_listing(monkeypatch, corpus)
    with pytest.raises(ValueError, match=f"cannot read the directory {corpus} \\(Permission denied\\): it is "
                                         "TRAIN_PATH") as err:
        list_text_files(corpus)
    assert "under" not in str(err.value) and "move it out" not in str(err.value)


def test_an_unreadable_lost_and_found_is_an_error_advising_a_subdirectory(tmp_path, monkeypatch):
    """A file system's lost+found only root can read: neither chmod nor mv is open to the user, so the error
    advises passing a subdirectory as TRAIN_PATH (it is not skipped: it may hold recovered text)."""
    corpus = _corpus(tmp_path)
    lost = corpus / "lost+found"
    lost.mkdir()
    _refuse_listing(monkeypatch, lost)
    with pytest.raises(ValueError, match=re.escape(f"cannot read the directory {lost} under {corpus}") + ".*"
                                         + re.escape(f"or pass a subdirectory of {corpus} that holds the text as TRAIN_PATH")):
        list_text_files(corpus)


def test_a_loop_of_links_is_named_a_loop(tmp_path):
    """x -> y -> x was described as "points to y, which does not exist": y exists, a link back to x."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello .\n", encoding="utf-8")
    (corpus / "x").symlink_to("y")
    (corpus / "y").symlink_to("x")
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{corpus / 'x'} is a symbolic link past too many levels of symbolic links (a loop of links, or a chain "
            "longer than the system follows): it points to y (ls -l it")) as err:
        list_text_files(corpus)
    assert "does not exist" not in str(err.value)


def test_a_chain_of_links_too_long_is_not_named_a_loop(tmp_path):
    """ELOOP comes too from a chain of more links than the system follows (40 on Linux), no loop: it was said to be
    "in a loop of links ... which leads back to it" (diffrev3)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello .\n", encoding="utf-8")
    (corpus / "a0").symlink_to("a.txt")
    for i in range(1, 50):
        (corpus / f"a{i}").symlink_to(f"a{i - 1}")
    with pytest.raises(FileNotFoundError, match=re.escape(
            "too many levels of symbolic links (a loop of links, or a chain longer than the system follows)")) as err:
        list_text_files(corpus)
    assert "leads back to it" not in str(err.value) and "does not exist" not in str(err.value)


def test_a_hard_link_is_read_once(tmp_path):
    """Files were de-duplicated by real path: two hard links of one file (its real paths differ) were read twice."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one text .\n", encoding="utf-8")
    os.link(corpus / "a.txt", corpus / "b.txt")
    assert list_text_files(corpus) == [corpus / "a.txt"]


def test_a_broken_link_is_an_error_saying_where_it_points(tmp_path):
    """A broken symbolic link gave a bare "[Errno 2] No such file or directory" naming the link."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello .\n", encoding="utf-8")
    target = tmp_path / "gone" / "x.txt"
    (corpus / "broken.txt").symlink_to(target)
    for path in (corpus, corpus / "broken.txt"):
        with pytest.raises(FileNotFoundError, match=f"{corpus / 'broken.txt'} is a broken symbolic link: it points to {target}"):
            list_text_files(path)
    (corpus / ".hidden.txt").symlink_to(target)  # hidden: no text, no error
    (corpus / "broken.txt").unlink()
    assert list_text_files(corpus) == [corpus / "a.txt"]


def _read(path: Path) -> tuple:
    stats = ReadStats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pieces = list(iter_text(path, stats))
    return pieces, stats, [str(w.message) for w in caught]


def test_nul_bytes_after_the_probe_are_counted_and_warned_of_once(tmp_path):
    """Only the first BINARY_PROBE bytes are looked at for NUL bytes: binary data or UTF-16 text appended after
    them was trained on without a word."""
    path = tmp_path / "log.txt"
    head = b"some real text here .\n" * (BINARY_PROBE // 22 + 10)
    path.write_bytes(head + b"\x00" * 300 + b"\n" + b"tail\x00x y\x00\x00z .\n")
    pieces, stats, said = _read(path)
    nul = [m for m in said if "NUL" in m]
    line = head.count(b"\n") + 1
    assert len(nul) == 1 and f"{path} holds 303 NUL bytes (first on line {line:,}) after the first {BINARY_PROBE:,}" in nul[0]
    assert "UTF-16" in nul[0] and "tr -d" in nul[0]
    assert "from the uncompressed text" in nul[0] and "zcat FILE.gz | tr -d" in nul[0]  # tr on a .gz corrupts it
    assert stats.nul_chars == 303 and pieces[-1] == "tail\x00x y\x00\x00z ."  # kept, as the pipeline reads it
    (tmp_path / "clean.txt").write_bytes(head)
    _, stats, said = _read(tmp_path / "clean.txt")
    assert stats.nul_chars == 0 and not any("NUL" in m for m in said)


def test_carriage_returns_inside_lines_are_warned_of_once_per_file(tmp_path):
    """A file whose lines end in \\r alone (classic Mac OS) was read as one line without a word."""
    mac, dos = tmp_path / "mac.txt", tmp_path / "dos.txt"
    mac.write_bytes(b"first line\rsecond line\rthird\r\nfourth\rfifth\n")
    dos.write_bytes(b"first line\r\nsecond line\r\n")
    pieces, _, said = _read(mac)
    cr = [m for m in said if "carriage return" in m]
    assert pieces == ["first line\rsecond line\rthird", "fourth\rfifth"]  # lines end at \n only, as embed reads them
    assert len(cr) == 1 and f"{mac} has 2 lines holding a carriage return" in cr[0] and "first: line 1)" in cr[0]
    assert "tr '\\r' '\\n'" in cr[0]
    assert "Convert the uncompressed text" in cr[0] and "zcat FILE.gz | tr" in cr[0]
    pieces, _, said = _read(dos)
    assert pieces == ["first line", "second line"] and not any("carriage return" in m for m in said)


@pytest.mark.parametrize("space", ["\r", "\u00a0", "\u3000", "\u2009", "\n"])
def test_a_long_line_is_cut_at_any_whitespace(space):
    """split_long cut at " " and "\\t" only: text separated by other whitespace was cut inside a word."""
    line = space.join(["abcd"] * 10)
    assert split_long(line, limit=12) == ["abcd" + space + "abcd", *[space + "abcd" + space + "abcd"] * 4]
    assert split_long("ab" + space + "cd" + space + "efgh", limit=8) == ["ab" + space + "cd", space + "efgh"]  # the last


def test_a_long_line_is_cut_at_the_last_whitespace_of_each_window():
    """split_long against the rule it keeps (the last space or tab, else the last str.isspace character, past the
    piece's first): random lines of words, other whitespace at window starts and ends, and none at all."""
    import random

    def reference(line, limit):
        pieces, start = [], 0
        while len(line) - start > limit:
            end = start + limit
            cut = max(line.rfind(" ", start, end), line.rfind("\t", start, end))
            if cut <= start:
                cut = max((i for i in range(start + 1, end) if line[i].isspace()), default=end)
            pieces.append(line[start:cut])
            start = cut
        return pieces + [line[start:]]

    rng = random.Random(7)
    alphabet = ["x", "y", "\u00a0", "\u3000", "\r", "\x1c"]
    for _ in range(2000):
        line = "".join(rng.choice(alphabet) if rng.random() < 0.3 else "a" for _ in range(rng.randrange(40)))
        limit = rng.randrange(1, 12)
        assert split_long(line, limit) == reference(line, limit), (line, limit)
    assert split_long("\u00a0\u00a0" + "x" * 8, limit=6) == ["\u00a0", "\u00a0xxxxx", "xxx"]
    assert split_long("x" * 5 + "\u00a0" + "x" * 5, limit=6) == ["xxxxx", "\u00a0xxxxx"]


def test_a_long_line_of_other_whitespace_is_read_whole_words(tmp_path):
    words = ["alpha", "bravo", "charlie", "delta"]
    path = tmp_path / "nbsp.txt"
    path.write_text("\u00a0".join(words[i % 4] for i in range(PIECE_CHARS // 3)) + "\n", encoding="utf-8")
    pieces, stats, _ = _read(path)
    assert stats.long_lines == 1 and len(pieces) > 1
    assert set(w for piece in pieces for w in piece.split("\u00a0") if w) == set(words)


def _built(tmp_path: Path, text: str = "alpha beta gamma .\ndelta beta .\n" * 50) -> tuple:
    """A corpus of ``text`` and its cache built: (corpus, cache, meta)."""
    corpus = tmp_path / "a.txt"
    corpus.write_text(text, encoding="utf-8")
    cache = tmp_path / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        meta = build_corpus(corpus, "en", cache, progress=False)
    return corpus, cache, meta


@pytest.mark.parametrize("name", ["tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt"])
def test_a_cache_file_cut_short_is_an_error_and_is_rebuilt(tmp_path, name):
    """A truncated tokens.i32 read as a corpus of 0 tokens, a truncated sent_lengths.i64 or counts.i64 as a numpy
    broadcast error later: meta.json's counts are checked; build_corpus tokenizes such a cache anew."""
    corpus, cache, meta = _built(tmp_path)
    whole = Corpus.load(cache)
    file = cache / name
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"the corpus cache in {cache} is damaged: {name} holds .*Delete {cache}"):
        Corpus.load(cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_corpus(corpus, "en", cache, progress=False)
    again = Corpus.load(cache)  # rebuilt: types.txt too, by its size (only Corpus.load counted its lines)
    assert again.digest() == whole.digest()


def test_types_cut_inside_a_character_is_a_damaged_cache_and_is_rebuilt(tmp_path):
    """types.txt cut inside a multibyte character raised a bare UnicodeDecodeError, and build_corpus reused it."""
    corpus, cache, meta = _built(tmp_path, "Grüße aus Köln . Ελληνικά κείμενο εδώ .\n" * 20)
    whole = Corpus.load(cache)
    types = cache / "types.txt"
    text = types.read_bytes()
    types.write_bytes(text[: text.index("ü".encode()) + 1])
    with pytest.raises(ValueError, match=f"the corpus cache in {cache} is damaged: types.txt holds .* bytes, its "
                                         f"meta.json says {len(text):,}"):
        Corpus.load(cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_corpus(corpus, "en", cache, progress=False)
    assert Corpus.load(cache).digest() == whole.digest()


def test_types_undecodable_in_an_older_cache_is_a_damaged_cache(tmp_path):
    """A cache of an older spacy-elmo records no size of types.txt: it still loads, and a types.txt cut inside a
    character is E_CACHE_TYPES_UNDECODABLE, no bare UnicodeDecodeError."""
    import json

    _, cache, meta = _built(tmp_path, "Grüße aus Köln . Ελληνικά κείμενο εδώ .\n" * 20)
    del meta["types_bytes"]
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    whole = Corpus.load(cache)
    types = cache / "types.txt"
    text = types.read_bytes()
    types.write_bytes(text.replace("ü".encode(), "ü".encode()[:1], 1))  # one line no UTF-8, their count kept
    with pytest.raises(ValueError, match=f"the corpus cache in {cache} is damaged: its types.txt is no UTF-8"):
        Corpus.load(cache)
    types.write_bytes(text)
    assert Corpus.load(cache).digest() == whole.digest()


def test_types_cut_at_a_line_in_an_older_cache_is_a_damaged_cache(tmp_path):
    """A cache of an older spacy-elmo records no size of types.txt: one cut after a whole line decodes, and its
    lines are counted against meta.json's n_types."""
    import json

    _, cache, meta = _built(tmp_path)
    del meta["types_bytes"]
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    types = cache / "types.txt"
    lines = types.read_bytes().splitlines(keepends=True)
    types.write_bytes(b"".join(lines[:-2]))
    with pytest.raises(ValueError, match=f"the corpus cache in {cache} is damaged: types.txt holds {len(lines) - 2} "
                                         f"types, its meta.json says {len(lines)} "):
        Corpus.load(cache)


def test_corpus_load_reads_meta_json_once(tmp_path, monkeypatch):
    """Corpus.load checked the files' sizes and then types.txt's lines each against meta.json read anew: read twice,
    where it holds a digest per file of the corpus (0.9 MB for 5,000 files, 4 ms a read). Read once now."""
    _, cache, _ = _built(tmp_path)
    whole = Corpus.load(cache)
    reads = []
    read_meta = data._read_meta
    monkeypatch.setattr(data, "_read_meta", lambda path: (reads.append(path), read_meta(path))[1])
    assert Corpus.load(cache).digest() == whole.digest()
    assert len(reads) == 1, reads


def test_a_reused_cache_reads_meta_json_once(tmp_path, monkeypatch):
    """cache_is_current read meta.json for the fingerprint and again for the files' sizes, and build_corpus read it a
    third time to return it: once each now (it holds a digest per file of the corpus)."""
    corpus, cache, meta = _built(tmp_path)
    stamp = data.fingerprint(corpus, "en")
    reads = []
    read_meta = data._read_meta
    monkeypatch.setattr(data, "_read_meta", lambda path: (reads.append(path), read_meta(path))[1])
    assert data.cache_is_current(cache, stamp)
    assert len(reads) == 1, reads
    reads.clear()
    assert build_corpus(corpus, "en", cache, progress=False) == meta
    assert len(reads) == 1, reads


def test_types_with_crlf_line_ends_in_an_older_cache_load_without_the_cr(tmp_path):
    """An older spacy-elmo wrote types.txt with write_text: CRLF line ends on Windows, and no types_bytes in
    meta.json to catch them; each type read back ended in "\\r" (no type holds one)."""
    import json

    _, cache, meta = _built(tmp_path)
    del meta["types_bytes"]
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    whole = Corpus.load(cache)
    types = cache / "types.txt"
    types.write_bytes(types.read_bytes().replace(b"\n", b"\r\n"))
    crlf = Corpus.load(cache)
    assert crlf.types == whole.types and not any("\r" in t for t in crlf.types)
    assert crlf.digest() == whole.digest()


def test_a_cache_files_are_synced_before_meta_json(tmp_path, monkeypatch):
    """meta.json marks the cache complete: written before the data files reached the disk, a crash could leave a
    complete-looking cache of files cut short."""
    order = []
    monkeypatch.setattr(data, "sync", lambda path: order.append(Path(path).name))
    atomic_write_text = data.atomic_write_text
    monkeypatch.setattr(data, "atomic_write_text", lambda path, text: (order.append(Path(path).name),
                                                                        atomic_write_text(path, text)))
    _built(tmp_path)
    assert order[-1] == "meta.json"
    assert set(order[:-1]) >= {"tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt"}


def test_the_counts_of_the_warnings_are_formatted(tmp_path):
    """W_REPLACED_BYTES said "1234 undecodable byte(s) in 1 file(s)", W_LONG_LINE "a line of 100001 characters"."""
    path = tmp_path / "bad.txt"
    path.write_bytes(b"bad \xff" * 1234 + b" " + b"w " * (PIECE_CHARS // 2) + b"\n")
    with pytest.warns(RuntimeWarning) as record:
        build_corpus(path, "en", tmp_path / "cache", progress=False)
    said = [str(w.message) for w in record]
    assert any(f"1,234 undecodable bytes in 1 file ({path}) replaced by U+FFFD" in m for m in said), said
    length = 5 * 1234 + 1 + 2 * (PIECE_CHARS // 2)
    assert any(f"has a line of {length:,} characters; it is tokenized in pieces of at most {PIECE_CHARS:,}" in m
               for m in said), said


def test_a_cache_without_counts_in_its_meta_is_read(tmp_path):
    """An older cache's meta.json without a count is not checked for it."""
    import json

    _, cache, meta = _built(tmp_path)
    del meta["n_stream"]
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    tokens = cache / "tokens.i32"
    tokens.write_bytes(tokens.read_bytes()[:-4])
    assert len(Corpus.load(cache).tokens) == np.fromfile(tokens, dtype=np.int32).size


def test_a_data_meta_json_nested_past_the_recursion_limit_is_no_cache(tmp_path):
    """A directory under a corpus folder is checked for a spacy-elmo cache (its data/meta.json): one nested past
    Python's recursion limit ended pretrain's corpus scan with a RecursionError's traceback. It is no cache (a damaged
    marker), and its text is read; a cache whose meta.json is so is not checked against it either (diffrev1)."""
    from spacy_elmo.training.data import CACHE_DIR, cache_damage, is_spacy_elmo_output

    deep = "[" * 100_000 + "]" * 100_000
    corpus = tmp_path / "corpus"
    (corpus / "wiki" / CACHE_DIR).mkdir(parents=True)
    (corpus / "wiki" / CACHE_DIR / "meta.json").write_text(deep, encoding="utf-8")
    (corpus / "wiki" / "a.txt").write_text("fine words .\n", encoding="utf-8")
    assert not is_spacy_elmo_output(corpus / "wiki")
    assert set(list_text_files(corpus)) == {corpus / "wiki" / "a.txt", corpus / "wiki" / CACHE_DIR / "meta.json"}
    assert cache_damage(corpus / "wiki" / CACHE_DIR) is None


@pytest.mark.parametrize("digests", [[1, 2], "abc", {"a.txt": 3}])
def test_a_resume_over_a_cache_whose_recorded_digests_are_damaged_builds_it_anew(tmp_path, digests):
    """meta.json's text digests, read by a resume once the cache is current: an edited record (no object of
    digests) was an AttributeError's traceback (a list's .items()). The text is then not known to be the same
    (same_text False: the cache is tokenized again); a whole meta.json that is no JSON is no cache at all."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("fine words here .\n", encoding="utf-8")
    cache = tmp_path / "cache"
    build_corpus(corpus, "en", cache, progress=False)
    assert data.same_text(cache)
    meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    (cache / "meta.json").write_text(json.dumps({**meta, data.TEXT_DIGESTS: digests}), encoding="utf-8")
    assert data.cache_is_current(cache, data.fingerprint(corpus, "en")) and not data.same_text(cache)
    (cache / "meta.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert not data.same_text(cache) and data.cache_damage(cache) is None
    assert build_corpus(corpus, "en", cache, progress=False)["stats"]["n_tokens"] == 4  # built anew


def test_a_corpus_of_hidden_files_says_they_were_skipped_as_hidden(tmp_path):
    """A directory whose files are all hidden (dot-files, or in a dot-directory) said "0 file(s) read" and nothing of
    the files it skipped: the error counts them (a hidden directory as one, its contents unread) and says why."""
    from spacy_elmo.training.evaluate import read_text

    corpus = tmp_path / "corpus"
    (corpus / ".cache").mkdir(parents=True)
    (corpus / ".cache" / "a.txt").write_text("The cat sat .\n", encoding="utf-8")
    (corpus / ".b.txt").write_text("The dog ran .\n", encoding="utf-8")
    (corpus / "sub").mkdir()
    (corpus / "sub" / ".c.txt").write_text("A bird flew .\n", encoding="utf-8")
    hidden = ('0 file(s) read, 0 skipped as binary, UTF-16/32 or a format not read, 3 files or directories skipped as '
              'hidden (a file or directory whose name starts with ".", such as .git or .DS_Store, is never read; to '
              'read one, rename it without the ".")')
    with pytest.raises(ValueError) as refused:
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    assert str(refused.value) == f"No text to train on in {corpus}: {hidden}, 0 tokens. Pass UTF-8 text (one or more " \
                                 "sentences per line).", str(refused.value)
    with pytest.raises(ValueError, match=re.escape(f"({hidden}).")):  # evaluate's error (fit-state's: the same files)
        read_text(corpus)
    (corpus / ".b.txt").rename(corpus / "b.txt")
    (corpus / "b.txt").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{corpus}: 1 file(s) read, 0 skipped as binary, UTF-16/32 or a "
                                                   "format not read, 2 files or directories skipped as hidden (")):
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    (corpus / ".cache").rename(corpus / "cache")
    (corpus / "sub" / ".c.txt").unlink()
    (corpus / "cache" / "a.txt").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{corpus}: 2 file(s) read, 0 skipped as binary, UTF-16/32 or a "
                                                   "format not read, 0 tokens.")):  # none hidden: none said
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    stats = ReadStats()
    assert list(iter_text(corpus, stats)) == [] and stats.n_hidden == 0
