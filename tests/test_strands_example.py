"""examples/strands_agent: a real Strands Agents agent (its OpenAI provider, a `@tool`, `invoke_async`)
trained through the gateway's chat completions.

Strands' OpenAI provider pins openai<3, so it lives in .venv-strands (bash scripts/setup_strands.sh) and this
runs as `.venv-strands/bin/python -m pytest tests/test_strands_example.py`. In .venv (no strands) the tests
skip; when $RLLM_TEST_EXTRAS names `strands` (CI's strands tier) a missing strands fails instead."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from ci_support import require_import
from example_support import (
    TASK,
    load_example,
    run_scripted,
    run_scripted_tasks,
    step_records,
    tiny_train_overrides,
)
from transformers import AutoTokenizer

require_import("strands", "bash scripts/setup_strands.sh", extra="strands")

CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "23*45"}}\n</tool_call>'


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("strands_agent")


def test_tool_call_and_answer_merge_into_one_masked_sequence(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, traces = run_scripted(example, tokenizer, [CALL, "1035"], tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert episode.info["output"] == "1035" and episode.reward == 1.0 and episode.is_correct
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/used_tool"] == 1
    assert episode.metrics["signal/tool_errors"] == 0

    # Strands called chat completions (streaming, its default); the calculator really ran and its result
    # went back.
    t1, t2 = traces
    assert t1.endpoint == t2.endpoint == "chat.completions"
    assert t1.response_message["tool_calls"][0]["function"]["name"] == "calculate"
    second_prompt = tokenizer.decode(engine.prompts[1])
    assert "<tool_response>\n1035\n</tool_response>" in second_prompt
    # The system prompt and the worked examples (Strands messages) come first.
    assert t1.request["messages"][0] == {
        "role": "system",
        "content": example.build_agent.__globals__["SYSTEM_PROMPT"],
    }
    assert second_prompt.index("What is 12 * 34?") < second_prompt.index("What is 23 * 45?")
    assert "<tool_response>\n43602\n</tool_response>" in second_prompt  # the second example's tool result

    # Both model turns form one sequence; the tool result between them is masked out.
    (step,) = episode.trajectories[0].steps
    assert episode.metrics["assembly/merged_calls"] == 1 and episode.metrics["assembly/drift_splits"] == 0
    n1, n2 = len(t1.completion_token_ids), len(t2.completion_token_ids)
    between = t2.prompt_token_ids[len(t1.prompt_token_ids) + n1 :]
    assert step.response_ids == t1.completion_token_ids + between + t2.completion_token_ids
    assert step.response_mask == [1] * n1 + [0] * len(between) + [1] * n2
    assert "1035" in tokenizer.decode(between)


def test_unknown_tool_is_an_error_result_and_runaway_calls_end_without_an_answer(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Strands answers a call to a tool the agent lacks with "Unknown tool" (counted as a tool error) and
    stops after max_turns model calls: graded 0, not failed."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    wrong = CALL.replace('"calculate"', '"calculator"')
    episode, engine, _ = run_scripted(example, tokenizer, [wrong, "1035"], tmp_path / "a.db")
    assert not episode.failed, episode.error
    assert "Unknown tool: calculator" in tokenizer.decode(engine.prompts[1])
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/tool_errors"] == 1
    assert episode.metrics["signal/used_tool"] == 0 and episode.reward == 1.0  # right, without the tool

    episode, engine, _ = run_scripted(example, tokenizer, [CALL] * 4, tmp_path / "b.db")
    assert not episode.failed, episode.error
    assert len(engine.prompts) == 3 and episode.info["output"] == "" and episode.reward == 0.0


def test_concurrent_episodes_all_finish(example: ModuleType, tiny_model_dir: Path, tmp_path: Path) -> None:
    """32 episodes in flight at once (the held-out eval's size) through one gateway: none fails."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tasks = [{**TASK, "task_id": f"t{i}"} for i in range(32)]
    episodes, engine, traces = run_scripted_tasks(example, tokenizer, ["1035"] * 32, tmp_path / "c.db", tasks)
    assert [e.error for e in episodes if e.failed] == []
    assert len(engine.prompts) == 32 and all(len(t) == 1 for t in traces)
    assert all(e.info["output"] == "1035" for e in episodes)


def test_calculator_evaluates_arithmetic_only(example: ModuleType) -> None:
    calculate = example.build_agent.__globals__["calculate"]  # a Strands tool, callable as the function
    assert calculate.tool_name == "calculate"
    assert calculate(expression="(12 + 3) * -4 / 8") == "-7.5" and calculate(expression="347*29") == "10063"
    for bad in ("2**100", "__import__('os')", "x + 1", "1/0", "1 +", "1" * 201):
        assert calculate(expression=bad).startswith("error:")


def test_example_trains_two_steps_on_the_tiny_model(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The example's main() end to end on a tiny random model: no reward signal (it never calls the tool),
    but rollouts through Strands, scoring, eval and logging all run."""
    result = example.main(tiny_train_overrides(tiny_model_dir, tmp_path))
    steps = step_records(result.run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["episodes"] == 4 and r["episodes/failed"] == 0 for r in steps)
    assert all(r["assembly/calls"] >= 1 for r in steps)
    assert all("signal/used_tool" in r for r in steps)
    assert result.initial_accuracy is not None and result.final_accuracy is not None
