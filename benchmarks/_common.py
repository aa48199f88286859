"""Helpers shared by the benchmark scripts: one subprocess per framework, peak RSS, the result table,
the header line every script prints, and the GRPO benchmark's reward.

Each framework is measured in its own child process (``script --worker NAME --result-file F ...``) so
that its peak resident memory is its own and neither framework warms caches or allocators for the other.
The child writes one JSON object to the result file; the parent prints the side-by-side table.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from typing_extensions import Self

TINY_MODEL = "tiny"  # --model tiny: a random 2-layer Llama with the smollm2 tokenizer (plumbing checks only)


def resolve_bench_model(spec: str) -> str:
    """A model directory for ``spec``; ``tiny`` builds (once) a tiny random Llama under the temp dir."""
    from rllm.models import make_tiny_llama, resolve_model

    if spec != TINY_MODEL:
        return resolve_model(spec)
    out = Path(tempfile.gettempdir()) / "rllm-bench-tiny-llama"
    if not (out / "config.json").is_file():
        make_tiny_llama(out)
    return str(out)


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (None keeps torch's default); return the count in use."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 natively (AVX512-BF16 / AMX), the test rllm's ``auto`` settings use."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def chat_prompt_ids(tokenizer: Any, question: str) -> list[int]:
    """The prompt both frameworks see: one user turn, chat-templated, ending with the assistant header."""
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return list(out)


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


class RssSampler:
    """Samples this process's RSS in a background thread; ``peak_mb`` is the highest value seen while
    running. Complements ``ru_maxrss`` (whole-process peak, model loading included) with the peak of a
    window, e.g. the timed steps only."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        proc = psutil.Process()
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, proc.memory_info().rss / 2**20)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, rss_mb())


def run_worker(script: str, worker: str, args: list[str], timeout_s: float | None = None) -> dict[str, Any]:
    """Run ``script --worker WORKER ARGS`` in a fresh interpreter and return the JSON it wrote.

    The child's stdout/stderr go straight to the terminal (progress, warnings); a failing child raises
    with its exit status so a broken framework is never reported as a number.
    """
    with tempfile.TemporaryDirectory(prefix="rllm-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, script, "--worker", worker, "--result-file", str(result_file), *args]
        print(f"\n=== {worker}: {' '.join(cmd[1:])}", flush=True)
        started = time.perf_counter()
        proc = subprocess.run(
            cmd, timeout=timeout_s, env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False
        )
        if proc.returncode != 0 or not result_file.is_file():
            raise RuntimeError(
                f"{worker} worker failed (exit status {proc.returncode}); see its output above"
            )
        result = json.loads(result_file.read_text())
        result["worker_wall_s"] = time.perf_counter() - started
        return result


def forward_args(args: Any, names: list[str], **overrides: Any) -> list[str]:
    """The parent's options re-spelled for a worker child: ``--name value`` per name (lists comma-joined,
    booleans as bare flags when true, None and 0-valued optional counts left out)."""
    out: list[str] = []
    for name in names:
        value = overrides.get(name, getattr(args, name))
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out += [flag] if value else []
        elif value is None:
            continue
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(map(str, value))]
        else:
            out += [flag, str(value)]
    return out


def write_result(path: str, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result, indent=2))


def median_min(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), min(values)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table, so the printed results paste straight into benchmarks/README.md."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the architecture where that is unreadable)."""
    try:
        for raw in Path("/proc/cpuinfo").read_text().splitlines():
            if raw.startswith("model name"):
                return raw.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """``git rev-parse --short HEAD`` of the checkout, plus ``-dirty`` when tracked files differ from it
    (untracked files do not count); ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def header_line() -> str:
    """The line every benchmark prints above its results: when (UTC), at which commit, with which exact
    command, on which machine (CPU model, logical CPUs, RAM, torch version). Results pasted into
    benchmarks/README.md keep it, so every table says where its numbers came from."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    ram_gb = psutil.virtual_memory().total / 2**30
    return (
        f"measured {when} at commit {git_commit()} with `{command}`; machine: {cpu_model()}, "
        f"{os.cpu_count()} logical CPUs, {ram_gb:.1f} GiB RAM, torch {torch_version}"
    )


def machine_line() -> str:
    """What the header line leaves out but a CPU timing depends on: native bf16, the load average."""
    return f"bf16 native: {cpu_has_bf16()}, load average {os.getloadavg()[0]:.2f}"


def grpo_reward(task: dict[str, Any], response: str) -> float:
    """The GRPO benchmark's reward, the one function both frameworks call (rllm through its workflow, TRL
    through a reward function that looks the task up): rllm's reward of the built-in number tasks, 1.0
    when the reply states exactly one number and it equals ``task["ground_truth"]``."""
    from rllm.rewards.basic import number_reward

    return float(number_reward(task, response).reward)


class PhaseClock:
    """Seconds spent in named phases, per step: ``with clock.span("train"): ...`` adds to the current
    step's ``train``; ``end_step()`` closes the step. One timer for all the instrumentation, so the
    benchmarked code is timed from outside and never edited."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.current[phase] += time.perf_counter() - t0

    def add(self, phase: str, seconds: float) -> None:
        self.current[phase] += seconds

    def wrap(self, obj: Any, method: str, phase: str) -> None:
        """Time every call of ``obj.method`` (an instance attribute shadows the bound method)."""
        inner = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(phase):
                return inner(*args, **kwargs)

        setattr(obj, method, timed)

    def end_step(self) -> dict[str, float]:
        done = dict(self.current)
        self.steps.append(done)
        self.current = defaultdict(float)
        return done
