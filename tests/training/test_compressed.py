"""Compressed text (gzip, bzip2, xz) is read as the text it holds: the same corpus as the plain file,
broken archives and misnamed files are clear errors, and a resumed run continues exactly."""

import gzip
import io
import json
import shlex
import shutil
import tarfile
import warnings
import zipfile

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.training.data import Corpus, build_corpus, fingerprint
from spacy_elmo.training.evaluate import evaluate_model_dir
from spacy_elmo.training.trainer import read_log, train
from tests.cli_text import plain
from tests.compressed import FORMAT_NAMES, FORMATS, compressed

from .conftest import tiny_pretrain_args, tiny_train_config, write_corpus


def awkward_text(path, seed=0):
    """A generated corpus with what the reading must keep or drop alike: a leading BOM, CRLF line ends,
    undecodable bytes, a U+FEFF inside a line, blank lines."""
    text = write_corpus(path, 300, seed=seed).read_bytes()
    path.write_bytes(b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n", 5) + b"caf\xe9 au lait .\n\n  \n"
                     + "The dog sees a \ufefffish .\n".encode())
    return path


def write_bytes(path, data):
    path.write_bytes(data)
    return path


def built(path, cache):
    """The corpus of ``path`` (its cache in ``cache``) and the reading statistics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # replaced bytes, skipped binary files
        meta = build_corpus(path, "en", cache, progress=False)
    return Corpus.load(cache), meta["stats"]


def assert_same_corpus(got, want):
    (a, a_stats), (b, b_stats) = got, want
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.lengths, b.lengths)
    assert a.types == b.types and np.array_equal(a.counts, b.counts)
    assert {k: v for k, v in a_stats.items() if k != "binary_files"} == {
        k: v for k, v in b_stats.items() if k != "binary_files"}


@pytest.mark.parametrize("suffix", FORMATS)
def test_each_format_gives_the_corpus_of_the_plain_text(tmp_path, suffix):
    text = awkward_text(tmp_path / "train.txt")
    want = built(text, tmp_path / "plain")
    assert want[1]["replaced_bytes"] == 1 and want[1]["n_tokens"] > 1000
    assert "\ufefffish" in want[0].types and not any(t.startswith("\ufeff") and t != "\ufefffish" for t in want[0].types)
    assert_same_corpus(built(compressed(text, suffix), tmp_path / "named"), want)
    # known by its bytes, not its name: a .txt that is really compressed is decompressed too
    assert_same_corpus(built(compressed(text, suffix, to=tmp_path / "really.txt"), tmp_path / "unnamed"), want)
    # several streams one after the other (pigz, pbzip2, xz -T, cat a.gz b.gz): all of them are read
    raw = text.read_bytes()
    cut = raw.index(b"\n", len(raw) // 2) + 1
    halves = [compressed(write_bytes(tmp_path / f"half{i}", part), suffix) for i, part in enumerate((raw[:cut], raw[cut:]))]
    joined = tmp_path / ("joined" + suffix)
    joined.write_bytes(b"".join(h.read_bytes() for h in halves))
    assert_same_corpus(built(joined, tmp_path / "joined"), want)


def test_a_resume_hashes_the_text_of_each_format_as_the_tokenizing_pass_did(tmp_path, monkeypatch):
    """same_text (a --resume's check of the text) decoded the whole corpus line by line to hash it (iter_lines): it
    hashes the decompressed bytes in large pieces now, and gets the digest the tokenizing pass took line by line, for
    a plain file of a BOM, CRLF line ends and undecodable bytes and for each format (two streams joined too); other
    text of the same size is told apart."""
    import hashlib

    from spacy_elmo.training import data

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = awkward_text(corpus / "train.txt")
    raw = text.read_bytes()
    for suffix in FORMATS:
        compressed(text, suffix, to=corpus / f"whole{suffix}")
        cut = raw.index(b"\n", len(raw) // 2) + 1
        halves = [compressed(write_bytes(tmp_path / f"half{i}", part), suffix) for i, part in enumerate((raw[:cut], raw[cut:]))]
        (corpus / f"joined{suffix}").write_bytes(b"".join(h.read_bytes() for h in halves))
    built(corpus, tmp_path / "cache")
    recorded = json.loads((tmp_path / "cache" / "meta.json").read_text(encoding="utf-8"))[data.TEXT_DIGESTS]
    assert set(recorded.values()) == {hashlib.sha256(raw).hexdigest()} and len(recorded) == 1 + 2 * len(FORMATS)

    def decoded(*args, **kwargs):
        raise AssertionError("the text decoded line by line to hash it")

    monkeypatch.setattr(data, "iter_lines", decoded)
    assert data.same_text(tmp_path / "cache")
    swapped = raw.replace(b"\r\n", b"\n\r", 1)  # the same bytes, one pair swapped: same size
    assert swapped != raw and len(swapped) == len(raw)
    compressed(write_bytes(tmp_path / "swapped", swapped), ".xz", to=corpus / "joined.xz")
    assert not data.same_text(tmp_path / "cache")


def test_a_mixed_directory_reads_every_format_and_skips_binary_ones_inside_archives(tmp_path):
    plain_dir, mixed = tmp_path / "plain", tmp_path / "mixed"
    plain_dir.mkdir(), mixed.mkdir()
    for seed, (name, suffix) in enumerate([("a.txt", None), ("b.txt", ".gz"), ("c", ".bz2"), ("d.txt", ".xz")]):
        text = awkward_text(plain_dir / name, seed=seed)
        if suffix is None:
            (mixed / name).write_bytes(text.read_bytes())
        else:
            compressed(text, suffix, to=mixed / (name + suffix))
    for directory in (plain_dir, mixed):
        (directory / "e.bin").write_bytes(b"\x00\x01" * 100)
    binary = plain_dir / "f.tar"
    binary.write_bytes(b"tar header\x00\x00" * 50)
    compressed(binary, ".gz", to=mixed / "f.tar.gz")  # NUL bytes once decompressed: skipped as binary
    got = built(mixed, tmp_path / "cache-mixed")
    want = built(plain_dir, tmp_path / "cache-plain")
    assert got[1]["n_files"] == 4 and [p.rsplit("/", 1)[1] for p in got[1]["binary_files"]] == ["e.bin", "f.tar.gz"]
    assert_same_corpus(got, want)


def _tar(gnu=False):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT if gnu else tarfile.PAX_FORMAT) as tar:
        text = b"The cat sat on the mat .\n"
        member = tarfile.TarInfo("a.txt")
        member.size = len(text)
        tar.addfile(member, io.BytesIO(text))
    return buffer.getvalue()


def _zip(*members, stored_first=False):
    """A zip of ``members`` ``(name, text)`` (one text file by default); ``stored_first``: its first member stored,
    not deflated (an OpenDocument's or EPUB's ``mimetype``)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for i, (name, text) in enumerate(members or [("a.txt", "The cat sat on the mat .\n")]):
            archive.writestr(name, text, zipfile.ZIP_STORED if stored_first and i == 0 else zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


ZSTD = bytes.fromhex("28b52ffd0458c100005468652063617420736174206f6e20746865206d61742e0aa6f49df3")
LZ4 = bytes.fromhex("04224d186440a7180000805468652063617420736174206f6e20746865206d61742e0a00000000db5f755e")
WORD = _zip(("[Content_Types].xml", "<Types/>"), ("word/document.xml", "<w:document><w:t>Hi</w:t></w:document>"))
EPUB = _zip(("mimetype", "application/epub+zip"), ("OEBPS/a.xhtml", "<html>Hi</html>"), stored_first=True)
ODT = _zip(("mimetype", "application/vnd.oasis.opendocument.text"), ("content.xml", "<office:text/>"), stored_first=True)
OFFICE = "an Office Open XML file (.docx, .docm, .xlsx, .xlsm, .pptx, .pptm: a zip archive of XML and more, not its text)"
EXPORT = "`pandoc -f docx {path} -t plain -o NEW.txt`"  # -f: one known by its content may have another name
UNPACK_ZIP = "If it holds text files, unpack it (`unzip {path} -d NEW_DIR`) and pass NEW_DIR"
#: Files of formats spacy-elmo does not read: name -> (bytes, what the error calls them, the command it gives; in a
#: directory's warning NEW_DIR and NEW.txt are in the corpus directory, and nothing is passed).
#: zstd and lz4: the frames their tools write of "The cat sat on the mat.\n"; zstd's magic before text without a
#: NUL byte was read as text (its undecodable bytes replaced); 7z: its signature header's start. A .tar.zst and a
#: .tar.lz4 (a tar once decompressed, by their names) were told to be decompressed into NEW.txt, which is refused;
#: zip documents (.docx, .odt, .epub: known by their first member, else their name) to be unzipped and NEW_DIR passed,
#: which trained on their XML.
UNREAD = {
    "c.zst": (ZSTD, "zstd-compressed data", "`zstd -dc {path} > NEW.txt`"),
    "text.zst": (b"\x28\xb5\x2f\xfdThe cat sat on the mat .\n", "zstd-compressed data", "`zstd -dc {path} | gzip > NEW.txt.gz`"),
    "c.lz4": (LZ4, "lz4-compressed data", "`lz4 -dc {path} > NEW.txt`"),
    "c.tar.zst": (ZSTD, "a tar archive of files compressed with zstd (by its name)",
                  "If it holds text files, unpack it (`mkdir NEW_DIR && zstd -dc {path} | tar -x -C NEW_DIR`)"),
    "c.TAR.LZ4": (LZ4, "a tar archive of files compressed with lz4 (by its name)", "`mkdir NEW_DIR && lz4 -dc {path} | tar -x -C NEW_DIR`"),
    "c.zip": (_zip(), "a zip archive of files", UNPACK_ZIP),
    "c.jar": (_zip(("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")), "a zip archive of files", UNPACK_ZIP),
    "c.7z": (b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(24), "a 7z archive of files", "`7z x {path} -oNEW_DIR`"),
    "c.tar": (_tar(), "a tar archive of files", "`mkdir NEW_DIR && tar -xf {path} -C NEW_DIR`"),
    "gnu.tar": (_tar(gnu=True), "a tar archive of files", "`mkdir NEW_DIR && tar -xf {path} -C NEW_DIR`"),
    "c.tar.gz": (gzip.compress(_tar()), "a tar archive of files", "`mkdir NEW_DIR && tar -xf {path} -C NEW_DIR`"),
    "report.docx": (WORD, OFFICE, EXPORT),
    "word.zip": (_zip(("word/document.xml", "<w:document/>")), OFFICE, EXPORT),  # by its first member
    "ppt.zip": (_zip(("ppt/presentation.xml", "<p:presentation/>")), OFFICE, EXPORT),
    "rels.zip": (_zip(("_rels/.rels", "<Relationships/>")), OFFICE, EXPORT),
    # a zip of folders named as Office's parts, of text files: first members once taken for an Office document's
    "my_corpus.zip": (_zip(("word/a.txt", "The cat sat on the mat .\n"), ("word/b.txt", "More .\n")),
                      "a zip archive of files", UNPACK_ZIP),
    "slides_text.zip": (_zip(("ppt/notes.txt", "The cat sat on the mat .\n")), "a zip archive of files", UNPACK_ZIP),
    "x.zip": (_zip(("_rels/readme.txt", "The cat sat on the mat .\n")), "a zip archive of files", UNPACK_ZIP),
    "named.xlsx": (_zip(), OFFICE, EXPORT),  # by its name
    "book.zip": (EPUB, "an EPUB file (.epub: a zip archive of XML and more, not its text)",
                 EXPORT.replace("docx", "epub")),
    "letter.bin": (ODT, "an OpenDocument file (.odt, .ods, .odp, .odg: a zip archive of XML and more, not its text)",
                   EXPORT.replace("docx", "odt")),
}


@pytest.mark.parametrize("name", list(UNREAD))
def test_a_compression_or_archive_not_read_is_named_with_its_fix_alone_and_skipped_so_in_a_directory(tmp_path, name):
    """A .zst, .lz4, .zip, .7z or .tar(.gz) was "a binary file (it contains NUL bytes) ... Pass plain text (or gzip,
    bzip2 or xz of it)", a .tar.gz one that is gzip, and a zstd stream without a NUL byte in its first 8 KiB was read
    as text. Each is known by its first bytes (decompressed) and named, with the command that makes text of it:
    alone, one that makes text to pass instead; in a directory, one that puts the text into the corpus directory."""
    data, what, command = UNREAD[name]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus / "a.txt", 50)
    path = write_bytes(corpus / name, data)
    with pytest.raises(ValueError) as refused:
        build_corpus(path, "en", tmp_path / "cache-alone", progress=False)
    said = plain(str(refused.value))
    assert said.startswith(f"{path} holds {what}, which spacy-elmo does not read: it reads UTF-8 text, plain or "
                           "compressed with gzip, bzip2 or xz"), said
    assert command.format(path=path) in said and "NUL" not in said, said
    assert ("and pass NEW_DIR" in said) == ("NEW_DIR" in command), said
    with pytest.warns(RuntimeWarning) as caught:
        meta = build_corpus(corpus, "en", tmp_path / "cache-dir", progress=False)
    skipped = [str(w.message) for w in caught if "skipped" in str(w.message)]
    assert len(skipped) == 1 and skipped[0].startswith(f"spacy-elmo: skipped {path}: it holds {what}, which "
                                                       "spacy-elmo does not read."), skipped
    stem = name.split(".")[0]  # what is made of it is named after it: c.txt, c.txt.gz, the directory c
    in_corpus = command[command.index("`") : command.rindex("`") + 1].format(path=path).replace("NEW_DIR", f"{corpus}/{stem}")
    assert in_corpus.replace("NEW.txt", f"{corpus}/{stem}.txt") in skipped[0], skipped
    assert "into the corpus" in skipped[0] and " pass " not in skipped[0], skipped
    assert meta["stats"]["n_files"] == 1 and meta["stats"]["n_binary"] == 1


def test_the_fixes_of_files_skipped_in_one_directory_make_paths_named_after_each_never_one_path(tmp_path):
    """Every skipped file of a directory was told to make the same DIR/NEW.txt, DIR/NEW.txt.gz or DIR/NEW_DIR: the
    command for the second overwrote what the first made. Each is named after its file, shell-quoted, and a name taken
    (a.txt beside a.zst) is not overwritten: the file's whole name then .txt (or .d for a directory), as when
    another file has the same stem (p.zst and p.lz4 were both told p.txt)."""
    from spacy_elmo.training.data import not_utf8, skipped_warning

    corpus = tmp_path / "my corpus"
    corpus.mkdir()
    text = write_corpus(corpus / "a.txt", 5).read_text()
    write_corpus(corpus / "q.txt", 5)  # q's whole name then .txt is taken too: a number
    files = {name: write_bytes(corpus / name, data) for name, data in
             (("a.zst", ZSTD), ("b.zst", ZSTD), ("c.lz4", LZ4), ("d.tar.gz", gzip.compress(_tar())), ("e.zip", _zip()),
              ("f.tar.zst", ZSTD), ("g.docx", WORD), ("h", _zip()), ("p.zst", ZSTD), ("p.lz4", LZ4),
              ("q", ZSTD))}
    said = {name: skipped_warning(path, not_utf8(path)) for name, path in files.items()}

    def q(made):
        return shlex.quote(str(corpus / made))

    expected = {
        "a.zst": [f"> {q('a.zst.txt')}`", f"| gzip > {q('a.zst.txt.gz')}`"],
        "b.zst": [f"> {q('b.txt')}`", f"| gzip > {q('b.txt.gz')}`"],
        "c.lz4": [f"> {q('c.txt')}`"],
        "d.tar.gz": [f"mkdir {q('d')} && tar -xf"],
        "e.zip": [f"-d {q('e')}`"],
        "f.tar.zst": [f"mkdir {q('f')} && zstd -dc"],
        "g.docx": [f"-o {q('g.txt')}`"],
        "h": [f"-d {q('h.d')}`"],
        "p.zst": [f"> {q('p.zst.txt')}`", f"| gzip > {q('p.zst.txt.gz')}`"],
        "p.lz4": [f"> {q('p.lz4.txt')}`", f"| gzip > {q('p.lz4.txt.gz')}`"],
        "q": [f"> {q('q.1.txt')}`", f"| gzip > {q('q.txt.gz')}`"],
    }
    for name, parts in expected.items():
        for part in parts:
            assert part in said[name], said[name]
        assert "NEW" not in said[name], said[name]
        # left in the corpus, the next run tells another output (a.zst.txt then): the text read twice
        assert "move it out of the corpus directory" in said[name], said[name]
    assert (corpus / "a.txt").read_text() == text


def test_utf16_files_skipped_in_one_directory_are_told_to_re_encode_into_paths_named_after_each(tmp_path):
    """Every UTF-16 or UTF-32 file skipped in a directory was told `iconv ... > NEW.txt` (in the current directory):
    the command for the second overwrote what the first made. Each is re-encoded into the corpus beside it, named
    after it (u.utf8.txt of u.txt), shell-quoted; a name taken is not overwritten (the file's whole name then
    .utf8.txt); and what the command makes is read (once the UTF-16 files are moved out)."""
    import subprocess

    from spacy_elmo.training.data import not_utf8, skipped_warning

    corpus = tmp_path / "my corpus"
    corpus.mkdir()
    write_corpus(corpus / "a.txt", 5)
    text = "The cat sat on the mat .\n"
    files = {name: write_bytes(corpus / name, text.encode(codec)) for name, codec in
             (("u.txt", "utf-16"), ("v.txt", "utf-16-le"), ("w", "utf-32"), ("x.txt.docx", "utf-16"), ("a.csv", "utf-16"),
              ("p.txt", "utf-16"), ("p.csv", "utf-16"))}
    write_corpus(corpus / "a.utf8.txt", 2)  # taken: a.csv's is a.csv.utf8.txt
    said = {name: skipped_warning(path, not_utf8(path)) for name, path in files.items()}
    made = {"u.txt": "u.utf8.txt", "v.txt": "v.utf8.txt", "w": "w.utf8.txt", "x.txt.docx": "x.txt.utf8.txt",
            "a.csv": "a.csv.utf8.txt", "p.txt": "p.txt.utf8.txt", "p.csv": "p.csv.utf8.txt"}  # p.txt, p.csv: not one p.utf8.txt
    for name, output in made.items():
        command = f"`iconv -f {not_utf8(files[name])} -t UTF-8 {shlex.quote(str(files[name]))} > {shlex.quote(str(corpus / output))}`"
        assert command in said[name] and "NEW" not in said[name] and "into the corpus" in said[name], said[name]
        assert "move it out of the corpus directory" in said[name], said[name]
    with pytest.warns(RuntimeWarning) as caught:
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    assert sorted(str(w.message) for w in caught if "skipped" in str(w.message)) == sorted(said.values())
    # the commands, run, make UTF-8 text of each, read as the corpus's
    if shutil.which("iconv") is None:
        pytest.skip("iconv is not installed: the commands the warnings give were checked, not run")
    outside = tmp_path / "wide"
    outside.mkdir()
    for name, path in files.items():
        command = said[name][said[name].index("`") + 1 : said[name].rindex("`")]
        subprocess.run(command, shell=True, check=True)
        path.rename(outside / name)
        assert (corpus / made[name]).read_text(encoding="utf-8") == text
    meta = build_corpus(corpus, "en", tmp_path / "cache2", progress=False)
    assert meta["stats"]["n_files"] == 2 + len(made) and meta["stats"]["n_binary"] == 0


def test_the_first_bytes_of_a_format_inside_a_text_are_read_as_text(tmp_path):
    """Formats are known by a file's first bytes only: a text holding their magic bytes in a line (a zip's, 7z's,
    zstd's, lz4's, gzip's, bzip2's) is read as text, alone and in a directory, without a warning of a skipped file
    (searched for anywhere, they called it a zip archive)."""
    from spacy_elmo.training.data import compression, not_utf8

    line = (b"The cat sat . PK\x03\x04 7z\xbc\xaf\x27\x1c \x28\xb5\x2f\xfd \x04\x22\x4d\x18 \x1f\x8b\x08 "
            b"BZh91AY&SY .\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    path = write_bytes(corpus / "magic.txt", line * 20)
    near = write_bytes(tmp_path / "near.txt", b"a \x1f\x8b\x08 gz ; PK\x03\x04 .\n")  # within the bytes compression() reads
    for text in (path, near):
        assert not_utf8(text) is None and compression(text) is None
    for train_path in (path, corpus):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            meta = build_corpus(train_path, "en", tmp_path / f"cache-{train_path.name}", progress=False)
        assert meta["stats"]["n_files"] == 1 and meta["stats"]["n_binary"] == 0
        assert not [w for w in caught if "skipped" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize("damage", ["truncated", "damaged"])
@pytest.mark.parametrize("suffix", FORMATS)
def test_a_broken_archive_is_an_error_naming_it_alone_or_in_a_directory(tmp_path, suffix, damage):
    text = write_corpus(tmp_path / "train.txt", 600)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(text.read_bytes())  # read first: the bad archive comes later
    broken = compressed(text, suffix, to=corpus / ("b.txt" + suffix), damage=damage)
    expected = "it ends before the end of its compressed data" if damage == "truncated" else "its compressed data is damaged"
    for path in (broken, corpus):  # a directory is not silently trained on without it
        cache = tmp_path / f"cache-{path.name}"
        with pytest.raises(ValueError, match=f"{broken} is a broken {FORMAT_NAMES[suffix]} file: {expected}"):
            build_corpus(path, "en", cache, progress=False)
        assert not (cache / "meta.json").exists()  # no cache of the text before the damage


@pytest.mark.parametrize("after", ["damaged next stream", "garbage"])
@pytest.mark.parametrize("suffix", FORMATS)
def test_what_follows_a_stream_is_read_or_an_error_never_dropped(tmp_path, suffix, after):
    """The stdlib's bzip2 and xz readers end the text at the first stream when what follows does not
    decode as a next stream: half of a multistream dump went missing without a word."""
    text = write_corpus(tmp_path / "train.txt", 300)
    raw = text.read_bytes()
    cut = raw.index(b"\n", len(raw) // 2) + 1
    first, second = (compressed(write_bytes(tmp_path / f"half{i}", part), suffix).read_bytes()
                     for i, part in enumerate((raw[:cut], raw[cut:])))
    joined = bytearray(first + b"\0" * 8 + second)  # NUL padding between streams is allowed
    write_bytes(tmp_path / ("ok" + suffix), bytes(joined))
    assert_same_corpus(built(tmp_path / ("ok" + suffix), tmp_path / "cache-ok"), built(text, tmp_path / "cache-plain"))
    if after == "garbage":
        joined += b"this is no compressed stream at all"
    else:
        joined[len(first) + 8 + 1] ^= 0xFF
    broken = write_bytes(tmp_path / ("broken" + suffix), bytes(joined))
    with pytest.raises(ValueError, match=f"broken{suffix} is a broken {FORMAT_NAMES[suffix]} file: its compressed data is damaged"):
        build_corpus(broken, "en", tmp_path / "cache", progress=False)


def test_a_header_only_archive_is_truncated(tmp_path):
    (tmp_path / "t.gz").write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(ValueError, match="t.gz is a broken gzip file: it ends before"):
        build_corpus(tmp_path / "t.gz", "en", tmp_path / "cache", progress=False)


@pytest.mark.parametrize("suffix", sorted(FORMAT_NAMES))
def test_an_empty_archive_is_broken_not_misnamed(tmp_path, suffix):
    """A 0-byte .gz is a download that never arrived: it said 'not gzip data ... rename it'."""
    (tmp_path / f"e{suffix}").write_bytes(b"")
    with pytest.raises(ValueError, match=f"e{suffix} is a broken {FORMAT_NAMES[suffix]} file: it is empty, 0 bytes"):
        build_corpus(tmp_path / f"e{suffix}", "en", tmp_path / "cache", progress=False)


def test_a_compressed_name_must_hold_that_format(tmp_path):
    text = write_corpus(tmp_path / "train.txt", 30)
    misnamed = tmp_path / "plain.gz"
    misnamed.write_bytes(text.read_bytes())
    with pytest.raises(ValueError, match=r"plain.gz is named .gz but is not gzip data"):
        build_corpus(misnamed, "en", tmp_path / "cache", progress=False)
    other = compressed(text, ".xz", to=tmp_path / "other.bz2")
    with pytest.raises(ValueError, match=r"other.bz2 is named .bz2 but holds xz data, not bzip2. Rename it to end in .xz"):
        build_corpus(other, "en", tmp_path / "cache", progress=False)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(text.read_bytes())
    (corpus / "b.gz").write_bytes(text.read_bytes())
    with pytest.raises(ValueError, match=r"b.gz is named .gz but is not gzip data"):
        build_corpus(corpus, "en", tmp_path / "cache", progress=False)
    # A text that merely starts like a bzip2 header ("BZh") is text.
    bzh = tmp_path / "bzh.txt"
    bzh.write_text("BZh9 is no archive .\n", encoding="utf-8")
    assert build_corpus(bzh, "en", tmp_path / "cache-bzh", progress=False)["stats"]["n_tokens"] == 5


def test_a_cache_that_skipped_compressed_files_is_rebuilt_one_of_plain_files_is_not(tmp_path):
    """spacy-elmo skipped compressed files as binary, and its fingerprint (path, size, mtime) of such a
    file is the same now: without the format in it, its cache of the directory without them was reused."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus / "a.txt", 30)
    compressed(write_corpus(tmp_path / "b.txt", 30, seed=1), ".gz", to=corpus / "b.txt.gz")
    cache = tmp_path / "cache"
    both = build_corpus(corpus, "en", cache, progress=False)
    assert both["stats"]["n_files"] == 2
    plain_only = build_corpus(corpus / "a.txt", "en", tmp_path / "cache-a", progress=False)["fingerprint"]
    assert plain_only == fingerprint(corpus / "a.txt", "en")  # a plain file's entry is what it was
    assert [len(f) for f in plain_only["files"]] == [3]
    # the cache an older spacy-elmo left: the .gz skipped as binary, its entry without a format
    meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    meta["fingerprint"]["files"] = [entry[:3] for entry in meta["fingerprint"]["files"]]
    meta["stats"].update(n_files=1, n_binary=1)
    (cache / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert build_corpus(corpus, "en", cache, progress=False)["stats"] == both["stats"]


def test_a_resumed_run_over_compressed_text_continues_exactly_as_over_the_plain_text(tmp_path):
    train_file = write_corpus(tmp_path / "train.txt", 300)
    held = write_corpus(tmp_path / "held.txt", 30, seed=7)
    N = 5
    straight = tmp_path / "straight"
    train(tiny_train_config(train_file, straight, max_steps=2 * N, checkpoint_every=N, log_every=3, heldout=str(held)))

    packed, packed_held = compressed(train_file, ".xz"), compressed(held, ".bz2")
    killed = tmp_path / "killed"

    def crash(step, loss):
        if step == N + 2:
            raise KeyboardInterrupt

    settings = dict(max_steps=2 * N, checkpoint_every=N, log_every=3, heldout=str(packed_held))
    with pytest.raises(KeyboardInterrupt):
        train(tiny_train_config(packed, killed, **settings), on_step=crash)
    cached = (killed / "data" / "meta.json").read_bytes()
    train(tiny_train_config(packed, killed, resume=True, **settings))
    assert (killed / "data" / "meta.json").read_bytes() == cached  # the cache of the archive was reused
    for key in ("loss", "perplexity"):
        a = [e[key] for e in read_log(straight) if key in e]
        b = [e[key] for e in read_log(killed) if key in e]
        assert len(a) == len(b) > 0
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    wa, wb = BiLM.load(straight).state_dict(), BiLM.load(killed).state_dict()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-6, atol=1e-7)
    # evaluate reads the archive as the text
    assert evaluate_model_dir(killed, compressed(held, ".gz")) == evaluate_model_dir(killed, held)


@pytest.mark.parametrize("where", ["train", "heldout"])
def test_pretrain_on_a_truncated_archive_says_so_without_a_traceback(tmp_path, where):
    args, train_file, _ = tiny_pretrain_args(tmp_path, tmp_path / "out")
    broken = compressed(train_file, ".gz", damage="truncated")
    args = [str(broken) if a == str(train_file) else a for a in args] if where == "train" else args + ["--heldout", str(broken)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert f"{broken} is a broken gzip file: it ends before the end of its compressed data" in plain(result.output)
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


def test_a_directory_of_skipped_files_is_listed_once_for_their_fix_names(tmp_path, monkeypatch):
    """Each skipped file's fix names an output after it, checked against the directory's other entries: listed once
    per file, a directory of 2,000 zstd shards took 45 s of listing before the corpus was found empty. It is listed
    once while unchanged, and again once changed (a file the user made meanwhile is seen)."""
    from spacy_elmo.training import data

    for i in range(5):
        (tmp_path / f"s{i}.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"x" * 20)
    listed = []
    real = data.os.listdir
    monkeypatch.setattr(data.os, "listdir", lambda p: listed.append(p) or real(p))
    names = [data._beside(tmp_path / f"s{i}.zst", ".txt").name for i in range(5)]
    assert names == [f"s{i}.txt" for i in range(5)] and len(listed) == 1, (names, listed)
    (tmp_path / "s0.lz4").write_bytes(b"\x04\x22\x4d\x18")
    assert data._beside(tmp_path / "s0.zst", ".txt").name == "s0.zst.txt" and len(listed) == 2
