"""Fuzzing ``/v1/messages`` and ``/v1/messages/count_tokens`` with hypothesis, as test_responses_fuzz.py
does ``/v1/responses``.

Whatever a client sends, the gateway answers JSON (or the Messages SSE stream for an accepted
``stream: true``), a 4xx is Anthropic's error shape, nothing is a 5xx, and a refused request stores no
trace while an accepted one stores exactly one (``count_tokens`` never stores one). In-process
(Starlette's ``TestClient``), derandomized, and ``max_tokens <= 2`` whenever a request could reach the
tiny model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_support import MODEL
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from rllm.gateway.app import create_app
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.inference.local import LocalEngine

_FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
pytestmark = pytest.mark.timeout(300)

_TEXT = st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["", "<|im_end|>", "<tool_call>", "\x00", "🙂", "x" * 500]
)
_JUNK = st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats(allow_nan=False) | _TEXT | st.just([])
_TEXT_BLOCK = st.fixed_dictionaries(
    {"type": st.just("text") | _JUNK, "text": _TEXT | _JUNK},
    optional={"cache_control": st.just({"type": "ephemeral"}), "citations": st.just([]) | _JUNK},
)
_BLOCK = st.one_of(
    _TEXT_BLOCK,
    st.fixed_dictionaries(
        {"type": st.just("tool_use")},
        optional={
            "id": _TEXT | _JUNK,
            "name": st.just("add") | _TEXT | _JUNK,
            "input": st.dictionaries(_TEXT, _TEXT, max_size=2) | _JUNK,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result")},
        optional={
            "tool_use_id": _TEXT | _JUNK,
            "content": _TEXT | st.lists(_TEXT_BLOCK, max_size=2) | _JUNK,
            "is_error": st.booleans() | _JUNK,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["image", "document", "thinking", "redacted_thinking", "server_tool_use"])},
        optional={"source": st.just({"type": "base64", "data": "AA"}), "thinking": _TEXT},
    ),
    _JUNK,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"]) | _JUNK},
    optional={"content": _TEXT | st.lists(_BLOCK, max_size=3) | _JUNK, "name": _TEXT},
)
_TOOL = st.fixed_dictionaries(
    {"name": st.sampled_from(["add", "a.b-c_1", ""]) | _TEXT | _JUNK},
    optional={
        "type": st.sampled_from(["custom", "web_search_20250305", "bash_20250124"]) | _JUNK,
        "input_schema": st.just({"type": "object"}) | _JUNK,
        "description": _TEXT | _JUNK,
        "strict": st.booleans() | _JUNK,
        "cache_control": st.just({"type": "ephemeral"}),
    },
)
_CHOICE = st.sampled_from(
    [
        {"type": "auto"},
        {"type": "any"},
        {"type": "none"},
        {"type": "tool", "name": "add"},
        {"type": "tool", "name": "mul"},
        {"type": "auto", "disable_parallel_tool_use": True},
        {"type": "required"},
    ]
)
_BODY = st.fixed_dictionaries(
    {"model": st.just(MODEL) | _JUNK, "max_tokens": st.integers(1, 2) | _JUNK},
    optional={
        "messages": st.lists(_MESSAGE, max_size=4) | _JUNK,
        "system": _TEXT | st.lists(_TEXT_BLOCK, max_size=2) | _JUNK,
        "tools": st.lists(_TOOL, max_size=2) | _JUNK,
        "tool_choice": _CHOICE | _JUNK,
        "stop_sequences": st.lists(_TEXT, max_size=3) | _JUNK,
        "stream": st.booleans() | _JUNK,
        "temperature": st.floats(0, 1) | _JUNK,
        "top_p": st.floats(0.01, 1) | _JUNK,
        "top_k": st.integers(0, 50) | _JUNK,
        "metadata": st.just({"user_id": "u"}) | _JUNK,
        "thinking": st.sampled_from([{"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024}])
        | _JUNK,
        "service_tier": _JUNK,
        "mcp_servers": _JUNK,
        "container": _JUNK,
        "seed": _JUNK,
    },
)

# Requests that are valid but for the odd value: most of these reach the model.
_VALID_MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": _TEXT | st.lists(_TEXT_BLOCK, min_size=1)}),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": _TEXT
            | st.just(
                [
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
                ]
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.just([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}])
            | st.just([{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True}]),
        }
    ),
)
_VALID_BODY = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "max_tokens": st.integers(1, 2),
        "messages": st.lists(_VALID_MESSAGE, min_size=1, max_size=3).map(
            lambda ms: [*ms, {"role": "user", "content": "go"}]
        ),
    },
    optional={
        "system": _TEXT,
        "tools": st.just([{"name": "add", "input_schema": {"type": "object"}}]),
        "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "none"}]),
        "stop_sequences": st.lists(_TEXT.filter(bool), max_size=2),
        "stream": st.booleans(),
        "temperature": st.floats(0, 1),
        "top_k": st.integers(0, 50),
        "metadata": st.just({"user_id": "u"}),
    },
)


@pytest.fixture(scope="module")
def gw(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, TraceStore]]:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    store = TraceStore(tmp_path_factory.mktemp("messages-fuzz") / "traces.db")
    app = create_app(engine, store, model_name=MODEL, max_body_bytes=256 * 1024)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, store
    store.close()


def _check(r: httpx.Response, stream: bool) -> None:
    assert r.status_code < 500, f"{r.status_code}: {r.text[:800]}"
    ctype = r.headers.get("content-type", "")
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
        assert body["error"]["type"] == "invalid_request_error", body
        return
    if stream:
        assert ctype.startswith("text/event-stream")
        events = []
        for raw in filter(None, r.text.split("\n\n")):
            head, data = raw.split("\n")
            events.append(json.loads(data.removeprefix("data: ")))
            assert head == f"event: {events[-1]['type']}"
        assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
        assert events[-2]["type"] == "message_delta" and events[-2]["delta"]["stop_reason"]
    else:
        body = r.json()
        assert ctype.startswith("application/json") and body["type"] == "message" and body["content"]
        assert body["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use")


def _count(store: TraceStore, sid: str) -> int:
    return len(store.query(TraceQuery(session_id=sid, limit=10_000)))


@given(body=_BODY | _VALID_BODY, session=st.integers(0, 10**9), count=st.booleans())
@_FUZZ
def test_any_messages_body_gets_a_message_or_an_anthropic_4xx(
    gw: tuple[TestClient, TraceStore], body: dict[str, Any], session: int, count: bool
) -> None:
    client, store = gw
    sid = f"mf-{session}"
    before = _count(store, sid)
    if count:  # the same body counted: a count or a 400, never a trace
        counted = {k: v for k, v in body.items() if k not in ("max_tokens", "stop_sequences", "stream")}
        r = client.post(f"/sessions/{sid}/v1/messages/count_tokens", content=json.dumps(counted).encode())
        assert r.status_code < 500, r.text[:800]
        if r.status_code < 400:
            assert set(r.json()) == {"input_tokens"} and r.json()["input_tokens"] > 0
        else:
            assert r.json()["type"] == "error" and r.json()["error"]["message"]
        assert _count(store, sid) == before
    r = client.post(f"/sessions/{sid}/v1/messages", content=json.dumps(body).encode())
    _check(r, stream=body.get("stream") is True)
    event(f"status {r.status_code}")
    added = _count(store, sid) - before
    assert added == (1 if r.status_code < 400 else 0), (r.status_code, r.text[:300])


@given(
    raw=st.binary(max_size=64)
    | st.recursive(_JUNK, lambda c: st.lists(c) | st.dictionaries(_TEXT, c), max_leaves=6).map(
        lambda v: json.dumps(v).encode()
    ),
    path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]),
)
@_FUZZ
def test_non_objects_and_junk_bytes_are_refused_in_anthropics_shape(
    gw: tuple[TestClient, TraceStore], raw: bytes, path: str
) -> None:
    client, _ = gw
    r = client.post(path, content=raw)
    assert 400 <= r.status_code < 500 and r.json()["type"] == "error" and r.json()["error"]["message"]
