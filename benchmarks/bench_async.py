"""Async training's overlap, measured: steps per minute of the synchronous loop against async (staleness 1),
with and without partial rollouts, on a workload where rollout and update take about as long as each other.

The workload, all real: an ``@rllm.rollout`` agent runs behind the trainer's embedded gateway, through a
**real HTTP proxy on loopback that adds a fixed latency to every model call** (the time a remote server
would take; it forwards to the gateway, which samples on the local engine and records the trace). Each task
has a heavy-tailed number of turns (a Pareto draw: most tasks take 1-2 turns, a few take up to
``--max-turns``), so a step's slowest episode runs several times longer than its median one. The trainer
trains a small random Llama (the smollm2 tokenizer) with full fine-tuning on the CPU: the update costs real
compute, while a rollout mostly waits on the proxy. The reward is the parity of the first reply's length
(random, so every group has signal and every step updates).

It runs the same steps three times (the same tasks, seeds and model):
- ``sync``: ``rollout.max_staleness=0``, today's loop: rollout, then update, then sync.
- ``async``: ``rollout.max_staleness=1``: the producer samples step s+1 while the trainer updates on step s;
  partial rollouts on (episodes in flight go on under the new weights).
- ``async, no partial``: as async, with ``rollout.partial_rollouts=false``: a sync waits for the episodes in
  flight.

Steps per minute are steady-state: (steps - 1) over the time from the first step's log line to the last
(the first step of either mode waits for a full rollout). The target is async >= 1.7x sync (the ideal, with
rollout = update, is 2x). It also prints each mode's p99 episode time against its mean step time: with the
long tail overlapped, async's step is shorter than its slowest episodes.

    .venv/bin/python benchmarks/bench_async.py            # 8 steps per mode (about 4 minutes)
    .venv/bin/python benchmarks/bench_async.py --quick    # plumbing check: 3 steps, a smaller model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
from _common import header_line, markdown_table
from aiohttp import web

import rllm
from rllm.models import make_tiny_llama
from rllm.sdk.decorators import AgentConfig
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

TARGET = 1.7


class LatencyProxy:
    """A real HTTP server on loopback that waits ``latency_s``, then forwards the request to ``target`` and
    returns its answer: the fixed per-call latency of a remote model server."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.target = ""
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True, name="latency-proxy")

    def start(self) -> LatencyProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.run_forever()

    async def _serve(self) -> None:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(self.latency_s)
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self._http.request(
            request.method, self.target + request.path_qs, data=body, headers=headers
        ) as r:
            return web.Response(body=await r.read(), status=r.status, content_type="application/json")


PROXY: LatencyProxy | None = None
EPISODE_TIMES: list[float] = []


@rllm.rollout
async def slow_agent(task: dict[str, Any], config: AgentConfig) -> str:
    """``task["turns"]`` completions, each through the latency proxy; returns the first reply."""
    assert PROXY is not None
    gateway = config.base_url.split("/sessions/")[0]
    PROXY.target = gateway
    t0 = time.perf_counter()
    base_url = config.base_url.replace(gateway, PROXY.url)
    first, messages = None, [{"role": "user", "content": task["prompt"]}]
    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
        for _ in range(task["turns"]):
            resp = await client.chat.completions.create(
                model=config.model, messages=messages, max_tokens=task["tokens"]
            )
            text = resp.choices[0].message.content or ""
            first = text if first is None else first
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]
    EPISODE_TIMES.append(time.perf_counter() - t0)
    return first or ""


@rllm.evaluator
def parity(task: dict[str, Any], episode: rllm.Episode) -> float:
    return float(len(episode.info.get("output") or "") % 2)


def tasks(n: int, max_turns: int, tokens: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "task_id": f"t{i}",
            "prompt": f"Story {i}:",
            "turns": min(max_turns, int(rng.paretovariate(1.5))),
            "tokens": tokens,
        }
        for i in range(n)
    ]


def config(
    model_dir: Path, run_dir: Path, name: str, steps: int, args: argparse.Namespace, *extra: str
) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            f"trainer.run_dir={run_dir}",
            f"trainer.name={name}",
            f"trainer.steps={steps}",
            "trainer.seed=0",
            f"trainer.threads={args.threads}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "trainer.store_enabled=false",
            "eval.before=false",
            "eval.after=false",
            "lora.enabled=false",
            "optim.lr=1e-3",  # the lr its published runs used (the default until it became 5e-4)
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            f"rollout.batch_size={args.batch_size}",
            f"rollout.group_size={args.group_size}",
            f"rollout.max_tokens={args.tokens}",
            "algorithm.filters.drop_zero_variance=false",
            *extra,
        ],
    )


def run_mode(
    name: str, model_dir: Path, run_dir: Path, train: list[dict], args: argparse.Namespace, *extra: str
) -> dict[str, Any]:
    EPISODE_TIMES.clear()
    cfg = config(model_dir, run_dir, name, args.steps, args, *extra)
    t0 = time.perf_counter()
    AgentTrainer(cfg, workflow=slow_agent, evaluator=parity, train_tasks=train, test_tasks=train[:1]).train()
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (run_dir / name / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "reward/mean" in r]
    steady = rows[-1]["time"] - rows[0]["time"]
    episode_times = sorted(EPISODE_TIMES)
    p99 = episode_times[min(len(episode_times) - 1, int(0.99 * len(episode_times)))]
    return {
        "mode": name,
        "steps_per_min": 60 * (len(rows) - 1) / steady,
        "step_s": steady / (len(rows) - 1),
        "rollout_s": statistics.mean(r["time/rollout_s"] for r in rows),
        "train_s": statistics.mean(r["time/train_s"] for r in rows),
        "sync_s": statistics.mean(r["time/sync_s"] for r in rows),
        "episode_p50_s": statistics.median(episode_times),
        "episode_p99_s": p99,
        "staleness_mean": statistics.mean(r.get("rollout/staleness_mean", 0.0) for r in rows),
        "partial_episodes": sum(r.get("rollout/partial_episodes", 0.0) for r in rows),
        "dropped_stale": sum(r.get("rollout/dropped_stale", 0.0) for r in rows),
        "episodes_failed": sum(r.get("episodes/failed", 0.0) for r in rows),
        "wall_s": wall,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="plumbing check: 3 steps, a smaller model, short latency"
    )
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--latency-s", type=float, default=0.5, help="the proxy's fixed latency per model call")
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--tokens", type=int, default=16, help="tokens per model call")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256, help="the trained model's hidden size")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the trainer's; the engine shares)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if args.quick:
        args.steps, args.latency_s, args.hidden, args.layers, args.batch_size = 3, 0.05, 64, 2, 4
    print(header_line())
    global PROXY
    PROXY = LatencyProxy(args.latency_s).start()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_llama(
            Path(tmp) / "model",
            hidden_size=args.hidden,
            num_layers=args.layers,
            intermediate_size=2 * args.hidden,
        )
        train = tasks(64, args.max_turns, args.tokens)
        results = [
            run_mode("sync", model_dir, Path(tmp), train, args),
            run_mode("async", model_dir, Path(tmp), train, args, "rollout.max_staleness=1"),
            run_mode(
                "async-no-partial",
                model_dir,
                Path(tmp),
                train,
                args,
                "rollout.max_staleness=1",
                "rollout.partial_rollouts=false",
            ),
        ]
    base = results[0]["steps_per_min"]
    for r in results:
        r["speedup"] = r["steps_per_min"] / base
    cols = [
        "mode",
        "steps_per_min",
        "speedup",
        "step_s",
        "rollout_s",
        "train_s",
        "sync_s",
        "episode_p50_s",
        "episode_p99_s",
        "staleness_mean",
        "partial_episodes",
        "dropped_stale",
        "episodes_failed",
    ]
    fmt = lambda v: v if isinstance(v, str) else f"{v:.2f}"
    print(markdown_table(cols, [[fmt(r[c]) for c in cols] for r in results]))
    speedup = results[1]["speedup"]
    print(
        f"async (staleness 1) runs {speedup:.2f}x the steps per minute of sync (target >= {TARGET}x, ideal 2x); "
        f"p99 episode {results[1]['episode_p99_s']:.2f}s vs async step {results[1]['step_s']:.2f}s "
        f"(sync step {results[0]['step_s']:.2f}s)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if any(r["episodes_failed"] for r in results):
        print("episodes failed: the measurement is not valid", file=sys.stderr)
        return 1
    if not args.quick and speedup < TARGET:
        print(f"below target: {speedup:.2f}x < {TARGET}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
