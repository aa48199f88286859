"""What the monitors cost a training step, and what they say about the real default run.

Replays the 32-step default run of 2026-12-03 (its logged metrics and its 2,048 journaled replies, kept in
``tests/trainer/monitor_data/``) through ``rllm.trainer.monitors.Monitors`` exactly as the trainer calls it
(``observe`` on each step's 64 episodes, then ``check`` on the step's metrics), with the drift monitor on
and off, and prints the time per step and the hacking alerts raised (none: the run learned honestly). A
second reward (``monitor.hacking.second_reward``) adds what that reward costs per reply, not measured here.

    .venv/bin/python benchmarks/bench_monitors.py             # 20 passes over the run
    .venv/bin/python benchmarks/bench_monitors.py --quick     # plumbing check: 1 pass
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
from _common import header_line, markdown_table

from rllm.trainer.monitor_config import DriftConfig, MonitorConfig
from rllm.trainer.monitors import Monitors
from rllm.types import Episode, Step, Trajectory

DATA = Path(__file__).resolve().parent.parent / "tests" / "trainer" / "monitor_data"


def load_run() -> tuple[list[dict], dict[int, list[Episode]]]:
    records = [json.loads(line) for line in (DATA / "default_run_metrics.jsonl").read_text().splitlines()]
    with gzip.open(DATA / "default_run_replies.json.gz", "rt") as f:
        replies = json.load(f)
    by_step: dict[int, list[Episode]] = {}
    for step, task_id, text, ids in replies:
        call = Step(prompt_ids=[0], response_ids=ids, logprobs=[0.0] * len(ids), response_text=text)
        task = {"task_id": task_id, "data_source": "larger"}
        by_step.setdefault(step, []).append(
            Episode(task_id=task_id, task=task, trajectories=[Trajectory(steps=[call])])
        )
    return records, by_step


def one_pass(
    cfg: MonitorConfig, records: list[dict], by_step: dict[int, list[Episode]]
) -> tuple[list[float], int]:
    monitors = Monitors(cfg, temperature=1.0, set_temperature=lambda t: None)
    times, alerts = [], 0
    for record in records:
        episodes = by_step.get(int(record["step"]), [])
        t0 = time.perf_counter()
        metrics = {**record, **(monitors.observe(episodes) if episodes else {})}
        out = monitors.check(int(record["step"]), metrics)
        times.append(time.perf_counter() - t0)
        alerts += int(out.get("monitor/hacking/alert", 0.0) > 0)
    return times, alerts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one pass (CI's plumbing check)")
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    records, by_step = load_run()
    rows = []
    for label, cfg in (
        ("hacking (default)", MonitorConfig()),
        ("hacking + drift", MonitorConfig(drift=DriftConfig(enabled=True))),
    ):
        times: list[float] = []
        for _ in range(1 if args.quick else args.passes):
            t, alerts = one_pass(cfg, records, by_step)
            times += t
        ms = np.array(times) * 1000
        rows.append([label, f"{np.median(ms):.2f}", f"{np.percentile(ms, 99):.2f}", str(alerts)])
    print(header_line())
    print(f"the default run's {len(records) - 1} steps x {len(by_step[1])} episodes, monitors per step:")
    print(markdown_table(["monitors", "ms/step p50", "ms/step p99", "hacking alerts"], rows))


if __name__ == "__main__":
    main()
