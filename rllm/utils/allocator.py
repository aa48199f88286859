"""Keep a training process's resident memory close to what its tensors hold (glibc's malloc on Linux).

A CPU training step allocates and frees hundreds of tensors of a few hundred KB to a few hundred MB (a
micro-batch's activations, logits in chunks, gradients). glibc serves a request above its *mmap threshold*
with its own ``mmap``, returned to the kernel on ``free``; below it, from the heap, which is returned only
when its top is free. The threshold starts at 128 KiB but is *dynamic*: each freed mmapped block raises it
to that block's size (up to 32 MiB on 64-bit), so after the first few steps most activations are heap
allocations, and the heap's high-water mark stays resident when a long-lived block lands above the freed
ones. And the local engine's decode thread allocates in an arena of its own, whose freed KV caches stay
resident while the update allocates in the main thread's.

Two calls, measured in docs/results.md (``benchmarks/bench_allocator.py``, ``bench_example_memory.py``):

- ``pin_mmap_threshold()`` fixes the threshold at 4 MiB (``mallopt(M_MMAP_THRESHOLD)``, which also turns the
  dynamic raise off), unless the user chose one through glibc's own ``MALLOC_MMAP_THRESHOLD_`` environment
  variable, which glibc reads at start-up and which wins. 4 MiB, not 128 KiB: a block under the threshold is
  reused from the heap, one over it is page-faulted in afresh on every allocation, and at 128 KiB (the least
  memory) that cost a forward/backward 35-47 % more time; at 4 MiB the time is glibc's default's.
- ``release_free_memory()`` (``malloc_trim(0)``) hands every arena's free pages back; the trainer calls it
  between a step's phases (``rllm.trainer.profiler.MemoryMeter``).

Elsewhere (macOS, musl) both do nothing and say so in their return values: the fragmentation is glibc's.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 4 << 20  # not 128 KiB: see the module docstring
ENV_VAR = "MALLOC_MMAP_THRESHOLD_"

_pinned: str | None = None  # what the first call did; later calls repeat it without touching malloc again


def pin_mmap_threshold() -> str:
    """Pin glibc's mmap threshold for this process (idempotent). Returns what happened: ``"pinned"``,
    ``"env"`` (``MALLOC_MMAP_THRESHOLD_`` is set: the user's value stands), ``"not-glibc"``, or
    ``"failed"`` (mallopt refused; the process runs on with glibc's default, with a warning)."""
    global _pinned
    if _pinned is not None:
        return _pinned
    if os.environ.get(ENV_VAR):
        _pinned = "env"
    elif not _glibc():
        _pinned = "not-glibc"
    else:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(MMAP_THRESHOLD_BYTES))
        _pinned = "pinned" if ok == 1 else "failed"
        if _pinned == "failed":
            logger.warning(
                "mallopt(M_MMAP_THRESHOLD) failed: glibc's dynamic threshold stays (more resident memory)"
            )
    logger.debug("malloc mmap threshold: %s", _pinned)
    return _pinned


def release_free_memory() -> bool:
    """Hand the pages of every arena's free blocks back to the kernel (``malloc_trim(0)``): between a
    step's phases, so what the engine's decode thread freed in its arena is not still resident while the
    update allocates in the main thread's. Returns whether glibc released anything (False elsewhere)."""
    if not _glibc():
        return False
    return bool(ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(0)))


@functools.cache
def _glibc() -> bool:
    # libc_ver() scans the interpreter's binary: once a process.
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
