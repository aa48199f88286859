"""examples/openai_agents_sdk: a real OpenAI Agents SDK agent (its default Responses model, a function tool,
`Runner.run`) trained through the gateway's /v1/responses. Skipped where the `openai-agents` extra is not
installed (CI's extras tier installs it and checks that `agents` imports before running this)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agents")

from example_support import load_example, run_scripted, step_records, tiny_train_overrides
from transformers import AutoTokenizer

CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "23*45"}}\n</tool_call>'


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("openai_agents_sdk")


def test_tool_call_and_answer_merge_into_one_masked_sequence(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, traces = run_scripted(example, tokenizer, [CALL, "1035"], tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert episode.info["output"] == "1035" and episode.reward == 1.0 and episode.is_correct
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/used_tool"] == 1

    # The SDK called the gateway's Responses API; the calculator really ran and its result went back.
    t1, t2 = traces
    assert t1.endpoint == t2.endpoint == "responses"
    assert t1.response_message["tool_calls"][0]["function"]["name"] == "calculate"
    second_prompt = tokenizer.decode(engine.prompts[1])
    assert "<tool_response>\n1035\n</tool_response>" in second_prompt
    # The SDK's instructions and the worked examples come first, as system message and chat turns.
    assert t1.request["messages"][0] == {
        "role": "system",
        "content": example.build_agent.__globals__["INSTRUCTIONS"],
    }
    assert second_prompt.index("What is 12 * 34?") < second_prompt.index("What is 23 * 45?")

    # Both model turns form one sequence; the tool result between them is masked out.
    (step,) = episode.trajectories[0].steps
    assert episode.metrics["assembly/merged_calls"] == 1 and episode.metrics["assembly/drift_splits"] == 0
    n1, n2 = len(t1.completion_token_ids), len(t2.completion_token_ids)
    between = t2.prompt_token_ids[len(t1.prompt_token_ids) + n1 :]
    assert step.response_ids == t1.completion_token_ids + between + t2.completion_token_ids
    # The SDK's function tools are strict: once the call opened, the grammar forced its fixed text (mask
    # 0 in turn 1); the answer after the tool result was free (all 1).
    assert t1.completion_mask is not None and 0 in t1.completion_mask and 1 in t1.completion_mask
    assert t2.sampled_mask == [1] * n2
    assert step.response_mask == t1.completion_mask + [0] * len(between) + [1] * n2
    assert "1035" in tokenizer.decode(between)


def test_runaway_calls_end_without_an_answer(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The SDK stops after max_turns: graded 0, not failed. (A call to a tool the agent lacks cannot
    happen here: the SDK's tools are strict, so the gateway's grammar only lets the model name them.)"""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, _ = run_scripted(example, tokenizer, [CALL] * 4, tmp_path / "b.db")
    assert not episode.failed, episode.error
    assert len(engine.prompts) == 3 and episode.info["output"] == "" and episode.reward == 0.0


def test_calculator_evaluates_arithmetic_only(example: ModuleType) -> None:
    from agents.tool_context import ToolContext  # the SDK's own way to invoke a function tool

    calculate = example.build_agent.__globals__["calculate"]

    def run(expression: str) -> str:
        args = json.dumps({"expression": expression})
        ctx = ToolContext(context=None, tool_name="calculate", tool_call_id="c1", tool_arguments=args)
        return asyncio.run(calculate.on_invoke_tool(ctx, args))

    assert run("(12 + 3) * -4 / 8") == "-7.5" and run("347*29") == "10063"
    for bad in ("2**100", "__import__('os')", "x + 1", "1/0", "1 +"):
        assert run(bad).startswith("error:")


def test_example_trains_two_steps_on_the_tiny_model(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The example's main() end to end on a tiny random model: no reward signal (it never calls the tool),
    but rollouts through the SDK, scoring, eval and logging all run."""
    result = example.main(tiny_train_overrides(tiny_model_dir, tmp_path))
    steps = step_records(result.run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["episodes"] == 4 and r["episodes/failed"] == 0 for r in steps)
    assert all(r["assembly/calls"] >= 1 for r in steps)
    assert result.initial_accuracy is not None and result.final_accuracy is not None
