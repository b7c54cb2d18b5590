"""The target vocabulary and the table of every token type seen.

Ids 0, 1, 2 are ``<S>``, ``</S>``, ``<UNK>``; then token types by descending
count, ties broken by the string (so the order does not depend on file order).
A corpus is stored as *type* ids over all distinct tokens; the vocabulary is
the first ``size`` types, so the target of type ``t`` is ``t if t < size else
UNK``. Inputs are characters, so types outside the vocabulary still get their
own characters.
"""

import hashlib
import unicodedata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._typing import PathLike
from ..atomic import atomic_write_text
from ..bilm.native_io import unreadable_file
from ..chars import BEGIN_OF_SENTENCE, END_OF_SENTENCE, marker_char_ids, word_char_ids
from ..errors import Errors

BOS, EOS, UNK = 0, 1, 2
SPECIALS = ["<S>", "</S>", "<UNK>"]
VOCAB_NAME = "vocab.txt"


class Vocab:
    """``types``: every known token string (specials first); ``size``: how many
    of them are prediction targets (the softmax rows)."""

    def __init__(self, types: List[str], size: Optional[int] = None) -> None:
        if types[:3] != SPECIALS:
            raise ValueError(Errors.E_BAD_VOCAB.format(path="<memory>", found=types[:3]))
        self.types = list(types)
        self.index: Dict[str, int] = {}
        for i, t in enumerate(self.types):
            self.index.setdefault(t, i)
        self.size = len(self.types) if size is None else min(size, len(self.types))

    @classmethod
    def from_counts(cls, types: List[str], counts: Union[Sequence[int], np.ndarray], vocab_size: int = 0, min_count: int = 1) -> "Vocab":
        """The vocabulary of a corpus whose ``types`` are already in vocabulary order (the
        specials, then by descending count, ties by string: :class:`~.data.Corpus`'s order) and
        ``counts`` their counts (those of the specials are ignored). The targets are a prefix of
        ``types``: the types seen at least ``min_count`` times, at most ``vocab_size`` entries with
        the specials (0: no cap; below 3, the specials only: ``<UNK>`` is always a target).
        A ``min_count`` that no type reaches is an error (pretrain's ``--min-count``)."""
        words = np.asarray(counts[3:], dtype=np.int64)
        frequent = int((words >= min_count).sum())
        if frequent == 0:
            raise ValueError(Errors.E_NO_VOCAB_WORDS.format(min_count=min_count, most=int(words.max(initial=0))))
        size = 3 + frequent
        if vocab_size:
            size = min(size, max(3, vocab_size))
        return cls(types, size)

    def __len__(self) -> int:
        return self.size

    @property
    def targets(self) -> List[str]:
        return self.types[: self.size]

    def digest(self) -> str:
        """sha256 of the targets in order (the softmax's rows): a pretraining checkpoint records that of the
        ``--init`` vocabulary it kept, to tell that model replaced at its path on resume."""
        return hashlib.sha256("\n".join(self.targets).encode("utf-8")).hexdigest()

    def target_ids(self, type_ids: torch.Tensor) -> torch.Tensor:
        """Type ids (any shape) -> target ids: OOV types become ``UNK``."""
        return torch.where(type_ids < self.size, type_ids, torch.full_like(type_ids, UNK))

    def add(self, token: str) -> int:
        """The type id of ``token``, appending it (as a non-target) when new."""
        i = self.index.get(token)
        if i is None:
            i = len(self.types)
            self.types.append(token)
            self.index[token] = i
        return i

    def lookup(self, tokens: Iterable[str]) -> List[int]:
        return [self.add(t) for t in tokens]

    # -- files -----------------------------------------------------------
    def save(self, directory: PathLike) -> None:
        """Write the targets as ``vocab.txt`` (one per line, bilm-tf's format), atomically."""
        atomic_write_text(Path(directory) / VOCAB_NAME, "".join(t + "\n" for t in self.targets))

    @classmethod
    def load(cls, directory: PathLike) -> "Vocab":
        path = Path(directory) / VOCAB_NAME
        if not path.exists():
            raise FileNotFoundError(Errors.E_VOCAB_MISSING.format(path=directory))
        try:
            data = path.read_bytes()
        except OSError as err:  # e.g. a directory named vocab.txt
            raise unreadable_file(path, err) from err
        try:
            # split("\n"), not splitlines(): a token may contain U+2028 and friends.
            text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # universal newlines
        except UnicodeDecodeError as err:
            line = data.count(b"\n", 0, err.start) + 1
            raise ValueError(Errors.E_VOCAB_NOT_UTF8.format(path=directory, line=line, error=err.reason)) from err
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines[:3] != SPECIALS:
            raise ValueError(Errors.E_BAD_VOCAB.format(path=directory, found=lines[:3]))
        first: Dict[str, int] = {}
        for i, token in enumerate(lines):
            if token in first:
                raise ValueError(
                    Errors.E_VOCAB_DUPLICATE.format(path=directory, token=token, first=first[token] + 1, second=i + 1)
                )
            first[token] = i
        return cls(lines)


def nfc_variants(types: Sequence[str]) -> Tuple[int, List[str]]:
    """``(n, spellings)``: how many words ``types`` holds in two or more spellings that are one string in Unicode
    NFC (``café`` precomposed and as ``e`` + U+0301, NFD), and the spellings of the one that comes first in
    ``types`` (the most frequent, in :class:`~.data.Corpus`'s order), in that order (empty when ``n`` is 0).
    Text is not normalized, so each spelling is a type of its own. Only a type with a non-ASCII character that
    is not NFC itself is normalized (ASCII is NFC); a second pass looks each type up among those NFC forms."""
    spellings: Dict[str, List[Tuple[int, str]]] = {}  # NFC form -> (position, type) of the types that give it
    for i, t in enumerate(types):
        if not t.isascii() and not unicodedata.is_normalized("NFC", t):
            spellings.setdefault(unicodedata.normalize("NFC", t), []).append((i, t))
    if spellings:
        for i, t in enumerate(types):  # the NFC spelling itself (which may be ASCII: U+212A KELVIN SIGN is K)
            if t in spellings:
                spellings[t].append((i, t))
    found = [sorted(group) for group in spellings.values() if len(group) > 1]
    return len(found), [t for _, t in min(found, default=[])]


class CharTable:
    """Shifted character ids of every type, computed lazily: ``(n_types, W)`` rows.

    Types 0 and 1 are the sentence markers (spelled with the marker ids);
    every other type is its string's UTF-8 bytes (``<UNK>`` is never an input).
    """

    def __init__(self, vocab: Vocab, max_chars: int) -> None:
        self.vocab = vocab
        self.max_chars = max_chars
        self._rows = torch.zeros(0, max_chars, dtype=torch.int16)

    def _grow(self, n: int) -> None:
        start = self._rows.shape[0]
        rows = []
        for t in range(start, n):
            if t == BOS:
                ids = marker_char_ids(BEGIN_OF_SENTENCE, self.max_chars)
            elif t == EOS:
                ids = marker_char_ids(END_OF_SENTENCE, self.max_chars)
            else:
                ids = word_char_ids(self.vocab.types[t], self.max_chars)
            rows.append(ids)
        new = torch.tensor(rows, dtype=torch.int16).reshape(-1, self.max_chars) + 1
        self._rows = torch.cat([self._rows, new])

    def __call__(self, type_ids: torch.Tensor) -> torch.Tensor:
        """type_ids: LongTensor of any shape -> LongTensor ``(*shape, W)``."""
        needed = int(type_ids.max()) + 1 if type_ids.numel() else 0
        if needed > self._rows.shape[0]:
            # Grow to all known types at once: one pass, not one per batch.
            self._grow(max(needed, len(self.vocab.types)))
        # NumPy's gather (one thread): see encode_batch
        rows = self._rows.numpy()[type_ids.reshape(-1).cpu().numpy()].astype(np.int64)
        return torch.from_numpy(rows).reshape(*type_ids.shape, self.max_chars)
