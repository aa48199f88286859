"""One event loop for the whole run: agent code that caches an async client across episodes and steps
(LangChain's per-URL client cache, a module-level ``AsyncOpenAI``) works unchanged.

An ``httpx.AsyncClient`` (under ``openai.AsyncOpenAI``) belongs to the event loop it first connected on;
were each rollout phase its own ``asyncio.run``, the cached client's next call, in the next phase, would
fail on a closed loop.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest

import rllm
from rllm.sdk.decorators import AgentConfig
from rllm.trainer.agent_trainer import AgentTrainer

# The module-level cache agent code keeps: one client, made on first use, never closed by the agent.
_CACHE: dict[str, openai.AsyncOpenAI] = {}
_LOOPS: set[int] = set()


@rllm.rollout
async def cached_client_agent(task: dict, config: AgentConfig) -> str:
    _LOOPS.add(id(asyncio.get_running_loop()))
    client = _CACHE.get("client")
    if client is None:
        client = _CACHE["client"] = openai.AsyncOpenAI(base_url=config.base_url, api_key="x", max_retries=0)
    session = client.with_options(base_url=config.base_url)  # the same connection pool, this session's URL
    resp = await session.completions.create(model=config.model, prompt=task["prompt_ids"], max_tokens=1)
    return resp.choices[0].text.strip()


@rllm.evaluator
def correct(task: dict, episode: rllm.Episode) -> bool:
    return episode.info["output"] == task["task_id"].replace("q", "a")


@pytest.mark.parametrize("max_staleness", [0, 1], ids=["sync", "async"])
def test_a_cached_async_client_works_across_steps_and_evals(tmp_path: Path, max_staleness: int) -> None:
    """Also in async mode, where the steps run in a training thread and the producer samples the next step
    behind the embedded gateway meanwhile: still one loop."""
    from test_learning import TASKS, _config, make_tiny_vocab_model

    _CACHE.clear()
    _LOOPS.clear()
    cfg = _config(make_tiny_vocab_model(tmp_path / "model"), tmp_path / "runs", 3)
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"max_staleness": max_staleness})})
    result = AgentTrainer(
        cfg, workflow=cached_client_agent, evaluator=correct, train_tasks=TASKS, test_tasks=TASKS
    ).train()
    try:
        records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in records if "episodes/failed" in r]
        evals = [r for r in records if "eval/failed" in r]
        assert len(steps) == 3 and len(evals) == 2  # eval before, 3 steps, eval after: 5 phases
        assert [r["episodes/failed"] for r in steps] == [0.0, 0.0, 0.0]
        assert [r["eval/failed"] for r in evals] == [0.0, 0.0]
        assert len(_LOOPS) == 1  # every phase ran on the run's one loop
    finally:
        _CACHE.clear()
