"""OpenAI's Responses API (``POST /v1/responses``) spoken over the gateway's chat path.

A Responses request is translated to chat form (``instructions`` and ``input`` items to chat messages,
flat function tools to chat tools, ``tool_choice`` to chat's), sampled and recorded exactly like a chat
completion (the trace's ``request["messages"]`` is the translated conversation, so multi-turn assembly
merges Responses turns as it merges chat turns; its endpoint is ``"responses"``), and answered as a
``response`` object, or as the Responses SSE event sequence when ``stream`` is true.

``previous_response_id`` is resolved from the trace store: a response's id is its trace's request id,
and that trace holds the conversation it was sampled from and its reply, so a conversation continues
across gateway restarts and across the worker processes that share one store.

Fields that change nothing about sampling (``user``, ``metadata``, ``store``, ``service_tier`` ...) are
accepted; ``text.format`` (``json_object`` / ``json_schema``) becomes chat's ``response_format`` and
``strict`` function tools stay strict (both constrained by a grammar on the local engine,
:mod:`rllm.gateway.structured`, and by vLLM's structured outputs behind vLLM); fields the gateway would have to honour and cannot (built-in tools,
``conversation``, ``background``, reasoning effort, ``truncation: "auto"`` ...) are refused with a 400
that names them, and so is any field this module does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rllm.gateway.protocol import OpenAIError
from rllm.gateway.translate import PIECES, assistant_message, chat_tool, fail, forced_function
from rllm.gateway.upstreams import UpstreamResult
from rllm.inference.base import SamplingParams
from rllm.types import Trace, finite_logprob

__all__ = ["ResponsesRequest", "continue_from", "response_body", "stream_events", "to_chat"]

# Accepted and without effect on sampling (the reply or the trace may echo them).
_HARMLESS = {
    "user",
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "stream_options",
}
# Refused unless sent as their "off" value (None, False, [] ...), with what to do instead.
_REFUSED = {
    "conversation": "conversation objects are not supported: continue with previous_response_id",
    "prompt": "stored prompt templates are not supported: send instructions and input",
    "background": "background responses are not supported: the gateway answers when the call is done",
    "max_tool_calls": "max_tool_calls is not supported: the gateway cannot bound the calls a model writes",
    "context_management": "context_management is not supported",
    "access_programs": "access_programs is not supported",
    "background_options": "background_options is not supported",
    "image": "image generation options are not supported",
    "moderation": "moderation is not supported: the gateway screens no input or output",
}
_INCLUDABLE = {
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
}
_LOGPROBS = "message.output_text.logprobs"


class ResponsesRequest(BaseModel):
    """A ``POST /v1/responses`` body as validated at the edge (input items are checked by :func:`to_chat`)."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    previous_response_id: str | None = Field(None, min_length=1, max_length=300)
    stream: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=2**31)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    truncation: str | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def check(self) -> None:
        """Refuse, naming the field, what the gateway would otherwise silently ignore."""
        for key, value in (self.model_extra or {}).items():
            if key in _REFUSED and value not in (None, False, [], {}):
                raise fail(_REFUSED[key], key)
            if key not in _REFUSED and key not in _HARMLESS:
                raise fail(
                    f"{key!r} is not a field of a Responses request the gateway supports (it refuses what it "
                    "would otherwise ignore)",
                    key,
                )
        for name in self.include or []:
            if name not in _INCLUDABLE:
                raise fail(
                    f"include: unknown value {name!r} (one of {', '.join(sorted(_INCLUDABLE))})", "include"
                )
        if self.truncation not in (None, "disabled"):
            raise fail(
                "truncation: only 'disabled' is supported (a prompt that does not fit is refused, never cut)",
                "truncation",
            )
        if self.top_logprobs:
            raise fail(
                "top_logprobs > 0 is not supported: the gateway reports the sampled token's logprob only",
                "top_logprobs",
            )
        if self.reasoning and any(v is not None for v in self.reasoning.values()):
            raise fail(
                "the gateway's models have no separate reasoning to configure: send reasoning null",
                "reasoning",
            )
        if self.text:
            _check_text(self.text)
        if not self.input:
            raise fail("input: send the new input (a string or a non-empty list of items)", "input")

    @property
    def response_format(self) -> dict[str, Any] | None:
        """``text.format`` as chat's ``response_format`` (``None``: plain text)."""
        fmt = (self.text or {}).get("format")
        if not isinstance(fmt, dict) or fmt.get("type") == "text":
            return None
        if fmt["type"] == "json_object":
            return {"type": "json_object"}
        spec = {k: v for k, v in fmt.items() if k in ("name", "description", "schema", "strict")}
        return {"type": "json_schema", "json_schema": spec}

    @property
    def wants_logprobs(self) -> bool:
        return _LOGPROBS in (self.include or [])

    def to_sampling_params(self) -> SamplingParams:
        kwargs: dict[str, Any] = {}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.max_output_tokens is not None:
            kwargs["max_tokens"] = self.max_output_tokens
        return SamplingParams(**kwargs)


def _check_text(text: dict[str, Any]) -> None:
    unknown = sorted(set(text) - {"format", "verbosity"})
    if unknown:
        raise fail(f"text: unknown option {unknown[0]!r}", f"text.{unknown[0]}")
    fmt = text.get("format")
    if fmt is not None and (
        not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema")
    ):
        kind = fmt.get("type") if isinstance(fmt, dict) else fmt
        raise fail(
            f"text.format.type must be 'text', 'json_object' or 'json_schema', not {kind!r}", "text.format"
        )
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and not isinstance(fmt.get("schema"), dict):
        raise fail(
            "text.format.schema: send the JSON schema the reply must match, as "
            '{"type": "json_schema", "name": ..., "schema": {...}}',
            "text.format.schema",
        )
    if text.get("verbosity") not in (None, "medium"):
        raise fail("text.verbosity: only 'medium' (the default) is supported", "text.verbosity")


# ---------------------------------------------------------------------------------------------- requests
def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    """Flat Responses function tools as chat tools; built-in tools (web search, files ...) are refused."""
    if not req.tools:
        return None
    out = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function":
            raise fail(
                f"tools[{i}]: only function tools are supported, not {tool.get('type')!r} "
                "(the gateway has no built-in tools)",
                f"tools.{i}.type",
            )
        out.append(chat_tool({k: v for k, v in tool.items() if k != "type"}, f"tools[{i}]", f"tools.{i}"))
    return out


def _tool_choice(req: ResponsesRequest, tools: list[dict[str, Any]] | None) -> Any:
    """Responses' tool_choice in chat's form; a forced choice needs the tools it forces."""
    choice = req.tool_choice
    if choice is None or choice == "auto" or choice == "none":
        return choice if tools else None
    if choice == "required":
        if not tools:
            raise fail("tool_choice 'required' needs tools: send the tools the model may call", "tool_choice")
        return "required"
    if isinstance(choice, dict) and choice.get("type") == "function" and set(choice) <= {"type", "name"}:
        return forced_function(choice.get("name"), tools)
    raise fail(
        "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
        "tool_choice",
    )


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail(f"{where}: content is a string or a list of text parts", where)
    parts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text") or not isinstance(part.get("text"), str):
            raise fail(
                f"{where}[{k}]: only input_text / output_text parts are supported, not {kind!r}",
                f"{where}.{k}",
            )
        parts.append(part["text"])
    return "".join(parts)


def _item(item: Any, i: int, messages: list[dict[str, Any]]) -> None:
    """Append one input item to ``messages`` (a function call joins the assistant turn before it)."""
    where = f"input.{i}"
    if not isinstance(item, dict):
        raise fail(f"{where}: an input item is an object", where)
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise fail(
                f"{where}.role: one of user, system, developer, assistant, not {role!r}", f"{where}.role"
            )
        text = _text_of(item.get("content"), f"{where}.content")
        messages.append(
            assistant_message(text, None) if role == "assistant" else {"role": role, "content": text}
        )
    elif kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise fail(f"{where}.{key}: a function_call item needs a string {key}", f"{where}.{key}")
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        if messages and messages[-1]["role"] == "assistant":
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append(assistant_message("", [call]))
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise fail(
                f"{where}.call_id: a function_call_output item needs the call_id it answers",
                f"{where}.call_id",
            )
        output = _text_of(item.get("output"), f"{where}.output")
        messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
    else:
        raise fail(
            f"{where}.type: input items may be message, function_call or function_call_output, not {kind!r}",
            f"{where}.type",
        )


def continue_from(previous: list[Trace], response_id: str) -> list[dict[str, Any]]:
    """The conversation a ``previous_response_id`` stands for: the messages its call was sampled from
    (its ``instructions`` left out: they are not carried over, as in OpenAI's API) and its reply."""
    if not previous or previous[0].endpoint != "responses" or previous[0].response_message is None:
        raise OpenAIError(
            400,
            f"previous_response_id {response_id!r} is not a response of this gateway's trace store: "
            "send an id a /v1/responses call returned (or re-send the whole input)",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    trace = previous[0]
    messages = list(trace.request.get("messages") or [])
    if trace.request.get("instructions") is not None:
        messages = messages[1:]
    reply = trace.response_message
    return [*messages, assistant_message(reply.get("content"), reply.get("tool_calls"))]


def to_chat(
    req: ResponsesRequest, history: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, Any]:
    """The chat ``messages``, ``tools`` and ``tool_choice`` of a request that continues ``history``."""
    req.check()
    messages: list[dict[str, Any]] = []
    if req.instructions is not None:
        messages.append({"role": "system", "content": req.instructions})
    messages += history
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
    else:
        for i, item in enumerate(req.input):
            _item(item, i, messages)
    tools = _tools(req)
    return messages, tools, _tool_choice(req, tools)


# ---------------------------------------------------------------------------------------------- replies
def response_body(
    req: ResponsesRequest,
    response_id: str,
    created: int,
    model: str,
    result: UpstreamResult,
    sampling: dict[str, Any],
) -> dict[str, Any]:
    """The ``response`` object of one sampled call (one choice: the Responses API has no ``n``)."""
    c = result.choices[0]
    stem = response_id.removeprefix("resp_")
    done = "incomplete" if c.finish_reason == "length" else "completed"
    output: list[dict[str, Any]] = []
    if c.text or not c.tool_calls:
        logprobs = []
        if req.wants_logprobs and c.token_strings is not None:
            logprobs = [
                {"token": s, "logprob": finite_logprob(lp), "bytes": list(s.encode()), "top_logprobs": []}
                for s, lp in zip(c.token_strings, c.logprobs)
            ]
        output.append(
            {
                "id": f"msg_{stem}",
                "type": "message",
                "role": "assistant",
                "status": done,
                "content": [{"type": "output_text", "text": c.text, "annotations": [], "logprobs": logprobs}],
            }
        )
    for k, tc in enumerate(c.tool_calls or []):
        output.append(
            {
                "id": f"fc_{stem}_{k}",
                "type": "function_call",
                "call_id": tc["id"],
                "name": tc["function"]["name"],
                "arguments": tc["function"]["arguments"],
                "status": "completed",
            }
        )
    completion = len(c.completion_ids)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": done,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if done == "incomplete" else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": True,  # the gateway records every call: training reads it back
        "temperature": sampling.get("temperature"),
        "top_p": sampling.get("top_p"),
        "text": {"format": (req.text or {}).get("format") or {"type": "text"}, "verbosity": "medium"},
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "truncation": "disabled",
        "usage": {
            "input_tokens": len(result.prompt_ids),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len(result.prompt_ids) + completion,
        },
        "user": (req.model_extra or {}).get("user"),
        "metadata": (req.model_extra or {}).get("metadata") or {},
    }


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events that stream one output item: added, its content (deltas, done), done."""
    if item["type"] == "message":
        part = item["content"][0]
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        }
        ref = {"item_id": item["id"], "output_index": index, "content_index": 0}
        yield {"type": "response.content_part.added", **ref, "part": {**part, "text": "", "logprobs": []}}
        for piece in PIECES.findall(part["text"]):
            yield {"type": "response.output_text.delta", **ref, "delta": piece, "logprobs": []}
        yield {"type": "response.output_text.done", **ref, "text": part["text"], "logprobs": part["logprobs"]}
        yield {"type": "response.content_part.done", **ref, "part": part}
    else:
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        ref = {"item_id": item["id"], "output_index": index}
        if item["arguments"]:
            yield {"type": "response.function_call_arguments.delta", **ref, "delta": item["arguments"]}
        yield {
            "type": "response.function_call_arguments.done",
            **ref,
            "name": item["name"],
            "arguments": item["arguments"],
        }
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def stream_events(body: dict[str, Any]) -> Iterator[bytes]:
    """The Responses SSE stream of a finished ``response`` object, ``sequence_number`` counting from 0."""
    start = {**body, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(body["output"]):
        events += _item_events(index, item)
    events.append({"type": f"response.{body['status']}", "response": body})
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
