"""The training job ``test_resume.py`` runs, killed and resumed: ``python tests/resume_job.py MODEL RUNS [k=v ...]``.

A LoRA GRPO run on the tiny model with a reward the random model earns about half the time (the parity
of its first token id), so every step has groups with signal and really updates the adapter. 4 steps,
a checkpoint every 2; the run directory is ``RUNS/job`` and its run store ``RUNS/rllm.db``.

With ``RESUME_JOB_DIE_IN_CHECKPOINT=k`` in the environment the job SIGKILLs itself in the middle of
writing its step-k checkpoint: the backend's state (adapter, optimizer) is on disk in the checkpoint's
temporary directory, the loop state and the rename into place are not, and the metric lines (and run
store rows) of every step up to k are already written. That is the worst moment for a resume: steps
that were logged but never checkpointed, beside a half-written checkpoint.

With ``RESUME_JOB_DIE_IN=STAGE:k`` it SIGKILLs itself inside step ``k`` (the trainer's 0-based step index,
logged as step k+1) at STAGE: ``rollout`` (right after the step's 5th episode is journaled, the other 3
still being sampled), ``update`` (after the optimizer step, before anything is written) or ``sync`` (after
the new weights reached the engine, before the step is logged). These hooks live here, in the test job,
not in the library.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from run_support import tiny_run_config

from rllm.runner.context import RolloutContext
from rllm.store.journal import EpisodeJournal
from rllm.trainer import agent_trainer
from rllm.trainer.agent_trainer import AgentTrainer, TrainResult
from rllm.trainer.checkpoint import save_checkpoint

TASKS = [{"task_id": f"t{i}", "question": f"Say something about the number {i}."} for i in range(6)]
DIE_IN_CHECKPOINT = "RESUME_JOB_DIE_IN_CHECKPOINT"
DIE_IN = "RESUME_JOB_DIE_IN"
ROLLOUT_EPISODES_BEFORE_KILL = 5


async def parity_workflow(task: dict[str, Any], ctx: RolloutContext) -> float:
    completion = await ctx.chat([{"role": "user", "content": task["question"]}])
    return float(completion.completion_ids[0] % 2 == 0)


class _DiesAfterSavingState:
    """Stands in for the backend inside ``save_checkpoint``: saves the real state, then kills the process."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def save_state(self, path: Path) -> None:
        self._backend.save_state(path)
        logging.getLogger(__name__).info("state written to %s; dying before the checkpoint is complete", path)
        os.kill(os.getpid(), signal.SIGKILL)


def _die_in_checkpoint(die_at_step: int) -> None:
    """Make the trainer's step-``die_at_step`` checkpoint write end in SIGKILL (other steps save normally)."""

    def save(run_dir: Path, step: int, backend: Any, loop_state: dict[str, Any], keep: int) -> Path:
        if step == die_at_step:
            backend = _DiesAfterSavingState(backend)
        return save_checkpoint(run_dir, step, backend, loop_state, keep=keep)

    agent_trainer.save_checkpoint = save  # type: ignore[assignment]


def _die(where: str) -> None:
    logging.getLogger(__name__).info("dying %s", where)
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def _die_in(stage: str, step: int) -> None:
    """SIGKILL this process at ``stage`` of step ``step`` (see the module docstring)."""
    if stage == "rollout":
        record, journaled = EpisodeJournal.record, []

        def record_then_die(self: EpisodeJournal, s: int, key: str, episode: Any) -> bool:
            stored = record(self, s, key, episode)
            if s == step:
                journaled.append(key)
                if len(journaled) == ROLLOUT_EPISODES_BEFORE_KILL:
                    _die(f"in step {step}'s rollout after journaling {journaled}")
            return stored

        EpisodeJournal.record = record_then_die  # type: ignore[method-assign]
    elif stage == "update":
        from rllm.trainer.backends.local import LocalBackend

        optim_step = LocalBackend.optim_step

        def optim_step_then_die(self: LocalBackend) -> dict[str, float]:
            out = optim_step(self)
            if self.step == step + 1:
                _die(f"in step {step}'s update, after the optimizer step")
            return out

        LocalBackend.optim_step = optim_step_then_die  # type: ignore[method-assign]
    elif stage == "sync":
        sync = AgentTrainer._sync_weights

        def sync_then_die(self: AgentTrainer, when: str) -> None:
            sync(self, when)
            if when == f"step {step + 1}":
                _die(f"in step {step}'s weight sync, after the engine took the weights")

        AgentTrainer._sync_weights = sync_then_die  # type: ignore[method-assign]
    else:
        raise ValueError(f"{DIE_IN}={stage}:{step}: the stage is rollout, update or sync")


def run(model_dir: str, run_dir: str, *overrides: str) -> TrainResult:
    cfg = tiny_run_config(
        model_dir,
        run_dir,
        "job",
        f"trainer.store={Path(run_dir) / 'rllm.db'}",
        "trainer.steps=4",
        "trainer.checkpoint_every=2",
        "optim.lr=0.01",
        "optim.schedule=cosine",
        "rollout.max_tokens=4",
        # One row per decode batch: the local engine batches the rows that arrive within a few ms, so
        # under load the same rollout can be split into other batch shapes, whose logprobs (the loss's
        # old logprobs) differ in the last bits; the exact-weights checks need the same numbers each run.
        "inference.max_batch_rows=1",
        *overrides,
    )
    trainer = AgentTrainer(cfg, workflow=parity_workflow, train_tasks=TASKS, test_tasks=TASKS[:1])
    return trainer.train()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if os.environ.get(DIE_IN_CHECKPOINT):
        _die_in_checkpoint(int(os.environ[DIE_IN_CHECKPOINT]))
    if os.environ.get(DIE_IN):
        stage, _, at = os.environ[DIE_IN].partition(":")
        _die_in(stage, int(at))
    run(sys.argv[1], sys.argv[2], *sys.argv[3:])
    print(f"finished {Path(sys.argv[2]) / 'job'}")
