"""`rllm gateway` as a user runs it: a subprocess on a loopback port, called with the openai client,
then killed with SIGKILL; every acknowledged trace is still in the store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

from rllm.gateway.traces import TraceStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gateway_command_serves_and_survives_kill_9(tiny_model_dir: Path, tmp_path: Path) -> None:
    port, store = _free_port(), tmp_path / "traces.db"
    cmd = [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "gateway",
        "--model",
        str(tiny_model_dir),
        "--port",
        str(port),
        "--store",
        str(store),
        "--api-key",
        "k",
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                if (
                    httpx.get(
                        f"http://127.0.0.1:{port}/health", headers={"Authorization": "Bearer k"}
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "rllm gateway did not come up"
            time.sleep(0.2)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/sessions/cli:1/v1", api_key="k", max_retries=0
        )
        replies = [
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=3
            )
            .choices[0]
            .message.content
            for i in range(3)
        ]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with TraceStore(store) as s:
        assert [t.response_text for t in s.list("cli:1")] == replies


def test_gateway_command_rejects_bad_arguments(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "gateway", "--model", "x", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "--port" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "gateway",
            "--model",
            "m",
            "--port",
            str(_free_port()),
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--store",
            str(tmp_path / "t.db"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "no upstream worker answered" in r.stderr
