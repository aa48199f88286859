"""The two halves of bench_gateway.py's load that are not the system under test: the FAKE upstream (raw
asyncio + httptools, an OpenAI-compatible server in vLLM's token-id dialect whose replies are built once at
start-up, so it answers in microseconds) and the closed-loop load generator (one keep-alive HTTP/1.1
connection per session, replies parsed with httptools). bench_gateway.py runs each in its own process.
A gateway of several worker processes gets each session on the worker ``rllm.gateway.pool.route`` picks
for it, as a client of such a gateway would send it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import httptools

MODEL = "bench"
COMPLETION_TOKENS = 16
PROMPT_TOKENS = 32
CHAT_REQUEST = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 2? Answer in one word."},
    ],
    "max_tokens": COMPLETION_TOKENS,
    "temperature": 1.0,
}


# ---------------------------------------------------------------------------------------------------------
# The FAKE upstream: raw asyncio protocol + httptools, replies built once at start-up.


def _fake_chat_reply(token_ids: bool, logprobs: bool, completion_tokens: int = COMPLETION_TOKENS) -> bytes:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": "a" * completion_tokens},
        "finish_reason": "length",
    }
    if logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}
                for _ in range(completion_tokens)
            ]
        }
    if token_ids:
        choice["token_ids"] = [64 + i for i in range(completion_tokens)]
    reply: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [choice],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "total_tokens": PROMPT_TOKENS + completion_tokens,
            "completion_tokens": completion_tokens,
        },
    }
    if token_ids:
        reply["prompt_token_ids"] = list(range(1000, 1000 + PROMPT_TOKENS))
    return json.dumps(reply).encode()


def _http_response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


class _FakeUpstreamProtocol(asyncio.Protocol):
    """One keep-alive connection to the fake upstream. ``replies`` maps a route to its whole response."""

    def __init__(self, replies: dict[Any, bytes]) -> None:
        self.replies = replies
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        path = self.url.split(b"?", 1)[0]
        if path == b"/v1/chat/completions":
            try:
                req = json.loads(b"".join(self.body))
                reply = self.replies[bool(req.get("return_token_ids")), bool(req.get("logprobs"))]
            except (ValueError, AttributeError):
                reply = self.replies["bad"]
        else:
            reply = self.replies.get(path, self.replies["404"])
        self.transport.write(reply)
        if not self.parser.should_keep_alive():
            self.transport.close()


def run_fake_upstream(port: int, completion_tokens: int = COMPLETION_TOKENS) -> None:
    """Serve on ``port``; every chat reply has ``completion_tokens`` tokens, whatever was asked."""
    import uvloop

    replies: dict[Any, bytes] = {
        (t, lp): _http_response(200, _fake_chat_reply(t, lp, completion_tokens))
        for t in (False, True)
        for lp in (False, True)
    }
    replies |= {
        b"/health": _http_response(200, b"{}"),
        b"/version": _http_response(200, b'{"version":"fake"}'),
        b"/v1/models": _http_response(
            200,
            json.dumps(
                {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "fake-upstream"}],
                }
            ).encode(),
        ),
        "bad": _http_response(400, b'{"error":{"message":"bad json"}}'),
        "404": _http_response(404, b'{"error":{"message":"not found"}}'),
    }

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: _FakeUpstreamProtocol(replies), "127.0.0.1", port, backlog=4096
        )
        await server.serve_forever()

    uvloop.run(main())


# ---------------------------------------------------------------------------------------------------------
# The load generator: closed-loop workers on raw keep-alive HTTP/1.1 connections (httptools parses replies).


class _ClientConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"the server closed the connection ({exc})"))

    async def send(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.body, self.waiter = [], asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by some processes and their children."""
    import psutil

    procs = []
    try:
        for pid in pids:
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


async def _load(
    targets: list[tuple[int, str]], warmup_s: float, duration_s: float, watch: dict[str, list[int]]
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    body = json.dumps(CHAT_REQUEST).encode()
    state = {"measuring": False, "stop": False}
    latencies: list[float] = []
    counts = {"ok": 0, "errors": 0}
    first: dict[str, Any] = {}
    max_requests = 5_000_000  # a hard cap besides the time limit

    async def worker(port: int, path: str) -> None:
        request = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        conn: _ClientConn | None = None
        perf = time.perf_counter
        while not state["stop"] and counts["ok"] + counts["errors"] < max_requests:
            try:
                if conn is None:
                    _, conn = await loop.create_connection(_ClientConn, "127.0.0.1", port)
                t0 = perf()
                status, reply = await conn.send(request)
                dt = perf() - t0
            except OSError as exc:
                counts["errors"] += 1
                first.setdefault("error", f"{type(exc).__name__}: {exc}")
                conn = None
                await asyncio.sleep(0.05)
                continue
            if status != 200:
                counts["errors"] += 1
                first.setdefault("error", f"HTTP {status}: {reply[:300].decode(errors='replace')}")
                continue
            counts["ok"] += 1
            if state["measuring"]:
                latencies.append(dt)
            if "reply" not in first:
                first["reply"] = reply.decode(errors="replace")
        if conn is not None and conn.transport is not None:
            conn.transport.close()

    tasks = [loop.create_task(worker(port, path)) for port, path in targets]
    await asyncio.sleep(warmup_s)
    cpu0 = {name: _cpu_s(pid) for name, pid in watch.items()}
    ok0, err0 = counts["ok"], counts["errors"]
    t0 = time.perf_counter()
    state["measuring"] = True
    await asyncio.sleep(duration_s)
    state["measuring"] = False
    window_s = time.perf_counter() - t0
    cpu1 = {name: _cpu_s(pid) for name, pid in watch.items()}
    ok1, err1 = counts["ok"], counts["errors"]
    state["stop"] = True
    # Let in-flight calls finish, so "answered" is exact (the gateway's trace count is checked against it).
    _, pending = await asyncio.wait(tasks, timeout=60)
    for t in pending:
        t.cancel()
    latencies.sort()
    n = ok1 - ok0
    cpu = {name: (cpu1[name] - cpu0[name]) / window_s for name in watch}
    return {
        "requests_per_s": n / window_s,
        "window_s": window_s,
        "measured": len(latencies),
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "mean_ms": sum(latencies) / len(latencies) * 1e3 if latencies else float("nan"),
        "max_ms": latencies[-1] * 1e3 if latencies else float("nan"),
        "errors_in_window": err1 - err0,
        "answered_total": counts["ok"],
        "errors_total": counts["errors"],
        "unfinished_workers": len(pending),
        "cpu_cores": cpu,
        "cpu_ms_per_request": {k: v * window_s / n * 1e3 if n else float("nan") for k, v in cpu.items()},
        "first_reply": first.get("reply", "")[:400],
        "first_error": first.get("error"),
    }


def run_loadgen(args: argparse.Namespace) -> None:
    import uvloop

    from rllm.gateway.pool import route

    ports = [int(p) for p in args.ports.split(",")]
    urls = {f"http://127.0.0.1:{p}": p for p in ports}
    targets = []
    for i in range(args.sessions):
        session = f"{args.session_prefix}-{i}"
        targets.append((urls[route(list(urls), session)], args.path.format(session=session)))
    watch = {
        k: [int(p) for p in v.split("+")] for k, v in (kv.split("=") for kv in args.watch.split(",") if kv)
    }
    watch["loadgen"] = [os.getpid()]
    result = uvloop.run(_load(targets, args.warmup, args.duration, watch))
    result["sessions_per_port"] = {str(p): sum(1 for t, _ in targets if t == p) for p in ports}
    Path(args.result_file).write_text(json.dumps(result))
