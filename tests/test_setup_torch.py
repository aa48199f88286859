"""Which index the set-up scripts install torch from (``scripts/_torch.sh``: ``install_torch``).

Each test sources the real ``scripts/_torch.sh`` in bash and calls ``install_torch`` with a FAKE venv
python (a shell script) that records every ``-m pip`` call and runs nothing else of pip; any other call
(the index probe) goes to the real Python. The "GPU" is a FAKE ``nvidia-smi`` on ``PATH`` that succeeds
or fails. PyTorch's CPU index is a real HTTP server on loopback (reachable) or a closed loopback port
(unreachable), named through ``RLLM_TORCH_CPU_INDEX_URL``.
"""

from __future__ import annotations

import http.server
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/usr/bin/env bash
# FAKE venv python for tests/test_setup_torch.py: records pip calls; answers the CUDA-build check.
if [[ "$1" == "-m" && "$2" == "pip" ]]; then
  shift 2
  echo "pip $*" >> "$FAKE_PIP_CALLS"
  exit "${FAKE_PIP_STATUS:-0}"
fi
if [[ "$1" == "-c" && "$2" == *"torch.version.cuda"* ]]; then
  [[ "${FAKE_TORCH_CUDA:-0}" == 1 ]]; exit $?
fi
exec "$REAL_PYTHON" "$@"
"""


class _TorchIndex(http.server.BaseHTTPRequestHandler):
    """A stand-in for PyTorch's CPU index: answers 200 for its torch page and counts the requests."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        status = 200 if self.path == "/whl/cpu/torch/" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"<html>torch-2.13.0+cpu</html>")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def cpu_index() -> Iterator[str]:
    _TorchIndex.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TorchIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


def install_torch(tmp_path: Path, *, gpu: bool, env: dict[str, str]) -> tuple[int, str, list[str]]:
    """Run ``install_torch FAKE_PYTHON torch==2.13.0 torch`` and return (status, output, pip calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    nvidia_smi = bin_dir / "nvidia-smi"
    nvidia_smi.write_text(f"#!/usr/bin/env bash\nexit {0 if gpu else 1}\n")  # FAKE: a GPU, or none
    nvidia_smi.chmod(0o755)
    calls = tmp_path / "pip-calls.log"
    calls.write_text("")
    script = (
        'log() { printf "[test] %s\\n" "$*"; }; die() { printf "[test] error: %s\\n" "$*"; exit 1; }; '
        f'source "{ROOT}/scripts/_torch.sh"; install_torch "{python}" torch==2.13.0 torch'
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_TORCH")}
    proc = subprocess.run(
        ["bash", "-c", script],
        env={
            **base,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_PIP_CALLS": str(calls),
            "REAL_PYTHON": sys.executable,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, calls.read_text().splitlines()


PIP = "pip --disable-pip-version-check install"


def test_a_cpu_machine_gets_torch_from_pytorchs_cpu_index(tmp_path: Path, cpu_index: str) -> None:
    status, out, calls = install_torch(tmp_path, gpu=False, env={"RLLM_TORCH_CPU_INDEX_URL": cpu_index})
    assert status == 0, out
    assert calls == [f"{PIP} --index-url {cpu_index} torch==2.13.0"]
    assert "/whl/cpu/torch/" in _TorchIndex.requests  # it was probed first
    assert "PyTorch's CPU index" in out


def test_the_default_cpu_index_is_pytorchs(tmp_path: Path) -> None:
    text = (ROOT / "scripts" / "_torch.sh").read_text()
    assert 'TORCH_CPU_INDEX_URL="${RLLM_TORCH_CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}"' in text


def test_a_gpu_machine_gets_pips_default_cuda_build(tmp_path: Path, cpu_index: str) -> None:
    status, out, calls = install_torch(tmp_path, gpu=True, env={"RLLM_TORCH_CPU_INDEX_URL": cpu_index})
    assert status == 0, out
    assert calls == [f"{PIP} torch"]
    assert _TorchIndex.requests == []  # the CPU index is not even asked
    assert "GPU found" in out


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_the_override_wins_on_any_machine_unprobed(tmp_path: Path, cpu_index: str, gpu: bool) -> None:
    mirror = "http://127.0.0.1:9/mirror/simple"  # never contacted: the FAKE pip does not download
    status, out, calls = install_torch(
        tmp_path, gpu=gpu, env={"RLLM_TORCH_CPU_INDEX_URL": cpu_index, "RLLM_TORCH_INDEX_URL": mirror}
    )
    assert status == 0, out
    assert calls == [f"{PIP} --index-url {mirror} {'torch' if gpu else 'torch==2.13.0'}"]
    assert _TorchIndex.requests == []


def test_an_empty_override_means_pips_configured_index(tmp_path: Path, cpu_index: str) -> None:
    status, out, calls = install_torch(
        tmp_path, gpu=False, env={"RLLM_TORCH_CPU_INDEX_URL": cpu_index, "RLLM_TORCH_INDEX_URL": ""}
    )
    assert status == 0, out
    assert calls == [f"{PIP} torch==2.13.0"]
    assert _TorchIndex.requests == []
    assert "pip's configured index" in out


def test_an_unreachable_cpu_index_falls_back_to_pips_index_and_says_so(
    tmp_path: Path, closed_port_url: str
) -> None:
    status, out, calls = install_torch(tmp_path, gpu=False, env={"RLLM_TORCH_CPU_INDEX_URL": closed_port_url})
    assert status == 0, out
    assert calls == [f"{PIP} torch==2.13.0"]
    assert re.search(r"cannot be reached \(URLError: .*refused", out), out
    assert "installing torch==2.13.0 from pip's configured index instead" in out
    assert "RLLM_TORCH_INDEX_URL" in out  # the fix is named


def test_a_cuda_build_on_a_cpu_machine_is_warned_about(tmp_path: Path, closed_port_url: str) -> None:
    status, out, _ = install_torch(
        tmp_path, gpu=False, env={"RLLM_TORCH_CPU_INDEX_URL": closed_port_url, "FAKE_TORCH_CUDA": "1"}
    )
    assert status == 0, out
    assert "warning: the installed torch is a CUDA build on a machine without a GPU" in out


def test_a_failed_install_stops_with_the_fix(tmp_path: Path, cpu_index: str) -> None:
    status, out, _ = install_torch(
        tmp_path, gpu=False, env={"RLLM_TORCH_CPU_INDEX_URL": cpu_index, "FAKE_PIP_STATUS": "1"}
    )
    assert status == 1
    assert f"error: pip could not install torch==2.13.0 from {cpu_index}" in out
    assert "set RLLM_TORCH_INDEX_URL" in out


@pytest.mark.parametrize("script", ["setup.sh", "setup_vllm.sh"])
def test_every_setup_script_installs_torch_through_install_torch(script: str) -> None:
    text = (ROOT / "scripts" / script).read_text()
    assert "source scripts/_torch.sh" in text
    assert re.search(r'^\s+install_torch "\$PY" "torch==\$TORCH_VERSION', text, re.MULTILINE)
    assert "pip install" not in text.split("# --- torch")[1].split("# ---")[0]  # no second way in
