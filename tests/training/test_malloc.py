"""keep_freed_memory: large blocks come from the heap and stay there when freed.

Each case runs in a fresh interpreter (the setting is process-wide), reading
glibc's own accounting through mallinfo2: hblkhd = bytes in mmap'd blocks,
arena = bytes of heap obtained with sbrk.
"""

import json
import os
import subprocess
import sys

import pytest

from spacy_elmo.training.malloc import _glibc

pytestmark = pytest.mark.skipif(
    _glibc() is None or not hasattr(_glibc(), "mallinfo2"), reason="glibc >= 2.33 (mallinfo2) only"
)

PROBE = r"""
import ctypes, json, sys
import torch
from spacy_elmo.training.malloc import _glibc, keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = _glibc()
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
MB = 2**20
t = torch.ones(100 * MB // 4)  # a 100 MB block, like the softmax logits
during = libc.mallinfo2()
del t
after = libc.mallinfo2()
print(json.dumps({"applied": applied, "mmap_during": during.hblkhd, "heap_during": during.arena,
                  "heap_free_after": after.fordblks}))
"""


def _probe(mode, env=None):
    run_env = dict(os.environ, **(env or {}))
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=run_env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_default_glibc_maps_large_blocks():
    r = _probe("default")
    assert not r["applied"]
    assert r["mmap_during"] >= 100 * 2**20


def test_keep_freed_memory_serves_large_blocks_from_the_heap_and_keeps_them():
    r = _probe("keep")
    assert r["applied"]
    assert r["mmap_during"] < 100 * 2**20
    assert r["heap_during"] >= 100 * 2**20
    assert r["heap_free_after"] >= 100 * 2**20  # freed, but kept for the next step


def test_environment_switch_turns_it_off():
    r = _probe("keep", {"SPACY_ELMO_KEEP_FREED_MEMORY": "0"})
    assert not r["applied"]
    assert r["mmap_during"] >= 100 * 2**20


def test_environment_switch_takes_exactly_0():
    """Only 0 turns it off; another value ("false" and "off" did, any case, unsaid) leaves it on with a
    warning naming the value (spacy_elmo.switches)."""
    r = _probe("keep", {"SPACY_ELMO_KEEP_FREED_MEMORY": "false"})
    assert r["applied"]
    assert r["mmap_during"] < 100 * 2**20
