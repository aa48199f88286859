"""``rllm serve tinker`` as a user starts it: a separate process the real SDK reaches over loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import tinker
from tinker import types


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_cmd(model: Path, port: int) -> list[str]:
    """``rllm serve tinker --model MODEL --port PORT``, run by this interpreter."""
    return [sys.executable, "-m", "rllm", "serve", "tinker", "--model", str(model), "--port", str(port)]


def test_rllm_serve_tinker_serves_the_sdk(tiny_model_dir: Path, tmp_path: Path) -> None:
    port = _free_port()
    cmd = _serve_cmd(tiny_model_dir, port)
    cmd += [
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--state-dir",
        str(tmp_path / "state"),
        "--api-key",
        "tml-cli",
    ]
    env = {**os.environ, "TINKER_TELEMETRY": "0"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(f"{url}/api/v1/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "rllm serve tinker did not answer /healthz within 60 s"
            time.sleep(0.2)
        client = tinker.ServiceClient(base_url=url, api_key="tml-cli")
        training_client = client.create_lora_training_client(base_model=str(tiny_model_dir), rank=2).result()
        sampler = training_client.save_weights_and_get_sampling_client().result()
        out = sampler.sample(
            types.ModelInput.from_ints([1, 2, 3]), 2, types.SamplingParams(max_tokens=3)
        ).result()
        assert [len(s.tokens) for s in out.sequences] == [3, 3]
        client.close("success").result(timeout=30)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_taken_port_is_a_one_line_error(tiny_model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            _serve_cmd(tiny_model_dir, port),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("pass another --port"), proc.stderr
