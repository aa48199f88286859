"""Helpers shared by the vLLM pool tests: a few greedy prompts sampled through an engine, and the training
batch their traces make."""

from __future__ import annotations

import asyncio

from rllm.algorithms.transforms import TrajectoryGroup, build_train_batch
from rllm.inference.base import SamplingParams
from rllm.runner.assembly import assemble_steps
from rllm.trainer.vllm_pool import VLLMPoolEngine
from rllm.types import Episode, Trajectory

# As tests/slow/test_vllm.py: trainer (float32) vs vLLM (float32) logprobs of the same tokens, measured max
# |diff| ~5e-5 on this model; the bound leaves room for other CPUs' kernels.
LOGPROB_TOL = 2e-3
PROMPTS = ["Count from 1 to 9:", "The capital of France is", "Write a haiku about rain.", "2 + 2 ="]


def sample(engine: VLLMPoolEngine, tag: str, **params: object) -> list:
    async def run() -> list:
        sp = SamplingParams(max_tokens=12, temperature=0.0, **params)  # type: ignore[arg-type]
        prompts = [engine.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS]
        out = await asyncio.gather(
            *(engine.generate(ids, sp, session_id=f"{tag}-{i}") for i, ids in enumerate(prompts))
        )
        return [c for cs in out for c in cs]

    return asyncio.run(run())


def train_batch(engine: VLLMPoolEngine, tag: str):  # type: ignore[no-untyped-def]
    assert engine.trace_store is not None
    steps = [s for i in range(len(PROMPTS)) for s in assemble_steps(engine.trace_store.list(f"{tag}-{i}"))[0]]
    for k, s in enumerate(steps):
        s.advantage = 1.0 if k % 2 == 0 else -1.0
    episode = Episode(task_id="t", trajectories=[Trajectory(steps=steps)])
    return build_train_batch(
        [
            TrajectoryGroup(
                task_id="t", trajectory_name="default", members=[(episode, episode.trajectories[0])]
            )
        ],
        merge=False,
    )
