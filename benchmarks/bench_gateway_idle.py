"""What ``rllm gateway --workers N`` costs while no call arrives: the CPU its supervisor process (the one
that starts the workers and restarts one that dies) and each worker use over ``--duration`` idle seconds,
and the bytes the supervisor reads meanwhile (building an HTTP client reads the CA bundle, ~200 KB).

The gateway runs as the command runs it (``python -m rllm gateway --workers N``), in front of the FAKE
upstream of ``bench_gateway.py`` (``_gateway_load.run_fake_upstream``: answers in microseconds); one call
per worker first, then ``--settle`` seconds, then the measured idle window. CPU times come from psutil.
A worker's own idle CPU includes its upstream health check (every 5 s).

    .venv/bin/python benchmarks/bench_gateway_idle.py              # 2 workers, 20 s idle
    .venv/bin/python benchmarks/bench_gateway_idle.py --quick      # plumbing check: 2 workers, 3 s idle
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from _common import header_line, markdown_table
from _gateway_load import MODEL, run_fake_upstream

ROOT = Path(__file__).resolve().parent.parent


def _free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n > 65535:
            continue
        try:
            for p in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {n} consecutive free ports")


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def measure(workers: int, duration_s: float, settle_s: float) -> dict[str, float]:
    up_port, port = _free_ports(1), _free_ports(workers)
    tmp = Path(tempfile.mkdtemp(prefix="rllm-bench-idle-"))
    fake = subprocess.Popen([sys.executable, __file__, "--fake-upstream", "--port", str(up_port)])
    gateway = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{up_port}/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the fake upstream did not start") from None
                time.sleep(0.1)
        gateway = subprocess.Popen(
            [sys.executable, "-m", "rllm", "gateway", "--model", MODEL, "--port", str(port)]
            + ["--workers", str(workers), "--upstream", f"http://127.0.0.1:{up_port}/v1"]
            + ["--upstream-kind", "vllm", "--store", str(tmp / "traces.db"), "--log-dir", str(tmp / "logs")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert gateway.stdout is not None
        if not gateway.stdout.readline().startswith(f"{workers} gateway workers"):
            raise RuntimeError(f"rllm gateway did not start (status {gateway.wait()})")
        for p in range(port, port + workers):
            r = httpx.post(
                f"http://127.0.0.1:{p}/sessions/idle-{p}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            r.raise_for_status()
        time.sleep(settle_s)
        sup = psutil.Process(gateway.pid)
        procs = [sup, *sup.children()]
        cpu0, read0, t0 = [_cpu_s(p) for p in procs], sup.io_counters().read_chars, time.monotonic()
        time.sleep(duration_s)
        cpu1, read1, t1 = [_cpu_s(p) for p in procs], sup.io_counters().read_chars, time.monotonic()
        if gateway.poll() is not None:
            raise RuntimeError(f"rllm gateway exited (status {gateway.returncode}) while idle")
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(30)
        fake.terminate()
        fake.wait(10)
    wall = t1 - t0
    pct = [100 * (b - a) / wall for a, b in zip(cpu0, cpu1)]
    return {
        "seconds": wall,
        "supervisor_cpu_pct": pct[0],
        "worker_cpu_pct_mean": sum(pct[1:]) / max(1, len(pct) - 1),
        "supervisor_read_bytes": read1 - read0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="gateway worker processes (default: 2)")
    p.add_argument("--duration", type=float, default=20.0, help="measured idle seconds (default: 20)")
    p.add_argument("--settle", type=float, default=2.0, help="idle seconds before measuring (default: 2)")
    p.add_argument("--quick", action="store_true", help="plumbing check: 3 s idle, 1 s settle")
    p.add_argument("--fake-upstream", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.fake_upstream:
        run_fake_upstream(args.port)
        return 0
    if args.quick:
        args.duration, args.settle = 3.0, 1.0
    print(header_line())
    r = measure(args.workers, args.duration, args.settle)
    print(
        markdown_table(
            [
                "gateway",
                "idle s",
                "supervisor CPU (% of a core)",
                "supervisor read (bytes)",
                "worker CPU (mean %)",
            ],
            [
                [
                    f"rllm gateway --workers {args.workers}",
                    f"{r['seconds']:.1f}",
                    f"{r['supervisor_cpu_pct']:.2f}",
                    str(r["supervisor_read_bytes"]),
                    f"{r['worker_cpu_pct_mean']:.2f}",
                ]
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
