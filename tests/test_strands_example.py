"""examples/strands_agent: a real Strands Agents agent (its OpenAI provider, a `@tool`, `invoke_async`)
trained through the gateway's chat completions.

Strands' OpenAI provider pins openai<3, so it lives in .venv-strands (bash scripts/setup_strands.sh) and this
runs as `.venv-strands/bin/python -m pytest tests/test_strands_example.py`. In .venv (no strands) the tests
skip; when $RLLM_TEST_EXTRAS names `strands` (CI's strands tier) a missing strands fails instead."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

if "strands" in os.environ.get("RLLM_TEST_EXTRAS", "").split(","):
    import strands  # noqa: F401  (an ImportError here fails the run: CI asked for the extra)
else:
    pytest.importorskip("strands")

from transformers import AutoTokenizer

from rllm.engine.workflow_engine import WorkflowEngine
from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import Completion, SamplingParams
from rllm.sdk import GatewayWorkflow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "strands_agent"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "23*45"}}\n</tool_call>'
TASK = {"task_id": "mul-23-45", "question": "What is 23 * 45?", "ground_truth": "1035"}


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """examples/strands_agent/train.py as a module. It imports its neighbour as `agent`, a name other
    examples use too, so a foreign `agent` module is set aside while it loads and put back afterwards."""
    saved_agent, saved_path = sys.modules.pop("agent", None), list(sys.path)
    spec = importlib.util.spec_from_file_location("strands_example_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("agent", None)
    if saved_agent is not None:
        sys.modules["agent"] = saved_agent
    sys.path[:] = saved_path
    yield module


class ScriptedTurnsEngine:
    """FAKE engine: the k-th call gets the k-th scripted reply (real tokenizer, eos appended), because a
    tiny random model never writes a tool call. The gateway's chat route (streaming, as Strands asks),
    renderer, tool parser, the `openai` client, Strands' agent loop and the tool around it are all real."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.weight_version = tokenizer, list(replies), 1
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        reply = self.replies[len(self.prompts)]
        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.5] * len(ids),
                text=reply,
                finish_reason="stop",
                weight_version=1,
            )
        ]


def _run_scripted(
    example: ModuleType, tokenizer: Any, replies: list[str], db: Path, tasks: list[dict] | None = None
) -> tuple[list, ScriptedTurnsEngine, TraceStore]:
    engine = ScriptedTurnsEngine(tokenizer, replies)
    with TraceStore(db) as store, GatewayServer(create_app(engine, store, model_name="tiny")) as srv:
        workflow = GatewayWorkflow(example.calculator_agent, example.grade, gateway_url=srv.url, model="tiny")
        runner = WorkflowEngine(
            workflow, engine, SamplingParams(temperature=1.0, max_tokens=96, seed=3), show_progress=False
        )
        episodes = asyncio.run(runner.run_tasks(tasks or [TASK]))
        traces = [store.list(episode.id) for episode in episodes]
    return episodes, engine, traces


def test_tool_call_and_answer_merge_into_one_masked_sequence(
    example: ModuleType, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    (episode,), engine, (traces,) = _run_scripted(example, tokenizer, [CALL, "1035"], tmp_path / "t.db")
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
    (episode,), engine, _ = _run_scripted(example, tokenizer, [wrong, "1035"], tmp_path / "a.db")
    assert not episode.failed, episode.error
    assert "Unknown tool: calculator" in tokenizer.decode(engine.prompts[1])
    assert episode.metrics["signal/tool_calls"] == 1 and episode.metrics["signal/tool_errors"] == 1
    assert episode.metrics["signal/used_tool"] == 0 and episode.reward == 1.0  # right, without the tool

    (episode,), engine, _ = _run_scripted(example, tokenizer, [CALL] * 4, tmp_path / "b.db")
    assert not episode.failed, episode.error
    assert len(engine.prompts) == 3 and episode.info["output"] == "" and episode.reward == 0.0


def test_concurrent_episodes_all_finish(example: ModuleType, tiny_model_dir: Path, tmp_path: Path) -> None:
    """32 episodes in flight at once (the held-out eval's size) through one gateway: none fails."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tasks = [{**TASK, "task_id": f"t{i}"} for i in range(32)]
    episodes, engine, traces = _run_scripted(example, tokenizer, ["1035"] * 32, tmp_path / "c.db", tasks)
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
    result = example.main(
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={tmp_path}",
            "trainer.steps=2",
            "trainer.plot=false",
            "lora.enabled=false",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "eval.max_tokens=8",
            "data.train_size=8",
            "data.test_size=2",
        ]
    )
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["episodes"] == 4 and r["episodes/failed"] == 0 for r in steps)
    assert all(r["assembly/calls"] >= 1 for r in steps)
    assert all("signal/used_tool" in r for r in steps)
    assert result.initial_accuracy is not None and result.final_accuracy is not None
