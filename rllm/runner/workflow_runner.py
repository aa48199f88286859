"""Runs many agent episodes concurrently and turns each into an :class:`Episode`.

A *workflow* is any async callable ``workflow(task, ctx) -> Outcome | float | bool`` that talks to the
model through ``ctx`` (a :class:`RolloutContext`). The runner runs ``group_size`` episodes per task, at
most ``max_concurrency`` at a time, each under a wall-clock timeout, retrying failed ones up to
``retries`` times. An episode that still fails is kept with its termination reason and error: the
caller decides (through filters) what to train on, and nothing disappears from the record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from rllm.inference.base import InferenceEngine, SamplingParams
from rllm.runner.context import RolloutContext
from rllm.types import Episode, Outcome, TerminationReason, as_outcome

logger = logging.getLogger(__name__)
_CONSOLE = Console(stderr=True)

Workflow = Callable[[dict[str, Any], RolloutContext], Awaitable["Outcome | float | bool | None"]]


def task_id_of(task: dict[str, Any]) -> str:
    """A task's id: its ``task_id``/``id`` field, else a stable hash of its content."""
    for key in ("task_id", "id"):
        if key in task:
            return str(task[key])
    return hashlib.sha1(json.dumps(task, sort_keys=True, default=str).encode()).hexdigest()[:16]


def group_jobs(
    tasks: list[dict[str, Any]], group_size: int, sampling: SamplingParams
) -> list[tuple[dict[str, Any], SamplingParams]]:
    """The ``(task, sampling)`` jobs of ``group_size`` adjacent attempts at each task. A seeded ``sampling``
    gives job ``j`` the seed ``seed + 104_729 * j`` (else a group would be n copies of one episode)."""
    jobs = [task for task in tasks for _ in range(group_size)]
    if sampling.seed is None:
        return [(task, sampling) for task in jobs]
    return [
        (task, sampling.model_copy(update={"seed": sampling.seed + 104_729 * j}))
        for j, task in enumerate(jobs)
    ]


def _as_outcome(result: Outcome | float | bool | None) -> Outcome:
    return Outcome() if result is None else as_outcome(result, source="a workflow")


def _failed(episode: Episode, exc: BaseException) -> Outcome:
    """Record ``exc`` on ``episode`` (message and traceback) and return the ERROR outcome."""
    episode.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    episode.info["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Outcome(termination_reason=TerminationReason.ERROR)


class WorkflowRunner:
    """Runs a workflow over tasks, ``group_size`` attempts per task, many at once. ``adapters`` (role ->
    adapter name, separate weights per role) is handed to every episode's :class:`RolloutContext`."""

    def __init__(
        self,
        workflow: Workflow,
        engine: InferenceEngine,
        sampling: SamplingParams,
        *,
        max_concurrency: int = 256,
        timeout_s: float | None = None,
        retries: int = 0,
        show_progress: bool = True,
        adapters: Mapping[str, str] | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.workflow = workflow
        self.engine = engine
        self.sampling = sampling
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.show_progress = show_progress
        self.adapters = adapters

    async def run_episode(self, task: dict[str, Any], *, sampling: SamplingParams | None = None) -> Episode:
        """Run one episode, retrying on error/timeout; always returns an Episode."""
        episode = None
        params = sampling or self.sampling
        for attempt in range(self.retries + 1):
            if attempt and params.seed is not None:
                params = params.model_copy(update={"seed": params.seed + 1})
            episode = await self._attempt(task, attempt, params)
            if not episode.failed:
                return episode
            logger.warning(
                "episode for task %s failed (attempt %d/%d): %s",
                episode.task_id,
                attempt + 1,
                self.retries + 1,
                episode.termination_reason.value,
            )
        assert episode is not None
        return episode

    async def _attempt(self, task: dict[str, Any], attempt: int, sampling: SamplingParams) -> Episode:
        episode = Episode(task_id=task_id_of(task), task=task, attempt=attempt)
        ctx = RolloutContext(
            self.engine, sampling, episode_id=episode.id, task_id=episode.task_id, adapters=self.adapters
        )
        t0 = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.workflow(task, ctx), timeout=self.timeout_s)
            outcome = _as_outcome(result)
        except asyncio.TimeoutError as exc:
            if self.timeout_s is not None and time.perf_counter() - t0 >= self.timeout_s:
                outcome = Outcome(termination_reason=TerminationReason.TIMEOUT)
                episode.error = f"episode exceeded timeout_s={self.timeout_s}"
            else:  # the flow's own TimeoutError (a tool or HTTP call), not our budget: an error like any other
                outcome = _failed(episode, exc)
        except Exception as exc:  # noqa: BLE001 — any error fails this episode, never the batch
            outcome = _failed(episode, exc)
        episode.trajectories = list(ctx.trajectories.values())
        for key, traj in ctx.trajectories.items():
            rewards = outcome.role_rewards
            traj.reward = rewards.get(key, rewards.get(traj.name, outcome.reward))
            # A flow that rewards steps itself (an environment's per-step rewards) keeps them; otherwise
            # the outcome reward lands on the last step (per-step credit sees it there).
            if traj.steps and not any(s.reward for s in traj.steps):
                traj.steps[-1].reward = traj.reward
        episode.reward = outcome.reward
        episode.is_correct = outcome.is_correct
        episode.metrics = dict(outcome.metrics)
        episode.metrics.update({f"signal/{name}": float(v) for name, v in outcome.signals.items()})
        episode.metrics["episode_time_s"] = time.perf_counter() - t0
        episode.info.update(outcome.info)
        reason = outcome.termination_reason
        if reason == TerminationReason.ENV_DONE and any(
            s.truncated for t in episode.trajectories for s in t.steps
        ):
            reason = TerminationReason.MAX_RESPONSE_LENGTH
        episode.termination_reason = reason
        return episode

    async def run_tasks(
        self,
        tasks: list[dict[str, Any]],
        *,
        group_size: int = 1,
        sampling: SamplingParams | None = None,
        description: str = "rollout",
        on_episode: Callable[[int, Episode], None] | None = None,
        done: Mapping[int, Episode] | None = None,
    ) -> list[Episode]:
        """Run ``group_size`` episodes for every task; results keep task order, attempts adjacent.

        Job ``j`` is attempt ``j % group_size`` of task ``j // group_size``. ``on_episode(j, episode)`` is
        called as each job finishes; ``done`` maps jobs already finished (a resumed step's journaled
        episodes) to their episodes, which are returned in their place and not run again."""
        jobs = group_jobs(tasks, group_size, sampling or self.sampling)
        done = done or {}
        todo = [j for j in range(len(jobs)) if j not in done]

        def finished(i: int, episode: Episode) -> None:
            if on_episode is not None:
                on_episode(todo[i], episode)

        new = await self.run_jobs([jobs[j] for j in todo], on_episode=finished, description=description)
        out = dict(done)
        out.update(zip(todo, new))
        return [out[j] for j in range(len(jobs))]

    async def run_jobs(
        self,
        jobs: list[tuple[dict[str, Any], SamplingParams]],
        *,
        on_episode: Callable[[int, Episode], None] | None = None,
        description: str = "rollout",
    ) -> list[Episode]:
        """Run one episode per ``(task, sampling)`` job, at most ``max_concurrency`` at a time, with a
        progress bar; ``on_episode(job_index, episode)`` is called as each finishes (e.g. to save it)."""
        semaphore = asyncio.Semaphore(self.max_concurrency)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} ep/s"),
            TimeRemainingColumn(),
            # A bar only helps a person at a terminal; in logs (CI, nohup) it leaves blank lines.
            disable=not (self.show_progress and _CONSOLE.is_terminal),
            transient=True,
            console=_CONSOLE,
        ) as progress:
            bar = progress.add_task(description, total=len(jobs), rate=0.0)
            t0 = time.perf_counter()

            async def one(index: int, task: dict[str, Any], params: SamplingParams) -> Episode:
                async with semaphore:
                    episode = await self.run_episode(task, sampling=params)
                if on_episode is not None:
                    on_episode(index, episode)
                done = progress.tasks[bar].completed + 1
                progress.update(bar, completed=done, rate=done / max(time.perf_counter() - t0, 1e-9))
                return episode

            return list(await asyncio.gather(*(one(i, t, p) for i, (t, p) in enumerate(jobs))))
