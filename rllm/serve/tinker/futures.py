"""Results of submitted requests, kept until the client has fetched them (``/retrieve_future``).

Every Tinker call that does work answers at once with a ``request_id`` and the client polls for the
result. A record is created at submission, resolved (or failed) on the event loop when its work ends, and
pruned a while after it was first retrieved, so a client whose fetch was cut off can fetch it again.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

# How long a fetched result stays for a repeated fetch (a dropped connection, a retry).
RETRIEVED_TTL_S = 300.0

ErrorCategory = Literal["user", "server", "unknown"]


class UnknownFutureError(KeyError):
    """No request with that id (never submitted, or fetched and pruned long ago)."""


@dataclass
class FutureRecord:
    """One submitted request: pending until ``done`` is set, then a JSON result, protobuf bytes, or an
    error message with Tinker's error category (``user`` for a bad request, ``server`` for a failure of
    ours)."""

    request_id: str
    session_id: str | None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: dict[str, Any] | None = None
    proto: bytes | None = None
    error: str | None = None
    category: ErrorCategory = "unknown"
    retrieved_at: float | None = None


class FutureStore:
    """Every pending and recently fetched result, by request id. Lives on the server's event loop."""

    def __init__(self) -> None:
        self._records: dict[str, FutureRecord] = {}
        self._counter = itertools.count(1)

    def create(self, session_id: str | None) -> FutureRecord:
        request_id = f"req-{next(self._counter)}-{uuid.uuid4().hex[:8]}"
        record = FutureRecord(request_id, session_id)
        self._records[request_id] = record
        return record

    def resolve(
        self, record: FutureRecord, *, result: dict[str, Any] | None = None, proto: bytes | None = None
    ) -> None:
        record.result, record.proto = result, proto
        record.done.set()

    def fail(self, record: FutureRecord, message: str, category: ErrorCategory = "user") -> None:
        record.error, record.category = message, category
        record.done.set()

    async def wait(self, request_id: str, timeout_s: float) -> FutureRecord:
        """The record, once done or after ``timeout_s`` (still pending then: the client asks again)."""
        self._prune()
        record = self._records.get(request_id)
        if record is None:
            raise UnknownFutureError(request_id)
        if not record.done.is_set():
            try:
                await asyncio.wait_for(record.done.wait(), timeout_s)
            except asyncio.TimeoutError:
                return record
        if record.retrieved_at is None:
            record.retrieved_at = time.monotonic()
        return record

    def drop_session(self, session_id: str) -> None:
        """Forget a finished session's fetched results (pending ones stay until fetched or pruned)."""
        for rid in [
            r.request_id for r in self._records.values() if r.session_id == session_id and r.done.is_set()
        ]:
            del self._records[rid]

    def _prune(self) -> None:
        now = time.monotonic()
        stale = [
            rid
            for rid, r in self._records.items()
            if r.retrieved_at is not None and now - r.retrieved_at > RETRIEVED_TTL_S
        ]
        for rid in stale:
            del self._records[rid]

    def __len__(self) -> int:
        return len(self._records)
