"""Curation: rejection sampling of recorded attempts into an SFT dataset of chat conversations.

    from rllm.eval.curate_sources import conversations_from_eval, conversations_from_run

    convs, note = conversations_from_eval("results/gsm8k.jsonl")     # an `rllm eval --output` file
    convs, note = conversations_from_run("runs/my-run")               # a run directory (its journal.db)
    result = curate(convs, CurateFilters(min_reward=1.0, best_of=2), note=note)
    write_messages_jsonl(result.kept, "sft.jsonl")

A **Conversation** is one thing the model did that could be imitated: the messages it was shown, then its
reply, with any earlier turns of the same exchange (its own replies, tool results) in between. It is read
from what rllm records anyway: an eval's results file and the gateway's trace store beside it
(``<output>.traces.db``: each call's messages and the reply, tool calls included), or a training run's
episode journal (every finished episode of every step, each step's prompt messages and response text).
Calls of one role whose messages extend an earlier call's messages plus its reply form one conversation;
a call that does not starts another. Each role of a multi-role episode (``solver``, ``judge``) gives its
own conversations.

The output is the OpenAI / TRL ``messages`` convention, one conversation per line, with the verdict and
where it came from beside it::

    {"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...],
     "task_id": "gsm8k-3", "reward": 1.0, "is_correct": true, "role": "default",
     "source": "eval:gsm8k.jsonl#2", "response_tokens": 57}

Reading the sources is :mod:`rllm.eval.curate_sources`; this module holds the filters and the output.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.tool_calls import ToolParser, get_tool_parser


class CurationError(ValueError):
    """Curation cannot give a result: a missing or unreadable source, or filters that removed everything.
    The message says what to change."""


@dataclass
class Conversation:
    """One recorded conversation that ends with the model's reply, with the verdict on its episode.

    ``reward`` is the role's reward when the episode gave the role one (a run's solver-judge episode), else
    the episode's (an eval's results row holds only that); ``is_correct`` is the episode's. ``response_tokens`` counts the tokens the model sampled in its replies
    (None when the source did not record them: then lengths are measured in characters). ``step`` is the
    training step (as logged, 1-based) for a run, None for an eval. ``failed`` marks an episode that ended
    in an error or a time-out; ``order`` is the position in the source, the last tie-break."""

    messages: list[dict[str, Any]]
    task_id: str
    reward: float
    is_correct: bool | None
    source: str
    role: str = "default"
    response_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    step: int | None = None
    failed: bool = False
    order: int = 0

    @property
    def response_chars(self) -> int:
        """Characters the model wrote: its replies' text and tool calls."""
        return sum(
            len(m.get("content") or "") + len(json.dumps(m["tool_calls"]) if m.get("tool_calls") else "")
            for m in self.messages
            if m["role"] == "assistant"
        )

    @property
    def length(self) -> int:
        """What the length bounds compare: response tokens when known, else response characters."""
        return self.response_chars if self.response_tokens is None else self.response_tokens

    def key(self) -> str:
        """What makes two conversations identical (the dedupe key): the messages and the tools."""
        return json.dumps([self.messages, self.tools], sort_keys=True, ensure_ascii=False)

    def row(self) -> dict[str, Any]:
        """The output line: ``messages`` (and ``tools`` when the calls offered some) plus the record."""
        out: dict[str, Any] = {"messages": self.messages}
        if self.tools:
            out["tools"] = self.tools
        out.update(
            task_id=self.task_id,
            reward=self.reward,
            is_correct=self.is_correct,
            role=self.role,
            source=self.source,
            response_tokens=self.response_tokens,
        )
        return out


@dataclass
class CurateFilters:
    """What to keep, applied in this order (each counted in :attr:`CurateResult.dropped`):
    failed episodes always go, then ``role``, ``steps`` (``(A, B)``, both included, for a run),
    ``min_reward``, ``correct_only``, ``min_tokens``/``max_tokens`` (on response tokens; characters where
    tokens are unknown), ``dedupe`` (identical conversations: the first in source order stays), and last
    ``best_of``: per (task, role), the ``best_of`` conversations of highest reward, ties going to the
    correct one, then the shorter response, then the first in source order."""

    min_reward: float | None = None
    correct_only: bool = False
    best_of: int | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    role: str | None = None
    steps: tuple[int | None, int | None] | None = None
    dedupe: bool = True

    def __post_init__(self) -> None:
        if self.best_of is not None and self.best_of < 1:
            raise CurationError(f"--best-of must be at least 1, got {self.best_of}")
        for name in ("min_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise CurationError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        if self.min_tokens is not None and self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise CurationError(
                f"--min-tokens {self.min_tokens} is above --max-tokens {self.max_tokens}: nothing could pass"
            )


@dataclass
class CurateResult:
    """The kept conversations and what happened to the rest. ``dropped`` maps each filter (its option
    name, or ``failed``) to how many conversations it removed, in the order the filters ran."""

    kept: list[Conversation]
    read: int
    dropped: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def tasks(self) -> int:
        return len({c.task_id for c in self.kept})

    @property
    def mean_reward(self) -> float:
        return sum(c.reward for c in self.kept) / len(self.kept) if self.kept else 0.0

    @property
    def length_unit(self) -> str:
        """Which unit the length bounds used: tokens, chars, or both (per conversation)."""
        known = {c.response_tokens is not None for c in self.kept}
        return (
            "tokens" if known == {True} else "chars" if known == {False} else "tokens where known, else chars"
        )

    def summary(self) -> str:
        """The lines ``rllm dataset from-eval/from-run`` prints."""
        lines = [f"read {self.read} conversations"]
        if self.note:
            lines.append(self.note)
        for name, n in self.dropped.items():
            lines.append(f"  dropped by {name}: {n}")
        lines.append(
            f"kept {len(self.kept)} conversations of {self.tasks} tasks, mean reward {self.mean_reward:.3f}"
            f" (response lengths in {self.length_unit})"
        )
        return "\n".join(lines)


def _in_steps(conv: Conversation, steps: tuple[int | None, int | None]) -> bool:
    lo, hi = steps
    return conv.step is not None and (lo is None or conv.step >= lo) and (hi is None or conv.step <= hi)


def _stages(f: CurateFilters) -> list[tuple[str, Any]]:
    """The per-conversation filters in order, each named as the option that sets it."""
    stages: list[tuple[str, Any]] = [("failed", lambda c: not c.failed)]
    if f.role is not None:
        stages.append(("--role", lambda c: c.role == f.role))
    if f.steps is not None:
        stages.append(("--steps", lambda c: _in_steps(c, f.steps)))  # type: ignore[arg-type]
    if f.min_reward is not None:
        stages.append(("--min-reward", lambda c: c.reward >= f.min_reward))
    if f.correct_only:
        stages.append(("--correct-only", lambda c: c.is_correct is True))
    if f.min_tokens is not None:
        stages.append(("--min-tokens", lambda c: c.length >= f.min_tokens))
    if f.max_tokens is not None:
        stages.append(("--max-tokens", lambda c: c.length <= f.max_tokens))
    return stages


def _rank(c: Conversation) -> tuple[float, bool, int, int]:
    """Best first: higher reward, then graded correct, then the shorter response, then source order."""
    return (-c.reward, c.is_correct is not True, c.length, c.order)


def dedupe(conversations: list[Conversation]) -> list[Conversation]:
    """The conversations without repeats (same messages and tools): the first in source order stays."""
    seen: set[str] = set()
    unique = []
    for c in conversations:
        key = c.key()
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def best_of(conversations: list[Conversation], k: int) -> list[Conversation]:
    """Per (task, role), the ``k`` best conversations (see :func:`_rank`): tasks in the order first read,
    best first within each."""
    groups: dict[tuple[str, str], list[Conversation]] = defaultdict(list)
    for c in conversations:
        groups[(c.task_id, c.role)].append(c)
    return [c for group in groups.values() for c in sorted(group, key=_rank)[:k]]


def curate(conversations: list[Conversation], filters: CurateFilters, *, note: str = "") -> CurateResult:
    """Apply ``filters`` to ``conversations`` (see :class:`CurateFilters` for the order). Raises
    :class:`CurationError` naming the filter that removed the last conversation, rather than return none."""
    if not conversations:
        raise CurationError(f"no conversations to curate{': ' + note if note else ''}")
    kept, dropped = list(conversations), {}
    for name, keep in _stages(filters):
        passed = [c for c in kept if keep(c)]
        dropped[name] = len(kept) - len(passed)
        if not passed:
            raise CurationError(_removed_all(name, kept, len(conversations), filters))
        kept = passed
    if filters.dedupe:
        before, kept = len(kept), dedupe(kept)
        dropped["dedupe"] = before - len(kept)
    if filters.best_of is not None:
        before, kept = len(kept), best_of(kept, filters.best_of)
        dropped["--best-of"] = before - len(kept)
    return CurateResult(kept=kept, read=len(conversations), dropped=dropped, note=note)


def _removed_all(name: str, before: list[Conversation], read: int, f: CurateFilters) -> str:
    """The one line that says filter ``name`` removed the last conversations (``before`` it ran)."""
    n = len(before)
    why = {
        "failed": "every episode read had failed (an error or a time-out)",
        "--role": f"--role {f.role} matched none (roles read: {', '.join(sorted({c.role for c in before}))})",
        "--steps": f"--steps {_steps_text(f.steps)} matched none (steps read: "
        f"{_range_text(sorted({c.step for c in before if c.step is not None}))})",
        "--min-reward": f"--min-reward {f.min_reward} removed the last {n} (highest reward "
        f"{max(c.reward for c in before):g})",
        "--correct-only": f"--correct-only removed the last {n} (none was graded correct)",
        "--min-tokens": f"--min-tokens {f.min_tokens} removed the last {n}",
        "--max-tokens": f"--max-tokens {f.max_tokens} removed the last {n}",
    }[name]
    return f"nothing left to write: {why}, of {read} conversations read; loosen that filter"


def _range_text(steps: list[int]) -> str:
    return "none" if not steps else f"{steps[0]}" if len(steps) == 1 else f"{steps[0]} to {steps[-1]}"


def _steps_text(steps: tuple[int | None, int | None] | None) -> str:
    lo, hi = steps or (None, None)
    return f"{'' if lo is None else lo}:{'' if hi is None else hi}"


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """``A:B`` (either side may be empty) or ``N`` as an inclusive step range."""
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            return int(lo), int(lo)
        return (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise CurationError(f"--steps takes A:B, A: or :B (training steps, 1-based), got {text!r}") from None


# ------------------------------------------------------------------------------------------ messages


def _tool_call_key(call: dict[str, Any]) -> tuple[str, str]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return str(fn.get("name")), json.dumps(args, sort_keys=True)


def _same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``b`` (as a client sent it back) is the message ``a`` (as recorded): role, text, tool calls
    by name and arguments (their JSON re-serialised by the client or not), the tool result's call id."""
    return (
        a.get("role") == b.get("role")
        and (a.get("content") or "") == (b.get("content") or "")
        and [_tool_call_key(c) for c in a.get("tool_calls") or []]
        == [_tool_call_key(c) for c in b.get("tool_calls") or []]
        and a.get("tool_call_id") == b.get("tool_call_id")
    )


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as OpenAI sends them: JSON text (a dict, the Hugging Face form, is encoded)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message in the OpenAI chat form: role, content, and the tool fields it uses."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{i}",
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": _arguments_text(c["function"].get("arguments", "{}")),
                },
            }
            for i, c in enumerate(message["tool_calls"])
        ]
    if message["role"] == "tool":
        out.update({k: message[k] for k in ("tool_call_id", "name") if message.get(k) is not None})
    return out


@dataclass
class Call:
    """One model call as a source recorded it: the messages shown, the reply, the sampled tokens (None:
    not recorded) and the tools offered."""

    messages: list[dict[str, Any]]
    reply: dict[str, Any]
    tokens: int | None
    tools: list[dict[str, Any]] | None = None


@dataclass
class _Open:
    messages: list[dict[str, Any]]
    tokens: int | None
    tools: list[dict[str, Any]] | None


def assemble(
    calls: list[Call], tool_parser: str = "hermes"
) -> list[tuple[list[dict], int | None, list | None]]:
    """One role's calls (in call order) as conversations ``(messages, response_tokens, tools)``: a call
    whose messages start with an earlier conversation's messages continues it (the newest such one),
    any other call starts a new one. Replies written as text tool calls (a native workflow's ReAct turns)
    are parsed with ``tool_parser`` into OpenAI ``tool_calls`` (``"none"`` keeps the text)."""
    open_: list[_Open] = []
    for call in calls:
        shown = call.messages
        target = next(
            (
                c
                for c in reversed(open_)
                if len(shown) >= len(c.messages) and all(map(_same_message, c.messages, shown))
            ),
            None,
        )
        grown = [*shown, call.reply]
        if target is None:
            open_.append(_Open(grown, call.tokens, call.tools))
        else:
            target.messages = grown
            target.tokens = (
                None if target.tokens is None or call.tokens is None else target.tokens + call.tokens
            )
            target.tools = call.tools or target.tools
    parser = get_tool_parser(tool_parser, id_seed=0)
    return [
        (_with_tool_calls([clean_message(m) for m in c.messages], parser), c.tokens, c.tools) for c in open_
    ]


def _with_tool_calls(messages: list[dict[str, Any]], parser: ToolParser) -> list[dict[str, Any]]:
    """Assistant turns whose text holds tool calls, as OpenAI ``tool_calls``: the ids are those of the tool
    results that follow (in order); a turn whose calls do not parse cleanly, or do not match the results
    that follow, keeps its text."""
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or m.get("tool_calls") or not m["content"]:
            continue
        parsed = parser.parse(m["content"])
        if not parsed.tool_calls or parsed.errors:
            continue
        results = []
        for later in messages[i + 1 :]:
            if later["role"] != "tool":
                break
            results.append(later.get("tool_call_id"))
        if results and len(results) != len(parsed.tool_calls):
            continue
        calls = [c.to_openai() for c in parsed.tool_calls]
        for call, call_id in zip(calls, results):
            if call_id:
                call["id"] = call_id
        messages[i] = {"role": "assistant", "content": parsed.content or "", "tool_calls": calls}
    return messages


# ------------------------------------------------------------------------------------------ output


def write_messages_jsonl(conversations: list[Conversation], path: str | os.PathLike[str]) -> Path:
    """Write one ``messages`` row per conversation to ``path`` (replaced whole, via a temporary file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        for conv in conversations:
            fh.write(json.dumps(conv.row(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
