"""A gateway over real HTTP for the gateway tests: uvicorn on a loopback port, the tiny model behind it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_support import API_KEY, MODEL, GatewayFixture

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def server(tiny_engine: LocalEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayFixture]:
    store = TraceStore(tmp_path_factory.mktemp("gateway") / "traces.db")
    app = create_app(tiny_engine, store, model_name=MODEL, api_key=API_KEY, max_body_bytes=64 * 1024)
    with GatewayServer(app) as srv:
        yield GatewayFixture(srv.url, tiny_engine, store)
    store.close()
