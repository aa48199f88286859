"""SFT examples: read a file of conversations, render each into token rows with a loss mask on the assistant
tokens only, exactly as the gateway renders and the RL trainer trains.

Formats (``data.format``; ``auto`` picks one per file from its columns):

- ``messages``: ``{"messages": [{"role": ..., "content": ...}, ...], "tools": [...]?}`` as OpenAI's and
  TRL's conversational datasets write them, tool calls and tool messages included. Other columns (the
  ``task_id``, ``reward``, ... that ``rllm dataset from-eval`` adds) are ignored.
- ``prompt_completion``: TRL's ``prompt`` / ``completion`` columns (or ``prompt`` / ``response``), each a
  string (a user message / an assistant message) or a list of messages.

Rendering (:func:`render_conversation`): for assistant message k, ``prompt_k`` is
``ChatRenderer.render_ids(messages[:k], tools)`` (what the gateway feeds the model before that turn) and the
trained tokens are ``encode(assistant_text(message_k)) + [eos]`` (what the model samples for it). Turns are
concatenated into one row while ``row so far`` is a token prefix of ``prompt_{k+1}``: the row is then the
template's own rendering of the conversation, the non-assistant tokens masked. Where the template *drifts*
(re-renders history differently, ``rllm check-template``) the row ends and the next turn starts a new row
from its full prompt, as the RL trainer splits such turns; the count is reported as ``drift_splits``.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.data.schema import read_object_records
from rllm.inference.chat_template import ChatRenderer, TemplateRenderError

logger = logging.getLogger(__name__)

__all__ = [
    "Conversation",
    "SFTDataError",
    "SFTRow",
    "load_conversations",
    "render_conversation",
    "render_rows",
    "split_held_out",
]

_ROLES = ("system", "user", "assistant", "tool")


class SFTDataError(ValueError):
    """A training file cannot be read as SFT examples; the message names the file, the row and the fix."""


@dataclass
class Conversation:
    """One example: OpenAI chat messages (with at least one assistant message to learn) and its tools."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    where: str = ""  # "file:row" for error messages


@dataclass
class SFTRow:
    """One training sequence: token ids and 1 on the assistant tokens to learn, 0 elsewhere."""

    input_ids: list[int]
    loss_mask: list[int]


@dataclass
class RenderStats:
    """What rendering a data set did: rows made, turns split by drift, over-long rows cut or dropped."""

    rows: int = 0
    drift_splits: int = 0
    truncated: int = 0
    dropped: int = 0
    tokens: int = 0
    assistant_tokens: int = 0
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- reading


def _parse_json_cell(value: Any) -> Any:
    """CSV (and some parquet writers) store a list of messages as JSON text."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _detect_format(columns: Sequence[str], path: Path) -> str:
    if "messages" in columns:
        return "messages"
    if "prompt" in columns and ("completion" in columns or "response" in columns):
        return "prompt_completion"
    raise SFTDataError(
        f"{path}: cannot tell the SFT format from the columns {sorted(columns)}: give a 'messages' column "
        "(OpenAI chat messages) or 'prompt' with 'completion' (or 'response'); see docs/sft.md"
    )


def _as_messages(value: Any, role: str, where: str, column: str) -> list[dict[str, Any]]:
    value = _parse_json_cell(value)
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list):
        return list(value)
    raise SFTDataError(
        f"{where}: column {column!r} must be a string or a list of messages, got {value!r:.80}"
    )


def _check_messages(messages: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"{where}: 'messages' must be a non-empty list of chat messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in _ROLES:
            raise SFTDataError(
                f"{where}: messages[{i}] must be a chat message with a role of {', '.join(_ROLES)}; got {m!r:.80}"
            )
    if not any(m["role"] == "assistant" for m in messages):
        raise SFTDataError(f"{where}: no assistant message to learn from: every example needs one")
    return [dict(m) for m in messages]


def _conversation(record: Mapping[str, Any], fmt: str, where: str) -> Conversation:
    if fmt == "messages":
        messages = _check_messages(_parse_json_cell(record.get("messages")), where)
    else:
        answer_key = "completion" if "completion" in record else "response"
        prompt = _as_messages(record.get("prompt"), "user", where, "prompt")
        completion = _as_messages(record.get(answer_key), "assistant", where, answer_key)
        messages = _check_messages(prompt + completion, where)
    tools = _parse_json_cell(record.get("tools"))
    if tools is not None and not isinstance(tools, list):
        raise SFTDataError(f"{where}: 'tools' must be a list of OpenAI tool definitions, got {tools!r:.80}")
    return Conversation(messages=messages, tools=tools or None, where=where)


def load_conversations(path: str | Path, fmt: str = "auto") -> list[Conversation]:
    """The examples of a JSONL, JSON, CSV or parquet file, in format ``fmt`` (``auto``: from its columns).

    Raises:
        FileNotFoundError: there is no such file.
        SFTDataError: the file or one of its rows is not SFT data (the message says which and why).
    """
    path = Path(path)
    records = read_object_records(path, error=SFTDataError, hint=" (data.train_file / data.test_file)")
    if fmt == "auto":
        fmt = _detect_format(list(dict.fromkeys(k for r in records for k in r)), path)
    elif fmt == "messages" and not all("messages" in r for r in records):
        raise SFTDataError(f"{path}: data.format=messages needs a 'messages' column in every record")
    return [_conversation(r, fmt, f"{path}: row {i}") for i, r in enumerate(records)]


def split_held_out(
    conversations: list[Conversation], fraction: float, seed: int
) -> tuple[list[Conversation], list[Conversation]]:
    """A seeded split into (train, held-out) with ``round(fraction * n)`` held out (at least one if > 0)."""
    if fraction <= 0:
        return conversations, []
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    n_test = max(1, round(fraction * len(conversations)))
    if n_test >= len(conversations):
        raise SFTDataError(
            f"data.test_fraction={fraction} leaves no training example of {len(conversations)}: lower it"
        )
    test = set(order[:n_test])
    return (
        [c for i, c in enumerate(conversations) if i not in test],
        [c for i, c in enumerate(conversations) if i in test],
    )


# ----------------------------------------------------------------------------------------- rendering


def render_conversation(
    renderer: ChatRenderer, conversation: Conversation, eos_id: int, stats: RenderStats | None = None
) -> list[SFTRow]:
    """The training rows of one conversation (one, unless the template drifts; see the module docstring)."""
    tokenizer = renderer.tokenizer
    messages, tools = conversation.messages, conversation.tools
    rows: list[SFTRow] = []
    ids: list[int] = []
    mask: list[int] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        try:
            prompt = renderer.render_ids(messages[:i], tools)
            completion = tokenizer.encode(renderer.assistant_text(message), add_special_tokens=False)
        except (TemplateRenderError, ValueError, TypeError) as err:
            raise SFTDataError(f"{conversation.where}: {err}") from err
        if ids and prompt[: len(ids)] != ids:  # drift: the template re-renders this history differently
            rows.append(SFTRow(ids, mask))
            ids, mask = [], []
            if stats is not None:
                stats.drift_splits += 1
        mask += [0] * (len(prompt) - len(ids))
        ids = prompt + completion + [eos_id]
        mask += [1] * (len(completion) + 1)
    rows.append(SFTRow(ids, mask))
    return rows


def render_rows(
    renderer: ChatRenderer,
    conversations: Sequence[Conversation],
    *,
    eos_id: int,
    max_length: int,
    overlong: str,
    what: str = "training",
) -> tuple[list[SFTRow], RenderStats]:
    """Every conversation's rows, over-long ones cut to ``max_length`` or dropped (``overlong``)."""
    stats = RenderStats()
    out: list[SFTRow] = []
    for conversation in conversations:
        for row in render_conversation(renderer, conversation, eos_id, stats):
            if len(row.input_ids) > max_length:
                if overlong == "drop":
                    stats.dropped += 1
                    continue
                row = SFTRow(row.input_ids[:max_length], row.loss_mask[:max_length])
                if not any(row.loss_mask):
                    stats.dropped += 1
                    continue
                stats.truncated += 1
            out.append(row)
    stats.rows = len(out)
    stats.tokens = sum(len(r.input_ids) for r in out)
    stats.assistant_tokens = sum(sum(r.loss_mask) for r in out)
    if stats.truncated or stats.dropped:
        logger.warning(
            "%s data: %d sequence(s) longer than sft.max_length=%d truncated, %d dropped (sft.overlong=%s)",
            what,
            stats.truncated,
            max_length,
            stats.dropped,
            overlong,
        )
    if stats.drift_splits:
        logger.warning(
            "%s data: the chat template re-renders history differently from how it renders each turn "
            "(drift, `rllm check-template`): %d conversation(s) split into separate rows at those turns",
            what,
            stats.drift_splits,
        )
    if not out:
        raise SFTDataError(f"no {what} sequence left after sft.overlong={overlong}: raise sft.max_length")
    return out, stats
