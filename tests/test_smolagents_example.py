"""examples/smolagents_agent: smolagents' ToolCallingAgent, unchanged (OpenAIServerModel, tool_choice
"required" on every call), against a real gateway on loopback and trained through it. Skipped where the
`smolagents` extra is not installed (CI's extras tier installs it and checks the import first)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("smolagents")

from example_support import load_example, run_scripted, step_records, tiny_train_overrides
from transformers import AutoTokenizer

from rllm.tool_calls import format_tool_call_text

# Under tool_choice "required" the gateway holds the whole reply to calls of the agent's tools (a
# grammar); the scripted engine runs each reply through that grammar, which must accept it.
CALCULATE = format_tool_call_text("calculate", {"expression": "23 * 45"})
ANSWER = format_tool_call_text("final_answer", {"answer": "1035"})


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("smolagents_agent")


def test_tool_calling_agent_runs_unchanged_with_forced_calls(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, traces = run_scripted(
        example, tokenizer, [CALCULATE, ANSWER], tmp_path / "t.db", max_tokens=48
    )
    assert not episode.failed, episode.error
    assert episode.info["output"] == "1035" and episode.reward == 1.0 and episode.is_correct
    assert episode.metrics["signal/calculator_calls"] == 1

    # smolagents asked for a tool call every time; the gateway forced the opening and the model's
    # continuation was parsed into the call smolagents ran (the calculator's result is in call 2's prompt).
    t1 = traces[0]
    assert [t.request["tool_choice"] for t in traces] == ["required", "required"]
    # One call per reply (the example sends parallel_tool_calls=False): after the call the grammar allows
    # only the end of sequence, no second call for max_tokens to cut mid-way.
    matcher = engine.constraints[0].start()
    for t in tokenizer(CALCULATE, add_special_tokens=False)["input_ids"]:
        matcher.advance(t)
    allowed = matcher.allowed(len(tokenizer))
    assert allowed[tokenizer.eos_token_id] and sum(bool(x) for x in allowed) == 1
    assert [t.response_message["tool_calls"][0]["function"]["name"] for t in traces] == [
        "calculate",
        "final_answer",
    ]
    assert json.loads(t1.response_message["tool_calls"][0]["function"]["arguments"]) == {
        "expression": "23 * 45"
    }
    assert all(t.finish_reason == "tool_calls" for t in traces)
    assert "Observation:\n1035" in tokenizer.decode(engine.calls[1][0])
    # Every call was constrained (a grammar per call); the call's fixed text and the end of sequence
    # after it were forced (mask 0, logged at logprob 0), the tool's name and its arguments were chosen.
    assert all(c is not None for c in engine.constraints)
    steps = episode.trajectories[0].steps
    assert len(steps) == 2  # smolagents re-renders its history as text, so each call is its own step
    for step, trace in zip(steps, traces):
        mask = trace.completion_mask
        assert step.response_ids == trace.completion_token_ids and step.response_mask == mask
        assert mask[0] == 0 and 1 in mask
        assert all(lp == 0.0 for lp, m in zip(step.logprobs, mask) if m == 0)
        assert all(lp == -0.5 for lp, m in zip(step.logprobs, mask) if m == 1)
    assert episode.trajectories[0].reward == 1.0


def test_a_calculator_call_on_the_question_earns_the_shaping_reward(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A right calculator call followed by a wrong final answer earns CALL_REWARD, not 1, and is not
    correct; a call on other numbers earns nothing."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    wrong = format_tool_call_text("final_answer", {"answer": "999"})
    episode, _engine, _traces = run_scripted(
        example, tokenizer, [CALCULATE, wrong], tmp_path / "a.db", max_tokens=48
    )
    assert episode.reward == example.CALL_REWARD == 0.25 and not episode.is_correct
    assert episode.metrics["signal/copied_operands"] == 1.0
    other = format_tool_call_text("calculate", {"expression": "23 * 46"})
    episode, _engine, _traces = run_scripted(
        example, tokenizer, [other, wrong], tmp_path / "b.db", max_tokens=48
    )
    assert episode.reward == 0.0 and episode.metrics["signal/copied_operands"] == 0.0


def test_calculator_evaluates_arithmetic_only(example: ModuleType) -> None:
    calculate = example.build_agent.__globals__["calculate"]
    assert calculate(expression="(12 + 3) * -4 / 8") == "-7.5"
    assert calculate(expression="347*29") == "10063"
    for bad in ("2**100", "__import__('os')", "x + 1", "1/0", "1 +"):
        assert calculate(expression=bad).startswith("error:")


def test_example_trains_two_steps_on_the_tiny_model(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The example's main() end to end on a tiny random model: it never writes a usable call, so there is
    no reward signal, but rollouts through smolagents, forcing, scoring, eval and logging all run."""
    result = example.main(tiny_train_overrides(tiny_model_dir, tmp_path, max_tokens=24))
    steps = step_records(result.run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["episodes"] == 4 and r["episodes/failed"] == 0 for r in steps)
    assert all(r["assembly/calls"] >= 1 for r in steps)
    assert result.initial_accuracy is not None and result.final_accuracy is not None
