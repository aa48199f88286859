"""The gateway's ``/v1/messages`` (Anthropic's Messages API) in front of a real vLLM server (CPU build, its
own venv), called with the real ``anthropic`` client: a Messages call is translated to chat, sampled by
vLLM and recorded with vLLM's own token ids and logprobs; ``count_tokens`` is vLLM's ``/tokenize`` of the
same conversation; a stop sequence is named as vLLM reports it; a follow-up turn assembles into one
training sequence; a named ``tool_choice`` comes back as a ``tool_use`` block.

Needs ``bash scripts/setup_vllm.sh`` (or ``RLLM_VLLM_VENV``); run with ``pytest -m vllm``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.vllm_server import VLLMServer
from rllm.runner.assembly import assemble_steps

pytestmark = pytest.mark.vllm

GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def model_dir() -> str:
    from rllm.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def gateway(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TraceStore]]:
    store = TraceStore(tmp_path_factory.mktemp("vllm-messages") / "traces.db")
    with (
        VLLMServer(model_dir, served_model_name="smollm2", tool_call_parser="hermes") as vllm,
        GatewayServer(create_app(HTTPUpstream([vllm.base_url]), store, model_name="policy")) as srv,
    ):
        yield srv.url, store
    store.close()


def _client(url: str, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{url}/sessions/{session}", api_key="x", max_retries=0, timeout=300)


def test_messages_through_vllm_are_token_faithful_and_merge(gateway: tuple, model_dir: str) -> None:
    from transformers import AutoTokenizer

    url, store = gateway
    tok = AutoTokenizer.from_pretrained(model_dir)
    client = _client(url, "m1")
    question = [{"role": "user", "content": "Name a colour. One word."}]
    first = client.messages.create(model="policy", max_tokens=12, system="Be brief.", messages=question)
    (t1,) = store.list("m1")
    assert t1.trainable and t1.endpoint == "messages" and t1.upstream.startswith("http")
    assert tok.decode(t1.completion_token_ids, skip_special_tokens=True) == first.content[0].text
    assert t1.prompt_token_ids == tok.apply_chat_template(
        t1.request["messages"], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert first.usage.output_tokens == len(t1.completion_token_ids) == len(t1.logprobs)
    assert first.usage.input_tokens == len(t1.prompt_token_ids)
    counted = client.messages.count_tokens(model="policy", system="Be brief.", messages=question)
    assert counted.input_tokens == len(t1.prompt_token_ids)

    # Continued, streamed: one merged sequence when the template re-renders the reply as sampled.
    history = [
        *question,
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "Another one."},
    ]
    with client.messages.stream(model="policy", max_tokens=12, system="Be brief.", messages=history) as s:
        final = s.get_final_message()
    t1, t2 = store.list("m1")
    assert final.content[0].text == t2.response_text and final.id == t2.request_id
    steps, metrics = assemble_steps([t1, t2])
    if t1.finish_reason == "stop":  # a reply cut by max_tokens has no eos to re-render after it
        assert metrics["assembly/merged_calls"] == 1 and len(steps) == 1
        assert sum(steps[0].response_mask) == len(t1.completion_token_ids) + len(t2.completion_token_ids)


def _first_new_char(text: str) -> int:
    """The index of the first non-space character after the first one that does not occur before it: a
    stop string there cuts the reply at exactly that index, whatever words the model chose."""
    return next(i for i, ch in enumerate(text) if i >= 1 and not ch.isspace() and text.find(ch) == i)


def test_stop_sequence_is_named_as_vllm_reports_it(gateway: tuple) -> None:
    url, _ = gateway
    client = _client(url, "m-stop")
    question = [{"role": "user", "content": "Count from one to ten in words."}]
    free = client.messages.create(model="policy", max_tokens=24, messages=question, extra_body=GREEDY)
    text = free.content[0].text
    cut_at = _first_new_char(text)
    stop = text[cut_at]
    cut = client.messages.create(
        model="policy", max_tokens=24, messages=question, stop_sequences=[stop], extra_body=GREEDY
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop, (text, cut)
    assert cut.content[0].text == text[:cut_at]


def test_named_tool_choice_through_vllm_is_passed_on_and_recorded(gateway: tuple, model_dir: str) -> None:
    """vLLM (``--tool-call-parser hermes``) forces the call's opening and the name; the arguments are
    sampled. A call whose arguments are a JSON object is a ``tool_use`` block; one whose arguments are not
    (SmolLM2-135M greedily writes ``"arguments": "Paris"``) is no valid tool use and comes back as the text
    the model wrote. Either way the trace holds vLLM's own tokens, the forced ones included."""
    from transformers import AutoTokenizer

    url, store = gateway
    tools = [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    msg = _client(url, "m-tool").messages.create(
        model="policy",
        max_tokens=48,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body=GREEDY,
    )
    (trace,) = store.list("m-tool")
    assert trace.request["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert trace.trainable and len(trace.completion_token_ids) == len(trace.logprobs) > 0
    tok = AutoTokenizer.from_pretrained(model_dir)
    written = tok.decode(trace.completion_token_ids, skip_special_tokens=True)
    assert written.startswith('<tool_call>\n{"name": "get_weather", "arguments": '), written
    (call,) = trace.response_message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert trace.completion_mask is not None and trace.completion_mask[0] == 0  # "<" forced by vLLM's grammar
    if msg.stop_reason == "tool_use":
        (block,) = [b for b in msg.content if b.type == "tool_use"]
        assert block.name == "get_weather" and isinstance(block.input, dict) and block.id.startswith("toolu_")
        assert block.input == json.loads(call["function"]["arguments"])
    else:
        assert not isinstance(json.loads(call["function"]["arguments"]), dict)
        assert [b.type for b in msg.content] == ["text"] and "get_weather" in msg.content[0].text
