"""tool_choice "required" and a named function on the local engine: the tool call's opening is forced
(written into the completion, logprob 0.0, completion_mask 0), the rest sampled, and training sees the
forced tokens as not sampled (response_mask 0)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from gateway_support import MODEL
from gateway_support import GatewayFixture as _Server

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams
from rllm.inference.constraints import OneOfTexts, allowed_counts
from rllm.inference.sampling import sample_tokens
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
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
    {"type": "function", "function": {"name": "final_answer", "parameters": {"type": "object"}}},
]
NUMBER_TOOL = {
    "type": "function",
    "function": {
        "name": "add_one",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    },
}
REQUIRED = HermesToolParser().forced_call().prefix
NAMED = HermesToolParser().forced_call("calculate").prefix
# What the model writes after REQUIRED under "required" with TOOLS: one of these, constrained.
CHOICES = {
    "calculate": 'calculate", "arguments": {"expression": "',
    "final_answer": 'final_answer", "arguments":',
}
QUESTION = [{"role": "user", "content": "What is 23 * 45?"}]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ContinuationEngine(EngineBase):
    """FAKE engine: the k-th call gets the k-th scripted continuation (real tokenizer, eos appended),
    because a tiny random model never completes a tool call. The upstream, renderer, forcing, parser,
    gateway and client around it are real. Records each call's prompt ids and sampling params."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.weight_version = tokenizer, list(replies), 1
        self.calls: list[tuple[list[int], SamplingParams]] = []
        self.constraints: list[Any] = []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, constraint: Any = None
    ) -> list[Completion]:
        # The scripted reply is returned as is: a constraint is recorded, not applied (tests check the
        # real engine applies it).
        self.constraints.append(constraint)
        reply = self.replies[len(self.calls)]
        self.calls.append((list(prompt_ids), params))
        ids = _ids(self.tokenizer, reply) + [self.tokenizer.eos_token_id]
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.5] * len(ids),
                text=reply,
                finish_reason="stop",
                weight_version=1,
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


def test_required_constrains_the_name_on_the_real_engine(server: _Server) -> None:
    """Even a tiny random model can only write a listed tool's name under "required": after the forced
    opening it picks a name (the first name token is sampled, mask 1), the rest of that name and the
    arguments' opening are forced (mask 0, logprob 0.0), then it samples freely again."""
    resp = server.client("req").chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=30,
        logprobs=True,
        temperature=1.5,
        n=8,
        seed=1,
    )
    tokenizer = server.engine.tokenizer
    forced = _ids(tokenizer, REQUIRED)
    k = len(forced)
    traces = server.traces("req")
    assert len(traces) == 8
    names = set()
    for trace, choice in zip(traces, resp.choices):
        ids = trace["completion_token_ids"]
        assert ids[:k] == forced
        text = tokenizer.decode(ids[k:])
        (name,) = [n for n, opening in CHOICES.items() if text.startswith(opening)]
        names.add(name)
        m = len(_ids(tokenizer, CHOICES[name]))  # the name's tokens and the arguments' opening
        assert ids[k : k + m] == _ids(tokenizer, CHOICES[name])
        assert trace["completion_mask"] == [0] * k + [1] + [0] * (m - 1) + [1] * (len(ids) - k - m)
        lps = trace["logprobs"]
        assert lps[:k] == [0.0] * k and lps[k] < 0 and lps[k + 1 : k + m] == [0.0] * (m - 1)
        assert [c.logprob for c in choice.logprobs.content][: k + m] == lps[: k + m]
        assert len(ids) <= 30  # the forced tokens count towards max_tokens
    assert names <= {"calculate", "final_answer"}
    assert trace["request"]["sampling_params"]["stop"] == []  # the client's params, not the forced stop
    assert trace["request"]["tool_choice"] == "required"


def test_constraint_keeps_every_row_to_one_of_the_texts(tiny_engine: Any) -> None:
    """Names that share prefixes ("get", "get_time", "get_weather"): at a high temperature and greedily,
    every row writes exactly one of the texts, tokenized as the tokenizer writes the whole text."""
    tokenizer = tiny_engine.tokenizer
    texts = ['get", "arguments":', 'get_time", "arguments":', 'get_weather", "arguments":']
    constraint = OneOfTexts(tokenizer, texts)
    prompt = _ids(tokenizer, "Which tool? " + REQUIRED)
    seen = set()
    for params in (
        SamplingParams(temperature=3.0, max_tokens=14, n=24, seed=5),
        SamplingParams(temperature=0.0, max_tokens=14),
    ):
        for c in asyncio.run(tiny_engine.generate(prompt, params, constraint=constraint)):
            text = tokenizer.decode(c.completion_ids)
            (chosen,) = [t for t in texts if text.startswith(t) and not text[len(t) :].startswith(("_", "e"))]
            seen.add(chosen)
            assert c.completion_ids[: len(_ids(tokenizer, chosen))] == _ids(tokenizer, chosen)
            counts = allowed_counts(constraint, c.completion_ids)
            assert counts[0] == 1  # "get" is every text's first token
            assert all(n == 0 for n in counts[len(_ids(tokenizer, chosen)) :])
    assert len(seen) >= 2  # the model did choose, between texts


def test_sampling_under_a_mask_reports_the_unrestricted_logprob() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    allowed = torch.zeros(3, 50, dtype=torch.bool)
    allowed[0, [3, 7]] = True
    allowed[1, 11] = True
    allowed[2] = True  # a free row
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    temperature = torch.tensor([1.0, 0.0, 0.5])
    tokens, lps = sample_tokens(
        logits, temperature, torch.zeros(3, dtype=torch.long), torch.ones(3), gens, allowed
    )
    assert int(tokens[0]) in (3, 7) and int(tokens[1]) == 11
    expected = [
        torch.log_softmax(logits[0], -1)[tokens[0]],
        torch.log_softmax(logits[1], -1)[11],  # greedy: the raw logits' log-softmax, as unconstrained
        torch.log_softmax(logits[2] / 0.5, -1)[tokens[2]],
    ]
    assert torch.allclose(lps, torch.stack(expected))


def test_arguments_open_with_the_first_required_key() -> None:
    """A string's value opens with its quote (so it cannot come out unquoted); other types, and schemas
    that require nothing, leave the value (or the whole object) to the model."""
    parser = HermesToolParser()
    forced = parser.forced_call(tools=TOOLS + [NUMBER_TOOL])
    assert forced.prefix == REQUIRED
    assert forced.choices == (
        'calculate", "arguments": {"expression": "',
        'final_answer", "arguments":',
        'add_one", "arguments": {"x":',
    )
    named = parser.forced_call("calculate", tools=TOOLS)
    assert (
        named.prefix == '<tool_call>\n{"name": "calculate", "arguments": {"expression": "'
        and not named.choices
    )
    assert parser.forced_call("calculate").prefix == NAMED  # without tools: up to the arguments


def test_named_function_forces_its_name(server: _Server) -> None:
    """The name and the arguments' opening (its first required key, a string: with its quote) are forced."""
    choice = {"type": "function", "function": {"name": "calculate"}}
    server.client("named").chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=choice, max_tokens=20, seed=2
    )
    (trace,) = server.traces("named")
    prefix = HermesToolParser().forced_call("calculate", tools=TOOLS).prefix
    forced = _ids(server.engine.tokenizer, prefix)
    assert trace["completion_token_ids"][: len(forced)] == forced
    assert trace["completion_mask"] == [0] * len(forced) + [1] * (20 - len(forced))
    assert server.engine.tokenizer.decode(trace["completion_token_ids"]).startswith(
        '<tool_call>\n{"name": "calculate", "arguments": {"expression": "'
    )


def test_unforced_calls_keep_no_mask(server: _Server) -> None:
    server.client("auto").chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=4)
    (trace,) = server.traces("auto")
    assert trace["completion_mask"] is None


@pytest.mark.parametrize(
    ("tool_choice", "max_tokens", "message"),
    [
        ({"type": "function", "function": {"name": "search"}}, 20, "'search', which is not in tools"),
        ({"type": "function", "function": {"name": "calculate", "x": 1}}, 20, "tool_choice must be"),
        ({"type": "function"}, 20, "tool_choice must be"),
        ({"type": "retrieval", "function": {"name": "calculate"}}, 20, "tool_choice must be"),
        ("required", 5, "leaves no room to sample a forced tool call"),
    ],
)
def test_bad_forcing_is_a_400_and_records_nothing(
    server: _Server, tool_choice: Any, max_tokens: int, message: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        server.client("bad").chat.completions.create(
            model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=tool_choice, max_tokens=max_tokens
        )
    assert server.traces("bad") == []


def test_a_format_without_tool_calls_cannot_force_one() -> None:
    with pytest.raises(ValueError, match="cannot be forced"):
        NoToolParser().forced_call()


def test_forced_prefix_is_how_the_whole_call_tokenizes(tiny_engine: Any) -> None:
    """Forced tokens + sampled tokens must equal what re-rendering the call gives, or assembly could not
    merge the next turn: so the prefix ends where the tokenizer splits the canonical call text."""
    tokenizer = tiny_engine.tokenizer
    for name, args in [("calculate", {"expression": "23*45"}), ("final_answer", {"answer": "1035"})]:
        whole = _ids(tokenizer, format_tool_call_text(name, args))
        for prefix in (REQUIRED, HermesToolParser().forced_call(name).prefix):
            forced = _ids(tokenizer, prefix)
            assert whole[: len(forced)] == forced, prefix


def test_forced_call_is_parsed_and_stops_at_its_close(scripted: Any) -> None:
    # The fake ignores stop strings; the text the client gets still ends at </tool_call>.
    rest = 'calculate", "arguments": {"expression": "23*45"}}\n</tool_call> and then some rambling'
    client, engine, store = scripted([rest])
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required")
    (choice,) = resp.choices
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculate" and json.loads(call.function.arguments) == {
        "expression": "23*45"
    }
    (prompt_ids, params), forced = engine.calls[0], _ids(engine.tokenizer, REQUIRED)
    assert prompt_ids[-len(forced) :] == forced  # the engine continued prompt + forced opening
    assert params.stop == ["</tool_call>"] and params.max_tokens == 256 - len(forced)
    (trace,) = store.list("s")
    assert trace.completion_token_ids == forced + _ids(engine.tokenizer, rest) + [
        engine.tokenizer.eos_token_id
    ]
    # The name's first token was a choice (sampled); the rest of the name and the arguments' opening were
    # the only tokens allowed (forced); the expression and the close were sampled.
    m = len(_ids(engine.tokenizer, CHOICES["calculate"]))
    n = len(trace.completion_token_ids) - len(forced) - m
    assert trace.sampled_mask == [0] * len(forced) + [1] + [0] * (m - 1) + [1] * n
    assert engine.constraints[0].choices == list(CHOICES.values())
    assert trace.response_message["tool_calls"][0]["function"]["name"] == "calculate"


def test_named_call_samples_only_the_arguments(scripted: Any) -> None:
    client, engine, _ = scripted(['2+2"}}\n</tool_call>'])
    resp = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "calculate"}},
        stop=["\n\n"],
    )
    (call,) = resp.choices[0].message.tool_calls
    assert call.function.name == "calculate" and call.function.arguments == '{"expression": "2+2"}'
    assert engine.calls[0][1].stop == ["\n\n", "</tool_call>"] and engine.constraints == [None]


def test_garbled_forced_call_comes_back_as_text(scripted: Any) -> None:
    client, _, store = scripted(["calc oops"])
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required")
    (choice,) = resp.choices
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == REQUIRED + "calc oops"
    assert store.list("s")[0].response_text == REQUIRED + "calc oops"


def test_forced_call_merges_into_a_multi_turn_step_with_its_mask(scripted: Any) -> None:
    """Turn 1 is a forced call, turn 2 answers after the tool result: one training sequence in which the
    forced opening and the tool result are masked out and only sampled tokens are trained on."""
    rest = 'calculate", "arguments": {"expression": "23*45"}}\n</tool_call>'
    client, engine, store = scripted([rest, "1035"])
    first = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required"
    )
    call = first.choices[0].message.tool_calls[0]
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "1035"},
    ]
    client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
    t1, t2 = store.list("s")
    (step,), metrics = assemble_steps([t1, t2])
    assert metrics["assembly/merged_calls"] == 1 and metrics["assembly/drift_splits"] == 0
    k, n1, n2 = (
        len(_ids(engine.tokenizer, REQUIRED)),
        len(t1.completion_token_ids),
        len(t2.completion_token_ids),
    )
    between = len(t2.prompt_token_ids) - len(t1.prompt_token_ids) - n1
    m = len(_ids(engine.tokenizer, CHOICES["calculate"]))
    sampled = [1] + [0] * (m - 1) + [1] * (n1 - k - m)
    assert step.response_mask == [0] * k + sampled + [0] * between + [1] * n2
    assert step.logprobs[:n1] == [0.0] * k + [-0.5 if s else 0.0 for s in sampled]
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
