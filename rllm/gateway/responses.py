"""OpenAI reply bodies built from upstream choices: whole responses and SSE stream chunks.

The gateway always samples a call to the end before replying (the trace must be on disk before the
client sees anything), so a streamed reply carries the same choices cut into chunks: the client's
streaming code path works unchanged, but time-to-first-token equals the whole call's latency.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rllm.gateway.translate import PIECES
from rllm.gateway.upstreams import UpstreamChoice, UpstreamResult
from rllm.types import finite_logprob


def usage(result: UpstreamResult) -> dict[str, int]:
    completion = sum(len(c.completion_ids) for c in result.choices)
    return {
        "prompt_tokens": len(result.prompt_ids),
        "completion_tokens": completion,
        "total_tokens": len(result.prompt_ids) + completion,
    }


def _chat_logprobs(c: UpstreamChoice) -> dict[str, Any] | None:
    if c.token_strings is None:
        return None
    return {
        "content": [
            {"token": s, "logprob": finite_logprob(lp), "bytes": list(s.encode()), "top_logprobs": []}
            for s, lp in zip(c.token_strings, c.logprobs)
        ],
        "refusal": None,
    }


def _text_logprobs(c: UpstreamChoice) -> dict[str, Any] | None:
    if c.token_strings is None:
        return None
    offsets, pos = [], 0
    for s in c.token_strings:
        offsets.append(pos)
        pos += len(s)
    return {
        "tokens": c.token_strings,
        "token_logprobs": [finite_logprob(lp) for lp in c.logprobs],
        "top_logprobs": None,
        "text_offset": offsets,
    }


def chat_message(c: UpstreamChoice) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": c.text if (c.text or not c.tool_calls) else None}
    if c.tool_calls:
        msg["tool_calls"] = c.tool_calls
    return msg


def completion_body(
    endpoint: str,
    request_id: str,
    created: int,
    model: str,
    result: UpstreamResult,
    *,
    token_ids: bool = False,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` / ``text_completion``. ``token_ids`` adds vLLM's
    ``return_token_ids`` fields (chat: ``prompt_token_ids`` at the top; completions: per choice; both:
    ``token_ids`` per choice), so one gateway can be another's upstream."""
    if endpoint == "chat.completions":
        choices = [
            {
                "index": i,
                "message": chat_message(c),
                "finish_reason": c.finish_reason,
                "logprobs": _chat_logprobs(c),
            }
            for i, c in enumerate(result.choices)
        ]
        obj = "chat.completion"
    else:
        choices = [
            {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": _text_logprobs(c)}
            for i, c in enumerate(result.choices)
        ]
        obj = "text_completion"
    body: dict[str, Any] = {
        "id": request_id,
        "object": obj,
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(result),
    }
    if token_ids and result.trainable:
        for choice, c in zip(choices, result.choices):
            choice["token_ids"] = c.completion_ids
            if endpoint == "completions":
                choice["prompt_token_ids"] = result.prompt_ids
        if endpoint == "chat.completions":
            body["prompt_token_ids"] = result.prompt_ids
    return body


def stream_chunks(
    endpoint: str, request_id: str, created: int, model: str, result: UpstreamResult, *, include_usage: bool
) -> Iterator[bytes]:
    """The SSE events of a streamed reply, ``data: [DONE]`` last."""
    chat = endpoint == "chat.completions"
    head = {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
    }

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**head, "choices": choices, **extra}).encode() + b"\n\n"

    for i, c in enumerate(result.choices):
        if chat:
            yield event(
                [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        for piece in PIECES.findall(c.text):
            delta = {"content": piece} if chat else None
            yield event(
                [{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}]
                if chat
                else [{"index": i, "text": piece, "logprobs": None, "finish_reason": None}]
            )
        if chat and c.tool_calls:
            calls = [{"index": k, **tc} for k, tc in enumerate(c.tool_calls)]
            yield event(
                [{"index": i, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None}]
            )
        if chat:
            yield event(
                [{"index": i, "delta": {}, "logprobs": _chat_logprobs(c), "finish_reason": c.finish_reason}]
            )
        else:
            yield event(
                [{"index": i, "text": "", "logprobs": _text_logprobs(c), "finish_reason": c.finish_reason}]
            )
    if include_usage:
        yield event([], usage=usage(result))
    yield b"data: [DONE]\n\n"
