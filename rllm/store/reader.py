"""``StoreReader``: the queries behind ``rllm ui``'s JSON API, over read-only connections.

Each call opens its own read-only connection (cheap, and safe from any thread), so a reader never takes
the write lock and never blocks a run that is writing. Every query is served by an index (see
``tests/store/test_query_plans.py``); the answers are plain JSON data, shaped as docs/ui.md describes.
A store file that does not exist yet reads as a store with no runs.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rllm.store.records import unpack_floats, unpack_ids
from rllm.store.schema import connect_reader, empty_store

STALE_AFTER_S = 60.0
"""A run still marked running whose heartbeat is older than this reads as "crashed"."""

_RUN_COLUMNS = (
    "seq, id, name, kind, status, started_at, ended_at, heartbeat_at, last_step, model, task, latest, error"
)


class NotFound(KeyError):
    """No run (or episode, trajectory, step) by that id; ``str()`` is the message for the user."""

    def __str__(self) -> str:
        return str(self.args[0])


class EpisodeQuery(BaseModel):
    """Filters of an episode listing. ``q`` is a case-insensitive substring of the task's question or of
    any response; ``role`` a trajectory name; ``termination`` a termination reason."""

    model_config = ConfigDict(extra="ignore")

    step: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    role: str | None = None
    termination: str | None = None
    correct: bool | None = None
    q: str | None = None
    limit: int = Field(50, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class StoreReader:
    """Reads the run store at ``path``. ``stale_after_s``: see :data:`STALE_AFTER_S`."""

    def __init__(self, path: str | Path, *, stale_after_s: float = STALE_AFTER_S) -> None:
        self.path = Path(path)
        self.stale_after_s = stale_after_s

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection; an empty in-memory store when there is no store (yet) at ``path``."""
        conn = connect_reader(self.path) if self.path.exists() else None
        if conn is None or not _has_tables(conn):
            if conn is not None:
                conn.close()
            conn = empty_store()
        try:
            yield conn
        finally:
            conn.close()

    # ------------------------------------------------------------------ runs
    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, seq DESC"
            ).fetchall()
        return [self._run_dict(r) for r in rows]

    def run(self, run_id: str) -> dict[str, Any]:
        """One run with its config snapshot, code version, summary and metric names."""
        with self._read() as conn:
            row = _run_row(conn, run_id, f"{_RUN_COLUMNS}, config, code_version, summary")
            keys = [
                k
                for (k,) in conn.execute(
                    "SELECT name FROM metric_keys WHERE run = ? ORDER BY name", (row[0],)
                )
            ]
            alerts, temperatures = _alerts(conn, row[0])
        out = self._run_dict(row[:13])
        out.update(
            config=json.loads(row[13]),
            code_version=row[14],
            summary=None if row[15] is None else json.loads(row[15]),
            metric_keys=keys,
            alerts=alerts,
            temperature_changes=temperatures,
        )
        return out

    def location(self, ref: str, kind: str = "train") -> Path:
        """Where the newest run of ``kind`` whose id or name is ``ref`` keeps its files (a training run's
        directory)."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT location FROM runs WHERE (id = ? OR name = ?) AND kind = ? "
                "ORDER BY started_at DESC, seq DESC LIMIT 1",
                (ref, ref, kind),
            ).fetchone()
        if row is None or row[0] is None:
            raise NotFound(f"no {kind} run with id or name {ref!r} in the run store {self.path}")
        return Path(row[0])

    def status(self, run_id: str) -> str:
        with self._read() as conn:
            row = _run_row(conn, run_id, "status, heartbeat_at")
        return self._status(row[0], row[1])

    def config(self, run_id: str) -> dict[str, Any]:
        with self._read() as conn:
            return json.loads(_run_row(conn, run_id, "config")[0])

    def _status(self, status: str, heartbeat_at: float) -> str:
        if status == "running" and time.time() - heartbeat_at > self.stale_after_s:
            return "crashed"
        return status

    def _run_dict(self, r: tuple[Any, ...]) -> dict[str, Any]:
        return {
            "id": r[1],
            "name": r[2],
            "kind": r[3],
            "status": self._status(r[4], r[7]),
            "started_at": r[5],
            "ended_at": r[6],
            "heartbeat_at": r[7],
            "step": r[8],
            "model": r[9],
            "task": r[10],
            "metrics": json.loads(r[11]),
            "error": r[12],
        }

    # ------------------------------------------------------------------ metrics
    def metrics(
        self,
        run_id: str,
        keys: list[str] | None = None,
        after_step: int | None = None,
        max_points: int | None = None,
    ) -> dict[str, Any]:
        """``{"series": {key: [[step, value], ...]}, "last_step"}``: the points of ``keys`` (all when None)
        with step > ``after_step``. A series longer than ``max_points`` is thinned to every n-th point
        (its last point always kept); ``last_step`` is the largest step returned (or ``after_step``)."""
        after = -(2**62) if after_step is None else after_step
        with self._read() as conn:
            seq = _run_row(conn, run_id, "seq")[0]
            named = conn.execute(
                "SELECT name, key_id FROM metric_keys WHERE run = ? ORDER BY name", (seq,)
            ).fetchall()
            wanted = named if keys is None else [(n, k) for n, k in named if n in set(keys)]
            series: dict[str, list[list[Any]]] = {}
            last = after_step
            for name, key_id in wanted:
                points = _series(conn, key_id, after, max_points)
                series[name] = [[s, v if v is None or math.isfinite(v) else None] for s, v in points]
                if points:
                    last = points[-1][0] if last is None else max(last, points[-1][0])
        return {"series": series, "last_step": last}

    # ------------------------------------------------------------------ episodes
    def steps(self, run_id: str) -> list[int]:
        """The training steps that have stored episodes, ascending."""
        with self._read() as conn:
            seq = _run_row(conn, run_id, "seq")[0]
            return [
                s
                for (s,) in conn.execute(
                    "SELECT DISTINCT step FROM episodes WHERE run = ? ORDER BY step", (seq,)
                )
            ]

    def episodes(self, run_id: str, query: EpisodeQuery) -> dict[str, Any]:
        """``{"episodes": [...], "total"}``: a page of the run's stored episodes matching ``query``, newest
        step first."""
        with self._read() as conn:
            seq = _run_row(conn, run_id, "seq")[0]
            where, args = ["e.run = ?"], [seq]
            if query.step is not None:
                where.append("e.step = ?")
                args.append(query.step)
            if query.min_reward is not None:
                where.append("e.reward >= ?")
                args.append(query.min_reward)
            if query.max_reward is not None:
                where.append("e.reward <= ?")
                args.append(query.max_reward)
            if query.role:
                where.append("instr(e.roles, ?) > 0")
                args.append(json.dumps(query.role))
            if query.termination:
                where.append("e.termination_reason = ?")
                args.append(query.termination)
            if query.correct is not None:
                where.append("e.is_correct = ?")
                args.append(int(query.correct))
            if query.q:
                if len(query.q) >= 3:  # the trigram index finds substrings of 3+ characters
                    where.append("e.seq IN (SELECT rowid FROM episodes_text WHERE episodes_text MATCH ?)")
                    args.append('"' + query.q.replace('"', '""') + '"')
                else:
                    where.append("e.seq IN (SELECT rowid FROM episodes_text WHERE instr(lower(text), ?) > 0)")
                    args.append(query.q.lower())
            cond = " AND ".join(where)
            total = conn.execute(f"SELECT COUNT(*) FROM episodes e WHERE {cond}", args).fetchone()[0]
            # The page's ids first (from the filter's index alone, when it covers the filter), then their rows.
            rows = conn.execute(
                "SELECT id, step, task_id, reward, is_correct, termination_reason, error, roles, n_steps, preview "
                f"FROM episodes WHERE seq IN (SELECT e.seq FROM episodes e WHERE {cond} "
                "ORDER BY e.step DESC, e.seq DESC LIMIT ? OFFSET ?) ORDER BY step DESC, seq DESC",
                (*args, query.limit, query.offset),
            ).fetchall()
        return {"episodes": [_episode_summary(r) for r in rows], "total": total}

    def episode(self, episode_id: str) -> dict[str, Any]:
        """One episode with its task, info and trajectories (steps with messages, response, reward,
        advantage)."""
        with self._read() as conn:
            row = _episode_row(
                conn,
                episode_id,
                "r.id, e.id, e.step, e.task_id, e.reward, e.is_correct, "
                "e.termination_reason, e.error, "
                "(SELECT detail FROM episode_details d WHERE d.episode = e.seq)",
            )
        detail = json.loads(row[8])
        return {
            "id": row[1],
            "run_id": row[0],
            "step": row[2],
            "task_id": row[3],
            "task": detail["task"],
            "reward": row[4],
            "is_correct": None if row[5] is None else bool(row[5]),
            "termination_reason": row[6],
            "error": row[7],
            "info": detail["info"],
            "metrics": detail.get("metrics", {}),
            "trajectories": detail["trajectories"],
        }

    def tokens(self, episode_id: str, trajectory: int = 0, step: int = 0) -> dict[str, Any]:
        """The prompt and response tokens of one step, each with its text, rollout and trainer logprob,
        advantage and loss mask; ``drift_at`` indexes this list where chat-template drift split the
        sequence."""
        with self._read() as conn:
            run_seq, seq = _episode_row(conn, episode_id, "e.run, e.seq")
            row = conn.execute(
                "SELECT prompt_ids, response_ids, logprobs, trainer_logprobs, mask, advantage, drift_at "
                "FROM episode_steps WHERE episode = ? AND trajectory = ? AND step = ?",
                (seq, trajectory, step),
            ).fetchone()
            if row is None:
                raise NotFound(f"episode {episode_id!r} has no trajectory {trajectory} step {step}")
            prompt, response = unpack_ids(row[0]), unpack_ids(row[1])
            texts = _token_texts(conn, run_seq, set(prompt) | set(response))
        logprobs, trainer, mask, advantage = (
            unpack_floats(row[2]),
            unpack_floats(row[3]),
            list(row[4]),
            row[5],
        )
        tokens = [
            {
                "id": t,
                "text": texts.get(t, ""),
                "logprob": None,
                "trainer_logprob": None,
                "advantage": None,
                "mask": 0,
                "is_prompt": True,
            }
            for t in prompt
        ]
        for i, t in enumerate(response):
            on = mask[i] == 1
            tokens.append(
                {
                    "id": t,
                    "text": texts.get(t, ""),
                    "logprob": logprobs[i] if on else None,  # type: ignore[index]
                    "trainer_logprob": trainer[i] if trainer is not None and on else None,
                    "advantage": advantage if on else None,
                    "mask": mask[i],
                    "is_prompt": False,
                }
            )
        return {"tokens": tokens, "drift_at": row[6]}

    # ------------------------------------------------------------------ evals
    def evals(self, run_id: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """Held-out evals logged as metrics (``eval/accuracy``, ``eval/n``) and, for an ``rllm eval`` run,
        a page of its result rows."""
        series = self.metrics(run_id, ["eval/accuracy", "eval/n"])["series"]
        n_at = dict(map(tuple, series.get("eval/n", [])))
        evals = [
            {"step": s, "accuracy": a, "n": None if n_at.get(s) is None else int(n_at[s])}
            for s, a in series.get("eval/accuracy", [])
        ]
        with self._read() as conn:
            seq = _run_row(conn, run_id, "seq")[0]
            total = conn.execute("SELECT COUNT(*) FROM eval_results WHERE run = ?", (seq,)).fetchone()[0]
            rows = conn.execute(
                "SELECT task_id, sample, reward, is_correct, output, info, error, termination_reason FROM eval_results "
                "WHERE run = ? ORDER BY task_id, sample LIMIT ? OFFSET ?",
                (seq, limit, offset),
            ).fetchall()
        results = [
            {
                "task_id": r[0],
                "sample": r[1],
                "reward": r[2],
                "is_correct": None if r[3] is None else bool(r[3]),
                "output": r[4],
                "info": json.loads(r[5]),
                "error": r[6],
                "termination_reason": r[7],
            }
            for r in rows
        ]
        return {"evals": evals, "results": results, "total": total}


def _series(
    conn: sqlite3.Connection, key_id: int, after: int, max_points: int | None
) -> list[tuple[int, Any]]:
    """One metric's points after step ``after``. More than ``max_points`` are thinned in SQL (a
    100,000-step series never becomes Python objects): every k-th point of the series' own spacing
    (``(step - first) % (spacing * k) = 0``, served by the primary key), plus the last point."""
    where = "key_id = ? AND step > ?"
    n = conn.execute(f"SELECT COUNT(*) FROM metrics WHERE {where}", (key_id, after)).fetchone()[0]
    if max_points is None or n <= max_points:
        return conn.execute(
            f"SELECT step, value FROM metrics WHERE {where} ORDER BY step", (key_id, after)
        ).fetchall()
    first = conn.execute(
        f"SELECT step FROM metrics WHERE {where} ORDER BY step LIMIT 1", (key_id, after)
    ).fetchone()[0]
    last = conn.execute(
        f"SELECT step, value FROM metrics WHERE {where} ORDER BY step DESC LIMIT 1", (key_id, after)
    ).fetchone()
    spacing = max(
        1, round((last[0] - first) / (n - 1))
    )  # 1 for a metric of every step, 8 for an eval every 8
    every = spacing * math.ceil(n / max_points)
    points = conn.execute(
        f"SELECT step, value FROM metrics WHERE {where} AND (step - ?) % ? = 0 ORDER BY step",
        (key_id, after, first, every),
    ).fetchall()
    if len(points) < max_points // 4:  # irregular steps the stride missed: one point per bucket of steps
        points = conn.execute(
            f"SELECT MIN(step), value FROM metrics WHERE {where} GROUP BY (step - ?) / ? ORDER BY 1",
            (key_id, after, first, max(1, math.ceil((last[0] - first + 1) / max_points))),
        ).fetchall()
    return points if points[-1][0] == last[0] else [*points, last]


def _alerts(conn: sqlite3.Connection, run_seq: int) -> tuple[list[dict[str, Any]], list[list[float]]]:
    """The run's monitor alerts, from the ``monitor/<monitor>/alert[/<check>]`` metrics (1 while an alert
    holds; ``rllm.trainer.monitors``): for each, the steps it held at (first, last, how many) and whether it
    holds at the last step logged. And the drift monitor's temperature changes, ``[[step, temperature]]``."""
    rows = conn.execute(
        "SELECT k.name, MIN(m.step), MAX(m.step), COUNT(m.step), (SELECT l.value FROM metrics l "
        "WHERE l.key_id = k.key_id ORDER BY l.step DESC LIMIT 1) FROM metric_keys k "
        "JOIN metrics m ON m.key_id = k.key_id AND m.value > 0 "
        "WHERE k.run = ? AND k.name >= 'monitor/' AND k.name < 'monitor0' GROUP BY k.key_id ORDER BY k.name",
        (run_seq,),
    ).fetchall()
    alerts = []
    for name, first, last, count, latest in rows:
        parts = name.split("/")  # monitor/<monitor>/alert[/<check>]
        if len(parts) not in (3, 4) or parts[2] != "alert":
            continue
        alerts.append(
            {
                "key": name,
                "monitor": parts[1],
                "check": parts[3] if len(parts) == 4 else None,
                "first_step": first,
                "last_step": last,
                "steps": count,
                "active": bool(latest and latest > 0),
            }
        )
    changes = conn.execute(
        "SELECT c.step, t.value FROM metric_keys kc JOIN metrics c ON c.key_id = kc.key_id AND c.value != 0 "
        "JOIN metric_keys kt ON kt.run = kc.run AND kt.name = 'monitor/drift/temperature' "
        "JOIN metrics t ON t.key_id = kt.key_id AND t.step = c.step "
        "WHERE kc.run = ? AND kc.name = 'monitor/drift/temperature_change' ORDER BY c.step",
        (run_seq,),
    ).fetchall()
    return alerts, [[step, value] for step, value in changes]


def _has_tables(conn: sqlite3.Connection) -> bool:
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
        is not None
    )


def _run_row(conn: sqlite3.Connection, run_id: str, columns: str) -> tuple[Any, ...]:
    row = conn.execute(f"SELECT {columns} FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise NotFound(f"no run {run_id!r}")
    return row


def _episode_row(conn: sqlite3.Connection, episode_id: str, columns: str) -> tuple[Any, ...]:
    row = conn.execute(
        f"SELECT {columns} FROM episodes e JOIN runs r ON r.seq = e.run WHERE e.id = ?", (episode_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no episode {episode_id!r}")
    return row


def _episode_summary(r: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": r[0],
        "step": r[1],
        "task_id": r[2],
        "reward": r[3],
        "is_correct": None if r[4] is None else bool(r[4]),
        "termination_reason": r[5],
        "error": r[6],
        "roles": json.loads(r[7]),
        "n_steps": r[8],
        "preview": r[9],
    }


def _token_texts(conn: sqlite3.Connection, run_seq: int, ids: set[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    wanted = sorted(ids)
    for i in range(0, len(wanted), 900):  # well under SQLite's bound-parameter limit
        chunk = wanted[i : i + 900]
        out.update(
            conn.execute(
                f"SELECT token_id, text FROM token_texts WHERE run = ? AND token_id IN ({', '.join('?' * len(chunk))})",
                (run_seq, *chunk),
            ).fetchall()
        )
    return out
