"""Continuous batching in the local engine (tiny model, fp32): rows that join a batch mid-decode, or leave it
early, sample exactly what they would alone; a row joins the running batch instead of waiting for it to end.

Evidence of joining is counted, not timed: ``stats["batches"]`` (continuous batches started) stays at one
while ``stats["joins"]`` counts the rows merged into it between decode steps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rllm.inference.base import Completion, SamplingParams
from rllm.inference.local import LocalEngine

LOGPROB_ATOL = 1e-4  # fp32: a row's logprobs alone vs in a joined, differently padded batch
LONG = SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


def _ids(engine: LocalEngine, text: str) -> list[int]:
    return engine.tokenizer.encode(text)


async def _when_decoding(engine: LocalEngine, tokens: int) -> None:
    """Wait until the decode thread has sampled ``tokens`` more tokens (a batch is mid-decode)."""
    start = engine.stats["generated_tokens"]
    while engine.stats["generated_tokens"] - start < tokens:
        await asyncio.sleep(0.001)


def _alone(engine: LocalEngine, prompt: list[int], params: SamplingParams) -> Completion:
    (c,) = engine.generate_sync(prompt, params)
    return c


def _assert_same(joined: Completion, alone: Completion) -> None:
    assert joined.completion_ids == alone.completion_ids
    assert joined.logprobs == pytest.approx(alone.logprobs, abs=LOGPROB_ATOL, rel=0)


def test_rows_joining_and_leaving_mid_decode_sample_what_they_would_alone(engine: LocalEngine) -> None:
    first = _ids(engine, "What")
    longer = _ids(engine, "A much longer prompt than the first one, wider than the running batch's cache")
    shorter = _ids(engine, "1 2 3")
    short_params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    before = dict(engine.stats)

    async def main() -> tuple[Completion, Completion, Completion, bool]:
        running = asyncio.ensure_future(engine.generate(first, LONG))
        await _when_decoding(engine, 5)
        # Wider than the running batch: the running rows' cache is padded to the newcomer's width.
        (wide,) = await engine.generate(longer, short_params)
        long_still_running = not running.done()  # the short row left and its caller woke mid-batch
        await _when_decoding(engine, 5)
        # Narrower than the batch is now: the newcomer's cache is padded to the batch's width.
        (narrow,) = await engine.generate(shorter, short_params)
        (long_row,) = await running
        return long_row, wide, narrow, long_still_running

    long_row, wide, narrow, long_still_running = asyncio.run(main())
    assert long_still_running
    assert engine.stats["batches"] - before["batches"] == 1  # one batch, never drained in between
    assert engine.stats["joins"] - before["joins"] == 2
    assert engine.stats["joined_rows"] - before["joined_rows"] == 2
    _assert_same(long_row, _alone(engine, first, LONG))
    _assert_same(wide, _alone(engine, longer, short_params))
    _assert_same(narrow, _alone(engine, shorter, short_params))
    assert len(long_row.completion_ids) == 300 and wide.finish_reason == narrow.finish_reason == "length"


def test_max_batch_rows_admits_a_waiting_row_when_a_place_frees(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32", max_batch_rows=2)
    prompts = [_ids(engine, t) for t in ("Hello there", "The capital of France is", "1 2 3 4")]
    lengths = [40, 6, 20]  # the second row leaves early; the third, waiting, takes its place

    async def main() -> list[list[Completion]]:
        return list(
            await asyncio.gather(
                *(
                    engine.generate(p, SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True))
                    for p, m in zip(prompts, lengths)
                )
            )
        )

    outs = asyncio.run(main())
    assert engine.stats["batches"] == 1 and engine.stats["joins"] == 1  # the third row joined the batch
    for p, m, (c,) in zip(prompts, lengths, outs):
        _assert_same(c, _alone(engine, p, SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True)))


def test_a_seeded_row_samples_the_same_tokens_when_it_joins_a_batch(engine: LocalEngine) -> None:
    prompt = _ids(engine, "Once upon a time")
    seeded = SamplingParams(temperature=1.0, top_k=50, top_p=0.95, max_tokens=16, seed=1234)
    before = engine.stats["joins"]

    async def main() -> Completion:
        running = asyncio.ensure_future(engine.generate(_ids(engine, "The weather"), LONG))
        await _when_decoding(engine, 3)
        (c,) = await engine.generate(prompt, seeded)
        await running
        return c

    joined = asyncio.run(main())
    assert engine.stats["joins"] - before == 1
    _assert_same(joined, _alone(engine, prompt, seeded))


def test_a_cancelled_row_leaves_the_running_batch(engine: LocalEngine) -> None:
    endless = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)
    before = engine.stats["generated_tokens"]

    async def main() -> Completion:
        doomed = asyncio.ensure_future(engine.generate(_ids(engine, "Hello"), endless))
        await _when_decoding(engine, 5)
        doomed.cancel()  # e.g. its episode timed out
        (c,) = await engine.generate(_ids(engine, "1 2 3"), SamplingParams(temperature=0.0, max_tokens=4))
        return c

    c = asyncio.run(main())
    assert c.finish_reason == "length" and len(c.completion_ids) == 4
    # The cancelled row stopped at its next decode step, not after 100,000 tokens.
    assert engine.stats["generated_tokens"] - before < 1_000


def test_close_ends_the_decode_thread_now_and_the_engine_still_serves(engine: LocalEngine) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=4)
    first = _alone(engine, _ids(engine, "Hello"), params)
    thread = engine._thread
    assert thread is not None and thread.is_alive()  # idle, it would linger for 5 s
    engine.close(timeout_s=2.0)
    assert not thread.is_alive() and engine._thread is None
    assert _alone(engine, _ids(engine, "Hello"), params).completion_ids == first.completion_ids
