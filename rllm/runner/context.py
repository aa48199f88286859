"""What a workflow sees while it runs one episode: a way to call the model that records every call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rllm.inference.base import Completion, InferenceEngine, SamplingParams
from rllm.types import DEFAULT_ADAPTER, Step, Trajectory

if TYPE_CHECKING:
    from rllm.inference.grammar import Grammar


class RolloutContext:
    """Handed to a workflow for one episode. ``chat``/``complete`` sample from the current policy and
    append a :class:`Step` to the named trajectory; the workflow runner builds the Episode from them.

    ``trajectory`` names the role (``"solver"``); all trajectories of a role across a task's attempts
    form one advantage group. A workflow with several trajectories of one role in an episode (N
    parallel solvers) tells them apart with ``key`` (``key="solver#2"``; default: the role name).

    ``adapters`` (separate weights per role: role -> adapter name) makes each call sample from its role's
    adapter (``generate(adapter=...)``; a role not in it uses ``default``); None: the engine's one policy.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        sampling: SamplingParams,
        *,
        episode_id: str,
        task_id: str,
        adapters: Mapping[str, str] | None = None,
    ):
        self.engine = engine
        self.adapters = adapters
        self.sampling = sampling
        self.episode_id = episode_id
        self.task_id = task_id
        self.trajectories: dict[str, Trajectory] = {}  # by key
        self._calls = 0

    def params(self, **overrides: Any) -> SamplingParams:
        """This call's sampling params; a seeded episode gets a distinct, reproducible seed per call."""
        if self.sampling.seed is not None and "seed" not in overrides:
            overrides["seed"] = self.sampling.seed + 7919 * self._calls
        self._calls += 1
        if not overrides:
            return self.sampling
        # Validated, not model_copy(update=...): a workflow's stop="..." must become a list, max_tokens=0 an error.
        return SamplingParams.model_validate({**self.sampling.model_dump(), **overrides})

    async def complete(
        self,
        prompt_ids: list[int],
        *,
        trajectory: str = "default",
        key: str | None = None,
        messages: list[dict] | None = None,
        grammar: Grammar | None = None,
        **overrides: Any,
    ) -> Completion:
        """Sample one continuation of ``prompt_ids`` and record it as a step. Under a ``grammar``
        (:class:`~rllm.inference.grammar.Grammar`) the reply must match it; the tokens it forced (allowed one
        token only) are recorded as not sampled (mask 0, logprob 0.0), as the gateway records them."""
        params = self.params(**overrides)
        if params.n != 1:
            raise ValueError("RolloutContext samples one completion per call; use group_size for n > 1")
        # An engine behind the gateway routes (and traces) by session: one session per episode.
        route: dict[str, Any] = {}
        if self.engine.capabilities.routes_by_session:
            route["session_id"] = self.episode_id
        if self.adapters is not None:  # only then: an engine without adapters takes no adapter= at all
            route["adapter"] = self.adapters.get(trajectory, DEFAULT_ADAPTER)
        if grammar is not None:
            if not self.engine.capabilities.constraints:
                raise ValueError(
                    f"the {self.engine.capabilities.name} engine cannot constrain its output to a grammar: "
                    "use the local engine, or call without grammar="
                )
            route["constraint"] = grammar
        completion = (await self.engine.generate(prompt_ids, params, **route))[0]
        self.record(completion, trajectory=trajectory, key=key, messages=messages or [])
        return completion

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        trajectory: str = "default",
        key: str | None = None,
        tools: list[dict] | None = None,
        **overrides: Any,
    ) -> Completion:
        """Render ``messages`` with the model's chat template, sample a reply, record it as a step."""
        prompt_ids = self.engine.apply_chat_template(messages, tools=tools)
        return await self.complete(prompt_ids, trajectory=trajectory, key=key, messages=messages, **overrides)

    def trajectory(self, name: str = "default", key: str | None = None) -> Trajectory:
        """The trajectory ``key`` (default ``name``) of role ``name``, created empty on first use."""
        key = key or name
        traj = self.trajectories.get(key)
        if traj is None:
            traj = self.trajectories[key] = Trajectory(name=name, info={"key": key})
        elif traj.name != name:
            raise ValueError(f"trajectory key {key!r} belongs to role {traj.name!r}, not {name!r}")
        return traj

    def record(
        self,
        completion: Completion,
        *,
        trajectory: str = "default",
        key: str | None = None,
        messages: list[dict],
    ) -> Step:
        logprobs, mask = completion.recorded()
        step = Step(
            prompt_ids=completion.prompt_ids,
            response_ids=completion.completion_ids,
            logprobs=logprobs,
            response_mask=mask,
            messages=list(messages),
            response_text=completion.text,
            finish_reason=completion.finish_reason,
            weight_version=completion.weight_version,
        )
        if completion.pauses:  # a partial rollout: a weight sync landed mid-decode
            step.info["last_weight_version"] = completion.last_weight_version
            step.info["pauses"] = completion.pauses
        self.trajectory(trajectory, key).steps.append(step)
        return step
