"""``rllm ui``'s JSON API on a big run: p50/p95 latency of every page-level endpoint, and what the store
costs a training step.

1. **Fill**: a synthetic training run of ``--steps`` (default 100,000) steps written through the real
   :class:`~rllm.store.RunWriter` API: ``--metrics`` scalars per step (default 40), ``--episodes`` sampled
   episodes per step (default 2; a multiple-choice-sized prompt and a 64-token response each) with their
   tokens, and a held-out eval every 100 steps. The store is kept (``--store``), and reused when it
   already holds a run of that many steps, so a second run goes straight to the measurement.
2. **Latency**: the UI's server (uvicorn on loopback, in this process's thread) answers each page-level
   request ``--repeats`` times (default 30) over real HTTP; the table gives p50 / p95 in ms and the size
   of the answer. The target is p95 < 300 ms.
3. **Write cost**: a training-sized step, ``--write-episodes`` episodes (default 16, the
   ``trainer.store_episodes_per_step`` default) of 256 prompt + 256 response tokens with the smollm2
   tokenizer's token texts: the time ``stage_episodes`` (sampling, packing, decoding new token ids) and
   ``log`` (one committed transaction) add to a step.

    .venv/bin/python benchmarks/bench_ui_api.py                          # fill (minutes) + measure
    .venv/bin/python benchmarks/bench_ui_api.py --quick                  # plumbing check (seconds)

``--quick``: a fresh 500-step store in a temp directory (never the kept 100,000-step one), 3 requests per
endpoint, 5 write-cost steps.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import header_line

from rllm.gateway.server import GatewayServer
from rllm.store import RunWriter, StoreReader
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.ui.app import create_app

WORDS = [
    "the",
    "of",
    "larger",
    "smaller",
    "number",
    "answer",
    "think",
    "step",
    "because",
    "so",
    "which",
    "is",
]


class StandInTokenizer:
    """Token texts without a tokenizer (the fill measures the store, not a tokenizer)."""

    def decode(self, ids: list[int]) -> str:
        return "".join(f"<{i}>" for i in ids)


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _episode(rng: random.Random, step: int, i: int, n_prompt: int, n_response: int) -> Episode:
    reward = float(rng.random() < 0.5)
    failed = rng.random() < 0.02
    s = Step(
        prompt_ids=[rng.randrange(49152) for _ in range(n_prompt)],
        response_ids=[rng.randrange(49152) for _ in range(n_response)],
        logprobs=[-rng.random() * 3 for _ in range(n_response)],
        messages=[
            {"role": "user", "content": f"Task {step}-{i}: which is larger, {step} or {i}? {_text(rng, 20)}"}
        ],
        response_text=_text(rng, n_response // 2),
        finish_reason="stop",
        advantage=reward - 0.5,
        reward=reward,
    )
    return Episode(
        task_id=f"task-{step}-{i // 2}",
        task={"question": f"which is larger, {step} or {i}?"},
        trajectories=[Trajectory(name="solver", steps=[s], reward=reward)],
        reward=reward,
        is_correct=bool(reward),
        termination_reason=TerminationReason.ERROR if failed else TerminationReason.ENV_DONE,
        error="Traceback: boom" if failed else None,
    )


def fill(store: Path, steps: int, n_metrics: int, n_episodes: int) -> str:
    reader = StoreReader(store)
    for run in reader.runs():
        if run["name"] == "bench" and run["step"] == steps and run["status"] == "finished":
            print(f"reusing {store}: run {run['id']} has {steps} steps")
            return run["id"]
    rng = random.Random(0)
    names = ["reward/mean", "accuracy", "train/loss", "train/entropy", "train/grad_norm", "response_len/mean"]
    names += [f"extra/metric_{i:02d}" for i in range(n_metrics - len(names))]
    run = RunWriter.start(
        store,
        kind="train",
        name="bench",
        config={"trainer": {"steps": steps}},
        model="synthetic",
        task="larger",
        episodes_per_step=n_episodes,
        heartbeat_s=3600,
    )
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        metrics = {name: rng.random() for name in names}
        if step % 100 == 0:
            metrics.update({"eval/accuracy": rng.random(), "eval/n": 200.0})
        run.stage_episodes(
            step, [_episode(rng, step, i, 48, 64) for i in range(n_episodes)], StandInTokenizer()
        )
        run.log(step, metrics)
        if step % 10_000 == 0:
            rate = step / (time.perf_counter() - t0)
            print(f"  filled {step:,} steps ({rate:,.0f} steps/s, {store.stat().st_size / 1e6:,.0f} MB)")
    run.finish({"steps": steps})
    print(
        f"filled {steps:,} steps in {time.perf_counter() - t0:,.0f} s: {store.stat().st_size / 1e6:,.0f} MB"
    )
    return run.id


def measure(store: Path, run_id: str, repeats: int) -> list[tuple[str, float, float, int]]:
    reader = StoreReader(store)
    middle = reader.run(run_id)["step"] // 2
    page = reader.episodes(run_id, _query(step=middle))["episodes"]
    episode_id = page[0]["id"]
    charts = "reward/mean,train/loss,train/entropy,eval/accuracy"
    requests = [
        ("runs list", "/api/runs", {}),
        ("run", f"/api/runs/{run_id}", {}),
        ("config", f"/api/runs/{run_id}/config", {}),
        ("metrics: 4 charts, whole run", f"/api/runs/{run_id}/metrics", {"keys": charts}),
        (
            "metrics: 4 charts, last 100 steps",
            f"/api/runs/{run_id}/metrics",
            {"keys": charts, "after_step": reader.run(run_id)["step"] - 100},
        ),
        ("steps with episodes", f"/api/runs/{run_id}/steps", {}),
        ("episodes: first page", f"/api/runs/{run_id}/episodes", {}),
        ("episodes: page 100", f"/api/runs/{run_id}/episodes", {"offset": 5000}),
        ("episodes: one step", f"/api/runs/{run_id}/episodes", {"step": middle}),
        ("episodes: reward >= 1", f"/api/runs/{run_id}/episodes", {"min_reward": 1}),
        ("episodes: errors", f"/api/runs/{run_id}/episodes", {"termination": "error"}),
        (
            "episodes: correct=false, role",
            f"/api/runs/{run_id}/episodes",
            {"correct": "false", "role": "solver"},
        ),
        ("episodes: search 'larger, 5'", f"/api/runs/{run_id}/episodes", {"q": "larger, 5"}),
        ("episodes: search rare 'Task 77777-1'", f"/api/runs/{run_id}/episodes", {"q": "Task 77777-1"}),
        ("episode", f"/api/episodes/{episode_id}", {}),
        ("tokens", f"/api/episodes/{episode_id}/tokens", {"trajectory": 0, "step": 0}),
        ("evals", f"/api/runs/{run_id}/evals", {}),
    ]
    rows = []
    with GatewayServer(create_app(store)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for name, path, params in requests:
            http.get(path, params=params).raise_for_status()  # warm: page cache, connection
            times, size = [], 0
            for _ in range(repeats):
                t0 = time.perf_counter()
                response = http.get(path, params=params)
                times.append(1000 * (time.perf_counter() - t0))
                response.raise_for_status()
                size = len(response.content)
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            rows.append((name, statistics.median(times), p95, size))
    return rows


def _query(**kw: Any) -> Any:
    from rllm.store import EpisodeQuery

    return EpisodeQuery(**kw)


def write_cost(tmp: Path, n_episodes: int, steps: int) -> tuple[float, float]:
    """Median ms per step for stage_episodes and for log, with a real tokenizer's token texts."""
    try:
        from transformers import AutoTokenizer

        from rllm.models import resolve_model

        tokenizer: Any = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    except Exception as exc:  # noqa: BLE001 - the benchmark still runs, and says what it measured
        print(f"(no smollm2 tokenizer: {exc}; token texts decoded by a stand-in)")
        tokenizer = StandInTokenizer()
    rng = random.Random(1)
    run = RunWriter.start(
        tmp / "write-cost.db", kind="train", name="cost", config={}, episodes_per_step=n_episodes
    )
    stage, log = [], []
    for step in range(1, steps + 1):
        episodes = [
            _episode(rng, step, i, 256, 256) for i in range(4 * n_episodes)
        ]  # 4x sampled, as in a step
        metrics = {f"m{i}": rng.random() for i in range(40)}
        t0 = time.perf_counter()
        run.stage_episodes(step, episodes, tokenizer)
        t1 = time.perf_counter()
        run.log(step, metrics)
        t2 = time.perf_counter()
        stage.append(1000 * (t1 - t0))
        log.append(1000 * (t2 - t1))
    run.finish()
    return statistics.median(stage[1:]), statistics.median(log[1:])  # the first step decodes the most new ids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=40, help="scalars logged per step")
    parser.add_argument("--episodes", type=int, default=2, help="episodes stored per step in the big run")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--write-episodes", type=int, default=16, help="episodes per step for the write cost")
    parser.add_argument("--write-steps", type=int, default=30, help="steps timed for the write cost")
    parser.add_argument(
        "--store", type=Path, default=Path(tempfile.gettempdir()) / "rllm-bench-ui" / "rllm.db"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="plumbing check: 500 steps in a fresh temp store, 3 repeats, 5 write-cost steps",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rllm-bench-ui-quick-") as quick_dir:
        if args.quick:
            args.steps, args.repeats, args.write_steps = 500, 3, 5
            args.store = Path(quick_dir) / "rllm.db"
        run(args)


def run(args: argparse.Namespace) -> None:
    args.store.parent.mkdir(parents=True, exist_ok=True)
    run_id = fill(args.store, args.steps, args.metrics, args.episodes)
    rows = measure(args.store, run_id, args.repeats)
    print(f"\n{header_line()}")
    print(
        f"\n{args.steps:,} steps x {args.metrics} metrics, {args.episodes} episodes per step; "
        f"{args.repeats} requests each over HTTP; load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| endpoint | p50 ms | p95 ms | answer |\n|---|---:|---:|---:|")
    for name, p50, p95, size in rows:
        flag = "" if p95 < 300 else "  **over 300 ms**"
        print(f"| {name} | {p50:.1f} | {p95:.1f}{flag} | {size / 1000:,.1f} kB |")
    with tempfile.TemporaryDirectory() as tmp:
        stage_ms, log_ms = write_cost(Path(tmp), args.write_episodes, args.write_steps)
    print(
        f"\nwrite cost per training step ({args.write_episodes} of {4 * args.write_episodes} episodes kept, "
        f"256+256 tokens each, 40 metrics): stage_episodes {stage_ms:.1f} ms + log {log_ms:.1f} ms"
    )


if __name__ == "__main__":
    main()
