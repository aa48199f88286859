"""docker/healthcheck.py against a real `rllm gateway` (a subprocess on the tiny model, with an API key): unhealthy
until the gateway answers, healthy while it serves, unhealthy once it is gone. Slow: on the shared 2-core
machine the gateway takes up to a minute to start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HEALTHCHECK = Path(__file__).resolve().parents[2] / "docker" / "healthcheck.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check(pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), "--pid", str(pid)], capture_output=True, text=True, check=False
    )


def test_healthcheck_follows_a_real_gateway(tiny_model_dir: Path, tmp_path: Path) -> None:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "gateway",
        "--model",
        str(tiny_model_dir),
        "--port",
        str(port),
    ]
    cmd += ["--store", str(tmp_path / "traces.db"), "--api-key", "k", "--device", "cpu", "--dtype", "float32"]
    env = {k: v for k, v in os.environ.items() if k != "RLLM_GATEWAY_API_KEY"} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 180
        while (result := _check(proc.pid)).returncode != 0:
            assert result.stdout.startswith(f"unhealthy: port {port}: "), result.stdout + result.stderr
            assert proc.poll() is None, "rllm gateway exited"
            assert time.monotonic() < deadline, "rllm gateway did not come up"
            time.sleep(1)
        assert result.stdout.strip() == f"healthy: gateway on port(s) {port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    gone = _check(proc.pid)
    assert gone.returncode == 1 and gone.stdout.startswith("unhealthy: cannot read the command line")
