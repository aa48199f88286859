"""The gateway in front of other OpenAI-compatible servers: token ids through each dialect, several
workers with session-sticky routing, fail-over, and plain servers recorded as not trainable.

The "vLLM-dialect" upstreams here are real servers: rllm gateways over the tiny model, which speak vLLM's
``return_token_ids`` extension. vLLM itself is exercised in the slow tier (tests/slow/test_vllm.py); SGLang
cannot run on CPU, so its dialect is checked against a small FAKE server that answers in SGLang's shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import UpstreamRequest
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine


@pytest.fixture()
def workers(tiny_engine: LocalEngine, tmp_path: Path) -> Iterator[list[tuple[GatewayServer, TraceStore]]]:
    out = []
    for i in range(2):
        store = TraceStore(tmp_path / f"worker{i}.db")
        out.append((GatewayServer(create_app(tiny_engine, store, model_name="tiny-upstream")).start(), store))
    yield out
    for srv, store in out:
        srv.stop()
        store.close()


def _front(upstream: HTTPUpstream, tmp_path: Path) -> tuple[GatewayServer, TraceStore]:
    store = TraceStore(tmp_path / "front.db")
    return GatewayServer(create_app(upstream, store, model_name="policy")).start(), store


def _chat(url: str, session: str, text: str = "hi", **kw: object) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="x", max_retries=0)
    return client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": text}], max_tokens=4, **kw
    )


def test_vllm_dialect_token_ids_match_the_upstream(workers: list, tmp_path: Path) -> None:
    upstream = HTTPUpstream([workers[0][0].url, workers[1][0].url], kind="vllm")
    front, store = _front(upstream, tmp_path)
    try:
        resp = _chat(front.url, "s1", seed=4)
        (trace,) = store.list("s1")
        assert trace.trainable and trace.upstream in (workers[0][0].url + "/v1", workers[1][0].url + "/v1")
        # The worker that served it recorded the same call: ids and logprobs are the upstream's own.
        inner = [t for _, s in workers for t in s.list("default")]
        assert len(inner) == 1
        assert trace.prompt_token_ids == inner[0].prompt_token_ids
        assert trace.completion_token_ids == inner[0].completion_token_ids
        assert trace.logprobs == pytest.approx(inner[0].logprobs)
        assert resp.choices[0].message.content == inner[0].response_text
        assert resp.model == "policy"  # the client sees the gateway's model name, no extra fields
        assert "prompt_token_ids" not in resp.model_dump()
        text = openai.OpenAI(base_url=f"{front.url}/v1", api_key="x").completions.create(
            model="policy", prompt="The", max_tokens=3
        )
        t2 = store.list("default")[-1]
        assert t2.trainable and t2.response_text == text.choices[0].text and len(t2.completion_token_ids) <= 3
    finally:
        front.stop()
        store.close()


def test_sessions_stick_to_a_worker_and_fail_over(workers: list, tmp_path: Path) -> None:
    upstream = HTTPUpstream([workers[0][0].url, workers[1][0].url], kind="vllm", health_interval_s=0.2)
    front, store = _front(upstream, tmp_path)
    try:
        for session in ("a", "b", "a", "b", "a"):
            _chat(front.url, session)
        served = {s: {t.upstream for t in store.list(s)} for s in ("a", "b")}
        assert all(len(v) == 1 for v in served.values()), served  # sticky
        assert served["a"] != served["b"]  # new sessions go to the least-loaded worker
        # Kill a's worker: a's next call is retried on the other one, and health reports the dead worker.
        dead = next(srv for srv, _ in workers if srv.url + "/v1" in served["a"])
        dead.stop()
        _chat(front.url, "a")
        assert store.list("a")[-1].upstream not in served["a"]
        health = httpx.get(f"{front.url}/health").json()
        assert health["ok"] and sorted(w["healthy"] for w in health["workers"]) == [False, True]
    finally:
        front.stop()
        store.close()


def test_plain_openai_upstream_is_recorded_untrainable(workers: list, tmp_path: Path) -> None:
    front, store = _front(HTTPUpstream([workers[0][0].url], kind="openai"), tmp_path)
    try:
        resp = _chat(front.url, "plain")
        (trace,) = store.list("plain")
        assert not trace.trainable and trace.completion_token_ids == [] and trace.prompt_token_ids == []
        assert trace.response_text == resp.choices[0].message.content
    finally:
        front.stop()
        store.close()


def test_upstream_errors_map_to_4xx_and_502(workers: list, tmp_path: Path) -> None:
    front, store = _front(HTTPUpstream([workers[0][0].url], kind="vllm", retries=1), tmp_path)
    try:
        with pytest.raises(
            openai.BadRequestError, match="upstream refused"
        ):  # the worker refuses: 400 passes on
            openai.OpenAI(base_url=f"{front.url}/v1", api_key="x", max_retries=0).completions.create(
                model="policy", prompt=[10**9], max_tokens=2
            )
        workers[0][0].stop()
        r = httpx.post(
            f"{front.url}/v1/chat/completions",
            json={"model": "p", "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
        assert store.list("default") == []
    finally:
        front.stop()
        store.close()


# --------------------------------------------------------------------------- FAKE servers (shapes only)
def _fake_sglang() -> Starlette:
    """FAKE SGLang: answers chat calls in SGLang's shape (``return_prompt_token_ids`` at the top level,
    each logprob entry carrying its ``token_id``), and identifies itself at ``/get_model_info``."""

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        assert body["return_prompt_token_ids"] is True and body["logprobs"] is True
        return JSONResponse(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "prompt_token_ids": [1, 2, 3],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"},
                        "logprobs": {
                            "content": [
                                {"token": "ok", "logprob": -0.25, "token_id": 7, "top_logprobs": []},
                                {"token": "", "logprob": -0.5, "token_id": 2, "top_logprobs": []},
                            ]
                        },
                    }
                ],
            }
        )

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "fake-sglang-model"}]})

    async def info(request: Request) -> JSONResponse:
        return JSONResponse({"model_path": "x"})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/get_model_info", info),
            Route("/health", info),
        ]
    )


def test_sglang_dialect_is_detected_and_parsed(tmp_path: Path) -> None:
    with GatewayServer(_fake_sglang()) as fake:
        upstream = HTTPUpstream([fake.url], kind="auto")
        req = UpstreamRequest(
            endpoint="chat.completions",
            messages=[{"role": "user", "content": "x"}],
            params=SamplingParams(max_tokens=2),
        )

        async def call():
            try:
                return await upstream.complete(req, session_id="s")
            finally:
                await upstream.aclose()

        result = asyncio.run(call())
        assert upstream.kind == "sglang" and upstream.model == "fake-sglang-model"
        assert result.trainable and result.prompt_ids == [1, 2, 3]
        assert result.choices[0].completion_ids == [7, 2] and result.choices[0].logprobs == [-0.25, -0.5]


# --------------------------------------------------------------------------- recorded real vLLM replies
VLLM_DATA = Path(__file__).parent / "data" / "vllm"


@pytest.mark.parametrize(
    "name",
    [
        "chat_n1",
        "chat_n2",
        "chat_eos",
        "completions_n1",
        "completions_n2",
        "completions_eos",
        "completions_stop_string",
        "completions_prompt_token_ids",
    ],
)
def test_parses_recorded_vllm_replies(name: str) -> None:
    """Replies recorded from vLLM 0.32 (tests/gateway/data/vllm/generate.py) read into exact token data."""
    import json

    case = json.loads((VLLM_DATA / f"{name}.json").read_text())
    req, data = case["request"], case["response"]
    endpoint = "chat.completions" if "messages" in req else "completions"
    upstream = HTTPUpstream(["http://127.0.0.1:1"], kind="vllm", model="m")
    request = UpstreamRequest(
        endpoint=endpoint,
        messages=req.get("messages"),
        prompt=req.get("prompt"),
        params=SamplingParams(n=req.get("n", 1), max_tokens=req["max_tokens"]),
    )
    # What the adapter sends asks for exactly the fields these replies were recorded with.
    body = upstream.request_body(request)
    assert body["return_token_ids"] is True and body["logprobs"] == req["logprobs"]
    result = upstream.parse_response(data, request, upstream="u")
    assert result.trainable
    raw = sorted(data["choices"], key=lambda c: c["index"])
    assert result.prompt_ids == (data.get("prompt_token_ids") or raw[0]["prompt_token_ids"])
    for choice, c in zip(result.choices, raw):
        assert choice.completion_ids == c["token_ids"]
        assert len(choice.logprobs) == len(choice.completion_ids) > 0
        if c["finish_reason"] == "stop" and c.get("stop_reason") is None:
            assert choice.completion_ids[-1] == 2  # stopped on eos: the eos token is kept


def test_vllm_forced_tool_call_tokens_are_recorded_as_not_sampled() -> None:
    """A named tool_choice recorded from vLLM 0.32 (``--tool-call-parser hermes``): the tokens of the text
    the request forced (``<tool_call>``, ``{"name": "get_weather", "arguments": ``, the closing and the end
    of sequence) get completion_mask 0; the sampled ones (the optional newline, the arguments) get 1,
    whatever their logprob. The same reply without a forced tool_choice is all sampled (no mask)."""
    import json

    case = json.loads((VLLM_DATA / "chat_named_tool_choice.json").read_text())
    req, data = case["request"], case["response"]
    upstream = HTTPUpstream(["http://127.0.0.1:1"], kind="vllm", model="m")
    forced = UpstreamRequest(
        endpoint="chat.completions",
        messages=req["messages"],
        tools=req["tools"],
        tool_choice=req["tool_choice"],
        params=SamplingParams(max_tokens=req["max_tokens"], temperature=0.0),
    )
    body = upstream.request_body(forced)
    assert body["tool_choice"] == req["tool_choice"] and body["tools"] == req["tools"]
    (choice,) = upstream.parse_response(data, forced, upstream="u").choices
    raw = data["choices"][0]
    lps = [t["logprob"] for t in raw["logprobs"]["content"]]
    assert choice.completion_ids == raw["token_ids"] and choice.logprobs == lps
    strings = [t["token"] for t in raw["logprobs"]["content"]]
    sampled = [s for s, m in zip(strings, choice.completion_mask, strict=True) if m == 1]
    assert sampled == ["\n", ' "', "Paris", '"']  # the newline choice, then the arguments "Paris"
    assert strings[-1] == "<|im_end|>" and choice.completion_mask[-1] == 0
    # Not read from the value: forced tokens with logprob != 0 (several spellings of a literal were allowed)
    # and a sampled one with logprob ~0 (the newline) exist in this very reply.
    assert any(m == 0 and lp != 0.0 for m, lp in zip(choice.completion_mask, lps, strict=True))
    assert choice.tool_calls is not None and choice.tool_calls[0]["function"]["name"] == "get_weather"
    (free,) = upstream.parse_response(
        data, forced.model_copy(update={"tool_choice": "auto"}), upstream="u"
    ).choices
    assert free.completion_mask is None


def test_vllm_structured_requests_are_passed_on_refused_or_masked() -> None:
    """Toward vLLM: ``response_format`` and ``strict`` pass through as sent; ``response_format`` with a
    forced ``tool_choice`` (which vLLM would silently drop) is refused; a reply under a JSON
    ``response_format`` is recorded as not sampled, one under ``auto`` with a strict tool has its call's
    forced text masked (``rllm.gateway.vllm_forcing``)."""
    from rllm.gateway.upstreams import UpstreamError

    upstream = HTTPUpstream(["http://127.0.0.1:1"], kind="vllm", model="m")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    base = UpstreamRequest(
        endpoint="chat.completions",
        messages=[{"role": "user", "content": "hi"}],
        tools=[tool],
        tool_choice="auto",
        params=SamplingParams(max_tokens=8),
    )
    body = upstream.request_body(base.model_copy(update={"response_format": fmt}))
    assert body["response_format"] == fmt and body["tools"] == [tool] and body["tool_choice"] == "auto"
    with pytest.raises(UpstreamError, match="cannot be combined with a forced tool_choice") as err:
        upstream.request_body(base.model_copy(update={"response_format": fmt, "tool_choice": "required"}))
    assert err.value.status_code == 400

    def reply(tokens: list[str]) -> dict:
        content = [{"token": t, "logprob": -0.5} for t in tokens]
        choice = {"index": 0, "message": {"content": "".join(tokens)}, "finish_reason": "stop"}
        return {
            "prompt_token_ids": [1, 2],
            "choices": [{**choice, "token_ids": list(range(len(tokens))), "logprobs": {"content": content}}],
        }

    (json_choice,) = upstream.parse_response(
        reply(['{"', "a", '": 1}', "<|im_end|>"]),
        base.model_copy(update={"response_format": fmt}),
        upstream="u",
    ).choices
    assert json_choice.completion_mask == [0, 0, 0, 0]
    call = ["<tool_call>", '{"name": "f", "arguments": ', "{}", "}</tool_call>", " ok", "<|im_end|>"]
    (auto,) = upstream.parse_response(reply(call), base, upstream="u").choices
    assert auto.completion_mask == [1, 0, 1, 0, 1, 1]
