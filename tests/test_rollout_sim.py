"""benchmarks/bench_rollout_sim.py drives the real WorkflowRunner against its FAKE fixed-latency pool:
every episode runs all its turns as Steps, the engine keeps exactly max_concurrency episodes in flight
(never more), each episode is one session, and no run beats the fake latency (the sim measures what it
claims). Efficiency itself is a benchmark number, not asserted here."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_rollout_sim


def test_sim_runs_every_turn_at_the_concurrency_it_names() -> None:
    turns, latency_s, rounds, concurrency = 3, 0.02, 2, 48
    r = bench_rollout_sim.run_point(concurrency, turns=turns, latency_s=latency_s, rounds=rounds)
    assert r["episodes"] == rounds * concurrency and r["failed"] == 0
    assert r["calls"] == r["steps"] == rounds * concurrency * turns
    assert r["sessions"] == rounds * concurrency  # RolloutContext routed every call by its episode id
    assert r["peak_in_flight"] == concurrency  # the engine filled every slot, and never exceeded it
    assert r["wall_s"] >= r["ideal_wall_s"]  # each slot ran its episodes' turns one after another
    assert 0 < r["efficiency"] <= 1.0 + 1e-9


def test_fake_pool_turns_are_real_multi_turn_steps() -> None:
    import asyncio

    from rllm.inference.base import SamplingParams
    from rllm.runner.workflow_runner import WorkflowRunner

    pool = bench_rollout_sim.FakeFixedLatencyPool(0.001, completion_tokens=5)
    engine = WorkflowRunner(
        bench_rollout_sim.multi_turn_workflow(3), pool, SamplingParams(max_tokens=5), show_progress=False
    )
    (episode,) = asyncio.run(engine.run_tasks([{"task_id": "a", "question": "q"}]))
    (traj,) = episode.trajectories
    assert [len(s.messages) for s in traj.steps] == [1, 3, 5]  # the conversation grows each turn
    assert all(len(s.response_ids) == len(s.logprobs) == 5 for s in traj.steps)
    assert traj.steps[-1].reward == episode.reward == 1.0
