"""Structured outputs on the local engine through the gateway (rllm.gateway.structured): response_format
on chat completions, text.format on the Responses API, strict tools under tool_choice auto, and the 400s
for what cannot be constrained. The tiny random model at T=1 writes valid JSON every time only because
the grammar holds it to; the forced tokens are recorded as not sampled."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from gateway_support import MODEL, ScriptedEngine
from gateway_support import GatewayFixture as _Server

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.structured import closed_schema, output_grammar
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import UpstreamRequest
from rllm.inference.base import EngineCapabilities, SamplingParams
from rllm.inference.grammar import Grammar
from rllm.tool_calls import HermesToolParser, format_tool_call_text

POINT = {
    "type": "object",
    "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9},
        "label": {"type": "string", "maxLength": 4},
        "ok": {"type": "boolean"},
    },
    "required": ["x", "label", "ok"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "point", "schema": POINT, "strict": True}}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "Give me a point."}]


def _is_point(value: Any) -> bool:
    """POINT checked by hand (jsonschema is not a dependency)."""
    return (
        isinstance(value, dict)
        and set(value) == {"x", "label", "ok"}
        and type(value["x"]) is int
        and -9 <= value["x"] <= 9
        and isinstance(value["label"], str)
        and len(value["label"]) <= 4
        and isinstance(value["ok"], bool)
    )


def test_json_schema_response_format_is_valid_every_time(server: _Server) -> None:
    resp = server.client("rf-schema").chat.completions.create(
        model=MODEL, messages=ASK, response_format=JSON_SCHEMA, temperature=1.0, n=20, seed=4, max_tokens=40
    )
    valid = sum(c.finish_reason == "stop" and _is_point(json.loads(c.message.content)) for c in resp.choices)
    assert valid == 20
    traces = server.traces("rf-schema")
    assert traces[0]["request"]["response_format"] == JSON_SCHEMA
    for t in traces:
        mask = t["completion_mask"]
        assert mask[:3] == [0, 0, 0] and mask[-1] == 0 and 1 in mask  # '{"', 'x', '":' ... eos forced
        assert all(lp == 0.0 for lp, m in zip(t["logprobs"], mask) if m == 0)


def test_json_object_response_format(server: _Server) -> None:
    """Any JSON object: keys and values are the model's, so a random model may run out of tokens inside
    one (finish_reason length); every reply that ended is a JSON object."""
    resp = server.client("rf-object").chat.completions.create(
        model=MODEL,
        messages=ASK,
        response_format={"type": "json_object"},
        temperature=1.0,
        n=16,
        seed=2,
        max_tokens=40,
    )
    ended = [c for c in resp.choices if c.finish_reason == "stop"]
    assert ended and all(isinstance(json.loads(c.message.content), dict) for c in ended)
    assert all(c.message.content.startswith("{") for c in resp.choices)


def test_response_format_with_callable_tools_is_json_or_a_call(server: _Server) -> None:
    """The model may answer in the format or call a tool (a strict one: its arguments match its schema)."""
    neg = {
        "type": "function",
        "function": {
            "name": "neg",
            "strict": True,
            "parameters": {**POINT, "required": ["x"], "properties": {"x": POINT["properties"]["x"]}},
        },
    }
    resp = server.client("rf-tools").chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=[neg],
        response_format=JSON_SCHEMA,
        parallel_tool_calls=False,
        n=12,
        seed=5,
        max_tokens=40,
    )
    kinds = set()
    for c in resp.choices:
        if c.message.tool_calls:
            kinds.add("call")
            (call,) = c.message.tool_calls
            args = json.loads(call.function.arguments)
            assert call.function.name == "neg" and set(args) == {"x"} and -9 <= args["x"] <= 9
        else:
            kinds.add("json")
            assert _is_point(json.loads(c.message.content))
    assert kinds == {"call", "json"}


def test_responses_text_format_json_schema(server: _Server) -> None:
    fmt = {"type": "json_schema", "name": "point", "schema": POINT, "strict": True}
    for seed in range(3):
        resp = server.client("resp-format").responses.create(
            model=MODEL, input="A point?", text={"format": fmt}, temperature=1.0, max_output_tokens=40
        )
        assert _is_point(json.loads(resp.output_text))
        assert resp.text.format.type == "json_schema"
    (trace, *_) = server.traces("resp-format")
    assert trace["request"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "point", "schema": POINT, "strict": True},
    }


def test_a_strict_tool_constrains_only_the_call(tiny_engine: Any) -> None:
    """tool_choice auto with a strict tool: free text stays free, but once <tool_call> appears the call must
    name a tool and the strict tool's arguments must match its schema (checked on the grammar itself: the
    tiny model never opens a call)."""
    text = output_grammar(
        tools=[ADD],
        tool_choice="auto",
        response_format=None,
        parallel_tool_calls=None,
        syntax=HermesToolParser().call_syntax(),
    )
    assert text is not None
    grammar = Grammar(text, tiny_engine.tokenizer)
    tokenizer = tiny_engine.tokenizer

    def accepts(reply: str) -> bool:
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        matcher = grammar.start().matcher
        return matcher.validate_tokens(ids) == len(ids)

    good = format_tool_call_text("add", {"a": 1, "b": 2})
    assert accepts("Any text at all, <tool> even.")
    assert accepts(f"Let me add.\n{good}\nDone.")
    assert not accepts(good.replace('"b": 2', '"b": "two"'))  # arguments off the schema
    assert not accepts(good.replace('"add"', '"mul"'))  # a tool that is not listed
    assert not accepts(good[:-5])  # a call left open


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}},
                }
            },
            "response_format.json_schema.schema: this JSON schema cannot be used",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type must be"),
        (
            {"response_format": {"type": "json_object"}, "tools": [ADD], "tool_choice": "required"},
            "cannot be combined with a forced tool_choice",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/x"}}}],
                "tool_choice": "required",
            },
            r"tools\[f\].parameters",
        ),
    ],
)
def test_what_cannot_be_constrained_is_a_400(server: _Server, kwargs: dict, message: str) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        server.client("rf-bad").chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, **kwargs)
    assert server.traces("rf-bad") == []
    with pytest.raises(openai.BadRequestError, match="chat completions only"):
        server.client("rf-bad").completions.create(
            model=MODEL, prompt="x", max_tokens=2, extra_body={"response_format": {"type": "json_object"}}
        )


def test_http_upstream_passes_response_format_through_and_trains_on_none_of_it() -> None:
    """vLLM samples under its own structured-outputs grammar: the request carries response_format as the
    client sent it, and since which tokens that grammar forced is unknown here, none is trained on."""
    upstream = HTTPUpstream(["http://127.0.0.1:1"], kind="vllm", model="m")
    request = UpstreamRequest(
        endpoint="chat.completions",
        messages=ASK,
        response_format=JSON_SCHEMA,
        parallel_tool_calls=False,
        params=SamplingParams(max_tokens=8),
    )
    body = upstream.request_body(request)
    assert body["response_format"] == JSON_SCHEMA and body["parallel_tool_calls"] is False
    reply = {
        "prompt_token_ids": [1, 2],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "{}"},
                "finish_reason": "stop",
                "token_ids": [3, 4],
                "logprobs": {"content": [{"token": "{", "logprob": -0.1}, {"token": "}", "logprob": -0.2}]},
            }
        ],
    }
    (choice,) = upstream.parse_response(reply, request, upstream="u").choices
    assert choice.completion_ids == [3, 4] and choice.completion_mask == [0, 0]


def test_an_engine_that_cannot_constrain_refuses_with_a_400(tiny_engine: Any, tmp_path: Any) -> None:
    """The tinker sampler has no constraints: a request that needs a grammar is refused, not served
    unconstrained (a strict tool would silently not be strict)."""
    engine = ScriptedEngine(tiny_engine.tokenizer, ["hi"])
    engine.capabilities = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=False)
    with (
        TraceStore(tmp_path / "t.db") as store,
        GatewayServer(create_app(engine, store, model_name=MODEL)) as srv,
    ):
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=60)
        with pytest.raises(openai.BadRequestError, match="fake engine cannot constrain decoding"):
            client.chat.completions.create(model=MODEL, messages=ASK, tools=[ADD], max_tokens=4)
        reply = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
        assert reply.choices[0].message.content == "hi"


def test_an_object_schema_that_leaves_additional_properties_unset_is_held_closed(server: _Server) -> None:
    open_point = {k: v for k, v in POINT.items() if k != "additionalProperties"}
    nested = {"type": "object", "properties": {"p": open_point, "ps": {"type": "array", "items": open_point}}}
    closed = closed_schema(nested)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["p"]["additionalProperties"] is False
    assert closed["properties"]["ps"]["items"]["additionalProperties"] is False
    assert closed_schema({**open_point, "additionalProperties": True})["additionalProperties"] is True
    assert "additionalProperties" not in closed_schema({"type": "object"})  # json_object: any object
    # Sampled at T=1 by the random model: only the named keys, every time (open, it strays into others).
    fmt = {"type": "json_schema", "json_schema": {"name": "point", "schema": open_point}}
    resp = server.client("rf-open").chat.completions.create(
        model=MODEL, messages=ASK, response_format=fmt, temperature=1.0, n=20, seed=5, max_tokens=40
    )
    assert (
        sum(c.finish_reason == "stop" and _is_point(json.loads(c.message.content)) for c in resp.choices)
        == 20
    )
