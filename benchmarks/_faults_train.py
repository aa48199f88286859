"""Training runs of the fault suite, each in a process of its own (a SIGKILL must hit a real trainer):

    python benchmarks/_faults_train.py RUNS NAME [--faults [--upstream-timeout-s=S]] [key=value ...]

The default task (``data.task=larger``) trained by an ``@rllm.rollout`` agent behind the gateway; the run
directory is ``RUNS/NAME``, its run store ``RUNS/rllm.db``. Every reply the agent receives is appended to
``RUNS/NAME/acknowledged.jsonl`` (the client's record, compared with the trace store afterwards).

With ``--faults``, faults 1-4 of the suite at once, all real:

1. the agent raises in 20 % of episode attempts (after its first call was recorded), ``rollout.retries=1``;
2. and 3. the gateway's upstream is two :class:`FlakyServer` proxies in front of a second gateway over the
   trainer's own local engine (the weights it syncs each step): every 10th call of each answers 500, every
   20th is accepted and never answered; the outer gateway's ``HTTPUpstream`` times out and retries;
4. the agent calls a tool that raises for 1 argument in 5 (the result tells the model; the episode goes on).

The trainer is rllm's ``AgentTrainer``; only where its embedded gateway gets its upstream is changed
(:class:`FaultyGatewayTrainer`), the way the vLLM pool puts HTTP servers behind it. At the end the run writes
``RUNS/NAME/faults.json``: what the injectors injected and the upstream's retries.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

from _fault_servers import FlakyServer

import rllm
from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import LocalUpstream
from rllm.rewards.basic import single_number_match
from rllm.sdk.workflow import GatewayWorkflow
from rllm.tool_calls import ToolCall
from rllm.tools import ToolRegistry, tool
from rllm.trainer.agent_trainer import AgentTrainer

_lock = threading.Lock()
COUNTS: dict[str, int] = {"agent_raised": 0, "tool_raised": 0}


def raises_for(sampling: dict[str, Any]) -> bool:
    """20 % of attempts, fixed by the attempt's seed (a retry gets another seed)."""
    return zlib.crc32(str(sampling.get("seed")).encode()) % 5 == 0


@tool
def check(n: int) -> str:
    """Check a number.

    Args:
        n: The number.
    """
    if n % 5 == 0:
        raise ValueError(f"injected tool fault: check({n}) crashed")
    return "ok"


def make_agent(ledger: Path, faults: bool) -> Any:
    registry = ToolRegistry([check])

    @rllm.rollout
    async def larger_agent(task: dict, config: rllm.AgentConfig) -> str:
        client = config.async_client()
        reply = await client.chat.completions.create(
            model=config.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=32
        )
        with _lock, ledger.open("a") as f:
            f.write(json.dumps({"session": config.session_id, "id": reply.id}) + "\n")
        seed = config.sampling.get("seed")
        if faults and seed is not None:  # training attempts only: held-out evals are unseeded and unfaulted
            (result,) = await registry.execute_all(
                [ToolCall(id="c", name="check", arguments=f'{{"n": {seed}}}')]
            )
            if result.error is not None:
                COUNTS["tool_raised"] += 1
            if raises_for(config.sampling):
                COUNTS["agent_raised"] += 1
                raise RuntimeError(f"injected agent fault (seed {seed})")
        return reply.choices[0].message.content or ""

    return larger_agent


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    correct = single_number_match(episode.info["output"], task["ground_truth"])
    return rllm.Outcome(reward=float(correct), is_correct=correct)


class FaultyGatewayTrainer(AgentTrainer):
    """``AgentTrainer`` whose embedded gateway reaches the local engine over HTTP, through faulty proxies:
    agent -> gateway (HTTPUpstream, the run's traces.db) -> 2 FlakyServers -> inner gateway -> engine."""

    upstream_timeout_s = 30.0

    def _start_gateway(self) -> GatewayWorkflow:
        self.engine.batch_wait_s = self.cfg.rollout.gateway_batch_wait_ms / 1000.0
        model = self.cfg.model.path
        self._inner_store = TraceStore(self.run_dir / "inner_traces.db")
        self._inner = GatewayServer(
            create_app(LocalUpstream(self.engine), self._inner_store, model_name=model)
        )
        self._inner.start()
        self._proxies = [
            FlakyServer(forward_to=self._inner.url, error_every=10, hang_every=20, phase=p).start()
            for p in (0, 10)
        ]
        self._http_upstream = HTTPUpstream(
            [p.url for p in self._proxies],
            kind="vllm",
            model=model,
            timeout_s=self.upstream_timeout_s,
            retries=3,
            health_interval_s=1.0,
            weight_version=self.engine.weight_version,
        )
        self.trace_store = TraceStore(self.run_dir / "traces.db")
        app = create_app(self._http_upstream, self.trace_store, model_name=model)
        self.gateway = GatewayServer(app).start()
        return GatewayWorkflow(
            self.agent_flow, self.evaluator, gateway_url=self.gateway.url, model=model, store=self.trace_store
        )

    def _sync_weights(self, when: str) -> None:
        super()._sync_weights(when)
        upstream = getattr(self, "_http_upstream", None)
        if upstream is not None:  # what the vLLM pool's POST /admin/policy does for its gateways
            upstream.set_policy(None, self.engine.weight_version)

    def _stop_gateway(self) -> None:
        if self.gateway is not None:
            faults = {
                "upstream_500": sum(p.errors for p in self._proxies),
                "upstream_hung": sum(p.hangs for p in self._proxies),
                "upstream_calls": sum(p.calls for p in self._proxies),
                "upstream_retried": self._http_upstream.retried,
                **COUNTS,
            }
            (self.run_dir / "faults.json").write_text(json.dumps(faults))
        super()._stop_gateway()
        if self.gateway is None and getattr(self, "_inner", None) is not None:
            for p in self._proxies:
                p.stop()
            self._inner.stop()
            self._inner_store.close()
            self._inner = None


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    for name in ("httpx", "transformers", "rllm.gateway.http_upstream", "rllm.runner.workflow_runner"):
        logging.getLogger(name).setLevel(logging.ERROR)
    runs, name, *rest = argv
    faults = "--faults" in rest
    for a in rest:
        if a.startswith("--upstream-timeout-s="):
            FaultyGatewayTrainer.upstream_timeout_s = float(a.split("=", 1)[1])
    overrides = [a for a in rest if not a.startswith("--")]
    cfg = rllm.load_config(
        rllm.TrainConfig,
        None,
        [
            f"trainer.run_dir={runs}",
            f"trainer.name={name}",
            f"trainer.store={Path(runs) / 'rllm.db'}",
            *overrides,
        ],
    )
    run_dir = Path(runs) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    agent = make_agent(run_dir / "acknowledged.jsonl", faults)
    trainer_cls = FaultyGatewayTrainer if faults else AgentTrainer
    result = trainer_cls(cfg, workflow=agent, evaluator=grade).train()
    summary = {"initial_accuracy": result.initial_accuracy, "final_accuracy": result.final_accuracy}
    (run_dir / "result.json").write_text(json.dumps(summary))
    print(f"finished {run_dir}: {summary}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
