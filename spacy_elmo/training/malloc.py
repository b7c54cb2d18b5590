"""Keep freed memory in the process (glibc), for long training jobs.

A training step allocates and frees the same large buffers every step (the
sampled softmax's ``(B*U, S)`` logits are 168 MB at B = 128, S = 8192). glibc
serves blocks over 32 MB with a fresh ``mmap`` and gives them back with
``munmap`` when freed, so every step faults in (and the kernel zeroes) the same
pages again: measured on 2 CPU cores, small preset, B = 128, that costs the
reference backend 42% of its throughput (772 -> 1,333 tokens/s with this on)
and the fused backend 4% (2,903 -> 3,027; it recycles its own saved tensors
already; benchmarks/results/pretrain_cpu_b128_avx512_{glibcdefault,keepfreed}.json).

:func:`keep_freed_memory` turns ``mmap`` allocation off and raises the trim
threshold, so freed blocks stay in the heap and are reused. The cost is that
the process keeps its peak heap until it exits, which is what a training
process wants and a library imported into someone else's process must not
decide: only the ``pretrain`` command (and the benchmark that measures it) call
it. ``SPACY_ELMO_KEEP_FREED_MEMORY=0`` turns it off (``1`` or unset: on; another value warns and
leaves it on: :mod:`spacy_elmo.switches`).
"""

import ctypes
import ctypes.util
import platform

from .. import switches

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes a C int: trim only past 2 GiB of free heap top


def _glibc():
    """The C library through ctypes when it is glibc, else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse in this process.

    Returns True when the setting took effect; False on other C libraries, when
    ``SPACY_ELMO_KEEP_FREED_MEMORY=0`` or when glibc refused it.
    """
    if switches.read(switches.KEEP_FREED_MEMORY) == "0":
        return False
    libc = _glibc()
    if libc is None:
        return False
    # mallopt returns 1 on success, 0 on error
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
