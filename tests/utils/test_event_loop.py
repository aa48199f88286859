"""``RunLoop``: one event loop across many synchronous ``run`` calls, cleaned up like ``asyncio.run``'s."""

from __future__ import annotations

import asyncio

from rllm.utils.event_loop import RunLoop


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_every_run_uses_the_same_loop_until_close() -> None:
    loop = RunLoop()
    first = loop.run(_running_loop())
    assert loop.run(_running_loop()) is first  # what asyncio.run could never give: two calls, one loop
    loop.close()
    loop.close()  # safe twice
    assert first.is_closed()
    fresh = loop.run(_running_loop())  # a new loop after close
    assert fresh is not first and not fresh.is_closed()
    loop.close()


def test_state_made_in_one_run_works_in_the_next() -> None:
    loop = RunLoop()
    queue: asyncio.Queue[int] = loop.run(_make_queue())  # bound to the loop on first use
    loop.run(queue.put(1))
    assert loop.run(queue.get()) == 1
    loop.close()


async def _make_queue() -> asyncio.Queue[int]:
    return asyncio.Queue()


def test_close_cancels_what_is_left_and_finishes_async_generators() -> None:
    loop = RunLoop()
    events: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            events.append("agen closed")

    async def start() -> object:
        asyncio.get_running_loop().create_task(forever())
        gen = agen()
        await gen.__anext__()  # left suspended: close() must finish it
        await asyncio.sleep(0)
        return gen

    gen = loop.run(start())
    loop.close()
    assert sorted(events) == ["agen closed", "cancelled"]
    del gen


def test_a_loop_nobody_closes_is_closed_when_its_owner_goes() -> None:
    import gc

    loop = RunLoop()
    inner = loop.run(_running_loop())
    del loop
    gc.collect()
    assert inner.is_closed()  # as asyncio.run would have closed it
