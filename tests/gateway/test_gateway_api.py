"""Gateway features beyond one plain call: streaming, sessions, trace queries, limits, logprobs, tools."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from gateway_support import MODEL
from gateway_support import GatewayFixture as _Server

from rllm.inference.base import EngineBase, EngineCapabilities


def _decode(server: _Server, ids: list[int]) -> str:
    return server.engine.tokenizer.decode(ids, skip_special_tokens=True)


def test_streaming_chat_matches_trace(server: _Server) -> None:
    stream = server.client("stream-1").chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me"}],
        max_tokens=8,
        seed=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    (trace,) = server.traces("stream-1")
    assert "".join(pieces) == _decode(server, trace["completion_token_ids"]) == trace["response_text"]
    assert finish == trace["finish_reason"]
    assert usage is not None and usage.completion_tokens == len(trace["completion_token_ids"])


def test_streaming_async_text_completion(server: _Server) -> None:
    async def run() -> str:
        client = server.async_client("stream-2")
        text = ""
        async for chunk in await client.completions.create(
            model=MODEL, prompt="Once", max_tokens=5, stream=True, seed=2
        ):
            text += chunk.choices[0].text if chunk.choices else ""
        await client.close()
        return text

    text = asyncio.run(run())
    (trace,) = server.traces("stream-2")
    assert text == _decode(server, trace["completion_token_ids"])


def test_logprobs_in_reply_equal_trace(server: _Server) -> None:
    resp = server.client("lp").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5, logprobs=True, seed=9
    )
    (trace,) = server.traces("lp")
    content = resp.choices[0].logprobs.content
    assert [c.logprob for c in content] == pytest.approx(trace["logprobs"])
    assert "".join(c.token for c in content) == server.engine.tokenizer.decode(trace["completion_token_ids"])
    text = server.client("lp").completions.create(model=MODEL, prompt="a b", max_tokens=3, logprobs=0)
    assert len(text.choices[0].logprobs.token_logprobs) == len(
        server.traces("lp")[-1]["completion_token_ids"]
    )


def test_return_token_ids_is_opt_in(server: _Server) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    plain = server.http("POST", "/sessions/tok/v1/chat/completions", json=body).json()
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    rich = server.http(
        "POST", "/sessions/tok/v1/chat/completions", json={**body, "return_token_ids": True}
    ).json()
    trace = server.traces("tok")[-1]
    assert rich["prompt_token_ids"] == trace["prompt_token_ids"]
    assert rich["choices"][0]["token_ids"] == trace["completion_token_ids"]


def test_session_overrides_win_and_seed_each_call(server: _Server) -> None:
    r = server.http(
        "POST",
        "/sessions",
        json={
            "session_id": "ovr:1",
            "sampling": {"temperature": 0.0, "max_tokens": 3},
            "metadata": {"task": 7},
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["base_url"] == "/sessions/ovr:1/v1"
    client = server.client("ovr:1")
    a = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], temperature=1.5, max_tokens=20
    )
    b = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], temperature=1.5
    )
    assert a.choices[0].message.content == b.choices[0].message.content  # greedy, whatever the agent asked
    traces = server.traces("ovr:1")
    assert [t["request"]["sampling_params"]["temperature"] for t in traces] == [0.0, 0.0]
    assert all(len(t["completion_token_ids"]) <= 3 for t in traces)
    info = server.http("GET", "/sessions/ovr:1").json()
    assert info["num_traces"] == 2 and info["metadata"] == {"task": 7} and info["sampling"]["max_tokens"] == 3
    # A role sub-session inherits the overrides.
    server.client("ovr:1:judge").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}]
    )
    assert server.traces("ovr:1:judge")[0]["request"]["sampling_params"]["max_tokens"] == 3

    seeded = server.http("POST", "/sessions", json={"session_id": "seeded", "sampling": {"seed": 100}})
    assert seeded.status_code == 201
    for _ in range(2):
        server.client("seeded").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "q"}], max_tokens=2
        )
    assert [t["request"]["sampling_params"]["seed"] for t in server.traces("seeded")] == [100, 100 + 7919]


def test_session_lifecycle_and_errors(server: _Server) -> None:
    assert server.http("POST", "/sessions", json={"session_id": "life"}).status_code == 201
    dup = server.http("POST", "/sessions", json={"session_id": "life"})
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "session_exists"
    bad = server.http("POST", "/sessions", json={"sampling": {"temprature": 1}})
    assert bad.status_code == 400 and "temprature" in bad.json()["error"]["message"]
    bad = server.http("POST", "/sessions", json={"sampling": {"max_tokens": 0}})
    assert bad.status_code == 400
    bad = server.http("POST", "/sessions", json={"session_id": "has space"})
    assert bad.status_code == 400
    generated = server.http("POST", "/sessions", json={}).json()["session_id"]
    assert len(generated) == 32
    server.client("life").completions.create(model=MODEL, prompt="x", max_tokens=2)
    assert "life" in server.http("GET", "/sessions").json()["sessions"]
    gone = server.http("DELETE", "/sessions/life").json()
    assert gone == {"session_id": "life", "deleted": True, "deleted_traces": 1}
    assert server.http("GET", "/sessions/life").status_code == 404
    assert server.traces("life") == []


def test_trace_query_by_prefix_and_pages(server: _Server) -> None:
    for s in ("ep9", "ep9:solver", "ep9:judge", "ep90"):
        server.client(s).completions.create(model=MODEL, prompt="x", max_tokens=1)
    r = server.http("GET", "/traces", params={"session_prefix": "ep9:", "limit": 1}).json()
    assert [t["session_id"] for t in r["traces"]] == ["ep9:solver"]
    r2 = server.http("GET", "/traces", params={"session_prefix": "ep9:", "after_seq": r["last_seq"]}).json()
    assert [t["session_id"] for t in r2["traces"]] == ["ep9:judge"]
    bad = server.http("GET", "/traces", params={"limit": "many"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_body_limit_and_bad_session_ids(server: _Server) -> None:
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 100_000}]}
    r = server.http("POST", "/v1/chat/completions", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = server.http("POST", "/sessions/a%20b/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert r.status_code == 400
    r = server.http("GET", "/nowhere")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_tool_history_renders_and_is_recorded(server: _Server) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two numbers",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
            },
        }
    ]
    messages = [
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": json.dumps({"a": 2})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    ]
    resp = server.client("tools").chat.completions.create(
        model=MODEL, messages=messages, tools=tools, max_tokens=4
    )
    assert resp.choices[0].finish_reason in ("stop", "length", "tool_calls")
    (trace,) = server.traces("tools")
    assert trace["request"]["tools"][0]["function"]["name"] == "add"
    prompt = server.engine.tokenizer.decode(trace["prompt_token_ids"])
    assert "<tool_response>\n4\n</tool_response>" in prompt  # the tool result is in the prompt
    assert "<tool_call>" in prompt  # the assistant's call is rendered for a template without tool support


def test_health(server: _Server) -> None:
    r = server.http("GET", "/health")
    assert r.status_code == 200 and r.json()["ok"] is True


def test_invalid_prompt_token_ids_are_refused(server: _Server) -> None:
    with pytest.raises(openai.BadRequestError, match="token ids must lie"):
        server.client().completions.create(model=MODEL, prompt=[10**9], max_tokens=2)


FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ScriptedEngine(EngineBase):
    """FAKE engine: replies with fixed text (tokenized with the real tokenizer), because a tiny random model
    never writes a tool call. Everything around it (renderer, parser, gateway, client) is real."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, tokenizer, reply: str) -> None:
        self.tokenizer, self.reply, self.weight_version = tokenizer, reply, 3

    async def generate(self, prompt_ids: list[int], params) -> list:
        from rllm.inference.base import Completion

        ids = self.tokenizer(self.reply, add_special_tokens=False)["input_ids"] + [2]
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.5] * len(ids),
                text=self.reply,
                finish_reason="stop",
                weight_version=3,
            )
        ] * params.n


def test_tool_call_is_parsed_into_openai_tool_calls(tiny_engine, tmp_path) -> None:
    from rllm.gateway.app import create_app
    from rllm.gateway.server import GatewayServer
    from rllm.gateway.traces import TraceStore

    reply = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    with (
        TraceStore(tmp_path / "t.db") as store,
        GatewayServer(
            create_app(ScriptedEngine(tiny_engine.tokenizer, reply), store, model_name=MODEL)
        ) as srv,
    ):
        client = openai.OpenAI(base_url=f"{srv.url}/sessions/tc/v1", api_key="x", max_retries=0)
        resp = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "2+2"}], tools=tools
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me add."
        (call,) = choice.message.tool_calls
        assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 2}
        # Streamed, the same call arrives as a tool_calls delta.
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "2+2"}], tools=tools, stream=True
            )
        )
        deltas = [tc for ch in chunks for c in ch.choices for tc in (c.delta.tool_calls or [])]
        assert [d.function.name for d in deltas] == ["add"]
        # tool_choice="none": the text comes back as it is.
        plain = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "2+2"}], tools=tools, tool_choice="none"
        )
        assert (
            plain.choices[0].message.tool_calls is None and "<tool_call>" in plain.choices[0].message.content
        )
        (trace, *_rest) = store.list("tc")
        assert trace.response_message["tool_calls"][0]["function"]["name"] == "add"
        assert trace.response_text == "Let me add." and trace.weight_version == 3


def test_malformed_tool_call_stays_text(tiny_engine, tmp_path) -> None:
    from rllm.gateway.app import create_app
    from rllm.gateway.server import GatewayServer
    from rllm.gateway.traces import TraceStore

    reply = '<tool_call>\n{"name": "add", "arguments": {"a": 2,}\n</tool_call>'
    tools = [{"type": "function", "function": {"name": "add"}}]
    with (
        TraceStore(tmp_path / "t.db") as store,
        GatewayServer(
            create_app(ScriptedEngine(tiny_engine.tokenizer, reply), store, model_name=MODEL)
        ) as srv,
    ):
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        resp = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "2+2"}], tools=tools
        )
        assert resp.choices[0].message.tool_calls is None
        assert resp.choices[0].message.content == reply and resp.choices[0].finish_reason == "stop"
