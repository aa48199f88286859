"""The ``tool_call`` reward: the tool calls a reply makes equal the ground truth's, names and arguments.

``task["ground_truth"]`` is the list of expected calls, ``[{"name": "get_weather", "arguments": {"city":
"Paris"}}, ...]`` (a single call may be given as one object, and the whole as a JSON string). Calls are
read from the reply (after any think block), first match wins:

1. every ``<tool_call>...</tool_call>`` block (Hermes / Qwen style), each one call or a list;
2. the last fenced code block;
3. the whole reply, else the span from its first ``[`` or ``{`` to its last ``]`` or ``}``.

Each must parse as JSON: an object ``{"name", "arguments"}`` (``arguments`` may be a JSON string, as in
OpenAI's format; ``{"function": {...}}`` wrappers and ``parameters`` for ``arguments`` are accepted) or a
list of them. 1.0 when the calls are the expected ones as a multiset (order is free, a call made twice
counts twice), arguments compared as JSON values (``1`` equals ``1.0``); else 0.0. BFCL's checker also
accepts alternative values listed per argument; this reward compares against one exact value.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from rllm.rewards.text import strip_thinking
from rllm.types import Outcome

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```[\w+.-]*[^\n]*\n(.*?)```", re.DOTALL)


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _call(obj: Any) -> tuple[str, str] | None:
    """(name, canonical JSON of the arguments) of one call object, or None if it is not a call."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return name, json.dumps(_canonical(args), sort_keys=True, ensure_ascii=False)


def _calls(value: Any) -> list[tuple[str, str]] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call(item) for item in items]
    return None if not calls or any(c is None for c in calls) else calls  # type: ignore[return-value]


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def extract_tool_calls(response: str) -> list[tuple[str, str]] | None:
    """The calls a reply makes, as (name, canonical arguments JSON); None when it makes none readably."""
    text = strip_thinking(response)
    if text is None:
        return None
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        found: list[tuple[str, str]] = []
        for block in blocks:
            calls = _calls(_parse(block.strip()))
            if calls is None:
                return None
            found += calls
        return found
    fences = _FENCE.findall(text)
    candidates = [fences[-1]] if fences else [text]
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    ends = [i for i in (text.rfind("]"), text.rfind("}")) if i >= 0]
    if not fences and starts and ends:
        candidates.append(text[min(starts) : max(ends) + 1])
    for candidate in candidates:
        calls = _calls(_parse(candidate.strip()))
        if calls is not None:
            return calls
    return None


def _expected(task: dict[str, Any]) -> list[tuple[str, str]]:
    truth = task.get("ground_truth")
    calls = _calls(_parse(truth) if isinstance(truth, str) else truth)
    if calls is None:
        raise ValueError(f"tool_call task {task.get('task_id', '?')!r}: {ground_truth_problem(task)}")
    return calls


def ground_truth_problem(task: dict[str, Any]) -> str | None:
    """Why ``tool_call`` cannot grade ``task`` (None when it can)."""
    truth = task.get("ground_truth")
    if _calls(_parse(truth) if isinstance(truth, str) else truth) is not None:
        return None
    return (
        f"ground_truth {truth!r:.80} is not a list of calls: give "
        '[{"name": "TOOL", "arguments": {...}}, ...] (arguments a JSON object)'
    )


def tool_call_reward(task: dict[str, Any], response: str) -> Outcome:
    """1.0 when the reply's tool calls are exactly the expected ones (see the module docstring)."""
    expected = Counter(_expected(task))
    made = extract_tool_calls(response if isinstance(response, str) else "")
    if made is None:
        return Outcome(reward=0.0, is_correct=False, info={"reason": "no_calls"})
    got = Counter(made)
    correct = got == expected
    info = {
        "reason": "correct" if correct else "wrong",
        "calls": [name for name, _ in made],
        "missing": [name for name, _ in (expected - got).elements()],
        "unexpected": [name for name, _ in (got - expected).elements()],
    }
    return Outcome(reward=float(correct), is_correct=correct, info=info)
