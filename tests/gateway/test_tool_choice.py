"""tool_choice "required" and a named function on the local engine: the whole reply is held by a grammar
to tool calls of the listed tools with arguments that match their schemas (rllm.gateway.structured);
the tokens the grammar forced are recorded as not sampled (logprob 0.0, completion_mask 0), and training
sees them as such (response_mask 0)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from gateway_support import MODEL, grammar_counts
from gateway_support import GatewayFixture as _Server

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams
from rllm.runner.assembly import assemble_steps
from rllm.tool_calls import HermesToolParser, NoToolParser, format_tool_call_text
from rllm.types import Trace

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "maxLength": 8}},
                "required": ["expression"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": -99, "maximum": 99},
                    "b": {"type": "integer", "minimum": -99, "maximum": 99},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]
QUESTION = [{"role": "user", "content": "What is 17 + 25?"}]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def valid_arguments(name: str, arguments: dict[str, Any]) -> bool:
    """TOOLS' schemas checked by hand (jsonschema is not a dependency)."""
    if name == "calculate":
        return (
            set(arguments) == {"expression"}
            and isinstance(arguments["expression"], str)
            and len(arguments["expression"]) <= 8
        )
    return (
        name == "add"
        and set(arguments) == {"a", "b"}
        and all(type(arguments[k]) is int and -99 <= arguments[k] <= 99 for k in "ab")
    )


def test_required_calls_always_parse_and_match_their_schema(server: _Server) -> None:
    """A tiny random model at T=1, 30 samples: every reply is one call of a listed tool whose arguments
    validate against its schema, ended by the (forced) end of sequence."""
    resp = server.client("req").chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=1.0,
        n=30,
        seed=1,
    )
    valid, names = 0, set()
    for choice in resp.choices:
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (call,) = choice.message.tool_calls
        names.add(call.function.name)
        valid += valid_arguments(call.function.name, json.loads(call.function.arguments))
    assert valid == 30 and names == {"calculate", "add"}  # the model did choose between the tools
    tokenizer = server.engine.tokenizer
    for trace in server.traces("req"):
        ids, mask, lps = trace["completion_token_ids"], trace["completion_mask"], trace["logprobs"]
        assert tokenizer.decode(ids).startswith('<tool_call>\n{"name": "')
        assert ids[-1] == tokenizer.eos_token_id and mask[-1] == 0  # the end of sequence was forced
        assert mask[:2] == [0, 0] and 1 in mask  # the opening was forced; the name and values chosen
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(lps, mask) if m == 1)
    assert trace["request"]["tool_choice"] == "required"
    assert trace["request"]["sampling_params"]["stop"] == []


def test_named_function_forces_its_name_and_schema(server: _Server) -> None:
    choice = {"type": "function", "function": {"name": "add"}}
    resp = server.client("named").chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=choice, max_tokens=40, n=4, seed=2
    )
    for c in resp.choices:
        (call,) = c.message.tool_calls
        assert call.function.name == "add" and valid_arguments("add", json.loads(call.function.arguments))
    tokenizer = server.engine.tokenizer
    for trace in server.traces("named"):
        ids, mask = trace["completion_token_ids"], trace["completion_mask"]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        head = _ids(tokenizer, '<tool_call>\n{"name": "add", "arguments": {"a":')
        assert ids[: len(head)] == head and mask[: len(head)] == [0] * len(head)  # all fixed text
        args = json.loads(text.split('"arguments": ', 1)[1].rsplit("}\n</tool_call>", 1)[0])
        assert text == format_tool_call_text("add", args)  # canonical layout, nothing after the call


def test_unforced_calls_keep_no_mask(server: _Server) -> None:
    server.client("auto").chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=4)
    (trace,) = server.traces("auto")
    assert trace["completion_mask"] is None


@pytest.mark.parametrize(
    ("tool_choice", "message"),
    [
        ({"type": "function", "function": {"name": "search"}}, "'search', which is not in tools"),
        ({"type": "function", "function": {"name": "calculate", "x": 1}}, "tool_choice must be"),
        ({"type": "function"}, "tool_choice must be"),
        ({"type": "retrieval", "function": {"name": "calculate"}}, "tool_choice must be"),
    ],
)
def test_bad_forcing_is_a_400_and_records_nothing(server: _Server, tool_choice: Any, message: str) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        server.client("bad").chat.completions.create(
            model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=tool_choice, max_tokens=20
        )
    assert server.traces("bad") == []


def test_a_format_without_tool_calls_cannot_force_one() -> None:
    with pytest.raises(ValueError, match="cannot be forced"):
        NoToolParser().call_syntax()


def test_call_syntax_spells_what_the_renderer_writes() -> None:
    s = HermesToolParser().call_syntax()
    args = {"expression": "23*45"}
    assert s.open + '"calculate"' + s.between + json.dumps(args) + s.close == format_tool_call_text(
        "calculate", args
    )


FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ContinuationEngine(EngineBase):
    """FAKE engine: the k-th call gets the k-th scripted reply (real tokenizer, eos appended), because a
    tiny random model never answers after a tool result. The grammar the gateway sends is real: the reply
    is run through it token by token, which must accept it, and gives the per-token counts the real
    engine records. Records each call's prompt ids and sampling params."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.weight_version = tokenizer, list(replies), 1
        self.calls: list[tuple[list[int], SamplingParams]] = []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, constraint: Any = None
    ) -> list[Completion]:
        reply = self.replies[len(self.calls)]
        self.calls.append((list(prompt_ids), params))
        ids = _ids(self.tokenizer, reply) + [self.tokenizer.eos_token_id]
        counts = grammar_counts(constraint, ids, len(self.tokenizer))
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.5] * len(ids),
                text=reply,
                finish_reason="stop",
                weight_version=1,
                allowed_counts=counts,
            )
        ] * params.n


@pytest.fixture()
def scripted(tiny_engine: Any, tmp_path: Path) -> Iterator[Any]:
    """``scripted(replies)`` -> (client for session "s", engine, store): a gateway over ContinuationEngine."""
    servers: list[Any] = []

    def make(replies: list[str]) -> tuple[openai.OpenAI, ContinuationEngine, TraceStore]:
        engine = ContinuationEngine(tiny_engine.tokenizer, replies)
        store = TraceStore(tmp_path / f"t{len(servers)}.db")
        srv = GatewayServer(create_app(engine, store, model_name=MODEL)).__enter__()
        servers.append((srv, store))
        client = openai.OpenAI(base_url=f"{srv.url}/sessions/s/v1", api_key="x", max_retries=0, timeout=60)
        return client, engine, store

    yield make
    for srv, store in servers:
        srv.__exit__(None, None, None)
        store.close()


def test_forced_call_merges_into_a_multi_turn_step_with_its_mask(scripted: Any) -> None:
    """Turn 1 is a forced call, turn 2 answers after the tool result: one training sequence in which the
    forced tokens and the tool result are masked out and only sampled tokens are trained on."""
    call_text = format_tool_call_text("calculate", {"expression": "23*45"})
    client, engine, store = scripted([call_text, "1035"])
    first = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required"
    )
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "calculate" and first.choices[0].finish_reason == "tool_calls"
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "1035"},
    ]
    client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
    t1, t2 = store.list("s")
    (step,), metrics = assemble_steps([t1, t2])
    assert metrics["assembly/merged_calls"] == 1 and metrics["assembly/drift_splits"] == 0
    n1, n2 = len(t1.completion_token_ids), len(t2.completion_token_ids)
    between = len(t2.prompt_token_ids) - len(t1.prompt_token_ids) - n1
    mask1 = t1.completion_mask
    assert mask1 is not None and 0 in mask1 and 1 in mask1
    assert step.response_mask == mask1 + [0] * between + [1] * n2
    assert step.logprobs[:n1] == [-0.5 if m else 0.0 for m in mask1]
    assert "1035" in engine.tokenizer.decode(step.response_ids[n1 : n1 + between])


def _trace(**kw: Any) -> Trace:
    base = {
        "session_id": "s",
        "request_id": "r",
        "endpoint": "chat.completions",
        "request": {},
        "response_text": "x",
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 4, 5],
        "logprobs": [0.0, -1.0, -2.0],
        "latency_ms": 1.0,
    }
    return Trace(**{**base, **kw})


def test_trace_store_keeps_the_mask(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        store.add_many([_trace(completion_mask=[0, 1, 1]), _trace(request_id="r2")])
        forced, plain = store.list("s")
    assert forced.completion_mask == [0, 1, 1] and forced.sampled_mask == [0, 1, 1]
    assert plain.completion_mask is None and plain.sampled_mask == [1, 1, 1]
    with pytest.raises(ValueError, match="completion_mask"):
        _trace(completion_mask=[0, 1])
    with pytest.raises(ValueError, match="completion_mask"):
        _trace(completion_mask=[0, 2, 1])


def test_store_written_before_the_mask_gains_the_column(tmp_path: Path) -> None:
    """A traces.db of the layout without completion_mask opens, reads its old rows as all sampled, and
    stores new masked rows."""
    path = tmp_path / "old.db"
    with TraceStore(path) as store:
        store.add(_trace())
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE traces DROP COLUMN completion_mask")
    conn.commit()
    conn.close()
    with TraceStore(path) as store:
        (old,) = store.list("s")
        assert old.completion_mask is None and old.sampled_mask == [1, 1, 1]
        store.add(_trace(request_id="new", completion_mask=[0, 0, 1]))
        assert store.list("s")[1].completion_mask == [0, 0, 1]
    with TraceStore(path) as store:  # opening a current store again changes nothing
        assert len(store.list("s")) == 2
