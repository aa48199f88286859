"""What the APIs translated to chat share (:mod:`rllm.gateway.responses_api` for OpenAI's Responses API,
:mod:`rllm.gateway.messages_api` for Anthropic's Messages API): assistant turns in the form the chat
route hands to the template, function tools validated as chat tools, a forced tool's name checked against
the tools, and the pieces a streamed text is cut into."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from rllm.gateway.protocol import FunctionSpec, OpenAIError, validation_error

# Streamed text goes out word by word: each piece is one word with the whitespace around it.
PIECES = re.compile(r"\s*\S+\s*|\s+")


def fail(message: str, param: str | None) -> OpenAIError:
    """A 400 for bad input, ``param`` naming the field to fix."""
    return OpenAIError(400, message, param=param)


def assistant_message(text: str | None, tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """An assistant turn as the chat route hands it to the template (``ChatMessage.as_template_dict``)."""
    out: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if tool_calls:
        out["tool_calls"] = [
            {"id": tc["id"], "type": "function", "function": dict(tc["function"])} for tc in tool_calls
        ]
    return out


def chat_tool(fields: dict[str, Any], label: str, param: str) -> dict[str, Any]:
    """A function tool (``name``, ``description``, ``parameters``, ``strict``) as a chat tool; ``label``
    starts the error message (``tools[0]``) and ``param`` the error's field path (``tools.0``)."""
    try:
        spec = FunctionSpec.model_validate(fields)
    except ValidationError as exc:
        err = validation_error(exc)
        raise fail(f"{label}.{err.message}", f"{param}.{err.param}") from exc
    return {"type": "function", "function": spec.model_dump(exclude_none=True)}


def forced_function(name: Any, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Chat's named ``tool_choice`` for ``name``, which must be one of the chat ``tools``."""
    names = [t["function"]["name"] for t in tools or []]
    if name not in names:
        raise fail(f"tool_choice names {name!r}, which is not among the tools {names}", "tool_choice")
    return {"type": "function", "function": {"name": name}}
