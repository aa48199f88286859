"""The gateway's ``/v1/responses`` in front of a real vLLM server (CPU build, its own venv): a Responses call
is translated to chat, sampled by vLLM and recorded with vLLM's own token ids and logprobs; a conversation
continued with ``previous_response_id`` assembles into one training sequence.

Needs ``bash scripts/setup_vllm.sh`` (or ``RLLM_VLLM_VENV``); run with ``pytest -m vllm``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.vllm_server import VLLMServer
from rllm.runner.assembly import assemble_steps

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def model_dir() -> str:
    from rllm.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def gateway(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TraceStore]]:
    store = TraceStore(tmp_path_factory.mktemp("vllm-responses") / "traces.db")
    with (
        VLLMServer(model_dir, served_model_name="smollm2", tool_call_parser="hermes") as vllm,
        GatewayServer(create_app(HTTPUpstream([vllm.base_url]), store, model_name="policy")) as srv,
    ):
        yield srv.url, store
    store.close()


def test_responses_through_vllm_are_token_faithful_and_merge(gateway: tuple, model_dir: str) -> None:
    from transformers import AutoTokenizer

    url, store = gateway
    tok = AutoTokenizer.from_pretrained(model_dir)
    client = openai.OpenAI(base_url=f"{url}/sessions/r1/v1", api_key="x", max_retries=0, timeout=300)
    first = client.responses.create(
        model="policy", input="Name a colour. One word.", instructions="Be brief.", max_output_tokens=12
    )
    (t1,) = store.list("r1")
    assert t1.trainable and t1.endpoint == "responses" and t1.upstream.startswith("http")
    assert tok.decode(t1.completion_token_ids, skip_special_tokens=True) == first.output_text
    assert t1.prompt_token_ids == tok.apply_chat_template(
        t1.request["messages"], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert first.usage.output_tokens == len(t1.completion_token_ids) == len(t1.logprobs)

    # Continued by id, streamed: one merged sequence when the template re-renders the reply as sampled.
    events = list(
        client.responses.create(
            model="policy",
            input="Another one.",
            instructions="Be brief.",
            previous_response_id=first.id,
            max_output_tokens=12,
            stream=True,
        )
    )
    assert events[-1].type in ("response.completed", "response.incomplete")
    t1, t2 = store.list("r1")
    assert t2.request["messages"][2] == {"role": "assistant", "content": first.output_text}
    steps, metrics = assemble_steps([t1, t2])
    if t1.finish_reason == "stop":  # a reply cut by max_output_tokens has no eos to re-render after it
        assert metrics["assembly/merged_calls"] == 1 and len(steps) == 1
        assert sum(steps[0].response_mask) == len(t1.completion_token_ids) + len(t2.completion_token_ids)


def test_named_function_through_vllm_is_a_function_call_with_forced_tokens_masked(gateway: tuple) -> None:
    """A named ``tool_choice`` passes through to vLLM (``--tool-call-parser hermes``), whose call comes back
    as a ``function_call`` output item; the tokens vLLM's grammar forced (logprob 0.0) are recorded as not
    sampled, so a trainer never treats them as the policy's choice."""
    url, store = gateway
    client = openai.OpenAI(base_url=f"{url}/sessions/r-tool/v1", api_key="x", max_retries=0, timeout=300)
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    resp = client.responses.create(
        model="policy",
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=48,
        temperature=0,
    )
    (trace,) = store.list("r-tool")
    assert trace.request["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    (call,) = [item for item in resp.output if item.type == "function_call"]
    (recorded,) = trace.response_message["tool_calls"]
    assert call.name == recorded["function"]["name"] == "get_weather"
    assert call.arguments == recorded["function"]["arguments"]
    assert_forced_tokens_are_the_requested_text(trace, "get_weather", _tokenizer())
    assert trace.completion_mask[0] == 0 and 0 < sum(trace.completion_mask) < len(trace.completion_mask)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@functools.cache
def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from rllm.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))


def _forced_characters(text: str, name: str) -> list[bool]:
    """The test's own reading of a named hermes call (plain string search, not the gateway's parser): the
    characters the request fixed are ``<tool_call>``, ``{"name": "NAME", "arguments": ``, and, once the
    arguments are closed, the closing tag and the end of sequence after it."""
    forced = [False] * len(text)
    assert text.startswith("<tool_call>"), text
    opening = '{"name": "' + name + '", "arguments": '
    start = text.index(opening)
    assert start in (11, 12), text  # right after <tool_call>, or after its optional newline
    closing = "}\n</tool_call>" if start == 12 else "}</tool_call>"
    end = text.rfind(closing)
    for a, b in [(0, 11), (start, start + len(opening)), (end if end >= 0 else len(text), len(text))]:
        forced[a:b] = [True] * (b - a)
    return forced


def assert_forced_tokens_are_the_requested_text(trace: Any, name: str, tok: Any) -> None:
    """Every token of a forced call's text is masked (0), every sampled token is not (1), whatever its
    logprob; the token texts are the tokenizer's decoding of the recorded ids, one by one."""
    pieces = [tok.decode([i]) for i in trace.completion_token_ids]
    forced = _forced_characters("".join(pieces), name)
    expected, pos = [], 0
    for piece in pieces:
        expected.append(0 if piece and all(forced[pos : pos + len(piece)]) else 1)
        pos += len(piece)
    assert trace.completion_mask == expected, list(
        zip(pieces, trace.completion_mask, trace.logprobs, strict=True)
    )


def test_at_temperature_1_no_sampled_token_is_masked_and_every_forced_one_is(gateway: tuple) -> None:
    """Sampled at T = 1 (where a sampled token can read logprob 0.0 and a forced one need not), through the
    chat API: with a named tool_choice the mask is exactly the text the request forced; with ``auto`` (no
    call forced) nothing is masked."""
    url, store = gateway
    client = openai.OpenAI(base_url=f"{url}/sessions/t1-forced/v1", api_key="x", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = client.chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=48,
        temperature=1.0,
        n=4,
        seed=0,
    )
    traces = store.list("t1-forced")  # one trace per choice
    assert len(forced.choices) == len(traces) == 4
    for trace in traces:
        assert trace.trainable and len(trace.completion_mask) == len(trace.logprobs)
        assert_forced_tokens_are_the_requested_text(trace, "get_weather", _tokenizer())

    client = openai.OpenAI(base_url=f"{url}/sessions/t1-free/v1", api_key="x", max_retries=0, timeout=300)
    client.chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=24,
        temperature=1.0,
    )
    (free,) = store.list("t1-free")
    assert free.trainable and free.completion_mask is None
