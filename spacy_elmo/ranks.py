"""Which process of a torchrun job this is, from the environment torchrun sets (no torch import: the
command line reads it before any command runs)."""

import os
from typing import NamedTuple

from .errors import Errors


class Ranks(NamedTuple):
    """``rank`` of ``world`` processes; ``local``: the rank on this machine (its GPU index on CUDA)."""

    rank: int
    world: int
    local: int


def _read(name: str, default: int, lowest: int, highest: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not lowest <= value <= highest:
        raise ValueError(Errors.E_TORCHRUN_ENV.format(name=name, value=text, lowest=lowest, highest=highest))
    return value


def torchrun_ranks() -> Ranks:
    """This process's :class:`Ranks` under torchrun (``WORLD_SIZE`` > 1); ``(0, 1, 0)`` for one process.

    ``RANK`` defaults to 0 and ``LOCAL_RANK`` to ``RANK`` (one machine), for a launcher that sets
    ``WORLD_SIZE`` alone. ValueError naming the variable for a value that is no rank of the job
    (``WORLD_SIZE=abc``, ``RANK`` >= ``WORLD_SIZE``)."""
    world = _read("WORLD_SIZE", 1, 1, 2**31 - 1)
    if world == 1:
        return Ranks(0, 1, 0)
    rank = _read("RANK", 0, 0, world - 1)
    return Ranks(rank, world, _read("LOCAL_RANK", rank, 0, world - 1))
