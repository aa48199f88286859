"""Run an ``@rllm.rollout`` flow as a workflow: one gateway session per episode.

For each episode the workflow creates the session ``{episode_id}`` on the gateway with the trainer's
sampling settings as overrides (role sub-sessions ``{episode_id}:{role}`` inherit them), runs the flow
with an :class:`AgentConfig` pointing at it, reads the session's traces back, assembles them into
token-faithful Steps (one trajectory per role, see :mod:`rllm.runner.assembly`), and scores the episode
with the evaluator (or with what the flow returned).

Several gateway URLs (the workers of :class:`rllm.gateway.pool.GatewayProcesses`, or separate gateways
over one trace store) spread the episodes: each episode's session, role sub-sessions included, goes to
the URL :func:`rllm.gateway.pool.route` picks for its id, the same one every time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

import httpx

from rllm.gateway.pool import route
from rllm.gateway.traces import OVERRIDABLE_SAMPLING, SessionInfo, Trace, TraceQuery, TraceStore
from rllm.runner.assembly import traces_to_trajectories
from rllm.runner.context import RolloutContext
from rllm.sdk.decorators import AgentConfig, Evaluator, Rollout, evaluator, rollout
from rllm.types import Episode, Outcome, Trajectory, as_outcome

logger = logging.getLogger(__name__)


class GatewayWorkflow:
    """A workflow (``(task, ctx) -> Outcome``) that runs ``flow`` against the gateway at ``gateway_url``
    (one URL, or a list of gateway URLs sharing one trace store, episodes routed among them by id)."""

    def __init__(
        self,
        flow: Rollout | Any,
        evaluator_fn: Evaluator | Any | None = None,
        *,
        gateway_url: str | Sequence[str],
        model: str,
        api_key: str | None = None,
        merge_turns: bool = True,
        store: TraceStore | None = None,
    ) -> None:
        """``store``: the gateway's own trace store, when the gateway runs in this process (the trainer's
        embedded one). Sessions are then opened and traces read in the store directly, two HTTP round trips
        per episode fewer; the agent's calls still go over HTTP, as with any gateway."""
        self.flow = flow if isinstance(flow, Rollout) else rollout(flow)
        self.evaluator = (
            None
            if evaluator_fn is None
            else (evaluator_fn if isinstance(evaluator_fn, Evaluator) else evaluator(evaluator_fn))
        )
        urls = [gateway_url] if isinstance(gateway_url, str) else list(gateway_url)
        if not urls:
            raise ValueError("GatewayWorkflow needs a gateway URL (gateway_url=...)")
        self.gateway_urls = [u.rstrip("/") for u in urls]
        self.gateway_url = self.gateway_urls[0]
        self.model = model
        self.api_key = api_key
        self.merge_turns = merge_turns
        self.store = store
        self._http: dict[str, httpx.AsyncClient] = {}
        self._http_loop: asyncio.AbstractEventLoop | None = None

    def url_for(self, session_id: str) -> str:
        """The gateway URL that serves ``session_id`` and its role sub-sessions."""
        return route(self.gateway_urls, session_id)

    def _client(self, url: str) -> httpx.AsyncClient:
        # An httpx client is bound to the event loop it first ran on. The trainer runs on one loop for the
        # whole run, but `rllm eval` and callers of their own may use several: one client per URL per loop.
        loop = asyncio.get_running_loop()
        if self._http_loop is not loop:
            self._http, self._http_loop = {}, loop
        client = self._http.get(url)
        if client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            client = self._http[url] = httpx.AsyncClient(base_url=url, headers=headers, timeout=60)
        return client

    async def open_session(self, session_id: str, sampling: dict[str, Any], metadata: dict[str, Any]) -> None:
        if self.store is not None:
            info = SessionInfo(session_id=session_id, sampling=sampling, metadata=metadata)
            await asyncio.to_thread(self.store.create_session, info)
            return
        r = await self._client(self.url_for(session_id)).post(
            "/sessions", json={"session_id": session_id, "sampling": sampling, "metadata": metadata}
        )
        if r.status_code != 201:
            raise RuntimeError(
                f"the gateway refused to open session {session_id}: {r.status_code} {r.text[:300]}"
            )

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        session_id = ctx.episode_id
        sampling = {
            k: v
            for k, v in ctx.sampling.model_dump().items()
            if k in OVERRIDABLE_SAMPLING and v not in (None, [])
        }
        await self.open_session(session_id, sampling, {"task_id": ctx.task_id})
        gateway_url = self.url_for(session_id)
        config = AgentConfig(
            base_url=f"{gateway_url}/sessions/{session_id}/v1",
            model=self.model,
            session_id=session_id,
            gateway_url=gateway_url,
            api_key=self.api_key or "EMPTY",
            sampling=sampling,
        )
        output = await self.flow.run(task, config)
        traces = await self.read_traces(session_id)
        trajectories, metrics = traces_to_trajectories(
            traces, root_session=session_id, merge=self.merge_turns
        )
        # A flow may label its own roles by returning the trajectories (or an Episode) it built, e.g. from
        # traces_to_trajectories over its sessions: those are trained on instead of the default grouping.
        own = output.trajectories if isinstance(output, Episode) else output
        if isinstance(own, list) and own and all(isinstance(t, Trajectory) for t in own):
            trajectories = own
            output = output.reward if isinstance(output, Episode) and output.reward is not None else None
        for i, traj in enumerate(trajectories):  # several trajectories of one role keep distinct keys
            key = traj.name if traj.name not in ctx.trajectories else f"{traj.name}#{i}"
            ctx.trajectories[key] = traj
        episode = Episode(task_id=ctx.task_id, task=task, trajectories=trajectories, info={"output": output})
        if self.evaluator is not None:
            result = await self.evaluator.score(task, episode)
        elif output is None:
            raise ValueError(
                f"rollout {self.flow.name} returned nothing and there is no evaluator: return a reward "
                "from the flow or pass an @rllm.evaluator"
            )
        else:
            result = as_outcome(output, source=f"rollout {self.flow.name}")
        return _outcome(result, metrics, output)

    async def read_traces(self, session_id: str) -> list[Trace]:
        """The traces of ``session_id`` and its role sub-sessions, in call order."""
        if self.store is not None:
            rows = await asyncio.to_thread(
                self.store.query, TraceQuery(session_prefix=session_id, limit=10_000)
            )
            return [t for _, t in rows if _in_episode(t, session_id)]
        traces, after = [], 0
        client = self._client(self.url_for(session_id))
        while True:
            r = await client.get(
                "/traces", params={"session_prefix": session_id, "after_seq": after, "limit": 1000}
            )
            r.raise_for_status()
            data = r.json()
            page = data["traces"]
            for t in page:
                t.pop("seq")
                trace = Trace.model_validate(t)
                if _in_episode(trace, session_id):
                    traces.append(trace)
            if len(page) < 1000:
                return traces
            after = data["last_seq"]


def _in_episode(trace: Trace, session_id: str) -> bool:
    """The prefix query also matches ``{id}0...``: keep the session itself and its ``{id}:{role}`` ones."""
    return trace.session_id == session_id or trace.session_id.startswith(session_id + ":")


def _outcome(result: Outcome, metrics: dict[str, float], output: Any) -> Outcome:
    """The verdict with the assembly's metrics added and the flow's output on the record."""
    try:  # the flow's return value goes on the record when it can be stored as JSON
        json.dumps(output)
    except (TypeError, ValueError):
        output = repr(output)
    return result.model_copy(
        update={"metrics": {**metrics, **result.metrics}, "info": {"output": output, **result.info}}
    )
