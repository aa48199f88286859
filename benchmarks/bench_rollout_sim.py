"""Rollout-side scaling: can the workflow runner keep thousands of multi-turn episodes in flight?

The real :class:`~rllm.runner.workflow_runner.WorkflowRunner` runs a multi-turn workflow (each turn one
``ctx.chat`` call, then a made-up environment reply appended to the conversation) against a **FAKE
upstream pool**: :class:`FakeFixedLatencyPool`, an in-process engine whose ``generate`` sleeps a fixed
latency (the time a server would take to sample the turn) and returns made-up tokens. The pool has
unlimited slots, so the only thing that can hold episodes back is the driver: the workflow runner, the
rollout context, the Step bookkeeping and asyncio. Tokenization is not simulated (prompt ids are made
up, as a real server's chat template would run inside the server for a gateway-routed agent).

For each concurrency (``--concurrency``, default 512,1024,2048,4096: ``max_concurrency`` of the engine)
it runs ``rounds x concurrency`` episodes of ``--turns`` turns, so every slot runs ``rounds`` episodes one
after another. With per-turn latency L the ideal is

    ideal episodes/s = concurrency / (turns x L)

and the target is >= 80 % of it. It also reports the driver's CPU per model call (process CPU time /
calls): 1 / that is the call rate at which one driver core saturates, whatever the latency.

    .venv/bin/python benchmarks/bench_rollout_sim.py            # 512..4096 episodes, 4 turns, 1 s per turn
    .venv/bin/python benchmarks/bench_rollout_sim.py --quick    # plumbing check: 64/128 episodes, 50 ms turns
    .venv/bin/python benchmarks/bench_rollout_sim.py --latency-s 0.25 --turns 8 --json /tmp/sim.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table

from rllm.inference.base import Completion, EngineCapabilities, SamplingParams
from rllm.runner.context import RolloutContext
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.types import Outcome

TARGET_EFFICIENCY = 0.80


class FakeFixedLatencyPool:
    """FAKE upstream pool: every ``generate`` takes exactly ``latency_s`` (an ``asyncio.sleep``) and
    returns ``completion_tokens`` made-up tokens with logprob -1.0. It counts calls and the most calls
    in flight at once. Unlimited slots: a real pool's capacity is not what this measures."""

    # like an engine behind the gateway: RolloutContext passes session_id
    capabilities = EngineCapabilities(name="fake-pool", weight_transfer="files", routes_by_session=True)
    weight_version = 0

    def __init__(self, latency_s: float, completion_tokens: int = 32) -> None:
        self.latency_s = latency_s
        self.completion_ids = list(range(100, 100 + completion_tokens))
        self.logprobs = [-1.0] * completion_tokens
        self.calls = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.sessions: set[str] = set()

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        return [1 + (i % 50) for i in range(16 * len(messages))]  # made-up ids: 16 per message

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, session_id: str | None = None
    ) -> list[Completion]:
        self.calls += 1
        if session_id is not None:
            self.sessions.add(session_id)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=list(self.completion_ids),
                logprobs=list(self.logprobs),
                text="step",
                finish_reason="stop",
            )
        ]


def multi_turn_workflow(turns: int) -> Any:
    """A ``turns``-turn chat episode: each turn samples a reply, appends it and a made-up environment
    observation, and the episode scores 1.0 at the end."""

    async def workflow(task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        messages = [{"role": "user", "content": task["question"]}]
        for turn in range(turns):
            reply = await ctx.chat(messages)
            messages += [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": f"observation {turn}"},
            ]
        return Outcome(reward=1.0, is_correct=True)

    return workflow


def run_point(concurrency: int, *, turns: int, latency_s: float, rounds: int) -> dict[str, Any]:
    """One concurrency: ``rounds x concurrency`` episodes through the real WorkflowRunner."""
    pool = FakeFixedLatencyPool(latency_s)
    engine = WorkflowRunner(
        multi_turn_workflow(turns),
        pool,
        SamplingParams(max_tokens=32, seed=0),
        max_concurrency=concurrency,
        show_progress=False,
    )
    tasks = [{"task_id": f"t{i}", "question": f"q{i}"} for i in range(rounds * concurrency)]
    gc.collect()
    cpu0, t0 = time.process_time(), time.perf_counter()
    episodes = asyncio.run(engine.run_tasks(tasks))
    wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    failed = sum(e.failed for e in episodes)
    steps = sum(len(t.steps) for e in episodes for t in e.trajectories)
    ideal_eps = concurrency / (turns * latency_s)
    eps = len(episodes) / wall_s
    return {
        "concurrency": concurrency,
        "episodes": len(episodes),
        "turns": turns,
        "latency_s": latency_s,
        "wall_s": wall_s,
        "ideal_wall_s": rounds * turns * latency_s,
        "episodes_per_s": eps,
        "ideal_episodes_per_s": ideal_eps,
        "efficiency": eps / ideal_eps,
        "calls": pool.calls,
        "calls_per_s": pool.calls / wall_s,
        "driver_cpu_s": cpu_s,
        "driver_cpu_us_per_call": cpu_s / pool.calls * 1e6,
        "peak_in_flight": pool.peak_in_flight,
        "sessions": len(pool.sessions),
        "failed": failed,
        "steps": steps,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="512,1024,2048,4096", help="comma-separated concurrent episodes")
    p.add_argument("--turns", type=int, default=4, help="model calls per episode (default: 4)")
    p.add_argument(
        "--latency-s", type=float, default=1.0, help="the fake pool's latency per call (default: 1.0)"
    )
    p.add_argument("--rounds", type=int, default=2, help="episodes per concurrency slot (default: 2)")
    p.add_argument(
        "--quick", action="store_true", help="plumbing check: 64,128 episodes, 2 turns, 50 ms, 1 round"
    )
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.turns, args.latency_s, args.rounds = "64,128", 2, 0.05, 1
    if args.turns < 1 or args.latency_s <= 0 or args.rounds < 1:
        p.error("--turns and --rounds must be >= 1 and --latency-s > 0")
    points = []
    for c in (int(x) for x in args.concurrency.split(",")):
        r = run_point(c, turns=args.turns, latency_s=args.latency_s, rounds=args.rounds)
        points.append(r)
        print(
            f"  {c:>5} episodes in flight: {r['episodes_per_s']:8.1f} ep/s of ideal {r['ideal_episodes_per_s']:8.1f} "
            f"({r['efficiency']:.0%}), {r['driver_cpu_us_per_call']:.0f} us driver CPU per call",
            flush=True,
        )
    load_end = os.getloadavg()[0]
    print(
        f"\n**Rollout simulation: the real WorkflowRunner, {args.turns}-turn episodes, a FAKE upstream pool "
        f"answering each call in {args.latency_s * 1000:g} ms; {args.rounds} episode(s) per slot**"
    )
    print(header_line())
    print(
        f"load average {load_end:.2f} at end; ideal episodes/s = concurrency / (turns x latency); "
        f"target >= {TARGET_EFFICIENCY:.0%} of ideal"
    )
    rows = [
        [
            str(r["concurrency"]),
            str(r["episodes"]),
            f"{r['wall_s']:.2f}",
            f"{r['ideal_wall_s']:.2f}",
            f"{r['episodes_per_s']:.1f}",
            f"{r['ideal_episodes_per_s']:.1f}",
            f"{r['efficiency'] * 100:.1f} %",
            f"{r['calls_per_s']:,.0f}",
            f"{r['driver_cpu_us_per_call']:.0f}",
            str(r["peak_in_flight"]),
            str(r["failed"]),
        ]
        for r in points
    ]
    print(
        markdown_table(
            [
                "concurrent episodes",
                "episodes",
                "wall s",
                "ideal s",
                "episodes/s",
                "ideal episodes/s",
                "of ideal",
                "calls/s",
                "driver CPU us/call",
                "peak calls in flight",
                "failed",
            ],
            rows,
        )
    )
    ok = True
    for r in points:
        good = (
            r["efficiency"] >= TARGET_EFFICIENCY
            and not r["failed"]
            and r["steps"] == r["episodes"] * r["turns"]
        )
        ok &= good
        print(
            f"- {r['concurrency']} episodes: {r['efficiency']:.1%} of ideal (target >= {TARGET_EFFICIENCY:.0%}): "
            f"{'PASS' if good else 'FAIL'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"points": points, "header": header_line()}, indent=2))
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
