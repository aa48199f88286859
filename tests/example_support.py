"""What the framework cookbooks' tests (tests/test_*_example.py) share: loading an example's train.py, a
scripted FAKE engine behind a real gateway, and the overrides that train an example on the tiny model.

Each example is a real agent (LangGraph, the OpenAI Agents SDK, smolagents, Strands) that only a model able to write
tool calls exercises; a tiny random model never does, hence the scripted engine. Everything around it is
real: the gateway on loopback, its renderer and tool parser, the framework's client and loop, the tools.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.sdk import GatewayWorkflow
from rllm.types import Episode, Trace

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASK = {"task_id": "mul-23-45", "question": "What is 23 * 45?", "ground_truth": "1035"}


def load_example(name: str) -> ModuleType:
    """examples/<name>/train.py as a module. It imports its neighbour as `agent`, a name other examples
    use too, so a foreign `agent` module is set aside while it loads and put back afterwards."""
    saved_agent, saved_path = sys.modules.pop("agent", None), list(sys.path)
    spec = importlib.util.spec_from_file_location(f"{name}_example_train", EXAMPLES / name / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("agent", None)
        if saved_agent is not None:
            sys.modules["agent"] = saved_agent
        sys.path[:] = saved_path
    return module


FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ScriptedTurnsEngine(EngineBase):
    """FAKE engine: the k-th call gets the k-th scripted reply (real tokenizer, eos appended), because a
    tiny random model never writes a tool call. Records each call's prompt ids and sampling params."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.weight_version = tokenizer, list(replies), 1
        self.calls: list[tuple[list[int], SamplingParams]] = []
        self.constraints: list[Any] = []  # the gateway's grammar per call (None: unconstrained)

    @property
    def prompts(self) -> list[list[int]]:
        return [prompt for prompt, _ in self.calls]

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, constraint: Any = None
    ) -> list[Completion]:
        self.constraints.append(constraint)
        if len(self.calls) >= len(self.replies):
            raise AssertionError(
                f"the agent made call {len(self.calls) + 1}; the test scripted only {len(self.replies)}"
            )
        reply = self.replies[len(self.calls)]
        self.calls.append((list(prompt_ids), params))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        counts = None
        if constraint is not None:  # the real grammar must accept the scripted reply, token by token
            matcher = constraint.start()
            for t in ids:
                assert matcher.allowed(len(self.tokenizer))[t], f"the grammar refuses {reply!r} at token {t}"
                matcher.advance(t)
            counts = matcher.allowed_counts
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.5] * len(ids),
                text=reply,
                finish_reason="stop",
                weight_version=1,
                allowed_counts=counts,
            )
        ]


def run_scripted_tasks(
    example: ModuleType,
    tokenizer: Any,
    replies: list[str],
    db: Path,
    tasks: list[dict[str, Any]],
    *,
    max_tokens: int = 96,
) -> tuple[list[Episode], ScriptedTurnsEngine, list[list[Trace]]]:
    """Run the example's flow and evaluator on ``tasks`` at once through a gateway over the fake engine
    replying ``replies`` in turn; the episodes, the engine (its recorded calls) and each session's traces."""
    engine = ScriptedTurnsEngine(tokenizer, replies)
    with TraceStore(db) as store, GatewayServer(create_app(engine, store, model_name="tiny")) as srv:
        workflow = GatewayWorkflow(example.calculator_agent, example.grade, gateway_url=srv.url, model="tiny")
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=3)
        runner = WorkflowRunner(workflow, engine, params, show_progress=False)
        episodes = asyncio.run(runner.run_tasks(tasks))
        traces = [store.list(episode.id) for episode in episodes]
    return episodes, engine, traces


def run_scripted(
    example: ModuleType, tokenizer: Any, replies: list[str], db: Path, *, max_tokens: int = 96
) -> tuple[Episode, ScriptedTurnsEngine, list[Trace]]:
    """:func:`run_scripted_tasks` on TASK alone: the episode, the engine and the session's traces."""
    (episode,), engine, (traces,) = run_scripted_tasks(
        example, tokenizer, replies, db, [TASK], max_tokens=max_tokens
    )
    return episode, engine, traces


def tiny_train_overrides(tiny_model_dir: Path, run_dir: Path, *, max_tokens: int = 8) -> list[str]:
    """An example's main() for two steps of 2 x 2 episodes on the tiny random model, fp32 on CPU."""
    return [
        f"model.path={tiny_model_dir}",
        f"trainer.run_dir={run_dir}",
        "trainer.steps=2",
        "trainer.plot=false",
        "lora.enabled=false",
        "backend.device=cpu",
        "backend.autocast=none",
        "inference.dtype=float32",
        "rollout.batch_size=2",
        "rollout.group_size=2",
        f"rollout.max_tokens={max_tokens}",
        f"eval.max_tokens={max_tokens}",
        "data.train_size=8",
        "data.test_size=2",
    ]


def step_records(run_dir: Path) -> list[dict[str, Any]]:
    """The per-step training records of a run's metrics.jsonl (those with a reward)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "reward/mean" in r]
