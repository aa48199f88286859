"""examples/langgraph_agent: a real LangGraph ReAct agent (LangChain's ChatOpenAI, a calculator tool)
trained through the gateway. Skipped where the `langgraph` extra is not installed."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from example_support import load_example, run_scripted, step_records, tiny_train_overrides
from transformers import AutoTokenizer

CANONICAL_CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "23*45"}}\n</tool_call>'
COMPACT_CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "23*45"}}</tool_call>'


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("langgraph_agent")


def test_tool_call_and_answer_merge_into_one_masked_sequence(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, traces = run_scripted(
        example, tokenizer, [CANONICAL_CALL, "The answer is 1035."], tmp_path / "t.db"
    )
    assert not episode.failed, episode.error
    assert episode.info["output"] == "The answer is 1035."
    assert episode.reward == 1.0 and episode.is_correct
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/used_tool"] == 1
    assert episode.metrics["signal/tool_errors"] == 0

    # The tool really ran: its result is in the second call's prompt, after the call the model wrote.
    t1, t2 = traces
    assert t1.response_message["tool_calls"][0]["function"]["name"] == "calculate"
    second_prompt = tokenizer.decode(engine.prompts[1])
    assert "<tool_response>\n1035\n</tool_response>" in second_prompt
    assert second_prompt.index(CANONICAL_CALL) < second_prompt.index("<tool_response>\n1035")

    # Both model turns form one sequence; the tool result between them is masked out.
    (trajectory,) = episode.trajectories
    (step,) = trajectory.steps
    assert episode.metrics["assembly/merged_calls"] == 1 and episode.metrics["assembly/drift_splits"] == 0
    n1, n2 = len(t1.completion_token_ids), len(t2.completion_token_ids)
    between = t2.prompt_token_ids[len(t1.prompt_token_ids) + n1 :]
    assert step.prompt_ids == t1.prompt_token_ids
    assert step.response_ids == t1.completion_token_ids + between + t2.completion_token_ids
    assert step.response_mask == [1] * n1 + [0] * len(between) + [1] * n2
    assert "1035" in tokenizer.decode(between) and step.reward == 1.0


def test_call_the_template_rewrites_is_split_and_counted(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A call written without the newlines the Hermes format puts around its JSON is parsed all the same,
    but the history re-renders it canonically: not what the model sampled, so no merge across it."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, _ = run_scripted(example, tokenizer, [COMPACT_CALL, "1035"], tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert episode.reward == 1.0 and episode.metrics["signal/tool_calls"] == 1
    assert "<tool_response>\n1035\n</tool_response>" in tokenizer.decode(engine.prompts[1])
    assert episode.metrics["assembly/drift_splits"] == 1
    first, second = episode.trajectories[0].steps
    assert all(m == 1 for m in first.response_mask + second.response_mask) and second.info["drift_at"]


def test_model_that_never_calls_the_tool_gets_an_answer_and_no_reward(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, _ = run_scripted(example, tokenizer, ["It is 1000."], tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert len(engine.prompts) == 1 and episode.info["output"] == "It is 1000."
    assert episode.reward == 0.0 and episode.metrics["signal/tool_calls"] == 0


def test_agent_stops_after_its_last_model_turn(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A model that keeps calling the tool is cut off after three model turns, without an answer."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode, engine, _ = run_scripted(example, tokenizer, [CANONICAL_CALL] * 4, tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert len(engine.prompts) == 3 and episode.info["output"] == ""
    assert episode.reward == 0.0 and episode.metrics["signal/tool_calls"] == 2


def test_call_to_an_unknown_tool_is_answered_with_an_error(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    wrong = CANONICAL_CALL.replace('"calculate"', '"calculator"')
    episode, engine, _ = run_scripted(example, tokenizer, [wrong, "1035"], tmp_path / "t.db")
    assert not episode.failed, episode.error
    assert "is not a valid tool" in tokenizer.decode(engine.prompts[1])  # LangGraph's ToolNode said so
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/tool_errors"] == 1
    assert episode.metrics["signal/used_tool"] == 0


def test_calculator_evaluates_arithmetic_only(example: ModuleType) -> None:
    calculate = example.build_agent.__globals__["calculate"]
    assert calculate.invoke({"expression": "(12 + 3) * -4 / 8"}) == "-7.5"
    assert calculate.invoke({"expression": "347*29"}) == "10063"
    for bad in ("2**100", "__import__('os')", "x + 1", "1/0", "1 +"):
        assert calculate.invoke({"expression": bad}).startswith("error:")


def test_example_trains_two_steps_on_the_tiny_model(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The example's main() end to end on a tiny random model: it writes garbage and never calls the tool,
    so there is no reward signal, but rollouts, scoring, eval and logging run through LangGraph."""
    result = example.main(tiny_train_overrides(tiny_model_dir, tmp_path))
    steps = step_records(result.run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["episodes"] == 4 and r["episodes/failed"] == 0 for r in steps)
    assert all("signal/tool_calls" in r and r["assembly/calls"] >= 1 for r in steps)
    assert result.initial_accuracy is not None and result.final_accuracy is not None
