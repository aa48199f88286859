"""The trace store: every LLM call the gateway serves, with the exact tokens and logprobs behind it.

A **Trace** is one sampled choice of one request: what the model was shown (``prompt_token_ids``), what it
produced (``completion_token_ids``, one ``logprobs`` entry per token) and the text the client received.
A request with ``n > 1`` gives ``n`` traces that share a ``request_id`` and differ in ``choice_index``:
each choice is a separate training sample. The workflow engine later reads a session's traces and turns
them into :class:`rllm.types.Step` objects; it never re-tokenizes ``response_text``.

Storage is SQLite in WAL mode with ``synchronous=FULL``: :meth:`TraceStore.add` returns only after its
transaction is on disk, so a trace the client saw acknowledged survives the process being killed. The
table is meant to live in the run store's database file once ``rllm/store`` exists.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Self

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    choice_index INTEGER NOT NULL,
    created_at REAL NOT NULL,
    endpoint TEXT NOT NULL,
    request TEXT NOT NULL,
    response_text TEXT NOT NULL,
    prompt_token_ids TEXT NOT NULL,
    completion_token_ids TEXT NOT NULL,
    logprobs TEXT NOT NULL,
    finish_reason TEXT,
    latency_ms REAL NOT NULL,
    weight_version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_by_session ON traces (session_id, seq);
"""

_COLUMNS = (
    "trace_id", "session_id", "request_id", "choice_index", "created_at", "endpoint", "request",
    "response_text", "prompt_token_ids", "completion_token_ids", "logprobs", "finish_reason",
    "latency_ms", "weight_version",
)
_JSON_COLUMNS = {"request", "prompt_token_ids", "completion_token_ids", "logprobs"}


class Trace(BaseModel):
    """One sampled choice of one gateway request, recorded token-faithfully.

    ``request`` is the validated request as the gateway understood it (messages or prompt, and the
    sampling params it used). ``response_text`` is the text returned to the client (cut before a stop
    string when one matched); ``completion_token_ids`` keep every sampled token, the stop string's and the
    eos token included. ``weight_version`` is the policy version that sampled it.
    """

    model_config = ConfigDict(extra="forbid")

    trace_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str
    request_id: str
    choice_index: int = 0
    created_at: float = Field(default_factory=time.time)
    endpoint: Literal["chat.completions", "completions"]
    request: dict[str, Any]
    response_text: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None
    latency_ms: float
    weight_version: int = 0

    @model_validator(mode="after")
    def _check_lengths(self) -> Trace:
        if len(self.logprobs) != len(self.completion_token_ids):
            raise ValueError(
                f"Trace needs one logprob per completion token: got {len(self.logprobs)} logprobs for "
                f"{len(self.completion_token_ids)} tokens"
            )
        return self


class TraceStore:
    """Traces in one SQLite file. Blocking: call it from a worker thread inside async code.

    One connection shared by the threads that use this object, serialized by a lock; readers in other
    processes open their own connection (WAL lets them read while the gateway writes).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: fsync the WAL on every commit, so an acknowledged trace survives a crash, not only kill -9.
        self._conn.execute("PRAGMA synchronous=FULL")
        with self._conn:
            self._conn.executescript(_SCHEMA)

    def add(self, trace: Trace) -> None:
        """Store one trace; it is committed (and fsynced) when this returns."""
        self.add_many([trace])

    def add_many(self, traces: Iterable[Trace]) -> None:
        """Store several traces in one transaction (all choices of an ``n > 1`` request)."""
        rows = [_to_row(t) for t in traces]
        if not rows:
            return
        sql = f"INSERT INTO traces ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        with self._lock, self._conn:
            self._conn.executemany(sql, rows)

    def list(self, session_id: str) -> list[Trace]:
        """A session's traces in the order they were stored."""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM traces WHERE session_id = ? ORDER BY seq"
        with self._lock:
            rows = self._conn.execute(sql, (session_id,)).fetchall()
        return [_from_row(r) for r in rows]

    def sessions(self) -> list[str]:
        """Every session id with at least one trace, in order of its first trace."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT session_id FROM traces GROUP BY session_id ORDER BY MIN(seq)"
            ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _to_row(trace: Trace) -> tuple[Any, ...]:
    data = trace.model_dump()
    return tuple(json.dumps(data[c]) if c in _JSON_COLUMNS else data[c] for c in _COLUMNS)


def _from_row(row: tuple[Any, ...]) -> Trace:
    data = {c: json.loads(v) if c in _JSON_COLUMNS else v for c, v in zip(_COLUMNS, row)}
    return Trace.model_validate(data)
