"""Vocabulary order, corpus reading and the bad-input cases."""

import os
import re
import warnings
from collections import Counter

import numpy as np
import pytest
import torch

from spacy_elmo.chars import BEGIN_OF_SENTENCE, batch_to_ids, marker_char_ids, word_char_ids
from spacy_elmo.training.data import PIECE_CHARS, RUN_CHARS, Corpus, build_corpus, cut_runs, split_long
from spacy_elmo.training.sentences import SentenceBatcher
from spacy_elmo.training.stream import StreamBatcher
from spacy_elmo.training.vocab import BOS, EOS, UNK, CharTable, Vocab


def test_vocab_roundtrip(tmp_path):
    vocab = Vocab.from_counts(["<S>", "</S>", "<UNK>", "c", "a", "b", "rare"], [0, 0, 0, 9, 5, 5, 1], min_count=2)
    assert vocab.size == 6  # "rare" is below min_count: a type, not a target
    assert vocab.target_ids(torch.tensor([3, 5, 6])).tolist() == [3, 5, UNK]
    vocab.save(tmp_path)
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8") == "<S>\n</S>\n<UNK>\nc\na\nb\n"
    assert Vocab.load(tmp_path).targets == vocab.targets


def test_nfc_variants_counts_words_spelled_in_two_forms():
    """Words spelled as two or more types equal in NFC: an NFD spelling beside the NFC one, two non-NFC
    spellings of one word (résumé half decomposed), U+212A KELVIN SIGN beside ASCII K; the example is the
    first such word in the types' order, its spellings in that order. No variants: (0, [])."""
    from spacy_elmo.training.vocab import nfc_variants

    types = ["<S>", "</S>", "<UNK>", "K", "na\u00efve", "re\u0301sume\u0301", "caf\u00e9", "r\u00e9sume\u0301", "cafe\u0301",
             "\u212a", "\u00fcber", "\u00c5"]
    assert nfc_variants(types) == (3, ["K", "\u212a"])
    assert nfc_variants(types[4:]) == (2, ["re\u0301sume\u0301", "r\u00e9sume\u0301"])
    assert nfc_variants(["caf\u00e9", "na\u00efve", "cafe", "\u212b"]) == (0, [])  # U+212B ANGSTROM SIGN alone: one spelling
    assert nfc_variants([]) == (0, [])


# Counts: c 3; d, b, a 2 each (first seen in that order: ties go by string, not by file order); e 1.
VOCAB_TEXT = "d c b\nc a d\nc b a e\n"


@pytest.mark.parametrize(
    "vocab_size, min_count, targets",
    [
        (0, 1, ["c", "a", "b", "d", "e"]),  # 0: no cap
        (100, 1, ["c", "a", "b", "d", "e"]),  # a cap above the corpus's types
        (8, 1, ["c", "a", "b", "d", "e"]),  # exactly the specials and every word
        (7, 1, ["c", "a", "b", "d"]),
        (6, 1, ["c", "a", "b"]),  # a cut through the tie: a and b by string, d out
        (5, 1, ["c", "a"]),
        (4, 1, ["c"]),
        (0, 2, ["c", "a", "b", "d"]),
        (0, 3, ["c"]),
        (5, 2, ["c", "a"]),  # both: the cap within the frequent words
        (100, 3, ["c"]),  # both: min-count within the cap
        (3, 1, []),  # below the CLI's bound (TrainConfig refuses 1 to 3): the specials stay targets
        (2, 1, []),
        (1, 1, []),
    ],
)
def test_vocab_from_corpus_counts(tmp_path, vocab_size, min_count, targets):
    """The targets the pretrain command would train (its --vocab-size and --min-count on a corpus
    cache), against the counts worked out by hand in VOCAB_TEXT's comment."""
    (tmp_path / "t.txt").write_text(VOCAB_TEXT, encoding="utf-8")
    build_corpus(tmp_path / "t.txt", "en", tmp_path / "cache", progress=False)
    corpus = Corpus.load(tmp_path / "cache")
    vocab = Vocab.from_counts(corpus.types, corpus.counts, vocab_size, min_count)
    assert vocab.targets == ["<S>", "</S>", "<UNK>"] + targets
    assert vocab.types == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d", "e"]  # every type stays a type


@pytest.mark.parametrize("vocab_size", [0, 4, 100])
def test_vocab_min_count_above_every_count(vocab_size):
    with pytest.raises(ValueError, match=r"No word of the corpus occurs --min-count 4 times \(the most frequent occurs 3 times\)"):
        Vocab.from_counts(["<S>", "</S>", "<UNK>", "c", "a"], [0, 0, 0, 3, 2], vocab_size, min_count=4)


def test_corpus_cache_order(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("b a c c !\nc b\n", encoding="utf-8")
    build_corpus(path, "en", tmp_path / "cache", progress=False)
    corpus = Corpus.load(tmp_path / "cache")
    assert corpus.types[:3] == ["<S>", "</S>", "<UNK>"]
    assert corpus.types[3:] == ["c", "b", "!", "a"]  # by count, ties by string
    assert corpus.counts.tolist() == [0, 0, 0, 3, 2, 1, 1]
    words = [corpus.types[i] for i in corpus.tokens]
    assert words == ["<S>", "b", "a", "c", "c", "!", "</S>", "<S>", "c", "b", "</S>"]


def test_a_sentence_of_whitespace_alone_is_no_sentence(tmp_path):
    """Spaces after a line's last sentence make spaCy's sentencizer give a sentence of one whitespace
    token; without its words it is skipped, not an empty ``<S> </S>`` (a spurious <S> -> </S> target)."""
    path = tmp_path / "t.txt"
    path.write_text("Hello there .   \nWorld .\n", encoding="utf-8")
    build_corpus(path, "en", tmp_path / "cache", progress=False)
    corpus = Corpus.load(tmp_path / "cache")
    assert corpus.lengths.tolist() == [5, 4]
    words = [corpus.types[i] for i in corpus.tokens]
    assert words == ["<S>", "Hello", "there", ".", "</S>", "<S>", "World", ".", "</S>"]


def test_char_table_markers_and_words():
    vocab = Vocab(["<S>", "</S>", "<UNK>", "밥"])
    table = CharTable(vocab, 50)
    rows = table(torch.tensor([[BOS, 3, EOS]]))
    assert rows[0, 0].tolist() == [i + 1 for i in marker_char_ids(BEGIN_OF_SENTENCE)]
    assert rows[0, 1].tolist() == [i + 1 for i in word_char_ids("밥")]
    # every row as the pipeline spells the same strings: </S> with its own marker, not <S>'s
    assert torch.equal(rows[0], batch_to_ids([["<S>", "밥", "</S>"]])[0])
    assert not torch.equal(rows[0, 0], rows[0, 2])


def test_empty_corpus_is_an_error(tmp_path):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("\n \n\t\n", encoding="utf-8")
    for name in ("empty.txt", "blank.txt"):
        with pytest.raises(ValueError, match="No text to train on"):
            build_corpus(tmp_path / name, "en", tmp_path / "cache", progress=False)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError, match="No text to train on"):
        build_corpus(tmp_path / "dir", "en", tmp_path / "cache", progress=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_corpus(tmp_path / "missing", "en", tmp_path / "cache", progress=False)


def test_binary_file(tmp_path):
    data = bytes(range(256)) * 8
    (tmp_path / "blob.bin").write_bytes(data)
    with pytest.raises(ValueError, match="binary"):
        build_corpus(tmp_path / "blob.bin", "en", tmp_path / "cache", progress=False)
    # Inside a directory: skipped with a warning, the text files still train.
    d = tmp_path / "dir"
    d.mkdir()
    (d / "blob.bin").write_bytes(data)
    (d / "text.txt").write_text("Some words here.\n", encoding="utf-8")
    with pytest.warns(RuntimeWarning, match="binary"):
        meta = build_corpus(d, "en", tmp_path / "cache2", progress=False)
    assert meta["stats"]["n_binary"] == 1 and meta["stats"]["n_tokens"] == 4


TEXT = "The cat sees a ball.\nA second line, with \u00e9 and \u4e2d.\n"


@pytest.mark.parametrize("python_codec, encoding", [
    ("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"),
    ("utf-32", "UTF-32"), ("utf-32-le", "UTF-32LE"), ("utf-32-be", "UTF-32BE"),
])
def test_utf16_and_utf32_text_is_named_not_called_binary(tmp_path, python_codec, encoding):
    """Notepad's "Unicode" and PowerShell's > write UTF-16 (with a byte order mark): it has NUL bytes, and was
    called a binary file. Its encoding is named, with the command that re-encodes it (for a BOM-less file
    the byte order: iconv reads UTF-16 without one as big-endian)."""
    path = tmp_path / "u.txt"
    path.write_bytes(TEXT.encode(python_codec))
    with pytest.raises(ValueError, match=rf"u.txt looks like {encoding} text, not UTF-8.*`iconv -f {encoding} -t UTF-8 "):
        build_corpus(path, "en", tmp_path / "cache", progress=False)
    d = tmp_path / "dir"
    d.mkdir()
    (d / "u.txt").write_bytes(TEXT.encode(python_codec))
    (d / "text.txt").write_text("Some words here.\n", encoding="utf-8")
    with pytest.warns(RuntimeWarning, match=rf"skipped .*u.txt: it looks like {encoding} text, not UTF-8"):
        meta = build_corpus(d, "en", tmp_path / "cache2", progress=False)
    assert meta["stats"]["n_binary"] == 1 and meta["stats"]["n_tokens"] == 4


@pytest.mark.parametrize("text", ["中文的句子。\n这是第二行。\n" * 30, "一个中文的句子。\n这是第二行。\n" * 30,
                                  "Ein Satz.\n" * 30 + "最后一句。\n", "Ā ok Ѐ\n" * 30,
                                  "这是一个最新开放的一年一度的会议，大家一起讨论。\n第一章\u3000开始。\n" * 30,
                                  # read in the other order U+2000 is a space too and the text as printable: the
                                  # parity with more NULs is tried first
                                  "the cat sat\u2000on the mat. a dog ran\u2000to it.\n" * 4])
@pytest.mark.parametrize("python_codec, encoding", [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"), ("utf-16", "UTF-16")])
def test_utf16_with_nuls_at_both_parities_is_named(tmp_path, text, python_codec, encoding):
    """A character U+xx00 (一 U+4E00, Ā U+0100, Ѐ U+0400) puts a NUL at the parity of the low bytes: BOM-less
    UTF-16 holding one was called binary (NULs at both parities); the order that decodes is the one, whichever
    parity has more NULs (Chinese whose only ASCII is the line break has more at the low bytes)."""
    from spacy_elmo.training.data import not_utf8

    (tmp_path / "t.txt").write_bytes(text.encode(python_codec))
    assert not_utf8(tmp_path / "t.txt") == encoding


@pytest.mark.parametrize("python_codec", ["utf-16", "utf-16-be"])
def test_utf16_with_a_bom_and_no_nul_is_named(tmp_path, python_codec):
    """Chinese without ASCII in UTF-16 has no NUL byte: its byte order mark alone tells it from UTF-8 (which
    neither FF FE nor FE FF starts)."""
    from spacy_elmo.training.data import not_utf8

    data = ("\ufeff" if python_codec == "utf-16-be" else "").encode(python_codec) + "中文的句子。这是第二行。".encode(python_codec) * 50
    assert b"\x00" not in data
    (tmp_path / "t.txt").write_bytes(data)
    assert not_utf8(tmp_path / "t.txt") == "UTF-16"


@pytest.mark.parametrize("data", [b"abc\x00def\n", b"\x00\x01\x02 not text \x00", bytes(range(256)) * 8,
                                  b"tar header\x00\x00" * 50, b"\x00\x00\x00\x01" * 100])
def test_binary_data_stays_binary(tmp_path, data):
    (tmp_path / "b.bin").write_bytes(data)
    with pytest.raises(ValueError, match=r"looks like a binary file.*; in a directory that pretrain, evaluate and "
                                         r"fit-state read, such files are skipped with a warning\.$"):
        build_corpus(tmp_path / "b.bin", "en", tmp_path / "cache", progress=False)


@pytest.mark.parametrize("order", ["little", "big"])
def test_binary_with_an_aligned_line_break_is_no_utf32(tmp_path, order):
    """Random bytes (a jar, a PNG, compressed data) holding one aligned int32 10 (``0A 00 00 00``): read as UTF-32
    they are mostly U+FFFD, which isprintable() says True of; they were called UTF-32 text with an iconv command."""
    from spacy_elmo.training.data import BINARY, not_utf8

    rng = np.random.default_rng(0)
    for k in range(20):
        blob = bytearray(rng.integers(0, 256, 8192, dtype=np.uint8).tobytes())
        i = 4 * int(rng.integers(0, 2048))
        blob[i:i + 4] = (10).to_bytes(4, order)
        (tmp_path / "r.bin").write_bytes(bytes(blob))
        assert not_utf8(tmp_path / "r.bin") == BINARY


@pytest.mark.parametrize("control_every, found", [(20, "UTF-16LE"), (10, "binary")])
def test_wide_text_needs_95_percent_printable(tmp_path, control_every, found):
    """One control character in 20 (95% printable) is still UTF-16 text, one in 10 no text."""
    from spacy_elmo.training.data import not_utf8

    text = ("abcd efgh " * 4)[:control_every - 1] + "\x01"
    (tmp_path / "t.txt").write_bytes((text * 300).encode("utf-16-le"))
    assert not_utf8(tmp_path / "t.txt") == found


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 ol\u00e9 ok\n".encode("latin-1") + b"bad \xff\xfe end\n")
    with pytest.warns(RuntimeWarning, match="4 undecodable"):
        meta = build_corpus(path, "en", tmp_path / "cache", progress=False)
    assert meta["stats"]["replaced_bytes"] == 4
    assert any("\ufffd" in t for t in Corpus.load(tmp_path / "cache").types)


def test_the_warning_of_replaced_bytes_names_the_first_files(tmp_path):
    """W_REPLACED_BYTES names the first REPLACED_FILES_NAMED files (in reading order) and counts the rest."""
    from spacy_elmo.training.data import REPLACED_FILES_NAMED

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a_clean.txt").write_text("all good here .\n", encoding="utf-8")
    bad = [corpus / f"b{i}.txt" for i in range(REPLACED_FILES_NAMED + 2)]
    for path in bad:
        path.write_bytes(b"bad \xff end .\n")
    with pytest.warns(RuntimeWarning, match="undecodable") as record:
        meta = build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    said = [str(w.message) for w in record if "undecodable" in str(w.message)]
    named = ", ".join(str(p) for p in bad[:REPLACED_FILES_NAMED])
    assert len(said) == 1 and f"in {len(bad)} files ({named} and 2 more) replaced" in said[0]
    assert meta["stats"]["files_with_replacements"] == len(bad)
    with pytest.warns(RuntimeWarning, match="undecodable") as record:  # one file: named alone
        build_corpus(bad[0], "en", tmp_path / "one", progress=False)
    assert any(f"in 1 file ({bad[0]}) replaced" in str(w.message) for w in record)


def test_the_warning_of_replaced_bytes_quotes_odd_file_names(tmp_path):
    """W_REPLACED_BYTES listed its files unquoted: a name holding ", " read as two files, one holding a newline
    broke the warning's line. Such a name is shown as a Python string literal (paths.name_shown)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    odd = [corpus / "a, b.txt", corpus / "c\nd.txt"]
    for path in odd:
        path.write_bytes(b"bad \xff end .\n")
    with pytest.warns(RuntimeWarning, match="undecodable") as record:
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    said = [str(w.message) for w in record if "undecodable" in str(w.message)]
    assert len(said) == 1 and f"in 2 files ({str(odd[0])!r}, {str(odd[1])!r}) replaced" in said[0], said
    assert "\n" not in said[0]


def test_one_megabyte_line(tmp_path):
    words = ("alpha beta gamma delta. " * 45000)[:1_000_000]
    path = tmp_path / "long.txt"
    path.write_text(words, encoding="utf-8")
    assert len(words) > PIECE_CHARS
    with pytest.warns(RuntimeWarning, match="tokenized in pieces"):
        meta = build_corpus(path, "en", tmp_path / "cache", progress=False)
    stats = meta["stats"]
    assert stats["long_lines"] == 1
    # Split at whitespace only: every word survives intact.
    assert set(Corpus.load(tmp_path / "cache").types[3:]) == {"alpha", "beta", "gamma", "delta", "."}
    assert stats["n_tokens"] > 200_000


def test_stretches_without_whitespace_are_cut():
    """spaCy's tokenizer is quadratic in a stretch without whitespace (20,000 U+FFFD: 27 s): one longer than
    RUN_CHARS gets a space after every RUN_CHARS characters; shorter ones and whitespace stay as they are."""
    assert RUN_CHARS == 200
    line = "a " + "x" * 450 + " b\t" + "!" * 201 + " " + "y" * 200
    text, n = cut_runs(line)
    assert n == 2
    assert text == "a " + "x" * 200 + " " + "x" * 200 + " " + "x" * 50 + " b\t" + "!" * 200 + " ! " + "y" * 200
    assert cut_runs("z" * 200) == ("z" * 200, 0)
    assert cut_runs("\ufffd" * 401) == ("\ufffd" * 200 + " " + "\ufffd" * 200 + " \ufffd", 1)


def test_a_long_stretch_gives_the_tokens_of_its_cuts(tmp_path):
    """Read from a file: undecodable bytes (U+FFFD, each its own token, stripped one at a time by spaCy) are cut
    and give the same tokens as uncut, counted and warned of with the file; a 450-character word, which spaCy
    keeps whole in linear time, stays one token, as the pipeline sees it."""
    path = tmp_path / "runs.txt"
    path.write_bytes(b"ok " + b"\xff" * 450 + b" then " + b"q" * 450 + b" end\n")
    with pytest.warns(RuntimeWarning, match=r"runs.txt has 1 stretch of more than 200 characters without whitespace"):
        meta = build_corpus(path, "en", tmp_path / "cache", progress=False)
    assert meta["stats"]["long_runs"] == 1
    counts = dict(zip(Corpus.load(tmp_path / "cache").types, Corpus.load(tmp_path / "cache").counts.tolist()))
    assert counts["\ufffd"] == 450 and counts["q" * 450] == 1
    assert meta["stats"]["n_tokens"] == 1 + 450 + 1 + 1 + 1


URL = ("https://www.example.com/search/results?query=elmo+contextual+embeddings&utm_source=newsletter&utm_medium=email"
       "&utm_campaign=2026-11-spring-sale&session=0f8a9c2d4e6b1a3c5e7f9a0b2c4d6e8f&ref=homepage-banner-top&lang=en-US")


def test_stretches_spacy_tokenizes_fast_stay_whole(tmp_path):
    """Only a stretch spaCy's rule-based tokenizer strips more than AFFIX_ROUNDS prefixes or suffixes from (the
    quadratic cost) is cut: a 219-character URL, in brackets before a full stop too, gives spaCy's tokens (one
    URL token), not 2 cut pieces; a URL followed by 1,000 U+FFFD, which url_match matches whole but spaCy strips
    one by one, is cut."""
    from spacy_elmo.training import data

    tokenizer = data.make_nlp("en").tokenizer
    assert len(URL) == 219
    rounds, cap = data.AFFIX_ROUNDS, data.RUN_CAP
    for line in (f"Read more at {URL} today.", f"Read more ({URL}).", "a " + "(" * rounds + "z" * (cap - rounds)):
        text, n = cut_runs(line, tokenizer)
        assert (text, n) == (line, 0)
    assert URL in [t.text for t in tokenizer(f"Read more ({URL}).")]
    assert cut_runs("a " + "(" * (rounds + 1) + "z" * (cap - rounds - 1), tokenizer)[1] == 1
    text, n = cut_runs(URL + "\ufffd" * 1000, tokenizer)
    assert n == 1 and text == " ".join((URL + "\ufffd" * 1000)[i:i + RUN_CHARS] for i in range(0, 1219, RUN_CHARS))
    assert tokenizer.url_match(URL + "\ufffd" * 1000)
    path = tmp_path / "url.txt"
    path.write_text(f"Read more at {URL} today.\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no W_LONG_RUNS
        assert data.tokenize_file(path, "en") == [["Read", "more", "at", URL, "today", "."]]


def test_a_shorter_stretch_may_take_more_affix_rounds():
    """Tokenizing a stretch whole costs its affix rounds times its length: one shorter than RUN_CAP may take
    up to AFFIX_ROUNDS * RUN_CAP // its length rounds. A 254-character word and ten "!" (10 rounds, 1 ms)
    stays whole and gives the pipeline's tokens; 300 "!" (300 rounds) is cut."""
    from spacy_elmo.training import data

    tokenizer = data.make_nlp("en").tokenizer
    run = "Sooo" + "o" * 250 + "!" * 10
    assert data.AFFIX_ROUNDS < 10 <= data.AFFIX_ROUNDS * data.RUN_CAP // len(run)
    assert cut_runs("a " + run, tokenizer) == ("a " + run, 0)
    assert [t.text for t in tokenizer(run)] == ["Sooo" + "o" * 250] + ["!"] * 10
    assert cut_runs("a " + "!" * 300, tokenizer)[1] == 1


def test_stretches_longer_than_the_cap_are_cut():
    """spaCy's url_match is quadratic in a stretch with many colons (80,000 characters of "a:" took 22 s, one
    affix round): a stretch longer than RUN_CAP is cut every RUN_CHARS characters whatever its affixes; a word
    of RUN_CAP characters, which spaCy keeps whole, stays whole."""
    from spacy_elmo.training import data

    tokenizer = data.make_nlp("en").tokenizer
    assert data.RUN_CAP == 2000
    word = "z" * data.RUN_CAP
    assert cut_runs("a " + word, tokenizer) == ("a " + word, 0)
    for run in (word + "z", "a:" * (data.RUN_CAP // 2 + 1)):
        assert cut_runs("a " + run, tokenizer) == ("a " + " ".join(run[i:i + RUN_CHARS] for i in range(0, len(run), RUN_CHARS)), 1)


def test_a_cut_never_splits_a_character_from_what_continues_it(tmp_path):
    """A cut is moved back (at most CUT_BACK characters) so that no piece starts with a combining mark (an NFD
    accent, a variation selector), a ZWJ, a skin tone or an emoji tag, nor ends with a ZWJ: 2,402 characters of
    rainbow flags (U+1F3F3 U+FE0F U+200D U+1F308) give the pipeline's 1,802 tokens (cut every 200: 1,814, with
    U+FE0F and U+200D apart), a family ZWJ sequence and a subdivision flag too; a run of combining marks longer
    than CUT_BACK is still cut at RUN_CHARS. Warned of as split at the cuts, not as read the pipeline's way."""
    import unicodedata

    from spacy_elmo.training import data

    tokenizer = data.make_nlp("en").tokenizer
    assert data.CUT_BACK == 16

    def pieces(run):
        text, n = cut_runs("a " + run, tokenizer)
        assert n == 1 and text.startswith("a ")
        cut = text[2:].split(" ")
        assert "".join(cut) == run and all(len(p) <= RUN_CHARS for p in cut)
        return cut

    flags = "!!" + "\U0001F3F3\uFE0F\u200D\U0001F308" * 600
    family = "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466" * 400
    england = "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F" * 400
    for run in (flags, family, england, "x" + "\U0001F44D\U0001F3FD" * 1200):
        cut = pieces(run)
        assert [t.text for t in tokenizer(" ".join(cut))] == [t.text for t in tokenizer(run)]
    assert len([t for t in tokenizer(flags)]) == 1802
    for run in (flags, family, england, "x" + "\U0001F44D\U0001F3FD" * 1200, "!" + "e\u0301!" * 800, "!!" + "!\u0301" * 1500,
                "z" + "o\u0308\u0301\u0323" * 700):
        for piece in pieces(run)[1:]:
            assert unicodedata.category(piece[0])[0] != "M" and not 0x1F3FB <= ord(piece[0]) <= 0x1F3FF
            assert piece[0] not in "\u200d\ufe0e\ufe0f" and not 0xE0020 <= ord(piece[0]) <= 0xE007F
        assert all(not piece.endswith("\u200d") for piece in pieces(run))
    zalgo = "a" + "\u0301" * 3000
    assert [len(p) for p in pieces(zalgo)] == [RUN_CHARS] * 15 + [1]
    path = tmp_path / "word.txt"
    path.write_text("w" * 2500 + "\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert data.tokenize_file(path, "en") == [["w" * RUN_CHARS] * 12 + ["w" * 100]]
    said = [str(w.message) for w in caught if "word.txt has 1 stretch" in str(w.message)]
    assert len(said) == 1 and "a word, or a phrase of a language written without spaces, is split at the cuts" in said[0]
    assert "as the pipeline does" not in said[0] and "never between" not in said[0]
    assert "each cut moved back by up to 16 characters to keep a character with the accents" in said[0]


@pytest.mark.parametrize("before, keep", [
    ("\u0915\u093e", 2),  # Devanagari KA and the vowel sign AA (Mc): the sign at the cut
    ("1\ufe0f\u20e3", 3),  # keycap 1: U+20E3 (Me) at the cut
    ("\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", 7),  # England: U+E007F CANCEL TAG
    ("\u1112\u1161", 2),  # NFD Hangul: the vowel U+1161 at the cut
    ("\u1112\u1161\u11ab", 3),  # and the final consonant U+11AB
    ("\u1100\u1161\ud7cb", 3),  # a final of Hangul Jamo Extended-B
    ("\u1100\ud7b0", 2),  # a vowel of it
])
def test_a_cut_moves_back_before_the_character_a_mark_or_jamo_continues(before, keep):
    """The character that ends at the cut (``before``: its last code point at index RUN_CHARS) starts the next
    piece whole: spacing (Mc) and enclosing (Me) marks, the cancel tag that ends a subdivision flag, and the
    conjoining vowels and final consonants of NFD Hangul (Lo) continue the characters before them."""
    from spacy_elmo.training.data import _cut_pieces

    run = "a" * (RUN_CHARS + 1 - keep) + before + "a" * 300
    first = _cut_pieces(run)[0]
    assert first == "a" * (RUN_CHARS + 1 - keep), [hex(ord(c)) for c in run[len(first) - 1:len(first) + 1]]


def test_byte_order_marks_warnings_say_cat_only_for_those_at_line_starts(tmp_path):
    """r5: "1 U+FEFF ... 1 of them at the start of a line", and the `cat` story told with none at a line start. A
    U+FEFF inside a word is counted without it; one at a line start says so in the singular; every file's count
    adds up in the corpus statistics (a directory of several files each holding one)."""
    from spacy_elmo.training import data

    def said(path):
        stats = data.ReadStats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            data.tokenize_file(path, "en", stats)
        return [str(w.message) for w in caught if "U+FEFF" in str(w.message)], stats.bom_chars

    inside = tmp_path / "inside.txt"
    inside.write_bytes(b"The x\xef\xbb\xbfy sat .\n")
    (message,), n = said(inside)
    assert n == 1 and f"{inside} has 1 U+FEFF (byte order mark) after its start. It is read" in message, message
    assert "cat" not in message and "joining" not in message and "of them" not in message
    start = tmp_path / "start.txt"
    start.write_bytes(b"The cat sat .\n\xef\xbb\xbfThe dog ran .\n")
    (message,), n = said(start)
    assert n == 1 and "has 1 U+FEFF (byte order mark) after its start, at the start of a line: files joined with `cat`" in message
    assert message.endswith("before joining the files.")
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}.txt").write_bytes(b"A x\xef\xbb\xbfy .\n")
    messages, n = said(folder)
    assert n == 3 and len(messages) == 3 and all("cat" not in m for m in messages)


def test_byte_order_marks_after_the_start_are_counted_and_warned_of(tmp_path):
    """`cat a.txt b.txt` where b.txt begins with a byte order mark leaves U+FEFF before b's first word: it is
    kept (as the pipeline reads it, a character of its word: '\\ufeffThe'), counted with one inside a word, and
    warned of once per file with how many begin a line and how to remove them; a file's own leading byte order
    mark is dropped and warned of by no one (two files, each with its own, in a directory)."""
    from spacy_elmo.training import data

    corpus = tmp_path / "cat.txt"
    corpus.write_bytes(b"The cat sat .\n\xef\xbb\xbfThe dog ran .\n\xef\xbb\xbfA x\xef\xbb\xbfy .\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        meta = build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    said = [str(w.message) for w in caught if "U+FEFF" in str(w.message)]
    at_line_starts = data.Warnings.W_BOM_AT_LINE_STARTS.format(which="2 ")
    assert said == [data.Warnings.W_BOM_INSIDE.format(path=corpus, n_boms="3 U+FEFF characters (byte order marks)",
                                                       at_line_starts=at_line_starts, joined=data.Warnings.W_BOM_JOINED)]
    assert "sed -i 's/\\xEF\\xBB\\xBF//g' FILE" in said[0]
    assert meta["stats"]["bom_chars"] == 3
    assert {"\ufeffThe", "\ufeffA", "x\ufeffy"} <= set(Corpus.load(tmp_path / "cache").types)
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.txt", "b.txt"):
        (folder / name).write_bytes(b"\xef\xbb\xbfThe cat sat .\n")
    stats = data.ReadStats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data.tokenize_file(folder, "en", stats) == [["The", "cat", "sat", "."]] * 2
    assert stats.bom_chars == 0


def _affix_tokenizer(prefix: str, suffix: str):
    """spaCy's rule-based Tokenizer with only these prefix and suffix patterns."""
    import spacy
    from spacy.tokenizer import Tokenizer

    return Tokenizer(spacy.blank("en").vocab, prefix_search=re.compile(prefix).search, suffix_search=re.compile(suffix).search)


def test_affix_rounds_are_counted_as_spacy_strips_them():
    """A stretch of RUN_CAP characters spaCy strips in exactly AFFIX_ROUNDS rounds stays whole, each as spaCy's
    Tokenizer._split_affixes counts them: a prefix and a suffix stripped together are one round, also when they
    are all that is left (prefix + suffix == the stretch); the suffix is searched after the prefix (here the
    suffix pattern would match the prefix too); a whole token_match stops the stripping (300 "!" one token)."""
    import spacy

    from spacy_elmo.training import data

    rounds, cap = data.AFFIX_ROUNDS, data.RUN_CAP
    assert rounds == 8
    nlp = data.make_nlp("en")
    paired = "(" * 5 + "z" * (cap - 10) + ")" * 5
    whole_left = "a" * 7 + "m" * (cap - 15) + "c" * 8  # the 8th round strips "m"*1985 and "c", all that is left
    after_prefix = "a" * 7 + "x" + "y" * (cap - 16) + "c" * 7  # "x" + "y"*1984 matches the suffix pattern whole
    for tokenizer, run, tokens in (
        (nlp.tokenizer, paired, ["("] * 5 + ["z" * (cap - 10)] + [")"] * 5),
        (_affix_tokenizer(r"^(?:a|m+)", r"c$"), whole_left, ["a"] * 7 + ["m" * (cap - 15)] + ["c"] * 8),
        (_affix_tokenizer(r"^(?:a|x)", r"c$|(?<![xy])[xy]+$"), after_prefix, ["a"] * 7 + ["x", "y" * (cap - 16)] + ["c"] * 7),
    ):
        assert len(run) <= cap and rounds == rounds * cap // len(run)
        assert [t.text for t in tokenizer(run)] == tokens
        assert cut_runs("a " + run, tokenizer) == ("a " + run, 0)
    matched = spacy.blank("en").tokenizer
    matched.token_match = re.compile(r"!+$").match
    assert [t.text for t in matched("!" * 300)] == ["!" * 300]
    assert cut_runs("a " + "!" * 300, matched) == ("a " + "!" * 300, 0)
    assert cut_runs("a " + "!" * 300, nlp.tokenizer)[1] == 1


def test_stretches_are_not_cut_for_another_tokenizer(tmp_path, monkeypatch):
    """A tokenizer other than spaCy's rule-based one (SudachiPy's ja, PyThaiNLP's th, zh's segmenters) reads a
    stretch without whitespace as it is: a cut split its words. Here one that makes a token of each line."""
    import spacy
    from spacy.tokens import Doc

    from spacy_elmo.training import data

    class LineTokenizer:
        def __init__(self, vocab):
            self.vocab = vocab

        def __call__(self, text):
            return Doc(self.vocab, words=[text.strip()])

    def make_nlp(lang):
        nlp = spacy.blank("en")
        nlp.tokenizer = LineTokenizer(nlp.vocab)
        nlp.add_pipe("sentencizer")
        return nlp

    assert not data.cuts_runs(make_nlp("en").tokenizer) and data.cuts_runs(data.make_nlp("en").tokenizer)
    assert not data.cuts_runs(data.make_nlp("zh").tokenizer)  # zh's default char segmenter
    monkeypatch.setattr(data, "make_nlp", make_nlp)
    path = tmp_path / "words.txt"
    path.write_text("!" * 300 + "\n", encoding="utf-8")
    stats = data.ReadStats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no W_LONG_RUNS
        assert data.tokenize_file(path, "xx", stats) == [["!" * 300]]
    assert stats.long_runs == 0


def test_split_long_pieces():
    assert split_long("aa bb cc dd", limit=5) == ["aa", " bb", " cc", " dd"]
    assert split_long("aa\tbbbbbbbb c", limit=5) == ["aa", "\tbbbb", "bbbb", " c"]
    assert split_long("x" * 12, limit=5) == ["xxxxx", "xxxxx", "xx"]
    assert split_long("short", limit=5) == ["short"]
    # whitespace at a piece's second character: the piece is its first character alone
    assert split_long("a bbbbbbbb", limit=5) == ["a", " bbbb", "bbbb"]
    assert split_long("xxxxx\tyyyyy", limit=7) == ["xxxxx", "\tyyyyy"]


def test_a_long_line_is_reported_with_its_length_as_read(tmp_path):
    """W_LONG_LINE names the line's length in the file, not after cut_runs put spaces into it, and says that each
    piece is read as its own sentences (it did not: a sentence across a cut is two)."""
    from spacy_elmo.training.data import ReadStats, iter_text, make_nlp

    words = " ".join(["w" * 99] * ((PIECE_CHARS - 1000) // 100))  # not cut
    line = "!" * 1000 + " " + words + " "  # PIECE_CHARS + 1 characters; the run of "!" is cut
    (tmp_path / "long.txt").write_text(line + "\n", encoding="utf-8")
    stats = ReadStats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pieces = list(iter_text(tmp_path / "long.txt", stats, make_nlp("en").tokenizer))
    said = [str(w.message) for w in caught]
    assert any(f"has a line of {PIECE_CHARS + 1:,} characters" in m for m in said), said
    assert any("each read as its own sentence or sentences (a sentence across a cut is read as two)" in m for m in said), said
    assert any("has 1 stretch of more than 200 characters" in m for m in said), said
    assert stats.long_runs == 1 and stats.long_lines == 1
    assert "".join(pieces) == " ".join("!" * 200 for _ in range(5)) + " " + words + " "


def test_corpus_too_small_for_batch():
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a"])
    corpus = Corpus.from_sentences([["a", "a"]], vocab)
    with pytest.raises(ValueError, match="too few"):
        StreamBatcher(corpus, batch_size=4, unroll=20)


def test_streams_sharded_reversed_and_deterministic():
    vocab = Vocab(["<S>", "</S>", "<UNK>"])
    sentences = [[f"w{i}_{j}" for j in range(i % 5 + 1)] for i in range(60)]
    corpus = Corpus.from_sentences(sentences, vocab)
    shards = [StreamBatcher(corpus, 2, 3, seed=1, rank=r, world=2) for r in range(2)]
    f0, b0 = shards[0].batch(0, 1)
    f1, _ = shards[1].batch(0, 1)
    assert f0.shape == (2, 4)
    assert not set(f0.flatten().tolist()) & set(f1.flatten().tolist()) - {BOS, EOS}
    again = StreamBatcher(corpus, 2, 3, seed=1, rank=0, world=2).batch(0, 1)
    assert torch.equal(again[0], f0) and torch.equal(again[1], b0)
    # Each epoch reshuffles both streams: epoch 1 reads other windows than epoch 0 (and deterministically).
    e1 = StreamBatcher(corpus, 2, 3, seed=1, rank=0, world=2).batch(1, 1)
    assert not torch.equal(e1[0], f0) and not torch.equal(e1[1], b0)
    assert all(torch.equal(x, y) for x, y in zip(shards[0].batch(1, 1), e1))
    # Consecutive windows overlap by one token: the last target is the next first input.
    nxt, _ = shards[0].batch(0, 2)
    assert torch.equal(nxt[:, 0], f0[:, -1])
    # The backward stream reads sentences reversed: within a sentence, word indices fall.
    full_b = torch.cat([shards[0].batch(0, k)[1][:, :-1] for k in range(shards[0].steps_per_epoch)], 1)
    for row in full_b.tolist():
        for a, b in zip(row, row[1:]):
            ta, tb = vocab.types[a], vocab.types[b]
            if ta.startswith("w") and tb.startswith("w"):
                assert ta.split("_")[0] == tb.split("_")[0] and int(ta.split("_")[1]) == int(tb.split("_")[1]) + 1


def _stream_words(sentences, order, reverse=False):
    """The stream as strings, built from the sentences alone: ``<S> words </S>`` per sentence in ``order``
    (each reversed, markers included, for the backward LM)."""
    out = []
    for i in order:
        seq = ["<S>", *sentences[i], "</S>"]
        out.extend(seq[::-1] if reverse else seq)
    return out


@pytest.mark.parametrize("world", [1, 2])
def test_an_epoch_reads_each_row_to_its_end_and_never_past_it(world):
    """Unshuffled, every rank's steps of an epoch give each of its rows' targets: the row's tokens shifted by
    one, up to its end and never past it (the next row is another rank's data; the last row's next token
    is past the stream). Rows of 150 and 75 tokens, multiples of the unroll: reading row_len // unroll steps
    predicted the next row's first token at the last step (or indexed past the stream)."""
    vocab = Vocab(["<S>", "</S>", "<UNK>"])
    sentences = [[f"w{i}_{j}" for j in range(i % 5 + 1)] for i in range(60)]  # 300 tokens with the markers
    corpus = Corpus.from_sentences(sentences, vocab)
    B, U = 2, 3
    for direction in (0, 1):
        stream = _stream_words(sentences, range(len(sentences)), reverse=direction == 1)
        row_len = len(stream) // (world * B)
        assert row_len % U == 0  # the case where reading row_len // U steps runs one token past the row
        for rank in range(world):
            batcher = StreamBatcher(corpus, B, U, seed=1, rank=rank, world=world, shuffle=False)
            steps = [batcher.batch(0, k)[direction] for k in range(batcher.steps_per_epoch)]
            inputs = torch.cat([s[:, :-1] for s in steps], 1).tolist()
            targets = torch.cat([s[:, 1:] for s in steps], 1).tolist()
            for i in range(B):
                row = stream[(rank * B + i) * row_len : (rank * B + i + 1) * row_len]
                got = [vocab.types[t] for t in targets[i]]
                assert row_len - U <= len(got) <= row_len - 1  # never past the row, fewer than U positions unread
                assert got == row[1 : len(got) + 1]
                assert [vocab.types[t] for t in inputs[i]] == row[: len(got)]


def test_backward_stream_is_shuffled_apart_from_the_forward_one():
    """bilm-tf's backward LM reads its own shuffle of the sentences, not the forward stream's order reversed
    sentence by sentence. Each direction's rows are its stream of the module's documented permutation
    (``default_rng((seed, epoch, direction))``), built here from the sentences; the backward rows, read
    back into sentence ids, come in another order than the forward ones."""
    vocab = Vocab(["<S>", "</S>", "<UNK>"])
    sentences = [[f"w{i}_{j}" for j in range(i % 5 + 1)] for i in range(60)]
    corpus = Corpus.from_sentences(sentences, vocab)
    B, U, seed = 2, 3, 1
    batcher = StreamBatcher(corpus, B, U, seed=seed)
    orders = []
    for epoch in (0, 1):
        for direction in (0, 1):
            steps = [batcher.batch(epoch, k)[direction] for k in range(batcher.steps_per_epoch)]
            rows = torch.cat([steps[0][:, :1]] + [s[:, 1:] for s in steps], 1).tolist()
            perm = np.random.default_rng([seed, epoch, direction]).permutation(len(sentences))
            stream = _stream_words(sentences, perm, reverse=direction == 1)
            for i, row in enumerate(rows):
                assert [vocab.types[t] for t in row] == stream[i * batcher.row_len : i * batcher.row_len + len(row)]
            # the sentence of each word, in reading order, each sentence once
            read = [int(vocab.types[t][1:].split("_")[0]) for row in rows for t in row if vocab.types[t].startswith("w")]
            orders.append([s for k, s in enumerate(read) if k == 0 or read[k - 1] != s])
    fwd0, bwd0, fwd1, bwd1 = orders
    assert len(fwd0) >= 55 and len(bwd0) >= 55  # nearly every sentence: the few unread tokens end the rows
    assert bwd0 != fwd0 and bwd1 != fwd1 and bwd1 != bwd0
    again = StreamBatcher(corpus, B, U, seed=seed)
    assert all(torch.equal(again.batch(0, k)[1], batcher.batch(0, k)[1]) for k in range(batcher.steps_per_epoch))


def test_sentence_batches_cover_every_target_once_per_epoch():
    """--sentences: each row is one sentence (or a piece of at most max_length targets of a long
    one), its reversal for the backward LM; over an epoch every (input, target) pair of every
    sentence occurs exactly once per direction; ranks take disjoint batches; deterministic."""
    vocab = Vocab(["<S>", "</S>", "<UNK>"])
    sentences = [[f"w{i}_{j}" for j in range((i * 7) % 13 + 1)] for i in range(45)]  # 1..13 words
    corpus = Corpus.from_sentences(sentences, vocab)
    max_length = 6
    want = Counter()
    for s in sentences:
        seq = ["<S>", *s, "</S>"]
        want.update(zip(seq, seq[1:]))

    def rows(batcher, epoch):
        for k in range(batcher.steps_per_epoch):
            fwd, bwd, lengths = batcher.batch(epoch, k)
            assert fwd.shape == bwd.shape and fwd.shape[0] == lengths.shape[0] <= batcher.batch_size
            assert fwd.shape[1] == int(lengths.max()) + 1 and int(lengths.max()) <= max_length
            for f, b, n in zip(fwd.tolist(), bwd.tolist(), lengths.tolist()):
                assert f[: n + 1] == b[: n + 1][::-1] and set(f[n + 1 :]) <= {EOS}
                yield tuple(vocab.types[t] for t in f[: n + 1])

    one = SentenceBatcher(corpus, 4, max_length, seed=3, pool=2)
    pieces = list(rows(one, 1))
    assert len(pieces) == len(set(pieces)) > len(sentences)  # long sentences were cut; no piece twice
    assert Counter(pair for p in pieces for pair in zip(p, p[1:])) == want
    assert Counter(pair for p in pieces for pair in zip(p[::-1], p[::-1][1:])) == Counter({(b, a): c for (a, b), c in want.items()})
    assert list(rows(one, 1)) == pieces and list(rows(one, 2)) != pieces  # a pure function of the epoch

    # Under DDP every batch trains every epoch: the ranks' steps, rank after rank, are the epoch's batch order padded
    # with its first batches to a multiple of the processes (torch's DistributedSampler, drop_last=False). The
    # n_batches % world batches left over were never trained (a different few each epoch).
    def batches(batcher, epoch):
        return [tuple(tuple(f[: n + 1]) for f, n in zip(fwd.tolist(), lengths.tolist()))
                for fwd, _, lengths in (batcher.batch(epoch, k) for k in range(batcher.steps_per_epoch))]

    order = batches(one, 1)
    n = len(order)
    assert n == one.n_batches == 20  # 3 and 6 processes pad (2 and 4 batches again), 2 do not
    for world in (2, 3, 6):
        ranks = [batches(SentenceBatcher(corpus, 4, max_length, seed=3, rank=r, world=world, pool=2), 1) for r in range(world)]
        steps = -(-n // world)
        assert [len(r) for r in ranks] == [steps] * world
        assert [ranks[r][k] for k in range(steps) for r in range(world)] == (order + order)[: steps * world]
        assert set().union(*map(set, ranks)) == set(order)  # every batch, so every piece, trains this epoch
    # A checkpoint of a run from before the padding (pad=False) resumes dropping the leftover batches, as it trained.
    old = [batches(SentenceBatcher(corpus, 4, max_length, seed=3, rank=r, world=3, pool=2, pad=False), 1) for r in range(3)]
    assert [b for k in range(n // 3) for b in (old[0][k], old[1][k], old[2][k])] == order[: n // 3 * 3]


@pytest.mark.parametrize("pool", [1, 8])
def test_length_pools_sort_batches_by_length_only_above_one(pool):
    """pool 1 (pretrain's default): every batch a random draw of pieces, of mixed lengths; a larger pool
    sorts the pieces by length within it, so every batch holds one narrow band of lengths."""
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a"])
    lengths = np.random.default_rng(0).integers(1, 30, size=640)
    corpus = Corpus.from_sentences([["a"] * int(n) for n in lengths], vocab)
    batcher = SentenceBatcher(corpus, batch_size=16, max_length=100, seed=1, pool=pool)
    pieces = batcher.lengths
    within = np.mean([pieces[rows].var() for rows in batcher._epoch_batches(0)])
    assert sorted(np.concatenate(batcher._epoch_batches(0)).tolist()) == list(range(len(pieces)))  # every piece once
    if pool == 1:  # as random batches: the mean within-batch variance is the corpus's less a 1/16 (sampling)
        assert within > 0.8 * pieces.var()
    else:
        assert within < 0.05 * pieces.var()


def test_sentence_batches_need_enough_sentences():
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a"])
    corpus = Corpus.from_sentences([["a"], ["a", "a"]], vocab)
    with pytest.raises(ValueError, match="--sentences.*--batch-size"):
        SentenceBatcher(corpus, batch_size=2, max_length=10, world=2)
    with pytest.raises(ValueError, match="max_length"):
        SentenceBatcher(corpus, batch_size=1, max_length=0)
    with pytest.raises(ValueError, match="length_pool must be a positive integer"):
        SentenceBatcher(corpus, batch_size=1, max_length=10, pool=0)


def test_too_few_sentences_says_the_rows_a_run_needs():
    """Each process needs a batch, the last one of the epoch short or not: 2 processes of batches of 4 need 5 rows
    (it said "fewer than one batch of 4 rows for each of 2 process(es)", which reads as 8)."""
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a"])
    assert SentenceBatcher(Corpus.from_sentences([["a"]] * 5, vocab), batch_size=4, max_length=10, world=2).n_batches == 2
    with pytest.raises(ValueError, match=r"gives 4 sentence rows, too few for 2 processes: its batches of 4 rows .* at "
                                         r"least 5 rows\. Use --batch-size 3 or smaller, fewer processes, or more text\."):
        SentenceBatcher(Corpus.from_sentences([["a"]] * 4, vocab), batch_size=4, max_length=10, world=2)
    assert SentenceBatcher(Corpus.from_sentences([["a"]] * 4, vocab), batch_size=3, max_length=10, world=2).n_batches == 2
    # fewer rows than processes: no batch size gives each one a batch
    with pytest.raises(ValueError, match=r"gives 2 sentence rows, too few for 3 processes: .* Use fewer processes, or "
                                         r"more text\."):
        SentenceBatcher(Corpus.from_sentences([["a"]] * 2, vocab), batch_size=4, max_length=10, world=3)
    # batches of one row: no smaller --batch-size to advise, nor fewer processes for one; counts agree
    with pytest.raises(ValueError, match=r"gives 1 sentence row, too few for 2 processes: its batches of 1 row .* at "
                                         r"least 2 rows\. Use fewer processes, or more text\."):
        SentenceBatcher(Corpus.from_sentences([["a"]], vocab), batch_size=1, max_length=10, world=2)


def test_cache_killed_while_rebuilding_is_not_reused(tmp_path, monkeypatch):
    """meta.json marks a complete cache: a rebuild for other text that is killed half-way must not
    leave the old meta.json beside the new text's half-written files."""
    from spacy_elmo.training import data

    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("the cat sees a dog .\n", encoding="utf-8")
    second.write_text("other words entirely , and more of them !\n", encoding="utf-8")
    cache = tmp_path / "cache"
    build_corpus(first, "en", cache, progress=False)
    expected = Corpus.load(cache)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(data, "atomic_write_text", killed)
        with pytest.raises(KeyboardInterrupt):
            build_corpus(second, "en", cache, progress=False)
    build_corpus(first, "en", cache, progress=False)
    again = Corpus.load(cache)
    assert again.types == expected.types and again.tokens.tolist() == expected.tokens.tolist()


@pytest.mark.parametrize("block", [
    {"@misc": "test.recorded_side_effect.v1", "path": "/top"},
    {"@tokenizers": "spacy.Tokenizer.v1", "extra": {"@misc": "test.recorded_side_effect.v1", "path": "/nested"}},
    {"@tokenizers": "spacy.Tokenizer.v1", "extra": [{"@misc": "test.recorded_side_effect.v1"}]},
    {"@tokenizers": "spacy.Tokenizer.v1", "@misc": "test.recorded_side_effect.v1"},
    ["@tokenizers", "spacy.Tokenizer.v1"],
])
def test_a_recorded_block_builds_no_function_but_one_tokenizer(block):
    """make_nlp built whatever registered function a model's config.json names in its recorded tokenizer block (any
    registry, nested blocks too) before anything checked that it is a tokenizer: such a block is not read with (the
    language's own tokenizer is), and no function it names runs."""
    import catalogue
    import spacy

    from spacy_elmo.training import data

    calls = []
    try:
        @spacy.registry.misc("test.recorded_side_effect.v1")
        def side_effect(path: str = "x"):
            calls.append(path)
            return lambda nlp: spacy.tokenizer.Tokenizer(nlp.vocab)

        provenance = {"trained_by": data.PRETRAINED_BY, "lang": "zh", "tokenizer": block}
        assert data.recorded_tokenizer(provenance, "zh") is None
        nlp = data.make_nlp("zh", provenance)
        assert calls == []
        assert data.tokenizer_settings(nlp) == data.reading_tokenizer_settings("zh")
        assert [t.text for t in nlp("我喜欢茶")] == ["我", "喜", "欢", "茶"]
    finally:
        catalogue.REGISTRY.pop(("spacy", "misc", "test.recorded_side_effect.v1"), None)
    recorded = {"@tokenizers": "spacy.Tokenizer.v1"}  # a tokenizer block is read with
    assert data.recorded_tokenizer({"trained_by": data.PRETRAINED_BY, "lang": "zh", "tokenizer": recorded}, "zh") == recorded


def test_tokenizer_fallback_is_announced(tmp_path, monkeypatch):
    """A language whose spaCy tokenizer needs packages that are missing (ko: mecab-ko, ja: sudachipy)
    is read with the rule-based tokenizer; the run says so once, what was missing, and how the
    pipeline gets the same tokens (`--lang ja` made every line one token, silently)."""
    import warnings

    import spacy

    from spacy_elmo.training import data

    real = spacy.blank

    def blank(lang, config=None, **kwargs):
        if not config:
            raise ImportError('The Japanese tokenizer ("spacy.ja.JapaneseTokenizer") requires SudachiPy\nmore')
        return real(lang, config=config, **kwargs)

    monkeypatch.setattr(spacy, "blank", blank)
    monkeypatch.setattr(data, "_FALLBACK_WARNED", set())
    path = tmp_path / "ja.txt"
    path.write_text("吾輩は猫である。名前はまだ無い。\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_corpus(path, "ja", tmp_path / "cache", progress=False)
        data.tokenize_file(path, "ja")
    messages = [str(w.message) for w in caught if "rule-based" in str(w.message)]
    assert len(messages) == 1  # once per language and process
    assert "SudachiPy" in messages[0] and "more" not in messages[0]
    assert "spacy.Tokenizer.v1" in messages[0] and "'ja'" in messages[0]
    assert messages[0].endswith(data.Warnings.W_FALLBACK_ADVICE.format(lang="ja"))  # the model learns these tokens


@pytest.mark.parametrize("lang, recorded, opening", [
    ("ja", "default", "spaCy's tokenizer for 'ja' is another than when the model was pretrained: "),
    ("zh", {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "jieba"},
     "The tokenizer block the model records for 'zh' (pretrain --tokenizer's, not spaCy's default for it) cannot be "
     "built here: "),
])
def test_an_unbuildable_recorded_block_is_not_said_to_be_spacys_changed_tokenizer(lang, recorded, opening):
    """A recorded block read with the rule-based fallback (its package missing): the warning said "spaCy's tokenizer
    for 'zh' is another than when the model was pretrained" also of pretrain --tokenizer's jieba block, where spaCy's
    tokenizer for zh did not change. That opening is kept for spaCy's default block of the language."""
    import warnings

    import spacy

    from spacy_elmo.training import data

    block = data.default_tokenizer_settings(lang) if recorded == "default" else recorded
    provenance = {"trained_by": data.PRETRAINED_BY, "lang": lang, "tokenizer": block}
    nlp = spacy.blank(lang, config={"nlp": {"tokenizer": data.RULE_BASED}})  # the fallback it was read with
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data.warn_other_tokens(provenance, "MODEL", nlp, lang, "TEXT")
    (said,) = [str(w.message) for w in caught]
    assert opening + "the text is read with the tokenizer the model records" in said, said
    assert said.count("another than when the model was pretrained") == (recorded == "default"), said


def test_cache_of_other_spacy_rules_is_rebuilt(tmp_path):
    """The cache recorded the tokenizer block and TOKEN_RULES but not spaCy's own rules: after a spaCy
    upgrade that changed a tokenizer exception, a prefix/suffix/infix rule or the sentencizer's
    punctuation, the old tokens were reused. A pipeline with the same rules (a patch upgrade that
    changes none) still reuses the cache, and a cache written before the digest was recorded is rebuilt."""
    import json

    from spacy_elmo.training import data

    path = tmp_path / "t.txt"
    path.write_text("I don't know ; he said so\n", encoding="utf-8")
    cache = tmp_path / "cache"
    build_corpus(path, "en", cache, progress=False)
    assert "n't" in Corpus.load(cache).types
    assert data.cache_is_current(cache, data.fingerprint(path, "en", data.make_nlp("en")))  # same rules: reused

    nlp = data.make_nlp("en")
    nlp.tokenizer.add_special_case("don't", [{"ORTH": "don't"}])  # an exception changed by an upgrade
    assert not data.cache_is_current(cache, data.fingerprint(path, "en", nlp))
    build_corpus(path, "en", cache, progress=False, nlp=nlp)
    assert "don't" in Corpus.load(cache).types and "n't" not in Corpus.load(cache).types

    nlp = data.make_nlp("en")
    nlp.get_pipe("sentencizer").punct_chars.add(";")  # sentence punctuation changed by an upgrade
    build_corpus(path, "en", cache, progress=False, nlp=nlp)
    assert len(Corpus.load(cache).lengths) == 2 and "n't" in Corpus.load(cache).types

    build_corpus(path, "en", cache, progress=False)
    meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    assert len(Corpus.load(cache).lengths) == 1
    del meta["fingerprint"]["tokenization"]["spacy_rules"]  # a cache of an older spacy-elmo
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert not data.cache_is_current(cache, data.fingerprint(path, "en"))
    assert data.tokenization_change(cache, data.fingerprint(path, "en")) is not None


def test_cache_of_another_tokenization_is_rebuilt(tmp_path, monkeypatch):
    """The cache was fingerprinted without the tokenizer: after installing a tokenizer package (ja's
    rule-based fallback replaced by SudachiPy) or a change of the token rules, a rerun reused the old tokens."""
    from spacy_elmo.training import data

    path = tmp_path / "t.txt"
    path.write_text("I don't know .\n", encoding="utf-8")
    cache = tmp_path / "cache"
    build_corpus(path, "en", cache, progress=False)
    assert "n't" in Corpus.load(cache).types
    real = data.make_nlp
    with monkeypatch.context() as m:
        m.setattr(data, "make_nlp", lambda lang: real("xx"))  # without English exceptions: "don't" stays whole
        m.setattr(data, "tokenizer_settings", lambda nlp: {"@tokenizers": "spacy.en.OtherTokenizer"})
        meta = build_corpus(path, "en", cache, progress=False)
    assert "don't" in Corpus.load(cache).types and "n't" not in Corpus.load(cache).types
    assert meta["tokenizer"] == {"@tokenizers": "spacy.en.OtherTokenizer"}
    build_corpus(path, "en", cache, progress=False)
    assert "n't" in Corpus.load(cache).types
    assert data.cache_is_current(cache, data.fingerprint(path, "en"))
    with monkeypatch.context() as m:
        m.setattr(data, "TOKEN_RULES", data.TOKEN_RULES + 1)
        assert not data.cache_is_current(cache, data.fingerprint(path, "en"))


def _set_mtime_ns(path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def test_a_same_size_rewrite_within_the_second_of_the_cache_is_seen(tmp_path):
    """The cache recorded whole seconds: text rewritten at the same size within the second the cache was
    built (a script writing the corpus, then pretrain, then a fix) reused the stale tokens."""
    from spacy_elmo.training import data

    path = tmp_path / "t.txt"
    second = 1_700_000_000 * 10**9
    path.write_text("The cat sat .\n", encoding="utf-8")
    _set_mtime_ns(path, second + 100_000_000)
    cache = tmp_path / "cache"
    build_corpus(path, "en", cache, progress=False)
    path.write_text("The dog sat .\n", encoding="utf-8")
    _set_mtime_ns(path, second + 600_000_000)
    assert not data.cache_is_current(cache, data.fingerprint(path, "en"))
    build_corpus(path, "en", cache, progress=False)
    assert "dog" in Corpus.load(cache).types and "cat" not in Corpus.load(cache).types


@pytest.mark.parametrize("nsec", [0, 400_000_000, 999_999_999])
def test_a_cache_with_whole_second_times_stays_current_while_the_files_do(tmp_path, nsec):
    """A cache of an older spacy-elmo recorded ``int(st_mtime)``: it is compared at that precision, so an
    upgrade does not tokenize an unchanged corpus again (nor refuse a --resume over it); a file touched
    since is still seen. 999_999_999 ns: the float st_mtime rounds up to the next second there."""
    import json

    from spacy_elmo.training import data

    path = tmp_path / "t.txt"
    path.write_text("The cat sat .\n", encoding="utf-8")
    _set_mtime_ns(path, 1_700_000_000 * 10**9 + nsec)
    cache = tmp_path / "cache"
    build_corpus(path, "en", cache, progress=False)
    meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    meta["fingerprint"].pop("mtime", None)
    meta["fingerprint"]["files"] = [[f[0], f[1], int(os.stat(f[0]).st_mtime), *f[3:]] for f in meta["fingerprint"]["files"]]
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert data.cache_is_current(cache, data.fingerprint(path, "en"))
    assert data.tokenization_change(cache, data.fingerprint(path, "en")) is None
    assert build_corpus(path, "en", cache, progress=False) == meta  # reused, not rebuilt
    _set_mtime_ns(path, 1_700_000_002 * 10**9 + nsec)
    assert not data.cache_is_current(cache, data.fingerprint(path, "en"))


@pytest.mark.parametrize("content", [None, b"\x00\x01\x02binary"], ids=["missing", "binary"])
def test_tokenize_file_fails_before_drawing_its_bar(tmp_path, capsys, content):
    """``pretrain --heldout missing.txt`` drew "tokenizing missing.txt: 0.00 tok" (twice: opened and closed)
    above the error saying the file does not exist; the text's first piece is now read before the bar."""
    from spacy_elmo.training import data

    path = tmp_path / "held.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises((FileNotFoundError, ValueError), match="does not exist" if content is None else "binary"):
        data.tokenize_file(path, "en", progress=True)
    assert "tokenizing" not in capsys.readouterr().err
    path.write_text("One sentence here. And another one.\n", encoding="utf-8")
    assert data.tokenize_file(path, "en", progress=True) == [["One", "sentence", "here", "."], ["And", "another", "one", "."]]
    assert "tokenizing held.txt" in capsys.readouterr().err
