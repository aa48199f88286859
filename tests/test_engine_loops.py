"""The local engine serves callers on several event loops at once: the trainer's loop and an embedded
gateway's thread share one engine (a hang here once froze a run that mixed both)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine


def test_engine_serves_loops_in_two_threads(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    params = SamplingParams(max_tokens=3, seed=1)
    results: dict[str, list] = {}

    def other_thread() -> None:  # a long-lived loop, like the gateway's
        async def run() -> None:
            results["a"] = await asyncio.gather(*(engine.generate([1, 2, 3], params) for _ in range(4)))
            await asyncio.sleep(0.3)  # its worker outlives the calls
            results["a2"] = await engine.generate([4, 5], params)

        asyncio.run(run())

    t = threading.Thread(target=other_thread)
    t.start()
    for _ in range(3):  # short-lived loops in the main thread, as `rllm eval` or a caller's asyncio.run make
        results.setdefault("b", []).append(asyncio.run(asyncio.wait_for(engine.generate([7, 8], params), 30)))
    t.join(timeout=60)
    assert not t.is_alive()
    assert len(results["a"]) == 4 and len(results["b"]) == 3 and results["a2"][0].completion_ids
    # Seeded rows give the same tokens whichever loop asked.
    assert results["b"][0][0].completion_ids == results["b"][2][0].completion_ids
