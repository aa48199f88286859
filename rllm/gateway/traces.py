"""The trace store: every LLM call the gateway serves, with the exact tokens and logprobs behind it.

A **Trace** is one sampled choice of one request: what the model was shown (``prompt_token_ids``), what it
produced (``completion_token_ids``, one ``logprobs`` entry per token) and what the client received
(``response_text``, and for chat the whole ``response_message`` with any tool calls). A request with
``n > 1`` gives ``n`` traces that share a ``request_id`` and differ in ``choice_index``: each choice is a
separate training sample. The workflow runner later reads a session's traces and turns them into
:class:`rllm.types.Step` objects; it never re-tokenizes ``response_text``.

A **session** is the unit an agent run is routed by (``/sessions/{id}/v1``). It exists implicitly as soon
as a trace names it, or explicitly when created with sampling overrides (the trainer does that, so an
agent's own ``temperature=0.7`` cannot change how the policy is sampled during training).

Storage is SQLite in WAL mode: :meth:`TraceStore.add_many` returns only after its transaction is committed,
so a trace the client saw acknowledged survives the process being killed; with ``fsync=True``
(``synchronous=FULL``) it also survives the machine losing power. :meth:`TraceStore.add_groups` writes
several calls' traces in one transaction, one fsync for all (the gateway's group commit).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Self

from rllm.types import Trace  # defined with the data model: the engine assembles Steps from it too

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
    response_message TEXT,
    prompt_token_ids TEXT NOT NULL,
    completion_token_ids TEXT NOT NULL,
    logprobs TEXT NOT NULL,
    completion_mask TEXT,
    finish_reason TEXT,
    latency_ms REAL NOT NULL,
    weight_version INTEGER NOT NULL,
    trainable INTEGER NOT NULL,
    upstream TEXT NOT NULL,
    last_weight_version INTEGER
);
CREATE INDEX IF NOT EXISTS traces_by_session ON traces (session_id, seq);
CREATE INDEX IF NOT EXISTS traces_by_request ON traces (request_id);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    sampling TEXT NOT NULL,
    metadata TEXT NOT NULL
);
"""

_BUSY_TIMEOUT_S = 30.0

_COLUMNS = (
    "trace_id",
    "session_id",
    "request_id",
    "choice_index",
    "created_at",
    "endpoint",
    "request",
    "response_text",
    "response_message",
    "prompt_token_ids",
    "completion_token_ids",
    "logprobs",
    "completion_mask",
    "finish_reason",
    "latency_ms",
    "weight_version",
    "trainable",
    "upstream",
    "last_weight_version",
)
_INSERT = f"INSERT INTO traces ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_JSON_COLUMNS = {
    "request",
    "response_message",
    "prompt_token_ids",
    "completion_token_ids",
    "logprobs",
    "completion_mask",
}
# Columns added after the first layout, with the SQL type they are added as: a store written before them
# gains the column when opened, and its old rows read as NULL (for completion_mask: every token sampled).
_ADDED_COLUMNS = {"completion_mask": "TEXT", "last_weight_version": "INTEGER"}


# The SamplingParams fields a session may override for every call made in it (``n`` stays the client's).
OVERRIDABLE_SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "ignore_eos")


class SessionInfo(BaseModel):
    """A session's settings: ``sampling`` fields override those of every request made in the session."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    created_at: float = Field(default_factory=time.time)
    sampling: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    num_traces: int = 0


class TraceQuery(BaseModel):
    """Filters of ``GET /traces``. ``session_prefix`` selects an episode's role sessions
    (``ep1:solver``, ``ep1:judge``) at once; ``after_seq`` pages (pass the last ``seq`` seen)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    session_prefix: str | None = None
    endpoint: Literal["chat.completions", "completions", "responses", "messages"] | None = None
    since: float | None = None  # created_at >= since (unix seconds)
    after_seq: int = Field(0, ge=0, lt=2**63)
    limit: int = Field(100, ge=1, le=10_000)


class TraceStore:
    """Traces and sessions in one SQLite file. Blocking: call it from a worker thread inside async code.

    One connection shared by the threads that use this object, serialized by a lock. Other processes
    open their own: readers (WAL lets them read while the gateway writes) and other writers, such as the
    workers of :class:`rllm.gateway.pool.GatewayProcesses` sharing one store, which take turns at the
    write lock (``busy_timeout``); every trace is stored exactly once, in commit order of ``seq``.
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Several processes may write one store (the workers of rllm.gateway.pool.GatewayProcesses, one
        # writer at a time in WAL mode): a writer that finds the lock taken waits up to busy_timeout for
        # it instead of failing with "database is locked". Every write here is one short transaction.
        # BEGIN IMMEDIATE: a write transaction takes the write lock when it begins (waiting for it), never
        # upgrades a read snapshot that another process's commit has made stale mid-transaction.
        self._conn = sqlite3.connect(
            self.path, check_same_thread=False, timeout=_BUSY_TIMEOUT_S, isolation_level="IMMEDIATE"
        )
        self._conn.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}")
        self._conn.execute("PRAGMA journal_mode=WAL")
        # A committed WAL transaction is in the OS's hands: it survives the gateway being killed (kill -9, a
        # crash) with synchronous=NORMAL. FULL also fsyncs every commit, to survive the machine losing power,
        # at ~0.1-1 ms per call.
        self._conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        with self._conn:
            self._conn.executescript(_SCHEMA)
        cols = self._add_new_columns()
        if not set(_COLUMNS) <= cols:
            raise RuntimeError(
                f"{self.path} holds traces in an older layout (missing columns "
                f"{sorted(set(_COLUMNS) - cols)}): point the gateway at a new --store file"
            )

    def _add_new_columns(self) -> set[str]:
        """Bring a store written by an older rllm up to this layout (``ALTER TABLE ... ADD COLUMN``), and
        return the column names. Another process opening the same store may add a column first: fine."""
        cols = {r[1] for r in self._conn.execute("PRAGMA table_info(traces)")}
        for name, sql_type in _ADDED_COLUMNS.items():
            if name in cols:
                continue
            try:
                with self._conn:
                    self._conn.execute(f"ALTER TABLE traces ADD COLUMN {name} {sql_type}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise
            cols.add(name)
        return cols

    # ------------------------------------------------------------------ traces
    def add(self, trace: Trace) -> None:
        """Store one trace; it is committed when this returns."""
        self.add_many([trace])

    def add_many(self, traces: Iterable[Trace]) -> None:
        """Store several traces in one transaction (all choices of an ``n > 1`` request)."""
        rows = [_to_row(t) for t in traces]
        if not rows:
            return
        with self._lock, self._conn:
            self._conn.executemany(_INSERT, rows)

    def add_groups(self, groups: Sequence[Iterable[Trace]]) -> list[sqlite3.Error | None]:
        """Store several calls' traces (a group each) in ONE transaction: one commit, so with ``fsync=True``
        one fsync for all of them (the gateway's group commit, :mod:`rllm.gateway.group_commit`).

        Each group goes in under its own savepoint, in order (their ``seq`` follows the order of
        ``groups``): a group SQLite refuses (a constraint, a trigger's ``RAISE(ABORT)``) is left out alone,
        its entry in the returned list the error, every other entry None. Raises ``sqlite3.Error`` when
        the transaction itself fails (it cannot begin, a statement rolls it back, the commit fails): then
        no group of this call is stored, and what was committed before stays as it was."""
        rows_per_group = [[_to_row(t) for t in g] for g in groups]
        errors: list[sqlite3.Error | None] = [None] * len(rows_per_group)
        if not any(rows_per_group):
            return errors
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                for i, rows in enumerate(rows_per_group):
                    conn.execute("SAVEPOINT one_call")
                    try:
                        conn.executemany(_INSERT, rows)
                    except sqlite3.Error as exc:
                        if not conn.in_transaction:  # the statement ended the whole transaction
                            raise
                        conn.execute("ROLLBACK TO one_call")
                        errors[i] = exc
                    conn.execute("RELEASE one_call")
                conn.commit()
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
        return errors

    def list(self, session_id: str) -> list[Trace]:
        """A session's traces in the order they were stored."""
        return [t for _, t in self.query(TraceQuery(session_id=session_id, limit=10_000))]

    def request(self, request_id: str) -> list[Trace]:
        """The traces of one request (one per choice), by the id its reply carried; [] if unknown. A
        Responses API ``previous_response_id`` is read back this way, from any process sharing the store."""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM traces WHERE request_id = ? ORDER BY choice_index"
        with self._lock:
            rows = self._conn.execute(sql, (request_id,)).fetchall()
        return [_from_row(r) for r in rows]

    def query(self, q: TraceQuery) -> list[tuple[int, Trace]]:
        """``(seq, trace)`` pairs matching ``q``, oldest first."""
        where, args = ["seq > ?"], [q.after_seq]
        if q.session_id is not None:
            where.append("session_id = ?")
            args.append(q.session_id)
        if q.session_prefix is not None:
            # substr, not LIKE: '_' and '%' are ordinary characters in session ids.
            where.append("substr(session_id, 1, ?) = ?")
            args += [len(q.session_prefix), q.session_prefix]
        if q.endpoint is not None:
            where.append("endpoint = ?")
            args.append(q.endpoint)
        if q.since is not None:
            where.append("created_at >= ?")
            args.append(q.since)
        sql = (
            f"SELECT seq, {', '.join(_COLUMNS)} FROM traces WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        )
        with self._lock:
            rows = self._conn.execute(sql, (*args, q.limit)).fetchall()
        return [(r[0], _from_row(r[1:])) for r in rows]

    # ------------------------------------------------------------------ sessions
    def create_session(self, info: SessionInfo) -> SessionInfo:
        """Register a session with its overrides; raises ``KeyError`` if it already exists."""
        # One INSERT, no SELECT first: another process may create the same id between the two (the
        # primary key decides, atomically, which of them did).
        try:
            with self._lock, self._conn:
                self._conn.execute(
                    "INSERT INTO sessions (session_id, created_at, sampling, metadata) VALUES (?, ?, ?, ?)",
                    (info.session_id, info.created_at, json.dumps(info.sampling), json.dumps(info.metadata)),
                )
        except sqlite3.IntegrityError:
            raise KeyError(info.session_id) from None
        return info

    def session(self, session_id: str) -> SessionInfo | None:
        """A session's settings and trace count; None when it was neither created nor used."""
        with self._lock:
            row = self._conn.execute(
                "SELECT created_at, sampling, metadata FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            count, first = self._conn.execute(
                "SELECT COUNT(*), MIN(created_at) FROM traces WHERE session_id = ?", (session_id,)
            ).fetchone()
        if row is None and count == 0:
            return None
        if row is None:
            return SessionInfo(session_id=session_id, created_at=first, num_traces=count)
        return SessionInfo(
            session_id=session_id,
            created_at=row[0],
            sampling=json.loads(row[1]),
            metadata=json.loads(row[2]),
            num_traces=count,
        )

    def sessions(self) -> list[str]:
        """Every session id, created or with at least one trace, in order of first appearance."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT session_id, MIN(t) FROM ("
                " SELECT session_id, created_at AS t FROM sessions"
                " UNION ALL SELECT session_id, MIN(created_at) FROM traces GROUP BY session_id"
                ") GROUP BY session_id ORDER BY MIN(t)"
            ).fetchall()
        return [r[0] for r in rows]

    def delete_session(self, session_id: str) -> int:
        """Forget a session and its traces; returns how many traces were deleted."""
        with self._lock, self._conn:
            n = self._conn.execute("DELETE FROM traces WHERE session_id = ?", (session_id,)).rowcount
            self._conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        return n

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
    # SQL NULL only in a column added later (_ADDED_COLUMNS), on rows written before it: None.
    data = {c: json.loads(v) if c in _JSON_COLUMNS and v is not None else v for c, v in zip(_COLUMNS, row)}
    data["trainable"] = bool(data["trainable"])
    return Trace.model_validate(data)
