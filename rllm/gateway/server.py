"""Running the gateway: in a background thread of a training process (:class:`GatewayServer`), or as
the ``rllm gateway`` command (:func:`serve`)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from typing_extensions import Self

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import LocalUpstream
from rllm.models import resolve_model

logger = logging.getLogger(__name__)


class GatewayServer:
    """Serves a gateway app with uvicorn on a loopback port from a daemon thread (its own event loop).

    Used by the trainer to put its in-process engine behind the gateway for ``@rllm.rollout`` flows::

        with GatewayServer(app) as server:
            server.url  # http://127.0.0.1:PORT
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0
    ) -> None:
        self.app = app
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="auto", timeout_keep_alive=60, backlog=4096)
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True, name="rllm-gateway"
        )
        self._start_timeout_s = start_timeout_s

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> GatewayServer:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the embedded gateway did not start on {self.url}")
            time.sleep(0.01)
        logger.info("gateway listening on %s", self.url)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    *,
    model: str,
    host: str,
    port: int,
    store_path: str | Path,
    upstreams: list[str],
    upstream_kind: str = "auto",
    upstream_model: str | None = None,
    api_key: str | None = None,
    upstream_api_key: str | None = None,
    upstream_timeout_s: float = 600.0,
    max_body_bytes: int = 16 * 1024 * 1024,
    tool_format: str = "hermes",
    device: str = "auto",
    dtype: str = "auto",
    max_batch_rows: int = 64,
    fsync: bool = False,
    fd: int | None = None,
    probe: bool = True,
    weight_version: int = 0,
    upstream_adapters: dict[str, str] | None = None,
) -> None:
    """Blocking: serve ``model`` (from the local engine, or from ``upstreams``) until interrupted.

    ``fd``: serve on this already-listening socket instead of binding ``host:port`` (a worker of
    :class:`rllm.gateway.pool.GatewayProcesses`, whose parent bound it). ``probe=False`` skips asking the
    upstreams for their dialect and model first (the parent did, and passes both). ``weight_version``: the
    version an HTTP upstream's traces record until ``POST /admin/policy`` sets another (a restarted worker
    starts at its siblings' version; ``upstream_adapters``, their adapters' served names)."""
    store = TraceStore(store_path, fsync=fsync)
    upstream = build_upstream(
        model,
        upstreams,
        upstream_kind=upstream_kind,
        upstream_model=upstream_model,
        upstream_api_key=upstream_api_key,
        upstream_timeout_s=upstream_timeout_s,
        tool_format=tool_format,
        device=device,
        dtype=dtype,
        max_batch_rows=max_batch_rows,
        batch_wait_ms=2.0,
        probe=probe,
        weight_version=weight_version,
        adapters=upstream_adapters,
    )
    app = create_app(upstream, store, model_name=model, api_key=api_key, max_body_bytes=max_body_bytes)
    where = f"fd {fd}" if fd is not None else f"http://{host}:{port}"
    logger.info("serving %s at %s/v1 (sessions: /sessions/{id}/v1), traces in %s", model, where, store_path)
    try:
        if fd is None:
            uvicorn.run(app, host=host, port=port, log_level="warning", timeout_keep_alive=60, backlog=4096)
        else:
            # socket(fileno=...) reads the family from the fd (uvicorn's own fd= assumes a Unix socket).
            sock = socket.socket(fileno=fd)
            server = uvicorn.Server(
                uvicorn.Config(app, log_level="warning", timeout_keep_alive=60, backlog=4096)
            )
            server.run(sockets=[sock])
    finally:
        store.close()


def build_upstream(
    model: str,
    upstreams: list[str],
    *,
    upstream_kind: str = "auto",
    upstream_model: str | None = None,
    upstream_api_key: str | None = None,
    upstream_timeout_s: float = 600.0,
    tool_format: str = "hermes",
    device: str = "auto",
    dtype: str = "auto",
    max_batch_rows: int = 64,
    batch_wait_ms: float = 2.0,
    probe: bool = True,
    weight_version: int = 0,
    adapters: dict[str, str] | None = None,
) -> Any:
    """The gateway's upstream: the OpenAI-compatible servers at ``upstreams`` (probed now, so nothing
    answering fails at start-up rather than on the first request), or else ``model`` in a local engine
    whose batches wait ``batch_wait_ms`` for calls arriving a few ms apart. ``upstream_timeout_s``: how long
    a call waits for an upstream's answer before it is retried elsewhere (a hung server)."""
    if upstreams:
        if probe:
            upstream_kind, upstream_model = probe_upstream(
                upstreams,
                upstream_kind=upstream_kind,
                upstream_model=upstream_model,
                upstream_api_key=upstream_api_key,
            )
        return HTTPUpstream(
            upstreams,
            kind=upstream_kind,
            model=upstream_model,  # type: ignore[arg-type]
            api_key=upstream_api_key,
            timeout_s=upstream_timeout_s,
            weight_version=weight_version,
            adapters=adapters,
        )
    from rllm.inference.local import LocalEngine  # torch and transformers: only a local model needs them

    engine = LocalEngine.from_pretrained(
        resolve_model(model),
        device=device,
        dtype=dtype,
        max_batch_rows=max_batch_rows,
        batch_wait_ms=batch_wait_ms,
    )
    return LocalUpstream(engine, tool_format=tool_format)


def probe_upstream(
    upstreams: list[str],
    *,
    upstream_kind: str = "auto",
    upstream_model: str | None = None,
    upstream_api_key: str | None = None,
) -> tuple[str, str | None]:
    """Blocking: ask the upstream servers what they are; ``(dialect, model name)`` as detected (or as
    given). Raises :class:`~rllm.gateway.upstreams.UpstreamError` when none answers."""
    probe = HTTPUpstream(
        upstreams,
        kind=upstream_kind,
        model=upstream_model,  # type: ignore[arg-type]
        api_key=upstream_api_key,
    )
    asyncio.run(_probe(probe))
    # The server gets a fresh HTTPUpstream: the probe's aiohttp session belonged to asyncio.run's loop.
    return probe.kind, probe.model


async def _probe(upstream: Any) -> None:
    try:
        await upstream.start()
    finally:
        await upstream.aclose()
