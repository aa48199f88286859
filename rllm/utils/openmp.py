"""Let the thread that computes have the cores: an idle thread frees its OpenMP workers (libgomp, Linux).

torch's CPU kernels run their parallel regions on OpenMP, and libgomp keeps a pool of worker threads per
thread that ever started a region. Two threads do that in an rllm process: the trainer's (forward,
backward, optimizer) and the local engine's decode thread. Once the pools hold more threads than the
process has CPUs, libgomp *throttles* every pool: a worker spins about 100 times instead of 300,000 before it
sleeps between regions, so each of the thousands of small regions of a step (a decode step has 211
products) waits for its worker to wake. It does so while the other thread is merely idle, waiting.

Measured on the 2-core reference machine (Intel Xeon with AMX, 2026-12-04; ``benchmarks/bench_openmp.py``):
a decode step's 211 products over SmolLM2-135M's float32 weights took 57.1 ms alone, 75.1 ms while a second
thread that once ran torch ops waited with its pool, and 57.9 ms once that thread freed it; a 2 x 4 x 32
GRPO step took 4.72 s with the releases below and 6.19 s without. libgomp's own environment variables cannot
lift the throttle (``GOMP_SPINCOUNT`` sets only the unthrottled count).

:func:`release_openmp_threads` frees the calling thread's pool (``omp_pause_resource_all``, which libgomp
implements for the host by freeing exactly that pool); the thread's next region builds a new one, one
``pthread_create`` per worker. The engine calls it when its decode thread goes idle and in the thread
that submits a request (it is about to wait); the trainer calls it before each rollout and evaluation.

Elsewhere (another OpenMP runtime, no OpenMP, not Linux) it does nothing and returns False: LLVM's
``libomp`` pauses the whole runtime rather than one thread's pool, so it is not called.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
from typing import Any

logger = logging.getLogger(__name__)

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t (OpenMP 5.0)


def release_openmp_threads() -> bool:
    """Free the calling thread's libgomp thread pool, so that while it waits, another thread's parallel
    regions run unthrottled. Returns whether libgomp freed it: False where libgomp is not loaded (not
    Linux, or torch built on another runtime) or when called inside a parallel region."""
    pause = _pause_resource_all()
    return pause is not None and pause(OMP_PAUSE_SOFT) == 0


@functools.cache
def _pause_resource_all() -> Any:
    """libgomp's ``omp_pause_resource_all`` from the copy this process loaded (torch bundles its own:
    a ``dlopen("libgomp.so.1")`` could find the system's, whose pools are not torch's). None without it."""
    if platform.system() != "Linux":
        return None
    import torch  # noqa: F401  (loads torch's libgomp, if it has one, before the maps are read)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None
    gomp = sorted(p for p in paths if os.path.basename(p).startswith("libgomp"))
    if not gomp:
        logger.debug("no libgomp in this process: OpenMP pools are left alone")
        return None
    fn = ctypes.CDLL(gomp[0]).omp_pause_resource_all
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn
