"""rllm.utils.allocator: glibc's mmap threshold pinned, so a freed large block cannot turn later ones into heap
allocations. Each case runs in a fresh interpreter: the threshold is per process and only ever moves once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rllm.utils.allocator import _glibc

pytestmark = pytest.mark.skipif(not _glibc(), reason="the fix is for glibc's malloc")

# libc's malloc and free by ctypes, for the probes below.
LIBC = """
import ctypes, json, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""


def _run(code: str, *args: str, threshold: str = "") -> dict:
    """Run ``LIBC + code`` in a fresh interpreter with ``MALLOC_MMAP_THRESHOLD_`` set to ``threshold`` (unset
    when empty); returns the JSON it prints."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    if threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = threshold
    out = subprocess.run(
        [sys.executable, "-c", LIBC + code, *args], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


# Free a 16 MiB block (glibc then raises its dynamic threshold to 16 MiB), then ask for 8 MiB and count the
# blocks malloc holds by mmap (mallinfo2's hblks): 0 means the 8 MiB came from the heap.
PROBE = """
from rllm.utils.allocator import pin_mmap_threshold
how = pin_mmap_threshold() if sys.argv[1] == "pin" else "untouched"
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(16 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(8 << 20)
mmapped = libc.mallinfo2().hblks - before
libc.free(block)
print(json.dumps({"how": how, "mmapped": mmapped, "again": pin_mmap_threshold() if how == "pinned" else None}))
"""


def test_glibc_default_moves_a_later_block_to_the_heap() -> None:
    """The problem the pin fixes: with the dynamic threshold, the 8 MiB block is a heap allocation."""
    assert _run(PROBE, "unpinned") == {"how": "untouched", "mmapped": 0, "again": None}


def test_pinned_threshold_keeps_large_blocks_mmapped() -> None:
    assert _run(PROBE, "pin") == {"how": "pinned", "mmapped": 1, "again": "pinned"}


def test_the_users_glibc_variable_wins() -> None:
    """MALLOC_MMAP_THRESHOLD_ set: glibc applied the user's value at start-up and the pin leaves it alone
    (here 16 MiB, so the 8 MiB block is a heap allocation)."""
    got = _run(PROBE, "pin", threshold=str(16 << 20))
    assert got == {"how": "env", "mmapped": 0, "again": None}


# 200 blocks of 1 MiB (heap blocks under the pinned threshold), touched, then all freed but the last, which
# keeps the heap's top in use: glibc's own trimming (at the top) cannot hand the rest back, malloc_trim can.
TRIM = """
import psutil
from rllm.utils.allocator import pin_mmap_threshold, release_free_memory
pin_mmap_threshold()
blocks = [libc.malloc(1 << 20) for _ in range(200)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for b in blocks[:-1]:
    libc.free(b)
rss = lambda: psutil.Process().memory_info().rss
held = rss()
released = release_free_memory()
print(json.dumps({"released": released, "freed_mb": (held - rss()) / 2**20}))
"""


def test_release_free_memory_hands_freed_heap_pages_back() -> None:
    got = _run(TRIM)
    assert got["released"] is True
    assert got["freed_mb"] > 150, got  # of the 199 MiB freed
