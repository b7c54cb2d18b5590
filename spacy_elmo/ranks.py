"""Which process of a torchrun job this is, from the environment torchrun sets (no torch import: the
command line reads it before any command runs)."""

import os
from typing import NamedTuple, Optional

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


def _ranks(unset_local: Optional[int]) -> Ranks:
    """:class:`Ranks` from the environment; an unset ``LOCAL_RANK`` reads as ``unset_local`` (None: ``RANK``)."""
    world = _read("WORLD_SIZE", 1, 1, 2**31 - 1)
    if world == 1:
        return Ranks(0, 1, 0)
    rank = _read("RANK", 0, 0, world - 1)
    return Ranks(rank, world, _read("LOCAL_RANK", rank if unset_local is None else unset_local, 0, world - 1))


def torchrun_ranks() -> Ranks:
    """This process's :class:`Ranks` under torchrun (``WORLD_SIZE`` > 1); ``(0, 1, 0)`` for one process.

    ``RANK`` defaults to 0 and ``LOCAL_RANK`` to ``RANK`` (one machine: the trainer's GPU index), for a
    launcher that sets ``WORLD_SIZE`` alone. ValueError naming the variable for a value that is no rank of
    the job (``WORLD_SIZE=abc``, ``RANK`` >= ``WORLD_SIZE``)."""
    return _ranks(None)


def printing_ranks() -> Ranks:
    """:class:`Ranks` for deciding which process prints (the command line's muting), never an error: a value
    that is no rank of a job reads as one process (``pretrain`` itself refuses it with
    :func:`torchrun_ranks`), and an unset ``LOCAL_RANK`` as 0. That launcher (not torchrun, which sets it)
    may span machines, where ``RANK`` says nothing of the machine: every process then prints what is the
    same on every process of a machine (a missing compiled extension), a warning repeated rather than the
    warning of another machine lost."""
    try:
        return _ranks(0)
    except ValueError:
        return Ranks(0, 1, 0)


def machine_processes(ranks: Ranks) -> int:
    """The processes of this machine: torchrun's ``LOCAL_WORLD_SIZE``; without it, or with a value that does not
    divide the world, every process of the job (``ranks.world``); 1 for one process."""
    if ranks.world == 1:
        return 1
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", ranks.world))
    except ValueError:
        local = ranks.world
    return local if 1 <= local <= ranks.world and ranks.world % local == 0 else ranks.world
