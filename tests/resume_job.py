"""The training job ``test_resume.py`` runs, killed and resumed: ``python tests/resume_job.py MODEL RUNS [k=v ...]``.

A LoRA GRPO run on the tiny model with a reward the random model earns about half the time (the parity
of its first token id), so every step has groups with signal and really updates the adapter.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from rllm.engine.context import RolloutContext
from rllm.trainer.agent_trainer import AgentTrainer, TrainResult
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

TASKS = [{"task_id": f"t{i}", "question": f"Say something about the number {i}."} for i in range(6)]


async def parity_workflow(task: dict[str, Any], ctx: RolloutContext) -> float:
    completion = await ctx.chat([{"role": "user", "content": task["question"]}])
    return float(completion.completion_ids[0] % 2 == 0)


def run(model_dir: str, run_dir: str, *overrides: str) -> TrainResult:
    cfg = load_config(TrainConfig, None, [
        f"model.path={model_dir}", f"trainer.run_dir={run_dir}", "trainer.name=job",
        "trainer.steps=4", "trainer.checkpoint_every=2", "trainer.threads=1", "trainer.loggers=[jsonl]",
        "trainer.plot=false", "eval.before=false", "eval.after=false", "backend.device=cpu",
        "lora.rank=4", "lora.alpha=8", "optim.lr=0.01", "optim.schedule=cosine",
        "rollout.batch_size=2", "rollout.group_size=4", "rollout.max_tokens=4",
        *overrides,
    ])
    trainer = AgentTrainer(cfg, workflow=parity_workflow, train_tasks=TASKS, test_tasks=TASKS[:1])
    return trainer.train()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    run(sys.argv[1], sys.argv[2], *sys.argv[3:])
    print(f"finished {Path(sys.argv[2]) / 'job'}")
