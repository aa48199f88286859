"""``EpisodeJournal``: every finished episode of a run, persisted as it finishes, for recovery and replay.

    journal = EpisodeJournal(run_dir / "journal.db")
    journal.record(step, "r0:13", episode)       # committed on return; once per (step, key)
    journal.episodes(step)                       # {"r0:13": Episode, ...}: what a resumed step reuses
    journal.record_batch(step, summary)          # what the step's batch and update produced (replay checks it)

One SQLite file (WAL) in the run directory, beside the checkpoints; not the workspace's run store, which
keeps a sample of each step for the UI. ``step`` is the trainer's step index: the step that starts from
checkpoint ``step_<step>`` (its metrics are logged at ``step + 1``). ``key`` names the job within the step:
``r<round>:<index>``, refill round ``round`` (0: the step's own tasks) and the job's index in that round.

A resumed run (``trainer.resume=true``) takes a step's journaled episodes in place of sampling them again
and samples only the missing keys, so a kill loses no finished episode and none is trained twice. A row is
committed before ``record`` returns: it survives the process being killed (SIGKILL); with ``fsync=True``
it also survives the machine losing power, at the cost of one fsync per episode.

Thread-safe: ``record`` may be called from an event loop's thread while another thread writes batches (one
connection behind a lock; each call is one short transaction). Blocking (sqlite3): from inside an event
loop, each call holds the loop for one small write.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from typing_extensions import Self

from rllm.types import Episode

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    step INTEGER NOT NULL,
    key TEXT NOT NULL,
    episode TEXT NOT NULL,
    PRIMARY KEY (step, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    step INTEGER PRIMARY KEY,
    summary TEXT NOT NULL
);
"""


class EpisodeJournal:
    """The episode journal at ``path`` (created if missing). See the module docstring."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # One connection shared by the threads that record (serialised by the lock); autocommit mode, so
        # each statement below is its own committed transaction.
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a committed row survives the process's death; FULL also a power loss.
        self._conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        self._conn.executescript(_SCHEMA)

    def record(self, step: int, key: str, episode: Episode) -> bool:
        """Persist ``episode`` as job ``key`` of ``step``; True if stored, False if that key already was
        (the first one recorded stays). Committed when it returns."""
        text = dumps(episode.model_dump(mode="json"))
        with self._lock:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO episodes (step, key, episode) VALUES (?, ?, ?)", (step, key, text)
            )
            return cur.rowcount == 1

    def episodes(self, step: int) -> dict[str, Episode]:
        """The episodes journaled for ``step``, by key (in key order)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT key, episode FROM episodes WHERE step = ? ORDER BY key", (step,)
            ).fetchall()
        return {key: Episode.model_validate(json.loads(text)) for key, text in rows}

    def record_batch(self, step: int, summary: dict[str, Any]) -> None:
        """Record what ``step``'s batch preparation and update produced (replacing what an earlier,
        killed attempt at the step recorded). Committed when it returns."""
        text = dumps(summary)
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO batches (step, summary) VALUES (?, ?)", (step, text))

    def batch(self, step: int) -> dict[str, Any] | None:
        """What ``record_batch`` recorded for ``step``, or None."""
        with self._lock:
            row = self._conn.execute("SELECT summary FROM batches WHERE step = ?", (step,)).fetchone()
        return None if row is None else json.loads(row[0])

    def steps(self) -> list[int]:
        """The steps with any journaled episode or recorded batch, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT step FROM episodes UNION SELECT step FROM batches ORDER BY step"
            ).fetchall()
        return [step for (step,) in rows]

    def clear(self) -> None:
        """Forget everything (a run that starts afresh in a directory a killed run left a journal in)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("DELETE FROM episodes")
            self._conn.execute("DELETE FROM batches")
            self._conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (safe to call twice)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dumps(value: Any) -> str:
    """JSON that keeps every float exactly, ``-inf`` logprobs included (as ``-Infinity``, which
    ``json.loads`` reads back)."""
    return json.dumps(value, allow_nan=True, separators=(",", ":"))
