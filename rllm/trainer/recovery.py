"""What the trainer journals for exactly-once recovery and replay (``rllm.store.EpisodeJournal``).

Each finished episode is journaled as job ``r<round>:<index>`` of its step as it finishes; a resumed step
takes the jobs a killed run finished (``journaled_jobs``) and samples only the rest. After the update the
step's batch is summarised (``batch_summary``): its digests, the keys of the episodes it was made from, the
prepare metrics and the update's loss and gradient norm, which ``rllm replay`` recomputes and compares.
"""

from __future__ import annotations

from typing import Any

from rllm.algorithms.prepare import PreparedBatch, batch_digests
from rllm.runner.workflow_runner import task_id_of
from rllm.store import EpisodeJournal
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.types import Episode


def journaled_jobs(
    journal: EpisodeJournal | None, step: int, round: int, tasks: list[dict[str, Any]], group_size: int
) -> dict[int, Episode]:
    """The jobs of ``step``'s round ``round`` the journal already holds (a killed run finished them), by job
    index (job ``j`` is attempt ``j % group_size`` of ``tasks[j // group_size]``). Refused when one is of
    another task than its job's: the run's data or config changed since the kill."""
    if journal is None:
        return {}
    prefix = f"r{round}:"
    out: dict[int, Episode] = {}
    for key, episode in journal.episodes(step).items():
        if not key.startswith(prefix):
            continue
        index = int(key[len(prefix) :])
        task = tasks[index // group_size] if index < len(tasks) * group_size else None
        if task is None or task_id_of(task) != episode.task_id:
            raise UnsupportedConfigError(
                f"the journal {journal.path} holds job {key} of step {step} as task {episode.task_id}, but "
                "this run's job is another task: the data or rollout config changed since the run was "
                "killed; resume with the same config, or start a new trainer.name"
            )
        out[index] = episode
    return out


def batch_summary(
    step: int, prepared: PreparedBatch, keys: list[str], metrics: dict[str, float]
) -> dict[str, Any]:
    """What ``rllm replay`` checks of one step: the batch's digests (``batch_digests``), the job keys of
    its episodes in batch order, the prepare metrics, and from the step's ``metrics`` the update's
    ``train/*`` (loss and gradient norm; None when the step skipped its update)."""
    return {
        "step": step,
        "keys": keys,
        "digest": prepared.digest(),
        "digests": batch_digests(prepared.batch),
        "metrics": dict(prepared.metrics),
        "rows": len(prepared.batch) if prepared.batch is not None else 0,
        "empty": prepared.empty,
        "loss": metrics.get("train/loss"),
        "grad_norm": metrics.get("train/grad_norm"),
        "train_metrics": {k: v for k, v in metrics.items() if k.startswith("train/")},
    }
