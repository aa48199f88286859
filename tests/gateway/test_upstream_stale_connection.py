"""A pooled keep-alive connection that the server closes as it is reused must not lose the call.

The upstream here is a FAKE vLLM server (aiohttp.web on loopback): it answers like vLLM's /v1/completions,
but drops the connection, without answering, on every second request that arrives on a reused connection,
as a server whose keep-alive timeout fires just as the client reuses the connection does. With one worker
there is nowhere else to retry: the call must succeed on a fresh connection to the same worker, and the
worker must stay healthy.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.upstreams import UpstreamRequest
from rllm.inference.base import SamplingParams

REPLY = {
    "id": "cmpl-1",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "text": "hi",
            "token_ids": [5, 2],
            "logprobs": {"token_logprobs": [-0.5, -0.1]},
            "finish_reason": "stop",
        }
    ],
}


async def _run() -> tuple[list[int], int, int, bool]:
    seen: dict[int, int] = {}  # connection id -> requests on it
    dropped = 0

    async def completions(request: web.Request) -> web.Response:
        nonlocal dropped
        conn = id(request.transport)
        seen[conn] = seen.get(conn, 0) + 1
        if seen[conn] == 2:  # the second request on a kept-alive connection: close it, answer nothing
            dropped += 1
            request.transport.close()
            await asyncio.sleep(0.05)
        return web.json_response(REPLY)

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    upstream = HTTPUpstream([f"http://127.0.0.1:{port}"], kind="vllm", model="m", retries=0)
    upstream._started = True  # a fake server has no /version or /health to probe
    try:
        request = UpstreamRequest(
            endpoint="completions", prompt=[1, 2, 3], params=SamplingParams(max_tokens=2)
        )
        results = [await upstream.complete(request, session_id="s") for _ in range(4)]
        return (
            [len(r.choices[0].completion_ids) for r in results],
            dropped,
            upstream.workers[0].failures,
            upstream.workers[0].healthy,
        )
    finally:
        await upstream.aclose()
        await runner.cleanup()


def test_a_connection_closed_under_a_reused_request_is_retried_fresh_on_the_same_worker() -> None:
    lengths, dropped, failures, healthy = asyncio.run(_run())
    assert dropped >= 1, "the fake server never dropped a reused connection: the test proves nothing"
    assert lengths == [2, 2, 2, 2]
    assert failures == 0 and healthy
