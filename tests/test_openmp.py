"""rllm.utils.openmp: a thread that waits frees its OpenMP workers, so the thread that computes is not throttled.

Each case runs in a fresh interpreter with 2 torch threads (this process runs torch on one): the pools are
per thread and per process. The OS threads of the process are counted from /proc/self/task; a pool of 2
threads is its caller plus one worker thread."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux", reason="libgomp's pools are released on Linux only"
)

PRELUDE = """
import json, os, threading, time, torch
torch.set_num_threads(2)
from rllm.utils.openmp import release_openmp_threads
def threads():
    return len(os.listdir("/proc/self/task"))
def work():  # big enough for a parallel region on 2 threads
    x = torch.ones(4_000_000)
    return float((x + x).sum())
"""


def _run(code: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *args], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torch_here_runs_on_libgomp() -> None:
    """The release is no silent no-op where it matters: torch's CPU wheels parallelise with libgomp."""
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("this torch is not built with OpenMP")
    from rllm.utils.openmp import _pause_resource_all

    assert _pause_resource_all() is not None


def test_a_thread_frees_its_workers_and_computes_again() -> None:
    got = _run("""
out = {}
def worker():
    out["before"] = threads()
    out["first"] = work()
    out["with_pool"] = threads()
    out["released"] = release_openmp_threads()
    out["after"] = threads()
    out["again"] = work()  # a new pool, the same result
    out["pool_again"] = threads()
    out["released_twice"] = release_openmp_threads() and release_openmp_threads()
t = threading.Thread(target=worker)
t.start(); t.join()
print(json.dumps(out))
""")
    assert got["with_pool"] == got["before"] + 1  # the thread's pool: one worker beside it
    assert got["released"] is True and got["after"] == got["before"]
    assert got["first"] == got["again"] == 8_000_000.0
    assert got["pool_again"] == got["before"] + 1
    assert got["released_twice"] is True  # nothing left to free: still fine


def test_the_engine_and_its_caller_leave_no_idle_workers(tiny_model_dir: Path) -> None:
    """After a generation, neither the caller's thread nor the idle decode thread holds OpenMP workers:
    the process has its threads of before plus the decode thread alone."""
    got = _run(
        """
import sys
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
engine = LocalEngine.from_pretrained(sys.argv[1], dtype="float32")
work()  # this thread's pool exists
with_pool = threads()
release_openmp_threads()
baseline = threads()
[c] = engine.generate_sync([1, 520, 9531, 198], SamplingParams(temperature=1.0, max_tokens=24, seed=0))
deadline = time.time() + 3  # under the engine's 5 s idle exit, which would free the pool too
while threads() != baseline + 1 and time.time() < deadline:  # the decode thread frees its pool as it idles
    time.sleep(0.01)
print(json.dumps({"with_pool": with_pool, "baseline": baseline, "after": threads(),
                  "alive": engine._thread is not None, "tokens": len(c.completion_ids)}))
""",
        str(tiny_model_dir),
    )
    assert got["with_pool"] == got["baseline"] + 1
    assert got["tokens"] == 24
    assert got["after"] == got["baseline"] + 1  # the decode thread, without workers
    assert got["alive"]  # still there, idle: the release, not its exit, freed the workers
