"""rllm.sdk.tool_use: a framework agent's tool use, read from the tool results it sent back to the model,
for one episode (an evaluator's signals) and for a run's held-out evals (from a real SQLite trace store)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from rllm.gateway.traces import SessionInfo, TraceStore
from rllm.sdk.tool_use import held_out_tool_use, tool_ran, tool_results, tool_use_signals
from rllm.types import Episode, Step, Trace, Trajectory

# A worked example (its tool result must not count) before the question, as the cookbooks send it.
EXAMPLE = [
    {"role": "system", "content": "Call the calculate tool."},
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "e1", "type": "function"}]},
    {"role": "tool", "tool_call_id": "e1", "content": "408"},
    {"role": "assistant", "content": "408"},
]
QUESTION = {"role": "user", "content": "What is 23 * 45?"}
CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]}


def _conversation(*results: str) -> list[dict[str, Any]]:
    """The messages of the model call after the agent ran its tool once per result."""
    turns: list[dict[str, Any]] = []
    for i, result in enumerate(results):
        turns += [CALL, {"role": "tool", "tool_call_id": f"c{i}", "content": result}]
    return [*EXAMPLE, QUESTION, *turns]


def test_tool_results_are_those_after_the_question() -> None:
    assert tool_results(_conversation()) == []
    assert tool_results(_conversation("1035")) == ["1035"]
    assert tool_results(_conversation("error: 1 +", "1035")) == ["error: 1 +", "1035"]
    assert tool_results([]) == []


@pytest.mark.parametrize(
    ("result", "ran"),
    [
        ("1035", True),
        ("-7.5", True),
        ("no errors here", True),
        ("error: division by zero", False),  # the cookbooks' calculators
        ("Error: calculator is not a valid tool, try one of [calculate].", False),  # LangGraph's ToolNode
        ("An error occurred while running the tool. Please try again.", False),  # the Agents SDK
        ("  ERROR: x", False),
    ],
)
def test_tool_ran_tells_answers_from_errors(result: str, ran: bool) -> None:
    assert tool_ran(result) is ran


def _episode(*calls: list[dict[str, Any]]) -> Episode:
    """An episode whose model calls were sent ``calls`` (one step each, as after a drift split)."""
    steps = [Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], messages=m) for m in calls]
    return Episode(task_id="t", trajectories=[Trajectory(steps=steps)])


def test_tool_use_signals_read_the_episode_last_model_call() -> None:
    assert tool_use_signals(_episode()) == {"tool_calls": 0, "tool_errors": 0, "used_tool": 0.0}
    assert tool_use_signals(_episode(_conversation())) == {
        "tool_calls": 0,
        "tool_errors": 0,
        "used_tool": 0.0,
    }
    episode = _episode(_conversation(), _conversation("error: 1 +"), _conversation("error: 1 +", "1035"))
    assert tool_use_signals(episode) == {"tool_calls": 2, "tool_errors": 1, "used_tool": 1.0}
    only_errors = _episode(_conversation("error: 1 +", "Error: calculator is not a valid tool"))
    assert tool_use_signals(only_errors) == {"tool_calls": 2, "tool_errors": 2, "used_tool": 0.0}


def _record(store: TraceStore, session: str, t: float, temperature: float, *calls: list[dict]) -> None:
    store.create_session(SessionInfo(session_id=session, created_at=t, sampling={"temperature": temperature}))
    store.add_many(
        Trace(
            session_id=session,
            request_id=f"{session}-{i}",
            created_at=t + 0.1 * i,
            endpoint="responses",
            request={"messages": messages},
            response_text="",
            prompt_token_ids=[1],
            completion_token_ids=[2],
            logprobs=[-0.1],
            latency_ms=1.0,
        )
        for i, messages in enumerate(calls)
    )


def test_held_out_tool_use_compares_the_first_and_last_greedy_evals(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        # eval before training (2 held-out episodes): the tool ran in neither
        _record(store, "before-0", 1.0, 0.0, _conversation())
        _record(store, "before-1", 2.0, 0.0, _conversation(), _conversation("error: 1 +"))
        # training episodes, sampled at temperature 0.7: they use the tool but are not evals
        for i in range(3):
            _record(store, f"train-{i}", 3.0 + i, 0.7, _conversation(), _conversation("1035"))
        # eval after training: the tool ran in one of the two
        _record(store, "after-0", 10.0, 0.0, _conversation(), _conversation("1035"))
        _record(store, "after-1", 11.0, 0.0, _conversation())
    assert held_out_tool_use(db, 2) == (0.0, 0.5)
    # fewer than two evals' worth of greedy sessions: not measured
    assert all(math.isnan(x) for x in held_out_tool_use(db, 3))


def test_held_out_tool_use_refuses_a_missing_store_or_split(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run_dir/traces.db"):
        held_out_tool_use(tmp_path / "nope.db", 2)
    with pytest.raises(ValueError, match="n_test"):
        held_out_tool_use(tmp_path / "nope.db", 0)
