"""What an agent behind the gateway did with its tools, read from the conversations it sent the model.

An agent framework (LangGraph, the OpenAI Agents SDK ...) runs its tools itself; the gateway only sees each
result when the agent sends it back with its next model call, as a ``tool`` message (the Responses API's
``function_call_output`` items are recorded as such). So a tool's use is read from the recorded requests:
:func:`tool_use_signals` for one episode (an evaluator's signals), :func:`held_out_tool_use` for the
held-out evals of a whole run (the trainer's eval reports accuracy only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rllm.gateway.traces import TraceStore
from rllm.types import Episode

ERROR_PREFIXES = (
    # the cookbooks' calculators ("error: division by zero"), LangGraph's ToolNode ("Error: x is not a
    # valid tool")
    "error",
    # the Agents SDK's reply to arguments its tool cannot take (not JSON, a missing parameter)
    "an error occurred while running the tool",
    # Strands' reply to a call of a tool the agent lacks ("Unknown tool: NAME")
    "unknown tool",
)
"""How a tool result that is an error begins (compared in lower case)."""


def tool_results(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The tool results that follow the question (the last user message) in one model call's messages.

    Every model call sends the whole conversation so far, so these are the results of the tool calls that
    ran before that call; worked examples placed before the question are not counted.
    """
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [str(m.get("content") or "") for m in messages[last_user + 1 :] if m.get("role") == "tool"]


def tool_ran(result: str) -> bool:
    """Whether a tool result is the tool's answer, not one of the errors in :data:`ERROR_PREFIXES`."""
    return not result.strip().lower().startswith(ERROR_PREFIXES)


def tool_use_signals(episode: Episode) -> dict[str, float]:
    """``tool_calls`` (results the agent sent back), ``tool_errors`` (those that were errors) and
    ``used_tool`` (1.0 if a tool ran without an error) for one episode, from its last model call, which
    saw every tool result of the episode."""
    results = max(
        (tool_results(step.messages) for traj in episode.trajectories for step in traj.steps),
        key=len,
        default=[],
    )
    ran = sum(tool_ran(r) for r in results)
    return {"tool_calls": len(results), "tool_errors": len(results) - ran, "used_tool": float(ran > 0)}


def held_out_tool_use(traces_db: str | Path, n_test: int) -> tuple[float, float]:
    """The share of held-out episodes in which a tool ran without an error, in the first and the last eval.

    Reads a run's trace store (``run_dir/traces.db``): eval episodes are the sessions sampled greedily
    (temperature 0), the first ``n_test`` of them the eval before training, the last ``n_test`` the one
    after. ``(nan, nan)`` when the store holds fewer than two evals' worth (no eval before or after).
    """
    if n_test <= 0:
        raise ValueError(f"n_test must be the held-out split's size (> 0), got {n_test}")
    if not Path(traces_db).is_file():
        raise FileNotFoundError(f"no trace store at {traces_db}: pass a run's run_dir/traces.db")
    with TraceStore(traces_db) as store:
        used = []
        for session_id in store.sessions():
            info = store.session(session_id)
            if info is None or info.sampling.get("temperature") != 0.0:
                continue
            calls = [t.request.get("messages") or [] for t in store.list(session_id)]
            used.append(any(tool_ran(r) for messages in calls for r in tool_results(messages)))
    if len(used) < 2 * n_test:
        return float("nan"), float("nan")
    return sum(used[:n_test]) / n_test, sum(used[-n_test:]) / n_test
