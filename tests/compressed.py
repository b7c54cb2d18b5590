"""Compressed copies of test texts (gzip, bzip2, xz), whole or broken, written by the stdlib."""

import bz2
import gzip
import lzma
from pathlib import Path

#: suffix -> compressor; the formats spacy-elmo reads transparently.
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
FORMATS = list(COMPRESS)
#: What the error names for each suffix.
FORMAT_NAMES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}


def compressed(path: Path, suffix: str, to: Path = None, damage: str = None) -> Path:
    """``path``'s bytes compressed by ``suffix``'s format into ``to`` (default: ``path`` + ``suffix``).
    damage: "truncated" (the last third cut off) or "damaged" (a byte in the middle flipped)."""
    data = COMPRESS[suffix](Path(path).read_bytes())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    elif damage == "damaged":
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0xFF
        data = bytes(flipped)
    elif damage is not None:
        raise ValueError(damage)
    to = Path(to) if to is not None else Path(f"{path}{suffix}")
    to.write_bytes(data)
    return to
