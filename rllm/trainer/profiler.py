"""What a step costs besides its phase times: memory, achieved FLOP/s and MFU, and torch.profiler traces.

The loop times its phases itself (``timed``: ``time/rollout_s``, ``time/train_s``, ...); this module adds
per step (docs/profiling.md):

- ``perf/rss_gb`` (the process's resident memory now), ``perf/rss_peak_gb`` (the kernel's high-water mark
  since the process started) and that mark at the end of each phase, ``perf/rss_peak_<phase>_gb`` (the
  phase where it rose reached the peak: ``MemoryMeter``);
- per CUDA device ``i`` the backend uses, ``perf/cuda<i>_allocated_gb``, ``_reserved_gb`` and ``_peak_gb``
  (torch's caching allocator; the peak is reset each step);
- ``perf/train_tflops`` (model FLOPs of the update over the train phase's seconds) and ``perf/mfu`` (that
  over the device's peak: ``trainer.peak_tflops`` or the known peak of the CUDA device's name).

``trainer.profile_steps`` wraps chosen steps in ``torch.profiler``: ``profile/step_<n>.json`` (a chrome
trace, open it in https://ui.perfetto.dev or chrome://tracing) and ``profile/step_<n>.txt`` (the ops that
took the most time, and the most memory).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.autograd import DeviceType

from rllm.types import TrainBatch
from rllm.utils.allocator import release_free_memory

logger = logging.getLogger(__name__)

GB = 1e9

# Dense bf16 tensor-core peak TFLOPS from the vendors' data sheets (fp16 for the cards without bf16),
# matched in this order against torch.cuda.get_device_name(): the first name contained in it wins.
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10", 125.0),
    ("RTX 4090", 165.0),
    ("RTX 3090", 71.0),
    ("V100", 125.0),
    ("T4", 65.0),
)


def known_peak_tflops(device_name: str) -> float | None:
    """The peak of a CUDA device's name (``PEAK_TFLOPS``), None for a device not listed."""
    for name, tflops in PEAK_TFLOPS:
        if name in device_name:
            return tflops
    return None


def rss_bytes() -> int:
    """The process's resident memory now (psutil: /proc on Linux, the OS's own call elsewhere)."""
    return int(psutil.Process().memory_info().rss)


def run_peak_rss_bytes() -> int:
    """The kernel's high-water mark of this process's RSS since it started (``ru_maxrss``)."""
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, kB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class MemoryMeter:
    """The process's RSS high-water mark over the run, and where in the step it rose.

    ``perf/rss_peak_<phase>_gb`` is the kernel's high-water mark (``ru_maxrss``) when the phase ends: the
    first phase at which it reaches the run's peak is the phase that set the peak. Nothing samples or resets
    it: a sampling thread slowed a 2-core CPU's forward/backward 3-5x (it preempts torch's OpenMP threads),
    and resetting the kernel's mark (``/proc/self/clear_refs``) would make ``ru_maxrss`` and
    ``/usr/bin/time`` report a phase's peak instead of the process's."""

    @contextlib.contextmanager
    def phase(self, name: str, metrics: dict[str, float]) -> Iterator[None]:
        """Write ``perf/rss_peak_<name>_gb``: the process's high-water mark when the ``with`` block ends."""
        try:
            yield
        finally:
            metrics[f"perf/rss_peak_{name}_gb"] = self.peak_bytes() / GB
            release_free_memory()  # the next phase starts without this one's freed blocks resident

    def peak_bytes(self) -> int:
        # The kernel updates its mark lazily: it can lag the RSS read just now by a few pages.
        return max(rss_bytes(), run_peak_rss_bytes())

    def metrics(self) -> dict[str, float]:
        return {"perf/rss_gb": rss_bytes() / GB, "perf/rss_peak_gb": self.peak_bytes() / GB}

    def close(self) -> None:
        """Nothing to stop (kept so the trainer closes every part the same way)."""


def cuda_metrics(reset_peak: bool = True) -> dict[str, float]:
    """``perf/cuda<i>_allocated_gb``, ``_reserved_gb``, ``_peak_gb`` of each CUDA device this process has
    used (nothing without CUDA, or before anything touched it); the peaks are then reset."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    out: dict[str, float] = {}
    for i in range(torch.cuda.device_count()):
        reserved = torch.cuda.memory_reserved(i)
        if not reserved:
            continue
        out[f"perf/cuda{i}_allocated_gb"] = torch.cuda.memory_allocated(i) / GB
        out[f"perf/cuda{i}_reserved_gb"] = reserved / GB
        out[f"perf/cuda{i}_peak_gb"] = torch.cuda.max_memory_allocated(i) / GB
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(i)
    return out


class ModelFlops:
    """Model FLOPs of a training update, from the model's shape (loaded on the meta device: no weights).

    Per token of a row of length T that is run forward and backward (Kaplan et al., PaLM appendix B):

        6 * N_body + 12 * L * d * T          (N_body: the matrix parameters of the decoder layers)

    plus ``6 * d * V`` for the vocabulary projection, only at trained tokens (the backend projects those
    only). A forward-only pass (recomputed old logprobs, the reference) is a third of that. Recomputation
    (gradient checkpointing, the logprob chunks) is not counted: MFU counts the model's FLOPs, not the
    hardware's. Shared prefixes are counted per row, so ``backend.share_prefix`` reads higher than the work done.
    """

    def __init__(self, model_path: str) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_path)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        head = model.get_output_embeddings()
        embed = model.get_input_embeddings()
        self.head_params = head.weight.numel()
        skip = {id(head.weight), id(embed.weight)}
        self.body_params = sum(p.numel() for p in model.parameters() if id(p) not in skip)
        self.layers = int(config.num_hidden_layers)
        self.hidden = int(config.hidden_size)

    def update_flops(self, batch: TrainBatch, forward_passes: int = 0) -> float:
        """FLOPs of forward+backward over ``batch`` and ``forward_passes`` more forward-only passes."""
        per_token_body = 6 * self.body_params
        total = 0.0
        for s in batch.sequences:
            T = len(s.input_ids)
            trained = sum(s.loss_mask)
            total += (
                T * (per_token_body + 12 * self.layers * self.hidden * T) + 6 * self.head_params * trained
            )
        return total * (1 + forward_passes / 3)


def peak_tflops(cfg_value: float | None, device: str) -> float | None:
    """``trainer.peak_tflops``, else the known peak of the CUDA device the backend trains on, else None."""
    if cfg_value is not None:
        return cfg_value
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        return known_peak_tflops(torch.cuda.get_device_name(index or 0))
    return None


class StepProfiler:
    """The per-step profiler of one run (built by the trainer at start-up, lives as long as the run)."""

    def __init__(
        self, cfg: Any, model_path: str, run_dir: Path, device: str, loads_model: bool, backend: Any = None
    ) -> None:
        self.memory = MemoryMeter()
        self.backend = backend  # its step_metrics() join the step's (a TrainingBackend; None: none)
        self.profile_steps = set(cfg.trainer.profile_steps)
        self.trace_dir = run_dir / "profile"
        self.peak_tflops = peak_tflops(cfg.trainer.peak_tflops, device)
        # A service backend (tinker) trains elsewhere, on a model it names: no FLOPs to count here.
        self.flops = _model_flops(model_path) if loads_model else None

    def phase(self, name: str, metrics: dict[str, float]) -> contextlib.AbstractContextManager:
        return self.memory.phase(name, metrics)

    def update_metrics(self, batch: TrainBatch, seconds: float, forward_passes: int) -> dict[str, float]:
        """``perf/train_tflops`` and (with a known peak) ``perf/mfu`` of an update over ``batch`` (its logprob
        passes, forward/backward and optimizer step) that took ``seconds``."""
        if self.flops is None or seconds <= 0:
            return {}
        tflops = self.flops.update_flops(batch, forward_passes) / seconds / 1e12
        out = {"perf/train_tflops": tflops}
        if self.peak_tflops:
            out["perf/mfu"] = tflops / self.peak_tflops
        return out

    def close(self) -> None:
        self.memory.close()

    def step_metrics(self, metrics: dict[str, float], *, synchronous: bool) -> dict[str, float]:
        """The step's memory, what ``backend`` measured (``TrainingBackend.step_metrics``: the distributed
        ranks' time in collectives), and in the synchronous loop its idle times from its phase times in
        ``metrics``: the trainer waits while the rollout (and refill) samples, the sampler while the trainer
        trains and syncs (async mode measures both itself: ``rllm.trainer.async_rollout``)."""
        out = {**self.memory.metrics(), **cuda_metrics()}
        if self.backend is not None:
            out.update(self.backend.step_metrics())
        if synchronous:
            out["time/trainer_idle_s"] = metrics.get("time/rollout_s", 0.0) + metrics.get(
                "time/refill_s", 0.0
            )
            out["time/sampler_idle_s"] = metrics.get("time/train_s", 0.0) + metrics.get("time/sync_s", 0.0)
        return out

    @contextlib.contextmanager
    def trace(self, step: int) -> Iterator[None]:
        """Capture step ``step`` (1-based) with torch.profiler when ``trainer.profile_steps`` names it."""
        if step not in self.profile_steps:
            yield
            return
        from torch.profiler import ProfilerActivity, profile  # only for the steps asked for

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, profile_memory=True, record_shapes=True) as prof:
            yield
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        path = self.trace_dir / f"step_{step}.json"
        prof.export_chrome_trace(str(path))
        averages = prof.key_averages()
        by_memory = "self_cuda_memory_usage" if torch.cuda.is_available() else "self_cpu_memory_usage"
        by_time = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
        (self.trace_dir / f"step_{step}.txt").write_text(
            f"step {step}: the ops that took the most time\n{averages.table(sort_by=by_time, row_limit=25)}\n"
            f"the ops that allocated the most memory\n{averages.table(sort_by=by_memory, row_limit=15)}\n"
        )
        logger.info("step %d profiled: %s (chrome trace) and %s", step, path, path.with_suffix(".txt"))


def _model_flops(model_path: str) -> ModelFlops | None:
    try:
        return ModelFlops(model_path)
    except Exception as exc:  # noqa: BLE001 - a model transformers cannot shape on the meta device: no MFU, say why
        logger.warning("no perf/train_tflops or perf/mfu: cannot count the FLOPs of %s (%s)", model_path, exc)
        return None


def allocation_peak_bytes(fn: Callable[[], Any]) -> int:
    """The most bytes torch held allocated at once while ``fn()`` ran, above what it held before (CPU and
    CUDA tensors), from torch.profiler's memory events: exact per allocation, unlike the RSS, which the
    allocator's caching and the rest of the process blur. For tests and benchmarks."""
    from torch.profiler import ProfilerActivity, profile  # a measuring tool, not on the training path

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    held = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        held += e.nbytes()
        peak = max(peak, held)
    return peak


# ---------------------------------------------------------------------------------------------- collectives
# A collective in flight, in the events torch.profiler records: ProcessGroupGloo's work ("gloo:all_gather",
# "gloo:all_reduce", ...: a span on the gloo worker thread that ran it, from its start to its completion), or
# on a GPU an NCCL kernel ("ncclDevKernel_AllGather_RING_LL(...)", "ncclKernel_..."). gloo runs FSDP2's
# all-gathers and reduce-scatters asynchronously: the "c10d::*" call returns at once and the rank's thread
# waits later in Work.wait(), which records no event; so the rank waits on the host wherever a gloo op is in
# flight and the rank's own threads run no "aten::*" op.
_GLOO_PREFIX = "gloo:"
_NCCL_KERNEL_PREFIX = "nccl"
_COMPUTE_PREFIX = "aten::"

Span = tuple[str, bool, int, int, int]  # name, on a device (a GPU kernel or copy), thread, start ns, end ns


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in spans)


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where two unions overlap (both sorted and disjoint)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def collective_stats(spans: list[Span]) -> dict[str, float]:
    """Seconds and count of collectives in a profiled window (docs/profiling.md, "Time in collectives"):

    - ``collective_s``: the time at least one collective was in flight (the union of their spans: gloo's
      work on the host, NCCL's kernels on the GPU), whether or not compute ran meanwhile;
    - ``exposed_s``: the part of it the rank's compute waited for: on the host, the time a gloo op was in
      flight while no ``aten::*`` op ran on the rank's threads (those other than gloo's workers); on the
      GPU, the time an NCCL kernel ran while no other kernel (or copy) did;
    - ``count``: the collectives (gloo ops, NCCL kernels)."""
    host_comm, dev_comm, dev_compute = [], [], []
    host_ops: list[tuple[int, int, int]] = []
    gloo_threads = set()
    for name, on_device, thread, start, end in spans:
        if on_device:
            (dev_comm if name.lower().startswith(_NCCL_KERNEL_PREFIX) else dev_compute).append((start, end))
        elif name.startswith(_GLOO_PREFIX):
            host_comm.append((start, end))
            gloo_threads.add(thread)
        elif name.startswith(_COMPUTE_PREFIX):
            host_ops.append((thread, start, end))
    host_busy = _union([(start, end) for thread, start, end in host_ops if thread not in gloo_threads])
    host_comm_u, dev_comm_u = _union(host_comm), _union(dev_comm)
    host_exposed = _length(host_comm_u) - _length(_intersect(host_comm_u, host_busy))
    dev_exposed = _length(dev_comm_u) - _length(_intersect(dev_comm_u, _union(dev_compute)))
    return {
        "collective_s": (_length(host_comm_u) + _length(dev_comm_u)) / 1e9,
        "exposed_s": (host_exposed + dev_exposed) / 1e9,
        "count": float(len(host_comm) + len(dev_comm)),
    }


class CollectiveMeter:
    """Time in collectives on one rank of the distributed backend, call by call (``measure``), summed
    until ``take``. Each measured call runs under ``torch.profiler`` with only its host activity (and on a
    GPU its kernels): no shapes, stacks or memory. Its events are read at the call's end
    (``collective_stats``) and dropped, their freed memory handed back (``release_free_memory``); the
    reading's own seconds are reported as ``overhead_s``."""

    def __init__(self) -> None:
        self._totals = self._zero()

    @staticmethod
    def _zero() -> dict[str, float]:
        return {"collective_s": 0.0, "exposed_s": 0.0, "count": 0.0, "busy_s": 0.0, "overhead_s": 0.0}

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        started = time.perf_counter()
        with profile(activities=activities) as prof:
            yield
        stopped = time.perf_counter()
        spans: list[Span] = [
            (e.name(), e.device_type() != DeviceType.CPU, e.start_thread_id(), e.start_ns(), e.end_ns())
            for e in prof.profiler.kineto_results.events()
        ]
        stats = collective_stats(spans)
        del spans, prof
        release_free_memory()  # the events' blocks, freed, would stay in the heap between calls
        t = self._totals
        for key in ("collective_s", "exposed_s", "count"):
            t[key] += stats[key]
        t["busy_s"] += stopped - started
        t["overhead_s"] += time.perf_counter() - stopped

    def take(self) -> dict[str, float]:
        """The sums since the last ``take`` (then zeroed): ``collective_s``, ``exposed_s``, ``count``,
        ``busy_s`` (the measured calls' seconds) and ``overhead_s`` (reading their events)."""
        out, self._totals = self._totals, self._zero()
        return out


def collective_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """A step's ``profile/collective_*`` metrics from each rank's ``CollectiveMeter.take()``."""
    if not per_rank:
        return {}
    n = len(per_rank)

    def mean(key: str) -> float:
        return sum(r[key] for r in per_rank) / n

    busy = mean("busy_s")
    exposed = mean("exposed_s")
    return {
        "profile/collective_s": mean("collective_s"),
        "profile/collective_max_s": max(r["collective_s"] for r in per_rank),
        "profile/collective_exposed_s": exposed,
        "profile/collective_frac": exposed / busy if busy > 0 else 0.0,
        "profile/collectives": mean("count"),
        "profile/rank_busy_s": busy,
        "profile/collective_overhead_s": mean("overhead_s"),
    }
