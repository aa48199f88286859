"""Start-up refusals of the distributed backend: one line saying what to do, and nothing left running
(no Ray connection, no cluster started). None of these needs a cluster, so none is started."""

from __future__ import annotations

import socket
import sys

import pytest
from conftest import PAD_ID, make_config, require_ray

from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.distributed import DistributedBackend


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address(tiny_model_dir) -> None:
    require_ray()
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    cfg = make_config(tiny_model_dir, f"backend.distributed.ray_address={address}")
    with pytest.raises(UnsupportedConfigError, match="is unreachable.*ray start --head") as e:
        DistributedBackend(cfg, str(tiny_model_dir), pad_id=PAD_ID)
    assert "\n" not in str(e.value) and address in str(e.value)
    assert not require_ray().is_initialized()


def test_nccl_on_cpu(tiny_model_dir) -> None:
    require_ray()
    cfg = make_config(tiny_model_dir, "backend.distributed.comm=nccl")
    with pytest.raises(UnsupportedConfigError, match="comm=nccl needs GPUs.*set comm=gloo"):
        DistributedBackend(cfg, str(tiny_model_dir), pad_id=PAD_ID)
    assert not require_ray().is_initialized()


def test_ray_not_installed(tiny_model_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import ray` raise ImportError, as on an install without the extra.
    monkeypatch.setitem(sys.modules, "ray", None)
    cfg = make_config(tiny_model_dir)
    with pytest.raises(UnsupportedConfigError, match=r"pip install 'rllm\[distributed\]'"):
        DistributedBackend(cfg, str(tiny_model_dir), pad_id=PAD_ID)


def test_importing_the_backend_does_not_import_ray() -> None:
    import subprocess

    code = "import sys, rllm.trainer.backends.distributed as d; d.DistributedBackend.capabilities; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
