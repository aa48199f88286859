"""The ReAct tool agent on the tiny model: tool calls run and their results go back to the model, every
kind of tool failure becomes an observation and a counted metric, and turns train as one masked row."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from workflow_support import ScriptedEngine, nth_reply, run_episodes

from rllm.algorithms.transforms import build_train_batch, compute_advantages, group_episodes
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.tools.builtin import calculator
from rllm.tools.tool import ToolRegistry, tool
from rllm.types import TerminationReason
from rllm.workflows.tool_agent import ToolAgentWorkflow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=48, seed=0)


@tool(timeout_s=0.3)
def slow(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: how long to sleep.
    """
    time.sleep(seconds)
    return "done"


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _run(engine: Any, workflow: Any, tasks: list[dict], group_size: int = 1) -> list:
    return run_episodes(engine, workflow, tasks, SAMPLING, group_size)


TASK = {"task_id": "m", "question": "What is 12 * 34? Answer with just the number.", "ground_truth": "408"}


def test_a_tool_call_runs_and_its_result_reaches_the_model(engine: LocalEngine) -> None:
    scripted = ScriptedEngine(engine, nth_reply([call("calculator", expression="12 * 34"), "408"]))
    workflow = ToolAgentWorkflow([calculator], system_prompt="Use the calculator.", max_turns=3)
    (ep,) = _run(scripted, workflow, [TASK])
    assert ep.termination_reason is TerminationReason.ENV_DONE
    assert ep.is_correct and ep.reward == 1.0
    assert ep.metrics["tools/calls"] == 1 and ep.metrics["tools/ok"] == 1 and ep.metrics["tools/used"] == 1
    assert ep.metrics["agent/turns"] == 2 and ep.metrics["agent/answered"] == 1
    # the tool list is in the first prompt; the result is in the second
    assert (
        '"name": "calculator"' in scripted.prompts[0]
        and "<tool_response>\n408\n</tool_response>" in scripted.prompts[1]
    )
    (traj,) = ep.trajectories
    assert [r["content"] for r in traj.steps[0].info["tool_results"]] == ["408"]
    # both turns train as one row; the tool's response is masked out
    groups = group_episodes([ep])
    compute_advantages(groups, "reinforce")
    (row,) = build_train_batch(groups).sequences
    trained = [i for i, m in zip(row.input_ids, row.loss_mask) if m]
    assert trained == traj.steps[0].response_ids + traj.steps[1].response_ids
    masked = engine.tokenizer.decode([i for i, m in zip(row.input_ids, row.loss_mask) if not m])
    assert "<tool_response>\n408\n</tool_response>" in masked


@pytest.mark.parametrize(
    ("reply", "kind", "seen"),
    [
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}\n</tool_call>',
            "malformed",
            "not valid JSON",
        ),
        (call("weather", city="Paris"), "unknown_tool", "unknown tool 'weather'"),
        (call("calculator", expr="1+1"), "invalid_arguments", "expression"),
        (call("divide", a=1, b=0), "exception", "ZeroDivisionError"),
        (call("slow", seconds=2), "timeout", "timed out"),
        (call("calculator", expression="__import__('os')"), "exception", "Error"),
    ],
)
def test_every_tool_failure_is_an_observation_and_a_counted_metric(
    engine: LocalEngine,
    reply: str,
    kind: str,
    seen: str,
) -> None:
    scripted = ScriptedEngine(engine, nth_reply([reply, "I do not know."]))
    workflow = ToolAgentWorkflow(ToolRegistry([calculator, divide, slow]), max_turns=3)
    episodes = _run(scripted, workflow, [TASK, {**TASK, "task_id": "other"}])
    for ep in episodes:  # the episode goes on; nothing aborts the batch
        assert not ep.failed and ep.termination_reason is TerminationReason.ENV_DONE
        assert ep.metrics[f"tools/errors/{kind}"] == 1 and ep.metrics["tools/ok"] == 0
        assert ep.metrics["tools/used"] == 0 and ep.reward == 0.0
    second_turns = [p for p in scripted.prompts if p.count("<|im_start|>assistant") == 2]
    assert len(second_turns) == 2 and all(
        seen.lower() in p.lower() for p in second_turns
    )  # the model reads it


def test_turn_limit_and_the_tiny_models_own_replies(engine: LocalEngine) -> None:
    scripted = ScriptedEngine(engine, nth_reply([call("calculator", expression="2*3")] * 2))
    (ep,) = _run(scripted, ToolAgentWorkflow([calculator], max_turns=2), [TASK])
    assert ep.termination_reason is TerminationReason.MAX_TURNS and ep.metrics["agent/answered"] == 0
    assert ep.metrics["tools/calls"] == 2
    # The random tiny model: whatever it writes, the episodes end cleanly with counted metrics.
    episodes = _run(engine, ToolAgentWorkflow([calculator], max_turns=2), [TASK], group_size=3)
    for ep in episodes:
        assert not ep.failed and "tools/calls" in ep.metrics and 1 <= ep.metrics["agent/turns"] <= 2


def test_a_tool_agent_needs_tools_and_turns() -> None:
    with pytest.raises(ValueError, match="at least one tool"):
        ToolAgentWorkflow([])
    with pytest.raises(ValueError, match="max_turns"):
        ToolAgentWorkflow([calculator], max_turns=0)
