"""Embedding a corpus into HDF5, one dataset per input line (no spaCy here).

The file layout is AllenNLP's ``allennlp elmo`` output, so existing readers
work: dataset ``"i"`` holds line ``i``'s vectors, ``(L + 1, n, 2P)`` float for
``layers="all"`` and ``(n, 2P)`` for ``"top"`` / ``"average"``; dataset
``"sentence_to_index"`` (shape ``(1,)``, one string) holds the JSON map from each
line's text (stripped) to its dataset's name (``"i"``). Lines are
whitespace-tokenized (as AllenNLP's command), or by any ``tokenize`` callable. Unlike AllenNLP, an empty line is not an error: it gets
an ``n = 0`` dataset, so line ``i`` is always dataset ``"i"``.

Long runs survive a kill: the lines are embedded in parts of ``part_size``
lines, each written to ``OUTPUT.parts/`` under a temporary name and renamed
when complete; a rerun keeps the finished parts (when the model, input and
settings are the ones recorded in ``manifest.json``, which the directory is
created with; the input by the sha256 of its text, decompressed for a gzip, bzip2
or xz input, so the same text compressed otherwise or not at all reuses them)
and embeds the rest. The parts are merged into ``OUTPUT`` (again
through a temporary name, whose identity is recorded in ``merged.json`` before
the rename) at the end, and the directory is removed; a rerun after a kill
between the two only removes it. ``OUTPUT`` records the run that wrote it (:data:`RECORDED`), so that
the same run again, after a kill once the parts were removed, finds it complete and embeds nothing.
The biLM is stateless and in eval mode, so a resumed run writes exactly the
numbers of an uninterrupted one. The settings include the batch sizes and the
cache size: which lines share a biLM call changes the vectors' last bits
(float32 rounding, about 1e-6), so parts written with other values are refused.
The device, the backend and the number of torch threads are not recorded:
resuming with others mixes parts that differ from each other by such rounding.
"""

from array import array
import hashlib
import io
import itertools
import json
import os
import re
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np
import torch

from ._typing import PathLike
from .atomic import (atomic_write, atomic_write_text, make_dirs, out_of_space, remove_dir, remove_empty_dirs, remove_leftovers,
                     replace_dir, temporary_files, try_lock, warn_if_not_locked)
from .bilm import BiLM
from .bilm.token_cache import TokenCache, run_rows
from .chars import TEXT_TYPES
from .errors import Errors, Warnings, counted, with_article
from .hdf5 import SENTENCE_TO_INDEX, hdf5_for_writing
from .paths import json_shown, missing_path_error, name_shown, read_json_file

LAYER_MODES = ("all", "top", "average")
MANIFEST = "manifest.json"
MERGED = "merged.json"
TOKENS = "part_tokens"  # the manifest's key for the sha256 of each part's token rows (rows_digest)
FORMAT = "spacy-elmo/embedding-parts-v1"
#: The root attribute of a merged OUTPUT that records the run which wrote it (:func:`_output_record`, JSON): a rerun
#: of that run finds OUTPUT complete, also once its parts are gone (a kill after their removal).
RECORDED = "spacy_elmo_embed"
#: Version of what ``embed`` does to text around its tokenizer (the manifest's ``token_rules``); bump it when
#: that changes a line's tokens, so parts of another version are not reused. 2: a leading byte order mark
#: is dropped, and with ``--lang`` spaCy's whitespace tokens are left out. Pretraining's own
#: ``training.data.TOKEN_RULES`` (3 to 6: :func:`training.data.cut_runs`) is not this: embed tokenizes as
#: the pipeline does, no stretch cut, so its parts stay current when only pretraining's reading changes.
EMBED_TOKEN_RULES = 2


def _whitespace(line: str) -> List[str]:
    return line.split()


def _callable_name(function: Callable) -> str:
    """``module.qualname`` of a tokenize callable (its class's for an object such as a spaCy tokenizer)."""
    named = function if hasattr(function, "__qualname__") else type(function)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', '?')}"


def rows_digest(rows: Iterable[Sequence[str]]) -> str:
    """The sha256 of token rows (each row's JSON list, one a line): what the manifest records of each part's
    tokens, so that a resume whose tokenizer splits a written part's lines otherwise is refused."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(list(row), ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _tokens(result, path: Path, line: int) -> List[str]:
    """The tokens ``tokenize`` returned for ``line``, as a list of str; anything else is a TypeError
    (a str would be read as one token per character)."""
    if isinstance(result, TEXT_TYPES) or not isinstance(result, Iterable):
        raise TypeError(Errors.E_EMBED_TOKENIZE_RESULT.format(path=path, line=line, a_type=with_article(type(result).__name__)))
    tokens = list(result)
    for j, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(Errors.E_EMBED_TOKEN_NOT_STR.format(
                path=path, line=line, index=j, a_type=with_article(type(token).__name__)))
    return tokens


class PartDigests:
    """A ``hashlib``-like sink for ``training.data.iter_lines`` (which updates it with each line's
    bytes, once a line, before yielding it): the sha256 of the whole text and of every part of
    ``part_size`` lines (as :func:`_parts` cuts them; the last one may be shorter)."""

    def __init__(self, part_size: int):
        self.part_size, self.whole, self.n_lines = part_size, hashlib.sha256(), 0
        self._done: List[str] = []  # hex digests of the finished parts: 64 characters a part
        self._part = hashlib.sha256()

    def update(self, raw: bytes) -> None:
        if self.n_lines and self.n_lines % self.part_size == 0:
            self._done.append(self._part.hexdigest())
            self._part = hashlib.sha256()
        self.n_lines += 1
        self.whole.update(raw)
        self._part.update(raw)

    def last(self) -> str:
        """The hex digest of the last part's lines read so far."""
        return self._part.hexdigest()

    def parts(self) -> List[str]:
        """The hex digest of each part of the lines read so far (none before the first line)."""
        return self._done + [self.last()] if self.n_lines else []


def scan_lines(path: PathLike, digests: PartDigests, progress: bool = False) -> int:
    """The number of lines of ``path`` (UTF-8; undecodable bytes become U+FFFD, with one warning; gzip,
    bzip2 and xz files are decompressed: ``training.data.open_text_file``), updating ``digests`` with
    the text's bytes (``training.data.iter_lines``): its sha256 and each part's. Nothing is kept: the
    later passes read the lines again, each part checked against its digest (:func:`same_parts`).

    Line ``i`` of the file is item ``i``, empty lines included: lines end at ``\n`` only (with
    any ``\r`` before it), as for ``wc -l``; a leading byte order mark is not text (as in
    pretraining: ``training.data.iter_lines``). A ``\r`` inside a line is warned of, once
    (:data:`Warnings.W_EMBED_CARRIAGE_RETURN`): a file whose lines end in ``\r`` alone (classic Mac OS) is one line.
    A U+FEFF after the start is kept, a character of its word as the pipeline reads it, and warned of once
    (:data:`Warnings.W_BOM_INSIDE`, ``training.data.BomCount``), as pretraining, evaluate and fit-state do.
    ``progress``: a bar of the bytes of the file read (compressed, as on the disk), of its size: this pass
    took minutes on a big file without a word (10 GB of bzip2: 11 minutes).
    """
    from .progress import progress_bar
    from .training.data import BomCount, iter_lines, not_text_error, not_utf8, replaced_bytes_so_far

    path = Path(path)
    check_input_file(path)
    kind = not_utf8(path)
    if kind is not None:
        raise ValueError(not_text_error(path, kind, directories=False))  # one file: no directory's skipping to tell of
    before = replaced_bytes_so_far()
    n_lines, with_cr = 0, 0
    boms = BomCount()
    with progress_bar(total=path.stat().st_size, desc="reading", unit="B", unit_scale=True, unit_divisor=1024,
                      disable=not progress) as bar:
        for line in iter_lines(path, digests, on_read=lambda position: bar.update(position - bar.n)):
            n_lines += 1
            if not with_cr and "\r" in line:  # one at its end is part of the line's end
                with_cr = n_lines
            boms.add(line)
    boms.warn(path)
    if with_cr:
        warnings.warn(Warnings.W_EMBED_CARRIAGE_RETURN.format(path=path, line=with_cr), RuntimeWarning, stacklevel=2)
    replaced = replaced_bytes_so_far() - before
    if replaced:
        warnings.warn(Warnings.W_REPLACED_BYTES.format(n_bytes=counted(replaced, "undecodable byte"), n_files=counted(1, "file"),
                                                      files=name_shown(path)), RuntimeWarning, stacklevel=2)
    return n_lines


class InputChanged(ValueError):
    """The input's text is not the one read at the start (:data:`Errors.E_EMBED_INPUT_CHANGED`)."""


def same_parts(path: Path, part_size: int, expected: Sequence[str]) -> Iterator[tuple]:
    """``(start, lines)`` of ``path`` again, as :func:`_parts` cuts them, each part's text checked
    against its digest in ``expected`` (:meth:`PartDigests.parts` of the first pass) before it is
    yielded: :class:`InputChanged` at the first part that differs, or when the file has another
    number of parts (it changed during the run). So no part of another text reaches the caller."""
    from .training.data import iter_lines

    digests, n_parts = PartDigests(part_size), 0
    for start, chunk in _parts(iter_lines(path, digests), part_size):  # the chunk read, not the line after it
        if n_parts == len(expected) or digests.last() != expected[n_parts]:
            raise InputChanged(Errors.E_EMBED_INPUT_CHANGED.format(path=path))
        n_parts += 1
        yield start, chunk
    if n_parts != len(expected):  # the file ends earlier
        raise InputChanged(Errors.E_EMBED_INPUT_CHANGED.format(path=path))


def check_input_file(path: Path) -> None:
    """Refuse an input that does not exist (naming a ~ no shell expanded; ``-``, standard input elsewhere, saying
    so) or is no regular file: the text is read twice, which a directory or a pipe cannot give."""
    if not path.exists():
        raise missing_path_error(path, Errors.E_EMBED_INPUT_MISSING.format(path=path), stdin=Errors.E_EMBED_INPUT_STDIN)
    if not path.is_file():
        raise ValueError(Errors.E_EMBED_INPUT_NOT_A_FILE.format(path=path))


def check_paths(input_path: PathLike, output_path: PathLike, overwrite: bool = False) -> None:
    """Refuse, before any work, what :func:`embed_file` cannot read or write: an input that is no
    file, an output that is a directory, whose parts path (``OUTPUT.parts``) is something else than a directory, lies
    below a file or in a directory where no file can be created, is the input, or exists (without ``overwrite``),
    unless it is complete and records the run that wrote it (and no parts are left beside it): :func:`embed_file`
    then compares that run with this one (the same: OUTPUT is already complete; another: refused as existing), once
    it knows this run's manifest."""
    input_path, output_path = Path(input_path), Path(output_path)
    if output_path.is_dir():
        example = output_path / "vectors.h5"
        raise IsADirectoryError(Errors.E_EMBED_OUTPUT_IS_DIR.format(path=output_path, example=example))
    parts = parts_path(output_path)
    if parts.exists() and not parts.is_dir():
        # The user's file (or a FIFO): a resume said its "manifest cannot be read", --restart renamed it away for
        # deletion and failed on it (NotADirectoryError), and the next run deleted it as a killed removal's leftover.
        raise NotADirectoryError(Errors.E_EMBED_PARTS_NOT_DIR.format(parts=parts, path=output_path))
    check_input_file(input_path)
    if output_path.exists():
        if output_path.samefile(input_path):
            raise FileExistsError(Errors.E_EMBED_OUTPUT_IS_INPUT.format(path=output_path))
        if not overwrite and _earlier_merge(output_path) is None and _complete_record(output_path) is None:
            # What a run killed (or interrupted) while deleting its parts left: never reused, and it stayed for good.
            remove_leftovers(parts_path(output_path))
            raise FileExistsError(Errors.E_EMBED_OUTPUT_EXISTS.format(path=output_path))
    parent = output_path.absolute().parent
    while not parent.exists():  # created when the first part is written
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(Errors.E_EMBED_OUTPUT_PARENT.format(path=output_path, parent=parent))
    try:  # a read-only directory failed only after the whole text was read and tokenized
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as err:
        raise PermissionError(Errors.E_OUTPUT_NOT_WRITABLE.format(path=output_path, parent=parent, error=err)) from err


def model_fingerprint(bilm: BiLM) -> str:
    """sha256 over the biLM's config and every tensor of its state dict: each tensor's raw bytes, read as
    uint8 (numpy has no bfloat16, so ``.numpy()`` of a bfloat16 biLM failed; the bytes of a float32 one
    are the ones ``.numpy().tobytes()`` gave, so parts written before stay valid)."""
    h = hashlib.sha256(json.dumps(bilm.config.to_dict(), sort_keys=True).encode())
    for name, tensor in sorted(bilm.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


@torch.no_grad()
def embed_lines(
    bilm: BiLM, rows: Sequence[Sequence[str]], layers: str = "all", cache: Optional[TokenCache] = None
) -> List[np.ndarray]:
    """Vectors of token rows: ``(L + 1, n, 2P)`` per row for ``"all"``, else ``(n, 2P)``, float32.

    Rows are run together as given (the caller batches); empty rows give ``n = 0``.
    With ``cache`` the token vectors of words seen before are reused. A stateful biLM runs the
    empty rows too (``<S> </S>``, as AllenNLP 0.9's ElmoEmbedder runs those of a batch of two rows or more), so
    that row ``i`` carries batch row ``i``'s states, also in a batch of empty rows only. (0.9 ran nothing for the
    batch ``[[]]``, one empty row: ElmoEmbedder.embed_batch answers that batch itself, as 0.9 did.)
    """
    if layers not in LAYER_MODES:
        raise ValueError(Errors.E_EMBED_LAYERS.format(layers=layers))
    out: List[Optional[np.ndarray]] = [None] * len(rows)
    filled = [i for i, r in enumerate(rows) if len(r) or bilm.stateful]
    if filled:
        stacked = torch.stack(run_rows(bilm, [rows[i] for i in filled], cache).activations)  # (L + 1, B, T, 2P)
        if layers == "top":
            stacked = stacked[-1:]
        elif layers == "average":
            stacked = stacked.mean(0, keepdim=True)
        arrays = stacked.float().cpu().numpy()
        for b, i in enumerate(filled):
            vec = arrays[:, b, : len(rows[i])]
            out[i] = np.ascontiguousarray(vec if layers == "all" else vec[0])
    empty = empty_vectors(bilm, layers)
    return [empty if v is None else v for v in out]


def empty_vectors(bilm: BiLM, layers: str = "all") -> np.ndarray:
    """The vectors of an empty row (:func:`embed_lines`'s ``layers``): float32 ``(L + 1, 0, 2P)`` for ``"all"``,
    else ``(0, 2P)``."""
    L1, D = bilm.config.n_output_layers, bilm.config.output_dim
    return np.zeros((L1, 0, D) if layers == "all" else (0, D), dtype=np.float32)


def embed_file(
    bilm: BiLM,
    input_path: PathLike,
    output_path: PathLike,
    layers: str = "all",
    batch_size: int = 64,
    batch_tokens: int = 4096,
    part_size: int = 4096,
    max_tokens: int = 10_000,
    cache_size: int = 50_000,
    tokenize: Optional[Callable[[str], List[str]]] = None,
    tokenizer_name: Optional[str] = None,
    progress: bool = True,
    overwrite: bool = False,
    restart: bool = False,
    stop_after_parts: Optional[int] = None,
) -> Dict[str, int]:
    """Embed every line of ``input_path`` into the HDF5 file ``output_path``.

    batch_size, batch_tokens: at most that many lines and padded tokens (lines x
    longest) per biLM call, lines sorted by length within a part; cache_size:
    token vectors kept for reuse (0: none; emptied at every part, so a part's
    numbers never depend on the parts before it);
    part_size: lines per resumable part; max_tokens: the longest line
    accepted (a clear error names the line otherwise); tokenize: line ->
    tokens (default: whitespace), named by ``tokenizer_name`` in the manifest (default: "whitespace",
    or the module and name of ``tokenize``: parts of another tokenizer are not reused, nor parts of
    another :data:`EMBED_TOKEN_RULES`, which the manifest records too, nor parts whose lines
    ``tokenize`` splits otherwise than the run that wrote them: the manifest holds the sha256 of each
    part's tokens, :func:`rows_digest`, and a resume refuses a written part of other tokens);
    overwrite: replace an existing ``output_path``; restart: drop parts of an
    earlier run instead of resuming; stop_after_parts: stop (as if killed)
    after writing that many new parts. The input is read in passes (its lines counted and digested, then
    tokenized, then embedded part by part, then its lines mapped for ``sentence_to_index``), each holding
    one part's lines and tokens; only the map, built at the end, holds every distinct line. The first
    pass takes the sha256 of each part's text too, and every later pass checks each part against it
    before using it (:func:`same_parts`): a file rewritten during the run is an error
    (:data:`Errors.E_EMBED_INPUT_CHANGED`) at its first changed part, before any of it is written.
    OUTPUT records the run that wrote it (its manifest: the HDF5 attribute :data:`RECORDED`): a rerun of the same
    run (model, input, settings, tokens) into a complete OUTPUT, its parts removed (or their removal killed), finds
    it already complete: it reads and tokenizes the text again (to compare its tokens with the recorded ones) but
    runs no biLM and writes nothing; another run into it is refused without ``overwrite``: other settings before the
    text is read, another text after its first pass (lines counted and digested), other tokens after tokenizing.
    A write that finds no room in OUTPUT's directory (a full disk or quota, a file-size limit) is an OSError
    saying so (:data:`Errors.E_EMBED_NO_SPACE`): the finished parts are kept, and the same run goes on from them.
    Returns counts: lines, tokens, parts_written (now), parts_reused, finished (0/1), merged (1: this run wrote
    OUTPUT; 0: it stopped before, or found OUTPUT complete already). A second run into the same
    OUTPUT while one runs is refused (FileExistsError, :func:`output_lock`).
    """
    if layers not in LAYER_MODES:
        raise ValueError(Errors.E_EMBED_LAYERS.format(layers=layers))
    for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens), ("part_size", part_size),
                        ("max_tokens", max_tokens)):
        if value < 1:
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what="at least 1", value=value))
    if cache_size < 0:
        raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="cache_size", what="0 or more", value=cache_size))
    input_path, output_path = Path(input_path), Path(output_path)
    check_paths(input_path, output_path, overwrite)
    with output_lock(output_path):
        check_paths(input_path, output_path, overwrite)  # again: another run may have finished OUTPUT meanwhile
        try:
            return _embed_locked(bilm, input_path, output_path, layers, batch_size, batch_tokens, part_size, max_tokens,
                                 cache_size, tokenize, tokenizer_name, progress, overwrite, restart, stop_after_parts)
        except OSError as err:  # a full disk named a hidden temporary file, and said neither what is kept nor what to do
            if not out_of_space(err, output_path.absolute().parent):  # OUTPUT's and its parts' directory
                raise
            raise OSError(Errors.E_EMBED_NO_SPACE.format(path=output_path, error=err, parts=parts_path(output_path))) from err


def _embed_locked(bilm: BiLM, input_path: Path, output_path: Path, layers: str, batch_size: int, batch_tokens: int,
                  part_size: int, max_tokens: int, cache_size: int, tokenize: Optional[Callable[[str], List[str]]],
                  tokenizer_name: Optional[str], progress: bool, overwrite: bool, restart: bool,
                  stop_after_parts: Optional[int]) -> Dict[str, int]:
    """:func:`embed_file`'s work, its arguments checked, under the lock on OUTPUT (:func:`output_lock`)."""
    from .progress import progress_bar

    if tokenizer_name is None:
        tokenizer_name = "whitespace" if tokenize is None else _callable_name(tokenize)
    tokenize = tokenize or _whitespace
    # What can refuse the model is done before the passes over the text (which take minutes for a big file).
    if bilm.stateful:
        raise ValueError(Errors.E_EMBED_STATEFUL)
    settings = {  # the manifest's entries known before the text is read
        "format": FORMAT, "model": model_fingerprint(bilm), "layers": layers, "part_size": part_size,
        "tokenizer": tokenizer_name,
        "token_rules": EMBED_TOKEN_RULES,  # what the reading (a leading BOM) and --lang (whitespace tokens) drop
        # which lines share a biLM call (and a cached token vector) changes the last bits
        "batch_size": batch_size, "batch_tokens": batch_tokens, "cache_size": cache_size,
    }
    parts_dir = parts_path(output_path)
    if not restart and parts_dir.is_dir() and not (parts_dir / MERGED).exists():  # a resume of other settings
        _check_settings(_read_manifest(parts_dir), settings, parts_dir, input_path)
    # the record of the complete OUTPUT check_paths let through, read once: the lock keeps OUTPUT as it is
    recorded = None if overwrite or _earlier_merge(output_path) is not None else _complete_record(output_path)
    complete = recorded is not None
    if complete and (restart or not _same_run(recorded, settings)):
        # The complete OUTPUT of another run (check_paths let it through): refused before the passes over the text.
        raise FileExistsError(Errors.E_EMBED_OUTPUT_EXISTS.format(path=output_path))
    digests = PartDigests(part_size)  # of the text (decompressed) and of each part's, read with its lines
    n_lines = scan_lines(input_path, digests, progress)
    sha256, part_digests = digests.whole.hexdigest(), digests.parts()
    if complete and not _same_run(recorded, {"input": sha256, "n_lines": n_lines}):
        # Another text into the complete OUTPUT: refused now, not after tokenizing every line of it.
        raise FileExistsError(Errors.E_EMBED_OUTPUT_EXISTS.format(path=output_path))

    def parts() -> Iterator[tuple]:
        """The parts of the text read at the start, or InputChanged at the first part of another."""
        return same_parts(input_path, part_size, part_digests)

    def tokenized(lines: Iterable[str], start: int) -> List[List[str]]:
        """The token rows of ``lines``, lines ``start + 1``... of the file; a row longer than max_tokens is an error."""
        rows = [_tokens(tokenize(line), input_path, start + j + 1) for j, line in enumerate(lines)]
        for j, row in enumerate(rows):
            if len(row) > max_tokens:
                raise ValueError(Errors.E_EMBED_LINE_TOO_LONG.format(
                    path=input_path, line=start + j + 1, n=len(row), max_tokens=max_tokens))
        return rows

    # Every line is tokenized once before any work (a line over max_tokens is an error up front), and the
    # lines of each part written again when it is embedded: only one part's lines and tokens are in memory.
    n_tokens, token_digests = 0, []  # the digest of each part's token rows, for the manifest
    # Each line's token count, kept (4 bytes a line) only to check the structure of a complete OUTPUT
    lengths: Optional[array] = array("I") if complete else None
    with progress_bar(total=n_lines, desc="tokenizing", unit="line", disable=not progress) as lines_bar:  # spaCy's: minutes
        for start, chunk in parts():
            rows = tokenized(chunk, start)
            n_tokens += sum(map(len, rows))
            if lengths is not None:
                lengths.extend(map(len, rows))
            token_digests.append(rows_digest(rows))
            lines_bar.update(len(chunk))
    was_training = bilm.training
    bilm.eval()
    try:
        cache = TokenCache(cache_size)
        counts = {"lines": n_lines, "tokens": n_tokens, "parts_written": 0, "parts_reused": 0, "merged": 0}

        manifest = {
            # The digests of the parts' text are not recorded: "input" and "part_size" decide them.
            **settings, "input": sha256, "n_lines": n_lines,
            # each part's tokens: another tokenizer of the same name (two lambdas) gives other ones
            TOKENS: token_digests,
        }
        record = _output_record(manifest)  # what OUTPUT records of this run
        n_parts = (n_lines + part_size - 1) // part_size
        earlier = _earlier_merge(output_path)
        if earlier is not None:  # a run killed after writing OUTPUT, before removing its parts
            try:
                found = _read_manifest(earlier) or {}  # {}: a killed removal deleted it: OUTPUT's own record tells
            except ValueError:  # damaged or unreadable: as good as none, OUTPUT's record tells the same
                found = {}
            same = _same_manifest(found, manifest) if found else _same_run(_recorded_run(output_path), record)
            if same and not restart:
                with _finished_once_merged(output_path):
                    remove_dir(earlier)
                return {**counts, "parts_reused": n_parts, "finished": 1}
            if not overwrite:  # the finished output of other settings
                if not found:  # or what a killed removal left of its parts: no longer telling which
                    remove_leftovers(parts_dir)
                raise FileExistsError(Errors.E_EMBED_OUTPUT_EXISTS.format(path=output_path))
            remove_dir(earlier)
        remove_leftovers(parts_dir)  # a parts directory being created or removed when a run was killed
        if complete:  # killed after removing its parts (printing its summary, exiting): nothing left to do
            assert lengths is not None
            if _same_run(recorded, record) and _same_structure(
                    output_path, lengths, layers, bilm.config.n_output_layers, bilm.config.output_dim):
                return {**counts, "parts_reused": n_parts, "finished": 1}
            # the same settings, another text or other tokens
            raise FileExistsError(Errors.E_EMBED_OUTPUT_EXISTS.format(path=output_path))
        if parts_dir.exists() and restart:
            remove_dir(parts_dir)
        part_files = [parts_dir / f"part-{k:06d}.hdf5" for k in range(n_parts)]
        if parts_dir.exists():
            on_disk = _read_manifest(parts_dir)
            _check_settings(on_disk, {k: v for k, v in manifest.items() if k != TOKENS}, parts_dir, input_path)
            assert on_disk is not None  # _check_settings refused a parts directory without its manifest
            recorded = on_disk.get(TOKENS)
            if recorded is not None:  # None: a manifest of an earlier release, without them: its parts are trusted
                for k, part in enumerate(part_files):
                    if part.exists() and (k >= len(recorded) or recorded[k] != token_digests[k]):
                        raise ValueError(Errors.E_EMBED_PARTS_TOKENIZED.format(
                            part=part, first=k * part_size + 1, last=min((k + 1) * part_size, n_lines),
                            path=input_path, tokenizer=tokenizer_name, parts=parts_dir))
            if recorded != token_digests:  # the parts still to write are this run's tokens
                atomic_write_text(parts_dir / MANIFEST, json.dumps(manifest, indent=1))
        else:  # created whole: a parts directory always has its manifest
            replace_dir(parts_dir, lambda tmp: _new_parts_dir(tmp, manifest))

        counts["parts_reused"] = sum(1 for p in part_files if p.exists())
        # Reused lines are the bar's start, not progress: updating by them made the first
        # rate and time-left estimates count a whole earlier run as done in an instant.
        reused = sum(min(part_size, n_lines - k * part_size) for k, p in enumerate(part_files) if p.exists())
        # Closed however the loop ends: a bar left open by Ctrl-C was drawn again after the CLI's message.
        with progress_bar(total=n_lines, initial=reused, desc="embedding", unit="line", disable=not progress) as bar:
            # Each part is checked against the text read at the start before it is tokenized: a part of
            # another text (the file rewritten meanwhile) is never written under this text's manifest.
            for (start, chunk), part in zip(parts(), part_files):
                if part.exists():
                    continue
                if stop_after_parts is not None and counts["parts_written"] >= stop_after_parts:
                    return {**counts, "finished": 0}
                rows = tokenized(chunk, start)
                # Longest first: similar lengths share a batch, and the biggest batch shows up front.
                index = sorted(range(len(rows)), key=lambda j: -len(rows[j]))
                cache.clear()  # a resumed part computes what it would have computed straight through

                def write_part(tmp: Path) -> None:
                    with hdf5_for_writing(tmp) as f:  # a full disk: an OSError, where HDF5's own writes crashed
                        for batch in _batches(index, rows, batch_size, batch_tokens):
                            for j, vec in zip(batch, embed_lines(bilm, [rows[j] for j in batch], layers, cache)):
                                f.create_dataset(str(start + j), data=vec)
                            bar.update(len(batch))

                atomic_write(part, write_part)
                counts["parts_written"] += 1
        every_line = (line for _, chunk in parts() for line in chunk)
        with _finished_once_merged(output_path):
            _merge(part_files, every_line, n_lines, output_path, parts_dir, record, progress)
            remove_dir(parts_dir)
        return {**counts, "finished": 1, "merged": 1}
    finally:
        bilm.train(was_training)  # the caller's model comes back in its own mode


#: The output locks this process holds (:func:`output_lock`): the lock file's absolute path -> the thread holding it.
_HELD: Dict[str, int] = {}


@contextmanager
def output_lock(output_path: Path) -> Iterator[None]:
    """An exclusive ``flock`` (:func:`~spacy_elmo.atomic.try_lock`, pretrain's) on ``.OUTPUT.lock`` beside OUTPUT,
    which holds the run's pid, held while :func:`embed_file` reads and writes OUTPUT's parts and OUTPUT: a second
    run into the same OUTPUT (a job started twice) failed on the first's parts with HDF5's "Unable to synchronously
    open file"; it is refused (FileExistsError, :data:`Errors.E_EMBED_IN_USE`, naming the running one's pid).

    ``spacy-elmo embed`` takes it before loading the model (a second run is refused at once, not seconds later):
    :func:`embed_file` within, in the same thread, goes on under that hold (another thread, as another process,
    is refused).

    The file is removed at the end, before the lock is released (a run that then locks the removed file sees that
    it is no longer at that name, and takes the one there now); one that a killed run left (the kernel released its
    lock) is taken over and removed by the next run into OUTPUT. Directories made for it are removed again when the
    run leaves them empty. Not locked where there is no flock (Windows, some network file systems)."""
    lock = output_path.with_name(f".{output_path.name}.lock")
    key = os.path.abspath(lock)
    if _HELD.get(key) == threading.get_ident():  # this thread's own hold, taken around this one
        yield
        return
    created = make_dirs(lock.parent)
    try:
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                unlocked = try_lock(fd)
            except BlockingIOError:
                pid = _lock_holder(fd)
                os.close(fd)
                raise FileExistsError(Errors.E_EMBED_IN_USE.format(pid=pid, path=output_path)) from None
            if unlocked is not None or _is_at(fd, lock):
                break
            os.close(fd)
        warn_if_not_locked(unlocked, output_path, "OUTPUT", "embed")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            _HELD[key] = threading.get_ident()
            yield
        finally:
            _HELD.pop(key, None)
            with suppress(OSError):  # Windows removes no open file
                lock.unlink()
            os.close(fd)  # releases the lock
    finally:
        remove_empty_dirs(created)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the file open as ``fd`` is the one named ``path`` (not removed, nor replaced by another)."""
    try:
        st, at = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (at.st_dev, at.st_ino)


def _lock_holder(fd: int) -> str:
    """The pid written in the lock file ``fd`` by the run holding it ("unknown" if it wrote none within a second:
    it writes its pid just after taking the lock)."""
    for _ in range(100):
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if pid:
            return pid
        time.sleep(0.01)
    return "unknown"


@contextmanager
def _finished_once_merged(output_path: Path) -> Iterator[None]:
    """Around the merge and the removal of the parts: Ctrl-C once OUTPUT is in place (complete) ends a finished
    run, with :data:`Warnings.W_EMBED_CLEANUP_INTERRUPTED` naming what is left of the parts (which the next run
    into OUTPUT removes: :func:`check_paths`). It said "nothing was written", and the parts renamed away for
    deletion stayed for good, the rerun refusing OUTPUT as existing. Before the rename it stays an interrupt."""
    parts_dir = parts_path(output_path)
    try:
        yield
    except KeyboardInterrupt:
        # Not in place yet: the parts directory is there and no merged.json in it (or in what a removal left of
        # it) records OUTPUT as it is. In place: merged.json records it, or the parts were already renamed away.
        if parts_dir.exists() and _earlier_merge(output_path) is None:
            raise
        left = [name_shown(path) for path in (parts_dir, *(tmp for tmp, _ in temporary_files(parts_dir)))
                if path.exists()]
        warnings.warn(Warnings.W_EMBED_CLEANUP_INTERRUPTED.format(path=output_path, parts=", ".join(left)),
                      RuntimeWarning, stacklevel=3)


def _parts(lines: Iterator[str], part_size: int) -> Iterator[tuple]:
    """``(start, lines)``: consecutive lists of ``part_size`` lines (the last one shorter), each with
    the number of lines before it."""
    start = 0
    while True:
        chunk = list(itertools.islice(lines, part_size))
        if not chunk:
            return
        yield start, chunk
        start += len(chunk)


def _batches(index: Sequence[int], rows: Sequence[Sequence[str]], batch_size: int, batch_tokens: int):
    """Cut ``index`` (longest row first) into batches of at most ``batch_size`` rows whose
    padded size (rows x longest) stays within ``batch_tokens`` (a longer row goes alone)."""
    batch: List[int] = []
    for i in index:
        longest = len(rows[batch[0]]) if batch else len(rows[i])
        if batch and (len(batch) == batch_size or (len(batch) + 1) * max(longest, 1) > batch_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def parts_path(output_path: PathLike) -> Path:
    """``OUTPUT.parts``: where :func:`embed_file` keeps the finished parts of an unfinished run."""
    output_path = Path(output_path)
    return output_path.with_name(output_path.name + ".parts")


def _new_parts_dir(tmp: Path, manifest: dict) -> None:
    tmp.mkdir()
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def _file_identity(path: Path) -> dict:
    """What a rename keeps of a file and a rewrite changes: device, inode, size, modification time."""
    st = path.stat()
    return {"device": st.st_dev, "inode": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _earlier_merge(output_path: Path) -> Optional[Path]:
    """The parts directory (or what a killed :func:`remove_dir` left of it) whose ``merged.json``
    records ``output_path``'s identity: a run killed after writing OUTPUT, before removing its parts."""
    parts_dir = parts_path(output_path)
    for directory in (parts_dir, *(tmp for tmp, _ in temporary_files(parts_dir))):
        try:
            recorded = read_json_file(directory / MERGED, "{error}")
            if recorded == _file_identity(output_path):
                return directory
        except (OSError, ValueError):  # none, or damaged (nested past the recursion limit too): no merge it records
            continue
    return None


def _output_record(manifest: dict) -> dict:
    """What a merged OUTPUT records of the run that wrote it (:data:`RECORDED`): its ``manifest``, the parts' token
    digests as one sha256 (one digest a part made the attribute too long for HDF5 on a big input)."""
    tokens = hashlib.sha256(json.dumps(manifest[TOKENS]).encode("ascii")).hexdigest()
    return {**{k: v for k, v in manifest.items() if k != TOKENS}, TOKENS: tokens}


def _recorded_run(output_path: Path) -> Optional[dict]:
    """The record of the run that wrote ``output_path`` (:func:`_output_record`); None for a file without one
    (another program's, an earlier release's, not HDF5, unreadable) or for no regular file (a FIFO: opening it to read
    waited for a writer forever; a device)."""
    import h5py

    if not output_path.is_file():
        return None
    try:
        with h5py.File(output_path, "r", locking=False) as f:  # no lock, as the readers: NFS, Lustre
            recorded = json.loads(f.attrs[RECORDED])
        return recorded if isinstance(recorded, dict) else None
    except Exception:  # noqa: BLE001 - not HDF5, damaged, without the attribute: no record of a run
        return None


def _complete_record(output_path: Path) -> Optional[dict]:
    """The record (:func:`_recorded_run`) of ``output_path`` where it is a complete OUTPUT that records the run which
    wrote it, no parts directory beside it (the parts of an unfinished run into it, with --overwrite, ask for
    --overwrite again); else None."""
    return None if parts_path(output_path).exists() else _recorded_run(output_path)


def _same_structure(output_path: Path, lengths: Sequence[int], layers: str, n_layers: int, dim: int) -> bool:
    """Whether ``output_path`` holds exactly what this run writes, read from its metadata: the datasets ``"0"`` ..
    ``str(len(lengths) - 1)`` and ``sentence_to_index``, nothing else, dataset ``i`` float32 of shape
    ``(n_layers, lengths[i], dim)`` for ``layers="all"``, else ``(lengths[i], dim)``. Its record alone reported an
    OUTPUT with a dataset deleted as complete. The values are not read (checking them is computing them again:
    ``--overwrite``)."""
    import h5py

    try:
        with h5py.File(output_path, "r", locking=False) as f:
            text = f.get(SENTENCE_TO_INDEX)
            if len(f) != len(lengths) + 1 or not isinstance(text, h5py.Dataset) or text.shape != (1,):
                return False
            for i, n in enumerate(lengths):
                vectors = f.get(str(i))
                shape = (n_layers, n, dim) if layers == "all" else (n, dim)
                if not isinstance(vectors, h5py.Dataset) or vectors.shape != shape or vectors.dtype != np.float32:
                    return False
    except Exception:  # noqa: BLE001 - damaged, not HDF5: not this run's output
        return False
    return True


def _same_run(recorded: Optional[dict], expected: dict) -> bool:
    """Whether the run ``recorded`` in an OUTPUT (:func:`_recorded_run`) has every entry of ``expected`` (the
    settings, known before the text is read, or the whole :func:`_output_record` of this run)."""
    return recorded is not None and {k: recorded.get(k) for k in expected} == expected


def _check_settings(found: Optional[dict], settings: dict, parts_dir: Path, input_path: Path) -> None:
    """Refuse the parts of ``parts_dir``, whose manifest is ``found`` (None: it has none), unless it records
    ``settings`` (of a run reading ``input_path``)."""
    if found is None:  # every spacy-elmo wrote one: it was deleted (this said "written by an older spacy-elmo")
        raise ValueError(Errors.E_EMBED_PARTS_NO_MANIFEST.format(parts=parts_dir, name=MANIFEST))
    if {k: found.get(k) for k in settings} == settings:
        return
    missing = sorted(k for k in settings if k not in found)
    if missing:  # written before these settings were recorded
        raise ValueError(Errors.E_EMBED_PARTS_OLD.format(parts=parts_dir, keys=", ".join(missing)))
    diff = sorted(k for k in settings if found.get(k) != settings[k])
    shown = [k if k in ("model", "input") else f"{k} (earlier {found.get(k)!r})" for k in diff]
    rerun = _rerun_tokenizer(found.get("tokenizer"), settings["tokenizer"]) if "tokenizer" in diff else ""
    # "the earlier settings" of a changed text (n_lines follows from it) said to change what the user had not
    text = Errors.E_EMBED_EARLIER_TEXT.format(path=input_path) if "input" in diff else ""
    other = Errors.E_EMBED_EARLIER_SETTINGS if set(diff) - {"input", "n_lines"} else ""
    earlier = " and ".join(part for part in (text, other) if part)
    raise ValueError(Errors.E_EMBED_PARTS_MISMATCH.format(parts=parts_dir, keys=", ".join(shown), earlier=earlier,
                                                          rerun=rerun))


def spacy_tokenizer_name(lang: str, block: str, rules: str) -> str:
    """The ``tokenizer_name`` of ``embed --lang LANG``'s parts: the language, its tokenizer block (JSON) and the first
    16 digits of the digest of spaCy's rules (a fallback's parts, or those of a spaCy whose rules changed, are not
    reused by another's run)."""
    return f"spacy:{lang} {block} rules {rules[:16]}"


def _rerun_tokenizer(earlier: Any, now: Any) -> str:
    """E_EMBED_PARTS_MISMATCH's ``rerun``: the ``embed`` option that reads as the earlier run's tokenizer (its name
    in the manifest: ``"whitespace"``, or :func:`spacy_tokenizer_name`'s), "" for another's (a
    ``tokenize`` callable of the caller's). Where this run (tokenizer name ``now``) read with the earlier run's
    ``--lang`` already, no option reads as it did: spaCy's tokenizer or rules changed since (E_EMBED_RERUN_INSTALL)."""
    if earlier == "whitespace":
        return Errors.E_EMBED_RERUN_WHITESPACE
    found, here = (re.fullmatch(r"spacy:(\S+) (\{.*\}) rules \S+", name) if isinstance(name, str) else None
                   for name in (earlier, now))
    if found is None:
        return ""
    same_lang = here is not None and here.group(1) == found.group(1)
    return (Errors.E_EMBED_RERUN_INSTALL if same_lang else Errors.E_EMBED_RERUN_LANG).format(
        lang=found.group(1), block=found.group(2))


def _same_manifest(found: dict, manifest: dict) -> bool:
    """Whether the manifest ``found`` on disk is this run's ``manifest``: one written without the parts'
    token digests (an earlier release's) is, when all else is the same."""
    return found == manifest or (TOKENS not in found and found == {k: v for k, v in manifest.items() if k != TOKENS})


def _read_manifest(parts_dir: Path) -> Optional[dict]:
    """The manifest of ``parts_dir``; None where there is none (a killed removal deleted it, or the user).
    ValueError (``E_EMBED_MANIFEST_DAMAGED``, naming it and --restart) where it cannot be read (a permission) or is
    no JSON object (damaged or edited, nested past the recursion limit included): read as {}, the parts were said to
    be an older spacy-elmo's, and a JSON array was an AttributeError's traceback; so where its :data:`TOKENS`, the one
    entry read other than compared, is no list of strings (a number was a TypeError's traceback, an object a
    KeyError's)."""
    path = parts_dir / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError(Errors.E_EMBED_MANIFEST_DAMAGED.format(path=path, error=err, parts=parts_dir)) from err
    try:
        found = read_json_file(path, "{error}", Errors.E_JSON_NOT_OBJECT, raw=raw)
    except ValueError as err:
        raise ValueError(Errors.E_EMBED_MANIFEST_DAMAGED.format(path=path, error=err, parts=parts_dir)) from err
    tokens = found.get(TOKENS, [])  # absent: an earlier release's manifest, whose parts are trusted
    if not isinstance(tokens, list) or not all(isinstance(digest, str) for digest in tokens):
        error = Errors.E_EMBED_MANIFEST_TOKENS.format(key=TOKENS, found=json_shown(tokens))
        raise ValueError(Errors.E_EMBED_MANIFEST_DAMAGED.format(path=path, error=error, parts=parts_dir))
    return found


def _json_utf8(mapping: dict) -> bytes:
    """``json.dumps(mapping, ensure_ascii=False)`` in UTF-8, without its text whole as a str (as many bytes
    again as characters, up to 4x) nor the pieces json.dumps joins (as much again)."""
    buffer = io.BytesIO()
    for piece in json.JSONEncoder(ensure_ascii=False).iterencode(mapping):
        buffer.write(piece.encode("utf-8"))
    return buffer.getvalue()  # the buffer itself, not a copy


def _merge(part_files: Sequence[Path], lines: Iterable[str], n_lines: int, output_path: Path, parts_dir: Path,
           record: dict, progress: bool) -> None:
    """Copy every part's datasets (in line order) and ``sentence_to_index`` (of ``lines``: every line,
    read again) into ``output_path``, with ``record`` (:func:`_output_record`) as its attribute :data:`RECORDED`,
    recording the merged file's identity in ``parts_dir`` before renaming it into place."""
    import h5py
    from .progress import progress_bar

    def write(tmp: Path) -> None:
        with hdf5_for_writing(tmp) as out, progress_bar(total=n_lines, desc="merging", unit="line", disable=not progress) as bar:
            for part in part_files:
                with h5py.File(part, "r", locking=False) as f:  # as allennlp_io reads: no lock (NFS, Lustre)
                    for name in sorted(f, key=int):
                        f.copy(f[name], out, name=name)
                    bar.update(len(f))
            # AllenNLP's mapping, as its command writes it: the stripped line -> its dataset's name
            # (a str), the last line winning for repeated text, JSON in element 0 of a (1,) string
            # dataset, so ``json.loads(f["sentence_to_index"][0])`` and ``f[mapping[sentence]]`` work.
            text = out.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.string_dtype())
            text[0] = _json_utf8({line.strip(): str(i) for i, line in enumerate(lines)})
            out.attrs[RECORDED] = json.dumps(record, sort_keys=True)  # read by no AllenNLP reader: they read datasets
        atomic_write_text(parts_dir / MERGED, json.dumps(_file_identity(tmp)))

    atomic_write(output_path, write)
