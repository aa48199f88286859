"""``SamplingParams.ignore_eos``: the local engine samples past eos up to ``max_tokens`` (the benchmark knob
that makes every row the same length), and stop strings still end a row."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine

GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


def test_ignore_eos_samples_past_eos_to_max_tokens(engine: LocalEngine) -> None:
    prompt = engine.tokenizer.encode("The capital of France is the city of")
    (full,) = engine.generate_sync(prompt, GREEDY)
    eos_ids = engine.eos_ids
    engine.eos_ids = [full.completion_ids[2]]  # pretend the 3rd greedy token is the eos token
    try:
        (stopped,) = engine.generate_sync(prompt, GREEDY)
        (ignored,) = engine.generate_sync(prompt, GREEDY.model_copy(update={"ignore_eos": True}))
    finally:
        engine.eos_ids = eos_ids
    assert stopped.finish_reason == "stop" and len(stopped.completion_ids) <= 3
    assert ignored.completion_ids == full.completion_ids
    assert ignored.finish_reason == "length" and len(ignored.logprobs) == GREEDY.max_tokens


def test_ignore_eos_keeps_stop_strings(engine: LocalEngine) -> None:
    prompt = engine.tokenizer.encode("Hello there, how are")
    (full,) = engine.generate_sync(prompt, GREEDY)
    stop = engine.tokenizer.decode(full.completion_ids[:3], skip_special_tokens=True)[-2:]
    if not stop.strip():
        pytest.skip("the tiny model's greedy text has no printable stop string here")
    params = GREEDY.model_copy(update={"ignore_eos": True, "stop": [stop]})
    (c,) = engine.generate_sync(prompt, params)
    assert c.finish_reason == "stop" and len(c.completion_ids) < GREEDY.max_tokens
