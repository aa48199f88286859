"""The run store's tables, and how writers and readers open the one SQLite file.

Layout (one database per workspace, WAL mode):

- ``runs``: one row per training run, ``rllm eval`` run or gateway session log: identity, status,
  heartbeat, config snapshot, code version, summary, and the latest value of a few headline metrics
  (kept up to date by the writer, so the runs page reads one row per run).
- ``metric_keys`` / ``metrics``: every logged scalar as ``(key_id, step) -> value``; a key id names one
  metric of one run, so a series is one contiguous range of the ``metrics`` primary key.
- ``episodes``: the sampled episodes of each step, one small row each: the columns the episode browser
  lists and filters on. ``episode_details`` holds the rest (JSON: task, info, trajectories with their
  steps' messages and responses), apart so that filtering never reads it.
  ``episodes_text`` (FTS5, trigram) indexes the question and response texts for substring search.
- ``episode_steps``: per LLM call, the token arrays packed little-endian (ids int32, logprobs float32,
  mask uint8), so a token view is one row read.
- ``token_texts``: the decoded text of each token id a run used, written once per id per run; the UI
  never loads a tokenizer.
- ``eval_results``: the rows of an ``rllm eval`` run, one per (item, sample).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    heartbeat_at REAL NOT NULL,
    last_step INTEGER,
    model TEXT,
    task TEXT,
    location TEXT,
    config TEXT NOT NULL,
    code_version TEXT,
    summary TEXT,
    error TEXT,
    latest TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_at);
CREATE INDEX IF NOT EXISTS runs_by_location ON runs (location, kind);

CREATE TABLE IF NOT EXISTS metric_keys (
    key_id INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    name TEXT NOT NULL,
    UNIQUE (run, name)
);
CREATE TABLE IF NOT EXISTS metrics (
    key_id INTEGER NOT NULL,
    step INTEGER NOT NULL,
    value REAL,
    PRIMARY KEY (key_id, step)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS episodes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    run INTEGER NOT NULL,
    step INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    reward REAL,
    is_correct INTEGER,
    termination_reason TEXT NOT NULL,
    error TEXT,
    roles TEXT NOT NULL,
    n_steps INTEGER NOT NULL,
    preview TEXT NOT NULL
);
-- Each filter of the episode browser has an index that also yields its matches in step order.
CREATE INDEX IF NOT EXISTS episodes_by_step ON episodes (run, step);
CREATE INDEX IF NOT EXISTS episodes_by_reward ON episodes (run, reward, step);
CREATE INDEX IF NOT EXISTS episodes_by_termination ON episodes (run, termination_reason, step);
CREATE INDEX IF NOT EXISTS episodes_by_correct ON episodes (run, is_correct, step);
CREATE TABLE IF NOT EXISTS episode_details (
    episode INTEGER PRIMARY KEY,
    detail TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS episodes_text USING fts5(text, tokenize = 'trigram');

CREATE TABLE IF NOT EXISTS episode_steps (
    episode INTEGER NOT NULL,
    trajectory INTEGER NOT NULL,
    step INTEGER NOT NULL,
    prompt_ids BLOB NOT NULL,
    response_ids BLOB NOT NULL,
    logprobs BLOB NOT NULL,
    trainer_logprobs BLOB,
    mask BLOB NOT NULL,
    advantage REAL,
    drift_at INTEGER,
    PRIMARY KEY (episode, trajectory, step)
);

CREATE TABLE IF NOT EXISTS token_texts (
    run INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (run, token_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS eval_results (
    run INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    sample INTEGER NOT NULL,
    reward REAL,
    is_correct INTEGER,
    output TEXT,
    info TEXT NOT NULL,
    error TEXT,
    termination_reason TEXT,
    PRIMARY KEY (run, task_id, sample)
) WITHOUT ROWID;
"""


class StoreError(RuntimeError):
    """The run store cannot be opened or has a layout this version of rllm does not read."""


def connect_writer(path: Path, *, fsync: bool = False) -> sqlite3.Connection:
    """A read-write connection with the schema in place. Transactions are explicit (``BEGIN IMMEDIATE``):
    a write never upgrades a read lock, so two writers (a training run and an eval) wait for each other
    instead of failing with "database is locked"."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # A committed WAL transaction survives the process being killed with synchronous=NORMAL; FULL also
        # survives the machine losing power, at an fsync per commit.
        conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            conn.close()
            raise StoreError(
                f"{path} was written by a newer rllm (store layout {version}, this one reads "
                f"{SCHEMA_VERSION}): upgrade rllm or point trainer.store / --store at a new file"
            )
        if version < SCHEMA_VERSION:
            # One transaction: two processes creating the store at once both see it whole.
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot open the run store {path}: {exc}: point trainer.store (or --store, "
            "$RLLM_STORE) at a writable file"
        ) from exc
    return conn


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection: it never takes the write lock, and in WAL mode it reads a consistent
    snapshot while a writer commits."""
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False, timeout=5.0
        )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the run store {path}: {exc}") from exc
    if version > SCHEMA_VERSION:
        conn.close()
        raise StoreError(f"{path} was written by a newer rllm (store layout {version}): upgrade rllm")
    return conn


def empty_store() -> sqlite3.Connection:
    """An in-memory store with no runs: what a reader sees before anything was recorded."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(_SCHEMA)
    return conn
