"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) spoken over the
gateway's chat path.

A Messages request is translated to chat form (``system`` to a leading system message, ``text`` blocks
to message content, an assistant's ``tool_use`` blocks to its ``tool_calls``, ``tool_result`` blocks to
``tool`` messages, ``tools`` to chat function tools, ``tool_choice`` to chat's), sampled and recorded
exactly like a chat completion (the trace's ``request["messages"]`` is the translated conversation, so the
turns of an agent loop merge into one training sequence as chat turns do; its endpoint is
``"messages"``), and answered as a ``message`` object, or as the Messages SSE event sequence when
``stream`` is true. ``count_tokens`` renders the same translation with the same chat template the
sampling uses and answers its length.

Fields that change nothing about sampling (``metadata``, ``service_tier``, ``cache_control``) are
accepted; what the gateway would have to honour and cannot (images, documents, extended thinking,
server tools, MCP servers, assistant prefill ...; ``strict`` tools are honoured: their arguments are held
to ``input_schema`` by a grammar on the local engine) is refused with a 400 that names
the field, and so is any field this module does not know. Errors on these routes come back in
Anthropic's shape (:func:`error_body`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from rllm.gateway.protocol import OpenAIError
from rllm.gateway.translate import PIECES, assistant_message, chat_tool, fail, forced_function
from rllm.gateway.upstreams import UpstreamResult
from rllm.inference.base import SamplingParams
from rllm.tool_calls import format_tool_call_text

__all__ = [
    "CountTokensRequest",
    "MessagesRequest",
    "error_body",
    "is_messages_path",
    "message_body",
    "stream_events",
    "to_chat",
]

# Accepted and without effect on sampling (prompt caching hints, service tiers and speeds, the end user's
# and workspace's ids, region, cache diagnostics: there is no cache to diagnose).
_HARMLESS = {
    "metadata",
    "service_tier",
    "cache_control",
    "speed",
    "inference_geo",
    "user_profile_id",
    "workspace_id",
    "diagnostics",
}
# Refused unless sent as their "off" value, with what to do instead.
_REFUSED = {
    "container": "containers (code execution) are not supported: the gateway runs no server tools",
    "mcp_servers": "MCP servers are not supported: the gateway runs no tools; give the agent client tools",
    "context_management": "context_management is not supported: send the conversation as it should be read",
    "output_format": "structured outputs are not supported: replies are sampled as plain text",
    "output_config": "output_config (structured outputs, effort) is not supported: leave it out",
}
_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
# Content blocks the gateway cannot read, with what to do instead.
_BLOCKS_REFUSED = {
    "image": "images are not supported: the gateway's models read text only",
    "document": "documents are not supported: send their text in a text block",
    "search_result": "search_result blocks are not supported: send the results as text",
    "thinking": "thinking blocks are not supported: the gateway's models write no separate thinking; "
    "drop them from the history",
    "redacted_thinking": "redacted_thinking blocks are not supported: drop them from the history",
    "container_upload": "container_upload blocks are not supported: the gateway runs no containers",
}


def is_messages_path(path: str) -> bool:
    """Whether a request path is one of this API's routes (their errors take Anthropic's shape)."""
    return path.endswith(_ROUTES)


def error_body(err: OpenAIError) -> dict[str, Any]:
    """An error in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""
    if err.status_code in _STATUS_TYPES:
        kind = _STATUS_TYPES[err.status_code]
    else:
        kind = "api_error" if err.status_code >= 500 else "invalid_request_error"
    if err.status_code in (503, 529):
        kind = "overloaded_error"
    return {"type": "error", "error": {"type": kind, "message": err.message}}


class CountTokensRequest(BaseModel):
    """A ``POST /v1/messages/count_tokens`` body (messages and blocks are checked by :func:`to_chat`)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[Any] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None

    def check(self) -> None:
        """Refuse, naming the field, what the gateway would otherwise silently ignore."""
        for key, value in (self.model_extra or {}).items():
            if key in _REFUSED and value not in (None, False, [], {}):
                raise fail(_REFUSED[key], key)
            if key not in _REFUSED and key not in _HARMLESS:
                raise fail(
                    f"{key}: not a field of a {self._what} request the gateway supports (it refuses what "
                    "it would otherwise ignore)",
                    key,
                )
        if self.thinking is not None and self.thinking.get("type") != "disabled":
            raise fail(
                "thinking: extended thinking is not supported (the gateway's models write no separate "
                "thinking): send {'type': 'disabled'} or leave it out",
                "thinking",
            )

    _what: ClassVar[str] = "count_tokens"


class MessagesRequest(CountTokensRequest):
    """A ``POST /v1/messages`` body as validated at the edge."""

    max_tokens: int | None = Field(None, ge=1, le=2**31)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=2**31)
    stream: bool | None = None

    _what: ClassVar[str] = "Messages"

    def check(self) -> None:
        super().check()
        if self.max_tokens is None:
            raise fail(
                "max_tokens: required (the most tokens the reply may have), as in Anthropic's API",
                "max_tokens",
            )

    def to_sampling_params(self) -> SamplingParams:
        kwargs: dict[str, Any] = {"max_tokens": self.max_tokens, "stop": list(self.stop_sequences or [])}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.top_k:
            kwargs["top_k"] = self.top_k
        return SamplingParams(**kwargs)


# ---------------------------------------------------------------------------------------------- requests
def _check_keys(obj: dict[str, Any], allowed: set[str], where: str, what: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise fail(
            f"{where}.{unknown[0]}: not a field of {what} the gateway supports", f"{where}.{unknown[0]}"
        )


def _text_block(block: dict[str, Any], where: str) -> str:
    _check_keys(block, {"type", "text", "cache_control", "citations"}, where, "a text block")
    if not isinstance(block.get("text"), str):
        raise fail(f"{where}.text: a text block needs a string text", f"{where}.text")
    if block.get("citations"):
        raise fail(f"{where}.citations: citations are not supported", f"{where}.citations")
    return block["text"]


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict):
        raise fail(f"{where}: a content block is an object with a type", where)
    kind = block.get("type")
    if kind in _BLOCKS_REFUSED:
        raise fail(f"{where}.type: {_BLOCKS_REFUSED[kind]}", f"{where}.type")
    if kind not in ("text", "tool_use", "tool_result"):
        raise fail(
            f"{where}.type: content blocks may be text, tool_use (assistant) or tool_result (user), "
            f"not {kind!r}",
            f"{where}.type",
        )
    return kind


def _texts(content: Any, where: str) -> str:
    """A string, or text blocks joined (how ``system`` and a ``tool_result``'s content are sent)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail(f"{where}: a string or a list of text blocks", where)
    parts = []
    for k, block in enumerate(content):
        if _block_type(block, f"{where}.{k}") != "text":
            raise fail(f"{where}.{k}.type: only text blocks may appear here", f"{where}.{k}.type")
        parts.append(_text_block(block, f"{where}.{k}"))
    return "".join(parts)


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    _check_keys(
        block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, where, "a tool_result block"
    )
    if not isinstance(block.get("tool_use_id"), str) or not block["tool_use_id"]:
        raise fail(
            f"{where}.tool_use_id: a tool_result block needs the id of the tool_use it answers",
            f"{where}.tool_use_id",
        )
    if block.get("is_error") not in (None, True, False):
        raise fail(f"{where}.is_error: true or false", f"{where}.is_error")
    content = block.get("content")
    text = "" if content is None else _texts(content, f"{where}.content")
    if block.get("is_error"):  # chat has no error flag: the model reads it in the result
        text = "Error: " + text
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    _check_keys(block, {"type", "id", "name", "input", "cache_control"}, where, "a tool_use block")
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise fail(f"{where}.{key}: a tool_use block needs a string {key}", f"{where}.{key}")
    if not isinstance(block.get("input"), dict):
        raise fail(f"{where}.input: a tool_use block's input is an object", f"{where}.input")
    arguments = json.dumps(block["input"], ensure_ascii=False)
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def _role_and_blocks(message: Any, where: str) -> tuple[str, list[Any]]:
    if not isinstance(message, dict):
        raise fail(f"{where}: a message is an object with a role and content", where)
    _check_keys(message, {"role", "content"}, where, "a message")
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise fail(
            f"{where}.role: 'user' or 'assistant', not {role!r} (the system prompt goes in the top-level "
            "system field)",
            f"{where}.role",
        )
    if isinstance(content, str):
        return role, [{"type": "text", "text": content}]
    if isinstance(content, list) and content:
        return role, content
    raise fail(f"{where}.content: a string or a non-empty list of content blocks", f"{where}.content")


def _message(message: Any, i: int, out: list[dict[str, Any]]) -> None:
    """Append one Messages turn to the chat ``out``: a user turn's tool results become ``tool`` messages
    (in block order, its text between them joined into user messages); an assistant turn is one
    assistant message carrying its text and its ``tool_use`` blocks as ``tool_calls``."""
    where = f"messages.{i}"
    role, blocks = _role_and_blocks(message, where)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        bw = f"{where}.content.{k}"
        kind = _block_type(block, bw)
        if kind == "text":
            texts.append(_text_block(block, bw))
        elif role == "user" and kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
                texts = []
            out.append(_tool_result(block, bw))
        elif role == "assistant" and kind == "tool_use":
            calls.append(_tool_use(block, bw))
        else:
            other = "user" if kind == "tool_result" else "assistant"
            raise fail(f"{bw}.type: {kind} blocks belong in {other} messages", f"{bw}.type")
    if role == "assistant":
        out.append(assistant_message("".join(texts), calls))
    elif texts:
        out.append({"role": "user", "content": "".join(texts)})


def _tools(req: CountTokensRequest) -> list[dict[str, Any]] | None:
    """Client tools (``name``, ``description``, ``input_schema``) as chat tools; server tools are refused."""
    if not req.tools:
        return None
    out = []
    for i, tool in enumerate(req.tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise fail(f"{where}: a tool is an object with a name and an input_schema", where)
        if tool.get("type") not in (None, "custom"):
            raise fail(
                f"{where}.type: only client tools (type 'custom' or none) are supported, not "
                f"{tool.get('type')!r} (the gateway runs no server tools)",
                f"{where}.type",
            )
        allowed = {"type", "name", "description", "input_schema", "cache_control", "strict"}
        _check_keys(tool, allowed, where, "a tool")
        if tool.get("strict") not in (None, True, False):
            raise fail(f"{where}.strict: true or false", f"{where}.strict")
        if not isinstance(tool.get("input_schema"), dict):
            raise fail(f"{where}.input_schema: a tool needs its input_schema (a JSON schema object)", where)
        fields = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            fields["description"] = tool["description"]
        if tool.get("strict"):  # its arguments are held to input_schema (rllm.gateway.structured)
            fields["strict"] = True
        out.append(chat_tool(fields, f"tools[{i}]", where))
    return out


def _tool_choice(req: CountTokensRequest, tools: list[dict[str, Any]] | None) -> Any:
    """Messages' tool_choice in chat's form: auto, none, any (chat's "required"), tool (a named one)."""
    choice = req.tool_choice
    if choice is None:
        return None
    kind = choice.get("type")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    _check_keys(choice, allowed, "tool_choice", f"a {kind!r} tool_choice")
    if choice.get("disable_parallel_tool_use") not in (None, True, False):
        raise fail(
            "tool_choice.disable_parallel_tool_use: true or false", "tool_choice.disable_parallel_tool_use"
        )
    if kind in ("auto", "none"):
        return kind if tools else None
    if kind in ("any", "tool") and not tools:
        raise fail(f"tool_choice {kind!r} needs tools: send the tools the model may call", "tool_choice")
    if kind == "any":
        return "required"
    if kind == "tool":
        return forced_function(choice.get("name"), tools)
    raise fail(
        f"tool_choice.type: one of 'auto', 'any', 'tool' (with a name) or 'none', not {kind!r}",
        "tool_choice.type",
    )


def to_chat(req: CountTokensRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, Any]:
    """The chat ``messages``, ``tools`` and ``tool_choice`` of a Messages request."""
    req.check()
    messages: list[dict[str, Any]] = []
    if req.system is not None:
        system = _texts(req.system, "system")
        if system:
            messages.append({"role": "system", "content": system})
    for i, message in enumerate(req.messages):
        _message(message, i, messages)
    if req.messages[-1].get("role") == "assistant":
        raise fail(
            f"messages.{len(req.messages) - 1}: the last message must be the user's: continuing a partial "
            "assistant turn (prefill) is not supported",
            f"messages.{len(req.messages) - 1}",
        )
    tools = _tools(req)
    return messages, tools, _tool_choice(req, tools)


# ---------------------------------------------------------------------------------------------- replies
def _tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def message_body(message_id: str, model: str, result: UpstreamResult) -> dict[str, Any]:
    """The ``message`` object of one sampled call (one choice: the Messages API has no ``n``)."""
    c = result.choices[0]
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    text = c.text
    for tc in c.tool_calls or []:
        name, arguments = tc["function"]["name"], tc["function"]["arguments"]
        try:
            value = json.loads(arguments)
        except ValueError:
            value = None
        if isinstance(value, dict):
            calls.append({"type": "tool_use", "id": _tool_use_id(tc["id"]), "name": name, "input": value})
        else:  # an upstream's call without an object of arguments is no tool_use: shown as written
            text = "\n".join(t for t in (text, format_tool_call_text(name, arguments)) if t)
    if text or not calls:
        content.append({"type": "text", "text": text})
    content += calls
    if calls:
        stop_reason = "tool_use"
    elif c.finish_reason == "length":
        stop_reason = "max_tokens"
    elif c.stop_sequence is not None:
        stop_reason = "stop_sequence"
    else:
        stop_reason = "end_turn"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": c.stop_sequence if stop_reason == "stop_sequence" else None,
        "usage": {
            "input_tokens": len(result.prompt_ids),
            "output_tokens": len(c.completion_ids),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if block["type"] == "text":
        yield {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        for piece in PIECES.findall(block["text"]):
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": piece},
            }
    else:
        yield {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
        partial = json.dumps(block["input"])
        yield {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial},
        }
    yield {"type": "content_block_stop", "index": index}


def stream_events(body: dict[str, Any]) -> Iterator[bytes]:
    """The Messages SSE stream of a finished ``message`` object, each event with its ``event:`` line."""
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**body["usage"], "output_tokens": 0},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(body["content"]):
        events += _block_events(index, block)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]},
            "usage": {"output_tokens": body["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
