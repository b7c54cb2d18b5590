"""Reading a text corpus into a token-id cache (streaming; spaCy only here).

``build_corpus`` reads TRAIN_PATH (a file, or a directory of files, recursively (linked directories once),
hidden files skipped), tokenizes with the spaCy tokenizer of ``lang`` (or the block ``pretrain --tokenizer`` gave: :func:`make_nlp`) plus a
sentencizer (the same tokens the pipeline component sees), and writes into
``cache_dir``:

* ``tokens.i32``: every sentence as ``<S> t1 .. tn </S>``, as type ids (int32);
* ``sent_lengths.i64``: the length of every sentence, markers included;
* ``types.txt``: all distinct tokens, specials first, then by descending count;
* ``counts.i64``: the count of each type; ``meta.json``: reading statistics, the files' fingerprint (sizes,
  times) and the sha256 of each file's text taken as it was read (:data:`TEXT_DIGESTS`, which a resume checks).

A byte order mark at the start of a file (of each file of a directory) is not
text and is dropped (:func:`iter_lines`, which ``embed`` reads with too); one
elsewhere is the character U+FEFF and stays part of its token, as in the pipeline,
which reads it so (counted and warned of once per file: files joined with ``cat``). The cache records
what decides its tokens (:func:`tokenization`: spaCy's tokenizer block, a digest of
its rules and the sentencizer's, and ``TOKEN_RULES``), so text read otherwise is
tokenized again.

Every user text file (TRAIN_PATH, ``--heldout``, the text of ``evaluate``, ``fit-state`` and
``embed``) is opened by :func:`open_text_file`: gzip, bzip2 and xz files, known by their first
bytes whatever their name, are decompressed as they are read (streamed, never whole in memory),
and everything below applies to the decompressed text. A file named ``.gz``, ``.bz2`` or ``.xz``
that is not that format, and a damaged or truncated archive, are errors naming the file, also
inside a directory: training on the part of a corpus before the damage would silently be
training on less.

The text is read and decoded in this process; :func:`sentence_stream` hands it in batches to worker
processes (``build_corpus(processes=N)``, ``pretrain --tokenize-processes``) and takes their
sentences back in the text's order, so the cache is the same whatever their number.

Defined behaviour for bad input: undecodable bytes are replaced by U+FFFD and
counted (reported once, never an error); a file with NUL bytes in its first
8 KiB (decompressed) is binary, or UTF-16 or UTF-32 text when they say so, and one that starts as a zstd or lz4
stream or a zip, 7z or tar archive (a ``.tar.gz`` once decompressed; a zip that is a .docx, .odt or .epub document,
whose text is exported, not unpacked) holds no text read (:func:`not_utf8`): an error when it is TRAIN_PATH itself,
skipped with a warning inside a directory, each with how to make text of it (:func:`unread_format`) (NUL bytes after them are kept, counted
and warned of once per file: :func:`iter_text`, as are lines holding a ``\\r``); a stretch of more than ``RUN_CHARS`` characters without whitespace that spaCy's
rule-based tokenizer strips affixes from one at a time (time quadratic in it), or longer than ``RUN_CAP``, is cut
every ``RUN_CHARS`` characters, never between a character and what continues it (:func:`cut_runs`; other tokenizers and other stretches: none), counted and reported once per file; a line longer than ``PIECE_CHARS`` characters is tokenized
in whitespace-split pieces (:func:`split_long`); a corpus without tokens is an error; a cache file that holds
other than its meta.json counts (cut short) is built anew, and an error where read (:func:`cache_damage`).
"""

import bz2
import codecs
import fnmatch
import functools
import gzip
import hashlib
import io
import itertools
import json
import lzma
import multiprocessing
import os
import queue
import re
import shutil
import signal
import traceback
import unicodedata
import warnings
import zlib
from array import array
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .._typing import PathLike
from ..atomic import atomic_write_text, naming, sync, sync_dir, temporary_files
from ..errors import Errors, TokenizerMismatchWarning, Warnings, counted, listed
from ..paths import broken_link_error, file_identity, missing_path_error, name_shown, read_json_file, shell_quoted, stream_sha256
from .vocab import BOS, EOS, SPECIALS

BINARY_PROBE = 8192
#: Longest piece of text handed to spaCy at once (its own limit is 1,000,000).
PIECE_CHARS = 100_000
#: Longest stretch of text without whitespace handed to spaCy's rule-based tokenizer when it would strip
#: more than ``AFFIX_ROUNDS`` affixes from it or it is longer than ``RUN_CAP`` (:func:`cut_runs`): it strips a prefix or suffix at a time and
#: copies the rest, in time quadratic in the stretch: 20,000 U+FFFD (what undecodable bytes become), ``!`` or
#: emoji took 27 s, a 40 KB file of 0xFF bytes 121 s; cut at 200, a stretch costs about 3 ms (measured: 1,000:
#: 60-150 ms).
RUN_CHARS = 200
#: Longest stretch without whitespace :func:`cut_runs` may leave whole (a long URL is well under it): a
#: longer one is cut undecided. Its ``url_match`` alone is quadratic in a stretch with many colons (80,000
#: characters of ``a:`` took 22 s, 40 KB of minified CSS or JSON about 1 s) and deciding costs ``AFFIX_ROUNDS + 1``
#: regex searches of it (0.7 s on 100,000 emoji); on 2,000 characters each is at most about 0.02 s.
RUN_CAP = 2_000
CACHE_VERSION = 1
#: The files of a corpus cache (:func:`build_corpus`; ``tokens.raw`` only while it is built).
CACHE_FILES = ("meta.json", "tokens.raw", "tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt")
#: The corpus cache's directory in a pretrain OUTPUT_DIR (``OUTPUT_DIR/data``); its ``meta.json`` marks it complete.
CACHE_DIR = "data"
#: Version of what pretraining (and evaluate, fit-state) does to text around spaCy's tokenizer; bump it when
#: that changes the tokens (corpus caches of another version are not reused; embed, which tokenizes as the
#: pipeline does, has its own: ``embedding.EMBED_TOKEN_RULES``). 2: a leading byte order mark
#: is dropped (it stuck to the first token), spaCy's whitespace tokens are left out.
#: 3: a stretch of more than ``RUN_CHARS`` characters without whitespace is cut (:func:`cut_runs`).
#: 4: cut for spaCy's rule-based tokenizer only, and only a stretch it is slow on (3 cut Japanese and Thai
#: words, and URLs spaCy keeps whole). 5: a stretch longer than ``RUN_CAP`` is cut too (4 left one of any
#: length whole when it took few affixes, and spaCy's ``url_match`` is quadratic on colons). 6: a cut is moved
#: back to keep a character with what continues it (:func:`_cut_pieces`; 5 cut NFD accents, NFD Hangul
#: syllables and emoji ZWJ sequences apart). 7: a line longer than ``PIECE_CHARS`` is cut at any whitespace
#: (:func:`split_long`; 6 cut at spaces and tabs only, inside a word of text separated by others).
TOKEN_RULES = 7
BOM = "\ufeff"

READ_BLOCK = 1 << 16
#: Bytes of text between two reports of :func:`iter_lines`'s ``on_read`` (a progress bar's position).
ON_READ_BYTES = 1 << 20


class _Streams(io.RawIOBase):
    """The decompressed bytes of a file of one or more bzip2 or xz streams (pbzip2, Wikipedia's
    multistream dumps, ``xz -T``, ``cat a.bz2 b.bz2``), NUL padding between them skipped. Unlike the
    stdlib's BZ2File and LZMAFile, which end the text silently at anything after a stream that does
    not decode as a next one (a damaged stream header, say), anything else is an error: the
    decompressor's for bytes that are no stream, EOFError for a file that ends inside one."""

    def __init__(self, path: Path, decompressor):
        super().__init__()
        self._fp = open(path, "rb")
        self._new = decompressor
        self._d = decompressor()

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        """The compressed file's descriptor (its position: how much of the file was read, :func:`iter_lines`)."""
        return self._fp.fileno()

    def readinto(self, buffer) -> int:
        while True:
            if self._d.eof:  # a stream ended: padding, another stream or the end of the file
                rest = self._d.unused_data.lstrip(b"\0")
                while not rest:
                    block = self._fp.read(READ_BLOCK)
                    if not block:
                        return 0
                    rest = block.lstrip(b"\0")
                self._d = self._new()
                data = self._d.decompress(rest, len(buffer))
            elif self._d.needs_input:
                block = self._fp.read(READ_BLOCK)
                if not block:
                    raise EOFError("the file ends inside a compressed stream")
                data = self._d.decompress(block, len(buffer))
            else:
                data = self._d.decompress(b"", len(buffer))
            if data:
                buffer[: len(data)] = data
                return len(data)

    def close(self) -> None:
        self._fp.close()
        super().close()


def _streams_of(decompressor):
    """An opener of :class:`_Streams` of ``decompressor``, buffered (lines are read from it)."""
    return lambda path: io.BufferedReader(_Streams(path, decompressor), READ_BLOCK)


#: Compressed formats read transparently: name -> (the start of every such file, an opener of its
#: decompressed bytes). bzip2's magic includes its first block's (or the empty stream's) marker,
#: so a text that starts with "BZh" is not taken for bzip2. gzip's reader is the stdlib's: it reads
#: every member and refuses anything else after one.
COMPRESSIONS = {
    "gzip": (re.compile(rb"\x1f\x8b\x08"), gzip.GzipFile),
    "bzip2": (re.compile(rb"BZh[1-9](?:\x31\x41\x59\x26\x53\x59|\x17\x72\x45\x38\x50\x90)"), _streams_of(bz2.BZ2Decompressor)),
    "xz": (re.compile(rb"\xfd7zXZ\x00"), _streams_of(lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ))),
}
#: The name endings that promise a compressed format (a file named so must be that format).
SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}
MAGIC_BYTES = 10
#: Compressions not read (:data:`COMPRESSIONS` are): name -> (the start of every such file, the tool that
#: decompresses it with ``-dc``). They were called binary (NUL bytes), or read as text of undecodable bytes.
UNREAD_COMPRESSIONS = {
    "zstd": (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
    "lz4": (re.compile(rb"\x04\x22\x4d\x18"), "lz4"),
}
#: Archives of files, no text stream: name -> (the start of such a file, decompressed (a ``.tar.gz`` holds a
#: tar archive), the shell command that unpacks it into a new directory ``{dir}``, ``{path}`` the file's). tar's
#: magic with its version (POSIX ``ustar\0`` ``00``, GNU ``ustar `` `` \0``) holds a NUL byte: no text has it
#: at offset 257.
ARCHIVES = {
    "zip": (re.compile(rb"PK(?:\x03\x04|\x05\x06|\x07\x08)"), "unzip {path} -d {dir}"),
    "7z": (re.compile(rb"7z\xbc\xaf\x27\x1c"), "7z x {path} -o{dir}"),
    "tar": (re.compile(rb".{257}ustar(?:\x0000|  \x00)", re.DOTALL), "mkdir {dir} && tar -xf {path} -C {dir}"),
}
#: Documents that are zip archives of XML, whose text a program exports (:func:`_zip_document`): name -> the
#: name endings they have. Unpacked, they are XML: markup that pretraining would read as text.
DOCUMENTS = {
    "Office Open XML": (".docx", ".docm", ".xlsx", ".xlsm", ".pptx", ".pptm"),
    "OpenDocument": (".odt", ".ods", ".odp", ".odg"),
    "EPUB": (".epub",),
}
#: pandoc's input format (``-f``) of each of :data:`DOCUMENTS`: one known by its content may have another name
#: ending, from which pandoc would guess Markdown
PANDOC_FORMATS = {"Office Open XML": "docx", "OpenDocument": "odt", "EPUB": "epub"}
#: The first member names of an Office Open XML zip (Word writes ``[Content_Types].xml`` first, others a part:
#: ``_rels/.rels`` or an XML part of docProps/, word/, xl/, ppt/), matched whole: a zip of a folder named word/
#: holding text files is no document
_OOXML_FIRST = re.compile(rb"\[Content_Types\]\.xml|_rels/\.rels|(?:docProps|word|xl|ppt)/[^/]+\.xml")
#: Name endings of a tar archive compressed with a compression not read (:data:`UNREAD_COMPRESSIONS`)
COMPRESSED_TAR = (".tar.zst", ".tar.zstd", ".tzst", ".tar.lz4")

_replaced = [0]


def _count_and_replace(err: UnicodeDecodeError):
    _replaced[0] += err.end - err.start
    return "\ufffd", err.end


# only decode_utf8 uses it: the handler gets UnicodeDecodeErrors, not any UnicodeError
codecs.register_error("spacy_elmo.count_replace", _count_and_replace)  # type: ignore[arg-type]


def decode_utf8(raw: bytes) -> str:
    """UTF-8 text of ``raw``; undecodable bytes become U+FFFD and are counted."""
    return raw.decode("utf-8", errors="spacy_elmo.count_replace")


def replaced_bytes_so_far() -> int:
    """Undecodable bytes replaced by :func:`decode_utf8` in this process so far."""
    return _replaced[0]


def iter_lines(path: PathLike, digest: Optional[Any] = None, on_read: Optional[Callable[[int], None]] = None) -> Iterator[str]:
    """Every line of the file ``path`` (:func:`decode_utf8`), without its ``\\n`` and any ``\\r`` before it.

    Lines end at ``\\n`` only (UTF-8 never has 0x0A inside a character). A byte order mark at the
    start of the file is dropped (editors on Windows write one; it stuck to the first token); one
    elsewhere is the character U+FEFF and is kept. ``digest`` (a ``hashlib`` object), when given, is
    updated with every byte read (decompressed, before decoding): read to the end, it is the digest of
    the file's text in the same pass (``embed``'s parts manifest: the same text gzipped, bzipped or plain
    has the same digest). ``on_read``, when given, is called with how many bytes of the file itself (as on the
    disk, compressed or not) were read so far, after about every MiB of text and at the end: a progress bar's
    position in the file's size.
    """
    with open_text_file(path) as f:
        since = 0  # bytes of text since the last on_read
        for n, raw in enumerate(f):
            if digest is not None:
                digest.update(raw)
            if on_read is not None:
                since += len(raw)
                if since >= ON_READ_BYTES:
                    on_read(os.lseek(f.fileno(), 0, os.SEEK_CUR))  # read ahead by the buffers: at most a block
                    since = 0
            line = decode_utf8(raw).rstrip("\r\n")
            yield line.removeprefix(BOM) if n == 0 else line
        if on_read is not None:
            on_read(os.lseek(f.fileno(), 0, os.SEEK_CUR))


def compression(path: PathLike) -> Optional[str]:
    """The :data:`COMPRESSIONS` format of the file ``path`` by its first bytes (None: not compressed);
    ValueError when its name ends in a :data:`SUFFIXES` ending whose format its bytes are not."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(MAGIC_BYTES)
    found = next((name for name, (magic, _) in COMPRESSIONS.items() if magic.match(head)), None)
    named = SUFFIXES.get(path.suffix.lower())
    if named is not None and found != named:
        if not head:  # 0 bytes: no misnamed text, an archive that never arrived
            raise ValueError(Errors.E_ARCHIVE_BAD.format(path=path, format=named, problem=Errors.E_ARCHIVE_EMPTY))
        if found is None:
            raise ValueError(Errors.E_NOT_COMPRESSED.format(path=path, suffix=path.suffix, format=named))
        ending = next(suffix for suffix, name in SUFFIXES.items() if name == found)
        raise ValueError(Errors.E_OTHER_COMPRESSION.format(path=path, suffix=path.suffix, format=named, found=found, ending=ending))
    return found


@contextmanager
def open_text_file(path: PathLike) -> Iterator[BinaryIO]:
    """The bytes of the user text file ``path``, decompressed as they are read when it is one of
    :data:`COMPRESSIONS` (:func:`compression`). Reading a damaged or truncated archive inside the
    ``with`` block raises ValueError naming the file and the damage (not the library's error)."""
    path = Path(path)
    kind = compression(path)
    if kind is None:
        with open(path, "rb") as f:
            yield f
        return
    with COMPRESSIONS[kind][1](path) as f:
        try:
            yield f
        except EOFError as err:  # the stdlib readers' "ended before the end-of-stream marker"
            raise ValueError(Errors.E_ARCHIVE_BAD.format(path=path, format=kind, problem=Errors.E_ARCHIVE_TRUNCATED)) from err
        except (zlib.error, lzma.LZMAError, OSError) as err:
            if isinstance(err, OSError) and not isinstance(err, gzip.BadGzipFile) and err.errno is not None:
                raise  # a real read error (bz2's damaged data is an OSError without errno)
            problem = Errors.E_ARCHIVE_DAMAGED.format(error=err)
            raise ValueError(Errors.E_ARCHIVE_BAD.format(path=path, format=kind, problem=problem)) from err


#: Files named in the warning of replaced bytes (W_REPLACED_BYTES); the rest are counted.
REPLACED_FILES_NAMED = 3


@dataclass
class ReadStats:
    n_files: int = 0
    n_binary: int = 0
    binary_files: List[str] = field(default_factory=list)
    n_hidden: int = 0  # files and directories skipped as hidden (their name starts with "."): the empty-text errors'
    replaced_bytes: int = 0
    files_with_replacements: int = 0
    replaced_files: List[str] = field(default_factory=list)  # the first REPLACED_FILES_NAMED of them: the warning's (not in meta.json)
    # sha256 of each text file's text (decompressed), taken as it is read: meta.json's TEXT_DIGESTS (not its stats)
    text_sha256: Dict[str, str] = field(default_factory=dict)
    n_lines: int = 0
    long_lines: int = 0
    long_runs: int = 0  # stretches without whitespace cut by cut_runs
    bom_chars: int = 0  # U+FEFF after the start of a file (its first one, a byte order mark, is dropped)
    nul_chars: int = 0  # NUL after a file's first BINARY_PROBE bytes (before them: a binary or UTF-16 file, skipped)
    n_sentences: int = 0
    n_tokens: int = 0  # word tokens, markers not included


def files_read(stats: ReadStats) -> str:
    """What the errors of a text without tokens say of its files (``E_FILES_READ``, their ``files``): how many were
    read and skipped as no UTF-8 text, and how many hidden ones were skipped, where any were (a directory of
    dot-files said "0 file(s) read" only)."""
    hidden = ""
    if stats.n_hidden:
        n_hidden = counted(stats.n_hidden, "file or directory", "files or directories")
        hidden = Errors.E_HIDDEN_SKIPPED.format(n_hidden=n_hidden)
    return Errors.E_FILES_READ.format(n_files=stats.n_files, n_binary=stats.n_binary, hidden=hidden)


def list_text_files(path: PathLike, hidden: Optional[List[Path]] = None) -> List[Path]:
    """TRAIN_PATH itself, or every non-hidden regular file under it, sorted; a ValueError where it is a
    directory spacy-elmo wrote or a model (:func:`is_spacy_elmo_output`), whose subdirectories of that kind are
    skipped with one warning. ``hidden`` (a list), when given, gets the hidden files and directories skipped (a
    name starting with ``.``; a hidden directory's contents are not looked at).

    Symbolic links to directories are followed, each directory read once (by its real path: a link
    back up is no loop, and a second link to a directory no second copy of its text), and each file too
    (the first of the names that reach it, in sorted order). Entries that are
    neither files nor directories (FIFOs, sockets, devices) are no text: reading a FIFO waited forever.
    A broken link (not hidden) is an error naming it and where it points (:func:`broken_link_error`), and so is
    a directory that cannot be listed or entered (:func:`walk_text_dirs`): leaving either out would train on
    less text without a word. Files are told apart by :func:`paths.file_identity` (a hard link is one file).
    TRAIN_PATH itself must be a file or a directory: a pipe (``<(zcat ...)``) cannot be read the several
    times the text is.
    """
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise broken_link_error(path, Errors.E_LINK_TO_TEXT)
        raise missing_path_error(path, Errors.E_TRAIN_PATH_MISSING.format(path=path))
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(Errors.E_TRAIN_PATH_NOT_A_FILE.format(path=path))
    if _is_output_in(path, path):  # a model or run directory given for the text (its subdirectories are skipped)
        raise ValueError(Errors.E_TRAIN_PATH_IS_OUTPUT.format(path=path))
    files: List[Path] = []
    outputs: List[Path] = []
    for root, names in walk_text_dirs(path, outputs, hidden=hidden):
        for name in names:
            file = Path(root) / name
            if name.startswith("."):
                if hidden is not None:
                    hidden.append(file)
                continue
            if not file.exists() and file.is_symlink():  # a link to a file or to a directory of text files
                raise broken_link_error(file, Errors.E_LINK_TO_TEXT)
            if file.is_file():
                files.append(file)
    kept, seen = [], set()
    for file in sorted(files):  # a file reached through two links, symbolic or hard, is read once
        identity = file_identity(file)
        if identity not in seen:
            seen.add(identity)
            kept.append(file)
    if outputs:
        shown = listed([name_shown(d) for d in outputs], 3)  # a comma or newline in a name: quoted
        # stacklevel 1: a run lists its corpus several times (fingerprint, reading, --heldout's overlap), from as
        # many callers; one line of this module, the same text, is one warning (Python's default filter).
        n_dirs = counted(len(outputs), "directory", "directories")
        warnings.warn(Warnings.W_TRAIN_PATH_OUTPUTS_SKIPPED.format(path=path, n_dirs=n_dirs, dirs=shown), RuntimeWarning,
                      stacklevel=1)
    return kept


def walk_text_dirs(path: PathLike, outputs: Optional[List[Path]] = None, strict: bool = True,
                   hidden: Optional[List[Path]] = None) -> Iterator[tuple]:
    """``(root, file names)`` of every directory :func:`list_text_files` reads under the directory ``path``:
    non-hidden ones, symbolic links to directories followed, each directory once (by its real path). With
    ``outputs`` (a list), subdirectories that spacy-elmo wrote (:func:`is_spacy_elmo_output`) are not entered
    but appended to it: their files (a model's config.json, vocab.txt, a run's log) are no corpus text.
    Without it every directory is walked (where an OUTPUT_DIR may not lie, whatever it holds yet).

    A directory that cannot be listed or entered (its permissions) is a ValueError naming it
    (``E_TRAIN_DIR_UNREADABLE``): ``os.walk`` skipped it silently, its text left out of the corpus. With
    ``strict=False`` it is skipped (the OUTPUT_DIR check, which walks every directory, earlier runs' too: one
    the reader never enters is no text left out, and one it does enter the reader refuses itself). ``hidden`` (a
    list), when given, gets the hidden subdirectories not entered."""
    seen = {os.path.realpath(path)}

    def unreadable(err: OSError) -> None:
        raise _unreadable_dir_error(err.filename or path, path, err) from err

    for root, dirs, names in os.walk(path, followlinks=True, onerror=unreadable if strict else None):
        kept = []
        for name in sorted(dirs):
            if name.startswith(".") and hidden is not None:
                hidden.append(Path(root) / name)
            real = os.path.realpath(os.path.join(root, name))
            if not name.startswith(".") and real not in seen:
                seen.add(real)
                if outputs is not None and _is_output_in(Path(root) / name, path):
                    outputs.append(Path(root) / name)
                else:
                    kept.append(name)
        dirs[:] = kept
        yield root, names


def _unreadable_dir_error(directory: PathLike, train_path: PathLike, err: OSError) -> ValueError:
    """``E_TRAIN_DIR_UNREADABLE`` for the ``directory`` under ``train_path`` that ``err`` says cannot be read
    (``E_TRAIN_PATH_UNREADABLE`` where it is ``train_path`` itself: nothing to move it out of)."""
    error = err.strerror or err
    if os.path.realpath(directory) == os.path.realpath(train_path):
        return ValueError(Errors.E_TRAIN_PATH_UNREADABLE.format(path=directory, error=error))
    return ValueError(Errors.E_TRAIN_DIR_UNREADABLE.format(path=directory, train_path=train_path, error=error))


def _is_output_in(directory: Path, train_path: PathLike) -> bool:
    """:func:`is_spacy_elmo_output` of ``directory`` under ``train_path``; one that cannot be entered is a ValueError
    naming it (looking for its files raised PermissionError naming a ``checkpoint.pt`` that does not exist)."""
    try:
        return is_spacy_elmo_output(directory)
    except PermissionError as err:
        raise _unreadable_dir_error(directory, train_path, err) from err


def is_spacy_elmo_output(directory: Path) -> bool:
    """Whether ``directory`` holds a model or spacy-elmo's output, no corpus text: a pretrain OUTPUT_DIR (its
    checkpoint beside its log, or its corpus cache: a ``data/meta.json`` holding a fingerprint), a model (a
    config.json of spacy-elmo's format, or one AllenNLP options.json + .hdf5 pair, as ``export`` writes or AllenNLP
    publishes: :func:`native_io.find_allennlp_files`) or the parts of an unfinished ``embed`` (``OUTPUT.parts`` with its manifest)."""
    from ..bilm.native_io import CONFIG_NAME, find_allennlp_files, is_native_config
    from ..embedding import MANIFEST
    from .checkpoint import CHECKPOINT_NAME
    from .trainer import LOG_NAME

    # By content, not names alone: a dataset's own data/meta.json or another tool's checkpoint.pt is no mark.
    try:
        cache = _cached_stamp(directory / CACHE_DIR) is not None
    except OSError:  # an unreadable data/meta.json: no cache this could read either
        cache = False
    if cache or ((directory / CHECKPOINT_NAME).is_file() and (directory / LOG_NAME).is_file()):
        return True
    if directory.name.endswith(".parts") and (directory / MANIFEST).is_file():
        return True
    if is_native_config(directory / CONFIG_NAME):
        return True
    try:
        return find_allennlp_files(directory) is not None
    except ValueError:  # not one pair (a corpus may hold a .h5 of its own): no model
        return False


#: Files an operating system or file system puts in any directory it touches: Finder's ``.DS_Store`` and
#: ``._*`` resource forks, Windows Explorer's ``Thumbs.db`` and ``desktop.ini``, NFS's ``.nfs*`` (a
#: deleted file still open somewhere). They make no cache directory someone else's.
SYSTEM_FILES = (".DS_Store", "._*", "Thumbs.db", "desktop.ini", ".nfs*")


def foreign_entries(cache_dir: PathLike) -> List[str]:
    """The names in the directory ``cache_dir`` that are no file of a corpus cache (:data:`CACHE_FILES`,
    or the temporary file of an atomic write of one) nor :data:`SYSTEM_FILES`, sorted; [] when it does
    not exist."""
    cache = Path(cache_dir)
    if not cache.is_dir():
        return []
    ours = set(CACHE_FILES) | {temporary.name for name in CACHE_FILES for temporary, _ in temporary_files(cache / name)}
    return sorted(entry.name for entry in cache.iterdir()
                  if entry.name not in ours and not any(fnmatch.fnmatchcase(entry.name, p) for p in SYSTEM_FILES))


#: Byte order marks of UTF-32 and UTF-16 (the 4-byte ones first: UTF-32LE's starts with UTF-16LE's).
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
#: What :func:`not_utf8` calls a file with NUL bytes that is no UTF-16 or UTF-32 text.
BINARY = "binary"


def _wide_encoding(head: bytes) -> Optional[str]:
    """The iconv name of the UTF-16 or UTF-32 encoding of text whose first bytes are ``head`` (None: neither):
    by its byte order mark (Notepad's "Unicode" and PowerShell's ``>`` write one), else when the NUL bytes
    are where they fall between characters (UTF-16: the order that decodes, the parity with more NULs, the
    high bytes of ASCII, tried first; UTF-32: the order that decodes) and the decoded text is printable (95% of it, U+FFFD not) with a space or line break."""
    for bom, name in WIDE_BOMS:
        if head.startswith(bom):
            return name
    # UTF-16's NULs are the high bytes of ASCII (odd offsets in LE); a character U+xx00 (一 U+4E00, Ā, Ѐ) puts
    # one at the other parity, and Chinese with line breaks its only ASCII can have more there: both orders
    # are tried, the parity with more NULs first, and the printable check below decides (a tie, as in short
    # binary data: neither; 14 bytes of b"\x00\x01\x02 not text \x00" read as UTF-16LE are printable).
    odd_nuls, even_nuls = head[1::2].count(0), head[0::2].count(0)
    utf16 = ("LE", "BE") if odd_nuls > even_nuls else ("BE", "LE") if even_nuls > odd_nuls else ()
    candidates = [("UTF-32", order) for order in ("LE", "BE")] + [("UTF-16", order) for order in utf16]
    for name, order in candidates:
        width = 4 if name == "UTF-32" else 2
        text = head[: len(head) // width * width].decode(f"{name}-{order}", errors="replace")
        # U+FFFD is what errors="replace" makes of what is no character (most of random bytes read as UTF-32):
        # isprintable() says True of it, which called a binary file with one aligned 0A 00 00 00 UTF-32 text.
        printable = sum((c.isprintable() or c.isspace()) and c != "\ufffd" for c in text)
        if text and printable >= 0.95 * len(text) and any(c in text for c in " \n"):
            return name + order
    return None


def not_utf8(path: Path) -> Optional[str]:
    """None when the file ``path`` may be read as UTF-8 text; else what it is by its first ``BINARY_PROBE``
    bytes (decompressed: :func:`open_text_file`): a name of :data:`UNREAD_COMPRESSIONS` or :data:`ARCHIVES` (by
    its first bytes, whether they hold a NUL byte or not; a zip that is a document, of :data:`DOCUMENTS`:
    :func:`_zip_document`), the iconv name of its UTF-16 or UTF-32 encoding (:func:`_wide_encoding`), or
    :data:`BINARY` when they hold another NUL byte."""
    with open_text_file(path) as f:
        head = f.read(BINARY_PROBE)
    for name, (magic, _) in itertools.chain(UNREAD_COMPRESSIONS.items(), ARCHIVES.items()):
        if magic.match(head):
            return (_zip_document(path, head) or name) if name == "zip" else name
    if b"\x00" not in head and not head.startswith(tuple(bom for bom, _ in WIDE_BOMS)):  # no BOM starts UTF-8
        return None
    return _wide_encoding(head) or BINARY


def _zip_document(path: PathLike, head: bytes) -> Optional[str]:
    """The :data:`DOCUMENTS` name of the zip archive ``path`` whose first bytes are ``head`` (None: another zip): by
    its first member, in its local header (an OpenDocument's or EPUB's is ``mimetype``, stored, whose text says
    which; an Office Open XML file's ``[Content_Types].xml`` or one of its parts), else by the file's name ending."""
    if head.startswith(b"PK\x03\x04") and len(head) >= 30:
        method = int.from_bytes(head[8:10], "little")
        length, extra = int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")
        first = head[30 : 30 + length]
        if first == b"mimetype" and method == 0:  # stored: its text follows the header
            text = head[30 + length + extra : 30 + length + extra + 64]
            if text.startswith(b"application/epub+zip"):
                return "EPUB"
            if text.startswith(b"application/vnd.oasis.opendocument."):
                return "OpenDocument"
        elif _OOXML_FIRST.fullmatch(first):
            return "Office Open XML"
    suffix = Path(path).suffix.lower()
    return next((name for name, endings in DOCUMENTS.items() if suffix in endings), None)


#: Name endings :func:`_beside` takes off a skipped file's name (longest first) to name what is made of it
_FORMAT_ENDINGS = sorted(
    {".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip", ".7z", ".zst", ".zstd", ".lz4"}
    | set(COMPRESSED_TAR) | {ending for endings in DOCUMENTS.values() for ending in endings},
    key=len, reverse=True,
)


#: What :func:`skipped_warning` tells to re-encode a UTF-16 or UTF-32 file ``u.txt`` into: ``u.utf8.txt`` beside it
WIDE_TEXT_ENDING = ".utf8.txt"


def _stem(name: str) -> str:
    """The file name ``name`` less its format ending (:data:`_FORMAT_ENDINGS`, else its last suffix): ``a`` of
    ``a.txt``, ``a.csv``, ``a.zst`` and ``a``; ``c`` of ``c.tar.gz``."""
    lower = name.lower()
    ending = next((e for e in _FORMAT_ENDINGS if lower.endswith(e) and len(e) < len(name)), Path(name).suffix)
    return name[: len(name) - len(ending)] if ending and len(ending) < len(name) else name


@functools.lru_cache(maxsize=4)
def _stems_in(directory: str, changed: int) -> Dict[str, int]:
    """How many entries of ``directory`` have each (lower-case) :func:`_stem`, as it was when its mtime was
    ``changed`` (the cache's key): a directory of thousands of skipped files is listed once, not once per file
    (2,000 zstd shards: 45 s of listing)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    counts: Dict[str, int] = {}
    for other in names:
        key = _stem(other).lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def _beside(path: PathLike, suffix: str) -> Path:
    """The path, in the directory of the skipped file ``path``, of the text (``suffix`` ``.txt``, ``.txt.gz`` or
    :data:`WIDE_TEXT_ENDING`) or the directory (``suffix`` ``""``) a directory's fix command makes of it: named after
    the file (``a.txt`` of ``a.zst``, ``c/`` of ``c.tar.gz``, ``u.utf8.txt`` of a UTF-16 ``u.txt``), so the commands
    for two skipped files do not write the same path; the file's whole name then ``suffix`` (or ``.d``) when another
    entry of the directory has the same stem (``a.zst.txt`` and ``a.lz4.txt`` of ``a.zst`` and ``a.lz4``, whatever
    order their warnings come in) or that path is taken (``a.txt`` beside ``a.zst``); then a number before
    ``suffix`` when that is taken too (``a.1.txt`` of a file ``a`` beside ``a.txt``)."""
    path = Path(path)
    name = path.name
    stem = _stem(name)
    # c.txt.zst: c.txt, c.txt.gz (not c.txt.txt)
    added = suffix[4:] if suffix.startswith(".txt") and stem.lower().endswith(".txt") else suffix
    try:
        changed = os.stat(path.parent).st_mtime_ns
    except OSError:
        changed = -1
    # entries of the directory with this stem, less the file itself: another shares it
    shared = _stems_in(str(path.parent), changed).get(stem.lower(), 0) - (1 if os.path.lexists(path) else 0)
    made = path.parent / (stem + added)
    if shared > 0 or made == path or os.path.lexists(made):
        made = path.parent / (name + (suffix or ".d"))
    number = 0
    while made == path or os.path.lexists(made):
        number += 1
        made = path.parent / f"{name}.{number}{suffix or '.d'}"
    return made


def unread_format(path: PathLike, kind: str, directory: bool = False) -> Optional[Tuple[str, str]]:
    """``(what, fix)`` of the messages of the file ``path`` that holds ``kind`` (as :func:`not_utf8` says it) when that
    is a format spacy-elmo does not read (:data:`UNREAD_COMPRESSIONS`, :data:`ARCHIVES`, :data:`DOCUMENTS`): what it
    holds, and how to make text of it that spacy-elmo reads, to pass instead, or with ``directory`` (a file of a
    directory, skipped) to put into the directory beside it, read with the rest of the corpus. None: another kind
    (binary, UTF-16 or UTF-32 text). A zstd or lz4 file named as a tar archive (:data:`COMPRESSED_TAR`) is unpacked."""
    shell_path = shell_quoted(path)
    new_dir = shell_quoted(_beside(path, "")) if directory else "NEW_DIR"
    new_text = shell_quoted(_beside(path, ".txt")) if directory else "NEW.txt"
    if kind in UNREAD_COMPRESSIONS:
        tool = UNREAD_COMPRESSIONS[kind][1]
        if Path(path).name.lower().endswith(COMPRESSED_TAR):
            return Errors.E_UNREAD_COMPRESSED_TAR.format(format=kind), (
                Warnings.W_UNREAD_COMPRESSED_TAR_FIX if directory else Errors.E_UNREAD_COMPRESSED_TAR_FIX
            ).format(tool=tool, shell_path=shell_path, dir=new_dir)
        gzipped = shell_quoted(_beside(path, ".txt.gz")) if directory else "NEW.txt.gz"
        return Errors.E_UNREAD_COMPRESSION.format(format=kind), (
            Warnings.W_UNREAD_COMPRESSION_FIX if directory else Errors.E_UNREAD_COMPRESSION_FIX
        ).format(tool=tool, shell_path=shell_path, text=new_text, gz=gzipped)
    if kind in ARCHIVES:
        unpack = ARCHIVES[kind][1].format(path=shell_path, dir=new_dir)
        return Errors.E_UNREAD_ARCHIVE.format(format=kind), (
            Warnings.W_UNREAD_ARCHIVE_FIX if directory else Errors.E_UNREAD_ARCHIVE_FIX
        ).format(unpack=unpack)
    if kind in DOCUMENTS:
        return Errors.E_UNREAD_DOCUMENT.format(format=kind, endings=", ".join(DOCUMENTS[kind])), (
            Warnings.W_UNREAD_DOCUMENT_FIX if directory else Errors.E_UNREAD_DOCUMENT_FIX
        ).format(pandoc=PANDOC_FORMATS[kind], shell_path=shell_path, text=new_text)
    return None


def not_text_error(path: Path, kind: str, directories: bool = True) -> str:
    """The error for the file ``path`` that is no UTF-8 text, ``kind`` as :func:`not_utf8` says it; ``directories``:
    the command reads directories too, where such files are skipped, which the error says (embed's does not)."""
    skipped = Errors.E_NOT_TEXT_SKIPPED if directories else ""
    if kind == BINARY:
        return Errors.E_BINARY_FILE.format(path=path, skipped=skipped)
    unread = unread_format(path, kind)
    if unread is not None:
        what, fix = unread
        return Errors.E_UNREAD_FORMAT.format(path=path, what=what, fix=fix, skipped=skipped)
    return Errors.E_WIDE_TEXT_FILE.format(path=path, shell_path=shell_quoted(path), encoding=kind, skipped=skipped)


def skipped_warning(path: Path, kind: str) -> str:
    """The warning for the file ``path`` of a directory, skipped: no UTF-8 text, ``kind`` as :func:`not_utf8` says it."""
    unread = unread_format(path, kind, directory=True)
    if unread is not None:
        what, fix = unread
        return Warnings.W_UNREAD_FORMAT_SKIPPED.format(path=path, what=what, fix=fix)
    if kind == BINARY:
        return Warnings.W_BINARY_SKIPPED.format(path=path)
    # named after it (u.utf8.txt of u.txt), so the commands for two such files do not write one NEW.txt
    text = shell_quoted(_beside(path, WIDE_TEXT_ENDING))
    return Warnings.W_WIDE_TEXT_SKIPPED.format(path=path, shell_path=shell_quoted(path), encoding=kind, text=text)


#: A stretch of more than RUN_CHARS characters without whitespace; from its start only (no match is tried
#: inside one), so the search is linear in the line.
_LONG_RUN = re.compile(r"(?<!\S)\S{%d,}" % (RUN_CHARS + 1))
#: Rounds of prefix/suffix stripping spaCy's rule-based tokenizer may take on a stretch of ``RUN_CAP``
#: characters before :func:`cut_runs` cuts it; a shorter one may take more, up to ``AFFIX_ROUNDS * RUN_CAP //
#: len(stretch)``: each round copies the rest of the stretch (the quadratic cost), so no stretch left whole
#: costs more than one of ``RUN_CAP`` characters with this many; real ones take a few (``("https://...").``:
#: 3, a 254-character word and ten ``!``: 10, of 60 allowed).
AFFIX_ROUNDS = 8


def cuts_runs(tokenizer) -> bool:
    """Whether :func:`cut_runs` applies to text for ``tokenizer``: spaCy's rule-based ``Tokenizer`` only (its
    affix stripping is the quadratic cost). Japanese (SudachiPy), Thai (PyThaiNLP), Chinese (``char`` or
    another segmenter) and other tokenizers read a stretch as it is: a cut would split their words."""
    from spacy.tokenizer import Tokenizer

    return isinstance(tokenizer, Tokenizer)


def _affix_rounds(tokenizer, run: str, most: int) -> int:
    """How many rounds of prefix/suffix stripping spaCy's rule-based ``tokenizer`` takes on the stretch ``run``
    (as ``Tokenizer._split_affixes`` does: a whole ``token_match`` stops it; special cases, which only stop it
    sooner, are left out), counted up to ``most + 1``: its cost is this many regex searches."""
    token_match, find_prefix, find_suffix = tokenizer.token_match, tokenizer.prefix_search, tokenizer.suffix_search
    rounds = 0
    while run and rounds <= most:
        if token_match is not None and token_match(run):
            break
        prefix = find_prefix(run) if find_prefix is not None else None
        pre = prefix.end() - prefix.start() if prefix else 0
        suffix = find_suffix(run[pre:]) if find_suffix is not None else None
        suf = suffix.end() - suffix.start() if suffix else 0
        if not pre and not suf:
            break
        rounds += 1
        if pre and suf and pre + suf <= len(run):
            run = run[pre:len(run) - suf]
        else:
            run = run[pre:] if pre else run[:-suf]
    return rounds


def cut_runs(line: str, tokenizer=None) -> tuple:
    """``(text, n)``: ``line`` with a space put after every ``RUN_CHARS`` characters (:func:`_cut_pieces`) of each of its ``n``
    stretches of more than ``RUN_CHARS`` characters without whitespace that spaCy's rule-based ``tokenizer``
    would strip more than ``AFFIX_ROUNDS`` (more for a stretch shorter than ``RUN_CAP``: ``AFFIX_ROUNDS * RUN_CAP
    // len(stretch)``) prefixes or suffixes from one at a time (undecodable bytes read as
    U+FFFD, a run of ``!`` or emoji), or longer than ``RUN_CAP`` (minified CSS or JSON, hex dumps: spaCy's
    ``url_match`` is quadratic on their colons);
    ``tokenizer`` None: every such stretch. ``n`` 0: ``line`` itself.

    A stretch spaCy tokenizes in linear time (a long URL, its ``url_match`` keeps whole; a hash; a word in
    brackets, a word and ten ``!``) stays whole, so pretraining reads the tokens the pipeline sees; one that is
    cut: most characters spaCy splits one by one (U+FFFD, ``!``, emoji, CJK punctuation; not ``'`` nor ``…``)
    give the same tokens as before, in the same sentence."""
    if len(line) <= RUN_CHARS:
        return line, 0
    n = 0

    def cut(match) -> str:
        nonlocal n
        run = match.group()
        most = AFFIX_ROUNDS * RUN_CAP // len(run)  # rounds x length: the cost of tokenizing it whole
        if tokenizer is not None and len(run) <= RUN_CAP and _affix_rounds(tokenizer, run, most) <= most:
            return run
        n += 1
        return " ".join(_cut_pieces(run))

    return _LONG_RUN.sub(cut, line), n


#: How many code points :func:`_cut_pieces` may move a cut back to keep a character with what continues it
#: (an emoji ZWJ sequence of a family is 7, a subdivision flag's tag sequence 7); a longer run of combining
#: marks (Zalgo text) is cut at ``RUN_CHARS`` all the same, so every piece is at least ``RUN_CHARS - CUT_BACK``.
CUT_BACK = 16
#: Characters that continue the one before them, besides combining marks (``unicodedata`` category ``M*``:
#: accents of NFD text, U+20E3 of a keycap, U+FE0E/U+FE0F the variation selectors): U+200D ZERO WIDTH JOINER,
#: the emoji skin-tone modifiers U+1F3FB..U+1F3FF (category ``Sk``), the emoji tag characters
#: U+E0020..U+E007F of subdivision flags (``Cf``, which spaCy keeps as one token), and the conjoining Hangul
#: vowels and final consonants U+1160..U+11FF and U+D7B0..U+D7FF (``Lo``: the syllables of NFD Korean).
_CONTINUES = frozenset("\u200d" + "".join(map(chr, range(0x1F3FB, 0x1F400))) + "".join(map(chr, range(0xE0020, 0xE0080)))
                       + "".join(map(chr, range(0x1160, 0x1200))) + "".join(map(chr, range(0xD7B0, 0xD800))))


def _joins(run: str, i: int) -> bool:
    """Whether a cut before ``run[i]`` would split a character from what continues it (a lone accent, a
    variation selector, a ZWJ or a skin tone at the start of a piece, or a ZWJ at the end of one)."""
    c = run[i]
    return c in _CONTINUES or run[i - 1] == "\u200d" or unicodedata.category(c)[0] == "M"


def _cut_pieces(run: str) -> List[str]:
    """``run`` (a stretch without whitespace) in pieces of at most ``RUN_CHARS`` characters, each cut moved
    back up to ``CUT_BACK`` characters to where no character is split from what continues it
    (:func:`_joins`): a grapheme cluster (``e`` and U+0301, 🏳 U+FE0F U+200D 🌈) stays in one piece."""
    pieces = []
    start = 0
    while len(run) - start > RUN_CHARS:
        end = start + RUN_CHARS
        back = next((i for i in range(end, end - CUT_BACK, -1) if not _joins(run, i)), end)
        pieces.append(run[start:back])
        start = back
    pieces.append(run[start:])
    return pieces


def _last_space(window: str) -> int:
    """The index in ``window`` of its last whitespace character (``str.isspace``), -1 where it has none: by
    ``str.rsplit`` and ``str.lstrip``, in C without backtracking (a regex ``.*\\s`` ran to the end of a window
    without whitespace and back, 6x the time of cutting a line of no whitespace)."""
    if not window or window[-1].isspace():
        return len(window) - 1
    parts = window.rsplit(None, 1)
    if len(parts) == 2:  # parts[1]: what follows the last whitespace
        return len(window) - len(parts[1]) - 1
    return len(window) - len(window.lstrip()) - 1  # whitespace only at the start, or none (-1)


def split_long(line: str, limit: int = PIECE_CHARS) -> List[str]:
    """Pieces of at most ``limit`` characters, cut at the last space or tab, else at the last other whitespace
    character (``str.isspace``: a ``\\r``, U+00A0, U+3000, ...), when there is one (the whitespace starts the next
    piece): cut at spaces and tabs only, text separated by others was cut inside a word. Walked with an index: copying the rest of
    the line per piece was quadratic (2.9 s for a 40 MB line)."""
    pieces = []
    start = 0
    while len(line) - start > limit:
        end = start + limit
        cut = max(line.rfind(" ", start, end), line.rfind("\t", start, end))  # the usual ones, found fastest
        if cut <= start:
            found = _last_space(line[start:end])
            cut = start + found if found >= 0 else -1
        cut = cut if cut > start else end
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return pieces


@dataclass
class BomCount:
    """The U+FEFF characters in the lines of one file (after its start: :func:`iter_lines` drops a leading byte
    order mark), kept as the pipeline keeps them and told of once per file by :meth:`warn` (``W_BOM_INSIDE``),
    with how to remove them from the text: pretraining, ``evaluate`` and ``fit-state`` (:func:`iter_text`) and
    ``embed`` (``embedding.scan_lines``) alike."""

    boms: int = 0
    line_starts: int = 0  # those that begin a line (files joined with ``cat``, each with its byte order mark)

    def add(self, line: str) -> None:
        """Count the U+FEFF characters of ``line`` (a line :func:`iter_lines` read)."""
        if BOM in line:
            self.boms += line.count(BOM)
            self.line_starts += line.startswith(BOM)

    def warn(self, path: PathLike, stacklevel: int = 2) -> None:
        """``W_BOM_INSIDE`` for ``path`` where any were counted; ``stacklevel``: as the caller's own
        ``warnings.warn`` would take it (the frame it names is the caller's caller at 2)."""
        if not self.boms:
            return
        n_boms = counted(self.boms, "U+FEFF (byte order mark)", "U+FEFF characters (byte order marks)")
        at_line_starts = joined = ""
        if self.line_starts:  # files joined with cat: say so, and how to join them without
            which = "" if self.boms == 1 else "all " if self.line_starts == self.boms else f"{self.line_starts:,} "
            at_line_starts, joined = Warnings.W_BOM_AT_LINE_STARTS.format(which=which), Warnings.W_BOM_JOINED
        said = Warnings.W_BOM_INSIDE.format(path=path, n_boms=n_boms, at_line_starts=at_line_starts, joined=joined)
        warnings.warn(said, RuntimeWarning, stacklevel=stacklevel + 1)


def iter_text(path: PathLike, stats: ReadStats, tokenizer=None) -> Iterator[str]:
    """Non-empty text pieces (lines, long ones split) of every file, updating ``stats``; for ``tokenizer``,
    the one that reads them: stretches without whitespace it is slow on are cut when it is spaCy's
    rule-based one (:func:`cuts_runs`, :func:`cut_runs`), none for another (None: none either). A U+FEFF after
    a file's start (a byte order mark of a file joined on with ``cat``) is kept, as the pipeline keeps it: the
    spaCy component reads the tokens of its Doc and cannot drop one, so dropping it here would train on tokens
    the pipeline never sees; they are counted and warned of once per file (``W_BOM_INSIDE``), with how to
    remove them from the text. So are NUL characters (``W_NUL_INSIDE``), which past the first ``BINARY_PROBE`` bytes
    :func:`not_utf8` reads are binary data or UTF-16 text appended to the text, and lines holding a ``\\r``
    (``W_CARRIAGE_RETURN``): lines end at ``\\n`` only, as ``embed`` and ``wc -l`` count them, so a file whose
    lines end in ``\\r`` alone (classic Mac OS) is one line; each is one more search of the line."""
    hidden: List[Path] = []
    files = list_text_files(path, hidden)
    stats.n_hidden += len(hidden)
    single = Path(path).is_file()
    rule_based = tokenizer is not None and cuts_runs(tokenizer)
    for file in files:
        kind = not_utf8(file)
        if kind is not None:
            if single:
                raise ValueError(not_text_error(file, kind))
            stats.n_binary += 1  # UTF-16 and UTF-32 files, archives and compressions not read too: no UTF-8 text
            stats.binary_files.append(str(file))
            warnings.warn(skipped_warning(file, kind), RuntimeWarning, stacklevel=2)
            continue
        stats.n_files += 1
        before = replaced_bytes_so_far()
        warned = False
        runs = 0
        boms = BomCount()
        nuls = nul_line = cr_lines = cr_line = 0
        digest = hashlib.sha256()  # of the text read, in this pass: a resume tells text edited in place (same size, time)
        for number, line in enumerate(iter_lines(file, digest), 1):
            stats.n_lines += 1
            boms.add(line)  # kept, as the pipeline reads it; counted for W_BOM_INSIDE
            if "\x00" in line:  # kept too (the pipeline would read them); counted for W_NUL_INSIDE
                nuls += line.count("\x00")
                nul_line = nul_line or number
            if "\r" in line:  # one before the \n is part of the line's end (iter_lines strips it)
                cr_lines += 1
                cr_line = cr_line or number
            if not line.strip():
                continue
            length = len(line)
            if rule_based:
                line, n_runs = cut_runs(line, tokenizer)
                runs += n_runs
            if length > PIECE_CHARS:
                stats.long_lines += 1
                if not warned:
                    warnings.warn(Warnings.W_LONG_LINE.format(path=file, n_chars=f"{length:,}", piece=f"{PIECE_CHARS:,}"),
                                  RuntimeWarning, stacklevel=2)
                    warned = True
                yield from split_long(line)
            else:
                yield line
        if runs:
            stats.long_runs += runs
            n_runs = counted(runs, "stretch", "stretches")
            said = Warnings.W_LONG_RUNS.format(path=file, n_runs=n_runs, cap=RUN_CHARS, long=f"{RUN_CAP:,}", back=CUT_BACK)
            warnings.warn(said, RuntimeWarning, stacklevel=2)
        stats.bom_chars += boms.boms
        boms.warn(file)
        if nuls:
            stats.nul_chars += nuls
            said = Warnings.W_NUL_INSIDE.format(path=file, n_nuls=counted(nuls, "NUL byte"), line=nul_line, probe=BINARY_PROBE)
            warnings.warn(said, RuntimeWarning, stacklevel=2)
        if cr_lines:
            said = Warnings.W_CARRIAGE_RETURN.format(path=file, n_lines=counted(cr_lines, "line"), line=cr_line)
            warnings.warn(said, RuntimeWarning, stacklevel=2)
        stats.text_sha256[str(file)] = digest.hexdigest()
        if replaced_bytes_so_far() > before:
            stats.replaced_bytes += replaced_bytes_so_far() - before
            stats.files_with_replacements += 1
            if len(stats.replaced_files) < REPLACED_FILES_NAMED:
                stats.replaced_files.append(name_shown(file))


#: Languages whose rule-based fallback tokenizer was announced in this process.
_FALLBACK_WARNED: set = set()


def make_nlp(lang: str, provenance: Optional[Dict[str, Any]] = None, from_model: bool = False,
             tokenizer: Optional[Dict[str, Any]] = None, source: str = Errors.E_TOKENIZER_SOURCE_CONFIG):
    """A blank spaCy pipeline for ``lang`` with a sentencizer.

    Languages whose default tokenizer needs an external package (Korean needs
    mecab-ko, Japanese SudachiPy) fall back to spaCy's rule-based ``spacy.Tokenizer.v1``,
    with a warning (once per language) naming what is missing. ``provenance``: the config.json record of the model
    the text is read for (``embed``, ``evaluate``, ``fit-state``): where ``pretrain`` read ``lang`` for it with a
    tokenizer block it records, that block is read with (a model of the fallback's phrases reads them still, once
    SudachiPy is installed), unless it cannot be built here (its packages missing: the fallback, as above).
    ``from_model``: ``lang`` is the language ``provenance`` records, read as no --lang was given (else the one given:
    pretrain's --lang, or embed's, evaluate's, fit-state's), which the fallback's warning says, and a language this
    spaCy lacks is an error saying that the model's config.json named it (E_MODEL_LANG).
    ``tokenizer``: the ``[nlp.tokenizer]`` block to read with as it is (:func:`given_tokenizer_nlp`: an error where
    it cannot be built, no fallback): ``TrainConfig.tokenizer`` (``pretrain --tokenizer``'s block, read from its file
    before), or the block of the pipeline a tokenizing worker's parent reads with; ``source``: where it came from,
    for those errors.
    """
    if tokenizer is not None:
        nlp = given_tokenizer_nlp(lang, tokenizer, source)
        nlp.add_pipe("sentencizer")
        return nlp
    recorded = recorded_tokenizer(provenance or {}, lang)
    try:
        nlp, missing = _blank(lang, recorded)
    except ValueError as err:
        # the model's language (the CLI refuses a --lang spaCy lacks before this): say where it came from
        if from_model:
            raise ValueError(Errors.E_MODEL_LANG.format(lang=lang, error=err.__cause__ or err)) from err
        raise
    if missing is not None and lang not in _FALLBACK_WARNED:  # corpus, held-out text: once per run
        _FALLBACK_WARNED.add(lang)
        error = _first_line(missing)
        if records_other_block(recorded, lang):
            # pretrain --tokenizer's block (zh's segmenter = "jieba"): spaCy's default for lang may need nothing
            unbuilt = Warnings.W_FALLBACK_BLOCK_RECORDED.format(lang=lang, block=shown_block(recorded))
        else:
            language = (Warnings.W_FALLBACK_LANG_RECORDED if from_model else Warnings.W_FALLBACK_LANG_GIVEN).format(lang=lang)
            unbuilt = Warnings.W_FALLBACK_SPACY.format(language=language)
        # a model that records the block learnt its tokens: no pipeline is to read the fallback's for it; of one that
        # records none (an earlier release's, another program's) which tokens it learnt is unknown; only the model
        # pretrain is about to write (no provenance) learns the fallback's
        if provenance is None:
            advice = Warnings.W_FALLBACK_ADVICE
        else:
            advice = Warnings.W_FALLBACK_ADVICE_UNRECORDED if recorded is None else Warnings.W_FALLBACK_ADVICE_RECORDED
        warnings.warn(Warnings.W_TOKENIZER_FALLBACK.format(tokenizer=unbuilt, error=error,
                                                           advice=advice.format(lang=lang)),
                      RuntimeWarning, stacklevel=2)
    nlp.add_pipe("sentencizer")
    return nlp


def text_language(lang: Optional[str], provenance: Dict[str, Any], default: str = "en") -> Tuple[str, bool]:
    """``(language, from_model)``: the language ``embed``, ``evaluate`` and ``fit-state`` read the text with, and
    whether it is the model's (:func:`make_nlp`'s ``from_model``): ``lang`` (--lang) where given, else the one the
    model's config.json records (``provenance``), else ``default`` (embed's "": none, the lines split at
    whitespace)."""
    if lang:
        return lang, False
    recorded = provenance.get("lang")
    return (recorded, True) if recorded else (default, False)


#: The ``[nlp.tokenizer]`` block of spaCy's rule-based tokenizer: :func:`make_nlp`'s fallback.
RULE_BASED = {"@tokenizers": "spacy.Tokenizer.v1"}


def _blank(lang: str, tokenizer: Optional[Dict[str, Any]] = None):
    """``(spacy.blank(lang), None)`` (with the ``[nlp.tokenizer]`` block ``tokenizer`` where given and this spaCy
    knows it), or where its tokenizer needs a package that is missing, the pipeline with :data:`RULE_BASED` instead
    and the ImportError. ValueError (E_SPACY_LANG) where spaCy cannot build ``lang``."""
    import spacy

    config = {} if tokenizer is None else {"nlp": {"tokenizer": tokenizer}}
    try:
        return spacy.blank(lang, config=config), None
    except ImportError as missing:
        try:
            return spacy.blank(lang, config={"nlp": {"tokenizer": RULE_BASED}}), missing
        except Exception as err:  # noqa: BLE001 - reported with the language
            raise ValueError(Errors.E_SPACY_LANG.format(lang=lang, error=err)) from err
    except Exception as err:  # noqa: BLE001
        if tokenizer is not None:  # a recorded block this spaCy does not know (another version's): its default
            return _blank(lang)
        raise ValueError(Errors.E_SPACY_LANG.format(lang=lang, error=err)) from err


def given_tokenizer_nlp(lang: str, block: Any, source: str):
    """``spacy.blank(lang)`` with the ``[nlp.tokenizer]`` block ``block`` that the user chose (``source``: where
    it came from, for the errors), without a sentencizer. ValueError where it is no block a model can record and
    commands build again (:func:`is_tokenizer_block`), or where it cannot be built for ``lang`` (the missing package
    named): unlike :func:`_blank`'s default, a block asked for is never replaced by :data:`RULE_BASED`."""
    import spacy

    shown = checked_tokenizer_block(block, source)
    try:
        nlp = spacy.blank(lang, config={"nlp": {"tokenizer": block}})
    except ImportError as missing:  # jieba, SudachiPy...: the first line of its message names it
        error = _first_line(missing)
        raise ValueError(Errors.E_TOKENIZER_BLOCK_PACKAGE.format(block=shown, source=source, lang=lang, error=error)) from missing
    except Exception as err:  # noqa: BLE001 - an unknown function (RegistryError), a bad setting (ConfigValidationError)
        raise ValueError(Errors.E_TOKENIZER_BLOCK_BUILD.format(block=shown, source=source, lang=lang,
                                                                error=_one_line(err))) from err
    try:
        # one that builds but cannot read (segmenter = "pkuseg": its model is loaded by an initialize step that
        # no block records) fails here, before OUTPUT_DIR, not at the corpus's first line
        nlp.make_doc("a")
    except Exception as err:  # noqa: BLE001 - spaCy's E1000 for pkuseg; whatever a registered tokenizer raises
        raise ValueError(Errors.E_TOKENIZER_BLOCK_CANNOT_READ.format(block=shown, source=source, lang=lang,
                                                                     error=_one_line(err))) from err
    return nlp


def pretrain_reads(lang: str, block: Any) -> bool:
    """Whether ``pretrain --lang LANG --tokenizer FILE`` reads with the ``[nlp.tokenizer]`` block ``block`` that a
    file holding it gives: :func:`given_tokenizer_nlp` builds it and it reads a word. False where it refuses it: no
    block a model can record (:func:`is_tokenizer_block`), one that needs an initialize step first
    (``segmenter = "pkuseg"``), or a package missing here. Builds a pipeline: for the messages that offer such a file, not for every check."""
    try:
        given_tokenizer_nlp(lang, block, Errors.E_TOKENIZER_SOURCE_CONFIG)
    except ValueError:
        return False
    return True


def _one_line(err: BaseException) -> str:
    """``err``'s message on one line (confection's and spaCy's span blank lines), or its type's name."""
    return " ".join(str(err).split()) or type(err).__name__


def checked_tokenizer_block(block: Any, source: str) -> str:
    """``block`` as JSON (for messages), or ValueError (E_TOKENIZER_BLOCK_SHAPE, naming ``source``) where it is no
    block a model can record and the commands that read its text build again (:func:`is_tokenizer_block`)."""
    shown = shown_block(block)
    if not is_tokenizer_block(block):
        raise ValueError(Errors.E_TOKENIZER_BLOCK_SHAPE.format(block=shown, source=source))
    return shown


def _first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (an ImportError's names the missing package), or its type's name."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def shown_block(block: Any) -> str:
    """A tokenizer block (or what was given as one) as the messages show it inline: JSON, non-ASCII kept."""
    return json.dumps(block, ensure_ascii=False, default=str)


#: An ``[nlp]`` section header line of a config file, and one of a section under it (``[nlp.tokenizer]``):
#: :func:`read_tokenizer_config` adds the first where a file has the second alone.
_NLP_SECTION = re.compile(r"^[ \t]*\[nlp\][ \t]*$", re.MULTILINE)
_NLP_SUBSECTION = re.compile(r"^[ \t]*\[nlp\.", re.MULTILINE)


def read_tokenizer_config(path: PathLike, lang: str) -> Dict[str, Any]:
    """The ``[nlp.tokenizer]`` block of the spaCy config file ``path`` (``pretrain --tokenizer``), read with spaCy's
    own config reader (variables interpolated), as spaCy builds it for ``lang``: :func:`tokenizer_settings` of
    :func:`given_tokenizer_nlp` (the defaults of the settings it leaves out filled in, plain JSON), the block the
    model records. ValueError naming the problem and the fix: a missing file, one that is no config, one without
    that section or whose ``[nlp] lang`` is another than ``lang``, and :func:`given_tokenizer_nlp`'s. A file without
    an ``[nlp]`` section above its ``[nlp.tokenizer]`` (the block alone, as the messages that name such a file show
    it) is read as if it began with an empty one: spaCy's reader refuses a section whose parent is missing."""
    from spacy.util import load_config_from_str

    path = Path(path)
    if not path.exists():
        raise ValueError(str(missing_path_error(path, Errors.E_TOKENIZER_CONFIG_MISSING.format(path=path))))
    try:
        text = path.read_text(encoding="utf-8")
        if _NLP_SUBSECTION.search(text) and not _NLP_SECTION.search(text):
            text = "[nlp]\n" + text
        config = load_config_from_str(text, interpolate=True)
    except (OSError, UnicodeDecodeError, ValueError, KeyError) as err:  # a directory, binary data, no [section]
        if isinstance(err, KeyError):  # [nlp.tokenizer] above [nlp]: a bare KeyError: 'nlp'
            error = Errors.E_TOKENIZER_CONFIG_PARENT_BELOW.format(parent=err.args[0] if err.args else "nlp")
        else:
            error = _one_line(err)
        raise ValueError(Errors.E_TOKENIZER_CONFIG_UNREADABLE.format(path=path, error=error)) from err
    section = config.get("nlp")
    if not isinstance(section, dict) or not isinstance(section.get("tokenizer"), dict):
        sections = ", ".join(f"[{name}]" for name in config) or "none"
        raise ValueError(Errors.E_TOKENIZER_CONFIG_NO_BLOCK.format(path=path, sections=sections))
    config_lang = section.get("lang")
    if config_lang not in (None, "") and config_lang != lang:
        raise ValueError(Errors.E_TOKENIZER_CONFIG_LANG.format(path=path, config_lang=config_lang, lang=lang))
    block = json.loads(json.dumps(section["tokenizer"], default=str))  # a plain dict: what the model records
    return tokenizer_settings(given_tokenizer_nlp(lang, block, Errors.E_TOKENIZER_SOURCE_FILE.format(path=path)))


def reading_tokenizer_settings(lang: str) -> Optional[dict]:
    """:func:`tokenizer_settings` of :func:`make_nlp` of ``lang`` here: spaCy's default block, or :data:`RULE_BASED`
    where the packages it needs are missing (a block that builds, unlike the default's there). None where spaCy has
    no language ``lang``."""
    try:
        return tokenizer_settings(_blank(lang)[0])
    except ValueError:
        return None


def tokenizer_settings(nlp) -> dict:
    """The ``[nlp.tokenizer]`` block of a spaCy pipeline's config as plain JSON (which tokenizer, e.g. a
    fallback ``spacy.Tokenizer.v1`` or Chinese ``segmenter = "char"``): pretrained models record it."""
    return json.loads(json.dumps(dict(nlp.config["nlp"]["tokenizer"]), default=str))


def tokenizer_cfg(block: Dict[str, Any]) -> str:
    """The ``[nlp.tokenizer]`` block ``block`` (:func:`is_tokenizer_block`) as the lines of a ``pretrain --tokenizer``
    file (thinc's writer), its header first, one line each (newlines in a message: pasted into a file, they read
    back; on one line they did not): ``[nlp.tokenizer]\\n@tokenizers = "spacy.zh.ChineseTokenizer"\\nsegmenter =
    "jieba"``. A message shows them at its end: nothing may follow the last on its line."""
    from thinc.api import Config

    lines = Config({"nlp": {"tokenizer": block}}).to_str().splitlines()
    return "\n".join(line for line in lines[lines.index("[nlp.tokenizer]"):] if line.strip())


def default_tokenizer_settings(lang: str) -> Optional[dict]:
    """:func:`tokenizer_settings` of ``spacy.blank(lang)`` where the packages its tokenizer needs are installed (the
    language class's default config; nothing is built): what ``pretrain --lang LANG`` reads with, unless it fell
    back to ``spacy.Tokenizer.v1`` (:func:`make_nlp`). None where this spaCy has no language ``lang``."""
    from spacy.util import get_lang_class

    try:
        block = get_lang_class(lang).default_config["nlp"]["tokenizer"]
    except Exception:  # noqa: BLE001 - ImportError, or AttributeError for 'en.stop_words' (as spacy_language)
        return None
    return json.loads(json.dumps(dict(block), default=str))


#: ``provenance["trained_by"]`` of the models ``pretrain`` writes: they record the language and tokenizer block of their text.
PRETRAINED_BY = "spacy-elmo pretrain"


def reads_other_tokens(provenance: Dict[str, Any], lang: str, tokenizer: Dict[str, Any]) -> bool:
    """Whether ``pretrain`` read the text of the model whose config.json records ``provenance`` (``BiLM.provenance``)
    with another language than ``lang`` or another tokenizer block (:func:`tokenizer_settings`) than ``tokenizer``:
    the biLM then reads other tokens than it learnt from (whole phrases for words, words for characters). Models
    that spacy-elmo did not pretrain, or that record no language, are never told apart; those pretrained before the
    tokenizer was recorded are told apart by language alone. The one test of the ``elmo`` component (its pipeline's
    tokenizer) and of the commands that read text for a model (:func:`warn_other_tokens`)."""
    if provenance.get("trained_by") != PRETRAINED_BY or not provenance.get("lang"):
        return False
    trained = provenance.get("tokenizer")  # absent in models pretrained before it was recorded
    if provenance["lang"] != lang:
        return True
    # a block of a spaCy whose tokenizer had fewer settings builds here with the defaults of the others filled in
    return trained is not None and trained != tokenizer and filled_tokenizer_settings(trained) != tokenizer


def records_other_block(recorded: Optional[Dict[str, Any]], lang: str) -> bool:
    """Whether ``recorded`` (:func:`recorded_tokenizer`: None where the model records none) is another block than
    spaCy's default for ``lang`` (pretrain --tokenizer's, e.g. zh's segmenter = "jieba"), as spaCy builds both."""
    return recorded is not None and filled_tokenizer_settings(recorded) != default_tokenizer_settings(lang)


def filled_tokenizer_settings(block: Any) -> Any:
    """A tokenizer block (:func:`is_tokenizer_block`) as spaCy builds it: with the defaults of the settings it leaves
    out (``{"@tokenizers": "spacy.zh.ChineseTokenizer"}`` gets ``"segmenter": "char"``), as
    :func:`tokenizer_settings` reads it (plain JSON); nothing is built. ``block`` itself where it is no such block, or
    this spaCy does not know its function."""
    from spacy.util import registry

    if not is_tokenizer_block(block):
        return block
    try:
        filled = registry.fill({"tokenizer": block})["tokenizer"]
    except Exception:  # noqa: BLE001 - an unknown function or setting (another spaCy's): as recorded
        return block
    return json.loads(json.dumps(dict(filled), default=str))


def recorded_tokenizer(provenance: Dict[str, Any], lang: str) -> Optional[Dict[str, Any]]:
    """The tokenizer block ``pretrain`` read the text of the model whose config.json records ``provenance`` with,
    where it read ``lang``; None for another language, or a model that records none (:func:`reads_other_tokens`),
    or a block that is not one tokenizer function (:func:`is_tokenizer_block`): spaCy would run whatever registered
    function a config.json names."""
    if provenance.get("trained_by") != PRETRAINED_BY or provenance.get("lang") != lang:
        return None
    recorded = provenance.get("tokenizer")
    return recorded if is_tokenizer_block(recorded) else None


def is_tokenizer_block(block: Any) -> bool:
    """Whether ``block`` is a ``[nlp.tokenizer]`` block as spaCy writes one: a dict naming a ``@tokenizers``
    function, its other keys plain settings (no nested block: no other registered function is built from it)."""

    def holds_block(value: Any) -> bool:
        if isinstance(value, dict):
            return any(str(key).startswith("@") or holds_block(v) for key, v in value.items())
        return isinstance(value, (list, tuple)) and any(holds_block(v) for v in value)

    return (isinstance(block, dict) and [k for k in block if str(k).startswith("@")] == ["@tokenizers"]
            and not any(holds_block(v) for v in block.values()))


def warn_other_tokens(provenance: Dict[str, Any], model: Any, nlp, lang: str, path: PathLike) -> None:
    """Warn (:class:`~spacy_elmo.errors.TokenizerMismatchWarning`) when ``path`` read with ``nlp`` (:func:`make_nlp` of ``lang``: ``embed``, ``evaluate``,
    ``fit-state``) gives other tokens than those the model ``model`` (``provenance``: its config.json record) was
    pretrained on (:func:`reads_other_tokens`), naming the ``--lang`` that reads it as ``pretrain`` did, or, where
    the language is the model's, the tokenizer that changed since (a package spaCy's tokenizer needs, installed or
    removed)."""
    tokenizer = tokenizer_settings(nlp)
    if not reads_other_tokens(provenance, lang, tokenizer):
        return
    trained_lang, trained_tokenizer = provenance["lang"], provenance.get("tokenizer")
    if trained_tokenizer is None:
        trained = Warnings.W_READ_TRAINED_UNRECORDED.format(lang=trained_lang)
    else:
        trained = Warnings.W_READ_TRAINED.format(lang=trained_lang, tokenizer=trained_tokenizer)
    if trained_lang != lang and reading_tokenizer_settings(trained_lang) is None:  # the CLI refuses that --lang
        fix = Warnings.W_READ_FIX_LANG_MISSING.format(lang=trained_lang)
    elif trained_lang != lang:
        fix = Warnings.W_READ_FIX_LANG.format(lang=trained_lang)
    else:
        # pretrain again on what is read here: --lang reads it where it is that language's reading here (the fallback
        # of a recorded ja block without SudachiPy), else --tokenizer (that of zh's jieba block: --lang zh reads characters)
        if tokenizer == reading_tokenizer_settings(lang):
            again, lines = Warnings.W_READ_AGAIN_LANG.format(lang=lang), ""
        else:  # the file's lines at the end of the message, where nothing follows them on their last line
            again = Warnings.W_READ_AGAIN_TOKENIZER.format(lang=lang)
            lines = Warnings.W_READ_AGAIN_LINES.format(tokenizer_cfg=tokenizer_cfg(tokenizer))
        recorded = recorded_tokenizer(provenance, lang)
        opening = (Warnings.W_READ_OPENING_BLOCK if records_other_block(recorded, lang)
                   else Warnings.W_READ_OPENING_SPACY).format(lang=lang)
        fix = Warnings.W_READ_FIX_TOKENIZER.format(opening=opening, lang=lang, tokenizer=trained_tokenizer, again=again,
                                                   lines=lines)
    warnings.warn(Warnings.W_READ_OTHER_TOKENS.format(model=model, trained=trained, path=path, lang=lang,
                                                      tokenizer=tokenizer, fix=fix), TokenizerMismatchWarning,
                  stacklevel=3)


def spacy_rules(nlp) -> str:
    """sha256 of what spaCy's language data decide with the same tokenizer block: the tokenizer's
    serialized rules (exceptions, prefix/suffix/infix, token_match and url_match patterns; what
    ``nlp.tokenizer.to_bytes`` holds besides the vocab) and the sentencizer's punctuation. A spaCy
    upgrade that changes them changes this digest; one that does not (most patch releases) keeps it,
    unlike the spaCy version."""
    h = hashlib.sha256()
    to_bytes = getattr(nlp.tokenizer, "to_bytes", None)
    if to_bytes is not None:
        h.update(to_bytes(exclude=["vocab"]))
    if "sentencizer" in nlp.pipe_names:
        pipe = nlp.get_pipe("sentencizer")
        settings = {"punct_chars": sorted(pipe.punct_chars), "overwrite": bool(pipe.overwrite)}  # a set: sorted
        h.update(json.dumps(settings, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def tokenization(nlp) -> dict:
    """What decides the tokens text gives with ``nlp``: its tokenizer block (:func:`tokenizer_settings`;
    it changes when, say, SudachiPy gets installed for ``ja``), spaCy's rules of that tokenizer and
    sentencizer (:func:`spacy_rules`) and ``TOKEN_RULES``."""
    return {"tokenizer": tokenizer_settings(nlp), "spacy_rules": spacy_rules(nlp), "rules": TOKEN_RULES}


def word_texts(tokens) -> List[str]:
    """The texts of spaCy tokens (a Doc or Span) without the whitespace tokens: what the biLM reads."""
    return [t.text for t in tokens if not t.is_space]


def iter_sentences(texts: Iterator[str], nlp, batch_size: int = 256) -> Iterator[List[str]]:
    """Token strings of every sentence (whitespace tokens dropped, empty sentences skipped)."""
    for doc in nlp.pipe(texts, batch_size=batch_size):
        for sent in doc.sents:
            tokens = word_texts(sent)
            if tokens:
                yield tokens


#: Characters of text per batch a tokenizing worker process gets (about 20,000 tokens of English).
BATCH_CHARS = 1 << 17
#: ``processes=0`` (auto) tokenizes in one process below this many bytes of input (as stored): about 9 s
#: of one process's work (English, ~360,000 tokens/s), of which two workers save about half, while
#: workers started by spawn or forkserver (macOS; Linux from Python 3.14) spend about 3.5 s importing
#: torch and spaCy (measured on 2 cores; fork: under 0.1 s).
AUTO_MIN_BYTES = 16 << 20
#: The most worker processes ``processes=0`` starts: the parent reads, decodes and numbers the tokens
#: of all of them (measured ~3.3M tokens/s against ~0.47M per worker), so more hardly help.
AUTO_MAX_PROCESSES = 6
#: The rule of ``processes=0``, for the option's help and error.
AUTO_RULE = f"0: auto, 1 below {AUTO_MIN_BYTES >> 20} MiB of text, else one per CPU, at most {AUTO_MAX_PROCESSES}"
#: Seconds a worker waits for work before checking that its parent is alive.
WORKER_POLL = 1.0


def tokenize_processes(processes: int, path: PathLike) -> int:
    """The worker processes that tokenize the corpus at ``path``: ``processes`` when it is 1 or more; 0
    (auto): 1 below :data:`AUTO_MIN_BYTES` of files, else the usable CPUs, at most :data:`AUTO_MAX_PROCESSES`."""
    if processes:
        return processes
    if sum(f.stat().st_size for f in list_text_files(path)) < AUTO_MIN_BYTES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, AUTO_MAX_PROCESSES))


def _batches(texts: Iterator[str], limit: int) -> Iterator[List[str]]:
    """Consecutive texts in lists of about ``limit`` characters (at least one text each)."""
    batch, size = [], 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the thread that started it ends (its parent killed,
    even in the middle of sending it a batch, where a read would wait forever). Elsewhere a no-op:
    :func:`_tokenize_worker` checks its parent while it waits for work."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _tokenize_worker(reading: Tuple[str, Dict[str, Any]], tasks, results) -> None:
    """A worker process: ``(seq, texts)`` from ``tasks`` -> ``(seq, sentences, None)`` (or ``(seq, None,
    message)``, E_TOKENIZE_WORKER_BUILD or E_TOKENIZE_WORKER_FAILED) on ``results``, until None, read with :func:`make_nlp` of ``reading`` (:func:`_pipeline_recipe`),
    built here (an error in building it is the first batch's). It ends with its parent (killed: no orphan; under
    forkserver the parent is the fork server, which ends with the process that started it), and leaves Ctrl-C to
    the process that started it, which stops it."""
    _die_with_parent()
    nlp = None
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() ends it, whatever handler a fork brought along
    while True:
        if os.getppid() != parent:  # the parent is gone (where prctl is not)
            os._exit(0)
        try:
            item = tasks.get(timeout=WORKER_POLL)
        except queue.Empty:
            continue
        if item is None:
            return
        seq, texts = item
        if nlp is None:
            lang, block = reading
            try:
                nlp = make_nlp(lang, tokenizer=block, source=Errors.E_TOKENIZER_SOURCE_WORKER)
            except Exception as err:  # noqa: BLE001 - the parent raises it: a build failure has its own fix
                results.put((seq, None, Errors.E_TOKENIZE_WORKER_BUILD.format(
                    lang=lang, block=shown_block(block), error=_traceback_text(err))))
                return
        try:
            results.put((seq, list(iter_sentences(texts, nlp, batch_size=len(texts))), None))
        except Exception as err:  # noqa: BLE001 - the parent raises it, with the worker's traceback
            results.put((seq, None, Errors.E_TOKENIZE_WORKER_FAILED.format(
                error=_traceback_text(err))))
            return


def _traceback_text(err: BaseException) -> str:
    """``err``'s traceback as Python prints it (a worker's, for the parent's message). The three-argument form:
    ``format_exception(err)`` alone needs Python 3.10."""
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def _receive(item: tuple, waiting: dict) -> None:
    """A worker's ``(seq, sentences, error)`` into ``waiting``; its error (the whole message) raised."""
    seq, sentences, error = item
    if error is not None:
        raise RuntimeError(error)
    waiting[seq] = sentences


def _drain(results, waiting: dict) -> None:
    """:func:`_receive` what is in ``results`` now (an ended worker sent all it sent before it ended)."""
    while True:
        try:
            item = results.get_nowait()
        except queue.Empty:
            return
        _receive(item, waiting)


def _pipeline_recipe(nlp) -> Tuple[str, Dict[str, Any]]:
    """``(lang, block)``: what :func:`make_nlp` (``tokenizer=block``) builds ``nlp`` (a :func:`make_nlp` pipeline)
    from again: its language and the tokenizer block it was built with (:func:`tokenizer_settings`: the one given,
    recorded, default, or the rule-based fallback). Tokenizing workers get this, plain data, not ``nlp``: spawn and
    forkserver pickle what a worker gets, and a tokenizer may hold what pickle refuses (spaCy's ChineseTokenizer of
    ``segmenter = "jieba"`` holds the jieba module)."""
    return nlp.lang, tokenizer_settings(nlp)


@contextmanager
def sentence_stream(texts: Iterator[str], nlp, processes: int = 1) -> Iterator[Iterator[List[str]]]:
    """:func:`iter_sentences` of ``texts`` tokenized by ``processes`` worker processes, in the order of
    ``texts`` (the same sentences as one process). ``texts`` is read in this process (its statistics,
    replaced bytes included, stay here); at most two batches per worker are on their way. Leaving the
    ``with`` block, also by an error or Ctrl-C, stops the workers, which build ``nlp`` (a :func:`make_nlp`
    pipeline) again each (:func:`_pipeline_recipe`)."""
    if processes <= 1:
        yield iter_sentences(texts, nlp)
        return
    context = multiprocessing.get_context()
    tasks, results = context.Queue(), context.Queue()
    reading = _pipeline_recipe(nlp)
    workers = [context.Process(target=_tokenize_worker, args=(reading, tasks, results), daemon=True)
               for _ in range(processes)]

    def ordered() -> Iterator[List[str]]:
        batches = enumerate(_batches(texts, BATCH_CHARS))
        sent = done = 0
        waiting: dict = {}
        for seq, batch in itertools.islice(batches, 2 * processes):
            tasks.put((seq, batch))
            sent += 1
        while done < sent:
            while done not in waiting:
                try:
                    _receive(results.get(timeout=WORKER_POLL), waiting)
                except queue.Empty:
                    dead = [w.exitcode for w in workers if not w.is_alive()]
                    if dead:
                        # A worker that failed sent its error before it ended, maybe after the wait above
                        # timed out: the error is in the queue, and is the one to show.
                        _drain(results, waiting)
                        raise RuntimeError(Errors.E_TOKENIZE_WORKER_DIED.format(n=len(dead), exitcode=dead[0]))
            for seq, batch in itertools.islice(batches, 1):  # keep the workers busy while this batch is read
                tasks.put((seq, batch))
                sent += 1
            yield from waiting.pop(done)
            done += 1
        for _ in workers:
            tasks.put(None)

    started = []
    try:
        for worker in workers:
            worker.start()
            started.append(worker)
        yield ordered()
    finally:
        for worker in started:
            worker.terminate()
        for worker in started:
            worker.join()
        for q in (tasks, results):
            q.cancel_join_thread()  # nothing left to send to dead workers: do not wait on it at exit
            q.close()


def tokenize_file(
    path: PathLike, lang: str, stats: Optional[ReadStats] = None, progress: bool = False, limit: Optional[int] = None,
    nlp=None,
) -> List[List[str]]:
    """All sentences of a (small) text file or directory, in memory (``evaluate``, ``fit-state``, ``pretrain
    --heldout``); the first ``limit`` only when given (the reading stops there). ``progress``: a bar of the
    words read (spaCy's tokenizing: minutes on a big file). ``nlp``: :func:`make_nlp` of ``lang`` when the caller
    built it already (to check it against the model's tokenizer, :func:`warn_other_tokens`)."""
    stats = stats if stats is not None else ReadStats()
    sentences: List[List[str]] = []
    nlp = make_nlp(lang) if nlp is None else nlp
    texts = iter_text(path, stats, nlp.tokenizer)
    # its first piece read before the bar is drawn: a missing or binary file is an error under no empty bar
    texts = itertools.chain(list(itertools.islice(texts, 1)), texts)
    with _progress(progress, f"tokenizing {Path(path).name}") as bar:
        for sentence in itertools.islice(iter_sentences(texts, nlp), limit):
            sentences.append(sentence)
            bar.update(len(sentence))
    return sentences


def _file_stamp(file: Path) -> list:
    """A file of the cache's fingerprint: path, size and mtime in nanoseconds (of the file as stored,
    compressed or not: what changes when it is rewritten; whole seconds missed a rewrite of the same size
    within the second the cache was built), and the :func:`compression` of a compressed one. An older
    spacy-elmo skipped compressed files as binary: its caches have no format there and are rebuilt,
    while those of plain text files stay current."""
    st = file.stat()
    kind = compression(file)
    return [str(file), st.st_size, st.st_mtime_ns] + ([kind] if kind else [])


#: ``fingerprint["mtime"]``: the files' mtimes are nanoseconds. Fingerprints without it (an older
#: spacy-elmo's) recorded whole seconds, ``int(st_mtime)``, and are compared at that precision.
MTIME_NS = "ns"


def fingerprint(path: PathLike, lang: str, nlp=None) -> dict:
    """What the cache was built from: files (:func:`_file_stamp`: sizes, mtimes and compression), the
    language and the :func:`tokenization` of ``nlp`` (default: :func:`make_nlp` of ``lang``)."""
    files = list_text_files(path)
    return {
        "version": CACHE_VERSION,
        "path": str(Path(path).resolve()),
        "lang": lang,
        "tokenization": tokenization(make_nlp(lang) if nlp is None else nlp),
        "mtime": MTIME_NS,
        "files": [_file_stamp(f) for f in files],
    }


def _whole_seconds(mtime_ns: int) -> int:
    """``int(st_mtime)`` of a file whose ``st_mtime_ns`` is ``mtime_ns``: what an older spacy-elmo recorded
    (CPython's float st_mtime, ``sec + nsec * 1e-9``, rounds up to the next second within ~120 ns of it)."""
    sec, nsec = divmod(mtime_ns, 1_000_000_000)
    return int(sec + nsec * 1e-9)


def _at_precision_of(recorded: dict, stamp: dict) -> dict:
    """``stamp`` (:func:`fingerprint`) with the mtimes at the precision of the fingerprint ``recorded``:
    whole seconds for an older spacy-elmo's, so that its cache of unchanged files stays current (and a
    ``--resume`` over them reuses it) after an upgrade."""
    if recorded.get("mtime") == stamp.get("mtime"):
        return stamp
    files = [[entry[0], entry[1], _whole_seconds(entry[2]), *entry[3:]] for entry in stamp["files"]]
    return {**{key: value for key, value in stamp.items() if key != "mtime"}, "files": files}


def _read_meta(cache_dir: PathLike) -> Optional[dict]:
    """The meta.json of the cache in ``cache_dir``; None where there is none, or it is damaged: no UTF-8, no JSON, no
    object, or nested past Python's recursion limit (:func:`paths.read_json_file`; a RecursionError was a traceback
    of pretrain's corpus scan from a data/meta.json of a directory under the corpus, not one of ours). An OSError
    reading it is the caller's."""
    meta_path = Path(cache_dir) / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = read_json_file(meta_path, "{error}")
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _cached_stamp(cache_dir: PathLike) -> Optional[dict]:
    """The fingerprint of the complete cache in ``cache_dir`` (None: none, or a damaged marker: rebuild)."""
    return _stamp_of(_read_meta(cache_dir))


def _stamp_of(meta: Optional[dict]) -> Optional[dict]:
    """The fingerprint a cache's meta.json ``meta`` (:func:`_read_meta`) records; None where it records none."""
    stamp = meta.get("fingerprint") if meta is not None else None
    return stamp if isinstance(stamp, dict) else None


def cache_is_current(cache_dir: PathLike, stamp: dict) -> bool:
    """Whether ``cache_dir`` holds a complete cache built from what ``stamp`` (:func:`fingerprint`) names, its
    files of the sizes its meta.json records (:func:`cache_damage`; a file cut short is built anew).

    Files are compared by their sizes and times, not their text: an edit that keeps both (``cp --preserve``,
    ``touch -r``, ``rsync -t``) is not seen here. A ``--resume`` reads the text once more and compares its
    sha256 (:func:`same_text`); a run that does not resume reuses the cache, as reading every file again to
    hash it would take as long as reading it (10 GB of bzip2: 11 minutes) on every run."""
    return current_meta(cache_dir, stamp) is not None


def current_meta(cache_dir: PathLike, stamp: dict) -> Optional[dict]:
    """The meta.json of the cache in ``cache_dir`` where it is current (:func:`cache_is_current`), else None; read
    once, for the fingerprint and the files' sizes both (it holds a digest per file of the corpus: 0.9 MB for 5,000
    files). The trainer keeps it as the reused cache's meta, not read again by :func:`build_corpus`."""
    meta = _read_meta(cache_dir)
    recorded = _stamp_of(meta)
    if recorded is None or recorded != _at_precision_of(recorded, stamp):
        return None
    return meta if _sizes_damage(Path(cache_dir), meta) is None else None


#: meta.json's key for the size in bytes of types.txt (a cache of an older spacy-elmo lacks it): its lines are
#: counted only as :meth:`Corpus.load` reads it, its size by a stat wherever the cache is checked.
TYPES_BYTES = "types_bytes"

#: The files of a corpus cache checked by size: ``(name, item size, meta.json's count of them)``, its count a key
#: of meta.json or of its ``stats``; types.txt's items are its bytes.
CACHE_SIZED = (("tokens.i32", 4, "n_stream"), ("sent_lengths.i64", 8, "n_sentences"), ("counts.i64", 8, "n_types"),
               ("types.txt", 1, TYPES_BYTES))


def cache_damage(cache_dir: PathLike) -> Optional[str]:
    """None when the files of the complete cache in ``cache_dir`` hold as many items as its meta.json records
    (:data:`CACHE_SIZED`); else ``E_CACHE_DAMAGED`` for the first that does not (a write cut short: the cache read
    then gave "0 tokens" or a numpy broadcast error), or for one that is missing. Sizes only (a stat): no count
    meta.json lacks is checked, nor any without a readable meta.json. (:meth:`Corpus.load` checks types.txt's lines
    too, once read: :func:`_types_damage`.)"""
    cache = Path(cache_dir)
    return _sizes_damage(cache, _meta_to_check(cache))


def _meta_to_check(cache: Path) -> Optional[dict]:
    """The meta.json :func:`cache_damage` checks the cache against: None where there is none, or it is damaged or
    cannot be read (nothing then to check)."""
    try:
        return _read_meta(cache)
    except OSError:
        return None


def _sizes_damage(cache: Path, meta: Optional[dict]) -> Optional[str]:
    """:func:`cache_damage` of the files' sizes, against ``meta`` (:func:`_meta_to_check`)."""
    if meta is None:
        return None
    stats: Dict[str, Any] = meta["stats"] if isinstance(meta.get("stats"), dict) else {}
    for name, size, key in CACHE_SIZED:
        expected = meta.get(key, stats.get(key))
        if not isinstance(expected, int):
            continue
        try:
            found = (cache / name).stat().st_size
        except FileNotFoundError:
            found = 0
        if found != expected * size:
            unit = "bytes" if size == 1 else "items" + (f" (and {found % size} bytes)" if found % size else "")
            return Errors.E_CACHE_DAMAGED.format(path=cache, file=name, found=found // size, expected=expected, unit=unit)
    return None


def _types_damage(cache: Path, meta: Optional[dict], types: List[str]) -> Optional[str]:
    """``E_CACHE_DAMAGED`` where types.txt's lines ``types`` are not as many as ``meta`` (:func:`_meta_to_check`)
    records; else None."""
    if meta is not None and isinstance(meta.get("n_types"), int) and len(types) != meta["n_types"]:
        return Errors.E_CACHE_DAMAGED.format(path=cache, file="types.txt", found=len(types), expected=meta["n_types"],
                                             unit="types")
    return None


#: meta.json's key for the sha256 of each file's text as it was tokenized (:attr:`ReadStats.text_sha256`).
TEXT_DIGESTS = "text_sha256"


def same_text(cache_dir: PathLike, meta: Optional[dict] = None) -> bool:
    """Whether the files the cache in ``cache_dir`` was tokenized from hold the same text now: their sha256
    (decompressed) against the cache's :data:`TEXT_DIGESTS`, each file read once more (a ``--resume`` checks it,
    where the sizes and times that :func:`cache_is_current` compares are those of the text tokenized; an edit that
    keeps both, ``cp --preserve``, ``touch -r``, ``rsync -t``, is seen). True for a cache that recorded none (an older
    spacy-elmo's): its sizes and times alone decide, as they did. The bytes are hashed in large pieces, not decoded
    line by line: the digest :func:`iter_lines` takes of them in the tokenizing pass is of every byte of
    :func:`open_text_file` in order too, its lines' ends and a byte order mark included. False where meta.json or its
    record is damaged (edited: no object of digests), the text then not known to be the same: the cache is built anew.
    ``meta``: the cache's meta.json where the caller has read it (:func:`current_meta`), else read here."""
    meta = _read_meta(cache_dir) if meta is None else meta
    if meta is None:  # none, or damaged: no cache to compare
        return False
    recorded = meta.get(TEXT_DIGESTS) or {}
    if not isinstance(recorded, dict) or not all(isinstance(digest, str) for digest in recorded.values()):
        return False  # a list's .items() was an AttributeError's traceback of the resume
    for file, expected in recorded.items():
        with open_text_file(file) as f:
            if stream_sha256(f) != expected:
                return False
    return True


def tokenization_change(cache_dir: PathLike, stamp: dict) -> Optional[tuple]:
    """``(earlier, now)`` :func:`tokenization` when the cache in ``cache_dir`` was built from the files
    ``stamp`` names but read with another tokenization (``earlier`` None: an older spacy-elmo's cache,
    which did not record it); None otherwise."""
    earlier = _cached_stamp(cache_dir)
    if earlier is None:
        return None
    compared = _at_precision_of(earlier, stamp)
    if any(earlier.get(key) != compared[key] for key in ("path", "lang", "files")):
        return None
    if earlier.get("tokenization") == stamp["tokenization"]:
        return None
    return earlier.get("tokenization"), stamp["tokenization"]


def build_corpus(train_path: PathLike, lang: str, cache_dir: PathLike, progress: bool = True, nlp=None,
                 processes: int = 1) -> dict:
    """Tokenize the corpus into ``cache_dir`` (see the module docstring); return meta.

    Reuses a complete cache built from the same files, language and tokenization. ``nlp``: the
    :func:`make_nlp` of ``lang`` when the caller has built it already (default: built here).
    ``processes``: worker processes that tokenize (:func:`tokenize_processes`; 0: auto); the cache
    is the same byte for byte whatever their number, and so is its fingerprint.
    """
    cache = Path(cache_dir)
    nlp = make_nlp(lang) if nlp is None else nlp
    stamp = fingerprint(train_path, lang, nlp)
    meta = current_meta(cache, stamp)
    if meta is not None:
        return meta
    with _removed_unless_finished(cache):
        return _tokenize_into(cache, stamp, train_path, nlp, progress, processes)


@contextmanager
def _removed_unless_finished(cache: Path):
    """Creates ``cache`` for :func:`build_corpus`; a build that fails (text that holds no token, a binary file,
    a broken archive, Ctrl-C) removes what it wrote: the whole directory when this build created it (a pretrain
    that failed on its text left ``OUTPUT_DIR/data`` behind, so an OUTPUT_DIR new for the run was not removed
    again), else the raw token file."""
    created = not cache.exists()
    cache.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if created:
            shutil.rmtree(cache, ignore_errors=True)
        else:
            (cache / "tokens.raw").unlink(missing_ok=True)
        raise


def _tokenize_into(cache: Path, stamp: dict, train_path: PathLike, nlp, progress: bool, processes: int) -> dict:
    """:func:`build_corpus`'s work once the cache is not current: tokenize ``train_path`` into ``cache``."""
    meta_path = cache / "meta.json"
    # The files below are rewritten in place: drop the old marker first, so that a run killed
    # half-way leaves no complete-looking cache of the old text beside the new text's files.
    meta_path.unlink(missing_ok=True)
    stats = ReadStats()
    index = {s: i for i, s in enumerate(SPECIALS)}
    types = list(SPECIALS)
    counts = array("q", [0, 0, 0])
    lengths = array("q")
    buf = array("i")
    bar = _progress(progress, "tokenizing")
    raw_path = cache / "tokens.raw"
    processes = tokenize_processes(processes, train_path)
    with open(raw_path, "wb") as raw, sentence_stream(iter_text(train_path, stats, nlp.tokenizer), nlp, processes) as sentences:
        for sentence in sentences:
            buf.append(BOS)
            for tok in sentence:
                i = index.get(tok)
                if i is None:
                    i = index[tok] = len(types)
                    types.append(tok)
                    counts.append(0)
                counts[i] += 1
                buf.append(i)
            buf.append(EOS)
            lengths.append(len(sentence) + 2)
            stats.n_sentences += 1
            stats.n_tokens += len(sentence)
            if len(buf) > 1 << 20:
                with naming(raw_path):  # a full disk names its file: OUTPUT_DIR's, the run says (not a worker's /dev/shm)
                    buf.tofile(raw)
                bar.update(stats.n_tokens - bar.n)  # words, as the summary counts them (not <S>, </S>)
                buf = array("i")
        with naming(raw_path):
            buf.tofile(raw)
            raw.flush()  # here, not at the file's close, where the error would name no file
        bar.update(stats.n_tokens - bar.n)
    bar.close()
    if stats.replaced_bytes:
        warnings.warn(
            Warnings.W_REPLACED_BYTES.format(n_bytes=counted(stats.replaced_bytes, "undecodable byte"),
                                             n_files=counted(stats.files_with_replacements, "file"),
                                             files=listed(stats.replaced_files, REPLACED_FILES_NAMED,
                                                          stats.files_with_replacements)),
            RuntimeWarning,
            stacklevel=3,  # build_corpus's caller
        )
    if stats.n_tokens == 0:
        raise ValueError(Errors.E_EMPTY_CORPUS.format(path=train_path, files=files_read(stats)))
    # Final order: specials, then (-count, string); remap the stream in chunks.
    counts_np = np.frombuffer(counts, dtype=np.int64).copy()
    by_count = sorted(range(3, len(types)), key=lambda i: (-counts_np[i], types[i]))
    order = np.array([0, 1, 2] + by_count, dtype=np.int64)
    remap = np.empty_like(order)
    remap[order] = np.arange(len(order))
    stream = np.fromfile(raw_path, dtype=np.int32)
    _write_array(remap[stream].astype(np.int32), cache / "tokens.i32")
    del stream
    raw_path.unlink()
    _write_array(np.frombuffer(lengths, dtype=np.int64), cache / "sent_lengths.i64")
    _write_array(counts_np[order], cache / "counts.i64")
    types_text = "".join(types[i] + "\n" for i in order).encode("utf-8")
    with naming(cache / "types.txt"):
        (cache / "types.txt").write_bytes(types_text)
    for name in ("tokens.i32", "sent_lengths.i64", "counts.i64", "types.txt"):  # on the disk before meta.json says so
        with naming(cache / name):
            sync(cache / name)
    sync_dir(cache)
    # The counts, not the names the warning gave: the same text under another name (compressed) has the same stats.
    # n_hidden neither: hidden files are in no fingerprint, so a cache stays current when one is added or removed.
    stats_counts = {k: v for k, v in asdict(stats).items() if k not in ("replaced_files", "text_sha256", "n_hidden")}
    meta = {"fingerprint": stamp, "stats": stats_counts, "n_types": len(types), TYPES_BYTES: len(types_text),
            "n_stream": int(sum(lengths)),
            "tokenizer": tokenizer_settings(nlp), TEXT_DIGESTS: stats.text_sha256}
    atomic_write_text(meta_path, json.dumps(meta, indent=1))  # meta.json last: it marks a complete cache
    return meta


def _write_array(values: np.ndarray, path: Path) -> None:
    """``values``' bytes into ``path`` (what ``ndarray.tofile`` writes), through a Python file: a full disk is then
    an OSError with its errno (ENOSPC), where tofile said only "71818 requested and 29696 written"."""
    with naming(path), open(path, "wb") as f:
        f.write(np.ascontiguousarray(values).data.cast("B"))


@dataclass
class Corpus:
    """A tokenized corpus: ``tokens (N,)`` int32 type ids (sentences with markers),
    ``lengths (S,)`` sentence lengths, ``starts (S,)`` their offsets; ``types``."""

    tokens: np.ndarray
    lengths: np.ndarray
    types: List[str]
    counts: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    def digest(self) -> str:
        """sha256 of the type ids, sentence lengths and type strings: what the batches are made of."""
        h = hashlib.sha256()
        for array_ in (self.tokens, self.lengths):
            h.update(np.ascontiguousarray(array_).data.cast("B"))
        h.update("\n".join(self.types).encode("utf-8"))
        return h.hexdigest()

    @classmethod
    def load(cls, cache_dir: PathLike) -> "Corpus":
        """The corpus in the complete cache ``cache_dir`` (:func:`build_corpus`); FileNotFoundError where a file is
        missing, ValueError (``E_CACHE_DAMAGED``) where one holds other than its meta.json records
        (:func:`cache_damage`)."""
        cache = Path(cache_dir)
        types_text = (cache / "types.txt").read_bytes()
        tokens = np.fromfile(cache / "tokens.i32", dtype=np.int32)
        lengths = np.fromfile(cache / "sent_lengths.i64", dtype=np.int64)
        counts = np.fromfile(cache / "counts.i64", dtype=np.int64)
        # meta.json read once for both checks (:func:`cache_damage`'s): it holds a digest per file of the corpus
        # (0.9 MB for 5,000 files, 4 ms a read)
        meta = _meta_to_check(cache)
        damage = _sizes_damage(cache, meta)  # by sizes first: types.txt cut inside a character is no UnicodeDecodeError
        if damage is not None:
            raise ValueError(damage)
        try:
            # a "\r" ends each line where an older spacy-elmo wrote the cache on Windows (write_text's CRLF), its
            # meta.json with no types_bytes to catch it; no type holds one (the tokenizer never yields it)
            types = [line.removesuffix("\r") for line in types_text.decode("utf-8").split("\n")[:-1]]
        except UnicodeDecodeError as err:  # a cache of an older spacy-elmo records no size of types.txt
            raise ValueError(Errors.E_CACHE_TYPES_UNDECODABLE.format(path=cache, error=err)) from err
        damage = _types_damage(cache, meta, types)
        if damage is not None:
            raise ValueError(damage)
        return cls(tokens=tokens, lengths=lengths, types=types, counts=counts)

    @classmethod
    def from_sentences(cls, sentences: List[List[str]], vocab) -> "Corpus":
        """Sentences of token strings -> type ids of ``vocab`` (new strings are added to it)."""
        ids: List[int] = []
        lengths = []
        for s in sentences:
            ids.append(BOS)
            ids.extend(vocab.lookup(s))
            ids.append(EOS)
            lengths.append(len(s) + 2)
        return cls(np.array(ids, dtype=np.int32), np.array(lengths, dtype=np.int64), vocab.types)


def _progress(enabled: bool, desc: str):
    from ..progress import progress_bar

    return progress_bar(desc=desc, unit=" tok", unit_scale=True, disable=not enabled, mininterval=1.0)
