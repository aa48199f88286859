"""Group commit: the calls whose traces wait to be written at the same time share one transaction.

With ``fsync=True`` every commit waits for the disk (``synchronous=FULL``). Committed one call at a time,
the gateway's durable throughput is one call per fsync whatever the concurrency (~830 calls/s on the
reference machine). Here one writer at a time takes every call queued so far, writes all their traces in
one transaction (:meth:`~rllm.gateway.traces.TraceStore.add_groups`), commits once, and only then
answers each of those calls; calls that arrive meanwhile queue for the next transaction. One call alone
costs what it did (one transaction, one fsync); N waiting calls share one fsync.

What a call is promised does not change: :meth:`GroupCommit.record` returns only after that call's traces
are committed (on disk, with fsync), and raises when they are not. A call whose own traces SQLite refuses
(a constraint, a trigger) fails alone (its savepoint is rolled back); a transaction that fails as a whole
(it cannot begin, the commit fails, a statement rolls it back) fails exactly the calls in it. Neither
touches what earlier transactions committed.
"""

from __future__ import annotations

import asyncio

from rllm.gateway.traces import TraceStore
from rllm.types import Trace


class GroupCommit:
    """The queue of calls waiting for their traces to be committed to ``store``, and its one writer (an
    asyncio task, alive while the queue is not empty, running each transaction in a worker thread).

    Belongs to one event loop (the gateway app's). ``transactions`` and ``calls`` count what was written:
    ``calls / transactions`` is the mean number of calls per commit (per fsync)."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.transactions = 0
        self.calls = 0
        self._queue: list[tuple[list[Trace], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def record(self, traces: list[Trace]) -> None:
        """Return once ``traces`` (one call's) are committed; raise ``sqlite3.Error`` if they were not."""
        done = asyncio.get_running_loop().create_future()
        self._queue.append((traces, done))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="rllm-trace-group-commit")
        # shield: a caller that goes away (client disconnected) leaves its traces in the transaction.
        await asyncio.shield(done)

    async def _write(self) -> None:
        batch: list[tuple[list[Trace], asyncio.Future[None]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    errors: list[BaseException | None] = list(
                        await asyncio.to_thread(self.store.add_groups, [traces for traces, _ in batch])
                    )
                except Exception as exc:  # noqa: BLE001 - the whole transaction failed: each of its calls fails
                    errors = [exc] * len(batch)
                self.transactions += 1
                self.calls += len(batch)
                for (_, done), error in zip(batch, errors):
                    if error is None:
                        done.set_result(None)
                    else:
                        done.set_exception(error)
        except BaseException as exc:  # cancelled: the loop is shutting down; no waiting call may hang
            for _, done in batch + self._queue:
                if not done.done():
                    done.set_exception(RuntimeError(f"the trace writer stopped ({exc!r}): call not recorded"))
            self._queue = []
            raise
        finally:
            self._writer = None
