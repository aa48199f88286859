"""Structured outputs through the gateway in front of a real vLLM server (CPU build, its own venv): the
request's ``response_format``, Responses ``text.format`` and ``strict`` tools go to vLLM's own structured
outputs (xgrammar), and every reply sampled at T = 1 from SmolLM2-135M matches what was asked for.

What vLLM 0.32 (``--tool-call-parser hermes``, default ``--tool-strict-level auto``) holds to a schema, as
these tests assert it: a JSON ``response_format`` always; a tool call's arguments only for a ``strict``
tool, under a forced ``tool_choice`` and under ``auto`` alike (a non-strict tool's arguments are any JSON
value, as in OpenAI's API). The recorded traces keep vLLM's token ids and logprobs; a JSON reply is
recorded with every token not sampled (which tokens vLLM's grammar forced is not known to the gateway), a
tool call's forced envelope with mask 0 and its arguments with mask 1.

Needs ``bash scripts/setup_vllm.sh`` (or ``RLLM_VLLM_VENV``); run with ``pytest -m vllm``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.vllm_server import VLLMServer

pytestmark = pytest.mark.vllm

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
    "additionalProperties": False,
}


def weather_tool(*, strict: bool) -> dict[str, Any]:
    function = {"name": "get_weather", "description": "The weather in a city.", "parameters": CITY}
    return {"type": "function", "function": {**function, **({"strict": True} if strict else {})}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TraceStore, Any]]:
    from transformers import AutoTokenizer

    from rllm.models import resolve_model

    model_dir = resolve_model("smollm2-135m")
    store = TraceStore(tmp_path_factory.mktemp("vllm-structured") / "traces.db")
    with (
        VLLMServer(model_dir, served_model_name="smollm2", tool_call_parser="hermes") as vllm,
        GatewayServer(create_app(HTTPUpstream([vllm.base_url]), store, model_name="policy")) as srv,
    ):
        yield srv.url, store, AutoTokenizer.from_pretrained(model_dir)
    store.close()


def _client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="x", max_retries=0, timeout=300)


def _assert_recorded_as_not_sampled(trace: Any, text: str, tok: Any) -> None:
    """vLLM's own tokens, every one recorded as not sampled (mask 0)."""
    assert trace.trainable and trace.upstream.startswith("http")
    assert len(trace.completion_token_ids) == len(trace.logprobs) == len(trace.completion_mask) > 0
    assert trace.completion_mask == [0] * len(trace.completion_token_ids)
    assert tok.decode(trace.completion_token_ids, skip_special_tokens=True) == text


def test_json_schema_replies_all_validate_and_are_recorded_as_not_sampled(gateway: tuple) -> None:
    url, store, tok = gateway
    reply = _client(url, "schema").chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "Describe a person as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        n=8,
        temperature=1.0,
        seed=0,
        max_tokens=80,
    )
    traces = store.list("schema")
    assert len(reply.choices) == len(traces) == 8
    assert traces[0].request["response_format"]["type"] == "json_schema"
    for choice, trace in zip(reply.choices, traces, strict=True):
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        _assert_recorded_as_not_sampled(trace, choice.message.content, tok)


def test_json_object_replies_are_json_objects(gateway: tuple) -> None:
    """Sampled at T = 1 the tiny model may write an object longer than ``max_tokens`` (cut, not JSON yet);
    every reply that ends is a JSON object, and the greedy one ends."""
    url, store, tok = gateway
    client = _client(url, "object")
    ask = {
        "model": "policy",
        "messages": [
            {"role": "user", "content": 'Is the sky blue? Answer as JSON: {"answer": "yes"} or no.'}
        ],
        "response_format": {"type": "json_object"},
        "max_tokens": 64,
    }
    greedy = client.chat.completions.create(**ask, temperature=0.0)
    sampled = client.chat.completions.create(**ask, temperature=1.0, n=4, seed=0)
    ended = [c for c in [*greedy.choices, *sampled.choices] if c.finish_reason == "stop"]
    assert greedy.choices[0] in ended and len(ended) >= 3, [c.message.content for c in sampled.choices]
    for choice in ended:
        assert isinstance(json.loads(choice.message.content), dict), choice.message.content
    traces = store.list("object")
    assert len(traces) == 5
    for choice, trace in zip([*greedy.choices, *sampled.choices], traces, strict=True):
        _assert_recorded_as_not_sampled(trace, choice.message.content, tok)


def test_responses_text_format_json_schema_validates(gateway: tuple) -> None:
    url, store, tok = gateway
    client = _client(url, "resp-schema")
    texts = []
    for _ in range(2):
        resp = client.responses.create(
            model="policy",
            input="Describe a person as JSON.",
            text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
            temperature=1.0,
            max_output_tokens=80,
        )
        assert resp.status == "completed", resp
        jsonschema.validate(json.loads(resp.output_text), PERSON)
        texts.append(resp.output_text)
    traces = store.list("resp-schema")
    assert [t.request["response_format"]["type"] for t in traces] == ["json_schema"] * 2
    for text, trace in zip(texts, traces, strict=True):
        _assert_recorded_as_not_sampled(trace, text, tok)


def _forced_characters(text: str, *, opening: bool, single: bool) -> list[bool]:
    """The test's own reading of hermes calls of ``get_weather`` (plain string search, not the gateway's
    parser): after each ``<tool_call>`` (itself forced when ``opening``, i.e. under a forced tool_choice)
    the grammar fixes ``{"name": "get_weather", "arguments": `` and, after the arguments, the closing;
    after a call that must be the only one (``single``), the end of sequence."""
    forced, pos = [False] * len(text), 0
    head = '{"name": "get_weather", "arguments": '
    while (at := text.find("<tool_call>", pos)) >= 0:
        start = text.index(head, at)
        assert start in (at + 11, at + 12), text  # right after <tool_call>, or after its optional newline
        closing = "}\n</tool_call>" if start == at + 12 else "}</tool_call>"
        found = text.find(closing, start)
        end = found + len(closing) if found >= 0 else len(text)  # not found: cut by max_tokens
        spans = [(start, start + len(head))] + [(at, at + 11)] * opening
        spans += [(found, end)] + [(end, len(text))] * single if found >= 0 else []
        for a, b in spans:
            forced[a:b] = [True] * (b - a)
        pos = end
    return forced


def _assert_mask_is_the_forced_text(trace: Any, tok: Any, *, opening: bool, single: bool) -> None:
    pieces = [tok.decode([i]) for i in trace.completion_token_ids]
    forced = _forced_characters("".join(pieces), opening=opening, single=single)
    expected, pos = [], 0
    for piece in pieces:
        expected.append(0 if piece and all(forced[pos : pos + len(piece)]) else 1)
        pos += len(piece)
    assert trace.completion_mask == expected, list(zip(pieces, trace.completion_mask, strict=True))


def _arguments(trace: Any) -> list[Any]:
    return [json.loads(c["function"]["arguments"]) for c in trace.response_message.get("tool_calls") or []]


def test_a_strict_tool_under_a_forced_choice_has_valid_arguments_and_a_plain_one_does_not(
    gateway: tuple,
) -> None:
    """Named, 8 samples at T = 1: every call of the ``strict`` tool has arguments matching its schema; the same
    tool without ``strict`` gets arguments vLLM does not hold to it (SmolLM2 writes a bare string)."""
    url, store, tok = gateway
    for session, strict, n in (("named-strict", True, 8), ("named-plain", False, 4)):
        _client(url, session).chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[weather_tool(strict=strict)],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            n=n,
            temperature=1.0,
            seed=0,
            max_tokens=96,
        )
    strict_traces, plain_traces = store.list("named-strict"), store.list("named-plain")
    assert (len(strict_traces), len(plain_traces)) == (8, 4)
    for trace in strict_traces:
        assert trace.response_message["tool_calls"], trace.response_message
        (args,) = _arguments(trace)
        jsonschema.validate(args, CITY)
        _assert_mask_is_the_forced_text(trace, tok, opening=True, single=True)
    plain_args = [args for t in plain_traces for args in _arguments(t)]
    assert any(not jsonschema.Draft202012Validator(CITY).is_valid(a) for a in plain_args), plain_args


def test_a_strict_tool_on_responses_with_tool_choice_required_has_valid_arguments(gateway: tuple) -> None:
    url, store, tok = gateway
    client = _client(url, "resp-required")
    tool = {"type": "function", "name": "get_weather", "description": "The weather in a city."}
    for _ in range(2):
        resp = client.responses.create(
            model="policy",
            input="What is the weather in Paris?",
            tools=[{**tool, "parameters": CITY, "strict": True}],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=1.0,
            max_output_tokens=96,
        )
        (call,) = [item for item in resp.output if item.type == "function_call"]
        assert call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), CITY)
    for trace in store.list("resp-required"):
        assert trace.request["tools"][0]["function"]["strict"] is True
        _assert_mask_is_the_forced_text(trace, tok, opening=True, single=True)


# The tiny model copies a call it was shown; the example's key ("town") is not the schema's ("city").
SHOWN = '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Rome"}}\n</tool_call>'
FEW_SHOT = [
    {"role": "system", "content": "You call tools by writing: " + SHOWN},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": SHOWN},
    {"role": "user", "content": "What is the weather in Oslo?"},
    {"role": "assistant", "content": SHOWN.replace("Rome", "Oslo")},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def test_a_strict_tool_under_auto_is_held_to_its_schema_once_the_model_calls_it(gateway: tuple) -> None:
    """Under ``tool_choice`` ``auto`` vLLM holds a call of a ``strict`` tool to the tool's schema once the
    model opens it (a triggered grammar): the model, shown calls with the wrong key, copies that key for a
    plain tool and writes the schema's key for the strict one. The recorded mask: ``<tool_call>`` is the
    model's choice (1), the rest of the opening and the closing are forced (0), and with
    ``parallel_tool_calls: false`` (which holds a plain tool's call envelope too) so is the end of sequence
    after the one call."""
    url, store, tok = gateway
    for session, strict, parallel in (
        ("auto-strict", True, None),
        ("auto-plain", False, None),
        ("auto-strict-single", True, False),
        ("auto-plain-single", False, False),
    ):
        _client(url, session).chat.completions.create(
            model="policy",
            messages=copy.deepcopy(FEW_SHOT),
            tools=[weather_tool(strict=strict)],
            tool_choice="auto",
            n=4,
            temperature=1.0,
            seed=0,
            max_tokens=40,
            **({"parallel_tool_calls": parallel} if parallel is not None else {}),
        )
    strict_calls = [
        (t, a) for s in ("auto-strict", "auto-strict-single") for t in store.list(s) for a in _arguments(t)
    ]
    assert len(strict_calls) >= 4, "the model was expected to call the tool in most replies"
    for trace, args in strict_calls:
        jsonschema.validate(args, CITY)
    plain_args = [a for t in store.list("auto-plain") for a in _arguments(t)]
    assert any("town" in a for a in plain_args if isinstance(a, dict)), plain_args
    for trace in store.list("auto-plain"):
        assert trace.completion_mask is None  # no grammar: every token sampled
    # parallel_tool_calls false holds even a plain tool's call envelope (not its arguments) and ends the
    # reply after one call.
    single_args = [a for t in store.list("auto-plain-single") for a in _arguments(t)]
    assert any("town" in a for a in single_args if isinstance(a, dict)), single_args
    for session, single in (
        ("auto-strict", False),
        ("auto-strict-single", True),
        ("auto-plain-single", True),
    ):
        for trace in store.list(session):
            _assert_mask_is_the_forced_text(trace, tok, opening=False, single=single)


def test_response_format_with_a_forced_tool_choice_is_refused(gateway: tuple) -> None:
    """vLLM would drop the response_format without a word; the gateway refuses the pair, as the local
    engine does, and records nothing."""
    url, store, _ = gateway
    with pytest.raises(openai.BadRequestError, match="cannot be combined with a forced tool_choice"):
        _client(url, "refused").chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[weather_tool(strict=True)],
            tool_choice="required",
            response_format={"type": "json_object"},
            max_tokens=8,
        )
    assert store.list("refused") == []
