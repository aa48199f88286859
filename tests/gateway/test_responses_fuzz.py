"""Fuzzing ``/v1/responses`` with hypothesis, as tests/gateway/test_fuzz.py does the chat routes.

Whatever a client sends, the gateway answers JSON (or the Responses SSE stream for an accepted
``stream: true``), a 4xx is OpenAI's error shape, nothing is a 5xx, and a refused request stores no trace
while an accepted one stores exactly one. In-process (Starlette's ``TestClient``), derandomized, and
``max_output_tokens <= 2`` whenever a request could reach the tiny model.
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
_PART = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["input_text", "output_text", "input_image", "refusal"]) | _JUNK,
        "text": _TEXT | _JUNK,
    }
)
_ITEM = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer", "assistant", "tool"]) | _JUNK},
        optional={"type": st.just("message") | _JUNK, "content": _TEXT | st.lists(_PART, max_size=2) | _JUNK},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call")},
        optional={"call_id": _TEXT | _JUNK, "name": _TEXT | _JUNK, "arguments": _TEXT | _JUNK, "id": _TEXT},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output")},
        optional={"call_id": _TEXT | _JUNK, "output": _TEXT | st.lists(_PART, max_size=2) | _JUNK},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["reasoning", "item_reference", "web_search_call"]) | _JUNK}
    ),
    _JUNK,
)
_TOOL = st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "web_search", "file_search"]) | _JUNK},
    optional={
        "name": st.sampled_from(["add", "a.b-c_1", ""]) | _TEXT | _JUNK,
        "parameters": st.just({"type": "object"}) | _JUNK,
        "strict": st.booleans() | _JUNK,
        "description": _TEXT | _JUNK,
    },
)
_BODY = st.fixed_dictionaries(
    {"model": st.just(MODEL) | _JUNK, "max_output_tokens": st.integers(1, 2)},
    optional={
        "input": _TEXT | st.lists(_ITEM, max_size=4) | _JUNK,
        "instructions": _TEXT | _JUNK,
        "tools": st.lists(_TOOL, max_size=2) | _JUNK,
        "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "name": "add"}])
        | _JUNK,
        "previous_response_id": st.just("PREVIOUS") | _TEXT | _JUNK,
        "stream": st.booleans() | _JUNK,
        "temperature": st.floats(0, 2) | _JUNK,
        "top_p": st.floats(0.01, 1) | _JUNK,
        "include": st.lists(
            st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content", "x"])
        )
        | _JUNK,
        "text": st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}}, {"x": 1}])
        | _JUNK,
        "reasoning": st.sampled_from([{}, {"effort": None}, {"effort": "low"}]) | _JUNK,
        "truncation": st.sampled_from(["disabled", "auto"]) | _JUNK,
        "metadata": st.dictionaries(_TEXT, _TEXT, max_size=2) | _JUNK,
        "store": _JUNK,
        "parallel_tool_calls": _JUNK,
        "conversation": _JUNK,
        "top_logprobs": _JUNK,
        "seed": _JUNK,
    },
)

# Requests that are valid but for the odd value: most of these reach the model.
_VALID_ITEM = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer", "assistant"]), "content": _TEXT},
        optional={"type": st.just("message")},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": _TEXT, "name": st.just("add"), "arguments": _TEXT}
    ),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": _TEXT, "output": _TEXT}),
)
_VALID_BODY = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "max_output_tokens": st.integers(1, 2),
        "input": _TEXT.filter(bool) | st.lists(_VALID_ITEM, min_size=1, max_size=3),
    },
    optional={
        "instructions": _TEXT,
        "tools": st.just([{"type": "function", "name": "add", "parameters": {"type": "object"}}]),
        "tool_choice": st.sampled_from(["auto", "none"]),
        "previous_response_id": st.just("PREVIOUS"),
        "stream": st.booleans(),
        "temperature": st.floats(0, 2),
        "include": st.just(["message.output_text.logprobs"]),
        "metadata": st.dictionaries(_TEXT, _TEXT, max_size=2),
    },
)


@pytest.fixture(scope="module")
def gw(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, TraceStore]]:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    store = TraceStore(tmp_path_factory.mktemp("responses-fuzz") / "traces.db")
    app = create_app(engine, store, model_name=MODEL, max_body_bytes=256 * 1024)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, store
    store.close()


def _check(r: httpx.Response, stream: bool) -> None:
    assert r.status_code < 500, f"{r.status_code}: {r.text[:800]}"
    ctype = r.headers.get("content-type", "")
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["message"] and (
            body["error"]["param"] is None or isinstance(body["error"]["param"], str)
        )
        return
    if stream:
        assert ctype.startswith("text/event-stream")
        events = [json.loads(e.split("\ndata: ", 1)[1]) for e in r.text.split("\n\n") if e]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
    else:
        assert ctype.startswith("application/json") and r.json()["object"] == "response"


@given(body=_BODY | _VALID_BODY, session=st.integers(0, 10**9))
@_FUZZ
def test_any_responses_body_gets_a_response_or_an_openai_4xx(
    gw: tuple[TestClient, TraceStore], body: dict[str, Any], session: int
) -> None:
    client, store = gw
    if body.get("previous_response_id") == "PREVIOUS":  # now and then, a real id to continue from
        seed = client.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 1})
        body["previous_response_id"] = seed.json()["id"]
    sid = f"rf-{session}"
    before = len(store.query(TraceQuery(session_id=sid, limit=10_000)))
    r = client.post(f"/sessions/{sid}/v1/responses", content=json.dumps(body).encode())
    _check(r, stream=body.get("stream") is True)
    event(f"status {r.status_code}")
    added = len(store.query(TraceQuery(session_id=sid, limit=10_000))) - before
    assert added == (1 if r.status_code < 400 else 0), (r.status_code, r.text[:300])


@given(
    raw=st.binary(max_size=64)
    | st.recursive(_JUNK, lambda c: st.lists(c) | st.dictionaries(_TEXT, c), max_leaves=6).map(
        lambda v: json.dumps(v).encode()
    )
)
@_FUZZ
def test_non_objects_and_junk_bytes_are_refused_in_the_error_shape(
    gw: tuple[TestClient, TraceStore], raw: bytes
) -> None:
    client, _ = gw
    r = client.post("/v1/responses", content=raw)
    assert 400 <= r.status_code < 500 and set(r.json()["error"]) == {"message", "type", "param", "code"}
