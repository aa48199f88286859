"""The gateway's ``/v1/responses`` (OpenAI's Responses API) over real HTTP, called with the real ``openai``
client: replies the client parses, streaming event sequences, tools, ``previous_response_id`` (also across
a gateway restart), token-faithful traces, and multi-turn assembly into one training step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from gateway_support import MODEL, assert_one_merged_step, scripted_server
from gateway_support import GatewayFixture as _Server

from rllm.gateway.protocol import OpenAIError
from rllm.gateway.responses_api import ResponsesRequest, to_chat
from rllm.gateway.traces import TraceStore

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        "strict": True,
    }
]


def _client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="x", max_retries=0, timeout=60)


# ------------------------------------------------------------------------------------- the tiny model
def test_response_is_parsed_by_the_client_and_traced_token_faithfully(server: _Server) -> None:
    resp = server.client("resp-1").responses.create(
        model=MODEL,
        input="Hi there",
        instructions="Be brief.",
        max_output_tokens=6,
        include=["message.output_text.logprobs"],
        metadata={"run": "7"},
    )
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.model == MODEL
    assert resp.status in ("completed", "incomplete") and resp.output_text
    (trace,) = server.traces("resp-1")
    assert trace["endpoint"] == "responses" and trace["request_id"] == resp.id
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert trace["request"]["messages"] == messages
    assert trace["prompt_token_ids"] == server.engine.apply_chat_template(messages)
    decoded = server.engine.tokenizer.decode(trace["completion_token_ids"], skip_special_tokens=True)
    assert decoded == resp.output_text == trace["response_text"]
    assert resp.usage.input_tokens == len(trace["prompt_token_ids"])
    assert resp.usage.output_tokens == len(trace["completion_token_ids"]) == len(trace["logprobs"]) <= 6
    (part,) = resp.output[0].content
    assert [lp.logprob for lp in part.logprobs] == pytest.approx(trace["logprobs"])
    assert resp.metadata == {"run": "7"} and trace["request"]["sampling_params"]["max_tokens"] == 6


def test_streamed_response_events_in_order(server: _Server) -> None:
    client = server.client("resp-stream")
    events = list(client.responses.create(model=MODEL, input="Hello", max_output_tokens=5, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    (trace,) = server.traces("resp-stream")
    assert text == trace["response_text"] == events[-1].response.output_text
    if trace["finish_reason"] == "length":  # the tiny model rarely ends on its own
        assert (
            kinds[-1] == "response.incomplete"
            and events[-1].response.incomplete_details.reason == "max_output_tokens"
        )


def test_previous_response_id_continues_the_conversation(server: _Server) -> None:
    client = server.client("resp-prev")
    first = client.responses.create(model=MODEL, input="One", instructions="Old rules.", max_output_tokens=4)
    second = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Two"}]}],
        instructions="New rules.",
        previous_response_id=first.id,
        max_output_tokens=4,
    )
    assert second.previous_response_id == first.id
    t1, t2 = server.traces("resp-prev")
    # Instructions are not carried over (as in OpenAI's API): the new ones replace them.
    assert t2["request"]["messages"] == [
        {"role": "system", "content": "New rules."},
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": t1["response_text"]},
        {"role": "user", "content": "Two"},
    ]
    with pytest.raises(openai.BadRequestError, match="previous_response_id") as err:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_nope")
    assert err.value.body["code"] == "previous_response_not_found"


def test_default_and_session_urls_record_in_their_sessions(server: _Server) -> None:
    server.client().responses.create(model=MODEL, input="a", max_output_tokens=2)
    server.client("resp-scoped").responses.create(model=MODEL, input="b", max_output_tokens=2)
    assert [t["request"]["messages"][-1]["content"] for t in server.traces("resp-scoped")] == ["b"]
    assert any(t["endpoint"] == "responses" for t in server.traces("default"))
    r = server.http("GET", "/traces", params={"endpoint": "responses", "session_id": "resp-scoped"})
    assert r.status_code == 200 and len(r.json()["traces"]) == 1


@pytest.mark.parametrize(
    ("body", "param", "match"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools.0.type", "only function tools"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format", "'json_object' or 'json_schema'"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", "JSON schema"),
        ({"reasoning": {"effort": "high"}}, "reasoning", "reasoning"),
        ({"conversation": "conv_1"}, "conversation", "previous_response_id"),
        ({"background": True}, "background", "background"),
        ({"moderation": {"model": "omni"}}, "moderation", "screens no"),
        ({"truncation": "auto"}, "truncation", "disabled"),
        ({"top_logprobs": 3}, "top_logprobs", "sampled token"),
        ({"include": ["nonsense"]}, "include", "unknown value"),
        ({"frobnicate": 1}, "frobnicate", "not a field"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type", "message, function_call"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input.0.content.0",
            "input_text",
        ),
        ({"input": []}, "input", "input"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "mul"}}, "tool_choice", "not among"),
        ({"tools": TOOLS, "tool_choice": {"type": "allowed_tools"}}, "tool_choice", "tool_choice must be"),
        ({"max_output_tokens": 0}, "max_output_tokens", "greater than"),
    ],
)
def test_what_the_gateway_cannot_honour_is_refused(
    server: _Server, body: dict, param: str, match: str
) -> None:
    r = server.http("POST", "/sessions/resp-bad/v1/responses", json={"model": MODEL, "input": "hi", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and match in err["message"] and err["type"] == "invalid_request_error"
    assert server.traces("resp-bad") == []  # a refused call records nothing


def test_harmless_fields_the_agents_sdk_sends_are_accepted(server: _Server) -> None:
    r = server.http(
        "POST",
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [{"role": "user", "content": "hi"}],
            "include": [],
            "store": False,
            "user": "u1",
            "service_tier": "auto",
            "parallel_tool_calls": False,
            "text": {"format": {"type": "text"}},
            "reasoning": {"effort": None, "summary": None},
            "truncation": "disabled",
            "stream": False,
            "max_output_tokens": 2,
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["user"] == "u1" and r.json()["parallel_tool_calls"] is False


def test_tool_choice_maps_to_chat() -> None:
    def chat_choice(choice: Any, tools: Any = TOOLS) -> Any:
        req = ResponsesRequest.model_validate(
            {"model": "m", "input": "q", "tools": tools, "tool_choice": choice}
        )
        return to_chat(req, [])[2]

    assert chat_choice("required") == "required"
    assert chat_choice({"type": "function", "name": "add"}) == {
        "type": "function",
        "function": {"name": "add"},
    }
    assert chat_choice("auto") == "auto" and chat_choice("none") == "none" and chat_choice(None) is None
    assert chat_choice("auto", None) is None  # nothing to choose from
    with pytest.raises(OpenAIError, match="not among"):
        chat_choice({"type": "function", "name": "mul"})


# ------------------------------------------------------------------------------ scripted tool calls
def test_function_call_round_trip_merges_into_one_step(tiny_engine: Any, tmp_path: Path) -> None:
    with (
        TraceStore(tmp_path / "t.db") as store,
        scripted_server(tiny_engine, [CALL, "It is 4.", "It is 4."], store) as srv,
    ):
        client = _client(srv.url, "tools")
        first = client.responses.create(
            model=MODEL, input="What is 2+2?", instructions="Use tools.", tools=TOOLS
        )
        (call,) = first.output
        assert (
            call.type == "function_call"
            and call.name == "add"
            and json.loads(call.arguments) == {"a": 2, "b": 2}
        )
        assert first.output_text == "" and first.status == "completed"
        # The Agents SDK's way: re-send the whole conversation, the reply's output items included.
        second = client.responses.create(
            model=MODEL,
            instructions="Use tools.",
            tools=TOOLS,
            input=[
                {"role": "user", "content": "What is 2+2?"},
                *[item.model_dump(exclude_none=True) for item in first.output],
                {"type": "function_call_output", "call_id": call.call_id, "output": "4"},
            ],
        )
        assert second.output_text == "It is 4."
        t1, t2 = store.list("tools")
        assert t2.request["messages"][2] == {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "add", "arguments": call.arguments},
                }
            ],
        }
        assert t2.request["messages"][3] == {"role": "tool", "tool_call_id": call.call_id, "content": "4"}
        assert_one_merged_step([t1, t2])

        # The same turn continued with previous_response_id renders the same prompt.
        third = client.responses.create(
            model=MODEL,
            instructions="Use tools.",
            tools=TOOLS,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "4"}],
        )
        t3 = store.list("tools")[2]
        assert third.output_text == "It is 4." and t3.prompt_token_ids == t2.prompt_token_ids
        assert_one_merged_step([t1, t3])


def test_streamed_function_call(tiny_engine: Any, tmp_path: Path) -> None:
    with (
        TraceStore(tmp_path / "t.db") as store,
        scripted_server(tiny_engine, ["Adding. " + CALL], store) as srv,
    ):
        client = _client(srv.url, "stream-tools")
        events = list(client.responses.create(model=MODEL, input="2+2?", tools=TOOLS, stream=True))
        kinds = [e.type for e in events]
        assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
        (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert json.loads(done.arguments) == {"a": 2, "b": 2}
        final = events[-1].response
        assert [o.type for o in final.output] == [
            "message",
            "function_call",
        ] and final.output_text == "Adding."
        with client.responses.stream(model=MODEL, input="2+2?", tools=TOOLS) as stream:
            parsed = stream.get_final_response()
        assert parsed.output[1].name == "add"


def test_previous_response_id_survives_a_gateway_restart(tiny_engine: Any, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TraceStore(db) as store, scripted_server(tiny_engine, ["First answer."], store) as srv:
        first = _client(srv.url, "restart").responses.create(model=MODEL, input="Q1")
    with TraceStore(db) as store, scripted_server(tiny_engine, ["Second answer."], store) as srv:
        second = _client(srv.url, "restart").responses.create(
            model=MODEL, input="Q2", previous_response_id=first.id
        )
        assert second.output_text == "Second answer."
        t1, t2 = store.list("restart")
        assert t2.request["messages"] == [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "First answer."},
            {"role": "user", "content": "Q2"},
        ]
        assert_one_merged_step([t1, t2])


def test_unauthenticated_responses_call_is_refused(server: _Server) -> None:
    r = httpx.post(f"{server.url}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
