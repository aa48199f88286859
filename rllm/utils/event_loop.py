"""One event loop for many synchronous calls: what a run's phases share instead of an ``asyncio.run`` each.

``asyncio.run`` makes a new loop per call and closes it after, so an async client made in one call (an
``httpx.AsyncClient``, an ``openai.AsyncOpenAI``, LangChain's per-URL cache) is bound to a closed loop in
the next. ``RunLoop.run`` runs every coroutine on the same loop until ``close``.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class RunLoop:
    """An event loop made on first use, reused by every ``run`` until ``close`` (then a new one). A loop
    its owner never closes is closed when the ``RunLoop`` is collected or the interpreter exits, as
    ``asyncio.run`` would have closed it: a loop left open keeps its executor's threads alive into the
    interpreter's shutdown."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finalizer: weakref.finalize | None = None
        self._runner = 0  # the thread that runs the loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the loop, blocking. From the thread that runs the loop this must not be
        called inside it; from another thread while the loop runs (the async trainer's training thread), the
        coroutine is handed to the loop and this waits for its result."""
        loop = self._loop
        if loop is not None and loop.is_running() and threading.get_ident() != self._runner:
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        if loop is None:
            loop = self._loop = asyncio.new_event_loop()
            self._finalizer = weakref.finalize(self, _close_loop, loop)
        self._runner = threading.get_ident()
        return loop.run_until_complete(coro)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop soon, from any thread (at once when no loop runs)."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(fn)
        else:
            fn()

    def close(self) -> None:
        """Cancel the tasks left on the loop, finish its async generators and default executor, and close
        it, as ``asyncio.run`` does at its end. Safe to call twice."""
        finalizer, self._loop, self._finalizer = self._finalizer, None, None
        if finalizer is not None:
            finalizer()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if loop.is_closed():
        return
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
