"""Corpus normalisation, extraction, deduplication and the held-out split (no network)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import fetch  # noqa: E402
from benchmarks.corpus import (  # noqa: E402
    Deduplicator,
    austen_chapters,
    brown_lines,
    build_corpus,
    detokenize,
    heldout_documents,
    keep_line,
    nlp_corpus_lines,
    normalize_line,
    paragraphs,
    wiki_pages,
)


def test_normalize_line():
    # NFD e + combining acute -> NFC; NBSP, tabs, zero-width space and control chars go
    assert normalize_line("  Cafe\u0301\u00a0au\tlait\u200b!\x07 \n") == "Caf\u00e9 au lait!"
    assert normalize_line("a&nbsp;b &amp; c") == "a b & c"
    assert normalize_line(" \t ") == ""
    assert keep_line("Hello.") and not keep_line("") and not keep_line("-- 42 --")


def test_paragraphs_join_wrapped_lines():
    assert paragraphs("One\ntwo.\n\n\nThree\n") == ["One two.", "Three"]


def test_brown_tags_stripped_and_readable():
    raw = ("\n\n\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ,/, and/cc 3/4/cd left/vbd ./.\n\n"
           "\tIt/pps was/bedz wrong/jj ;/. ;/.\n\n\tit's/pps+bez fine/jj (/( really/rb )/) ./.\n")
    assert brown_lines(raw) == [
        'The jury said "no", and 3/4 left.',
        "It was wrong; it's fine (really).",
    ]
    assert detokenize(["He", "said", "``", "Hi", "''", "."]) == 'He said "Hi".'


def test_nlp_corpus_and_austen():
    assert nlp_corpus_lines(json.dumps(["A b.", 3, "C d."])) == ["A b.", "C d."]
    with pytest.raises(ValueError):
        nlp_corpus_lines("{}")
    lines = ["EMMA", "", "CHAPTER I", "", "Emma _was_ rich", "and clever.", "", "CHAPTER II", "", "More."]
    chapters = austen_chapters("emma", lines)
    assert [c[0] for c in chapters] == ["emma/000", "emma/001", "emma/002"]
    assert chapters[1][1] == ["CHAPTER I", "Emma was rich and clever."]


def test_wiki_pages_and_markup():
    pytest.importorskip("mwparserfromhell")
    from benchmarks.corpus import wiki_lines

    xml = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
      <page><title>A</title><ns>0</ns><revision><text>'''A''' is a [[letter|letter]] of the [[alphabet]] used in many languages.&lt;ref&gt;{{cite web|url=x}}&lt;/ref&gt; {{Infobox|x=y}}

== History ==
It was [[File:a.png|thumb|pic]] adopted from the Greek alphabet long ago.

[[Category:Letters]]</text></revision></page>
      <page><title>R</title><ns>0</ns><redirect title="A"/><revision><text>#REDIRECT [[A]]</text></revision></page>
      <page><title>Talk:A</title><ns>1</ns><revision><text>chat</text></revision></page>
    </mediawiki>"""
    pages = list(wiki_pages(io.BytesIO(xml)))
    assert [t for t, _ in pages] == ["A"]
    lines = wiki_lines(pages[0][1])
    assert lines == ["A is a letter of the alphabet used in many languages.",
                     "It was adopted from the Greek alphabet long ago."]


def test_deduplicator():
    d = Deduplicator()
    assert d.check("The cat sat on the mat today. It was warm outside.") is None
    assert d.check("The cat sat on the mat today. It was warm outside.") == "line"
    assert d.check("The cat sat on the mat today.") == "sentence"  # inside an earlier line
    assert d.check("Thank you.") is None and d.check("Thank you.") == "line"
    assert d.check("A new line here.") is None


def test_heldout_documents_seeded():
    ids = [f"d{i}" for i in range(200)]
    a = heldout_documents(ids, 0.05, seed=0)
    assert len(a) == 10 and a == heldout_documents(list(reversed(ids)), 0.05, seed=0)
    assert a != heldout_documents(ids, 0.05, seed=1)
    assert len(heldout_documents(ids[:3], 0.01, seed=0)) == 1  # at least one per source
    assert heldout_documents(ids, 0.0, seed=0) == set()
    assert heldout_documents(["only"], 0.5, seed=0) == set()  # never the whole source


def test_build_corpus_counts_dedup_and_split():
    docs_a = [(f"a{i}", [f"Paragraph {i} of source a.", "", "Shared line.", "  Shared\u00a0line. "])
              for i in range(10)]
    docs_b = [("b0", ["Shared line.", "Only in b, really."]), ("b1", ["Only in b too."])]
    train, held = io.StringIO(), io.StringIO()
    stats = build_corpus([("a", iter(docs_a)), ("b", iter(docs_b))], train, held,
                         heldout_fraction=0.2, seed=0)
    out = train.getvalue().splitlines() + held.getvalue().splitlines()
    assert len(out) == len(set(out)) and "" not in out
    assert out.count("Shared line.") == 1
    a, b = stats["a"], stats["b"]
    assert a.documents == 10 and a.heldout["documents"] == 2 and b.heldout["documents"] == 1
    assert a.lines_before_dedup == 30 and a.lines_after_dedup == 11
    assert a.lines_dropped_duplicate_line == 19
    assert b.lines_after_dedup == 2 and b.words_before_dedup == 2 + 4 + 4
    assert a.train["lines"] + a.heldout["lines"] == a.lines_after_dedup
    assert sum(len(x.split()) for x in out) == a.words_after_dedup + b.words_after_dedup
    # same input, same seed -> same output
    train2, held2 = io.StringIO(), io.StringIO()
    build_corpus([("a", iter(docs_a)), ("b", iter(docs_b))], train2, held2, heldout_fraction=0.2, seed=0)
    assert (train2.getvalue(), held2.getvalue()) == (train.getvalue(), held.getvalue())


def test_fetch_cache_dir_and_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    assert fetch.cache_dir() == tmp_path / "cache" and (tmp_path / "cache").is_dir()
    with pytest.raises(FileNotFoundError, match="fetch the package again"):
        fetch.fetch_record(tmp_path)


def test_fetch_is_idempotent_and_atomic(tmp_path, monkeypatch):
    """The shared fetch skeleton with a fake download: unpacks once, records, then reuses."""
    import tarfile

    calls = []

    def download(tmp):
        calls.append(tmp)
        src = tmp / "src" / "package"
        src.mkdir(parents=True)
        (src / "data.txt").write_text("hello")
        archive = tmp / "pkg-1.0.tgz"
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(src, arcname="package")
        return archive, "1.0", ["fake", "pack"], lambda a, d: fetch._unpack(a, d, "fake")

    root = fetch._fetch("npm", "@scope/pkg", "1.0", download, tmp_path)
    assert root == tmp_path / "npm" / "scope__pkg-1.0"
    assert (root / "data.txt").read_text() == "hello"  # npm's package/ prefix stripped
    rec = fetch.fetch_record(root)
    assert rec["version"] == "1.0" and rec["command"] == "fake pack" and len(rec["sha256"]) == 64
    assert fetch._fetch("npm", "@scope/pkg", "1.0", download, tmp_path) == root
    assert len(calls) == 1  # second call reused the cache
    assert [p.name for p in (tmp_path / "npm").iterdir()] == ["scope__pkg-1.0"]  # no temp left

    def failing(tmp):
        fetch._run(["false"], "npm package broken@0")

    with pytest.raises(fetch.FetchError, match="broken@0.*`false` exited"):
        fetch._fetch("npm", "broken", "0", failing, tmp_path)
    assert [p.name for p in (tmp_path / "npm").iterdir()] == ["scope__pkg-1.0"]
