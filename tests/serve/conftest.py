"""One Tinker service on the tiny model for the whole session, in this process on a loopback port, and
real ``tinker.ServiceClient``s pointed at it (the SDK is unmodified: only its base URL and key are set)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker
from tinker_support import API_KEY, MAX_SAMPLERS

from rllm.serve.tinker import ServeConfig, ServerThread, TinkerService, build_service


@pytest.fixture(scope="session")
def tinker_service(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> TinkerService:
    cfg = ServeConfig(
        model=str(tiny_model_dir),
        device="cpu",
        dtype="float32",
        max_samplers=MAX_SAMPLERS,
        state_dir=str(tmp_path_factory.mktemp("tinker_state")),
        micro_batch_size=4,
    )
    return build_service(cfg)


@pytest.fixture(scope="session")
def tinker_server(tinker_service: TinkerService) -> Iterator[ServerThread]:
    with ServerThread(tinker_service, api_key=API_KEY) as server:
        yield server


@pytest.fixture
def service_client(
    tinker_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tinker.ServiceClient]:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    client = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY)
    yield client
    client.close("success").result(timeout=30)


@pytest.fixture
def base_model(tiny_model_dir: Path) -> str:
    return str(tiny_model_dir)
