"""Real faulty servers for the fault-injection suite (tests/faults, bench_faults.py): nothing here mocks rllm.

``FlakyServer`` is a real HTTP server on a loopback port (aiohttp, in a thread of its own) that speaks vLLM's
OpenAI dialect as rllm's HTTP upstream asks for it (``/version``, ``/health``, ``/v1/models``, chat and text
completions with ``prompt_token_ids``, per-choice ``token_ids`` and per-token logprobs). It either answers
itself (a deterministic fake model: no weights, microseconds a call) or forwards every call to another server
(``forward_to``: e.g. an rllm gateway over the trainer's real local engine, which answers in the same
dialect). On top, it injects faults by its own call counter, so a run is reproducible:

- every ``error_every``-th call is answered ``500`` (the call never reaches the model);
- every ``hang_every``-th call is accepted (the request is read) and never answered: the socket stays open
  and silent until the server stops.

``GatewayUnderTest`` is the real gateway (``rllm.gateway.create_app`` with an ``HTTPUpstream``) served on a
loopback port in front of such servers, recording into a real trace store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from typing_extensions import Self

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore

FAKE_MODEL = "fault-fake"


class FlakyServer:
    """A loopback OpenAI-compatible server in vLLM's dialect that fails some calls for real (see the module)."""

    def __init__(
        self,
        *,
        forward_to: str | None = None,
        error_every: int = 0,
        hang_every: int = 0,
        phase: int = 0,
        completion_tokens: int = 4,
    ) -> None:
        self.forward_to = forward_to.rstrip("/") if forward_to else None
        self.error_every, self.hang_every, self.phase = error_every, hang_every, phase
        self.completion_tokens = completion_tokens
        self.calls = 0  # completion calls received
        self.errors = 0  # answered 500
        self.hangs = 0  # accepted and never answered
        self.served = 0  # answered 200
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="flaky-server")
        self._runner: web.AppRunner | None = None
        self._release: asyncio.Event | None = None
        self._client: aiohttp.ClientSession | None = None
        self.url = ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FlakyServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _stop(self) -> None:
        assert self._release is not None and self._runner is not None
        self._release.set()  # hung handlers end (their clients gave up long ago)
        if self._client is not None:
            await self._client.close()
        await self._runner.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ routes
    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "flaky-server"})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": FAKE_MODEL, "object": "model"}]})

    def _fault_of(self, k: int) -> str | None:
        """The fault call ``k`` (0-based) gets: a pure function of the counter, so runs repeat."""
        if self.hang_every and (k + self.phase) % self.hang_every == self.hang_every - 1:
            return "hang"
        if self.error_every and (k + self.phase) % self.error_every == self.error_every // 2:
            return "error"
        return None

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()  # the request is accepted and read in full, whatever happens next
        k, self.calls = self.calls, self.calls + 1
        fault = self._fault_of(k)
        if fault == "hang":
            self.hangs += 1
            assert self._release is not None
            await self._release.wait()
            return web.json_response({"error": {"message": "released at shutdown"}}, status=503)
        if fault == "error":
            self.errors += 1
            return web.json_response(
                {"error": {"message": f"injected fault: call {k} answered 500", "type": "server_error"}},
                status=500,
            )
        if self.forward_to is not None:
            status, reply = await self._forward(request.path, body)
        else:
            status, reply = 200, json.dumps(self._fake_reply(request.path, json.loads(body))).encode()
        self.served += status == 200
        return web.Response(body=reply, status=status, content_type="application/json")

    async def _forward(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        async with self._client.post(
            self.forward_to + path, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            return resp.status, await resp.read()

    def _fake_reply(self, path: str, req: dict[str, Any]) -> dict[str, Any]:
        """A deterministic reply with vLLM's ``return_token_ids`` fields: prompt ids from the prompt's
        bytes, completion ids from the prompt's checksum, logprob -0.5 per token."""
        chat = path.endswith("/chat/completions")
        prompt = json.dumps(req.get("messages") if chat else req.get("prompt"), sort_keys=True)
        prompt_ids = [b % 1000 for b in prompt.encode()[:64]] or [1]
        seed = zlib.crc32(prompt.encode())
        choices = []
        for i in range(int(req.get("n") or 1)):
            ids = [(seed + 31 * i + j) % 1000 + 1 for j in range(self.completion_tokens)]
            text = " ".join(f"t{t}" for t in ids)
            entries = [{"token": f" t{t}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for t in ids]
            choice: dict[str, Any] = {"index": i, "finish_reason": "stop", "token_ids": ids}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
                choice["logprobs"] = {"content": entries}
            else:
                choice["text"] = text
                choice["prompt_token_ids"] = prompt_ids
                choice["logprobs"] = {
                    "token_logprobs": [-0.5] * len(ids),
                    "tokens": [e["token"] for e in entries],
                }
            choices.append(choice)
        out: dict[str, Any] = {
            "id": f"fake-{seed}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": req.get("model") or FAKE_MODEL,
            "choices": choices,
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": self.completion_tokens},
        }
        if chat:
            out["prompt_token_ids"] = prompt_ids
        return out


class GatewayUnderTest:
    """The real gateway on loopback: ``HTTPUpstream`` over ``upstream_urls`` (vLLM dialect), traces in a real
    store at ``store_path``. ``timeout_s`` and ``retries`` are the upstream's call timeout and retries."""

    def __init__(
        self,
        upstream_urls: list[str],
        store_path: str | Path,
        *,
        timeout_s: float = 600.0,
        retries: int = 2,
        model: str = FAKE_MODEL,
    ) -> None:
        self.store = TraceStore(store_path)
        self.upstream = HTTPUpstream(
            upstream_urls,
            kind="vllm",
            model=model,
            timeout_s=timeout_s,
            retries=retries,
            health_interval_s=0.5,
        )
        self.server = GatewayServer(create_app(self.upstream, self.store, model_name=model))
        self.url = ""

    def start(self) -> GatewayUnderTest:
        self.url = self.server.start().url
        return self

    def stop(self) -> None:
        self.server.stop()
        self.store.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
