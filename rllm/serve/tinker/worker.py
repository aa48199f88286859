"""One worker per trained model: its requests run one at a time, in the client's order, off the event loop.

A Tinker ``TrainingClient`` numbers its requests (``seq_id`` 1, 2, ...; model creation is 0 here) and
expects them to run in that order, even when they arrive out of it: the chunks of one large
``forward_backward`` are sent in parallel, the first one last. The worker keeps submitted operations by
``seq_id`` and runs the next one only once it has arrived. Each operation's torch work runs on the
model's own single thread (so the HTTP handlers never block on it, and one model's state is only ever
touched from one thread); its result resolves the request's future on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rllm.serve.tinker.futures import FutureRecord, FutureStore

logger = logging.getLogger(__name__)

# A request waited on for this long (a gap in seq_ids) is logged: the client lost one or gave up.
GAP_WARNING_S = 60.0


class RequestError(ValueError):
    """A request the service refuses (bad input, unsupported feature): reported to the client as a user
    error through the request's future, never as a server failure."""


@dataclass
class Operation:
    """What one request does: ``run`` is called on the model's thread and returns the result (a JSON
    dict, or protobuf bytes for the two result types the SDK reads as protobuf)."""

    name: str
    run: Callable[[], dict[str, Any] | bytes]
    record: FutureRecord


class ModelWorker:
    """Runs one model's operations in ``seq_id`` order on one thread."""

    def __init__(
        self, model_id: str, futures: FutureStore, on_close: Callable[[], None] | None = None
    ) -> None:
        self.model_id = model_id
        self._on_close = on_close  # run on the model's thread after its last operation (frees the backend)
        self._futures = futures
        self._pending: dict[int, Operation] = {}
        self._by_seq: dict[int, str] = {}  # seq_id -> request id, so a resent request gets its first answer
        self._next_seq = 0
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tinker-{model_id}")
        self._closing = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"tinker-worker-{model_id}")

    def submit(self, seq_id: int | None, op: Operation) -> str:
        """Queue ``op`` at ``seq_id`` (the next free one when the client sent none); return the request id
        that answers it (the earlier one when this ``seq_id`` was already submitted: a resent request)."""
        if seq_id is None:
            seq_id = max([self._next_seq, *(s + 1 for s in self._pending)])
        if seq_id in self._by_seq:
            return self._by_seq[seq_id]
        if seq_id < self._next_seq:
            self._futures.fail(op.record, f"seq_id {seq_id} of model {self.model_id} already ran", "user")
            return op.record.request_id
        self._by_seq[seq_id] = op.record.request_id
        self._pending[seq_id] = op
        self._wake.set()
        return op.record.request_id

    def close(self) -> None:
        """Stop once every queued operation that can run has run (a finished session's model)."""
        self._closing = True
        self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._pending)

    async def _next(self) -> Operation | None:
        """The operation whose turn it is, waiting for it to arrive; None once closing and nothing runs."""
        waited = 0.0
        while self._next_seq not in self._pending:
            if self._closing:
                return None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=GAP_WARNING_S)
            except asyncio.TimeoutError:
                waited += GAP_WARNING_S
                if self._pending:
                    logger.warning(
                        "model %s: waiting %.0f s for request seq_id %d (%d later ones queued)",
                        self.model_id,
                        waited,
                        self._next_seq,
                        len(self._pending),
                    )
        op = self._pending.pop(self._next_seq)
        self._next_seq += 1
        return op

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (op := await self._next()) is not None:
                try:
                    out = await loop.run_in_executor(self._executor, op.run)
                except RequestError as exc:
                    self._futures.fail(op.record, str(exc), "user")
                except Exception as exc:  # one failed request never stops the model's queue
                    logger.exception("model %s: %s failed", self.model_id, op.name)
                    self._futures.fail(op.record, f"{op.name} failed: {type(exc).__name__}: {exc}", "server")
                else:
                    if isinstance(out, bytes):
                        self._futures.resolve(op.record, proto=out)
                    else:
                        self._futures.resolve(op.record, result=out)
        finally:
            if self._on_close is not None:
                try:
                    await loop.run_in_executor(self._executor, self._on_close)
                except Exception:  # a failed release must not hide the queue's own outcome
                    logger.exception("model %s: releasing its backend failed", self.model_id)
            self._executor.shutdown(wait=False)

    async def run_now(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on this model's thread outside the queue (a read that must not race its training)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
