"""The async trainer's rollout producer: one persistent sampler that runs ahead of the trainer.

With ``rollout.max_staleness = N > 0`` the trainer's steps run in a training thread while this producer,
on the run's event loop, samples the episodes of the next steps. Step ``s``'s episodes are admitted (their
sampling starts) once the engine holds weight version ``s - N`` or newer; the trainer trains step ``s`` at
version ``s``, so an admitted episode is at most ``N`` versions old when it is trained, however long it
runs: admission by step is what keeps long episodes from being starved by the bound. A sample that is older
anyway (an engine that missed a sync) is dropped, counted (``rollout/dropped_stale``) and sampled again.

Partial rollouts: a weight sync does not wait for episodes in flight. Their next calls sample from the new
weights, and on the local engine a call already decoding pauses, takes the new weights and resumes from its
prefix; every token keeps the logprob (and every step the weight version) it was sampled under, which the
loss corrects against. With ``rollout.partial_rollouts=false`` a sync instead waits until the episodes in
flight have finished (admitting no new ones meanwhile), so every episode is sampled under one version.

Every step's jobs (tasks and per-episode seeds) are the ones the synchronous loop would run; only the
weights they are sampled under differ.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rllm.inference.base import SamplingParams
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.types import Episode

logger = logging.getLogger(__name__)

Job = tuple[dict[str, Any], SamplingParams]


class StaleSamplesError(RuntimeError):
    """A batch holds samples from older weights than the allowed staleness: training on them would be
    off-policy beyond what the loss corrects for."""


def staleness(episode: Episode, version: int) -> int:
    """How many versions the oldest weights that sampled ``episode`` lag ``version`` (0 with no steps)."""
    versions = [s.weight_version for t in episode.trajectories for s in t.steps]
    return version - min(versions) if versions else 0


def staleness_metrics(episodes: list[Episode], version: int) -> dict[str, float]:
    """``rollout/staleness_mean`` and ``_max`` over the LLM calls of the episodes trained at ``version``,
    and ``rollout/partial_episodes``: episodes sampled under more than one version (a weight sync landed
    between their calls, or while one decoded)."""
    lags = [
        version - s.weight_version for e in episodes if not e.failed for t in e.trajectories for s in t.steps
    ]

    def versions(e: Episode) -> set[int]:
        out: set[int] = set()
        for t in e.trajectories:
            for s in t.steps:
                out |= {s.weight_version, s.info.get("last_weight_version", s.weight_version)}
        return out

    partial = sum(len(versions(e)) > 1 for e in episodes)
    return {
        "rollout/staleness_mean": sum(lags) / len(lags) if lags else 0.0,
        "rollout/staleness_max": float(max(lags, default=0)),
        "rollout/partial_episodes": float(partial),
    }


@dataclass
class _Counters:
    dropped_stale: int = 0
    sampler_idle_s: float = 0.0
    idle_since: float | None = None


class RolloutProducer:
    """Samples steps ``start .. end-1`` ahead of the trainer (see the module docstring).

    ``sample_step(step)`` samples a step's episodes (the trainer's: its jobs, less those the journal already
    holds), running each through :meth:`run_job`; ``resample(step, round, index)`` samples job ``index`` of
    ``step`` again, with fresh seeds for ``round``, to replace a stale one. Runs on the run's event loop; the
    training thread calls :meth:`episodes`, :meth:`before_sync` and :meth:`synced` through ``RunLoop.run``
    / ``RunLoop.call_soon``.
    """

    def __init__(
        self,
        runner: WorkflowRunner,
        sample_step: Callable[[int], Awaitable[list[Episode]]],
        resample: Callable[[int, int, int], Awaitable[Episode]],
        *,
        start: int,
        end: int,
        version: int,
        max_staleness: int,
        max_concurrency: int,
        partial: bool = True,
    ) -> None:
        if max_staleness < 1:
            raise ValueError("the rollout producer runs ahead by max_staleness >= 1 steps")
        self.runner, self.sample_step, self.resample = runner, sample_step, resample
        self.start, self.end = start, end
        self.version, self.max_staleness, self.partial = version, max_staleness, partial
        self._slots = asyncio.Semaphore(max_concurrency)
        self._open = asyncio.Event()
        self._open.set()
        self._changed = asyncio.Condition()
        self._steps: dict[int, asyncio.Task[list[Episode]]] = {}
        self._inflight = 0
        self._counters = _Counters(idle_since=time.perf_counter())
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the producer
    def start_producing(self) -> None:
        self._task = asyncio.ensure_future(self._produce())

    async def stop(self) -> None:
        """Cancel what is still sampling (the run ended or failed)."""
        tasks = [t for t in [self._task, *self._steps.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _produce(self) -> None:
        for step in range(self.start, self.end):
            async with self._changed:  # admission: the engine is at most max_staleness versions behind
                await self._changed.wait_for(lambda s=step: self.version >= s - self.max_staleness)
            self._steps[step] = asyncio.ensure_future(self._sample(step))
            async with self._changed:
                self._changed.notify_all()

    async def _sample(self, step: int) -> list[Episode]:
        t0 = time.perf_counter()
        episodes = await self.sample_step(step)
        logger.info(
            "sampled step %d ahead: %d episodes in %.1fs", step, len(episodes), time.perf_counter() - t0
        )
        return episodes

    async def run_job(self, task: dict[str, Any], params: SamplingParams) -> Episode:
        """One episode, within the ``max_concurrency`` slots every step in flight shares."""
        async with self._slots:
            await self._open.wait()  # closed while a sync without partial rollouts drains the pool
            self._busy(+1)
            try:
                return await self.runner.run_episode(task, sampling=params)
            finally:
                self._busy(-1)

    async def _job(self, step: int, index: int, task: dict[str, Any], params: SamplingParams) -> Episode:
        async with self._slots:
            await self._open.wait()  # closed while a sync without partial rollouts drains the pool
            self._busy(+1)
            try:
                episode = await self.runner.run_episode(task, sampling=params)
            finally:
                self._busy(-1)
        if self.on_episode is not None:
            self.on_episode(step, index, episode)
        return episode

    def _busy(self, delta: int) -> None:
        """Count episodes in flight; the time with none is the sampler's idle time."""
        c, now = self._counters, time.perf_counter()
        if delta > 0 and self._inflight == 0 and c.idle_since is not None:
            c.sampler_idle_s += now - c.idle_since
            c.idle_since = None
        self._inflight += delta
        if self._inflight == 0:
            c.idle_since = now
            asyncio.ensure_future(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ the trainer's side
    async def episodes(self, step: int) -> list[Episode]:
        """Step ``step``'s episodes, once all have finished; samples older than ``max_staleness`` versions
        (the trainer is at version ``step``) are replaced by fresh ones."""
        async with self._changed:
            await self._changed.wait_for(lambda: step in self._steps or self._failed())
        if self._failed():
            assert self._task is not None
            self._task.result()  # raises what stopped the producer
        episodes = await self._steps.pop(step)
        for round in range(1, 5):
            stale = [i for i, e in enumerate(episodes) if staleness(e, step) > self.max_staleness]
            if not stale:
                return episodes
            self._counters.dropped_stale += len(stale)
            if round == 4:
                break
            logger.warning(
                "step %d: %d episode(s) sampled more than %d versions ago were dropped; sampling them again",
                step,
                len(stale),
                self.max_staleness,
            )
            fresh = await asyncio.gather(*(self.resample(step, round, i) for i in stale))
            for i, e in zip(stale, fresh):
                episodes[i] = e
        raise StaleSamplesError(
            f"step {step}: episodes were still older than rollout.max_staleness={self.max_staleness} versions "
            f"after 3 re-samples: the engine is not taking the synced weights (it is at version {self.version})"
        )

    def _failed(self) -> bool:
        return self._task is not None and self._task.done() and self._task.exception() is not None

    async def before_sync(self) -> None:
        """Without partial rollouts: admit no new episode and wait for those in flight to finish."""
        if self.partial:
            return
        self._open.clear()
        async with self._changed:
            await self._changed.wait_for(lambda: self._inflight == 0)

    def synced(self, version: int) -> None:
        """The engine now samples from ``version``: admit the steps that may now run, reopen the pool."""
        self.version = version
        self._open.set()
        asyncio.ensure_future(self._notify())

    def take_metrics(self) -> dict[str, float]:
        """Counters since the last call: ``rollout/dropped_stale``, ``time/sampler_idle_s``."""
        c, now = self._counters, time.perf_counter()
        idle = c.sampler_idle_s + (now - c.idle_since if c.idle_since is not None else 0.0)
        out = {"rollout/dropped_stale": float(c.dropped_stale), "time/sampler_idle_s": idle}
        c.dropped_stale, c.sampler_idle_s = 0, 0.0
        if c.idle_since is not None:
            c.idle_since = now
        return out
