"""A float32 GEMM for the few rows of a CPU decode step, built for this machine on first use.

A decode step multiplies every weight of the model by one row per sequence in the batch. At a few rows
that is a matrix-vector product in all but name: each weight is used M times and the time should be the
time to read the weights from memory. torch's CPU GEMM (MKL's sgemm) is far from that for 2-8 rows. On the
2-core reference machine (Intel Xeon with AMX, 2026-12-04, ``benchmarks/profile_decode_step.py``), the 211
products of a SmolLM2-135M decode step over its 538 MB of float32 weights took 20.7 ms at one row (26 GB/s,
what memory gives) but 47-49 ms at 8 rows, and MKL's LM-head product at 8 rows read only 5-7 GB/s.

``small_gemm.cpp`` (next to this file) is one loop written for that case: each weight is read once, in
order, and multiplied into all M rows while it is in a register, with a software prefetch ahead of the
stream. It reads the ``nn.Linear``'s own weight tensor (no packed copy, so a weight sync needs nothing
more). Measured there: 8 rows 26-29 ms against torch's 47-49, 4 rows 24-26 against 38, 2 rows equal,
1 row equal (the one-row case stays with torch).

It is compiled once per machine and compiler into rllm's cache (``<cache>/kernels``) with
``$CXX`` (default ``g++``) ``-O3 -march=native -fopenmp`` and loaded with ctypes. Its OpenMP regions run on
the libgomp torch already loaded (same soname), so they share the calling thread's pool with torch's
own kernels (and :func:`rllm.utils.openmp.release_openmp_threads` frees it the same way). Where it cannot
be built (no compiler, not Linux) the engine says so once in its log and keeps torch's GEMM: a missing
speed-up, not a different result. ``RLLM_SMALL_GEMM=0`` turns it off.

The sums run in a different order from MKL's, so outputs differ from ``F.linear`` by float32 rounding
(relative 1e-6); a decode step's logprobs move by about as much, as they do between torch versions.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rllm.models import cache_dir

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("small_gemm.cpp")
FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-std=gnu++17", "-shared", "-fPIC")
# Fewest rows the kernel takes: at one and two rows torch is as fast (the whole model's products: one row
# 20.7 ms for torch against 22.7 for the kernel, two rows 23.7 against 23.5), so they keep torch's path.
MIN_ROWS = 3
ENV_SWITCH = "RLLM_SMALL_GEMM"


class SmallGemmUnavailable(RuntimeError):
    """The kernel could not be built or loaded here (the message says why)."""


def _compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise SmallGemmUnavailable(f"no C++ compiler {cxx!r} on PATH (install g++, or set CXX)")
    return path


def _cpu_signature() -> str:
    """What ``-march=native`` compiles for: the CPU's model and feature flags."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = [ln for ln in info if ln.startswith(("flags", "model name", "vendor_id"))]
    except OSError:
        lines = []
    return "".join(sorted(set(lines))) + platform.machine()


def library_path(compiler: str) -> Path:
    """Where the build for this source, compiler, flags and CPU lives in the cache."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), compiler, version, " ".join(FLAGS), _cpu_signature()]).encode()
    ).hexdigest()[:16]
    return cache_dir() / "kernels" / f"small_gemm-{key}.so"


def build(compiler: str, target: Path) -> None:
    """Compile :data:`SOURCE` into ``target`` (written under a temporary name, then moved in, so a process
    that builds at the same time, such as another rank, never loads half a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SmallGemmUnavailable(f"{compiler} failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def load() -> Any:
    """The kernel's ctypes function ``rllm_small_gemm``, built first if this machine has no build yet.
    Raises :class:`SmallGemmUnavailable` when it cannot be."""
    if platform.system() != "Linux":
        raise SmallGemmUnavailable(f"built only on Linux (this is {platform.system()})")
    compiler = _compiler()
    path = library_path(compiler)
    if not path.exists():
        logger.info("building the small-batch CPU GEMM into %s", path)
        build(compiler, path)
    lib = ctypes.CDLL(str(path))
    fn = lib.rllm_small_gemm
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    fn.restype = ctypes.c_int
    fn.max_rows = lib.rllm_small_gemm_max_rows()
    return fn


def _run(fn: Any, x: torch.Tensor, weight: torch.Tensor, rows: int) -> torch.Tensor:
    """The kernel on a contiguous float32 ``x`` of ``rows`` rows (``[..., K]``): a new ``[..., N]`` output."""
    k, n = weight.shape[1], weight.shape[0]
    y = x.new_empty(*x.shape[:-1], n)
    fn(x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, k, n, torch.get_num_threads())
    return y


def small_gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for a float32 ``x`` of 1 to 8 rows (``[..., K]``) on CPU, by the kernel. ``weight``:
    a contiguous float32 ``[N, K]``. No autograd."""
    fn = load()
    k = weight.shape[1]
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.device.type != "cpu":
        raise ValueError(f"small_gemm takes float32 CPU tensors, got {x.dtype} on {x.device}, {weight.dtype}")
    if x.shape[-1] != k or not weight.is_contiguous():
        raise ValueError(f"small_gemm needs x [..., {k}] and a contiguous weight, got {tuple(x.shape)}")
    rows = x.numel() // k
    if not 1 <= rows <= fn.max_rows:
        raise ValueError(f"small_gemm takes 1 to {fn.max_rows} rows, got {rows}")
    return _run(fn, x.contiguous(), weight, rows)


def enabled_by_env() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


class SmallBatchLinears:
    """Every float32 ``nn.Linear`` of a CPU model, computed by :func:`small_gemm` when no gradient is
    wanted and the input has :data:`MIN_ROWS` to 8 rows (a decode step), by ``F.linear`` otherwise.
    :attr:`active` switches it off and on (a benchmark's A/B); the weights are the layers' own, so a weight
    sync into them needs no refresh."""

    def __init__(self, model: nn.Module) -> None:
        self.fn = load()
        self.active = True
        self.calls = 0  # products the kernel computed (tests and benchmarks read it)
        self.layers = [m for m in model.modules() if type(m) is nn.Linear and m.weight.dtype == torch.float32]
        for linear in self.layers:
            self._install(linear)

    def _install(self, linear: nn.Linear) -> None:
        fn, lo, hi = self.fn, MIN_ROWS, self.fn.max_rows
        k = linear.in_features

        def forward(x: torch.Tensor) -> torch.Tensor:
            weight = linear.weight
            rows = x.numel() // k
            if (
                self.active
                and lo <= rows <= hi
                and x.dtype == torch.float32
                and not torch.is_grad_enabled()
                and weight.is_contiguous()
            ):
                self.calls += 1
                y = _run(fn, x.contiguous(), weight, rows)
                return y if linear.bias is None else y.add_(linear.bias)
            return nn.functional.linear(x, weight, linear.bias)

        linear.forward = forward  # type: ignore[method-assign]  # this instance only


def install(model: nn.Module) -> SmallBatchLinears | None:
    """Install :class:`SmallBatchLinears` on a float32 CPU model, or return None (with one log line saying
    why) where the kernel cannot be built or ``RLLM_SMALL_GEMM=0``."""
    if not enabled_by_env():
        logger.info("%s=0: decode-step products use torch's GEMM", ENV_SWITCH)
        return None
    try:
        return SmallBatchLinears(model)
    except (SmallGemmUnavailable, OSError) as exc:
        logger.warning(
            "small-batch CPU GEMM unavailable (%s): decode steps of %d-8 rows use torch's GEMM, "
            "about 1.7x slower at 8 rows on the reference machine",
            exc,
            MIN_ROWS,
        )
        return None
