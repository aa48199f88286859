"""Every query the UI's reader makes is served by an index: none scans a table that grows with the run.

(benchmarks/bench_ui_api.py measures the latencies on a 100,000-step run; this is the cheap guard.)
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from rllm.store import EpisodeQuery, RunWriter, StoreReader
from rllm.store import reader as reader_module
from rllm.types import Episode, Step, Trajectory

# Tables whose size grows with steps and episodes; `runs` has a row per run and may be scanned.
BIG_TABLES = {
    "metrics",
    "metric_keys",
    "episodes",
    "episode_details",
    "episode_steps",
    "token_texts",
    "eval_results",
}


def test_reader_queries_use_indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "rllm.db"
    run = RunWriter.start(store, kind="train", name="r", config={})
    episode = Episode(
        task_id="t",
        task={"question": "q"},
        trajectories=[
            Trajectory(
                name="solver",
                steps=[Step(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1], response_text="hello")],
            )
        ],
    )
    run.stage_episodes(1, [episode])
    run.log(1, {"reward/mean": 1.0, "eval/accuracy": 0.5, "eval/n": 2})
    for step in range(2, 60):  # enough points to thin, regular and irregular
        run.log(step, {"reward/mean": 1.0, **({"odd": 1.0} if step in (2, 3, 5, 8, 13, 21, 34, 55) else {})})
    run.add_eval_results([{"task_id": "t", "sample": 0, "reward": 1.0, "is_correct": True, "output": "x"}])

    statements: list[str] = []
    real_connect = reader_module.connect_reader

    def traced(path: Path) -> sqlite3.Connection:
        conn = real_connect(path)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(reader_module, "connect_reader", traced)
    reader = StoreReader(store)
    reader.runs()
    reader.run(run.id)
    reader.config(run.id)
    reader.status(run.id)
    reader.metrics(run.id)
    reader.metrics(run.id, ["reward/mean", "odd"], after_step=0, max_points=4)
    reader.steps(run.id)
    for query in (
        EpisodeQuery(),
        EpisodeQuery(step=1),
        EpisodeQuery(min_reward=0.5, max_reward=1),
        EpisodeQuery(role="solver", termination="env_done", correct=True),
        EpisodeQuery(q="hello"),
        EpisodeQuery(step=1, q="he", offset=10),
    ):
        reader.episodes(run.id, query)
    reader.episode(episode.id)
    reader.tokens(episode.id)
    reader.evals(run.id)
    run.finish()

    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) > 15
    conn = sqlite3.connect(store)
    scans = []
    for sql in selects:
        for *_, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
            match = re.match(r"SCAN (\w+)(?: AS \w+)?", detail)
            if match and _table(conn, sql, match.group(1)) in BIG_TABLES:
                scans.append(f"{detail}  <-  {sql}")
    conn.close()
    assert not scans, "full scans:\n" + "\n".join(scans)


def _table(conn: sqlite3.Connection, sql: str, name: str) -> str:
    """The table behind ``name`` in ``sql`` (an alias like ``e`` in ``FROM episodes e``)."""
    alias = re.search(rf"\b(\w+)\s+(?:AS\s+)?{name}\b", sql)
    if name not in BIG_TABLES and alias and alias.group(1) in BIG_TABLES:
        return alias.group(1)
    return name
