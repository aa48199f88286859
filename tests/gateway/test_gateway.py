"""The gateway over real HTTP: uvicorn on a loopback port, called with the real ``openai`` client."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from gateway_support import API_KEY, MODEL
from gateway_support import GatewayFixture as _Server

from rllm.gateway.traces import Trace, TraceStore


def _decode(server: _Server, ids: list[int]) -> str:
    return server.engine.tokenizer.decode(ids, skip_special_tokens=True)


def test_chat_completion_trace_is_token_faithful(server: _Server) -> None:
    resp = server.client("chat-1").chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi there"}],
        max_tokens=6,
        seed=1,
    )
    assert resp.object == "chat.completion" and resp.model == MODEL
    text = resp.choices[0].message.content
    assert text  # seeded: the tiny model says something, so the decode check below is not vacuous
    (trace,) = server.traces("chat-1")
    assert _decode(server, trace["completion_token_ids"]) == text == trace["response_text"]
    assert len(trace["logprobs"]) == len(trace["completion_token_ids"]) <= 6
    expected_prompt = server.engine.apply_chat_template([{"role": "user", "content": "Hi there"}])
    assert trace["prompt_token_ids"] == expected_prompt
    assert resp.usage.prompt_tokens == len(expected_prompt)
    assert resp.usage.completion_tokens == len(trace["completion_token_ids"])
    assert trace["request"]["sampling_params"]["seed"] == 1


def test_async_client_session_id_with_colon(server: _Server) -> None:
    session = "run:7:task-3:attempt.0"

    async def call() -> str:
        client = server.async_client(session)
        resp = await client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": "Be short."},
                {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
            ],
            max_completion_tokens=5,
            temperature=0.7,
            top_p=0.9,
        )
        await client.close()
        return resp.choices[0].message.content

    text = asyncio.run(call())
    (trace,) = server.traces(session)
    assert trace["session_id"] == session
    assert _decode(server, trace["completion_token_ids"]) == text
    assert session in server.store.sessions()


def test_n2_gives_two_choices_and_two_traces(server: _Server) -> None:
    resp = server.client("n2").chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count"}],
        n=2,
        max_tokens=4,
        seed=3,
    )
    assert [c.index for c in resp.choices] == [0, 1]
    traces = server.traces("n2")
    assert [t["choice_index"] for t in traces] == [0, 1]
    assert traces[0]["request_id"] == traces[1]["request_id"] == resp.id
    for choice, trace in zip(resp.choices, traces):
        assert _decode(server, trace["completion_token_ids"]) == choice.message.content
    assert resp.usage.completion_tokens == sum(len(t["completion_token_ids"]) for t in traces)


def test_text_completion_default_session_and_models(server: _Server) -> None:
    client = server.client()
    resp = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3, temperature=0)
    trace = server.traces("default")[-1]
    assert trace["endpoint"] == "completions"
    assert _decode(server, trace["completion_token_ids"]) == resp.choices[0].text
    assert len(trace["completion_token_ids"]) <= 3
    assert [m.id for m in client.models.list()] == [MODEL]
    assert [m.id for m in server.client("s:1").models.list()] == [MODEL]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"model": "tiny"}',  # no messages
        b'{"model": "tiny", "messages": []}',
        b'{"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]}',
        b'{"model": "tiny", "messages": "hi"}',
        b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "lots"}',
        b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": -1}',
        b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3, "logprobs": true}',
        b'{"model": "tiny", "messages": [{"role": "tool", "content": "4"}]}',  # no tool_call_id
        b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"}',  # no tools
        b"[1, 2]",
    ],
)
def test_malformed_request_gives_openai_error(server: _Server, body: bytes) -> None:
    r = httpx.post(
        f"{server.url}/sessions/bad/v1/chat/completions",
        content=body,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert server.traces("bad") == []


def test_batched_text_prompts_are_refused(server: _Server) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        server.client().completions.create(model=MODEL, prompt=["a", "b"], max_tokens=2)
    assert "one prompt per request" in info.value.message


def test_openai_client_raises_bad_request(server: _Server) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        server.client().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x"}},
        )
    assert "response_format.json_schema.schema" in info.value.message


def test_api_key_required(server: _Server) -> None:
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    r = httpx.get(f"{server.url}/v1/models")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.get(f"{server.url}/sessions/x/traces")
    assert r.status_code == 401


def test_acknowledged_trace_is_in_the_sqlite_file(server: _Server) -> None:
    resp = server.client("durable").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "persist me"}], max_tokens=3
    )
    with sqlite3.connect(server.store.path) as conn:  # a fresh connection, as another process would
        rows = conn.execute(
            "SELECT request_id, response_text FROM traces WHERE session_id = ?", ("durable",)
        ).fetchall()
    conn.close()
    assert rows == [(resp.id, resp.choices[0].message.content)]


def test_trace_store_survives_kill_9(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    script = (
        "import os, sys\n"
        "from rllm.gateway.traces import Trace, TraceStore\n"
        "s = TraceStore(sys.argv[1])\n"
        "s.add(Trace(session_id='k:1', request_id='r', endpoint='completions', request={'prompt': 'x'},\n"
        "            response_text='ab', prompt_token_ids=[1], completion_token_ids=[5, 6],\n"
        "            logprobs=[-0.5, -1.0], finish_reason='stop', latency_ms=1.0))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(db)], check=False, timeout=30)
    assert proc.returncode == -9
    with TraceStore(db) as store:
        (trace,) = store.list("k:1")
        assert store.sessions() == ["k:1"]
    assert trace.completion_token_ids == [5, 6] and trace.logprobs == [-0.5, -1.0]


def test_trace_needs_one_logprob_per_token() -> None:
    with pytest.raises(ValueError, match="one logprob per completion token"):
        Trace(
            session_id="s",
            request_id="r",
            endpoint="completions",
            request={},
            response_text="",
            prompt_token_ids=[1],
            completion_token_ids=[2, 3],
            logprobs=[-1.0],
            latency_ms=0.0,
        )
