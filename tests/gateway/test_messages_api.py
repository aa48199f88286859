"""The gateway's ``/v1/messages`` (Anthropic's Messages API) over real HTTP, called with the real
``anthropic`` client: replies the client parses, streaming (the stream helper and the raw events),
tools and forced ``tool_choice``, a ``tool_result`` turn assembled into one training step,
``count_tokens``, ``x-api-key`` auth, and Anthropic-shaped errors for what the gateway cannot honour."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from gateway_support import API_KEY, MODEL, assert_one_merged_step, scripted_server
from gateway_support import GatewayFixture as _Server

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
TOOLS: list[Any] = [
    {
        "name": "add",
        "description": "Add two numbers.",
        "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    },
    {"name": "final_answer", "input_schema": {"type": "object"}},
]
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": TOOLS[0]["input_schema"],
        },
    },
    {"type": "function", "function": {"name": "final_answer", "parameters": {"type": "object"}}},
]
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
GREEDY = {"temperature": 0}


def _client(url: str, session: str | None = None, api_key: str = API_KEY) -> anthropic.Anthropic:
    base = url if session is None else f"{url}/sessions/{session}"
    return anthropic.Anthropic(base_url=base, api_key=api_key, max_retries=0, timeout=60)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ------------------------------------------------------------------------------------- the tiny model
def test_message_is_parsed_by_the_client_and_traced_token_faithfully(server: _Server) -> None:
    client = _client(server.url, "msg-1")
    msg = client.messages.create(
        model=MODEL,
        max_tokens=6,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}
        ],
        metadata={"user_id": "u1"},
        service_tier="auto",
        extra_body={"temperature": 0.7, "top_k": 20},  # this client version no longer names them
    )
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL and msg.stop_reason in ("end_turn", "max_tokens") and msg.stop_sequence is None
    (block,) = msg.content
    assert block.type == "text"
    (trace,) = server.traces("msg-1")
    assert trace["endpoint"] == "messages" and trace["request_id"] == msg.id
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert trace["request"]["messages"] == messages
    assert trace["prompt_token_ids"] == server.engine.apply_chat_template(messages)
    decoded = server.engine.tokenizer.decode(trace["completion_token_ids"], skip_special_tokens=True)
    assert decoded == block.text == trace["response_text"]
    assert msg.usage.input_tokens == len(trace["prompt_token_ids"])
    assert msg.usage.output_tokens == len(trace["completion_token_ids"]) == len(trace["logprobs"]) <= 6
    assert (
        all(lp <= 0 for lp in trace["logprobs"]) and trace["weight_version"] == server.engine.weight_version
    )
    params = trace["request"]["sampling_params"]
    assert (params["max_tokens"], params["temperature"], params["top_k"]) == (6, 0.7, 20)
    assert (msg.stop_reason == "max_tokens") == (trace["finish_reason"] == "length")

    # count_tokens renders the same prompt with the same template: the recorded prompt's length.
    counted = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=[{"role": "user", "content": "Hi there"}]
    )
    assert counted.input_tokens == len(trace["prompt_token_ids"])
    assert len(server.traces("msg-1")) == 1  # counting records nothing


def test_stop_sequences_end_the_reply_and_are_named(server: _Server) -> None:
    client = _client(server.url, "msg-stop")
    free = client.messages.create(model=MODEL, max_tokens=10, messages=QUESTION, extra_body=GREEDY)
    text = free.content[0].text
    stop = next((ch for ch in text[1:] if ch.isalnum() and text.find(ch) >= 1), None)
    assert stop is not None, f"the greedy reply {text!r} has no letter to stop on"
    cut = client.messages.create(
        model=MODEL, max_tokens=10, messages=QUESTION, stop_sequences=["\x00never", stop], extra_body=GREEDY
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.find(stop)]
    _, trace = server.traces("msg-stop")
    assert trace["request"]["sampling_params"]["stop"] == ["\x00never", stop]


def test_streamed_message_with_the_stream_helper_and_raw_events(server: _Server) -> None:
    client = _client(server.url, "msg-stream")
    with client.messages.stream(model=MODEL, max_tokens=5, messages=QUESTION) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    (t1,) = server.traces("msg-stream")
    assert streamed == final.content[0].text == t1["response_text"] and final.id == t1["request_id"]
    assert final.usage.output_tokens == len(t1["completion_token_ids"])
    assert final.usage.input_tokens == len(t1["prompt_token_ids"]) and final.stop_reason in (
        "end_turn",
        "max_tokens",
    )

    events = list(client.messages.create(model=MODEL, max_tokens=5, messages=QUESTION, stream=True))
    kinds = [e.type for e in events]
    n = kinds.count("content_block_delta")
    assert kinds == ["message_start", "content_block_start", *["content_block_delta"] * n] + [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.content == [] and events[0].message.stop_reason is None
    _, t2 = server.traces("msg-stream")
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == t2["response_text"]
    assert events[-2].usage.output_tokens == len(t2["completion_token_ids"])

    # On the wire: each event's `event:` line names its data's type, as Anthropic sends them.
    r = server.http(
        "POST", "/v1/messages", json={"model": MODEL, "max_tokens": 2, "messages": QUESTION, "stream": True}
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    for raw in filter(None, r.text.split("\n\n")):
        head, data = raw.split("\n")
        assert head == f"event: {json.loads(data.removeprefix('data: '))['type']}"


# A strict tool with a small schema, so that even a tiny random model finishes its calls in a few tokens.
DIGITS = {"type": "integer", "minimum": 0, "maximum": 9}
STRICT_ADD = {
    "name": "add",
    "strict": True,
    "input_schema": {
        "type": "object",
        "properties": {"a": DIGITS, "b": DIGITS},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize(
    ("tool_choice", "chat_choice"),
    [
        ({"type": "any"}, "required"),
        ({"type": "any", "disable_parallel_tool_use": True}, "required"),
        ({"type": "tool", "name": "add"}, {"type": "function", "function": {"name": "add"}}),
    ],
)
def test_forced_tool_choice_writes_a_call_that_matches_the_schema(
    server: _Server, tool_choice: dict, chat_choice: Any
) -> None:
    session = f"msg-force-{tool_choice['type']}-{len(tool_choice)}"
    # Seeded (the Messages API has no seed field): a random model's run of calls under "any" stays short.
    r = server.http("POST", "/sessions", json={"session_id": session, "sampling": {"seed": 3}})
    assert r.status_code == 201, r.text
    msg = _client(server.url, session).messages.create(
        model=MODEL, max_tokens=40, messages=QUESTION, tools=[STRICT_ADD], tool_choice=tool_choice
    )
    assert msg.stop_reason == "tool_use"
    (block,) = [b for b in msg.content if b.type == "tool_use"]
    assert block.name == "add" and set(block.input) == {"a", "b"}
    assert all(type(v) is int and 0 <= v <= 9 for v in block.input.values())
    (trace,) = server.traces(session)
    assert trace["request"]["tool_choice"] == chat_choice
    assert trace["request"]["tools"][0]["function"]["strict"] is True
    # The grammar's forced tokens (the call's fixed text, the only tool's name) are mask 0 at logprob 0.0;
    # the digits were the model's choice, and so was stopping after a call under "any" (another call could
    # follow), while a named call, or one call under disable_parallel_tool_use, is the only one: its end of
    # sequence is forced.
    mask = trace["completion_mask"]
    one_call = tool_choice["type"] == "tool" or tool_choice.get("disable_parallel_tool_use")
    assert mask[0] == 0 and mask.count(1) >= 2 and mask[-1] == int(not one_call)
    assert all(lp == 0.0 for m, lp in zip(mask, trace["logprobs"]) if m == 0)


def test_a_strict_tool_leaves_free_text_free(server: _Server) -> None:
    """tool_choice auto with a strict tool: the reply is held by a grammar that only bites once a call
    starts, so the tiny model's text (it never writes one) comes back as text, every token its choice."""
    msg = _client(server.url, "msg-strict").messages.create(
        model=MODEL, max_tokens=8, messages=QUESTION, tools=[STRICT_ADD]
    )
    assert msg.content[0].type == "text"
    (trace,) = server.traces("msg-strict")
    assert trace["completion_mask"] is not None and all(m == 1 for m in trace["completion_mask"])


def test_top_k_and_count_tokens_need_an_upstream_that_has_them(server: _Server, tmp_path: Path) -> None:
    """In front of a plain OpenAI-compatible server (here: the test gateway itself, spoken to as one),
    ``top_k`` and ``count_tokens`` are refused in Anthropic's shape, as that upstream cannot do them."""
    upstream = HTTPUpstream([f"{server.url}/v1"], kind="openai", api_key=API_KEY)
    with (
        TraceStore(tmp_path / "t.db") as store,
        GatewayServer(create_app(upstream, store, model_name=MODEL)) as srv,
    ):
        client = _client(srv.url, "s")
        with pytest.raises(anthropic.BadRequestError, match="top_k is not part of the OpenAI API") as err:
            client.messages.create(model=MODEL, max_tokens=2, messages=QUESTION, extra_body={"top_k": 5})
        assert (
            err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
        )
        with pytest.raises(anthropic.BadRequestError, match="counting tokens needs a vLLM upstream"):
            client.messages.count_tokens(model=MODEL, messages=QUESTION)
        ok = client.messages.create(model=MODEL, max_tokens=2, messages=QUESTION)
        assert ok.content[0].type == "text" and store.list("s")[0].trainable is False


# ------------------------------------------------------------------------------------ auth and errors
def test_x_api_key_and_bearer_are_both_accepted_and_a_wrong_key_is_a_401(server: _Server) -> None:
    body = {"model": MODEL, "max_tokens": 1, "messages": QUESTION}
    with pytest.raises(anthropic.AuthenticationError) as err:
        _client(server.url, "msg-auth", api_key="wrong").messages.create(**body)
    assert err.value.status_code == 401 and err.value.body["type"] == "error"
    assert (
        err.value.body["error"]["type"] == "authentication_error"
        and "x-api-key" in err.value.body["error"]["message"]
    )
    r = httpx.post(
        f"{server.url}/v1/messages/count_tokens", json={"model": MODEL, "messages": QUESTION}, timeout=30
    )
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert server.traces("msg-auth") == []
    assert server.http("POST", "/sessions/msg-auth/v1/messages", json=body).status_code == 200  # bearer
    r = httpx.get(f"{server.url}/v1/models", headers={"x-api-key": API_KEY}, timeout=30)
    assert r.status_code == 200  # the header works on every route
    r = httpx.get(f"{server.url}/v1/models", headers={"x-api-key": "wrong"}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape there


_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"max_tokens": None}, "max_tokens: required"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": [_IMAGE]}]}, "messages.0.content.0.type: images are not"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "documents are not supported",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking: extended thinking"),
        (
            {
                "messages": [
                    *QUESTION,
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
                    *QUESTION,
                ]
            },
            "messages.1.content.0.type: thinking blocks",
        ),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools.0.type: only client tools",
        ),
        ({"tools": [{"name": "add"}]}, "tools.0.input_schema"),
        ({"tools": [{**TOOLS[0], "strict": "yes"}]}, "tools.0.strict"),
        ({"tools": [{"name": "bad name!", "input_schema": {}}]}, "tools[0].name"),
        ({"tool_choice": {"type": "any"}}, "needs tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "mul"}}, "not among the tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "required"}}, "tool_choice.type: one of"),
        ({"tools": TOOLS, "tool_choice": {"type": "auto", "name": "add"}}, "tool_choice.name"),
        ({"messages": [{"role": "system", "content": "x"}]}, "top-level system field"),
        ({"messages": [*QUESTION, {"role": "assistant", "content": "The answer is"}]}, "prefill"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "add", "input": {}}]}
                ]
            },
            "tool_use blocks belong in assistant messages",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "4"}]}]},
            "tool_use_id",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "content": [_IMAGE]}],
                    }
                ]
            },
            "images are not",
        ),
        ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "MCP servers"),
        ({"output_format": {"type": "json_schema", "schema": {}}}, "structured outputs"),
        ({"frobnicate": 1}, "frobnicate: not a field"),
        ({"temperature": 1.5}, "temperature"),
        ({"system": [{"type": "text", "text": "x", "citations": [{"type": "char_location"}]}]}, "citations"),
    ],
)
def test_what_the_gateway_cannot_honour_is_a_400_in_anthropics_shape(
    server: _Server, body: dict, match: str
) -> None:
    full = {
        k: v
        for k, v in {"model": MODEL, "max_tokens": 4, "messages": QUESTION, **body}.items()
        if v is not None
    }
    with pytest.raises(anthropic.BadRequestError) as err:  # posted as is: the client checks no fields
        _client(server.url, "msg-bad").post("/v1/messages", body=full, cast_to=object)
    assert set(err.value.body) == {"type", "error"} and err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert match in err.value.body["error"]["message"], err.value.body
    assert server.traces("msg-bad") == []  # a refused call records nothing


def test_count_tokens_refuses_sampling_fields_and_malformed_json(server: _Server) -> None:
    r = server.http(
        "POST", "/v1/messages/count_tokens", json={"model": MODEL, "messages": QUESTION, "max_tokens": 3}
    )
    assert (
        r.status_code == 400
        and "max_tokens: not a field of a count_tokens request" in r.json()["error"]["message"]
    )
    r = server.http("POST", "/sessions/x/v1/messages", content=b"{not json")
    assert (
        r.status_code == 400
        and r.json()["type"] == "error"
        and "not valid JSON" in r.json()["error"]["message"]
    )


# ------------------------------------------------------------------------------ scripted tool calls
@pytest.fixture()
def scripted(tiny_engine: Any, tmp_path: Path) -> Iterator[Any]:
    """``scripted(replies)`` -> (anthropic client for session "tools", store) over a ScriptedEngine gateway."""
    opened: list[Any] = []

    def make(replies: list[str]) -> tuple[anthropic.Anthropic, TraceStore]:
        store = TraceStore(tmp_path / f"t{len(opened)}.db")
        srv = scripted_server(tiny_engine, replies, store).__enter__()
        opened.append((srv, store))
        return _client(srv.url, "tools"), store

    yield make
    for srv, store in opened:
        srv.__exit__(None, None, None)
        store.close()


def test_tool_use_then_tool_result_merges_into_one_step(scripted: Any) -> None:
    client, store = scripted([CALL, "It is 4."])
    first = client.messages.create(
        model=MODEL, max_tokens=64, system="Use tools.", messages=QUESTION, tools=TOOLS
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use" and call.id.startswith("toolu_") and call.name == "add"
    assert call.input == {"a": 2, "b": 2}
    # The agent loop's way: the reply's blocks as the assistant turn, then the tool's result.
    second = client.messages.create(
        model=MODEL,
        max_tokens=64,
        system="Use tools.",
        tools=TOOLS,
        messages=[
            *QUESTION,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "4"}]},
        ],
    )
    assert second.stop_reason == "end_turn" and second.content[0].text == "It is 4."
    t1, t2 = store.list("tools")
    assert t2.endpoint == "messages" and t2.request["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "4"},
    ]
    assert_one_merged_step([t1, t2])
    counted = client.messages.count_tokens(
        model=MODEL, system="Use tools.", tools=TOOLS, messages=QUESTION
    ).input_tokens
    assert counted == len(t1.prompt_token_ids)


def test_tool_result_blocks_and_errors_translate_in_order(scripted: Any) -> None:
    client, store = scripted(["ok"])
    client.messages.create(
        model=MODEL,
        max_tokens=8,
        tools=TOOLS,
        messages=[
            *QUESTION,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2}},
                    {"type": "tool_use", "id": "toolu_2", "name": "final_answer", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "no b"}],
                        "is_error": True,
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2"},
                    {"type": "text", "text": "Try again."},
                ],
            },
        ],
    )
    (trace,) = store.list("tools")
    assert trace.request["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Adding.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}},
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "final_answer", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: no b"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
        {"role": "user", "content": "Try again."},
    ]


def test_streamed_tool_use(scripted: Any) -> None:
    client, _ = scripted(["Adding. " + CALL])
    events = list(
        client.messages.create(model=MODEL, max_tokens=64, messages=QUESTION, tools=TOOLS, stream=True)
    )
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == ["text", "tool_use"] and starts[1].input == {}
    (partial,) = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert json.loads(partial) == {"a": 2, "b": 2}
    assert next(e for e in events if e.type == "message_delta").delta.stop_reason == "tool_use"
    with client.messages.stream(model=MODEL, max_tokens=64, messages=QUESTION, tools=TOOLS) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"] and final.content[0].text == "Adding."
    assert final.content[1].input == {"a": 2, "b": 2} and final.stop_reason == "tool_use"
